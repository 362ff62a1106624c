// Packed layouts: nibble order, hand-computed encodings, encode of exactly representable data reproducing the
// same bytes (pack -> unpack -> pack), error bounds on random data, and the lossless MXFP4 -> FP8 re-encode.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/formats.h"
#include "core/quant_formats.h"

namespace dsv4 {
namespace {

const float kE2m1Grid[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};

TEST(Fp4Packing, LowNibbleIsEvenElement) {
    const std::vector<uint8_t> codes = {1, 2, 3, 4, 0xf, 0x8};
    std::vector<uint8_t> packed(3);
    fp4_pack(codes, packed);
    EXPECT_EQ(packed[0], 0x21);
    EXPECT_EQ(packed[1], 0x43);
    EXPECT_EQ(packed[2], 0x8f);
    std::vector<uint8_t> back(6);
    fp4_unpack(packed, back);
    EXPECT_EQ(back, codes);
    const uint8_t byte = 0x71;
    EXPECT_EQ(fp4_code_at(&byte, 0), 1);
    EXPECT_EQ(fp4_code_at(&byte, 1), 7);
}

TEST(CeilLog2, PowersAndNeighbours) {
    EXPECT_EQ(ceil_log2(1.0f), 0);
    EXPECT_EQ(ceil_log2(1.0000001f), 1);
    EXPECT_EQ(ceil_log2(0.75f), 0);
    EXPECT_EQ(ceil_log2(0.5f), -1);
    EXPECT_EQ(ceil_log2(std::ldexp(1.0f, -149)), -149);
    EXPECT_EQ(ceil_log2(std::ldexp(3.0f, -149)), -147);
    EXPECT_EQ(ue8m0_exponent_for(448.0f, 1e-4f, 448.0f), 0);
    EXPECT_EQ(ue8m0_exponent_for(449.0f, 1e-4f, 448.0f), 1);
    EXPECT_EQ(ue8m0_exponent_for(0.0f, 1e-4f, 448.0f), -22);  // 1e-4/448 = 2.23e-7, 2^-22 = 2.38e-7
}

TEST(Mxfp4, HandComputedRow) {
    // One group of 32: 0.5*2 = 1, 6*2 = 12 in the first byte, the rest zero; scale 2^1 = 0x80.
    std::vector<uint8_t> packed(16, 0), scales = {0x80};
    packed[0] = 0x71;
    packed[15] = 0xf0;  // element 31 = code 15 = -6 -> -12
    std::vector<float> out(32);
    mxfp4_dequant_row(packed.data(), scales.data(), 32, out.data());
    EXPECT_EQ(out[0], 1.0f);
    EXPECT_EQ(out[1], 12.0f);
    EXPECT_EQ(out[2], 0.0f);
    EXPECT_EQ(out[30], 0.0f);
    EXPECT_EQ(out[31], -12.0f);

    // Encoding: amax 6 -> exponent 0 (byte 127); amax 6.5 -> exponent 1 (byte 128).
    std::vector<float> w(32, 0.0f);
    w[0] = 6.0f;
    w[1] = -1.5f;
    w[2] = 0.74f;  // -> 0.5
    auto t = mxfp4_encode(w, 1, 32);
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    EXPECT_EQ(t->scales[0], 127);
    EXPECT_EQ(t->packed[0], 0xb7);  // low: code 7 (6), high: code 11 (-1.5)
    EXPECT_EQ(t->packed[1], 0x01);  // element 2 -> code 1 (0.5)
    w[0] = 6.5f;
    t = mxfp4_encode(w, 1, 32);
    ASSERT_TRUE(t.is_ok());
    EXPECT_EQ(t->scales[0], 128);
    EXPECT_EQ(t->packed[0], 0xa5);  // 6.5/2 = 3.25 -> 3 (code 5); -1.5/2 = -0.75 ties to -1 (code 10)
    EXPECT_EQ(t->packed[1], 0x01);  // 0.74/2 = 0.37 -> 0.5 (code 1)
}

// Random MXFP4 bytes whose groups each hold a magnitude-4 or -6 code, so the encoder must choose the same scale.
struct RandomMxfp4 {
    std::vector<uint8_t> packed, scales;
};
RandomMxfp4 random_mxfp4(int64_t rows, int64_t cols, int scale_lo, int scale_hi, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> code(0, 15), big(6, 7), scale(scale_lo, scale_hi), coin(0, 1);
    std::vector<uint8_t> codes(rows * cols);
    for (auto& c : codes) c = static_cast<uint8_t>(code(rng));
    RandomMxfp4 m;
    m.scales.resize(rows * cols / 32);
    for (size_t g = 0; g < m.scales.size(); ++g) {
        m.scales[g] = static_cast<uint8_t>(scale(rng));
        codes[g * 32 + (rng() % 32)] = static_cast<uint8_t>(big(rng) | (coin(rng) ? 8 : 0));
    }
    m.packed.resize(rows * cols / 2);
    fp4_pack(codes, m.packed);
    return m;
}

TEST(Mxfp4, DecodeEncodeReproducesBytes) {
    const int64_t rows = 7, cols = 96;
    const RandomMxfp4 m = random_mxfp4(rows, cols, 100, 140, 5);
    std::vector<float> w(rows * cols);
    ASSERT_TRUE(mxfp4_decode(m.packed, m.scales, rows, cols, w).is_ok());
    // The decoded values follow the definition: code value * 2^(scale-127).
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
            const uint8_t byte = m.packed[(r * cols + c) / 2];
            const int code = (c % 2) ? byte >> 4 : byte & 15;
            const float want = kE2m1Grid[code] * static_cast<float>(std::pow(2.0, m.scales[r * cols / 32 + c / 32] - 127));
            ASSERT_EQ(w[r * cols + c], want) << r << "," << c;
        }
    }
    auto t = mxfp4_encode(w, rows, cols);
    ASSERT_TRUE(t.is_ok());
    EXPECT_EQ(t->packed, m.packed);
    EXPECT_EQ(t->scales, m.scales);
}

