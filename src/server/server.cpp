#include "server/server.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "dsv4/engine.h"
#include "server/api_error.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/openai_response.h"

namespace dsv4::server {

SchedulerOptions scheduler_options(const ServerOptions& o, const ModelBackend& model) {
    SchedulerOptions so;
    so.slots = o.slots;
    so.context = o.context;
    so.max_queue = o.max_queue;
    so.chunk = o.chunk > 0 ? o.chunk : model.default_prefill_chunk();
    so.step_tokens = o.step_tokens > 0 ? o.step_tokens : std::max<int64_t>(512, so.chunk + so.slots);
    return so;
}

Result<LoadedModel> load_engine_model(const ServerOptions& o) {
    LoadedModel m;
    DSV4_ASSIGN_OR_RETURN(m.tokenizer, Tokenizer::from_model_dir(o.model_dir));
    EngineOptions eo;
    if (o.precision == "f32") eo.precision = EnginePrecision::kF32;
    else if (o.precision == "reference") eo.precision = EnginePrecision::kReference;
    else return invalid_argument("--precision '" + o.precision + "': expected reference or f32");
    eo.threads = o.threads;
    DSV4_ASSIGN_OR_RETURN(eo.backend, parse_engine_backend(o.backend));
    DSV4_ASSIGN_OR_RETURN(eo.cuda_devices, parse_cuda_devices(o.devices));
    eo.max_batch_rows = o.pass_rows;
    eo.cuda_sessions = std::max<int64_t>(eo.cuda_sessions, o.slots + 1);
    // GPU caches for the slots' sessions (each keeps up to --ctx-size tokens between requests), not the engine's
    // default sessions of the model's whole context (1M tokens at V4: a pool of that size and pass buffers at that
    // width, ~3.8 GB, docs/perf.md)
    eo.cuda_max_context = o.context;
    eo.cuda_cache_tokens = int64_t(o.slots + 1) * o.context;
    DSV4_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::load(o.model_dir, eo));
    const int64_t vocab = engine->info().vocab_size;
    if (vocab < m.tokenizer->vocab_size() && !o.fold_vocab)
        return invalid_argument(o.model_dir + ": the model's vocabulary (" + std::to_string(vocab) +
                                ") is smaller than tokenizer.json's id space (" +
                                std::to_string(m.tokenizer->vocab_size()) +
                                "); use a matching tokenizer, or --fold-vocab for a test checkpoint");
    if (vocab > m.tokenizer->vocab_size())
        return invalid_argument(o.model_dir + ": the model's vocabulary (" + std::to_string(vocab) +
                                ") is larger than tokenizer.json's id space (" +
                                std::to_string(m.tokenizer->vocab_size()) + "); the tokenizer does not match");
    m.backend = std::make_unique<EngineModelBackend>(std::move(engine), o.fold_vocab);
    return m;
}

namespace {

// Equal-length-independent comparison: time depends only on the length of the presented key.
bool keys_equal(const std::string& presented, const std::string& expected) {
    unsigned char diff = presented.size() == expected.size() ? 0 : 1;
    for (size_t i = 0; i < presented.size(); ++i)
        diff |= static_cast<unsigned char>(presented[i] ^ (expected.empty() ? 0 : expected[i % expected.size()]));
    return diff == 0;
}

std::string random_id(const char* prefix) {
    static std::mutex mu;
    static std::mt19937_64 rng{std::random_device{}()};
    std::lock_guard<std::mutex> lock(mu);
    char buf[40];
    std::snprintf(buf, sizeof buf, "%s-%016llx", prefix, static_cast<unsigned long long>(rng()));
    return buf;
}

}  // namespace

struct Server::Impl {
    ServerOptions options;
    httplib::Server http;
    Metrics metrics;
    int port = 0;
    std::string model_id;

    // Set once by the loader thread; read by handlers only after `ready` is true.
    LoadedModel model;
    std::unique_ptr<Scheduler> scheduler;
    std::atomic<bool> ready{false};

    std::mutex mu;
    std::condition_variable cv;
    bool stopped = false;
    Status load_status;
    bool load_failed = false;

    std::thread listen_thread;
    std::thread load_thread;

    void send_error(httplib::Response& res, const ApiError& e) {
        metrics.requests_rejected_total++;
        res.status = e.status;
        res.set_content(dump_json(error_json(e)), "application/json");
    }
    void send_json(httplib::Response& res, const Json& j) { res.set_content(dump_json(j), "application/json"); }

