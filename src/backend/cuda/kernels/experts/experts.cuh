// Kernels of the experts family. Every sum follows backend::cpu (moe.cpp, linear.cpp) operation for operation:
// products and sums separately rounded (the CPU build does not contract to FMA), each output's products added in
// increasing input index, W8A8 / W4A8 block sums folded as y += acc·(sa·sw), act_quant exactly as
// quant_block_e4m3, SwiGLU as cpu::expert (silu through the correctly rounded exp of numerics.cuh).
//
// Routed experts: launch 1 (up) is one block per (pick, 128 rows of inter): the token's row of x is staged in shared
// memory (quantised there to e4m3 code values + per-128 scales when the expert's weights are FP8 / MXFP4 in
// reference numerics), each thread computes one row of w1 and of w3 (weights decoded in registers, 8 at a time) and
// writes the SwiGLU activation of its row. Launch 2 (down) does the same for w2 over that activation row.
#pragma once

#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/weights.h"
#include "backend/cuda/common/warp_ops.cuh"
#include "backend/cuda/kernels/linear/linear.cuh"

namespace dsv4::cuda {

struct ExpertsConfig {
    static constexpr int kRows = 128;  // threads per block = output rows per block
};

// Σ_k W[o, k]·xs[k] in the CPU's order. kQuant: xs holds e4m3 code values with per-128 scales sa, W is read as
// codes, and each quantisation block's sum is folded as y += acc·(sa·sw) (CPU quantized_tile).
template <backend::WeightFormat F, bool kQuant>
__device__ __forceinline__ float row_dot(const DeviceWeightView& w, int64_t o, const float* xs, const float* sa) {
    constexpr int kBlockK = F == backend::WeightFormat::kMXFP4 ? 32 : 128;
    const int64_t cols = w.cols;
    float acc = 0.0f, y = 0.0f;
    for (int64_t k = 0; k < cols; k += 8) {
        float wv[8];
        load_weight8<F, kQuant>(w.data, w.scale, o, k, cols, wv);
        const float4 x0 = *reinterpret_cast<const float4*>(xs + k), x1 = *reinterpret_cast<const float4*>(xs + k + 4);
        const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
        for (int i = 0; i < 8; ++i) acc = __fadd_rn(acc, __fmul_rn(xv[i], wv[i]));
        if constexpr (kQuant) {
            if ((k + 8) % kBlockK == 0) {
                const float s = __fmul_rn(sa[k / 128], weight_block_scale<F>(w.scale, o, k / kBlockK, cols));
                y = __fadd_rn(y, __fmul_rn(acc, s));
                acc = 0.0f;
            }
        }
    }
    return kQuant ? y : acc;
}

__device__ __forceinline__ bool is_block_quantized(backend::WeightFormat f) {
    return f == backend::WeightFormat::kFP8Block || f == backend::WeightFormat::kMXFP4;
}

// One output row of a linear of any format: W8A8 / W4A8 when kRef and the weight is FP8 / MXFP4 (xs then holds
// codes), the plain f32 sum otherwise. kRef rounds to bf16 (every linear of an expert has bf16 output).
template <bool kRef>
__device__ __forceinline__ float expert_row(const DeviceWeightView& w, int64_t o, const float* xs, const float* sa) {
    using backend::WeightFormat;
    float y = 0.0f;
    switch (w.format) {
        case WeightFormat::kF32: y = row_dot<WeightFormat::kF32, false>(w, o, xs, sa); break;
        case WeightFormat::kBF16: y = row_dot<WeightFormat::kBF16, false>(w, o, xs, sa); break;
        case WeightFormat::kFP8Block: y = row_dot<WeightFormat::kFP8Block, kRef>(w, o, xs, sa); break;
        case WeightFormat::kMXFP4: y = row_dot<WeightFormat::kMXFP4, kRef>(w, o, xs, sa); break;
    }
    return kRef ? round_bf16(y) : y;
}

// act_quant (128) of n values in shared memory, in place: xs[i] ← e4m3 code value, sa[b] ← 2^e (quant_block_e4m3).
// All threads of the block (kRows, whole warps) take part; syncs before returning.
__device__ __forceinline__ void quantize_shared(float* xs, float* sa, int n) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int b = warp; b < n / 128; b += warps) {
        float v[4];
        float amax = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = xs[b * 128 + lane * 4 + j], amax = fmaxf(amax, fabsf(v[j]));
        amax = group_max(amax, 32);
        const int e = ue8m0_exponent_for(amax, 1e-4f, 448.0f);
        const float inv = exp2_int(-e);  // x·2^-e is exact (a power-of-two scaling, e >= -22)
#pragma unroll
        for (int j = 0; j < 4; ++j)
            xs[b * 128 + lane * 4 + j] =
                e4m3_to_f32(f32_to_e4m3(fminf(fmaxf(__fmul_rn(v[j], inv), -448.0f), 448.0f)));
        if (lane == 0) sa[b] = exp2_int(e);
    }
    __syncthreads();
}

// SwiGLU of one element as cpu::expert: clamp, g / (1 + exp(-g)) · u, · route weight, bf16 in kReference.
template <bool kRef>
__device__ __forceinline__ float swiglu_value(float g, float u, const float* route_w, int64_t row, float limit) {
    if (limit > 0.0f) {
        g = fminf(g, limit);
        u = fminf(fmaxf(u, -limit), limit);
    }
    float a = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, exp_f32(-g))), u);
    if (route_w) a = __fmul_rn(route_w[row], a);
    return kRef ? round_bf16(a) : a;
}

// Stages `n` activations (bf16 or f32, 16-byte aligned, n % 8 == 0) of one row into shared f32.
template <typename XT>
__device__ __forceinline__ void stage_row(const XT* src, float* xs, int n) {
    for (int i = threadIdx.x * 8; i < n; i += blockDim.x * 8) {
        float v[8];
        load8(src + i, v);
        *reinterpret_cast<float4*>(xs + i) = make_float4(v[0], v[1], v[2], v[3]);
        *reinterpret_cast<float4*>(xs + i + 4) = make_float4(v[4], v[5], v[6], v[7]);
    }
    __syncthreads();
}

}  // namespace dsv4::cuda
