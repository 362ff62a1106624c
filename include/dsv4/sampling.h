// Token sampling over f32 logits: greedy, temperature, top-k, top-p, min-p, repetition / presence / frequency
// penalties, a logit bias, a per-sequence seeded RNG and top-n logprobs. docs/chat.md ("Sampling") states the exact
// semantics.
//
// A Sampler owns every buffer it needs, sized for the vocabulary at construction: sample() never allocates.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "dsv4/status.h"

namespace dsv4 {

struct TokenBias {
    int32_t token = 0;
    float bias = 0;
};
inline constexpr size_t kMaxLogitBias = 1024;

struct SamplingParams {
    float temperature = 1.0f;         // <= 0: greedy (argmax, lowest id on ties)
    int32_t top_k = 0;                // keep the k most likely tokens; <= 0 or >= vocab: off
    float top_p = 1.0f;               // nucleus: smallest prefix (by probability) whose mass reaches top_p; 1: off
    float min_p = 0.0f;               // drop tokens with p < min_p * p_max; 0: off
    float repetition_penalty = 1.0f;  // CTRL / llama.cpp: seen token logit l -> l / r if l > 0 else l * r; 1: off
    float presence_penalty = 0.0f;    // OpenAI: l -= presence_penalty if the token was seen
    float frequency_penalty = 0.0f;   // OpenAI: l -= frequency_penalty * count
    int32_t penalty_last_n = -1;      // how many of the most recent history tokens count; -1: all, 0: none
    uint64_t seed = 0;
    int32_t top_logprobs = 0;         // alternatives to report, 0..kMaxTopLogprobs
    // OpenAI's logit_bias: each bias added to its token's logit before everything above (-100 all but bans the token,
    // +100 all but forces it); at most kMaxLogitBias entries, biases in [-100, 100]; ids outside the vocabulary are
    // ignored here (Generation rejects them). Logprobs describe the biased distribution.
    std::vector<TokenBias> logit_bias;
};

// Validates ranges (temperature >= 0, 0 < top_p <= 1, 0 <= min_p <= 1, repetition_penalty > 0, top_logprobs in
// 0..kMaxTopLogprobs, logit_bias as described above, finite values) with a message naming the field.
Status validate(const SamplingParams& params);

inline constexpr int kMaxTopLogprobs = 20;

struct TokenLogprob {
    int32_t token = -1;
    float logprob = 0;
};

struct SampleResult {
    int32_t token = -1;
    float logprob = 0;  // of the chosen token, under the distribution described in docs/chat.md
    int32_t num_top = 0;
    std::array<TokenLogprob, kMaxTopLogprobs> top{};  // most likely first (ties: lower id first)
};

// xoshiro256** seeded through splitmix64: a small, fast generator with a copyable per-sequence state.
class Rng {
public:
    explicit Rng(uint64_t seed = 0) { reseed(seed); }
    void reseed(uint64_t seed);
    uint64_t next();
    double uniform();  // [0, 1) with 53 random bits
    std::array<uint64_t, 4> state() const { return s_; }
    void set_state(const std::array<uint64_t, 4>& s) { s_ = s; }

private:
    std::array<uint64_t, 4> s_{};
};

class Sampler {
public:
    // `vocab_size` logits per call (129,280 for V4). Buffers are reserved here, once.
    Sampler(int32_t vocab_size, const SamplingParams& params);

    // Restarts the random stream from params.seed (same seed, same logits -> same tokens).
    void reset();
    // Takes new parameters and restarts the random stream from their seed, keeping every buffer: a sampler reused
    // across requests allocates nothing (but for a logit_bias list longer than any before). Same effect as
    // constructing a new Sampler(vocab_size, params).
    void configure(const SamplingParams& params);
    const SamplingParams& params() const { return params_; }
    int32_t vocab_size() const { return vocab_; }
    Rng& rng() { return rng_; }

    // logits: [vocab_size]. history: tokens seen so far (the caller decides: OpenAI semantics pass the generated
    // tokens only); the last penalty_last_n of them count for the penalties. Ids outside the vocabulary are
    // ignored. Errors: a logits span of the wrong size, no finite logit, a +infinity logit. Parameters are not
    // re-checked here: call validate() when they come from a user.
    Status sample(std::span<const float> logits, std::span<const int32_t> history, SampleResult& result);

    // The logits after bias, penalties and temperature of the last call (the distribution logprobs are taken from).
    std::span<const float> processed_logits() const { return work_; }

private:
    void apply_penalties(std::span<const int32_t> history);
    void fill_top_logprobs(double log_z, SampleResult& result);
    int32_t pick_from_candidates(size_t count, double total);
    size_t collect_within(float gap, float max_logit);

    int32_t vocab_;
    SamplingParams params_;
    Rng rng_;
    std::vector<float> work_;      // [vocab] penalised, temperature-scaled logits
    std::vector<int32_t> order_;   // [vocab] candidate ids
    std::vector<float> probs_;     // [vocab] unnormalised probabilities e^(l - max) by token id
    std::vector<int32_t> counts_;  // [vocab] occurrences in the penalty window (zero between calls)
    std::vector<int32_t> touched_; // [vocab] ids with counts_ > 0
};

}  // namespace dsv4
