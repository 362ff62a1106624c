// Fuzz entry point: chat::ReplyParser on arbitrary generated text fed in pieces. Byte 0 chooses whether generation
// starts in reasoning, byte 1 seeds the cut points; the rest is the text. Invariants (dsv4/chat.h): the result does
// not depend on how the text is split, the deltas rebuild the parser's own summary, reasoning and content never
// contain DSML markup or think tags and are valid UTF-8, and tool-call arguments are JSON objects.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "chat/python_json.h"
#include "dsv4/chat.h"

namespace dsv4::fuzz {

inline void check_clean_text(std::string_view text) {
    for (std::string_view forbidden : {std::string_view("｜DSML｜"), chat::kThinkStart, chat::kThinkEnd}) {
        check(text.find(forbidden) == std::string_view::npos, "DSML markup or a think tag reached reasoning/content");
    }
    check(is_valid_utf8(text), "reasoning/content delta is not valid UTF-8");
}

// Feeds `text` cut at `cuts` (sorted offsets) and checks every delta; returns the summary rebuilt from the events.
inline chat::ParsedReply stream_reply(std::string_view text, bool starts_in_reasoning, const std::vector<size_t>& cuts,
                                      chat::ParsedReply* summary) {
    chat::ReplyParser parser(starts_in_reasoning);
    std::vector<chat::ReplyEvent> events;
    size_t from = 0;
    for (size_t cut : cuts) {
        parser.feed(text.substr(from, cut - from), events);
        from = cut;
    }
    parser.feed(text.substr(from), events);
    parser.finish(events);
    *summary = parser.reply();
    chat::ParsedReply rebuilt;
    for (const chat::ReplyEvent& e : events) {
        switch (e.kind) {
            case chat::ReplyEvent::Kind::kReasoning:
                check_clean_text(e.text);
                rebuilt.reasoning += e.text;
                break;
            case chat::ReplyEvent::Kind::kContent:
                check_clean_text(e.text);
                rebuilt.content += e.text;
                break;
            case chat::ReplyEvent::Kind::kToolCallBegin:
                check(e.tool_index == static_cast<int>(rebuilt.tool_calls.size()), "tool call index out of order");
                rebuilt.tool_calls.push_back({e.text, ""});
                break;
            case chat::ReplyEvent::Kind::kToolCallArgs:
                check(e.tool_index >= 0 && e.tool_index < static_cast<int>(rebuilt.tool_calls.size()),
                      "arguments for a tool call that never began");
                rebuilt.tool_calls[e.tool_index].arguments += e.text;
                break;
            case chat::ReplyEvent::Kind::kToolCallEnd:
                check(e.tool_index >= 0 && e.tool_index < static_cast<int>(rebuilt.tool_calls.size()),
                      "end of a tool call that never began");
                break;
        }
    }
    return rebuilt;
}

inline bool same_reply(const chat::ParsedReply& a, const chat::ParsedReply& b) {
    if (a.reasoning != b.reasoning || a.content != b.content || a.tool_calls.size() != b.tool_calls.size()) return false;
    for (size_t i = 0; i < a.tool_calls.size(); ++i) {
        if (a.tool_calls[i].name != b.tool_calls[i].name || a.tool_calls[i].arguments != b.tool_calls[i].arguments)
            return false;
    }
    return true;
}

inline void reply_parser_one_input(std::span<const uint8_t> input) {
    if (input.size() < 2) return;
    const bool starts_in_reasoning = input[0] & 1;
    uint32_t seed = input[1] | 1u;
    const std::string_view text(reinterpret_cast<const char*>(input.data()) + 2, input.size() - 2);

    std::vector<size_t> random_cuts, byte_cuts;
    for (size_t pos = 0;;) {
        seed = seed * 1103515245u + 12345u;  // a fixed LCG: the cuts are part of the input
        pos += 1 + (seed >> 16) % 16;
        if (pos >= text.size()) break;
        random_cuts.push_back(pos);
    }
    for (size_t i = 1; i < text.size(); ++i) byte_cuts.push_back(i);

    chat::ParsedReply whole_summary, cut_summary, byte_summary;
    const chat::ParsedReply whole = stream_reply(text, starts_in_reasoning, {}, &whole_summary);
    const chat::ParsedReply cut = stream_reply(text, starts_in_reasoning, random_cuts, &cut_summary);
    const chat::ParsedReply bytes = stream_reply(text, starts_in_reasoning, byte_cuts, &byte_summary);
    check(same_reply(whole, whole_summary), "deltas do not rebuild reply()");
    check(same_reply(cut, cut_summary), "deltas do not rebuild reply() (random pieces)");
    check(same_reply(bytes, byte_summary), "deltas do not rebuild reply() (byte by byte)");
    check(same_reply(whole, cut), "the result depends on how the text was split (random pieces)");
    check(same_reply(whole, bytes), "the result depends on how the text was split (byte by byte)");
    check_clean_text(whole_summary.reasoning);
    check_clean_text(whole_summary.content);
    for (const chat::ToolCall& call : whole.tool_calls) {
        auto args = chat::python_json_loads(call.arguments);
        check(args.is_ok() && args.value().kind == chat::PyJson::Kind::kObject, "tool-call arguments not a JSON object");
    }
}

}  // namespace dsv4::fuzz
