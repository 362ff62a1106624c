// Fuzz entry point: the OpenAI request parsing of the server, without sockets: body text -> parse_body ->
// parse_chat_request and parse_completion_request (the tokenizer is the real V4 one in the fuzzer). Every outcome is
// a ParsedRequest or an ApiError with a message; a parsed request has a prompt of in-vocabulary ids.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <variant>

#include "fuzz_check.h"
#include "server/openai_request.h"

namespace dsv4::fuzz {

inline void check_parsed_request(const server::ApiResult<server::ParsedRequest>& r, const Tokenizer& tokenizer) {
    if (const auto* e = std::get_if<server::ApiError>(&r)) {
        check(e->status == 400 && !e->message.empty(), "an ApiError without a message");
        (void)server::dump_json(server::error_json(*e));
        return;
    }
    const server::ParsedRequest& p = std::get<server::ParsedRequest>(r);
    check(!p.gen.prompt.empty(), "a parsed request with an empty prompt");
    for (int32_t id : p.gen.prompt) check(id >= 0 && id < tokenizer.vocab_size(), "prompt id outside the vocabulary");
}

inline void openai_request_one_input(const Tokenizer& tokenizer, std::span<const uint8_t> input) {
    const std::string body(reinterpret_cast<const char*>(input.data()), input.size());
    auto parsed = server::parse_body(body);
    if (const auto* e = std::get_if<server::ApiError>(&parsed)) {
        check(!e->message.empty(), "an ApiError without a message");
        return;
    }
    const server::Json& json = std::get<server::Json>(parsed);
    check_parsed_request(server::parse_chat_request(json, tokenizer), tokenizer);
    check_parsed_request(server::parse_completion_request(json, tokenizer), tokenizer);
}

}  // namespace dsv4::fuzz
