// dequantize_rows: the exact f32 values of a weight's rows, for every WeightFormat (MODEL_SPEC §9.6). The scalar
// conversions are core/formats.h's; the layouts are those of docs/checkpoint-formats.md. Row r of a WeightRef is
// row row_offset + r of the stored [total_rows, cols] matrix (merged transformers experts are 3-D tensors read
// as [E * rows, cols]).
#include <cstring>

#include "core/formats.h"
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

// A block / group scale as f32: UE8M0 (2^(b-127)), e4m3 (NVFP4 groups) or plain f32 (FP8 -Base experts).
float scale_at(const WeightRef& w, int64_t index) {
    switch (w.scale_dtype) {
        case DType::kF8E8M0: return e8m0_to_f32(w.scale[index]);
        case DType::kF8E4M3: return e4m3_to_f32(w.scale[index]);
        case DType::kF32: return load_f32(w.scale + 4 * index);
        default: return 0.0f;
    }
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
                for (int64_t c = 0; c < cols; ++c)
                    o[c] = e4m3_to_f32(w.data[base + c]) * scale_at(w, (row / 128) * scale_cols + c / 128);
                break;
            }
            case WeightFormat::kMXFP4:
            case WeightFormat::kNVFP4: {
                const bool mx = w.format == WeightFormat::kMXFP4;
                const int64_t group = mx ? 32 : 16, groups = cols / group;
                const uint8_t* packed = w.data + row * (cols / 2);
                for (int64_t c = 0; c < cols; ++c) {
                    const uint8_t byte = packed[c >> 1];
                    const uint8_t code = (c & 1) ? static_cast<uint8_t>(byte >> 4) : static_cast<uint8_t>(byte & 0xf);
                    const float v = e2m1_to_f32(code) * scale_at(w, row * groups + c / group);
                    o[c] = mx ? v : v * w.global_scale;
                }
                break;
            }
        }
    }
}

}  // namespace dsv4::model
