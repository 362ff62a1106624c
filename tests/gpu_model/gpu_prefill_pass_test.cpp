// Long GPU passes (label gpu): a prompt fed in one pass of more than 256 rows runs its routed experts in the prefill
// MoE kernel (sm90_mxfp4_moe_prefill, FP8 wgmma) and computes the head's logits in chunks; fed in passes of 256 it
// runs them in the decode kernel. On a one-layer V4-Flash-shaped model (random weights generated on the GPU in the
// shipped formats, experts in the repacked layout; a hash-routed CSA layer, a score-routed HCA layer) three distances
// are asserted, each isolating one factor:
//   chunking: decode kernel, passes of 256 vs 128 (reference numerics round per pass; the scale of the noise),
//   kernel:   passes of 256, prefill vs decode kernel (the MoE kernels alone),
//   pass:     one pass of 1024 vs passes of 512 (the long pass and the chunked head; both run the prefill MoE kernel
//             and, from kFp8LinearGemmMinTokens rows, the FP8 linears on cuBLASLt).
// Printed, not asserted: passes of 512 vs 256 (the FP8 linears' two paths plus chunking).
// Measured on the H200 (2026-12-01; rel_l2 of the logits): hash-routed CSA layer chunking 0.043, kernel 0.0054,
// pass 0.0068, 512 vs 256 0.042; score-routed HCA layer 0.064, 0.0050, 0.0005, 0.131. The FP8 linears' paths agree
// on 99.995 % of their bf16 outputs (tests/ops/linear_test.cpp); how much of the HCA layer's 0.131 is theirs and how
// much chunking is not separated (the paths switch on the row count only). A wrong expert, scale, row or logits
// chunk gives an error of the logits' own size (~1). More layers amplify every difference alike (4 layers: 0.19 for
// all three), so they would test nothing more.
// Also (below): the indexer of a pass in row chunks against the whole pass (GpuIndexerChunks), and routing inside the
// MoE launch against the router's launches (GpuDecodeRoute), both bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "engine/cuda/gpu_internal.h"
#include "engine/cuda/gpu_synthetic.h"
#include "model/config.h"
#include "model/model_test_util.h"
#include "ops/gpu_testing.h"

