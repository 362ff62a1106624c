// Constrained decoding to one JSON object: the byte-level recogniser against nlohmann's parser (random documents
// and their prefixes accepted, completion exactly at the end; malformed texts refused at the right byte), and a
// Generation with GenerationOptions::json_object over the V4 tokenizer and random logits: every step's text a prefix
// of a JSON object, an ended reply one, the end token only then, no draw asked of the engine.
#include "engine/json_constraint.h"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cmath>
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

using Json = nlohmann::json;

// Bytes accepted before the first refusal (the whole text when every byte is accepted).
size_t accepted_bytes(std::string_view text, JsonObjectPrefix& s) {
    for (size_t i = 0; i < text.size(); ++i)
        if (!s.push(uint8_t(text[i]))) return i;
    return text.size();
}

Json random_value(std::mt19937_64& rng, int depth) {
    std::uniform_int_distribution<int> kind(0, depth > 3 ? 4 : 6);
    switch (kind(rng)) {
        case 0:
            return Json(nullptr);
        case 1:
            return Json(rng() % 2 == 0);
        case 2:
            return Json(int64_t(rng() % 2000001) - 1000000);
        case 3:
            return Json(std::ldexp(double(int64_t(rng() % 200001) - 100000), int(rng() % 80) - 40));
        case 4: {
            static const std::vector<std::string> pieces = {"a",    "Z", " ",  "\"", "\\", "/", "\n", "\t",
                                                            "\x01", "é", "你", "😀",  "{",  "]", ":",  ","};
            std::string s;
            for (int i = int(rng() % 6); i > 0; --i) s += pieces[rng() % pieces.size()];
            return Json(s);
        }
        case 5: {
            Json a = Json::array();
            for (int i = int(rng() % 4); i > 0; --i) a.push_back(random_value(rng, depth + 1));
            return a;
        }
        default: {
            Json o = Json::object();
            for (int i = int(rng() % 4); i > 0; --i)
                o["k" + std::to_string(rng() % 100)] = random_value(rng, depth + 1);
            return o;
        }
    }
}

TEST(JsonObjectPrefix, AcceptsEveryObjectAndEveryPrefixCompleteOnlyAtTheEnd) {
    std::mt19937_64 rng(testing::fresh_seed());
    for (int doc = 0; doc < 300; ++doc) {
        Json o = Json::object();
        for (int i = int(rng() % 5); i > 0; --i) o["key" + std::to_string(i)] = random_value(rng, 1);
        // compact, indented, and with \u escapes for everything past ASCII
        for (const std::string& text : {o.dump(), o.dump(2), o.dump(-1, ' ', true)}) {
            SCOPED_TRACE(text);
            JsonObjectPrefix s;
            for (size_t i = 0; i < text.size(); ++i) {
                ASSERT_TRUE(s.push(uint8_t(text[i]))) << "refused byte " << i;
                EXPECT_EQ(s.complete(), i + 1 == text.size()) << "byte " << i;
            }
            EXPECT_TRUE(s.push(" \n\t\r"));  // whitespace may follow
            EXPECT_TRUE(s.complete());
            EXPECT_FALSE(s.push('x'));
        }
    }
}

TEST(JsonObjectPrefix, RefusesMalformedTextAtTheFirstBadByte) {
    // text, bytes accepted before the refusal
    const std::vector<std::pair<std::string, size_t>> cases = {
        {"[]", 0},
        {"\"a\"", 0},
        {"{\"a\" 1}", 5},
        {"{\"a\":01}", 6},
        {"{\"a\":1,}", 7},
        {"{\"a\":tru e}", 8},
        {"{\"a\":\"\x01\"}", 6},
        {"{\"a\":\"\\q\"}", 7},
        {"{\"a\":\"\\u12g4\"}", 10},
        {"{\"a\":-}", 6},
        {"{\"a\":1.}", 7},
        {"{\"a\":1e}", 7},
        {"{\"a\":1e+}", 8},
        {"{a:1}", 1},
        {"{\"a\":1}}", 7},
        {"{\"a\":[1}", 7},
        {"{\"a\":{]}", 6},
        {"{\"a\":\"\xC0\x80\"}", 6},
        {"{\"a\":\"\xF5\"}", 6},
        {"{\"a\":\"\xE4\xBD\"}", 8},
        {"{\"a\":.5}", 5},
        {"{\"a\":+1}", 5},
        {"{\"a\":nul}", 8},
        {"{,}", 1},
    };
    for (const auto& [text, good] : cases) {
        JsonObjectPrefix s;
        EXPECT_EQ(accepted_bytes(text, s), good) << text;
        EXPECT_FALSE(Json::accept(text) && Json::parse(text).is_object()) << text;  // nor is it to the oracle
    }
    // nesting past kMaxDepth
    std::string deep = "{\"a\":";
    for (int i = 1; i < JsonObjectPrefix::kMaxDepth; ++i) deep += "[";
    JsonObjectPrefix s;
    EXPECT_TRUE(s.push(deep));
    EXPECT_FALSE(s.push('['));
}

