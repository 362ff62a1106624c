// dsv4 bench: decode and prefill of a V4-shaped model with synthetic weights on the GPU (dsv4/bench.h).
#include <cstdio>
#include <memory>
#include <string>

#include "command_registry.h"
#include "dsv4/bench.h"
#include "dsv4/engine.h"

namespace dsv4::cli {
namespace {

struct BenchFlags {
    GpuBenchOptions o;
    std::string precision = "reference";
    std::string devices = "auto";
    bool no_graphs = false;
};

int run_bench(BenchFlags& f) {
    f.o.precision = f.precision == "f32" ? EnginePrecision::kF32 : EnginePrecision::kReference;
    f.o.graphs = !f.no_graphs;
    auto devices = parse_cuda_devices(f.devices);
    if (!devices.is_ok()) return report_error(devices.status());
    f.o.devices = *devices;
    std::string why;
    if (Status st = validate(f.o.sampling); !st) return report_error(st);
    if (!cuda_backend_available(&why)) return report_error(unsupported("dsv4 bench needs a supported GPU: " + why));
    Status st = run_gpu_bench(f.o, stdout);
    if (!st) return report_error(st);
    return 0;
}

const CommandRegistration kRegistration("bench", [](CLI::App& app, int& exit_code) {
    auto* cmd = app.add_subcommand(
        "bench",
        "Benchmark decode steps and prefill on the GPU with a V4-shaped model whose weights are generated on the "
        "GPU in the shipped formats (nothing is read from disk) and whose caches are filled to each context. Prints "
        "per batch x context: step time, time per layer, tokens/s, bytes moved and % of the measured copy "
        "bandwidth; then prefill tokens/s and % of the compute ceilings.");
    auto f = std::make_shared<BenchFlags>();
    cmd->add_option("--preset", f->o.preset, "model shapes: flash (default) or pro")
        ->check(CLI::IsMember({"flash", "pro"}));
    cmd->add_option("--layers", f->o.layers, "main layers to build (default: all that fit in 80% of the free GPU "
                                             "memory, the rest kept for caches)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--experts", f->o.experts, "routed experts per layer (default: the preset's)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--batch", f->o.batches, "batch sizes (default 1 8 64 256; at most 256)")->expected(1, -1);
    cmd->add_option("--context", f->o.contexts, "contexts in tokens (default 4096 65536 1048576)")->expected(1, -1);
    cmd->add_option("--capacity", f->o.capacity,
                    "tokens per session the caches are sized for (default: each context; the engine's default is "
                    "the model's max position, 1048576 at V4)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--steps", f->o.steps, "timed decode steps per point (default 10; median reported)")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--warmup", f->o.warmup, "untimed steps first (default 2)")->check(CLI::NonNegativeNumber);
    cmd->add_option("--prefill", f->o.prefill_tokens, "prefill tokens to time (default 8192; 0 = skip)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_flag("--prefill-all-logits", f->o.prefill_all_logits,
                  "time the prefill with every row's logits copied to the host (default: the last row's, as "
                  "generation asks)");
    cmd->add_flag("--draw-on-host", f->o.draw_on_host,
                  "decode: copy each row's logits to the host and draw there (default: the draw on the GPU, as "
                  "generation and the server do)");
    SamplingParams& s = f->o.sampling;
    cmd->add_option("--temperature", s.temperature, "decode draws: temperature (default 1; 0 = greedy)");
    cmd->add_option("--top-k", s.top_k, "decode draws: top-k (default 0 = off)");
    cmd->add_option("--top-p", s.top_p, "decode draws: top-p (default 1 = off)");
    cmd->add_option("--min-p", s.min_p, "decode draws: min-p (default 0 = off)");
    cmd->add_option("--repetition-penalty", s.repetition_penalty,
                    "decode draws: repetition penalty over the tokens each row was fed (default 1 = off)");
    cmd->add_option("--presence-penalty", s.presence_penalty, "decode draws: presence penalty (default 0)");
    cmd->add_option("--frequency-penalty", s.frequency_penalty, "decode draws: frequency penalty (default 0)");
    cmd->add_option("--precision", f->precision, "numerics: reference (default) or f32")
        ->check(CLI::IsMember({"reference", "f32"}));
    cmd->add_flag("--no-graphs", f->no_graphs, "queue decode steps op by op instead of replaying CUDA graphs");
    add_devices_flag(*cmd, f->devices);
    cmd->callback([f, &exit_code] { exit_code = run_bench(*f); });
});

}  // namespace
}  // namespace dsv4::cli
