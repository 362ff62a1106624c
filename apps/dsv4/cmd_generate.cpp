// dsv4 generate: one prompt in, the model's reply out. The prompt is rendered as a single user message with the
// V4 chat encoder (chat mode, or thinking mode with --think) unless --raw feeds it as is; the reply streams to
// stdout as it is generated, and a timings line ends the run on stderr. --json prints one JSON object instead.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "command_registry.h"
#include "dsv4/chat.h"
#include "generation_cli.h"

namespace dsv4::cli {
namespace {

struct GenerateFlags {
    ModelFlags model;
    SamplingFlags sampling;
    std::string prompt;
    bool raw = false;
    bool json = false;
};

Result<std::string> render_prompt(const GenerateFlags& f) {
    if (f.raw) return f.prompt;
    chat::Json messages = chat::Json::array();
    messages.push_back({{"role", "user"}, {"content", f.prompt}});
    chat::EncodeOptions eo;
    eo.thinking_mode = f.sampling.think ? chat::ThinkingMode::kThinking : chat::ThinkingMode::kChat;
    return chat::encode_messages(messages, eo);
}

nlohmann::ordered_json timings_json(const engine::GenerationTimings& t) {
    return {{"prompt_tokens", t.prompt_tokens},
            {"prompt_seconds", t.prompt_seconds},
            {"prompt_tokens_per_second", t.prompt_tokens_per_second()},
            {"generated_tokens", t.generated_tokens},
            {"generation_seconds", t.generation_seconds},
            {"generation_tokens_per_second", t.generation_tokens_per_second()},
            {"time_to_first_token_seconds", t.prompt_seconds}};
}

int run_generate(const GenerateFlags& f) {
    auto text = render_prompt(f);
    if (!text.is_ok()) return report_error(text.status());
    auto model = load_model(f.model);
    if (!model.is_ok()) return report_error(model.status());
    LoadedModel& m = *model;
    std::vector<int32_t> ids = m.tokenizer->encode(*text);

    uint64_t seed = 0;
    engine::GenerationOptions o = generation_options(f.sampling, *m.session, &seed);
    o.starts_in_reasoning = f.raw ? text->ends_with(chat::kThinkStart) : f.sampling.think;
    print_header(m, f.model, seed);
    auto gen = engine::Generation::create(*m.tokenizer, int32_t(m.engine->info().vocab_size), std::move(ids), o);
    if (!gen.is_ok()) return report_error(gen.status());

    ReplyPrinter printer(stdout, f.raw);
    Logits logits;
    Status st = engine::run_generation(
        *m.session, **gen,
        [&](const engine::GenerationStep& step) {
            if (!f.json) printer.print(step);
            return true;
        },
        logits, f.model.batch);
    if (!f.json) printer.end();
    if (!st) return report_error(st);

    const engine::Generation& g = **gen;
    const engine::GenerationTimings t = g.timings();
    std::fprintf(stderr, "%s\n", timings_line(t, g.reason()).c_str());
    if (f.json) {
        nlohmann::ordered_json tool_calls = nlohmann::ordered_json::array();
        for (const chat::ToolCall& c : g.reply().tool_calls)
            tool_calls.push_back({{"name", c.name}, {"arguments", c.arguments}});
        nlohmann::ordered_json out = {
            {"model", m.dir.string()},
            {"default_model", m.is_default},
            {"seed", seed},
            {"prompt_tokens", int64_t(g.prompt().size())},
            {"text", g.text()},
            {"reasoning", g.reply().reasoning},
            {"content", g.reply().content},
            {"tool_calls", tool_calls},
            {"tokens", g.generated()},
            {"finish_reason", engine::openai_finish_reason(g.reason())},
            {"stop_reason", engine::stop_reason_name(g.reason())},
            {"timings", timings_json(t)},
        };
        const std::string s = out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
        std::printf("%s\n", s.c_str());
    }
    return 0;
}

const CommandRegistration kRegistration("generate", [](CLI::App& app, int& exit_code) {
    auto* cmd = app.add_subcommand("generate",
                                   "Generate a reply to one prompt and stream it to stdout (timings on stderr). "
                                   "Without -m, uses the embedded demo model (random weights: gibberish).");
    auto f = std::make_shared<GenerateFlags>();
    with_env(cmd->add_option("-p,--prompt", f->prompt, "the prompt (a user message unless --raw)")->required(),
             "DSV4_PROMPT");
    add_model_flags(*cmd, f->model);
    add_sampling_flags(*cmd, f->sampling);
    auto* raw = with_env(cmd->add_flag("--raw", f->raw,
                                       "feed the prompt text as is (no chat template; special tokens written in "
                                       "the text become their ids)"),
                         "DSV4_RAW");
    raw->excludes(cmd->get_option("--think"));
    with_env(cmd->add_flag("--json", f->json,
                           "print one JSON object at the end (text, reasoning, content, tool_calls, tokens, "
                           "finish_reason, timings) instead of streaming"),
             "DSV4_JSON");
    cmd->callback([f, &exit_code] { exit_code = run_generate(*f); });
});

}  // namespace
}  // namespace dsv4::cli
