// Scalar number formats (see formats.h). Decoders are table- or bit-based so the CPU reference can call them in
// inner loops; encoders round to nearest, ties to even, on each format's grid.
#include "core/formats.h"

#include <array>
#include <cmath>
#include <cstring>
#include <limits>

namespace dsv4 {
namespace {

uint32_t f32_bits(float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    return u;
}

float f32_from_bits(uint32_t u) {
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
}

// Nearest integer to n >= 0, ties to even; independent of the floating-point environment's rounding mode.
double round_half_even(double n) {
    double whole = std::floor(n);
    const double frac = n - whole;
    if (frac > 0.5 || (frac == 0.5 && std::fmod(whole, 2.0) == 1.0)) whole += 1;
    return whole;
}

// Rounds a finite a >= 0 to the grid of a binary float format with `mant_bits` stored mantissa bits whose
// smallest normal exponent is `min_exp` (below it the grid is uniform with spacing 2^(min_exp - mant_bits)).
// The exponent range is unbounded above; callers handle overflow. Ties go to the even grid point.
double round_to_grid(double a, int mant_bits, int min_exp) {
    if (a == 0) return 0;
    int e = std::ilogb(a);
    if (e < min_exp) e = min_exp;
    const double quantum = std::ldexp(1.0, e - mant_bits);
    return round_half_even(a / quantum) * quantum;  // the division by a power of two is exact
}

// Bit pattern (without sign) of a magnitude v that lies exactly on the format's grid.
uint32_t grid_value_bits(double v, int mant_bits, int min_exp, int bias) {
    if (v == 0) return 0;
    if (v < std::ldexp(1.0, min_exp)) return static_cast<uint32_t>(v / std::ldexp(1.0, min_exp - mant_bits));
    const int e = std::ilogb(v);
    const uint32_t mant = static_cast<uint32_t>(v / std::ldexp(1.0, e - mant_bits)) - (1u << mant_bits);
    return (static_cast<uint32_t>(e + bias) << mant_bits) | mant;
}

std::array<float, 256> make_e4m3_table() {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) {
        const int exp = (c >> 3) & 15, mant = c & 7;
        float mag;
        if (exp == 15 && mant == 7) {
            mag = std::numeric_limits<float>::quiet_NaN();
        } else if (exp == 0) {
            mag = std::ldexp(static_cast<float>(mant), -9);  // subnormal: mant * 2^-9
        } else {
            mag = std::ldexp(1.0f + mant / 8.0f, exp - 7);
        }
        t[c] = (c & 0x80) ? -mag : mag;
    }
    return t;
}

const std::array<float, 256> kE4m3Table = make_e4m3_table();

constexpr float kE2m1Magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

}  // namespace

float bf16_to_f32(uint16_t bits) { return f32_from_bits(static_cast<uint32_t>(bits) << 16); }

uint16_t f32_to_bf16(float x) {
    const uint32_t u = f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
    // Add half an ulp of bf16 minus one, plus the kept lsb: exact ties round to the even pattern. A carry out of
    // the mantissa moves into the exponent, which is the correct next value (up to inf).
    const uint32_t lsb = (u >> 16) & 1u;
    return static_cast<uint16_t>((u + 0x7fffu + lsb) >> 16);
}

float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

float f16_to_f32(uint16_t bits) {
    const uint32_t sign = (bits & 0x8000u) << 16;
    const int exp = (bits >> 10) & 0x1f;
    const uint32_t mant = bits & 0x3ffu;
    if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (mant << 13));  // inf / NaN (payload kept)
    float mag = exp == 0 ? std::ldexp(static_cast<float>(mant), -24) : std::ldexp(1.0f + mant / 1024.0f, exp - 15);
    return sign ? -mag : mag;
}

uint16_t f32_to_f16(float x) {
    const uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
    if (std::isnan(x)) return sign | 0x7e00u;
    const double a = std::fabs(static_cast<double>(x));
    if (std::isinf(a)) return sign | 0x7c00u;
    const double r = round_to_grid(a, 10, -14);
    if (r > 65504.0) return sign | 0x7c00u;
    return static_cast<uint16_t>(sign | grid_value_bits(r, 10, -14, 15));
}

float e4m3_to_f32(uint8_t bits) { return kE4m3Table[bits]; }

uint8_t f32_to_e4m3(float x, bool saturate) {
    const uint32_t u = f32_bits(x);
    const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return 0x7f;
    if (a >= 0x3c800000u) {  // |x| >= 2^-6: normal range; keep 3 of 23 mantissa bits with RNE
        const uint32_t rounded = a + 0x7ffffu + ((a >> 20) & 1u);
        // (rounded >> 20) holds f32 exponent and 3 mantissa bits; rebias the exponent from 127 to 7.
        const uint64_t code = static_cast<uint64_t>(rounded >> 20) - (static_cast<uint64_t>(127 - 7) << 3);
        if (a >= 0x7f800000u || code > 0x7e) return saturate ? static_cast<uint8_t>(sign | 0x7e) : 0x7f;
        return static_cast<uint8_t>(sign | code);
    }
    // Subnormal range: the code equals the value in units of 2^-9 (8 = the smallest normal, 0x08, also fits).
    const double units = round_half_even(std::fabs(static_cast<double>(x)) * 512.0);  // exact product
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(units));
}

float e8m0_to_f32(uint8_t bits) {
    if (bits == 0xff) return std::numeric_limits<float>::quiet_NaN();
    if (bits == 0) return f32_from_bits(0x00400000u);  // 2^-127 is an f32 subnormal
    return f32_from_bits(static_cast<uint32_t>(bits) << 23);
}

uint8_t e8m0_from_exponent(int e) {
    if (e < -127) e = -127;
    if (e > 127) e = 127;
    return static_cast<uint8_t>(e + 127);
}

float e2m1_to_f32(uint8_t code) {
    const float mag = kE2m1Magnitudes[code & 7];
    return (code & 8) ? -mag : mag;
}

uint8_t f32_to_e2m1(float x) {
    if (std::isnan(x)) return 0;
    const uint8_t sign = std::signbit(x) ? 8 : 0;
    const float a = std::fabs(x);
    // Midpoints between neighbouring grid values; at an exact midpoint the even code (mantissa bit 0) wins:
    // 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4.
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

}  // namespace dsv4
