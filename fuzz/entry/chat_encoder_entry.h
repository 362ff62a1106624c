// Fuzz entry point: the chat prompt encoder on arbitrary request JSON. An object is read as the apply-template
// document {"messages": [...], "kwargs": {...}} (parse_template_request reads the kwargs); an array is taken as the
// messages and rendered in both thinking modes. Every outcome must be a Result: no exception, no crash.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "dsv4/chat.h"

namespace dsv4::fuzz {

inline void chat_encoder_one_input(std::span<const uint8_t> input) {
    const std::string_view text(reinterpret_cast<const char*>(input.data()), input.size());
    const chat::Json doc = chat::Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (doc.is_array()) {
        for (chat::ThinkingMode mode : {chat::ThinkingMode::kChat, chat::ThinkingMode::kThinking}) {
            chat::EncodeOptions options;
            options.thinking_mode = mode;
            options.reasoning_effort = chat::ReasoningEffort::kMax;
            auto prompt = chat::encode_messages(doc, options);
            if (!prompt.is_ok()) check(!prompt.status().message().empty(), "encoder error without a message");
        }
        return;
    }
    auto request = chat::parse_template_request(text, "fuzz.json");
    if (!request.is_ok()) {
        check(request.status().message().find("fuzz.json") != std::string::npos, "error does not name the source");
        return;
    }
    auto prompt = chat::encode_messages(request.value().messages, request.value().options);
    if (!prompt.is_ok()) check(!prompt.status().message().empty(), "encoder error without a message");
}

}  // namespace dsv4::fuzz
