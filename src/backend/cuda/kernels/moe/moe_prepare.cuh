// The MoE decode path's preparation as device functions, shared by its first launch (sm90_moe_prepare, moe.cu) and
// the launch that routes as well (moe_route.cu): the e4m3 quantisation of x's rows in pair order, and the grouping
// of the T·K picks by expert with the counters of launches 2 and 3 re-armed (moe.cuh, launch 1).
#pragma once

#include "backend/cuda/kernels/moe/moe.cuh"

namespace dsv4::cuda {

// Exclusive block-wide scan of 4 values per thread (256 threads, 1024 entries). Returns the total.
__device__ __forceinline__ int block_scan4(int (&v)[4], int* warp_sums) {
    using Cfg = MoeDecodeConfig;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int s = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int x = v[i];
        v[i] = s;
        s += x;
    }
    int incl = s;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const int o = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += o;
    }
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    int base = 0, total = 0;
    for (int w = 0; w < Cfg::kPrepThreads / 32; ++w) {
        if (w < warp) base += warp_sums[w];
        total += warp_sums[w];
    }
    base += incl - s;
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] += base;
    __syncthreads();
    return total;
}

// 32-element chunks c0 .. c1 − 1 (c0 a multiple of 4: whole 128-blocks) of token tok's row of x, read from row (x's
// row, in global or shared memory), quantised to e4m3 per 128 channels (UE8M0 scale) and stored as f16 values in pair
// order (xq, xs) by `threads` threads of which this is `tid` (a multiple of 32: whole warps, for the quad shuffles).
__device__ __forceinline__ void moe_quantize_chunks(const MoeKernelParams& p, int tok, const __nv_bfloat16* row, int c0,
                                                    int c1, int tid, int threads) {
    for (int base = c0; base < c1; base += threads) {
        const int blk = base + tid;
        const bool active = blk < c1;
        float v[32];
        load32(row + size_t(active ? blk : c0) * 32, v);
        const float s = quant_block128_to_f16(v, p.xq + size_t(tok) * p.D + size_t(blk) * 32, active);
        if (active && (blk & 3) == 0) p.xs[size_t(tok) * (p.D / 128) + blk / 4] = s;
    }
}

// Token tok's whole row by one block of MoeDecodeConfig::kPrepThreads threads.
__device__ __forceinline__ void moe_quantize_row(const MoeKernelParams& p, int tok) {
    moe_quantize_chunks(p, tok, p.x + size_t(tok) * p.D, 0, p.D / 32, int(threadIdx.x), MoeDecodeConfig::kPrepThreads);
}

// The arrival counters of launches 2 and 3 zeroed by `threads` threads of which this is `tid`.
__device__ __forceinline__ void moe_zero_counters(const MoeKernelParams& p, int tid, int threads) {
    for (int i = tid; i < (p.slots + 1) * (p.I / 128); i += threads) p.cnt_up[i] = 0;
    for (int i = tid; i < p.slots + 1; i += threads) p.up_done[i] = 0;
    for (int i = tid; i < p.D / MoeDecodeConfig::kMinDownRows; i += threads) p.cnt_down[i] = 0;
}

