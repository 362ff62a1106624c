// sm90_embedding, sm90_bf16_gemm_f32 (the lm head and the router gate) and sm90_router_select against the CPU ops
// (embedding, linear with a bf16 weight and f32 output, router) at V4-Flash and V4-Pro shapes (vocab 129280,
// D 4096 / 7168, 256 / 384 experts) and edge shapes, in both precisions; sm90_broadcast_streams (the embedding
// into the 4 streams) against a host copy.
#include "backend/cuda/kernels/embed_head/embed_head.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/kernels/glue/glue.h"
#include "backend/cuda/kernels/router/router.h"
#include "core/thread_pool.h"
#include "ops/gpu_testing.h"
#include "testing/testing.h"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using backend::WeightFormat;
using namespace dsv4::cuda::testing;

// A large bf16 weight quickly (a 1-2 GB head would take seconds from std::normal_distribution): uniform values of
// std ~sigma from a 64-bit LCG, rounded to bf16.
std::vector<uint16_t> fast_bf16(uint64_t seed, size_t n, float sigma) {
    std::vector<uint16_t> v(n);
    uint64_t s = seed | 1;
    for (auto& b : v) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const float u = float(s >> 40) * (1.0f / 16777216.0f) - 0.5f;  // [-0.5, 0.5): std 0.289
        b = f32_to_bf16(u * sigma * 3.4641f);
    }
    return v;
}

TEST(CudaEmbedding, GathersRowsAndReportsBadIds) {
    DSV4_REQUIRE_GPU();
    std::mt19937_64 rng(fresh_seed());
    for (const Precision prec : {Precision::kReference, Precision::kF32}) {
        for (const int64_t D : {int64_t(4096), int64_t(7168), int64_t(128)}) {  // Flash, Pro, test models
            const int64_t V = 129280;
            SCOPED_TRACE(std::string(backend::precision_name(prec)) + " D " + std::to_string(D));
            auto table = fast_bf16(rng(), size_t(V * D), 1.0f);
            backend::WeightView tv{WeightFormat::kBF16, V, D, table.data(), nullptr};
            std::uniform_int_distribution<int32_t> id(0, int32_t(V - 1));
            std::vector<int32_t> tokens = {0, int32_t(V - 1)};
            for (int i = 0; i < 17; ++i) tokens.push_back(id(rng));
            const int64_t T = int64_t(tokens.size());
            std::vector<float> want(size_t(T * D));
            DSV4_ASSERT_OK(backend::cpu::embedding({prec, &pool()}, {tokens.data(), T, tv, want.data()}));
            auto dt = upload_weight(tv, "embed.weight");
            auto dtok = to_device(tokens);
            auto dout = act_poisoned(prec, want.size());
            auto dbad = poisoned<int32_t>(1);
            ASSERT_TRUE(dt.is_ok() && dtok.is_ok() && dout.is_ok() && dbad.is_ok());
            EmbeddingArgs a{dtok->as<int32_t>(), T, dt->view(), dout->data(), dbad->as<int32_t>()};
            DSV4_ASSERT_OK(sm90_embedding(prec, a, nullptr));
            EXPECT_EQ(count_bit_differences(act_to_host(prec, *dout, want.size()), want), 0u);
            EXPECT_EQ(to_host<int32_t>(*dbad, 1)[0], kNoBadToken);
            // ids outside the vocabulary: zero rows and the first bad position reported
            std::vector<int32_t> bad = {5, int32_t(V), -3, 7};
            auto dbt = to_device(bad);
            ASSERT_TRUE(dbt.is_ok());
            a.tokens = dbt->as<int32_t>(), a.n = 4;
            DSV4_ASSERT_OK(sm90_embedding(prec, a, nullptr));
            EXPECT_EQ(to_host<int32_t>(*dbad, 1)[0], 1);
            auto rows = act_to_host(prec, *dout, size_t(4 * D));
            EXPECT_TRUE(std::all_of(rows.begin() + D, rows.begin() + 3 * D, [](float v) { return v == 0.0f; }));
            // without a report (the engine checks ids on the host): the same rows, nothing else written
            auto again = act_poisoned(prec, size_t(4 * D));
            ASSERT_TRUE(again.is_ok());
            a.out = again->data(), a.bad_position = nullptr;
            DSV4_ASSERT_OK(sm90_embedding(prec, a, nullptr));
            EXPECT_EQ(count_bit_differences(act_to_host(prec, *again, size_t(4 * D)), rows), 0u);
            EXPECT_EQ(to_host<int32_t>(*dbad, 1)[0], 1);
        }
    }
}

