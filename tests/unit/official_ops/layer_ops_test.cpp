// Every op of blocks 0–4, fed the recorded inputs, against the recorded outputs (README "Op map").
#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "official_fixture.h"

namespace dsv4::official {
namespace {

using namespace backend;

class LayerOps : public ::testing::TestWithParam<int> {
protected:
    void SetUp() override {
        std::string err;
        m_ = &model_or_fail(&err);
        ASSERT_TRUE(err.empty()) << err;
        layer_ = GetParam();
        z_ = fixture("layer" + std::to_string(layer_) + ".npz", &err);
        ASSERT_NE(z_, nullptr) << err;
        L_ = &m_->weights.layers[size_t(layer_)];
        const auto& c = m_->config;
        ratio_ = c.compress_ratio(layer_);
        freqs_ = ratio_ == 0 ? rope_freqs(c.rope_theta, 1.0, 0, 0, 0)
                             : rope_freqs(c.compress_rope_theta, c.rope_factor, c.original_max_position, c.beta_fast,
                                          c.beta_slow);
        for (int64_t t = 0; t < kT; ++t) pos_.push_back(t);
        where_ = "layer" + std::to_string(layer_);
    }
    // Rows of a [T, ...] array at the stored query positions.
    std::vector<float> rows_of(const std::vector<float>& full, int64_t width) {
        std::vector<float> out;
        for (int32_t r : i32_of(*z_, "rows")) out.insert(out.end(), full.begin() + r * width, full.begin() + (r + 1) * width);
        return out;
    }

