#include "server/openai_response.h"

#include <chrono>

namespace dsv4::server {

Json merge_choices(std::vector<Json> responses, const Usage& total) {
    Json merged = std::move(responses.front());
    for (size_t i = 1; i < responses.size(); ++i)
        for (Json& c : responses[i]["choices"]) merged["choices"].push_back(std::move(c));
    merged["usage"] = usage_json(total);
    return merged;
}

Json usage_json(const Usage& u) {
    Json j;
    j["prompt_tokens"] = u.prompt_tokens;
    j["completion_tokens"] = u.completion_tokens;
    j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
    j["prompt_tokens_details"] = Json{{"cached_tokens", u.cached_tokens}};
    return j;
}

ResponseBuilder::ResponseBuilder(const ParsedRequest& request, const Tokenizer& tokenizer, std::string id,
                                 std::string model, int choice)
    : request_(request),
      tokenizer_(tokenizer),
      id_(std::move(id)),
      model_(std::move(model)),
      choice_(choice),
      created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                   .count()) {}

// call_<the response id's random part>_<tool index>, with the choice's index before the tool's past choice 0
std::string ResponseBuilder::tool_call_id(int index) const {
    std::string id = "call_" + id_.substr(id_.find('-') + 1) + "_";
    if (choice_ > 0) id += std::to_string(choice_) + "_";
    return id + std::to_string(index);
}

const char* ResponseBuilder::finish_name(FinishReason reason) const {
    if (reason == FinishReason::kLength) return "length";
    if (saw_tool_call_) return "tool_calls";
    return "stop";
}

Json ResponseBuilder::envelope(const char* object, Json choice) const {
    Json e;
    e["id"] = id_;
    e["object"] = object;
    e["created"] = created_;
    e["model"] = model_;
    e["choices"] = Json::array({std::move(choice)});
    return e;
}

Json ResponseBuilder::chunk(Json choice) const {
    return envelope(request_.chat ? "chat.completion.chunk" : "text_completion", std::move(choice));
}

Json ResponseBuilder::logprob_entry(const TokenOutput& t) const {
    auto entry = [&](int32_t id, float lp) {
        Result<std::string> bytes = tokenizer_.token_bytes(id);
        const std::string b = bytes.is_ok() ? *bytes : std::string();
        Json e;
        e["token"] = b;
        e["logprob"] = lp;
        Json arr = Json::array();
        for (unsigned char ch : b) arr.push_back(int(ch));
        e["bytes"] = std::move(arr);
        return e;
    };
    Json e = entry(t.token, t.logprob);
    Json top = Json::array();
    for (const auto& alt : t.top) top.push_back(entry(alt.token, alt.logprob));
    e["top_logprobs"] = std::move(top);
    return e;
}

Json ResponseBuilder::legacy_logprobs(const std::vector<TokenOutput>& tokens) {
    Json lp;
    lp["tokens"] = Json::array();
    lp["token_logprobs"] = Json::array();
    lp["top_logprobs"] = Json::array();
    lp["text_offset"] = Json::array();
    for (const auto& t : tokens) {
        if (t.token < 0) continue;
        Result<std::string> bytes = tokenizer_.token_bytes(t.token);
        lp["tokens"].push_back(bytes.is_ok() ? *bytes : std::string());
        lp["token_logprobs"].push_back(t.logprob);
        Json top = Json::object();
        for (const auto& alt : t.top) {
            Result<std::string> b = tokenizer_.token_bytes(alt.token);
            top[b.is_ok() ? *b : std::string()] = alt.logprob;
        }
        lp["top_logprobs"].push_back(std::move(top));
        lp["text_offset"].push_back(text_offset_);
        text_offset_ += bytes.is_ok() ? bytes->size() : 0;
    }
    return lp;
}

void ResponseBuilder::begin(std::vector<Json>& chunks) {
    if (!request_.chat) return;
    Json choice;
    choice["index"] = choice_;
    choice["delta"] = Json{{"role", "assistant"}, {"content", ""}};
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = nullptr;
    chunks.push_back(chunk(std::move(choice)));
}

