// Launchers of the mHC family: validate, pick the activation type from the precision, launch on the stream.
#include <algorithm>
#include <string>

#include "backend/cuda/common/cluster_launch.h"
#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/kernels/mhc/mhc.cuh"
#include "backend/cuda/kernels/mhc/mhc.h"
#include "backend/cuda/kernels/mhc/mhc_rows.cuh"
#include "backend/cuda/kernels/mhc/mhc_wide.h"

namespace dsv4::cuda {

// (here, not in mhc.cuh: a non-template kernel, which two translation units may not both define)
// sm90_hc_split_sinkhorn: warp w of block b takes token 8b + w; lanes 0..23 hold its mixes.
__global__ void __launch_bounds__(256)
    sm90_hc_split_sinkhorn_kernel(const float* __restrict__ mixes, int64_t tokens, const float* __restrict__ scale,
                                  const float* __restrict__ base, int iters, float hc_eps, float* __restrict__ post,
                                  float* __restrict__ comb) {
    pdl_enter();
    constexpr int kHc = MhcConfig::kHc;
    const int64_t t = int64_t(blockIdx.x) * 8 + (threadIdx.x >> 5);
    if (t >= tokens) return;  // warp-uniform
    const int lane = threadIdx.x & 31;
    const float m = lane < MhcConfig::kMixMax ? mixes[t * MhcConfig::kMixMax + lane] : 0.0f;
    float p, po, cb;
    hc_split_sinkhorn_warp(m, scale, base, iters, hc_eps, p, po, cb);
    if (lane < kHc) post[t * kHc + lane] = po;
    if (lane < kHc * kHc) comb[t * kHc * kHc + lane] = cb;
}

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

template <typename ActT, int kMix, bool kPostFirst>
Status launch_collapse(const char* op, void* x, int64_t tokens, int64_t dim, const DeviceWeightView& fn,
                       const DeviceWeightView& scale, const DeviceWeightView& base, int iters, float hc_eps,
                       float norm_eps, float* mixes, float* pre, float* post, float* comb, void* y,
                       const HcPostInput& post_in, cudaStream_t s) {
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
        return launch_status(op);
    }
    const int cluster = collapse_cluster_size(tokens, dim);
    if (tokens * cluster > 0x7fffffff) return invalid_argument(std::string(op) + ": too many tokens");
    if (cluster == 1) {  // short prefill: a plain launch (the kernel's implicit one-block cluster never synchronises)
        sm90_hc_collapse_kernel<ActT, kMix, false, kPostFirst><<<unsigned(tokens), MhcConfig::kThreads, 0, s>>>(
            static_cast<ActT*>(x), int(dim), static_cast<const float*>(fn.data),
            static_cast<const float*>(scale.data), static_cast<const float*>(base.data), iters, hc_eps, norm_eps, mixes,
            pre, post, comb, static_cast<ActT*>(y), post_in);
        return launch_status(op);
    }
    const ClusterLaunch launch(dim3(unsigned(tokens * cluster)), dim3(MhcConfig::kThreads), 0, s,
                               dim3(unsigned(cluster)));
    DSV4_CUDA_TRY(cudaLaunchKernelEx(&launch.cfg, sm90_hc_collapse_kernel<ActT, kMix, true, kPostFirst>,
                                     static_cast<ActT*>(x), int(dim), static_cast<const float*>(fn.data),
                                     static_cast<const float*>(scale.data), static_cast<const float*>(base.data), iters,
                                     hc_eps, norm_eps, mixes, pre, post, comb, static_cast<ActT*>(y), post_in),
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

// The four collapse instances of one (activation type, mix count): with or without the hc_post first.
template <typename ActT, int kMix>
Status launch_collapse_any(const char* op, bool post_first, void* x, int64_t tokens, int64_t dim,
                           const DeviceWeightView& fn, const DeviceWeightView& scale, const DeviceWeightView& base,
                           int iters, float hc_eps, float norm_eps, float* mixes, float* pre, float* post, float* comb,
                           void* y, const HcPostFirst& p, cudaStream_t s) {
    const HcPostInput in{p.a, p.residual, p.post, p.comb};
    if (post_first)
        return launch_collapse<ActT, kMix, true>(op, x, tokens, dim, fn, scale, base, iters, hc_eps, norm_eps, mixes,
                                                 pre, post, comb, y, in, s);
    return launch_collapse<ActT, kMix, false>(op, x, tokens, dim, fn, scale, base, iters, hc_eps, norm_eps, mixes, pre,
                                              post, comb, y, in, s);
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
    DSV4_RETURN_IF_ERROR(check_f32(a.fn, 24, 4 * a.dim, op + ": fn"));
    DSV4_RETURN_IF_ERROR(check_f32(a.scale, 1, 3, op + ": scale"));
    DSV4_RETURN_IF_ERROR(check_f32(a.base, 1, 24, op + ": base"));
    if (!is_aligned(a.x, 16) || !is_aligned(a.x_out, 16) || !is_aligned(a.fn.data, 16))
        return invalid_argument(op + ": x, x_out and fn must be 16-byte aligned");
    if (a.tokens == 0) return Status::ok();
    if (a.wide.counters) return launch_hc_collapse_wide(precision, a, post_first, stream);
    void* x = const_cast<void*>(a.x);  // written only with post_first (HcPreArgs)
    float* post = a.sinkhorn_apart ? nullptr : a.post;  // null comb: the kernels leave the split + Sinkhorn out
    float* comb = a.sinkhorn_apart ? nullptr : a.comb;
    if (precision == Precision::kReference)
        return launch_collapse_any<__nv_bfloat16, 24>(op.c_str(), post_first, x, a.tokens, a.dim, a.fn, a.scale, a.base,
                                                      a.iters, a.hc_eps, a.norm_eps, a.mixes, a.pre, post, comb,
                                                      a.x_out, a.post_first, stream);
    return launch_collapse_any<float, 24>(op.c_str(), post_first, x, a.tokens, a.dim, a.fn, a.scale, a.base, a.iters,
                                          a.hc_eps, a.norm_eps, a.mixes, a.pre, post, comb, a.x_out, a.post_first,
                                          stream);
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
    DSV4_RETURN_IF_ERROR(check_f32(a.fn, 4, 4 * a.dim, op + ": fn"));
    DSV4_RETURN_IF_ERROR(check_f32(a.scale, 1, 1, op + ": scale"));
    DSV4_RETURN_IF_ERROR(check_f32(a.base, 1, 4, op + ": base"));
    if (!is_aligned(a.x, 16) || !is_aligned(a.y, 16) || !is_aligned(a.fn.data, 16))
        return invalid_argument(op + ": x, y and fn must be 16-byte aligned");
    if (a.tokens == 0) return Status::ok();
    void* x = const_cast<void*>(a.x);  // written only with post_first (HcHeadArgs)
    if (precision == Precision::kReference)
        return launch_collapse_any<__nv_bfloat16, 4>(op.c_str(), post_first, x, a.tokens, a.dim, a.fn, a.scale, a.base,
                                                     1, a.hc_eps, a.norm_eps, nullptr, a.pre, nullptr, nullptr, a.y,
                                                     a.post_first, stream);
    return launch_collapse_any<float, 4>(op.c_str(), post_first, x, a.tokens, a.dim, a.fn, a.scale, a.base, 1,
                                         a.hc_eps, a.norm_eps, nullptr, a.pre, nullptr, nullptr, a.y, a.post_first,
                                         stream);
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
