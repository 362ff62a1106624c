// make-model: the official and transformers checkpoints of one seed hold the same model (every weight dequantises
// to identical values through the weight map), --layers subsets reproduce the same tensors, seeds matter, and the
// tensors carry the statistics and structure the architecture expects.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "io/safetensors.h"
#include "model/make_model.h"
#include "model/weights.h"
#include "testing/testing.h"

namespace dsv4::model {
namespace {

struct Opened {
    std::unique_ptr<io::Checkpoint> ckpt;
    ModelConfig config;
    ModelWeights weights;
};

Opened make_and_map(const std::filesystem::path& dir, MakeModelOptions o) {
    o.out = dir;
    auto made = make_model(o);
    EXPECT_TRUE(made.is_ok()) << made.status().to_string();
    Opened r;
    auto ckpt = io::Checkpoint::open(dir);
    EXPECT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
    r.ckpt = std::move(ckpt.value());
    auto cfg = load_config(dir);
    EXPECT_TRUE(cfg.is_ok()) << cfg.status().to_string();
    r.config = cfg.value();
    auto w = map_weights(*r.ckpt, r.config);
    EXPECT_TRUE(w.is_ok()) << w.status().to_string();
    r.weights = std::move(w.value());
    return r;
}

// Every weight slot of the main model, named for failure messages.
std::vector<std::pair<std::string, const WeightRef*>> main_slots(const ModelWeights& m) {
    std::vector<std::pair<std::string, const WeightRef*>> s = {
        {"embed", &m.embed}, {"head", &m.head}, {"norm", &m.norm},
        {"hc_head.fn", &m.hc_head.fn}, {"hc_head.base", &m.hc_head.base}, {"hc_head.scale", &m.hc_head.scale}};
    for (const LayerWeights& l : m.layers) {
        const std::string p = "layer " + std::to_string(l.index) + " ";
        const AttentionWeights& a = l.attn;
        const MoEWeights& f = l.ffn;
        for (auto [n, w] : std::initializer_list<std::pair<const char*, const WeightRef*>>{
                 {"attn_norm", &l.attn_norm}, {"ffn_norm", &l.ffn_norm}, {"hc_attn.fn", &l.hc_attn.fn},
                 {"hc_attn.base", &l.hc_attn.base}, {"hc_attn.scale", &l.hc_attn.scale}, {"hc_ffn.fn", &l.hc_ffn.fn},
                 {"hc_ffn.base", &l.hc_ffn.base}, {"hc_ffn.scale", &l.hc_ffn.scale}, {"sink", &a.sink},
                 {"wq_a", &a.wq_a}, {"q_norm", &a.q_norm}, {"wq_b", &a.wq_b}, {"wkv", &a.wkv},
                 {"kv_norm", &a.kv_norm}, {"wo_a", &a.wo_a}, {"wo_b", &a.wo_b},
                 {"compressor.wkv", &a.compressor.wkv}, {"compressor.wgate", &a.compressor.wgate},
                 {"compressor.ape", &a.compressor.ape}, {"compressor.norm", &a.compressor.norm},
                 {"indexer.wq_b", &a.indexer.wq_b}, {"indexer.weights_proj", &a.indexer.weights_proj},
                 {"indexer.compressor.wkv", &a.indexer.compressor.wkv},
                 {"indexer.compressor.wgate", &a.indexer.compressor.wgate},
                 {"indexer.compressor.ape", &a.indexer.compressor.ape},
                 {"indexer.compressor.norm", &a.indexer.compressor.norm}, {"gate", &f.gate},
                 {"gate_bias", &f.gate_bias}, {"tid2eid", &f.tid2eid}, {"shared.w1", &f.shared.w1},
                 {"shared.w2", &f.shared.w2}, {"shared.w3", &f.shared.w3}}) {
            s.emplace_back(p + n, w);
        }
        for (size_t e = 0; e < f.experts.size(); ++e) {
            const std::string ep = p + "expert " + std::to_string(e) + " ";
            s.emplace_back(ep + "w1", &f.experts[e].w1);
            s.emplace_back(ep + "w2", &f.experts[e].w2);
            s.emplace_back(ep + "w3", &f.experts[e].w3);
        }
    }
    return s;
}

std::vector<float> dequantized(const WeightRef& w) {
    std::vector<float> v(static_cast<size_t>(w.rows() * w.cols()));
    dequantize_rows(w, 0, w.rows(), v.data());
    return v;
}

void expect_same_model(const ModelWeights& a, const ModelWeights& b) {
    const auto sa = main_slots(a), sb = main_slots(b);
    ASSERT_EQ(sa.size(), sb.size());
    int compared = 0;
    for (size_t i = 0; i < sa.size(); ++i) {
        const WeightRef& wa = *sa[i].second;
        const WeightRef& wb = *sb[i].second;
        ASSERT_EQ(wa.present(), wb.present()) << sa[i].first;
        if (!wa.present()) continue;
        ASSERT_EQ(wa.shape, wb.shape) << sa[i].first;
        const std::vector<float> va = dequantized(wa), vb = dequantized(wb);
        ASSERT_EQ(std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)), 0)
            << sa[i].first << " (" << weight_format_name(wa.format) << " vs " << weight_format_name(wb.format) << ")";
        ++compared;
    }
    EXPECT_GT(compared, 100);
}

