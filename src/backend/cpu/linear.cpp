// Linear layers (MODEL_SPEC §7.1): W8A8 FP8 block GEMM and W4A8 MXFP4 GEMM exactly as DeepSeek's fp8_gemm /
// fp4_gemm accumulate (f32 per K block, then × activation scale × weight scale, summed in f32, bf16 out), plain
// bf16 / f32 GEMMs, and the f32 oracle mode (weights dequantised exactly, nothing rounded).
// Parallel over output rows; scratch comes from the Exec's workspace (no allocation).
#include <array>

#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_ops.h"

namespace dsv4::backend::cpu {

namespace {

const std::array<float, 256>& e4m3_table() {
    static const std::array<float, 256> t = [] {
        std::array<float, 256> a{};
        for (int i = 0; i < 256; ++i) a[size_t(i)] = e4m3_to_f32(uint8_t(i));
        return a;
    }();
    return t;
}

// W8A8 / W4A8 in reference numerics. qa [T, in] decoded e4m3 activation codes, sa [T, in/128] their scales.
void quantized_gemm(const Exec& ex, const LinearParams& p, const float* qa, const float* sa) {
    const WeightView& w = p.w;
    const int64_t in = w.cols, out = w.rows, T = p.tokens, nb = in / 128;
    const bool fp4 = w.format == WeightFormat::kMXFP4;
    const int64_t kblock = fp4 ? 32 : 128;  // the accumulation block of the weight's scales
    const auto& lut = e4m3_table();
    Scratch scratch(ex);
    const int64_t slots = slot_count(ex, out, 4), ws_len = in / kblock + 1;
    float* wq_all = scratch.take<float>(slots * in);
    float* ws_all = scratch.take<float>(slots * ws_len);
    parallel_slots(ex, out, 4, [&](int64_t slot, int64_t ob, int64_t oe) {
        float* wq = wq_all + slot * in;
        float* ws = ws_all + slot * ws_len;
        for (int64_t o = ob; o < oe; ++o) {
            if (fp4) {
                const uint8_t* row = static_cast<const uint8_t*>(w.data) + o * (in / 2);
                for (int64_t i = 0; i < in; i += 2) {
                    wq[i] = e2m1_to_f32(row[i / 2] & 0xf);
                    wq[i + 1] = e2m1_to_f32(row[i / 2] >> 4);
                }
                for (int64_t b = 0; b < in / 32; ++b) ws[b] = e8m0_to_f32(w.scale[o * (in / 32) + b]);
            } else {
                const uint8_t* row = static_cast<const uint8_t*>(w.data) + o * in;
                for (int64_t i = 0; i < in; ++i) wq[i] = lut[row[i]];
                for (int64_t b = 0; b < nb; ++b) ws[b] = e8m0_to_f32(w.scale[(o / 128) * nb + b]);
            }
            for (int64_t t = 0; t < T; ++t) {
                const float* a = qa + t * in;
                float y = 0;
                for (int64_t b = 0; b < in / kblock; ++b) {
                    float acc = 0;
                    for (int64_t i = b * kblock; i < (b + 1) * kblock; ++i) acc += a[i] * wq[i];
                    y += acc * (sa[t * nb + (b * kblock) / 128] * ws[b]);
                }
                p.y[t * out + o] = round_bf16(y);
            }
        }
    });
}

// Every other case: W (dequantised exactly) · x in f32, rounded per mode and p.out.
void float_gemm(const Exec& ex, const LinearParams& p) {
    const WeightView& w = p.w;
    const int64_t in = w.cols, out = w.rows, T = p.tokens;
    const bool round = is_ref(ex) && p.out == LinearOut::kBF16;
    Scratch scratch(ex);
    float* rows = scratch.take<float>(slot_count(ex, out, 4) * in);
    parallel_slots(ex, out, 4, [&](int64_t slot, int64_t ob, int64_t oe) {
        float* row = rows + slot * in;
        for (int64_t o = ob; o < oe; ++o) {
            dequantize_weight_row(w, o, row);
            for (int64_t t = 0; t < T; ++t) {
                const float* a = p.x + t * in;
                float y = 0;
                for (int64_t i = 0; i < in; ++i) y += a[i] * row[i];
                p.y[t * out + o] = round ? round_bf16(y) : y;
            }
        }
    });
}

}  // namespace

Status linear(const Exec& ex, const LinearParams& p) {
    const char* op = "linear";
    DSV4_OP_CHECK(p.x && p.y && p.tokens >= 0, op, "null pointer or negative token count");
    DSV4_RETURN_IF_ERROR(check_weight(p.w, p.w.rows, p.w.cols, op));
    const bool quantized = p.w.format == WeightFormat::kFP8Block || p.w.format == WeightFormat::kMXFP4;
    if (is_ref(ex) && quantized) {
        DSV4_OP_CHECK(p.w.cols % 128 == 0, op, "W8A8/W4A8 needs the input width to be a multiple of 128");
        const int64_t in = p.w.cols, nb = in / 128;
        Scratch scratch(ex);
        float* qa = scratch.take<float>(p.tokens * in);
        float* sa = scratch.take<float>(p.tokens * nb);
        parallel_rows(ex, p.tokens, 16, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; ++t)
                for (int64_t k = 0; k < nb; ++k)
                    sa[t * nb + k] = quant_block_e4m3(p.x + t * in + k * 128, 128, qa + t * in + k * 128, nullptr, nullptr);
        });
        quantized_gemm(ex, p, qa, sa);
    } else {
        float_gemm(ex, p);
    }
    return Status::ok();
}

}  // namespace dsv4::backend::cpu
