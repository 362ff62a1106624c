// Scalar formats against hand-written tables and against brute-force oracles written here from the formats'
// definitions (nearest grid value found by scanning every code; ties resolved to the even code).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "core/formats.h"

namespace dsv4 {
namespace {

uint32_t bits_of(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
}
float from_bits(uint32_t u) {
    float x;
    std::memcpy(&x, &u, 4);
    return x;
}
bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || bits_of(a) == bits_of(b); }

// ---- definitions written independently of the library ----

// e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits; exponent 0 is subnormal; S.1111.111 is NaN; no inf.
double e4m3_definition(int code) {
    const int s = code >> 7, e = (code >> 3) & 0xf, m = code & 7;
    if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
    const double mag = e == 0 ? m * std::pow(2.0, -9) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
    return s ? -mag : mag;
}

// f16: 1 sign, 5 exponent (bias 15), 10 mantissa.
double f16_definition(int code) {
    const int s = code >> 15, e = (code >> 10) & 0x1f, m = code & 0x3ff;
    double mag;
    if (e == 31) mag = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    else if (e == 0) mag = m * std::pow(2.0, -24);
    else mag = (1.0 + m / 1024.0) * std::pow(2.0, e - 15);
    return s ? -mag : mag;
}

// Nearest code among `n` monotone non-negative candidate codes (index = code), ties to the even code.
template <typename Decode>
int nearest_code(double a, int n, Decode decode) {
    int best = 0;
    double best_d = std::fabs(a - decode(0));
    for (int c = 1; c < n; ++c) {
        const double d = std::fabs(a - decode(c));
        if (d < best_d || (d == best_d && (c % 2 == 0))) {
            best = c;
            best_d = d;
        }
    }
    return best;
}

// ---- e4m3 ----

TEST(E4m3, HandCheckedCodes) {
    EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));
    EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
    EXPECT_EQ(e4m3_to_f32(0x07), 7.0f / 512.0f);
    EXPECT_EQ(e4m3_to_f32(0x30), 0.5f);
    EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
    EXPECT_EQ(e4m3_to_f32(0x3c), 1.5f);
    EXPECT_EQ(e4m3_to_f32(0x40), 2.0f);
    EXPECT_EQ(e4m3_to_f32(0x77), 240.0f);
    EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
    EXPECT_EQ(e4m3_to_f32(0xfe), -448.0f);
    EXPECT_EQ(e4m3_to_f32(0xb8), -1.0f);
    EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)));
    EXPECT_TRUE(std::isnan(e4m3_to_f32(0xff)));
    EXPECT_EQ(e4m3_to_f32(0x00), 0.0f);
    EXPECT_FALSE(std::signbit(e4m3_to_f32(0x00)));
    EXPECT_EQ(e4m3_to_f32(0x80), 0.0f);
    EXPECT_TRUE(std::signbit(e4m3_to_f32(0x80)));
}

TEST(E4m3, AllCodesMatchDefinition) {
    for (int c = 0; c < 256; ++c) {
        EXPECT_TRUE(same_float(e4m3_to_f32(static_cast<uint8_t>(c)), static_cast<float>(e4m3_definition(c))))
            << "code 0x" << std::hex << c;
    }
}

TEST(E4m3, EveryCodeRoundTrips) {
    for (int c = 0; c < 256; ++c) {
        if ((c & 0x7f) == 0x7f) continue;
        EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(static_cast<uint8_t>(c))), c) << "code 0x" << std::hex << c;
        EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(static_cast<uint8_t>(c)), false), c) << "code 0x" << std::hex << c;
    }
}

