// dsv4: one binary, many subcommands (see `dsv4 --help`).
#include <algorithm>
#include <cstdio>

#include "command_registry.h"

namespace dsv4::cli {

std::vector<RegisteredCommand>& registered_commands() {
    static std::vector<RegisteredCommand> commands;
    return commands;
}

CommandRegistration::CommandRegistration(std::string name, CommandSetup setup) {
    registered_commands().push_back({std::move(name), std::move(setup)});
}

CLI::Option* with_env(CLI::Option* opt, const char* env_name) { return opt->envname(env_name); }

CLI::Option* add_devices_flag(CLI::App& cmd, std::string& devices) {
    return with_env(cmd.add_option("--devices", devices,
                                   "CUDA: the GPUs to hold the model, in layer order, e.g. 0,1 (default auto: GPU 0 "
                                   "when the model fits it, else the fewest GPUs from 0 up that hold it)"),
                    "DSV4_DEVICES");
}

CLI::Option* add_pass_rows_flag(CLI::App& cmd, int64_t& rows) {
    return with_env(cmd.add_option("--pass-rows", rows,
                                   "rows of one forward pass, at most 8192 (default 0: 8192 on CUDA, 512 on the "
                                   "CPU); fewer leave more GPU memory to the model (~0.4 MB a row at V4-Flash) at "
                                   "some prefill speed")
                        ->check(CLI::Range(int64_t(0), int64_t(8192))),
                    "DSV4_PASS_ROWS");
}

int report_error(const Status& status) {
    std::fprintf(stderr, "dsv4: %s\n", status.to_string().c_str());
    return 1;
}

}  // namespace dsv4::cli

int main(int argc, char** argv) {
    CLI::App app{"dsv4 — DeepSeek-V4 inference engine (V4-Flash, V4-Pro) for NVIDIA Hopper GPUs and the CPU"};
    app.set_version_flag("--version", "dsv4 0.1.0");
    app.require_subcommand(1);
    int exit_code = 0;
    auto& commands = dsv4::cli::registered_commands();
    std::sort(commands.begin(), commands.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    for (auto& c : commands) c.setup(app, exit_code);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    return exit_code;
}
