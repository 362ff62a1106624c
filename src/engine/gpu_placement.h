// Which layers each GPU holds when a model is spread over several: a pipeline, the layers in order, one contiguous
// range per GPU, the residual streams handed from each to the next (engine/cuda/gpu_model.h GpuModel::next;
// docs/architecture.md "Several GPUs"). Arithmetic on byte counts only, so it is tested without a GPU.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dsv4/status.h"

namespace dsv4::engine {

struct GpuMemory {  // a GPU the model may use
    int device = 0;
    uint64_t free_bytes = 0;
};

// What a stage costs: per layer (its weights and caches), once on the stage with layer 0 (the embedding), once on
// the stage with the last layer (the final norm and head, the logits buffers), on every stage (pass buffers, the
// CUDA context, graphs).
struct GpuPlacementCosts {
    std::vector<uint64_t> layer_bytes;
    uint64_t first_bytes = 0;
    uint64_t last_bytes = 0;
    uint64_t stage_bytes = 0;
};

struct GpuStagePlan {
    int device = 0;
    int64_t first_layer = 0, end_layer = 0;  // layers [first_layer, end_layer)
    uint64_t bytes = 0;                      // its costs
};

// The stages over `gpus`, taken in order. every_gpu: each GPU given takes layers (unless the model is too small to
// give each one), else the fewest leading GPUs that hold the model. Each stage's bytes fit its GPU's free memory,
// and the largest fraction of free memory any stage uses is as small as a contiguous split allows. Ends with
// kResourceExhausted, naming what is needed and what is free, when the model does not fit.
Result<std::vector<GpuStagePlan>> place_gpu_stages(const GpuPlacementCosts& costs, std::span<const GpuMemory> gpus,
                                                   bool every_gpu);

// "GPU 0: layers 0-21 (71.3 GiB)" per stage, separated by "; ".
std::string describe_gpu_stages(std::span<const GpuStagePlan> stages);

}  // namespace dsv4::engine
