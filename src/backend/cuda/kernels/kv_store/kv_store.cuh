// Device side of the kv_store family: the compact row formats of kv_store.h, shared by the pack/unpack kernels and
// by the attention and indexer kernels that read packed pools.
//
// Packing recovers the per-block exponent the way act_quant chose it (amax → UE8M0 with the same floor). For a row
// that holds bf16(q·s) values (q e4m3 / e2m1, s = 2^k) the recovered s' is s, or s/2 when the block's largest code
// is the smallest the quantiser can leave as a block maximum (224 for e4m3, 3 for e2m1); every code of such a
// block is then at most that and 2q is again a code, so q·s = (2q)·s' and the values round-trip exactly. The floors
// keep s' >= s/2 >= the smallest scale the quantiser itself emits, so no code underflows.
#pragma once

#include <cuda_fp16.h>

#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/kernels/kv_store/kv_store.h"

namespace dsv4::cuda {

struct KvStoreConfig {
    static constexpr int kKvDim = 512, kKvCodes = 448, kKvBlock = 64;
    static constexpr int kKeyDim = 128, kKeyBlock = 32;
    static constexpr float kKvAmaxFloor = 1e-4f;  // act_quant's floor (MODEL_SPEC §7.1)
    static constexpr float kE4m3Max = 448.0f;
    static constexpr float kE2m1Max = 6.0f;
    static constexpr int kThreads = 256;
};

// UE8M0 byte of a block whose largest magnitude is amax (the quantiser's formula, its floor included).
__device__ __forceinline__ uint8_t kv_scale_byte(float amax) {
    return uint8_t(ue8m0_exponent_for(amax, KvStoreConfig::kKvAmaxFloor, KvStoreConfig::kE4m3Max) + 127);
}
__device__ __forceinline__ uint8_t key_scale_byte(float amax) {
    return uint8_t(ue8m0_exponent_for(amax, KvStoreConfig::kE2m1Max * __uint_as_float(0x00800000u),
                                      KvStoreConfig::kE2m1Max) + 127);
}

// Largest |v| of the `lanes` adjacent lanes (an aligned group) holding one quantisation block.
template <int kLanes>
__device__ __forceinline__ float group_amax(const float (&v)[8]) {
    float m = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) m = fmaxf(m, fabsf(v[i]));
#pragma unroll
    for (int o = 1; o < kLanes; o <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    return m;
}

// Pack of one 8-channel chunk c (channels 8c..8c+7, bf16 bits `raw`) of a K=V row into its 584-byte pool row
// `out` (kReference): e4m3 codes and, from the chunk starting its block, the UE8M0 byte for c < 56; the bf16 bits
// as they are for the rope chunks c >= 56 (chunk 56 also writes the zero byte 455). The block amax is a butterfly
// over the 8 aligned lanes holding chunks 8k..8k+7 (lane i of the group = chunk 8k+i), so every lane of the warp
// calls this; out == nullptr: the lane's row is skipped after the shuffles (a skipped row never leaves a shuffle
// half-populated).
__device__ __forceinline__ void kv_pack_ref_chunk(uint4 raw, int c, uint8_t* out) {
    float v[8];
    bf16x8_to_f32(raw, v);
    const float amax = group_amax<KvStoreConfig::kKvBlock / 8>(v);  // rope lanes (c >= 56) form their own group
    if (out == nullptr) return;
    if (c < KvStoreConfig::kKvCodes / 8) {
        const uint8_t sb = kv_scale_byte(amax);
        const float inv = e8m0_inverse(sb);  // v / scale, exactly (numerics.cuh)
        uint32_t w[2] = {0, 0};
#pragma unroll
        for (int e = 0; e < 8; ++e) w[e / 4] |= uint32_t(f32_to_e4m3(__fmul_rn(v[e], inv))) << (8 * (e % 4));
        *reinterpret_cast<uint2*>(out + 8 * c) = make_uint2(w[0], w[1]);
        if (c % 8 == 0) out[kKvFp8ScaleOffset + c / 8] = sb;
    } else {
        const int r = c - KvStoreConfig::kKvCodes / 8;
        if (r == 0) out[kKvFp8ScaleOffset + 7] = 0;
        uint2* dst = reinterpret_cast<uint2*>(out + kKvFp8RopeOffset + 16 * r);
        dst[0] = make_uint2(raw.x, raw.y);
        dst[1] = make_uint2(raw.z, raw.w);
    }
}

// Pack of one 8-channel chunk c < 16 of an indexer key into its 68-byte pool row `out` (kReference): 8 e2m1
// nibbles and, from the chunk starting its 32-channel block, the UE8M0 byte. Block amax over 4 aligned lanes (lane
// i of the group = chunk 4k+i); every lane of the warp calls this, out == nullptr skips the stores.
__device__ __forceinline__ void key_pack_ref_chunk(uint4 raw, int c, uint8_t* out) {
    float v[8];
    bf16x8_to_f32(raw, v);
    const float amax = group_amax<KvStoreConfig::kKeyBlock / 8>(v);
    if (out == nullptr) return;
    const uint8_t sb = key_scale_byte(amax);
    const float inv = e8m0_inverse(sb);  // v / scale, exactly (numerics.cuh)
    uint32_t w = 0;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        // -0 stays -0 (code 8): the quotient keeps the sign and f32_to_e2m1 takes it from the sign bit
        w |= uint32_t(f32_to_e2m1(fminf(fmaxf(__fmul_rn(v[e], inv), -KvStoreConfig::kE2m1Max),
                                        KvStoreConfig::kE2m1Max)))
             << (4 * e);
    }
    *reinterpret_cast<uint32_t*>(out + 4 * c) = w;
    if (c % 4 == 0) out[kKeyFp4ScaleOffset + c / 4] = sb;
}