    bool check_ready(httplib::Response& res) {
        if (ready.load()) return true;
        send_error(res, {503, "the model is still loading; retry when GET /health answers 200", "unavailable_error",
                         "", "model_loading"});
        res.set_header("Retry-After", "1");
        return false;
    }

    // Runs a handler with every exception turned into a 500 error object.
    template <typename F>
    httplib::Server::Handler guarded(F f) {
        return [this, f](const httplib::Request& req, httplib::Response& res) {
            try {
                f(req, res);
            } catch (const std::exception& e) {
                send_error(res, {500, std::string("internal error: ") + e.what(), "server_error", "", ""});
            } catch (...) {
                send_error(res, {500, "internal error", "server_error", "", ""});
            }
        };
    }

    void setup_routes();
    void handle_generation(const httplib::Request& req, httplib::Response& res, bool chat);
};

void Server::Impl::setup_routes() {
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        if (options.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
        std::string presented;
        const std::string auth = req.get_header_value("Authorization");
        if (auth.rfind("Bearer ", 0) == 0) presented = auth.substr(7);
        else presented = req.get_header_value("x-api-key");
        if (!presented.empty() && keys_equal(presented, options.api_key))
            return httplib::Server::HandlerResponse::Unhandled;
        send_error(res, {401, "invalid or missing API key (send 'Authorization: Bearer <key>')",
                         "authentication_error", "", "invalid_api_key"});
        return httplib::Server::HandlerResponse::Handled;
    });
    http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return;
        ApiError e;
        e.status = res.status;
        if (res.status == 404) e = {404, "no route " + req.method + " " + req.path, "invalid_request_error", "", "not_found"};
        else if (res.status == 413) e = {413, "the request body exceeds --max-body (" + std::to_string(options.max_body) + " bytes)", "invalid_request_error", "", "body_too_large"};
        else e.message = "HTTP error " + std::to_string(res.status);
        res.set_content(dump_json(error_json(e)), "application/json");
    });
    http.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        send_error(res, {500, "internal error", "server_error", "", ""});
    });

    http.Get("/health", guarded([this](const httplib::Request&, httplib::Response& res) {
        std::lock_guard<std::mutex> lock(mu);
        if (load_failed) {
            res.status = 500;
            send_json(res, error_json({500, "the model failed to load: " + load_status.to_string(), "server_error", "", "load_failed"}));
        } else if (!ready.load()) {
            res.status = 503;
            send_json(res, error_json({503, "the model is loading", "unavailable_error", "", "model_loading"}));
        } else {
            send_json(res, Json{{"status", "ok"}});
        }
    }));
    http.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& res) {
        res.set_content(metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
    }));
    // the one model as OpenAI describes a model, with dsv4's facts in "meta"
    auto model_object = [this] {
        Json m;
        m["id"] = model_id;
        m["object"] = "model";
        m["created"] = 0;
        m["owned_by"] = "dsv4";
        Json meta;
        meta["n_ctx"] = options.context;
        meta["slots"] = options.slots;
        meta["ready"] = ready.load();
        if (ready.load()) {
            meta["vocab_size"] = model.backend->vocab_size();
            if (const std::string gpus = model.backend->gpus(); !gpus.empty()) meta["gpus"] = gpus;
        }
        m["meta"] = std::move(meta);
        return m;
    };
    http.Get("/v1/models", guarded([this, model_object](const httplib::Request&, httplib::Response& res) {
                 send_json(res, Json{{"object", "list"}, {"data", Json::array({model_object()})}});
             }));
    http.Get(R"(/v1/models/(.+))", guarded([this, model_object](const httplib::Request& req, httplib::Response& res) {
                 const std::string id = req.matches[1];
                 if (id != model_id)
                     return send_error(
                         res, {404, "no model '" + id.substr(0, 200) + "' here; this server serves '" + model_id + "'",
                               "invalid_request_error", "model", "model_not_found"});
                 send_json(res, model_object());
             }));
    http.Post("/v1/chat/completions", guarded([this](const httplib::Request& req, httplib::Response& res) {
        handle_generation(req, res, true);
    }));
    http.Post("/v1/completions", guarded([this](const httplib::Request& req, httplib::Response& res) {
        handle_generation(req, res, false);
    }));
    http.Post("/tokenize", guarded([this](const httplib::Request& req, httplib::Response& res) {
        if (!check_ready(res)) return;
        auto body = parse_body(req.body);
        if (auto* e = std::get_if<ApiError>(&body)) return send_error(res, *e);
        const Json& b = std::get<Json>(body);
        auto it = b.find("content");
        if (it == b.end()) it = b.find("prompt");
        if (it == b.end() || !it->is_string()) return send_error(res, bad_request("'content' must be a string", "content"));
        bool pieces = false;
        if (auto wp = b.find("with_pieces"); wp != b.end() && !wp->is_null()) {
            if (!wp->is_boolean()) return send_error(res, bad_request("'with_pieces' must be true or false", "with_pieces"));
            pieces = wp->get<bool>();
        }
        std::vector<int32_t> ids = model.tokenizer->encode(it->get<std::string>());
        Json tokens = Json::array();
        for (int32_t id : ids) {
            if (!pieces) {
                tokens.push_back(id);
                continue;
            }
            Result<std::string> bytes = model.tokenizer->token_bytes(id);
            tokens.push_back(Json{{"id", id}, {"piece", bytes.is_ok() ? *bytes : std::string()}});
        }
        send_json(res, Json{{"tokens", std::move(tokens)}});
    }));
    http.Post("/detokenize", guarded([this](const httplib::Request& req, httplib::Response& res) {
        if (!check_ready(res)) return;
        auto body = parse_body(req.body);
        if (auto* e = std::get_if<ApiError>(&body)) return send_error(res, *e);
        const Json& b = std::get<Json>(body);
        auto it = b.find("tokens");
        if (it == b.end() || !it->is_array()) return send_error(res, bad_request("'tokens' must be a list of token ids", "tokens"));
        std::vector<int32_t> ids;
        for (const auto& v : *it) {
            if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= model.tokenizer->vocab_size())
                return send_error(res, bad_request("'tokens' must hold integers in [0, " +
                                                       std::to_string(model.tokenizer->vocab_size()) + ")", "tokens"));
            ids.push_back(int32_t(v.get<int64_t>()));
        }
        Result<std::string> text = model.tokenizer->decode(ids);
        if (!text.is_ok()) return send_error(res, bad_request(text.status().message(), "tokens"));
        send_json(res, Json{{"content", *text}});
    }));
    http.Post("/apply-template", guarded([this](const httplib::Request& req, httplib::Response& res) {
        auto body = parse_body(req.body);
        if (auto* e = std::get_if<ApiError>(&body)) return send_error(res, *e);
        auto prompt = render_chat_prompt(std::get<Json>(body));
        if (auto* e = std::get_if<ApiError>(&prompt)) return send_error(res, *e);
        send_json(res, Json{{"prompt", std::get<std::string>(prompt)}});
    }));
}

