// dequantize_rows: the exact f32 values of a weight's rows, for every WeightFormat (MODEL_SPEC §9.6). Packed rows
// go through core/quant_formats.h's row decoders (the same ones the CPU backend uses); scalar conversions are
// core/formats.h's; the layouts are those of docs/checkpoint-formats.md. Row r of a WeightRef is
// row row_offset + r of the stored [total_rows, cols] matrix (merged transformers experts are 3-D tensors read
// as [E * rows, cols]).
#include <cstring>

#include "core/formats.h"
#include "core/quant_formats.h"
#include "model/weights.h"

namespace dsv4::model {
namespace {

uint16_t load_u16(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}
float load_f32(const uint8_t* p) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
}

}  // namespace

void dequantize_rows(const WeightRef& w, int64_t row_begin, int64_t row_count, float* out) {
    const int64_t cols = w.cols();
    for (int64_t r = 0; r < row_count; ++r) {
        const int64_t row = w.row_offset + row_begin + r;  // row of the stored matrix
        float* o = out + r * cols;
        const int64_t base = row * cols;                   // element index of (row, 0)
        switch (w.format) {
            case WeightFormat::kNone: std::memset(o, 0, sizeof(float) * static_cast<size_t>(cols)); break;
            case WeightFormat::kF32:
                for (int64_t c = 0; c < cols; ++c) o[c] = load_f32(w.data + 4 * (base + c));
                break;
            case WeightFormat::kBF16:
                for (int64_t c = 0; c < cols; ++c) o[c] = bf16_to_f32(load_u16(w.data + 2 * (base + c)));
                break;
            case WeightFormat::kF16:
                for (int64_t c = 0; c < cols; ++c) o[c] = f16_to_f32(load_u16(w.data + 2 * (base + c)));
                break;
            case WeightFormat::kI64:
                for (int64_t c = 0; c < cols; ++c) {
                    int64_t v;
                    std::memcpy(&v, w.data + 8 * (base + c), 8);
                    o[c] = static_cast<float>(v);
                }
                break;
            case WeightFormat::kI32:
                for (int64_t c = 0; c < cols; ++c) {
                    int32_t v;
                    std::memcpy(&v, w.data + 4 * (base + c), 4);
                    o[c] = static_cast<float>(v);
                }
                break;
            case WeightFormat::kFP8Block128: {
                const int64_t scale_cols = w.scale_shape.size() == 2 ? w.scale_shape[1] : 1;
                const uint8_t* data = w.data + base;
                if (w.scale_dtype == DType::kF32) {  // FP8 -Base experts: f32 block scales, no core row decoder
                    for (int64_t c = 0; c < cols; ++c)
                        o[c] = e4m3_to_f32(data[c]) * load_f32(w.scale + 4 * ((row / 128) * scale_cols + c / 128));
                } else {
                    fp8_block_dequant_row(data, w.scale + (row / 128) * scale_cols, cols, o);
                }
                break;
            }
            case WeightFormat::kMXFP4:
                mxfp4_dequant_row(w.data + row * (cols / 2), w.scale + row * (cols / kMxfp4GroupSize), cols, o);
                break;
            case WeightFormat::kNVFP4:
                nvfp4_dequant_row(w.data + row * (cols / 2), w.scale + row * (cols / kNvfp4GroupSize), w.global_scale,
                                  cols, o);
                break;
        }
    }
}

}  // namespace dsv4::model
