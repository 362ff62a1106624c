// dsv4 logits: runs a token list through the model and writes the f32 logits of every position as a .npy file
// [T, vocab] ('<f4', C order), or with --last the last position's only [1, vocab] (LogitRows::kLast: the head runs
// on that row alone). --chunk N feeds the tokens through the incremental path N at a time (1 = pure decode), which
// must give the same logits as the default single pass. Other tools rely on this interface.
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "command_registry.h"
#include "dsv4/engine.h"
#include "dsv4/npy.h"
#include "dsv4/session.h"
#include "dsv4/threads.h"

namespace dsv4::cli {
namespace {

struct LogitsArgs {
    std::string model_dir;
    std::string tokens;
    std::string tokens_file;
    std::string out;
    std::string precision = "reference";
    std::string backend = "auto";
    std::string devices = "auto";  // EngineOptions::cuda_devices (parse_cuda_devices)
    int64_t pass_rows = 0;         // EngineOptions::max_batch_rows
    int64_t chunk = 0;    // 0 = the whole prompt at once
    int64_t context = 0;  // 0 = exactly the prompt length
    int threads = 0;
    bool last = false;  // the last position's logits only
};

// Ids separated by commas and/or whitespace.
Result<std::vector<int32_t>> parse_token_list(const std::string& text, const std::string& source) {
    std::vector<int32_t> ids;
    size_t i = 0;
    while (i < text.size()) {
        const unsigned char ch = static_cast<unsigned char>(text[i]);
        if (ch == ',' || std::isspace(ch)) {
            ++i;
            continue;
        }
        size_t j = i;
        while (j < text.size() && text[j] != ',' && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
        const std::string word = text.substr(i, j - i);
        size_t used = 0;
        long long v = 0;
        bool ok = true;
        try {
            v = std::stoll(word, &used, 10);
        } catch (...) {
            ok = false;
        }
        if (!ok || used != word.size() || v < INT32_MIN || v > INT32_MAX)
            return invalid_argument(source + ": '" + word + "' is not a token id (expected integers separated by "
                                             "commas or whitespace)");
        ids.push_back(int32_t(v));
        i = j;
    }
    if (ids.empty()) return invalid_argument(source + ": the token list is empty");
    return ids;
}

Result<std::vector<int32_t>> read_tokens(const LogitsArgs& a) {
    if (a.tokens.empty() == a.tokens_file.empty())
        return invalid_argument("give exactly one of --tokens and --tokens-file");
    if (!a.tokens.empty()) return parse_token_list(a.tokens, "--tokens");
    std::ifstream in(a.tokens_file, std::ios::binary);
    if (!in) return io_error(a.tokens_file + ": cannot open the tokens file");
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) return io_error(a.tokens_file + ": cannot read the tokens file");
    return parse_token_list(ss.str(), a.tokens_file);
}

int run_logits(const LogitsArgs& a) {
    EngineOptions eo;
    if (a.precision == "reference") {
        eo.precision = EnginePrecision::kReference;
    } else if (a.precision == "f32") {
        eo.precision = EnginePrecision::kF32;
    } else {
        return report_error(invalid_argument("--precision '" + a.precision + "': expected reference or f32"));
    }
    auto backend = parse_engine_backend(a.backend);
    if (!backend.is_ok()) return report_error(backend.status());
    eo.backend = *backend;
    auto devices = parse_cuda_devices(a.devices);
    if (!devices.is_ok()) return report_error(devices.status());
    eo.cuda_devices = *devices;
    eo.max_batch_rows = a.pass_rows;
    eo.threads = a.threads;
    if (a.chunk < 0) return report_error(invalid_argument("--chunk must be >= 1"));

    auto tokens = read_tokens(a);
    if (!tokens.is_ok()) return report_error(tokens.status());
    const int64_t n = int64_t(tokens->size());

    auto engine = Engine::load(a.model_dir, eo);
    if (!engine.is_ok()) return report_error(engine.status());
    const ModelInfo& info = (*engine)->info();
    if (n > info.max_position)
        return report_error(out_of_range(std::to_string(n) + " tokens exceed the model's max context of " +
                                         std::to_string(info.max_position) + " (max_position_embeddings)"));
    SessionOptions so;
    so.max_context = a.context ? a.context : n;
    auto session = (*engine)->create_session(so);
    if (!session.is_ok()) return report_error(session.status());

    const int64_t chunk = a.chunk ? a.chunk : n;
    const int64_t vocab = info.vocab_size, rows = a.last ? 1 : n;
    const LogitRows which = a.last ? LogitRows::kLast : LogitRows::kAll;
    std::vector<float> logits(size_t(rows * vocab));
    Logits part;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t off = 0; off < n; off += chunk) {
        const int64_t len = std::min(chunk, n - off);
        Status st = (*session)->feed(std::span<const int32_t>(tokens->data() + off, size_t(len)), &part, which);
        if (!st) return report_error(st);
        std::copy(part.values.begin(), part.values.end(), logits.begin() + (a.last ? 0 : off * vocab));
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    const int64_t shape[2] = {rows, vocab};
    Status st = write_npy_f32(a.out, logits, shape);
    if (!st) return report_error(st);
    const unsigned threads = a.threads > 0 ? unsigned(a.threads) : unsigned(dsv4::default_thread_count());
    std::fprintf(stderr,
                 "dsv4 logits: %lld tokens, chunk %lld, %s/%s, %u threads: %.3f s, %.1f tok/s -> %s [%lld, %lld]\n",
                 static_cast<long long>(n), static_cast<long long>(chunk), engine_precision_name(eo.precision),
                 engine_backend_name(eo.backend), threads, secs, secs > 0 ? double(n) / secs : 0.0, a.out.c_str(),
                 static_cast<long long>(rows), static_cast<long long>(vocab));
    return 0;
}

const CommandRegistration kRegistration("logits", [](CLI::App& app, int& exit_code) {
    auto* cmd = app.add_subcommand("logits",
                                   "Run a token list through the model and write the f32 logits of every position "
                                   "as a NumPy .npy file [T, vocab] ('<f4', C order).");
    auto a = std::make_shared<LogitsArgs>();
    with_env(cmd->add_option("-m,--model", a->model_dir, "model folder (config.json + safetensors)")->required(),
             "DSV4_MODEL");
    cmd->add_option("--tokens", a->tokens, "token ids, comma separated (e.g. 1,2,3)");
    cmd->add_option("--tokens-file", a->tokens_file, "file of token ids separated by commas and/or whitespace");
    cmd->add_option("--out", a->out, "output .npy file")->required();
    with_env(cmd->add_option("--precision", a->precision, "numerics: reference (DeepSeek's, default) or f32")
                 ->check(CLI::IsMember({"reference", "f32"})),
             "DSV4_PRECISION");
    with_env(cmd->add_option("--backend", a->backend, "cpu, cuda, or auto (default: cuda when a supported GPU is present)")
                 ->check(CLI::IsMember({"auto", "cpu", "cuda"})),
             "DSV4_BACKEND");
    add_devices_flag(*cmd, a->devices);
    add_pass_rows_flag(*cmd, a->pass_rows);
    cmd->add_option("--chunk", a->chunk,
                    "feed the tokens N at a time through the incremental path (1 = pure decode; default: all at "
                    "once)")
        ->check(CLI::PositiveNumber);
    with_env(cmd->add_option("-c,--ctx-size", a->context, "session context in tokens (default: the prompt length)")
                 ->check(CLI::PositiveNumber),
             "DSV4_CTX_SIZE");
    with_env(cmd->add_option("-t,--threads", a->threads, "CPU threads (default: all cores)"), "DSV4_THREADS");
    cmd->add_flag("--last", a->last,
                  "write the last position's logits only, [1, vocab] (the head then skips the other positions)");
    cmd->callback([a, &exit_code] { exit_code = run_logits(*a); });
});

}  // namespace
}  // namespace dsv4::cli
