// OpenAI response objects for one request: the whole response (non-streaming) or its SSE chunks. Chat replies were
// split by the generation's reply parser into reasoning_content, content and DSML tool calls: streamed, each
// token's events become deltas (tool calls as a name, then argument deltas); whole, the parsed reply is used.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dsv4/chat.h"
#include "dsv4/tokenizer.h"
#include "server/openai_request.h"
#include "server/scheduler.h"

namespace dsv4::server {

struct Usage {
    int64_t prompt_tokens = 0;
    int64_t cached_tokens = 0;
    int64_t completion_tokens = 0;
};
Json usage_json(const Usage& u);

// The whole response of a request with several choices: the first choice's response with the others' `choices`
// entries appended in order and `usage` set to the request's total.
Json merge_choices(std::vector<Json> responses, const Usage& total);

class ResponseBuilder {
public:
    // `choice`: this builder's index among the request's choices ("n"); its chunks and response carry it.
    ResponseBuilder(const ParsedRequest& request, const Tokenizer& tokenizer, std::string id, std::string model,
                    int choice = 0);

    // Streaming: the chunks for the first event (chat: the assistant role delta).
    void begin(std::vector<Json>& chunks);
    // Streaming: chunks for newly generated tokens.
    void add(const std::vector<TokenOutput>& tokens, std::vector<Json>& chunks);
    // Streaming: the chunk with finish_reason.
    void end(FinishReason reason, std::vector<Json>& chunks);
    // Streaming: the chunk with the usage and no choices, the request's last (stream_options.include_usage).
    Json usage_chunk(const Usage& usage) const;

    // Non-streaming: record tokens, then build the whole response (`reply`: the parsed chat reply).
    void collect(const std::vector<TokenOutput>& tokens);
    Json response(FinishReason reason, const Usage& usage, const chat::ParsedReply& reply);

private:
    Json envelope(const char* object, Json choice) const;  // id, object, created, model, choices: [choice]
    Json chunk(Json choice) const;
    Json logprob_entry(const TokenOutput& t) const;        // chat format
    Json legacy_logprobs(const std::vector<TokenOutput>& tokens);  // completions format
    void add_reply_events(const std::vector<chat::ReplyEvent>& events, std::vector<Json>& chunks);
    std::string tool_call_id(int index) const;
    const char* finish_name(FinishReason reason) const;

    const ParsedRequest& request_;
    const Tokenizer& tokenizer_;
    std::string id_;
    std::string model_;
    int choice_;
    int64_t created_;
    std::string text_;                 // completions: all text so far
    std::vector<TokenOutput> tokens_;  // non-streaming: every token with logprob data
    size_t text_offset_ = 0;           // completions logprobs text_offset
    bool saw_tool_call_ = false;
};

}  // namespace dsv4::server
