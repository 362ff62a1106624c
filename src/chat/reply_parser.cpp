// Streaming reply parser: generated text -> reasoning / content / tool calls (DSML -> OpenAI tool_calls).
//
// The official parser (encoding_dsv4.parse_message_from_completion_text) is strict and works on whole replies. This
// one is incremental and tolerant of what models really emit: an unterminated tool-call block at EOS,
// `function_calls` as the block name, a bare <｜DSML｜invoke> without the wrapper, a missing </think>, junk inside
// markup. Invariants (tested with fuzzed input): the concatenation of the deltas does not depend on how the input
// was split, and reasoning/content never contain "｜DSML｜", "<think>" or "</think>".
#include <algorithm>
#include <array>

#include "chat/python_json.h"
#include "core/utf8.h"
#include "dsv4/chat.h"

namespace dsv4::chat {
namespace {

enum MarkerId { kDsmlOpen, kDsmlClose, kDsmlBare, kThinkOpen, kThinkClose, kEos, kMarkerCount };
constexpr std::array<std::string_view, kMarkerCount> kMarkers = {
    "<｜DSML｜", "</｜DSML｜", "｜DSML｜", "<think>", "</think>", "<｜end▁of▁sentence｜>"};
// Text that may never appear in reasoning or content, even when removing markup joins the pieces around it.
constexpr std::array<std::string_view, 3> kForbidden = {"｜DSML｜", "<think>", "</think>"};
// A DSML tag longer than this without its '>' is junk: its marker is dropped and scanning goes on.
constexpr size_t kMaxTagBytes = 1024;

struct MarkerHit {
    size_t pos = std::string::npos;
    MarkerId id = kMarkerCount;
    bool full = false;
};

// The first position where a marker starts, either completely present (full) or cut off by the end of `s`.
MarkerHit find_marker(std::string_view s, bool with_think) {
    for (size_t p = 0; p < s.size(); ++p) {
        unsigned char c = static_cast<unsigned char>(s[p]);
        if (c != '<' && c != 0xEF) continue;
        std::string_view rest = s.substr(p);
        MarkerHit partial;
        for (int id = 0; id < kMarkerCount; ++id) {
            if (!with_think && (id == kThinkOpen || id == kThinkClose)) continue;
            std::string_view m = kMarkers[id];
            if (rest.size() >= m.size()) {
                if (rest.substr(0, m.size()) == m) return {p, static_cast<MarkerId>(id), true};
            } else if (m.substr(0, rest.size()) == rest && partial.pos == std::string::npos) {
                partial = {p, static_cast<MarkerId>(id), false};
            }
        }
        if (partial.pos != std::string::npos) return partial;
    }
    return {};
}

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string trim(std::string_view s) {
    size_t b = 0, e = s.size();
    while (b < e && is_ws(s[b])) ++b;
    while (e > b && is_ws(s[e - 1])) --e;
    return std::string(s.substr(b, e - b));
}

// The value of attribute `key` in a tag's attribute text: key="v", key='v' or key=v. Empty when missing.
std::string attribute(std::string_view attrs, std::string_view key, bool* found = nullptr) {
    size_t p = 0;
    while ((p = attrs.find(key, p)) != std::string_view::npos) {
        bool boundary = p == 0 || is_ws(attrs[p - 1]);
        size_t q = p + key.size();
        while (q < attrs.size() && is_ws(attrs[q])) ++q;
        if (!boundary || q >= attrs.size() || attrs[q] != '=') {
            p += key.size();
            continue;
        }
        ++q;
        while (q < attrs.size() && is_ws(attrs[q])) ++q;
        if (found) *found = true;
        if (q < attrs.size() && (attrs[q] == '"' || attrs[q] == '\'')) {
            size_t end = attrs.find(attrs[q], q + 1);
            if (end == std::string_view::npos) end = attrs.size();
            return std::string(attrs.substr(q + 1, end - q - 1));
        }
        size_t end = q;
        while (end < attrs.size() && !is_ws(attrs[end]) && attrs[end] != '/') ++end;
        return std::string(attrs.substr(q, end - q));
    }
    if (found) *found = false;
    return {};
}

struct Tag {
    bool closing = false;
    std::string name;   // "tool_calls" (also for "function_calls"), "invoke", "parameter", or anything else
    std::string attrs;  // text between the name and '>'
};

// `tag` runs from its marker (with or without the leading '<') to its '>'.
Tag parse_tag(std::string_view tag) {
    Tag t;
    if (!tag.empty() && tag[0] == '<') tag.remove_prefix(1);
    if (!tag.empty() && tag[0] == '/') {
        t.closing = true;
        tag.remove_prefix(1);
    }
    tag.remove_prefix(std::min(tag.size(), kMarkers[kDsmlBare].size()));
    if (!tag.empty() && tag.back() == '>') tag.remove_suffix(1);
    size_t n = 0;
    while (n < tag.size() && (std::isalnum(static_cast<unsigned char>(tag[n])) || tag[n] == '_')) ++n;
    t.name = std::string(tag.substr(0, n));
    if (t.name == "function_calls") t.name = "tool_calls";
    t.attrs = std::string(tag.substr(n));
    return t;
}

}  // namespace

ReplyParser::ReplyParser(bool starts_in_reasoning)
    : state_(starts_in_reasoning ? State::kReasoning : State::kContent) {}

void ReplyParser::feed(std::string_view text, std::vector<ReplyEvent>& events) {
    if (state_ == State::kDone) return;
    buf_.append(text);
    run(false, events);
}

void ReplyParser::finish(std::vector<ReplyEvent>& events) {
    run(true, events);
    close_open_markup(events);
    state_ = State::kDone;
}

void ReplyParser::run(bool at_end, std::vector<ReplyEvent>& events) {
    while (state_ != State::kDone && step(at_end, events)) {
    }
    if (state_ == State::kDone) buf_.clear();
}

// One decision on buf_; false when nothing can be decided until more text arrives.
bool ReplyParser::step(bool at_end, std::vector<ReplyEvent>& events) {
    if (buf_.empty()) return false;
    const bool text_state = state_ == State::kReasoning || state_ == State::kContent;
    MarkerHit hit = find_marker(buf_, text_state);
    if (hit.pos == std::string::npos) {
        // No marker: everything is decided except an incomplete UTF-8 character at the end.
        size_t keep = at_end ? 0 : incomplete_utf8_tail(buf_);
        if (keep == buf_.size()) return false;
        std::string decided = buf_.substr(0, buf_.size() - keep);
        buf_.erase(0, buf_.size() - keep);
        if (text_state) text_segment(decided, events);
        else if (state_ == State::kParamValue) value_segment(decided, events);
        return true;  // markup states drop text between tags
    }
    if (hit.pos > 0) {
        std::string decided = buf_.substr(0, hit.pos);
        buf_.erase(0, hit.pos);
        if (text_state) text_segment(decided, events);
        else if (state_ == State::kParamValue) value_segment(decided, events);
        return true;
    }
    if (!hit.full) {
        if (!at_end) return false;
        // The reply ended inside something that looked like markup: drop it. A lone '<' and the start of a bare
        // "｜DSML｜" (e.g. a final "｜" character) are ordinary text.
        if ((buf_.size() == 1 && buf_[0] == '<') || hit.id == kDsmlBare) {
            if (text_state) text_segment(buf_, events);
            else if (state_ == State::kParamValue) value_segment(buf_, events);
        }
        buf_.clear();
        return false;
    }
    const size_t marker_len = kMarkers[hit.id].size();
    switch (hit.id) {
        case kEos:
            buf_.clear();
            if (text_state) flush_text(false, events);
            close_open_markup(events);
            state_ = State::kDone;
            return false;
        case kThinkOpen:
        case kThinkClose:
            buf_.erase(0, marker_len);
            handle_think_marker(hit.id == kThinkClose, events);
            return true;
        default: {
            size_t gt = buf_.find('>', marker_len);
            if (gt == std::string::npos || gt > kMaxTagBytes) {
                if (gt == std::string::npos && !at_end && buf_.size() <= kMaxTagBytes) return false;
                if (gt == std::string::npos && at_end) {  // truncated tag at the end of the reply
                    buf_.clear();
                    return false;
                }
                buf_.erase(0, marker_len);  // runaway tag: drop its marker, keep scanning
                return true;
            }
            std::string tag = buf_.substr(0, gt + 1);
            buf_.erase(0, gt + 1);
            handle_tag(tag, events);
            return true;
        }
    }
}

void ReplyParser::handle_think_marker(bool closing, std::vector<ReplyEvent>& events) {
    if (state_ == State::kReasoning) {
        if (closing) {
            flush_text(false, events);
            reply_.saw_think_end = true;
            state_ = State::kContent;
        }
        return;  // a repeated <think> inside reasoning is dropped
    }
    // Content: a <think> before any content opens reasoning (a model that thinks in chat mode); other think
    // markers are dropped.
    if (!closing && !content_started_) {
        pending_ws_.clear();
        state_ = State::kReasoning;
    }
}

void ReplyParser::handle_tag(std::string_view tag_text, std::vector<ReplyEvent>& events) {
    Tag tag = parse_tag(tag_text);
    const bool open_block = !tag.closing && tag.name == "tool_calls";
    const bool close_block = tag.closing && tag.name == "tool_calls";
    const bool open_invoke = !tag.closing && tag.name == "invoke";
    const bool close_invoke = tag.closing && tag.name == "invoke";
    const bool open_param = !tag.closing && tag.name == "parameter";
    const bool close_param = tag.closing && tag.name == "parameter";
    auto invoke_name = [&] { return attribute(tag.attrs, "name"); };

    switch (state_) {
        case State::kReasoning:
        case State::kContent:
            if (open_block || open_invoke) {
                flush_text(true, events);  // whitespace before the block belongs to the markup
                if (open_block) {
                    state_ = State::kBlock;
                } else {
                    after_call_state_ = State::kContent;
                    begin_call(invoke_name(), events);
                }
            }
            return;  // stray tags are dropped
        case State::kBlock:
            if (open_invoke) {
                after_call_state_ = State::kBlock;
                begin_call(invoke_name(), events);
            } else if (close_block) {
                state_ = State::kContent;
                skip_leading_ws_ = true;
            }
            return;
        case State::kParamValue:
            if (close_param) {
                end_param(events);
                return;
            }
            if (!(open_param || open_invoke || close_invoke || close_block)) return;  // junk tag inside a value
            end_param(events);  // a missing </｜DSML｜parameter>: the next structural tag closes the value
            [[fallthrough]];
        case State::kInvoke:
            if (open_param) {
                bool has_string = false;
                std::string flag = attribute(tag.attrs, "string", &has_string);
                begin_param(attribute(tag.attrs, "name"), flag == "true" ? 1 : flag == "false" ? 0 : -1, events);
            } else if (open_invoke) {
                State back = after_call_state_;
                end_call(events);
                after_call_state_ = back;
                begin_call(invoke_name(), events);
            } else if (close_invoke) {
                end_call(events);
            } else if (close_block) {
                end_call(events);
                state_ = State::kContent;
                skip_leading_ws_ = true;
            }
            return;
        case State::kDone: return;
    }
}

// Decided reasoning/content text. Whitespace at its end is held: it is dropped if a tool-call block follows.
void ReplyParser::text_segment(std::string_view raw, std::vector<ReplyEvent>& events) {
    const std::string valid = sanitize_utf8(raw);
    std::string_view text = valid;
    if (state_ == State::kContent && skip_leading_ws_) {
        while (!text.empty() && is_ws(text.front())) text.remove_prefix(1);
        if (text.empty()) return;
        skip_leading_ws_ = false;
        pending_ws_.clear();
    }
    size_t end = text.size();
    while (end > 0 && is_ws(text[end - 1])) --end;
    if (end == 0) {
        pending_ws_.append(text);
        return;
    }
    if (state_ == State::kContent) content_started_ = true;
    std::string out = std::move(pending_ws_);
    pending_ws_.clear();
    out.append(text.substr(0, end));
    emit_clean(out, events);
    pending_ws_.assign(text.substr(end));
}

void ReplyParser::flush_text(bool drop_whitespace, std::vector<ReplyEvent>& events) {
    if (!drop_whitespace && !pending_ws_.empty()) emit_clean(pending_ws_, events);
    pending_ws_.clear();
}

// Emits reasoning/content text, removing the last character of any forbidden marker that the text would complete
// together with what was emitted before (markup removed between two pieces can join them into a marker).
void ReplyParser::emit_clean(std::string_view text, std::vector<ReplyEvent>& events) {
    const bool reasoning = state_ == State::kReasoning;
    std::string& tail = reasoning ? reasoning_tail_ : content_tail_;
    std::string out;
    out.reserve(text.size());
    size_t i = 0;
    while (i < text.size()) {
        unsigned char c = static_cast<unsigned char>(text[i]);
        size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
        len = std::min(len, text.size() - i);
        std::string_view ch = text.substr(i, len);
        i += len;
        tail.append(ch);
        bool completes = false;
        for (auto m : kForbidden) {
            if (tail.size() >= m.size() && std::string_view(tail).substr(tail.size() - m.size()) == m) completes = true;
        }
        if (completes) {
            tail.erase(tail.end() - static_cast<std::ptrdiff_t>(len), tail.end());
            continue;
        }
        out.append(ch);
        if (tail.size() > 32) tail.erase(0, tail.size() - 32);
    }
    if (out.empty()) return;
    if (reasoning) reply_.reasoning += out;
    else reply_.content += out;
    events.push_back({reasoning ? ReplyEvent::Kind::kReasoning : ReplyEvent::Kind::kContent, -1, std::move(out)});
}

void ReplyParser::value_segment(std::string_view text, std::vector<ReplyEvent>& events) {
    if (param_string_ == 1) {
        std::string escaped;
        append_python_json_string(escaped, sanitize_utf8(text));
        args_delta(escaped.substr(1, escaped.size() - 2), events);  // without the quotes
    } else {
        param_value_.append(text);
    }
}

void ReplyParser::args_delta(std::string text, std::vector<ReplyEvent>& events) {
    if (text.empty()) return;
    const int index = static_cast<int>(reply_.tool_calls.size()) - 1;
    reply_.tool_calls.back().arguments += text;
    events.push_back({ReplyEvent::Kind::kToolCallArgs, index, std::move(text)});
}

void ReplyParser::begin_call(std::string name, std::vector<ReplyEvent>& events) {
    name = sanitize_utf8(name);
    reply_.tool_calls.push_back({name, ""});
    events.push_back({ReplyEvent::Kind::kToolCallBegin, static_cast<int>(reply_.tool_calls.size()) - 1,
                      std::move(name)});
    params_in_call_ = 0;
    state_ = State::kInvoke;
}

void ReplyParser::begin_param(const std::string& name, int string_flag, std::vector<ReplyEvent>& events) {
    std::string head = params_in_call_ == 0 ? "{" : ", ";
    append_python_json_string(head, sanitize_utf8(name));
    head += ": ";
    if (string_flag == 1) head += '"';
    args_delta(std::move(head), events);
    ++params_in_call_;
    param_string_ = string_flag;
    param_value_.clear();
    state_ = State::kParamValue;
}

// string="true": close the JSON string. Otherwise the value is used as JSON when it is valid JSON, else as a string.
void ReplyParser::end_param(std::vector<ReplyEvent>& events) {
    if (param_string_ == 1) {
        args_delta("\"", events);
    } else {
        std::string value = trim(param_value_);
        // nlohmann's lexer takes a NUL byte as the end of input, so "41<NUL>x" would be accepted: rule NUL out.
        if (!value.empty() && value.find('\0') == std::string::npos && Json::accept(value)) {
            args_delta(std::move(value), events);
        } else {
            std::string quoted;
            append_python_json_string(quoted, sanitize_utf8(param_value_));
            args_delta(std::move(quoted), events);
        }
    }
    param_value_.clear();
    state_ = State::kInvoke;
}

void ReplyParser::end_call(std::vector<ReplyEvent>& events) {
    args_delta(params_in_call_ == 0 ? "{}" : "}", events);
    events.push_back({ReplyEvent::Kind::kToolCallEnd, static_cast<int>(reply_.tool_calls.size()) - 1, ""});
    state_ = after_call_state_;
    if (state_ == State::kContent) skip_leading_ws_ = true;
}

// End of the reply: held whitespace is text after all; an open parameter and invoke are closed.
void ReplyParser::close_open_markup(std::vector<ReplyEvent>& events) {
    if (state_ == State::kReasoning || state_ == State::kContent) flush_text(false, events);
    if (state_ == State::kParamValue) end_param(events);
    if (state_ == State::kInvoke) end_call(events);
}

ParsedReply parse_reply(std::string_view text, bool starts_in_reasoning) {
    ReplyParser parser(starts_in_reasoning);
    std::vector<ReplyEvent> events;
    parser.feed(text, events);
    parser.finish(events);
    return parser.reply();
}

}  // namespace dsv4::chat
