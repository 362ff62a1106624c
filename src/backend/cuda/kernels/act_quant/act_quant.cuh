// Kernels of the act_quant family (sm_90). Each thread owns 8 consecutive values (one 16-byte bf16 load); the
// threads of one quantisation block (16 for block 128, 8 for 64, 4 for the FP4 block 32) share its amax through
// warp shuffles, so a block never leaves registers. Hadamard-128: one warp per row, 4 values per lane, the first
// two butterfly stages inside the lane and the other five across lanes by shuffle. Memory-bound: the floor is one
// read of x and one write of each requested output. Measured: docs/kernels/cuda-backend.md.
#pragma once

#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/common/warp_ops.cuh"
#include "backend/cuda/kernels/act_quant/e4m3_chunk.cuh"

namespace dsv4::cuda {

struct ActQuantConfig {
    static constexpr int kThreads = 256;
    static constexpr float kE4m3Max = kE4m3ChunkMax, kE4m3AmaxFloor = kE4m3ChunkAmaxFloor;
    static constexpr float kE2m1Max = 6.0f;
    static constexpr int kHadamardWarps = 4;
};

// grid-stride over 8-value chunks; a warp covers 256 consecutive values, whole blocks since cols % block == 0.
__global__ void __launch_bounds__(ActQuantConfig::kThreads)
    sm90_act_quant_e4m3_kernel(const __nv_bfloat16* x, int64_t n_chunks, int block,
                               uint8_t* __restrict__ codes, float* __restrict__ scale, uint8_t* __restrict__ scale_e8m0,
                               __nv_bfloat16* x_sim) {
    pdl_enter();
    const int group = block / 8;
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    // Loop bound rounded up to whole warps so every lane takes part in the shuffles.
    const int64_t n_warp_chunks = (n_chunks + 31) / 32 * 32;
    for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < n_warp_chunks; c += stride) {
        const bool live = c < n_chunks;
        float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (live) load8(x + c * 8, v);
        const E4m3Chunk q = e4m3_quantize_chunk(v, group);
        if (!live) continue;
        const int e = q.e;
        const float s = exp2_int(e);
        if (codes) *reinterpret_cast<uint2*>(codes + c * 8) = make_uint2(q.packed[0], q.packed[1]);
        if (x_sim) {
            float sim[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) sim[i] = __fmul_rn(e4m3_to_f32(uint8_t(q.packed[i / 4] >> (8 * (i % 4)))), s);
            store8(x_sim + c * 8, sim);
        }
        if ((threadIdx.x & (group - 1)) == 0) {
            const int64_t b = c / group;
            if (scale) scale[b] = s;
            if (scale_e8m0) scale_e8m0[b] = uint8_t(e + 127);
        }
    }
}

__global__ void __launch_bounds__(ActQuantConfig::kThreads)
    sm90_fp4_quant_e2m1_kernel(const __nv_bfloat16* x, int64_t n_chunks, uint8_t* __restrict__ codes,
                               float* __restrict__ scale, uint8_t* __restrict__ scale_e8m0, __nv_bfloat16* x_sim) {
    pdl_enter();
    constexpr int kGroup = 4;  // 32 values
    const float floor_amax = __fmul_rn(6.0f, exp2_int(-126));
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    const int64_t n_warp_chunks = (n_chunks + 31) / 32 * 32;
    for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < n_warp_chunks; c += stride) {
        const bool live = c < n_chunks;
        float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (live) load8(x + c * 8, v);
        float amax = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
        amax = group_max(amax, kGroup);
        if (!live) continue;
        const int e = ue8m0_exponent_for(amax, floor_amax, ActQuantConfig::kE2m1Max);
        const float s = exp2_int(e);
        uint32_t packed = 0;
        float sim[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            // x / 2^e as an exact scaling (ldexp on the CPU): a multiply by 2^-e, split in two when 2^-e is not a
            // normal f32 (e = 127 cannot occur for bf16 inputs; e <= -126 gives 2^126 at most).
            const float q = fminf(fmaxf(__fmul_rn(v[i], exp2_int(-e)), -ActQuantConfig::kE2m1Max),
                                  ActQuantConfig::kE2m1Max);
            const uint8_t code = f32_to_e2m1(q);
            packed |= uint32_t(code) << (4 * i);
            sim[i] = round_bf16(__fmul_rn(e2m1_to_f32(code), s));
        }
        if (codes) *reinterpret_cast<uint32_t*>(codes + c * 4) = packed;
        if (x_sim) store8(x_sim + c * 8, sim);
        if ((threadIdx.x & (kGroup - 1)) == 0) {
            const int64_t b = c / kGroup;
            if (scale) scale[b] = s;
            if (scale_e8m0) scale_e8m0[b] = uint8_t(e + 127);
        }
    }
}

// One warp per 128-row; lane L holds values 4L..4L+3.
template <typename ActT>
__global__ void __launch_bounds__(ActQuantConfig::kHadamardWarps * 32)
    sm90_hadamard128_kernel(const ActT* x, int64_t rows, ActT* y) {
    pdl_enter();
    const int lane = threadIdx.x & 31;
    const int64_t r = int64_t(blockIdx.x) * ActQuantConfig::kHadamardWarps + (threadIdx.x >> 5);
    if (r >= rows) return;
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = to_f32(x[r * 128 + 4 * lane + i]);
    hadamard128_warp(v);
#pragma unroll
    for (int i = 0; i < 4; ++i) y[r * 128 + 4 * lane + i] = from_f32<ActT>(v[i]);
}

}  // namespace dsv4::cuda
