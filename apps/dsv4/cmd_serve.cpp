// dsv4 serve: the OpenAI-compatible HTTP server (src/server/, docs/server.md). Compiled to a real command only where
// the server library was built (cpp-httplib present); elsewhere `dsv4 serve` explains what is missing.
#include <pthread.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "command_registry.h"

#ifdef DSV4_HAVE_SERVER
#include "server/server.h"
#endif

namespace dsv4::cli {
namespace {

#ifdef DSV4_HAVE_SERVER
int run_serve(const server::ServerOptions& o) {
    // Block SIGINT/SIGTERM in every thread; one thread waits for them and stops the server cleanly.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);

    server::ServerOptions opts = o;
    const auto t0 = std::chrono::steady_clock::now();
    auto srv = server::Server::start(opts, [opts] { return server::load_engine_model(opts); });
    if (!srv.is_ok()) return report_error(srv.status());
    std::fprintf(stderr, "dsv4 serve: listening on http://%s:%d (model %s, %d slots x %lld tokens); loading...\n",
                 opts.host.c_str(), (*srv)->port(), opts.model_dir.c_str(), opts.slots,
                 static_cast<long long>(opts.context));
    server::Server* raw = srv->get();
    std::thread waiter([raw, signals] {
        int sig = 0;
        sigwait(&signals, &sig);
        std::fprintf(stderr, "dsv4 serve: signal %d, shutting down\n", sig);
        raw->stop();
    });
    waiter.detach();
    std::thread announcer([raw, t0] {  // joined below: it returns once the model is up, or on stop / failure
        if (raw->wait_ready())
            std::fprintf(stderr, "dsv4 serve: ready, model loaded in %.1f s\n",
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    });
    Status st = (*srv)->wait();
    announcer.join();
    srv->reset();
    if (!st) return report_error(st);
    std::fprintf(stderr, "dsv4 serve: stopped\n");
    return 0;
}
#endif

const CommandRegistration kRegistration("serve", [](CLI::App& app, int& exit_code) {
    auto* cmd = app.add_subcommand("serve",
                                   "OpenAI-compatible HTTP server: /v1/chat/completions, /v1/completions (SSE "
                                   "streaming), /v1/models, /tokenize, /detokenize, /apply-template, /health, "
                                   "/metrics; continuous batching over -np slots.");
#ifdef DSV4_HAVE_SERVER
    auto o = std::make_shared<server::ServerOptions>();
    with_env(cmd->add_option("-m,--model", o->model_dir, "model folder (config.json, safetensors, tokenizer.json)")
                 ->required(),
             "DSV4_MODEL");
    with_env(cmd->add_option("--host", o->host, "address to bind (default 127.0.0.1: this machine only)"),
             "DSV4_HOST");
    with_env(cmd->add_option("--port", o->port, "TCP port (default 8080; 0 = any free port)")
                 ->check(CLI::Range(0, 65535)),
             "DSV4_PORT");
    with_env(cmd->add_option("--parallel", o->slots, "slots: requests served at once (default 1); also -np N")
                 ->check(CLI::Range(1, 4096)),
             "DSV4_PARALLEL");
    with_env(cmd->add_option("-c,--ctx-size", o->context, "tokens per slot, prompt + reply (default 4096)")
                 ->check(CLI::Range(int64_t(2), int64_t(1) << 24)),
             "DSV4_CTX_SIZE");
    with_env(cmd->add_option("--api-key", o->api_key,
                             "require 'Authorization: Bearer KEY' on every route but /health (default: none)"),
             "DSV4_API_KEY");
    with_env(cmd->add_option("--alias", o->alias, "model id reported by the API (default: the model folder name)"),
             "DSV4_ALIAS");
    with_env(cmd->add_option("--max-body", o->max_body, "largest request body in bytes (default 8388608)")
                 ->check(CLI::Range(size_t(1024), size_t(1) << 32)),
             "DSV4_MAX_BODY");
    with_env(cmd->add_option("--timeout", o->timeout_s,
                             "seconds a request may take, queue wait included; also the socket timeout "
                             "(default 600)")
                 ->check(CLI::PositiveNumber),
             "DSV4_TIMEOUT");
    with_env(cmd->add_option("--queue", o->max_queue,
                             "requests that may wait for a slot; more get 503 + Retry-After (default 64)")
                 ->check(CLI::Range(0, 1 << 20)),
             "DSV4_QUEUE");
    with_env(cmd->add_option("-b,--batch-tokens", o->step_tokens,
                             "token budget of one scheduler step: decode tokens + prefill chunks (default 0: "
                             "max(512, chunk + slots))")
                 ->check(CLI::Range(int64_t(0), int64_t(1) << 20)),
             "DSV4_BATCH_TOKENS");
    with_env(cmd->add_option("--chunk", o->chunk,
                             "prefill chunk in tokens (default 0: 256 on the CPU, 2048 on CUDA); also -ub N")
                 ->check(CLI::Range(int64_t(0), int64_t(1) << 20)),
             "DSV4_CHUNK");
    with_env(cmd->add_option("--keepalive", o->keepalive_s,
                             "seconds between SSE keep-alive comments while no token arrives (default 5)")
                 ->check(CLI::PositiveNumber),
             "DSV4_KEEPALIVE");
    with_env(cmd->add_option("--http-threads", o->http_threads,
                             "HTTP worker threads (default: slots + queue + 4, so every waiting stream has one)")
                 ->check(CLI::Range(0, 1 << 16)),
             "DSV4_HTTP_THREADS");
    with_env(cmd->add_option("--backend", o->backend, "cpu, cuda, or auto (default: cuda when a supported GPU is present)")
                 ->check(CLI::IsMember({"auto", "cpu", "cuda"})),
             "DSV4_BACKEND");
    add_devices_flag(*cmd, o->devices);
    add_pass_rows_flag(*cmd, o->pass_rows);
    with_env(cmd->add_option("--precision", o->precision, "numerics: reference (DeepSeek's, default) or f32")
                 ->check(CLI::IsMember({"reference", "f32"})),
             "DSV4_PRECISION");
    with_env(cmd->add_option("-t,--threads", o->threads, "CPU threads of the engine (default: all cores)"),
             "DSV4_THREADS");
    with_env(cmd->add_flag("--fold-vocab", o->fold_vocab,
                           "test checkpoints only: accept a model vocabulary smaller than the tokenizer's and fold "
                           "prompt ids modulo it"),
             "DSV4_FOLD_VOCAB");
    // CLI11 2.1 accepts only one-letter short names, so llama.cpp's -np and -ub arrive as extras and are read here.
    cmd->allow_extras();
    cmd->callback([cmd, o, &exit_code] {
        const std::vector<std::string> extra = cmd->remaining();
        for (size_t i = 0; i < extra.size(); ++i) {
            const bool np = extra[i] == "-np", ub = extra[i] == "-ub";
            long long v = 0;
            if ((np || ub) && i + 1 < extra.size()) {
                try {
                    size_t used = 0;
                    v = std::stoll(extra[i + 1], &used);
                    if (used != extra[i + 1].size()) v = 0;
                } catch (...) {
                    v = 0;
                }
            }
            if ((!np && !ub) || v < 1 || (np && v > 4096)) {
                exit_code = report_error(invalid_argument(
                    "serve: unexpected argument '" + extra[i] + "'" +
                    (np || ub ? " (it needs a positive integer after it)" : " (see dsv4 serve --help)")));
                return;
            }
            if (np) o->slots = int(v);
            else o->chunk = v;
            ++i;
        }
        exit_code = run_serve(*o);
    });
#else
    cmd->allow_extras();
    cmd->callback([&exit_code] {
        exit_code = report_error(unsupported("this dsv4 was built without the HTTP server: install cpp-httplib "
                                             "(Debian: libcpp-httplib-dev, see scripts/setup) and rebuild"));
    });
#endif
});

}  // namespace
}  // namespace dsv4::cli
