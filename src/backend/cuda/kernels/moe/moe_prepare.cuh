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

// Token tok's row of x quantised to e4m3 per 128 channels (UE8M0 scale), stored as f16 values in pair order (xq, xs).
// One block of MoeDecodeConfig::kPrepThreads threads.
__device__ __forceinline__ void moe_quantize_row(const MoeKernelParams& p, int tok) {
    using Cfg = MoeDecodeConfig;
    const int tid = threadIdx.x, nblk = p.D / 32;
    for (int base = 0; base < nblk; base += Cfg::kPrepThreads) {
        const int blk = base + tid;
        const bool active = blk < nblk;
        float v[32];
        const __nv_bfloat16* src = p.x + size_t(tok) * p.D + size_t(active ? blk : 0) * 32;
        load32(src, v);
        const float s = quant_block128_to_f16(v, p.xq + size_t(tok) * p.D + size_t(blk) * 32, active);
        if (active && (blk & 3) == 0) p.xs[size_t(tok) * (p.D / 128) + blk / 4] = s;
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
    for (int i = tid; i < (p.slots + 1) * (p.I / 128); i += Cfg::kPrepThreads) p.cnt_up[i] = 0;
    for (int i = tid; i < p.slots + 1; i += Cfg::kPrepThreads) p.up_done[i] = 0;
    for (int i = tid; i < p.D / Cfg::kMinDownRows; i += Cfg::kPrepThreads) p.cnt_down[i] = 0;
}

}  // namespace dsv4::cuda
