// Continuous batching over a fixed set of slots. Each slot owns one SequenceRunner created at startup (-np slots
// x -c context), so serving a request allocates no model state. One loop thread runs every step: each decoding
// sequence advances one token, then prefilling sequences advance by whole chunks while the per-step token budget
// lasts (at least one chunk per step, so prefill never starves). New requests join between steps.
//
// Chunk boundaries are fixed multiples of the chunk size counted from where the sequence starts, so a request is
// computed exactly the same way however many other requests share the loop: outputs do not depend on load.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dsv4/sampling.h"
#include "dsv4/tokenizer.h"
#include "server/metrics.h"
#include "server/model_backend.h"

namespace dsv4::server {

using Clock = std::chrono::steady_clock;

enum class FinishReason { kNone, kStop, kLength, kCancelled, kTimeout, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", ... (OpenAI names where they exist)

struct GenerationParams {
    std::vector<int32_t> prompt;
    SamplingParams sampling;
    int64_t max_tokens = 0;             // > 0; also capped by the context left after the prompt
    std::vector<std::string> stop;      // stop strings (valid UTF-8, non-empty)
    bool logprobs = false;              // report the chosen token's logprob (+ sampling.top_logprobs alternatives)
    Clock::time_point deadline = Clock::time_point::max();
};

struct TokenOutput {
    int32_t token = -1;
    std::string text;  // text this token made final (may be empty, or hold text of earlier tokens)
    float logprob = 0;
    std::vector<TokenLogprob> top;
};

// Shared by the HTTP thread that submitted the request and the loop thread that serves it.
class RequestState {
public:
    explicit RequestState(GenerationParams p) : params(std::move(p)), arrival(Clock::now()) {}
    const GenerationParams params;
    const Clock::time_point arrival;

    // HTTP side.
    void cancel() { cancelled_.store(true); }
    bool cancelled() const { return cancelled_.load(); }
    // Waits until output is available, the request finished, or `timeout` passed; moves new tokens into `out`.
    // Returns true once finished (and everything was drained).
    bool wait(std::chrono::milliseconds timeout, std::vector<TokenOutput>& out);

    // Valid after wait() returned true.
    FinishReason finish_reason() const { return reason_; }
    const std::string& error() const { return error_; }
    int64_t prompt_tokens() const { return int64_t(params.prompt.size()); }
    int64_t cached_tokens() const { return cached_tokens_; }
    int64_t completion_tokens() const { return completion_tokens_; }

    // Loop side.
    void push(TokenOutput t);
    void finish(FinishReason reason, std::string error = {});
    void set_cached_tokens(int64_t n) { cached_tokens_ = n; }

private:
    std::atomic<bool> cancelled_{false};
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<TokenOutput> pending_;
    bool done_ = false;
    FinishReason reason_ = FinishReason::kNone;
    std::string error_;
    int64_t cached_tokens_ = 0;
    int64_t completion_tokens_ = 0;
};

struct SchedulerOptions {
    int slots = 1;
    int64_t context = 4096;     // tokens per slot
    int max_queue = 64;         // requests waiting for a slot; past it submit() refuses
    int64_t step_tokens = 512;  // token budget per loop step (decode tokens + prefill chunks)
    int64_t chunk = 256;        // prefill chunk size
};

class Scheduler {
public:
    // Creates the slots' runners (the only allocation of model state) and starts the loop thread.
    static Result<std::unique_ptr<Scheduler>> create(ModelBackend& model, const Tokenizer& tokenizer,
                                                     const SchedulerOptions& options, Metrics& metrics);
    ~Scheduler();  // stops the loop; requests still open finish with kCancelled

    // Queues the request. ResourceExhausted when the queue is full (the HTTP layer answers 503 + Retry-After).
    Status submit(std::shared_ptr<RequestState> request);
    const SchedulerOptions& options() const { return options_; }

private:
    struct Slot;
    Scheduler(ModelBackend& model, const Tokenizer& tokenizer, const SchedulerOptions& options, Metrics& metrics);
    void loop();
    void admit_locked();
    void step();
    void start_request(Slot& slot, std::shared_ptr<RequestState> request);
    bool prefill_chunk(Slot& slot);   // returns false when the slot finished (error)
    void decode(Slot& slot);
    void sample_and_emit(Slot& slot, const float* logits_row);
    void release(Slot& slot, FinishReason reason, std::string error = {});
    void update_gauges_locked();

    ModelBackend& model_;
    const Tokenizer& tokenizer_;
    SchedulerOptions options_;
    Metrics& metrics_;
    int32_t eos_id_ = -1;

    std::vector<std::unique_ptr<Slot>> slots_;
    std::mutex mu_;  // guards queue_ and stopping_
    std::condition_variable cv_;
    std::deque<std::shared_ptr<RequestState>> queue_;
    bool stopping_ = false;
    uint64_t admit_counter_ = 0;   // loop thread only
    std::atomic<int> free_slots_{0};  // written by the loop thread, read by submit()
    std::thread thread_;
};

}  // namespace dsv4::server
