// The tensor-core steps of one 64-candidate online-softmax block, shared by the one-pass decode/prefill attention
// (attention.cuh) and the split-candidate kernel (attention_split.cuh), so that both keep the reference's
// instruction sequence: S = Q · Kᵀ, and O = O · rescale, then O += P · V, on bf16 tensor cores with f32
// accumulation.
#pragma once

#include <cuda_bf16.h>

#include "backend/cuda/common/mma_bf16.cuh"

namespace dsv4::cuda {

// What one launch of a block-wise attention kernel computes over its candidate blocks (attention_split.cuh,
// attention_wgmma.cuh): each block's max logit per head only; the partial (running max, sum, unnormalised o) of a
// chunk started from -inf, or from the running max the one-pass kernel has at the chunk's first block (the max of
// the earlier blocks' maxima); or the whole list, normalised and written as the output.
enum SplitPass : int { kSplitBlockMax = 0, kSplitPartial = 1, kSplitPartialFromPrefix = 2, kWholeList = 3 };

// sacc: this warp's S fragment for keys kNT·8·warp .. + kNT·8 − 1 (kNT n-tiles of 8: 2 for 4-warp blocks, 1 for
// 8-warp ones) of the block, rows g and g + 8 of the 16-head tile. q_s: bf16 Q [16][kLd]; kv_s: the block's bf16
// K=V rows [64][kLd]; kDim channels. Every logit accumulates its kDim / 16 MMAs in k order either way, so both
// widths give the same bits.
template <int kDim, int kLd, int kNT = 2>
__device__ __forceinline__ void block_qk(float (&sacc)[kNT][4], const __nv_bfloat16* q_s,
                                         const __nv_bfloat16* kv_s, int warp) {
    static_assert(kNT == 1 || kNT == 2, "one or two n-tiles of keys per warp");
    if constexpr (kNT == 2) {
#pragma unroll 4
        for (int k0 = 0; k0 < kDim; k0 += 16) {
            uint32_t af[4], bf[4];
            load_a_frag(af, q_s, kLd, 0, k0);
            load_b_frag_nk(bf, kv_s, kLd, warp * 16, k0);
            mma_bf16_16816(sacc[0], af, bf[0], bf[1]);
            mma_bf16_16816(sacc[1], af, bf[2], bf[3]);
        }
    } else {
#pragma unroll 4
        for (int k0 = 0; k0 < kDim; k0 += 32) {
            uint32_t a0[4], a1[4], bf[4];
            load_a_frag(a0, q_s, kLd, 0, k0);
            load_a_frag(a1, q_s, kLd, 0, k0 + 16);
            load_b_frag_nk_k32(bf, kv_s, kLd, warp * 8, k0);
            mma_bf16_16816(sacc[0], a0, bf[0], bf[1]);
            mma_bf16_16816(sacc[0], a1, bf[2], bf[3]);
        }
    }
}

// acc: this warp's O fragment, rows g and g + 8 of the 16-head tile x channels kNT·8·warp .. + kNT·8 − 1 (kNT
// n-tiles of 8: 16 for 4-warp blocks, 8 for 8-warp ones). r0, r1: the rescale factors of rows g and g + 8. p_s: bf16
// P [16][kPLd] over the block's kBlock candidates. kv_s: the block's bf16 K=V rows [kBlock][kLd]. Every output
// accumulates its kBlock / 16 MMAs in k order either way.
template <int kBlock, int kPLd, int kLd, int kNT = 16>
__device__ __forceinline__ void rescale_add_pv(float (&acc)[kNT][4], float r0, float r1,
                                               const __nv_bfloat16* p_s, const __nv_bfloat16* kv_s, int warp) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
        acc[nt][0] = __fmul_rn(acc[nt][0], r0), acc[nt][1] = __fmul_rn(acc[nt][1], r0);
        acc[nt][2] = __fmul_rn(acc[nt][2], r1), acc[nt][3] = __fmul_rn(acc[nt][3], r1);
    }
#pragma unroll
    for (int k0 = 0; k0 < kBlock; k0 += 16) {
        uint32_t af[4];
        load_a_frag(af, p_s, kPLd, 0, k0);
#pragma unroll
        for (int nt = 0; nt < kNT; nt += 2) {
            uint32_t bf[4];
            load_b_frag_kn(bf, kv_s, kLd, warp * kNT * 8 + nt * 8, k0);
            mma_bf16_16816(acc[nt], af, bf[0], bf[1]);
            mma_bf16_16816(acc[nt + 1], af, bf[2], bf[3]);
        }
    }
}

}  // namespace dsv4::cuda