namespace {

// One streaming request: what the SSE provider needs between its calls. Choice i of "n" is states[i] with
// builders[i].
struct StreamJob {
    std::vector<std::shared_ptr<RequestState>> states;
    ParsedRequest request;
    std::vector<std::unique_ptr<ResponseBuilder>> builders;
    std::vector<bool> done;  // [choices] finished and its finish chunk written
    Clock::time_point last_write = Clock::now();
    bool begun = false;
};

bool write_sse(httplib::DataSink& sink, const std::string& payload) {
    const std::string line = "data: " + payload + "\n\n";
    return sink.write(line.data(), line.size());
}

// The usage of a request of several choices: the prompt (and its cached part) once, every choice's tokens.
Usage total_usage(const std::vector<std::shared_ptr<RequestState>>& states) {
    Usage u{states[0]->prompt_tokens(), states[0]->cached_tokens(), 0};
    for (const auto& st : states) u.completion_tokens += st->completion_tokens();
    return u;
}

// The error a choice that did not finish normally answers with, or none.
std::optional<ApiError> finish_error(const RequestState& st, double timeout_s) {
    const FinishReason reason = st.finish_reason();
    if (reason == FinishReason::kTimeout)
        return ApiError{408, st.error() + " (--timeout " + std::to_string(timeout_s) + " s)", "timeout_error", "",
                        "timeout"};
    if (reason == FinishReason::kError || reason == FinishReason::kCancelled)
        return ApiError{500, "generation failed: " + st.error(), "server_error", "", ""};
    return std::nullopt;
}

}  // namespace

