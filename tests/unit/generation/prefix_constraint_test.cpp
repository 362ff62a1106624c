// Constrained decoding to an opening (GenerationOptions::reply_prefix, the server's tool_choice "required" / a named
// function): the mask against comparing every token's bytes with the text, and a Generation over the V4 tokenizer
// whose random draws write the opening of a DSML tool call, after which the scripted rest completes the call.
#include "engine/prefix_constraint.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "dsv4/chat.h"
#include "dsv4/engine.h"
#include "dsv4/generation.h"
#include "testing/seeds.h"
#include "testing/testing.h"
#include "testing/v4_tokenizer.h"

namespace dsv4::engine {
namespace {

const Tokenizer& tokenizer() { return testing::v4_tokenizer(); }

const std::string kOpening = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n";

TEST(PrefixConstraint, AllowsExactlyTheTokensThatAgreeWithTheRestOfTheText) {
    const Tokenizer& tok = tokenizer();
    const int32_t vocab = tok.vocab_size();
    const TokenBytes tokens(tok, vocab);
    PrefixConstraint c(tokens);
    c.reset(kOpening);
    std::vector<float> logits(static_cast<size_t>(vocab), 1.0f), out(static_cast<size_t>(vocab));
    const std::vector<int32_t> ids = tok.encode(kOpening);
    size_t written = 0;
    for (size_t step = 0; step < ids.size(); ++step) {
        ASSERT_TRUE(c.active());
        c.mask(logits, out);
        const std::string rest = kOpening.substr(written);
        for (int32_t id = 0; id < vocab; ++id) {
            const std::string b = *tok.token_bytes(id);
            const size_t n = std::min(b.size(), rest.size());
            const bool want = !b.empty() && b.compare(0, n, rest, 0, n) == 0;
            ASSERT_EQ(out[size_t(id)] == 1.0f, want) << "step " << step << ", token " << id << " '" << b << "'";
        }
        EXPECT_EQ(out[size_t(ids[step])], 1.0f) << "the text's own token " << step;
        c.accept(ids[step]);
        written += tok.token_bytes(ids[step])->size();
    }
    EXPECT_FALSE(c.active());
    // a token running past the end of the text is allowed and ends it
    c.reset("ab");
    const int32_t abc = tok.encode("abc")[0];
    ASSERT_EQ(*tok.token_bytes(abc), "abc");
    c.mask(logits, out);
    EXPECT_EQ(out[size_t(abc)], 1.0f);
    c.accept(abc);
    EXPECT_FALSE(c.active());
}

TEST(PrefixConstraint, AGenerationOpensWithTheTextAndTheModelWritesTheRest) {
    const Tokenizer& tok = tokenizer();
    const int32_t vocab = tok.vocab_size(), eos = *tok.token_to_id(chat::kEosToken);
    const std::vector<int32_t> rest = tok.encode(
        "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
        "</｜DSML｜tool_calls>");
    std::mt19937_64 rng(testing::fresh_seed());
    std::normal_distribution<float> n(0.0f, 3.0f);
    for (const bool thinking : {false, true}) {
        SCOPED_TRACE(thinking ? "thinking" : "chat");
        GenerationOptions o;
        o.reply_prefix = kOpening;
        o.starts_in_reasoning = thinking;
        o.max_tokens = 200;
        o.max_context = 4096;
        o.sampling.seed = rng();
        auto g = Generation::create(tok, vocab, tok.encode("<｜User｜>Weather in Paris?<｜Assistant｜></think>"), o);
        ASSERT_TRUE(g.is_ok()) << g.status().to_string();
        Generation& gen = **g;
        std::vector<float> row(static_cast<size_t>(vocab));
        std::vector<int32_t> script;
        if (thinking) script = tok.encode("Let me call the tool.</think>");
        size_t next = 0, opening_bytes = 0;
        bool opened = false;
        while (!gen.finished()) {
            ASSERT_TRUE(gen.fed(gen.pending().size()).is_ok());
            if (gen.finished()) break;
            // the reasoning (scripted), then random draws until the opening is written, then the scripted call
            const bool in_opening = next >= script.size() && !opened;
            EngineSample request;
            SampleResult drawn;
            EXPECT_EQ(gen.prepare_engine_sample(&request, &drawn), !in_opening);
            if (in_opening) {
                for (float& v : row) v = n(rng);
            } else {
                std::fill(row.begin(), row.end(), 0.0f);
                row[size_t(next < script.size() ? script[next] : eos)] = 50.0f;
                ++next;
            }
            GenerationStep step;
            ASSERT_TRUE(gen.next(row, &step).is_ok());
            if (in_opening) {
                opening_bytes += tok.token_bytes(step.sample.token)->size();
                if (opening_bytes >= kOpening.size()) {
                    opened = true;
                    script.insert(script.end(), rest.begin(), rest.end());
                }
            }
        }
        ASSERT_TRUE(opened);
        const chat::ParsedReply& reply = gen.reply();
        EXPECT_EQ(reply.content, "");
        ASSERT_EQ(reply.tool_calls.size(), 1u) << gen.text();
        EXPECT_EQ(reply.tool_calls[0].name, "get_weather");
        EXPECT_EQ(reply.tool_calls[0].arguments, "{\"city\": \"Paris\"}");
        if (thinking) EXPECT_EQ(reply.reasoning, "Let me call the tool.");
    }
}

TEST(PrefixConstraint, RefusedWithAJsonReplyOrInvalidUtf8) {
    const Tokenizer& tok = tokenizer();
    GenerationOptions o;
    o.max_context = 64;
    o.reply_prefix = "{";
    o.json_object = true;
    EXPECT_FALSE(Generation::create(tok, tok.vocab_size(), {1, 2}, o).is_ok());
    o.json_object = false;
    o.reply_prefix = "\xC3";
    EXPECT_FALSE(Generation::create(tok, tok.vocab_size(), {1, 2}, o).is_ok());
}

}  // namespace
}  // namespace dsv4::engine
