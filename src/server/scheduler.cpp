#include "server/scheduler.h"

#include <algorithm>

#include "core/thread_pool.h"

namespace dsv4::server {

namespace {

FinishReason finish_reason_of(engine::StopReason r) {
    switch (r) {
        case engine::StopReason::kEos:
        case engine::StopReason::kStopString: return FinishReason::kStop;
        case engine::StopReason::kMaxTokens:
        case engine::StopReason::kContextFull: return FinishReason::kLength;
        case engine::StopReason::kCancelled: return FinishReason::kCancelled;
        case engine::StopReason::kNone: break;
    }
    return FinishReason::kError;
}

uint64_t microseconds_since(Clock::time_point t0) {
    return uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
}

}  // namespace

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::kStop: return "stop";
        case FinishReason::kLength: return "length";
        case FinishReason::kCancelled: return "cancelled";
        case FinishReason::kTimeout: return "timeout";
        case FinishReason::kError: return "error";
        case FinishReason::kNone: break;
    }
    return "none";
}

bool RequestState::wait(std::chrono::milliseconds timeout, std::vector<TokenOutput>& out) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return done_ || !pending_.empty(); });
    for (auto& t : pending_) out.push_back(std::move(t));
    pending_.clear();
    return done_;
}

void RequestState::push(TokenOutput t) {
    std::lock_guard<std::mutex> lock(mu_);
    if (t.token >= 0) ++completion_tokens_;
    pending_.push_back(std::move(t));
    cv_.notify_all();
}

void RequestState::finish(FinishReason reason, std::string error, const chat::ParsedReply* reply) {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = true;
    reason_ = reason;
    error_ = std::move(error);
    if (reply) reply_ = *reply;
    cv_.notify_all();
}

struct Scheduler::Slot {
    int index = 0;
    std::unique_ptr<SequenceRunner> runner;
    std::unique_ptr<engine::Generation> generation;  // the request's; idle (finished) while the slot is free
    std::vector<int32_t> fed;  // [<= context] the tokens in the runner's state, in order
    std::shared_ptr<RequestState> request;  // null while the slot is free
    engine::GenerationStep step;  // reused across tokens
    Status drawn;                 // what the last Generation::next returned (sample_all)
    Logits logits;             // reused across steps
    EngineSample draw_request;  // the queued feed's draw by the model (Generation::prepare_engine_sample)
    SampleResult engine_drawn;
    bool engine_draw = false;     // the queued feed carries draw_request
    bool feeding_decode = false;  // the queued feed is a decode token (else a prefill chunk)
    uint64_t admitted = 0;     // admission order (prefill goes oldest first)
    uint64_t last_used = 0;    // for least-recently-used slot choice
    Clock::time_point last_token_time;

    bool busy() const { return request != nullptr; }
    bool prefilling() const { return busy() && generation->state_tokens() < int64_t(generation->prompt().size()); }
    bool decoding() const { return busy() && !prefilling(); }
    // How much of `prompt` the state already holds: a strict prefix is reused, anything else is recomputed.
    size_t reusable_prefix(const std::vector<int32_t>& prompt) const {
        const bool prefix = !fed.empty() && fed.size() < prompt.size() && std::equal(fed.begin(), fed.end(), prompt.begin());
        return prefix ? fed.size() : 0;
    }
};

Scheduler::Scheduler(ModelBackend& model, const Tokenizer& tokenizer, const SchedulerOptions& options,
                     Metrics& metrics)
    : model_(model), tokenizer_(tokenizer), options_(options), metrics_(metrics) {}