// The embedding's rows copied into the hc streams (sm90_broadcast_streams): 16-byte chunks for rows of whole chunks
// at 16-byte aligned addresses (every model width), elements otherwise (odd widths, an unaligned row start).
TEST(CudaBroadcastStreams, CopiesEveryRowIntoEachStream) {
    DSV4_REQUIRE_GPU();
    std::mt19937_64 rng(fresh_seed());
    struct Shape {
        int64_t rows, dim, offset;  // offset: elements the input starts past an aligned address
    };
    for (const Precision prec : {Precision::kReference, Precision::kF32}) {
        for (const Shape sh :
             {Shape{8192, 4096, 0}, Shape{2049, 7168, 0}, Shape{3, 128, 0}, Shape{5, 3, 0}, Shape{7, 128, 1}}) {
            const int64_t hc = 4, n = sh.rows * sh.dim;
            SCOPED_TRACE(std::string(backend::precision_name(prec)) + " rows " + std::to_string(sh.rows) + " dim " +
                         std::to_string(sh.dim) + " offset " + std::to_string(sh.offset));
            const auto bits = fast_bf16(rng(), size_t(n + sh.offset), 1.0f);
            std::vector<float> x(bits.size());
            for (size_t i = 0; i < x.size(); ++i) x[i] = bf16_to_f32(bits[i]);
            std::vector<float> want(size_t(n * hc));
            for (int64_t t = 0; t < sh.rows; ++t)
                for (int64_t s = 0; s < hc; ++s)
                    std::copy_n(x.begin() + sh.offset + t * sh.dim, sh.dim, want.begin() + (t * hc + s) * sh.dim);
            auto dx = act_to_device(prec, x);
            auto dout = act_poisoned(prec, want.size());
            ASSERT_TRUE(dx.is_ok() && dout.is_ok());
            const size_t elem = prec == Precision::kReference ? 2 : 4;
            DSV4_ASSERT_OK(sm90_broadcast_streams(prec,
                                                  {.x = dx->as<uint8_t>() + sh.offset * elem,
                                                   .rows = sh.rows,
                                                   .dim = sh.dim,
                                                   .hc = hc,
                                                   .streams = dout->data()},
                                                  nullptr));
            EXPECT_EQ(count_bit_differences(act_to_host(prec, *dout, want.size()), want), 0u);
        }
    }
}

struct GemmCase {
    const char* name;
    int64_t tokens, n, k;
};

class Bf16GemmF32Test : public ::testing::TestWithParam<Precision> {};

TEST_P(Bf16GemmF32Test, MatchesCpuLinearF32Out) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    // lm head Flash / Pro (vocab 129280), router gates (256 x 4096, 384 x 7168), odd edge shapes
    const GemmCase cases[] = {{"head flash", 1, 129280, 4096}, {"head flash", 5, 129280, 4096},
                              {"head pro", 1, 129280, 7168},   {"gate flash", 64, 256, 4096},
                              {"gate pro", 9, 384, 7168},      {"edge", 7, 1001, 136},
                              {"edge prefill", 300, 520, 512},
                              // the test models: head 512 x 128, gate 4 experts x 128, compressor wkv 1024 x 128
                              {"head tiny", 1, 512, 128},      {"head tiny", 300, 512, 128},
                              {"gate tiny", 300, 4, 128},      {"compressor tiny", 300, 1024, 128}};
    for (const GemmCase& c : cases) {
        SCOPED_TRACE(std::string(c.name) + " T " + std::to_string(c.tokens) + " N " + std::to_string(c.n) + " K " +
                     std::to_string(c.k));
        auto w = fast_bf16(rng(), size_t(c.n * c.k), 0.02f);
        backend::WeightView wv{WeightFormat::kBF16, c.n, c.k, w.data(), nullptr};
        auto x = random_act(prec, rng, size_t(c.tokens * c.k), 1.0f);
        std::vector<float> want(size_t(c.tokens * c.n));
        DSV4_ASSERT_OK(backend::cpu::linear({prec, &pool()},
                                            {x.data(), c.tokens, wv, backend::LinearOut::kF32, want.data()}));
        auto dw = upload_weight(wv, c.name);
        auto dx = act_to_device(prec, x);
        auto dy = poisoned<float>(want.size());
        const size_t ws_bytes = sm90_bf16_gemm_f32_workspace_bytes(prec, c.tokens, c.k);
        auto ws = DeviceBuffer::allocate(ws_bytes);
        ASSERT_TRUE(dw.is_ok() && dx.is_ok() && dy.is_ok() && ws.is_ok());
        Bf16GemmF32Args a{dx->data(), c.tokens, dw->view(), dy->as<float>(), ws->data(), ws_bytes};
        DSV4_ASSERT_OK(sm90_bf16_gemm_f32(prec, a, nullptr));
        // f32 accumulation of exact products on both sides; only the summation order differs
        DSV4_EXPECT_CLOSE(to_host<float>(*dy, want.size()), want, 2e-5);
    }
}

