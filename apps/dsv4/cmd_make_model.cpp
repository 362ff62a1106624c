// dsv4 make-model: writes a random DeepSeek-V4 checkpoint of a preset's shapes (dsv4/checkpoint_tools.h).
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include <unistd.h>

#include "command_registry.h"
#include "dsv4/checkpoint_tools.h"

namespace dsv4::cli {
namespace {

struct MakeModelFlags {
    RandomCheckpointOptions options;
    std::string out;
};

std::string gigabytes(uint64_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f GB", static_cast<double>(bytes) / 1e9);
    return buf;
}

int run_make_model(MakeModelFlags& f) {
    RandomCheckpointOptions& o = f.options;
    o.out = f.out;

    // One progress line on stderr: rewritten in place a few times a second on a terminal, one line per finished
    // shard otherwise (logs stay short).
    const bool tty = isatty(fileno(stderr));
    auto last = std::chrono::steady_clock::now() - std::chrono::seconds(1);
    bool printed = false;
    int last_shard_reported = 0;
    auto progress = [&](const CheckpointWriteProgress& p) {
        const bool all_done = p.bytes_done == p.bytes_total;
        if (tty) {
            const auto now = std::chrono::steady_clock::now();
            if (now - last < std::chrono::milliseconds(250) && !all_done) return;
            last = now;
        } else {
            // Non-terminal: a line only when a shard's last tensor has been counted (its write call follows).
            if (p.shard == last_shard_reported) return;
            last_shard_reported = p.shard;
        }
        std::fprintf(stderr, "%swriting %s (%d/%d)  %s / %s%s", tty ? "\r" : "", p.file.c_str(), p.shard,
                     p.shards, gigabytes(p.bytes_done).c_str(), gigabytes(p.bytes_total).c_str(), tty ? "  " : "\n");
        printed = true;
    };
    auto result = make_random_checkpoint(o, progress);
    if (printed && tty) std::fprintf(stderr, "\n");
    if (!result.is_ok()) return report_error(result.status());
    const RandomCheckpointSummary& s = *result;
    std::printf("wrote %s: preset %s, %lld layers + %lld MTP, %lld experts (%s), %s layout%s, seed %llu\n",
                o.out.string().c_str(), o.preset.c_str(), static_cast<long long>(s.layers),
                static_cast<long long>(s.mtp_layers), static_cast<long long>(s.experts), s.expert_format.c_str(),
                s.layout.c_str(), o.header_only ? ", header only (sparse files)" : "",
                static_cast<unsigned long long>(o.seed));
    std::printf("%lld tensors, %lld parameters, %llu bytes in %zu files\n",
                static_cast<long long>(s.tensors), static_cast<long long>(s.params),
                static_cast<unsigned long long>(s.bytes), s.files.size());
    return 0;
}

const CommandRegistration kRegistration("make-model", [](CLI::App& app, int& exit_code) {
    auto* cmd = app.add_subcommand("make-model",
                                   "Write a random DeepSeek-V4 checkpoint with the real structure (config.json, "
                                   "safetensors shards, index): FP8 128x128 + UE8M0 dense linears, MXFP4/NVFP4/FP8 "
                                   "experts, BF16/F32/I64 as shipped. The same seed gives the same weights in both "
                                   "layouts and for any --layers subset.");
    auto f = std::make_shared<MakeModelFlags>();
    cmd->add_option("--preset", f->options.preset, "tiny, flash or pro")
        ->check(CLI::IsMember({"tiny", "flash", "pro"}))
        ->default_str("tiny");
    cmd->add_option("--layers", f->options.layers, "keep only the first N main layers (default: the preset's)");
    cmd->add_option("--experts", f->options.experts, "routed experts per layer (default: the preset's)");
    cmd->add_option("--seed", f->options.seed, "random seed")->default_str("0");
    cmd->add_option("--layout", f->options.layout, "tensor naming: official (DeepSeek's) or transformers")
        ->check(CLI::IsMember({"official", "transformers"}))
        ->default_str("official");
    cmd->add_option("--expert-format", f->options.expert_format, "routed-expert encoding: mxfp4 (default), nvfp4 or fp8")
        ->check(CLI::IsMember({"mxfp4", "nvfp4", "fp8"}));
    cmd->add_flag("--header-only", f->options.header_only,
                  "write full-size sparse files with no tensor data (for shape and size checks at real sizes)");
    cmd->add_option("--shard-size", f->options.shard_size, "largest shard in bytes of tensor data")
        ->default_str("5000000000");
    cmd->add_option("--out,-o", f->out, "output folder")->required();
    cmd->callback([f, &exit_code] { exit_code = run_make_model(*f); });
});

}  // namespace
}  // namespace dsv4::cli
