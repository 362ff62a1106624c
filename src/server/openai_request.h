// Request bodies of the OpenAI-compatible routes -> what the scheduler runs. Every malformed or unsupported field
// is an ApiError naming the field; nothing here touches the filesystem (no request field is a path).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "dsv4/chat.h"
#include "dsv4/tokenizer.h"
#include "server/api_error.h"
#include "server/scheduler.h"

namespace dsv4::server {

using Json = chat::Json;  // insertion-ordered: message and tool-schema key order reaches the prompt

struct ParsedRequest {
    bool chat = false;
    bool stream = false;
    bool include_usage = true;       // stream_options.include_usage (default on: a final usage chunk)
    std::string model;
    GenerationParams gen;            // prompt ids, sampling, limits (deadline set by the caller)
    bool max_tokens_given = false;
    bool tools_given = false;
    int legacy_logprobs = -1;        // /v1/completions "logprobs": N alternatives (-1: off)
    int choices = 1;                 // "n": choice i samples with the seed + i
};
inline constexpr int kMaxChoices = 16;  // "n" at most

template <typename T>
using ApiResult = std::variant<T, ApiError>;

// Parses the body text (object, valid UTF-8 JSON). Errors: 400 with the field's name.
ApiResult<Json> parse_body(const std::string& body);

// The chat prompt text (also the /apply-template answer): messages, tools / tool_choice, response_format and the
// thinking switches (chat_template_kwargs.thinking / top-level thinking / reasoning_effort).
ApiResult<std::string> render_chat_prompt(const Json& body);

// /v1/chat/completions and /v1/completions: everything but the deadline. `vocab` bounds token-id prompts.
ApiResult<ParsedRequest> parse_chat_request(const Json& body, const Tokenizer& tokenizer);
ApiResult<ParsedRequest> parse_completion_request(const Json& body, const Tokenizer& tokenizer);

}  // namespace dsv4::server