    const Model* m_ = nullptr;
    const io::NpzFile* z_ = nullptr;
    const model::LayerWeights* L_ = nullptr;
    int layer_ = 0, ratio_ = 0;
    RopeFreqs freqs_;
    std::vector<int64_t> pos_;
    std::string where_;
};

TEST_P(LayerOps, HyperConnectionsAndNorms) {
    const int64_t D = m_->config.hidden_size;
    for (const std::string side : {"attn", "ffn"}) {
        const auto& hc = side == "attn" ? L_->hc_attn : L_->hc_ffn;
        auto x = f32_of(*z_, side == "attn" ? "h_in" : "h_mid");
        std::vector<float> mixes(kT * 24), pre(kT * 4), post(kT * 4), comb(kT * 16), xo(kT * D), nrm(kT * D);
        ASSERT_TRUE(cpu::hc_pre(exec_ref(), {.x = x.data(), .tokens = kT, .dim = D, .fn = view(hc.fn),
                                             .scale = view(hc.scale), .base = view(hc.base), .mixes = mixes.data(),
                                             .pre = pre.data(), .post = post.data(), .comb = comb.data(),
                                             .x_out = xo.data()})
                        .is_ok());
        expect_close(where_, side + "_hc_mixes", mixes, f32_of(*z_, side + "_hc_mixes"), kClassA);
        expect_close(where_, side + "_hc_pre", pre, f32_of(*z_, side + "_hc_pre"), kClassA);
        expect_close(where_, side + "_hc_post", post, f32_of(*z_, side + "_hc_post"), kClassA);
        expect_close(where_, side + "_hc_comb", comb, f32_of(*z_, side + "_hc_comb"), kClassA);
        expect_close(where_, side + "_hc_x", xo, f32_of(*z_, side + "_hc_x"), kClassB);
        auto hx = f32_of(*z_, side + "_hc_x");
        ASSERT_TRUE(cpu::rmsnorm(exec_ref(), {.x = hx.data(), .rows = kT, .dim = D,
                                              .weight = view(side == "attn" ? L_->attn_norm : L_->ffn_norm),
                                              .y = nrm.data()})
                        .is_ok());
        expect_close(where_, side + "_norm", nrm, f32_of(*z_, side + "_norm"), kClassB);
    }
}

TEST_P(LayerOps, HcPost) {
    const int64_t D = m_->config.hidden_size;
    std::vector<float> out(kT * 4 * D);
    auto a = f32_of(*z_, "attn_out"), r = f32_of(*z_, "h_in"), post = f32_of(*z_, "attn_hc_post"),
         comb = f32_of(*z_, "attn_hc_comb");
    ASSERT_TRUE(cpu::hc_post(exec_ref(), {.a = a.data(), .residual = r.data(), .post = post.data(),
                                          .comb = comb.data(), .tokens = kT, .dim = D, .out = out.data()})
                    .is_ok());
    expect_close(where_, "h_mid", out, f32_of(*z_, "h_mid"), kClassB);
    // FFN side: its output is the next block's input
    std::string err;
    const io::NpzFile* next = layer_ + 1 < 5 ? fixture("layer" + std::to_string(layer_ + 1) + ".npz", &err)
                                             : fixture("head.npz", &err);
    ASSERT_NE(next, nullptr) << err;
    auto m = f32_of(*z_, "moe_out"), h = f32_of(*z_, "h_mid"), fpost = f32_of(*z_, "ffn_hc_post"),
         fcomb = f32_of(*z_, "ffn_hc_comb");
    ASSERT_TRUE(cpu::hc_post(exec_ref(), {.a = m.data(), .residual = h.data(), .post = fpost.data(),
                                          .comb = fcomb.data(), .tokens = kT, .dim = D, .out = out.data()})
                    .is_ok());
    expect_close(where_, "h_out", out, f32_of(*next, layer_ + 1 < 5 ? "h_in" : "h_final"), kClassB);
}

TEST_P(LayerOps, QueryPath) {
    const auto& c = m_->config;
    const int64_t H = c.num_heads, ql = c.q_lora_rank;
    auto x = f32_of(*z_, "attn_norm");
    std::vector<float> qr(kT * ql), q(kT * H * 512);
    ASSERT_TRUE(cpu::linear(exec_ref(), {.x = x.data(), .tokens = kT, .w = view(L_->attn.wq_a), .y = qr.data()}).is_ok());
    ASSERT_TRUE(cpu::rmsnorm(exec_ref(), {.x = qr.data(), .rows = kT, .dim = ql, .weight = view(L_->attn.q_norm),
                                          .y = qr.data()})
                    .is_ok());
    expect_close(where_, "qr", qr, f32_of(*z_, "qr"), kClassC);
    // q from the recorded qr
    auto qr_rec = f32_of(*z_, "qr");
    ASSERT_TRUE(cpu::linear(exec_ref(), {.x = qr_rec.data(), .tokens = kT, .w = view(L_->attn.wq_b), .y = q.data()}).is_ok());
    ASSERT_TRUE(cpu::q_head_norm(exec_ref(), {.q = q.data(), .tokens = kT, .heads = H, .head_dim = 512}).is_ok());
    ASSERT_TRUE(cpu::rope(exec_ref(), {.x = q.data(), .tokens = kT, .vecs = H, .vec_stride = 512, .offset = 448,
                                       .positions = pos_.data(), .freqs = &freqs_})
                    .is_ok());
    expect_close(where_, "q", rows_of(q, H * 512), f32_of(*z_, "q"), kClassE);
    // the composite gives the same
    std::vector<float> qr2(kT * ql), q2(kT * H * 512);
    ASSERT_TRUE(cpu::q_path(exec_ref(), {.x = x.data(), .tokens = kT, .heads = H, .wq_a = view(L_->attn.wq_a),
                                         .q_norm = view(L_->attn.q_norm), .wq_b = view(L_->attn.wq_b),
                                         .positions = pos_.data(), .freqs = &freqs_, .qr = qr2.data(),
                                         .q = q2.data()})
                    .is_ok());
    EXPECT_EQ(qr2, qr);
}

TEST_P(LayerOps, WindowKv) {
    auto x = f32_of(*z_, "attn_norm");
    std::vector<float> kv(kT * 512);
    ASSERT_TRUE(cpu::window_kv(exec_ref(), {.x = x.data(), .tokens = kT, .wkv = view(L_->attn.wkv),
                                            .kv_norm = view(L_->attn.kv_norm), .positions = pos_.data(),
                                            .freqs = &freqs_, .kv = kv.data()})
                    .is_ok());
    expect_close(where_, "kv", kv, f32_of(*z_, "kv"), kClassD);
}

// Projections, pooling of all complete windows from position 0, and the finish; each stage from recorded inputs.
void run_compressor(LayerOps* t, const io::NpzFile& z, const model::CompressorWeights& w, int64_t ratio,
                    int64_t c, CompressedKind kind, const std::string& where, const std::string& pooled_name,
                    const std::string& normed_name, const std::string& out_name, const RopeFreqs& freqs,
                    const std::vector<int64_t>& pos) {
    auto x = f32_of(z, "attn_norm");
    const bool overlap = ratio == 4;
    const int64_t width = (overlap ? 2 : 1) * c, n = kT / ratio;
    std::vector<float> kv(kT * width), score(kT * width), pooled(n * c), normed(n * c), out(n * c);
    ASSERT_TRUE(cpu::compressor_project(exec_ref(), {.x = x.data(), .tokens = kT, .wkv = view(w.wkv),
                                                     .wgate = view(w.wgate), .ape = view(w.ape), .ratio = ratio,
                                                     .positions = pos.data(), .kv = kv.data(), .score = score.data()})
                    .is_ok());
    ASSERT_TRUE(cpu::compressor_pool(exec_ref(), {.kv = kv.data(), .score = score.data(), .n_windows = n,
                                                  .ratio = ratio, .head_dim = c, .overlap = overlap,
                                                  .out = pooled.data()})
                    .is_ok());
    expect_close(where, pooled_name, pooled, f32_of(z, pooled_name), kClassB);
    auto pooled_rec = f32_of(z, pooled_name);
    ASSERT_TRUE(cpu::compressor_finish(exec_ref(), {.pooled = pooled_rec.data(), .n = n, .head_dim = c,
                                                    .ratio = ratio, .kind = kind, .norm = view(w.norm),
                                                    .freqs = &freqs, .normed = normed.data(), .out = out.data()})
                    .is_ok());
    expect_close(where, normed_name, normed, f32_of(z, normed_name), kClassB);
    expect_close(where, out_name, out, f32_of(z, out_name), kind == CompressedKind::kMain ? kClassD : kClassDIdx);
    (void)t;
}

// Compressed layers only (the recorded model: 1 and 3 CSA, 2 and 4 HCA; layer 0 is SWA).
class CompressedLayerOps : public LayerOps {};
// CSA layers only: the lightning indexer.
class CsaLayerOps : public LayerOps {};

TEST_P(CompressedLayerOps, Compressor) {
    ASSERT_NE(ratio_, 0) << "instantiated for a layer without a compressor";
    run_compressor(this, *z_, L_->attn.compressor, ratio_, 512, CompressedKind::kMain, where_, "cmp_pooled",
                   "cmp_normed", "cmp_entries", freqs_, pos_);
}

TEST_P(CsaLayerOps, Indexer) {
    ASSERT_EQ(ratio_, 4) << "instantiated for a layer without an indexer";
    const auto& c = m_->config;
    const int64_t IH = c.index_n_heads, n = kT / 4;
    auto qr = f32_of(*z_, "qr");
    std::vector<float> iq(kT * IH * 128);
    ASSERT_TRUE(cpu::indexer_q(exec_ref(), {.qr = qr.data(), .tokens = kT, .heads = IH,
                                            .wq_b = view(L_->attn.indexer.wq_b), .positions = pos_.data(),
                                            .freqs = &freqs_, .q = iq.data()})
                    .is_ok());
    expect_close(where_, "idx_q", iq, f32_of(*z_, "idx_q"), kClassDIdx);

    auto x = f32_of(*z_, "attn_norm");
    std::vector<float> w_raw(kT * IH), w(kT * IH);
    const float scale = float(1.0 / std::sqrt(128.0) / std::sqrt(double(IH)));
    ASSERT_TRUE(cpu::indexer_weights(exec_ref(), {.x = x.data(), .tokens = kT,
                                                  .weights_proj = view(L_->attn.indexer.weights_proj),
                                                  .scale = scale, .w_raw = w_raw.data(), .w = w.data()})
                    .is_ok());
    expect_close(where_, "idx_w_raw", w_raw, f32_of(*z_, "idx_w_raw"), kClassB);
    expect_close(where_, "idx_w", w, f32_of(*z_, "idx_w"), kClassB);

    run_compressor(this, *z_, L_->attn.indexer.compressor, 4, 128, CompressedKind::kIndexer, where_, "idx_k_pooled",
                   "idx_k_normed", "idx_keys", freqs_, pos_);

    auto q_rec = f32_of(*z_, "idx_q"), k_rec = f32_of(*z_, "idx_keys"), w_rec = f32_of(*z_, "idx_w");
    std::vector<float> scores(kT * n);
    ASSERT_TRUE(cpu::indexer_scores(exec_ref(), {.q = q_rec.data(), .keys = k_rec.data(), .w = w_rec.data(),
                                                 .tokens = kT, .heads = IH, .n = n, .ratio = 4,
                                                 .positions = pos_.data(), .scores = scores.data()})
                    .is_ok());
    expect_close(where_, "idx_scores", scores, f32_of(*z_, "idx_scores"), kClassB);

    // top-k from the recorded scores: equal sets, except swaps among candidates tied with the recorded k-th score
    auto s_rec = f32_of(*z_, "idx_scores");
    auto ref_idx = i32_of(*z_, "idx_topk");
    const int64_t k = c.index_topk;
    std::vector<int32_t> idx(kT * k);
    ASSERT_TRUE(cpu::topk(exec_ref(), {.scores = s_rec.data(), .rows = kT, .n = n, .k = k, .idx = idx.data()}).is_ok());
    int differing = 0, tie_swaps = 0;
    for (int64_t t = 0; t < kT; ++t) {
        std::set<int32_t> a, b;
        for (int64_t j = 0; j < k; ++j) {
            if (ref_idx[t * k + j] >= 0) a.insert(ref_idx[t * k + j]);
            if (idx[t * k + j] >= 0) b.insert(idx[t * k + j]);
        }
        if (a == b) continue;
        ++differing;
        std::vector<float> finite;
        for (int64_t s = 0; s < n; ++s)
            if (std::isfinite(s_rec[t * n + s])) finite.push_back(s_rec[t * n + s]);
        std::sort(finite.rbegin(), finite.rend());
        const float kth = finite[size_t(std::min<int64_t>(k, int64_t(finite.size())) - 1)];
        for (int32_t j : a)
            if (!b.count(j)) {
                EXPECT_EQ(s_rec[t * n + j], kth) << where_ << " t=" << t << " entry " << j;
            }
        for (int32_t j : b)
            if (!a.count(j)) {
                EXPECT_EQ(s_rec[t * n + j], kth) << where_ << " t=" << t << " entry " << j;
            }
        ++tie_swaps;
    }
    std::printf("[official] %-10s %-14s sets differ at %d of %lld positions (all exact ties: %d)\n", where_.c_str(),
                "idx_topk", differing, (long long)kT, tie_swaps);
}

TEST_P(LayerOps, SparseAttentionAndOutput) {
    const auto& c = m_->config;
    const int64_t H = c.num_heads, G = c.o_groups, R = c.o_lora_rank, D = c.hidden_size;
    auto rows = i32_of(*z_, "rows");
    const int64_t S = int64_t(rows.size());
    auto kv_all = f32_of(*z_, "kv");
    if (ratio_ != 0) {
        auto cmp = f32_of(*z_, "cmp_entries");
        kv_all.insert(kv_all.end(), cmp.begin(), cmp.end());
    }
    auto topk_all = i32_of(*z_, "attn_topk");
    const int64_t K = int64_t(topk_all.size()) / kT;
    std::vector<int32_t> topk_rows;
    std::vector<int64_t> row_pos;
    for (int32_t r : rows) {
        topk_rows.insert(topk_rows.end(), topk_all.begin() + r * K, topk_all.begin() + (r + 1) * K);
        row_pos.push_back(r);
    }
    auto q = f32_of(*z_, "q");
    std::vector<float> o(S * H * 512);
    ASSERT_TRUE(cpu::sparse_attn(exec_ref(), {.q = q.data(), .kv = kv_all.data(), .idx = topk_rows.data(),
                                              .tokens = S, .heads = H, .n_kv = int64_t(kv_all.size()) / 512,
                                              .topk = K, .sink = view(L_->attn.sink),
                                              .scale = float(1.0 / std::sqrt(512.0)), .out = o.data()})
                    .is_ok());
    expect_close(where_, "o", o, f32_of(*z_, "o"), kClassF);

    // de-rotation of the recorded o
    auto o_rec = f32_of(*z_, "o");
    ASSERT_TRUE(cpu::rope(exec_ref(), {.x = o_rec.data(), .tokens = S, .vecs = H, .vec_stride = 512, .offset = 448,
                                       .positions = row_pos.data(), .freqs = &freqs_, .inverse = true})
                    .is_ok());
    std::vector<float> derot;
    for (int64_t r = 0; r < S * H; ++r) derot.insert(derot.end(), o_rec.begin() + r * 512 + 448, o_rec.begin() + (r + 1) * 512);
    expect_close(where_, "o_derot_rope", derot, f32_of(*z_, "o_derot_rope"), kClassB);

    // wo_a on the recorded o with its de-rotated rope channels
    auto o_in = f32_of(*z_, "o");
    auto dr = f32_of(*z_, "o_derot_rope");
    for (int64_t r = 0; r < S * H; ++r) std::copy(dr.begin() + r * 64, dr.begin() + (r + 1) * 64, o_in.begin() + r * 512 + 448);
    std::vector<float> z(S * G * R);
    ASSERT_TRUE(cpu::wo_a(exec_ref(), {.o = o_in.data(), .tokens = S, .heads = H, .groups = G, .rank = R,
                                       .wo_a = view(L_->attn.wo_a), .z = z.data()})
                    .is_ok());
    expect_close(where_, "wo_a", z, rows_of(f32_of(*z_, "wo_a"), G * R), kClassB);

    // wo_b on the recorded wo_a (all positions)
    auto za = f32_of(*z_, "wo_a");
    std::vector<float> out(kT * D);
    ASSERT_TRUE(cpu::linear(exec_ref(), {.x = za.data(), .tokens = kT, .w = view(L_->attn.wo_b), .y = out.data()}).is_ok());
    expect_close(where_, "attn_out", out, f32_of(*z_, "attn_out"), kClassC);
}

TEST_P(LayerOps, RouterExpertsMoe) {
    const auto& c = m_->config;
    const int64_t D = c.hidden_size, E = c.n_routed_experts, K = c.n_experts_per_token;
    auto x = f32_of(*z_, "ffn_norm");
    std::string err;
    auto tokens = i32_of(*fixture("head.npz", &err), "tokens");
    std::vector<float> logits(kT * E), scores(kT * E), w(kT * K);
    std::vector<int32_t> idx(kT * K);
    const auto& ffn = L_->ffn;
    std::vector<int64_t> tid2eid;
    RouterParams rp{.x = x.data(), .tokens = kT, .n_experts = E, .k = K, .gate = view(ffn.gate),
                    .routed_scale = float(c.routed_scaling_factor), .logits = logits.data(),
                    .scores = scores.data(), .idx = idx.data(), .weights = w.data()};
    if (ffn.tid2eid.present()) {
        tid2eid.resize(size_t(ffn.tid2eid.numel()));
        std::memcpy(tid2eid.data(), ffn.tid2eid.data, tid2eid.size() * 8);
        rp.tid2eid = tid2eid.data();
        rp.vocab = ffn.tid2eid.rows();
        rp.token_ids = tokens.data();
    } else {
        rp.bias = view(ffn.gate_bias);
    }
    ASSERT_TRUE(cpu::router(exec_ref(), rp).is_ok());
    expect_close(where_, "router_logits", logits, f32_of(*z_, "router_logits"), kClassA);
    expect_close(where_, "router_scores", scores, f32_of(*z_, "router_scores"), kClassA);
    expect_close(where_, "router_w", w, f32_of(*z_, "router_w"), kClassA);
    EXPECT_EQ(idx, i32_of(*z_, "router_idx")) << where_ << ": router_idx must be identical";

    // routed experts with the recorded routing
    auto ridx = i32_of(*z_, "router_idx");
    auto rw = f32_of(*z_, "router_w");
    std::vector<ExpertWeights> experts;
    for (const auto& e : ffn.experts) experts.push_back({view(e.w1), view(e.w2), view(e.w3)});
    std::vector<float> eo(kT * K * D), so(kT * D), mo(kT * D);
    ASSERT_TRUE(cpu::routed_experts(exec_ref(), {.x = x.data(), .tokens = kT, .k = K, .n_experts = E,
                                                 .experts = experts.data(), .idx = ridx.data(), .weights = rw.data(),
                                                 .limit = float(c.swiglu_limit), .out = eo.data()})
                    .is_ok());
    expect_close(where_, "expert_out", eo, f32_of(*z_, "expert_out"), kClassC);
    ASSERT_TRUE(cpu::expert(exec_ref(), {.x = x.data(), .tokens = kT,
                                         .w = {view(ffn.shared.w1), view(ffn.shared.w2), view(ffn.shared.w3)},
                                         .limit = float(c.swiglu_limit), .y = so.data()})
                    .is_ok());
    expect_close(where_, "shared_out", so, f32_of(*z_, "shared_out"), kClassC);
    auto eo_rec = f32_of(*z_, "expert_out"), so_rec = f32_of(*z_, "shared_out");
    ASSERT_TRUE(cpu::moe_sum(exec_ref(), {.expert_out = eo_rec.data(), .idx = ridx.data(), .shared = so_rec.data(),
                                          .tokens = kT, .k = K, .dim = D, .y = mo.data()})
                    .is_ok());
    expect_close(where_, "moe_out", mo, f32_of(*z_, "moe_out"), kClassB);
    // and the whole MoE from ffn_norm (class C)
    ASSERT_TRUE(cpu::moe_sum(exec_ref(), {.expert_out = eo.data(), .idx = ridx.data(), .shared = so.data(),
                                          .tokens = kT, .k = K, .dim = D, .y = mo.data()})
                    .is_ok());
    expect_close(where_, "moe_out(ffn)", mo, f32_of(*z_, "moe_out"), kClassC);
}

std::string layer_name(const ::testing::TestParamInfo<int>& info) { return "layer" + std::to_string(info.param); }

INSTANTIATE_TEST_SUITE_P(Blocks, LayerOps, ::testing::Values(0, 1, 2, 3, 4), layer_name);
INSTANTIATE_TEST_SUITE_P(Blocks, CompressedLayerOps, ::testing::Values(1, 2, 3, 4), layer_name);
INSTANTIATE_TEST_SUITE_P(Blocks, CsaLayerOps, ::testing::Values(1, 3), layer_name);

}  // namespace
}  // namespace dsv4::official