// Grid spacing of e2m1 around magnitude v (for error bounds).
float e2m1_half_step(float v) { return v < 2 ? 0.25f : (v < 4 ? 0.5f : 1.0f); }

TEST(Mxfp4, GaussianErrorWithinHalfStep) {
    std::mt19937 rng(9);
    std::normal_distribution<float> n(0.0f, 0.05f);
    const int64_t rows = 16, cols = 256;
    std::vector<float> w(rows * cols);
    for (auto& x : w) x = n(rng);
    auto t = mxfp4_encode(w, rows, cols);
    ASSERT_TRUE(t.is_ok());
    std::vector<float> y(w.size());
    ASSERT_TRUE(mxfp4_decode(t->packed, t->scales, rows, cols, y).is_ok());
    for (size_t i = 0; i < w.size(); ++i) {
        const float s = e8m0_to_f32(t->scales[i / 32]);
        EXPECT_LE(std::fabs(w[i] - y[i]), e2m1_half_step(std::fabs(w[i]) / s) * s) << i;
    }
    EXPECT_FALSE(mxfp4_encode(w, rows, 100).is_ok());  // 100 columns: not a multiple of 32
    w[3] = std::nanf("");
    EXPECT_FALSE(mxfp4_encode(w, rows, cols).is_ok());
}

