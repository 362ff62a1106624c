// Kernels of the mHC family (sm_90). hc_pre / hc_head: one thread-block cluster of S blocks (1..8, 256 threads each)
// per token; block r walks every S-th 256-chunk tile of the flattened [4·D] streams (8 values per thread), accumulating
// the 24 (or 4) fn dot products and the sum of squares in f64 (the CPU's accumulator type, so the f32 results agree
// but for rare last-bit cases); warp shuffles park per-warp sums in shared memory; warp 0 of block 0 adds them over
// the cluster (distributed shared memory, fixed warp then block order), lane r holding mix r, and runs the split +
// Sinkhorn on 16 lanes (lane 4j+k holds comb[j][k]; row and column sums gathered by shuffles and added in the CPU's
// order, so every value is the CPU's); then each block collapses its share of the channels with the pre weights
// read from block 0. S > 1 spreads a decode token's fn read (1.6 MB Flash, 2.75 MB Pro) over S SMs. Long prefill
// launches take mhc_rows.cuh's 32-token tiles instead (fn read once per tile).
// hc_post is elementwise: one thread per 8 channels of a token, all 4 outputs.
#pragma once

#include <cooperative_groups.h>

#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/pdl.cuh"

namespace dsv4::cuda {

struct MhcConfig {
    static constexpr int kThreads = 256;
    static constexpr int kHc = 4;
    static constexpr int kMixMax = 24;
    static constexpr int kMaxCluster = 8;  // portable cluster size
};

// sigmoid as the CPU computes it: 1 / (1 + exp(-x)), each step rounded in f32.
__device__ __forceinline__ float sigmoid_f32(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, exp_f32(-x))); }

__device__ __forceinline__ double warp_sum_f64(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The split + Sinkhorn of backend/cpu/mhc.cpp split_sinkhorn_one on one warp, every value the CPU's: lane 4j+k (and
// its mirror 16 lanes up) holds c[j][k]; a row or column sum is gathered by shuffles and added in the CPU's order
// (from 0, k or j ascending), each division and addition rounded as there. m: this lane's mix (lanes 0..23).
// Lanes 0..3 return pre[lane] / post[lane]; lanes 0..15 comb[lane].
__device__ __forceinline__ void hc_split_sinkhorn_warp(float m, const float* __restrict__ scale,
                                                       const float* __restrict__ base, int iters, float eps,
                                                       float& pre, float& post, float& comb) {
    constexpr unsigned kAll = 0xffffffffu;
    const int lane = threadIdx.x & 31, q = lane & 3, row0 = lane & 12, e = lane & 15;
    const float s0 = scale[0], s1 = scale[1], s2 = scale[2];
    const float m_pre = __shfl_sync(kAll, m, q), m_post = __shfl_sync(kAll, m, 4 + q), m_c = __shfl_sync(kAll, m, 8 + e);
    pre = __fadd_rn(sigmoid_f32(__fadd_rn(__fmul_rn(m_pre, s0), base[q])), eps);
    post = __fmul_rn(2.0f, sigmoid_f32(__fadd_rn(__fmul_rn(m_post, s1), base[4 + q])));
    float c = __fadd_rn(__fmul_rn(m_c, s2), base[8 + e]);
    float mx = -INFINITY;
#pragma unroll
    for (int k = 0; k < 4; ++k) mx = fmaxf(mx, __shfl_sync(kAll, c, row0 + k));
    c = exp_f32(__fsub_rn(c, mx));
    float sum = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) sum = __fadd_rn(sum, __shfl_sync(kAll, c, row0 + k));
    c = __fadd_rn(__fdiv_rn(c, sum), eps);
    for (int it = 0; it < iters; ++it) {
        if (it > 0) {  // row normalisation (the first pass only normalises columns)
            sum = 0;
#pragma unroll
            for (int k = 0; k < 4; ++k) sum = __fadd_rn(sum, __shfl_sync(kAll, c, row0 + k));
            c = __fdiv_rn(c, __fadd_rn(sum, eps));
        }
        sum = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) sum = __fadd_rn(sum, __shfl_sync(kAll, c, 4 * j + q));
        c = __fdiv_rn(c, __fadd_rn(sum, eps));
    }
    comb = c;
}

// hc_post's arithmetic for stream k of N channels of one token: post_k·a + Σ_j comb[j][k]·r_j, each product rounded
// and the sum taken left to right (the CPU reference's order); `cm` is the token's comb [4, 4].
template <int N>
__device__ __forceinline__ void hc_post_mix(const float* cm, float pk, int k, const float (&av)[N],
                                            const float (&r)[MhcConfig::kHc][N], float (&o)[N]) {
    constexpr int kHc = MhcConfig::kHc;
    const float c0 = cm[k], c1 = cm[kHc + k], c2 = cm[2 * kHc + k], c3 = cm[3 * kHc + k];
#pragma unroll
    for (int i = 0; i < N; ++i) {
        float s = __fmul_rn(c0, r[0][i]);
        s = __fadd_rn(s, __fmul_rn(c1, r[1][i]));
        s = __fadd_rn(s, __fmul_rn(c2, r[2][i]));
        s = __fadd_rn(s, __fmul_rn(c3, r[3][i]));
        o[i] = __fadd_rn(__fmul_rn(pk, av[i]), s);
    }
}

