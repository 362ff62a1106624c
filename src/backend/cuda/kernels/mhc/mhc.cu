// Launchers of the mHC family: validate, pick the activation type from the precision, launch on the stream.
#include <algorithm>
#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/kernels/mhc/mhc.cuh"
#include "backend/cuda/kernels/mhc/mhc.h"
#include "backend/cuda/kernels/mhc/mhc_rows.cuh"
#include "backend/cuda/kernels/norm_rope/norm_rope.h"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using backend::WeightFormat;

Status check_f32(const DeviceWeightView& w, int64_t rows, int64_t cols, const std::string& what) {
    if (w.empty() || w.format != WeightFormat::kF32 || w.rows * w.cols != rows * cols)
        return invalid_argument(what + " must be an f32 tensor of " + std::to_string(rows) + "x" +
                                std::to_string(cols) + " values");
    return Status::ok();
}

Status check_shape(const std::string& op, int64_t tokens, int64_t dim) {
    if (tokens < 0 || dim <= 0 || dim % 8 != 0)
        return invalid_argument(op + ": dim " + std::to_string(dim) + " must be a positive multiple of 8");
    if (tokens > 0x7fffffff) return invalid_argument(op + ": too many tokens");
    return Status::ok();
}

// Blocks per token (one cluster): enough for 2 blocks per SM over all tokens (a decode token's fn read is spread
// over up to 8 SMs), never more than the token has 256-chunk tiles; 1 at prefill.
int collapse_cluster_size(int64_t tokens, int64_t dim) {
    const int64_t tiles = (4 * dim / 8 + MhcConfig::kThreads - 1) / MhcConfig::kThreads;
    const int64_t want = (2 * int64_t(current_sm_count()) + tokens - 1) / tokens;
    return int(std::clamp<int64_t>(std::min(want, tiles), 1, MhcConfig::kMaxCluster));
}

// The fused norm's kernel argument (HcNormAfter, checked by check_norm_after).
HcNormOutput norm_output(const HcNormAfter& n) {
    return {n.weight.data, n.weight.format == WeightFormat::kBF16, n.eps, n.y, n.codes, n.scales};
}

template <typename ActT, int kMix, bool kPostFirst, bool kNorm>
Status launch_collapse(const char* op, void* x, int64_t tokens, int64_t dim, const DeviceWeightView& fn,
                       const DeviceWeightView& scale, const DeviceWeightView& base, int iters, float hc_eps,
                       float norm_eps, float* mixes, float* pre, float* post, float* comb, void* y,
                       const HcPostInput& post_in, const HcNormAfter& norm_after, cudaStream_t s) {
    constexpr bool kRef = std::is_same_v<ActT, __nv_bfloat16>;
    const HcNormOutput norm = norm_output(norm_after);
    if (tokens >= MhcRowsConfig::min_tokens(kMix)) {  // prefill: tiles of 32 tokens, fn read once per tile
        auto* kernel = sm90_hc_collapse_rows_kernel<ActT, kMix, kPostFirst>;
        constexpr size_t kSmem = MhcRowsConfig::smem_bytes(kMix);
        DSV4_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)),
                      std::string(op) + ": shared memory opt-in");
        const int64_t blocks = (tokens + MhcRowsConfig::kTokens - 1) / MhcRowsConfig::kTokens;
        kernel<<<unsigned(blocks), MhcRowsConfig::kThreads, kSmem, s>>>(
            static_cast<ActT*>(x), tokens, int(dim), static_cast<const float*>(fn.data),
            static_cast<const float*>(scale.data), static_cast<const float*>(base.data), iters, hc_eps, norm_eps, mixes,
            pre, post, comb, static_cast<ActT*>(y), post_in);
        DSV4_RETURN_IF_ERROR(launch_status(op));
        if constexpr (kNorm) {  // a launch of its own here: the tiles' blocks do not hold whole rows' outputs alone
            RmsNormArgs na;
            na.x = y;
            na.rows = tokens;
            na.dim = dim;
            na.weight = norm_after.weight;
            na.eps = norm_after.eps;
            na.y = norm_after.y;
            na.codes = norm_after.codes;
            na.scales = norm_after.scales;
            return sm90_rmsnorm(kRef ? Precision::kReference : Precision::kF32, na, s);
        }
        return Status::ok();
    }
    const int cluster = collapse_cluster_size(tokens, dim);
    if (tokens * cluster > 0x7fffffff) return invalid_argument(std::string(op) + ": too many tokens");
    if (kNorm && MhcConfig::norm_items(cluster, dim) > MhcConfig::norm_max_items(cluster > 1))
        return internal_error(std::string(op) + ": the fused norm's chunks exceed a thread's registers");
    if (cluster == 1) {  // short prefill: a plain launch (the kernel's implicit one-block cluster never synchronises)
        sm90_hc_collapse_kernel<ActT, kMix, false, kPostFirst, kNorm><<<unsigned(tokens), MhcConfig::kThreads, 0, s>>>(
            static_cast<ActT*>(x), int(dim), static_cast<const float*>(fn.data), static_cast<const float*>(scale.data),
            static_cast<const float*>(base.data), iters, hc_eps, norm_eps, mixes, pre, post, comb,
            static_cast<ActT*>(y), post_in, norm);
        return launch_status(op);
    }
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(unsigned(tokens * cluster));
    cfg.blockDim = dim3(MhcConfig::kThreads);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = s;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = unsigned(cluster);
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    DSV4_CUDA_TRY(cudaLaunchKernelEx(&cfg, sm90_hc_collapse_kernel<ActT, kMix, true, kPostFirst, kNorm>,
                                     static_cast<ActT*>(x), int(dim), static_cast<const float*>(fn.data),
                                     static_cast<const float*>(scale.data), static_cast<const float*>(base.data), iters,
                                     hc_eps, norm_eps, mixes, pre, post, comb, static_cast<ActT*>(y), post_in, norm),
                  std::string(op) + ": cluster launch");
    return launch_status(op);
}

