#include "dsv4/generation.h"

#include <algorithm>

#include "core/utf8.h"
#include "engine/json_constraint.h"
#include "engine/prefix_constraint.h"
#include "engine/token_bytes.h"

namespace dsv4::engine {

namespace {

double seconds_between(Generation::Clock::time_point a, Generation::Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}

}  // namespace

const char* stop_reason_name(StopReason r) {
    switch (r) {
        case StopReason::kNone:
            return "none";
        case StopReason::kEos:
            return "eos";
        case StopReason::kStopString:
            return "stop_string";
        case StopReason::kMaxTokens:
            return "max_tokens";
        case StopReason::kContextFull:
            return "context_full";
        case StopReason::kCancelled:
            return "cancelled";
    }
    return "none";
}

const char* openai_finish_reason(StopReason r) {
    switch (r) {
        case StopReason::kEos:
        case StopReason::kStopString:
            return "stop";
        case StopReason::kMaxTokens:
        case StopReason::kContextFull:
            return "length";
        case StopReason::kCancelled:
            return "cancelled";
        case StopReason::kNone:
            break;
    }
    return "none";
}

double GenerationTimings::prompt_tokens_per_second() const {
    return prompt_seconds > 0 ? double(prompt_tokens) / prompt_seconds : 0.0;
}

double GenerationTimings::generation_tokens_per_second() const {
    return generation_seconds > 0 && generated_tokens > 1 ? double(generated_tokens - 1) / generation_seconds : 0.0;
}

Generation::Generation(const Tokenizer& tokenizer, int32_t vocab_size)
    : tokenizer_(tokenizer),
      sampler_(vocab_size, SamplingParams{}),
      decoder_(tokenizer),
      parser_(false),
      start_(Clock::now()) {}

// The draw constraints of GenerationOptions::json_object and reply_prefix, over every token's bytes (a few MB at
// V4's vocabulary), with the masked row they write.
struct ReplyConstraints {
    ReplyConstraints(const Tokenizer& tokenizer, int32_t vocab)
        : tokens(tokenizer, vocab), json(tokens), prefix(tokens), masked(size_t(vocab)) {}
    TokenBytes tokens;
    JsonConstraint json;
    PrefixConstraint prefix;
    std::vector<float> masked;
};

Generation::~Generation() = default;

Result<std::unique_ptr<Generation>> Generation::create(const Tokenizer& tokenizer, int32_t vocab_size,
                                                       std::vector<int32_t> prompt, GenerationOptions options) {
    DSV4_ASSIGN_OR_RETURN(std::unique_ptr<Generation> g, create_reusable(tokenizer, vocab_size));
    g->prompt_ = std::move(prompt);
    DSV4_RETURN_IF_ERROR(g->begin(std::move(options)));
    return g;
}

Result<std::unique_ptr<Generation>> Generation::create_reusable(const Tokenizer& tokenizer, int32_t vocab_size) {
    if (vocab_size < 1) return invalid_argument("vocabulary size must be positive");
    const auto eos = tokenizer.token_to_id(chat::kEosToken);
    if (!eos)
        return not_found("the tokenizer has no end-of-sentence token '" + std::string(chat::kEosToken) +
                         "'; is this a DeepSeek-V4 tokenizer.json?");
    std::unique_ptr<Generation> g(new Generation(tokenizer, vocab_size));
    g->eos_id_ = *eos;
    g->think_end_id_ = tokenizer.token_to_id(chat::kThinkEnd).value_or(-1);
    return g;
}

Status Generation::start(std::span<const int32_t> prompt, GenerationOptions options) {
    prompt_.assign(prompt.begin(), prompt.end());  // keeps its capacity
    return begin(std::move(options));
}

Status Generation::begin(GenerationOptions options) {
    started_ = false;
    reason_ = StopReason::kNone;
    if (prompt_.empty()) return invalid_argument("the prompt is empty: generation needs at least one prompt token");
    DSV4_RETURN_IF_ERROR(validate(options.sampling));
    for (const TokenBias& b : options.sampling.logit_bias)
        if (b.token >= sampler_.vocab_size())
            return invalid_argument("logit_bias names token " + std::to_string(b.token) +
                                    ", outside the model's vocabulary of " + std::to_string(sampler_.vocab_size()) +
                                    " ids");
    const int64_t n = int64_t(prompt_.size());
    if (options.max_context < 1) return invalid_argument("max_context must be positive (the model state's size)");
    if (n >= options.max_context)
        return out_of_range("the prompt has " + std::to_string(n) + " tokens, which leaves no room in a context of " +
                            std::to_string(options.max_context) +
                            " tokens; shorten the prompt or raise the context size (-c)");
    if (options.cached_tokens < 0 || options.cached_tokens >= n)
        return invalid_argument("cached_tokens " + std::to_string(options.cached_tokens) + " must be in [0, " +
                                std::to_string(n) + "): the last prompt token is always fed to get logits");
    for (size_t i = 0; i < options.stop.size(); ++i) {
        if (options.stop[i].empty()) return invalid_argument("stop string " + std::to_string(i) + " is empty");
        if (!is_valid_utf8(options.stop[i]))
            return invalid_argument("stop string " + std::to_string(i) + " is not valid UTF-8");
    }
    if (options.json_object && !options.reply_prefix.empty())
        return invalid_argument(
            "a reply cannot be both one JSON object (json_object) and open with a given text "
            "(reply_prefix)");
    if (!is_valid_utf8(options.reply_prefix)) return invalid_argument("reply_prefix is not valid UTF-8");
    options_ = std::move(options);
    if ((options_.json_object || !options_.reply_prefix.empty()) && !constraints_)
        constraints_ = std::make_unique<ReplyConstraints>(tokenizer_, sampler_.vocab_size());
    if (constraints_) {
        constraints_->json.reset();
        constraints_->prefix.reset(options_.reply_prefix);
    }
    in_content_ = !options_.starts_in_reasoning;
    sampler_.configure(options_.sampling);
    decoder_.reset();
    parser_ = chat::ReplyParser(options_.starts_in_reasoning);
    held_.clear();
    text_.clear();
    generated_.clear();
    state_tokens_ = options_.cached_tokens;
    last_token_fed_ = true;
    const int64_t room = options_.max_context - n;
    max_new_ = options_.max_tokens > 0 ? std::min(options_.max_tokens, room) : room;
    generated_.reserve(size_t(max_new_));
    start_ = first_token_ = last_token_ = Clock::now();
    started_ = true;
    return Status::ok();
}

std::span<const int32_t> Generation::pending() const {
    if (finished()) return {};
    if (state_tokens_ < int64_t(prompt_.size()))
        return std::span<const int32_t>(prompt_).subspan(size_t(state_tokens_));
    if (!last_token_fed_) return std::span<const int32_t>(&generated_.back(), 1);
    return {};
}

Status Generation::fed(size_t n) {
    const size_t waiting = pending().size();
    if (n > waiting)
        return invalid_argument("fed " + std::to_string(n) + " tokens but only " + std::to_string(waiting) +
                                " were pending");
    if (n == 0) return Status::ok();
    if (state_tokens_ >= int64_t(prompt_.size())) last_token_fed_ = true;
    state_tokens_ += int64_t(n);
    return Status::ok();
}

bool Generation::constrained() const {
    return in_content_ && constraints_ && (options_.json_object || constraints_->prefix.active());
}

Status Generation::check_can_sample() const {
    if (finished()) return invalid_argument("the generation has finished; no more tokens can be sampled");
    if (!pending().empty())
        return invalid_argument(std::to_string(pending().size()) + " tokens must be fed before the next sample");
    return Status::ok();
}

Status Generation::next(std::span<const float> logits_row, GenerationStep* step) {
    *step = GenerationStep{};
    DSV4_RETURN_IF_ERROR(check_can_sample());
    std::span<const float> row = logits_row;
    if (constrained() && logits_row.size() == constraints_->masked.size()) {  // (another size: the sampler's error)
        ReplyConstraints& c = *constraints_;
        if (c.prefix.active())
            c.prefix.mask(logits_row, c.masked);
        else
            c.json.mask(logits_row, c.masked, eos_id_);
        row = c.masked;
    }
    DSV4_RETURN_IF_ERROR(sampler_.sample(row, generated_, step->sample));
    return accept_sample(step);
}

bool Generation::prepare_engine_sample(EngineSample* request, SampleResult* result) {
    const SamplingParams& p = sampler_.params();
    if (finished() || constrained()) return false;
    engine_draw_rng_ = sampler_.rng().state();
    request->params = &p;
    request->uniform = p.temperature > 0.0f ? sampler_.rng().uniform() : 0.0;  // Sampler::sample's one draw
    request->result = result;
    request->history = generated_;  // the penalties' history, as next() passes it to the sampler
    result->token = -1;
    return true;
}

Status Generation::next_from_engine(const SampleResult& drawn, std::span<const float> logits_row,
                                    GenerationStep* step) {
    if (drawn.token < 0) {  // not drawn: the host sampler, from the same point of the random stream
        sampler_.rng().set_state(engine_draw_rng_);
        return next(logits_row, step);
    }
    *step = GenerationStep{};
    DSV4_RETURN_IF_ERROR(check_can_sample());
    step->sample = drawn;
    return accept_sample(step);
}

// The token in step->sample is the sequence's next: timings, history, end token, text, limits.
Status Generation::accept_sample(GenerationStep* step) {
    const auto now = Clock::now();
    if (generated_.empty()) first_token_ = now;
    last_token_ = now;
    const int32_t token = step->sample.token;
    generated_.push_back(token);
    last_token_fed_ = false;
    if (!in_content_) {
        in_content_ = token == think_end_id_;  // the content begins
    } else if (constraints_) {
        if (constraints_->prefix.active())
            constraints_->prefix.accept(token);
        else if (options_.json_object)
            constraints_->json.accept(token);
    }

    if (token == eos_id_ && !options_.ignore_eos) {
        finish(StopReason::kEos, step);
        return Status::ok();
    }
    DSV4_ASSIGN_OR_RETURN(std::string piece, decoder_.push(token));
    DSV4_RETURN_IF_ERROR(accept_text(piece, step));
    if (finished()) return Status::ok();
    if (int64_t(generated_.size()) >= max_new_) {
        const bool by_max_tokens = options_.max_tokens > 0 && options_.max_tokens <= max_new_;
        finish(by_max_tokens ? StopReason::kMaxTokens : StopReason::kContextFull, step);
    }
    return Status::ok();
}

void Generation::cancel(GenerationStep* step) {
    *step = GenerationStep{};
    if (!finished()) finish(StopReason::kCancelled, step);
}

// Text passes through here before it is emitted. Text that could still become a stop string stays in held_
// until the next tokens decide it; the earliest stop string ends the sequence and nothing from it on is emitted.
Status Generation::accept_text(const std::string& piece, GenerationStep* step) {
    held_ += piece;
    size_t release = held_.size();
    if (!options_.stop.empty()) {
        size_t hit = std::string::npos;
        for (const std::string& s : options_.stop) hit = std::min(hit, held_.find(s));
        if (hit != std::string::npos) {
            held_.resize(hit);
            step->text += held_;
            if (options_.parse_reply) parser_.feed(held_, step->events);
            text_ += held_;
            held_.clear();
            finish(StopReason::kStopString, step);
            return Status::ok();
        }
        // Keep the longest suffix that is a proper prefix of a stop string. A stop string starts with a UTF-8
        // lead byte and held_ holds whole characters, so the cut is on a character boundary.
        size_t keep = 0;
        for (const std::string& s : options_.stop) {
            for (size_t len = std::min(s.size() - 1, held_.size()); len > keep; --len) {
                if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
                    keep = len;
                    break;
                }
            }
        }
        release = held_.size() - keep;
    }
    const std::string_view out(held_.data(), release);
    step->text.append(out);
    if (options_.parse_reply) parser_.feed(out, step->events);
    text_.append(out);
    held_.erase(0, release);
    return Status::ok();
}

