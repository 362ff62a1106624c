// Encoder rules the goldens do not exercise (expected strings follow the official encoder's documented semantics:
// tests/data/chat_golden/README.md) and the errors for malformed input.
#include <gtest/gtest.h>

#include "dsv4/chat.h"

namespace dsv4::chat {
namespace {

const std::string kHead = "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜></think>";

Result<std::string> encode_chat(const Json& messages) {
    EncodeOptions opt;
    return encode_messages(messages, opt);
}

std::string render_call(const Json& arguments) {
    Json messages = Json::array({{{"role", "user"}, {"content", "q"}},
                                 {{"role", "assistant"},
                                  {"content", nullptr},
                                  {"tool_calls", Json::array({{{"id", "1"},
                                                               {"type", "function"},
                                                               {"function", {{"name", "f"}, {"arguments", arguments}}}}})}}});
    auto r = encode_chat(messages);
    if (!r.is_ok()) return "ERROR: " + r.status().message();
    std::string s = *r;
    size_t from = s.find("<｜DSML｜invoke name=\"f\">\n") + std::string_view("<｜DSML｜invoke name=\"f\">\n").size();
    size_t to = s.find("\n</｜DSML｜invoke>");
    return s.substr(from, to - from);
}

std::string param(const std::string& name, bool is_string, const std::string& value) {
    return "<｜DSML｜parameter name=\"" + name + "\" string=\"" + (is_string ? "true" : "false") + "\">" + value +
           "</｜DSML｜parameter>";
}

TEST(EncoderRules, ArgumentsFollowPythonJsonLoads) {
    EXPECT_EQ(render_call(R"({"a": 1, "b": 2, "a": 3})"), param("a", false, "3") + "\n" + param("b", false, "2"));
    EXPECT_EQ(render_call(R"({"n": 123456789012345678901234567890, "x": NaN, "y": 1e400})"),
              param("n", false, "123456789012345678901234567890") + "\n" + param("x", false, "NaN") + "\n" +
                  param("y", false, "Infinity"));
    EXPECT_EQ(render_call(R"({"s": "raw \"quotes\"\n", "k<>": "v"})"),
              param("s", true, "raw \"quotes\"\n") + "\n" + param("k<>", true, "v"));
    EXPECT_EQ(render_call(R"({'a': 1})"), param("arguments", true, "{'a': 1}"));
}

TEST(EncoderRules, NonStringArgumentsBecomeOneJsonParameter) {
    EXPECT_EQ(render_call(Json::parse(R"({"city": "Paris", "n": 2.0})")),
              param("arguments", false, R"({"city": "Paris", "n": 2.0})"));
}

TEST(EncoderRules, ArgumentsThatAreJsonButNotAnObjectAreAnError) {
    EXPECT_NE(render_call("[1, 2]").find("ERROR: messages[1] (assistant).tool_calls[0]"), std::string::npos);
    EXPECT_NE(render_call("[1, 2]").find("not an object"), std::string::npos);
}

TEST(EncoderRules, ToolResultContentForms) {
    Json messages = Json::parse(R"([
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "function": {"name": "f", "arguments": "{}"}},
            {"function": {"id": "b", "name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "b", "content": null},
        {"role": "tool", "tool_call_id": "a"}
    ])");
    auto r = encode_chat(messages);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    // function.id orders too; a null content prints as Python's None; a missing content is empty.
    EXPECT_NE(r->find("<｜User｜><tool_result></tool_result>\n\n<tool_result>None</tool_result><｜Assistant｜></think>"),
              std::string::npos)
        << *r;
}

TEST(EncoderRules, EmptyCallIdsAreNotMapped) {
    // Python `if tc_id:` skips "", so the result with id "" sorts as position 0, before the one answering call 0.
    Json messages = Json::parse(R"([
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "function": {"name": "f", "arguments": "{}"}},
            {"id": "", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "", "content": "second"},
        {"role": "tool", "tool_call_id": "a", "content": "first"}
    ])");
    auto r = encode_chat(messages);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_NE(r->find("<tool_result>second</tool_result>\n\n<tool_result>first</tool_result>"), std::string::npos)
        << *r;
}

TEST(EncoderRules, UserTaskStopsMerging) {
    Json messages = Json::parse(R"([
        {"role": "user", "content": "a", "task": "query"},
        {"role": "user", "content": "b"}
    ])");
    auto r = encode_chat(messages);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(*r, "<｜begin▁of▁sentence｜><｜User｜>a<｜User｜>b<｜Assistant｜></think>");
}

TEST(EncoderRules, ToolsOnAUserMessageAreLost) {
    Json messages = Json::parse(R"([{"role": "user", "content": "q",
        "tools": [{"type": "function", "function": {"name": "f"}}]}])");
    auto r = encode_chat(messages);
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(*r, kHead);
}

TEST(EncoderRules, ClearErrors) {
    auto err = [](const char* messages_json, EncodeOptions opt = {}) {
        auto r = encode_messages(Json::parse(messages_json), opt);
        return r.is_ok() ? std::string("OK") : r.status().message();
    };
    EXPECT_NE(err(R"([{"role": "robot", "content": "x"}])").find("unknown role 'robot'"), std::string::npos);
    EXPECT_NE(err(R"([{"content": "x"}])").find("messages[0].role"), std::string::npos);
    EXPECT_NE(err(R"([{"role": "user", "content": 5}])").find("messages[0].content"), std::string::npos);
    EXPECT_NE(err(R"([{"role": "developer", "content": ""}])").find("non-empty"), std::string::npos);
    EXPECT_NE(err(R"([{"role": "user", "content": "x", "task": "dance"}])").find("invalid task 'dance'"),
              std::string::npos);
    EXPECT_NE(err(R"([{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"function": {}}]}])")
                  .find("function.name"),
              std::string::npos);
    EXPECT_NE(err(R"({"role": "user"})").find("array"), std::string::npos);
    EXPECT_NE(err(R"([{"role": "system", "content": "s", "tools": {"a": 1}}])").find("tools must be a list"),
              std::string::npos);
}

TEST(EncoderRules, RequestFileErrors) {
    auto err = [](const char* text) {
        auto r = parse_template_request(text, "case.json");
        return r.is_ok() ? std::string("OK") : r.status().message();
    };
    EXPECT_EQ(err(R"({"messages": [], "kwargs": {"thinking_mode": "chat"}})"), "OK");
    EXPECT_NE(err("{").find("case.json: not valid JSON"), std::string::npos);
    EXPECT_NE(err(R"({"messages": []})").find("thinking_mode is required"), std::string::npos);
    EXPECT_NE(err(R"({"messages": [], "kwargs": {"thinking_mode": "deep"}})").find("\"chat\" or \"thinking\""),
              std::string::npos);
    EXPECT_NE(err(R"({"messages": [], "kwargs": {"thinking_mode": "chat", "temperature": 1}})")
                  .find("unknown key 'temperature'"),
              std::string::npos);
    EXPECT_NE(err(R"({"messages": [], "kwargs": {"thinking_mode": "chat", "reasoning_effort": "low"}})")
                  .find("reasoning_effort"),
              std::string::npos);
    EXPECT_NE(err(R"({"messages": {}, "kwargs": {"thinking_mode": "chat"}})").find("\"messages\" must be a list"),
              std::string::npos);
    EXPECT_NE(err(R"({"msgs": []})").find("unknown top-level key 'msgs'"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::chat
