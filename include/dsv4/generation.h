// One sequence's generation, step by step: prompt tokens -> feed -> sample -> streaming detokenisation -> stop
// strings -> reply parsing (reasoning / content / tool-call deltas) -> stop conditions, with timings. The caller
// owns the model state and does the feeding, so the same state machine serves a single CLI session and a
// scheduler that batches many sequences:
//
//   auto gen = Generation::create(tokenizer, vocab, prompt_ids, options);
//   while (!gen->finished()) {
//       std::span<const int32_t> in = gen->pending();   // prompt (any chunking), then the last sampled token
//       session.feed(in, &logits, LogitRows::kLast);  gen->fed(in.size());
//       gen->next(last_logits_row(logits), &step);     // step.text / step.events / step.finished
//   }
//
// run_generation() below is that loop over one Session. A scheduler slot keeps one Generation for its lifetime
// (create_reusable() once, start() per request), so a request allocates no vocabulary-sized buffers.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dsv4/chat.h"
#include "dsv4/sampling.h"
#include "dsv4/session.h"
#include "dsv4/status.h"
#include "dsv4/tokenizer.h"

namespace dsv4::engine {

enum class StopReason {
    kNone,         // still running
    kEos,          // an end token was sampled (it is not text and is not fed)
    kStopString,   // a stop string appeared in the text (it and everything after it are dropped)
    kMaxTokens,    // GenerationOptions::max_tokens reached
    kContextFull,  // the next token would not fit the model state's context
    kCancelled,    // the caller gave up (run_generation's callback returned false)
};
const char* stop_reason_name(StopReason r);      // "eos", "stop_string", "max_tokens", "context_full", ...
const char* openai_finish_reason(StopReason r);  // "stop" (eos, stop string), "length" (limits), "cancelled"

struct GenerationOptions {
    SamplingParams sampling;           // the penalty history is the generated tokens (OpenAI semantics)
    int64_t max_tokens = 0;            // tokens to generate at most; <= 0: until the context is full
    int64_t max_context = 0;           // tokens the model state holds (Session::max_context()); > prompt size
    int64_t cached_tokens = 0;         // prompt tokens already in the model state (a reused prefix); < prompt size
    std::vector<std::string> stop;     // stop strings: non-empty, valid UTF-8
    bool ignore_eos = false;           // keep going after the end-of-sentence token (benchmarks)
    bool parse_reply = true;           // run the chat reply parser (GenerationStep::events)
    bool starts_in_reasoning = false;  // the prompt ended with "<think>": the reply starts as reasoning
    // Constrained decoding (OpenAI's response_format json_object): the reply's content — after the reasoning when
    // it starts as reasoning — is one JSON object. Every token that no JSON object text continues with is masked
    // before sampling, and the end token only once the object is complete (then nothing else); a Generation with it
    // draws on the host, never asking the engine (prepare_engine_sample). No tool calls can be written.
    bool json_object = false;
    // Constrained decoding to an opening (the server's tool_choice "required" or a named function: the start of a
    // DSML tool call): the reply's content begins with this text; until it is written only tokens that agree with
    // it are drawn (on the host). Valid UTF-8; not with json_object.
    std::string reply_prefix;
};

struct GenerationStep {
    SampleResult sample;                   // token, logprob, top alternatives
    std::string text;                      // text this token made final (never part of a stop string)
    std::vector<chat::ReplyEvent> events;  // reasoning / content / tool-call deltas decided by this token
    bool finished = false;
    StopReason reason = StopReason::kNone;
};

struct GenerationTimings {
    int64_t prompt_tokens = 0;      // prompt tokens fed (a reused prefix is not counted)
    int64_t cached_tokens = 0;      // prompt tokens reused from the model state
    int64_t generated_tokens = 0;   // tokens sampled, the end token included
    double prompt_seconds = 0;      // start -> first token sampled (= time to first token)
    double generation_seconds = 0;  // first token -> last token: the decode steps of tokens 2..n
    double prompt_tokens_per_second() const;
    double generation_tokens_per_second() const;  // (generated - 1) / generation_seconds
};

struct ReplyConstraints;  // generation.cpp

class Generation {
public:
    ~Generation();
    using Clock = std::chrono::steady_clock;

    // Errors: empty prompt, prompt (or max_context) not leaving room for one generated token, bad sampling
    // parameters, invalid stop strings, a tokenizer without an end-of-sentence token. The clock starts here.
    static Result<std::unique_ptr<Generation>> create(const Tokenizer& tokenizer, int32_t vocab_size,
                                                      std::vector<int32_t> prompt, GenerationOptions options);
    // A Generation to be reused across sequences: the sampler's buffers are sized here, once. It is finished (and
    // reason() is kNone) until start(). Errors: vocabulary size, a tokenizer without an end-of-sentence token.
    static Result<std::unique_ptr<Generation>> create_reusable(const Tokenizer& tokenizer, int32_t vocab_size);
    // Begins a new sequence in place, dropping the previous one (finished or not): the same checks and the same
    // results as create() with these arguments, without reallocating the sampler. On an error it stays finished.
    Status start(std::span<const int32_t> prompt, GenerationOptions options);

