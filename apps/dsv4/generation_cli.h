// What `dsv4 generate` and `dsv4 chat` share: the model / sampling flags (llama.cpp names, DSV4_* mirrors),
// loading a model folder or the embedded default with a progress bar, the streaming reply printer and the
// timings line.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "dsv4/engine.h"
#include "dsv4/generation.h"
#include "dsv4/session.h"
#include "dsv4/tokenizer.h"

namespace dsv4::cli {

struct ModelFlags {
    std::string model_dir;  // empty: the embedded default model
    std::string precision = "reference";
    std::string backend = "auto";  // cpu, cuda, or auto (cuda when a supported GPU is present)
    int threads = 0;
    int64_t context = 0;  // 0: min(model limit, 4096)
    int64_t batch = 0;  // prompt tokens per feed; 0: the whole prompt (the engine splits it into its passes)
    std::string devices = "auto";  // EngineOptions::cuda_devices (parse_cuda_devices)
    int64_t pass_rows = 0;         // EngineOptions::max_batch_rows
};

struct SamplingFlags {
    int64_t n_predict = 256;  // <= 0: until the end token or a full context
    double temperature = 1.0;
    int top_k = 0;
    double top_p = 1.0;
    double min_p = 0.0;
    double repeat_penalty = 1.0;
    int64_t seed = -1;  // < 0: a random seed (printed, so the run can be repeated)
    std::vector<std::string> stop;
    std::vector<std::string> logit_bias;  // "ID=BIAS" each (checked by the flag's validator)
    std::string format = "text";          // "json": the reply is one JSON object (GenerationOptions::json_object)
    bool ignore_eos = false;
    bool think = false;
    bool no_think = false;
};

void add_model_flags(CLI::App& cmd, ModelFlags& flags);
void add_sampling_flags(CLI::App& cmd, SamplingFlags& flags);

struct LoadedModel {
    std::filesystem::path dir;
    bool is_default = false;
    std::unique_ptr<Tokenizer> tokenizer;
    std::unique_ptr<Engine> engine;
    std::unique_ptr<Session> session;
};

// Loads -m DIR (or creates/reuses the embedded default), its tokenizer.json and one session of the requested
// context. Errors name the folder and what to do (missing tokenizer.json, vocabulary mismatch, ...).
Result<LoadedModel> load_model(const ModelFlags& flags);

// Generation options for one reply; resolves a random seed (reported through *seed_used).
engine::GenerationOptions generation_options(const SamplingFlags& flags, const Session& session, uint64_t* seed_used);

// "dsv4: model DIR (...), N layers, vocab V, reference numerics, cpu, T threads, context C, seed S" on stderr.
void print_header(const LoadedModel& m, const ModelFlags& flags, uint64_t seed);

// "dsv4: prompt N tokens in X s (R tok/s), generated M tokens in Y s (R tok/s), first token after Z s, stop: WHY"
std::string timings_line(const engine::GenerationTimings& t, engine::StopReason reason);

// Streams a reply to `out`: content as is, reasoning dimmed on a terminal (between <think> and </think>
// elsewhere), tool calls as "[tool call NAME ARGS]". `raw`: the generated text exactly, no reply parsing.
class ReplyPrinter {
public:
    ReplyPrinter(std::FILE* out, bool raw);
    void print(const engine::GenerationStep& step);
    void end();  // closes an open reasoning span and ends the line

private:
    void write(const std::string& s);
    void close_reasoning();
    std::FILE* out_;
    bool raw_;
    bool tty_;
    bool in_reasoning_ = false;
    bool at_line_start_ = true;
};

}  // namespace dsv4::cli
