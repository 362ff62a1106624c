// DeepSeek-V4 prompt encoder: the semantics of the official encoding/encoding_dsv4.py encode_messages() (read for
// its rules; the tests/data/chat_golden cases rendered by it are the specification this file is held to).
//
// Pipeline: merge tool results (and consecutive user messages) into user turns -> sort tool results into the call
// order of the latest assistant with tool calls -> optionally drop history reasoning / developer turns -> render
// each message and the transition after it.
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "chat/python_json.h"
#include "dsv4/chat.h"

namespace dsv4::chat {
namespace {

constexpr std::string_view kReasoningEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

constexpr std::string_view kResponseFormatHeader =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

// The tools section; every "｜DSML｜", "<think>" and "</think>" in it is literal text of the official template.
constexpr std::string_view kToolsHeader =
    "## Tools\n"
    "\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "
    "\"<｜DSML｜tool_calls>\" block like the following:\n"
    "\n"
    "<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>\n"
    "\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, "
    "booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n"
    "\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
    "<think>...</think> BEFORE any tool calls or final response.\n"
    "\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n"
    "\n"
    "### Available Tool Schemas\n"
    "\n";
constexpr std::string_view kToolsFooter =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";

struct TaskToken {
    std::string_view name;
    std::string_view token;
};
constexpr TaskToken kTaskTokens[] = {
    {"action", "<｜action｜>"},       {"query", "<｜query｜>"}, {"authority", "<｜authority｜>"},
    {"domain", "<｜domain｜>"},       {"title", "<｜title｜>"}, {"read_url", "<｜read_url｜>"},
};

// Python truthiness of a JSON value (`if x:`).
bool truthy(const Json* v) {
    if (v == nullptr) return false;
    switch (v->type()) {
        case Json::value_t::null: return false;
        case Json::value_t::boolean: return v->get<bool>();
        case Json::value_t::number_integer: return v->get<int64_t>() != 0;
        case Json::value_t::number_unsigned: return v->get<uint64_t>() != 0;
        case Json::value_t::number_float: return v->get<double>() != 0.0;
        case Json::value_t::string: return !v->get_ref<const std::string&>().empty();  // json::empty() is false
        case Json::value_t::array:
        case Json::value_t::object: return !v->empty();
        default: return false;
    }
}

const Json* field(const Json& msg, const char* key) {
    auto it = msg.find(key);
    return it == msg.end() ? nullptr : &*it;
}

// A piece of a user turn after merging: text, or a rendered <tool_result> block with the id it answers.
struct Block {
    bool is_tool_result = false;
    std::string text;                    // text, or the tool result's rendered content
    std::optional<std::string> tool_id;  // tool_call_id (string ids only; anything else sorts as position 0)
};

struct Message {
    std::string role;
    std::string origin;            // "messages[3]" / "context[0]": where the message came from, for errors
    const Json* source = nullptr;  // the original message (fields other than user content)
    bool has_blocks = false;       // a merged user turn
    std::vector<Block> blocks;
    const Json* task = nullptr;    // the task value, nullptr when absent or null
    bool reasoning_dropped = false;
};

std::string where(const std::string& list, size_t index) { return list + "[" + std::to_string(index) + "]"; }

// Text of a content value that the official encoder would format with str(): strings as is, null as "None".
Result<std::string> plain_text(const Json* v, const std::string& what, const char* if_absent) {
    if (v == nullptr) return std::string(if_absent);
    if (v->is_string()) return v->get<std::string>();
    if (v->is_null()) return std::string("None");
    return invalid_argument(what + " must be a string");
}

// A list of content parts ({"type": "text", "text": ...}, others shown as "[Unsupported <type>]") joined by "\n\n".
Result<std::string> join_content_parts(const Json& parts, const std::string& what) {
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i) {
        const Json& part = parts[i];
        if (!part.is_object()) return invalid_argument(where(what, i) + " must be an object");
        if (i) out += "\n\n";
        const Json* type = field(part, "type");
        if (type && type->is_string() && type->get<std::string>() == "text") {
            const Json* text = field(part, "text");
            if (text && !text->is_string()) return invalid_argument(where(what, i) + ".text must be a string");
            if (text) out += text->get<std::string>();
        } else {
            out += "[Unsupported ";
            out += (type == nullptr || type->is_null()) ? std::string("None")
                   : type->is_string()                  ? type->get<std::string>()
                                                        : python_json_dumps(*type);
            out += "]";
        }
    }
    return out;
}

bool is_known_role(const std::string& role) {
    return role == "system" || role == "user" || role == "assistant" || role == "tool" || role == "developer" ||
           role == "latest_reminder";
}

// Checks shapes and converts a message list; with `merge`, tool messages and consecutive user messages become
// merged user turns (the official merge_tool_messages).
Result<std::vector<Message>> to_messages(const Json& list, const std::string& list_name, bool merge) {
    if (!list.is_array()) return invalid_argument(list_name + " must be a JSON array of messages");
    std::vector<Message> out;
    for (size_t i = 0; i < list.size(); ++i) {
        const Json& msg = list[i];
        const std::string at = where(list_name, i);
        if (!msg.is_object()) return invalid_argument(at + " must be a JSON object");
        const Json* role_v = field(msg, "role");
        if (role_v == nullptr || !role_v->is_string()) return invalid_argument(at + ".role must be a string");
        std::string role = role_v->get<std::string>();
        if (!is_known_role(role)) {
            return invalid_argument(at + ": unknown role '" + role +
                                    "' (expected system, user, assistant, tool, developer or latest_reminder)");
        }
        const Json* task = field(msg, "task");
        if (task && task->is_null()) task = nullptr;
        if (!merge || (role != "tool" && role != "user")) {
            out.push_back(Message{role, at, &msg, false, {}, task, false});
            continue;
        }
        Block block;
        const Json* content = field(msg, "content");
        if (role == "tool") {
            block.is_tool_result = true;
            if (content && content->is_array()) {
                DSV4_ASSIGN_OR_RETURN(block.text, join_content_parts(*content, at + ".content"));
            } else {
                DSV4_ASSIGN_OR_RETURN(block.text, plain_text(content, at + ".content", ""));
            }
            const Json* id = field(msg, "tool_call_id");
            if (id == nullptr) block.tool_id = std::string();
            else if (id->is_string()) block.tool_id = id->get<std::string>();
            if (!out.empty() && out.back().has_blocks) {
                out.back().blocks.push_back(std::move(block));
            } else {
                Message merged{"user", at, &msg, true, {}, nullptr, false};
                merged.blocks.push_back(std::move(block));
                out.push_back(std::move(merged));
            }
            continue;
        }
        // role == "user". Content parts (an OpenAI extension the official encoder does not handle) are joined
        // like tool-result parts; null content renders as empty text.
        if (content && content->is_array()) {
            DSV4_ASSIGN_OR_RETURN(block.text, join_content_parts(*content, at + ".content"));
        } else if (content && !content->is_null()) {
            if (!content->is_string()) return invalid_argument(at + ".content must be a string or a list of parts");
            block.text = content->get<std::string>();
        }
        if (!out.empty() && out.back().has_blocks && out.back().task == nullptr) {
            out.back().blocks.push_back(std::move(block));
        } else {
            Message merged{"user", at, &msg, true, {}, task, false};
            merged.blocks.push_back(std::move(block));
            out.push_back(std::move(merged));
        }
    }
    return out;
}

// sort_tool_results_by_call_order: tool-result blocks of a user turn follow the call order of the most recent
// assistant with tool calls (unknown ids count as 0, stable); text blocks keep their places.
void sort_tool_results(std::vector<Message*>& messages) {
    std::unordered_map<std::string, size_t> order;
    for (Message* m : messages) {
        if (m->role == "assistant") {
            const Json* calls = field(*m->source, "tool_calls");
            if (!truthy(calls) || !calls->is_array()) continue;
            order.clear();
            for (size_t i = 0; i < calls->size(); ++i) {
                const Json& call = (*calls)[i];
                if (!call.is_object()) continue;
                const Json* id = field(call, "id");
                if (!truthy(id)) {
                    const Json* fn = field(call, "function");
                    id = (fn && fn->is_object()) ? field(*fn, "id") : nullptr;
                }
                if (truthy(id) && id->is_string()) order[id->get<std::string>()] = i;
            }
        } else if (m->has_blocks) {
            std::vector<Block> results;
            for (const Block& b : m->blocks) {
                if (b.is_tool_result) results.push_back(b);
            }
            if (results.size() <= 1 || order.empty()) continue;
            auto key = [&](const Block& b) -> size_t {
                if (!b.tool_id) return 0;
                auto it = order.find(*b.tool_id);
                return it == order.end() ? 0 : it->second;
            };
            std::stable_sort(results.begin(), results.end(),
                             [&](const Block& a, const Block& b) { return key(a) < key(b); });
            size_t next = 0;
            for (Block& b : m->blocks) {
                if (b.is_tool_result) b = results[next++];
            }
        }
    }
}

int last_user_index(const std::vector<Message>& messages) {
    for (int i = static_cast<int>(messages.size()) - 1; i >= 0; --i) {
        if (messages[i].role == "user" || messages[i].role == "developer") return i;
    }
    return -1;
}

// _drop_thinking_messages: before the last user/developer turn, assistants lose their reasoning and developer
// turns disappear.
std::vector<Message> drop_thinking(const std::vector<Message>& messages) {
    int last_user = last_user_index(messages);
    std::vector<Message> out;
    for (int i = 0; i < static_cast<int>(messages.size()); ++i) {
        const Message& m = messages[i];
        bool keep_role = m.role == "user" || m.role == "system" || m.role == "tool" || m.role == "latest_reminder";
        if (keep_role || i >= last_user) {
            out.push_back(m);
        } else if (m.role == "assistant") {
            out.push_back(m);
            out.back().reasoning_dropped = true;
        }
    }
    return out;
}

Status append_tools(std::string& out, const Json& tools, const std::string& at) {
    if (!tools.is_array()) return invalid_argument(at + ".tools must be a list");
    out += "\n\n";
    out += kToolsHeader;
    for (size_t i = 0; i < tools.size(); ++i) {
        const Json* fn = tools[i].is_object() ? field(tools[i], "function") : nullptr;
        if (fn == nullptr) return invalid_argument(where(at + ".tools", i) + " must be {\"type\": \"function\", "
                                                   "\"function\": {...}}");
        if (i) out += "\n";
        append_python_json(out, *fn);
    }
    out += kToolsFooter;
    return Status::ok();
}

void append_response_format(std::string& out, const Json& response_format) {
    out += "\n\n";
    out += kResponseFormatHeader;
    append_python_json(out, response_format);
}

// encode_arguments_to_dsml: arguments parsed as JSON (Python json.loads); string values raw with string="true",
// others as Python JSON with string="false"; arguments that do not parse become one parameter "arguments".
Status append_dsml_parameters(std::string& out, const Json& arguments, const std::string& at) {
    auto param = [&](std::string_view key, bool is_string) {
        out += "<｜DSML｜parameter name=\"";
        out += key;
        out += is_string ? "\" string=\"true\">" : "\" string=\"false\">";
    };
    constexpr std::string_view kParamEnd = "</｜DSML｜parameter>";
    if (arguments.is_string()) {
        const std::string& text = arguments.get_ref<const std::string&>();
        auto parsed = python_json_loads(text);
        if (parsed.is_ok()) {
            if (parsed->kind != PyJson::Kind::kObject) {
                return invalid_argument(at + ".function.arguments is JSON but not an object: " + text);
            }
            bool first = true;
            for (const auto& [key, value] : parsed->members) {
                if (!first) out += "\n";
                first = false;
                bool is_string = value.kind == PyJson::Kind::kString;
                param(key, is_string);
                if (is_string) out += value.text;
                else append_python_json(out, value);
                out += kParamEnd;
            }
            return Status::ok();
        }
        param("arguments", true);
        out += text;
        out += kParamEnd;
        return Status::ok();
    }
    param("arguments", false);
    append_python_json(out, arguments);
    out += kParamEnd;
    return Status::ok();
}

// An assistant message's tool calls: after its content, the block, then each invoke by name.
constexpr std::string_view kToolCallsOpen = "\n\n<｜DSML｜tool_calls>\n";
constexpr std::string_view kInvokeOpen = "<｜DSML｜invoke name=\"";

Status append_tool_calls(std::string& out, const Json& calls, const std::string& at) {
    if (!calls.is_array()) return invalid_argument(at + ".tool_calls must be a list");
    out += kToolCallsOpen;
    for (size_t i = 0; i < calls.size(); ++i) {
        const std::string call_at = where(at + ".tool_calls", i);
        const Json* fn = calls[i].is_object() ? field(calls[i], "function") : nullptr;
        if (fn == nullptr || !fn->is_object()) return invalid_argument(call_at + ".function must be an object");
        const Json* name = field(*fn, "name");
        const Json* arguments = field(*fn, "arguments");
        if (name == nullptr) return invalid_argument(call_at + ".function.name is missing");
        if (arguments == nullptr) return invalid_argument(call_at + ".function.arguments is missing");
        if (i) out += "\n";
        out += kInvokeOpen;
        DSV4_ASSIGN_OR_RETURN(std::string name_text, plain_text(name, call_at + ".function.name", ""));
        out += name_text;
        out += "\">\n";
        DSV4_RETURN_IF_ERROR(append_dsml_parameters(out, *arguments, call_at));
        out += "\n</｜DSML｜invoke>";
    }
    out += "\n</｜DSML｜tool_calls>";
    return Status::ok();
}

// render_message: one message plus the transition after it.
Status render(std::string& out, size_t index, const std::vector<Message>& messages, const EncodeOptions& opt,
              bool drop) {
    const Message& m = messages[index];
    const bool thinking = opt.thinking_mode == ThinkingMode::kThinking;
    const int last_user = last_user_index(messages);
    const std::string at = m.origin + " (" + m.role + ")";
    const Json& src = *m.source;

    if (index == 0 && thinking && opt.reasoning_effort == ReasoningEffort::kMax) out += kReasoningEffortMax;

    if (m.role == "system" || m.role == "developer") {
        const Json* content = field(src, "content");
        std::string text;
        if (m.role == "developer") {
            if (!truthy(content) || !content->is_string()) {
                return invalid_argument(at + ": content must be a non-empty string");
            }
            out += kUserToken;
        }
        if (truthy(content)) {
            if (!content->is_string()) return invalid_argument(at + ": content must be a string");
            out += content->get<std::string>();
        }
        const Json* tools = field(src, "tools");
        if (truthy(tools)) DSV4_RETURN_IF_ERROR(append_tools(out, *tools, at));
        const Json* response_format = field(src, "response_format");
        if (truthy(response_format)) append_response_format(out, *response_format);
    } else if (m.role == "user") {
        out += kUserToken;
        for (size_t i = 0; i < m.blocks.size(); ++i) {
            if (i) out += "\n\n";
            if (m.blocks[i].is_tool_result) out += "<tool_result>";
            out += m.blocks[i].text;
            if (m.blocks[i].is_tool_result) out += "</tool_result>";
        }
    } else if (m.role == "latest_reminder") {
        DSV4_ASSIGN_OR_RETURN(std::string text, plain_text(field(src, "content"), at + ": content", "None"));
        out += kLatestReminderToken;
        out += text;
    } else {  // assistant
        const Json* content = field(src, "content");
        const Json* reasoning = field(src, "reasoning_content");
        if (truthy(content) && !content->is_string()) return invalid_argument(at + ": content must be a string");
        if (truthy(reasoning) && !reasoning->is_string()) {
            return invalid_argument(at + ": reasoning_content must be a string");
        }
        bool prev_has_task = index > 0 && messages[index - 1].task != nullptr;
        if (thinking && !prev_has_task && (!drop || static_cast<int>(index) > last_user)) {
            if (truthy(reasoning) && !m.reasoning_dropped) out += reasoning->get<std::string>();
            out += kThinkEnd;
        }
        if (truthy(content)) out += content->get<std::string>();
        const Json* calls = field(src, "tool_calls");
        if (truthy(calls)) DSV4_RETURN_IF_ERROR(append_tool_calls(out, *calls, at));
        if (!truthy(field(src, "wo_eos"))) out += kEosToken;
    }

    // Transition: nothing when the next message is neither an assistant nor a latest_reminder.
    if (index + 1 < messages.size() && messages[index + 1].role != "assistant" &&
        messages[index + 1].role != "latest_reminder") {
        return Status::ok();
    }
    if (m.task != nullptr) {
        std::string_view token;
        std::string name = m.task->is_string() ? m.task->get<std::string>() : python_json_dumps(*m.task);
        for (const auto& t : kTaskTokens) {
            if (t.name == name) token = t.token;
        }
        if (token.empty()) {
            return invalid_argument(at + ": invalid task '" + name +
                                    "' (valid: action, query, authority, domain, title, read_url)");
        }
        if (name == "action") {
            out += kAssistantToken;
            out += thinking ? kThinkStart : kThinkEnd;
        }
        out += token;
    } else if (m.role == "user" || m.role == "developer") {
        out += kAssistantToken;
        bool open_thinking = thinking && (!drop || static_cast<int>(index) >= last_user);
        out += open_thinking ? kThinkStart : kThinkEnd;
    }
    return Status::ok();
}

}  // namespace

