// The decode collapse spread over many blocks per token, with the sub-block's RMSNorm in the same launch
// (HcPreArgs::wide; sm_90). grid (P, T) x 256 threads, P = hc_wide_blocks(dim) = 4·dim / 1,024: block b of token t
// owns the flattened stream values [1,024·b, 1,024·b + 1,024), 4 consecutive per thread.
//   1. Before the programmatic wait each thread loads its 4 columns of the 24 fn rows into registers (fn is a weight:
//      pdl.cuh), so a token's fn (1.6 MB at V4-Flash) is read while the previous kernel finishes, spread over P SMs.
//   2. After it: the previous sub-block's hc_post for those values (HcPostFirst, stored into x as sm90_hc_post stores
//      them) or the values loaded; their 24 fn dot products and their sum of squares in f64; the block's 25 sums (a
//      warp reduce-scatter, then the 8 warps in order) into partials[t][b].
//   3. The token's last block (a ticket on counters[t], which it leaves zero) adds the P partials in block order,
//      finishes the mixes on warp 0 (hc_finish_token_warp: pre and the mixes; the split + Sinkhorn runs apart),
//      collapses the whole row into x_out and normalises it with rmsnorm_block_row (norm_rope.cuh): y, codes and
//      scales are the bits sm90_rmsnorm gives on x_out.
// Why not the cluster collapse (mhc.cuh) at decode: it reads a token's fn on at most 8 SMs, reduces its 25 f64 sums
// with five shuffle rounds each, and leaves the RMSNorm to a launch of its own on the step's chain
// (docs/kernels/cuda-backend.md, "The decode collapse spread wide").
// The sums are f64 as in every collapse kernel (the f32 results agree with the CPU's but for rare last-bit cases);
// their order is this kernel's own, so a mix may also differ from the cluster kernel's in a last bit.
#pragma once

#include "backend/cuda/common/ld_stream.cuh"
#include "backend/cuda/kernels/mhc/mhc.cuh"
#include "backend/cuda/kernels/norm_rope/norm_rope.cuh"

