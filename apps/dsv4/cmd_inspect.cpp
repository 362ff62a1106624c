// dsv4 inspect -m DIR: validates a checkpoint like the loader does and describes it (dsv4/checkpoint_tools.h).
#include <cstdio>
#include <memory>
#include <string>

#include "command_registry.h"
#include "dsv4/checkpoint_tools.h"

namespace dsv4::cli {
namespace {

struct InspectFlags {
    std::string model;
    bool json = false;
};

int run_inspect(const InspectFlags& f) {
    auto text = describe_checkpoint(f.model, f.json);
    if (!text.is_ok()) return report_error(text.status());
    std::fwrite(text->data(), 1, text->size(), stdout);
    return 0;
}

const CommandRegistration kRegistration("inspect", [](CLI::App& app, int& exit_code) {
    auto* cmd = app.add_subcommand("inspect",
                                   "Validate a checkpoint folder (config.json, safetensors shards, every tensor's "
                                   "name, shape and dtype) and print its config, layer schedule, tensor counts and "
                                   "bytes per dtype, parameter count and estimated GPU memory.");
    auto f = std::make_shared<InspectFlags>();
    with_env(cmd->add_option("-m,--model", f->model, "checkpoint folder")->required(), "DSV4_MODEL");
    cmd->add_flag("--json", f->json, "machine-readable output");
    cmd->callback([f, &exit_code] { exit_code = run_inspect(*f); });
});

}  // namespace
}  // namespace dsv4::cli
