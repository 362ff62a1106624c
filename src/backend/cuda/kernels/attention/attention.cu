// Launchers of the attention family: validate, pick the path from the precision and weight format, launch.
#include <algorithm>
#include <string>

#include "backend/cuda/common/cublaslt.h"
#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/workspace.h"
#include "backend/cuda/kernels/attention/attention.cuh"
#include "backend/cuda/kernels/attention/attention.h"
#include "backend/cuda/kernels/linear/linear.h"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using backend::WeightFormat;
using Cfg = AttnConfig;

// Decode (up to kWoDecMaxTokens tokens) runs the split-width kernel: its cost is one pass over the weights per
// 8-token tile, where the staged kernel pays for 32 token rows on 4 warps per SM whatever the count (68 µs at one
// token on an H200 for the V4-Flash shape). Very wide groups, whose activation rows would not fit in shared
// memory, and larger token counts keep the staged kernel.
template <typename ActT, bool kFp8, int kSplit>
Status launch_wo_a(const WoAArgs& a, int64_t width, cudaStream_t s) {
    const auto* o = static_cast<const ActT*>(a.o);
    auto* z = static_cast<ActT*>(a.z);
    const int64_t tile_tokens = std::min<int64_t>(a.tokens, Cfg::kWoDecTokens);
    const size_t dec_smem = Cfg::wo_dec_smem_bytes(tile_tokens, width, sizeof(ActT));
    const int64_t row_tiles = a.wo_a.rows / Cfg::kWoDecRows;
    if (a.tokens <= Cfg::kWoDecMaxTokens && dec_smem <= Cfg::kWoDecMaxSmem && row_tiles <= 65535) {
        auto* kernel = sm90_wo_a_decode_kernel<ActT, kFp8, kSplit>;
        DSV4_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(dec_smem)),
                      "sm90_wo_a: shared memory opt-in");
        const dim3 grid(unsigned((a.tokens + Cfg::kWoDecTokens - 1) / Cfg::kWoDecTokens), unsigned(row_tiles));
        kernel<<<grid, Cfg::kWoDecThreads, dec_smem, s>>>(o, a.tokens, a.heads * 512, width, a.rank, a.wo_a.data,
                                                         a.wo_a.scale, a.wo_a.rows, z);
        return launch_status("sm90_wo_a");
    }
    const dim3 grid(unsigned(a.wo_a.rows / Cfg::kWoRows), unsigned((a.tokens + Cfg::kWoTokens - 1) / Cfg::kWoTokens));
    sm90_wo_a_kernel<ActT, kFp8, kSplit><<<grid, Cfg::kThreads, 0, s>>>(o, a.tokens, a.heads * 512, width, a.rank,
                                                                        a.wo_a.data, a.wo_a.scale, a.wo_a.rows, z);
    return launch_status("sm90_wo_a");
}

bool wo_a_as_gemm(Precision precision, const WoAArgs& a) {
    return precision == Precision::kReference && a.tokens >= kWoAGemmMinTokens;
}

// The GEMM path's workspace: the bf16 copy of an FP8 weight (none for a bf16 weight), then cuBLASLt's.
size_t wo_a_bf16_copy_bytes(const WoAArgs& a) {
    return a.wo_a.format == WeightFormat::kFP8Block ? align256(size_t(a.wo_a.rows * a.wo_a.cols) * 2) : 0;
}

// Group g: z[:, g·R .. +R] = o[:, g·W .. +W] · wo_a[g·R .. +R, :]^T, all G in one strided batch.
Status launch_wo_a_gemm(const WoAArgs& a, int64_t width, cudaStream_t s) {
    const void* w = a.wo_a.data;
    if (a.wo_a.format == WeightFormat::kFP8Block) {
        DSV4_RETURN_IF_ERROR(sm90_fp8_block_to_bf16(a.wo_a, a.workspace, s));
        w = a.workspace;
    }
    LtBf16Gemm g;
    g.a = w, g.b = a.o, g.d = a.z, g.d_bf16 = true;
    g.m = a.rank, g.n = a.tokens, g.k = width;
    g.lda = width, g.ldb = a.heads * 512, g.ldd = a.wo_a.rows;
    g.batch = a.groups, g.stride_a = a.rank * width, g.stride_b = width, g.stride_d = a.rank;
    void* lt_ws = static_cast<uint8_t*>(a.workspace) + wo_a_bf16_copy_bytes(a);
    return lt_bf16_gemm(g, lt_ws, s, "sm90_wo_a");
}

}  // namespace