namespace dsv4::cuda {

struct MhcWideConfig {
    static constexpr int kThreads = NormRopeConfig::kNormThreads;  // the last block holds the row as sm90_rmsnorm
    static constexpr int kVals = 4;                                 // flattened stream values per thread
    static constexpr int kBlockVals = kThreads * kVals;
    static constexpr int kMix = 24, kSums = kMix + 1;  // the fn dot products, then the sum of squares
    static constexpr int kMaxBlocks = 4 * NormRopeConfig::kNormThreads * 8 * NormRopeConfig::kNormMaxChunks /
                                      kBlockVals;  // 32: dim <= 8,192, the RMSNorm's limit
};

// Device side of HcWideNorm (mhc.h).
struct HcWideParams {
    int32_t* counters;      // [T], zero before the launch, left zero
    double* partials;       // [T, P, kSums]
    const void* norm_w;     // [D], WeightT
    float eps;
    void* y;                // [T, D], ActT
    uint8_t* codes;         // [T, D] or null
    float* scales;          // [T, D / 128]
};

// c ? a : b in PTX: a C++ select between two elements of one array may be folded into a load from a selected
// address, which puts the array in local memory (ptxas: 256 bytes of stack for warp_reduce_scatter32's).
__device__ __forceinline__ double select_f64(bool c, double a, double b) {
    double r;
    asm("{\n\t.reg .pred p;\n\tsetp.ne.u32 p, %3, 0;\n\tselp.f64 %0, %1, %2, p;\n\t}"
        : "=d"(r)
        : "d"(a), "d"(b), "r"(unsigned(c)));
    return r;
}

// One exchange round of warp_reduce_scatter32 (below) at offset O, then the next; O a template argument so that every
// index into s is a constant (a loop bound from an unrolled outer loop was only partly unrolled: s went to local
// memory).
template <int O>
__device__ __forceinline__ void reduce_scatter_round(double (&s)[32], int lane) {
    const bool upper = (lane & O) != 0;
#pragma unroll
    for (int i = 0; i < O; ++i) {
        const double send = select_f64(upper, s[i], s[i + O]);
        const double keep = select_f64(upper, s[i + O], s[i]);
        s[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
    }
    if constexpr (O > 1) reduce_scatter_round<O / 2>(s, lane);
}

// Warp sums of 32 f64 values, scattered: lane L returns the warp's sum of s[L]. Five exchange rounds of 16, 8, 4, 2
// and 1 values (31 shuffles, where a warp_sum per value takes 5): in the round of offset o each lane keeps the half of
// its remaining values that its lane bit o selects and adds its partner's copy of that half. Each sum's order is a
// fixed tree over the lanes.
__device__ __forceinline__ double warp_reduce_scatter32(double (&s)[32]) {
    reduce_scatter_round<16>(s, int(threadIdx.x & 31));
    return s[0];
}

// 8 activations through L2 (values other blocks of this launch stored: the L1 is not coherent across SMs).
__device__ __forceinline__ void load8_l2(const __nv_bfloat16* p, float (&v)[8]) {
    bf16x8_to_f32(__ldcg(reinterpret_cast<const uint4*>(p)), v);
}
__device__ __forceinline__ void load8_l2(const float* p, float (&v)[8]) {
    const float4 a = __ldcg(reinterpret_cast<const float4*>(p)), b = __ldcg(reinterpret_cast<const float4*>(p + 4));
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

// x: the streams [T, 4, D] (written with kPostFirst, then read back by the last block: not restrict).
template <typename ActT, typename WeightT, bool kPostFirst>
__global__ void __launch_bounds__(MhcWideConfig::kThreads, 1)
    sm90_hc_collapse_wide_kernel(ActT* x, int dim, const float* __restrict__ fn, const float* __restrict__ scale,
                                 const float* __restrict__ base, float hc_eps, float norm_eps,
                                 float* __restrict__ mixes, float* __restrict__ pre, ActT* __restrict__ x_out,
                                 HcPostInput post_in, HcWideParams wp) {
    pdl_enter(false);
    using Cfg = MhcWideConfig;
    constexpr int kT = Cfg::kThreads, kV = Cfg::kVals, kMix = Cfg::kMix, kS = Cfg::kSums, kHc = MhcConfig::kHc;
    constexpr int kC = NormRopeConfig::kNormMaxChunks;
    const int P = int(gridDim.x), b = int(blockIdx.x);
    const int64_t t = blockIdx.y;
    const int n = kHc * dim;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // this thread's first value; past n (the last block of a width that is not a multiple of 256) a thread holds
    // zeros and loads and stores nothing
    const int c = b * Cfg::kBlockVals + int(threadIdx.x) * kV;
    const bool live = c < n;  // n % 32 == 0: a thread's 4 values are all live or all past n
    // fn's columns by loads the wait cannot overtake (ld_stream.cuh, ld_early16)
    float f[kMix][kV];
#pragma unroll
    for (int r = 0; r < kMix; ++r) {
        const uint4 u = live ? ld_early16(fn + int64_t(r) * n + c) : make_uint4(0, 0, 0, 0);
        f[r][0] = __uint_as_float(u.x), f[r][1] = __uint_as_float(u.y), f[r][2] = __uint_as_float(u.z),
        f[r][3] = __uint_as_float(u.w);
    }
    pdl_wait();  // every thread waits here, before any return

    // 2. this thread's values and its share of the 25 sums
    ActT* xt = x + t * n;
    float v[kV] = {0, 0, 0, 0};
    if (live) {
        if constexpr (kPostFirst) {
            const int k = c / dim;  // dim % 4 == 0: a thread's values never straddle two streams
            hc_post_chunk<ActT, kV>(post_in, t, k, c - k * dim, dim, v);
            store4(xt + c, v);  // the stream as sm90_hc_post stores it (bf16 RNE in kReference) ...
#pragma unroll
            for (int i = 0; i < kV; ++i) v[i] = to_f32(from_f32<ActT>(v[i]));  // ... and its stored values are used
        } else {
            load4(xt + c, v);
        }
    }
    double s[32];  // [0, kMix): fn rows · values; kMix: Σ values²; the rest zero (the reduce-scatter's 32)
#pragma unroll
    for (int r = 0; r < kMix; ++r) {
        double acc = 0;
#pragma unroll
        for (int i = 0; i < kV; ++i) acc += double(f[r][i]) * double(v[i]);
        s[r] = acc;
    }
    s[kMix] = 0;
#pragma unroll
    for (int i = 0; i < kV; ++i) s[kMix] += double(v[i]) * double(v[i]);
#pragma unroll
    for (int r = kS; r < 32; ++r) s[r] = 0;
    __shared__ double warp_sums[kT / 32][32];
    __shared__ double part_s[Cfg::kMaxBlocks * kS];
    __shared__ float pre_s[kHc];
    __shared__ int last_block;
    warp_sums[warp][lane] = warp_reduce_scatter32(s);
    __syncthreads();
    if (threadIdx.x < kS) {
        double sum = 0;
#pragma unroll
        for (int w = 0; w < kT / 32; ++w) sum += warp_sums[w][threadIdx.x];
        wp.partials[(t * P + b) * kS + threadIdx.x] = sum;
    }
    // the token's last block to arrive goes on (each thread's stores fenced before the count, as the MoE kernels'
    // arrival counters)
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        const bool last = atomicAdd(wp.counters + t, 1) == P - 1;
        if (last) wp.counters[t] = 0;  // every block of the token has counted: zero for the next launch
        last_block = last;
    }
    __syncthreads();
    if (!last_block) return;
    __threadfence();

    // 3. the last block: this thread's chunks of the row (sm90_rmsnorm's layout) in the 4 streams, and the partials
    float xs[kC][kHc][8];
#pragma unroll
    for (int j = 0; j < kC; ++j) {
        const int ch = (int(threadIdx.x) + j * kT) * 8;
        if (ch < dim)
#pragma unroll
            for (int k = 0; k < kHc; ++k) load8_l2(xt + k * dim + ch, xs[j][k]);
    }
    const double* pt = wp.partials + t * P * kS;
    for (int i = int(threadIdx.x); i < P * kS; i += kT) part_s[i] = __ldcg(pt + i);
    __syncthreads();
    if (warp == 0) {  // lane r < 25: sum r over the blocks in block order
        double tot = 0;
        if (lane < kS)
            for (int q = 0; q < P; ++q) tot += part_s[q * kS + lane];
        const float p =
            hc_finish_token_warp<kMix>(tot, n, t, scale, base, 1, hc_eps, norm_eps, mixes, nullptr, nullptr);
        if (lane < kHc) {
            pre_s[lane] = p;
            if (pre) pre[t * kHc + lane] = p;
        }
    }
    __syncthreads();
    const float p0 = pre_s[0], p1 = pre_s[1], p2 = pre_s[2], p3 = pre_s[3];
    ActT* xo = x_out + t * dim;
    float y[kC][8];
#pragma unroll
    for (int j = 0; j < kC; ++j) {
        const int ch = (int(threadIdx.x) + j * kT) * 8;
        if (ch < dim) {
            float out[8];
            hc_collapse8(p0, p1, p2, p3, xs[j], out);
            store8(xo + ch, out);  // bf16 store rounds (RNE) in kReference; the norm reads the stored values
#pragma unroll
            for (int i = 0; i < 8; ++i) y[j][i] = to_f32(from_f32<ActT>(out[i]));
        }
    }
    rmsnorm_block_row<ActT, WeightT>(y, dim, static_cast<const WeightT*>(wp.norm_w), wp.eps,
                                     static_cast<ActT*>(wp.y) + t * dim, wp.codes ? wp.codes + t * dim : nullptr,
                                     wp.codes ? wp.scales + t * (dim / 128) : nullptr);
}

}  // namespace dsv4::cuda