TEST(MakeModel, OfficialAndTransformersLayoutsHoldTheSameWeights) {
    for (ExpertFormat fmt : {ExpertFormat::kMXFP4, ExpertFormat::kFP8}) {
        testing::TempDir official("mm-official"), transformers("mm-transformers");
        MakeModelOptions o;
        o.seed = 42;
        o.expert_format = fmt;
        const Opened a = make_and_map(official.path(), o);
        o.layout = Layout::kTransformers;
        const Opened b = make_and_map(transformers.path(), o);
        ASSERT_EQ(a.weights.layout, Layout::kOfficial);
        ASSERT_EQ(b.weights.layout, Layout::kTransformers);
        EXPECT_TRUE(a.weights.mtp.has_value());
        EXPECT_EQ(a.weights.layers[0].ffn.experts[0].w1.format,
                  fmt == ExpertFormat::kMXFP4 ? WeightFormat::kMXFP4 : WeightFormat::kFP8Block128);
        EXPECT_EQ(a.weights.layers[0].attn.wq_a.format, WeightFormat::kFP8Block128);
        EXPECT_EQ(b.weights.layers[0].attn.wq_a.format, WeightFormat::kBF16);
        expect_same_model(a.weights, b.weights);
    }
}

TEST(MakeModel, Nvfp4ExpertsMapAndDequantiseWithinBf16Rounding) {
    testing::TempDir official("mm-nvfp4"), transformers("mm-nvfp4-tf");
    MakeModelOptions o;
    o.seed = 5;
    o.expert_format = ExpertFormat::kNVFP4;
    const Opened a = make_and_map(official.path(), o);
    o.layout = Layout::kTransformers;
    const Opened b = make_and_map(transformers.path(), o);
    const WeightRef& wa = a.weights.layers[3].ffn.experts[1].w2;
    ASSERT_EQ(wa.format, WeightFormat::kNVFP4);
    // The NVFP4 global scale makes values that BF16 rounds: equal up to BF16's relative step.
    const std::vector<float> va = dequantized(wa), vb = dequantized(b.weights.layers[3].ffn.experts[1].w2);
    for (size_t i = 0; i < va.size(); ++i) ASSERT_NEAR(va[i], vb[i], std::fabs(va[i]) * (1.0f / 256)) << i;
}