void ResponseBuilder::add_reply_events(const std::vector<chat::ReplyEvent>& events, std::vector<Json>& chunks) {
    for (const auto& ev : events) {
        Json delta = Json::object();
        switch (ev.kind) {
            case chat::ReplyEvent::Kind::kReasoning: delta["reasoning_content"] = ev.text; break;
            case chat::ReplyEvent::Kind::kContent: delta["content"] = ev.text; break;
            case chat::ReplyEvent::Kind::kToolCallBegin: {
                saw_tool_call_ = true;
                Json call;
                call["index"] = ev.tool_index;
                call["id"] = tool_call_id(ev.tool_index);
                call["type"] = "function";
                call["function"] = Json{{"name", ev.text}, {"arguments", ""}};
                delta["tool_calls"] = Json::array({std::move(call)});
                break;
            }
            case chat::ReplyEvent::Kind::kToolCallArgs: {
                Json call;
                call["index"] = ev.tool_index;
                call["function"] = Json{{"arguments", ev.text}};
                delta["tool_calls"] = Json::array({std::move(call)});
                break;
            }
            case chat::ReplyEvent::Kind::kToolCallEnd: continue;
        }
        Json choice;
        choice["index"] = choice_;
        choice["delta"] = std::move(delta);
        choice["logprobs"] = nullptr;
        choice["finish_reason"] = nullptr;
        chunks.push_back(chunk(std::move(choice)));
    }
}

void ResponseBuilder::add(const std::vector<TokenOutput>& tokens, std::vector<Json>& chunks) {
    if (request_.chat) {
        for (const auto& t : tokens) add_reply_events(t.events, chunks);
        if (request_.gen.logprobs) {
            Json content = Json::array();
            for (const auto& t : tokens)
                if (t.token >= 0) content.push_back(logprob_entry(t));
            if (!content.empty()) {
                Json choice;
                choice["index"] = choice_;
                choice["delta"] = Json::object();
                choice["logprobs"] = Json{{"content", std::move(content)}};
                choice["finish_reason"] = nullptr;
                chunks.push_back(chunk(std::move(choice)));
            }
        }
        return;
    }
    std::string text;
    for (const auto& t : tokens) text += t.text;
    text_ += text;
    if (text.empty() && !request_.gen.logprobs) return;
    Json choice;
    choice["index"] = choice_;
    choice["text"] = text;
    choice["logprobs"] = request_.gen.logprobs ? legacy_logprobs(tokens) : Json(nullptr);
    choice["finish_reason"] = nullptr;
    chunks.push_back(chunk(std::move(choice)));
}

void ResponseBuilder::end(FinishReason reason, std::vector<Json>& chunks) {
    Json choice;
    choice["index"] = choice_;
    if (request_.chat) {
        choice["delta"] = Json::object();  // the reply's last events came with its last token
    } else {
        choice["text"] = "";
    }
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = finish_name(reason);
    chunks.push_back(chunk(std::move(choice)));
}

Json ResponseBuilder::usage_chunk(const Usage& usage) const {
    Json last = chunk(Json());
    last["choices"] = Json::array();
    last["usage"] = usage_json(usage);
    return last;
}

void ResponseBuilder::collect(const std::vector<TokenOutput>& tokens) {
    for (const auto& t : tokens) {
        text_ += t.text;
        if (request_.gen.logprobs && t.token >= 0) tokens_.push_back(t);
    }
}

Json ResponseBuilder::response(FinishReason reason, const Usage& usage, const chat::ParsedReply& reply) {
    Json choice;
    choice["index"] = choice_;
    if (request_.chat) {
        saw_tool_call_ = !reply.tool_calls.empty();
        Json msg;
        msg["role"] = "assistant";
        msg["content"] = reply.content.empty() && saw_tool_call_ ? Json(nullptr) : Json(reply.content);
        if (request_.gen.options.starts_in_reasoning || !reply.reasoning.empty()) msg["reasoning_content"] = reply.reasoning;
        if (saw_tool_call_) {
            Json calls = Json::array();
            for (size_t i = 0; i < reply.tool_calls.size(); ++i) {
                Json call;
                call["id"] = tool_call_id(int(i));
                call["type"] = "function";
                call["function"] = Json{{"name", reply.tool_calls[i].name}, {"arguments", reply.tool_calls[i].arguments}};
                calls.push_back(std::move(call));
            }
            msg["tool_calls"] = std::move(calls);
        }
        choice["message"] = std::move(msg);
        if (request_.gen.logprobs) {
            Json content = Json::array();
            for (const auto& t : tokens_) content.push_back(logprob_entry(t));
            choice["logprobs"] = Json{{"content", std::move(content)}};
        } else {
            choice["logprobs"] = nullptr;
        }
    } else {
        choice["text"] = text_;
        choice["logprobs"] = request_.gen.logprobs ? legacy_logprobs(tokens_) : Json(nullptr);
    }
    choice["finish_reason"] = finish_name(reason);
    Json r = envelope(request_.chat ? "chat.completion" : "text_completion", std::move(choice));
    r["usage"] = usage_json(usage);
    return r;
}

}  // namespace dsv4::server
