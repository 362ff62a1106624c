// Launcher of the split-candidate sparse attention: pick the kernel, plan the chunks, lay out the workspace, validate,
// launch the block-max pass (reference-max mode, more than one chunk), the partial pass and the combine.
#include <algorithm>
#include <string>

#include "backend/cuda/common/cluster_launch.h"
#include "backend/cuda/common/cluster_occupancy.h"
#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/stream.h"
#include "backend/cuda/kernels/attention/attention.h"
#include "backend/cuda/kernels/attention/attention_split.cuh"
#include "backend/cuda/kernels/attention/attention_wgmma.cuh"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using Cfg = AttnSplitConfig;

constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct SplitPlan {
    bool wgmma = false;           // the 64-head wgmma kernel computes the passes (SplitKernel)
    int64_t tiles = 0;            // 16-head tiles per token (the workspace's and the combine's unit)
    int64_t n_blocks = 0;         // 64-candidate blocks per list
    int64_t chunk_blocks = 0;     // blocks per chunk
    int64_t bm_chunk_blocks = 0;  // wgmma: blocks per CTA of the block-maxima pass (its own cut, below)
    int64_t chunks = 0;           // chunks per list (0: empty lists, the combine alone writes zeros)
    bool block_max_pass = false;
    size_t o_off = 0, ml_off = 0, bm_off = 0, bytes = 0;
};

bool wgmma_can_run(const SparseAttnArgs& a) { return a.kv_packed && a.heads % AttnWgmmaConfig::kHeads == 0; }

// Chunk size, an explicit options.chunk else the k (blocks) of least cost over one CTA per SM, ties to the larger k
// (fewer partials). 16-head CTAs: waves x (k + 1) — k block-steps plus about one block-step of fixed cost per CTA
// (q load, the first gather's latency, the partial write). 64-head CTAs: waves x (k + 2) + partials / 32, at most
// kWgmmaMaxChunks chunks — a second block costs less than the first (the producer gathers it during the first's
// softmax), each 128 KB partial takes its CTA ~2.5 µs to store, and the combine (one CTA per head and token) reads a
// list's partials in dependent rounds of 8: at 1M context and batch 1, 130 one-block chunks took 89 µs, 33 chunks of
// 4 blocks 49 (docs/kernels/attention.md, "Split decode on 64-head wgmma CTAs"). Shapes are assumed validated (or
// give an empty plan).
constexpr int64_t kWgmmaMaxChunks = 40;

// The k in [k_min, k_max] of least cost(k, waves, ctas) for lists of `blocks` blocks cut into chunks of k, one CTA per
// SM and cta_lists CTAs per chunk; ties to the larger k.
template <class Cost>
int64_t least_cost_chunk(int64_t blocks, int64_t cta_lists, int64_t k_min, int64_t k_max, Cost cost) {
    const int64_t sms = current_sm_count();
    int64_t best = 1, best_cost = -1;
    for (int64_t k = k_min; k <= k_max; ++k) {
        const int64_t ctas = cta_lists * ((blocks + k - 1) / k), c = cost(k, (ctas + sms - 1) / sms, ctas);
        if (best_cost < 0 || c <= best_cost) best_cost = c, best = k;
    }
    return best;
}