void Server::Impl::handle_generation(const httplib::Request& req, httplib::Response& res, bool chat) {
    if (!check_ready(res)) return;
    auto body = parse_body(req.body);
    if (auto* e = std::get_if<ApiError>(&body)) return send_error(res, *e);
    auto parsed = chat ? parse_chat_request(std::get<Json>(body), *model.tokenizer)
                       : parse_completion_request(std::get<Json>(body), *model.tokenizer);
    if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
    ParsedRequest p = std::move(std::get<ParsedRequest>(parsed));
    const int64_t n_prompt = int64_t(p.gen.prompt.size());
    if (n_prompt >= options.context)
        return send_error(res, bad_request("the prompt has " + std::to_string(n_prompt) +
                                               " tokens; a slot holds " + std::to_string(options.context) +
                                               " (-c), which leaves no room to generate. Shorten the prompt or "
                                               "restart the server with a larger -c",
                                           chat ? "messages" : "prompt", "context_length_exceeded"));
    if (Status st = validate(p.gen.options.sampling); !st) return send_error(res, bad_request(st.message()));
    p.gen.deadline = Clock::now() + std::chrono::microseconds(int64_t(options.timeout_s * 1e6));
    // one scheduler request per choice, choice i with the seed + i; all queued or none
    std::vector<std::shared_ptr<RequestState>> states;
    for (int i = 0; i < p.choices; ++i) {
        GenerationParams g = p.gen;
        g.options.sampling.seed += uint64_t(i);
        states.push_back(std::make_shared<RequestState>(std::move(g)));
        if (Status st = scheduler->submit(states.back()); !st) {
            for (const auto& queued : states) queued->cancel();
            res.set_header("Retry-After", "1");
            return send_error(res, {503, st.message(), "unavailable_error", "", "queue_full"});
        }
    }
    const std::string id = random_id(chat ? "chatcmpl" : "cmpl");
    const std::string model_name = p.model.empty() ? model_id : p.model;

    if (!p.stream) {
        std::vector<Json> responses;
        for (size_t i = 0; i < states.size(); ++i) {
            RequestState& st = *states[i];
            ResponseBuilder builder(p, *model.tokenizer, id, model_name, int(i));
            std::vector<TokenOutput> tokens;
            while (!st.wait(std::chrono::milliseconds(1000), tokens)) {
                builder.collect(tokens);
                tokens.clear();
            }
            builder.collect(tokens);
            if (auto e = finish_error(st, options.timeout_s)) {
                for (const auto& other : states) other->cancel();
                return send_error(res, *e);
            }
            Usage u{st.prompt_tokens(), st.cached_tokens(), st.completion_tokens()};
            responses.push_back(builder.response(st.finish_reason(), u, st.reply()));
        }
        if (responses.size() == 1) return send_json(res, responses.front());
        return send_json(res, merge_choices(std::move(responses), total_usage(states)));
    }

    auto job = std::make_shared<StreamJob>();
    job->states = std::move(states);
    job->request = std::move(p);
    for (size_t i = 0; i < job->states.size(); ++i)
        job->builders.push_back(
            std::make_unique<ResponseBuilder>(job->request, *model.tokenizer, id, model_name, int(i)));
    job->done.assign(job->states.size(), false);
    const auto keepalive = std::chrono::milliseconds(std::max<int64_t>(1, int64_t(options.keepalive_s * 1000)));
    const double timeout_s = options.timeout_s;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [job, keepalive, timeout_s](size_t, httplib::DataSink& sink) {
            std::vector<Json> chunks;
            if (!job->begun) {
                job->begun = true;
                for (auto& b : job->builders) b->begin(chunks);
            }
            // each unfinished choice's new tokens; one choice waits up to the keep-alive interval, several take
            // turns in short waits so that none holds back the others' tokens
            const size_t n = job->states.size();
            const auto turn = n == 1 ? keepalive : std::min(keepalive, std::chrono::milliseconds(10));
            for (size_t i = 0; i < n; ++i) {
                if (job->done[i]) continue;
                RequestState& st = *job->states[i];
                std::vector<TokenOutput> tokens;
                const bool finished = st.wait(turn, tokens);
                if (!tokens.empty()) job->builders[i]->add(tokens, chunks);
                if (!finished) continue;
                if (auto e = finish_error(st, timeout_s)) {
                    for (const auto& c : chunks)
                        if (!write_sse(sink, dump_json(c))) return false;
                    for (const auto& other : job->states) other->cancel();
                    if (!write_sse(sink, dump_json(error_json(*e))) || !write_sse(sink, "[DONE]")) return false;
                    sink.done();
                    return true;
                }
                job->builders[i]->end(st.finish_reason(), chunks);
                job->done[i] = true;
            }
            for (const auto& c : chunks)
                if (!write_sse(sink, dump_json(c))) return false;
            const auto now = Clock::now();
            if (!chunks.empty()) job->last_write = now;
            if (std::find(job->done.begin(), job->done.end(), false) != job->done.end()) {
                if (now - job->last_write >=
                    keepalive) {  // nothing yet (a long prefill): a comment keeps proxies and clients patient
                    static const char kKeepAlive[] = ": keep-alive\n\n";
                    if (!sink.write(kKeepAlive, sizeof kKeepAlive - 1)) return false;
                    job->last_write = now;
                }
                return true;
            }
            if (job->request.include_usage &&
                !write_sse(sink, dump_json(job->builders[0]->usage_chunk(total_usage(job->states)))))
                return false;
            if (!write_sse(sink, "[DONE]")) return false;
            sink.done();
            return true;
        },
        [job](bool) {  // client gone (or finished): the slots are freed at the next step
            for (const auto& st : job->states) st->cancel();
        });
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<Server>> Server::start(const ServerOptions& options, ModelLoader loader) {
    auto impl = std::make_unique<Impl>();
    Impl& s = *impl;
    s.options = options;
    if (options.slots < 1) return invalid_argument("-np must be >= 1");
    if (options.context < 2) return invalid_argument("-c must be >= 2");
    if (options.max_queue < 0) return invalid_argument("--queue must be >= 0");
    s.model_id = !options.alias.empty() ? options.alias
                                        : std::filesystem::path(options.model_dir).lexically_normal().filename().string();
    if (s.model_id.empty()) s.model_id = std::filesystem::path(options.model_dir).parent_path().filename().string();
    if (s.model_id.empty()) s.model_id = "dsv4";
    const size_t threads = options.http_threads > 0 ? size_t(options.http_threads)
                                                    : size_t(options.slots + options.max_queue + 4);
    s.http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    s.http.set_payload_max_length(options.max_body);
    const time_t secs = time_t(std::max(1.0, options.timeout_s));
    s.http.set_read_timeout(secs, 0);
    s.http.set_write_timeout(secs, 0);
    s.setup_routes();
    if (options.port == 0) {
        s.port = s.http.bind_to_any_port(options.host);
        if (s.port < 0) return io_error("cannot bind " + options.host + " to a free port");
    } else {
        if (!s.http.bind_to_port(options.host, options.port))
            return io_error("cannot bind " + options.host + ":" + std::to_string(options.port) +
                            " (in use, or not an address of this machine); pick another --port or --host");
        s.port = options.port;
    }
    Impl* raw = impl.get();
    s.listen_thread = std::thread([raw] { raw->http.listen_after_bind(); });
    s.load_thread = std::thread([raw, loader = std::move(loader)] {
        Result<LoadedModel> m = loader();
        Status st = m.status();
        if (st) {
            raw->model = std::move(m).value();
            const SchedulerOptions so = scheduler_options(raw->options, *raw->model.backend);
            if (raw->options.context > raw->model.backend->max_context())
                st = invalid_argument("-c " + std::to_string(raw->options.context) + " exceeds the model's limit of " +
                                      std::to_string(raw->model.backend->max_context()) + " tokens");
            if (st) {
                auto sched = Scheduler::create(*raw->model.backend, *raw->model.tokenizer, so, raw->metrics);
                if (sched.is_ok()) raw->scheduler = std::move(sched).value();
                else st = sched.status();
            }
        }
        std::lock_guard<std::mutex> lock(raw->mu);
        if (st) {
            raw->ready = true;
        } else {
            raw->load_failed = true;
            raw->load_status = st;
        }
        raw->cv.notify_all();
    });
    return std::unique_ptr<Server>(new Server(std::move(impl)));
}

int Server::port() const { return impl_->port; }

Status Server::wait() {
    std::unique_lock<std::mutex> lock(impl_->mu);
    impl_->cv.wait(lock, [&] { return impl_->stopped || impl_->load_failed; });
    return impl_->load_failed ? impl_->load_status : Status::ok();
}

bool Server::wait_ready() {
    std::unique_lock<std::mutex> lock(impl_->mu);
    impl_->cv.wait(lock, [&] { return impl_->ready.load() || impl_->stopped || impl_->load_failed; });
    return impl_->ready.load();
}

void Server::stop() {
    {
        std::lock_guard<std::mutex> lock(impl_->mu);
        impl_->stopped = true;
    }
    impl_->cv.notify_all();
}

Server::~Server() {
    stop();
    if (impl_->load_thread.joinable()) impl_->load_thread.join();
    // Finish open requests first (their streams end), then close the listener and wait for handler threads.
    impl_->scheduler.reset();
    impl_->http.stop();
    if (impl_->listen_thread.joinable()) impl_->listen_thread.join();
}

}  // namespace dsv4::server
