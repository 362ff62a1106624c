#include "server/model_backend.h"

#include <span>
#include <vector>

#include "dsv4/sampling.h"

namespace dsv4::server {
namespace {

class EngineRunner : public SequenceRunner {
public:
    EngineRunner(std::unique_ptr<Session> session, int32_t vocab, bool fold, int64_t context)
        : session_(std::move(session)), vocab_(vocab), fold_(fold) {
        if (fold_) folded_.reserve(size_t(context));
    }
    Status feed(std::span<const int32_t> tokens, Logits* out) override {
        if (!fold_) return session_->feed(tokens, out, LogitRows::kLast);
        folded_.assign(tokens.begin(), tokens.end());
        for (int32_t& t : folded_)
            if (t >= vocab_) t %= vocab_;
        return session_->feed(folded_, out, LogitRows::kLast);
    }
    void reset() override { session_->reset(); }
    // The session and the (folded) tokens for a batched step; `tokens` must stay alive until the step ran.
    StepItem step_item(std::span<const int32_t> tokens, Logits* out, EngineSample* sample) {
        if (!fold_) return {session_.get(), tokens, out, LogitRows::kLast, sample};
        folded_.assign(tokens.begin(), tokens.end());
        for (int32_t& t : folded_)
            if (t >= vocab_) t %= vocab_;
        return {session_.get(), folded_, out, LogitRows::kLast, sample};
    }

private:
    std::unique_ptr<Session> session_;
    int32_t vocab_;
    bool fold_;
    std::vector<int32_t> folded_;  // [context] at most
};

}  // namespace

EngineModelBackend::EngineModelBackend(std::unique_ptr<Engine> engine, bool fold_vocab)
    : engine_(std::move(engine)), fold_vocab_(fold_vocab) {}

int32_t EngineModelBackend::vocab_size() const { return int32_t(engine_->info().vocab_size); }
int64_t EngineModelBackend::max_context() const { return engine_->info().max_position; }
std::string EngineModelBackend::gpus() const { return engine_->info().gpus; }
int64_t EngineModelBackend::default_prefill_chunk() const {
    return engine_->options().backend == EngineBackend::kCuda ? kCudaPrefillChunk : kCpuPrefillChunk;
}

Result<std::unique_ptr<SequenceRunner>> EngineModelBackend::create_runner(int64_t context) {
    SessionOptions so;
    so.max_context = context;
    DSV4_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, engine_->create_session(so));
    items_.reserve(items_.size() + 1);
    return std::unique_ptr<SequenceRunner>(new EngineRunner(std::move(session), vocab_size(), fold_vocab_, context));
}

void EngineModelBackend::feed_batch(std::span<RunnerFeed> feeds) {
    items_.clear();
    for (RunnerFeed& f : feeds)
        items_.push_back(static_cast<EngineRunner*>(f.runner)->step_item(f.tokens, f.out, f.sample));
    const Status st = engine_->step(items_);
    if (st.is_ok()) {
        for (RunnerFeed& f : feeds) f.status = Status::ok();
        return;
    }
    // A refused step changed no session: feed alone for per-item errors (the draws left to the host: the refusal
    // may have come before a request was marked). A step that failed while running left its sessions needing a
    // reset; their feeds then report it.
    for (RunnerFeed& f : feeds) {
        if (f.sample && f.sample->result) f.sample->result->token = -1;
        f.status = f.runner->feed(f.tokens, f.out);
    }
}

}  // namespace dsv4::server