TEST(MakeModel, LayerSubsetsAndSeeds) {
    testing::TempDir full("mm-full"), sub("mm-sub"), other("mm-other");
    MakeModelOptions o;
    o.seed = 7;
    const Opened a = make_and_map(full.path(), o);
    o.layers = 2;
    const Opened b = make_and_map(sub.path(), o);
    ASSERT_EQ(b.weights.layers.size(), 2u);
    for (const char* name : {"layers.0.attn.wq_a.weight", "layers.1.ffn.experts.3.w2.weight", "layers.1.ffn.gate.tid2eid",
                             "layers.1.attn.indexer.compressor.ape", "embed.weight", "mtp.0.e_proj.weight"}) {
        const auto* ta = a.ckpt->find(name);
        const auto* tb = b.ckpt->find(name);
        ASSERT_TRUE(ta && tb) << name;
        ASSERT_EQ(ta->bytes().size(), tb->bytes().size()) << name;
        EXPECT_EQ(std::memcmp(ta->bytes().data(), tb->bytes().data(), ta->bytes().size()), 0) << name;
    }
    o.layers.reset();
    o.seed = 8;
    const Opened c = make_and_map(other.path(), o);
    const auto* ta = a.ckpt->find("layers.0.attn.wq_a.weight");
    const auto* tc = c.ckpt->find("layers.0.attn.wq_a.weight");
    EXPECT_NE(std::memcmp(ta->bytes().data(), tc->bytes().data(), ta->bytes().size()), 0);
}

TEST(MakeModel, TensorStatisticsAndTables) {
    testing::TempDir dir("mm-stats");
    MakeModelOptions o;
    o.seed = 3;
    const Opened m = make_and_map(dir.path(), o);
    const ModelConfig& c = m.config;
    auto stats = [](const std::vector<float>& v) {
        double s = 0, s2 = 0;
        for (float x : v) {
            s += x;
            s2 += double(x) * x;
        }
        const double mean = s / v.size();
        return std::pair<double, double>{mean, std::sqrt(s2 / v.size() - mean * mean)};
    };
    const LayerWeights& l = m.weights.layers[3];
    // Linears ~ N(0, 1/sqrt(in)) through their quantisation (FP8 and MXFP4 keep the spread within ~10%).
    for (const WeightRef* w : {&l.attn.wq_a, &l.attn.wo_b, &l.ffn.experts[2].w1, &l.ffn.gate}) {
        auto [mean, sd] = stats(dequantized(*w));
        EXPECT_NEAR(sd * std::sqrt(static_cast<double>(w->cols())), 1.0, 0.1) << w->name;
        EXPECT_NEAR(mean, 0.0, 0.05 / std::sqrt(static_cast<double>(w->cols())) * 10) << w->name;
    }
    auto [norm_mean, norm_sd] = stats(dequantized(l.attn_norm));
    EXPECT_NEAR(norm_mean, 1.0, 0.02);
    auto [fn_mean, fn_sd] = stats(dequantized(l.hc_attn.fn));
    EXPECT_NEAR(fn_sd, 1e-2, 1e-3);
    auto [sink_mean, sink_sd] = stats(dequantized(l.attn.sink));
    EXPECT_GT(sink_sd, 0.3);
    // tid2eid: distinct experts per row, all < E.
    const WeightRef& t = m.weights.layers[0].ffn.tid2eid;
    ASSERT_TRUE(t.present());
    const std::vector<float> ids = dequantized(t);
    for (int64_t r = 0; r < t.rows(); ++r) {
        std::set<int> row;
        for (int64_t k = 0; k < t.cols(); ++k) {
            const int id = static_cast<int>(ids[r * t.cols() + k]);
            ASSERT_GE(id, 0);
            ASSERT_LT(id, c.n_routed_experts);
            row.insert(id);
        }
        ASSERT_EQ(static_cast<int64_t>(row.size()), t.cols()) << "row " << r;
    }
}

TEST(MakeModel, BadOptionsAreErrors) {
    testing::TempDir dir("mm-bad");
    MakeModelOptions o;
    o.out = dir.path();
    o.layers = 99;
    auto r = make_model(o);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("--layers"), std::string::npos) << r.status().to_string();
    o.layers.reset();
    o.preset = "huge";
    EXPECT_FALSE(make_model(o).is_ok());
}

}  // namespace
}  // namespace dsv4::model
