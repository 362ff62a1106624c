#include "generation_cli.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <random>
#include <thread>

#include "command_registry.h"
#include "dsv4/default_model.h"
#include "dsv4/threads.h"
#include "progress.h"

namespace dsv4::cli {

namespace {

// Reads every shard once with a progress bar, so the weights are in memory before the first token instead of
// arriving through page faults of the memory map during it. Errors here are ignored: Engine::load reports them.
void read_shards_with_progress(const std::filesystem::path& dir) {
    std::vector<std::filesystem::path> shards;
    uint64_t total = 0;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
        if (entry.path().extension() != ".safetensors") continue;
        shards.push_back(entry.path());
        total += entry.file_size(ec);
    }
    ProgressBar bar("loading weights");
    std::vector<char> buffer(size_t(8) << 20);
    uint64_t done = 0;
    for (const auto& path : shards) {
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        for (ssize_t n; (n = ::read(fd, buffer.data(), buffer.size())) > 0;) {
            done += uint64_t(n);
            bar.update(std::min(done, total), total);
        }
        ::close(fd);
    }
    bar.finish();
}

Result<std::filesystem::path> default_model_dir() {
    DSV4_ASSIGN_OR_RETURN(std::filesystem::path cache, engine::cache_dir());
    ProgressBar bar("creating the embedded demo model");
    auto dir = engine::ensure_default_model(
        cache, [&](const engine::DefaultModelProgress& p) { bar.update(p.bytes_done, p.bytes_total); });
    bar.finish();
    return dir;
}

// CLI11's NonNegativeNumber prints its whole double range in the message; this says it plainly.
CLI::Validator non_negative() {
    return CLI::Validator(
        [](std::string& text) -> std::string {
            try {
                size_t used = 0;
                const double v = std::stod(text, &used);
                if (used == text.size() && v >= 0) return {};
            } catch (...) {
            }
            return "must be a number >= 0, got '" + text + "'";
        },
        "NUMBER >= 0");
}

// "ID=BIAS" (a token id, a bias in [-100, 100]) into *out; false when the text is not one.
bool parse_logit_bias(const std::string& text, TokenBias* out) {
    const size_t eq = text.find('=');
    if (eq == 0 || eq == std::string::npos || eq > 10) return false;
    int64_t id = 0;
    for (size_t i = 0; i < eq; ++i) {
        if (text[i] < '0' || text[i] > '9') return false;
        id = id * 10 + (text[i] - '0');
    }
    if (id > std::numeric_limits<int32_t>::max()) return false;
    try {
        size_t used = 0;
        const std::string value = text.substr(eq + 1);
        const double bias = std::stod(value, &used);
        if (used != value.size() || !(bias >= -100 && bias <= 100)) return false;
        *out = {int32_t(id), float(bias)};
        return true;
    } catch (...) {
        return false;
    }
}

}  // namespace

void add_model_flags(CLI::App& cmd, ModelFlags& f) {
    with_env(cmd.add_option("-m,--model", f.model_dir,
                            "model folder (config.json, safetensors, tokenizer.json); default: the embedded demo "
                            "model (random weights), created on first use in $DSV4_CACHE_DIR or ~/.cache/dsv4"),
             "DSV4_MODEL");
    with_env(cmd.add_option("--precision", f.precision, "numerics: reference (DeepSeek's, default) or f32")
                 ->check(CLI::IsMember({"reference", "f32"})),
             "DSV4_PRECISION");
    with_env(cmd.add_option("--backend", f.backend, "cpu, cuda, or auto (default: cuda when a supported GPU is present)")
                 ->check(CLI::IsMember({"auto", "cpu", "cuda"})),
             "DSV4_BACKEND");
    with_env(
        cmd.add_option("-t,--threads", f.threads, "CPU threads (default: all cores)")->check(CLI::NonNegativeNumber),
        "DSV4_THREADS");
    with_env(cmd.add_option("-c,--ctx-size", f.context,
                            "context in tokens, prompt and reply together (default: min(model limit, 4096))")
                 ->check(CLI::NonNegativeNumber),
             "DSV4_CTX_SIZE");
    with_env(cmd.add_option("-b,--batch-size", f.batch,
                            "prompt tokens per forward call (default 0: the whole prompt, run in the backend's "
                            "passes: up to 8192 rows on CUDA, 256 on the CPU)")
                 ->check(CLI::NonNegativeNumber),
             "DSV4_BATCH_SIZE");
    add_devices_flag(cmd, f.devices);
    add_pass_rows_flag(cmd, f.pass_rows);
}

