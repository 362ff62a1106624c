// bf16 tensor-core building blocks shared by the attention, indexer and wo_a kernels (sm_80+ mma.sync m16n8k16,
// f32 accumulators), its f16 twin for the MoE decode kernels and the FP8 decode GEMV (e4m3 / e2m1 values as f16),
// and the f32-as-three-bf16 split that lets f32 mode use the same tensor-core path.
//
// Fragment layouts (PTX ISA, "mma.m16n8k16", g = lane / 4, q = lane % 4):
//   A 16x16 row-major: {a0,a1} = A[g][2q..2q+1], {a2,a3} = A[g+8][2q..], {a4,a5} = A[g][2q+8..], {a6,a7} =
//   A[g+8][2q+8..] B 16x8 "col":      {b0,b1} = B[2q..2q+1][g], {b2,b3} = B[2q+8..][g] C 16x8 f32:        c0,c1 =
//   C[g][2q..2q+1],   c2,c3 = C[g+8][2q..2q+1]
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace dsv4::cuda {

// D = A·B + D (bf16 inputs, f32 accumulators). Each product is exact in f32; the order of the additions inside
// the instruction is the hardware's.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The same with f16 inputs. Not volatile: the MoE decode kernels' schedules were measured with ptxas free to move it.
__device__ __forceinline__ void mma_f16_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                              uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Four 8x8 b16 matrices; lane L gives the address of row L % 8 of matrix L / 8.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
    const unsigned s = unsigned(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
// The same with each matrix transposed (B operands stored [k][n] row-major, i.e. n contiguous).
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void* p) {
    const unsigned s = unsigned(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

// A fragment (16 rows x 16 k) of a row-major bf16 tile with row stride `ld` elements, rows r0.., k from k0.
__device__ __forceinline__ void load_a_frag(uint32_t (&a)[4], const __nv_bfloat16* tile, int ld, int r0, int k0) {
    const int lane = threadIdx.x & 31;
    ldsm_x4(a, tile + (r0 + (lane & 15)) * ld + k0 + (lane >> 4) * 8);
}
// B fragments of two n-tiles (n0..n0+15) x 16 k from a tile stored [n][k] (k contiguous, stride ld):
// b[0], b[1] = n-tile n0; b[2], b[3] = n-tile n0 + 8.
__device__ __forceinline__ void load_b_frag_nk(uint32_t (&b)[4], const __nv_bfloat16* tile, int ld, int n0, int k0) {
    const int lane = threadIdx.x & 31;
    ldsm_x4(b, tile + (n0 + (lane & 7) + (lane >> 4) * 8) * ld + k0 + ((lane >> 3) & 1) * 8);
}
// B fragments of one n-tile (n0..n0+7) x 32 k from a tile stored [n][k]: b[0], b[1] = k0..k0+15; b[2], b[3] =
// k0+16..k0+31.
__device__ __forceinline__ void load_b_frag_nk_k32(uint32_t (&b)[4], const __nv_bfloat16* tile, int ld, int n0,
                                                   int k0) {
    const int lane = threadIdx.x & 31;
    ldsm_x4(b, tile + (n0 + (lane & 7)) * ld + k0 + (lane >> 3) * 8);
}
// The same from a tile stored [k][n] (n contiguous, stride ld), through the transposing ldmatrix.
__device__ __forceinline__ void load_b_frag_kn(uint32_t (&b)[4], const __nv_bfloat16* tile, int ld, int n0, int k0) {
    const int lane = threadIdx.x & 31;
    ldsm_x4_trans(b, tile + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + n0 + (lane >> 4) * 8);
}

// f32 x = hi + mid + lo with three bf16 terms (each the bf16 rounding of what is left): 24 mantissa bits need at
// most three 8-bit pieces, so the split is exact for every normal f32 whose lo term does not underflow. A bf16
// weight times each piece is exact in f32, which makes three bf16 MMAs an f32 GEMM up to the summation order.
__device__ __forceinline__ void split_bf16x3(float x, __nv_bfloat16& hi, __nv_bfloat16& mid, __nv_bfloat16& lo) {
    hi = __float2bfloat16_rn(x);
    const float r1 = x - __bfloat162float(hi);
    mid = __float2bfloat16_rn(r1);
    lo = __float2bfloat16_rn(r1 - __bfloat162float(mid));
}

}  // namespace dsv4::cuda
