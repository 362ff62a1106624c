// The decode kernel's repacked MXFP4 layout (MoeWeightFormat::kMXFP4Repacked) and its e2m1 -> e4m3 conversion,
// as plain C++ shared by the kernel and the host (tests/unit/moe_repacked checks every code, position and block
// exponent spread against the scalar encoders). docs/kernels/moe.md, "Repacked MXFP4".
//
// Why: converting shipped MXFP4 to the MMA's f16 costs ~20 instructions per 8 weights (four shift-and-mask pairs
// and a mul.f16x2 per pair) plus ~50 per 128-block and row for the scales (the largest of four UE8M0 bytes, the
// spread of each, two powers of two), and that loop is what limits the decode kernel. Permuting bits once, when the
// experts are uploaded, makes it 7 + 4 per 8 weights and ~10 per 128-block and row: the 3-bit magnitude codes index
// an 8-byte table of e4m3 values with the 32-block's scale folded in (prmt), every sign lands on its byte's bit 7
// with one shift and a mask, and the scale bytes arrive as (largest exponent, spreads).
//
// Weights. One 32-bit word holds elements v0..v7 of a row (shipped: nibble j = element j, bit 4j+3 its sign, bits
// 4j..4j+2 its magnitude code). Repacked: magnitude nibble k holds the code of element kMag[k] = (0, 4, 1, 5, 2, 6,
// 3, 7)[k]; sign slot k (bit 4k+3) holds the sign of element kSign[k] = (0, 2, 4, 6, 1, 3, 5, 7)[k]. Words stay where
// they were; only bits inside each word move (mxfp4_unpack_word undoes it).
//
// Scales. Per row and 128-column group, the 4 UE8M0 bytes e_0..e_3 of its 32-blocks become
// (e_max, delta_0 | delta_1 << 4, delta_2 | delta_3 << 4, 0) with e_max = max e_b and delta_b = e_max - e_b. The repack
// is refused (nothing is changed; the caller keeps the shipped layout and kernel) unless every delta <= 14 and every
// e_max is in 7..254: then every weight is exactly (e4m3 table byte) · 2^(e_max - 133), a normal f32 scale.
//
// Conversion of a repacked word r with the table (tl, th) of its 32-block (byte c = e4m3(e2m1(c) · 2^(6 - delta))):
//   m  = r & 0x77777777                       magnitude codes, sign slots cleared (prmt reads bit 3 as a mode bit)
//   lo = prmt(tl, th, m)       | ((r << 4) & 0x80808080)   bytes e4m3(v0), e4m3(v4), e4m3(v1), e4m3(v5)
//   hi = prmt(tl, th, m >> 16) | ( r       & 0x80808080)   bytes e4m3(v2), e4m3(v6), e4m3(v3), e4m3(v7)
// Byte j of lo takes its sign from bit 8j+3 of r (sign slot 2j: elements 0, 4, 1, 5), byte j of hi from bit 8j+7
// (slot 2j+1: elements 2, 6, 3, 7). The byte pairs (v0, v4), (v1, v5), (v2, v6), (v3, v7) are the f16 pairs
// P(m, 3), P(m, 2), P(m, 1), P(m, 0) of the decode kernel's pair order (moe.cuh), so activations keep their layout.
// e2m1(c) · 2^(6 - delta) is an e4m3 value for delta <= 14 (moe_prefill.md, "FP4 -> FP8: exactness").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "dsv4/status.h"

#if defined(__CUDACC__)
#define DSV4_MX_HD __host__ __device__ __forceinline__
#else
#define DSV4_MX_HD inline
#endif

