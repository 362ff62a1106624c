// Synthetic GPU models and caches for benchmarks (gpu_synthetic.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "engine/cuda/gpu_model.h"

namespace dsv4::engine {

// A model of config `cfg` (official layout: FP8 linears, MXFP4 experts) with random weights generated on the GPUs
// (`devices` as load_gpu_model takes them), caches sized for one session of 4,096 tokens.
Result<std::shared_ptr<GpuModel>> make_synthetic_gpu_model(const model::ModelConfig& cfg, backend::Precision precision,
                                                           int64_t max_rows, std::span<const int> devices = {});
// Fills every cache pool of every stage (K=V rows, indexer keys, compressor states) with random valid rows.
Status fill_gpu_cache_synthetic(GpuModel& m);
// Gives `s` (on every stage) the pages of `position` tokens and sets its position, as if it had absorbed that many
// (the pools' contents being synthetic).
Status set_gpu_sequence_position(GpuModel& m, GpuSequence& s, int64_t position);

}  // namespace dsv4::engine
