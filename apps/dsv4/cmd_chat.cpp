// dsv4 chat: an interactive conversation on stdin/stdout. Every turn re-renders the whole history with the V4 chat
// encoder; when the tokens already in the session are a prefix of the new prompt they are kept and only the rest
// is fed, otherwise the session is reset and the prompt fed from the start. Commands: /think, /nothink, /reset,
// /exit (also end of input). Ctrl-C stops the reply being generated.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "command_registry.h"
#include "dsv4/chat.h"
#include "generation_cli.h"

namespace dsv4::cli {
namespace {

struct ChatFlags {
    ModelFlags model;
    SamplingFlags sampling;
    std::string system;
};

std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) { g_interrupted.store(true); }

std::string trim(const std::string& s) {
    const size_t b = s.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return {};
    const size_t e = s.find_last_not_of(" \t\r\n");
    return s.substr(b, e - b + 1);
}

class ChatLoop {
public:
    ChatLoop(const ChatFlags& f, LoadedModel& m) : f_(f), m_(m), thinking_(f.sampling.think) { reset(); }

    void reset() {
        history_ = chat::Json::array();
        if (!f_.system.empty()) history_.push_back({{"role", "system"}, {"content", f_.system}});
        m_.session->reset();
        in_state_.clear();
        turns_ = 0;  // a reset conversation replays like a new run with the same seed
    }

    // One user turn. An error is reported and the turn forgotten; the conversation goes on.
    void turn(const std::string& user_text) {
        history_.push_back({{"role", "user"}, {"content", user_text}});
        Status st = generate_reply();
        if (!st) {
            history_.erase(history_.size() - 1);
            std::fprintf(stderr, "dsv4: %s\n", st.to_string().c_str());
            // The state may hold a half-fed prompt: start the next turn from a clean session.
            m_.session->reset();
            in_state_.clear();
        }
    }

    bool thinking() const { return thinking_; }
    void set_thinking(bool on) { thinking_ = on; }

private:
    Status generate_reply() {
        chat::EncodeOptions eo;
        eo.thinking_mode = thinking_ ? chat::ThinkingMode::kThinking : chat::ThinkingMode::kChat;
        DSV4_ASSIGN_OR_RETURN(std::string text, chat::encode_messages(history_, eo));
        std::vector<int32_t> prompt = m_.tokenizer->encode(text);

        // Reuse the state when it holds a strict prefix of the new prompt (a session cannot be rewound).
        int64_t cached = 0;
        if (!in_state_.empty() && in_state_.size() < prompt.size() &&
            std::equal(in_state_.begin(), in_state_.end(), prompt.begin())) {
            cached = int64_t(in_state_.size());
        } else {
            m_.session->reset();
            in_state_.clear();
        }
        uint64_t seed = 0;
        engine::GenerationOptions o = generation_options(f_.sampling, *m_.session, &seed);
        o.sampling.seed = seed + turns_++;  // a fresh stream per turn, reproducible from the header's seed
        o.cached_tokens = cached;
        o.starts_in_reasoning = thinking_;
        DSV4_ASSIGN_OR_RETURN(auto gen, engine::Generation::create(*m_.tokenizer, int32_t(m_.engine->info().vocab_size),
                                                                   std::move(prompt), o));
        ReplyPrinter printer(stdout, false);
        Logits logits;
        g_interrupted.store(false);
        auto previous = std::signal(SIGINT, on_sigint);
        Status st = engine::run_generation(
            *m_.session, *gen,
            [&](const engine::GenerationStep& step) {
                printer.print(step);
                return !g_interrupted.load();
            },
            logits, f_.model.batch);
        std::signal(SIGINT, previous);
        printer.end();
        DSV4_RETURN_IF_ERROR(st);

        // What the state holds now: the prompt and every generated token that was fed (not the last one).
        const auto& p = gen->prompt();
        const auto& g = gen->generated();
        in_state_.assign(p.begin(), p.end());
        in_state_.insert(in_state_.end(), g.begin(), g.begin() + (gen->state_tokens() - int64_t(p.size())));

        const chat::ParsedReply& reply = gen->reply();
        chat::Json assistant = {{"role", "assistant"}, {"content", reply.content}};
        if (!reply.reasoning.empty()) assistant["reasoning_content"] = reply.reasoning;
        if (!reply.tool_calls.empty()) {
            chat::Json calls = chat::Json::array();
            for (const chat::ToolCall& c : reply.tool_calls)
                calls.push_back({{"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
            assistant["tool_calls"] = calls;
        }
        history_.push_back(assistant);
        std::fprintf(stderr, "%s\n", timings_line(gen->timings(), gen->reason()).c_str());
        if (gen->reason() == engine::StopReason::kContextFull)
            std::fprintf(stderr, "dsv4: the context (-c %lld) is full; /reset starts a new conversation\n",
                         static_cast<long long>(m_.session->max_context()));
        return Status::ok();
    }

    const ChatFlags& f_;
    LoadedModel& m_;
    bool thinking_;
    chat::Json history_;
    std::vector<int32_t> in_state_;  // the tokens in the session's state, in order
    uint64_t turns_ = 0;
};

int run_chat(const ChatFlags& f) {
    auto model = load_model(f.model);
    if (!model.is_ok()) return report_error(model.status());
    LoadedModel& m = *model;
    uint64_t seed = 0;
    SamplingFlags sampling = f.sampling;
    (void)generation_options(sampling, *m.session, &seed);
    sampling.seed = int64_t(seed & 0x7fffffffffffffffULL);  // every turn derives its seed from this one
    ChatFlags resolved = f;
    resolved.sampling = sampling;
    print_header(m, f.model, uint64_t(sampling.seed));

    const bool interactive = isatty(fileno(stdin)) != 0;
    if (interactive)
        std::fprintf(stderr,
                     "dsv4: type a message; /think, /nothink, /reset, /exit (or Ctrl-D); Ctrl-C stops a reply\n");
    ChatLoop loop(resolved, m);
    std::string line;
    for (;;) {
        if (interactive) {
            std::fputs(loop.thinking() ? "think> " : "> ", stdout);
            std::fflush(stdout);
        }
        if (!std::getline(std::cin, line)) break;
        const std::string text = trim(line);
        if (text.empty()) continue;
        if (text == "/exit" || text == "/quit") break;
        if (text == "/reset") {
            loop.reset();
            std::fprintf(stderr, "dsv4: conversation reset\n");
        } else if (text == "/think" || text == "/nothink") {
            loop.set_thinking(text == "/think");
            std::fprintf(stderr, "dsv4: thinking mode %s\n", loop.thinking() ? "on" : "off");
        } else if (text[0] == '/') {
            std::fprintf(stderr, "dsv4: unknown command %s (commands: /think, /nothink, /reset, /exit)\n",
                         text.c_str());
        } else {
            loop.turn(text);
        }
    }
    return 0;
}

const CommandRegistration kRegistration("chat", [](CLI::App& app, int& exit_code) {
    auto* cmd = app.add_subcommand("chat",
                                   "Interactive multi-turn chat: one user message per stdin line; /think, "
                                   "/nothink, /reset, /exit. Without -m, uses the embedded demo model (random "
                                   "weights: gibberish).");
    auto f = std::make_shared<ChatFlags>();
    add_model_flags(*cmd, f->model);
    add_sampling_flags(*cmd, f->sampling);
    with_env(cmd->add_option("--system", f->system, "system prompt placed before the conversation"), "DSV4_SYSTEM");
    cmd->callback([f, &exit_code] { exit_code = run_chat(*f); });
});

}  // namespace
}  // namespace dsv4::cli
