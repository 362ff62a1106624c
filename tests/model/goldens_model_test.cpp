// Whole-model tests against transformers' own forward (tests/data/goldens, made by tests/reference/make_goldens.py:
// tiny random DeepSeek-V4 models in DeepSeek's official layout (both cases) and in the transformers layout
// (flash_like; pro_like ships only the official layout to keep the fixtures small), the f32 logits of
// one transformers prefill, and transformers' own bf16-vs-f32 rel_l2 in meta.json).
//
// * f32 numerics must match transformers' f32 forward tightly (rel_l2 <= 1e-4, same top-1 everywhere), in both
//   layouts and in every chunking (the incremental path must not hide an architecture difference). pro_like also
//   names a prompt shorter than the window (meta.json -> short_prompt: its first 100 tokens, whose logits are the
//   golden rows [0, 100) because the forward is causal); it runs on its own, in every chunking, too.
// * Reference numerics are a band: between 2x and 12x transformers' bf16-vs-f32 rel_l2 over the whole case, top-1
//   >= 80 %, for the official layout (FP8 / MXFP4 weights: W8A8 and W4A8 GEMMs with activation quantisation;
//   flash_like measures 4.06x / 0.866, pro_like (384 tokens) 2.71x / 0.833). The transformers layout stores bf16
//   weights, so reference numerics there run bf16 GEMMs without activation quantisation (as DeepSeek's linear()
//   does for a bf16 weight) and land near transformers' own bf16 run (flash_like 1.82x): its band starts at 0.5x.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/npy.h"
#include "model_test_util.h"
#include "testing/testing.h"

namespace dsv4::model_tests {
namespace {

class Goldens : public ::testing::TestWithParam<GoldenCase> {
protected:
    void SetUp() override {
        auto g = load_golden(GetParam().name);
        ASSERT_TRUE(g.is_ok()) << g.status().to_string();
        dir_ = g->dir;
        tokens_ = std::move(g->tokens);
        golden_ = std::move(g->logits);
        vocab_ = g->vocab;
        bf16_rel_ = g->bf16_rel;
        ASSERT_TRUE(std::filesystem::exists(model_dir() / "config.json")) << "missing committed " << model_dir();
    }
    std::filesystem::path model_dir() const { return dir_ / GetParam().layout; }