void add_sampling_flags(CLI::App& cmd, SamplingFlags& f) {
    with_env(cmd.add_option("-n,--n-predict", f.n_predict,
                            "tokens to generate at most (default 256; <= 0: until the end token or a full context)"),
             "DSV4_N_PREDICT");
    with_env(cmd.add_option("--temp", f.temperature, "temperature (default 1.0; 0 = greedy)")->check(non_negative()),
             "DSV4_TEMP");
    with_env(cmd.add_option("--top-k", f.top_k, "keep the K most likely tokens (default 0 = off)"), "DSV4_TOP_K");
    with_env(
        cmd.add_option("--top-p", f.top_p, "nucleus sampling mass (default 1.0 = off)")->check(CLI::Range(0.0, 1.0)),
        "DSV4_TOP_P");
    with_env(cmd.add_option("--min-p", f.min_p, "drop tokens below P x the top probability (default 0 = off)")
                 ->check(CLI::Range(0.0, 1.0)),
             "DSV4_MIN_P");
    with_env(
        cmd.add_option("--repeat-penalty", f.repeat_penalty, "penalise tokens already generated (default 1.0 = off)")
            ->check(CLI::PositiveNumber),
        "DSV4_REPEAT_PENALTY");
    with_env(cmd.add_option("-s,--seed", f.seed, "random seed (default: random, printed in the header line)"),
             "DSV4_SEED");
    with_env(cmd.add_option("--stop", f.stop, "stop string (repeatable); it ends the reply and is not printed"),
             "DSV4_STOP");
    with_env(cmd.add_option("--logit-bias", f.logit_bias,
                            "ID=BIAS (repeatable): add BIAS in [-100, 100] to token ID's logit before sampling "
                            "(-100 all but bans it, 100 all but forces it)")
                 ->check(CLI::Validator(
                     [](std::string& text) -> std::string {
                         TokenBias b;
                         return parse_logit_bias(text, &b)
                                    ? ""
                                    : "must be ID=BIAS with BIAS in [-100, 100], got '" + text + "'";
                     },
                     "ID=BIAS")),
             "DSV4_LOGIT_BIAS");
    with_env(cmd.add_option("--format", f.format,
                            "text (default) or json: the reply (after any reasoning) is one JSON object, by "
                            "constrained decoding")
                 ->check(CLI::IsMember({"text", "json"})),
             "DSV4_FORMAT");
    with_env(cmd.add_flag("--ignore-eos", f.ignore_eos, "keep generating after the end-of-sentence token"),
             "DSV4_IGNORE_EOS");
    auto* think =
        with_env(cmd.add_flag("--think", f.think, "thinking mode: the reply starts with reasoning"), "DSV4_THINK");
    auto* no_think = cmd.add_flag("--no-think", f.no_think, "chat mode without reasoning (the default)");
    think->excludes(no_think);
}

Result<LoadedModel> load_model(const ModelFlags& f) {
    LoadedModel m;
    if (f.model_dir.empty()) {
        DSV4_ASSIGN_OR_RETURN(m.dir, default_model_dir());
        m.is_default = true;
    } else {
        m.dir = f.model_dir;
        std::error_code ec;
        if (!std::filesystem::is_directory(m.dir, ec))
            return not_found(m.dir.string() +
                             ": no such model folder (-m expects a folder with config.json, "
                             "safetensors files and tokenizer.json)");
        if (!std::filesystem::exists(m.dir / "tokenizer.json", ec))
            return not_found(m.dir.string() +
                             ": no tokenizer.json in the model folder; generation needs the "
                             "model's tokenizer: copy tokenizer.json from the model's Hugging Face "
                             "repository into it");
    }
    DSV4_ASSIGN_OR_RETURN(m.tokenizer, Tokenizer::from_model_dir(m.dir));

    EngineOptions eo;
    eo.precision = f.precision == "f32" ? EnginePrecision::kF32 : EnginePrecision::kReference;
    eo.threads = f.threads;
    DSV4_ASSIGN_OR_RETURN(eo.backend, parse_engine_backend(f.backend));
    DSV4_ASSIGN_OR_RETURN(eo.cuda_devices, parse_cuda_devices(f.devices));
    eo.max_batch_rows = f.pass_rows;
    // GPU caches for the one session below (the load's warm-up gives its pages back before it is made), not the
    // engine's default of 64 sessions of the model's whole context: at V4 that default holds a 1M-token pool and
    // pass buffers at that width, ~3.8 GB (docs/perf.md)
    eo.cuda_sessions = 1;
    eo.cuda_max_context = f.context > 0 ? f.context : 4096;  // SessionOptions' default when 0
    read_shards_with_progress(m.dir);
    DSV4_ASSIGN_OR_RETURN(m.engine, Engine::load(m.dir, eo));
    const ModelInfo& info = m.engine->info();
    if (m.tokenizer->vocab_size() > info.vocab_size)
        return invalid_argument(m.dir.string() + ": tokenizer.json has " + std::to_string(m.tokenizer->vocab_size()) +
                                " token ids but the model's vocabulary has only " + std::to_string(info.vocab_size) +
                                " rows; use the tokenizer.json that belongs to this model");
    SessionOptions so;
    so.max_context = f.context;
    DSV4_ASSIGN_OR_RETURN(m.session, m.engine->create_session(so));
    return m;
}

