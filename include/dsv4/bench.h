// Public API: the end-to-end GPU benchmark behind `dsv4 bench` (docs/perf.md). A V4-shaped model with synthetic
// weights generated on the GPU in the shipped formats (nothing is read from disk) and caches filled synthetically
// to each context; decode steps of each batch size are timed (CUDA events, median after warm-up) and reported
// with bytes moved and % of the copy bandwidth measured in the same run, then a chunked prefill.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "dsv4/engine.h"
#include "dsv4/sampling.h"
#include "dsv4/status.h"

namespace dsv4 {

struct GpuBenchOptions {
    std::string preset = "flash";  // flash or pro (shapes); the weights are synthetic
    int layers = 0;                // main layers to build; 0 = all that fit in 80 % of the free GPU memory
    int experts = 0;               // routed experts per layer; 0 = the preset's
    std::vector<int64_t> batches = {1, 8, 64, 256};
    std::vector<int64_t> contexts = {4096, 65536, 1048576};
    // tokens per session the caches are sized for; 0 = each point's context (plus its steps). The engine sizes them
    // for the model's max_position_embeddings unless told otherwise (EngineOptions::cuda_max_context: 1M tokens at
    // V4), so e.g. 1048576 times a short context's decode as a default session runs it
    int64_t capacity = 0;
    int warmup = 2;
    int steps = 10;                // timed decode steps per point (median reported)
    int64_t prefill_tokens = 8192;  // 0: skip the prefill measurement
    // the prefill's logits: the last row's, as generation asks for them (LogitRows::kLast), or every row's copied to
    // the host (scoring a text)
    bool prefill_all_logits = false;
    // each decode row's next token, drawn with `sampling` (default temperature 1, no filter; penalties count the
    // tokens the row was fed): on the GPU (EngineSample, as generation and the server ask), or the row's logits
    // copied to the host and drawn there by dsv4::Sampler on a thread pool
    SamplingParams sampling;
    bool draw_on_host = false;
    EnginePrecision precision = EnginePrecision::kReference;
    bool graphs = true;            // replay decode steps as CUDA graphs
    // the GPUs the model is spread over (EngineOptions::cuda_devices); empty: GPU 0, or the fewest that hold it.
    // With GPUs named, `layers` = 0 builds every layer that fits 80 % of their free memory together.
    std::vector<int> devices;
};

// Runs the benchmark, printing progress and a Markdown table to `out`.
Status run_gpu_bench(const GpuBenchOptions& options, std::FILE* out);

}  // namespace dsv4
