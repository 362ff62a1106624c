// Hopper tensor-core building blocks shared by the wgmma kernels (gemm_fp8_wgmma, moe_prefill): 2-D TMA tile loads
// through a tensor map (common/tensor_map.h makes them), the shared-memory matrix descriptor of a K-major operand in
// the 128-byte swizzle, and the asynchronous FP8 wgmma with its fences (PTX ISA: "cp.async.bulk.tensor",
// "Matrix Descriptor Format", "wgmma.mma_async").
#pragma once

#include <cuda.h>  // CUtensorMap (types only: tensor maps are encoded through the runtime, no -lcuda)

#include <cstdint>

#include "backend/cuda/common/mbarrier.cuh"

namespace dsv4::cuda {

// 2-D tile copy global -> shared through a tensor map (x = column, y = row of the box's origin); its bytes complete
// on the mbarrier.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::
            "r"(smem_u32(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_u32(bar))
        : "memory");
}

// Descriptor of a K-major operand tile in the 128-byte swizzle: start address >> 4 in bits 0-13, leading byte offset
// >> 4 in bits 16-29 (unused by this layout, 1 by convention), stride byte offset >> 4 in bits 32-45 (1024: 8 rows x
// 128 B), base offset 0 in bits 49-51 (tiles 1024-byte aligned), swizzle mode in bits 62-63 (1 = 128-byte).
__device__ __forceinline__ uint64_t sw128_kmajor_desc(uint32_t addr) {
    return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// Descriptor of an MN-major (N- or M-contiguous, the transposed form) operand in the 128-byte swizzle. An atom is 8
// rows along K of 128 bytes along MN, 16-byte chunk c of row r at chunk c ^ (r % 8): the same bytes a K-major tile of
// those rows holds, so one tile can feed both forms. Leading byte offset: from one atom to the next along MN; stride
// byte offset: from one group of 8 K rows to the next (PTX ISA, "Strides": for MN-major swizzled layouts the leading
// stride goes from the first swizzle-width rows of 16-byte elements to the next).
__device__ __forceinline__ uint64_t sw128_mnmajor_desc(uint32_t addr, uint32_t mn_atom_bytes, uint32_t k_group_bytes) {
    return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((mn_atom_bytes & 0x3FFFF) >> 4) << 16) |
           (uint64_t((k_group_bytes & 0x3FFFF) >> 4) << 32) | (uint64_t(1) << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
// Waits until at most N committed groups of this warpgroup are still in flight.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Generic-proxy shared-memory writes -> visible to the async proxy (wgmma operand reads, TMA).
__device__ __forceinline__ void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Keeps the compiler from moving accesses of the accumulator registers across the asynchronous wgmma region.
template <int N>
__device__ __forceinline__ void fence_accumulators(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_accumulators(int32_t (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

// d[64x8] (=|+=) A[64x32] · B[8x32]ᵀ with A e4m3 in registers and B e4m3 K-major in shared memory; accumulate == 0
// overwrites d. A fragment (PTX ISA, "wgmma register fragments", matrix A for 8-bit types): in warp w of the
// warpgroup, lane (g, t) = (lane / 4, lane % 4) holds a0 = row 16w + g, k 4t..4t+3 (byte i = k 4t+i), a1 = row
// 16w + g + 8, the same k; a2, a3 = the same rows, k 16+4t..16+4t+3. d as in the m64n128 form with N = 8: d0, d1 =
// (row 16w + g, cols 2t, 2t+1), d2, d3 = row 16w + g + 8.
__device__ __forceinline__ void wgmma_m64n8k32_e4m3_rs(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                                       uint32_t a3, uint64_t desc_b, uint32_t accumulate) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %9, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc_b), "r"(accumulate));
}

// d[64x128] (=|+=) A[64x32] · B[128x32]ᵀ, A and B e4m3 K-major in shared memory; accumulate == 0 overwrites d.
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                      uint32_t accumulate) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1;\n"  // scale-d, imm-scale-a/b = 1 (no negation)
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// The 128 f32 accumulator operands of an m64n256 wgmma (%0..%127 in the asm string, d[0..127] as in-out operands),
// shared by its FP8 and bf16 forms.
#define DSV4_WGMMA_D128_REGS                                                                       \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                       \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "             \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "             \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "             \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "             \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "             \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define DSV4_WGMMA_D128_OUTS(d)                                                                                        \
    "+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3]), "+f"((d)[4]), "+f"((d)[5]), "+f"((d)[6]), "+f"((d)[7]),    \
        "+f"((d)[8]), "+f"((d)[9]), "+f"((d)[10]), "+f"((d)[11]), "+f"((d)[12]), "+f"((d)[13]), "+f"((d)[14]),         \
        "+f"((d)[15]), "+f"((d)[16]), "+f"((d)[17]), "+f"((d)[18]), "+f"((d)[19]), "+f"((d)[20]), "+f"((d)[21]),       \
        "+f"((d)[22]), "+f"((d)[23]), "+f"((d)[24]), "+f"((d)[25]), "+f"((d)[26]), "+f"((d)[27]), "+f"((d)[28]),       \
        "+f"((d)[29]), "+f"((d)[30]), "+f"((d)[31]), "+f"((d)[32]), "+f"((d)[33]), "+f"((d)[34]), "+f"((d)[35]),       \
        "+f"((d)[36]), "+f"((d)[37]), "+f"((d)[38]), "+f"((d)[39]), "+f"((d)[40]), "+f"((d)[41]), "+f"((d)[42]),       \
        "+f"((d)[43]), "+f"((d)[44]), "+f"((d)[45]), "+f"((d)[46]), "+f"((d)[47]), "+f"((d)[48]), "+f"((d)[49]),       \
        "+f"((d)[50]), "+f"((d)[51]), "+f"((d)[52]), "+f"((d)[53]), "+f"((d)[54]), "+f"((d)[55]), "+f"((d)[56]),       \
        "+f"((d)[57]), "+f"((d)[58]), "+f"((d)[59]), "+f"((d)[60]), "+f"((d)[61]), "+f"((d)[62]), "+f"((d)[63]),       \
        "+f"((d)[64]), "+f"((d)[65]), "+f"((d)[66]), "+f"((d)[67]), "+f"((d)[68]), "+f"((d)[69]), "+f"((d)[70]),       \
        "+f"((d)[71]), "+f"((d)[72]), "+f"((d)[73]), "+f"((d)[74]), "+f"((d)[75]), "+f"((d)[76]), "+f"((d)[77]),       \
        "+f"((d)[78]), "+f"((d)[79]), "+f"((d)[80]), "+f"((d)[81]), "+f"((d)[82]), "+f"((d)[83]), "+f"((d)[84]),       \
        "+f"((d)[85]), "+f"((d)[86]), "+f"((d)[87]), "+f"((d)[88]), "+f"((d)[89]), "+f"((d)[90]), "+f"((d)[91]),       \
        "+f"((d)[92]), "+f"((d)[93]), "+f"((d)[94]), "+f"((d)[95]), "+f"((d)[96]), "+f"((d)[97]), "+f"((d)[98]),       \
        "+f"((d)[99]), "+f"((d)[100]), "+f"((d)[101]), "+f"((d)[102]), "+f"((d)[103]), "+f"((d)[104]), "+f"((d)[105]), \
        "+f"((d)[106]), "+f"((d)[107]), "+f"((d)[108]), "+f"((d)[109]), "+f"((d)[110]), "+f"((d)[111]),                \
        "+f"((d)[112]), "+f"((d)[113]), "+f"((d)[114]), "+f"((d)[115]), "+f"((d)[116]), "+f"((d)[117]),                \
        "+f"((d)[118]), "+f"((d)[119]), "+f"((d)[120]), "+f"((d)[121]), "+f"((d)[122]), "+f"((d)[123]),                \
        "+f"((d)[124]), "+f"((d)[125]), "+f"((d)[126]), "+f"((d)[127])

// d[64x256] (=|+=) A[64x32] · B[256x32]ᵀ, A and B e4m3 K-major in shared memory; accumulate == 0 overwrites d.
// Fragment as the m64n128 form with j = 0 .. 31.
__device__ __forceinline__ void wgmma_m64n256k32_e4m3(float (&d)[128], uint64_t desc_a, uint64_t desc_b,
                                                      uint32_t accumulate) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 "
        "{" DSV4_WGMMA_D128_REGS
        "}, "
        "%128, %129, p, 1, 1;\n"
        "}\n"
        : DSV4_WGMMA_D128_OUTS(d)
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// d[64x32] (=|+=) A[64x16] · B[32x16]ᵀ, bf16 A and B K-major in shared memory, f32 d (fragment as above). On the
// H200 a k16 step sums exactly as mma.sync.m16n8k16 does: the prefill attention built on these two forms is
// bit-identical to the mma.sync one-pass kernel (SparseAttnPrefill test).
__device__ __forceinline__ void wgmma_m64n32k16_bf16(float (&d)[16], uint64_t desc_a, uint64_t desc_b,
                                                     uint32_t accumulate) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "%16, %17, p, 1, 1, 0, 0;\n"  // no negation; A K-major, B K-major
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// d[64x256] (=|+=) A[64x16] · B[16x256], bf16 A K-major and B N-major (N contiguous: the transposed form, bf16
// only) in shared memory, f32 d.
__device__ __forceinline__ void wgmma_m64n256k16_bf16_bt(float (&d)[128], uint64_t desc_a, uint64_t desc_b,
                                                         uint32_t accumulate) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{" DSV4_WGMMA_D128_REGS
        "}, "
        "%128, %129, p, 1, 1, 0, 1;\n"  // no negation; A K-major, B N-major (transposed)
        "}\n"
        : DSV4_WGMMA_D128_OUTS(d)
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// d[64x64] (=|+=) A[64x32] · B[64x32]ᵀ, s8 A and B K-major in shared memory, s32 d (exact integer sums; fragment
// as above). Integer wgmma has no negation or transpose operands.
__device__ __forceinline__ void wgmma_m64n64k32_s8(int32_t (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                   uint32_t accumulate) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, p;\n"
        "}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
          "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
          "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
          "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31])
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

}  // namespace dsv4::cuda