namespace dsv4::model_tests {
namespace {

struct LayerKind {
    bool hash_routed = false;
    int compress_ratio = 4;  // 4: CSA (with the indexer), 128: HCA
};

void PrintTo(const LayerKind& k, std::ostream* os) {
    *os << (k.hash_routed ? "hash-routed" : "score-routed") << ", compress ratio " << k.compress_ratio;
}

// V4-Flash's shapes, one layer of the given kind.
Result<model::ModelConfig> one_layer_flash(LayerKind kind) {
    DSV4_ASSIGN_OR_RETURN(model::ModelConfig c, model::preset_config("flash"));
    const int mtp_ratio = c.compress_ratios.back();
    c.compress_ratios = {kind.compress_ratio, mtp_ratio};
    c.num_layers = 1;
    c.num_hash_layers = kind.hash_routed ? 1 : 0;
    c.num_mtp_layers = 0;
    return c;
}

// A synthetic one-layer V4-Flash model of this kind for passes of up to `max_rows`, with cache for two sequences of
// `context` positions.
Result<std::shared_ptr<engine::GpuModel>> one_layer_model(LayerKind kind, int64_t max_rows, int64_t context) {
    DSV4_ASSIGN_OR_RETURN(const model::ModelConfig cfg, one_layer_flash(kind));
    DSV4_ASSIGN_OR_RETURN(std::shared_ptr<engine::GpuModel> m,
                          engine::make_synthetic_gpu_model(cfg, backend::Precision::kReference, max_rows));
    DSV4_RETURN_IF_ERROR(engine::resize_gpu_cache(*m, 2, context, 2 * context));
    return m;
}

// Distinct, spread token ids for n positions.
std::vector<int32_t> spread_tokens(int64_t n, int64_t vocab) {
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) tokens[size_t(i)] = int32_t((i * 7919 + 13) % vocab);
    return tokens;
}

// The logits of `tokens` fed from position 0 in passes of `pass` rows.
std::vector<float> feed(engine::GpuModel& m, const std::vector<int32_t>& tokens, int64_t pass) {
    const int64_t n = int64_t(tokens.size()), vocab = m.cfg.vocab_size;
    auto s = engine::make_gpu_sequence(m, n, pass);
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    if (!s.is_ok()) return {};
    std::vector<float> logits(size_t(n * vocab));
    for (int64_t off = 0; off < n; off += pass) {
        engine::GpuBatchSeq q{.seq = s->get(),
                              .tokens = tokens.data() + off,
                              .n = std::min(pass, n - off),
                              .logits = logits.data() + off * vocab};
        const Status st = engine::gpu_forward_batch(m, std::span<engine::GpuBatchSeq>(&q, 1));
        EXPECT_TRUE(st.is_ok()) << st.to_string();
        if (!st.is_ok()) return {};
    }
    return logits;
}

struct Distance {
    double rel = 0, top1 = 0;
};
Distance distance(const std::vector<float>& a, const std::vector<float>& b, int64_t vocab) {
    if (a.empty() || a.size() != b.size()) return {1e9, 0};
    for (size_t i = 0; i < a.size(); ++i)
        if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return {1e9, 0};
    return {rel_l2(a, b), top1_agreement(a, b, vocab)};
}

class GpuLongPass : public ::testing::TestWithParam<LayerKind> {};

TEST_P(GpuLongPass, PrefillMoeKernelMatchesDecodeKernelPasses) {
    DSV4_REQUIRE_GPU();
    const int64_t n = 1024;
    auto made = one_layer_model(GetParam(), n, n);
    ASSERT_TRUE(made.is_ok()) << made.status().to_string();
    engine::GpuModel& m = **made;
    const int64_t vocab = m.cfg.vocab_size;
    for (const engine::GpuLayer& l : m.layers) EXPECT_TRUE(l.ffn.mxfp4_repacked);

    const std::vector<int32_t> tokens = spread_tokens(n, vocab);
    const std::vector<float> decode256 = feed(m, tokens, 256), decode128 = feed(m, tokens, 128);
    const std::vector<float> one = feed(m, tokens, n);  // one pass: prefill kernel, the head in 4 chunks
    // two passes of 512: the kernels of the one pass (prefill MoE kernel, FP8 linears on cuBLASLt from
    // kFp8LinearGemmMinTokens rows), so that one pass against them differs by the chunking alone
    const std::vector<float> halves = feed(m, tokens, n / 2);
    m.moe_prefill_above = 0;
    const std::vector<float> prefill256 = feed(m, tokens, 256);
    m.moe_prefill_above = engine::kMoeDecodeKernelMaxRows;
    const Distance chunking = distance(decode256, decode128, vocab);
    const Distance kernel = distance(prefill256, decode256, vocab);
    const Distance pass = distance(one, halves, vocab);
    std::printf("decode kernel, passes of 256 vs 128 (chunking only): rel_l2 %.4g, top-1 %.3f\n", chunking.rel,
                chunking.top1);
    std::printf("passes of 256, prefill vs decode kernel (MoE kernel only): rel_l2 %.4g, top-1 %.3f\n", kernel.rel,
                kernel.top1);
    std::printf(
        "prefill kernel, one pass of 1024 vs passes of 512 (chunking, head in chunks): rel_l2 %.4g, top-1 "
        "%.3f\n",
        pass.rel, pass.top1);
    const Distance linears = distance(halves, prefill256, vocab);
    std::printf(
        "passes of 512 vs 256, prefill kernel (FP8 linears on cuBLASLt vs the W8A8 kernel, and chunking): "
        "rel_l2 %.4g, top-1 %.3f\n",
        linears.rel, linears.top1);
    EXPECT_LE(chunking.rel, 0.1);
    EXPECT_LE(kernel.rel, 2e-2);
    EXPECT_LE(pass.rel, 2 * chunking.rel);
}

INSTANTIATE_TEST_SUITE_P(Layer, GpuLongPass, ::testing::Values(LayerKind{true, 4}, LayerKind{false, 128}),
                         [](const ::testing::TestParamInfo<LayerKind>& i) {
                             return std::string(i.param.hash_routed ? "hash_" : "scores_") +
                                    (i.param.compress_ratio == 4 ? "csa" : "hca");
                         });

// A pass whose indexer scores outgrow the scores buffer (GpuModel::index_scores_budget: at the engine's default 1M
// capacity a whole 8,192-row pass would need 4.3 GB) runs the indexer in row chunks: a 1,024-row pass on a CSA layer
// in chunks of 127 rows, then decode steps, gives the same logits bit for bit as with the whole pass in one piece.
TEST(GpuIndexerChunks, APassInRowChunksGivesTheSameBits) {
    DSV4_REQUIRE_GPU();
    const int64_t n = 1024, steps = 4;
    auto made = one_layer_model(LayerKind{false, 4}, n, n + steps);
    ASSERT_TRUE(made.is_ok()) << made.status().to_string();
    engine::GpuModel& m = **made;
    const int64_t vocab = m.cfg.vocab_size;
    const std::vector<int32_t> tokens = spread_tokens(n + steps, vocab);
    const auto run = [&]() {  // one pass of n rows, then one-token decode steps
        std::vector<float> logits(size_t((n + steps) * vocab));
        auto s = engine::make_gpu_sequence(m, n + steps, n);
        EXPECT_TRUE(s.is_ok()) << s.status().to_string();
        if (!s.is_ok()) return std::vector<float>{};
        for (int64_t off = 0; off < n + steps; off += off == 0 ? n : 1) {
            engine::GpuBatchSeq q{.seq = s->get(),
                                  .tokens = tokens.data() + off,
                                  .n = off == 0 ? n : 1,
                                  .logits = logits.data() + off * vocab};
            const Status st = engine::gpu_forward_batch(m, std::span<engine::GpuBatchSeq>(&q, 1));
            EXPECT_TRUE(st.is_ok()) << st.to_string();
            if (!st.is_ok()) return std::vector<float>{};
        }
        return logits;
    };
    const std::vector<float> whole = run();
    m.index_scores_budget = 128 * 512;  // ~127 rows of the pass's 256 entries (the buffer is sized at the capacity)
    ASSERT_TRUE(engine::resize_gpu_cache(m, 2, n + steps, 2 * (n + steps)).is_ok());
    ASSERT_LT(m.pass.index_scores.bytes(), size_t(n * (n / 4) * 2)) << "the pass would not be chunked";
    const std::vector<float> chunked = run();
    ASSERT_EQ(whole.size(), chunked.size());
    EXPECT_EQ(cuda::testing::count_bit_differences(whole, chunked), 0u);
}

// With GpuModel::moe_route_max_rows = 8 passes of up to 8 rows route inside the MoE launch (MoeDecodeArgs::route: one
// row on the router's cluster, the engine's default, more on the ⌈E / 8⌉-block form); with 0 they run the router's
// launch and the prepare. Both compute the same logits, picks and weights in the same order
// (tests/ops/moe_route_test.cpp), so the model's logits agree bit for bit, through the decode graphs and their replays
// (the route's arrival counter must come back to zero every step).
class GpuDecodeRoute : public ::testing::TestWithParam<LayerKind> {};

TEST_P(GpuDecodeRoute, RoutingInsideTheMoeLaunchChangesNoBit) {
    DSV4_REQUIRE_GPU();
    const int64_t n = 24;
    auto made = one_layer_model(GetParam(), 8, n);
    ASSERT_TRUE(made.is_ok()) << made.status().to_string();
    engine::GpuModel& m = **made;
    for (const engine::GpuLayer& l : m.layers)  // the route's conditions, so that the comparison is not blind
        EXPECT_TRUE(l.ffn.mxfp4_repacked && cuda::moe_route_fits(m.cfg.hidden_size, l.ffn.gate));
    const int64_t vocab = m.cfg.vocab_size;
    const std::vector<int32_t> tokens = spread_tokens(n, vocab);
    m.moe_route_max_rows = cuda::kMoeRouteMaxTokens;
    const std::vector<float> routed = feed(m, tokens, 1), routed8 = feed(m, tokens, 8);
    m.moe_route_max_rows = 0;
    const std::vector<float> router = feed(m, tokens, 1), router8 = feed(m, tokens, 8);
    ASSERT_EQ(routed.size(), size_t(n * vocab));
    ASSERT_EQ(routed8.size(), router8.size());
    EXPECT_EQ(cuda::testing::count_bit_differences(routed, router), 0u) << "one-token passes";
    EXPECT_EQ(cuda::testing::count_bit_differences(routed8, router8), 0u) << "passes of 8";
}

INSTANTIATE_TEST_SUITE_P(Layer, GpuDecodeRoute, ::testing::Values(LayerKind{true, 4}, LayerKind{false, 128}),
                         [](const ::testing::TestParamInfo<LayerKind>& i) {
                             return std::string(i.param.hash_routed ? "hash_" : "scores_") +
                                    (i.param.compress_ratio == 4 ? "csa" : "hca");
                         });

}  // namespace
}  // namespace dsv4::model_tests