// The previous sub-block's hc_post, for a collapse that runs it first (HcPostInput): its output chunk of stream k,
// channels ch .. ch+N-1 (N = 8 or 4) of token t, out = post[k]·a + Σ_j comb[j][k]·R[j] with sm90_hc_post_kernel's
// arithmetic.
struct HcPostInput {
    const void* a;         // [T, D]
    const void* residual;  // [T, 4, D]
    const float* post;     // [T, 4]
    const float* comb;     // [T, 4, 4]
};
template <typename ActT, int N>
__device__ __forceinline__ void hc_post_chunk(const HcPostInput& in, int64_t t, int k, int ch, int dim,
                                              float (&o)[N]) {
    static_assert(N == 8 || N == 4);
    constexpr int kHc = MhcConfig::kHc;
    const auto load = [](const void* p, float(&v)[N]) {
        if constexpr (N == 8) load8(static_cast<const ActT*>(p), v);
        else load4(static_cast<const ActT*>(p), v);
    };
    float av[N], r[kHc][N];
    load(static_cast<const ActT*>(in.a) + t * dim + ch, av);
#pragma unroll
    for (int j = 0; j < kHc; ++j) load(static_cast<const ActT*>(in.residual) + (t * kHc + j) * dim + ch, r[j]);
    hc_post_mix(in.comb + t * kHc * kHc, in.post[t * kHc + k], k, av, r, o);
}

// A token's mixes finished on one warp, as every collapse kernel does it: lane r holds tot = the f64 sum of mix r
// (r < kMix) or of the squares (r == kMix, over n values); m = f32(tot) · rsqrt(mean + norm_eps) rounded as the CPU;
// writes mixes (if any) and, for hc_pre (kMix 24) with comb given, the split + Sinkhorn's post and comb of token t
// (comb null: HcPreArgs::sinkhorn_apart, pre alone, the same sigmoid as the split's). Returns pre on lanes 0..3.
template <int kMix>
__device__ __forceinline__ float hc_finish_token_warp(double tot, int n, int64_t t, const float* __restrict__ scale,
                                                      const float* __restrict__ base, int iters, float hc_eps,
                                                      float norm_eps, float* __restrict__ mixes, float* post,
                                                      float* comb) {
    constexpr int kHc = MhcConfig::kHc;
    const int lane = threadIdx.x & 31;
    const double ss = __shfl_sync(0xffffffffu, tot, kMix);
    const float rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(float(ss / double(n)), norm_eps)));
    const float m = __fmul_rn(float(tot), rs);
    if (mixes && lane < kMix) mixes[t * kMix + lane] = m;
    if constexpr (kMix == 24) {
        if (comb) {  // block-uniform
            float p, po, cb;
            hc_split_sinkhorn_warp(m, scale, base, iters, hc_eps, p, po, cb);
            if (lane < kHc) post[t * kHc + lane] = po;
            if (lane < kHc * kHc) comb[t * kHc * kHc + lane] = cb;
            return p;
        }
    }
    return __fadd_rn(sigmoid_f32(__fadd_rn(__fmul_rn(m, scale[0]), base[lane & 3])), hc_eps);
}

// The collapse of 8 channels: out = Σ_j pre[j]·X[j], each product rounded and the sum taken left to right (the CPU's
// order); v[j] holds stream j's 8 values.
__device__ __forceinline__ void hc_collapse8(float p0, float p1, float p2, float p3,
                                             const float (&v)[MhcConfig::kHc][8], float (&out)[8]) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        float s = __fmul_rn(p0, v[0][i]);
        s = __fadd_rn(s, __fmul_rn(p1, v[1][i]));
        s = __fadd_rn(s, __fmul_rn(p2, v[2][i]));
        out[i] = __fadd_rn(s, __fmul_rn(p3, v[3][i]));
    }
}

