#include "server/openai_request.h"

#include <cmath>
#include <limits>
#include <random>

namespace dsv4::server {
namespace {

// Reads typed optional fields of one JSON object; the first problem is kept and later reads do nothing.
class FieldReader {
public:
    explicit FieldReader(const Json& obj) : obj_(obj) {}
    std::optional<ApiError> error;

    // The field's value, or nullptr when absent or JSON null (both mean "default").
    const Json* get(const char* key) const {
        auto it = obj_.find(key);
        if (it == obj_.end() || it->is_null()) return nullptr;
        return &*it;
    }
    void fail(const std::string& param, const std::string& message) {
        if (!error) error = bad_request("'" + param + "' " + message, param);
    }
    bool number(const char* key, float& out, double lo, double hi) {
        const Json* v = get(key);
        if (!v || error) return false;
        if (!v->is_number()) return fail(key, "must be a number"), false;
        const double d = v->get<double>();
        if (!std::isfinite(d) || d < lo || d > hi)
            return fail(key, "must be between " + fmt(lo) + " and " + fmt(hi)), false;
        out = float(d);
        return true;
    }
    bool integer(const char* key, int64_t& out, int64_t lo, int64_t hi) {
        const Json* v = get(key);
        if (!v || error) return false;
        int64_t x = 0;
        if (v->is_number_integer()) {
            if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
                return fail(key, "is too large"), false;
            x = v->get<int64_t>();
        } else if (v->is_number_float() && std::isfinite(v->get<double>()) &&
                   v->get<double>() == std::floor(v->get<double>()) && std::fabs(v->get<double>()) < 9e18) {
            x = int64_t(v->get<double>());
        } else {
            return fail(key, "must be an integer"), false;
        }
        if (x < lo || x > hi) return fail(key, "must be between " + std::to_string(lo) + " and " + std::to_string(hi)), false;
        out = x;
        return true;
    }
    bool boolean(const char* key, bool& out) {
        const Json* v = get(key);
        if (!v || error) return false;
        if (!v->is_boolean()) return fail(key, "must be true or false"), false;
        out = v->get<bool>();
        return true;
    }

private:
    static std::string fmt(double d) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", d);
        return buf;
    }
    const Json& obj_;
};

// OpenAI's logit_bias: {"token id": bias in [-100, 100], ...}, ids as decimal strings below `vocab`, each once.
void read_logit_bias(FieldReader& r, const Json& bias, int32_t vocab, std::vector<TokenBias>& out) {
    if (!bias.is_object() || bias.size() > kMaxLogitBias) {
        r.fail("logit_bias", "must be an object of at most " + std::to_string(kMaxLogitBias) + " token ids");
        return;
    }
    out.clear();
    for (auto it = bias.begin(); it != bias.end(); ++it) {
        const std::string& key = it.key();
        int64_t id = 0;
        bool digits = !key.empty() && key.size() <= 10;
        for (const char c : key) {
            digits = digits && c >= '0' && c <= '9';
            if (digits) id = id * 10 + (c - '0');
        }
        if (!digits || id >= vocab) {
            r.fail("logit_bias", "keys must be token ids in [0, " + std::to_string(vocab) + ")");
            return;
        }
        const Json& v = it.value();
        if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < -100 || v.get<double>() > 100) {
            r.fail("logit_bias", "values must be numbers between -100 and 100 (token " + key + ")");
            return;
        }
        for (const TokenBias& b : out)
            if (b.token == int32_t(id)) {
                r.fail("logit_bias", "names token " + std::to_string(id) + " twice");
                return;
            }
        out.push_back({int32_t(id), float(v.get<double>())});
    }
}

