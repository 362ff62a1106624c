// Device-side scalar numerics shared by the kernels, each written to give the same bits as the CPU reference
// (core/formats.h, backend/cpu): IEEE-rounded f32 arithmetic without FMA contraction where the CPU rounds twice
// (dsv4's CPU build compiles in ISO C++ mode, which does not contract a*b+c), bf16 RNE, UE8M0 scales, e4m3 (RNE,
// saturating) and e2m1 (RNE on the grid, saturating at 6).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

// Activations: bf16 in reference numerics, f32 in f32 mode. Loads/stores through these two overloads.
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(float v) { return v; }
template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }

// expf as the CPU reference gets it from glibc (correctly rounded in practice): the f64 exp rounded to f32 is the
// same value but for double-rounding cases far rarer than any bf16 output's resolution. CUDA's expf is 2 ulp.
__device__ __forceinline__ float exp_f32(float x) { return float(exp(double(x))); }

// e^x for the attention softmax: 2^(x·log2 e) on the SFU (PTX ex2.approx.ftz: 2 ulp, results below 2^-126 flushed
// to 0), ~4 instructions against ~47 for exp_f32. Sparse attention's output is class F of the official tolerances
// (../shared/data/official_ops: 3e-3 rel_l2, no bitwise criterion; the TileLang sparse-attention kernels DeepSeek
// points to for V3.2, tile-ai/tilelang examples/deepseek_v32, take exp2 of pre-scaled scores the same way); a relative
// error of a few 1e-7 in P flips one bf16 rounding of P in ~2^15, far inside it. Every attention kernel uses this one
// function, so the kernels still agree with each other bit for bit.
__device__ __forceinline__ float exp_softmax(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(__fmul_rn(x, 1.4426950408889634f)));
    return y;
}

__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// Two e4m3 codes (bits 0-7 and 8-15 of v) to the f16x2 of their values (low half from bits 0-7), exact.
__device__ __forceinline__ uint32_t e4m3x2_f16x2(uint32_t v) {
    uint32_t d;
    asm("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, lo;\n\t}" : "=r"(d) : "r"(v));
    return d;
}
// The same for bits 16-31.
__device__ __forceinline__ uint32_t e4m3x2_f16x2_hi(uint32_t v) {
    uint32_t d;
    asm("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, hi;\n\t}" : "=r"(d) : "r"(v));
    return d;
}

// The reverse: the f16x2 v (two values that are e4m3 numbers) to two e4m3 codes in bits 0-7 (low half) and 8-15,
// exact for such values (rn, saturating).
__device__ __forceinline__ uint32_t f16x2_e4m3x2(uint32_t v) {
    unsigned short d;
    asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(d) : "r"(v));
    return d;
}

// 2^(byte-127); byte 0 is the subnormal 2^-127, byte 255 NaN (as core/formats.h e8m0_to_f32).
__device__ __forceinline__ float e8m0_to_f32(uint8_t b) {
    if (b == 0) return __uint_as_float(0x00400000u);
    if (b == 0xff) return __uint_as_float(0x7fc00000u);
    return __uint_as_float(uint32_t(b) << 23);
}

// 1 / e8m0_to_f32(b) = 2^(127-b), exact for every byte b <= 254 (2^127 down to the subnormal 2^-127). A quotient
// x / 2^k and the product x · 2^-k are the same real number, and both IEEE operations round it once: __fmul_rn(x,
// e8m0_inverse(b)) equals __fdiv_rn(x, e8m0_to_f32(b)) bit for bit, at a fraction of the instructions.
__device__ __forceinline__ float e8m0_inverse(uint8_t b) {
    const int e = 127 - int(b);
    return e >= -126 ? __uint_as_float(uint32_t(e + 127) << 23) : __uint_as_float(0x00400000u);
}

// ceil(log2(max(amax, floor) / max_code)) with the division rounded in f32 (quant_formats.cpp
// ue8m0_exponent_for). The quotient is a positive normal f32 for every floor the quantisers use.
__device__ __forceinline__ int ue8m0_exponent_for(float amax, float amax_floor, float max_code) {
    const float x = __fdiv_rn(fmaxf(amax, amax_floor), max_code);
    const uint32_t bits = __float_as_uint(x);
    const int e = int((bits >> 23) & 0xff) - 127;
    return (bits & 0x7fffff) ? e + 1 : e;
}