TEST(E4m3, TiesToEven) {
    EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);           // halfway 1 (0x38) .. 1.125 (0x39)
    EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3a);           // halfway 1.125 .. 1.25
    EXPECT_EQ(f32_to_e4m3(std::nextafter(1.0625f, 2.0f)), 0x39);
    EXPECT_EQ(f32_to_e4m3(-1.0625f), 0xb8);
    EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -10)), 0x00);  // halfway 0 .. 2^-9
    EXPECT_EQ(f32_to_e4m3(-std::ldexp(1.0f, -10)), 0x80);
    EXPECT_EQ(f32_to_e4m3(std::ldexp(1.5f, -9)), 0x02);   // halfway 0x01 .. 0x02
    EXPECT_EQ(f32_to_e4m3(std::ldexp(7.5f, -9)), 0x08);   // halfway subnormal 0x07 .. smallest normal 0x08
    EXPECT_EQ(f32_to_e4m3(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
    EXPECT_EQ(f32_to_e4m3(416.0f), 0x7d);  // exact: 1.625 * 2^8
    EXPECT_EQ(f32_to_e4m3(400.0f), 0x7c);  // halfway 384 (0x7c) .. 416 (0x7d)
    EXPECT_EQ(f32_to_e4m3(432.0f), 0x7e);  // halfway 416 (0x7d) .. 448 (0x7e): 0x7e is even
}

TEST(E4m3, SaturationNaNAndZero) {
    EXPECT_EQ(f32_to_e4m3(449.0f), 0x7e);
    EXPECT_EQ(f32_to_e4m3(1e6f), 0x7e);
    EXPECT_EQ(f32_to_e4m3(-1e6f), 0xfe);
    EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::infinity()), 0x7e);
    EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
    EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
    // Without saturation a value rounding past 448 is NaN; 464 is the tie 448 / (480) and goes to the even 448.
    EXPECT_EQ(f32_to_e4m3(464.0f, false), 0x7e);
    EXPECT_EQ(f32_to_e4m3(465.0f, false), 0x7f);
    EXPECT_EQ(f32_to_e4m3(1e6f, false), 0x7f);
    EXPECT_EQ(f32_to_e4m3(-1e6f, false), 0x7f);
    EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::infinity(), false), 0x7f);
    EXPECT_EQ(f32_to_e4m3(0.0f), 0x00);
    EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
    EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::denorm_min()), 0x00);
    EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::min()), 0x80);
}

TEST(E4m3, RandomValuesMatchNearestCodeOracle) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> log_mag(-12.0, 9.5);
    const auto decode = [](int c) { return e4m3_definition(c); };
    for (int i = 0; i < 20000; ++i) {
        float x = static_cast<float>(std::exp2(log_mag(rng)));
        if (i % 2) x = -x;
        const double a = std::fabs(static_cast<double>(x));
        const int sign = std::signbit(x) ? 0x80 : 0;
        const int mag_code = nearest_code(std::min(a, 448.0), 0x7f, decode);  // codes 0..0x7e
        EXPECT_EQ(f32_to_e4m3(x), sign | mag_code) << "x = " << x;
    }
}

// ---- e2m1 ----

TEST(E2m1, AllSixteenCodes) {
    const float expected[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (int c = 0; c < 16; ++c) {
        EXPECT_TRUE(same_float(e2m1_to_f32(static_cast<uint8_t>(c)), expected[c])) << "code " << c;
        EXPECT_EQ(f32_to_e2m1(expected[c]), c) << "code " << c;
    }
    EXPECT_TRUE(std::signbit(e2m1_to_f32(8)));
    EXPECT_EQ(e2m1_to_f32(0xf7), 6.0f);  // only the low nibble is used
}

TEST(E2m1, TiesToEvenAndSaturation) {
    EXPECT_EQ(f32_to_e2m1(0.25f), 0);
    EXPECT_EQ(f32_to_e2m1(0.75f), 2);
    EXPECT_EQ(f32_to_e2m1(1.25f), 2);
    EXPECT_EQ(f32_to_e2m1(1.75f), 4);
    EXPECT_EQ(f32_to_e2m1(2.5f), 4);
    EXPECT_EQ(f32_to_e2m1(3.5f), 6);
    EXPECT_EQ(f32_to_e2m1(5.0f), 6);
    EXPECT_EQ(f32_to_e2m1(5.01f), 7);
    EXPECT_EQ(f32_to_e2m1(0.26f), 1);
    EXPECT_EQ(f32_to_e2m1(7.0f), 7);
    EXPECT_EQ(f32_to_e2m1(1e30f), 7);
    EXPECT_EQ(f32_to_e2m1(-5.0f), 14);
    EXPECT_EQ(f32_to_e2m1(-100.0f), 15);
    EXPECT_EQ(f32_to_e2m1(-0.1f), 8);
    EXPECT_EQ(f32_to_e2m1(-0.0f), 8);
}

TEST(E2m1, RandomValuesMatchNearestCodeOracle) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-7.0f, 7.0f);
    const double grid[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    const auto decode = [&](int c) { return grid[c]; };
    for (int i = 0; i < 20000; ++i) {
        const float x = u(rng);
        const int sign = std::signbit(x) ? 8 : 0;
        EXPECT_EQ(f32_to_e2m1(x), sign | nearest_code(std::min(std::fabs(double(x)), 6.0), 8, decode)) << x;
    }
}

