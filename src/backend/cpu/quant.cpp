// Quantisation primitives of the reference numerics (MODEL_SPEC §7.1–7.3): UE8M0 block activation quantisation
// to e4m3 (blocks 128 and 64), FP4 (e2m1) simulation at block 32, the Hadamard-128 rotation, and the FP8
// simulation of K=V nope channels.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_ops.h"
#include "core/quant_formats.h"

namespace dsv4::backend::cpu {

float quant_block_e4m3(const float* x, int block, float* q, uint8_t* codes, uint8_t* scale_byte) {
    float amax = 0;
    for (int i = 0; i < block; ++i) amax = std::max(amax, std::fabs(x[i]));
    const int e = ue8m0_exponent_for(amax, 1e-4f, kE4m3Max);
    const float s = std::ldexp(1.0f, e);
    for (int i = 0; i < block; ++i) {
        // x / s is exact (s is a power of two); the clamp makes the saturation explicit as in the reference.
        const float v = std::clamp(std::ldexp(x[i], -e), -kE4m3Max, kE4m3Max);
        const uint8_t c = f32_to_e4m3(v, true);
        if (codes) codes[i] = c;
        if (q) q[i] = e4m3_to_f32(c);
    }
    if (scale_byte) *scale_byte = e8m0_from_exponent(e);
    return s;
}

float quant_block_e2m1(const float* x, float* q, uint8_t* codes, uint8_t* scale_byte) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const int e = ue8m0_exponent_for(amax, 6.0f * std::ldexp(1.0f, -126), kE2m1Max);
    const float s = std::ldexp(1.0f, e);
    for (int i = 0; i < 32; ++i) {
        const float v = std::clamp(std::ldexp(x[i], -e), -kE2m1Max, kE2m1Max);
        const uint8_t c = f32_to_e2m1(v);
        if (codes) codes[i] = c;
        if (q) q[i] = e2m1_to_f32(c);
    }
    if (scale_byte) *scale_byte = e8m0_from_exponent(e);
    return s;
}

void fp8_sim_inplace(float* x, int64_t n, int block) {
    float q[128];
    for (int64_t b = 0; b < n; b += block) {
        const float s = quant_block_e4m3(x + b, block, q, nullptr, nullptr);
        for (int i = 0; i < block; ++i) x[b + i] = round_bf16(q[i] * s);
    }
}

void fp4_sim_inplace(float* x, int64_t n) {
    float q[32];
    for (int64_t b = 0; b < n; b += 32) {
        const float s = quant_block_e2m1(x + b, q, nullptr, nullptr);
        for (int i = 0; i < 32; ++i) x[b + i] = round_bf16(q[i] * s);
    }
}

void hadamard_row(const float* x, float* y, bool round) {
    // Fast Walsh–Hadamard butterflies in natural (Sylvester) order, f32 as the reference kernel does.
    float v[128];
    std::copy(x, x + 128, v);
    for (int h = 1; h < 128; h *= 2) {
        for (int i = 0; i < 128; i += 2 * h) {
            for (int j = i; j < i + h; ++j) {
                const float a = v[j], b = v[j + h];
                v[j] = a + b;
                v[j + h] = a - b;
            }
        }
    }
    const float scale = 1.0f / std::sqrt(128.0f);
    for (int i = 0; i < 128; ++i) y[i] = round ? round_bf16(v[i] * scale) : v[i] * scale;
}

Status act_quant(const ActQuantParams& p) {
    const char* op = "act_quant";
    DSV4_OP_CHECK(p.x && p.rows >= 0 && p.cols >= 0, op, "null input or negative shape");
    DSV4_OP_CHECK(p.block == 128 || p.block == 64, op, "block must be 128 or 64");
    DSV4_OP_CHECK(p.cols % p.block == 0, op, "cols " + std::to_string(p.cols) + " not a multiple of the block");
    const int64_t nb = p.cols / p.block;
    float q[128];
    for (int64_t r = 0; r < p.rows; ++r) {
        for (int64_t b = 0; b < nb; ++b) {
            const int64_t off = r * p.cols + b * p.block;
            uint8_t sb = 0;
            const float s = quant_block_e4m3(p.x + off, p.block, q, p.codes ? p.codes + off : nullptr, &sb);
            if (p.scale) p.scale[r * nb + b] = s;
            if (p.scale_e8m0) p.scale_e8m0[r * nb + b] = sb;
            if (p.x_sim)
                for (int i = 0; i < p.block; ++i) p.x_sim[off + i] = round_bf16(q[i] * s);
        }
    }
    return Status::ok();
}

Status fp4_act_quant(const Fp4QuantParams& p) {
    const char* op = "fp4_act_quant";
    DSV4_OP_CHECK(p.x && p.rows >= 0 && p.cols >= 0, op, "null input or negative shape");
    DSV4_OP_CHECK(p.cols % 32 == 0, op, "cols " + std::to_string(p.cols) + " not a multiple of 32");
    const int64_t nb = p.cols / 32;
    float q[32];
    uint8_t codes[32];
    for (int64_t r = 0; r < p.rows; ++r) {
        for (int64_t b = 0; b < nb; ++b) {
            const int64_t off = r * p.cols + b * 32;
            uint8_t sb = 0;
            const float s = quant_block_e2m1(p.x + off, q, codes, &sb);
            if (p.codes_packed)
                for (int i = 0; i < 32; i += 2) p.codes_packed[off / 2 + i / 2] = uint8_t(codes[i] | (codes[i + 1] << 4));
            if (p.scale) p.scale[r * nb + b] = s;
            if (p.scale_e8m0) p.scale_e8m0[r * nb + b] = sb;
            if (p.x_sim)
                for (int i = 0; i < 32; ++i) p.x_sim[off + i] = round_bf16(q[i] * s);
        }
    }
    return Status::ok();
}

Status hadamard128(const Exec& ex, const HadamardParams& p) {
    DSV4_OP_CHECK(p.x && p.y && p.rows >= 0, "hadamard128", "null pointer or negative rows");
    const bool round = is_ref(ex);
    parallel_rows(ex, p.rows, 64, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) hadamard_row(p.x + r * 128, p.y + r * 128, round);
    });
    return Status::ok();
}

Status kv_fp8_sim(const Exec& ex, const KvFp8SimParams& p) {
    DSV4_OP_CHECK(p.x && p.rows >= 0, "kv_fp8_sim", "null pointer or negative rows");
    DSV4_OP_CHECK((p.dim - p.rope_dim) % 64 == 0 && p.rope_dim >= 0, "kv_fp8_sim", "nope width not a multiple of 64");
    if (!is_ref(ex)) return Status::ok();
    parallel_rows(ex, p.rows, 16, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) fp8_sim_inplace(p.x + r * p.dim, p.dim - p.rope_dim, 64);
    });
    return Status::ok();
}

}  // namespace dsv4::backend::cpu