Status sm90_sparse_attn(Precision precision, const SparseAttnArgs& a, StreamHandle stream) {
    const std::string op = "sm90_sparse_attn";
    if (!a.q || !a.kv || !a.idx || !a.sink || !a.out || a.tokens < 0 || a.topk < 0 || a.n_kv < 0)
        return invalid_argument(op + ": null pointer or bad shape");
    if (a.heads <= 0 || a.heads > 65535 * Cfg::kHeads)
        return invalid_argument(op + ": heads " + std::to_string(a.heads) + " must be in [1, 1048560]");
    if (a.derotate && !a.positions) return invalid_argument(op + ": derotate needs positions");
    const bool packed = a.kv_packed && precision == Precision::kReference;
    if (!is_aligned(a.q, 16) || !is_aligned(a.out, 16) || !is_aligned(a.kv, packed ? 8 : 16))
        return invalid_argument(op + ": q, out (and unpacked kv) must be 16-byte aligned, a packed kv pool 8-byte");
    if (a.topk > 0x7fffffff || a.tokens > 65535) return invalid_argument(op + ": too many tokens or candidates");
    if (a.tokens == 0) return Status::ok();
    if (sparse_attn_takes_prefill_kernel(precision, a)) return sm90_sparse_attn_prefill(a, stream);
    if (precision == Precision::kReference) {
        const size_t smem = Cfg::smem_bytes();
        const auto kernel = packed ? sm90_sparse_attn_ref_kernel<true> : sm90_sparse_attn_ref_kernel<false>;
        DSV4_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
                      op + ": shared memory opt-in");
        const dim3 grid(unsigned((a.heads + Cfg::kHeads - 1) / Cfg::kHeads), unsigned(a.tokens));
        kernel<<<grid, Cfg::kThreads, smem, stream>>>(
            static_cast<const __nv_bfloat16*>(a.q), a.kv, a.idx, int(a.heads), a.n_kv, int(a.topk), a.sink, a.scale,
            a.derotate, a.positions, a.freqs, static_cast<__nv_bfloat16*>(a.out));
    } else {
        const int64_t warps = a.tokens * a.heads;
        sm90_sparse_attn_f32_kernel<<<unsigned((warps + Cfg::kF32Warps - 1) / Cfg::kF32Warps), Cfg::kF32Warps * 32, 0,
                                      stream>>>(static_cast<const float*>(a.q), static_cast<const float*>(a.kv), a.idx,
                                                a.tokens, int(a.heads), a.n_kv, int(a.topk), a.sink, a.scale,
                                                a.derotate, a.positions, a.freqs, static_cast<float*>(a.out));
    }
    return launch_status(op.c_str());
}

size_t sm90_wo_a_workspace_bytes(Precision precision, const WoAArgs& a) {
    return wo_a_as_gemm(precision, a) ? wo_a_bf16_copy_bytes(a) + kCublasLtWorkspaceBytes : 0;
}

Status sm90_wo_a(Precision precision, const WoAArgs& a, StreamHandle stream) {
    const std::string op = "sm90_wo_a";
    if (!a.o || !a.z || a.tokens < 0 || a.groups <= 0 || a.heads % a.groups != 0)
        return invalid_argument(op + ": null pointer or heads not divisible by groups");
    const int64_t width = a.heads / a.groups * 512;
    if (a.rank <= 0 || a.rank % Cfg::kWoRows != 0)
        return invalid_argument(op + ": rank " + std::to_string(a.rank) + " must be a multiple of 64");
    if (a.wo_a.rows != a.groups * a.rank || a.wo_a.cols != width)
        return invalid_argument(op + ": wo_a must be [" + std::to_string(a.groups * a.rank) + ", " +
                                std::to_string(width) + "]");
    const bool fp8 = a.wo_a.format == WeightFormat::kFP8Block;
    if (!fp8 && a.wo_a.format != WeightFormat::kBF16) return invalid_argument(op + ": wo_a must be FP8 blocks or bf16");
    if (fp8 && !a.wo_a.scale) return invalid_argument(op + ": FP8 wo_a needs its scales");
    if (!is_aligned(a.o, 16) || !is_aligned(a.wo_a.data, 16))
        return invalid_argument(op + ": o and wo_a must be 16-byte aligned");
    if (a.tokens == 0) return Status::ok();
    if (wo_a_as_gemm(precision, a)) {
        const size_t need = sm90_wo_a_workspace_bytes(precision, a);
        if (!a.workspace || a.workspace_bytes < need || !is_aligned(a.workspace, 256))
            return invalid_argument(op + ": " + std::to_string(a.tokens) + " tokens need a 256-byte aligned workspace of " +
                                    std::to_string(need) + " bytes");
        if (!is_aligned(a.z, 16)) return invalid_argument(op + ": z must be 16-byte aligned");
        return launch_wo_a_gemm(a, width, stream);
    }
    if ((a.tokens + Cfg::kWoTokens - 1) / Cfg::kWoTokens > 65535) return invalid_argument(op + ": too many tokens");
    if (precision == Precision::kReference)
        return fp8 ? launch_wo_a<__nv_bfloat16, true, 1>(a, width, stream)
                   : launch_wo_a<__nv_bfloat16, false, 1>(a, width, stream);
    return fp8 ? launch_wo_a<float, true, 3>(a, width, stream) : launch_wo_a<float, false, 3>(a, width, stream);
}

}  // namespace dsv4::cuda
