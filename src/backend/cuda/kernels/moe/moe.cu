// Kernels and launcher of sm90_mxfp4_moe_decode (moe.cuh describes the three launches, the inner loop and the
// weight formats).
#include <algorithm>
#include <string>
#include <type_traits>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kernels/moe/moe.h"
#include "backend/cuda/kernels/moe/moe_items.cuh"
#include "backend/cuda/kernels/moe/moe_prepare.cuh"
#include "backend/cuda/kernels/moe/moe_ring.h"
#include "backend/cuda/kernels/moe/moe_route.h"

namespace dsv4::cuda {
namespace {

using Cfg = MoeDecodeConfig;

// Launch 1. Blocks 0..T-1: act_quant of token b's row of x into pair order. Block T: grouping + counters.
__global__ void __launch_bounds__(Cfg::kPrepThreads) sm90_moe_prepare_kernel(MoeKernelParams p) {
    pdl_enter();
    if (int(blockIdx.x) < p.T) {
        moe_quantize_row(p, int(blockIdx.x));
        return;
    }
    moe_group_picks(p);
}

// The gate/up (MATS = 2: w1, w3) or down (MATS = 1: w2) operands of expert e from the format's table.
template <class Fmt, int MATS>
__device__ __forceinline__ void expert_operands(const void* table, int e, const uint8_t* (&w)[1][MATS],
                                                const uint8_t* (&ws)[1][MATS], float (&wg)[1][MATS]) {
    if constexpr (std::is_same_v<Fmt, Nvfp4Weights>) {
        const Nvfp4ExpertPtrs ex = static_cast<const Nvfp4ExpertPtrs*>(table)[e];
        if constexpr (MATS == 2) {
            w[0][0] = ex.w1, w[0][1] = ex.w3, ws[0][0] = ex.w1s, ws[0][1] = ex.w3s;
            wg[0][0] = __ldg(ex.w1g), wg[0][1] = __ldg(ex.w3g);
        } else {
            w[0][0] = ex.w2, ws[0][0] = ex.w2s, wg[0][0] = __ldg(ex.w2g);
        }
    } else {
        using Table = std::conditional_t<std::is_same_v<Fmt, Fp8BlockWeights>, Fp8BlockExpertPtrs, Mxfp4ExpertPtrs>;
        const Table ex = static_cast<const Table*>(table)[e];
        if constexpr (MATS == 2) {
            w[0][0] = ex.w1, w[0][1] = ex.w3, ws[0][0] = ex.w1s, ws[0][1] = ex.w3s;
            wg[0][0] = wg[0][1] = 1.0f;
        } else {
            w[0][0] = ex.w2, ws[0][0] = ex.w2s, wg[0][0] = 1.0f;
        }
    }
}

// The register kernels' weight source; for repacked MXFP4 it carries the block's e4m3 tables, built here (every
// thread of the block must call it: it synchronises), and for the wgmma stage the token tile in the dynamic shared
// memory (moe_wgmma_tile_bytes, aligned here to 1024 for the swizzle).
template <class Fmt>
__device__ __forceinline__ GlobalWeights global_weights() {
    GlobalWeights src;
    if constexpr (std::is_same_v<Fmt, Mxfp4RepackedWeights> || std::is_same_v<Fmt, Mxfp4WgmmaWeights>) {
        __shared__ __align__(128) uint2 tables[16];  // 128-byte aligned: e4m3_table_of ors the offset in
        if (threadIdx.x < 16) e4m3_table_for_delta(int(threadIdx.x), tables[threadIdx.x].x, tables[threadIdx.x].y);
        __syncthreads();
        src.e4m3_tables = tables;
    }
    if constexpr (std::is_same_v<Fmt, Mxfp4WgmmaWeights>) {
        extern __shared__ uint8_t dynamic_smem[];
        const uint32_t base = smem_u32(dynamic_smem);
        src.act_tile = dynamic_smem + (((base + 1023u) & ~1023u) - base);
    }
    return src;
}

// One gate/up block of slot `slot`, expert e of `table` in format Fmt: rows row0 .. row0 + 16·RT − 1 of I, as RT row
// tiles x KS K splits of the block's warps.
template <class Fmt, int RT = Cfg::kUpRT, int KS = Cfg::kUpKS>
__device__ __forceinline__ void gate_up_block(const MoeKernelParams& p, const void* table, int e, int slot, int row0,
                                              float* red, int* flag) {
    static_assert(RT * KS == Cfg::kUpRT * Cfg::kUpKS, "the kernel's warps");
    const uint8_t* w[1][2];
    const uint8_t* ws[1][2];
    float wg[1][2];
    expert_operands<Fmt, 2>(table, e, w, ws, wg);
    moe_gate_up_item<RT, KS, 1>(Fmt{}, global_weights<Fmt>(), p, slot, row0, w, ws, wg, row0, red, flag, [](int) {},
                                [](int) {});
}

// Slots 0 .. n_active − 1 are the active routed experts (format Fmt); slot n_active, when p.shared_expert is set,
// the shared expert (FP8 blocks), run by grid rows n_active and n_active + 1 (each half of its rows). The grids have
// room for both (the launcher's rows); the rest return.

// Launch 2: block (64 rows of I, slot): Cfg::kUpRT row tiles x kUpKS K splits. The shared expert's FP8 rows carry
// twice the bytes of an MXFP4 row, and at the batches that run it here (<= kFusedSharedExpertMaxRows tokens) its
// blocks were the launch's last to finish; so its blocks take 32 rows (2 row tiles x 4 K splits, the same warps) over
// two grid rows: row n_active covers rows 0 .. I/2 − 1 of I, row n_active + 1 the rest, both as slot n_active.
template <class Fmt>
__global__ void __launch_bounds__(32 * Cfg::kUpRT * Cfg::kUpKS, 2) sm90_moe_gate_up_kernel(MoeKernelParams p) {
    pdl_enter();
    __shared__ __align__(16) float red[Cfg::kUpKS * Cfg::kUpRT * 2 * 128];
    __shared__ int flag;
    const int slot = blockIdx.y, n_active = *p.n_active;
    if (p.shared_expert && (slot == n_active || slot == n_active + 1)) {
        constexpr int kRows = 32;
        const int row0 = (slot - n_active) * (p.I / 2) + int(blockIdx.x) * kRows;
        gate_up_block<Fp8BlockWeights, kRows / 16, Cfg::kUpRT * Cfg::kUpKS * 16 / kRows>(p, p.shared_expert, 0,
                                                                                        n_active, row0, red, &flag);
    } else if (slot < n_active) {
        gate_up_block<Fmt>(p, p.experts, p.active_expert[slot], slot, int(blockIdx.x) * Cfg::kUpRows, red, &flag);
    }
}

// One down block of slot `slot` (expert e of `table`, format Fmt); `items` = blocks per row range that combine.
template <class Fmt>
__device__ __forceinline__ void down_block(const MoeKernelParams& p, const void* table, int e, int slot, int items,
                                           float* red, int* flag) {
    constexpr int RT = Cfg::kDownRT, KS = Cfg::kDownKS;
    const uint8_t* w[1][1];
    const uint8_t* ws[1][1];
    float wg[1][1];
    expert_operands<Fmt, 1>(table, e, w, ws, wg);
    moe_down_item<RT, KS, 1>(Fmt{}, global_weights<Fmt>(), p, slot, blockIdx.x, items, w, ws, wg,
                             blockIdx.x * Cfg::kDownRows, red, flag, [](int) {}, [](int) {});
}

// The shared expert's down item (FP8 blocks, slot n_active): rows `half` · 64 .. + 63 of the block's 128-row range,
// 4 row tiles x 2 K splits (the same 8 warps as a routed block, half its rows: an FP8 row carries twice the bytes of
// an MXFP4 one, and at the batches that run the shared expert here its full-height blocks finished last).
__device__ __forceinline__ void shared_down_block(const MoeKernelParams& p, int slot, int half, int items, float* red,
                                                  int* flag) {
    constexpr int RT = Cfg::kDownRT / 2, KS = Cfg::kDownKS * 2, kRows = 16 * RT;
    const uint8_t* w[1][1];
    const uint8_t* ws[1][1];
    float wg[1][1];
    expert_operands<Fp8BlockWeights, 1>(p.shared_expert, 0, w, ws, wg);
    const int item = 2 * int(blockIdx.x) + half;
    moe_down_item<RT, KS, 1, 2>(
        Fp8BlockWeights{}, global_weights<Fp8BlockWeights>(), p, slot, item, items, w, ws, wg, item * kRows, red, flag,
        [](int) {}, [](int) {});
}

// Launch 3: block (128 rows of D, slot): Cfg::kDownRT row tiles x kDownKS K splits; the last block of a row range
// combines all tokens. The shared expert runs as two grid rows of half-height blocks (shared_down_block), both slot
// n_active.
template <class Fmt>
__global__ void __launch_bounds__(32 * Cfg::kDownRT * Cfg::kDownKS, 2) sm90_moe_down_kernel(MoeKernelParams p) {
    pdl_enter();
    __shared__ __align__(16) float red[Cfg::kDownKS * Cfg::kDownRT * 128];
    __shared__ int flag;
    const int slot = blockIdx.y, n_active = *p.n_active;
    // the blocks of a row range: one per routed slot, two for the shared expert
    const int items = n_active + (p.shared_expert ? 2 : 0);
    if (p.shared_expert && (slot == n_active || slot == n_active + 1))
        shared_down_block(p, n_active, slot - n_active, items, red, &flag);
    else if (slot < n_active)
        down_block<Fmt>(p, p.experts, p.active_expert[slot], slot, items, red, &flag);
}

// Dynamic shared memory of a kernel instance for K columns: the wgmma stage's token tile, none for the others.
template <class Fmt, class Kernel>
Status dynamic_smem_for(Kernel kernel, int64_t K, size_t& bytes) {
    bytes = std::is_same_v<Fmt, Mxfp4WgmmaWeights> ? moe_wgmma_tile_bytes(K) : 0;
    if (bytes <= 48 * 1024) return Status::ok();
    return cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
                       "sm90_mxfp4_moe_decode: shared memory for the token tile");
}

template <class Fmt>
Status launch_expert_kernels(const MoeKernelParams& p, cudaStream_t stream) {
    // grid rows: the routed slots, then the shared expert's two (the kernels above)
    const unsigned grid_rows = unsigned(p.slots + (p.shared_expert ? 2 : 0));
    size_t up_smem = 0, down_smem = 0;
    DSV4_RETURN_IF_ERROR(dynamic_smem_for<Fmt>(sm90_moe_gate_up_kernel<Fmt>, p.D, up_smem));
    DSV4_RETURN_IF_ERROR(dynamic_smem_for<Fmt>(sm90_moe_down_kernel<Fmt>, p.I, down_smem));
    const dim3 up_grid(unsigned(p.I / Cfg::kUpRows), grid_rows);
    sm90_moe_gate_up_kernel<Fmt><<<up_grid, 32 * Cfg::kUpRT * Cfg::kUpKS, up_smem, stream>>>(p);
    DSV4_RETURN_IF_ERROR(launch_status("sm90_moe_gate_up"));
    const dim3 down_grid(unsigned(p.D / Cfg::kDownRows), grid_rows);
    sm90_moe_down_kernel<Fmt><<<down_grid, 32 * Cfg::kDownRT * Cfg::kDownKS, down_smem, stream>>>(p);
    return launch_status("sm90_moe_down");
}

}  // namespace

