// WeightView helpers: names, exact row dequantisation, shape checks, and the bridge from the model's WeightRef.
#include <string>

#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_ops.h"
#include "core/quant_formats.h"
#include "model/weights.h"

namespace dsv4::backend {

const char* precision_name(Precision p) { return p == Precision::kReference ? "reference" : "f32"; }

const char* weight_format_name(WeightFormat f) {
    switch (f) {
        case WeightFormat::kF32: return "f32";
        case WeightFormat::kBF16: return "bf16";
        case WeightFormat::kFP8Block: return "fp8-block128";
        case WeightFormat::kMXFP4: return "mxfp4";
    }
    return "?";
}

void dequantize_weight_row(const WeightView& w, int64_t r, float* out) {
    switch (w.format) {
        case WeightFormat::kF32:
        case WeightFormat::kBF16:
            for (int64_t c = 0; c < w.cols; ++c) out[c] = w.at(r * w.cols + c);
            return;
        case WeightFormat::kFP8Block: {
            const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * w.cols;
            const int64_t scale_cols = (w.cols + 127) / 128;
            const uint8_t* srow = w.scale + (r / 128) * scale_cols;
            for (int64_t c = 0; c < w.cols; ++c) out[c] = e4m3_to_f32(row[c]) * e8m0_to_f32(srow[c / 128]);
            return;
        }
        case WeightFormat::kMXFP4:
            mxfp4_dequant_row(static_cast<const uint8_t*>(w.data) + r * (w.cols / 2), w.scale + r * (w.cols / 32),
                              w.cols, out);
            return;
    }
}

Status check_weight(const WeightView& w, int64_t rows, int64_t cols, const char* what) {
    if (!w.data) return invalid_argument(std::string(what) + ": weight missing");
    if (w.rows != rows || w.cols != cols)
        return invalid_argument(std::string(what) + ": weight is [" + std::to_string(w.rows) + ", " +
                                std::to_string(w.cols) + "], expected [" + std::to_string(rows) + ", " +
                                std::to_string(cols) + "]");
    if ((w.format == WeightFormat::kFP8Block || w.format == WeightFormat::kMXFP4) && !w.scale)
        return invalid_argument(std::string(what) + ": " + weight_format_name(w.format) + " weight without scales");
    if (w.format == WeightFormat::kMXFP4 && cols % 32 != 0)
        return invalid_argument(std::string(what) + ": MXFP4 columns not a multiple of 32");
    return Status::ok();
}

Result<WeightView> weight_view(const model::WeightRef& w) {
    WeightView v;
    if (!w.present()) return invalid_argument(w.name + ": tensor not present");
    v.rows = w.rows();
    v.cols = w.cols();
    switch (w.format) {
        case model::WeightFormat::kF32:
            v.format = WeightFormat::kF32;
            v.data = w.data + w.row_offset * v.cols * 4;
            return v;
        case model::WeightFormat::kBF16:
            v.format = WeightFormat::kBF16;
            v.data = w.data + w.row_offset * v.cols * 2;
            return v;
        case model::WeightFormat::kFP8Block128:
            if (w.scale_dtype != DType::kF8E8M0 && w.scale_dtype != DType::kU8)
                return unsupported(w.name + ": FP8 block scales of dtype " + std::string(dtype_name(w.scale_dtype)) +
                                   " (the CPU reference reads UE8M0 scales)");
            if (w.row_offset % 128 != 0)
                return unsupported(w.name + ": FP8 slice not aligned to a 128-row block");
            v.format = WeightFormat::kFP8Block;
            v.data = w.data + w.row_offset * v.cols;
            v.scale = w.scale + (w.row_offset / 128) * ((v.cols + 127) / 128);
            return v;
        case model::WeightFormat::kMXFP4:
            v.format = WeightFormat::kMXFP4;
            v.data = w.data + w.row_offset * (v.cols / 2);
            v.scale = w.scale + w.row_offset * (v.cols / 32);
            return v;
        default:
            return unsupported(w.name + ": weight format " + model::weight_format_name(w.format) +
                               " has no CPU reference view");
    }
}

}  // namespace dsv4::backend