std::string tool_call_opening(std::string_view function_name) {
    std::string out = std::string(kToolCallsOpen) + std::string(kInvokeOpen);
    if (!function_name.empty()) out += std::string(function_name) + "\">\n";
    return out;
}

Result<std::string> encode_messages(const Json& messages, const EncodeOptions& options) {
    const bool has_context = options.context.is_array() && !options.context.empty();
    if (!options.context.is_null() && !options.context.is_array()) {
        return invalid_argument("context must be a JSON array of messages");
    }
    DSV4_ASSIGN_OR_RETURN(std::vector<Message> msgs, to_messages(messages, "messages", true));
    std::vector<Message> raw_context, context;
    if (has_context) {
        DSV4_ASSIGN_OR_RETURN(raw_context, to_messages(options.context, "context", false));
        DSV4_ASSIGN_OR_RETURN(context, to_messages(options.context, "context", true));
    }
    // The new messages are sorted against the raw (unmerged) context, as the official encoder does.
    {
        std::vector<Message*> view;
        for (auto& m : raw_context) view.push_back(&m);
        for (auto& m : msgs) view.push_back(&m);
        sort_tool_results(view);
        std::vector<Message*> context_view;
        for (auto& m : context) context_view.push_back(&m);
        sort_tool_results(context_view);
    }
    std::vector<Message> full = context;
    full.insert(full.end(), msgs.begin(), msgs.end());

    std::string prompt;
    if (options.add_default_bos_token && !has_context) prompt += kBosToken;

    bool drop = options.drop_thinking;
    for (const Message& m : full) {
        if (m.role != "user" && truthy(field(*m.source, "tools"))) drop = false;  // user tools are lost in merging
    }
    size_t num_to_render = msgs.size();
    size_t context_len = context.size();
    if (options.thinking_mode == ThinkingMode::kThinking && drop) {
        full = drop_thinking(full);
        num_to_render = full.size() - drop_thinking(context).size();
        context_len = full.size() - num_to_render;
    }
    for (size_t i = 0; i < num_to_render; ++i) {
        DSV4_RETURN_IF_ERROR(render(prompt, i + context_len, full, options, drop));
    }
    return prompt;
}