// 2^e for e in [-127, 127] as f32 (exact; e = -127 is subnormal).
__device__ __forceinline__ float exp2_int(int e) {
    return e >= -126 ? __uint_as_float(uint32_t(e + 127) << 23) : __uint_as_float(0x00400000u);
}

// e4m3fn code of v (RNE, saturating at ±448: the reference clamps first, so saturation equals the clamp).
__device__ __forceinline__ uint8_t f32_to_e4m3(float v) {
    return uint8_t(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}
__device__ __forceinline__ float e4m3_to_f32(uint8_t c) {
    __nv_fp8_e4m3 f;
    f.__x = c;
    return float(f);
}

// e2m1 code (bit 3 = sign, kept for -0) by the midpoints of core/formats.cpp f32_to_e2m1; ties to the even code.
__device__ __forceinline__ uint8_t f32_to_e2m1(float x) {
    if (x != x) return 0;
    const uint8_t sign = (__float_as_uint(x) >> 31) ? 8 : 0;
    const float a = fabsf(x);
    uint8_t code;
    if (a <= 0.25f) code = 0;
    else if (a < 0.75f) code = 1;
    else if (a <= 1.25f) code = 2;
    else if (a < 1.75f) code = 3;
    else if (a <= 2.5f) code = 4;
    else if (a < 3.5f) code = 5;
    else if (a <= 5.0f) code = 6;
    else code = 7;
    return sign | code;
}
__device__ __forceinline__ float e2m1_to_f32(uint8_t code) {
    // Magnitudes 0, 0.5 for codes 0-1; (1 + m/2)·2^(e-1) for codes 2-7 (e = code>>1, m = code&1). Arithmetic, not
    // a table: a run-time-indexed local array would live in local memory.
    const uint32_t m = code & 7;
    const float mag = m < 2 ? 0.5f * float(m) : __uint_as_float((((m >> 1) + 126u) << 23) | ((m & 1u) << 22));
    return (code & 8) ? -mag : mag;
}

// 8 consecutive activations as f32 from one 16-byte (bf16) or two 16-byte (f32) loads. Pointers 16-byte aligned.
// 8 values given as bf16 bits (uint4, value 2i in the low half of word i: memory order) as f32.
__device__ __forceinline__ void bf16x8_to_f32(uint4 u, float (&v)[8]) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        v[2 * i] = __uint_as_float(w[i] << 16);
        v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float (&v)[8]) {
    bf16x8_to_f32(*reinterpret_cast<const uint4*>(p), v);
}
__device__ __forceinline__ void load8(const float* p, float (&v)[8]) {
    const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
// 4 consecutive activations as f32 from one 8-byte (bf16) or one 16-byte (f32) load; pointers 8- / 16-byte aligned.
__device__ __forceinline__ void load4(const __nv_bfloat16* p, float (&v)[4]) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    v[0] = __uint_as_float(u.x << 16), v[1] = __uint_as_float(u.x & 0xffff0000u);
    v[2] = __uint_as_float(u.y << 16), v[3] = __uint_as_float(u.y & 0xffff0000u);
}
__device__ __forceinline__ void load4(const float* p, float (&v)[4]) {
    const float4 a = *reinterpret_cast<const float4*>(p);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
}
// One 32-element quantisation block of bf16 activations as f32 (four 16-byte loads, all issued before any use).
__device__ __forceinline__ void load32(const __nv_bfloat16* p, float (&v)[32]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float f[8];
        load8(p + 8 * i, f);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[8 * i + j] = f[j];
    }
}
__device__ __forceinline__ void store8(__nv_bfloat16* p, const float (&v)[8]) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
        w[i] = *reinterpret_cast<const uint32_t*>(&h);
    }
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}
__device__ __forceinline__ void store8(float* p, const float (&v)[8]) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    *reinterpret_cast<float4*>(p + 4) = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ void store4(__nv_bfloat16* p, const float (&v)[4]) {
    const __nv_bfloat162 a = __floats2bfloat162_rn(v[0], v[1]), b = __floats2bfloat162_rn(v[2], v[3]);
    *reinterpret_cast<uint2*>(p) =
        make_uint2(*reinterpret_cast<const uint32_t*>(&a), *reinterpret_cast<const uint32_t*>(&b));
}
__device__ __forceinline__ void store4(float* p, const float (&v)[4]) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}

}  // namespace dsv4::cuda
