// What a scheduler slot relies on when it keeps one engine::Generation (and so one Sampler) for its lifetime: a
// request started in place gives exactly what a freshly created Generation gives — tokens, logprobs, text, reply
// events, stop reason, token counts — whatever the slot ran before (finished, abandoned half-way, or a refused
// start), and the sampler's vocabulary-sized buffers are reused, not reallocated.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dsv4/chat.h"
#include "dsv4/generation.h"
#include "dsv4/sampling.h"
#include "dsv4/tokenizer.h"
#include "testing/testing.h"
#include "testing/v4_tokenizer.h"

namespace dsv4::server {
namespace {

using engine::Generation;
using engine::GenerationOptions;
using engine::GenerationStep;

const Tokenizer& tokenizer() { return testing::v4_tokenizer(); }

int32_t vocab() { return tokenizer().vocab_size(); }

// One request as a slot would get it. `reply` non-empty: every step puts a large logit on the reply's next token
// over random noise (so sampling still matters); empty: pure noise. `abandon_after` >= 0: the slot drops the
// request after that many tokens (a cancelled or timed-out client).
struct Request {
    std::string prompt;
    std::string reply;
    GenerationOptions options;
    int abandon_after = -1;
};

// Everything a step reports, flattened for comparison.
std::string describe(const GenerationStep& s) {
    std::string d = std::to_string(s.sample.token) + " lp=" + std::to_string(s.sample.logprob) + " top=";
    for (int i = 0; i < s.sample.num_top; ++i)
        d += std::to_string(s.sample.top[size_t(i)].token) + ":" + std::to_string(s.sample.top[size_t(i)].logprob) + ",";
    d += " text=[" + s.text + "] events=";
    for (const auto& e : s.events) d += std::to_string(int(e.kind)) + "/" + std::to_string(e.tool_index) + "/" + e.text + ";";
    d += s.finished ? std::string(" end:") + engine::stop_reason_name(s.reason) : std::string();
    return d;
}

// Drives `g` (already started) like the scheduler: feed what is pending in chunks of 3, sample. Returns the steps
// and, for a finished request, the reply, text and counts.
std::vector<std::string> drive(Generation& g, const Request& r) {
    const std::vector<int32_t> reply = tokenizer().encode(r.reply);
    std::mt19937 noise(1234);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> row(static_cast<size_t>(vocab()));
    std::vector<std::string> out;
    while (!g.finished()) {
        const auto pending = g.pending();
        if (!pending.empty()) {
            EXPECT_TRUE(g.fed(std::min<size_t>(pending.size(), 3)).is_ok());
            continue;
        }
        if (r.abandon_after >= 0 && int(out.size()) == r.abandon_after) break;
        for (float& v : row) v = normal(noise);
        const size_t k = g.generated().size();
        if (!r.reply.empty())
            row[size_t(k < reply.size() ? reply[k] : *tokenizer().token_to_id(chat::kEosToken))] = 40.0f;
        GenerationStep step;
        const Status st = g.next(row, &step);
        EXPECT_TRUE(st.is_ok()) << st.to_string();
        if (!st) break;
        out.push_back(describe(step));
    }
    if (g.finished()) {
        const chat::ParsedReply& p = g.reply();
        out.push_back("text=[" + g.text() + "] reasoning=[" + p.reasoning + "] content=[" + p.content + "] calls=" +
                      std::to_string(p.tool_calls.size()) + " generated=" + std::to_string(g.generated().size()) +
                      " prompt_fed=" + std::to_string(g.timings().prompt_tokens) +
                      " cached=" + std::to_string(g.timings().cached_tokens));
    }
    return out;
}

std::vector<int32_t> encode(const std::string& s) { return tokenizer().encode(s); }

GenerationOptions options(uint64_t seed, int64_t max_tokens, int64_t max_context = 256) {
    GenerationOptions o;
    o.sampling.seed = seed;
    o.sampling.temperature = 0.9f;
    o.sampling.top_logprobs = 3;
    o.max_tokens = max_tokens;
    o.max_context = max_context;
    return o;
}

std::vector<Request> requests() {
    std::vector<Request> rs;
    {  // sampling from noise, penalties on, no reply parsing (a completion)
        Request r{"<｜begin▁of▁sentence｜>Once upon a time", "", options(7, 12)};
        r.options.sampling.top_k = 50;
        r.options.sampling.repetition_penalty = 1.3f;
        r.options.parse_reply = false;
        rs.push_back(r);
    }
    {  // thinking chat reply ending at a stop string inside the content
        Request r{"<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜><think>",
                  "Let me think.</think>The answer is 42. STOP here", options(8, 64)};
        r.options.starts_in_reasoning = true;
        r.options.stop = {"STOP", "never"};
        rs.push_back(r);
    }
    {  // abandoned half-way while text is held back for a stop string
        Request r{"<｜begin▁of▁sentence｜><｜User｜>Count<｜Assistant｜></think>", "one two thr", options(9, 64)};
        r.options.stop = {"three"};
        r.abandon_after = 3;  // " thr" held back, the end-of-sentence token not yet sampled
        rs.push_back(r);
    }
    {  // a reused prefix, top-p sampling, limited by max_tokens
        Request r{"<｜begin▁of▁sentence｜><｜User｜>Count<｜Assistant｜></think>one", "", options(10, 5)};
        r.options.cached_tokens = 4;
        r.options.sampling.top_p = 0.9f;
        r.options.sampling.top_logprobs = 0;
        rs.push_back(r);
    }
    {  // a tool call, greedy, ended by the end-of-sentence token
        Request r{"<｜begin▁of▁sentence｜><｜User｜>Weather?<｜Assistant｜></think>",
                  "Checking.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
                  "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
                  "</｜DSML｜invoke>\n</｜DSML｜function_calls>",
                  options(11, 200)};
        r.options.sampling.temperature = 0;
        rs.push_back(r);
    }
    {  // the context, not max_tokens, ends it
        Request r{"<｜begin▁of▁sentence｜>abc", "", options(12, 0, 9)};
        rs.push_back(r);
    }
    return rs;
}

TEST(SlotGeneration, StartInPlaceMatchesAFreshGenerationWhateverRanBefore) {
    auto reused = Generation::create_reusable(tokenizer(), vocab());
    ASSERT_TRUE(reused.is_ok()) << reused.status().to_string();
    Generation& slot = **reused;
    // Twice through the list, so every request also follows every kind of predecessor.
    for (int round = 0; round < 2; ++round) {
        for (const Request& r : requests()) {
            SCOPED_TRACE("round " + std::to_string(round) + ", prompt " + r.prompt);
            auto fresh = Generation::create(tokenizer(), vocab(), encode(r.prompt), r.options);
            ASSERT_TRUE(fresh.is_ok()) << fresh.status().to_string();
            const std::vector<std::string> expected = drive(**fresh, r);
            ASSERT_TRUE(slot.start(encode(r.prompt), r.options).is_ok());
            EXPECT_EQ(drive(slot, r), expected);
            EXPECT_FALSE(expected.empty());
        }
    }
}

TEST(SlotGeneration, IdleUntilStartedAndARefusedStartLeavesItIdle) {
    auto g = Generation::create_reusable(tokenizer(), vocab());
    ASSERT_TRUE(g.is_ok());
    EXPECT_TRUE((*g)->finished());
    EXPECT_EQ((*g)->reason(), engine::StopReason::kNone);
    EXPECT_TRUE((*g)->pending().empty());
    std::vector<float> row(size_t(vocab()), 0.0f);
    GenerationStep step;
    EXPECT_FALSE((*g)->next(row, &step).is_ok());

    const std::vector<int32_t> prompt = encode("<｜begin▁of▁sentence｜>a b c d e f g h");
    Status st = (*g)->start(prompt, options(1, 4, int64_t(prompt.size())));  // no room left in the context
    EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();
    EXPECT_NE(st.message().find("leaves no room"), std::string::npos) << st.message();
    EXPECT_TRUE((*g)->finished());
    EXPECT_TRUE((*g)->pending().empty());
    GenerationOptions bad = options(1, 4);
    bad.stop = {""};
    EXPECT_FALSE((*g)->start(prompt, bad).is_ok());
    EXPECT_TRUE((*g)->finished());

    ASSERT_TRUE((*g)->start(prompt, options(1, 4)).is_ok());
    EXPECT_FALSE((*g)->finished());
    EXPECT_EQ((*g)->pending().size(), prompt.size());

    EXPECT_FALSE(Generation::create_reusable(tokenizer(), 0).is_ok());
}

TEST(SlotGeneration, SamplerConfigureEqualsANewSamplerAndKeepsItsBuffers) {
    constexpr int32_t kVocab = 3000;
    SamplingParams first;
    first.seed = 1;
    first.temperature = 0.7f;
    first.presence_penalty = 0.5f;
    SamplingParams second;
    second.seed = 99;
    second.temperature = 1.2f;
    second.top_k = 40;
    second.min_p = 0.02f;
    second.frequency_penalty = 0.3f;
    second.top_logprobs = 5;

    std::mt19937 noise(5);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<std::vector<float>> rows(20, std::vector<float>(kVocab));
    for (auto& r : rows)
        for (float& v : r) v = normal(noise);

    Sampler reused(kVocab, first);
    std::vector<int32_t> history;
    SampleResult res;
    for (const auto& r : rows) {
        ASSERT_TRUE(reused.sample(r, history, res).is_ok());
        history.push_back(res.token);
    }
    const float* buffer = reused.processed_logits().data();
    reused.configure(second);
    EXPECT_EQ(reused.params().seed, 99u);

    Sampler fresh(kVocab, second);
    std::vector<int32_t> h_reused, h_fresh;
    for (const auto& r : rows) {
        SampleResult a, b;
        ASSERT_TRUE(reused.sample(r, h_reused, a).is_ok());
        ASSERT_TRUE(fresh.sample(r, h_fresh, b).is_ok());
        ASSERT_EQ(a.token, b.token);
        EXPECT_EQ(a.logprob, b.logprob);
        ASSERT_EQ(a.num_top, 5);
        for (int i = 0; i < a.num_top; ++i) EXPECT_EQ(a.top[size_t(i)].token, b.top[size_t(i)].token);
        h_reused.push_back(a.token);
        h_fresh.push_back(b.token);
    }
    EXPECT_EQ(reused.processed_logits().data(), buffer);
}

}  // namespace
}  // namespace dsv4::server