// ---- UE8M0 ----

TEST(Ue8m0, AllCodes) {
    EXPECT_EQ(e8m0_to_f32(0x7f), 1.0f);
    EXPECT_EQ(e8m0_to_f32(0x80), 2.0f);
    EXPECT_EQ(e8m0_to_f32(0x00), 5.877471754111438e-39f);  // 2^-127
    EXPECT_EQ(e8m0_to_f32(0xfe), 1.7014118346046923e38f);  // 2^127
    EXPECT_TRUE(std::isnan(e8m0_to_f32(0xff)));
    for (int b = 0; b < 255; ++b) {
        EXPECT_EQ(e8m0_to_f32(static_cast<uint8_t>(b)), static_cast<float>(std::pow(2.0, b - 127))) << b;
        EXPECT_EQ(e8m0_from_exponent(b - 127), b);
    }
}

// ---- bf16 ----

TEST(Bf16, RoundingTies) {
    EXPECT_EQ(round_bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);                         // tie -> even (1)
    EXPECT_EQ(round_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));  // tie -> even
    EXPECT_EQ(round_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 1.0f + std::ldexp(1.0f, -7));
    EXPECT_EQ(round_bf16(-(1.0f + std::ldexp(1.0f, -8))), -1.0f);
    EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
    EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
    EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
    EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds past the largest bf16
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(from_bits(0x7f800001)))));  // signalling NaN stays NaN
    EXPECT_EQ(bf16_to_f32(0x0001), std::ldexp(1.0f, -133));
}

TEST(Bf16, RandomBitsMatchNearestOracle) {
    std::mt19937 rng(3);
    for (int i = 0; i < 200000; ++i) {
        const float x = from_bits(rng());
        if (std::isnan(x)) continue;
        const uint16_t lo = static_cast<uint16_t>(bits_of(x) >> 16);  // truncation toward zero
        const double v_lo = bf16_to_f32(lo);
        double v_hi = bf16_to_f32(static_cast<uint16_t>(lo + 1));  // next magnitude
        // Past the largest finite value IEEE rounding continues the grid (the next point, 2^128, means inf).
        if (std::isinf(v_hi)) v_hi = std::copysign(std::ldexp(1.0, 128), double(x));
        const double d_lo = std::fabs(double(x) - v_lo), d_hi = std::fabs(v_hi - double(x));
        const uint16_t want = (d_lo < d_hi || (d_lo == d_hi && lo % 2 == 0)) ? lo : static_cast<uint16_t>(lo + 1);
        EXPECT_EQ(f32_to_bf16(x), want) << "x bits 0x" << std::hex << bits_of(x);
    }
}

// ---- f16 ----

TEST(F16, AllCodesDecode) {
    for (int c = 0; c < 65536; ++c) {
        EXPECT_TRUE(same_float(f16_to_f32(static_cast<uint16_t>(c)), static_cast<float>(f16_definition(c)))) << c;
    }
}

TEST(F16, EncodeRoundTripTiesAndOverflow) {
    for (int c = 0; c < 65536; ++c) {
        if (((c >> 10) & 0x1f) == 31 && (c & 0x3ff)) continue;  // NaN payloads
        EXPECT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(c))), c) << c;
    }
    EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);       // tie -> even
    EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);   // tie -> even
    EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
    EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // tie 65504 / 65536 -> even -> inf
    EXPECT_EQ(f32_to_f16(-1e10f), 0xfc00);
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie 0 / 2^-24
    EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);  // tie 2^-24 / 2^-23
    EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
}

}  // namespace
}  // namespace dsv4
