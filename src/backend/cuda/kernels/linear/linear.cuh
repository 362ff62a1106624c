// Kernels of the linear family: a shared-memory tiled GEMM for any weight format whose sums follow
// backend::cpu::linear exactly (each output's products are added one by one in increasing input index, with a
// separately rounded multiply and add — the CPU build does not contract to FMA), and the small conversion kernels.
//
// Tile: 64 tokens x 64 weight rows, K in steps of 32; 256 threads, each owning 4 tokens x 4 rows (strided by 16 so
// shared-memory reads are broadcasts or consecutive). The weight chunk is decoded to f32 as it is staged: exact
// values (code · 2^scale) for the f32 oracle and plain GEMMs, bare codes for W8A8 / W4A8, where the per-block sums
// are folded into the output as acc·(sa·sw) when a quantisation block closes (32 inputs MXFP4, 128 FP8).
// A correctness path, not a fast one: FP8 in reference numerics and BF16 weights take the tensor-core GEMMs.
#pragma once

#include "backend/cuda/common/numerics.cuh"
#include "backend/ops.h"
#include "backend/cuda/common/pdl.cuh"

namespace dsv4::cuda {

struct LinearTileConfig {
    static constexpr int kBT = 64;       // tokens per block
    static constexpr int kBO = 64;       // weight rows per block
    static constexpr int kKC = 32;       // K per shared-memory stage (= the MXFP4 block)
    static constexpr int kThreads = 256;
};

// ---- weight decoding, shared with the experts family ----

// 8 consecutive weights W[o, k..k+7] (k % 8 == 0) as f32: exact values, or (codes) the e4m3 / e2m1 code values
// without their block scale. `cols` = K. Data pointers 16-byte aligned with K % 32 == 0.
template <backend::WeightFormat F, bool kCodes>
__device__ __forceinline__ void load_weight8(const void* data, const uint8_t* scale, int64_t o, int64_t k,
                                             int64_t cols, float (&v)[8]) {
    using backend::WeightFormat;
    if constexpr (F == WeightFormat::kF32) {
        load8(static_cast<const float*>(data) + o * cols + k, v);
    } else if constexpr (F == WeightFormat::kBF16) {
        load8(static_cast<const __nv_bfloat16*>(data) + o * cols + k, v);
    } else if constexpr (F == WeightFormat::kFP8Block) {
        const uint2 u = *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(data) + o * cols + k);
        const uint32_t w[2] = {u.x, u.y};
        const float s = kCodes ? 1.0f : e8m0_to_f32(scale[(o / 128) * ((cols + 127) / 128) + k / 128]);
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = __fmul_rn(e4m3_to_f32(uint8_t(w[i / 4] >> (8 * (i % 4)))), s);
    } else {  // kMXFP4: 8 nibbles in 4 bytes, low nibble = even column
        const uint32_t u = *reinterpret_cast<const uint32_t*>(static_cast<const uint8_t*>(data) + (o * cols + k) / 2);
        const float s = kCodes ? 1.0f : e8m0_to_f32(scale[o * (cols / 32) + k / 32]);
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = __fmul_rn(e2m1_to_f32(uint8_t((u >> (4 * i)) & 0xf)), s);
    }
}

// The scale of quantisation block kb (128 inputs FP8, 32 MXFP4) of weight row o.
template <backend::WeightFormat F>
__device__ __forceinline__ float weight_block_scale(const uint8_t* scale, int64_t o, int64_t kb, int64_t cols) {
    if constexpr (F == backend::WeightFormat::kFP8Block) return e8m0_to_f32(scale[(o / 128) * ((cols + 127) / 128) + kb]);
    else return e8m0_to_f32(scale[o * (cols / 32) + kb]);
}

