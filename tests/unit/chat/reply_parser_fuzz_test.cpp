// Deterministic fuzzing of the reply parser: truncation at every byte, random splits, junk inserted into markup,
// deleted and duplicated bytes. Every shape must parse without crashing, give the same result however it is split,
// keep markup out of reasoning/content, and give tool-call arguments that are JSON objects.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "dsv4/chat.h"
#include "reply_parser_testing.h"

namespace dsv4::chat {
namespace {

const std::string kEos(kEosToken);

const std::vector<std::pair<std::string, bool>>& base_replies() {
    static const std::vector<std::pair<std::string, bool>> replies = {
        {"Plan: call the tool.</think>Calling.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
         "<｜DSML｜parameter name=\"city\" string=\"true\">Zürich 東京</｜DSML｜parameter>\n"
         "<｜DSML｜parameter name=\"days\" string=\"false\">[1, 2.5, {\"a\": null}]</｜DSML｜parameter>\n"
         "</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + kEos, true},
        {"Answer with <b>html</b> and a < b > c.</think>Done: 👍" + kEos, true},
        {"<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"a\">\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"b\">\n"
         "<｜DSML｜parameter name=\"x\" string=\"true\">line1\nline2 \"q\" \\</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
         "</｜DSML｜function_calls>", false},
        {"Sure!\n<｜DSML｜invoke name=\"search\">\n<｜DSML｜parameter name=\"q\" string=\"true\">dsv4</｜DSML｜"
         "parameter>\n</｜DSML｜invoke>", false},
        {"thinking without an end <think> again", true},
        {"<think>chat thoughts</think>reply text\n\n", false},
        {"r</think>c\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"v\" "
         "string=\"false\">oops not json</｜DSML｜parameter>\n<｜DSML｜parameter name=\"w\">42", true},
        {"Text</think>more</think>and <think>tags<｜DSML｜stray>end" + kEos + "after eos", true},
    };
    return replies;
}

// Junk that tends to break markup: marker pieces, quotes, brackets, newlines, partial UTF-8 of "｜".
std::string junk(std::mt19937_64& rng) {
    static const std::vector<std::string> pieces = {
        "<", ">", "/", "\"", "=", "\n", " ", "｜DSML｜", "<｜DSML｜", "</｜DSML｜", "<think>", "</think>",
        "\xEF", "\xEF\xBD", "｜", "DSML", "invoke", "parameter", "tool_calls", "name=\"", "string=\"true\"",
        "<｜DSML｜parameter name=\"z\" string=\"false\">", "</｜DSML｜invoke>", "{", "}", "[", "\\", "é", "🙂",
        std::string(kEosToken).substr(0, 5),
    };
    std::string out;
    int n = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < n; ++i) out += pieces[rng() % pieces.size()];
    return out;
}

void check_shape(const std::string& text, bool reasoning, std::mt19937_64& rng, const std::string& label) {
    auto whole = test::stream_whole(text, reasoning);
    auto bytes = test::stream_bytes(text, reasoning);
    auto random = test::stream_random(text, reasoning, rng);
    ASSERT_TRUE(test::same(whole.reply, bytes.reply))
        << label << "\ninput: " << text << "\nwhole: " << test::describe(whole.reply)
        << "\nbytes: " << test::describe(bytes.reply);
    ASSERT_TRUE(test::same(whole.reply, random.reply)) << label << "\ninput: " << text;
    ASSERT_TRUE(test::same(bytes.reply, bytes.from_events)) << label;
    for (const auto* field : {&whole.reply.content, &whole.reply.reasoning}) {
        for (std::string_view bad : {std::string_view("｜DSML｜"), std::string_view("<think>"),
                                     std::string_view("</think>")}) {
            ASSERT_EQ(field->find(bad), std::string::npos)
                << label << ": markup '" << bad << "' leaked\ninput: " << text << "\n" << test::describe(whole.reply);
        }
    }
    for (const auto& call : whole.reply.tool_calls) {
        ASSERT_TRUE(nlohmann::json::accept(call.arguments)) << label << ": arguments not JSON: " << call.arguments;
        ASSERT_TRUE(nlohmann::json::parse(call.arguments).is_object()) << label << ": " << call.arguments;
    }
}

TEST(ReplyParserFuzz, TruncatedAtEveryByte) {
    std::mt19937_64 rng(1);
    int shapes = 0;
    for (const auto& [text, reasoning] : base_replies()) {
        for (size_t n = 0; n <= text.size(); ++n, ++shapes) {
            check_shape(text.substr(0, n), reasoning, rng, "truncated at " + std::to_string(n));
            if (HasFatalFailure()) return;
        }
    }
    std::printf("truncated shapes: %d\n", shapes);
    EXPECT_GE(shapes, 1000);
}

TEST(ReplyParserFuzz, JunkInsertedDeletedDuplicated) {
    std::mt19937_64 rng(2);
    int shapes = 0;
    for (const auto& [base, reasoning] : base_replies()) {
        for (int round = 0; round < 150; ++round) {
            std::string text = base;
            int edits = 1 + static_cast<int>(rng() % 4);
            for (int e = 0; e < edits; ++e) {
                size_t pos = text.empty() ? 0 : rng() % text.size();
                switch (rng() % 3) {
                    case 0: text.insert(pos, junk(rng)); break;
                    case 1: text.erase(pos, 1 + rng() % 6); break;
                    default: text.insert(pos, text.substr(pos, 1 + rng() % 24)); break;
                }
            }
            check_shape(text, reasoning, rng, "edit round " + std::to_string(round));
            if (HasFatalFailure()) return;
            ++shapes;
        }
    }
    EXPECT_EQ(shapes, 150 * static_cast<int>(base_replies().size()));
}

TEST(ReplyParserFuzz, RandomBytes) {
    std::mt19937_64 rng(3);
    for (int round = 0; round < 300; ++round) {
        std::string text;
        size_t n = rng() % 80;
        for (size_t i = 0; i < n; ++i) {
            text += (rng() % 4 == 0) ? junk(rng) : std::string(1, static_cast<char>(rng() % 256));
        }
        check_shape(text, round % 2 == 0, rng, "random bytes " + std::to_string(round));
        if (HasFatalFailure()) return;
    }
}

}  // namespace
}  // namespace dsv4::chat
