#include "server/scheduler.h"

#include <algorithm>

#include "dsv4/chat.h"
#include "server/text_assembler.h"

namespace dsv4::server {

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

void RequestState::finish(FinishReason reason, std::string error) {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = true;
    reason_ = reason;
    error_ = std::move(error);
    cv_.notify_all();
}

struct Scheduler::Slot {
    enum class Phase { kFree, kPrefill, kDecode };
    int index = 0;
    std::unique_ptr<SequenceRunner> runner;
    std::vector<int32_t> fed;  // [<= context] the tokens in the runner's state, in order
    std::shared_ptr<RequestState> request;
    Phase phase = Phase::kFree;
    size_t prompt_done = 0;    // prompt tokens in the state
    int64_t max_new = 0;       // tokens this request may generate
    std::unique_ptr<Sampler> sampler;
    std::unique_ptr<TextAssembler> text;
    std::vector<int32_t> generated;
    int32_t next_token = -1;   // sampled, not fed yet
    Logits logits;             // reused across steps
    uint64_t admitted = 0;     // admission order (prefill goes oldest first)
    uint64_t last_used = 0;    // for least-recently-used slot choice
    Clock::time_point last_token_time;
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
    const auto eos = tokenizer.token_to_id(chat::kEosToken);
    if (!eos) return not_found("tokenizer.json has no end-of-sentence token '" + std::string(chat::kEosToken) + "'");
    s->eos_id_ = *eos;
    for (int i = 0; i < options.slots; ++i) {
        auto slot = std::make_unique<Slot>();
        slot->index = i;
        DSV4_ASSIGN_OR_RETURN(slot->runner, model.create_runner(options.context));
        slot->fed.reserve(size_t(options.context));
        slot->text = std::make_unique<TextAssembler>(tokenizer);
        s->slots_.push_back(std::move(slot));
    }
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
                for (const auto& s : slots_) busy |= s->phase != Slot::Phase::kFree;
                if (busy) break;
                cv_.wait_for(lock, std::chrono::milliseconds(queue_.empty() ? 1000 : 20));
            }
            if (stopping_) {
                for (auto& r : queue_) r->finish(FinishReason::kCancelled, "the server is shutting down");
                queue_.clear();
                lock.unlock();
                for (auto& s : slots_)
                    if (s->phase != Slot::Phase::kFree) release(*s, FinishReason::kCancelled, "the server is shutting down");
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
            if (s->phase != Slot::Phase::kFree) continue;
            const auto& p = r->params.prompt;
            size_t prefix = 0;
            if (!s->fed.empty() && s->fed.size() < p.size() && std::equal(s->fed.begin(), s->fed.end(), p.begin()))
                prefix = s->fed.size();
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
    update_gauges_locked();
}

void Scheduler::update_gauges_locked() {
    int64_t busy = 0, used = 0;
    for (const auto& s : slots_) {
        if (s->phase == Slot::Phase::kFree) continue;
        ++busy;
        used += int64_t(s->fed.size());
    }
    metrics_.slots_busy = busy;
    metrics_.requests_running = busy;
    metrics_.kv_tokens_used = used;
}

void Scheduler::start_request(Slot& slot, std::shared_ptr<RequestState> request) {
    const auto& prompt = request->params.prompt;
    const bool reuse = !slot.fed.empty() && slot.fed.size() < prompt.size() &&
                       std::equal(slot.fed.begin(), slot.fed.end(), prompt.begin());
    if (!reuse) {
        slot.runner->reset();
        slot.fed.clear();
    }
    slot.prompt_done = slot.fed.size();
    request->set_cached_tokens(int64_t(slot.prompt_done));
    metrics_.cached_prompt_tokens_total += slot.prompt_done;
    slot.max_new = std::min<int64_t>(request->params.max_tokens, options_.context - int64_t(prompt.size()));
    slot.sampler = std::make_unique<Sampler>(model_.vocab_size(), request->params.sampling);
    slot.text->start(request->params.stop);
    slot.generated.clear();
    slot.next_token = -1;
    slot.admitted = ++admit_counter_;
    slot.request = std::move(request);
    slot.phase = Slot::Phase::kPrefill;
    free_slots_--;
}

void Scheduler::release(Slot& slot, FinishReason reason, std::string error) {
    if (reason == FinishReason::kCancelled) metrics_.requests_cancelled_total++;
    if (reason == FinishReason::kError) {  // the runner may hold a half-fed chunk
        slot.runner->reset();
        slot.fed.clear();
    }
    metrics_.request_duration.observe(std::chrono::duration<double>(Clock::now() - slot.request->arrival).count());
    slot.request->finish(reason, std::move(error));
    slot.request.reset();
    slot.sampler.reset();
    slot.phase = Slot::Phase::kFree;
    slot.last_used = ++admit_counter_;
    free_slots_++;
}

void Scheduler::sample_and_emit(Slot& slot, const float* row) {
    SampleResult r;
    Status st = slot.sampler->sample(std::span<const float>(row, size_t(model_.vocab_size())), slot.generated, r);
    if (!st) return release(slot, FinishReason::kError, st.to_string());
    const auto now = Clock::now();
    if (slot.generated.empty())
        metrics_.time_to_first_token.observe(std::chrono::duration<double>(now - slot.request->arrival).count());
    else
        metrics_.inter_token_latency.observe(std::chrono::duration<double>(now - slot.last_token_time).count());
    slot.last_token_time = now;
    metrics_.generated_tokens_total++;

    TokenOutput out;
    out.token = r.token;
    out.logprob = r.logprob;
    if (slot.request->params.logprobs) out.top.assign(r.top.begin(), r.top.begin() + r.num_top);
    slot.generated.push_back(r.token);
    if (r.token == eos_id_) {  // the end-of-sentence token ends the reply and is not text
        slot.text->finish(out.text);
        slot.request->push(std::move(out));
        return release(slot, FinishReason::kStop);
    }
    Result<bool> stop = slot.text->push(r.token, out.text);
    if (!stop.is_ok()) return release(slot, FinishReason::kError, stop.status().to_string());
    if (*stop) {
        slot.request->push(std::move(out));
        return release(slot, FinishReason::kStop);
    }
    if (int64_t(slot.generated.size()) >= slot.max_new) {
        slot.text->finish(out.text);
        slot.request->push(std::move(out));
        return release(slot, FinishReason::kLength);
    }
    slot.request->push(std::move(out));
    slot.next_token = r.token;
    slot.phase = Slot::Phase::kDecode;
}

bool Scheduler::prefill_chunk(Slot& slot) {
    const auto& prompt = slot.request->params.prompt;
    const size_t n = std::min<size_t>(size_t(options_.chunk), prompt.size() - slot.prompt_done);
    const auto t0 = Clock::now();
    Status st = slot.runner->feed(std::span<const int32_t>(prompt.data() + slot.prompt_done, n), &slot.logits);
    metrics_.prompt_microseconds_total +=
        uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
    if (!st) {
        release(slot, FinishReason::kError, st.to_string());
        return false;
    }
    slot.fed.insert(slot.fed.end(), prompt.begin() + long(slot.prompt_done), prompt.begin() + long(slot.prompt_done + n));
    slot.prompt_done += n;
    metrics_.prompt_tokens_total += n;
    if (slot.prompt_done == prompt.size())
        sample_and_emit(slot, slot.logits.values.data() + (n - 1) * size_t(model_.vocab_size()));
    return true;
}

void Scheduler::decode(Slot& slot) {
    const int32_t token = slot.next_token;
    const auto t0 = Clock::now();
    Status st = slot.runner->feed(std::span<const int32_t>(&token, 1), &slot.logits);
    metrics_.generation_microseconds_total +=
        uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
    if (!st) return release(slot, FinishReason::kError, st.to_string());
    slot.fed.push_back(token);
    sample_and_emit(slot, slot.logits.values.data());
}

void Scheduler::step() {
    const auto now = Clock::now();
    for (auto& s : slots_) {
        if (s->phase == Slot::Phase::kFree) continue;
        if (s->request->cancelled()) release(*s, FinishReason::kCancelled);
        else if (now >= s->request->params.deadline) release(*s, FinishReason::kTimeout, "the request timed out");
    }
    int64_t budget = options_.step_tokens;
    for (auto& s : slots_) {
        if (s->phase != Slot::Phase::kDecode) continue;
        decode(*s);
        --budget;
    }
    std::vector<Slot*> prefilling;
    for (auto& s : slots_)
        if (s->phase == Slot::Phase::kPrefill) prefilling.push_back(s.get());
    std::sort(prefilling.begin(), prefilling.end(), [](Slot* a, Slot* b) { return a->admitted < b->admitted; });
    bool ran_chunk = false;
    for (Slot* s : prefilling) {
        while (s->phase == Slot::Phase::kPrefill) {
            const int64_t n = std::min<int64_t>(options_.chunk, int64_t(s->request->params.prompt.size() - s->prompt_done));
            if (n > budget && ran_chunk) break;
            if (s->request->cancelled()) {
                release(*s, FinishReason::kCancelled);
                break;
            }
            if (!prefill_chunk(*s)) break;
            ran_chunk = true;
            budget -= n;
        }
        if (budget <= 0 && ran_chunk) break;
    }
    std::lock_guard<std::mutex> lock(mu_);
    update_gauges_locked();
}

}  // namespace dsv4::server