// 8 e2m1 codes (nibble i of the word, low nibble first = even channel) times the block scale.
__device__ __forceinline__ void key_decode8(uint32_t codes, uint8_t scale_byte, float (&v)[8]) {
    const float s = e8m0_to_f32(scale_byte);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = __fmul_rn(e2m1_to_f32(uint8_t((codes >> (4 * i)) & 15u)), s);
}

// 8 channels as the bf16 bit patterns packed in a uint4 (the layout of an unpacked row, for shared-memory tiles).
__device__ __forceinline__ uint4 pack_bf16x8(const float (&v)[8]) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
        w[i] = *reinterpret_cast<const uint32_t*>(&h);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// 8 e4m3 codes (byte i of the 8-byte word = channel i) times the block scale 2^(scale_byte - 127) as 8 bf16 bit
// patterns (pack_bf16x8's layout): the f32 product of the exact code value and the scale, rounded to bf16, which is
// exact (e4m3 has 3 mantissa bits, bf16 7). e4m3 -> f16 (cvt, two codes at a time) -> f32 are exact conversions:
// ~6 instructions per pair, where a code-by-code conversion through __nv_fp8_e4m3 took ~25.
__device__ __forceinline__ uint4 kv_decode8_bf16(uint2 codes, uint8_t scale_byte) {
    const float s = e8m0_to_f32(scale_byte);
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const uint32_t word = i < 2 ? codes.x : codes.y;
        const uint32_t h = (i & 1) ? e4m3x2_f16x2_hi(word) : e4m3x2_f16x2(word);
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
        const __nv_bfloat162 b = __floats2bfloat162_rn(__fmul_rn(f.x, s), __fmul_rn(f.y, s));
        w[i] = *reinterpret_cast<const uint32_t*>(&b);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// Channels 8c..8c+7 of the packed K=V row at `row` (8-byte aligned) as bf16 bits: e4m3 codes · scale for c < 56,
// the stored bf16 rope channels for c >= 56.
__device__ __forceinline__ uint4 kv_packed_chunk(const uint8_t* row, int c) {
    if (c < KvStoreConfig::kKvCodes / 8) {
        return kv_decode8_bf16(*reinterpret_cast<const uint2*>(row + 8 * c), row[kKvFp8ScaleOffset + c / 8]);
    }
    const uint2* r = reinterpret_cast<const uint2*>(row + kKvFp8RopeOffset + 16 * (c - KvStoreConfig::kKvCodes / 8));
    const uint2 a = r[0], b = r[1];
    return make_uint4(a.x, a.y, b.x, b.y);
}

// Channels 8c..8c+7 (c < 16) of the packed indexer key at `row` (4-byte aligned) as bf16 bits.
__device__ __forceinline__ uint4 key_packed_chunk(const uint8_t* row, int c) {
    float v[8];
    key_decode8(*reinterpret_cast<const uint32_t*>(row + 4 * c), row[kKeyFp4ScaleOffset + c / 4], v);
    return pack_bf16x8(v);
}

}  // namespace dsv4::cuda