Result<EncodeOptions> encode_options_from_kwargs(const Json& kwargs) {
    if (!kwargs.is_object()) return invalid_argument("kwargs must be a JSON object");
    EncodeOptions opt;
    bool have_mode = false;
    for (const auto& [key, value] : kwargs.items()) {
        if (key == "thinking_mode") {
            std::string mode = value.is_string() ? value.get<std::string>() : "";
            if (mode == "chat") opt.thinking_mode = ThinkingMode::kChat;
            else if (mode == "thinking") opt.thinking_mode = ThinkingMode::kThinking;
            else return invalid_argument("kwargs.thinking_mode must be \"chat\" or \"thinking\", got " + value.dump());
            have_mode = true;
        } else if (key == "drop_thinking" || key == "add_default_bos_token") {
            if (!value.is_boolean()) return invalid_argument("kwargs." + key + " must be true or false");
            (key == "drop_thinking" ? opt.drop_thinking : opt.add_default_bos_token) = value.get<bool>();
        } else if (key == "reasoning_effort") {
            if (value.is_null()) opt.reasoning_effort = ReasoningEffort::kNone;
            else if (value == "high") opt.reasoning_effort = ReasoningEffort::kHigh;
            else if (value == "max") opt.reasoning_effort = ReasoningEffort::kMax;
            else return invalid_argument("kwargs.reasoning_effort must be null, \"high\" or \"max\", got " +
                                         value.dump());
        } else if (key == "context") {
            if (!value.is_null() && !value.is_array()) return invalid_argument("kwargs.context must be a list");
            opt.context = value.is_null() ? Json::array() : value;
        } else {
            return invalid_argument("kwargs: unknown key '" + key +
                                    "' (known: thinking_mode, drop_thinking, add_default_bos_token, "
                                    "reasoning_effort, context)");
        }
    }
    if (!have_mode) return invalid_argument("kwargs.thinking_mode is required (\"chat\" or \"thinking\")");
    return opt;
}

Result<TemplateRequest> parse_template_request(std::string_view json_text, const std::string& source_name) {
    Json doc;
    try {
        doc = Json::parse(json_text.begin(), json_text.end());
    } catch (const std::exception& e) {
        return invalid_argument(source_name + ": not valid JSON: " + e.what());
    }
    if (!doc.is_object()) return invalid_argument(source_name + ": expected {\"messages\": [...], \"kwargs\": {...}}");
    for (const auto& [key, value] : doc.items()) {
        if (key != "messages" && key != "kwargs") {
            return invalid_argument(source_name + ": unknown top-level key '" + key + "' (expected messages, kwargs)");
        }
    }
    if (!doc.contains("messages") || !doc["messages"].is_array()) {
        return invalid_argument(source_name + ": \"messages\" must be a list of messages");
    }
    TemplateRequest request;
    request.messages = doc["messages"];
    Json kwargs = doc.contains("kwargs") ? doc["kwargs"] : Json::object();
    auto opt = encode_options_from_kwargs(kwargs);
    if (!opt.is_ok()) return invalid_argument(source_name + ": " + opt.status().message());
    request.options = std::move(opt).value();
    return request;
}

}  // namespace dsv4::chat
