// Helpers shared by the CPU reference ops (internal to backend/cpu).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "backend/ops.h"
#include "core/formats.h"
#include "backend/cpu/workspace.h"
#include "core/thread_pool.h"

namespace dsv4::backend::cpu {

// Rounds to bf16 where the reference holds a bf16 tensor; identity in f32 mode.
inline float rnd(Precision p, float x) { return p == Precision::kReference ? round_bf16(x) : x; }
inline bool is_ref(const Exec& ex) { return ex.precision == Precision::kReference; }

// Returns an invalid-argument Status from the current op when `cond` fails.
#define DSV4_OP_CHECK(cond, op, what)                                                     \
    do {                                                                                  \
        if (!(cond)) return ::dsv4::invalid_argument(std::string(op) + ": " + (what));    \
    } while (0)

// Chunked parallel loop over [0, n) on the Exec's pool (inline without one).
template <typename F>
void parallel_rows(const Exec& ex, int64_t n, int64_t grain, F&& body) {
    parallel_for(ex.pool, n, grain, body);
}

// A hot loop built twice on x86-64, for AVX2 and for the baseline, the dynamic loader choosing one (GCC / Clang
// target_clones); elsewhere built once. AVX2 brings no FMA, so the operations and their rounding stay the baseline's.
#if defined(__x86_64__)
#define DSV4_CPU_HOT_LOOP __attribute__((target_clones("avx2", "default")))
#else
#define DSV4_CPU_HOT_LOOP
#endif

// Output rows a linear-type op decodes together (the per-slot weight tile is kRowTile rows).
inline constexpr int64_t kRowTile = 8;

// Rows [row0, row0 + kRowTile) of a weight as a tile [cols, kRowTile] (tile[i·kRowTile + r]; rows past the end
// are 0). codes_only (FP8 / MXFP4): the e4m3 / e2m1 code values without their block scales (the W8A8 / W4A8
// operand); otherwise the exact values of dequantize_weight_row. (linear.cpp)
void decode_weight_tile(const WeightView& w, int64_t row0, bool codes_only, float* tile);

// y[u][r] = Σ_i x[u·x_stride + i] · tile[i·kRowTile + r] for the kRowTile rows of a tile and tokens u < `tokens`
// (1..4): each (token, row) sum runs over i in order, as a plain dot product does, while the rows advance side by side
// (one SIMD lane each) and the tokens share each load of the tile. linear.cpp; built for AVX2 too, chosen at run time.
inline constexpr int kDotTokens = 4;
void tile_dot(const float* x, int64_t x_stride, int tokens, const float* tile, int64_t n,
              float (&y)[kDotTokens][kRowTile]);

// Tiles per parallel range such that a range holds at least ~32K multiply-adds: a smaller range costs more in
// thread wake-ups than it saves (decode on a small model). The split never changes a result.
inline int64_t tile_grain(int64_t in, int64_t tokens) {
    const int64_t work = kRowTile * in * (tokens > 0 ? tokens : 1);
    return work >= 32768 ? 1 : 32768 / work;
}

// core's round_bf16 (f32 → bf16 RNE, NaN kept quiet → f32), inlined so that loops over weights vectorise;
// tests/unit/cpu_ops checks it against round_bf16 bit for bit.
inline float round_bf16_inline(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    const uint32_t lsb = (u >> 16) & 1u;
    const uint32_t nan = (u & 0x7fffffffu) > 0x7f800000u;
    u = nan ? (u | 0x00400000u) & 0xffff0000u : (u + 0x7fffu + lsb) & 0xffff0000u;
    std::memcpy(&x, &u, 4);
    return x;
}

// A F32/BF16 vector weight (norm weights, biases) element, or 1 when the view is empty.
inline float weight_or_one(const WeightView& w, int64_t i) { return w.empty() ? 1.0f : w.at(i); }

// act_quant of one row segment of `block` values: codes as decoded e4m3 floats q (exact), returns the scale s.
float quant_block_e4m3(const float* x, int block, float* q, uint8_t* codes, uint8_t* scale_byte);
// fp4 quantisation of one 32-value block: q holds decoded e2m1 values; returns s.
float quant_block_e2m1(const float* x, float* q, uint8_t* codes, uint8_t* scale_byte);

// In-place QAT simulations (kReference only; callers skip them in f32 mode).
void fp8_sim_inplace(float* x, int64_t n, int block);  // n % block == 0
void fp4_sim_inplace(float* x, int64_t n);              // n % 32 == 0
// y = bf16?((x · H128) · 128^-½) for one 128-vector; x and y may alias.
void hadamard_row(const float* x, float* y, bool round);

// Softplus as torch computes it (threshold 20).
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace dsv4::backend::cpu