const Tokenizer& tokenizer() { return testing::v4_tokenizer(); }

// The mask's shortcuts (first-byte tables, skipped whitespace, plain string text) against running every token through
// the recogniser, in states of every kind: before the object, between tokens, inside keys, strings, escapes, \u
// escapes, UTF-8 characters, numbers of each part, literals, and after the object.
TEST(JsonConstraint, MaskEqualsRunningEveryToken) {
    const Tokenizer& tok = tokenizer();
    const int32_t vocab = tok.vocab_size(), eos = *tok.token_to_id(chat::kEosToken);
    const TokenBytes tokens(tok, vocab);
    JsonConstraint constraint(tokens);
    std::vector<float> logits(static_cast<size_t>(vocab), 1.0f), out(static_cast<size_t>(vocab));
    const std::vector<std::string> prefixes = {
        "",           " \n",          "{",           "{\"ke",          "{\"key\"",
        "{\"key\":",  "{\"a\":\"x y", "{\"a\":\"\\", "{\"a\":\"\\u00", "{\"a\":\"\xE4\xBD",
        "{\"a\":-",   "{\"a\":0",     "{\"a\":12",   "{\"a\":1.",      "{\"a\":1.5",
        "{\"a\":1e",  "{\"a\":1e-",   "{\"a\":1e-7", "{\"a\":tr",      "{\"a\":[",
        "{\"a\":[1,", "{\"a\":{}",    "{\"a\":[]}",  "{\"a\":[]} "};
    // the byte-level vocabulary's one-byte tokens, to put the constraint in any state (text encoding would replace a
    // cut UTF-8 character)
    std::array<int32_t, 256> byte_token{};
    byte_token.fill(-1);
    for (int32_t id = 0; id < vocab; ++id)
        if (Result<std::string> b = tok.token_bytes(id); b.is_ok() && b->size() == 1 && !tok.is_added(id))
            byte_token[uint8_t((*b)[0])] = id;
    for (const std::string& prefix : prefixes) {
        SCOPED_TRACE(prefix);
        JsonObjectPrefix state;
        ASSERT_TRUE(state.push(prefix));
        constraint.reset();
        for (const char c : prefix) {
            ASSERT_GE(byte_token[uint8_t(c)], 0);
            constraint.accept(byte_token[uint8_t(c)]);
        }
        constraint.mask(logits, out, eos);
        int64_t allowed = 0;
        for (int32_t id = 0; id < vocab; ++id) {
            bool want = false;
            if (id == eos) {
                want = state.complete();
            } else if (!tok.is_added(id) && !state.complete()) {
                JsonObjectPrefix s = state;
                want = s.push(*tok.token_bytes(id));
            }
            const bool got = out[size_t(id)] == 1.0f;
            ASSERT_EQ(got, want) << "token " << id << " '" << *tok.token_bytes(id) << "'";
            allowed += got;
        }
        EXPECT_GT(allowed, 0);
    }
}

// Random logits with a lean towards the structural tokens, so that objects open, grow and close within a few dozen
// steps; the mask decides what is allowed.
void random_row(std::mt19937_64& rng, std::vector<float>& row, const std::vector<int32_t>& favoured) {
    std::normal_distribution<float> n(0.0f, 2.0f);
    for (float& v : row) v = n(rng);
    for (int32_t id : favoured) row[size_t(id)] += 9.0f;
}

