// The repacked MXFP4 layout of the decode kernel (src/backend/cuda/kernels/moe/mxfp4_repacked.h), on the host with
// the kernel's own functions (prmt emulated as the PTX ISA defines its default mode). Checked against the scalar
// formats (core/formats.h, core/quant_formats.h), which know nothing of the repack:
//  - every weight a repacked matrix feeds the kernel — table byte with its sign, times 2^(e_max - 133) — equals the
//    shipped matrix's value (mxfp4_dequant_row), for every code, position and exponent spread 0..14;
//  - the tables are the RNE e4m3 of e2m1(c) · 2^(6 - delta) for every delta the kernel can index;
//  - the word permutation is a bijection; matrices that cannot be repacked exactly are refused and left untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cuda/kernels/moe/mxfp4_repacked.h"
#include "core/formats.h"
#include "core/quant_formats.h"

namespace dsv4::cuda {
namespace {

TEST(Mxfp4Repacked, PrmtEmulationFollowsTheIsa) {
    // bytes 0-3 from a, 4-7 from b; selector nibble bit 3: the selected byte's msb replicated
    EXPECT_EQ(prmt_b32(0x33221100u, 0x77665544u, 0x7531u), 0x77553311u);
    EXPECT_EQ(prmt_b32(0x33221100u, 0xf7665544u, 0x0000fu), 0x000000ffu);  // byte 7 = 0xf7: msb set
    EXPECT_EQ(prmt_b32(0x33221100u, 0x77665544u, 0x0000fu), 0x00000000u);
}

TEST(Mxfp4Repacked, WordPermutationIsABijection) {
    std::mt19937_64 rng(1);
    for (int i = 0; i < 100000; ++i) {
        const uint32_t w = uint32_t(rng());
        EXPECT_EQ(mxfp4_unpack_word(mxfp4_repack_word(w)), w);
        EXPECT_EQ(mxfp4_repack_word(mxfp4_unpack_word(w)), w);
    }
    for (int bit = 0; bit < 32; ++bit)  // each bit goes to exactly one place
        EXPECT_EQ(__builtin_popcount(mxfp4_repack_word(1u << bit)), 1) << "bit " << bit;
}

TEST(Mxfp4Repacked, TablesAreTheRoundedScaledMagnitudes) {
    for (int delta = 0; delta <= 40; ++delta) {
        uint32_t lo = 0, hi = 0;
        e4m3_table_for_delta(delta, lo, hi);
        for (int c = 0; c < 8; ++c) {
            const uint8_t got = uint8_t(((c < 4 ? lo : hi) >> (8 * (c % 4))) & 0xff);
            const uint8_t want = f32_to_e4m3(std::ldexp(e2m1_to_f32(uint8_t(c)), 6 - delta));
            EXPECT_EQ(got, want) << "delta " << delta << " code " << c;
            if (delta <= 14) {  // exact
                EXPECT_EQ(e4m3_to_f32(got), std::ldexp(e2m1_to_f32(uint8_t(c)), 6 - delta));
            }
        }
    }
}

// Element j of a repacked word's conversion, as the kernel's f16 pair order reads it: lo = (v0, v4, v1, v5),
// hi = (v2, v6, v3, v7).
float converted_element(uint32_t lo, uint32_t hi, int j) {
    static const int kByteOf[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // element -> byte of (lo, hi) as one 8-byte string
    const int b = kByteOf[j];
    return e4m3_to_f32(uint8_t(((b < 4 ? lo : hi) >> (8 * (b % 4))) & 0xff));
}

TEST(Mxfp4Repacked, ConversionGivesEveryCodeAtEveryPosition) {
    std::mt19937_64 rng(2);
    for (int delta = 0; delta <= 14; ++delta) {
        uint32_t tl = 0, th = 0;
        e4m3_table_for_delta(delta, tl, th);
        for (int pos = 0; pos < 8; ++pos)
            for (uint32_t code = 0; code < 16; ++code)
                for (int trial = 0; trial < 8; ++trial) {
                    uint32_t w = uint32_t(rng());  // shipped word: nibble j = element j
                    w = (w & ~(0xfu << (4 * pos))) | (code << (4 * pos));
                    uint32_t lo = 0, hi = 0;
                    mxfp4_repacked_to_e4m3(mxfp4_repack_word(w), tl, th, lo, hi);
                    for (int j = 0; j < 8; ++j) {
                        const float want = std::ldexp(e2m1_to_f32(uint8_t((w >> (4 * j)) & 0xf)), 6 - delta);
                        const float got = converted_element(lo, hi, j);
                        ASSERT_EQ(got, want) << "delta " << delta << " word " << std::hex << w << " element " << j;
                        ASSERT_EQ(std::signbit(got), std::signbit(want)) << "the sign of a zero, element " << j;
                    }
                }
    }
}

// What the kernel computes from a repacked matrix, element by element.
std::vector<float> repacked_values(const std::vector<uint8_t>& packed, const std::vector<uint8_t>& scales,
                                   int64_t rows, int64_t cols) {
    std::vector<float> out(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t g = 0; g < cols / 128; ++g) {
            const uint8_t* s = &scales[size_t(r * (cols / 32) + 4 * g)];
            const int e_max = s[0];
            for (int b = 0; b < 4; ++b) {
                const int delta = (s[1 + b / 2] >> (4 * (b % 2))) & 0xf;
                uint32_t tl = 0, th = 0;
                e4m3_table_for_delta(delta, tl, th);
                for (int wd = 0; wd < 4; ++wd) {
                    const int64_t col0 = g * 128 + b * 32 + wd * 8;
                    const uint8_t* q = &packed[size_t((r * cols + col0) / 2)];
                    const uint32_t word = uint32_t(q[0]) | uint32_t(q[1]) << 8 | uint32_t(q[2]) << 16 |
                                          uint32_t(q[3]) << 24;
                    uint32_t lo = 0, hi = 0;
                    mxfp4_repacked_to_e4m3(word, tl, th, lo, hi);
                    for (int j = 0; j < 8; ++j)
                        out[size_t(r * cols + col0 + j)] = converted_element(lo, hi, j) * std::ldexp(1.0f, e_max - 133);
                }
            }
        }
    return out;
}

TEST(Mxfp4Repacked, RepackedMatrixGivesTheShippedValues) {
    std::mt19937_64 rng(3);
    const int64_t rows = 48, cols = 512;
    std::vector<uint8_t> packed(size_t(rows * cols / 2)), scales(size_t(rows * cols / 32));
    for (auto& b : packed) b = uint8_t(rng());
    // block exponents spread over up to 14 binades within a 128-group, around 2^-10
    for (size_t i = 0; i < scales.size(); ++i) scales[i] = uint8_t(110 + rng() % 15);
    std::vector<float> want(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
        mxfp4_dequant_row(&packed[size_t(r * cols / 2)], &scales[size_t(r * cols / 32)], cols, &want[size_t(r * cols)]);
    ASSERT_TRUE(mxfp4_repack_matrix(packed.data(), scales.data(), rows, cols).is_ok());
    const std::vector<float> got = repacked_values(packed, scales, rows, cols);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "element " << i;
}

TEST(Mxfp4Repacked, RefusesWhatItCannotRepackExactlyAndChangesNothing) {
    const int64_t rows = 2, cols = 256;
    std::vector<uint8_t> packed(size_t(rows * cols / 2), 0x5a), scales(size_t(rows * cols / 32), 120);
    auto try_with = [&](size_t at, uint8_t value) {
        std::vector<uint8_t> p = packed, s = scales;
        s[at] = value;
        const std::vector<uint8_t> p0 = p, s0 = s;
        const Status st = mxfp4_repack_matrix(p.data(), s.data(), rows, cols);
        EXPECT_FALSE(st.is_ok()) << "scale " << int(value) << " at " << at;
        EXPECT_EQ(p, p0);
        EXPECT_EQ(s, s0);
        return st;
    };
    const Status spread = try_with(13, 105);  // 15 binades below its group's 120, in row 1
    EXPECT_NE(spread.message().find("row 1"), std::string::npos) << spread.message();
    EXPECT_FALSE(try_with(3, 255).is_ok());  // NaN scale
    std::vector<uint8_t> tiny(scales.size(), 3);  // e_max 3: 2^(e_max - 133) would be subnormal
    EXPECT_FALSE(mxfp4_repack_matrix(packed.data(), tiny.data(), rows, cols).is_ok());
    EXPECT_FALSE(mxfp4_repack_matrix(packed.data(), scales.data(), rows, 96).is_ok());  // not a multiple of 128
    EXPECT_FALSE(mxfp4_repack_matrix(nullptr, scales.data(), rows, cols).is_ok());
    // a spread of exactly 14 is fine
    std::vector<uint8_t> s = scales;
    s[1] = 106;
    EXPECT_TRUE(mxfp4_repack_matrix(packed.data(), s.data(), rows, cols).is_ok());
}

}  // namespace
}  // namespace dsv4::cuda
