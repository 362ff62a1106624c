// Blocks 0-4: the CUDA kernels against DeepSeek's recorded per-op outputs (tests/data/official_ops, README there): every op the
// CPU reference is checked on in tests/unit/official_ops runs here as the kernel sequence the GPU forward uses
// (src/engine/cuda/gpu_forward.cpp, gpu_attention.cpp) in Precision::kReference, on exactly the recorded inputs
// (bf16 arrays uploaded bit for bit, outputs poisoned with 0xff first), and is compared with the recorded output by
// the same measure and tolerance class as the CPU test (official_fixture.h).
#include "ops/official_ops_gpu.h"

namespace dsv4::official {
namespace {

// -------------------------------------------------------------------------------------------------- blocks 0-4

class GpuLayerOps : public ::testing::TestWithParam<int> {
protected:
    void SetUp() override {
        DSV4_REQUIRE_GPU();
        std::string err;
        m_ = &model_or_fail(&err);
        ASSERT_TRUE(err.empty()) << err;
        layer_ = GetParam();
        z_ = fixture("layer" + std::to_string(layer_) + ".npz", &err);
        ASSERT_NE(z_, nullptr) << err;
        ASSERT_LT(size_t(layer_), m_->weights.layers.size());
        L_ = &m_->weights.layers[size_t(layer_)];
        const auto& c = m_->config;
        ratio_ = c.compress_ratio(layer_);
        // the forward's two tables (gpu_model.cpp): SWA layers without YaRN, compressed layers with it
        freqs_ = ratio_ == 0 ? backend::rope_freqs(c.rope_theta, 1.0, 0, 0, 0)
                             : backend::rope_freqs(c.compress_rope_theta, c.rope_factor, c.original_max_position,
                                                   c.beta_fast, c.beta_slow);
        eps_ = float(c.rms_norm_eps);
        std::vector<int64_t> pos(kT);
        for (int64_t t = 0; t < kT; ++t) pos[size_t(t)] = t;
        auto d = ct::to_device(pos);
        ASSERT_TRUE(d.is_ok()) << d.status().to_string();
        positions_ = std::move(d).value();
        where_ = "gpu:layer" + std::to_string(layer_);
    }
    const int64_t* positions() const { return positions_.as<int64_t>(); }
    // Rows of a [T, ...] array at the stored query positions.
    std::vector<float> rows_of(const std::vector<float>& full, int64_t width) {
        std::vector<float> out;
        for (int32_t r : i32_of(*z_, "rows")) {
            EXPECT_TRUE(r >= 0 && r < kT && int64_t(full.size()) >= (r + 1) * width) << "row " << r;
            if (r < 0 || int64_t(full.size()) < (r + 1) * width) return {};
            out.insert(out.end(), full.begin() + r * width, full.begin() + (r + 1) * width);
        }
        return out;
    }
    // A recorded bf16 array of n elements on the device.
    Result<DeviceBuffer> rec(const std::string& name, int64_t n) {
        auto v = f32_of(*z_, name);
        if (int64_t(v.size()) != n)
            return invalid_argument(where_ + " " + name + " holds " + std::to_string(v.size()) +
                                    " elements, the op needs " + std::to_string(n));
        return bf16_up(v, where_ + " " + name);
    }
    void run_compressor(const model::CompressorWeights& w, int64_t ratio, int64_t c, CompressedKind kind,
                        const std::string& pooled_name, const std::string& normed_name, const std::string& out_name);