// 8 activations x[t, k..k+7]: bf16, f32, or e4m3 codes decoded (the W8A8 / W4A8 operand).
__device__ __forceinline__ void load_act8(const __nv_bfloat16* x, int64_t i, float (&v)[8]) { load8(x + i, v); }
__device__ __forceinline__ void load_act8(const float* x, int64_t i, float (&v)[8]) { load8(x + i, v); }
__device__ __forceinline__ void load_act8(const uint8_t* x, int64_t i, float (&v)[8]) {
    const uint2 u = *reinterpret_cast<const uint2*>(x + i);
    const uint32_t w[2] = {u.x, u.y};
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = e4m3_to_f32(uint8_t(w[j / 4] >> (8 * (j % 4))));
}

// ---- the tiled GEMM ----

// y[t, o] (YT bf16 or f32) for t < T, o < N. kQuant: x holds e4m3 codes with scales x_scale [T, K/128] and the
// weight is read as codes; the result is always bf16-rounded. Otherwise round_out selects bf16 rounding.
template <backend::WeightFormat F, typename XT, bool kQuant, typename YT>
__global__ void __launch_bounds__(LinearTileConfig::kThreads)
    sm90_linear_tiled_kernel(const XT* __restrict__ x, const float* __restrict__ x_scale,
                             const void* __restrict__ w, const uint8_t* __restrict__ w_scale, int T, int N, int K,
                             bool round_out, YT* __restrict__ y) {
    pdl_enter();
    using Cfg = LinearTileConfig;
    constexpr int kBlockK = F == backend::WeightFormat::kMXFP4 ? 32 : 128;  // quantisation block of K
    __shared__ float xs[Cfg::kKC][Cfg::kBT + 4];  // [k][token]
    __shared__ float ws[Cfg::kKC][Cfg::kBO + 4];  // [k][row]
    __shared__ float sa[Cfg::kBT], sw[Cfg::kBO];
    const int t0 = blockIdx.y * Cfg::kBT, o0 = blockIdx.x * Cfg::kBO;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int lr = threadIdx.x >> 2, lk = (threadIdx.x & 3) * 8;  // staging: one row/token, 8 of the 32 k
    float acc[4][4], out[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[j][i] = 0.0f, out[j][i] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += Cfg::kKC) {
        float xv[8] = {0, 0, 0, 0, 0, 0, 0, 0}, wv[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (t0 + lr < T) load_act8(x, int64_t(t0 + lr) * K + k0 + lk, xv);
        if (o0 + lr < N) load_weight8<F, kQuant>(w, w_scale, o0 + lr, k0 + lk, K, wv);
#pragma unroll
        for (int i = 0; i < 8; ++i) xs[lk + i][lr] = xv[i], ws[lk + i][lr] = wv[i];
        const bool closes = kQuant && (k0 + Cfg::kKC) % kBlockK == 0;
        if (closes) {
            const int r = threadIdx.x & 63;
            if (threadIdx.x < 64)
                sa[r] = t0 + r < T ? x_scale[int64_t(t0 + r) * (K / 128) + k0 / 128] : 0.0f;
            else if (threadIdx.x < 128)
                sw[r] = o0 + r < N ? weight_block_scale<F>(w_scale, o0 + r, k0 / kBlockK, K) : 0.0f;
        }
        __syncthreads();
#pragma unroll 8
        for (int kk = 0; kk < Cfg::kKC; ++kk) {
            float a[4], b[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) a[j] = xs[kk][ty + 16 * j], b[j] = ws[kk][tx + 16 * j];
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int i = 0; i < 4; ++i) acc[j][i] = __fadd_rn(acc[j][i], __fmul_rn(a[j], b[i]));
        }
        if (closes) {  // CPU order: y += acc · (sa · sw)
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    out[j][i] = __fadd_rn(out[j][i], __fmul_rn(acc[j][i], __fmul_rn(sa[ty + 16 * j], sw[tx + 16 * i])));
                    acc[j][i] = 0.0f;
                }
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int t = t0 + ty + 16 * j;
        if (t >= T) continue;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int o = o0 + tx + 16 * i;
            if (o >= N) continue;
            const float v = kQuant ? round_bf16(out[j][i]) : round_out ? round_bf16(acc[j][i]) : acc[j][i];
            y[int64_t(t) * N + o] = from_f32<YT>(v);
        }
    }
}

}  // namespace dsv4::cuda
