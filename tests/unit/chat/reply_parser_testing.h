// Helpers shared by the reply-parser tests: feed a reply in given pieces and rebuild the result from the events.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "dsv4/chat.h"

namespace dsv4::chat::test {

struct StreamResult {
    ParsedReply from_events;  // rebuilt from the deltas
    ParsedReply reply;        // the parser's own summary
    std::vector<ReplyEvent> events;
};

// Feeds `text` cut at `cuts` (sorted byte offsets).
inline StreamResult stream(std::string_view text, bool starts_in_reasoning, const std::vector<size_t>& cuts) {
    ReplyParser parser(starts_in_reasoning);
    StreamResult r;
    size_t from = 0;
    for (size_t cut : cuts) {
        parser.feed(text.substr(from, cut - from), r.events);
        from = cut;
    }
    parser.feed(text.substr(from), r.events);
    parser.finish(r.events);
    r.reply = parser.reply();
    for (const auto& e : r.events) {
        switch (e.kind) {
            case ReplyEvent::Kind::kReasoning: r.from_events.reasoning += e.text; break;
            case ReplyEvent::Kind::kContent: r.from_events.content += e.text; break;
            case ReplyEvent::Kind::kToolCallBegin: r.from_events.tool_calls.push_back({e.text, ""}); break;
            case ReplyEvent::Kind::kToolCallArgs: r.from_events.tool_calls.at(e.tool_index).arguments += e.text; break;
            case ReplyEvent::Kind::kToolCallEnd: break;
        }
    }
    return r;
}

inline StreamResult stream_whole(std::string_view text, bool reasoning) { return stream(text, reasoning, {}); }

inline StreamResult stream_bytes(std::string_view text, bool reasoning) {
    std::vector<size_t> cuts;
    for (size_t i = 1; i < text.size(); ++i) cuts.push_back(i);
    return stream(text, reasoning, cuts);
}

inline StreamResult stream_random(std::string_view text, bool reasoning, std::mt19937_64& rng) {
    std::vector<size_t> cuts;
    size_t pos = 0;
    while (text.size() > 1) {
        pos += 1 + rng() % 12;
        if (pos >= text.size()) break;
        cuts.push_back(pos);
    }
    return stream(text, reasoning, cuts);
}

inline bool same(const ParsedReply& a, const ParsedReply& b) {
    if (a.reasoning != b.reasoning || a.content != b.content || a.tool_calls.size() != b.tool_calls.size()) {
        return false;
    }
    for (size_t i = 0; i < a.tool_calls.size(); ++i) {
        if (a.tool_calls[i].name != b.tool_calls[i].name || a.tool_calls[i].arguments != b.tool_calls[i].arguments) {
            return false;
        }
    }
    return true;
}

inline std::string describe(const ParsedReply& r) {
    std::string s = "reasoning=[" + r.reasoning + "] content=[" + r.content + "]";
    for (const auto& c : r.tool_calls) s += " call " + c.name + " " + c.arguments;
    return s;
}

inline bool valid_utf8(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (len == 0 || i + len > s.size()) return false;
        for (size_t k = 1; k < len; ++k) {
            if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
        }
        i += len;
    }
    return true;
}

}  // namespace dsv4::chat::test
