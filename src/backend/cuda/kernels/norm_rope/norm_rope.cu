// Launchers of the norm_rope family: validate, pick the activation type from the precision, launch on the stream.
#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/kernels/norm_rope/norm_rope.cuh"
#include "backend/cuda/kernels/norm_rope/norm_rope.h"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using backend::WeightFormat;
using Cfg = NormRopeConfig;

template <typename ActT, typename WeightT>
void launch_rmsnorm(const RmsNormArgs& a, cudaStream_t s) {
    sm90_rmsnorm_kernel<ActT, WeightT><<<unsigned(a.rows), Cfg::kNormThreads, 0, s>>>(
        static_cast<const ActT*>(a.x), static_cast<const WeightT*>(a.weight.data), int(a.dim), a.eps,
        static_cast<ActT*>(a.y), a.codes, a.scales);
}

template <typename ActT>
void launch_rmsnorm_act(const RmsNormArgs& a, cudaStream_t s) {
    if (a.weight.empty()) launch_rmsnorm<ActT, void>(a, s);
    else if (a.weight.format == WeightFormat::kBF16) launch_rmsnorm<ActT, __nv_bfloat16>(a, s);
    else launch_rmsnorm<ActT, float>(a, s);
}

}  // namespace

Status sm90_rmsnorm(Precision precision, const RmsNormArgs& a, StreamHandle stream) {
    const std::string op = "sm90_rmsnorm";
    if (!a.x || !a.y || a.rows < 0 || a.dim <= 0) return invalid_argument(op + ": null pointer or bad shape");
    if (a.dim % 8 != 0 || a.dim > Cfg::kNormThreads * 8 * Cfg::kNormMaxChunks)
        return invalid_argument(op + ": dim " + std::to_string(a.dim) + " must be a multiple of 8 and at most 8192");
    if (!is_aligned(a.x, 16) || !is_aligned(a.y, 16)) return invalid_argument(op + ": activations not 16-byte aligned");
    if (!a.weight.empty()) {
        if (a.weight.rows * a.weight.cols != a.dim) return invalid_argument(op + ": weight length differs from dim");
        if (a.weight.format != WeightFormat::kBF16 && a.weight.format != WeightFormat::kF32)
            return invalid_argument(op + ": norm weight must be bf16 or f32");
    }
    if (!a.codes != !a.scales) return invalid_argument(op + ": codes and scales go together");
    if (a.codes && (precision != Precision::kReference || a.dim % 128 != 0))
        return invalid_argument(op + ": the fused e4m3 quantisation needs reference precision and dim % 128 == 0");
    if (a.codes && (!is_aligned(a.codes, 8) || !is_aligned(a.scales, 4)))
        return invalid_argument(op + ": codes must be 8-byte and scales 4-byte aligned");
    if (a.rows == 0) return Status::ok();
    if (a.rows > 0x7fffffff) return invalid_argument(op + ": too many rows");
    if (precision == Precision::kReference) launch_rmsnorm_act<__nv_bfloat16>(a, stream);
    else launch_rmsnorm_act<float>(a, stream);
    return launch_status(op.c_str());
}

Status sm90_q_head_norm_rope(Precision precision, const QHeadNormRopeArgs& a, StreamHandle stream) {
    const std::string op = "sm90_q_head_norm_rope";
    if (!a.q || a.tokens < 0 || a.heads <= 0) return invalid_argument(op + ": null pointer or bad shape");
    if (a.head_dim % 8 != 0 || a.head_dim < 64 || a.head_dim > 32 * 8 * Cfg::kHeadMaxChunks)
        return invalid_argument(op + ": head_dim " + std::to_string(a.head_dim) +
                                " must be a multiple of 8 in [64, 1024]");
    if (a.rope && !a.positions) return invalid_argument(op + ": rope needs positions");
    if (!is_aligned(a.q, 16)) return invalid_argument(op + ": q not 16-byte aligned");
    const int hpw = a.tokens * a.heads >= Cfg::kHeadsPerWarpFrom ? Cfg::kHeadsPerWarp : 1;
    const int64_t warps = a.tokens * ((a.heads + hpw - 1) / hpw);
    if (warps == 0) return Status::ok();
    const int64_t n = a.tokens;
    const unsigned grid = unsigned((warps + Cfg::kWarpsPerBlock - 1) / Cfg::kWarpsPerBlock);
    if (precision == Precision::kReference)
        sm90_q_head_norm_rope_kernel<__nv_bfloat16><<<grid, Cfg::kWarpsPerBlock * 32, 0, stream>>>(
            static_cast<__nv_bfloat16*>(a.q), n, int(a.heads), int(a.head_dim), hpw, a.eps, a.rope, a.positions,
            a.freqs);
    else
        sm90_q_head_norm_rope_kernel<float><<<grid, Cfg::kWarpsPerBlock * 32, 0, stream>>>(
            static_cast<float*>(a.q), n, int(a.heads), int(a.head_dim), hpw, a.eps, a.rope, a.positions, a.freqs);
    return launch_status(op.c_str());
}

Status sm90_rope(Precision precision, const RopeArgs& a, StreamHandle stream) {
    const std::string op = "sm90_rope";
    if (!a.x || !a.positions || a.tokens < 0 || a.vecs <= 0)
        return invalid_argument(op + ": null pointer or bad shape");
    if (a.offset < 0 || a.offset % 2 != 0 || a.offset + 64 > a.vec_stride)
        return invalid_argument(op + ": rope slice [" + std::to_string(a.offset) + ", +64) outside the vector of " +
                                std::to_string(a.vec_stride));
    if (a.tokens == 0) return Status::ok();
    const unsigned grid = unsigned((a.tokens + Cfg::kWarpsPerBlock - 1) / Cfg::kWarpsPerBlock);
    if (precision == Precision::kReference)
        sm90_rope_kernel<__nv_bfloat16><<<grid, Cfg::kWarpsPerBlock * 32, 0, stream>>>(
            static_cast<__nv_bfloat16*>(a.x), a.tokens, a.vecs, a.vec_stride, a.offset, a.positions, a.freqs,
            a.inverse);
    else
        sm90_rope_kernel<float><<<grid, Cfg::kWarpsPerBlock * 32, 0, stream>>>(
            static_cast<float*>(a.x), a.tokens, a.vecs, a.vec_stride, a.offset, a.positions, a.freqs, a.inverse);
    return launch_status(op.c_str());
}

}  // namespace dsv4::cuda
