// Reply parser: reasoning/content split, DSML tool calls -> OpenAI arguments, tolerated variants, streaming.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "dsv4/chat.h"
#include "reply_parser_testing.h"
#include "testing/testing.h"

namespace dsv4::chat {
namespace {

using test::stream_bytes;
using test::stream_whole;

const std::string kEos(kEosToken);

// Parses whole, byte by byte and in random pieces; all three must agree, and the events must rebuild the summary.
ParsedReply parse_checked(const std::string& text, bool reasoning) {
    auto whole = stream_whole(text, reasoning);
    auto bytes = stream_bytes(text, reasoning);
    std::mt19937_64 rng(7);
    auto random = test::stream_random(text, reasoning, rng);
    EXPECT_TRUE(test::same(whole.reply, whole.from_events)) << test::describe(whole.from_events);
    EXPECT_TRUE(test::same(whole.reply, bytes.reply)) << test::describe(whole.reply) << "\nvs\n"
                                                       << test::describe(bytes.reply);
    EXPECT_TRUE(test::same(whole.reply, bytes.from_events));
    EXPECT_TRUE(test::same(whole.reply, random.reply));
    for (const auto& e : bytes.events) EXPECT_TRUE(test::valid_utf8(e.text)) << "delta is not whole UTF-8";
    return whole.reply;
}

TEST(ReplyParser, ThinkingSplitsReasoningAndContent) {
    auto r = parse_checked("Two plus two. Four.</think>The answer is 4." + kEos, true);
    EXPECT_EQ(r.reasoning, "Two plus two. Four.");
    EXPECT_EQ(r.content, "The answer is 4.");
    EXPECT_TRUE(r.saw_think_end);
    EXPECT_TRUE(r.tool_calls.empty());
}

TEST(ReplyParser, ChatModeIsAllContent) {
    auto r = parse_checked("Hello, wörld 👋 <b>bold</b> a<b" + kEos, false);
    EXPECT_EQ(r.content, "Hello, wörld 👋 <b>bold</b> a<b");
    EXPECT_EQ(parse_checked("a｜b ends with ｜", false).content, "a｜b ends with ｜");
    EXPECT_EQ(parse_checked("x <", false).content, "x <");
    EXPECT_EQ(parse_checked("x <｜DSML｜too", false).content, "x ");  // a truncated tag is dropped
    EXPECT_EQ(r.reasoning, "");
}

TEST(ReplyParser, MissingThinkEndKeepsEverythingAsReasoning) {
    auto r = parse_checked("still thinking about it", true);
    EXPECT_EQ(r.reasoning, "still thinking about it");
    EXPECT_EQ(r.content, "");
    EXPECT_FALSE(r.saw_think_end);
}

TEST(ReplyParser, OfficialToolCallBlock) {
    std::string text =
        "Let me check.</think>Checking.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
        "<｜DSML｜parameter name=\"city\" string=\"true\">Paris \"16e\"\n</｜DSML｜parameter>\n"
        "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
        "<｜DSML｜parameter name=\"opts\" string=\"false\">{\"unit\": \"c\", \"x\": [1, 2.5]}</｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n<｜DSML｜invoke name=\"noop\">\n\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + kEos;
    auto r = parse_checked(text, true);
    EXPECT_EQ(r.reasoning, "Let me check.");
    EXPECT_EQ(r.content, "Checking.");
    ASSERT_EQ(r.tool_calls.size(), 2u);
    EXPECT_EQ(r.tool_calls[0].name, "get_weather");
    EXPECT_EQ(r.tool_calls[0].arguments, "{\"city\": \"Paris \\\"16e\\\"\\n\", \"days\": 3, "
                                         "\"opts\": {\"unit\": \"c\", \"x\": [1, 2.5]}}");
    EXPECT_EQ(r.tool_calls[1].name, "noop");
    EXPECT_EQ(r.tool_calls[1].arguments, "{}");
}

TEST(ReplyParser, StreamingEventsAreOrdered) {
    std::string text = "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" "
                       "string=\"true\">hello world</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
    auto s = stream_bytes(text, false);
    ASSERT_GE(s.events.size(), 4u);
    EXPECT_EQ(s.events.front().kind, ReplyEvent::Kind::kToolCallBegin);
    EXPECT_EQ(s.events.front().text, "f");
    EXPECT_EQ(s.events.back().kind, ReplyEvent::Kind::kToolCallEnd);
    // The string value streams: more than one argument delta before the end.
    int arg_deltas = 0;
    for (const auto& e : s.events) arg_deltas += e.kind == ReplyEvent::Kind::kToolCallArgs;
    EXPECT_GT(arg_deltas, 5);
}

TEST(ReplyParser, UnterminatedBlockAtEos) {
    auto r = parse_checked("<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" "
                           "string=\"true\">x\"y", false);
    ASSERT_EQ(r.tool_calls.size(), 1u);
    EXPECT_EQ(r.tool_calls[0].arguments, "{\"a\": \"x\\\"y\"}");
    auto cut_tag = parse_checked("ok\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter nam", false);
    EXPECT_EQ(cut_tag.content, "ok");
    ASSERT_EQ(cut_tag.tool_calls.size(), 1u);
    EXPECT_EQ(cut_tag.tool_calls[0].arguments, "{}");
}

TEST(ReplyParser, FunctionCallsBlockNameAndBareInvoke) {
    auto a = parse_checked("<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"n\" "
                           "string=\"false\">7</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
                           false);
    ASSERT_EQ(a.tool_calls.size(), 1u);
    EXPECT_EQ(a.tool_calls[0].arguments, "{\"n\": 7}");
    auto b = parse_checked("Sure.\n<｜DSML｜invoke name=\"g\">\n<｜DSML｜parameter name=\"q\" string=\"true\">x"
                           "</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"h\">\n</｜DSML｜invoke>" + kEos,
                           false);
    EXPECT_EQ(b.content, "Sure.");
    ASSERT_EQ(b.tool_calls.size(), 2u);
    EXPECT_EQ(b.tool_calls[0].name, "g");
    EXPECT_EQ(b.tool_calls[0].arguments, "{\"q\": \"x\"}");
    EXPECT_EQ(b.tool_calls[1].name, "h");
}

TEST(ReplyParser, ToolBlockInsideReasoningEndsReasoning) {
    auto r = parse_checked("I will call f.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n"
                           "</｜DSML｜tool_calls>" + kEos, true);
    EXPECT_EQ(r.reasoning, "I will call f.");
    EXPECT_EQ(r.content, "");
    ASSERT_EQ(r.tool_calls.size(), 1u);
}

TEST(ReplyParser, NonJsonFalseValueBecomesString) {
    auto r = parse_checked("<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"false\">not json"
                           "</｜DSML｜parameter>\n<｜DSML｜parameter name=\"b\">[1,2]</｜DSML｜parameter>\n"
                           "<｜DSML｜parameter name=\"c\">plain</｜DSML｜parameter>\n</｜DSML｜invoke>", false);
    ASSERT_EQ(r.tool_calls.size(), 1u);
    EXPECT_EQ(r.tool_calls[0].arguments, "{\"a\": \"not json\", \"b\": [1,2], \"c\": \"plain\"}");
}

TEST(ReplyParser, MissingParameterCloseIsClosedByNextTag) {
    auto r = parse_checked("<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"true\">one\n"
                           "<｜DSML｜parameter name=\"b\" string=\"false\">2\n</｜DSML｜invoke>", false);
    ASSERT_EQ(r.tool_calls.size(), 1u);
    EXPECT_EQ(r.tool_calls[0].arguments, "{\"a\": \"one\\n\", \"b\": 2}");
}

TEST(ReplyParser, ThinkMarkersNeverReachContent) {
    auto a = parse_checked("<think>chat-mode thoughts</think>answer", false);
    EXPECT_EQ(a.reasoning, "chat-mode thoughts");
    EXPECT_EQ(a.content, "answer");
    auto b = parse_checked("a</think>b<think>c", false);
    EXPECT_EQ(b.content, "abc");
    auto c = parse_checked("<think>r</think>x</th<｜DSML｜junk>ink>y", true);  // removal would splice "</think>"
    EXPECT_EQ(c.content.find("</think>"), std::string::npos) << c.content;
}

TEST(ReplyParser, TrailingWhitespaceKeptWithoutBlockAndEosStops) {
    auto r = parse_checked("line one\n\n" + kEos + "ignored <｜DSML｜invoke name=\"x\">", false);
    EXPECT_EQ(r.content, "line one\n\n");
    EXPECT_TRUE(r.tool_calls.empty());
}

// decode(encode(x)) == x: tool calls rendered by the encoder (goldens with tool calls) parse back to the same
// arguments as JSON values.
TEST(ReplyParser, RoundTripsEncoderToolCalls) {
    auto dir = testing::test_data_dir() / "chat_golden";
    int checked = 0;
    for (const char* name : {"023_tool_call_roundtrip_chat.json", "024_parallel_calls_sorted_thinking.json",
                             "025_tool_call_value_types.json", "026_tool_call_numeric_formatting.json",
                             "028_tool_call_empty_object_args.json", "032_assistant_content_and_tool_calls_thinking.json"}) {
        std::ifstream in(dir / name);
        std::stringstream ss;
        ss << in.rdbuf();
        Json doc = Json::parse(ss.str());
        for (const Json& msg : doc["messages"]) {
            if (!msg.contains("tool_calls")) continue;
            Json conversation = Json::array({{{"role", "user"}, {"content", "q"}}, msg});
            EncodeOptions opt;
            opt.thinking_mode = ThinkingMode::kThinking;
            opt.drop_thinking = false;
            auto prompt = encode_messages(conversation, opt);
            ASSERT_TRUE(prompt.is_ok()) << prompt.status().to_string();
            std::string reply = prompt->substr(prompt->find("<｜Assistant｜><think>") +
                                               std::string_view("<｜Assistant｜><think>").size());
            auto parsed = parse_checked(reply, true);
            EXPECT_EQ(parsed.reasoning, msg.value("reasoning_content", ""));
            EXPECT_EQ(parsed.content, msg["content"].is_string() ? msg["content"].get<std::string>() : "");
            ASSERT_EQ(parsed.tool_calls.size(), msg["tool_calls"].size()) << name;
            for (size_t i = 0; i < parsed.tool_calls.size(); ++i) {
                const Json& fn = msg["tool_calls"][i]["function"];
                EXPECT_EQ(parsed.tool_calls[i].name, fn["name"].get<std::string>());
                EXPECT_EQ(nlohmann::json::parse(parsed.tool_calls[i].arguments),
                          nlohmann::json::parse(fn["arguments"].get<std::string>()))
                    << name << ": " << parsed.tool_calls[i].arguments;
                ++checked;
            }
        }
    }
    EXPECT_GE(checked, 8);
}

}  // namespace
}  // namespace dsv4::chat
