// The committed two-shard checkpoint in DeepSeek's official layout (tests/data/official_ops/ds, written by PyTorch's
// safetensors): the reader must agree with its index and config, which we did not write.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "testing/testing.h"

namespace dsv4::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json load_json(const fs::path& p) {
    std::ifstream f(p);
    return json::parse(f);
}

class OfficialCheckpoint : public ::testing::Test {
protected:
    void SetUp() override {
        auto opened = Checkpoint::open(dir_);
        ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
        ckpt_ = std::move(opened).value();
    }
    void expect_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape) {
        const Checkpoint::Tensor* t = ckpt_->find(name);
        ASSERT_NE(t, nullptr) << name;
        EXPECT_EQ(dtype_name(t->entry->dtype), dtype_name(dtype)) << name;
        EXPECT_EQ(t->entry->shape, shape) << name;
        EXPECT_EQ(t->bytes().size(), static_cast<uint64_t>(t->entry->numel()) * dtype_size(dtype)) << name;
    }

    fs::path dir_ = testing::test_data_dir() / "official_ops" / "ds";
    json index_ = load_json(dir_ / "model.safetensors.index.json");
    json config_ = load_json(dir_ / "config.json");
    std::unique_ptr<Checkpoint> ckpt_;
};

TEST_F(OfficialCheckpoint, AgreesWithItsIndex) {
    const json& wm = index_["weight_map"];
    EXPECT_EQ(ckpt_->names().size(), wm.size());
    EXPECT_EQ(ckpt_->files().size(), 2u);
    for (const auto& item : wm.items()) {
        const Checkpoint::Tensor* t = ckpt_->find(item.key());
        ASSERT_NE(t, nullptr) << item.key();
        EXPECT_EQ(t->file->path().filename().string(), item.value().get<std::string>()) << item.key();
    }
    EXPECT_EQ(ckpt_->total_bytes(), index_["metadata"]["total_size"].get<uint64_t>());
    for (const auto& f : ckpt_->files()) EXPECT_EQ(f->header().metadata.at("format"), "pt");
    EXPECT_TRUE(std::is_sorted(ckpt_->names().begin(), ckpt_->names().end()));
}

TEST_F(OfficialCheckpoint, DTypesAndShapesFollowTheConfig) {
    const int64_t hidden = config_["hidden_size"], vocab = config_["vocab_size"];
    const int64_t q_lora = config_["q_lora_rank"], inter = config_["moe_intermediate_size"];
    const int64_t topk = config_["num_experts_per_tok"];
    const int64_t block = config_["quantization_config"]["weight_block_size"][0];
    auto blocks = [&](int64_t n) { return (n + block - 1) / block; };
    expect_tensor("embed.weight", DType::kBF16, {vocab, hidden});
    expect_tensor("head.weight", DType::kBF16, {vocab, hidden});
    // FP8 e4m3 weight with 128x128 UE8M0 block scales.
    expect_tensor("layers.0.attn.wq_a.weight", DType::kF8E4M3, {q_lora, hidden});
    expect_tensor("layers.0.attn.wq_a.scale", DType::kF8E8M0, {blocks(q_lora), blocks(hidden)});
    // MXFP4 routed expert: two e2m1 codes per int8, one UE8M0 scale per 32 inputs.
    expect_tensor("layers.0.ffn.experts.0.w1.weight", DType::kI8, {inter, hidden / 2});
    expect_tensor("layers.0.ffn.experts.0.w1.scale", DType::kF8E8M0, {inter, hidden / 32});
    expect_tensor("layers.0.ffn.gate.tid2eid", DType::kI64, {vocab, topk});
}

TEST_F(OfficialCheckpoint, TensorBytesAreTheRightOnes) {
    // Hash-routing table: every entry is an expert id.
    const Checkpoint::Tensor* t = ckpt_->find("layers.0.ffn.gate.tid2eid");
    ASSERT_NE(t, nullptr);
    const int64_t experts = config_["n_routed_experts"];
    std::vector<int64_t> ids(static_cast<size_t>(t->entry->numel()));
    std::memcpy(ids.data(), t->bytes().data(), t->bytes().size());
    for (int64_t id : ids) ASSERT_TRUE(id >= 0 && id < experts) << id;
    // UE8M0 scales of small random weights are powers of two within 2^+-63: never the 0xff NaN code, never 0.
    int scales = 0;
    for (const std::string& name : ckpt_->names()) {
        const Checkpoint::Tensor* s = ckpt_->find(name);
        if (s->entry->dtype != DType::kF8E8M0) continue;
        ++scales;
        for (uint8_t b : s->bytes()) ASSERT_TRUE(b > 64 && b < 191) << name << ": " << int(b);
    }
    EXPECT_EQ(scales, 102);
}

}  // namespace
}  // namespace dsv4::io