Result<std::unique_ptr<Scheduler>> Scheduler::create(ModelBackend& model, const Tokenizer& tokenizer,
                                                     const SchedulerOptions& options, Metrics& metrics) {
    if (options.slots < 1) return invalid_argument("-np (slots) must be >= 1");
    if (options.context < 2) return invalid_argument("-c (context) must be >= 2");
    if (options.chunk < 1 || options.step_tokens < 1) return invalid_argument("chunk and step budget must be >= 1");
    std::unique_ptr<Scheduler> s(new Scheduler(model, tokenizer, options, metrics));
    for (int i = 0; i < options.slots; ++i) {
        auto slot = std::make_unique<Slot>();
        slot->index = i;
        DSV4_ASSIGN_OR_RETURN(slot->runner, model.create_runner(options.context));
        DSV4_ASSIGN_OR_RETURN(slot->generation, engine::Generation::create_reusable(tokenizer, model.vocab_size()));
        slot->fed.reserve(size_t(options.context));
        s->slots_.push_back(std::move(slot));
    }
    s->feeds_.reserve(size_t(options.slots));
    s->feeding_.reserve(size_t(options.slots));
    s->prefilling_.reserve(size_t(options.slots));
    s->sampling_.reserve(size_t(options.slots));
    s->sample_pool_ = std::make_unique<ThreadPool>(
        std::min(options.slots, options.sample_threads > 0 ? options.sample_threads : default_thread_count()));
    s->free_slots_ = options.slots;
    metrics.slots_total = options.slots;
    metrics.kv_tokens_capacity = int64_t(options.slots) * options.context;
    s->thread_ = std::thread([p = s.get()] { p->loop(); });
    return s;
}

Scheduler::~Scheduler() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

Status Scheduler::submit(std::shared_ptr<RequestState> request) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return internal_error("the server is shutting down");
        // A request is refused only when it could not start now and the queue is full.
        if (int(queue_.size()) >= options_.max_queue + free_slots_.load())
            return {StatusCode::kResourceExhausted,
                    "all " + std::to_string(options_.slots) + " slots are busy and " +
                        std::to_string(options_.max_queue) + " requests are already waiting; retry later"};
        queue_.push_back(std::move(request));
        metrics_.requests_total++;
        metrics_.requests_waiting = int64_t(queue_.size());
    }
    cv_.notify_all();
    return Status::ok();
}

void Scheduler::loop() {
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(mu_);
            for (;;) {
                if (stopping_) break;
                admit_locked();
                bool busy = false;
                for (const auto& s : slots_) busy |= s->busy();
                if (busy) break;
                cv_.wait_for(lock, std::chrono::milliseconds(queue_.empty() ? 1000 : 20));
            }
            if (stopping_) {
                for (auto& r : queue_) r->finish(FinishReason::kCancelled, "the server is shutting down");
                queue_.clear();
                lock.unlock();
                for (auto& s : slots_)
                    if (s->busy()) release(*s, FinishReason::kCancelled, "the server is shutting down");
                return;
            }
        }
        step();
    }
}

void Scheduler::admit_locked() {
    const auto now = Clock::now();
    for (auto it = queue_.begin(); it != queue_.end();) {
        if ((*it)->cancelled()) {
            (*it)->finish(FinishReason::kCancelled);
            metrics_.requests_cancelled_total++;
            it = queue_.erase(it);
        } else if (now >= (*it)->params.deadline) {
            (*it)->finish(FinishReason::kTimeout, "the request timed out waiting for a free slot");
            it = queue_.erase(it);
        } else {
            ++it;
        }
    }
    while (!queue_.empty()) {
        std::shared_ptr<RequestState> r = queue_.front();
        // Prefer the free slot whose state is the longest strict prefix of the prompt; else the least recently used.
        Slot* best = nullptr;
        size_t best_prefix = 0;
        for (auto& s : slots_) {
            if (s->busy()) continue;
            const size_t prefix = s->reusable_prefix(r->params.prompt);
            if (!best || prefix > best_prefix || (prefix == best_prefix && s->last_used < best->last_used)) {
                best = s.get();
                best_prefix = prefix;
            }
        }
        if (!best) break;
        queue_.pop_front();
        start_request(*best, std::move(r));
    }
    metrics_.requests_waiting = int64_t(queue_.size());
    update_gauges();
}