TEST(JsonConstraint, EveryStepIsAPrefixOfAnObjectAndEveryEndedReplyIsOne) {
    const Tokenizer& tok = tokenizer();
    const int32_t vocab = tok.vocab_size(), eos = *tok.token_to_id(chat::kEosToken);
    std::vector<int32_t> favoured;
    for (const char* s : {"{", "}", "\"", ":", ",", "[", "]", "1", " true", "ab"}) {
        const auto ids = tok.encode(s);
        ASSERT_EQ(ids.size(), 1u) << s;
        favoured.push_back(ids[0]);
    }
    favoured.push_back(eos);
    auto made = Generation::create_reusable(tok, vocab);
    ASSERT_TRUE(made.is_ok());
    Generation& g = **made;
    std::mt19937_64 rng(testing::fresh_seed());
    std::vector<float> row(static_cast<size_t>(vocab));
    const auto prompt = tok.encode("<｜begin▁of▁sentence｜><｜User｜>Reply in JSON.<｜Assistant｜></think>");
    int ended = 0;
    double mask_seconds = 0;
    int64_t masks = 0;
    for (int run = 0; run < 12; ++run) {
        GenerationOptions o;
        o.json_object = true;
        o.max_tokens = 80;
        o.max_context = 4096;
        o.sampling.seed = rng();
        ASSERT_TRUE(g.start(prompt, o).is_ok());
        while (!g.finished()) {
            ASSERT_TRUE(g.fed(g.pending().size()).is_ok());
            if (g.finished()) break;
            EngineSample request;
            SampleResult drawn;
            EXPECT_FALSE(g.prepare_engine_sample(&request, &drawn)) << "a constrained draw was offered to the engine";
            random_row(rng, row, favoured);
            GenerationStep step;
            const auto t0 = std::chrono::steady_clock::now();
            ASSERT_TRUE(g.next(row, &step).is_ok());
            mask_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            ++masks;
            JsonObjectPrefix s;
            ASSERT_EQ(accepted_bytes(g.text(), s), g.text().size()) << g.text();
            if (step.reason == StopReason::kEos) {
                EXPECT_TRUE(s.complete()) << g.text();
                const Json parsed = Json::parse(g.text(), nullptr, false);
                EXPECT_TRUE(parsed.is_object()) << g.text();
                ++ended;
            }
        }
        EXPECT_EQ(g.reply().content, g.text());
        EXPECT_TRUE(g.reply().tool_calls.empty());
    }
    std::printf("%d of 12 replies ended with a whole object; %.2f ms per constrained draw at vocab %d\n", ended,
                1e3 * mask_seconds / double(masks), vocab);
    EXPECT_GT(ended, 0);
}

TEST(JsonConstraint, AReasoningReplyIsConstrainedOnlyAfterItsThinkEnd) {
    const Tokenizer& tok = tokenizer();
    const int32_t vocab = tok.vocab_size();
    const int32_t think_end = *tok.token_to_id(chat::kThinkEnd), hello = tok.encode("hello")[0];
    auto made = Generation::create_reusable(tok, vocab);
    ASSERT_TRUE(made.is_ok());
    Generation& g = **made;
    GenerationOptions o;
    o.json_object = true;
    o.starts_in_reasoning = true;
    o.max_tokens = 3;
    o.max_context = 4096;
    o.sampling.temperature = 0;
    ASSERT_TRUE(g.start(tok.encode("<｜User｜>hi<｜Assistant｜><think>"), o).is_ok());
    std::vector<float> row(static_cast<size_t>(vocab), 0.0f);
    GenerationStep step;
    // reasoning: free text, the engine may draw
    ASSERT_TRUE(g.fed(g.pending().size()).is_ok());
    EngineSample request;
    SampleResult drawn;
    EXPECT_TRUE(g.prepare_engine_sample(&request, &drawn));
    row[size_t(hello)] = 50;
    ASSERT_TRUE(g.next(row, &step).is_ok());
    EXPECT_EQ(step.sample.token, hello);
    // </think>, then "hello" is no longer allowed: the reply must open an object
    ASSERT_TRUE(g.fed(1).is_ok());
    row[size_t(hello)] = 0, row[size_t(think_end)] = 50;
    ASSERT_TRUE(g.next(row, &step).is_ok());
    ASSERT_TRUE(g.fed(1).is_ok());
    EXPECT_FALSE(g.prepare_engine_sample(&request, &drawn));
    row[size_t(think_end)] = 0, row[size_t(hello)] = 50;
    ASSERT_TRUE(g.next(row, &step).is_ok());
    EXPECT_NE(step.sample.token, hello);
    JsonObjectPrefix s;
    const std::string content = g.reply().content;
    EXPECT_EQ(accepted_bytes(content, s), content.size()) << content;
    EXPECT_EQ(g.reply().reasoning, "hello");
}

}  // namespace
}  // namespace dsv4::engine
