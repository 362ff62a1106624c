// Launcher of the wide decode collapse with the sub-block's RMSNorm: validate what only this path needs, pick the
// activation and norm-weight types, launch (P, T) blocks.
#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/kernels/mhc/mhc_wide.cuh"
#include "backend/cuda/kernels/mhc/mhc_wide.h"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using backend::WeightFormat;
using Cfg = MhcWideConfig;

template <typename ActT, typename WeightT, bool kPostFirst>
void launch(const HcPreArgs& a, int64_t blocks, cudaStream_t s) {
    const HcWideNorm& w = a.wide;
    const HcPostFirst& p = a.post_first;
    const HcWideParams wp{w.counters, w.partials, w.weight.data, w.eps, w.y, w.codes, w.scales};
    sm90_hc_collapse_wide_kernel<ActT, WeightT, kPostFirst>
        <<<dim3(unsigned(blocks), unsigned(a.tokens)), Cfg::kThreads, 0, s>>>(
            static_cast<ActT*>(const_cast<void*>(a.x)), int(a.dim), static_cast<const float*>(a.fn.data),
            static_cast<const float*>(a.scale.data), static_cast<const float*>(a.base.data), a.hc_eps, a.norm_eps,
            a.mixes, a.pre, static_cast<ActT*>(a.x_out), HcPostInput{p.a, p.residual, p.post, p.comb}, wp);
}

template <typename ActT, typename WeightT>
void launch_post(const HcPreArgs& a, bool post_first, int64_t blocks, cudaStream_t s) {
    if (post_first) launch<ActT, WeightT, true>(a, blocks, s);
    else launch<ActT, WeightT, false>(a, blocks, s);
}

template <typename ActT>
void launch_weight(const HcPreArgs& a, bool post_first, int64_t blocks, cudaStream_t s) {
    if (a.wide.weight.format == WeightFormat::kBF16) launch_post<ActT, __nv_bfloat16>(a, post_first, blocks, s);
    else launch_post<ActT, float>(a, post_first, blocks, s);
}

}  // namespace

int64_t hc_wide_blocks(int64_t dim) {
    if (dim <= 0 || dim % 8 != 0) return 0;
    const int64_t blocks = (4 * dim + Cfg::kBlockVals - 1) / Cfg::kBlockVals;
    return blocks <= Cfg::kMaxBlocks ? blocks : 0;
}

Status launch_hc_collapse_wide(Precision precision, const HcPreArgs& a, bool post_first, StreamHandle stream) {
    const std::string op = "sm90_hc_pre (wide)";
    const HcWideNorm& w = a.wide;
    const int64_t blocks = hc_wide_blocks(a.dim);
    if (blocks == 0)
        return invalid_argument(op + ": dim " + std::to_string(a.dim) + " must be a multiple of 8 and at most 8192");
    if (!a.sinkhorn_apart) return invalid_argument(op + ": needs sinkhorn_apart (it computes pre and the mixes only)");
    if (!w.counters || !w.partials || !w.y) return invalid_argument(op + ": null counters, partials or y");
    if (!is_aligned(w.counters, 4) || !is_aligned(w.partials, 8) || !is_aligned(w.y, 16))
        return invalid_argument(op + ": counters, partials or y misaligned");
    if (w.weight.empty() || w.weight.rows * w.weight.cols != a.dim ||
        (w.weight.format != WeightFormat::kBF16 && w.weight.format != WeightFormat::kF32) ||
        !is_aligned(w.weight.data, 16))
        return invalid_argument(op + ": the norm weight must be a 16-byte aligned bf16 or f32 vector of dim values");
    if (!w.codes != !w.scales) return invalid_argument(op + ": codes and scales go together");
    if (w.codes && (precision != Precision::kReference || a.dim % 128 != 0))
        return invalid_argument(op + ": the fused e4m3 quantisation needs reference precision and dim % 128 == 0");
    if (w.codes && (!is_aligned(w.codes, 8) || !is_aligned(w.scales, 4)))
        return invalid_argument(op + ": codes must be 8-byte and scales 4-byte aligned");
    if (a.tokens > 65535) return invalid_argument(op + ": more than 65,535 tokens");
    if (precision == Precision::kReference) launch_weight<__nv_bfloat16>(a, post_first, blocks, stream);
    else launch_weight<float>(a, post_first, blocks, stream);
    return launch_status(op.c_str());
}

}  // namespace dsv4::cuda
