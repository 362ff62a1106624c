#include "backend/cuda/common/weights.h"

#include <string>

namespace dsv4::cuda {

using backend::WeightFormat;

size_t weight_data_bytes(const backend::WeightView& w) {
    switch (w.format) {
        case WeightFormat::kF32: return size_t(w.numel()) * 4;
        case WeightFormat::kBF16: return size_t(w.numel()) * 2;
        case WeightFormat::kFP8Block: return size_t(w.numel());
        case WeightFormat::kMXFP4: return size_t(w.numel()) / 2;
    }
    return 0;
}

size_t weight_scale_bytes(const backend::WeightView& w) {
    switch (w.format) {
        case WeightFormat::kFP8Block: return size_t((w.rows + 127) / 128) * size_t((w.cols + 127) / 128);
        case WeightFormat::kMXFP4: return size_t(w.rows) * size_t(w.cols / 32);
        default: return 0;
    }
}

DeviceWeightView DeviceWeight::view() const {
    return {format_, rows_, cols_, data_.data(), static_cast<const uint8_t*>(scale_.data())};
}

Result<DeviceWeight> upload_weight(const backend::WeightView& w, const char* name) {
    const std::string what = std::string("upload of weight ") + name;
    if (w.empty()) return invalid_argument(what + ": no data");
    if (w.rows <= 0 || w.cols <= 0) return invalid_argument(what + ": empty shape");
    const bool scaled = w.format == WeightFormat::kFP8Block || w.format == WeightFormat::kMXFP4;
    if (scaled && !w.scale)
        return invalid_argument(what + ": " + backend::weight_format_name(w.format) + " weight without scales");
    if (w.format == WeightFormat::kMXFP4 && w.cols % 32 != 0)
        return invalid_argument(what + ": MXFP4 columns " + std::to_string(w.cols) + " not a multiple of 32");
    DeviceWeight d;
    d.format_ = w.format;
    d.rows_ = w.rows;
    d.cols_ = w.cols;
    const size_t nd = weight_data_bytes(w), ns = weight_scale_bytes(w);
    DSV4_ASSIGN_OR_RETURN(d.data_, DeviceBuffer::allocate(nd, name));
    DSV4_RETURN_IF_ERROR(d.data_.upload(w.data, nd));
    if (ns) {
        DSV4_ASSIGN_OR_RETURN(d.scale_, DeviceBuffer::allocate(ns, name));
        DSV4_RETURN_IF_ERROR(d.scale_.upload(w.scale, ns));
    }
    return d;
}

Result<DeviceWeight> allocate_weight(WeightFormat format, int64_t rows, int64_t cols, const char* name) {
    if (rows <= 0 || cols <= 0) return invalid_argument(std::string("weight ") + name + ": empty shape");
    if (format == WeightFormat::kMXFP4 && cols % 32 != 0)
        return invalid_argument(std::string("weight ") + name + ": MXFP4 columns not a multiple of 32");
    const backend::WeightView shape{format, rows, cols, nullptr, nullptr};
    DeviceWeight d;
    d.format_ = format;
    d.rows_ = rows;
    d.cols_ = cols;
    DSV4_ASSIGN_OR_RETURN(d.data_, DeviceBuffer::allocate(weight_data_bytes(shape), name));
    if (const size_t ns = weight_scale_bytes(shape)) {
        DSV4_ASSIGN_OR_RETURN(d.scale_, DeviceBuffer::allocate(ns, name));
    }
    return d;
}

}  // namespace dsv4::cuda