size_t sm90_mxfp4_moe_decode_workspace_bytes(int64_t tokens, int64_t k, int64_t n_experts, int64_t dim,
                                             int64_t inter) {
    if (tokens <= 0 || k <= 0 || n_experts <= 0 || dim <= 0 || inter <= 0) return 0;
    return MoeWorkspace::make(tokens, k, n_experts, dim, inter).total;
}

Status sm90_mxfp4_moe_decode(const MoeDecodeArgs& a, StreamHandle stream) {
    const std::string op = "sm90_mxfp4_moe_decode";
    if (!a.x || !a.idx || !a.route_w || !a.y || !a.workspace)
        return invalid_argument(op + ": null pointer (x, idx, route_w, y and workspace are required)");
    // exactly the table of `format`
    const void* table = nullptr;
    switch (a.format) {
        case MoeWeightFormat::kMXFP4:
        case MoeWeightFormat::kMXFP4Repacked: table = a.experts; break;
        case MoeWeightFormat::kNVFP4: table = a.nvfp4_experts; break;
        case MoeWeightFormat::kFP8Block: table = a.fp8_experts; break;
        default:
            return invalid_argument(op + ": unknown weight format " + std::to_string(int(a.format)) +
                                    " (MoeWeightFormat: kMXFP4, kNVFP4, kFP8Block or kMXFP4Repacked)");
    }
    const std::string fmt = moe_weight_format_name(a.format);
    const char* field = a.format == MoeWeightFormat::kNVFP4      ? "nvfp4_experts"
                        : a.format == MoeWeightFormat::kFP8Block ? "fp8_experts"
                                                                 : "experts";
    if (!table) return invalid_argument(op + ": format " + fmt + " needs its expert table in MoeDecodeArgs::" + field);
    if (int(a.experts != nullptr) + int(a.nvfp4_experts != nullptr) + int(a.fp8_experts != nullptr) != 1)
        return invalid_argument(op + ": format " + fmt + " reads MoeDecodeArgs::" + field +
                                ", but another format's expert table is set too: set `format` to the weights' format "
                                "and leave the other tables null");
    if (a.tma_ring && a.format != MoeWeightFormat::kMXFP4)
        return invalid_argument(op + ": the TMA-ring path reads MXFP4 experts only (format " + fmt +
                                "): leave tma_ring false");
    if (a.fp8_wgmma && a.format != MoeWeightFormat::kMXFP4Repacked)
        return invalid_argument(op + ": the FP8 wgmma stage reads repacked MXFP4 experts only (format " + fmt +
                                "): leave fp8_wgmma false");
    if (a.shared_expert && a.shared)
        return invalid_argument(op + ": give the shared expert's output (shared) or its weights (shared_expert), "
                                "not both");
    if (a.shared_expert && a.tma_ring)
        return invalid_argument(op + ": the TMA-ring path does not run the shared expert: leave tma_ring false or "
                                "pass its output in `shared`");
    if (a.tokens < 1 || a.tokens > Cfg::kMaxTokens)
        return invalid_argument(op + ": tokens " + std::to_string(a.tokens) + " outside 1.." +
                                std::to_string(Cfg::kMaxTokens) + " (the decode kernel; prefill is a separate path)");
    DSV4_RETURN_IF_ERROR(check_moe_shape(a, op, 512));
    if (a.route) DSV4_RETURN_IF_ERROR(check_moe_route(a, op));
    const MoeWorkspace wl = MoeWorkspace::make(a.tokens, a.k, a.n_experts, a.dim, a.inter);
    if (a.workspace_bytes < wl.total || (reinterpret_cast<uintptr_t>(a.workspace) & 255))
        return invalid_argument(op + ": workspace must be 256-byte aligned and hold " + std::to_string(wl.total) +
                                " bytes, got " + std::to_string(a.workspace_bytes));
    if (reinterpret_cast<uintptr_t>(a.x) & 15)
        return invalid_argument(op + ": x must be 16-byte aligned");
    char* ws = static_cast<char*>(a.workspace);
    MoeKernelParams p{};
    p.x = static_cast<const __nv_bfloat16*>(a.x);
    p.idx = a.idx;
    p.route_w = a.route_w;
    p.experts = table;
    p.shared = static_cast<const __nv_bfloat16*>(a.shared);
    p.shared_expert = a.shared_expert;
    p.y = static_cast<__nv_bfloat16*>(a.y);
    p.T = int(a.tokens), p.K = int(a.k), p.E = int(a.n_experts), p.D = int(a.dim), p.I = int(a.inter);
    p.slots = int(std::min<int64_t>(a.tokens * a.k, a.n_experts));
    p.limit = a.limit;
    p.n_active = reinterpret_cast<int*>(ws + wl.n_active);
    p.active_expert = reinterpret_cast<int*>(ws + wl.active_expert);
    p.active_start = reinterpret_cast<int*>(ws + wl.active_start);
    p.active_count = reinterpret_cast<int*>(ws + wl.active_count);
    p.list = reinterpret_cast<int*>(ws + wl.list);
    p.order = reinterpret_cast<int*>(ws + wl.order);
    p.cnt_up = reinterpret_cast<int*>(ws + wl.cnt_up);
    p.up_done = reinterpret_cast<int*>(ws + wl.up_done);
    p.cnt_down = reinterpret_cast<int*>(ws + wl.cnt_down);
    p.xq = reinterpret_cast<__half*>(ws + wl.xq);
    p.xs = reinterpret_cast<float*>(ws + wl.xs);
    p.h = reinterpret_cast<__nv_bfloat16*>(ws + wl.h);
    p.hq = reinterpret_cast<__half*>(ws + wl.hq);
    p.hs = reinterpret_cast<float*>(ws + wl.hs);
    p.yp = reinterpret_cast<float*>(ws + wl.yp);

    if (a.route) {
        DSV4_RETURN_IF_ERROR(launch_moe_route(p, *a.route, reinterpret_cast<float*>(ws + wl.route_scores), stream));
    } else {
        sm90_moe_prepare_kernel<<<unsigned(p.T + 1), Cfg::kPrepThreads, 0, stream>>>(p);
        DSV4_RETURN_IF_ERROR(launch_status("sm90_moe_prepare"));
    }
    switch (a.format) {
        case MoeWeightFormat::kNVFP4: return launch_expert_kernels<Nvfp4Weights>(p, stream);
        case MoeWeightFormat::kFP8Block: return launch_expert_kernels<Fp8BlockWeights>(p, stream);
        case MoeWeightFormat::kMXFP4Repacked:
            if (a.fp8_wgmma) return launch_expert_kernels<Mxfp4WgmmaWeights>(p, stream);
            return launch_expert_kernels<Mxfp4RepackedWeights>(p, stream);
        case MoeWeightFormat::kMXFP4: break;
    }
    if (a.tma_ring && moe_ring_supported(a.dim, a.inter)) return launch_moe_ring(p, stream);
    return launch_expert_kernels<Mxfp4Weights>(p, stream);
}

