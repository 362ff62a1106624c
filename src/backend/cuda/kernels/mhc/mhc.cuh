// Kernels of the mHC family (sm_90). hc_pre / hc_head: one 256-thread block per token; each thread walks 8-value
// chunks of the flattened [4·D] streams, accumulating the 24 (or 4) fn dot products and the sum of squares in f64
// (the CPU's accumulator type, so the f32 results agree but for rare last-bit cases), then warp shuffles and one
// shared-memory pass reduce them; thread 0 runs the split + Sinkhorn (a few hundred flops), and the block collapses
// the streams with the pre weights. hc_post is elementwise: one thread per 8 channels of a token, all 4 outputs.
// fn (2.75 MB for V4-Pro) is re-read by every token's block from L2; memory floor: streams read once (+ fn once).
#pragma once

#include "backend/cuda/common/numerics.cuh"

namespace dsv4::cuda {

struct MhcConfig {
    static constexpr int kThreads = 256;
    static constexpr int kHc = 4;
    static constexpr int kMixMax = 24;
};

// sigmoid as the CPU computes it: 1 / (1 + exp(-x)), each step rounded in f32.
__device__ __forceinline__ float sigmoid_f32(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, exp_f32(-x))); }

// m[24] → pre, post, comb exactly in the order of backend/cpu/mhc.cpp split_sinkhorn_one.
__device__ void hc_split_sinkhorn(const float* m, const float* scale, const float* base, int iters, float eps,
                                  float* pre, float* post, float* comb) {
    constexpr int kHc = MhcConfig::kHc;
    const float s0 = scale[0], s1 = scale[1], s2 = scale[2];
    for (int j = 0; j < kHc; ++j) {
        pre[j] = __fadd_rn(sigmoid_f32(__fadd_rn(__fmul_rn(m[j], s0), base[j])), eps);
        post[j] = __fmul_rn(2.0f, sigmoid_f32(__fadd_rn(__fmul_rn(m[kHc + j], s1), base[kHc + j])));
    }
    float c[kHc][kHc];
    for (int j = 0; j < kHc; ++j) {
        float mx = -INFINITY;
        for (int k = 0; k < kHc; ++k) {
            c[j][k] = __fadd_rn(__fmul_rn(m[2 * kHc + kHc * j + k], s2), base[2 * kHc + kHc * j + k]);
            mx = fmaxf(mx, c[j][k]);
        }
        float sum = 0;
        for (int k = 0; k < kHc; ++k) sum = __fadd_rn(sum, c[j][k] = exp_f32(__fsub_rn(c[j][k], mx)));
        for (int k = 0; k < kHc; ++k) c[j][k] = __fadd_rn(__fdiv_rn(c[j][k], sum), eps);
    }
    for (int it = 0; it < iters; ++it) {
        if (it > 0) {  // row normalisation (the first pass only normalises columns)
            for (int j = 0; j < kHc; ++j) {
                float sum = 0;
                for (int k = 0; k < kHc; ++k) sum = __fadd_rn(sum, c[j][k]);
                for (int k = 0; k < kHc; ++k) c[j][k] = __fdiv_rn(c[j][k], __fadd_rn(sum, eps));
            }
        }
        for (int k = 0; k < kHc; ++k) {
            float sum = 0;
            for (int j = 0; j < kHc; ++j) sum = __fadd_rn(sum, c[j][k]);
            for (int j = 0; j < kHc; ++j) c[j][k] = __fdiv_rn(c[j][k], __fadd_rn(sum, eps));
        }
    }
    for (int j = 0; j < kHc; ++j)
        for (int k = 0; k < kHc; ++k) comb[kHc * j + k] = c[j][k];
}