TEST(Nvfp4, HandComputed) {
    // amax 6 -> global 6/2688 = 1/448; group scale e4m3(6/6*448) = 448 = 0x7e; step = 448 * global ~ 1.
    std::vector<float> w(16, 0.0f);
    w[0] = 6.0f;
    w[1] = 3.0f;
    w[2] = -1.5f;
    w[3] = 0.5f;
    auto t = nvfp4_encode(w, 1, 16);
    ASSERT_TRUE(t.is_ok());
    EXPECT_FLOAT_EQ(t->global_scale, 1.0f / 448.0f);
    EXPECT_EQ(t->scales[0], 0x7e);
    EXPECT_EQ(t->packed[0], 0x57);
    EXPECT_EQ(t->packed[1], 0x1b);
    std::vector<float> y(16);
    ASSERT_TRUE(nvfp4_decode(t->packed, t->scales, t->global_scale, 1, 16, y).is_ok());
    for (int i = 0; i < 16; ++i) EXPECT_NEAR(y[i], w[i], 1e-6f) << i;

    // Decode follows value = e2m1 * e4m3 * global for hand-made bytes: code 7 (6) * 0x40 (2) * 0.25 = 3.
    std::vector<uint8_t> packed(8, 0), scales = {0x40};
    packed[0] = 0xc7;  // element 1: code 12 = -2 -> -1
    nvfp4_dequant_row(packed.data(), scales.data(), 0.25f, 16, y.data());
    EXPECT_EQ(y[0], 3.0f);
    EXPECT_EQ(y[1], -1.0f);
    EXPECT_EQ(y[2], 0.0f);
}

TEST(Nvfp4, GaussianRoundTrip) {
    std::mt19937 rng(21);
    std::normal_distribution<float> n(0.0f, 1.0f);
    const int64_t rows = 8, cols = 128;
    std::vector<float> w(rows * cols);
    for (auto& x : w) x = n(rng);
    auto t = nvfp4_encode(w, rows, cols);
    ASSERT_TRUE(t.is_ok());
    ASSERT_EQ(t->scales.size(), static_cast<size_t>(rows * cols / 16));
    std::vector<float> y(w.size());
    ASSERT_TRUE(nvfp4_decode(t->packed, t->scales, t->global_scale, rows, cols, y).is_ok());
    double err = 0, ref = 0;
    for (size_t i = 0; i < w.size(); ++i) {
        const float step = e4m3_to_f32(t->scales[i / 16]) * t->global_scale;
        // Within half a grid step of the scaled value, or saturated at 6 steps (the e4m3 scale rounded down).
        const float bound = e2m1_half_step(std::fabs(w[i]) / step) * step + std::max(0.0f, std::fabs(w[i]) - 6 * step);
        EXPECT_LE(std::fabs(w[i] - y[i]), bound * 1.0001f) << i;
        err += double(w[i] - y[i]) * (w[i] - y[i]);
        ref += double(w[i]) * w[i];
    }
    EXPECT_LT(std::sqrt(err / ref), 0.12);  // FP4 with 16-wide scales: ~8-10% rel. error on Gaussians
}

TEST(Fp8Blocks, HandComputed) {
    std::vector<float> w = {448.0f, -1.0f, 0.0f, 0.001953125f, 240.0f, -448.0f};  // [2, 3]
    auto t = fp8_block_encode(w, 2, 3);
    ASSERT_TRUE(t.is_ok());
    ASSERT_EQ(t->scales.size(), 1u);
    EXPECT_EQ(t->scales[0], 127);
    EXPECT_EQ(t->data, (std::vector<uint8_t>{0x7e, 0xb8, 0x00, 0x01, 0x77, 0xfe}));
    w[0] = 449.0f;  // amax 449 -> scale 2 -> 449/2 = 224.5 -> 224 (0x76); 2^-9 / 2 -> tie to 0
    t = fp8_block_encode(w, 2, 3);
    ASSERT_TRUE(t.is_ok());
    EXPECT_EQ(t->scales[0], 128);
    EXPECT_EQ(t->data, (std::vector<uint8_t>{0x76, 0xb0, 0x00, 0x00, 0x6f, 0xf6}));
    std::vector<float> zeros(6, 0.0f);
    t = fp8_block_encode(zeros, 2, 3);
    ASSERT_TRUE(t.is_ok());
    EXPECT_EQ(t->scales[0], 127 - 22);  // amax floored at 1e-4
}

