// sm90_fp8_block_to_bf16 (linear.h): the bf16 copy of an FP8-block weight that the cuBLASLt paths of the prefill
// passes multiply with (the FP8 linears and wo_a above 256 rows).
#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kernels/linear/linear.h"

namespace dsv4::cuda {
namespace {

// 8 entries per thread, grid-stride: bf16(e4m3 · 2^(s − 127)) with s the UE8M0 byte of the entry's 128 x 128 block
// (scales [ceil(rows/128), ceil(cols/128)]). A power-of-two multiple of an e4m3 value is exact in bf16 (8
// significant bits against e4m3's 4) down to bf16's subnormals.
__global__ void sm90_fp8_block_to_bf16_kernel(const uint8_t* __restrict__ w, const uint8_t* __restrict__ w_scale,
                                              int64_t rows, int64_t cols, __nv_bfloat16* __restrict__ out) {
    pdl_enter();
    const int64_t chunks = rows * cols / 8, scale_cols = (cols + 127) / 128;
    for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < chunks; c += int64_t(gridDim.x) * blockDim.x) {
        const int64_t row = c * 8 / cols, col = c * 8 % cols;
        const float s = e8m0_to_f32(w_scale[(row / 128) * scale_cols + col / 128]);
        const uint2 bytes = *reinterpret_cast<const uint2*>(w + c * 8);
        float v[8];
#pragma unroll
        for (int e = 0; e < 8; ++e)
            v[e] = __fmul_rn(e4m3_to_f32(uint8_t((e < 4 ? bytes.x : bytes.y) >> (8 * (e % 4)))), s);
        store8(out + c * 8, v);
    }
}

}  // namespace

Status sm90_fp8_block_to_bf16(const DeviceWeightView& w, void* out, StreamHandle stream) {
    const std::string op = "sm90_fp8_block_to_bf16";
    if (w.format != backend::WeightFormat::kFP8Block || !w.data || !w.scale || !out)
        return invalid_argument(op + ": needs an FP8-block weight with its scales and an output");
    if (w.rows <= 0 || w.cols <= 0 || w.cols % 8 != 0)
        return invalid_argument(op + ": shape [" + std::to_string(w.rows) + ", " + std::to_string(w.cols) +
                                "]: columns must be a positive multiple of 8");
    if (!is_aligned(w.data, 8) || !is_aligned(out, 16))
        return invalid_argument(op + ": weight 8-byte and output 16-byte alignment needed");
    const int64_t chunks = w.rows * w.cols / 8;
    sm90_fp8_block_to_bf16_kernel<<<grid_stride_blocks(chunks, 256), 256, 0, stream>>>(
        static_cast<const uint8_t*>(w.data), w.scale, w.rows, w.cols, static_cast<__nv_bfloat16*>(out));
    return launch_status(op.c_str());
}

}  // namespace dsv4::cuda