__device__ __forceinline__ double warp_sum_f64(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// grid: tokens; block: kThreads. kMix = 24 (hc_pre: split + Sinkhorn) or 4 (hc_head: pre only).
template <typename ActT, int kMix>
__global__ void __launch_bounds__(MhcConfig::kThreads)
    sm90_hc_collapse_kernel(const ActT* __restrict__ x, int dim, const float* __restrict__ fn,
                            const float* __restrict__ scale, const float* __restrict__ base, int iters, float hc_eps,
                            float norm_eps, float* __restrict__ mixes, float* __restrict__ pre,
                            float* __restrict__ post, float* __restrict__ comb, ActT* __restrict__ y) {
    constexpr int kT = MhcConfig::kThreads, kHc = MhcConfig::kHc;
    const int64_t t = blockIdx.x;
    const int n = kHc * dim;
    const ActT* xt = x + t * n;
    double acc[kMix + 1];  // [0, kMix): fn rows · x; kMix: Σ x²
#pragma unroll
    for (int r = 0; r <= kMix; ++r) acc[r] = 0;
    for (int c = threadIdx.x * 8; c < n; c += kT * 8) {
        float v[8];
        load8(xt + c, v);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[kMix] += double(v[i]) * double(v[i]);
#pragma unroll
        for (int r = 0; r < kMix; ++r) {
            float w[8];
            load8(fn + int64_t(r) * n + c, w);
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[r] += double(w[i]) * double(v[i]);
        }
    }
    __shared__ double partial[kT / 32][kMix + 1];
    __shared__ float pre_s[kHc];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int r = 0; r <= kMix; ++r) {
        const double s = warp_sum_f64(acc[r]);
        if (lane == 0) partial[warp][r] = s;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double tot[kMix + 1];
        for (int r = 0; r <= kMix; ++r) {
            tot[r] = 0;
            for (int w = 0; w < kT / 32; ++w) tot[r] += partial[w][r];
        }
        const float rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(float(tot[kMix] / double(n)), norm_eps)));
        float m[kMix];
        for (int r = 0; r < kMix; ++r) m[r] = __fmul_rn(float(tot[r]), rs);
        if (mixes)
            for (int r = 0; r < kMix; ++r) mixes[t * kMix + r] = m[r];
        float p[kHc];
        if constexpr (kMix == 24) {
            hc_split_sinkhorn(m, scale, base, iters, hc_eps, p, post + t * kHc, comb + t * kHc * kHc);
        } else {
            for (int j = 0; j < kHc; ++j)
                p[j] = __fadd_rn(sigmoid_f32(__fadd_rn(__fmul_rn(m[j], scale[0]), base[j])), hc_eps);
        }
        for (int j = 0; j < kHc; ++j) {
            pre_s[j] = p[j];
            if (pre) pre[t * kHc + j] = p[j];
        }
    }
    __syncthreads();
    const float p0 = pre_s[0], p1 = pre_s[1], p2 = pre_s[2], p3 = pre_s[3];
    for (int c = threadIdx.x * 8; c < dim; c += kT * 8) {
        float v[kHc][8], out[8];
#pragma unroll
        for (int j = 0; j < kHc; ++j) load8(xt + j * dim + c, v[j]);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            float s = __fmul_rn(p0, v[0][i]);
            s = __fadd_rn(s, __fmul_rn(p1, v[1][i]));
            s = __fadd_rn(s, __fmul_rn(p2, v[2][i]));
            out[i] = __fadd_rn(s, __fmul_rn(p3, v[3][i]));
        }
        store8(y + t * dim + c, out);  // bf16 store rounds (RNE) in kReference
    }
}

// grid-stride over tokens · dim/8 chunks.
template <typename ActT>
__global__ void __launch_bounds__(MhcConfig::kThreads)
    sm90_hc_post_kernel(const ActT* __restrict__ a, const ActT* __restrict__ residual, const float* __restrict__ post,
                        const float* __restrict__ comb, int64_t tokens, int dim, ActT* __restrict__ out) {
    constexpr int kHc = MhcConfig::kHc;
    const int chunks = dim / 8;
    const int64_t total = tokens * chunks;
    for (int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < total; g += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = g / chunks;
        const int c = int(g % chunks) * 8;
        float av[8], r[kHc][8];
        load8(a + t * dim + c, av);
#pragma unroll
        for (int j = 0; j < kHc; ++j) load8(residual + (t * kHc + j) * dim + c, r[j]);
        const float* cm = comb + t * kHc * kHc;
#pragma unroll
        for (int k = 0; k < kHc; ++k) {
            const float pk = post[t * kHc + k];
            const float c0 = cm[k], c1 = cm[kHc + k], c2 = cm[2 * kHc + k], c3 = cm[3 * kHc + k];
            float o[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                float s = __fmul_rn(c0, r[0][i]);
                s = __fadd_rn(s, __fmul_rn(c1, r[1][i]));
                s = __fadd_rn(s, __fmul_rn(c2, r[2][i]));
                s = __fadd_rn(s, __fmul_rn(c3, r[3][i]));
                o[i] = __fadd_rn(__fmul_rn(pk, av[i]), s);
            }
            store8(out + (t * kHc + k) * dim + c, o);
        }
    }
}

}  // namespace dsv4::cuda
