// Linear layers (MODEL_SPEC §7.1): W8A8 FP8 block GEMM and W4A8 MXFP4 GEMM exactly as DeepSeek's fp8_gemm /
// fp4_gemm accumulate (f32 per K block, then × activation scale × weight scale, summed in f32, bf16 out), plain
// bf16 / f32 GEMMs, and the f32 oracle mode (weights dequantised exactly, nothing rounded).
//
// Speed without changing a bit: the weight is decoded once per call, kRowTile output rows at a time, into a tile
// stored input-major ([in, kRowTile]) through byte → f32 lookup tables; every token of the call then reuses the
// tile. The inner loop runs the kRowTile rows' sums side by side (one SIMD lane per row) for four tokens at once
// (each tile load serves four tokens), each lane adding its products in exactly the order of a plain per-row loop,
// so the results are those of the scalar reference; the loops are also built for AVX2 (8 lanes per instruction,
// chosen at run time), never with FMA (the build passes -ffp-contract=off: a fused multiply-add rounds once).
// Parallel over tiles; scratch comes from the Exec's workspace (no allocation).
#include <algorithm>
#include <array>
#include <cstring>

#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_ops.h"
#include "core/quant_formats.h"

namespace dsv4::backend::cpu {

namespace {

constexpr int64_t R = kRowTile;

// Byte → f32 tables of the formats' decoders (core/formats.h), built once.
struct DecodeTables {
    std::array<float, 256> e4m3{}, e8m0{};
    std::array<float, 16> e2m1{};
};
const DecodeTables& tables() {
    static const DecodeTables t = [] {
        DecodeTables d;
        for (int i = 0; i < 256; ++i) {
            d.e4m3[size_t(i)] = e4m3_to_f32(uint8_t(i));
            d.e8m0[size_t(i)] = e8m0_to_f32(uint8_t(i));
        }
        for (int i = 0; i < 16; ++i) d.e2m1[size_t(i)] = e2m1_to_f32(uint8_t(i));
        return d;
    }();
    return t;
}

// The block scales of a raw tile: ws[b·R + r] = weight scale of input block b (128 FP8, 32 MXFP4) of row o0+r.
void decode_tile_scales(const WeightView& w, int64_t o0, float* ws) {
    const DecodeTables& lut = tables();
    const bool fp4 = w.format == WeightFormat::kMXFP4;
    const int64_t nb = fp4 ? w.cols / kMxfp4GroupSize : fp8_block_count(w.cols);
    for (int64_t r = 0; r < R; ++r) {
        const int64_t o = o0 + r;
        for (int64_t b = 0; b < nb; ++b)
            ws[b * R + r] = o >= w.rows ? 0.0f
                            : fp4        ? lut.e8m0[w.scale[o * nb + b]]
                                         : lut.e8m0[w.scale[(o / kFp8BlockSize) * nb + b]];
    }
}

// The tile's R rows as one vector of R f32 lanes (GCC / Clang vector extension: element-wise IEEE operations, no
// reassociation; split into two 16-byte halves where 32-byte vectors are not available).
using RowLanes = float __attribute__((vector_size(R * sizeof(float))));
static_assert(sizeof(RowLanes) == R * sizeof(float), "one vector lane per tile row");

// (by reference: a vector passed by value would take the calling convention of each build of its caller)
__attribute__((always_inline)) inline void load_lanes(const float* p, RowLanes& v) { std::memcpy(&v, p, sizeof v); }

// y[t, o0 + r] for tokens t0 .. t0 + kTokens - 1: the W8A8 / W4A8 sums over a raw tile (codes as values, scales
// apart), per (token, row) lane exactly the scalar loop's operations in its order — acc += a_i · w_i over a K block,
// then y += acc · (s_a · s_w) — with kTokens tokens sharing each load of the tile.
template <int kTokens>
__attribute__((always_inline)) inline void quantized_tokens(const LinearParams& p, const float* qa, const float* sa,
                                                            const float* tile, const float* ws, int64_t kblock,
                                                            int64_t t0, int64_t o0) {
    const int64_t in = p.w.cols, out = p.w.rows, nb = in / 128;
    RowLanes y[kTokens] = {};
    for (int64_t b = 0; b < in / kblock; ++b) {
        RowLanes acc[kTokens] = {};
        for (int64_t i = b * kblock; i < (b + 1) * kblock; ++i) {
            RowLanes w;
            load_lanes(tile + i * R, w);
            for (int u = 0; u < kTokens; ++u) acc[u] += qa[(t0 + u) * in + i] * w;
        }
        RowLanes s_w;
        load_lanes(ws + b * R, s_w);
        for (int u = 0; u < kTokens; ++u) y[u] += acc[u] * (sa[(t0 + u) * nb + (b * kblock) / 128] * s_w);
    }
    for (int u = 0; u < kTokens; ++u)
        for (int64_t r = 0; r < R && o0 + r < out; ++r) p.y[(t0 + u) * out + o0 + r] = round_bf16(y[u][r]);
}

// y[t, o0 + r] for every token, kDotTokens tokens at a time. Built for AVX2 too, chosen at run time: the same IEEE
// operations on 8 lanes at once (no FMA: the multiply and the add round separately, as in the scalar loop).
DSV4_CPU_HOT_LOOP void quantized_tile(const LinearParams& p, const float* qa, const float* sa, const float* tile,
                                      const float* ws, int64_t o0) {
    const int64_t kblock = p.w.format == WeightFormat::kMXFP4 ? kMxfp4GroupSize : 128;
    int64_t t = 0;
    for (; t + kDotTokens <= p.tokens; t += kDotTokens)
        quantized_tokens<kDotTokens>(p, qa, sa, tile, ws, kblock, t, o0);
    for (; t < p.tokens; ++t) quantized_tokens<1>(p, qa, sa, tile, ws, kblock, t, o0);
}

// tile_dot for kTokens tokens (cpu_common.h).
template <int kTokens>
__attribute__((always_inline)) inline void tile_dot_tokens(const float* x, int64_t x_stride, const float* tile,
                                                           int64_t n, float (&y)[kDotTokens][kRowTile]) {
    RowLanes acc[kTokens] = {};
    for (int64_t i = 0; i < n; ++i) {
        RowLanes w;
        load_lanes(tile + i * R, w);
        for (int u = 0; u < kTokens; ++u) acc[u] += x[u * x_stride + i] * w;
    }
    for (int u = 0; u < kTokens; ++u) std::memcpy(y[u], &acc[u], sizeof acc[u]);
}

}  // namespace

DSV4_CPU_HOT_LOOP void tile_dot(const float* x, int64_t x_stride, int tokens, const float* tile, int64_t n,
                                float (&y)[kDotTokens][kRowTile]) {
    if (tokens == kDotTokens) return tile_dot_tokens<kDotTokens>(x, x_stride, tile, n, y);
    for (int u = 0; u < tokens; ++u) {
        float one[kDotTokens][kRowTile];
        tile_dot_tokens<1>(x + u * x_stride, x_stride, tile, n, one);
        std::memcpy(y[u], one[0], sizeof one[0]);
    }
}

// Input-major: each input's R row values are made side by side and stored as one vector. Rows past the end read
// the last row and are zeroed afterwards (rare: the last tile of a matrix whose rows are not a multiple of R).
DSV4_CPU_HOT_LOOP void decode_weight_tile(const WeightView& w, int64_t o0, bool codes_only, float* tile) {
    const DecodeTables& lut = tables();
    const int64_t in = w.cols, nr = std::min<int64_t>(R, w.rows - o0);
    const auto* data = static_cast<const uint8_t*>(w.data);
    int64_t row[R];  // the weight row behind each lane
    for (int64_t r = 0; r < R; ++r) row[r] = o0 + std::min(r, nr - 1);
    switch (w.format) {
        case WeightFormat::kMXFP4: {  // codes_only: e2m1 (× 1, exact); else mxfp4_dequant_row's e2m1 · 2^(s-127)
            const int64_t rb = in / 2, sb = in / kMxfp4GroupSize;
            for (int64_t g = 0; g < sb; ++g) {  // one 32-input scale group: 16 bytes per row
                RowLanes s;
                for (int64_t r = 0; r < R; ++r) s[r] = codes_only ? 1.0f : lut.e8m0[w.scale[row[r] * sb + g]];
                for (int64_t j = g * 16; j < g * 16 + 16; ++j) {
                    RowLanes lo, hi;
                    for (int64_t r = 0; r < R; ++r) {
                        const uint8_t byte = data[row[r] * rb + j];
                        lo[r] = lut.e2m1[byte & 0xf];
                        hi[r] = lut.e2m1[byte >> 4];
                    }
                    lo *= s, hi *= s;
                    std::memcpy(tile + (2 * j) * R, &lo, sizeof lo);
                    std::memcpy(tile + (2 * j + 1) * R, &hi, sizeof hi);
                }
            }
            break;
        }
        case WeightFormat::kFP8Block: {  // codes_only: e4m3 (× 1); else fp8_block_dequant_row's e4m3 · 2^(s-127)
            const int64_t nb = fp8_block_count(in);
            for (int64_t b = 0; b < nb; ++b) {  // one 128-input scale block
                RowLanes s;
                for (int64_t r = 0; r < R; ++r)
                    s[r] = codes_only ? 1.0f : lut.e8m0[w.scale[(row[r] / kFp8BlockSize) * nb + b]];
                for (int64_t i = b * 128; i < std::min(in, b * 128 + 128); ++i) {
                    RowLanes v;
                    for (int64_t r = 0; r < R; ++r) v[r] = lut.e4m3[data[row[r] * in + i]];
                    v *= s;
                    std::memcpy(tile + i * R, &v, sizeof v);
                }
            }
            break;
        }
        case WeightFormat::kBF16:  // bf16 → f32 is exact: the bits moved up
            for (int64_t i = 0; i < in; ++i) {
                uint32_t u[R];
                for (int64_t r = 0; r < R; ++r) {
                    uint16_t b;
                    std::memcpy(&b, data + 2 * (row[r] * in + i), 2);
                    u[r] = uint32_t(b) << 16;
                }
                std::memcpy(tile + i * R, u, sizeof u);
            }
            break;
        case WeightFormat::kF32:
            for (int64_t i = 0; i < in; ++i)
                for (int64_t r = 0; r < R; ++r) std::memcpy(tile + i * R + r, data + 4 * (row[r] * in + i), 4);
            break;
    }
    for (int64_t i = 0; nr < R && i < in; ++i)
        for (int64_t r = nr; r < R; ++r) tile[i * R + r] = 0.0f;
}

Status linear(const Exec& ex, const LinearParams& p) {
    const char* op = "linear";
    DSV4_OP_CHECK(p.x && p.y && p.tokens >= 0, op, "null pointer or negative token count");
    DSV4_RETURN_IF_ERROR(check_weight(p.w, p.w.rows, p.w.cols, op));
    const WeightView& w = p.w;
    const int64_t in = w.cols, out = w.rows, T = p.tokens, tiles = (out + R - 1) / R;
    const bool quantized =
        is_ref(ex) && (w.format == WeightFormat::kFP8Block || w.format == WeightFormat::kMXFP4);
    if (quantized) DSV4_OP_CHECK(in % 128 == 0, op, "W8A8/W4A8 needs the input width to be a multiple of 128");
    if (T == 0) return Status::ok();

    Scratch scratch(ex);
    const int64_t grain = tile_grain(in, T), slots = slot_count(ex, tiles, grain), nb = in / 128, ws_len = (in / kMxfp4GroupSize + 1) * R;
    float* tile_all = scratch.take<float>(slots * in * R);
    if (!quantized) {  // W (dequantised exactly) · x in f32, rounded per mode and p.out
        const bool round = is_ref(ex) && p.out == LinearOut::kBF16;
        parallel_slots(ex, tiles, grain, [&](int64_t slot, int64_t tb, int64_t te) {
            float* tile = tile_all + slot * in * R;
            for (int64_t tl = tb; tl < te; ++tl) {
                decode_weight_tile(w, tl * R, false, tile);
                for (int64_t t0 = 0; t0 < T; t0 += kDotTokens) {
                    const int nt = int(std::min<int64_t>(kDotTokens, T - t0));
                    float y[kDotTokens][R];
                    tile_dot(p.x + t0 * in, in, nt, tile, in, y);
                    for (int u = 0; u < nt; ++u)
                        for (int64_t r = 0; r < R && tl * R + r < out; ++r)
                            p.y[(t0 + u) * out + tl * R + r] = round ? round_bf16(y[u][r]) : y[u][r];
                }
            }
        });
        return Status::ok();
    }
    // act_quant(128) of the input: decoded e4m3 codes qa [T, in] and their scales sa [T, in/128]
    float* qa = scratch.take<float>(T * in);
    float* sa = scratch.take<float>(T * nb);
    parallel_rows(ex, T, 16, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t)
            for (int64_t k = 0; k < nb; ++k)
                sa[t * nb + k] = quant_block_e4m3(p.x + t * in + k * 128, 128, qa + t * in + k * 128, nullptr, nullptr);
    });
    float* ws_all = scratch.take<float>(slots * ws_len);
    parallel_slots(ex, tiles, grain, [&](int64_t slot, int64_t tb, int64_t te) {
        float* tile = tile_all + slot * in * R;
        float* ws = ws_all + slot * ws_len;
        for (int64_t tl = tb; tl < te; ++tl) {
            decode_weight_tile(w, tl * R, true, tile);
            decode_tile_scales(w, tl * R, ws);
            quantized_tile(p, qa, sa, tile, ws, tl * R);
        }
    });
    return Status::ok();
}

}  // namespace dsv4::backend::cpu
