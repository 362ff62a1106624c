// Checkpoint tools: describing a checkpoint folder (`dsv4 inspect`) and writing a random checkpoint with the real
// DeepSeek-V4 structure (`dsv4 make-model`). Thin entry points over the model module, which holds the details
// (what is validated, how weights and scales are drawn, the memory estimate).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "dsv4/status.h"

namespace dsv4 {

// Validates `dir` as the loader does (config.json, safetensors shards, every tensor's name, shape and dtype) and
// describes it: config, layer schedule, tensor counts and bytes per dtype, parameters (MTP share), and estimated GPU
// memory (weights plus one sequence's KV cache at a few context lengths). `json`: machine-readable instead of text.
Result<std::string> describe_checkpoint(const std::filesystem::path& dir, bool json);

struct RandomCheckpointOptions {
    std::string preset = "tiny";          // tiny | flash | pro
    int64_t layers = 0;                   // keep the first N main layers; 0: the preset's
    int64_t experts = 0;                  // routed experts per layer (top-k capped at it); 0: the preset's
    std::string expert_format;            // mxfp4 | nvfp4 | fp8; empty: the preset's
    std::string layout = "official";      // tensor naming: official | transformers
    uint64_t seed = 0;                    // one seed gives the same weights in both layouts and any layer subset
    bool header_only = false;             // sparse files: full-size headers, data region a hole
    uint64_t shard_size = 5'000'000'000;  // bytes of tensor data per shard at most (a larger tensor gets its own)
    std::filesystem::path out;            // created if needed; existing checkpoint files there are replaced
};

struct CheckpointWriteProgress {
    int shard = 0, shards = 0;  // shard being written (1-based) of how many
    uint64_t bytes_done = 0, bytes_total = 0;
    std::string file;           // shard file name
};

struct RandomCheckpointSummary {
    int64_t layers = 0;               // main layers written
    int64_t mtp_layers = 0;           // MTP layers written (the transformers layout has none)
    int64_t experts = 0;              // routed experts per layer
    std::string expert_format;        // "mxfp4", "nvfp4" or "fp8"
    std::string layout;               // "official" or "transformers"
    std::vector<std::string> files;   // written, relative to `out`
    int64_t tensors = 0;
    int64_t params = 0;               // logical parameters
    uint64_t bytes = 0;               // tensor data bytes
};

// Writes the checkpoint. Errors: an unknown preset, layout or expert format, a config the overrides make invalid,
// files that cannot be written (each names what to change).
Result<RandomCheckpointSummary> make_random_checkpoint(
    const RandomCheckpointOptions& options, const std::function<void(const CheckpointWriteProgress&)>& progress = {});

}  // namespace dsv4
