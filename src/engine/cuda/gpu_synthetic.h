// Synthetic GPU models and caches for benchmarks (gpu_synthetic.cpp).
#pragma once

#include <cstdint>
#include <memory>

#include "engine/cuda/gpu_model.h"

namespace dsv4::engine {

// A model of config `cfg` (official layout: FP8 linears, MXFP4 experts) with random weights generated on the GPU.
Result<std::shared_ptr<GpuModel>> make_synthetic_gpu_model(const model::ModelConfig& cfg,
                                                           backend::Precision precision, int64_t max_rows);
// Fills every cache of `s` with random entries and sets its position, as if `position` tokens had been absorbed.
Status fill_gpu_sequence_synthetic(GpuModel& m, GpuSequence& s, int64_t position);
// Device bytes a sequence state holds.
uint64_t gpu_sequence_bytes(const GpuSequence& s);

}  // namespace dsv4::engine