void Generation::finish(StopReason reason, GenerationStep* step) {
    reason_ = reason;
    step->finished = true;
    step->reason = reason;
    if (reason != StopReason::kStopString) {
        // Nothing more can complete a stop string or a character: release what was held.
        held_ += decoder_.finish();
        step->text += held_;
        if (options_.parse_reply) parser_.feed(held_, step->events);
        text_ += held_;
    }
    held_.clear();
    decoder_.reset();
    if (options_.parse_reply) parser_.finish(step->events);
}

GenerationTimings Generation::timings() const {
    GenerationTimings t;
    t.cached_tokens = options_.cached_tokens;
    t.prompt_tokens = std::min<int64_t>(state_tokens_, int64_t(prompt_.size())) - options_.cached_tokens;
    t.generated_tokens = int64_t(generated_.size());
    if (!generated_.empty()) {
        t.prompt_seconds = seconds_between(start_, first_token_);
        t.generation_seconds = seconds_between(first_token_, last_token_);
    }
    return t;
}

std::span<const float> last_logits_row(const Logits& logits) {
    const size_t vocab = size_t(logits.vocab);
    return std::span<const float>(logits.values.data() + size_t(logits.rows - 1) * vocab, vocab);
}

Status run_generation(Session& session, Generation& gen, const std::function<bool(const GenerationStep&)>& on_step,
                      Logits& logits, int64_t chunk) {
    if (session.position() != gen.state_tokens())
        return invalid_argument("the session holds " + std::to_string(session.position()) +
                                " tokens but the generation expects " + std::to_string(gen.state_tokens()) +
                                " (its cached prefix)");
    GenerationStep step;
    EngineSample request;
    SampleResult drawn;
    bool engine_draw = false;
    while (!gen.finished()) {
        const std::span<const int32_t> in = gen.pending();
        if (!in.empty()) {
            const size_t n = chunk > 0 ? std::min(in.size(), size_t(chunk)) : in.size();
            // the feed that empties pending() asks the engine to draw the next token where it can
            engine_draw = n == in.size() && gen.prepare_engine_sample(&request, &drawn);
            DSV4_RETURN_IF_ERROR(
                session.feed(in.first(n), &logits, LogitRows::kLast, engine_draw ? &request : nullptr));
            DSV4_RETURN_IF_ERROR(gen.fed(n));
            continue;
        }
        if (engine_draw) {
            DSV4_RETURN_IF_ERROR(gen.next_from_engine(drawn, last_logits_row(logits), &step));
        } else {
            DSV4_RETURN_IF_ERROR(gen.next(last_logits_row(logits), &step));
        }
        if (!on_step(step) && !gen.finished()) {
            gen.cancel(&step);
            on_step(step);
        }
    }
    return Status::ok();
}

}  // namespace dsv4::engine
