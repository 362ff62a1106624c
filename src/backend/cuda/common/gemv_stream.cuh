// The register streaming shared by the decode GEMVs (gemm_fp8/gemv_fp8.cu, embed_head/gemv_bf16.cu): each warp walks
// its run of K blocks [kb_begin, kb_end) with S register sets (a set holds one K block of the warp's 16 rows), the
// first S requested before the programmatic wait; a step computes its block and refills its set with the block S
// further on. The K splits of a 16-row tile are warps of one block, summed through shared memory in split order.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/common/ld_stream.cuh"

namespace dsv4::cuda {

// A warp's share of the block: lane (g, t), row tile rt of RT (rows row0 + g and row0 + g + 8, clamped to the last
// row for loads; `tile` false for the last block's tiles past N, which then own no K blocks) and K split ks of KS
// (its run of K blocks [kb_begin, kb_end) of the K / block_k).
template <int RT, int KS>
struct GemvWarp {
    int warp, lane, g, t, rt, ks, row0, r_lo, r_hi, kb_begin, kb_end;
    bool tile;
    __device__ __forceinline__ GemvWarp(int N, int K, int block_k) {
        warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31, g = lane >> 2, t = lane & 3;
        rt = warp % RT, ks = warp / RT;
        row0 = (int(blockIdx.x) * RT + rt) * 16;
        tile = row0 < N;
        r_lo = min(row0 + g, N - 1), r_hi = min(row0 + g + 8, N - 1);
        const int KB = K / block_k, per = (KB + KS - 1) / KS;
        kb_begin = min(KB, ks * per), kb_end = tile ? min(KB, kb_begin + per) : kb_begin;
    }
};

// Requests the first S K blocks of the warp's run into r[0..S-1], before the programmatic wait: load(kb, regs, ld)
// with ld = EarlyLoad16 (ld_stream.cuh: the loads the wait cannot overtake); the walk's refills pass StreamLoad16.
template <int S, class Regs, class Load>
__device__ __forceinline__ void gemv_first_loads(Regs (&r)[S], int kb_begin, int kb_end, Load&& load) {
#pragma unroll
    for (int i = 0; i < S; ++i)
        if (kb_begin + i < kb_end) load(kb_begin + i, r[i], EarlyLoad16{});
}

// Every K block of the run in order, block kb from set (kb − kb_begin) mod S: step(kb, regs), which refills regs.
template <int S, class Regs, class Step>
__device__ __forceinline__ void gemv_walk(Regs (&r)[S], int kb_begin, int kb_end, Step&& step) {
    for (int kb = kb_begin; kb < kb_end; kb += S) {
#pragma unroll
        for (int i = 0; i < S; ++i)
            if (kb + i < kb_end) step(kb + i, r[i]);
    }
}

// float4 slots of the K-split sums in shared memory: KS − 1 splits x RT row tiles x NT token tiles x 32 lanes.
template <int KS, int RT, int NT>
constexpr int kGemvSplitSlots = KS > 1 ? (KS - 1) * RT* NT * 32 : 1;

// Adds the K splits of each row tile in split order into the warps of split 0, whose y then hold the totals. Warps of
// the other splits get false and must not write y. Every thread of the block must call it (a block barrier).
template <int KS, int RT, int NT>
__device__ __forceinline__ bool gemv_sum_k_splits(float4* red, int ks, int rt, int lane, float (&y)[NT][4]) {
    if constexpr (KS > 1) {
        if (ks > 0) {
#pragma unroll
            for (int n = 0; n < NT; ++n)
                red[(((ks - 1) * RT + rt) * NT + n) * 32 + lane] = make_float4(y[n][0], y[n][1], y[n][2], y[n][3]);
        }
        __syncthreads();
        if (ks > 0) return false;
#pragma unroll
        for (int s = 1; s < KS; ++s) {
#pragma unroll
            for (int n = 0; n < NT; ++n) {
                const float4 v = red[(((s - 1) * RT + rt) * NT + n) * 32 + lane];
                y[n][0] = __fadd_rn(y[n][0], v.x), y[n][1] = __fadd_rn(y[n][1], v.y);
                y[n][2] = __fadd_rn(y[n][2], v.z), y[n][3] = __fadd_rn(y[n][3], v.w);
            }
        }
    }
    return true;
}

}  // namespace dsv4::cuda
