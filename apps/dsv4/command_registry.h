// Subcommands register themselves: a cmd_<name>.cpp file defines a static CommandRegistration whose setup
// function adds a CLI11 subcommand and binds its callback. main.cpp never lists commands by hand.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace dsv4::cli {

// Adds the subcommand to `app`. The callback it installs returns the process exit code through `exit_code`.
using CommandSetup = std::function<void(CLI::App& app, int& exit_code)>;

struct CommandRegistration {
    CommandRegistration(std::string name, CommandSetup setup);
};

struct RegisteredCommand {
    std::string name;
    CommandSetup setup;
};
std::vector<RegisteredCommand>& registered_commands();

// Adds the environment mirror DSV4_<NAME> to an option (DESIGN §7).
CLI::Option* with_env(CLI::Option* opt, const char* env_name);
// --devices (DSV4_DEVICES): the GPUs the CUDA backend spreads the model over (EngineOptions::cuda_devices), checked
// by parse_cuda_devices when the engine loads.
CLI::Option* add_devices_flag(CLI::App& cmd, std::string& devices);
// --pass-rows (DSV4_PASS_ROWS): rows of one forward pass, EngineOptions::max_batch_rows (0: the backend's default).
CLI::Option* add_pass_rows_flag(CLI::App& cmd, int64_t& rows);

}  // namespace dsv4::cli

#include "dsv4/status.h"

namespace dsv4::cli {
// Prints "dsv4: <what went wrong>" on stderr and returns the exit code for a failed command (1).
int report_error(const Status& status);
}  // namespace dsv4::cli
