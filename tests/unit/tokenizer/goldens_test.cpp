// The C++ tokenizer against HF tokenizers on the committed goldens (tests/reference/make_tokenizer_goldens.py).
#include "tokenizer/unicode_classes.h"
#include "tokenizer_test_util.h"

namespace dsv4::testing {
namespace {

const std::vector<nlohmann::json>& goldens() {
    static const auto rows = read_jsonl(test_data_dir() / "tokenizer/goldens_v4.jsonl");
    return rows;
}

std::string golden_input(const nlohmann::json& row) {
    return row.contains("hex") ? from_hex(row["hex"].get<std::string>()) : row["text"].get<std::string>();
}

std::string show(const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s += std::to_string(id) + ",";
    return s;
}

TEST(TokenizerGoldens, FixtureIsLargeEnough) {
    size_t encode_rows = 0;
    for (const auto& row : goldens()) encode_rows += row.contains("ids");
    EXPECT_GE(encode_rows, 2000u);
}

TEST(TokenizerGoldens, EncodeMatchesHfTokenizers) {
    const Tokenizer& tok = v4_tokenizer();
    size_t checked = 0, failed = 0;
    for (const auto& row : goldens()) {
        if (!row.contains("ids")) continue;
        const std::string input = golden_input(row);
        const auto expected = row["ids"].get<std::vector<int32_t>>();
        const auto actual = tok.encode(input);
        ++checked;
        if (actual != expected && ++failed <= 10)
            ADD_FAILURE() << "text " << nlohmann::json(tokenizer::sanitize_utf8(input)).dump() << "\n expected "
                          << show(expected) << "\n actual   " << show(actual);
    }
    EXPECT_EQ(failed, 0u) << "of " << checked;
}

TEST(TokenizerGoldens, EncodeTwiceUsesCacheAndAgrees) {
    const Tokenizer& tok = v4_tokenizer();
    for (const auto& row : goldens()) {
        if (!row.contains("ids")) continue;
        const std::string input = golden_input(row);
        ASSERT_EQ(tok.encode(input), tok.encode(input));
    }
}

TEST(TokenizerGoldens, DecodeOfEncodeGivesTheText) {
    const Tokenizer& tok = v4_tokenizer();
    for (const auto& row : goldens()) {
        if (!row.contains("ids")) continue;
        const std::string input = golden_input(row);
        const auto ids = row["ids"].get<std::vector<int32_t>>();
        auto text = tok.decode(ids);
        ASSERT_TRUE(text.is_ok()) << text.status().to_string();
        // Invalid input bytes were replaced by U+FFFD before encoding.
        EXPECT_EQ(*text, tokenizer::sanitize_utf8(input)) << nlohmann::json(*text).dump();
    }
}

TEST(TokenizerGoldens, DecodeMatchesHfTokenizers) {
    const Tokenizer& tok = v4_tokenizer();
    size_t checked = 0;
    for (const auto& row : goldens()) {
        if (!row.contains("decode")) continue;
        const auto ids = row["decode"].get<std::vector<int32_t>>();
        auto text = tok.decode(ids, row["skip"].get<bool>());
        ASSERT_TRUE(text.is_ok()) << text.status().to_string();
        EXPECT_EQ(*text, row["text"].get<std::string>()) << "ids " << show(ids);
        ++checked;
    }
    EXPECT_GE(checked, 100u);
}

// Streaming: after every id the emitted text is whole characters, and it all adds up to decode().
TEST(TokenizerGoldens, StreamingDecodeNeverSplitsACharacter) {
    const Tokenizer& tok = v4_tokenizer();
    for (const auto& row : goldens()) {
        const bool is_decode_case = row.contains("decode");
        const auto ids = row[is_decode_case ? "decode" : "ids"].get<std::vector<int32_t>>();
        const bool skip = is_decode_case && row["skip"].get<bool>();
        StreamDecoder stream(tok, skip);
        std::string joined;
        for (size_t k = 0; k < ids.size(); ++k) {
            auto piece = stream.push(ids[k]);
            ASSERT_TRUE(piece.is_ok());
            ASSERT_TRUE(tokenizer::is_valid_utf8(*piece)) << "after id #" << k << " of " << show(ids);
            ASSERT_LE(stream.pending_bytes(), 3u);
            joined += *piece;
        }
        joined += stream.finish();
        EXPECT_EQ(joined, *tok.decode(ids, skip)) << "ids " << show(ids);
    }
}

}  // namespace
}  // namespace dsv4::testing
