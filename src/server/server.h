// The OpenAI-compatible HTTP server (docs/server.md): routes, API-key check, error objects, SSE streaming, and the
// scheduler behind them. The model loads in the background after the port is bound, so GET /health answers 503
// until it is ready.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "dsv4/status.h"
#include "dsv4/tokenizer.h"
#include "server/model_backend.h"
#include "server/scheduler.h"

namespace dsv4::server {

struct ServerOptions {
    std::string model_dir;
    std::string host = "127.0.0.1";
    int port = 8080;             // 0 = any free port (see Server::port())
    int slots = 1;               // -np: sequences served at once
    int64_t context = 4096;      // -c: tokens per slot
    std::string api_key;         // empty = no key
    std::string alias;           // model id in responses (default: the model folder's name)
    size_t max_body = 8u << 20;  // bytes
    double timeout_s = 600;      // whole request (queue + generation); also the socket read/write timeout
    int max_queue = 64;          // requests waiting for a slot before 503
    int64_t step_tokens = 0;     // token budget per scheduler step; 0: max(512, chunk + slots)
    int64_t chunk = 0;           // prefill chunk; 0: the backend's (ModelBackend::default_prefill_chunk)
    double keepalive_s = 5;      // SSE comment interval while no token arrives (long prefill)
    int http_threads = 0;        // 0 = slots + queue + 4
    // Model loading (the engine loader only).
    std::string precision = "reference";
    std::string backend = "auto";  // cpu, cuda, or auto (cuda when a supported GPU is present)
    std::string devices = "auto";  // EngineOptions::cuda_devices (parse_cuda_devices)
    int64_t pass_rows = 0;         // EngineOptions::max_batch_rows (0: the backend's default)
    int threads = 0;
    bool fold_vocab = false;
};

struct LoadedModel {
    std::unique_ptr<Tokenizer> tokenizer;
    std::unique_ptr<ModelBackend> backend;
};
using ModelLoader = std::function<Result<LoadedModel>()>;

// Loads <model_dir>/tokenizer.json and the checkpoint through dsv4::Engine.
Result<LoadedModel> load_engine_model(const ServerOptions& options);

// The scheduler's options from the server's, 0s resolved: chunk from the backend, step budget max(512, chunk + slots).
SchedulerOptions scheduler_options(const ServerOptions& options, const ModelBackend& model);

class Server {
public:
    // Binds host:port (an error if it is taken) and starts serving; `loader` runs on a background thread.
    static Result<std::unique_ptr<Server>> start(const ServerOptions& options, ModelLoader loader);
    ~Server();  // stop() + join
    int port() const;
    // Blocks until stop() is called or the model failed to load (its Status is returned then).
    Status wait();
    // Blocks until the model is loaded and requests are served (true), or the load failed or stop() came (false).
    bool wait_ready();
    void stop();

    struct Impl;

private:
    explicit Server(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4::server
