// Checkpoint weights on the GPU in their shipped encoding (DESIGN §1: no dequantised copies): FP8 e4m3 bytes with
// UE8M0 128x128 block scales, MXFP4 nibbles with UE8M0 per-32 scales, BF16, F32. DeviceWeight owns the memory;
// DeviceWeightView is what kernels take (same meaning as backend::WeightView, device pointers, 16-byte aligned).
#pragma once

#include <cstdint>

#include "backend/cuda/common/buffer.h"
#include "backend/ops.h"

namespace dsv4::cuda {

struct DeviceWeightView {
    backend::WeightFormat format = backend::WeightFormat::kF32;
    int64_t rows = 0, cols = 0;      // logical [out, in]
    const void* data = nullptr;      // as backend::WeightView::data
    const uint8_t* scale = nullptr;  // FP8: [ceil(rows/128), ceil(cols/128)]; MXFP4: [rows, cols/32]
    bool empty() const { return data == nullptr; }
};

class DeviceWeight {
public:
    DeviceWeightView view() const;
    size_t bytes() const { return data_.bytes() + scale_.bytes(); }

private:
    friend Result<DeviceWeight> upload_weight(const backend::WeightView& w, const char* name);
    friend Result<DeviceWeight> allocate_weight(backend::WeightFormat format, int64_t rows, int64_t cols,
                                                const char* name);
    backend::WeightFormat format_ = backend::WeightFormat::kF32;
    int64_t rows_ = 0, cols_ = 0;
    DeviceBuffer data_, scale_;
};

// Bytes of the data and scale arrays of a weight in its shipped format.
size_t weight_data_bytes(const backend::WeightView& w);
size_t weight_scale_bytes(const backend::WeightView& w);
// Copies the raw bytes (the host view may be unaligned: an mmapped checkpoint). `name` appears in errors.
Result<DeviceWeight> upload_weight(const backend::WeightView& w, const char* name);
// Device memory for a weight of this format and shape, contents unset (synthetic weights are generated in place).
Result<DeviceWeight> allocate_weight(backend::WeightFormat format, int64_t rows, int64_t cols, const char* name);

}  // namespace dsv4::cuda
