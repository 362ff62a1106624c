// The generation state machine with scripted logits (each step puts all mass on the next scripted token), over
// the real DeepSeek-V4 tokenizer: stop strings (across tokens, across UTF-8 bytes, never emitted), EOS, limits,
// the pending/fed protocol, seeds, the reasoning/content split and timings.
#include "dsv4/generation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dsv4/chat.h"
#include "dsv4/engine.h"
#include "dsv4/tokenizer.h"
#include "testing/testing.h"
#include "testing/v4_tokenizer.h"

namespace dsv4::engine {
namespace {

const Tokenizer& tokenizer() { return testing::v4_tokenizer(); }

int32_t vocab() { return tokenizer().vocab_size(); }
int32_t eos() { return *tokenizer().token_to_id(chat::kEosToken); }
std::vector<int32_t> encode(const std::string& s) { return tokenizer().encode(s); }

GenerationOptions greedy(int64_t max_tokens = 0, int64_t max_context = 4096) {
    GenerationOptions o;
    o.sampling.temperature = 0;
    o.max_tokens = max_tokens;
    o.max_context = max_context;
    return o;
}

std::unique_ptr<Generation> make(std::vector<int32_t> prompt, GenerationOptions o) {
    auto g = Generation::create(tokenizer(), vocab(), std::move(prompt), std::move(o));
    EXPECT_TRUE(g.is_ok()) << g.status().to_string();
    return g.is_ok() ? std::move(g).value() : nullptr;
}

// Runs `g` to the end like a scheduler would: feeds whatever is pending, then samples from a row whose only large
// logit is the next scripted token. Returns every step.
std::vector<GenerationStep> drive(Generation& g, const std::vector<int32_t>& script) {
    std::vector<GenerationStep> steps;
    std::vector<float> row(static_cast<size_t>(vocab()));
    size_t next = 0;
    while (!g.finished()) {
        const auto pending = g.pending();
        if (!pending.empty()) {
            EXPECT_TRUE(g.fed(pending.size()).is_ok());
            continue;
        }
        if (next >= script.size()) {
            ADD_FAILURE() << "the script ran out after " << next << " tokens";
            break;
        }
        std::fill(row.begin(), row.end(), 0.0f);
        row[size_t(script[next++])] = 50.0f;
        GenerationStep step;
        const Status st = g.next(row, &step);
        EXPECT_TRUE(st.is_ok()) << st.to_string();
        if (!st) break;
        steps.push_back(std::move(step));
    }
    return steps;
}

std::string all_text(const std::vector<GenerationStep>& steps) {
    std::string s;
    for (const auto& st : steps) s += st.text;
    return s;
}

const std::vector<int32_t> kPrompt = encode("<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>");

TEST(Generation, TextWithoutStopsIsTheDecodedTokens) {
    const auto script = encode("Hello world! 你好");
    auto g = make(kPrompt, greedy(int64_t(script.size())));
    const auto steps = drive(*g, script);
    EXPECT_EQ(all_text(steps), "Hello world! 你好");
    EXPECT_EQ(g->text(), "Hello world! 你好");
    EXPECT_EQ(g->generated(), script);
    EXPECT_EQ(g->reason(), StopReason::kMaxTokens);
    ASSERT_FALSE(steps.empty());
    EXPECT_TRUE(steps.back().finished);
    for (size_t i = 0; i + 1 < steps.size(); ++i) EXPECT_FALSE(steps[i].finished);
}

TEST(Generation, StopStringAcrossTokensIsHeldBackAndNeverEmitted) {
    const auto script = encode("Hello world, and more");
    ASSERT_GE(script.size(), 3u);
    GenerationOptions o = greedy(int64_t(script.size()));
    o.stop = {"lo wor"};  // spans the "Hello" and " world" tokens
    auto g = make(kPrompt, o);
    const auto steps = drive(*g, script);
    EXPECT_EQ(g->reason(), StopReason::kStopString);
    EXPECT_EQ(all_text(steps), "Hel");
    EXPECT_EQ(g->text(), "Hel");
    // "lo" was held after the first token, since it could start the stop string.
    EXPECT_EQ(steps[0].text, "Hel");
    EXPECT_EQ(g->reply().content, "Hel");
    EXPECT_EQ(g->generated().size(), 2u);  // stopped on the token that completed the stop string
}

TEST(Generation, HeldTextIsReleasedWhenTheStopStringDoesNotComplete) {
    const auto script = encode("Hello world");
    GenerationOptions o = greedy(int64_t(script.size()));
    o.stop = {"lo wox"};
    auto g = make(kPrompt, o);
    const auto steps = drive(*g, script);
    EXPECT_EQ(steps[0].text, "Hel");
    EXPECT_EQ(all_text(steps), "Hello world");
    EXPECT_EQ(g->reason(), StopReason::kMaxTokens);
}

TEST(Generation, HeldTextIsFlushedWhenALimitEndsTheSequence) {
    GenerationOptions o = greedy(1);
    o.stop = {"lo there"};
    auto g = make(kPrompt, o);
    const auto steps = drive(*g, encode("Hello"));
    ASSERT_EQ(steps.size(), 1u);
    EXPECT_EQ(steps[0].text, "Hello");
    EXPECT_TRUE(steps[0].finished);
    EXPECT_EQ(steps[0].reason, StopReason::kMaxTokens);
}

TEST(Generation, StopStringInsideMultiByteCharactersAndEarliestWins) {
    // Byte-level BPE: "世界" may arrive in pieces that are not whole characters; the stream decoder and the
    // hold-back together still cut exactly before the stop string.
    const auto script = encode("你好世界和平");
    GenerationOptions o = greedy(int64_t(script.size()));
    o.stop = {"和平", "世界"};
    auto g = make(kPrompt, o);
    const auto steps = drive(*g, script);
    EXPECT_EQ(g->reason(), StopReason::kStopString);
    EXPECT_EQ(all_text(steps), "你好");
}

TEST(Generation, StopStringEndsReasoningToo) {
    GenerationOptions o = greedy(64);
    o.starts_in_reasoning = true;
    o.stop = {"STOP"};
    auto g = make(kPrompt, o);
    drive(*g, encode("think hard STOP more"));
    EXPECT_EQ(g->reason(), StopReason::kStopString);
    EXPECT_EQ(g->reply().reasoning, "think hard ");
    EXPECT_EQ(g->reply().content, "");
}

TEST(Generation, EosEndsTheSequenceIsNotTextAndIsNotFed) {
    auto script = encode("Hi there");
    const size_t text_tokens = script.size();
    script.push_back(eos());
    script.push_back(encode("never")[0]);
    auto g = make(kPrompt, greedy(100));
    const auto steps = drive(*g, script);
    EXPECT_EQ(g->reason(), StopReason::kEos);
    EXPECT_EQ(steps.size(), text_tokens + 1);
    EXPECT_EQ(g->text(), "Hi there");
    EXPECT_TRUE(g->pending().empty());
    EXPECT_EQ(g->state_tokens(), int64_t(kPrompt.size() + text_tokens));
    EXPECT_EQ(openai_finish_reason(g->reason()), std::string("stop"));
}

TEST(Generation, IgnoreEosKeepsGoing) {
    auto script = encode("a");
    script.push_back(eos());
    script.push_back(encode("b")[0]);
    GenerationOptions o = greedy(3);
    o.ignore_eos = true;
    o.parse_reply = false;
    auto g = make(kPrompt, o);
    drive(*g, script);
    EXPECT_EQ(g->reason(), StopReason::kMaxTokens);
    EXPECT_EQ(g->text(), std::string("a") + std::string(chat::kEosToken) + "b");
}

TEST(Generation, MaxTokensAndContextLimits) {
    const auto script = encode("one two three four five six seven eight");
    auto by_tokens = make(kPrompt, greedy(4));
    EXPECT_EQ(drive(*by_tokens, script).size(), 4u);
    EXPECT_EQ(by_tokens->reason(), StopReason::kMaxTokens);
    EXPECT_EQ(openai_finish_reason(by_tokens->reason()), std::string("length"));

    // Room for 3 tokens: prompt + generated never exceeds the context.
    auto by_context = make(kPrompt, greedy(0, int64_t(kPrompt.size()) + 3));
    EXPECT_EQ(drive(*by_context, script).size(), 3u);
    EXPECT_EQ(by_context->reason(), StopReason::kContextFull);

    // max_tokens larger than the room: the context decides.
    auto both = make(kPrompt, greedy(10, int64_t(kPrompt.size()) + 2));
    EXPECT_EQ(drive(*both, script).size(), 2u);
    EXPECT_EQ(both->reason(), StopReason::kContextFull);
}

TEST(Generation, CreateRejectsBadInput) {
    auto err = [](std::vector<int32_t> prompt, GenerationOptions o) {
        return Generation::create(tokenizer(), vocab(), std::move(prompt), std::move(o)).status();
    };
    EXPECT_EQ(err({}, greedy()).code(), StatusCode::kInvalidArgument);
    const Status too_long = err(kPrompt, greedy(0, int64_t(kPrompt.size())));
    EXPECT_EQ(too_long.code(), StatusCode::kOutOfRange);
    EXPECT_NE(too_long.message().find("-c"), std::string::npos) << too_long.message();
    GenerationOptions cached = greedy();
    cached.cached_tokens = int64_t(kPrompt.size());
    EXPECT_EQ(err(kPrompt, cached).code(), StatusCode::kInvalidArgument);
    GenerationOptions empty_stop = greedy();
    empty_stop.stop = {""};
    EXPECT_EQ(err(kPrompt, empty_stop).code(), StatusCode::kInvalidArgument);
    GenerationOptions bad_utf8 = greedy();
    bad_utf8.stop = {"ok\xC3"};
    EXPECT_EQ(err(kPrompt, bad_utf8).code(), StatusCode::kInvalidArgument);
    GenerationOptions bad_sampling = greedy();
    bad_sampling.sampling.top_p = 0;
    EXPECT_EQ(err(kPrompt, bad_sampling).code(), StatusCode::kInvalidArgument);
}

TEST(Generation, PendingFedProtocol) {
    GenerationOptions o = greedy(3);
    o.cached_tokens = 2;
    auto g = make(kPrompt, o);
    std::vector<float> row(size_t(vocab()), 0.0f);
    row[7] = 1.0f;
    GenerationStep step;
    ASSERT_EQ(g->pending().size(), kPrompt.size() - 2);
    EXPECT_EQ(g->pending()[0], kPrompt[2]);
    EXPECT_FALSE(g->next(row, &step).is_ok());     // prompt not fed yet
    EXPECT_FALSE(g->fed(kPrompt.size()).is_ok());  // more than pending
    ASSERT_TRUE(g->fed(1).is_ok());                // any chunking
    ASSERT_TRUE(g->fed(g->pending().size()).is_ok());
    EXPECT_TRUE(g->pending().empty());
    ASSERT_TRUE(g->next(row, &step).is_ok());
    EXPECT_EQ(step.sample.token, 7);
    ASSERT_EQ(g->pending().size(), 1u);  // the sampled token comes next
    EXPECT_EQ(g->pending()[0], 7);
    EXPECT_FALSE(g->next(row, &step).is_ok());
    ASSERT_TRUE(g->fed(1).is_ok());
    EXPECT_EQ(g->state_tokens(), int64_t(kPrompt.size()) + 1);
    const GenerationTimings t = g->timings();
    EXPECT_EQ(t.prompt_tokens, int64_t(kPrompt.size()) - 2);
    EXPECT_EQ(t.cached_tokens, 2);
    EXPECT_EQ(t.generated_tokens, 1);
    EXPECT_GE(t.prompt_seconds, 0.0);
}

// Plays the engine of Generation::prepare_engine_sample / next_from_engine in random_rows_run: `engine` returns
// each step's token, or -1 to leave the draw to the host sampler.
struct EngineDraws {
    std::function<int32_t(int step, double uniform)> engine;
    EngineSample request;
    SampleResult drawn;
    int steps = 0;
};

// Random logits per step (the same for every run): the sampler must make the choice. Each draw by next(), or with
// `draws` asked of the (played) engine first.
std::vector<int32_t> random_rows_run(uint64_t seed, int steps, EngineDraws* draws = nullptr) {
    GenerationOptions o;
    o.sampling.temperature = 1.0f;
    o.sampling.seed = seed;
    o.max_tokens = steps;
    o.max_context = 4096;
    o.ignore_eos = true;
    auto g = make(kPrompt, o);
    std::mt19937 gen(1234);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> row(static_cast<size_t>(vocab()));
    GenerationStep step;
    while (!g->finished()) {
        if (!g->pending().empty()) {
            if (draws) {
                EXPECT_TRUE(g->prepare_engine_sample(&draws->request, &draws->drawn));
                EXPECT_EQ(draws->request.result, &draws->drawn);
                EXPECT_EQ(draws->drawn.token, -1);
            }
            EXPECT_TRUE(g->fed(g->pending().size()).is_ok());
            continue;
        }
        for (float& x : row) x = normal(gen);
        if (draws) {
            draws->drawn.token = draws->engine(draws->steps++, draws->request.uniform);
            EXPECT_TRUE(g->next_from_engine(draws->drawn, row, &step).is_ok());
            EXPECT_EQ(step.sample.token, g->generated().back());
        } else {
            EXPECT_TRUE(g->next(row, &step).is_ok());
        }
    }
    return g->generated();
}

// A draw the engine declines leaves the random stream where the host sampler alone would have it, and one it makes
// consumes exactly the host's one uniform: the tokens after it are the host's.
TEST(Generation, EngineDrawsKeepTheRandomStream) {
    const auto host = random_rows_run(42, 12);
    Rng first(42);
    const double u0 = first.uniform();
    EngineDraws declining{[&](int step, double u) {
        if (step == 0) EXPECT_EQ(u, u0);  // the sampler's own first draw
        return -1;
    }};
    EXPECT_EQ(random_rows_run(42, 12, &declining), host);
    EngineDraws first_only{[](int step, double) { return step == 0 ? 7 : -1; }};
    const auto first_drawn = random_rows_run(42, 12, &first_only);
    ASSERT_EQ(first_drawn.size(), host.size());
    EXPECT_EQ(first_drawn[0], 7);
    EXPECT_TRUE(std::equal(first_drawn.begin() + 1, first_drawn.end(), host.begin() + 1));
}

// Penalties go to the engine with the history they count: the generated tokens, as next() gives the sampler.
TEST(Generation, PenaltiesGoToTheEngineWithTheirHistory) {
    GenerationOptions o = greedy(4);
    o.sampling.repetition_penalty = 1.3f;
    auto g = make(kPrompt, o);
    EngineSample request;
    SampleResult drawn;
    EXPECT_TRUE(g->prepare_engine_sample(&request, &drawn));
    EXPECT_TRUE(request.history.empty());  // nothing generated yet
    EXPECT_EQ(request.uniform, 0.0);       // greedy: no uniform drawn
    ASSERT_TRUE(g->fed(g->pending().size()).is_ok());
    std::vector<float> row(static_cast<size_t>(vocab()), 0.0f);
    row[100] = 9.0f;
    GenerationStep step;
    ASSERT_TRUE(g->next_from_engine(drawn, row, &step).is_ok());
    EXPECT_EQ(step.sample.token, 100);
    ASSERT_TRUE(g->prepare_engine_sample(&request, &drawn));
    ASSERT_EQ(request.history.size(), 1u);
    EXPECT_EQ(request.history[0], 100);
    EXPECT_EQ(request.params->repetition_penalty, 1.3f);
}

TEST(Generation, SameSeedSameTokensOtherSeedOtherTokens) {
    const auto a = random_rows_run(42, 16);
    EXPECT_EQ(a.size(), 16u);
    EXPECT_EQ(random_rows_run(42, 16), a);
    EXPECT_NE(random_rows_run(43, 16), a);
}

TEST(Generation, ReasoningAndContentSplit) {
    GenerationOptions o = greedy(64);
    o.starts_in_reasoning = true;
    auto g = make(encode("<｜begin▁of▁sentence｜><｜User｜>2+2?<｜Assistant｜><think>"), o);
    auto script = encode("Add them.</think>It is 4.");
    script.push_back(eos());
    const auto steps = drive(*g, script);
    std::string reasoning, content;
    for (const auto& s : steps)
        for (const auto& e : s.events) {
            if (e.kind == chat::ReplyEvent::Kind::kReasoning) reasoning += e.text;
            if (e.kind == chat::ReplyEvent::Kind::kContent) content += e.text;
        }
    EXPECT_EQ(reasoning, "Add them.");
    EXPECT_EQ(content, "It is 4.");
    EXPECT_EQ(g->reply().reasoning, "Add them.");
    EXPECT_EQ(g->reply().content, "It is 4.");
    EXPECT_TRUE(g->reply().saw_think_end);
    EXPECT_EQ(g->text(), "Add them.</think>It is 4.");  // the raw text keeps the markup
}

TEST(Generation, ToolCallEventsFromDsml) {
    auto g = make(kPrompt, greedy(400));
    auto script = encode(
        "Checking.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
        "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
    script.push_back(eos());
    drive(*g, script);
    ASSERT_EQ(g->reply().tool_calls.size(), 1u);
    EXPECT_EQ(g->reply().tool_calls[0].name, "get_weather");
    EXPECT_EQ(g->reply().content, "Checking.");
}

TEST(Generation, CancelFlushesHeldText) {
    GenerationOptions o = greedy(10);
    o.stop = {"lo wor"};
    auto g = make(kPrompt, o);
    std::vector<float> row(size_t(vocab()), 0.0f);
    row[size_t(encode("Hello")[0])] = 50.0f;
    GenerationStep step;
    ASSERT_TRUE(g->fed(g->pending().size()).is_ok());
    ASSERT_TRUE(g->next(row, &step).is_ok());
    EXPECT_EQ(step.text, "Hel");
    g->cancel(&step);
    EXPECT_TRUE(step.finished);
    EXPECT_EQ(step.reason, StopReason::kCancelled);
    EXPECT_EQ(step.text, "lo");
    EXPECT_TRUE(g->pending().empty());
}

}  // namespace
}  // namespace dsv4::engine
