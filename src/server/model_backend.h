// What the scheduler runs: a model that hands out per-sequence runners with a fixed context. The real one wraps
// dsv4::Engine / dsv4::Session; tests plug in scripted models through the same interface.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dsv4/engine.h"
#include "dsv4/session.h"
#include "dsv4/status.h"

namespace dsv4::server {

class SequenceRunner {
public:
    virtual ~SequenceRunner() = default;
    // Runs `tokens` after everything fed since the last reset; the last row of `out->values` (last_logits_row)
    // becomes the last token's next-token logits (the engine's runner fills that row only: LogitRows::kLast).
    virtual Status feed(std::span<const int32_t> tokens, Logits* out) = 0;
    virtual void reset() = 0;
};

// One runner's share of a batched feed (ModelBackend::feed_batch); `status` is that runner's result.
struct RunnerFeed {
    SequenceRunner* runner = nullptr;
    std::span<const int32_t> tokens;
    Logits* out = nullptr;
    // a draw of the next token by the model (engine.h EngineSample), where the backend can; the others leave its
    // result's token at -1 and fill `out`
    EngineSample* sample = nullptr;
    Status status;
};

// Default prefill chunks (ServerOptions::chunk = 0). CPU: the engine's per-session pass. CUDA: 2,048 rows — the GPU
// runs longer passes faster (an 8K prompt in passes of 256 rows took ~3.5 s on an H200, of 2,048 ~1.7 s, of
// 8,192 ~1.4 s: docs/perf.md), but a pass also delays every decoding slot's next token by its whole duration
// (~0.4 s at 2,048 rows on 32 V4-Flash layers); --chunk 8192 suits a server with one slot.
inline constexpr int64_t kCpuPrefillChunk = 256;
inline constexpr int64_t kCudaPrefillChunk = 2048;

class ModelBackend {
public:
    virtual ~ModelBackend() = default;
    virtual int32_t vocab_size() const = 0;   // logits per row
    virtual int64_t max_context() const = 0;  // the model's own limit
    // The prefill chunk the server uses when --chunk is left at 0: what this backend runs well per pass.
    virtual int64_t default_prefill_chunk() const { return kCpuPrefillChunk; }
    // Which GPU holds which layers (ModelInfo::gpus); empty off the GPU.
    virtual std::string gpus() const { return {}; }
    // Called once per slot at startup: every buffer of the runner is sized here, never per request.
    virtual Result<std::unique_ptr<SequenceRunner>> create_runner(int64_t context) = 0;
    // Feeds several runners (each at most once) in one step; every feed's result is exactly its runner's feed().
    // The default runs them one after another; the engine backend runs them as one batched forward.
    virtual void feed_batch(std::span<RunnerFeed> feeds) {
        for (RunnerFeed& f : feeds) f.status = f.runner->feed(f.tokens, f.out);
    }
};

// The engine as a backend. `fold_vocab`: a test checkpoint whose vocabulary is smaller than the tokenizer's id
// space gets prompt ids folded modulo its vocabulary (generated ids are always inside it, hence valid tokenizer
// ids). Real checkpoints have vocab == tokenizer size and never fold; without the flag a smaller vocabulary is an
// error at startup.
class EngineModelBackend : public ModelBackend {
public:
    EngineModelBackend(std::unique_ptr<Engine> engine, bool fold_vocab);
    int32_t vocab_size() const override;
    int64_t max_context() const override;
    int64_t default_prefill_chunk() const override;
    std::string gpus() const override;
    Result<std::unique_ptr<SequenceRunner>> create_runner(int64_t context) override;
    // One Engine::step over the runners' sessions; if the step refuses its items (nothing ran), each runner feeds
    // alone so every item gets its own error.
    void feed_batch(std::span<RunnerFeed> feeds) override;

private:
    std::unique_ptr<Engine> engine_;
    bool fold_vocab_;
    std::vector<StepItem> items_;  // reused across steps
};

}  // namespace dsv4::server
