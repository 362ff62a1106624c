// The layer loop and the head (MODEL_SPEC §5.1, §5.2, §5.6), and the MoE sub-block (§5.5).
#include "engine/forward.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_ops.h"

namespace dsv4::engine {

namespace cpu = backend::cpu;

ForwardScratch make_forward_scratch(const model::ModelConfig& cfg, int64_t rows, int64_t max_context) {
    ForwardScratch s;
    const int64_t S = rows, D = cfg.hidden_size, H = cfg.num_heads, hd = cfg.head_dim;
    auto sz = [](int64_t v) { return size_t(std::max<int64_t>(v, 1)); };
    s.rows = S;
    s.positions.resize(sz(S));
    s.streams_a.resize(sz(S * cfg.hc_mult * D));
    s.streams_b.resize(sz(S * cfg.hc_mult * D));
    s.hc_x.resize(sz(S * D));
    s.normed.resize(sz(S * D));
    s.block_out.resize(sz(S * D));
    s.pre.resize(sz(S * cfg.hc_mult));
    s.post.resize(sz(S * cfg.hc_mult));
    s.comb.resize(sz(S * cfg.hc_mult * cfg.hc_mult));
    s.qr.resize(sz(S * cfg.q_lora_rank));
    s.q.resize(sz(S * H * hd));
    s.attn.resize(sz(S * H * hd));
    s.z.resize(sz(S * cfg.o_groups * cfg.o_lora_rank));
    // open window + chunk: HCA (127 + S) x 512, CSA (3 + S) x 1024
    const int64_t series = std::max((128 - 1 + S) * hd, (4 - 1 + S) * 2 * hd);
    s.series_kv.resize(sz(series));
    s.series_score.resize(sz(series));
    s.pooled.resize(sz((S / 4 + 2) * hd));
    const int64_t hca_entries = max_context / 128, csa_entries = max_context / 4;
    s.idx_width = cfg.window + std::max<int64_t>(cfg.index_topk, hca_entries);
    s.idx.resize(sz(S * s.idx_width));
    s.index_q.resize(sz(S * cfg.index_n_heads * cfg.index_head_dim));
    s.index_w.resize(sz(S * cfg.index_n_heads));
    s.index_scores.resize(sz(S * csa_entries));
    s.index_topk.resize(sz(S * cfg.index_topk));
    s.route_idx.resize(sz(S * cfg.n_experts_per_token));
    s.route_w.resize(sz(S * cfg.n_experts_per_token));
    s.expert_out.resize(sz(S * cfg.n_experts_per_token * D));
    s.shared_out.resize(sz(S * D));
    return s;
}

backend::cpu::WorkspaceLimits workspace_limits(const model::ModelConfig& cfg, int64_t rows, int64_t max_context,
                                               int threads) {
    backend::cpu::WorkspaceLimits l;
    const int64_t D = cfg.hidden_size;
    l.tokens = rows * std::max<int64_t>(cfg.hc_mult, 1);
    l.max_in = std::max({D, cfg.q_lora_rank, cfg.o_groups * cfg.o_lora_rank, cfg.moe_inter_dim, cfg.o_group_in()});
    l.dim = D;
    l.inter = cfg.moe_inter_dim;
    l.experts = cfg.n_routed_experts;
    l.k = cfg.n_experts_per_token;
    l.attn_width = cfg.window + std::max<int64_t>(cfg.index_topk, max_context / 128);
    l.head_dim = cfg.head_dim;
    l.max_entries = max_context / 4;
    l.max_ratio = 128;
    l.threads = threads;
    return l;
}

ForwardContext make_forward_context(const model::ModelConfig& cfg, const ModelViews& weights, backend::Exec exec) {
    ForwardContext c;
    c.cfg = &cfg;
    c.weights = &weights;
    c.exec = exec;
    c.freqs_window = backend::rope_freqs(cfg.rope_theta, 1.0, cfg.original_max_position, cfg.beta_fast,
                                         cfg.beta_slow, int(cfg.rope_head_dim));
    c.freqs_compress = backend::rope_freqs(cfg.compress_rope_theta, cfg.rope_factor, cfg.original_max_position,
                                           cfg.beta_fast, cfg.beta_slow, int(cfg.rope_head_dim));
    return c;
}

Status moe_block(const ForwardContext& ctx, const LayerViews& layer, ForwardScratch& s, const int32_t* tokens,
                 const float* x, int64_t n, float* out) {
    const model::ModelConfig& cfg = *ctx.cfg;
    const MoeViews& w = layer.ffn;
    const int64_t k = cfg.n_experts_per_token;

    backend::RouterParams rp;
    rp.x = x;
    rp.tokens = n;
    rp.n_experts = cfg.n_routed_experts;
    rp.k = k;
    rp.gate = w.gate;
    if (layer.hash_routed) {
        rp.tid2eid = w.tid2eid.data();
        rp.vocab = cfg.vocab_size;
        rp.token_ids = tokens;
    } else {
        rp.bias = w.gate_bias;
    }
    rp.routed_scale = float(cfg.routed_scaling_factor);
    rp.idx = s.route_idx.data();
    rp.weights = s.route_w.data();
    DSV4_RETURN_IF_ERROR(cpu::router(ctx.exec, rp));

    backend::RoutedExpertsParams ep;
    ep.x = x;
    ep.tokens = n;
    ep.k = k;
    ep.n_experts = cfg.n_routed_experts;
    ep.experts = w.experts.data();
    ep.idx = s.route_idx.data();
    ep.weights = s.route_w.data();
    ep.limit = float(cfg.swiglu_limit);
    ep.out = s.expert_out.data();
    DSV4_RETURN_IF_ERROR(cpu::routed_experts(ctx.exec, ep));

    backend::ExpertParams sp;
    sp.x = x;
    sp.tokens = n;
    sp.w = w.shared;
    sp.limit = float(cfg.swiglu_limit);
    sp.y = s.shared_out.data();
    DSV4_RETURN_IF_ERROR(cpu::expert(ctx.exec, sp));

    backend::MoeSumParams mp;
    mp.expert_out = s.expert_out.data();
    mp.idx = s.route_idx.data();
    mp.shared = s.shared_out.data();
    mp.tokens = n;
    mp.k = k;
    mp.dim = cfg.hidden_size;
    mp.y = out;
    return cpu::moe_sum(ctx.exec, mp);
}

namespace {

// hc_pre + RMSNorm: streams [n, 4, D] → s.normed [n, D]; s.pre/post/comb filled.
Status enter_sub_block(const ForwardContext& ctx, const HcViews& hc, const backend::WeightView& norm,
                       ForwardScratch& s, const float* streams, int64_t n) {
    const model::ModelConfig& cfg = *ctx.cfg;
    backend::HcPreParams hp;
    hp.x = streams;
    hp.tokens = n;
    hp.dim = cfg.hidden_size;
    hp.fn = hc.fn;
    hp.scale = hc.scale;
    hp.base = hc.base;
    hp.iters = int(cfg.hc_sinkhorn_iters);
    hp.hc_eps = float(cfg.hc_eps);
    hp.norm_eps = float(cfg.rms_norm_eps);
    hp.pre = s.pre.data();
    hp.post = s.post.data();
    hp.comb = s.comb.data();
    hp.x_out = s.hc_x.data();
    DSV4_RETURN_IF_ERROR(cpu::hc_pre(ctx.exec, hp));

    backend::RmsNormParams np;
    np.x = s.hc_x.data();
    np.rows = n;
    np.dim = cfg.hidden_size;
    np.weight = norm;
    np.eps = float(cfg.rms_norm_eps);
    np.y = s.normed.data();
    return cpu::rmsnorm(ctx.exec, np);
}

// hc_post: s.block_out + residual streams → out streams.
Status leave_sub_block(const ForwardContext& ctx, ForwardScratch& s, const float* residual, float* out, int64_t n) {
    backend::HcPostParams hp;
    hp.a = s.block_out.data();
    hp.residual = residual;
    hp.post = s.post.data();
    hp.comb = s.comb.data();
    hp.tokens = n;
    hp.dim = ctx.cfg->hidden_size;
    hp.out = out;
    return cpu::hc_post(ctx.exec, hp);
}

}  // namespace

Status block_forward(const ForwardContext& ctx, const LayerViews& layer, LayerState& ls, const SequenceState& state,
                     ForwardScratch& s, const int32_t* tokens, int64_t n, float* streams, float* spare) {
    DSV4_RETURN_IF_ERROR(enter_sub_block(ctx, layer.hc_attn, layer.attn_norm, s, streams, n));
    DSV4_RETURN_IF_ERROR(attention_block(ctx, layer, ls, state, s, s.normed.data(), n, s.block_out.data()));
    DSV4_RETURN_IF_ERROR(leave_sub_block(ctx, s, streams, spare, n));
    DSV4_RETURN_IF_ERROR(enter_sub_block(ctx, layer.hc_ffn, layer.ffn_norm, s, spare, n));
    DSV4_RETURN_IF_ERROR(moe_block(ctx, layer, s, tokens, s.normed.data(), n, s.block_out.data()));
    return leave_sub_block(ctx, s, spare, streams, n);
}

Status head_forward(const ForwardContext& ctx, const HcViews& hc_head, const backend::WeightView& norm,
                    ForwardScratch& s, const float* streams, int64_t n, float* logits) {
    const model::ModelConfig& cfg = *ctx.cfg;
    backend::HcHeadParams hp;
    hp.x = streams;
    hp.tokens = n;
    hp.dim = cfg.hidden_size;
    hp.fn = hc_head.fn;
    hp.scale = hc_head.scale;
    hp.base = hc_head.base;
    hp.hc_eps = float(cfg.hc_eps);
    hp.norm_eps = float(cfg.rms_norm_eps);
    hp.y = s.hc_x.data();
    DSV4_RETURN_IF_ERROR(cpu::hc_head(ctx.exec, hp));

    backend::RmsNormParams np;
    np.x = s.hc_x.data();
    np.rows = n;
    np.dim = cfg.hidden_size;
    np.weight = norm;
    np.eps = float(cfg.rms_norm_eps);
    np.y = s.normed.data();
    DSV4_RETURN_IF_ERROR(cpu::rmsnorm(ctx.exec, np));

    backend::LinearParams lp;  // the head keeps f32 weights and f32 logits in both modes
    lp.x = s.normed.data();
    lp.tokens = n;
    lp.w = ctx.weights->head;
    lp.out = backend::LinearOut::kF32;
    lp.y = logits;
    return cpu::linear(ctx.exec, lp);
}

Status forward_chunk(const ForwardContext& ctx, SequenceState& state, ForwardScratch& s, const int32_t* tokens,
                     int64_t n, float* logits, float* final_streams) {
    const model::ModelConfig& cfg = *ctx.cfg;
    const ModelViews& w = *ctx.weights;
    const int64_t D = cfg.hidden_size, hc = cfg.hc_mult;
    if (n <= 0 || n > s.rows) return internal_error("forward_chunk: chunk of " + std::to_string(n) + " tokens");
    for (int64_t i = 0; i < n; ++i) s.positions[size_t(i)] = state.position + i;

    // embedding, copied into all hc streams
    backend::EmbeddingParams ep;
    ep.tokens = tokens;
    ep.n = n;
    ep.table = w.embed;
    ep.out = s.hc_x.data();
    DSV4_RETURN_IF_ERROR(cpu::embedding(ctx.exec, ep));
    float* streams = s.streams_a.data();
    for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < hc; ++j)
            std::memcpy(streams + (t * hc + j) * D, s.hc_x.data() + t * D, size_t(D) * sizeof(float));

    for (size_t li = 0; li < w.layers.size(); ++li)
        DSV4_RETURN_IF_ERROR(
            block_forward(ctx, w.layers[li], state.layers[li], state, s, tokens, n, streams, s.streams_b.data()));
    if (final_streams) std::memcpy(final_streams, streams, size_t(n * hc * D) * sizeof(float));
    DSV4_RETURN_IF_ERROR(head_forward(ctx, w.hc_head, w.norm, s, streams, n, logits));
    state.position += n;
    return Status::ok();
}

}  // namespace dsv4::engine