    std::filesystem::path dir_;
    std::vector<int32_t> tokens_;
    std::vector<float> golden_;  // [T, vocab]
    int64_t vocab_ = 0;
    double bf16_rel_ = 0;
};

TEST_P(Goldens, F32MatchesTransformersInEveryChunking) {
    auto engine = load_engine(model_dir(), EnginePrecision::kF32);
    ASSERT_NE(engine, nullptr);
    ASSERT_EQ(engine->info().vocab_size, vocab_);
    EXPECT_EQ(engine->info().layout, GetParam().layout);
    const int64_t n = int64_t(tokens_.size());
    for (int64_t chunk : {n, int64_t(1), int64_t(5), int64_t(129)}) {
        const auto logits = run_logits(*engine, tokens_, chunk);
        auto cmp = testing::compare(logits, golden_);
        const double top1 = top1_agreement(logits, golden_, vocab_);
        std::printf("%s/%s f32 chunk %lld: rel_l2 %.3g, top-1 %.4f\n", GetParam().name.c_str(),
                    GetParam().layout.c_str(), static_cast<long long>(chunk), cmp.rel_l2, top1);
        EXPECT_TRUE(cmp.nonfinite == 0 && cmp.rel_l2 <= 1e-4) << "chunk " << chunk << ": rel_l2 " << cmp.rel_l2
                                                              << "\n" << cmp.report;
        EXPECT_EQ(top1, 1.0) << "chunk " << chunk;
    }
}

TEST_P(Goldens, ReferenceWithinBandInPrefillAndChunked) {
    auto engine = load_engine(model_dir(), EnginePrecision::kReference);
    ASSERT_NE(engine, nullptr);
    // Official layout: activation quantisation puts every position ~7x further from f32 than bf16 does (per-position
    // medians ~9e-2 vs ~1.3e-2); over a whole case the ratio is lower because bf16's few routing flips dominate
    // its rel_l2. The cases are long enough (>= 300 positions) for that to be a statistic, not one flip.
    const double low = GetParam().layout == "official" ? 2.0 : 0.5, high = 12.0;
    const int64_t n = int64_t(tokens_.size());
    for (int64_t chunk : {n, int64_t(1), int64_t(129)}) {
        const auto logits = run_logits(*engine, tokens_, chunk);
        const double rel = rel_l2(logits, golden_), top1 = top1_agreement(logits, golden_, vocab_);
        std::printf("%s/%s reference chunk %lld: rel_l2 %.4f = %.3fx transformers bf16, top-1 %.3f\n",
                    GetParam().name.c_str(), GetParam().layout.c_str(), static_cast<long long>(chunk), rel,
                    rel / bf16_rel_, top1);
        EXPECT_GE(rel, low * bf16_rel_) << "chunk " << chunk << ": reference numerics look like f32";
        EXPECT_LE(rel, high * bf16_rel_) << "chunk " << chunk;
        EXPECT_GE(top1, 0.80) << "chunk " << chunk;
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, Goldens,
                         ::testing::Values(GoldenCase{"flash_like", "official"},
                                           GoldenCase{"flash_like", "transformers"},
                                           GoldenCase{"pro_like", "official"}),
                         golden_case_label);

// A prompt shorter than the sliding window (no window closes, no HCA entry completes, fewer CSA entries than the
// window would hold): pro_like's meta.json names one (short_prompt: its first P tokens). The forward is causal, so
// the golden rows [0, P) are that prompt's logits; make_goldens.py checks this against a transformers run of the
// prefix alone. f32 numerics, every chunking.
TEST(GoldensShortPrompt, F32MatchesGoldenRowsInEveryChunking) {
    const auto dir = testing::test_data_dir() / "goldens" / "pro_like";
    std::ifstream meta_file(dir / "meta.json");
    ASSERT_TRUE(meta_file.good()) << "missing committed fixture " << dir / "meta.json";
    const auto meta = nlohmann::json::parse(meta_file);
    ASSERT_TRUE(meta.contains("short_prompt") && meta.at("short_prompt").is_object())
        << dir / "meta.json" << " names no short_prompt; regenerate with tests/reference/make_goldens.py";
    const int64_t p = meta.at("short_prompt").at("tokens").get<int64_t>();
    const auto json_config = nlohmann::json::parse(std::ifstream(dir / "official" / "config.json"));
    const auto tokens = read_token_file(dir / "tokens.txt");
    ASSERT_GT(p, 0);
    ASSERT_LT(p, json_config.at("sliding_window").get<int64_t>()) << "the short prompt must be shorter than the window";
    ASSERT_LT(p, int64_t(tokens.size()));
    auto golden = io::read_npy(dir / "logits_f32.npy");
    ASSERT_TRUE(golden.is_ok()) << golden.status().to_string();
    const int64_t vocab = golden->shape.at(1);
    const auto all_rows = golden->to_f32();
    const std::vector<float> rows(all_rows.begin(), all_rows.begin() + p * vocab);  // [P, vocab]
    const std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + p);
    auto engine = load_engine(dir / "official", EnginePrecision::kF32);
    ASSERT_NE(engine, nullptr);
    for (int64_t chunk : {p, int64_t(1), int64_t(7)}) {
        const auto logits = run_logits(*engine, prompt, chunk);
        auto cmp = testing::compare(logits, rows);
        const double top1 = top1_agreement(logits, rows, vocab);
        std::printf("pro_like/official f32 short prompt (%lld tokens) chunk %lld: rel_l2 %.3g, top-1 %.4f\n",
                    static_cast<long long>(p), static_cast<long long>(chunk), cmp.rel_l2, top1);
        EXPECT_TRUE(cmp.nonfinite == 0 && cmp.rel_l2 <= 1e-4) << "chunk " << chunk << ": rel_l2 " << cmp.rel_l2
                                                              << "\n" << cmp.report;
        EXPECT_EQ(top1, 1.0) << "chunk " << chunk;
    }
}

// The flash_like official checkpoint carries an MTP block, pro_like none; both load and run (transformers ignores
// mtp.* weights, and so does its layout here).
TEST(GoldensMtp, CheckpointsWithAndWithoutMtpLoad) {
    const auto root = testing::test_data_dir() / "goldens";
    auto with = load_engine(root / "flash_like" / "official", EnginePrecision::kF32);
    auto without = load_engine(root / "pro_like" / "official", EnginePrecision::kF32);
    ASSERT_NE(with, nullptr);
    ASSERT_NE(without, nullptr);
    EXPECT_TRUE(with->info().has_mtp);
    EXPECT_FALSE(without->info().has_mtp);
    EXPECT_FALSE(run_logits(*without, {1, 2, 3}, 0).empty());
}

}  // namespace
}  // namespace dsv4::model_tests