SplitPlan make_plan(const SparseAttnArgs& a, const SparseAttnSplitOptions& o) {
    SplitPlan p;
    if (a.tokens <= 0 || a.heads <= 0 || a.topk <= 0) return p;
    p.tiles = (a.heads + Cfg::kHeads - 1) / Cfg::kHeads;
    p.n_blocks = (a.topk + Cfg::kBlock - 1) / Cfg::kBlock;
    p.wgmma = wgmma_can_run(a) && (o.kernel == SplitKernel::kWgmma ||
                                   (o.kernel == SplitKernel::kAuto && p.n_blocks >= kSplitWgmmaMinListBlocks &&
                                    a.tokens * p.n_blocks >= kSplitWgmmaMinBlocks));
    const int64_t lists = a.tokens * p.tiles;  // (token, 16-head tile) pairs: the workspace's unit
    const int64_t cta_lists = a.tokens * (p.wgmma ? a.heads / AttnWgmmaConfig::kHeads : p.tiles);  // CTAs per chunk
    if (o.chunk > 0) {
        p.chunk_blocks = std::min(o.chunk / Cfg::kBlock, p.n_blocks);
    } else if (p.wgmma) {  // in 32nds of a block-step; no block mask bounds the chunk
        p.chunk_blocks =
            least_cost_chunk(p.n_blocks, cta_lists, (p.n_blocks + kWgmmaMaxChunks - 1) / kWgmmaMaxChunks, p.n_blocks,
                             [](int64_t k, int64_t waves, int64_t ctas) { return 32 * waves * (k + 2) + ctas; });
    } else {
        p.chunk_blocks = least_cost_chunk(p.n_blocks, cta_lists, 1, std::min<int64_t>(p.n_blocks, Cfg::kMaxChunkBlocks),
                                          [](int64_t k, int64_t waves, int64_t) { return waves * (k + 1); });
    }
    p.chunk_blocks = std::max<int64_t>(p.chunk_blocks, 1);
    p.chunks = (p.n_blocks + p.chunk_blocks - 1) / p.chunk_blocks;
    p.block_max_pass = o.match_reference_max && p.chunks > 1;
    // The block maxima do not depend on the chunks, and the pass covers only the blocks before the last chunk:
    // 64-head CTAs cut that prefix by the waves x (k + 1) model (at B = 64, 1M the partials' 2 chunks would leave the
    // pass one CTA per list, 64 CTAs on 132 SMs). The 16-head kernel keeps its chunks (its mask bounds a chunk).
    if (p.block_max_pass && p.wgmma) {
        const int64_t prefix = (p.chunks - 1) * p.chunk_blocks;
        p.bm_chunk_blocks = least_cost_chunk(prefix, cta_lists, 1, prefix,
                                             [](int64_t k, int64_t waves, int64_t) { return waves * (k + 1); });
    }
    const size_t parts = size_t(lists * p.chunks);
    p.o_off = 0;
    p.ml_off = align_up(parts * Cfg::kPartialFloats * sizeof(float));
    p.bm_off = p.ml_off + align_up(parts * 2 * Cfg::kHeads * sizeof(float));
    p.bytes = p.bm_off + (p.block_max_pass ? align_up(size_t(lists * p.n_blocks) * Cfg::kHeads * sizeof(float)) : 0);
    return p;
}

// Packed rows: the head tiles of one token and chunk run as a thread-block cluster of 4 (or 2) CTAs along y, which
// share each block's gather and decode (attention_split.cuh), when the grid's clusters are all resident at once.
// Otherwise the next smaller size: 33 clusters of 4 (HCA at 1M context, batch 1) ran in two waves on the H200,
// 110 µs against 80 with clusters of one, while 32 (CSA at batch 8) fit. bf16 rows and tile counts without such a
// divisor: clusters of one.
int split_cluster_size(const void* kernel, size_t smem, bool packed, int64_t tiles, int64_t ctas) {
    if (!packed) return 1;
    for (const int size : {4, 2})
        if (tiles % size == 0 && ctas / size <= max_active_clusters(kernel, Cfg::kThreads, smem, size)) return size;
    return 1;
}

template <bool kPacked, int kPass>
Status launch_pass(const SplitAttnParams& sp, int64_t grid_x, int64_t tiles, int64_t tokens, cudaStream_t s) {
    constexpr size_t smem = Cfg::smem_bytes(kPacked);
    auto* kernel = sm90_sparse_attn_split_kernel<kPacked, kPass>;
    const char* what =
        kPass == kSplitBlockMax ? "sm90_sparse_attn_split (block maxima)" : "sm90_sparse_attn_split (partials)";
    DSV4_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
                  "sm90_sparse_attn_split: shared memory opt-in");
    const unsigned cluster_y = unsigned(
        split_cluster_size(reinterpret_cast<const void*>(kernel), smem, kPacked, tiles, grid_x * tiles * tokens));
    const ClusterLaunch launch(dim3(unsigned(grid_x), unsigned(tiles), unsigned(tokens)), dim3(Cfg::kThreads), smem, s,
                               dim3(1, cluster_y, 1));
    DSV4_CUDA_TRY(cudaLaunchKernelEx(&launch.cfg, kernel, sp), std::string(what) + ": cluster launch");
    return launch_status(what);
}

