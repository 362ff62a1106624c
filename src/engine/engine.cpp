// The public Engine / Session API (include/dsv4/engine.h, session.h) over the CPU forward.
#include <algorithm>
#include <memory>
#include <string>

#include "backend/cpu/workspace.h"
#include "core/thread_pool.h"
#include "dsv4/engine.h"
#include "dsv4/session.h"
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
}  // namespace

const char* engine_precision_name(EnginePrecision p) { return p == EnginePrecision::kF32 ? "f32" : "reference"; }
const char* engine_backend_name(EngineBackend b) { return b == EngineBackend::kCuda ? "cuda" : "cpu"; }

struct Engine::Impl {
    EngineOptions options;
    ModelInfo info;
    model::ModelConfig config;
    std::unique_ptr<io::Checkpoint> checkpoint;  // the mapping every weight view points into
    model::ModelWeights weights;
    backend::WeightCopies weight_copies;  // f32 copies of weights no WeightFormat describes
    engine::ModelViews views;
    std::unique_ptr<ThreadPool> pool;
};

struct Session::Impl {
    const Engine::Impl* engine = nullptr;
    engine::ForwardContext ctx;
    engine::SequenceState state;
    engine::ForwardScratch scratch;
    std::unique_ptr<backend::cpu::Workspace> workspace;  // the CPU ops' scratch, reserved here once
    std::unique_ptr<engine::MtpState> mtp;  // only with SessionOptions::mtp
    bool broken = false;  // a failed forward left the layers at different positions
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;
const ModelInfo& Engine::info() const { return impl_->info; }
const EngineOptions& Engine::options() const { return impl_->options; }

Result<std::unique_ptr<Engine>> Engine::load(const std::filesystem::path& model_dir, const EngineOptions& options) {
    if (options.backend == EngineBackend::kCuda)
        return unsupported("backend 'cuda' is not available yet in this build; use --backend cpu");
    auto impl = std::make_unique<Impl>();
    impl->options = options;
    DSV4_ASSIGN_OR_RETURN(impl->config, model::load_config(model_dir));
    DSV4_ASSIGN_OR_RETURN(impl->checkpoint, io::Checkpoint::open(model_dir));
    DSV4_ASSIGN_OR_RETURN(impl->weights, model::map_weights(*impl->checkpoint, impl->config));
    DSV4_ASSIGN_OR_RETURN(impl->views, engine::make_model_views(impl->weights, impl->config, impl->weight_copies));
    impl->pool = std::make_unique<ThreadPool>(options.threads);

    ModelInfo& info = impl->info;
    info.name = model_dir.string();
    info.layout = model::layout_name(impl->weights.layout);
    info.vocab_size = impl->config.vocab_size;
    info.hidden_size = impl->config.hidden_size;
    info.num_layers = impl->config.num_layers;
    info.max_position = impl->config.max_position;
    info.has_mtp = impl->views.mtp != nullptr;
    return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Result<std::unique_ptr<Session>> Engine::create_session(const SessionOptions& options) {
    const Impl& e = *impl_;
    if (options.mtp && !e.info.has_mtp)
        return unsupported("this checkpoint has no MTP block (mtp.0.*), so SessionOptions::mtp cannot be set");
    int64_t max_context = options.max_context ? options.max_context
                                              : std::min<int64_t>(e.config.max_position, kDefaultMaxContext);
    if (max_context < 1 || max_context > e.config.max_position)
        return out_of_range("max context " + std::to_string(max_context) + " is outside [1, " +
                            std::to_string(e.config.max_position) + "] (the model's max_position_embeddings)");
    auto s = std::make_unique<Session::Impl>();
    s->engine = &e;
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
    s->scratch = engine::make_forward_scratch(e.config, rows, max_context);
    if (options.mtp) s->mtp = std::make_unique<engine::MtpState>(engine::make_mtp_state(e.config, max_context, rows));
    return std::unique_ptr<Session>(new Session(std::move(s)));
}

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;
int64_t Session::position() const { return impl_->state.position; }
int64_t Session::max_context() const { return impl_->state.max_context; }

void Session::reset() {
    engine::reset_sequence_state(impl_->state);
    if (impl_->mtp) engine::reset_mtp_state(*impl_->mtp);
    impl_->broken = false;
}

Status Session::feed(std::span<const int32_t> tokens, Logits* out) {
    Impl& s = *impl_;
    const int64_t vocab = s.engine->config.vocab_size;
    if (s.broken) return internal_error("the session failed in an earlier step; reset it before feeding more tokens");
    if (tokens.empty()) return invalid_argument("no tokens to feed (the token list is empty)");
    for (size_t i = 0; i < tokens.size(); ++i)
        if (tokens[i] < 0 || tokens[i] >= vocab)
            return invalid_argument("token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                                    " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    const int64_t n = int64_t(tokens.size());
    if (s.state.position + n > s.state.max_context)
        return out_of_range(std::to_string(s.state.position + n) + " tokens exceed the session's max context of " +
                            std::to_string(s.state.max_context) + " (" + std::to_string(s.state.position) +
                            " already fed)");
    out->rows = n;
    out->vocab = vocab;
    out->values.resize(size_t(n * vocab));
    if (s.mtp) {
        out->mtp.resize(size_t(n * vocab));
    } else {
        out->mtp.clear();
    }
    for (int64_t off = 0; off < n;) {
        const int64_t len = std::min(s.scratch.rows, n - off);
        const int64_t p0 = s.state.position;
        Status st = engine::forward_chunk(s.ctx, s.state, s.scratch, tokens.data() + off, len,
                                          out->values.data() + off * vocab,
                                          s.mtp ? s.mtp->main_streams.data() : nullptr);
        if (st && s.mtp)
            st = engine::mtp_chunk(s.ctx, *s.mtp, s.scratch, tokens.data() + off, len, p0,
                                   out->mtp.data() + off * vocab);
        if (!st) {
            s.broken = true;
            return st;
        }
        off += len;
    }
    return Status::ok();
}

}  // namespace dsv4