    const Model* m_ = nullptr;
    const io::NpzFile* z_ = nullptr;
    const model::LayerWeights* L_ = nullptr;
    int layer_ = 0, ratio_ = 0;
    float eps_ = 1e-6f;
    backend::RopeFreqs freqs_;
    DeviceBuffer positions_;  // int64 [T]: 0..T-1, one prefill from position 0
    std::string where_;
    Gpu gpu_;
};

// hc_pre (sm90_hc_pre) on h_in / h_mid, then the norm (sm90_rmsnorm) on the recorded collapsed streams.
TEST_P(GpuLayerOps, HyperConnectionsAndNorms) {
    const auto& c = m_->config;
    const int64_t D = c.hidden_size;
    for (const std::string side : {"attn", "ffn"}) {
        SCOPED_TRACE(side);
        const auto& hc = side == "attn" ? L_->hc_attn : L_->hc_ffn;
        DeviceWeightView fn, scale, base, norm;
        ASSERT_TRUE(gpu_.put(hc.fn, &fn));
        ASSERT_TRUE(gpu_.put(hc.scale, &scale));
        ASSERT_TRUE(gpu_.put(hc.base, &base));
        ASSERT_TRUE(gpu_.put(side == "attn" ? L_->attn_norm : L_->ffn_norm, &norm));
        OFFICIAL_GPU_ASSIGN(x, rec(side == "attn" ? "h_in" : "h_mid", kT * 4 * D));
        OFFICIAL_GPU_ASSIGN(mixes, ct::poisoned<float>(kT * 24));
        OFFICIAL_GPU_ASSIGN(pre, ct::poisoned<float>(kT * 4));
        OFFICIAL_GPU_ASSIGN(post, ct::poisoned<float>(kT * 4));
        OFFICIAL_GPU_ASSIGN(comb, ct::poisoned<float>(kT * 16));
        OFFICIAL_GPU_ASSIGN(xo, ct::poisoned<uint16_t>(kT * D));
        cuda::HcPreArgs a{.x = x.data(), .tokens = kT, .dim = D, .fn = fn, .scale = scale, .base = base,
                          .iters = int(c.hc_sinkhorn_iters), .hc_eps = float(c.hc_eps), .norm_eps = eps_,
                          .mixes = mixes.as<float>(), .pre = pre.as<float>(), .post = post.as<float>(),
                          .comb = comb.as<float>(), .x_out = xo.data()};
        DSV4_ASSERT_OK(cuda::sm90_hc_pre(kRef, a, nullptr));
        expect_close(where_, side + "_hc_mixes", f32_down(mixes, kT * 24), f32_of(*z_, side + "_hc_mixes"), kClassA);
        expect_close(where_, side + "_hc_pre", f32_down(pre, kT * 4), f32_of(*z_, side + "_hc_pre"), kClassA);
        expect_close(where_, side + "_hc_post", f32_down(post, kT * 4), f32_of(*z_, side + "_hc_post"), kClassA);
        expect_close(where_, side + "_hc_comb", f32_down(comb, kT * 16), f32_of(*z_, side + "_hc_comb"), kClassA);
        expect_close(where_, side + "_hc_x", bf16_down(xo, kT * D), f32_of(*z_, side + "_hc_x"), kClassB);

        OFFICIAL_GPU_ASSIGN(hx, rec(side + "_hc_x", kT * D));
        OFFICIAL_GPU_ASSIGN(nrm, ct::poisoned<uint16_t>(kT * D));
        DSV4_ASSERT_OK(cuda::sm90_rmsnorm(
            kRef, {.x = hx.data(), .rows = kT, .dim = D, .weight = norm, .eps = eps_, .y = nrm.data()}, nullptr));
        expect_close(where_, side + "_norm", bf16_down(nrm, kT * D), f32_of(*z_, side + "_norm"), kClassB);
    }
}

// hc_post (sm90_hc_post) of both sub-blocks; the FFN side's output is the next block's input (or h_final).
TEST_P(GpuLayerOps, HcPost) {
    const int64_t D = m_->config.hidden_size;
    std::string err;
    const io::NpzFile* next = layer_ + 1 < 5 ? fixture("layer" + std::to_string(layer_ + 1) + ".npz", &err)
                                             : fixture("head.npz", &err);
    ASSERT_NE(next, nullptr) << err;
    struct Side {
        const char *a, *residual, *post, *comb;
        const io::NpzFile* ref_file;
        std::string ref_name, label;
    };
    const Side sides[] = {{"attn_out", "h_in", "attn_hc_post", "attn_hc_comb", z_, "h_mid", "h_mid"},
                          {"moe_out", "h_mid", "ffn_hc_post", "ffn_hc_comb", next,
                           layer_ + 1 < 5 ? "h_in" : "h_final", "h_out"}};
    for (const Side& s : sides) {
        SCOPED_TRACE(s.label);
        auto post = f32_of(*z_, s.post), comb = f32_of(*z_, s.comb);
        ASSERT_TRUE(has_size(post, kT * 4, where_ + " " + s.post));
        ASSERT_TRUE(has_size(comb, kT * 16, where_ + " " + s.comb));
        OFFICIAL_GPU_ASSIGN(a, rec(s.a, kT * D));
        OFFICIAL_GPU_ASSIGN(r, rec(s.residual, kT * 4 * D));
        OFFICIAL_GPU_ASSIGN(dpost, ct::to_device(post));
        OFFICIAL_GPU_ASSIGN(dcomb, ct::to_device(comb));
        OFFICIAL_GPU_ASSIGN(out, ct::poisoned<uint16_t>(kT * 4 * D));
        DSV4_ASSERT_OK(cuda::sm90_hc_post(kRef, {.a = a.data(), .residual = r.data(), .post = dpost.as<float>(),
                                                 .comb = dcomb.as<float>(), .tokens = kT, .dim = D,
                                                 .out = out.data()},
                                          nullptr));
        expect_close(where_, s.label, bf16_down(out, kT * 4 * D), f32_of(*s.ref_file, s.ref_name), kClassB);
    }
}

// The q path (gpu_attention.cpp step 1): linear wq_a → rmsnorm q_norm → qr; from the recorded qr: linear wq_b →
// q_head_norm_rope (per-head norm and RoPE fused) → q at the stored rows.
TEST_P(GpuLayerOps, QueryPath) {
    const auto& c = m_->config;
    const int64_t H = c.num_heads, ql = c.q_lora_rank, D = c.hidden_size, hd = c.head_dim;
    ASSERT_EQ(hd, 512) << "the recorded q rows are 512 wide";
    DeviceWeightView wq_a, q_norm, wq_b;
    ASSERT_TRUE(gpu_.put(L_->attn.wq_a, &wq_a));
    ASSERT_TRUE(gpu_.put(L_->attn.q_norm, &q_norm));
    ASSERT_TRUE(gpu_.put(L_->attn.wq_b, &wq_b));
    ASSERT_EQ(wq_a.rows, ql);
    ASSERT_EQ(wq_b.rows, H * hd);
    OFFICIAL_GPU_ASSIGN(x, rec("attn_norm", kT * D));
    OFFICIAL_GPU_ASSIGN(qr, ct::poisoned<uint16_t>(kT * ql));
    DSV4_ASSERT_OK(gpu_.linear(x.data(), kT, wq_a, LinearOut::kBF16, qr.data()));
    DSV4_ASSERT_OK(cuda::sm90_rmsnorm(
        kRef, {.x = qr.data(), .rows = kT, .dim = ql, .weight = q_norm, .eps = eps_, .y = qr.data()}, nullptr));
    expect_close(where_, "qr", bf16_down(qr, kT * ql), f32_of(*z_, "qr"), kClassC);

    OFFICIAL_GPU_ASSIGN(qr_rec, rec("qr", kT * ql));
    OFFICIAL_GPU_ASSIGN(q, ct::poisoned<uint16_t>(kT * H * hd));
    DSV4_ASSERT_OK(gpu_.linear(qr_rec.data(), kT, wq_b, LinearOut::kBF16, q.data()));
    cuda::QHeadNormRopeArgs qn{.q = q.data(), .tokens = kT, .heads = H, .head_dim = hd, .eps = eps_, .rope = true,
                               .positions = positions(), .freqs = freqs_};
    DSV4_ASSERT_OK(cuda::sm90_q_head_norm_rope(kRef, qn, nullptr));
    expect_close(where_, "q", rows_of(bf16_down(q, kT * H * hd), H * hd), f32_of(*z_, "q"), kClassE);
}

// Window K=V: linear wkv → window_kv_finish (kv_norm, RoPE, FP8 simulation).
TEST_P(GpuLayerOps, WindowKv) {
    const int64_t D = m_->config.hidden_size;
    DeviceWeightView wkv, kv_norm;
    ASSERT_TRUE(gpu_.put(L_->attn.wkv, &wkv));
    ASSERT_TRUE(gpu_.put(L_->attn.kv_norm, &kv_norm));
    ASSERT_EQ(wkv.rows, 512);
    OFFICIAL_GPU_ASSIGN(x, rec("attn_norm", kT * D));
    OFFICIAL_GPU_ASSIGN(kv, ct::poisoned<uint16_t>(kT * 512));
    DSV4_ASSERT_OK(gpu_.linear(x.data(), kT, wkv, LinearOut::kBF16, kv.data()));
    cuda::WindowKvFinishArgs kf{.kv = kv.data(), .tokens = kT, .kv_norm = kv_norm, .positions = positions(),
                                .freqs = freqs_, .eps = eps_};
    DSV4_ASSERT_OK(cuda::sm90_window_kv_finish(kRef, kf, nullptr));
    expect_close(where_, "kv", bf16_down(kv, kT * 512), f32_of(*z_, "kv"), kClassD);
}

// A compressor (gpu_attention.cpp project_rows + absorb_compressor for one prefill from position 0): linear wkv and
// wgate with f32 out → add_ape → compressor_pool over every complete window (no previous window); then
// compressor_finish from the recorded pooled rows.
void GpuLayerOps::run_compressor(const model::CompressorWeights& w, int64_t ratio, int64_t c, CompressedKind kind,
                                 const std::string& pooled_name, const std::string& normed_name,
                                 const std::string& out_name) {
    const int64_t D = m_->config.hidden_size;
    const bool overlap = ratio == 4;
    const int64_t width = (overlap ? 2 : 1) * c, n = kT / ratio;
    DeviceWeightView wkv, wgate, ape, norm;
    ASSERT_TRUE(gpu_.put(w.wkv, &wkv));
    ASSERT_TRUE(gpu_.put(w.wgate, &wgate));
    ASSERT_TRUE(gpu_.put(w.ape, &ape));
    ASSERT_TRUE(gpu_.put(w.norm, &norm));
    ASSERT_EQ(wkv.rows, width) << w.wkv.name;
    ASSERT_EQ(wgate.rows, width) << w.wgate.name;
    ASSERT_EQ(ape.rows * ape.cols, ratio * width) << w.ape.name;
    OFFICIAL_GPU_ASSIGN(x, rec("attn_norm", kT * D));
    OFFICIAL_GPU_ASSIGN(kv, ct::poisoned<float>(kT * width));
    OFFICIAL_GPU_ASSIGN(score, ct::poisoned<float>(kT * width));
    DSV4_ASSERT_OK(gpu_.linear(x.data(), kT, wkv, LinearOut::kF32, kv.data()));
    DSV4_ASSERT_OK(gpu_.linear(x.data(), kT, wgate, LinearOut::kF32, score.data()));
    cuda::AddApeArgs ap{.score = score.as<float>(), .rows = kT, .width = width, .ratio = ratio,
                        .positions = positions(), .ape = ape};
    DSV4_ASSERT_OK(cuda::sm90_add_ape(ap, nullptr));
    OFFICIAL_GPU_ASSIGN(pooled, ct::poisoned<uint16_t>(n * c));
    cuda::CompressorPoolArgs pl{.kv = kv.as<float>(), .score = score.as<float>(), .n_windows = n, .ratio = ratio,
                                .head_dim = c, .overlap = overlap, .out = pooled.data()};
    DSV4_ASSERT_OK(cuda::sm90_compressor_pool(kRef, pl, nullptr));
    expect_close(where_, pooled_name, bf16_down(pooled, n * c), f32_of(*z_, pooled_name), kClassB);

    OFFICIAL_GPU_ASSIGN(pooled_rec, rec(pooled_name, n * c));
    OFFICIAL_GPU_ASSIGN(normed, ct::poisoned<uint16_t>(n * c));
    OFFICIAL_GPU_ASSIGN(out, ct::poisoned<uint16_t>(n * c));
    cuda::CompressorFinishArgs fp{.pooled = pooled_rec.data(), .n = n, .head_dim = c, .ratio = ratio, .first_window = 0,
                                  .kind = kind, .norm = norm, .freqs = freqs_, .eps = eps_, .normed = normed.data(),
                                  .out = out.data()};
    DSV4_ASSERT_OK(cuda::sm90_compressor_finish(kRef, fp, nullptr));
    expect_close(where_, normed_name, bf16_down(normed, n * c), f32_of(*z_, normed_name), kClassB);
    expect_close(where_, out_name, bf16_down(out, n * c), f32_of(*z_, out_name),
                 kind == CompressedKind::kMain ? kClassD : kClassDIdx);
}

// Compressed layers only (1 and 3 CSA, 2 and 4 HCA; layer 0 is SWA).
class GpuCompressedLayerOps : public GpuLayerOps {};
// CSA layers only: the lightning indexer.
class GpuCsaLayerOps : public GpuLayerOps {};

TEST_P(GpuCompressedLayerOps, Compressor) {
    ASSERT_NE(ratio_, 0) << "instantiated for a layer without a compressor";
    run_compressor(L_->attn.compressor, ratio_, 512, CompressedKind::kMain, "cmp_pooled", "cmp_normed", "cmp_entries");
}

TEST_P(GpuCsaLayerOps, Indexer) {
    ASSERT_EQ(ratio_, 4) << "instantiated for a layer without an indexer";
    const auto& c = m_->config;
    const int64_t IH = c.index_n_heads, ihd = c.index_head_dim, n = kT / 4, ql = c.q_lora_rank,
                  D = c.hidden_size;
    ASSERT_EQ(ihd, 128) << "the Hadamard rotation and the recorded arrays are 128 wide";

    // queries (gpu_attention.cpp indexer_rows): linear wq_b → RoPE on the last 64 → Hadamard → FP4 simulation
    DeviceWeightView wq_b, wproj;
    ASSERT_TRUE(gpu_.put(L_->attn.indexer.wq_b, &wq_b));
    ASSERT_TRUE(gpu_.put(L_->attn.indexer.weights_proj, &wproj));
    ASSERT_EQ(wq_b.rows, IH * ihd);
    ASSERT_EQ(wproj.rows, IH);
    OFFICIAL_GPU_ASSIGN(qr, rec("qr", kT * ql));
    OFFICIAL_GPU_ASSIGN(iq, ct::poisoned<uint16_t>(kT * IH * ihd));
    DSV4_ASSERT_OK(gpu_.linear(qr.data(), kT, wq_b, LinearOut::kBF16, iq.data()));
    cuda::RopeArgs r{.x = iq.data(), .tokens = kT, .vecs = IH, .vec_stride = ihd, .offset = ihd - c.rope_head_dim,
                     .positions = positions(), .freqs = freqs_};
    DSV4_ASSERT_OK(cuda::sm90_rope(kRef, r, nullptr));
    DSV4_ASSERT_OK(cuda::sm90_hadamard128(kRef, {.x = iq.data(), .rows = kT * IH, .y = iq.data()}, nullptr));
    cuda::Fp4QuantArgs f{.x = iq.data(), .rows = kT * IH, .cols = ihd, .x_sim = iq.data()};
    DSV4_ASSERT_OK(cuda::sm90_fp4_quant_e2m1(f, nullptr));
    expect_close(where_, "idx_q", bf16_down(iq, kT * IH * ihd), f32_of(*z_, "idx_q"), kClassDIdx);

    // head weights: linear weights_proj → w_raw; scale → w
    OFFICIAL_GPU_ASSIGN(x, rec("attn_norm", kT * D));
    OFFICIAL_GPU_ASSIGN(w, ct::poisoned<uint16_t>(kT * IH));
    DSV4_ASSERT_OK(gpu_.linear(x.data(), kT, wproj, LinearOut::kBF16, w.data()));
    expect_close(where_, "idx_w_raw", bf16_down(w, kT * IH), f32_of(*z_, "idx_w_raw"), kClassB);
    const float scale = float(1.0 / std::sqrt(double(ihd)) / std::sqrt(double(IH)));
    DSV4_ASSERT_OK(cuda::sm90_scale(kRef, {.x = w.data(), .n = kT * IH, .scale = scale}, nullptr));
    expect_close(where_, "idx_w", bf16_down(w, kT * IH), f32_of(*z_, "idx_w"), kClassB);

    run_compressor(L_->attn.indexer.compressor, 4, ihd, CompressedKind::kIndexer, "idx_k_pooled", "idx_k_normed",
                   "idx_keys");

    // scores from the recorded queries, keys and weights; -inf exactly where an entry is not yet visible
    OFFICIAL_GPU_ASSIGN(q_rec, rec("idx_q", kT * IH * ihd));
    OFFICIAL_GPU_ASSIGN(k_rec, rec("idx_keys", n * ihd));
    OFFICIAL_GPU_ASSIGN(w_rec, rec("idx_w", kT * IH));
    OFFICIAL_GPU_ASSIGN(scores, ct::poisoned<uint16_t>(kT * n));
    cuda::IndexerScoresArgs sp{.q = q_rec.data(), .keys = k_rec.data(), .w = w_rec.data(), .tokens = kT, .heads = IH,
                               .n = n, .ratio = 4, .positions = positions(), .scores = scores.data()};
    DSV4_ASSERT_OK(cuda::sm90_indexer_scores(kRef, sp, nullptr));
    auto s_gpu = bf16_down(scores, kT * n);
    auto s_rec = f32_of(*z_, "idx_scores");
    expect_close(where_, "idx_scores", s_gpu, s_rec, kClassB);
    ASSERT_TRUE(has_size(s_rec, kT * n, where_ + " idx_scores"));
    int64_t mask_differs = 0;
    for (int64_t i = 0; i < kT * n; ++i) {
        const float mine = s_gpu[size_t(i)], ref = s_rec[size_t(i)];
        mask_differs += std::isinf(ref) ? !(mine == ref) : std::isinf(mine);
    }
    EXPECT_EQ(mask_differs, 0) << where_ << " idx_scores: entries whose -inf (not visible) mark differs";

    // top-k from the recorded scores: equal sets, except swaps among candidates tied with the recorded k-th score
    const int64_t k = c.index_topk;
    auto ref_idx = i32_of(*z_, "idx_topk");
    ASSERT_TRUE(has_size(ref_idx, kT * k, where_ + " idx_topk"));
    OFFICIAL_GPU_ASSIGN(s_dev, rec("idx_scores", kT * n));
    OFFICIAL_GPU_ASSIGN(didx, ct::poisoned<int32_t>(kT * k));
    cuda::TopKArgs tp{.scores = s_dev.data(), .rows = kT, .n = n, .k = k, .idx = didx.as<int32_t>()};
    DSV4_ASSERT_OK(cuda::sm90_topk(kRef, tp, nullptr));
    auto idx = ct::to_host<int32_t>(didx, size_t(kT * k));
    // the decode form (each row reads only its visible scores) picks the same
    OFFICIAL_GPU_ASSIGN(didx_vis, ct::poisoned<int32_t>(kT * k));
    tp.idx = didx_vis.as<int32_t>();
    tp.positions = positions();
    tp.ratio = 4;
    DSV4_ASSERT_OK(cuda::sm90_topk(kRef, tp, nullptr));
    EXPECT_EQ(ct::to_host<int32_t>(didx_vis, size_t(kT * k)), idx) << where_ << " top-k with visible-only rows";
    int differing = 0, tie_swaps = 0;
    for (int64_t t = 0; t < kT; ++t) {
        std::set<int32_t> a, b;
        for (int64_t j = 0; j < k; ++j) {
            if (ref_idx[size_t(t * k + j)] >= 0) a.insert(ref_idx[size_t(t * k + j)]);
            if (idx[size_t(t * k + j)] >= 0) b.insert(idx[size_t(t * k + j)]);
        }
        for (int32_t j : b) ASSERT_LT(j, n) << where_ << " t=" << t << ": pick out of range";
        if (a == b) continue;
        ++differing;
        std::vector<float> finite;
        for (int64_t s = 0; s < n; ++s)
            if (std::isfinite(s_rec[size_t(t * n + s)])) finite.push_back(s_rec[size_t(t * n + s)]);
        ASSERT_FALSE(finite.empty()) << where_ << " t=" << t << ": picks where nothing is visible";
        std::sort(finite.rbegin(), finite.rend());
        const float kth = finite[size_t(std::min<int64_t>(k, int64_t(finite.size())) - 1)];
        bool all_ties = true;
        for (int32_t j : a)
            if (!b.count(j)) all_ties &= s_rec[size_t(t * n + j)] == kth;
        for (int32_t j : b)
            if (!a.count(j)) all_ties &= s_rec[size_t(t * n + j)] == kth;
        EXPECT_TRUE(all_ties) << where_ << " t=" << t << ": the sets differ beyond exact ties with the k-th score";
        tie_swaps += all_ties;
    }
    std::printf("[official] %-10s %-14s sets differ at %d of %lld positions (all exact ties: %d)\n", where_.c_str(),
                "idx_topk", differing, (long long)kT, tie_swaps);
}

// Sparse attention on the stored rows (plain, and with the forward's fused de-rotation), the de-rotation of the
// recorded o (sm90_rope inverse), wo_a (sm90_wo_a) and wo_b (linear).
TEST_P(GpuLayerOps, SparseAttentionAndOutput) {
    const auto& c = m_->config;
    const int64_t H = c.num_heads, G = c.o_groups, R = c.o_lora_rank, D = c.hidden_size;
    auto rows = i32_of(*z_, "rows");
    const int64_t S = int64_t(rows.size());
    ASSERT_GT(S, 0);
    auto kv_all = f32_of(*z_, "kv");
    ASSERT_TRUE(has_size(kv_all, kT * 512, where_ + " kv"));
    if (ratio_ != 0) {
        auto cmp = f32_of(*z_, "cmp_entries");
        ASSERT_TRUE(has_size(cmp, kT / ratio_ * 512, where_ + " cmp_entries"));
        kv_all.insert(kv_all.end(), cmp.begin(), cmp.end());
    }
    const int64_t n_kv = int64_t(kv_all.size()) / 512;
    auto topk_all = i32_of(*z_, "attn_topk");
    ASSERT_TRUE(!topk_all.empty() && topk_all.size() % kT == 0) << where_ << " attn_topk: " << topk_all.size();
    const int64_t K = int64_t(topk_all.size()) / kT;
    std::vector<int32_t> topk_rows;
    std::vector<int64_t> row_pos;
    for (int32_t r : rows) {
        ASSERT_TRUE(r >= 0 && r < kT) << where_ << " rows: " << r;
        topk_rows.insert(topk_rows.end(), topk_all.begin() + r * K, topk_all.begin() + (r + 1) * K);
        row_pos.push_back(r);
    }
    for (int32_t i : topk_rows) ASSERT_LT(i, n_kv) << where_ << " attn_topk entry past the K=V rows";
    DeviceWeightView sink, wo_a, wo_b;
    ASSERT_TRUE(gpu_.put(L_->attn.sink, &sink));
    ASSERT_TRUE(gpu_.put(L_->attn.wo_a, &wo_a));
    ASSERT_TRUE(gpu_.put(L_->attn.wo_b, &wo_b));
    ASSERT_EQ(sink.format, WeightFormat::kF32) << L_->attn.sink.name;
    ASSERT_EQ(sink.rows * sink.cols, H) << L_->attn.sink.name;
    OFFICIAL_GPU_ASSIGN(q, rec("q", S * H * 512));
    OFFICIAL_GPU_ASSIGN(kv, bf16_up(kv_all, where_ + " kv|cmp_entries"));
    OFFICIAL_GPU_ASSIGN(idx, ct::to_device(topk_rows));
    OFFICIAL_GPU_ASSIGN(pos, ct::to_device(row_pos));
    auto o_rec = f32_of(*z_, "o"), dr = f32_of(*z_, "o_derot_rope");
    ASSERT_TRUE(has_size(o_rec, S * H * 512, where_ + " o"));
    ASSERT_TRUE(has_size(dr, S * H * 64, where_ + " o_derot_rope"));

    cuda::SparseAttnArgs ap{.q = q.data(), .kv = kv.data(), .idx = idx.as<int32_t>(), .tokens = S, .heads = H,
                            .n_kv = n_kv, .topk = K, .sink = static_cast<const float*>(sink.data),
                            .scale = float(1.0 / std::sqrt(512.0))};
    OFFICIAL_GPU_ASSIGN(o, ct::poisoned<uint16_t>(S * H * 512));
    ap.out = o.data();
    DSV4_ASSERT_OK(cuda::sm90_sparse_attn(kRef, ap, nullptr));
    expect_close(where_, "o", bf16_down(o, S * H * 512), o_rec, kClassF);

    // The split decode form at 64-candidate chunks (2-3 per list here), from the reference's block maxima and from
    // each chunk's own maximum (the engine's decode): both within class F of the recorded o.
    for (const bool reference_max : {true, false}) {
        const cuda::SparseAttnSplitOptions so{.chunk = 64, .match_reference_max = reference_max};
        ASSERT_EQ(cuda::sm90_sparse_attn_split_chunk(ap, so), 64) << where_;
        const size_t bytes = cuda::sm90_sparse_attn_split_workspace_bytes(ap, so);
        OFFICIAL_GPU_ASSIGN(ws, gpu_.workspace(bytes));
        OFFICIAL_GPU_ASSIGN(o_split, ct::poisoned<uint16_t>(S * H * 512));
        cuda::SparseAttnArgs as = ap;
        as.out = o_split.data();
        DSV4_ASSERT_OK(cuda::sm90_sparse_attn_split(kRef, as, ws, bytes, nullptr, so));
        expect_close(where_, reference_max ? "o(split)" : "o(split, own max)", bf16_down(o_split, S * H * 512), o_rec,
                     kClassF);
    }

    // o with its rope channels replaced by the recorded de-rotation: what wo_a takes, and what the fused call gives
    auto o_in = o_rec;
    for (int64_t r = 0; r < S * H; ++r)
        std::copy(dr.begin() + r * 64, dr.begin() + (r + 1) * 64, o_in.begin() + r * 512 + 448);
    OFFICIAL_GPU_ASSIGN(o_fused, ct::poisoned<uint16_t>(S * H * 512));
    ap.derotate = true;
    ap.positions = pos.as<int64_t>();
    ap.freqs = freqs_;
    ap.out = o_fused.data();
    DSV4_ASSERT_OK(cuda::sm90_sparse_attn(kRef, ap, nullptr));
    expect_close(where_, "o(derotated)", bf16_down(o_fused, S * H * 512), o_in, kClassF);

    // de-rotation of the recorded o
    OFFICIAL_GPU_ASSIGN(o_dev, bf16_up(o_rec, where_ + " o"));
    cuda::RopeArgs r{.x = o_dev.data(), .tokens = S, .vecs = H, .vec_stride = 512, .offset = 448,
                     .positions = pos.as<int64_t>(), .freqs = freqs_, .inverse = true};
    DSV4_ASSERT_OK(cuda::sm90_rope(kRef, r, nullptr));
    auto o_back = bf16_down(o_dev, S * H * 512);
    std::vector<float> derot;
    for (int64_t i = 0; i < S * H; ++i)
        derot.insert(derot.end(), o_back.begin() + i * 512 + 448, o_back.begin() + (i + 1) * 512);
    expect_close(where_, "o_derot_rope", derot, dr, kClassB);

    // wo_a on the recorded o with its de-rotated rope channels
    OFFICIAL_GPU_ASSIGN(o_in_dev, bf16_up(o_in, where_ + " o|o_derot_rope"));
    OFFICIAL_GPU_ASSIGN(z, ct::poisoned<uint16_t>(S * G * R));
    cuda::WoAArgs oa{.o = o_in_dev.data(), .tokens = S, .heads = H, .groups = G, .rank = R, .wo_a = wo_a,
                     .z = z.data()};
    DSV4_ASSERT_OK(cuda::sm90_wo_a(kRef, oa, nullptr));
    expect_close(where_, "wo_a", bf16_down(z, S * G * R), rows_of(f32_of(*z_, "wo_a"), G * R), kClassB);

    // wo_b on the recorded wo_a (all positions)
    OFFICIAL_GPU_ASSIGN(za, rec("wo_a", kT * G * R));
    OFFICIAL_GPU_ASSIGN(out, ct::poisoned<uint16_t>(kT * D));
    DSV4_ASSERT_OK(gpu_.linear(za.data(), kT, wo_b, LinearOut::kBF16, out.data()));
    expect_close(where_, "attn_out", bf16_down(out, kT * D), f32_of(*z_, "attn_out"), kClassC);
}

// The MoE sub-block (gpu_forward.cpp moe_block, generic path: the fused MXFP4 decode kernel needs D % 512 == 0):
// gate linear (f32 out) → router_select; routed experts and the shared expert from the recorded routing; moe_sum.
TEST_P(GpuLayerOps, RouterExpertsMoe) {
    const auto& c = m_->config;
    const int64_t D = c.hidden_size, E = c.n_routed_experts, K = c.n_experts_per_token, I = c.moe_inter_dim;
    const auto& ffn = L_->ffn;
    DeviceWeightView gate, bias;
    ASSERT_TRUE(gpu_.put(ffn.gate, &gate));
    ASSERT_EQ(gate.rows, E) << ffn.gate.name;
    OFFICIAL_GPU_ASSIGN(x, rec("ffn_norm", kT * D));
    OFFICIAL_GPU_ASSIGN(logits, ct::poisoned<float>(kT * E));
    OFFICIAL_GPU_ASSIGN(scores, ct::poisoned<float>(kT * E));
    OFFICIAL_GPU_ASSIGN(didx, ct::poisoned<int32_t>(kT * K));
    OFFICIAL_GPU_ASSIGN(dw, ct::poisoned<float>(kT * K));
    DSV4_ASSERT_OK(gpu_.linear(x.data(), kT, gate, LinearOut::kF32, logits.data()));
    cuda::RouterSelectArgs rp{.logits = logits.as<float>(), .tokens = kT, .n_experts = E, .k = K,
                              .routed_scale = float(c.routed_scaling_factor), .scores = scores.as<float>(),
                              .idx = didx.as<int32_t>(), .weights = dw.as<float>()};
    DeviceBuffer tid2eid, token_ids;
    if (ffn.tid2eid.present()) {  // hash routing: the token's row of tid2eid
        ASSERT_EQ(ffn.tid2eid.cols(), K) << ffn.tid2eid.name;
        ASSERT_NE(ffn.tid2eid.data, nullptr) << ffn.tid2eid.name;
        std::vector<int64_t> table(size_t(ffn.tid2eid.numel()));
        std::memcpy(table.data(), ffn.tid2eid.data, table.size() * 8);
        auto tokens = i32_of(need("head.npz"), "tokens");
        ASSERT_TRUE(has_size(tokens, kT, "head.npz tokens"));
        OFFICIAL_GPU_ASSIGN(dt, ct::to_device(table));
        OFFICIAL_GPU_ASSIGN(dtok, ct::to_device(tokens));
        tid2eid = std::move(dt);
        token_ids = std::move(dtok);
        rp.tid2eid = tid2eid.as<int64_t>();
        rp.vocab = ffn.tid2eid.rows();
        rp.token_ids = token_ids.as<int32_t>();
    } else {
        ASSERT_TRUE(gpu_.put(ffn.gate_bias, &bias));
        rp.bias = bias;
    }
    DSV4_ASSERT_OK(cuda::sm90_router_select(rp, nullptr));
    expect_close(where_, "router_logits", f32_down(logits, kT * E), f32_of(*z_, "router_logits"), kClassA);
    expect_close(where_, "router_scores", f32_down(scores, kT * E), f32_of(*z_, "router_scores"), kClassA);
    expect_close(where_, "router_w", f32_down(dw, kT * K), f32_of(*z_, "router_w"), kClassA);
    EXPECT_EQ(ct::to_host<int32_t>(didx, size_t(kT * K)), i32_of(*z_, "router_idx"))
        << where_ << ": router_idx must be identical";

    // routed experts with the recorded routing
    auto ridx = i32_of(*z_, "router_idx");
    auto rw = f32_of(*z_, "router_w");
    ASSERT_TRUE(has_size(ridx, kT * K, where_ + " router_idx"));
    ASSERT_TRUE(has_size(rw, kT * K, where_ + " router_w"));
    ASSERT_EQ(int64_t(ffn.experts.size()), E);
    std::vector<cuda::DeviceExpertWeights> experts(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
        const auto& ew = ffn.experts[size_t(e)];
        ASSERT_TRUE(gpu_.put(ew.w1, &experts[size_t(e)].w1));
        ASSERT_TRUE(gpu_.put(ew.w2, &experts[size_t(e)].w2));
        ASSERT_TRUE(gpu_.put(ew.w3, &experts[size_t(e)].w3));
        ASSERT_EQ(experts[size_t(e)].w1.rows, I) << ew.w1.name;
        ASSERT_EQ(experts[size_t(e)].w2.rows, D) << ew.w2.name;
    }
    OFFICIAL_GPU_ASSIGN(dexperts, ct::to_device(experts));
    OFFICIAL_GPU_ASSIGN(dridx, ct::to_device(ridx));
    OFFICIAL_GPU_ASSIGN(drw, ct::to_device(rw));
    OFFICIAL_GPU_ASSIGN(eo, ct::poisoned<float>(kT * K * D));
    const size_t re_bytes = cuda::sm90_routed_experts_workspace_bytes(kRef, kT, K, D, I);
    OFFICIAL_GPU_ASSIGN(re_ws, gpu_.workspace(re_bytes));
    cuda::RoutedExpertsArgs ra{.x = x.data(), .tokens = kT, .k = K, .n_experts = E, .dim = D, .inter = I,
                               .experts = dexperts.as<cuda::DeviceExpertWeights>(), .idx = dridx.as<int32_t>(),
                               .weights = drw.as<float>(), .limit = float(c.swiglu_limit), .out = eo.as<float>(),
                               .workspace = re_ws, .workspace_bytes = re_bytes};
    DSV4_ASSERT_OK(cuda::sm90_routed_experts(kRef, ra, nullptr));
    expect_close(where_, "expert_out", f32_down(eo, kT * K * D), f32_of(*z_, "expert_out"), kClassC);

    // the shared expert
    cuda::ExpertArgs ea;
    ASSERT_TRUE(gpu_.put(ffn.shared.w1, &ea.w1));
    ASSERT_TRUE(gpu_.put(ffn.shared.w2, &ea.w2));
    ASSERT_TRUE(gpu_.put(ffn.shared.w3, &ea.w3));
    OFFICIAL_GPU_ASSIGN(so, ct::poisoned<uint16_t>(kT * D));
    const size_t ex_bytes = cuda::sm90_expert_workspace_bytes(kRef, kT, ea.w1, ea.w2);
    OFFICIAL_GPU_ASSIGN(ex_ws, gpu_.workspace(ex_bytes));
    ea.x = x.data();
    ea.tokens = kT;
    ea.limit = float(c.swiglu_limit);
    ea.y = so.data();
    ea.workspace = ex_ws;
    ea.workspace_bytes = ex_bytes;
    DSV4_ASSERT_OK(cuda::sm90_expert(kRef, ea, nullptr));
    expect_close(where_, "shared_out", bf16_down(so, kT * D), f32_of(*z_, "shared_out"), kClassC);

    // the sum from the recorded expert and shared outputs, then from the ones computed here (class C)
    auto eo_rec = f32_of(*z_, "expert_out");
    ASSERT_TRUE(has_size(eo_rec, kT * K * D, where_ + " expert_out"));
    OFFICIAL_GPU_ASSIGN(deo_rec, ct::to_device(eo_rec));  // f32 array of bf16 values, as routed_experts writes
    OFFICIAL_GPU_ASSIGN(so_rec, rec("shared_out", kT * D));
    OFFICIAL_GPU_ASSIGN(mo, ct::poisoned<uint16_t>(kT * D));
    cuda::MoeSumArgs ms{.expert_out = deo_rec.as<float>(), .idx = dridx.as<int32_t>(), .shared = so_rec.data(),
                        .tokens = kT, .k = K, .dim = D, .y = mo.data()};
    DSV4_ASSERT_OK(cuda::sm90_moe_sum(kRef, ms, nullptr));
    expect_close(where_, "moe_out", bf16_down(mo, kT * D), f32_of(*z_, "moe_out"), kClassB);
    OFFICIAL_GPU_ASSIGN(mo2, ct::poisoned<uint16_t>(kT * D));
    ms.expert_out = eo.as<float>();
    ms.shared = so.data();
    ms.y = mo2.data();
    DSV4_ASSERT_OK(cuda::sm90_moe_sum(kRef, ms, nullptr));
    expect_close(where_, "moe_out(ffn)", bf16_down(mo2, kT * D), f32_of(*z_, "moe_out"), kClassC);
}

std::string layer_name(const ::testing::TestParamInfo<int>& info) { return "layer" + std::to_string(info.param); }

INSTANTIATE_TEST_SUITE_P(Blocks, GpuLayerOps, ::testing::Values(0, 1, 2, 3, 4), layer_name);
INSTANTIATE_TEST_SUITE_P(Blocks, GpuCompressedLayerOps, ::testing::Values(1, 2, 3, 4), layer_name);
INSTANTIATE_TEST_SUITE_P(Blocks, GpuCsaLayerOps, ::testing::Values(1, 3), layer_name);

}  // namespace
}  // namespace dsv4::official
