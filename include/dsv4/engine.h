// Public API: load a DeepSeek-V4 checkpoint folder and create per-sequence sessions (session.h).
//
//   auto engine = dsv4::Engine::load("/models/tiny", {.precision = dsv4::EnginePrecision::kF32});
//   auto session = (*engine)->create_session({.max_context = 4096});
//   dsv4::Logits logits;
//   Status s = (*session)->feed(token_ids, &logits);   // logits.values: [T, vocab] f32
//
// The engine owns the weights (memory-mapped, read-only) and may be shared by many sessions; every session owns
// its own decode state (window rings, compressed entries, compressor running state). An Engine must outlive the
// sessions it created.
//
// Several sequences advance together in one batched step (continuous batching):
//
//   dsv4::StepItem items[] = {{a.get(), prompt_chunk, &logits_a}, {b.get(), {&next_b, 1}, &logits_b}};
//   Status s = (*engine)->step(items);  // each item: exactly what session->feed(tokens, out) would give
//
// The token rows of all items form one forward pass: every weight-bound op (linears, experts, router, mHC, norms,
// the head) reads each weight once for all rows, while each sequence's attention state is its own.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dsv4/status.h"

namespace dsv4 {

class Session;
struct Logits;
struct SamplingParams;  // sampling.h
struct SampleResult;    // sampling.h

// Which of the fed tokens' logits a feed returns: every row (scoring a text, the `logits` command), or only the
// last one (generation: the next token's distribution). kLast skips the LM head on the other rows and the host
// memory for them (vocab f32 values, ~0.5 MB per token for V4).
enum class LogitRows : uint8_t { kAll, kLast };

// A draw of the next token by the engine, beside the logits, where the backend can (the CUDA backend's decode
// steps): only the result comes back instead of the last row's vocabulary of f32 logits (0.5 MB for V4), and the
// host's pass over them is skipped. The draw is Sampler::sample's (sampling.h) with no penalty history and `uniform`
// as its one random number; its sums run in another order, so a draw within f64 rounding of the boundary between
// two tokens may take the other one, and log-probabilities may differ in the last bit (docs/generation.md).
struct EngineSample {
    const SamplingParams* params = nullptr;  // valid (dsv4::validate)
    double uniform = 0;                      // in [0, 1): the caller's Rng::uniform(); unused when greedy
    // Filled by the step: token, logprob, alternatives. token = -1 where the engine did not draw (the CPU backend,
    // prefill passes, a row whose candidates pass the device's limits, a logit bias, non-finite logits): then the
    // feed's logits are filled as without the request, for the caller's Sampler. Where token >= 0 the logits row is
    // left unfilled.
    SampleResult* result = nullptr;
    // The history the penalties count (Sampler::sample's `history`); read during the feed only.
    std::span<const int32_t> history;
};

// One sequence's work in a batched step: run `tokens` on `session` (as Session::feed would) and fill `out`.
struct StepItem {
    Session* session = nullptr;      // created by this engine; at most once per step
    std::span<const int32_t> tokens;  // [n >= 1]
    Logits* out = nullptr;  // resized to [n, vocab], or [1, vocab] for kLast (and mtp when the session has it)
    LogitRows logit_rows = LogitRows::kAll;
    EngineSample* sample = nullptr;  // a draw of the next token by the engine; only with kLast
};

// Numerics (DESIGN §3): kReference = DeepSeek's reference arithmetic (FP8/FP4 activation quantisation, bf16
// rounding, KV QAT simulation); kF32 = every activation in f32, weights dequantised exactly (the oracle mode).
enum class EnginePrecision { kReference, kF32 };
enum class EngineBackend { kCpu, kCuda };

const char* engine_precision_name(EnginePrecision p);  // "reference", "f32"
const char* engine_backend_name(EngineBackend b);      // "cpu", "cuda"

// Whether this build and machine can run the CUDA backend (built with CUDA, a driver, a Hopper GPU); when not and
// `why` is given, it says what is missing.
bool cuda_backend_available(std::string* why = nullptr);
// "cpu", "cuda", or "auto": CUDA when cuda_backend_available(), else CPU (the command line's default).
Result<EngineBackend> parse_engine_backend(const std::string& name);
// EngineOptions::cuda_devices from "auto" (or nothing): none named; or GPU indices separated by commas ("0,1").
Result<std::vector<int>> parse_cuda_devices(const std::string& text);

struct EngineOptions {
    EnginePrecision precision = EnginePrecision::kReference;
    EngineBackend backend = EngineBackend::kCpu;
    int threads = 0;  // CPU worker threads; 0 = hardware concurrency
    // Token rows of one batched forward pass of Engine::step (all items together); its buffers are allocated at
    // load. A step with more rows runs as several passes, each item keeping the chunking Session::feed uses.
    // 0: the backend's default, 512 rows on the CPU and 8,192 on CUDA (a long prompt is fed 8,192 tokens at a time,
    // the routed experts of such a pass on the prefill MoE kernel); CUDA passes are at most 8,192 rows. Lower it on
    // CUDA to give the pass buffers' memory (~0.4 MB per row at V4-Flash, more at long contexts) to the caches.
    int64_t max_batch_rows = 0;
    // CUDA backend: capture decode steps (one token per sequence) as CUDA graphs and replay them. Off: every step
    // is queued op by op (the same arithmetic; for comparisons).
    bool cuda_graphs = true;
    // CUDA backend caches (paged, shared by all sessions): sessions at once; a session's largest context (0 = the
    // model's max_position_embeddings); tokens held by all sessions together (0 = max(sessions x 4096, that
    // context)). Pages are taken as sessions grow; a step that needs a page when none is free fails with
    // kResourceExhausted.
    int64_t cuda_sessions = 64;
    int64_t cuda_max_context = 0;
    int64_t cuda_cache_tokens = 0;
    // CUDA backend: run a few passes on a scratch session at load (a prompt of a few hundred tokens, a short one,
    // two decode steps) so that the one-time costs of first use — each kernel's module loaded at its first launch,
    // cuBLASLt's first calls, the batch-1 decode graph's capture — are paid by the load, not by the first request
    // (on an H200 at V4-Flash shapes: +150 ms on the first 8K prompt, +80 ms on the first decode step). No effect
    // on any result: the scratch session's cache pages are returned and every later pass is the same arithmetic.
    bool cuda_warmup = true;
    // CUDA backend: the GPUs to hold the model, in layer order (a pipeline: each holds a contiguous range of layers
    // in proportion to its free memory, the embedding with the first and the head with the last; a GPU named twice
    // holds two stages). Empty: GPU 0 alone when the model fits it, else the fewest GPUs from 0 up that hold it
    // (V4-Flash's 149 GiB of weights take two H200s).
    std::vector<int> cuda_devices;
};

// Counters of the CUDA backend's decode graphs (all zero on the CPU backend), the load's warm-up included.
struct EngineStats {
    int64_t graph_captures = 0;  // decode steps captured (one per new set of sequences stepping together)
    int64_t graph_replays = 0;   // decode steps run from a captured graph
    int64_t graph_nodes = 0;     // kernels and copies in the largest captured decode graph (of each GPU, summed)
    int64_t graph_programmatic_edges = 0;  // its kernel-to-kernel edges with overlapped launch (most of them)
    double warmup_ms = 0;  // the load's warm-up passes (EngineOptions::cuda_warmup), wall time; 0 when none ran
};

struct ModelInfo {
    std::string name;             // the folder the model came from
    std::string layout;           // "official" or "transformers"
    int64_t vocab_size = 0;
    int64_t hidden_size = 0;
    int64_t num_layers = 0;       // main layers (MTP not included)
    int64_t max_position = 0;     // the model's own context limit (max_position_embeddings)
    bool has_mtp = false;         // the checkpoint holds an MTP block (mtp.0.*)
    // CUDA backend: which GPU holds which layers, "GPU 0: layers 0-21 (71.3 GiB); GPU 1: layers 22-42 (70.9 GiB)"
    // (the bytes the placement planned: weights, caches, pass buffers); empty on the CPU
    std::string gpus;
};

struct SessionOptions {
    // Tokens the session can hold; every state buffer is sized from it at creation. 0 = min(max_position, 4096).
    int64_t max_context = 0;
    // Also compute the MTP head's logits (needs a checkpoint with an MTP block). See session.h for the layout.
    bool mtp = false;
};

class Engine {
public:
    static Result<std::unique_ptr<Engine>> load(const std::filesystem::path& model_dir, const EngineOptions& options);
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    const ModelInfo& info() const;
    const EngineOptions& options() const;
    EngineStats stats() const;
    Result<std::unique_ptr<Session>> create_session(const SessionOptions& options = {});

    // Advances every item's session by its tokens in batched forward passes. Item i's logits (and MTP logits) are
    // those session->feed(tokens, out) gives: bit for bit in both precisions (every batched op is row-wise and
    // keeps its reduction order; see docs/architecture.md "Batched steps"). Errors before any work (no session
    // changed): null session or out, a session of another engine or twice in the step, a session that failed
    // earlier, empty tokens, an id outside the vocabulary, a context overflow. A failure during the forward leaves
    // every session of the step needing reset(), except a full CUDA cache at the step's first pass
    // (kResourceExhausted, nothing run: retry once other sessions end). Steps of one engine run one at a time (a lock); allocates nothing
    // once the outputs have their capacity and a step of as many items has run before.
    Status step(std::span<const StepItem> items);

    struct Impl;  // defined in src/engine/

private:
    explicit Engine(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4