template <int kPass>
Status launch_wgmma_pass(const WgmmaAttnParams& wp, int64_t grid_x, int64_t tokens, cudaStream_t s) {
    using WCfg = AttnWgmmaConfig;
    auto* kernel = sm90_sparse_attn_wgmma_kernel<kPass>;
    const char* what = kPass == kSplitBlockMax ? "sm90_sparse_attn_split (wgmma block maxima)"
                                               : "sm90_sparse_attn_split (wgmma partials)";
    DSV4_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, WCfg::kSmemBytes),
                  std::string(what) + ": shared memory opt-in");
    const dim3 grid(unsigned(grid_x), unsigned(wp.heads / WCfg::kHeads), unsigned(tokens));
    kernel<<<grid, WCfg::kThreads, WCfg::kSmemBytes, s>>>(wp);
    return launch_status(what);
}

Status launch_wgmma_passes(const SplitAttnParams& sp, const SplitPlan& plan, int64_t tokens, cudaStream_t s) {
    WgmmaAttnParams wp;
    wp.q = sp.q;
    wp.pool = static_cast<const uint8_t*>(sp.kv);
    wp.idx = sp.idx;
    wp.heads = sp.heads, wp.topk = sp.topk, wp.n_kv = sp.n_kv, wp.scale = sp.scale;
    wp.n_blocks = sp.n_blocks, wp.chunk_blocks = sp.chunk_blocks, wp.chunks = sp.chunks, wp.pass_blocks = sp.n_blocks;
    wp.part_o = sp.part_o, wp.part_ml = sp.part_ml, wp.block_max = sp.block_max;
    if (plan.block_max_pass) {
        WgmmaAttnParams bm = wp;  // its own cut of the blocks before the last chunk (make_plan)
        bm.pass_blocks = int((plan.chunks - 1) * plan.chunk_blocks), bm.chunk_blocks = int(plan.bm_chunk_blocks);
        const int64_t bm_ctas = (bm.pass_blocks + bm.chunk_blocks - 1) / bm.chunk_blocks;
        DSV4_RETURN_IF_ERROR(launch_wgmma_pass<kSplitBlockMax>(bm, bm_ctas, tokens, s));
        return launch_wgmma_pass<kSplitPartialFromPrefix>(wp, plan.chunks, tokens, s);
    }
    return launch_wgmma_pass<kSplitPartial>(wp, plan.chunks, tokens, s);
}

template <bool kPacked>
Status launch_passes(const SplitAttnParams& sp, const SplitPlan& plan, int64_t tokens, cudaStream_t s) {
    if (plan.block_max_pass) {
        DSV4_RETURN_IF_ERROR((launch_pass<kPacked, kSplitBlockMax>(sp, plan.chunks - 1, plan.tiles, tokens, s)));
        return launch_pass<kPacked, kSplitPartialFromPrefix>(sp, plan.chunks, plan.tiles, tokens, s);
    }
    return launch_pass<kPacked, kSplitPartial>(sp, plan.chunks, plan.tiles, tokens, s);
}

}  // namespace

size_t sm90_sparse_attn_split_workspace_bytes(const SparseAttnArgs& a, const SparseAttnSplitOptions& o) {
    if (o.chunk < 0 || o.chunk % Cfg::kBlock != 0 || o.chunk > int64_t(Cfg::kMaxChunkBlocks) * Cfg::kBlock) return 0;
    return make_plan(a, o).bytes;
}

int64_t sm90_sparse_attn_split_chunk(const SparseAttnArgs& a, const SparseAttnSplitOptions& o) {
    if (o.chunk < 0 || o.chunk % Cfg::kBlock != 0 || o.chunk > int64_t(Cfg::kMaxChunkBlocks) * Cfg::kBlock) return 0;
    return make_plan(a, o).chunk_blocks * Cfg::kBlock;
}