    // Tokens to feed before the next sample: the prompt not yet in the state, then the last sampled token. Empty
    // when next() may be called, and once finished.
    std::span<const int32_t> pending() const;
    // The first `n` tokens of pending() are now in the model state.
    Status fed(size_t n);
    // With pending() empty: samples from the logits of the last fed token ([vocab_size]), turns the token into text
    // and events, and decides whether the sequence ends. On the finishing step the held text is flushed.
    Status next(std::span<const float> logits_row, GenerationStep* step);
    // A draw of the next token by the engine (EngineSample, engine.h), asked with the feed that empties pending():
    // fills `request` (this generation's sampling parameters, a uniform from its random stream, the penalties'
    // history, `result`) and returns true; false once the sequence has finished, and while a constraint masks the
    // draws (GenerationOptions::json_object, reply_prefix), which the engine cannot apply.
    bool prepare_engine_sample(EngineSample* request, SampleResult* result);
    // next() with that draw: `drawn` is the request's result after the feed. Where the engine did not draw (token
    // -1) the sampler runs on `logits_row` with the same uniform, so the random stream is the same either way.
    Status next_from_engine(const SampleResult& drawn, std::span<const float> logits_row, GenerationStep* step);
    // Ends the sequence now (StopReason::kCancelled); held text is flushed into `step`.
    void cancel(GenerationStep* step);

    bool finished() const { return !started_ || reason_ != StopReason::kNone; }
    StopReason reason() const { return reason_; }
    const std::vector<int32_t>& prompt() const { return prompt_; }
    const std::vector<int32_t>& generated() const { return generated_; }
    // Tokens in the model state: the prompt fed so far (cached prefix included) and the generated tokens fed.
    int64_t state_tokens() const { return state_tokens_; }
    const std::string& text() const { return text_; }  // all text emitted so far
    const chat::ParsedReply& reply() const { return parser_.reply(); }
    GenerationTimings timings() const;

private:
    Generation(const Tokenizer& tokenizer, int32_t vocab_size);
    Status begin(GenerationOptions options);  // checks `options` against prompt_ and resets the sequence state
    Status check_can_sample() const;
    Status accept_sample(GenerationStep* step);  // step->sample drawn: record it, text, stop conditions
    Status accept_text(const std::string& piece, GenerationStep* step);  // stop-string hold-back
    void finish(StopReason reason, GenerationStep* step);

    const Tokenizer& tokenizer_;
    GenerationOptions options_;
    int32_t eos_id_ = -1;
    int32_t think_end_id_ = -1;                      // "</think>": ends the reasoning
    std::unique_ptr<ReplyConstraints> constraints_;  // built by the first sequence that asks for one, then reused
    bool in_content_ = false;                        // past the reasoning: where the constraints apply
    bool constrained() const;                        // a constraint masks the next draw
    bool started_ = false;
    std::vector<int32_t> prompt_;
    std::vector<int32_t> generated_;
    int64_t state_tokens_ = 0;
    int64_t max_new_ = 0;         // generation limit from max_tokens and the context
    bool last_token_fed_ = true;  // the last sampled token is in the state (or nothing was sampled yet)
    Sampler sampler_;
    std::array<uint64_t, 4> engine_draw_rng_{};  // the random stream before prepare_engine_sample's uniform
    StreamDecoder decoder_;
    chat::ReplyParser parser_;
    std::string held_;  // decoded text that may be the start of a stop string
    std::string text_;
    StopReason reason_ = StopReason::kNone;
    Clock::time_point start_, first_token_, last_token_;
};

// The logits of the last fed token: the last row of `logits` ([rows, vocab] -> [vocab]).
std::span<const float> last_logits_row(const Logits& logits);

// Runs `gen` to the end on `session` (whose state must hold exactly the generation's cached prefix): feeds the
// prompt in chunks of at most `chunk` tokens (0: all at once), then one token per step, and hands every step to
// `on_step`; returning false from it cancels. `logits` is scratch reused across steps; every feed asks for the last
// row only (LogitRows::kLast), so a long prompt costs one row of logits, not one per token.
Status run_generation(Session& session, Generation& gen, const std::function<bool(const GenerationStep&)>& on_step,
                      Logits& logits, int64_t chunk = 0);

}  // namespace dsv4::engine
