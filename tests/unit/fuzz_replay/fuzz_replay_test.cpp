// Replays every committed input of the libFuzzer targets (fuzz/) through the same entry points, without sanitizers:
// seeds must also be accepted by their parser (they are real files and requests), inputs that once broke a parser
// must be rejected with a Status where the parser has a notion of rejecting (unless named valid_*).
#include <gtest/gtest.h>

#include <memory>
#include <variant>

#include "../../../fuzz/entry/chat_encoder_entry.h"
#include "../../../fuzz/entry/model_config_entry.h"
#include "../../../fuzz/entry/npy_entry.h"
#include "../../../fuzz/entry/reply_parser_entry.h"
#include "../../../fuzz/entry/tokenizer_encode_entry.h"
#include "../../../fuzz/entry/tokenizer_json_entry.h"
#if DSV4_HAVE_SERVER
#include "../../../fuzz/entry/openai_request_entry.h"
#endif
#include "fuzz_inputs.h"
#include "testing/v4_tokenizer.h"

namespace dsv4::fuzz_replay {
namespace {

bool expect_rejected(const FuzzInput& input) {
    return input.regression && input.path.filename().string().rfind("valid_", 0) != 0;
}

TEST(FuzzReplay, ModelConfig) {
    const auto inputs = fuzz_inputs("model_config");
    ASSERT_GE(count_seeds(inputs), 3u) << "the model_config seed corpus is missing";
    for (const FuzzInput& input : inputs) {
        fuzz::model_config_one_input(input.bytes);
        const std::string text(input.bytes.begin(), input.bytes.end());
        auto parsed = model::parse_config_json(text, input.path.string());
        if (!input.regression) EXPECT_TRUE(parsed.is_ok()) << parsed.status().to_string();
        if (expect_rejected(input)) EXPECT_FALSE(parsed.is_ok()) << input.path;
    }
}

TEST(FuzzReplay, Npy) {
    const auto inputs = fuzz_inputs("npy");
    ASSERT_GE(count_seeds(inputs), 5u) << "the npy seed corpus is missing";
    for (const FuzzInput& input : inputs) {
        fuzz::npy_one_input(input.bytes);
        auto npy = io::parse_npy(input.bytes, input.path.string());
        auto npz = io::NpzFile::parse(input.bytes, input.path.string());
        if (!input.regression) EXPECT_TRUE(npy.is_ok() || npz.is_ok()) << input.path;
        if (expect_rejected(input)) EXPECT_FALSE(npy.is_ok() || npz.is_ok()) << input.path;
    }
}

TEST(FuzzReplay, ChatEncoder) {
    const auto inputs = fuzz_inputs("chat_encoder");
    ASSERT_GE(count_seeds(inputs), 5u) << "the chat_encoder seed corpus is missing";
    for (const FuzzInput& input : inputs) {
        fuzz::chat_encoder_one_input(input.bytes);
        if (input.regression) continue;
        auto request = chat::parse_template_request(std::string(input.bytes.begin(), input.bytes.end()),
                                                    input.path.string());
        ASSERT_TRUE(request.is_ok()) << request.status().to_string();
        auto prompt = chat::encode_messages(request.value().messages, request.value().options);
        EXPECT_TRUE(prompt.is_ok()) << input.path << ": " << prompt.status().to_string();
    }
}

TEST(FuzzReplay, ReplyParser) {
    const auto inputs = fuzz_inputs("reply_parser");
    ASSERT_GE(count_seeds(inputs), 5u) << "the reply_parser seed corpus is missing";
    for (const FuzzInput& input : inputs) fuzz::reply_parser_one_input(input.bytes);
}

TEST(FuzzReplay, TokenizerJson) {
    const auto inputs = fuzz_inputs("tokenizer_json");
    ASSERT_GE(count_seeds(inputs), 2u) << "the tokenizer_json seed corpus is missing";
    for (const FuzzInput& input : inputs) {
        fuzz::tokenizer_json_one_input(input.bytes);
        auto loaded = Tokenizer::from_file(fuzz::tokenizer_json_temp_path());  // the file the entry point wrote
        if (!input.regression) EXPECT_TRUE(loaded.is_ok()) << input.path << ": " << loaded.status().to_string();
        if (expect_rejected(input)) EXPECT_FALSE(loaded.is_ok()) << input.path;
    }
    std::filesystem::remove(fuzz::tokenizer_json_temp_path());
}

TEST(FuzzReplay, TokenizerEncode) {
    const auto inputs = fuzz_inputs("tokenizer_encode");
    ASSERT_GE(count_seeds(inputs), 5u) << "the tokenizer_encode seed corpus is missing";
    for (const FuzzInput& input : inputs) fuzz::tokenizer_encode_one_input(testing::v4_tokenizer(), input.bytes);
}

#if DSV4_HAVE_SERVER
TEST(FuzzReplay, OpenaiRequest) {
    const auto inputs = fuzz_inputs("openai_request");
    ASSERT_GE(count_seeds(inputs), 5u) << "the openai_request seed corpus is missing";
    for (const FuzzInput& input : inputs) {
        fuzz::openai_request_one_input(testing::v4_tokenizer(), input.bytes);
        if (input.regression) continue;
        auto body = server::parse_body(std::string(input.bytes.begin(), input.bytes.end()));
        ASSERT_TRUE(std::holds_alternative<server::Json>(body)) << input.path;
        const server::Json& json = std::get<server::Json>(body);
        auto parsed = json.contains("messages") ? server::parse_chat_request(json, testing::v4_tokenizer())
                                                : server::parse_completion_request(json, testing::v4_tokenizer());
        const auto* error = std::get_if<server::ApiError>(&parsed);
        EXPECT_EQ(error, nullptr) << input.path << ": " << (error ? error->message : "");
    }
}
#else
TEST(FuzzReplay, OpenaiRequest) { GTEST_SKIP() << "the server is not built (cpp-httplib not found)"; }
#endif

}  // namespace
}  // namespace dsv4::fuzz_replay