Status sm90_sparse_attn_split(Precision precision, const SparseAttnArgs& a, void* workspace, size_t workspace_bytes,
                              StreamHandle stream, const SparseAttnSplitOptions& o) {
    const std::string op = "sm90_sparse_attn_split";
    if (precision != Precision::kReference) return sm90_sparse_attn(precision, a, stream);  // kF32: exact softmax
    if (!a.q || !a.kv || !a.idx || !a.sink || !a.out || a.tokens < 0 || a.topk < 0 || a.n_kv < 0)
        return invalid_argument(op + ": null pointer or bad shape");
    if (a.heads <= 0 || a.heads > 65535 * Cfg::kHeads)
        return invalid_argument(op + ": heads " + std::to_string(a.heads) + " must be in [1, 1048560]");
    if (a.derotate && !a.positions) return invalid_argument(op + ": derotate needs positions");
    if (o.chunk < 0 || o.chunk % Cfg::kBlock != 0 || o.chunk > int64_t(Cfg::kMaxChunkBlocks) * Cfg::kBlock)
        return invalid_argument(op + ": chunk " + std::to_string(o.chunk) + " must be 0 (automatic) or a multiple of " +
                                std::to_string(Cfg::kBlock) + " up to " +
                                std::to_string(Cfg::kMaxChunkBlocks * Cfg::kBlock));
    const auto addr = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr); };
    if ((addr(a.q) & 15) || (addr(a.out) & 15) || (addr(a.kv) & (a.kv_packed ? 7 : 15)))
        return invalid_argument(op + ": q, out (and unpacked kv) must be 16-byte aligned, a packed kv pool 8-byte");
    if (a.topk > 0x7fffffff - Cfg::kBlock || a.tokens > 65535)
        return invalid_argument(op + ": too many tokens or candidates");
    if (o.kernel == SplitKernel::kWgmma && !wgmma_can_run(a))
        return invalid_argument(op + ": the wgmma kernel needs a packed pool and heads a multiple of 64, got heads " +
                                std::to_string(a.heads) + (a.kv_packed ? "" : " and bf16 rows"));
    if (a.tokens == 0) return Status::ok();
    const SplitPlan plan = make_plan(a, o);
    if (plan.bytes > 0 && (!workspace || (addr(workspace) & 15)))
        return invalid_argument(op + ": needs a 16-byte aligned workspace of " + std::to_string(plan.bytes) + " bytes");
    if (workspace_bytes < plan.bytes)
        return invalid_argument(op + ": workspace of " + std::to_string(workspace_bytes) + " bytes, needs " +
                                std::to_string(plan.bytes) + " (sm90_sparse_attn_split_workspace_bytes)");
    if (plan.chunks > 0x7fffffff) return invalid_argument(op + ": too many chunks");

    auto* ws = static_cast<uint8_t*>(workspace);
    SplitAttnParams sp;
    sp.q = static_cast<const __nv_bfloat16*>(a.q);
    sp.kv = a.kv;
    sp.idx = a.idx;
    sp.heads = int(a.heads), sp.topk = int(a.topk), sp.n_kv = a.n_kv, sp.scale = a.scale;
    sp.n_blocks = int(plan.n_blocks), sp.chunk_blocks = int(plan.chunk_blocks), sp.chunks = int(plan.chunks);
    sp.part_o = plan.bytes ? reinterpret_cast<float*>(ws + plan.o_off) : nullptr;
    sp.part_ml = plan.bytes ? reinterpret_cast<float*>(ws + plan.ml_off) : nullptr;
    sp.block_max = plan.block_max_pass ? reinterpret_cast<float*>(ws + plan.bm_off) : nullptr;
    if (plan.chunks > 0) {
        DSV4_RETURN_IF_ERROR(plan.wgmma    ? launch_wgmma_passes(sp, plan, a.tokens, stream)
                             : a.kv_packed ? launch_passes<true>(sp, plan, a.tokens, stream)
                                           : launch_passes<false>(sp, plan, a.tokens, stream));
    }
    // the smallest one-batch instance that holds the list's chunks, else the grouped loop
    const int64_t c = plan.chunks;
    const auto combine = c <= 2                       ? sm90_sparse_attn_split_combine_kernel<2>
                         : c <= 4                     ? sm90_sparse_attn_split_combine_kernel<4>
                         : c <= 8                     ? sm90_sparse_attn_split_combine_kernel<8>
                         : c <= Cfg::kCombineMaxBatch ? sm90_sparse_attn_split_combine_kernel<Cfg::kCombineMaxBatch>
                                                      : sm90_sparse_attn_split_combine_kernel<0>;
    combine<<<dim3(unsigned(a.heads), unsigned(a.tokens)), Cfg::kCombineThreads, 0, stream>>>(
        sp.part_o, sp.part_ml, int(a.heads), int(plan.chunks), a.sink, a.derotate, a.positions, a.freqs,
        static_cast<__nv_bfloat16*>(a.out));
    return launch_status("sm90_sparse_attn_split (combine)");
}

}  // namespace dsv4::cuda