// The optional hc_post run first (HcPostFirst): all four inputs or none; the streams it writes are x, which must not
// be its residual. Returns whether it is set.
Result<bool> check_post_first(const std::string& op, const HcPostFirst& p, const void* x) {
    const int set = int(p.a != nullptr) + int(p.residual != nullptr) + int(p.post != nullptr) + int(p.comb != nullptr);
    if (set == 0) return false;
    if (set != 4) return invalid_argument(op + ": post_first needs a, residual, post and comb (or none of them)");
    if (p.residual == x) return invalid_argument(op + ": post_first.residual must not alias the streams x");
    if (!is_aligned(p.a, 16) || !is_aligned(p.residual, 16))
        return invalid_argument(op + ": post_first activations must be 16-byte aligned");
    return true;
}

// The fused norm (HcNormAfter) of a collapse whose output `collapsed` is [tokens, dim] and streams x [tokens, 4, dim]:
// a weight and its y, or nothing. Returns whether it is set.
Result<bool> check_norm_after(const std::string& op, Precision precision, const HcNormAfter& n, const void* x,
                              const void* collapsed, int64_t tokens, int64_t dim) {
    if (n.weight.empty()) {
        if (n.y || n.codes || n.scales)
            return invalid_argument(op + ": norm_after.y, codes or scales set without a norm_after.weight");
        return false;
    }
    if (n.weight.rows * n.weight.cols != dim)
        return invalid_argument(op + ": norm_after.weight length differs from dim");
    if (n.weight.format != WeightFormat::kBF16 && n.weight.format != WeightFormat::kF32)
        return invalid_argument(op + ": norm_after.weight must be bf16 or f32");
    if (dim > MhcConfig::kNormMaxDim)
        return invalid_argument(op + ": the fused norm needs dim <= " + std::to_string(MhcConfig::kNormMaxDim));
    if (!n.y) return invalid_argument(op + ": norm_after.y is null (the normed output of norm_after.weight)");
    const int64_t act_bytes = precision == Precision::kReference ? 2 : 4, row_bytes = dim * act_bytes;
    const auto overlaps = [&](const void* p, int64_t p_bytes) {
        const auto a = reinterpret_cast<uintptr_t>(n.y), b = reinterpret_cast<uintptr_t>(p);
        return a < b + uintptr_t(p_bytes) && b < a + uintptr_t(tokens * row_bytes);
    };
    if (overlaps(collapsed, tokens * row_bytes) || overlaps(x, tokens * 4 * row_bytes))
        return invalid_argument(op + ": norm_after.y must not alias the collapsed output or the streams");
    if (!n.codes != !n.scales) return invalid_argument(op + ": norm_after.codes and scales go together");
    if (n.codes && (precision != Precision::kReference || dim % 128 != 0))
        return invalid_argument(op + ": the fused e4m3 quantisation needs reference precision and dim % 128 == 0");
    if (!is_aligned(n.y, 16) || !is_aligned(n.weight.data, 16))
        return invalid_argument(op + ": norm_after.y and norm_after.weight must be 16-byte aligned");
    if (n.codes && (!is_aligned(n.codes, 8) || !is_aligned(n.scales, 4)))
        return invalid_argument(op + ": norm_after.codes must be 8-byte and scales 4-byte aligned");
    return true;
}