namespace dsv4::cuda {

// prmt.b32 in its default mode (PTX ISA): byte i of the result is byte (sel >> 4i) & 7 of {b, a} (a = bytes 0-3),
// or, when bit 3 of that selector nibble is set, the selected byte's msb replicated. The host emulation is what
// the unit test runs. Inline PTX, not __byte_perm: that intrinsic takes 3-bit selectors (CUDA Math API) and drops
// the sign-replicate bit, which the prefill kernel's sign extraction needs.
DSV4_MX_HD uint32_t prmt_b32(uint32_t a, uint32_t b, uint32_t sel) {
#if defined(__CUDA_ARCH__)
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
#else
    const uint64_t src = uint64_t(a) | (uint64_t(b) << 32);
    uint32_t d = 0;
    for (int i = 0; i < 4; ++i) {
        const uint32_t s = (sel >> (4 * i)) & 0xf;
        uint32_t byte = uint32_t(src >> (8 * (s & 7))) & 0xff;
        if (s & 8) byte = (byte & 0x80) ? 0xff : 0x00;
        d |= byte << (8 * i);
    }
    return d;
#endif
}

// The repacked word of a shipped one, and back (header comment).
DSV4_MX_HD uint32_t mxfp4_repack_word(uint32_t w) {
    constexpr int kMag[8] = {0, 4, 1, 5, 2, 6, 3, 7}, kSign[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    uint32_t r = 0;
    for (int k = 0; k < 8; ++k) {
        r |= ((w >> (4 * kMag[k])) & 7u) << (4 * k);
        r |= ((w >> (4 * kSign[k] + 3)) & 1u) << (4 * k + 3);
    }
    return r;
}
DSV4_MX_HD uint32_t mxfp4_unpack_word(uint32_t r) {
    constexpr int kMag[8] = {0, 4, 1, 5, 2, 6, 3, 7}, kSign[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    uint32_t w = 0;
    for (int k = 0; k < 8; ++k) {
        w |= ((r >> (4 * k)) & 7u) << (4 * kMag[k]);
        w |= ((r >> (4 * k + 3)) & 1u) << (4 * kSign[k] + 3);
    }
    return w;
}

// The 8-byte table (lo = bytes 0-3, hi = bytes 4-7) of e4m3(e2m1(c) · 2^(6 - delta)) for magnitude codes c = 0..7,
// delta >= 0. delta = 0: 0, 32, 64, 96, 128, 192, 256, 384 = 0x00 60 68 6c 70 74 78 7c. Down to delta = 11 every
// non-zero entry stays a normal e4m3 number, so the table is delta_0's with delta subtracted from each non-zero
// byte's exponent field (no borrow: the smallest, 0x60, is 12 << 3). Below that the entries are subnormal or zero:
// the exact values for delta 12-14, RNE for 15-18 (ties to even), zero from 19 (6 · 2^-13 < half of 2^-9).
DSV4_MX_HD void e4m3_table_for_delta(int delta, uint32_t& lo, uint32_t& hi) {
    if (delta <= 11) {
        lo = 0x6c686000u - uint32_t(delta) * 0x08080800u;
        hi = 0x7c787470u - uint32_t(delta) * 0x08080808u;
        return;
    }
    switch (delta) {
        case 12: lo = 0x0c080400u, hi = 0x1c181410u; return;  // c · 2^-7 ... : 0, 4, 8, 12, 16, 20, 24, 28 (c << 2)
        case 13: lo = 0x06040200u, hi = 0x14100c08u; return;
        case 14: lo = 0x03020100u, hi = 0x0c080604u; return;
        case 15: lo = 0x02010000u, hi = 0x06040302u; return;  // 0.5, 1.5 units of 2^-9 round to 0, 2
        case 16: lo = 0x01000000u, hi = 0x03020201u; return;
        case 17: lo = 0x00000000u, hi = 0x02010100u; return;
        case 18: lo = 0x00000000u, hi = 0x01000000u; return;
        default: lo = 0u, hi = 0u; return;
    }
}

// A repacked word's 8 e4m3 bytes (header comment): lo = (v0, v4, v1, v5), hi = (v2, v6, v3, v7).
DSV4_MX_HD void mxfp4_repacked_to_e4m3(uint32_t r, uint32_t tl, uint32_t th, uint32_t& lo, uint32_t& hi) {
    const uint32_t m = r & 0x77777777u;
    lo = prmt_b32(tl, th, m) | ((r << 4) & 0x80808080u);
    hi = prmt_b32(tl, th, m >> 16) | (r & 0x80808080u);
}

// The scale word of one row's 128-column group (4 UE8M0 bytes, byte b = 32-block b) in the repacked layout, or
// false when the group cannot be repacked exactly (a spread above 14, e_max outside 7..254).
DSV4_MX_HD bool mxfp4_repack_scale_group(uint32_t e, uint32_t& out) {
    uint32_t e_max = 0;
    for (int b = 0; b < 4; ++b) e_max = ((e >> (8 * b)) & 0xff) > e_max ? (e >> (8 * b)) & 0xff : e_max;
    if (e_max < 7 || e_max > 254) return false;
    out = e_max;
    for (int b = 0; b < 4; ++b) {
        const uint32_t delta = e_max - ((e >> (8 * b)) & 0xff);
        if (delta > 14) return false;
        out |= delta << (8 + 4 * b);
    }
    return true;
}

// Repacks one MXFP4 matrix [rows, cols] in place (packed: rows · cols/2 bytes, scales: rows · cols/32), or leaves
// both untouched and says why. cols must be a multiple of 128.
inline Status mxfp4_repack_matrix(uint8_t* packed, uint8_t* scales, int64_t rows, int64_t cols) {
    if (!packed || !scales || rows < 1 || cols < 128 || cols % 128 != 0)
        return invalid_argument("mxfp4_repack_matrix: need data and cols a positive multiple of 128, got rows " +
                                std::to_string(rows) + ", cols " + std::to_string(cols));
    const int64_t groups = rows * (cols / 128);
    auto group_word = [&](int64_t g) {
        return uint32_t(scales[4 * g]) | uint32_t(scales[4 * g + 1]) << 8 | uint32_t(scales[4 * g + 2]) << 16 |
               uint32_t(scales[4 * g + 3]) << 24;
    };
    uint32_t out = 0;
    for (int64_t g = 0; g < groups; ++g)
        if (!mxfp4_repack_scale_group(group_word(g), out))
            return invalid_argument("mxfp4_repack_matrix: row " + std::to_string(g / (cols / 128)) + ", columns " +
                                    std::to_string(128 * (g % (cols / 128))) +
                                    "+: block exponents spread over more than 14 binades (or outside 2^-120..2^127);"
                                    " the repacked layout would not be exact, keep the shipped one");
    for (int64_t g = 0; g < groups; ++g) {
        mxfp4_repack_scale_group(group_word(g), out);
        for (int b = 0; b < 4; ++b) scales[4 * g + b] = uint8_t(out >> (8 * b));
    }
    const size_t words = size_t(rows) * size_t(cols) / 8;
    for (size_t i = 0; i < words; ++i) {
        uint8_t* q = packed + 4 * i;
        const uint32_t w = uint32_t(q[0]) | uint32_t(q[1]) << 8 | uint32_t(q[2]) << 16 | uint32_t(q[3]) << 24;
        const uint32_t r = mxfp4_repack_word(w);
        for (int b = 0; b < 4; ++b) q[b] = uint8_t(r >> (8 * b));
    }
    return Status::ok();
}

}  // namespace dsv4::cuda
