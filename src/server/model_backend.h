// What the scheduler runs: a model that hands out per-sequence runners with a fixed context. The real one wraps
// dsv4::Engine / dsv4::Session; tests plug in scripted models through the same interface.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "dsv4/engine.h"
#include "dsv4/session.h"
#include "dsv4/status.h"

namespace dsv4::server {

class SequenceRunner {
public:
    virtual ~SequenceRunner() = default;
    // Runs `tokens` after everything fed since the last reset; `out->values` becomes [tokens, vocab] f32.
    virtual Status feed(std::span<const int32_t> tokens, Logits* out) = 0;
    virtual void reset() = 0;
};

class ModelBackend {
public:
    virtual ~ModelBackend() = default;
    virtual int32_t vocab_size() const = 0;   // logits per row
    virtual int64_t max_context() const = 0;  // the model's own limit
    // Called once per slot at startup: every buffer of the runner is sized here, never per request.
    virtual Result<std::unique_ptr<SequenceRunner>> create_runner(int64_t context) = 0;
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
    Result<std::unique_ptr<SequenceRunner>> create_runner(int64_t context) override;

private:
    std::unique_ptr<Engine> engine_;
    bool fold_vocab_;
};

}  // namespace dsv4::server
