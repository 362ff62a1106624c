// make-model: writes a structurally real DeepSeek-V4 checkpoint with random weights — config.json, safetensors
// shards (+ model.safetensors.index.json when sharded), every tensor of checkpoint_schema() in the official or the
// transformers layout. Weights are drawn per tensor from a generator seeded by (seed, official tensor name), so
// one seed gives the same model in both layouts and for any --layers subset; quantised tensors carry correctly
// computed scales (FP8 128x128 + UE8M0, MXFP4 + UE8M0 per 32, NVFP4 + e4m3 per 16 + global), and the
// transformers layout stores the dequantised values of the same quantised weights.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dsv4/status.h"
#include "model/config.h"
#include "model/schema.h"

namespace dsv4::model {

struct MakeModelOptions {
    std::string preset = "tiny";            // tiny | flash | pro
    std::optional<int64_t> layers;          // keep the first N main layers (schedule and hash layers truncated)
    std::optional<int64_t> experts;         // routed experts per layer (top-k capped at it)
    std::optional<int64_t> vocab;           // embedding / head rows (e.g. 129280 to cover a real tokenizer)
    std::optional<ExpertFormat> expert_format;
    uint64_t seed = 0;
    Layout layout = Layout::kOfficial;
    bool header_only = false;               // sparse files: full-size headers, data region a hole
    uint64_t shard_size = 5'000'000'000;    // bytes of tensor data per shard at most (a larger tensor gets its own)
    std::filesystem::path out;
};

struct MakeModelProgress {
    int shard = 0, shards = 0;              // shard being written (1-based) of how many
    uint64_t bytes_done = 0, bytes_total = 0;
    std::string file;                       // shard file name
};
using MakeModelProgressFn = std::function<void(const MakeModelProgress&)>;

struct MakeModelResult {
    ModelConfig config;
    std::vector<std::string> files;  // written, relative to `out`
    SchemaTotals totals;
};

// The config make-model writes: the preset with the overrides applied, validated.
Result<ModelConfig> make_model_config(const MakeModelOptions& o);

// The f32 values of the logical tensor `t` (official name) for `seed` — the numbers every layout encodes.
// kTable tensors are not floats: see random_tid2eid.
std::vector<float> random_logical_values(const LogicalTensor& t, uint64_t seed);
// tid2eid [vocab, top-k]: distinct expert ids in [0, n_experts) per row.
std::vector<int64_t> random_tid2eid(const LogicalTensor& t, int64_t n_experts, uint64_t seed);

// Writes the checkpoint into o.out (created if needed; existing checkpoint files there are replaced).
Result<MakeModelResult> make_model(const MakeModelOptions& o, const MakeModelProgressFn& progress = {});

}  // namespace dsv4::model