class RouterTest : public ::testing::TestWithParam<Precision> {};

TEST_P(RouterTest, ScoreAndHashRoutingMatchCpu) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    struct Case {
        int64_t tokens, experts, dim;
        float scale;
        bool hash;
        int64_t k = 6;
        bool ties = false;  // zero gate (every logit 0) and biases in five exact levels: every pick is a tie break
    };
    const Case cases[] = {{1, 256, 4096, 1.5f, false},
                          {64, 256, 4096, 1.5f, false},
                          {9, 384, 7168, 2.5f, false},
                          {1, 384, 7168, 2.5f, true},
                          {33, 256, 4096, 1.5f, true},
                          {5, 72, 512, 1.0f, false},
                          // the test models: 4 experts, top-2, hidden 128, score and hash routing, 1 and 300 tokens
                          {1, 4, 128, 1.5f, false, 2},
                          {300, 4, 128, 2.5f, false, 2},
                          {300, 4, 128, 1.5f, true, 2},
                          {3, 256, 4096, 1.5f, false, 6, true},
                          {2, 384, 7168, 2.5f, false, 8, true}};
    for (const Case& c : cases) {
        SCOPED_TRACE("T " + std::to_string(c.tokens) + " E " + std::to_string(c.experts) + (c.hash ? " hash" : "") +
                     (c.ties ? " ties" : ""));
        const int64_t T = c.tokens, E = c.experts, D = c.dim, K = c.k, vocab = 1000;
        auto gate = fast_bf16(rng(), size_t(E * D), 0.03f);
        if (c.ties) std::fill(gate.begin(), gate.end(), uint16_t(0));
        backend::WeightView gv{WeightFormat::kBF16, E, D, gate.data(), nullptr};
        std::normal_distribution<float> nd(0.0f, 0.1f);
        std::vector<float> bias(static_cast<size_t>(E));
        for (auto& b : bias) b = nd(rng);
        if (c.ties)
            for (int64_t e = 0; e < E; ++e) bias[size_t(e)] = 0.25f * float((e * 37) % 5);
        backend::WeightView bv{WeightFormat::kF32, 1, E, bias.data(), nullptr};
        std::vector<int64_t> tid2eid(size_t(vocab * K));
        for (int64_t v = 0; v < vocab; ++v)
            for (int64_t j = 0; j < K; ++j) tid2eid[size_t(v * K + j)] = (v * 7 + j * 13) % E;
        std::vector<int32_t> ids(static_cast<size_t>(T));
        for (auto& i : ids) i = int32_t(rng() % vocab);
        auto x = random_act(prec, rng, size_t(T * D), 1.0f);
        std::vector<float> w_logits(size_t(T * E)), w_scores(size_t(T * E)), w_w(size_t(T * K));
        std::vector<int32_t> w_idx(size_t(T * K));
        backend::RouterParams rp{x.data(), T, E, K, gv, c.hash ? backend::WeightView{} : bv, tid2eid.data(), vocab,
                                 ids.data(), c.scale, w_logits.data(), w_scores.data(), w_idx.data(), w_w.data()};
        DSV4_ASSERT_OK(backend::cpu::router({prec, &pool()}, rp));

        auto dg = upload_weight(gv, "gate.weight");
        auto db = upload_weight(bv, "gate.bias");
        auto dx = act_to_device(prec, x);
        auto dt2e = to_device(tid2eid);
        auto dids = to_device(ids);
        auto dlog = poisoned<float>(w_logits.size());
        auto dsc = poisoned<float>(w_scores.size());
        auto didx = poisoned<int32_t>(w_idx.size());
        auto dw = poisoned<float>(w_w.size());
        const size_t ws_bytes = sm90_bf16_gemm_f32_workspace_bytes(prec, T, D);
        auto ws = DeviceBuffer::allocate(ws_bytes);
        ASSERT_TRUE(dg.is_ok() && db.is_ok() && dx.is_ok() && dt2e.is_ok() && dids.is_ok() && dlog.is_ok() &&
                    dsc.is_ok() && didx.is_ok() && dw.is_ok() && ws.is_ok());
        DSV4_ASSERT_OK(sm90_bf16_gemm_f32(prec, {dx->data(), T, dg->view(), dlog->as<float>(), ws->data(), ws_bytes},
                                          nullptr));
        RouterSelectArgs a{dlog->as<float>(), T, E, K, c.hash ? DeviceWeightView{} : db->view(), dt2e->as<int64_t>(),
                           vocab, dids->as<int32_t>(), c.scale, dsc->as<float>(), didx->as<int32_t>(),
                           dw->as<float>()};
        // the GPU's logits, scores, picks and weights in the buffers against the CPU's
        auto expect_matches_cpu = [&]() {
            DSV4_EXPECT_CLOSE(to_host<float>(*dlog, w_logits.size()), w_logits, 2e-5);
            DSV4_EXPECT_CLOSE(to_host<float>(*dsc, w_scores.size()), w_scores, 2e-5);
            auto idx = to_host<int32_t>(*didx, w_idx.size());
            auto wts = to_host<float>(*dw, w_w.size());
            // The picks agree except where two selection values are closer than the logits' summation-order noise.
            size_t mismatched_tokens = 0;
            for (int64_t t = 0; t < T; ++t) {
                bool same = true;
                for (int64_t j = 0; j < K; ++j) same &= idx[size_t(t * K + j)] == w_idx[size_t(t * K + j)];
                if (same) continue;
                ++mismatched_tokens;
                ASSERT_FALSE(c.hash) << "hash routing must be exact";
                for (int64_t j = 0; j < K; ++j) {
                    const int32_t a_e = idx[size_t(t * K + j)], b_e = w_idx[size_t(t * K + j)];
                    const float sa = w_scores[size_t(t * E + a_e)] + bias[size_t(a_e)];
                    const float sb = w_scores[size_t(t * E + b_e)] + bias[size_t(b_e)];
                    EXPECT_NEAR(sa, sb, 1e-5f) << "token " << t << " pick " << j;
                }
            }
            EXPECT_LE(mismatched_tokens, size_t(c.ties ? 0 : T / 16 + 1));
            if (mismatched_tokens == 0) {
                DSV4_EXPECT_CLOSE(wts, w_w, 2e-5);
            }
        };
        DSV4_ASSERT_OK(sm90_router_select(a, nullptr));
        expect_matches_cpu();
        // the gate and the selection in one launch (decode batches, bf16 activations, D a multiple of 256)
        if (prec == Precision::kReference && router_gate_select_fits(D, dg->view())) {
            SCOPED_TRACE("sm90_router_gate_select");
            for (auto* b : {&*dlog, &*dsc, &*didx, &*dw}) DSV4_ASSERT_OK(b->fill_bytes(0xff));
            RouterGateArgs g{dx->data(), D, dg->view(), dlog->as<float>()};
            DSV4_ASSERT_OK(sm90_router_gate_select(g, a, nullptr));
            expect_matches_cpu();
            // its scores, picks and weights are sm90_router_select's on its own logits, bit for bit
            const auto fused_sc = to_host<float>(*dsc, w_scores.size());
            const auto fused_idx = to_host<int32_t>(*didx, w_idx.size());
            const auto fused_w = to_host<float>(*dw, w_w.size());
            DSV4_ASSERT_OK(sm90_router_select(a, nullptr));
            EXPECT_EQ(to_host<float>(*dsc, w_scores.size()), fused_sc);
            EXPECT_EQ(to_host<int32_t>(*didx, w_idx.size()), fused_idx);
            EXPECT_EQ(to_host<float>(*dw, w_w.size()), fused_w);
        }
    }
}

const auto kPrecisions = ::testing::Values(Precision::kReference, Precision::kF32);
std::string precision_label(const ::testing::TestParamInfo<Precision>& i) { return backend::precision_name(i.param); }
INSTANTIATE_TEST_SUITE_P(Cuda, Bf16GemmF32Test, kPrecisions, precision_label);
INSTANTIATE_TEST_SUITE_P(Cuda, RouterTest, kPrecisions, precision_label);

}  // namespace
}  // namespace dsv4::cuda
