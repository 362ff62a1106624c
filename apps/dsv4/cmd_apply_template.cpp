// dsv4 apply-template FILE.json: renders {"messages": [...], "kwargs": {...}} with the V4 chat encoder and prints
// the prompt exactly (no newline added), so other tools and tests can compare it byte for byte.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "command_registry.h"
#include "dsv4/chat.h"

namespace dsv4::cli {
namespace {

int run_apply_template(const std::string& path) {
    std::string text;
    if (path == "-") {
        std::ostringstream ss;
        ss << std::cin.rdbuf();
        text = ss.str();
    } else {
        std::ifstream in(path, std::ios::binary);
        if (!in) return report_error(io_error(path + ": cannot open file"));
        std::ostringstream ss;
        ss << in.rdbuf();
        text = ss.str();
    }
    auto request = chat::parse_template_request(text, path == "-" ? "stdin" : path);
    if (!request.is_ok()) return report_error(request.status());
    auto prompt = chat::encode_messages(request->messages, request->options);
    if (!prompt.is_ok()) {
        return report_error(invalid_argument((path == "-" ? std::string("stdin") : path) + ": " +
                                             prompt.status().message()));
    }
    std::fwrite(prompt->data(), 1, prompt->size(), stdout);
    std::fflush(stdout);
    return 0;
}

const CommandRegistration kRegistration("apply-template", [](CLI::App& app, int& exit_code) {
    auto* cmd = app.add_subcommand("apply-template",
                                   "Render a chat request {\"messages\": [...], \"kwargs\": {...}} into the V4 "
                                   "prompt text (special tokens written out) and print it without a trailing "
                                   "newline. kwargs: thinking_mode (\"chat\"|\"thinking\", required), "
                                   "drop_thinking, add_default_bos_token, reasoning_effort (null|\"high\"|\"max\"), "
                                   "context.");
    auto path = std::make_shared<std::string>();
    cmd->add_option("file", *path, "JSON file to render ('-' reads stdin)")->required();
    cmd->callback([path, &exit_code] { exit_code = run_apply_template(*path); });
});

}  // namespace
}  // namespace dsv4::cli