// Fields shared by both routes: sampling, limits, stop, n (choices), stream, logit bias (ids below `vocab`).
void read_common(FieldReader& r, ParsedRequest& p, int32_t vocab) {
    SamplingParams& s = p.gen.options.sampling;
    if (const Json* m = r.get("model")) {
        if (!m->is_string()) r.fail("model", "must be a string");
        else p.model = m->get<std::string>();
    }
    int64_t n = 1;
    if (r.integer("n", n, 1, kMaxChoices)) p.choices = int(n);
    r.boolean("stream", p.stream);
    if (const Json* so = r.get("stream_options")) {
        if (!so->is_object()) r.fail("stream_options", "must be an object");
        else {
            FieldReader sr(*so);
            sr.boolean("include_usage", p.include_usage);
            if (sr.error && !r.error) r.error = bad_request("'stream_options." + sr.error->param + "' must be true or false",
                                                           "stream_options." + sr.error->param);
        }
    }
    r.number("temperature", s.temperature, 0.0, 2.0);
    r.number("top_p", s.top_p, 1e-9, 1.0);
    int64_t top_k = 0;
    if (r.integer("top_k", top_k, 0, 1 << 30)) s.top_k = int32_t(top_k);
    r.number("min_p", s.min_p, 0.0, 1.0);
    r.number("presence_penalty", s.presence_penalty, -2.0, 2.0);
    r.number("frequency_penalty", s.frequency_penalty, -2.0, 2.0);
    r.number("repetition_penalty", s.repetition_penalty, 1e-3, 10.0);
    int64_t seed = 0;
    if (r.integer("seed", seed, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()))
        s.seed = uint64_t(seed);
    else
        s.seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
    int64_t max_tokens = 0;
    if (r.integer("max_tokens", max_tokens, 1, std::numeric_limits<int32_t>::max())) p.max_tokens_given = true;
    if (r.integer("max_completion_tokens", max_tokens, 1, std::numeric_limits<int32_t>::max())) p.max_tokens_given = true;
    p.gen.options.max_tokens = p.max_tokens_given ? max_tokens : std::numeric_limits<int32_t>::max();
    if (const Json* stop = r.get("stop")) {
        std::vector<std::string> list;
        if (stop->is_string()) {
            list.push_back(stop->get<std::string>());
        } else if (stop->is_array() && stop->size() <= 16) {
            for (const auto& e : *stop) {
                if (!e.is_string()) {
                    r.fail("stop", "must be a string or a list of up to 16 strings");
                    break;
                }
                list.push_back(e.get<std::string>());
            }
        } else {
            r.fail("stop", "must be a string or a list of up to 16 strings");
        }
        for (const auto& x : list)
            if (x.empty() || x.size() > 1024) r.fail("stop", "strings must hold 1 to 1024 bytes");
        p.gen.options.stop = std::move(list);
    }
    if (const Json* bias = r.get("logit_bias")) read_logit_bias(r, *bias, vocab, s.logit_bias);
    if (const Json* bo = r.get("best_of"))
        if (!bo->is_number_integer() || bo->get<int64_t>() != 1) r.fail("best_of", "must be 1");
}

ApiResult<std::vector<int32_t>> encode_prompt(const std::string& text, const Tokenizer& tok) {
    std::vector<int32_t> ids = tok.encode(text);
    if (ids.empty()) return bad_request("the prompt is empty", "prompt");
    return ids;
}

}  // namespace

ApiResult<Json> parse_body(const std::string& body) {
    Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded())
        return bad_request("the request body is not valid JSON (UTF-8 text expected)", "", "invalid_json");
    if (!j.is_object()) return bad_request("the request body must be a JSON object", "", "invalid_json");
    return j;
}

