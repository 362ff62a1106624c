// Tokenizer API behaviour: special tokens, empty input, invalid UTF-8, id errors, streaming, loader errors,
// the V4 file. Expected ids come from HF tokenizers 0.23.3.
#include <fstream>

#include "tokenizer/unicode_classes.h"
#include "tokenizer_test_util.h"

namespace dsv4::testing {
namespace {

TEST(Tokenizer, V4SpecialTokenIds) {
    const Tokenizer& tok = v4_tokenizer();
    EXPECT_EQ(tok.vocab_size(), 129280);
    const std::pair<const char*, int32_t> expected[] = {{"<｜begin▁of▁sentence｜>", 0},
                                                        {"<｜end▁of▁sentence｜>", 1},
                                                        {"<｜User｜>", 128803},
                                                        {"<｜Assistant｜>", 128804},
                                                        {"<think>", 128821},
                                                        {"</think>", 128822},
                                                        {"｜DSML｜", 128825},
                                                        {"<｜latest_reminder｜>", 128828},
                                                        {"<｜read_url｜>", 128845}};
    for (const auto& [text, id] : expected) {
        EXPECT_EQ(tok.token_to_id(text), id) << text;
        EXPECT_EQ(tok.encode(text), std::vector<int32_t>{id}) << text;
        EXPECT_EQ(*tok.id_to_token(id), text);
        EXPECT_EQ(*tok.decode(std::vector<int32_t>{id}), text);
        EXPECT_TRUE(tok.is_added(id));
    }
    EXPECT_TRUE(tok.is_special(0));
    EXPECT_TRUE(tok.is_special(1));
    EXPECT_FALSE(tok.is_special(128821));  // the file declares <think> non-special: skip_special keeps it
    EXPECT_FALSE(tok.is_special(19923));
    EXPECT_EQ(*tok.decode(std::vector<int32_t>{0, 128821, 19923, 1}, /*skip_special=*/true), "<think>Hello");
}

TEST(Tokenizer, ChatPromptEncodesLikeHf) {
    const Tokenizer& tok = v4_tokenizer();
    const std::vector<int32_t> expected = {0, 128803, 3085, 344, 223, 20, 13, 20, 33, 128804, 128822};
    EXPECT_EQ(tok.encode("<｜begin▁of▁sentence｜><｜User｜>What is 2+2?<｜Assistant｜></think>"), expected);
    // Look-alike ASCII bars are plain text, not the special token.
    EXPECT_NE(tok.encode("<|User|>"), std::vector<int32_t>{128803});
}

TEST(Tokenizer, EmptyInput) {
    const Tokenizer& tok = v4_tokenizer();
    EXPECT_TRUE(tok.encode("").empty());
    EXPECT_EQ(*tok.decode(std::vector<int32_t>{}), "");
    std::vector<int32_t> ids = {5};
    tok.encode_append("", ids);
    EXPECT_EQ(ids, std::vector<int32_t>{5});
}

TEST(Tokenizer, InvalidUtf8IsReplacedPerMaximalSubpart) {
    using tokenizer::sanitize_utf8;
    const std::string fffd = "\xEF\xBF\xBD";
    EXPECT_EQ(sanitize_utf8("\xFF"), fffd);
    EXPECT_EQ(sanitize_utf8("\xE2\x82("), fffd + "(");             // truncated 3-byte sequence: one U+FFFD
    EXPECT_EQ(sanitize_utf8("\xF0\x80\x80"), fffd + fffd + fffd);  // F0 80 is never valid: three
    EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), fffd + fffd + fffd);  // surrogate
    EXPECT_EQ(sanitize_utf8("\xC0\xAF"), fffd + fffd);             // overlong
    EXPECT_EQ(sanitize_utf8("ok\xF0\x9F\x98"), "ok" + fffd);       // cut-off emoji at the end
    const Tokenizer& tok = v4_tokenizer();
    EXPECT_EQ(tok.encode("a\xFF b"), tok.encode("a" + fffd + " b"));
    // Every single byte and some random byte strings: never a crash, always the sanitised text's ids.
    for (int b = 0; b < 256; ++b) {
        const std::string s(1, static_cast<char>(b));
        EXPECT_EQ(tok.encode(s), tok.encode(sanitize_utf8(s)));
    }
    uint32_t state = 12345;
    for (int i = 0; i < 500; ++i) {
        std::string s;
        for (int k = 0; k < 1 + i % 13; ++k) s += static_cast<char>((state = state * 1664525u + 1013904223u) >> 24);
        const auto ids = tok.encode(s);
        EXPECT_EQ(*tok.decode(ids), sanitize_utf8(s));
    }
}