// moe_group_picks' lists for one token (T = 1), by one warp once p.idx is visible to it: lane j < K takes pick j. The
// same values moe_group_picks writes (the order of picks inside an expert is free there and pick order here).
__device__ __forceinline__ void moe_group_one_token_warp(const MoeKernelParams& p) {
    const int lane = int(threadIdx.x) & 31, K = p.K;
    const int e = lane < K ? p.idx[lane] : -1;
    const bool valid = lane < K && e >= 0 && e < p.E;
    int below = 0, below_valid = 0, same_before = 0, distinct_below = 0, n_distinct = 0;
    for (int i = 0; i < K; ++i) {
        const int ei = __shfl_sync(0xffffffffu, e, i);
        const bool vi = ei >= 0 && ei < p.E;
        // is pick i the first pick of its expert? (an expert's slot is counted once)
        bool first = vi;
        for (int h = 0; h < i; ++h) first = first && __shfl_sync(0xffffffffu, e, h) != ei;
        below += ei < e;  // the stable sort of `order`: every id, -1 included
        same_before += i < lane && ei == e;
        below_valid += vi && ei < e;
        distinct_below += first && ei < e;
        n_distinct += first;
    }
    int count = 0;  // the expert's picks
    for (int i = 0; i < K; ++i) count += __shfl_sync(0xffffffffu, e, i) == e;
    if (lane < K) p.order[below + same_before] = lane;
    if (valid) p.list[below_valid + same_before] = lane;
    if (valid && same_before == 0) {  // the expert's first pick writes its slot
        p.active_expert[distinct_below] = e;
        p.active_start[distinct_below] = below_valid;
        p.active_count[distinct_below] = count;
    }
    if (lane == 0) {
        *p.n_active = n_distinct;
        if (p.shared_expert) {  // the shared expert: slot n_active, the one token's pick K after the routed ones
            p.active_expert[n_distinct] = -1, p.active_start[n_distinct] = K, p.active_count[n_distinct] = 1;
            p.list[K] = K;
        }
    }
}

// The picks p.idx grouped by expert (counting sort: per-expert lists, the ascending list of active experts, the shared
// expert's slot after them), each token's picks sorted by expert id, and the arrival counters zeroed. One block of
// MoeDecodeConfig::kPrepThreads threads; p.idx must be visible to it.
__device__ __forceinline__ void moe_group_picks(const MoeKernelParams& p) {
    using Cfg = MoeDecodeConfig;
    const int tid = threadIdx.x;
    __shared__ int cnt[Cfg::kMaxExperts], off[Cfg::kMaxExperts], warp_sums[Cfg::kPrepThreads / 32];
    const int picks = p.T * p.K;
    for (int e = tid; e < Cfg::kMaxExperts; e += Cfg::kPrepThreads) cnt[e] = 0;
    __syncthreads();
    for (int i = tid; i < picks; i += Cfg::kPrepThreads) {
        const int e = p.idx[i];
        if (e >= 0 && e < p.E) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    int c[4], f[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        c[i] = cnt[4 * tid + i];
        f[i] = c[i] > 0;
    }
    block_scan4(c, warp_sums);
    const int n_active = block_scan4(f, warp_sums);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int e = 4 * tid + i;
        off[e] = c[i];
        if (e < p.E && cnt[e] > 0) {
            p.active_expert[f[i]] = e;
            p.active_start[f[i]] = c[i];
            p.active_count[f[i]] = cnt[e];
        }
    }
    if (tid == 0) *p.n_active = n_active;
    if (p.shared_expert) {  // the shared expert: slot n_active, every token, picks T·K + t after the routed ones
        if (tid == 0) p.active_expert[n_active] = -1, p.active_start[n_active] = picks, p.active_count[n_active] = p.T;
        for (int t = tid; t < p.T; t += Cfg::kPrepThreads) p.list[picks + t] = picks + t;
    }
    __syncthreads();
    for (int i = tid; i < picks; i += Cfg::kPrepThreads) {
        const int e = p.idx[i];
        if (e >= 0 && e < p.E) p.list[atomicAdd(&off[e], 1)] = i;  // order inside an expert does not matter
    }
    for (int t = tid; t < p.T; t += Cfg::kPrepThreads) {
        int o[Cfg::kMaxK];
        for (int j = 0; j < p.K; ++j) {
            int k = j;
            const int e = p.idx[t * p.K + j];
            for (; k > 0 && p.idx[o[k - 1]] > e; --k) o[k] = o[k - 1];
            o[k] = t * p.K + j;
        }
        for (int j = 0; j < p.K; ++j) p.order[t * p.K + j] = o[j];
    }
    moe_zero_counters(p, tid, Cfg::kPrepThreads);
}

}  // namespace dsv4::cuda
