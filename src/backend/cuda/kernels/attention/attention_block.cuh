// The tensor-core steps of one 64-candidate online-softmax block, shared by the one-pass decode/prefill attention
// (attention.cuh) and the split-candidate kernel (attention_split.cuh), so that both keep the reference's
// instruction sequence: S = Q · Kᵀ, and O = O · rescale, then O += P · V, on bf16 tensor cores with f32
// accumulation.
#pragma once

#include <cuda_bf16.h>

#include "backend/cuda/common/mma_bf16.cuh"

namespace dsv4::cuda {

// sacc: this warp's S fragment for keys 16·warp .. +15 (2 n-tiles of 8) of the block, rows g and g + 8 of the
// 16-head tile. q_s: bf16 Q [16][kLd]; kv_s: the block's bf16 K=V rows [64][kLd]; kDim channels.
template <int kDim, int kLd>
__device__ __forceinline__ void block_qk(float (&sacc)[2][4], const __nv_bfloat16* q_s, const __nv_bfloat16* kv_s,
                                         int warp) {
#pragma unroll 4
    for (int k0 = 0; k0 < kDim; k0 += 16) {
        uint32_t af[4], bf[4];
        load_a_frag(af, q_s, kLd, 0, k0);
        load_b_frag_nk(bf, kv_s, kLd, warp * 16, k0);
        mma_bf16_16816(sacc[0], af, bf[0], bf[1]);
        mma_bf16_16816(sacc[1], af, bf[2], bf[3]);
    }
}

// acc: this warp's O fragment, rows g and g + 8 of the 16-head tile x channels 128·warp .. +127 (16 n-tiles of 8).
// r0, r1: the rescale factors of rows g and g + 8. p_s: bf16 P [16][kPLd] over the block's kBlock candidates.
// kv_s: the block's bf16 K=V rows [kBlock][kLd].
template <int kBlock, int kPLd, int kLd>
__device__ __forceinline__ void rescale_add_pv(float (&acc)[16][4], float r0, float r1,
                                               const __nv_bfloat16* p_s, const __nv_bfloat16* kv_s, int warp) {
#pragma unroll
    for (int nt = 0; nt < 16; ++nt) {
        acc[nt][0] = __fmul_rn(acc[nt][0], r0), acc[nt][1] = __fmul_rn(acc[nt][1], r0);
        acc[nt][2] = __fmul_rn(acc[nt][2], r1), acc[nt][3] = __fmul_rn(acc[nt][3], r1);
    }
#pragma unroll
    for (int k0 = 0; k0 < kBlock; k0 += 16) {
        uint32_t af[4];
        load_a_frag(af, p_s, kPLd, 0, k0);
#pragma unroll
        for (int nt = 0; nt < 16; nt += 2) {
            uint32_t bf[4];
            load_b_frag_kn(bf, kv_s, kLd, warp * 128 + nt * 8, k0);
            mma_bf16_16816(acc[nt], af, bf[0], bf[1]);
            mma_bf16_16816(acc[nt + 1], af, bf[2], bf[3]);
        }
    }
}

}  // namespace dsv4::cuda