namespace dsv4::model_tests {
namespace {

// The MTP head (a second output) follows the same incremental semantics: every chunking gives the same MTP logits;
// position 0 has none (NaN row), every other row is finite.
TEST(GoldensMtp, MtpHeadChunkingInvariant) {
    const auto dir = testing::test_data_dir() / "goldens" / "flash_like";
    auto engine = load_engine(dir / "official", EnginePrecision::kF32);
    ASSERT_NE(engine, nullptr);
    ASSERT_TRUE(engine->info().has_mtp);
    const auto tokens = read_token_file(dir / "tokens.txt");
    const int64_t n = int64_t(tokens.size()), vocab = engine->info().vocab_size;
    auto run = [&](int64_t chunk, std::vector<float>* main, std::vector<float>* mtp) {
        SessionOptions so;
        so.max_context = n;
        so.mtp = true;
        auto s = engine->create_session(so);
        ASSERT_TRUE(s.is_ok()) << s.status().to_string();
        Logits part;
        for (int64_t off = 0; off < n; off += chunk) {
            const int64_t len = std::min(chunk, n - off);
            ASSERT_TRUE((*s)->feed(std::span<const int32_t>(tokens.data() + off, size_t(len)), &part).is_ok());
            ASSERT_EQ(part.mtp.size(), size_t(len * vocab));
            main->insert(main->end(), part.values.begin(), part.values.end());
            mtp->insert(mtp->end(), part.mtp.begin(), part.mtp.end());
        }
    };
    std::vector<float> main_whole, mtp_whole;
    run(n, &main_whole, &mtp_whole);
    ASSERT_EQ(mtp_whole.size(), size_t(n * vocab));
    EXPECT_TRUE(std::isnan(mtp_whole[0]));
    const std::vector<float> mtp_rest(mtp_whole.begin() + vocab, mtp_whole.end());
    for (float v : mtp_rest) ASSERT_TRUE(std::isfinite(v));
    // the MTP block does not disturb the main output
    EXPECT_LE(rel_l2(main_whole, run_logits(*engine, tokens, 0)), 1e-7);
    for (int64_t chunk : {int64_t(1), int64_t(129)}) {
        std::vector<float> main, mtp;
        run(chunk, &main, &mtp);
        ASSERT_EQ(mtp.size(), mtp_whole.size());
        const std::vector<float> rest(mtp.begin() + vocab, mtp.end());
        EXPECT_LE(rel_l2(rest, mtp_rest), 1e-5) << "chunk " << chunk;
    }
}

}  // namespace
}  // namespace dsv4::model_tests
