// The public Engine / Session API (include/dsv4/engine.h, session.h) over the CPU forward or the GPU forward
// (engine/cuda/gpu_model.h), chosen by EngineOptions::backend at load.
#include "dsv4/engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cpu/workspace.h"
#include "core/thread_pool.h"
#include "dsv4/sampling.h"
#include "dsv4/session.h"
#include "engine/cuda/gpu_model.h"
#include "engine/forward.h"
#include "engine/mtp.h"
#include "engine/sequence_state.h"
#include "engine/weight_views.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/weights.h"

namespace dsv4 {

namespace {
// Largest forward pass; longer feeds are split (invisible by the chunking invariant). 256 rows keep the per-layer
// chunk region of the KV pools at 512 KiB while amortising each weight read over many tokens.
constexpr int64_t kMaxChunkRows = 256;
constexpr int64_t kDefaultMaxContext = 4096;
// Rows of a CPU batched pass by default (EngineOptions::max_batch_rows = 0); its scratch and workspace grow with it.
constexpr int64_t kCpuDefaultBatchRows = 512;
// The batched head writes through a staging buffer of this many bytes at most (whole logits rows): a real
// vocabulary's 129K f32 logits are 0.5 MB a row, so a 512-row staging would be 256 MB.
constexpr int64_t kHeadStagingBytes = int64_t(64) << 20;
// The CUDA warm-up's feeds (EngineOptions::cuda_warmup), in order: a prompt of more than 256 tokens (passes that
// long take the prefill MoE and attention kernels), a short prompt (the small-pass kernels), two decode steps (the
// first captures the batch-1 decode graph, the second is its first replay, which uploads it).
constexpr int64_t kWarmupFeeds[] = {300, 16, 1, 1};
// Entries of a GPU list (EngineOptions::cuda_devices): more than any one host holds.
constexpr size_t kMaxCudaDevices = 64;
}  // namespace

const char* engine_precision_name(EnginePrecision p) { return p == EnginePrecision::kF32 ? "f32" : "reference"; }
const char* engine_backend_name(EngineBackend b) { return b == EngineBackend::kCuda ? "cuda" : "cpu"; }

bool cuda_backend_available(std::string* why) { return engine::gpu_available(why); }

Result<EngineBackend> parse_engine_backend(const std::string& name) {
    if (name == "cpu") return EngineBackend::kCpu;
    if (name == "cuda") return EngineBackend::kCuda;
    if (name == "auto") return cuda_backend_available() ? EngineBackend::kCuda : EngineBackend::kCpu;
    return invalid_argument("backend '" + name + "': expected cpu, cuda or auto");
}

Result<std::vector<int>> parse_cuda_devices(const std::string& text) {
    std::vector<int> devices;
    if (text.empty() || text == "auto") return devices;
    size_t at = 0;
    while (true) {
        const size_t comma = std::min(text.find(',', at), text.size());
        const std::string item = text.substr(at, comma - at);
        const bool digits = !item.empty() && item.size() <= 4 &&
                            std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (!digits)
            return invalid_argument("GPU list '" + text + "': expected auto or GPU indices separated by commas (0,1)");
        if (devices.size() == kMaxCudaDevices)
            return invalid_argument("GPU list '" + text + "': more than " + std::to_string(kMaxCudaDevices) + " GPUs");
        devices.push_back(std::stoi(item));
        if (comma == text.size()) return devices;
        at = comma + 1;
    }
}

struct Engine::Impl {
    EngineOptions options;
    ModelInfo info;
    model::ModelConfig config;
    std::unique_ptr<io::Checkpoint> checkpoint;  // the mapping every weight view points into
    model::ModelWeights weights;
    backend::WeightCopies weight_copies;  // f32 copies of weights no WeightFormat describes
    engine::ModelViews views;
    std::unique_ptr<ThreadPool> pool;
    // Batched steps (Engine::step): one at a time, on buffers sized at load for options.max_batch_rows rows.
    std::mutex step_mutex;
    engine::ForwardContext batch_ctx;   // exec.workspace = batch_workspace
    std::unique_ptr<backend::cpu::Workspace> batch_workspace;
    engine::ForwardScratch batch;
    std::vector<float> head_staging;    // [k, vocab]
    std::vector<engine::BatchSeq> pass; // the sequences of one pass
    std::vector<size_t> pass_item;      // [pass] the step item each share belongs to
    std::vector<int64_t> done;          // [items] tokens of each item already run
    // The CUDA backend: weights and pass buffers on the GPU (null on the CPU backend).
    std::shared_ptr<engine::GpuModel> gpu;
    std::vector<engine::GpuBatchSeq> gpu_pass;
    struct GpuWork {
        Session::Impl* session;
        std::span<const int32_t> tokens;
        Logits* out;
        LogitRows which;
        EngineSample* sample;
    };
    std::vector<GpuWork> gpu_work;  // the items of the step being run
    double warmup_ms = 0;           // EngineStats::warmup_ms
};

struct Session::Impl {
    Engine::Impl* engine = nullptr;
    engine::ForwardContext ctx;
    engine::SequenceState state;
    engine::ForwardScratch scratch;       // feed()'s row buffers and the MTP block's
    engine::SequenceScratch seq_scratch;  // per-sequence buffers (series, index lists, indexer scores)
    std::unique_ptr<backend::cpu::Workspace> workspace;  // the CPU ops' scratch, reserved here once
    std::unique_ptr<engine::MtpState> mtp;  // only with SessionOptions::mtp
    bool broken = false;  // a failed forward left the layers at different positions
    bool in_step = false; // marks the sessions of the step being validated (each at most once)
    int64_t max_context = 0;
    engine::GpuSequencePtr gpu;  // the CUDA backend's state (null on the CPU backend)
    int64_t chunk_rows() const { return gpu ? engine::gpu_chunk_rows(*gpu) : scratch.rows; }
    int64_t position() const { return gpu ? engine::gpu_position(*gpu) : state.position; }
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;
const ModelInfo& Engine::info() const { return impl_->info; }
const EngineOptions& Engine::options() const { return impl_->options; }

EngineStats Engine::stats() const {
    EngineStats s;
    if (!impl_->gpu) return s;
    const engine::GpuGraphStats g = engine::gpu_graph_stats(*impl_->gpu);
    s.graph_captures = g.captures;
    s.graph_replays = g.replays;
    s.graph_nodes = g.nodes;
    s.graph_programmatic_edges = g.programmatic_edges;
    s.warmup_ms = impl_->warmup_ms;
    return s;
}

namespace {

// The CUDA warm-up: kWarmupFeeds on a scratch session of at most `capacity` tokens (the cache's tokens and a
// session's context bound it; a smaller cache gets a shorter warm-up). A cache too full to give the scratch session
// its pages ends the warm-up early: nothing is run then, and the engine works as without it.
Status warm_up(Engine& engine, int64_t capacity) {
    const int64_t vocab = engine.info().vocab_size;
    int64_t total = 0;
    for (int64_t n : kWarmupFeeds) total += n;
    total = std::min(total, capacity);
    if (total < 1) return Status::ok();
    DSV4_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, engine.create_session({.max_context = total}));
    std::vector<int32_t> tokens(static_cast<size_t>(total));
    for (int64_t i = 0; i < total; ++i) tokens[size_t(i)] = int32_t((i * 7919 + 13) % vocab);
    Logits out;
    int64_t fed = 0;
    for (int64_t n : kWarmupFeeds) {
        n = std::min(n, total - fed);
        if (n < 1) break;
        const Status st =
            session->feed(std::span<const int32_t>(tokens).subspan(size_t(fed), size_t(n)), &out, LogitRows::kLast);
        if (st.code() == StatusCode::kResourceExhausted) break;
        DSV4_RETURN_IF_ERROR(st);
        fed += n;
    }
    return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::load(const std::filesystem::path& model_dir, const EngineOptions& options) {
    auto impl = std::make_unique<Impl>();
    impl->options = options;
    DSV4_ASSIGN_OR_RETURN(impl->config, model::load_config(model_dir));
    DSV4_ASSIGN_OR_RETURN(impl->checkpoint, io::Checkpoint::open(model_dir));
    DSV4_ASSIGN_OR_RETURN(impl->weights, model::map_weights(*impl->checkpoint, impl->config));
    DSV4_ASSIGN_OR_RETURN(impl->views, engine::make_model_views(impl->weights, impl->config, impl->weight_copies));
    impl->pool = std::make_unique<ThreadPool>(options.threads);
    if (options.max_batch_rows < 0)
        return invalid_argument("max_batch_rows is " + std::to_string(options.max_batch_rows) +
                                "; it must be >= 1, or 0 for the backend's default");
    const bool cuda = options.backend == EngineBackend::kCuda;
    if (!cuda && !options.cuda_devices.empty())
        return invalid_argument(
            "GPUs were named (--devices, EngineOptions::cuda_devices) but the backend is the CPU; "
            "name none, or use --backend cuda");
    const int64_t batch_rows =
        options.max_batch_rows > 0 ? options.max_batch_rows : cuda ? engine::kGpuMaxPassRows : kCpuDefaultBatchRows;
    impl->options.max_batch_rows = batch_rows;
    const backend::Precision precision =
        options.precision == EnginePrecision::kF32 ? backend::Precision::kF32 : backend::Precision::kReference;
    int64_t warmup_capacity = 0;  // tokens the CUDA warm-up's scratch session may take; 0: no warm-up
    if (cuda) {
        engine::GpuCacheOptions cache;
        cache.sessions = options.cuda_sessions;
        cache.max_context = options.cuda_max_context > 0
                                ? std::min(options.cuda_max_context, impl->config.max_position)
                                : impl->config.max_position;
        cache.tokens = options.cuda_cache_tokens > 0 ? options.cuda_cache_tokens
                                                     : std::max(options.cuda_sessions * 4096, cache.max_context);
        DSV4_ASSIGN_OR_RETURN(impl->gpu, engine::load_gpu_model(impl->config, impl->views, precision,
                                                                std::min(batch_rows, engine::kGpuMaxPassRows), cache,
                                                                options.cuda_devices));
        impl->info.gpus = engine::gpu_placement(*impl->gpu);
        engine::set_gpu_graphs(*impl->gpu, options.cuda_graphs);
        engine::set_gpu_host_pool(*impl->gpu, impl->pool.get());
        if (options.cuda_warmup) warmup_capacity = std::min(cache.tokens, cache.max_context);
        impl->gpu_pass.reserve(size_t(batch_rows));
        impl->done.reserve(size_t(batch_rows));
        impl->pass_item.reserve(size_t(batch_rows));
    } else {
        const model::ModelConfig& cfg = impl->config;
        const int64_t rows = batch_rows;
        backend::Exec exec;
        exec.precision = precision;
        exec.pool = impl->pool.get();
        // only row-wise ops run on this workspace (per-sequence ops use each session's), so the context it is
        // sized for is irrelevant: the window
        impl->batch_workspace = std::make_unique<backend::cpu::Workspace>(
            backend::cpu::workspace_bytes(engine::workspace_limits(cfg, rows, cfg.window, impl->pool->size())));
        exec.workspace = impl->batch_workspace.get();
        impl->batch_ctx = engine::make_forward_context(cfg, impl->views, exec);
        impl->batch = engine::make_forward_scratch(cfg, rows);
        const int64_t staging_rows =
            std::clamp<int64_t>(kHeadStagingBytes / (cfg.vocab_size * int64_t(sizeof(float))), 1, rows);
        impl->head_staging.assign(size_t(staging_rows * cfg.vocab_size), 0.0f);
        impl->pass.reserve(size_t(rows));
        impl->pass_item.reserve(size_t(rows));
        impl->done.reserve(size_t(rows));
    }

    ModelInfo& info = impl->info;
    info.name = model_dir.string();
    info.layout = model::layout_name(impl->weights.layout);
    info.vocab_size = impl->config.vocab_size;
    info.hidden_size = impl->config.hidden_size;
    info.num_layers = impl->config.num_layers;
    info.max_position = impl->config.max_position;
    info.has_mtp = impl->views.mtp != nullptr;
    std::unique_ptr<Engine> engine(new Engine(std::move(impl)));
    if (warmup_capacity > 0) {
        const auto t0 = std::chrono::steady_clock::now();
        DSV4_RETURN_IF_ERROR(warm_up(*engine, std::min(warmup_capacity, engine->info().max_position)));
        engine->impl_->warmup_ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    return engine;
}

Result<std::unique_ptr<Session>> Engine::create_session(const SessionOptions& options) {
    Impl& e = *impl_;
    if (options.mtp && !e.info.has_mtp)
        return unsupported("this checkpoint has no MTP block (mtp.0.*), so SessionOptions::mtp cannot be set");
    int64_t max_context = options.max_context ? options.max_context
                                              : std::min<int64_t>(e.config.max_position, kDefaultMaxContext);
    if (max_context < 1 || max_context > e.config.max_position)
        return out_of_range("max context " + std::to_string(max_context) + " is outside [1, " +
                            std::to_string(e.config.max_position) + "] (the model's max_position_embeddings)");
    auto s = std::make_unique<Session::Impl>();
    s->engine = &e;
    s->max_context = max_context;
    if (e.gpu) {
        if (options.mtp)
            return unsupported("the MTP head (SessionOptions::mtp) runs on the CPU backend only for now");
        DSV4_ASSIGN_OR_RETURN(s->gpu, engine::make_gpu_sequence(*e.gpu, max_context,
                                                                std::min(engine::gpu_max_rows(*e.gpu), max_context)));
        return std::unique_ptr<Session>(new Session(std::move(s)));
    }
    backend::Exec exec;
    exec.precision = e.options.precision == EnginePrecision::kF32 ? backend::Precision::kF32
                                                                  : backend::Precision::kReference;
    exec.pool = e.pool.get();
    const int64_t rows = std::min(kMaxChunkRows, max_context);
    s->workspace = std::make_unique<backend::cpu::Workspace>(
        backend::cpu::workspace_bytes(engine::workspace_limits(e.config, rows, max_context, e.pool->size())));
    exec.workspace = s->workspace.get();
    s->ctx = engine::make_forward_context(e.config, e.views, exec);
    s->state = engine::make_sequence_state(e.config, max_context, rows, int(e.config.num_layers));
    s->scratch = engine::make_forward_scratch(e.config, rows);
    s->seq_scratch = engine::make_sequence_scratch(e.config, rows, max_context);
    if (options.mtp) s->mtp = std::make_unique<engine::MtpState>(engine::make_mtp_state(e.config, max_context, rows));
    return std::unique_ptr<Session>(new Session(std::move(s)));
}

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;
int64_t Session::position() const { return impl_->position(); }
int64_t Session::max_context() const { return impl_->max_context; }

void Session::reset() {
    if (impl_->gpu) engine::reset_gpu_sequence(*impl_->gpu);
    engine::reset_sequence_state(impl_->state);
    if (impl_->mtp) engine::reset_mtp_state(*impl_->mtp);
    impl_->broken = false;
}

namespace {

// Checks what feed / step checks before running anything; sizes `out`.
Status check_feed(const Session::Impl& s, std::span<const int32_t> tokens, Logits* out, int64_t vocab) {
    if (s.broken) return internal_error("the session failed in an earlier step; reset it before feeding more tokens");
    if (tokens.empty()) return invalid_argument("no tokens to feed (the token list is empty)");
    if (!out) return invalid_argument("no Logits to fill (out is null)");
    for (size_t i = 0; i < tokens.size(); ++i)
        if (tokens[i] < 0 || tokens[i] >= vocab)
            return invalid_argument("token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                                    " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    const int64_t n = int64_t(tokens.size());
    if (s.position() + n > s.max_context)
        return out_of_range(std::to_string(s.position() + n) + " tokens exceed the session's max context of " +
                            std::to_string(s.max_context) + " (" + std::to_string(s.position()) + " already fed)");
    return Status::ok();
}

// Checks an EngineSample (none is fine) and marks it not drawn: the backend draws over it where it can.
Status check_sample(EngineSample* sample, LogitRows which) {
    if (!sample) return Status::ok();
    if (which != LogitRows::kLast)
        return invalid_argument("a draw by the engine (EngineSample) needs LogitRows::kLast");
    if (!sample->params || !sample->result) return invalid_argument("EngineSample without params or result");
    if (sample->params->top_logprobs < 0 || sample->params->top_logprobs > kMaxTopLogprobs)
        return invalid_argument("EngineSample: top_logprobs must be in 0.." + std::to_string(kMaxTopLogprobs));
    if (!(sample->uniform >= 0.0 && sample->uniform < 1.0))
        return invalid_argument("EngineSample: uniform must be in [0, 1)");
    sample->result->token = -1;
    return Status::ok();
}

void size_logits(const Session::Impl& s, int64_t n, int64_t vocab, LogitRows which, Logits* out) {
    out->rows = which == LogitRows::kAll ? n : 1;
    out->vocab = vocab;
    out->values.resize(size_t(out->rows * vocab));
    if (s.mtp) {
        out->mtp.resize(size_t(out->rows * vocab));
    } else {
        out->mtp.clear();
    }
}

// A piece tokens[done .. done+len) of a feed of `total` tokens: the first of its rows that gets logits (len: none)
// and where they go in `out` (sized by size_logits).
struct PieceLogits {
    int64_t from = 0;
    float* values = nullptr;
    float* mtp = nullptr;
};
PieceLogits piece_logits(Logits* out, int64_t done, int64_t len, int64_t total, int64_t vocab, LogitRows which) {
    if (which == LogitRows::kLast) {
        const bool last_piece = done + len == total;
        return {last_piece ? len - 1 : len, out->values.data(), out->mtp.empty() ? nullptr : out->mtp.data()};
    }
    return {0, out->values.data() + done * vocab, out->mtp.empty() ? nullptr : out->mtp.data() + done * vocab};
}

// The session's share of a pass: tokens[done .. done+len) of `tokens` at its current position.
engine::BatchSeq share_of(Session::Impl& s, std::span<const int32_t> tokens, Logits* out, int64_t done, int64_t len,
                          int64_t vocab, LogitRows which) {
    engine::BatchSeq q;
    q.state = &s.state;
    q.scratch = &s.seq_scratch;
    q.exec = s.ctx.exec;
    q.tokens = tokens.data() + done;
    q.n = len;
    const PieceLogits pl = piece_logits(out, done, len, int64_t(tokens.size()), vocab, which);
    q.logits_from = pl.from;
    q.logits = pl.values;
    q.final_streams = s.mtp ? s.mtp->main_streams.data() : nullptr;
    return q;
}

// After the pass that ran `q` (the session's state has advanced by q.n): the MTP block over those rows, its head
// on the rows that get logits.
Status run_mtp(Session::Impl& s, const engine::BatchSeq& q, Logits* out, int64_t done, int64_t total, int64_t vocab,
               LogitRows which) {
    if (!s.mtp) return Status::ok();
    const PieceLogits pl = piece_logits(out, done, q.n, total, vocab, which);
    return engine::mtp_chunk(s.ctx, *s.mtp, s.scratch, s.seq_scratch, q.tokens, q.n, s.state.position - q.n, pl.mtp,
                             pl.from);
}

// The GPU form of a step's passes (e.gpu_work validated and sized, e.step_mutex held): each pass takes every item's
// next piece that fits, exactly as the CPU passes do.
Status run_gpu_passes(Engine::Impl& e) {
    const int64_t vocab = e.config.vocab_size, max_rows = engine::gpu_max_rows(*e.gpu);
    e.done.assign(e.gpu_work.size(), 0);
    for (;;) {
        e.gpu_pass.clear();
        e.pass_item.clear();
        int64_t rows = 0;
        for (size_t i = 0; i < e.gpu_work.size(); ++i) {
            const Engine::Impl::GpuWork& w = e.gpu_work[i];
            const int64_t remaining = int64_t(w.tokens.size()) - e.done[i];
            const int64_t len = std::min({remaining, w.session->chunk_rows(), max_rows});
            if (len == 0 || rows + len > max_rows) continue;
            const PieceLogits pl = piece_logits(w.out, e.done[i], len, int64_t(w.tokens.size()), vocab, w.which);
            e.gpu_pass.push_back({.seq = w.session->gpu.get(),
                                  .tokens = w.tokens.data() + e.done[i],
                                  .n = len,
                                  .logits = pl.values,
                                  .logits_from = pl.from,
                                  .sample = pl.from < len ? w.sample : nullptr});
            e.pass_item.push_back(i);
            rows += len;
        }
        if (e.gpu_pass.empty()) return Status::ok();
        if (Status st = engine::gpu_forward_batch(*e.gpu, e.gpu_pass); !st) {
            // A full cache is found before a pass does any work: in the step's first pass no session has moved,
            // so they stay usable (the step can be retried once other sessions end).
            const bool untouched = st.code() == StatusCode::kResourceExhausted &&
                                   std::all_of(e.done.begin(), e.done.end(), [](int64_t d) { return d == 0; });
            if (!untouched)
                for (const Engine::Impl::GpuWork& w : e.gpu_work) w.session->broken = true;
            return st;
        }
        for (size_t k = 0; k < e.gpu_pass.size(); ++k) e.done[e.pass_item[k]] += e.gpu_pass[k].n;
    }
}

}  // namespace

Status Session::feed(std::span<const int32_t> tokens, Logits* out, LogitRows which, EngineSample* sample) {
    Impl& s = *impl_;
    const int64_t vocab = s.engine->config.vocab_size;
    DSV4_RETURN_IF_ERROR(check_feed(s, tokens, out, vocab));
    DSV4_RETURN_IF_ERROR(check_sample(sample, which));
    const int64_t n = int64_t(tokens.size());
    size_logits(s, n, vocab, which, out);
    if (s.gpu) {  // the GPU pass buffers are the engine's: one step at a time
        Engine::Impl& e = *s.engine;
        std::lock_guard<std::mutex> lock(e.step_mutex);
        e.gpu_work.assign(1, {&s, tokens, out, which, sample});
        return run_gpu_passes(e);
    }
    for (int64_t off = 0; off < n;) {  // a pass of this one sequence on its own buffers
        const int64_t len = std::min(s.scratch.rows, n - off);
        engine::BatchSeq q = share_of(s, tokens, out, off, len, vocab, which);
        Status st = engine::forward_batch(s.ctx, s.scratch, std::span<engine::BatchSeq>(&q, 1), {});
        if (st) st = run_mtp(s, q, out, off, n, vocab, which);
        if (!st) {
            s.broken = true;
            return st;
        }
        off += len;
    }
    return Status::ok();
}

Status Engine::step(std::span<const StepItem> items) {
    Impl& e = *impl_;
    const int64_t vocab = e.config.vocab_size, max_rows = e.batch.rows;
    std::lock_guard<std::mutex> lock(e.step_mutex);
    Status bad = Status::ok();
    size_t marked = 0;
    for (; marked < items.size() && bad; ++marked) {
        const StepItem& it = items[marked];
        if (!it.session) {
            bad = invalid_argument("step item " + std::to_string(marked) + " has no session");
            break;
        }
        Session::Impl& s = *it.session->impl_;
        if (s.engine != &e) {
            bad = invalid_argument("step item " + std::to_string(marked) + ": the session belongs to another engine");
        } else if (s.in_step) {
            bad = invalid_argument("step item " + std::to_string(marked) +
                                   ": its session appears twice in the step (concatenate its tokens instead)");
            break;
        } else if (Status st = check_feed(s, it.tokens, it.out, vocab); !st) {
            bad = Status(st.code(), "step item " + std::to_string(marked) + ": " + st.message());
        } else if (Status st = check_sample(it.sample, it.logit_rows); !st) {
            bad = Status(st.code(), "step item " + std::to_string(marked) + ": " + st.message());
        }
        s.in_step = true;
    }
    for (size_t i = 0; i < marked; ++i)
        if (items[i].session) items[i].session->impl_->in_step = false;
    if (!bad) return bad;

    for (const StepItem& it : items)
        size_logits(*it.session->impl_, int64_t(it.tokens.size()), vocab, it.logit_rows, it.out);
    if (e.gpu) {
        e.gpu_work.clear();
        for (const StepItem& it : items)
            e.gpu_work.push_back({it.session->impl_.get(), it.tokens, it.out, it.logit_rows, it.sample});
        return run_gpu_passes(e);
    }
    e.done.assign(items.size(), 0);
    auto fail = [&](Status st) {
        for (const StepItem& it : items) it.session->impl_->broken = true;
        return st;
    };
    // Passes: each item contributes its next piece (at most its session's chunk rows, the pieces feed() would
    // run), as many items as fit in max_rows; an item that does not fit waits for the next pass.
    for (;;) {
        e.pass.clear();
        e.pass_item.clear();
        int64_t rows = 0;
        for (size_t i = 0; i < items.size(); ++i) {
            Session::Impl& s = *items[i].session->impl_;
            const int64_t remaining = int64_t(items[i].tokens.size()) - e.done[i];
            const int64_t len = std::min({remaining, s.scratch.rows, max_rows});
            if (len == 0 || rows + len > max_rows) continue;
            e.pass.push_back(share_of(s, items[i].tokens, items[i].out, e.done[i], len, vocab, items[i].logit_rows));
            e.pass_item.push_back(i);
            rows += len;
        }
        if (e.pass.empty()) break;  // every item ran all its tokens
        if (Status st = engine::forward_batch(e.batch_ctx, e.batch, e.pass, e.head_staging); !st) return fail(st);
        for (size_t k = 0; k < e.pass.size(); ++k) {
            const size_t i = e.pass_item[k];
            if (Status st = run_mtp(*items[i].session->impl_, e.pass[k], items[i].out, e.done[i],
                                    int64_t(items[i].tokens.size()), vocab, items[i].logit_rows);
                !st)
                return fail(st);
            e.done[i] += e.pass[k].n;
        }
    }
    return Status::ok();
}

}  // namespace dsv4