TEST(Fp8Blocks, DecodeEncodeReproducesBytesOnRaggedShape) {
    const int64_t rows = 200, cols = 300;  // 2 x 3 blocks, the last ones partial
    std::mt19937 rng(13);
    std::uniform_int_distribution<int> code(0, 255), big(0x77, 0x7e), scale(110, 140);
    std::vector<uint8_t> data(rows * cols), scales(2 * 3);
    for (auto& c : data) {
        do c = static_cast<uint8_t>(code(rng));
        while ((c & 0x7f) == 0x7f);
    }
    for (int64_t b = 0; b < 6; ++b) {
        scales[b] = static_cast<uint8_t>(scale(rng));
        const int64_t r = (b / 3) * 128, c = (b % 3) * 128;
        data[r * cols + c] = static_cast<uint8_t>(big(rng));  // amax/448 in (0.5, 1]: the encoder keeps the scale
    }
    std::vector<float> w(rows * cols);
    ASSERT_TRUE(fp8_block_decode(data, scales, rows, cols, w).is_ok());
    for (int64_t i = 0; i < rows * cols; i += 997) {
        const int64_t r = i / cols, c = i % cols;
        EXPECT_EQ(w[i], e4m3_to_f32(data[i]) * static_cast<float>(std::pow(2.0, scales[(r / 128) * 3 + c / 128] - 127)));
    }
    auto t = fp8_block_encode(w, rows, cols);
    ASSERT_TRUE(t.is_ok());
    EXPECT_EQ(t->scales, scales);
    for (int64_t i = 0; i < rows * cols; ++i) {
        // -0 and +0 both decode to a zero that re-encodes with its sign: the bytes match exactly.
        ASSERT_EQ(t->data[i], data[i]) << i;
    }
    EXPECT_FALSE(fp8_block_decode(data, scales, rows, cols + 1, w).is_ok());
}

TEST(Mxfp4ToFp8, LosslessOnRandomData) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{256, 384}, {130, 96}, {64, 512}}) {
        const RandomMxfp4 m = random_mxfp4(rows, cols, 115, 125, static_cast<uint32_t>(rows * 7 + cols));
        std::vector<float> want(rows * cols), got(rows * cols);
        ASSERT_TRUE(mxfp4_decode(m.packed, m.scales, rows, cols, want).is_ok());
        int64_t inexact = -1;
        auto t = mxfp4_to_fp8_blocks(m.packed, m.scales, rows, cols, &inexact);
        ASSERT_TRUE(t.is_ok()) << t.status().to_string();
        EXPECT_EQ(inexact, 0);
        ASSERT_TRUE(fp8_block_decode(t->data, t->scales, rows, cols, got).is_ok());
        for (int64_t i = 0; i < rows * cols; ++i) ASSERT_EQ(got[i], want[i]) << rows << "x" << cols << " @" << i;
        // Block scale = largest sub-scale of the block minus 6.
        int max_sub = 0;
        for (int64_t r = 0; r < std::min<int64_t>(rows, 128); ++r) {
            for (int g = 0; g < std::min<int64_t>(cols, 128) / 32; ++g) max_sub = std::max<int>(max_sub, m.scales[r * cols / 32 + g]);
        }
        EXPECT_EQ(t->scales[0], max_sub - 6);
    }
}

TEST(Mxfp4ToFp8, ReportsRoundingAndNaNScales) {
    const int64_t rows = 1, cols = 64;
    std::vector<uint8_t> packed(32, 0x11), scales = {127, 127 - 20};  // second group 20 binades below the first
    int64_t inexact = 0;
    auto t = mxfp4_to_fp8_blocks(packed, scales, rows, cols, &inexact);
    ASSERT_TRUE(t.is_ok());
    EXPECT_EQ(inexact, 32);  // block exponent 127-6: 0.5 * 2^-14 is below e4m3's smallest subnormal 2^-9
    scales[1] = 0xff;
    auto bad = mxfp4_to_fp8_blocks(packed, scales, rows, cols, &inexact);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find("NaN"), std::string::npos);
}

}  // namespace
}  // namespace dsv4
