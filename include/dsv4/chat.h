// DeepSeek-V4 chat format: the prompt encoder (OpenAI-style messages -> prompt text with special tokens written out)
// and the streaming reply parser (generated text -> reasoning / content / tool calls). docs/chat.md has the rules.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "dsv4/status.h"

namespace dsv4::chat {

// Messages and tool schemas keep their key order in the prompt, so the API uses the insertion-ordered JSON type.
using Json = nlohmann::ordered_json;

// Special tokens as text (MODEL_SPEC §10).
inline constexpr std::string_view kBosToken = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEosToken = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kUserToken = "<｜User｜>";
inline constexpr std::string_view kAssistantToken = "<｜Assistant｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kLatestReminderToken = "<｜latest_reminder｜>";
inline constexpr std::string_view kDsmlToken = "｜DSML｜";

enum class ThinkingMode { kChat, kThinking };
enum class ReasoningEffort { kNone, kHigh, kMax };

// The keyword arguments of the official encode_messages().
struct EncodeOptions {
    ThinkingMode thinking_mode = ThinkingMode::kChat;
    bool drop_thinking = true;          // drop history reasoning (switched off when any message has tools)
    bool add_default_bos_token = true;  // BOS only when there is no context
    ReasoningEffort reasoning_effort = ReasoningEffort::kNone;  // kMax adds a paragraph in thinking mode
    Json context = Json::array();       // messages before `messages` that are already in the cache: not rendered
};

// Renders `messages` (a JSON array of OpenAI-style messages: roles system, user, assistant, tool, developer,
// latest_reminder) exactly as DeepSeek's encoding_dsv4.encode_messages does. Errors name the message index and
// field (unknown role, wrong type, tool_calls without function.name, arguments that are JSON but not an object).
Result<std::string> encode_messages(const Json& messages, const EncodeOptions& options);

// How an assistant reply that opens with a tool call begins, as the template writes such a reply: the tool-calls
// block and its first invoke up to the function's name; given a name, up to its parameters. What a reply is held to
// for tool_choice "required" or a named function (GenerationOptions::reply_prefix).
std::string tool_call_opening(std::string_view function_name = {});

// Reads the kwargs object of the golden / CLI format: thinking_mode ("chat" | "thinking", required), drop_thinking,
// add_default_bos_token, reasoning_effort (null | "high" | "max"), context (array). Unknown keys are errors.
Result<EncodeOptions> encode_options_from_kwargs(const Json& kwargs);

// A whole {"messages": [...], "kwargs": {...}} document (the apply-template file format). `source_name` is used in
// error messages.
struct TemplateRequest {
    Json messages;
    EncodeOptions options;
};
Result<TemplateRequest> parse_template_request(std::string_view json_text, const std::string& source_name);

// ---------------------------------------------------------------------------------------------------------------
// Reply parser.
//
// Feed generated text in pieces of any size; every call returns the events decided so far. Text that could still
// turn into markup (a prefix of "<｜DSML｜", "</think>", the EOS text, whitespace before a tool-call block, or an
// incomplete UTF-8 sequence) is held back until it is decided, so content and reasoning deltas never contain
// markup and each delta is whole UTF-8. The concatenation of all deltas does not depend on how the text was split.

struct ReplyEvent {
    enum class Kind {
        kReasoning,      // text: reasoning delta
        kContent,        // text: content delta
        kToolCallBegin,  // tool_index, text: function name
        kToolCallArgs,   // tool_index, text: next piece of the arguments JSON
        kToolCallEnd,    // tool_index
    };
    Kind kind;
    int tool_index = -1;
    std::string text;
};

struct ToolCall {
    std::string name;
    std::string arguments;  // a JSON object text, e.g. {"city": "Paris", "days": 3}
};

struct ParsedReply {
    std::string reasoning;
    std::string content;
    std::vector<ToolCall> tool_calls;
    bool saw_think_end = false;  // "</think>" was present (false: reasoning never closed)
};

class ReplyParser {
public:
    // starts_in_reasoning: the prompt ended with "<think>" (thinking mode generation prompt).
    explicit ReplyParser(bool starts_in_reasoning);

    // Appends the events decided by `text` to `events` (not cleared).
    void feed(std::string_view text, std::vector<ReplyEvent>& events);
    // End of generation: flushes held text, closes an open parameter / invoke / block.
    void finish(std::vector<ReplyEvent>& events);

    // Everything parsed so far (complete after finish()).
    const ParsedReply& reply() const { return reply_; }

private:
    enum class State { kReasoning, kContent, kBlock, kInvoke, kParamValue, kDone };
    void run(bool at_end, std::vector<ReplyEvent>& events);
    bool step(bool at_end, std::vector<ReplyEvent>& events);
    void handle_tag(std::string_view tag, std::vector<ReplyEvent>& events);
    void handle_think_marker(bool closing, std::vector<ReplyEvent>& events);
    void text_segment(std::string_view text, std::vector<ReplyEvent>& events);
    void flush_text(bool drop_whitespace, std::vector<ReplyEvent>& events);
    void emit_clean(std::string_view text, std::vector<ReplyEvent>& events);
    void value_segment(std::string_view text, std::vector<ReplyEvent>& events);
    void begin_call(std::string name, std::vector<ReplyEvent>& events);
    void begin_param(const std::string& name, int string_flag, std::vector<ReplyEvent>& events);
    void end_param(std::vector<ReplyEvent>& events);
    void end_call(std::vector<ReplyEvent>& events);
    void close_open_markup(std::vector<ReplyEvent>& events);
    void args_delta(std::string text, std::vector<ReplyEvent>& events);

    State state_;
    State after_call_state_ = State::kContent;  // where a closed invoke returns: the block, or content when bare
    std::string buf_;                // undecided input
    std::string pending_ws_;         // whitespace held: it is dropped if a tool-call block follows
    std::string reasoning_tail_;     // last bytes emitted per channel, so removed markup cannot splice a marker
    std::string content_tail_;
    bool content_started_ = false;   // a non-whitespace content byte was decided
    bool skip_leading_ws_ = false;   // after a tool-call block: drop whitespace before further content
    int params_in_call_ = 0;
    int param_string_ = 0;           // 1: string="true"; 0: string="false"; -1: attribute missing
    std::string param_value_;        // raw value of a non-string parameter (emitted when it closes)
    ParsedReply reply_;
};

// Convenience: parses a whole reply at once.
ParsedReply parse_reply(std::string_view text, bool starts_in_reasoning);

}  // namespace dsv4::chat
