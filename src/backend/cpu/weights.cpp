// WeightView helpers: names, exact row dequantisation (core/quant_formats.h decoders), shape checks, and the one
// bridge from the model's WeightRef (with the CPU reference's f32-copy fallback).
#include <memory>
#include <string>
#include <vector>

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
        case WeightFormat::kFP8Block:
            fp8_block_dequant_row(static_cast<const uint8_t*>(w.data) + r * w.cols,
                                  w.scale + (r / kFp8BlockSize) * fp8_block_count(w.cols), w.cols, out);
            return;
        case WeightFormat::kMXFP4:
            mxfp4_dequant_row(static_cast<const uint8_t*>(w.data) + r * (w.cols / 2),
                              w.scale + r * (w.cols / kMxfp4GroupSize), w.cols, out);
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

const float* WeightCopies::add(std::vector<float> values) {
    owned_.push_back(std::make_unique<std::vector<float>>(std::move(values)));
    return owned_.back()->data();
}

namespace {

bool ue8m0_scales(const model::WeightRef& w) { return w.scale_dtype == DType::kF8E8M0 || w.scale_dtype == DType::kU8; }

// The fallback of the CPU reference: an exact f32 copy (model::dequantize_rows) of a weight no format describes.
Result<WeightView> f32_copy(const model::WeightRef& w, WeightCopies* copies, const char* why) {
    if (!copies)
        return unsupported(w.name + ": " + why + "; it has no view in its stored encoding (the CPU reference reads " +
                           "it through an f32 copy, which needs a WeightCopies store)");
    WeightView v;
    v.format = WeightFormat::kF32;
    v.rows = w.rows();
    v.cols = w.cols();
    std::vector<float> values(static_cast<size_t>(v.rows * v.cols));
    model::dequantize_rows(w, 0, v.rows, values.data());
    v.data = copies->add(std::move(values));
    return v;
}

}  // namespace

Result<WeightView> weight_view(const model::WeightRef& w, WeightCopies* copies) {
    if (!w.present()) return invalid_argument(w.name + ": tensor not present");
    WeightView v;
    v.rows = w.rows();
    v.cols = w.cols();
    const int64_t off = w.row_offset;
    switch (w.format) {
        case model::WeightFormat::kF32:
            v.format = WeightFormat::kF32;
            v.data = w.data + off * v.cols * 4;
            return v;
        case model::WeightFormat::kBF16:
            v.format = WeightFormat::kBF16;
            v.data = w.data + off * v.cols * 2;
            return v;
        case model::WeightFormat::kFP8Block128:
            if (!ue8m0_scales(w)) return f32_copy(w, copies, "FP8 with F32 block scales");
            if (off % kFp8BlockSize != 0) return f32_copy(w, copies, "FP8 slice not aligned to a 128-row block");
            v.format = WeightFormat::kFP8Block;
            v.data = w.data + off * v.cols;
            v.scale = w.scale + (off / kFp8BlockSize) * fp8_block_count(v.cols);
            return v;
        case model::WeightFormat::kMXFP4:
            if (!ue8m0_scales(w)) return f32_copy(w, copies, "MXFP4 with non-UE8M0 scales");
            v.format = WeightFormat::kMXFP4;
            v.data = w.data + off * (v.cols / 2);
            v.scale = w.scale + off * (v.cols / kMxfp4GroupSize);
            return v;
        case model::WeightFormat::kF16: return f32_copy(w, copies, "F16 weight");
        case model::WeightFormat::kNVFP4: return f32_copy(w, copies, "NVFP4 weight");
        default:
            return unsupported(w.name + ": weight format " + model::weight_format_name(w.format) +
                               ", which no matrix op reads");
    }
}

}  // namespace dsv4::backend