// Slots are only touched by the loop thread; the gauges are atomics read by the HTTP threads.
void Scheduler::update_gauges() {
    int64_t busy = 0, used = 0;
    for (const auto& s : slots_) {
        if (!s->busy()) continue;
        ++busy;
        used += int64_t(s->fed.size());
    }
    metrics_.slots_busy = busy;
    metrics_.requests_running = busy;
    metrics_.kv_tokens_used = used;
}

void Scheduler::start_request(Slot& slot, std::shared_ptr<RequestState> request) {
    const size_t prefix = slot.reusable_prefix(request->params.prompt);
    if (prefix == 0) {
        slot.runner->reset();
        slot.fed.clear();
    }
    engine::GenerationOptions o = request->params.options;
    o.max_context = options_.context;
    o.cached_tokens = int64_t(prefix);
    const Status st = slot.generation->start(request->params.prompt, std::move(o));
    request->set_cached_tokens(int64_t(prefix));
    metrics_.cached_prompt_tokens_total += prefix;
    slot.admitted = ++admit_counter_;
    slot.request = std::move(request);
    free_slots_--;
    if (!st) release(slot, FinishReason::kError, st.to_string());
}

void Scheduler::release(Slot& slot, FinishReason reason, std::string error) {
    // Cancelled, timed out or failed: text held back for a stop string is dropped with the request.
    if (!slot.generation->finished()) slot.generation->cancel(&slot.step);
    if (reason == FinishReason::kCancelled) metrics_.requests_cancelled_total++;
    if (reason == FinishReason::kError) {  // the runner may hold a half-fed chunk
        slot.runner->reset();
        slot.fed.clear();
    }
    metrics_.request_duration.observe(std::chrono::duration<double>(Clock::now() - slot.request->arrival).count());
    // The slot is free and counted free before the client hears the end: a client that reads /metrics or sends its
    // next request right after the reply sees the slot idle.
    std::shared_ptr<RequestState> request = std::move(slot.request);
    slot.last_used = ++admit_counter_;
    free_slots_++;
    update_gauges();
    request->finish(reason, std::move(error), &slot.generation->reply());
}

void Scheduler::add_feed(Slot& slot, size_t n, bool decode) {
    slot.feeding_decode = decode;
    RunnerFeed f;
    f.runner = slot.runner.get();
    f.tokens = slot.generation->pending().first(n);
    f.out = &slot.logits;
    // the feed that empties pending() asks the model to draw the next token where it can
    slot.engine_draw = n == slot.generation->pending().size() &&
                       slot.generation->prepare_engine_sample(&slot.draw_request, &slot.engine_drawn);
    f.sample = slot.engine_draw ? &slot.draw_request : nullptr;
    feeds_.push_back(f);
    feeding_.push_back(&slot);
}

void Scheduler::run_feeds() {
    if (feeds_.empty()) return;
    const auto t0 = Clock::now();
    model_.feed_batch(feeds_);
    // the pass's time, shared between prompt and generation by their tokens
    const uint64_t us = microseconds_since(t0);
    uint64_t prompt = 0, total = 0;
    for (size_t i = 0; i < feeds_.size(); ++i) {
        total += feeds_[i].tokens.size();
        if (!feeding_[i]->feeding_decode) prompt += feeds_[i].tokens.size();
    }
    const uint64_t prompt_us = total ? us * prompt / total : 0;
    metrics_.prompt_microseconds_total += prompt_us;
    metrics_.generation_microseconds_total += us - prompt_us;

    for (size_t i = 0; i < feeds_.size(); ++i) {
        Slot& slot = *feeding_[i];
        const std::span<const int32_t> in = feeds_[i].tokens;
        Status st = feeds_[i].status;
        if (st) {
            slot.fed.insert(slot.fed.end(), in.begin(), in.end());
            st = slot.generation->fed(in.size());
        }
        if (!st) {
            release(slot, FinishReason::kError, st.to_string());
            continue;
        }
        if (slot.feeding_decode) {
            sampling_.push_back(&slot);
        } else {
            metrics_.prompt_tokens_total += in.size();
            if (slot.generation->pending().empty()) sampling_.push_back(&slot);
        }
    }
    feeds_.clear();
    feeding_.clear();
    sample_all();
}

