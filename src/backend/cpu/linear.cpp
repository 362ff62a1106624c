// Linear layers (MODEL_SPEC §7.1): W8A8 FP8 block GEMM and W4A8 MXFP4 GEMM exactly as DeepSeek's fp8_gemm /
// fp4_gemm accumulate (f32 per K block, then × activation scale × weight scale, summed in f32, bf16 out), plain
// bf16 / f32 GEMMs, and the f32 oracle mode (weights dequantised exactly, nothing rounded).
//
// Speed without changing a bit: the weight is decoded once per call, kRowTile output rows at a time, into a tile
// stored input-major ([in, kRowTile]) through byte → f32 lookup tables; every token of the call then reuses the
// tile. The inner loop runs the kRowTile rows' sums side by side (one SIMD lane per row), each lane adding its
// products in exactly the order of a plain per-row loop, so the results are those of the scalar reference.
// Parallel over tiles; scratch comes from the Exec's workspace (no allocation).
#include <array>

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

// y[t, o0 + r] for every token: the W8A8 / W4A8 sums over a raw tile (codes as values, scales apart).
void quantized_tile(const LinearParams& p, const float* qa, const float* sa, const float* tile, const float* ws,
                    int64_t o0) {
    const int64_t in = p.w.cols, out = p.w.rows, nb = in / 128;
    const int64_t kblock = p.w.format == WeightFormat::kMXFP4 ? kMxfp4GroupSize : 128;
    for (int64_t t = 0; t < p.tokens; ++t) {
        const float* a = qa + t * in;
        float y[R] = {};
        for (int64_t b = 0; b < in / kblock; ++b) {
            float acc[R] = {};
            for (int64_t i = b * kblock; i < (b + 1) * kblock; ++i)
                for (int64_t r = 0; r < R; ++r) acc[r] += a[i] * tile[i * R + r];
            const float s_a = sa[t * nb + (b * kblock) / 128];
            for (int64_t r = 0; r < R; ++r) y[r] += acc[r] * (s_a * ws[b * R + r]);
        }
        for (int64_t r = 0; r < R && o0 + r < out; ++r) p.y[t * out + o0 + r] = round_bf16(y[r]);
    }
}

}  // namespace

void decode_weight_tile(const WeightView& w, int64_t o0, bool codes_only, float* tile) {
    const DecodeTables& lut = tables();
    const int64_t in = w.cols;
    for (int64_t r = 0; r < R; ++r) {
        const int64_t o = o0 + r;
        if (o >= w.rows) {
            for (int64_t i = 0; i < in; ++i) tile[i * R + r] = 0.0f;
            continue;
        }
        switch (w.format) {
            case WeightFormat::kF32:
            case WeightFormat::kBF16:
                for (int64_t i = 0; i < in; ++i) tile[i * R + r] = w.at(o * in + i);
                break;
            case WeightFormat::kFP8Block: {
                const uint8_t* row = static_cast<const uint8_t*>(w.data) + o * in;
                if (codes_only) {
                    for (int64_t i = 0; i < in; ++i) tile[i * R + r] = lut.e4m3[row[i]];
                } else {  // fp8_block_dequant_row's e4m3 · 2^(s-127)
                    const uint8_t* srow = w.scale + (o / kFp8BlockSize) * fp8_block_count(in);
                    for (int64_t i = 0; i < in; ++i) tile[i * R + r] = lut.e4m3[row[i]] * lut.e8m0[srow[i / 128]];
                }
                break;
            }
            case WeightFormat::kMXFP4: {
                const uint8_t* row = static_cast<const uint8_t*>(w.data) + o * (in / 2);
                const uint8_t* srow = w.scale + o * (in / kMxfp4GroupSize);
                for (int64_t i = 0; i < in; i += 2) {
                    const uint8_t byte = row[i / 2];
                    const float s = codes_only ? 1.0f : lut.e8m0[srow[i / kMxfp4GroupSize]];
                    // codes_only: the code's value itself (× 1 is exact); else mxfp4_dequant_row's e2m1 · 2^(s-127)
                    tile[i * R + r] = lut.e2m1[byte & 0xf] * s;
                    tile[(i + 1) * R + r] = lut.e2m1[byte >> 4] * s;
                }
                break;
            }
        }
    }
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
                for (int64_t t = 0; t < T; ++t) {
                    float y[R];
                    tile_dot(p.x + t * in, tile, in, y);
                    for (int64_t r = 0; r < R && tl * R + r < out; ++r)
                        p.y[t * out + tl * R + r] = round ? round_bf16(y[r]) : y[r];
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