TEST(Tokenizer, BadIdsAreErrors) {
    const Tokenizer& tok = v4_tokenizer();
    EXPECT_EQ(tok.decode(std::vector<int32_t>{1, 129280}).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(tok.decode(std::vector<int32_t>{-1}).status().code(), StatusCode::kInvalidArgument);
    EXPECT_FALSE(tok.id_to_token(200000).is_ok());
    EXPECT_FALSE(tok.token_to_id("no such token").has_value());
    StreamDecoder stream(tok);
    ASSERT_TRUE(stream.push(28927).is_ok());  // first half of 😀
    EXPECT_FALSE(stream.push(129280).is_ok());
    EXPECT_EQ(stream.pending_bytes(), 3u);  // state kept
    EXPECT_EQ(*stream.push(225), "😀");
}

TEST(Tokenizer, StreamingHoldsBackPartialCharacters) {
    const Tokenizer& tok = v4_tokenizer();
    const std::vector<int32_t> ids = {28927, 225};  // HF: "😀" → [28927, 225]
    EXPECT_EQ(tok.encode("😀"), ids);
    StreamDecoder stream(tok);
    EXPECT_EQ(*stream.push(ids[0]), "");
    EXPECT_EQ(stream.pending_bytes(), 3u);
    EXPECT_EQ(*stream.push(ids[1]), "😀");
    EXPECT_EQ(stream.finish(), "");
    // A dangling partial character at the end becomes one U+FFFD, as decode() gives.
    EXPECT_EQ(*stream.push(ids[0]), "");
    EXPECT_EQ(stream.finish(), "\xEF\xBF\xBD");
    EXPECT_EQ(*tok.decode(std::vector<int32_t>{ids[0]}), "\xEF\xBF\xBD");
}

TEST(Tokenizer, LoaderErrorsNameTheProblem) {
    TempDir dir("dsv4-tokenizer-errors");
    auto missing = Tokenizer::from_file(dir.path() / "nope.json");
    EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
    EXPECT_NE(missing.status().message().find("nope.json"), std::string::npos);
    EXPECT_EQ(Tokenizer::from_model_dir(dir.path() / "no_dir").status().code(), StatusCode::kNotFound);

    std::ofstream(dir.path() / "broken.json") << "{ not json";
    EXPECT_EQ(Tokenizer::from_file(dir.path() / "broken.json").status().code(), StatusCode::kCorrupt);

    std::ifstream in(v4_tokenizer_path());
    const nlohmann::json base = nlohmann::json::parse(in);
    auto write_variant = [&](const std::string& name, auto&& edit) {
        nlohmann::json j = base;
        edit(j);
        std::ofstream(dir.path() / name) << j.dump();
        return Tokenizer::from_file(dir.path() / name);
    };
    auto regex = write_variant("regex.json", [](nlohmann::json& j) {
        j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{N}{1,4}";
    });
    EXPECT_EQ(regex.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(regex.status().message().find("\\p{N}{1,4}"), std::string::npos) << regex.status().to_string();
    auto normalizer = write_variant("norm.json", [](nlohmann::json& j) { j["normalizer"] = {{"type", "NFC"}}; });
    EXPECT_EQ(normalizer.status().code(), StatusCode::kUnsupported);
    auto byte_regex =
        write_variant("bl.json", [](nlohmann::json& j) { j["pre_tokenizer"]["pretokenizers"][3]["use_regex"] = true; });
    EXPECT_EQ(byte_regex.status().code(), StatusCode::kUnsupported);
    auto merges = write_variant("merges.json", [](nlohmann::json& j) { j["model"]["merges"][5] = "zzzq qqqz"; });
    EXPECT_EQ(merges.status().code(), StatusCode::kCorrupt);
    EXPECT_NE(merges.status().message().find("merges[5]"), std::string::npos);

    // A model directory with tokenizer.json loads.
    std::filesystem::create_directories(dir.path() / "model");
    std::filesystem::copy_file(v4_tokenizer_path(), dir.path() / "model/tokenizer.json");
    EXPECT_TRUE(Tokenizer::from_model_dir(dir.path() / "model").is_ok());
}

TEST(Tokenizer, UnicodeTablesAreTheGeneratedVersion) {
    EXPECT_STREQ(tokenizer::kUnicodeVersion, "14.0.0");
    using tokenizer::char_flags;
    EXPECT_TRUE(char_flags(U'a') & tokenizer::kLetter);
    EXPECT_TRUE(char_flags(U'\u0301') & tokenizer::kMark);
    EXPECT_TRUE(char_flags(U'\u0663') & tokenizer::kNumber);  // ARABIC-INDIC DIGIT THREE
    EXPECT_TRUE(char_flags(U'\u3000') & tokenizer::kSpace);
    EXPECT_TRUE(char_flags(U'\U0001F600') & tokenizer::kSymbol);
    EXPECT_TRUE(char_flags(U'\U00020000') & tokenizer::kLetter);
    EXPECT_EQ(char_flags(0x0378), 0);  // unassigned
}

}  // namespace
}  // namespace dsv4::testing