// The collapse instances of one (activation type, mix count): with or without the hc_post first, with or without
// the norm after.
template <typename ActT, int kMix>
Status launch_collapse_any(const char* op, bool post_first, bool norm, void* x, int64_t tokens, int64_t dim,
                           const DeviceWeightView& fn, const DeviceWeightView& scale, const DeviceWeightView& base,
                           int iters, float hc_eps, float norm_eps, float* mixes, float* pre, float* post, float* comb,
                           void* y, const HcPostFirst& p, const HcNormAfter& n, cudaStream_t s) {
    const HcPostInput in{p.a, p.residual, p.post, p.comb};
    if (post_first) {
        if (norm)
            return launch_collapse<ActT, kMix, true, true>(op, x, tokens, dim, fn, scale, base, iters, hc_eps, norm_eps,
                                                           mixes, pre, post, comb, y, in, n, s);
        return launch_collapse<ActT, kMix, true, false>(op, x, tokens, dim, fn, scale, base, iters, hc_eps, norm_eps,
                                                        mixes, pre, post, comb, y, in, n, s);
    }
    if (norm)
        return launch_collapse<ActT, kMix, false, true>(op, x, tokens, dim, fn, scale, base, iters, hc_eps, norm_eps,
                                                        mixes, pre, post, comb, y, in, n, s);
    return launch_collapse<ActT, kMix, false, false>(op, x, tokens, dim, fn, scale, base, iters, hc_eps, norm_eps,
                                                     mixes, pre, post, comb, y, in, n, s);
}

}  // namespace

Status sm90_hc_pre(Precision precision, const HcPreArgs& a, StreamHandle stream) {
    const std::string op = "sm90_hc_pre";
    if (!a.x || !a.pre || !a.x_out || a.iters < 1) return invalid_argument(op + ": null pointer or iters < 1");
    if (a.sinkhorn_apart ? !a.mixes : (!a.post || !a.comb))
        return invalid_argument(op + (a.sinkhorn_apart
                                          ? ": sinkhorn_apart needs the mixes (sm90_hc_split_sinkhorn's input)"
                                          : ": null post or comb"));
    DSV4_RETURN_IF_ERROR(check_shape(op, a.tokens, a.dim));
    DSV4_ASSIGN_OR_RETURN(const bool post_first, check_post_first(op, a.post_first, a.x));
    DSV4_ASSIGN_OR_RETURN(const bool norm,
                          check_norm_after(op, precision, a.norm_after, a.x, a.x_out, a.tokens, a.dim));
    DSV4_RETURN_IF_ERROR(check_f32(a.fn, 24, 4 * a.dim, op + ": fn"));
    DSV4_RETURN_IF_ERROR(check_f32(a.scale, 1, 3, op + ": scale"));
    DSV4_RETURN_IF_ERROR(check_f32(a.base, 1, 24, op + ": base"));
    if (!is_aligned(a.x, 16) || !is_aligned(a.x_out, 16) || !is_aligned(a.fn.data, 16))
        return invalid_argument(op + ": x, x_out and fn must be 16-byte aligned");
    if (a.tokens == 0) return Status::ok();
    void* x = const_cast<void*>(a.x);  // written only with post_first (HcPreArgs)
    float* post = a.sinkhorn_apart ? nullptr : a.post;  // null comb: the kernels leave the split + Sinkhorn out
    float* comb = a.sinkhorn_apart ? nullptr : a.comb;
    if (precision == Precision::kReference)
        return launch_collapse_any<__nv_bfloat16, 24>(op.c_str(), post_first, norm, x, a.tokens, a.dim, a.fn, a.scale,
                                                      a.base, a.iters, a.hc_eps, a.norm_eps, a.mixes, a.pre, post, comb,
                                                      a.x_out, a.post_first, a.norm_after, stream);
    return launch_collapse_any<float, 24>(op.c_str(), post_first, norm, x, a.tokens, a.dim, a.fn, a.scale, a.base,
                                          a.iters, a.hc_eps, a.norm_eps, a.mixes, a.pre, post, comb, a.x_out,
                                          a.post_first, a.norm_after, stream);
}