ApiResult<std::string> render_chat_prompt(const Json& body) {
    FieldReader r(body);
    const Json* messages = r.get("messages");
    if (!messages) return bad_request("'messages' is required", "messages");
    if (!messages->is_array() || messages->empty())
        return bad_request("'messages' must be a non-empty list of messages", "messages");
    Json msgs = *messages;
    for (size_t i = 0; i < msgs.size(); ++i) {
        const std::string at = "messages[" + std::to_string(i) + "]";
        if (!msgs[i].is_object()) return bad_request("'" + at + "' must be an object", at);
        auto role = msgs[i].find("role");
        if (role == msgs[i].end() || !role->is_string()) return bad_request("'" + at + ".role' must be a string", at + ".role");
        static const char* kRoles[] = {"system", "user", "assistant", "tool", "developer"};
        bool known = false;
        for (const char* k : kRoles) known |= *role == k;
        if (!known)
            return bad_request("'" + at + ".role' is '" + role->get<std::string>() +
                                   "'; expected system, user, assistant, tool or developer",
                               at + ".role");
    }

    chat::EncodeOptions opt;
    bool thinking = false;
    std::string effort;
    if (const Json* kw = r.get("chat_template_kwargs")) {
        if (!kw->is_object()) return bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
        FieldReader k(*kw);
        k.boolean("thinking", thinking);
        k.boolean("enable_thinking", thinking);
        if (const Json* e = k.get("reasoning_effort")) {
            if (!e->is_string()) k.fail("reasoning_effort", "must be a string");
            else effort = e->get<std::string>();
        }
        if (k.error)
            return bad_request("'chat_template_kwargs." + k.error->param + "' has the wrong type",
                               "chat_template_kwargs." + k.error->param);
    }
    if (const Json* t = r.get("thinking")) {  // DeepSeek API style: {"type": "enabled" | "disabled"}
        auto type = t->is_object() ? t->find("type") : t->end();
        if (!t->is_object() || type == t->end() || !type->is_string() || (*type != "enabled" && *type != "disabled"))
            return bad_request("'thinking' must be {\"type\": \"enabled\"} or {\"type\": \"disabled\"}", "thinking");
        thinking = *type == "enabled";
    }
    if (const Json* e = r.get("reasoning_effort")) {
        if (!e->is_string()) return bad_request("'reasoning_effort' must be a string", "reasoning_effort");
        effort = e->get<std::string>();
    }
    if (effort == "max") opt.reasoning_effort = chat::ReasoningEffort::kMax;
    else if (effort == "high") opt.reasoning_effort = chat::ReasoningEffort::kHigh;
    else if (!effort.empty() && effort != "low" && effort != "medium" && effort != "none")
        return bad_request("'reasoning_effort' is '" + effort + "'; expected low, medium, high or max",
                           "reasoning_effort");
    opt.thinking_mode = thinking ? chat::ThinkingMode::kThinking : chat::ThinkingMode::kChat;

    // Tools (and a structured response format) travel in the system message, as DeepSeek's encoder expects.
    bool use_tools = false;
    const Json* tools = r.get("tools");
    if (tools) {
        if (!tools->is_array()) return bad_request("'tools' must be a list", "tools");
        for (size_t i = 0; i < tools->size(); ++i) {
            const Json& t = (*tools)[i];
            const std::string at = "tools[" + std::to_string(i) + "]";
            auto fn = t.is_object() ? t.find("function") : t.end();
            if (!t.is_object() || (t.contains("type") && t["type"] != "function") || fn == t.end() ||
                !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
                return bad_request("'" + at + "' must be {\"type\": \"function\", \"function\": {\"name\": ...}}", at);
        }
        use_tools = !tools->empty();
    }
    if (const Json* choice = r.get("tool_choice")) {
        // Accepted forms; "required" and a named function also hold the reply to a tool call's opening
        // (parse_chat_request).
        const bool ok_string = choice->is_string() && (*choice == "none" || *choice == "auto" || *choice == "required");
        const bool ok_object = choice->is_object() && choice->contains("function") &&
                               (*choice)["function"].is_object() && (*choice)["function"].contains("name") &&
                               (*choice)["function"]["name"].is_string();
        if (!ok_string && !ok_object)
            return bad_request("'tool_choice' must be none, auto, required or {\"type\": \"function\", "
                               "\"function\": {\"name\": ...}}",
                               "tool_choice");
        if (*choice == "none") use_tools = false;
    }
    const Json* response_format = r.get("response_format");
    if (response_format && (!response_format->is_object() || !response_format->contains("type")))
        return bad_request("'response_format' must be an object with a 'type'", "response_format");
    const bool use_format = response_format && (*response_format)["type"] != "text";
    if (use_tools || use_format) {
        auto sys = msgs.begin();
        while (sys != msgs.end() && (*sys)["role"] != "system") ++sys;
        if (sys == msgs.end()) sys = msgs.insert(msgs.begin(), Json{{"role", "system"}, {"content", ""}});
        if (use_tools) (*sys)["tools"] = *tools;
        if (use_format) (*sys)["response_format"] = *response_format;
    }
    Result<std::string> text = chat::encode_messages(msgs, opt);
    if (!text.is_ok()) return bad_request(text.status().message(), "messages");
    return std::move(text).value();
}

ApiResult<ParsedRequest> parse_chat_request(const Json& body, const Tokenizer& tokenizer) {
    ParsedRequest p;
    p.chat = true;
    FieldReader r(body);
    read_common(r, p, tokenizer.vocab_size());
    r.boolean("logprobs", p.gen.logprobs);
    int64_t top = 0;
    if (r.integer("top_logprobs", top, 0, kMaxTopLogprobs)) {
        if (!p.gen.logprobs && top > 0) r.fail("top_logprobs", "needs \"logprobs\": true");
        p.gen.options.sampling.top_logprobs = int32_t(top);
    }
    if (r.error) return *r.error;
    auto prompt = render_chat_prompt(body);
    if (auto* e = std::get_if<ApiError>(&prompt)) return *e;
    const std::string& text = std::get<std::string>(prompt);
    p.gen.options.starts_in_reasoning = text.size() >= chat::kThinkStart.size() &&
                                        text.compare(text.size() - chat::kThinkStart.size(), std::string::npos,
                                                     chat::kThinkStart) == 0;
    p.tools_given = body.contains("tools") && body["tools"].is_array() && !body["tools"].empty();
    // response_format json_object / json_schema: the reply's content is one JSON object, by constrained decoding
    // (a schema is not enforced: it reaches the model in the system message, as DeepSeek's encoder writes it)
    if (const auto rf = body.find("response_format"); rf != body.end() && rf->is_object()) {
        const auto type = rf->find("type");
        p.gen.options.json_object = type != rf->end() && (*type == "json_object" || *type == "json_schema");
    }
    // tool_choice "required" or a named function: the reply opens with a tool call, by constrained decoding of the
    // opening (the arguments are the model's)
    if (const auto tc = body.find("tool_choice"); tc != body.end() && (*tc == "required" || tc->is_object())) {
        const std::string name = tc->is_object() ? tc->at("function").at("name").get<std::string>() : "";
        if (!p.tools_given)
            return bad_request("'tool_choice' asks for a tool call but no 'tools' are given", "tool_choice");
        if (!name.empty()) {
            bool known = false;
            for (const Json& t : body.at("tools")) known = known || t.at("function").at("name") == name;
            if (!known)
                return bad_request("'tool_choice' names function '" + name + "', which is not in 'tools'",
                                   "tool_choice");
        }
        if (p.gen.options.json_object)
            return bad_request("'tool_choice' asks for a tool call, which a JSON 'response_format' rules out",
                               "tool_choice");
        p.gen.options.reply_prefix = chat::tool_call_opening(name);
    }
    auto ids = encode_prompt(text, tokenizer);
    if (auto* e = std::get_if<ApiError>(&ids)) return *e;
    p.gen.prompt = std::move(std::get<std::vector<int32_t>>(ids));
    return p;
}

ApiResult<ParsedRequest> parse_completion_request(const Json& body, const Tokenizer& tokenizer) {
    ParsedRequest p;
    p.gen.options.parse_reply = false;  // raw text: no reasoning / tool-call split
    FieldReader r(body);
    read_common(r, p, tokenizer.vocab_size());
    int64_t lp = 0;
    if (r.integer("logprobs", lp, 0, 5)) {
        p.legacy_logprobs = int(lp);
        p.gen.logprobs = true;
        p.gen.options.sampling.top_logprobs = int32_t(lp);
    }
    bool echo = false;
    if (r.boolean("echo", echo) && echo) r.fail("echo", "is not supported");
    if (r.get("suffix")) r.fail("suffix", "is not supported");
    if (r.error) return *r.error;
    const Json* prompt = r.get("prompt");
    if (!prompt) return bad_request("'prompt' is required", "prompt");
    const Json* single = prompt;
    if (prompt->is_array() && prompt->size() == 1 && ((*prompt)[0].is_string() || (*prompt)[0].is_array()))
        single = &(*prompt)[0];
    if (single->is_string()) {
        auto ids = encode_prompt(single->get<std::string>(), tokenizer);
        if (auto* e = std::get_if<ApiError>(&ids)) return *e;
        p.gen.prompt = std::move(std::get<std::vector<int32_t>>(ids));
        return p;
    }
    if (!single->is_array() || single->empty())
        return bad_request("'prompt' must be a string, a list of token ids or a one-element list of either", "prompt");
    for (const auto& v : *single) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= tokenizer.vocab_size())
            return bad_request("'prompt' token ids must be integers in [0, " + std::to_string(tokenizer.vocab_size()) +
                                   "); a batch of prompts is not supported",
                               "prompt");
        p.gen.prompt.push_back(int32_t(v.get<int64_t>()));
    }
    return p;
}

}  // namespace dsv4::server