// grid: S·tokens blocks in clusters of S (block rank r of cluster t works on token t); block: kThreads.
// kMix = 24 (hc_pre: split + Sinkhorn) or 4 (hc_head: pre only). kCluster false: S = 1 at compile time (prefill; a
// plain launch, the chunk stride a constant as in the one-block kernel, so its loads batch the same way).
// kPostFirst: the streams x are first computed from the previous sub-block (post_in: hc_post fused in) and stored;
// post_in's post and comb may be this launch's post and comb (each token's are read before its block 0 writes them).
template <typename ActT, int kMix, bool kCluster, bool kPostFirst>
__global__ void __launch_bounds__(MhcConfig::kThreads, 2)  // 2 blocks per SM at prefill: <= 128 registers
    sm90_hc_collapse_kernel(ActT* __restrict__ x, int dim, const float* __restrict__ fn,
                            const float* __restrict__ scale, const float* __restrict__ base, int iters, float hc_eps,
                            float norm_eps, float* __restrict__ mixes, float* __restrict__ pre, float* post,
                            float* comb, ActT* __restrict__ y, HcPostInput post_in) {
    pdl_enter(false);
    namespace cg = cooperative_groups;
    constexpr int kT = MhcConfig::kThreads, kHc = MhcConfig::kHc, kWarps = kT / 32;
    static_assert(kMix + 1 <= 32, "one lane per mix and one for the sum of squares");
    cg::cluster_group cluster = cg::this_cluster();
    const int S = kCluster ? int(cluster.num_blocks()) : 1, rank = kCluster ? int(cluster.block_rank()) : 0;
    const int64_t t = blockIdx.x / S;
    const int n = kHc * dim;
    // Decode (clusters): this block's slices of fn — a weight, written only at load, so allowed before the wait
    // (pdl.cuh) — are requested into L2 while the previous kernel finishes; a decode token's fn read (1.6 MB) is
    // most of this kernel's DRAM time. Prefill blocks share fn through L2 anyway.
    if (kCluster && threadIdx.x < kMix)
        for (int c = rank * kT * 8; c < n; c += S * kT * 8)
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(fn + int64_t(threadIdx.x) * n + c),
                         "r"(uint32_t(min(kT * 8, n - c)) * 4u)
                         : "memory");
    pdl_wait();
    ActT* xt = x + t * n;
    double acc[kMix + 1];  // [0, kMix): fn rows · x; kMix: Σ x²
#pragma unroll
    for (int r = 0; r <= kMix; ++r) acc[r] = 0;
    for (int c = (rank * kT + threadIdx.x) * 8; c < n; c += S * kT * 8) {
        float v[8];
        if constexpr (kPostFirst) {
            const int k = c / dim;  // dim % 8 == 0: a chunk never straddles two streams
            hc_post_chunk<ActT, 8>(post_in, t, k, c - k * dim, dim, v);
            store8(xt + c, v);  // the stream as sm90_hc_post stores it (bf16 RNE in kReference) ...
#pragma unroll
            for (int i = 0; i < 8; ++i) v[i] = to_f32(from_f32<ActT>(v[i]));  // ... and its stored values are used
        } else {
            load8(xt + c, v);
        }
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
    __shared__ double partial[kWarps][kMix + 1];
    __shared__ double block_sum[kMix + 1];
    __shared__ float pre_s[kHc];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int r = 0; r <= kMix; ++r) {
        const double s = warp_sum_f64(acc[r]);
        if (lane == 0) partial[warp][r] = s;
    }
    __syncthreads();
    // lane r of warp 0: mix r (r < kMix) or Σx² (r == kMix), summed over this block's warps in order (with S = 1 the
    // additions of the one-block kernel), then over the cluster's blocks in rank order
    if (warp == 0 && lane <= kMix) {
        double b = 0;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) b += partial[w][lane];
        block_sum[lane] = b;
    }
    if (S > 1) cluster.sync();  // every block's sums are visible cluster-wide
    if (rank == 0 && warp == 0) {
        double tot = 0;
        if (lane <= kMix) {
            if (S == 1) {
                tot = block_sum[lane];
            } else {
                double v[MhcConfig::kMaxCluster];
#pragma unroll
                for (int b = 0; b < MhcConfig::kMaxCluster; ++b)  // loads in flight together, added in rank order
                    v[b] = b < S ? cluster.map_shared_rank(block_sum, b)[lane] : 0.0;
#pragma unroll
                for (int b = 0; b < MhcConfig::kMaxCluster; ++b)
                    if (b < S) tot += v[b];
            }
        }
        const float p = hc_finish_token_warp<kMix>(tot, n, t, scale, base, iters, hc_eps, norm_eps, mixes, post, comb);
        if (lane < kHc) {
            pre_s[lane] = p;
            if (pre) pre[t * kHc + lane] = p;
        }
    }
    if (S > 1) cluster.sync();  // pre is ready in block 0
    else __syncthreads();
    const float* pre0 = S > 1 ? cluster.map_shared_rank(pre_s, 0) : pre_s;
    const float p0 = pre0[0], p1 = pre0[1], p2 = pre0[2], p3 = pre0[3];
    for (int c = (rank * kT + threadIdx.x) * 8; c < dim; c += S * kT * 8) {
        float v[kHc][8], out[8];
#pragma unroll
        for (int j = 0; j < kHc; ++j) load8(xt + j * dim + c, v[j]);
        hc_collapse8(p0, p1, p2, p3, v, out);
        store8(y + t * dim + c, out);  // bf16 store rounds (RNE) in kReference
    }
    if (S > 1) cluster.sync();  // block 0's shared memory stays alive until every block has read pre
}

// grid-stride over tokens · dim/8 chunks.
template <typename ActT>
__global__ void __launch_bounds__(MhcConfig::kThreads)
    sm90_hc_post_kernel(const ActT* __restrict__ a, const ActT* __restrict__ residual, const float* __restrict__ post,
                        const float* __restrict__ comb, int64_t tokens, int dim, ActT* __restrict__ out) {
    pdl_enter();
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
            float o[8];
            hc_post_mix(cm, post[t * kHc + k], k, av, r, o);
            store8(out + (t * kHc + k) * dim + c, o);
        }
    }
}

}  // namespace dsv4::cuda