// Generation::next — the sampler over the whole vocabulary, detokenisation, stop strings, reply parsing — touches
// only its own slot (the tokenizer is read-only), so the slots draw in parallel; metrics, the requests and slot
// releases stay on this thread, in slot order.
void Scheduler::sample_all() {
    sample_pool_->parallel_for(int64_t(sampling_.size()), 1, [this](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            Slot& slot = *sampling_[size_t(i)];
            slot.drawn = slot.engine_draw ? slot.generation->next_from_engine(
                                                slot.engine_drawn, engine::last_logits_row(slot.logits), &slot.step)
                                          : slot.generation->next(engine::last_logits_row(slot.logits), &slot.step);
        }
    });
    for (Slot* slot : sampling_) emit(*slot);
    sampling_.clear();
}

void Scheduler::emit(Slot& slot) {
    engine::GenerationStep& step = slot.step;
    if (!slot.drawn) return release(slot, FinishReason::kError, slot.drawn.to_string());
    const auto now = Clock::now();
    if (slot.generation->generated().size() == 1)
        metrics_.time_to_first_token.observe(std::chrono::duration<double>(now - slot.request->arrival).count());
    else
        metrics_.inter_token_latency.observe(std::chrono::duration<double>(now - slot.last_token_time).count());
    slot.last_token_time = now;
    metrics_.generated_tokens_total++;
    if (slot.engine_draw && slot.engine_drawn.token >= 0) metrics_.engine_drawn_tokens_total++;

    TokenOutput out;
    out.token = step.sample.token;
    out.logprob = step.sample.logprob;
    if (slot.request->params.logprobs) out.top.assign(step.sample.top.begin(), step.sample.top.begin() + step.sample.num_top);
    out.text = std::move(step.text);
    out.events = std::move(step.events);
    slot.request->push(std::move(out));
    if (step.finished) release(slot, finish_reason_of(step.reason));
}

void Scheduler::step() {
    const auto now = Clock::now();
    for (auto& s : slots_) {
        if (!s->busy()) continue;
        if (s->request->cancelled()) release(*s, FinishReason::kCancelled);
        else if (now >= s->request->params.deadline) release(*s, FinishReason::kTimeout, "the request timed out");
    }
    int64_t budget = options_.step_tokens;
    for (auto& s : slots_) {
        if (!s->decoding()) continue;
        add_feed(*s, s->generation->pending().size(), true);
        --budget;
    }
    prefilling_.clear();
    for (auto& s : slots_)
        if (s->prefilling()) prefilling_.push_back(s.get());
    std::sort(prefilling_.begin(), prefilling_.end(), [](Slot* a, Slot* b) { return a->admitted < b->admitted; });
    // Passes: the first carries the decode tokens; each gives every prefilling slot (oldest first) its next chunk
    // while the budget lasts. A slot's chunks are min(chunk, pending) however many passes it takes, so a request
    // is computed the same way under any load.
    bool ran_chunk = false;
    for (;;) {
        bool added = false;
        for (Slot* s : prefilling_) {
            if (!s->prefilling()) continue;  // released, or its prompt is done
            if (budget <= 0 && ran_chunk) break;
            if (s->request->cancelled()) {
                release(*s, FinishReason::kCancelled);
                continue;
            }
            const int64_t n = std::min<int64_t>(options_.chunk, int64_t(s->generation->pending().size()));
            if (n > budget && ran_chunk) continue;
            add_feed(*s, size_t(n), false);
            ran_chunk = added = true;
            budget -= n;
        }
        run_feeds();
        if (!added || budget <= 0) break;
    }
    update_gauges();
}

}  // namespace dsv4::server
