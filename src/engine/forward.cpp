// The layer loop and the head over a batched pass (MODEL_SPEC §5.1, §5.2, §5.6), and the MoE sub-block (§5.5).
#include "engine/forward.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "backend/cpu/cpu_ops.h"

namespace dsv4::engine {

namespace cpu = backend::cpu;

ForwardScratch make_forward_scratch(const model::ModelConfig& cfg, int64_t rows) {
    ForwardScratch s;
    const int64_t R = rows, D = cfg.hidden_size, H = cfg.num_heads, hd = cfg.head_dim;
    auto sz = [](int64_t v) { return size_t(std::max<int64_t>(v, 1)); };
    s.rows = R;
    s.positions.resize(sz(R));
    s.tokens.resize(sz(R));
    s.streams_a.resize(sz(R * cfg.hc_mult * D));
    s.streams_b.resize(sz(R * cfg.hc_mult * D));
    s.hc_x.resize(sz(R * D));
    s.normed.resize(sz(R * D));
    s.block_out.resize(sz(R * D));
    s.pre.resize(sz(R * cfg.hc_mult));
    s.post.resize(sz(R * cfg.hc_mult));
    s.comb.resize(sz(R * cfg.hc_mult * cfg.hc_mult));
    s.qr.resize(sz(R * cfg.q_lora_rank));
    s.q.resize(sz(R * H * hd));
    s.attn.resize(sz(R * H * hd));
    s.z.resize(sz(R * cfg.o_groups * cfg.o_lora_rank));
    s.window_kv.resize(sz(R * hd));
    s.proj_kv.resize(sz(R * 2 * hd));
    s.proj_score.resize(sz(R * 2 * hd));
    s.index_proj_kv.resize(sz(R * 2 * cfg.index_head_dim));
    s.index_proj_score.resize(sz(R * 2 * cfg.index_head_dim));
    s.index_q.resize(sz(R * cfg.index_n_heads * cfg.index_head_dim));
    s.index_w.resize(sz(R * cfg.index_n_heads));
    s.route_idx.resize(sz(R * cfg.n_experts_per_token));
    s.route_w.resize(sz(R * cfg.n_experts_per_token));
    s.expert_out.resize(sz(R * cfg.n_experts_per_token * D));
    s.shared_out.resize(sz(R * D));
    return s;
}

SequenceScratch make_sequence_scratch(const model::ModelConfig& cfg, int64_t rows, int64_t max_context) {
    SequenceScratch s;
    const int64_t S = rows, hd = cfg.head_dim;
    auto sz = [](int64_t v) { return size_t(std::max<int64_t>(v, 1)); };
    s.rows = S;
    // open window + chunk: HCA (127 + S) x 512, CSA (3 + S) x 1024
    const int64_t series = std::max((128 - 1 + S) * hd, (4 - 1 + S) * 2 * hd);
    s.series_kv.resize(sz(series));
    s.series_score.resize(sz(series));
    s.pooled.resize(sz((S / 4 + 2) * hd));
    const int64_t hca_entries = max_context / 128, csa_entries = max_context / 4;
    s.idx_width = cfg.window + std::max<int64_t>(cfg.index_topk, hca_entries);
    s.idx.resize(sz(S * s.idx_width));
    s.index_scores.resize(sz(S * csa_entries));
    s.index_topk.resize(sz(S * cfg.index_topk));
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

Status block_forward(const ForwardContext& ctx, const LayerViews& layer, int layer_slot, std::span<BatchSeq> seqs,
                     ForwardScratch& s, int64_t rows, float* streams, float* spare) {
    DSV4_RETURN_IF_ERROR(enter_sub_block(ctx, layer.hc_attn, layer.attn_norm, s, streams, rows));
    DSV4_RETURN_IF_ERROR(attention_block(ctx, layer, layer_slot, seqs, s, s.normed.data(), rows, s.block_out.data()));
    DSV4_RETURN_IF_ERROR(leave_sub_block(ctx, s, streams, spare, rows));
    DSV4_RETURN_IF_ERROR(enter_sub_block(ctx, layer.hc_ffn, layer.ffn_norm, s, spare, rows));
    DSV4_RETURN_IF_ERROR(moe_block(ctx, layer, s, s.tokens.data(), s.normed.data(), rows, s.block_out.data()));
    return leave_sub_block(ctx, s, spare, streams, rows);
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

Status forward_batch(const ForwardContext& ctx, ForwardScratch& s, std::span<BatchSeq> seqs,
                     std::span<float> head_staging) {
    const model::ModelConfig& cfg = *ctx.cfg;
    const ModelViews& w = *ctx.weights;
    const int64_t D = cfg.hidden_size, hc = cfg.hc_mult, vocab = cfg.vocab_size;
    if (seqs.empty()) return internal_error("forward_batch: no sequences");
    int64_t rows = 0;
    for (BatchSeq& q : seqs) {
        if (q.n <= 0 || q.n > q.state->chunk_rows || rows + q.n > s.rows)
            return internal_error("forward_batch: a share of " + std::to_string(q.n) + " tokens at row " +
                                  std::to_string(rows) + " does not fit (sequence chunk " +
                                  std::to_string(q.state->chunk_rows) + ", pass " + std::to_string(s.rows) + ")");
        if (q.logits_from < 0 || q.logits_from > q.n)
            return internal_error("forward_batch: logits from row " + std::to_string(q.logits_from) +
                                  " of a share of " + std::to_string(q.n) + " tokens");
        q.row0 = rows;
        for (int64_t i = 0; i < q.n; ++i) {
            s.positions[size_t(rows + i)] = q.state->position + i;
            s.tokens[size_t(rows + i)] = q.tokens[i];
        }
        rows += q.n;
    }
    const int64_t staging_rows = int64_t(head_staging.size()) / std::max<int64_t>(vocab, 1);
    if (seqs.size() > 1 && staging_rows < 1) return internal_error("forward_batch: no head staging for a batch");

    // embedding, copied into all hc streams
    backend::EmbeddingParams ep;
    ep.tokens = s.tokens.data();
    ep.n = rows;
    ep.table = w.embed;
    ep.out = s.hc_x.data();
    DSV4_RETURN_IF_ERROR(cpu::embedding(ctx.exec, ep));
    float* streams = s.streams_a.data();
    for (int64_t t = 0; t < rows; ++t)
        for (int64_t j = 0; j < hc; ++j)
            std::memcpy(streams + (t * hc + j) * D, s.hc_x.data() + t * D, size_t(D) * sizeof(float));

    for (size_t li = 0; li < w.layers.size(); ++li)
        DSV4_RETURN_IF_ERROR(block_forward(ctx, w.layers[li], int(li), seqs, s, rows, streams, s.streams_b.data()));
    for (const BatchSeq& q : seqs)
        if (q.final_streams)
            std::memcpy(q.final_streams, streams + q.row0 * hc * D, size_t(q.n * hc * D) * sizeof(float));

    // The head's input: the rows that get logits, each share's from its logits_from (gathered into the spare
    // streams when some share skips rows), share i's from its head_row0.
    int64_t head_rows = 0;
    bool every_row = true;
    for (BatchSeq& q : seqs) {
        q.head_row0 = head_rows;
        head_rows += q.n - q.logits_from;
        every_row &= q.logits_from == 0;
    }
    const float* head_in = streams;
    if (!every_row) {
        float* gathered = s.streams_b.data();
        for (const BatchSeq& q : seqs)
            std::memcpy(gathered + q.head_row0 * hc * D, streams + (q.row0 + q.logits_from) * hc * D,
                        size_t((q.n - q.logits_from) * hc * D) * sizeof(float));
        head_in = gathered;
    }
    if (seqs.size() == 1) {
        if (head_rows > 0)
            DSV4_RETURN_IF_ERROR(head_forward(ctx, w.hc_head, w.norm, s, head_in, head_rows, seqs[0].logits));
    } else {  // the head over blocks of rows (its weight read once per block), scattered to each sequence
        size_t next = 0;  // first sequence not completely copied
        for (int64_t r0 = 0; r0 < head_rows; r0 += staging_rows) {
            const int64_t r1 = std::min(head_rows, r0 + staging_rows);
            DSV4_RETURN_IF_ERROR(
                head_forward(ctx, w.hc_head, w.norm, s, head_in + r0 * hc * D, r1 - r0, head_staging.data()));
            for (size_t i = next; i < seqs.size() && seqs[i].head_row0 < r1; ++i) {
                const BatchSeq& q = seqs[i];
                const int64_t n = q.n - q.logits_from;
                const int64_t a = std::max(r0, q.head_row0), b = std::min(r1, q.head_row0 + n);
                if (a < b)
                    std::memcpy(q.logits + (a - q.head_row0) * vocab, head_staging.data() + (a - r0) * vocab,
                                size_t((b - a) * vocab) * sizeof(float));
                if (q.head_row0 + n <= r1) next = i + 1;
            }
        }
    }
    for (BatchSeq& q : seqs) q.state->position += q.n;
    return Status::ok();
}

}  // namespace dsv4::engine
