// The checkpoint schema against the published inventories of the shipped checkpoints (MODEL_SPEC §2.3, §9,
// §14.13: [NANO] / [CKPT-TABLE]) and against the official-layout tiny checkpoint in tests/data.
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "io/safetensors.h"
#include "model/schema.h"
#include "testing/testing.h"

namespace dsv4::model {
namespace {

ModelConfig preset(const char* name) {
    auto r = preset_config(name);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return r.is_ok() ? *r : ModelConfig{};
}

std::map<std::string, TensorSpec> by_name(const std::vector<TensorSpec>& specs) {
    std::map<std::string, TensorSpec> m;
    for (const TensorSpec& s : specs) EXPECT_TRUE(m.emplace(s.name, s).second) << "duplicate " << s.name;
    return m;
}

void expect_tensor(const std::map<std::string, TensorSpec>& m, const std::string& name, DType dtype,
                   std::vector<int64_t> shape) {
    auto it = m.find(name);
    ASSERT_NE(it, m.end()) << name;
    EXPECT_EQ(it->second.dtype, dtype) << name;
    EXPECT_EQ(it->second.shape, shape) << name;
}

TEST(Schema, FlashMatchesThePublishedCheckpoint) {
    SchemaTotals t = schema_totals(checkpoint_schema(preset("flash"), Layout::kOfficial));
    EXPECT_EQ(t.logical_params, 290'942'289'362);
    EXPECT_EQ(t.tensors, 69'187);
    EXPECT_EQ(t.bytes, 159'609'485'896u);
}

TEST(Schema, ProMatchesThePublishedCheckpoint) {
    SchemaTotals t = schema_totals(checkpoint_schema(preset("pro"), Layout::kOfficial));
    EXPECT_EQ(t.logical_params, 1'598'837'347'742);
    EXPECT_EQ(t.tensors, 145'116);
    EXPECT_EQ(t.bytes, 864'704'792'696u);
}

TEST(Schema, FlashTensorShapesFromTheInventory) {
    auto m = by_name(checkpoint_schema(preset("flash"), Layout::kOfficial));
    expect_tensor(m, "embed.weight", DType::kBF16, {129280, 4096});
    expect_tensor(m, "hc_head_fn", DType::kF32, {4, 16384});
    expect_tensor(m, "layers.0.hc_attn_fn", DType::kF32, {24, 16384});
    expect_tensor(m, "layers.0.hc_ffn_scale", DType::kF32, {3});
    expect_tensor(m, "layers.0.attn.wq_b.weight", DType::kF8E4M3, {32768, 1024});
    expect_tensor(m, "layers.0.attn.wq_b.scale", DType::kF8E8M0, {256, 8});
    expect_tensor(m, "layers.5.attn.wo_a.weight", DType::kF8E4M3, {8192, 4096});
    expect_tensor(m, "layers.5.attn.wo_b.scale", DType::kF8E8M0, {32, 64});
    expect_tensor(m, "layers.0.ffn.gate.tid2eid", DType::kI64, {129280, 6});
    expect_tensor(m, "layers.2.ffn.gate.tid2eid", DType::kI64, {129280, 6});
    expect_tensor(m, "layers.3.ffn.gate.bias", DType::kF32, {256});
    EXPECT_EQ(m.count("layers.2.ffn.gate.bias"), 0u);
    EXPECT_EQ(m.count("layers.3.ffn.gate.tid2eid"), 0u);
    expect_tensor(m, "layers.7.ffn.experts.255.w1.weight", DType::kI8, {2048, 2048});
    expect_tensor(m, "layers.7.ffn.experts.255.w1.scale", DType::kF8E8M0, {2048, 128});
    expect_tensor(m, "layers.7.ffn.experts.0.w2.weight", DType::kI8, {4096, 1024});
    expect_tensor(m, "layers.7.ffn.experts.0.w2.scale", DType::kF8E8M0, {4096, 64});
    // CSA layer 2: overlapping compressor (2 x 512) + indexer; HCA layer 3: 512-wide compressor, ape [128, 512].
    expect_tensor(m, "layers.2.attn.compressor.wkv.weight", DType::kBF16, {1024, 4096});
    expect_tensor(m, "layers.2.attn.compressor.ape", DType::kF32, {4, 1024});
    expect_tensor(m, "layers.2.attn.indexer.wq_b.scale", DType::kF8E8M0, {64, 8});
    expect_tensor(m, "layers.2.attn.indexer.compressor.ape", DType::kF32, {4, 256});
    expect_tensor(m, "layers.2.attn.indexer.compressor.norm.weight", DType::kBF16, {128});
    expect_tensor(m, "layers.3.attn.compressor.ape", DType::kF32, {128, 512});
    EXPECT_EQ(m.count("layers.3.attn.indexer.wq_b.weight"), 0u);
    EXPECT_EQ(m.count("layers.1.attn.compressor.wkv.weight"), 0u);  // SWA
    // MTP block (§9.5): a score-routed SWA layer + projections; 1,575 tensors of which 778 scale sidecars.
    expect_tensor(m, "mtp.0.e_proj.scale", DType::kF8E8M0, {32, 32});
    expect_tensor(m, "mtp.0.hc_head_fn", DType::kF32, {4, 16384});
    expect_tensor(m, "mtp.0.ffn.gate.bias", DType::kF32, {256});
    EXPECT_EQ(m.count("mtp.0.attn.compressor.wkv.weight"), 0u);
    int mtp = 0, mtp_scales = 0;
    for (const auto& [name, s] : m) {
        if (name.rfind("mtp.", 0) != 0) continue;
        ++mtp;
        mtp_scales += s.role == TensorRole::kScale;
    }
    EXPECT_EQ(mtp, 1575);
    EXPECT_EQ(mtp_scales, 778);
}

TEST(Schema, ProTensorShapesFromTheInventory) {
    auto m = by_name(checkpoint_schema(preset("pro"), Layout::kOfficial));
    expect_tensor(m, "layers.0.attn.wq_a.scale", DType::kF8E8M0, {12, 56});
    expect_tensor(m, "layers.0.attn.wq_b.scale", DType::kF8E8M0, {512, 12});
    expect_tensor(m, "layers.0.attn.wo_a.weight", DType::kF8E4M3, {16384, 4096});
    expect_tensor(m, "layers.0.attn.compressor.ape", DType::kF32, {128, 512});  // Pro layers 0,1 are HCA
    expect_tensor(m, "layers.0.ffn.experts.383.w1.weight", DType::kI8, {3072, 3584});
    expect_tensor(m, "layers.0.ffn.experts.383.w1.scale", DType::kF8E8M0, {3072, 224});
    expect_tensor(m, "layers.60.attn.indexer.wq_b.scale", DType::kF8E8M0, {64, 12});
    expect_tensor(m, "layers.60.ffn.shared_experts.w2.scale", DType::kF8E8M0, {56, 24});
}

TEST(Schema, ExpertFormatsKeepTheLogicalParameterCount) {
    ModelConfig c = preset("tiny");
    const int64_t mx = schema_totals(checkpoint_schema(c, Layout::kOfficial)).logical_params;
    c.expert_format = ExpertFormat::kNVFP4;
    auto nv = by_name(checkpoint_schema(c, Layout::kOfficial));
    expect_tensor(nv, "layers.0.ffn.experts.7.w2.weight", DType::kU8, {128, 64});
    expect_tensor(nv, "layers.0.ffn.experts.7.w2.scale", DType::kF8E4M3, {128, 8});
    expect_tensor(nv, "layers.0.ffn.experts.7.w2.scale_2", DType::kF32, {1});
    EXPECT_EQ(schema_totals(checkpoint_schema(c, Layout::kOfficial)).logical_params, mx);
    c.expert_format = ExpertFormat::kFP8;
    auto f8 = by_name(checkpoint_schema(c, Layout::kOfficial));
    expect_tensor(f8, "layers.0.ffn.experts.7.w1.weight", DType::kF8E4M3, {128, 128});
    expect_tensor(f8, "layers.0.ffn.experts.7.w1.scale", DType::kF32, {1, 1});  // -Base: F32 block scales
    EXPECT_EQ(schema_totals(checkpoint_schema(c, Layout::kOfficial)).logical_params, mx);
}

TEST(Schema, TransformersLayout) {
    ModelConfig flash = preset("flash");
    auto official = checkpoint_schema(flash, Layout::kOfficial);
    int64_t main_params = 0;
    for (const TensorSpec& s : official)
        if (s.name.rfind("mtp.", 0) != 0) main_params += s.logical_params();
    auto tf = checkpoint_schema(flash, Layout::kTransformers);
    // Same parameters as the official main model (no MTP block), no scale sidecars, all linears BF16.
    EXPECT_EQ(schema_totals(tf).logical_params, main_params);
    auto m = by_name(tf);
    for (const auto& [name, s] : m) {
        EXPECT_NE(s.role, TensorRole::kScale) << name;
        EXPECT_EQ(name.find("mtp."), std::string::npos) << name;
        EXPECT_FALSE(name.empty());
    }
    expect_tensor(m, "model.embed_tokens.weight", DType::kBF16, {129280, 4096});
    expect_tensor(m, "lm_head.weight", DType::kBF16, {129280, 4096});
    expect_tensor(m, "model.hc_head.hc_fn", DType::kF32, {4, 16384});
    expect_tensor(m, "model.layers.0.attn_hc.fn", DType::kF32, {24, 16384});
    expect_tensor(m, "model.layers.0.self_attn.sinks", DType::kF32, {64});
    expect_tensor(m, "model.layers.0.self_attn.q_b_proj.weight", DType::kBF16, {32768, 1024});
    expect_tensor(m, "model.layers.0.self_attn.o_a_proj.weight", DType::kBF16, {8192, 4096});
    expect_tensor(m, "model.layers.2.self_attn.compressor.position_bias", DType::kF32, {4, 1024});
    expect_tensor(m, "model.layers.2.self_attn.compressor.indexer.q_b_proj.weight", DType::kBF16, {8192, 1024});
    expect_tensor(m, "model.layers.2.self_attn.compressor.indexer.kv_norm.weight", DType::kBF16, {128});
    expect_tensor(m, "model.layers.2.mlp.gate.tid2eid", DType::kI64, {129280, 6});
    expect_tensor(m, "model.layers.3.mlp.gate.e_score_correction_bias", DType::kF32, {256});
    expect_tensor(m, "model.layers.3.mlp.shared_experts.up_proj.weight", DType::kBF16, {2048, 4096});
    expect_tensor(m, "model.layers.3.mlp.experts.gate_up_proj", DType::kBF16, {256, 4096, 4096});
    expect_tensor(m, "model.layers.3.mlp.experts.down_proj", DType::kBF16, {256, 4096, 2048});
}

// The official-ops checkpoint (written by DeepSeek's own code) holds exactly the schema's tensors.
TEST(Schema, OfficialOpsCheckpointHoldsExactlyTheSchema) {
    const auto dir = testing::test_data_dir() / "official_ops" / "ds";
    auto cfg = load_config(dir);
    ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
    auto ckpt = io::Checkpoint::open(dir);
    ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
    auto schema = checkpoint_schema(*cfg, Layout::kOfficial);
    std::set<std::string> want;
    for (const TensorSpec& s : schema) {
        want.insert(s.name);
        const io::Checkpoint::Tensor* t = (*ckpt)->find(s.name);
        ASSERT_NE(t, nullptr) << "missing " << s.name;
        EXPECT_EQ(t->entry->dtype, s.dtype) << s.name;
        EXPECT_EQ(t->entry->shape, s.shape) << s.name;
    }
    for (const std::string& name : (*ckpt)->names()) EXPECT_TRUE(want.count(name)) << "unexpected " << name;
    EXPECT_EQ((*ckpt)->total_bytes(), schema_totals(schema).bytes);
}

}  // namespace
}  // namespace dsv4::model
