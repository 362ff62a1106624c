// Long GPU passes (label gpu): a prompt fed in one pass of more than 256 rows runs its routed experts in the prefill
// MoE kernel (sm90_mxfp4_moe_prefill, FP8 wgmma) and computes the head's logits in chunks; fed in passes of 256 it
// runs them in the decode kernel. On a V4-Flash-shaped model (4 layers, 3 hash-routed and 1 score-routed, random
// weights generated on the GPU in the shipped formats, experts in the repacked layout) both must give the same
// logits up to the two kernels' rounding.
//
// Bound: each MoE kernel is within rel_l2 ~5e-3 of the CPU composition (docs/kernels/moe_prefill.md), and the two
// feeds also differ in the attention's chunking (reference numerics round per pass). 4 layers carry that into the
// logits; a wrong expert, scale, row or logits chunk gives an error of the logits' own size (rel_l2 ~1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "backend/cuda/device.h"
#include "engine/cuda/gpu_internal.h"
#include "engine/cuda/gpu_synthetic.h"
#include "model/config.h"
#include "model/model_test_util.h"

namespace dsv4::model_tests {
namespace {

Result<model::ModelConfig> four_layer_flash() {
    DSV4_ASSIGN_OR_RETURN(model::ModelConfig c, model::preset_config("flash"));
    const int mtp_ratio = c.compress_ratios.back();
    c.compress_ratios.resize(4);
    c.compress_ratios.push_back(mtp_ratio);
    c.num_layers = 4;
    c.num_hash_layers = std::min<int64_t>(c.num_hash_layers, 3);
    c.num_mtp_layers = 0;
    return c;
}

// The logits of `tokens` fed from position 0 in passes of `pass` rows.
std::vector<float> feed(engine::GpuModel& m, const std::vector<int32_t>& tokens, int64_t pass) {
    const int64_t n = int64_t(tokens.size()), vocab = m.cfg.vocab_size;
    auto s = engine::make_gpu_sequence(m, n, pass);
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    if (!s.is_ok()) return {};
    std::vector<float> logits(size_t(n * vocab));
    for (int64_t off = 0; off < n; off += pass) {
        engine::GpuBatchSeq q{.seq = s->get(), .tokens = tokens.data() + off, .n = std::min(pass, n - off),
                              .logits = logits.data() + off * vocab};
        const Status st = engine::gpu_forward_batch(m, std::span<engine::GpuBatchSeq>(&q, 1));
        EXPECT_TRUE(st.is_ok()) << st.to_string();
        if (!st.is_ok()) return {};
    }
    return logits;
}

TEST(GpuLongPass, PrefillMoeKernelMatchesDecodeKernelPasses) {
    auto count = cuda::device_count();
    if (!count.is_ok() || *count == 0) GTEST_SKIP() << "no CUDA GPU on this machine";
    auto cfg = four_layer_flash();
    ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
    const int64_t n = 1024;
    auto m = engine::make_synthetic_gpu_model(*cfg, backend::Precision::kReference, n);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    ASSERT_TRUE(engine::resize_gpu_cache(**m, 2, n, 2 * n).is_ok());
    for (const engine::GpuLayer& l : (*m)->layers) EXPECT_TRUE(l.ffn.mxfp4_repacked);

    std::vector<int32_t> tokens(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) tokens[size_t(i)] = int32_t((i * 7919 + 13) % cfg->vocab_size);
    const std::vector<float> one = feed(**m, tokens, n);    // one pass: prefill kernel, head in 4 chunks
    const std::vector<float> four = feed(**m, tokens, 256);  // four passes: decode kernel
    ASSERT_EQ(one.size(), four.size());
    ASSERT_FALSE(one.empty());
    int64_t bad = 0;
    for (size_t i = 0; i < one.size(); ++i) bad += !std::isfinite(one[i]) || !std::isfinite(four[i]);
    ASSERT_EQ(bad, 0) << "non-finite logits";
    const double rel = rel_l2(one, four), top1 = top1_agreement(one, four, cfg->vocab_size);
    std::printf("1 pass of %lld (prefill MoE) vs 4 passes of 256 (decode MoE): rel_l2 %.4g, top-1 %.3f\n",
                static_cast<long long>(n), rel, top1);
    EXPECT_LE(rel, 3e-2);
    EXPECT_GE(top1, 0.9);
}

}  // namespace
}  // namespace dsv4::model_tests
