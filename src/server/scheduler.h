// Continuous batching over a fixed set of slots. Each slot owns one SequenceRunner and one engine::Generation
// created at startup (-np slots x -c context), so serving a request allocates no model state and no sampler
// buffers. The Generation does everything per token (sampling, detokenisation, stop strings, reply parsing, stop
// conditions); the scheduler feeds what it asks for. One loop thread runs every step: each decoding
// sequence advances one token and prefilling sequences (oldest first) advance by one whole chunk each while the
// per-step token budget lasts (at least one chunk per step, so prefill never starves), all in ONE batched feed of
// the model (ModelBackend::feed_batch: one forward pass whose weight reads serve every sequence). Budget left
// after that pass goes to further prefill-only passes of one chunk per prefilling sequence. New requests join
// between steps.
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

#include "dsv4/chat.h"
#include "dsv4/sampling.h"
#include "dsv4/tokenizer.h"
#include "dsv4/generation.h"
#include "server/metrics.h"
#include "server/model_backend.h"

namespace dsv4 {
class ThreadPool;
}

namespace dsv4::server {

using Clock = std::chrono::steady_clock;

enum class FinishReason { kNone, kStop, kLength, kCancelled, kTimeout, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", ... (OpenAI names where they exist)

struct GenerationParams {
    std::vector<int32_t> prompt;
    // sampling, max_tokens (> 0; also capped by the context left after the prompt), stop strings, reply parsing
    // (chat) and starts_in_reasoning. max_context and cached_tokens are the scheduler's to set.
    engine::GenerationOptions options;
    bool logprobs = false;              // report the chosen token's logprob (+ sampling.top_logprobs alternatives)
    Clock::time_point deadline = Clock::time_point::max();
};

struct TokenOutput {
    int32_t token = -1;
    std::string text;  // text this token made final (may be empty, or hold text of earlier tokens)
    std::vector<chat::ReplyEvent> events;  // reasoning / content / tool-call deltas it decided (chat only)
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
    const chat::ParsedReply& reply() const { return reply_; }  // the whole parsed reply (chat)

    // Loop side.
    void push(TokenOutput t);
    void finish(FinishReason reason, std::string error = {}, const chat::ParsedReply* reply = nullptr);
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
    chat::ParsedReply reply_;
};

struct SchedulerOptions {
    int slots = 1;
    int64_t context = 4096;     // tokens per slot
    int max_queue = 64;         // requests waiting for a slot; past it submit() refuses
    int64_t step_tokens = 512;  // token budget per loop step (decode tokens + prefill chunks)
    int64_t chunk = 256;        // prefill chunk size
    // threads that draw the slots' next tokens after a batched step (each slot's sampler reads the whole
    // vocabulary: ~0.3-0.6 ms per slot); 0: min(slots, default_thread_count())
    int sample_threads = 0;
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
    void add_feed(Slot& slot, size_t n, bool decode);  // queues the slot's next n pending tokens for run_feeds()
    void run_feeds();                                    // one batched feed of the queued slots, then their tokens
    void sample_all();      // the next token of every slot in sampling_: drawn in parallel, emitted in order
    void emit(Slot& slot);  // hands a drawn token (or its error) to the slot's request
    void release(Slot& slot, FinishReason reason, std::string error = {});
    void update_gauges();

    ModelBackend& model_;
    const Tokenizer& tokenizer_;
    SchedulerOptions options_;
    Metrics& metrics_;

    std::vector<std::unique_ptr<Slot>> slots_;
    std::vector<RunnerFeed> feeds_;   // loop thread only: the batched feed being built (capacity: slots)
    std::vector<Slot*> feeding_;      // [feeds_] their slots
    std::vector<Slot*> prefilling_;   // loop thread only (capacity: slots)
    std::vector<Slot*> sampling_;     // loop thread only: slots whose next token run_feeds draws (capacity: slots)
    std::unique_ptr<ThreadPool> sample_pool_;
    std::mutex mu_;  // guards queue_ and stopping_
    std::condition_variable cv_;
    std::deque<std::shared_ptr<RequestState>> queue_;
    bool stopping_ = false;
    uint64_t admit_counter_ = 0;   // loop thread only
    std::atomic<int> free_slots_{0};  // written by the loop thread, read by submit()
    std::thread thread_;
};

}  // namespace dsv4::server
