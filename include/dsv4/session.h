// One sequence being processed: its decode state and position. Feeding tokens in any chunking gives the same
// logits (MODEL_SPEC §8.2): feed(all) == feed(first k) + feed(rest) == one token at a time, exactly in
// EnginePrecision::kF32 up to summation order, and within the reference band in kReference.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dsv4/engine.h"
#include "dsv4/status.h"

namespace dsv4 {

struct Logits {
    int64_t rows = 0;  // rows held: the tokens fed by the call that filled this (LogitRows::kAll), or 1 (kLast)
    int64_t vocab = 0;
    // [rows, vocab]: row i = next-token logits after fed token n - rows + i (n tokens fed), so the last row always
    // follows the last fed token
    std::vector<float> values;
    // MTP head, only when SessionOptions::mtp: [rows, vocab]. Row i is the MTP block's prediction of the token
    // after the fed token of values' row i (the target of that row), made from the main model's final streams at the
    // previous position and the embedding of that fed token — the draft speculative decoding would make. NaN for
    // position 0, which has no previous position.
    std::vector<float> mtp;
};

class Session {
public:
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    // Runs `tokens` at positions position() .. position()+n-1 and fills `out` (resized) with their logits: all n
    // rows, or with LogitRows::kLast only the last token's. Errors (state unchanged): empty list, id outside
    // [0, vocab), position() + n > max_context().
    // `sample`: a draw of the next token by the engine (engine.h EngineSample; only with kLast).
    Status feed(std::span<const int32_t> tokens, Logits* out, LogitRows rows = LogitRows::kAll,
                EngineSample* sample = nullptr);
    int64_t position() const;     // tokens fed so far
    int64_t max_context() const;
    // Forgets the sequence (position 0), keeping the buffers.
    void reset();

    struct Impl;  // defined in src/engine/

private:
    friend class Engine;
    explicit Session(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4
