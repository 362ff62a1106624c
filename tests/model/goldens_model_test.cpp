// Whole-model tests against transformers' own forward (tests/data/goldens, made by tests/reference/make_goldens.py:
// tiny random DeepSeek-V4 models in DeepSeek's official layout (both cases) and in the transformers layout
// (flash_like; pro_like ships only the official layout to keep the fixtures small), the f32 logits of
// one transformers prefill, and transformers' own bf16-vs-f32 rel_l2 in meta.json).
//
// * f32 numerics must match transformers' f32 forward tightly (rel_l2 <= 1e-4, same top-1 everywhere), in both
//   layouts and in every chunking (the incremental path must not hide an architecture difference).
// * Reference numerics are a band: between ~2x (1.9x, see below) and 12x transformers' bf16-vs-f32 distance,
//   top-1 >= 80 %, for the official layout (FP8 / MXFP4 weights: W8A8 and W4A8 GEMMs with activation
//   quantisation). The transformers
//   layout stores bf16 weights, so reference numerics there run bf16 GEMMs without activation quantisation (as
//   DeepSeek's linear() does for a bf16 weight) and land near transformers' own bf16 run: its band starts at 0.5x.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/npy.h"
#include "model_test_util.h"
#include "testing/testing.h"

namespace dsv4::model_tests {
namespace {

struct GoldenCase {
    std::string name;    // flash_like, pro_like
    std::string layout;  // official, transformers
};

void PrintTo(const GoldenCase& c, std::ostream* os) { *os << c.name << "/" << c.layout; }

std::string case_label(const ::testing::TestParamInfo<GoldenCase>& info) {
    return info.param.name + "_" + info.param.layout;
}

class Goldens : public ::testing::TestWithParam<GoldenCase> {
protected:
    void SetUp() override {
        dir_ = testing::test_data_dir() / "goldens" / GetParam().name;
        // The fixtures are committed (tests/reference/make_goldens.py writes them): missing ones are a failure.
        ASSERT_TRUE(std::filesystem::exists(dir_ / "meta.json")) << "missing committed fixture " << dir_;
        ASSERT_TRUE(std::filesystem::exists(model_dir() / "config.json")) << "missing committed " << model_dir();
        tokens_ = read_token_file(dir_ / "tokens.txt");
        ASSERT_FALSE(tokens_.empty()) << dir_ / "tokens.txt";
        auto arr = io::read_npy(dir_ / "logits_f32.npy");
        ASSERT_TRUE(arr.is_ok()) << arr.status().to_string();
        ASSERT_EQ(arr->shape.size(), 2u);
        ASSERT_EQ(arr->shape[0], int64_t(tokens_.size()));
        vocab_ = arr->shape[1];
        golden_ = arr->to_f32();
        std::ifstream meta(dir_ / "meta.json");
        const auto j = nlohmann::json::parse(meta);
        bf16_rel_ = j.at("rel_l2").at("transformers_bf16_vs_f32").get<double>();
        ASSERT_GT(bf16_rel_, 0.0);
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
    // Official layout: 2x transformers' bf16 distance, less 5 %: pro_like (100 tokens) measures 1.998-2.000x with
    // DeepSeek's exact prefill index layout (and 2.06x with the window padding placed first instead), so the
    // nominal 2x edge sits inside the case's own rounding noise; flash_like measures 4.06x.
    const double low = GetParam().layout == "official" ? 1.9 : 0.5, high = 12.0;
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
                         case_label);

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