Status check_moe_shape(const MoeDecodeArgs& a, const std::string& op, int64_t dim_multiple) {
    if (a.k < 1 || a.k > Cfg::kMaxK || a.n_experts < a.k || a.n_experts > Cfg::kMaxExperts)
        return invalid_argument(op + ": need 1 <= K <= 16 and K <= E <= 1024, got K " + std::to_string(a.k) +
                                ", E " + std::to_string(a.n_experts));
    if (a.dim <= 0 || a.inter <= 0 || a.dim % dim_multiple != 0 || a.inter % dim_multiple != 0 ||
        a.dim > (1 << 20) || a.inter > (1 << 20))
        return invalid_argument(op + ": D " + std::to_string(a.dim) + " and I " + std::to_string(a.inter) +
                                " must be positive multiples of " + std::to_string(dim_multiple));
    return Status::ok();
}

const char* moe_weight_format_name(MoeWeightFormat f) {
    switch (f) {
        case MoeWeightFormat::kMXFP4: return "MXFP4";
        case MoeWeightFormat::kNVFP4: return "NVFP4";
        case MoeWeightFormat::kFP8Block: return "FP8 block";
        case MoeWeightFormat::kMXFP4Repacked: return "MXFP4 repacked";
    }
    return "unknown";
}

namespace {

// One expert's matrix: weight pointer set and 16-byte aligned, scale pointer set and aligned to `scale_align`.
Status check_matrix(const std::string& what, int64_t e, const char* name, const void* w, const void* s,
                    uintptr_t scale_align) {
    const std::string at = what + ": expert " + std::to_string(e) + " " + name;
    if (!w) return invalid_argument(at + ": null weight pointer");
    if (!s) return invalid_argument(at + ": null scale pointer");
    if (!is_aligned(w, 16)) return invalid_argument(at + ": weight pointer not 16-byte aligned");
    if (!is_aligned(s, scale_align))
        return invalid_argument(at + ": scale pointer not " + std::to_string(scale_align) + "-byte aligned");
    return Status::ok();
}

// The three matrices of every expert of a table (all formats name them w1/w1s, w3/w3s, w2/w2s).
template <class Ptrs>
Status check_expert_matrices(const Ptrs* host, int64_t n_experts, const std::string& what, const char* format,
                             uintptr_t scale_align) {
    if (!host || n_experts < 1) return invalid_argument(what + ": empty " + format + " expert table");
    for (int64_t e = 0; e < n_experts; ++e) {
        const Ptrs& x = host[e];
        DSV4_RETURN_IF_ERROR(check_matrix(what, e, "w1", x.w1, x.w1s, scale_align));
        DSV4_RETURN_IF_ERROR(check_matrix(what, e, "w3", x.w3, x.w3s, scale_align));
        DSV4_RETURN_IF_ERROR(check_matrix(what, e, "w2", x.w2, x.w2s, scale_align));
    }
    return Status::ok();
}
}  // namespace

Status check_moe_expert_table(const Mxfp4ExpertPtrs* host, int64_t n_experts, const std::string& what) {
    return check_expert_matrices(host, n_experts, what, "MXFP4", 8);
}

Status check_moe_expert_table(const Nvfp4ExpertPtrs* host, int64_t n_experts, const std::string& what) {
    DSV4_RETURN_IF_ERROR(check_expert_matrices(host, n_experts, what, "NVFP4", 2));
    for (int64_t e = 0; e < n_experts; ++e) {
        const Nvfp4ExpertPtrs& x = host[e];
        const float* g[3] = {x.w1g, x.w3g, x.w2g};
        const char* names[3] = {"w1", "w3", "w2"};
        for (int m = 0; m < 3; ++m)
            if (!g[m] || !is_aligned(g[m], 4))
                return invalid_argument(what + ": expert " + std::to_string(e) + " " + names[m] +
                                        ": null or misaligned NVFP4 global scale pointer (weight_scale_2)");
    }
    return Status::ok();
}

Status check_moe_expert_table(const Fp8BlockExpertPtrs* host, int64_t n_experts, const std::string& what) {
    return check_expert_matrices(host, n_experts, what, "FP8 block", 1);
}

}  // namespace dsv4::cuda