Status sm90_hc_split_sinkhorn(const HcSinkhornArgs& a, StreamHandle stream) {
    const std::string op = "sm90_hc_split_sinkhorn";
    if (!a.mixes || !a.post || !a.comb || a.iters < 1 || a.tokens < 0)
        return invalid_argument(op + ": null pointer, iters < 1 or negative tokens");
    DSV4_RETURN_IF_ERROR(check_f32(a.scale, 1, 3, op + ": scale"));
    DSV4_RETURN_IF_ERROR(check_f32(a.base, 1, 24, op + ": base"));
    if (a.tokens == 0) return Status::ok();
    const int64_t blocks = (a.tokens + 7) / 8;
    if (blocks > 0x7fffffff) return invalid_argument(op + ": too many tokens");
    sm90_hc_split_sinkhorn_kernel<<<unsigned(blocks), 256, 0, stream>>>(
        a.mixes, a.tokens, static_cast<const float*>(a.scale.data), static_cast<const float*>(a.base.data), a.iters,
        a.hc_eps, a.post, a.comb);
    return launch_status(op.c_str());
}

Status sm90_hc_head(Precision precision, const HcHeadArgs& a, StreamHandle stream) {
    const std::string op = "sm90_hc_head";
    if (!a.x || !a.y) return invalid_argument(op + ": null pointer");
    DSV4_RETURN_IF_ERROR(check_shape(op, a.tokens, a.dim));
    DSV4_ASSIGN_OR_RETURN(const bool post_first, check_post_first(op, a.post_first, a.x));
    DSV4_ASSIGN_OR_RETURN(const bool norm, check_norm_after(op, precision, a.norm_after, a.x, a.y, a.tokens, a.dim));
    DSV4_RETURN_IF_ERROR(check_f32(a.fn, 4, 4 * a.dim, op + ": fn"));
    DSV4_RETURN_IF_ERROR(check_f32(a.scale, 1, 1, op + ": scale"));
    DSV4_RETURN_IF_ERROR(check_f32(a.base, 1, 4, op + ": base"));
    if (!is_aligned(a.x, 16) || !is_aligned(a.y, 16) || !is_aligned(a.fn.data, 16))
        return invalid_argument(op + ": x, y and fn must be 16-byte aligned");
    if (a.tokens == 0) return Status::ok();
    void* x = const_cast<void*>(a.x);  // written only with post_first (HcHeadArgs)
    if (precision == Precision::kReference)
        return launch_collapse_any<__nv_bfloat16, 4>(op.c_str(), post_first, norm, x, a.tokens, a.dim, a.fn, a.scale,
                                                     a.base, 1, a.hc_eps, a.norm_eps, nullptr, a.pre, nullptr, nullptr,
                                                     a.y, a.post_first, a.norm_after, stream);
    return launch_collapse_any<float, 4>(op.c_str(), post_first, norm, x, a.tokens, a.dim, a.fn, a.scale, a.base, 1,
                                         a.hc_eps, a.norm_eps, nullptr, a.pre, nullptr, nullptr, a.y, a.post_first,
                                         a.norm_after, stream);
}

Status sm90_hc_post(Precision precision, const HcPostArgs& a, StreamHandle stream) {
    const std::string op = "sm90_hc_post";
    if (!a.a || !a.residual || !a.post || !a.comb || !a.out) return invalid_argument(op + ": null pointer");
    DSV4_RETURN_IF_ERROR(check_shape(op, a.tokens, a.dim));
    if (a.out == a.residual) return invalid_argument(op + ": out must not alias residual");
    if (!is_aligned(a.a, 16) || !is_aligned(a.residual, 16) || !is_aligned(a.out, 16))
        return invalid_argument(op + ": activations must be 16-byte aligned");
    const int64_t chunks = a.tokens * (a.dim / 8);
    if (chunks == 0) return Status::ok();
    const unsigned grid = grid_stride_blocks(chunks, MhcConfig::kThreads);
    if (precision == Precision::kReference)
        sm90_hc_post_kernel<__nv_bfloat16><<<grid, MhcConfig::kThreads, 0, stream>>>(
            static_cast<const __nv_bfloat16*>(a.a), static_cast<const __nv_bfloat16*>(a.residual), a.post, a.comb,
            a.tokens, int(a.dim), static_cast<__nv_bfloat16*>(a.out));
    else
        sm90_hc_post_kernel<float><<<grid, MhcConfig::kThreads, 0, stream>>>(
            static_cast<const float*>(a.a), static_cast<const float*>(a.residual), a.post, a.comb, a.tokens,
            int(a.dim), static_cast<float*>(a.out));
    return launch_status(op.c_str());
}

}  // namespace dsv4::cuda