engine::GenerationOptions generation_options(const SamplingFlags& f, const Session& session, uint64_t* seed_used) {
    engine::GenerationOptions o;
    uint64_t seed = uint64_t(f.seed);
    if (f.seed < 0) seed = (uint64_t(std::random_device{}()) << 16) ^ std::random_device{}();
    *seed_used = seed;
    o.sampling.temperature = float(f.temperature);
    o.sampling.top_k = f.top_k;
    o.sampling.top_p = float(f.top_p);
    o.sampling.min_p = float(f.min_p);
    o.sampling.repetition_penalty = float(f.repeat_penalty);
    o.sampling.seed = seed;
    for (const std::string& text : f.logit_bias) {
        TokenBias b;
        if (parse_logit_bias(text, &b)) o.sampling.logit_bias.push_back(b);  // the flag's validator accepted it
    }
    o.max_tokens = std::max<int64_t>(f.n_predict, 0);
    o.max_context = session.max_context();
    o.stop = f.stop;
    o.ignore_eos = f.ignore_eos;
    o.json_object = f.format == "json";
    return o;
}

void print_header(const LoadedModel& m, const ModelFlags& f, uint64_t seed) {
    const ModelInfo& info = m.engine->info();
    const unsigned threads = f.threads > 0 ? unsigned(f.threads) : unsigned(dsv4::default_thread_count());
    std::fprintf(stderr,
                 "dsv4: model %s%s%s, %lld layers, vocab %lld, %s numerics, %s, %u threads, context %lld, "
                 "seed %llu\n",
                 m.dir.string().c_str(), m.is_default ? " (" : "",
                 m.is_default ? (std::string(engine::kDefaultModelNotice) + ")").c_str() : "",
                 static_cast<long long>(info.num_layers), static_cast<long long>(info.vocab_size),
                 engine_precision_name(m.engine->options().precision), engine_backend_name(m.engine->options().backend),
                 threads, static_cast<long long>(m.session->max_context()), static_cast<unsigned long long>(seed));
    // the CUDA load's warm-up passes (EngineOptions::cuda_warmup): the one-time costs the first prompt would pay
    if (!info.gpus.empty()) std::fprintf(stderr, "dsv4: %s\n", info.gpus.c_str());
    if (const double ms = m.engine->stats().warmup_ms; ms > 0)
        std::fprintf(stderr, "dsv4: warm-up passes at load took %.0f ms\n", ms);
}

std::string timings_line(const engine::GenerationTimings& t, engine::StopReason reason) {
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "dsv4: prompt %lld tokens in %.3f s (%.1f tok/s)%s, generated %lld tokens in %.3f s (%.1f tok/s), "
                  "first token after %.3f s, stop: %s",
                  static_cast<long long>(t.prompt_tokens), t.prompt_seconds, t.prompt_tokens_per_second(),
                  t.cached_tokens ? (", " + std::to_string(t.cached_tokens) + " reused").c_str() : "",
                  static_cast<long long>(t.generated_tokens), t.generation_seconds, t.generation_tokens_per_second(),
                  t.prompt_seconds, engine::stop_reason_name(reason));
    return buf;
}

ReplyPrinter::ReplyPrinter(std::FILE* out, bool raw) : out_(out), raw_(raw), tty_(isatty(fileno(out)) != 0) {}

void ReplyPrinter::write(const std::string& s) {
    if (s.empty()) return;
    std::fwrite(s.data(), 1, s.size(), out_);
    at_line_start_ = s.back() == '\n';
}

void ReplyPrinter::close_reasoning() {
    if (!in_reasoning_) return;
    write(tty_ ? "\033[22m\n" : "</think>\n");
    in_reasoning_ = false;
}

void ReplyPrinter::print(const engine::GenerationStep& step) {
    if (raw_) {
        write(step.text);
    } else {
        for (const chat::ReplyEvent& e : step.events) {
            switch (e.kind) {
                case chat::ReplyEvent::Kind::kReasoning:
                    if (!in_reasoning_) write(tty_ ? "\033[2m" : "<think>");
                    in_reasoning_ = true;
                    write(e.text);
                    break;
                case chat::ReplyEvent::Kind::kContent:
                    close_reasoning();
                    write(e.text);
                    break;
                case chat::ReplyEvent::Kind::kToolCallBegin:
                    close_reasoning();
                    write((at_line_start_ ? "[tool call " : "\n[tool call ") + e.text + " ");
                    break;
                case chat::ReplyEvent::Kind::kToolCallArgs:
                    write(e.text);
                    break;
                case chat::ReplyEvent::Kind::kToolCallEnd:
                    write("]\n");
                    break;
            }
        }
    }
    std::fflush(out_);
}

void ReplyPrinter::end() {
    if (in_reasoning_) {
        write(tty_ ? "\033[22m" : "</think>");
        in_reasoning_ = false;
    }
    if (!at_line_start_) write("\n");
    at_line_start_ = true;
    std::fflush(out_);
}

}  // namespace dsv4::cli
