// Launchers of the act_quant family: validate shapes and alignment, size the grid, launch on the stream.
#include <algorithm>
#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/kernels/act_quant/act_quant.cuh"
#include "backend/cuda/kernels/act_quant/act_quant.h"

namespace dsv4::cuda {
Status sm90_act_quant_e4m3(const ActQuantArgs& a, StreamHandle stream) {
    const std::string op = "sm90_act_quant_e4m3";
    if (!a.x || a.rows < 0 || a.cols < 0) return invalid_argument(op + ": null input or negative shape");
    if (a.block != 128 && a.block != 64) return invalid_argument(op + ": block must be 128 or 64");
    if (a.cols % a.block != 0)
        return invalid_argument(op + ": cols " + std::to_string(a.cols) + " not a multiple of the block");
    if (!is_aligned(a.x, 16) || !is_aligned(a.x_sim, 16) || !is_aligned(a.codes, 8))
        return invalid_argument(op + ": x/x_sim must be 16-byte and codes 8-byte aligned");
    const int64_t n_chunks = a.rows * a.cols / 8;
    if (n_chunks == 0) return Status::ok();
    const unsigned grid = grid_stride_blocks(n_chunks, ActQuantConfig::kThreads);
    sm90_act_quant_e4m3_kernel<<<grid, ActQuantConfig::kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(a.x), n_chunks, a.block, a.codes, a.scale, a.scale_e8m0,
        static_cast<__nv_bfloat16*>(a.x_sim));
    return launch_status(op.c_str());
}

Status sm90_fp4_quant_e2m1(const Fp4QuantArgs& a, StreamHandle stream) {
    const std::string op = "sm90_fp4_quant_e2m1";
    if (!a.x || a.rows < 0 || a.cols < 0) return invalid_argument(op + ": null input or negative shape");
    if (a.cols % 32 != 0) return invalid_argument(op + ": cols " + std::to_string(a.cols) + " not a multiple of 32");
    if (!is_aligned(a.x, 16) || !is_aligned(a.x_sim, 16) || !is_aligned(a.codes_packed, 4))
        return invalid_argument(op + ": x/x_sim must be 16-byte and codes 4-byte aligned");
    const int64_t n_chunks = a.rows * a.cols / 8;
    if (n_chunks == 0) return Status::ok();
    const unsigned grid = grid_stride_blocks(n_chunks, ActQuantConfig::kThreads);
    sm90_fp4_quant_e2m1_kernel<<<grid, ActQuantConfig::kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(a.x), n_chunks, a.codes_packed, a.scale, a.scale_e8m0,
        static_cast<__nv_bfloat16*>(a.x_sim));
    return launch_status(op.c_str());
}

Status sm90_hadamard128(backend::Precision precision, const HadamardArgs& a, StreamHandle stream) {
    const std::string op = "sm90_hadamard128";
    if (!a.x || !a.y || a.rows < 0) return invalid_argument(op + ": null pointer or negative rows");
    if (a.rows == 0) return Status::ok();
    constexpr int kW = ActQuantConfig::kHadamardWarps;
    const unsigned grid = unsigned((a.rows + kW - 1) / kW);
    if (precision == backend::Precision::kReference)
        sm90_hadamard128_kernel<__nv_bfloat16><<<grid, kW * 32, 0, stream>>>(
            static_cast<const __nv_bfloat16*>(a.x), a.rows, static_cast<__nv_bfloat16*>(a.y));
    else
        sm90_hadamard128_kernel<float><<<grid, kW * 32, 0, stream>>>(static_cast<const float*>(a.x), a.rows,
                                                                     static_cast<float*>(a.y));
    return launch_status(op.c_str());
}

}  // namespace dsv4::cuda
