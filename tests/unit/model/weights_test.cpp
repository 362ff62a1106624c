// The weight map on the official-ops checkpoint (DeepSeek's own files and recorded values), on synthetic tensor
// sets of both layouts, and the dequantisation of every format against independent references.
#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "core/formats.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "model/weights.h"
#include "testing/testing.h"

namespace dsv4::model {
namespace {

std::filesystem::path ops_dir() { return testing::test_data_dir() / "official_ops"; }

ModelConfig preset(const char* name) {
    auto r = preset_config(name);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return r.is_ok() ? *r : ModelConfig{};
}

std::vector<float> rows_of(const WeightRef& w, int64_t begin, int64_t count) {
    std::vector<float> out(static_cast<size_t>(count * w.cols()));
    dequantize_rows(w, begin, count, out.data());
    return out;
}

struct OfficialOps : ::testing::Test {
    void SetUp() override {
        auto cfg = load_config(ops_dir() / "ds");
        ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
        config = *cfg;
        auto ck = io::Checkpoint::open(ops_dir() / "ds");
        ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
        ckpt = std::move(*ck);
        auto w = map_weights(*ckpt, config);
        ASSERT_TRUE(w.is_ok()) << w.status().to_string();
        weights = std::move(*w);
        auto head = io::NpzFile::read(ops_dir() / "head.npz");
        ASSERT_TRUE(head.is_ok()) << head.status().to_string();
        tokens = (*head->get("tokens"))->to_i64();
    }
    ModelConfig config;
    std::unique_ptr<io::Checkpoint> ckpt;
    ModelWeights weights;
    std::vector<int64_t> tokens;
};

TEST_F(OfficialOps, MapsEveryLayerWithItsKind) {
    EXPECT_EQ(weights.layout, Layout::kOfficial);
    EXPECT_FALSE(weights.mtp.has_value());  // num_nextn_predict_layers 0, no mtp.* tensors
    ASSERT_EQ(weights.layers.size(), 5u);
    const AttnKind kinds[] = {AttnKind::kSWA, AttnKind::kCSA, AttnKind::kHCA, AttnKind::kCSA, AttnKind::kHCA};
    for (int i = 0; i < 5; ++i) {
        const LayerWeights& L = weights.layers[static_cast<size_t>(i)];
        EXPECT_EQ(L.attn_kind, kinds[i]);
        EXPECT_EQ(L.attn.compressor.present(), kinds[i] != AttnKind::kSWA) << i;
        EXPECT_EQ(L.attn.indexer.present(), kinds[i] == AttnKind::kCSA) << i;
        EXPECT_EQ(L.ffn.tid2eid.present(), i < 3) << i;
        EXPECT_EQ(L.ffn.gate_bias.present(), i >= 3) << i;
        EXPECT_EQ(L.attn.wq_a.format, WeightFormat::kFP8Block128);
        EXPECT_EQ(L.attn.wo_a.format, WeightFormat::kFP8Block128);
        EXPECT_EQ(L.attn.q_norm.format, WeightFormat::kBF16);
        EXPECT_EQ(L.hc_attn.fn.format, WeightFormat::kF32);
        ASSERT_EQ(L.ffn.experts.size(), 4u);
        EXPECT_EQ(L.ffn.experts[3].w2.format, WeightFormat::kMXFP4);
        EXPECT_EQ(L.ffn.experts[3].w2.shape, (std::vector<int64_t>{128, 128}));  // logical, unpacked
        EXPECT_EQ(L.ffn.experts[3].w2.name, "layers." + std::to_string(i) + ".ffn.experts.3.w2.weight");
    }
    EXPECT_EQ(weights.layers[1].attn.compressor.ape.shape, (std::vector<int64_t>{4, 1024}));
    EXPECT_EQ(weights.layers[2].attn.compressor.ape.shape, (std::vector<int64_t>{128, 512}));
}

// Embedding rows as DeepSeek's forward recorded them (head.npz: embed = embed.weight[tokens], bf16 values).
TEST_F(OfficialOps, EmbeddingRowsEqualTheRecordedEmbedding) {
    auto head = io::NpzFile::read(ops_dir() / "head.npz");
    ASSERT_TRUE(head.is_ok());
    std::span<const float> embed = (*head->get("embed"))->f32();
    ASSERT_EQ(embed.size(), tokens.size() * 128);
    for (size_t t = 0; t < tokens.size(); ++t) {
        std::vector<float> row = rows_of(weights.embed, tokens[t], 1);
        ASSERT_EQ(0, std::memcmp(row.data(), embed.data() + t * 128, 128 * sizeof(float))) << "position " << t;
    }
}

// Hash layers route with tid2eid[token] in table order (official_ops README): router_idx of layers 0-2.
TEST_F(OfficialOps, HashTablesGiveTheRecordedExperts) {
    for (int layer = 0; layer < 3; ++layer) {
        auto npz = io::NpzFile::read(ops_dir() / ("layer" + std::to_string(layer) + ".npz"));
        ASSERT_TRUE(npz.is_ok());
        std::vector<int64_t> idx = (*npz->get("router_idx"))->to_i64();
        const WeightRef& table = weights.layers[static_cast<size_t>(layer)].ffn.tid2eid;
        ASSERT_EQ(table.format, WeightFormat::kI64);
        for (size_t t = 0; t < tokens.size(); ++t) {
            std::vector<float> ids = rows_of(table, tokens[t], 1);
            EXPECT_EQ(static_cast<int64_t>(ids[0]), idx[2 * t]) << "layer " << layer << " position " << t;
            EXPECT_EQ(static_cast<int64_t>(ids[1]), idx[2 * t + 1]) << "layer " << layer << " position " << t;
        }
    }
}

// logits = head.weight (f32) @ head_norm and router_logits = gate.weight (f32) @ ffn_norm (MODEL_SPEC §5.5, §5.6):
// f32 math on the mapped weights reproduces DeepSeek's recorded values (class A tolerance of the fixture).
TEST_F(OfficialOps, HeadAndRouterReproduceRecordedLogits) {
    auto check = [&](const WeightRef& w, std::span<const float> x, std::span<const float> want, int64_t n_out) {
        const int64_t d = w.cols(), T = static_cast<int64_t>(x.size()) / d;
        std::vector<float> wf = rows_of(w, 0, n_out), got(static_cast<size_t>(T * n_out));
        for (int64_t t = 0; t < T; ++t)
            for (int64_t o = 0; o < n_out; ++o) {
                double acc = 0;
                for (int64_t k = 0; k < d; ++k) acc += double(wf[o * d + k]) * double(x[t * d + k]);
                got[static_cast<size_t>(t * n_out + o)] = static_cast<float>(acc);
            }
        DSV4_EXPECT_CLOSE(std::span<const float>(got), want, 2e-6);
    };
    auto head = io::NpzFile::read(ops_dir() / "head.npz");
    ASSERT_TRUE(head.is_ok());
    check(weights.head, (*head->get("head_norm"))->f32(), (*head->get("logits"))->f32(), 512);
    for (int layer : {0, 4}) {
        auto npz = io::NpzFile::read(ops_dir() / ("layer" + std::to_string(layer) + ".npz"));
        ASSERT_TRUE(npz.is_ok());
        check(weights.layers[static_cast<size_t>(layer)].ffn.gate, (*npz->get("ffn_norm"))->f32(),
              (*npz->get("router_logits"))->f32(), 4);
    }
}

// prim_fp8_gemm / prim_fp4_gemm hold a weight in checkpoint format and c_exact_f64 = the exact product of the
// dequantised activation (e4m3 codes x per-128 scales) and the dequantised weight, computed by the fixture's
// generator. Our dequantised weight must reproduce it to double rounding.
void check_exact_gemm(const char* file, const WeightRef& w, const io::NpzFile& z) {
    const io::NpyArray* a_bits = *z.get("a_q_bits");
    std::vector<float> a_scale = (*z.get("a_scale"))->to_f32();
    std::span<const uint8_t> bits = a_bits->u8();
    const int64_t T = a_bits->shape[0], K = a_bits->shape[1], N = w.rows();
    ASSERT_EQ(K, w.cols()) << file;
    std::vector<float> wf = rows_of(w, 0, N);
    const io::NpyArray* ce = *z.get("c_exact_f64");
    ASSERT_EQ(ce->dtype, io::NpyDType::kF64);
    const double* ref = reinterpret_cast<const double*>(ce->bytes.data());
    double worst = 0, norm = 0;
    for (int64_t t = 0; t < T; ++t)
        for (int64_t n = 0; n < N; ++n) {
            double acc = 0;
            for (int64_t k = 0; k < K; ++k)
                acc += double(e4m3_to_f32(bits[t * K + k])) * a_scale[t * (K / 128) + k / 128] * wf[n * K + k];
            worst = std::max(worst, std::fabs(acc - ref[t * N + n]));
            norm = std::max(norm, std::fabs(ref[t * N + n]));
        }
    EXPECT_LE(worst, 1e-12 * norm) << file << ": worst |diff| " << worst << " of max " << norm;
}

TEST(Dequantize, Fp8BlocksAndMxfp4MatchTheFixtureGemms) {
    auto fp8 = io::NpzFile::read(ops_dir() / "prim_fp8_gemm.npz");
    ASSERT_TRUE(fp8.is_ok()) << fp8.status().to_string();
    const io::NpyArray* wb = *fp8->get("w_bits");
    const io::NpyArray* ws = *fp8->get("w_scale_e8m0");
    WeightRef w8;
    w8.format = WeightFormat::kFP8Block128;
    w8.dtype = DType::kF8E4M3;
    w8.data = wb->bytes.data();
    w8.shape = wb->shape;
    w8.scale = ws->bytes.data();
    w8.scale_dtype = DType::kF8E8M0;
    w8.scale_shape = ws->shape;
    check_exact_gemm("prim_fp8_gemm", w8, *fp8);

    auto fp4 = io::NpzFile::read(ops_dir() / "prim_fp4_gemm.npz");
    ASSERT_TRUE(fp4.is_ok()) << fp4.status().to_string();
    const io::NpyArray* pb = *fp4->get("w_packed");
    const io::NpyArray* ps = *fp4->get("w_scale_e8m0");
    WeightRef w4;
    w4.format = WeightFormat::kMXFP4;
    w4.dtype = DType::kI8;
    w4.data = pb->bytes.data();
    w4.shape = {pb->shape[0], pb->shape[1] * 2};
    w4.scale = ps->bytes.data();
    w4.scale_dtype = DType::kF8E8M0;
    w4.scale_shape = ps->shape;
    check_exact_gemm("prim_fp4_gemm", w4, *fp4);
}

TEST(Dequantize, PackedNibblesScalesAndRowOffsets) {
    // MXFP4 row of 32: byte 0x21 = [code 1 (0.5), code 2 (1.0)], byte 0xF9 = [code 9 (-0.5), code 15 (-6)];
    // scale byte 128 = 2.
    std::vector<uint8_t> packed(32, 0), scales = {128, 126};
    packed[0] = 0x21;
    packed[1] = 0xF9;
    packed[16] = 0x07;  // row 1, element 0: code 7 = 6, scale 2^-1
    WeightRef mx;
    mx.format = WeightFormat::kMXFP4;
    mx.data = packed.data();
    mx.shape = {1, 32};
    mx.row_offset = 0;
    mx.scale = scales.data();
    mx.scale_dtype = DType::kF8E8M0;
    mx.scale_shape = {2, 1};
    std::vector<float> r0 = rows_of(mx, 0, 1);
    EXPECT_EQ(r0[0], 1.0f);
    EXPECT_EQ(r0[1], 2.0f);
    EXPECT_EQ(r0[2], -1.0f);
    EXPECT_EQ(r0[3], -12.0f);
    EXPECT_EQ(r0[4], 0.0f);
    mx.row_offset = 1;  // the second row of the stored tensor
    EXPECT_EQ(rows_of(mx, 0, 1)[0], 3.0f);

    // NVFP4 row of 16: e4m3 group scale 0x38 = 1.0, global 0.25.
    std::vector<uint8_t> nvp(8, 0x77), nvs = {0x38};
    WeightRef nv;
    nv.format = WeightFormat::kNVFP4;
    nv.data = nvp.data();
    nv.shape = {1, 16};
    nv.scale = nvs.data();
    nv.scale_dtype = DType::kF8E4M3;
    nv.scale_shape = {1, 1};
    nv.global_scale = 0.25f;
    for (float v : rows_of(nv, 0, 1)) EXPECT_EQ(v, 1.5f);  // 6 x 1 x 0.25

    // FP8 block with F32 scales (the -Base experts): 0x40 = 2.0 in e4m3, scale 0.5.
    std::vector<uint8_t> f8(4, 0x40);
    float s32 = 0.5f;
    WeightRef fb;
    fb.format = WeightFormat::kFP8Block128;
    fb.data = f8.data();
    fb.shape = {2, 2};
    fb.scale = reinterpret_cast<const uint8_t*>(&s32);
    fb.scale_dtype = DType::kF32;
    fb.scale_shape = {1, 1};
    for (float v : rows_of(fb, 0, 2)) EXPECT_EQ(v, 1.0f);
}

// ---- synthetic tensor sets ----

// Every tensor of a schema with deterministic contents (int tables hold valid expert ids).
struct TensorSet {
    std::vector<std::vector<uint8_t>> storage;
    std::vector<TensorInfo> infos;
};

TensorSet make_set(const std::vector<TensorSpec>& specs, int64_t experts) {
    TensorSet s;
    s.storage.reserve(specs.size());
    std::mt19937 rng(7);
    for (const TensorSpec& t : specs) {
        std::vector<uint8_t> bytes(t.nbytes());
        if (t.dtype == DType::kI64) {
            for (size_t i = 0; i < bytes.size() / 8; ++i) {
                int64_t id = static_cast<int64_t>(i % static_cast<size_t>(experts));
                std::memcpy(bytes.data() + 8 * i, &id, 8);
            }
        } else if (t.dtype == DType::kBF16) {
            for (size_t i = 0; i < bytes.size() / 2; ++i) {
                uint16_t v = f32_to_bf16(static_cast<float>(i % 251) - 125.0f);
                std::memcpy(bytes.data() + 2 * i, &v, 2);
            }
        } else {
            for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng() & 0x7f);
        }
        s.storage.push_back(std::move(bytes));
        s.infos.push_back({t.name, t.dtype, t.shape, s.storage.back().data()});
    }
    return s;
}

TEST(WeightMap, EveryOfficialSchemaTensorIsBoundIncludingMtp) {
    for (ExpertFormat f : {ExpertFormat::kMXFP4, ExpertFormat::kNVFP4, ExpertFormat::kFP8}) {
        ModelConfig c = preset("tiny");
        c.expert_format = f;
        TensorSet set = make_set(checkpoint_schema(c, Layout::kOfficial), c.n_routed_experts);
        auto w = map_weights(set.infos, c);
        ASSERT_TRUE(w.is_ok()) << expert_format_name(f) << ": " << w.status().to_string();
        ASSERT_TRUE(w->mtp.has_value());
        EXPECT_EQ(w->mtp->block.attn_kind, AttnKind::kSWA);
        EXPECT_EQ(w->mtp->block.route_kind, RouteKind::kScore);
        EXPECT_TRUE(w->mtp->block.ffn.gate_bias.present());
        EXPECT_EQ(w->mtp->e_proj.format, WeightFormat::kFP8Block128);
        const WeightFormat want = f == ExpertFormat::kMXFP4 ? WeightFormat::kMXFP4
                                  : f == ExpertFormat::kNVFP4 ? WeightFormat::kNVFP4
                                                              : WeightFormat::kFP8Block128;
        EXPECT_EQ(w->layers[4].ffn.experts[7].w3.format, want);
        EXPECT_EQ(w->mtp->block.ffn.experts[0].w1.format, want);
    }
}

TEST(WeightMap, TransformersLayoutSlicesTheMergedExperts) {
    ModelConfig c = preset("tiny");
    TensorSet set = make_set(checkpoint_schema(c, Layout::kTransformers), c.n_routed_experts);
    auto w = map_weights(set.infos, c);
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    EXPECT_EQ(w->layout, Layout::kTransformers);
    EXPECT_FALSE(w->mtp.has_value());
    EXPECT_EQ(w->layers[0].attn.wq_a.format, WeightFormat::kBF16);
    EXPECT_EQ(w->layers[1].attn.indexer.wq_b.name, "model.layers.1.self_attn.compressor.indexer.q_b_proj.weight");
    // Expert e's w1 = gate_up_proj[e][0:I], w3 = gate_up_proj[e][I:2I], w2 = down_proj[e].
    const int64_t I = c.moe_inter_dim, D = c.hidden_size;
    const TensorInfo* gate_up = nullptr;
    for (const TensorInfo& t : set.infos)
        if (t.name == "model.layers.2.mlp.experts.gate_up_proj") gate_up = &t;
    ASSERT_NE(gate_up, nullptr);
    const ExpertWeights& e5 = w->layers[2].ffn.experts[5];
    EXPECT_EQ(e5.w1.shape, (std::vector<int64_t>{I, D}));
    EXPECT_EQ(e5.w2.shape, (std::vector<int64_t>{D, I}));
    for (int half = 0; half < 2; ++half) {
        const WeightRef& ref = half == 0 ? e5.w1 : e5.w3;
        std::vector<float> got = rows_of(ref, 3, 1);
        const int64_t stored_row = 5 * 2 * I + half * I + 3;
        for (int64_t k = 0; k < D; ++k) {
            uint16_t bits;
            std::memcpy(&bits, gate_up->data + 2 * (stored_row * D + k), 2);
            ASSERT_EQ(got[static_cast<size_t>(k)], bf16_to_f32(bits)) << "half " << half << " col " << k;
        }
    }
    // transformers ignores mtp.* tensors; so do we in this layout.
    TensorSet with_mtp = set;
    for (size_t i = 0; i < with_mtp.infos.size(); ++i) with_mtp.infos[i].data = with_mtp.storage[i].data();
    with_mtp.infos.push_back({"mtp.0.enorm.weight", DType::kBF16, {D}, with_mtp.storage[0].data()});
    EXPECT_TRUE(map_weights(with_mtp.infos, c).is_ok());
}

TEST(WeightMap, DequantisedFloatLinearsAreAcceptedInTheOfficialLayout) {
    // DeepSeek's converter stores wo_a as BF16 without a scale (MODEL_SPEC §9.7).
    ModelConfig c = preset("tiny");
    std::vector<TensorSpec> specs = checkpoint_schema(c, Layout::kOfficial);
    std::vector<TensorSpec> out;
    for (TensorSpec s : specs) {
        if (s.name == "layers.1.attn.wo_a.scale") continue;
        if (s.name == "layers.1.attn.wo_a.weight") s.dtype = DType::kBF16;
        out.push_back(s);
    }
    TensorSet set = make_set(out, c.n_routed_experts);
    auto w = map_weights(set.infos, c);
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    EXPECT_EQ(w->layers[1].attn.wo_a.format, WeightFormat::kBF16);
}

TEST(WeightMap, OneErrorListsMissingUnexpectedAndMisShapedTensors) {
    ModelConfig c = preset("tiny");
    std::vector<TensorSpec> specs;
    for (TensorSpec s : checkpoint_schema(c, Layout::kOfficial)) {
        if (s.name == "layers.2.attn.wkv.weight" || s.name == "mtp.0.h_proj.scale") continue;  // missing
        if (s.name == "layers.0.attn.wq_b.weight") s.shape = {2048, 256};                    // mis-shaped
        if (s.name == "layers.3.ffn.experts.1.w2.scale") s.dtype = DType::kF32;               // mis-typed
        if (s.name == "layers.4.attn.attn_sink") s.dtype = DType::kI32;                      // mis-typed
        specs.push_back(s);
    }
    specs.push_back({"layers.0.attn.extra.weight", DType::kBF16, {4}, TensorRole::kWeight});  // unexpected
    specs.push_back({"layers.9.attn_norm.weight", DType::kBF16, {128}, TensorRole::kWeight}); // unexpected
    TensorSet set = make_set(specs, c.n_routed_experts);
    auto w = map_weights(set.infos, c, "synthetic");
    ASSERT_FALSE(w.is_ok());
    const std::string m = w.status().message();
    EXPECT_EQ(w.status().code(), StatusCode::kCorrupt);
    EXPECT_NE(m.find("synthetic"), std::string::npos) << m;
    EXPECT_NE(m.find("2 missing, 2 unexpected, 3 mis-shaped"), std::string::npos) << m;
    for (const char* name : {"missing layers.2.attn.wkv.weight", "missing mtp.0.h_proj.scale",
                             "unexpected layers.0.attn.extra.weight", "unexpected layers.9.attn_norm.weight",
                             "layers.0.attn.wq_b.weight: stored F8_E4M3 [2048, 256]",
                             "layers.3.ffn.experts.1.w2.scale: stored F32", "layers.4.attn.attn_sink: stored I32"})
        EXPECT_NE(m.find(name), std::string::npos) << name << "\n" << m;
}

TEST(WeightMap, LongListsAreCappedAndMissingMtpIsExplained) {
    ModelConfig c = preset("tiny");
    ModelConfig no_mtp = c;
    no_mtp.num_mtp_layers = 0;
    TensorSet set = make_set(checkpoint_schema(no_mtp, Layout::kOfficial), c.n_routed_experts);
    EXPECT_TRUE(map_weights(set.infos, no_mtp).is_ok());
    auto w = map_weights(set.infos, c);  // config promises MTP, checkpoint has none
    ASSERT_FALSE(w.is_ok());
    const std::string m = w.status().message();
    EXPECT_NE(m.find("num_nextn_predict_layers to 0"), std::string::npos) << m;
    EXPECT_NE(m.find("... and "), std::string::npos) << m;
    size_t lines = 0;
    for (char ch : m) lines += ch == '\n';
    EXPECT_LE(lines, 22u) << m;
}

TEST(WeightMap, Tid2eidIdsAreRangeChecked) {
    ModelConfig c = preset("tiny");
    TensorSet set = make_set(checkpoint_schema(c, Layout::kOfficial), c.n_routed_experts);
    for (size_t i = 0; i < set.infos.size(); ++i) {
        if (set.infos[i].name != "layers.1.ffn.gate.tid2eid") continue;
        int64_t bad = c.n_routed_experts;
        std::memcpy(set.storage[i].data() + 8 * 11, &bad, 8);
    }
    auto w = map_weights(set.infos, c);
    ASSERT_FALSE(w.is_ok());
    EXPECT_NE(w.status().message().find("layers.1.ffn.gate.tid2eid: entry 11 (token 5) is expert id 8"),
              std::string::npos)
        << w.status().message();
}

TEST(WeightMap, LayoutDetection) {
    std::vector<TensorInfo> none = {{"foo", DType::kF32, {1}, nullptr}};
    EXPECT_FALSE(detect_layout(none).is_ok());
    std::vector<TensorInfo> mixed = {{"embed.weight", DType::kF32, {1}, nullptr},
                                     {"lm_head.weight", DType::kF32, {1}, nullptr}};
    EXPECT_FALSE(detect_layout(mixed).is_ok());
}

}  // namespace
}  // namespace dsv4::model

namespace dsv4::model {
namespace {

// Writes `set` as two shards + model.safetensors.index.json, the way checkpoints ship.
void write_sharded(const std::filesystem::path& dir, const TensorSet& set) {
    std::vector<io::TensorToWrite> shard[2];
    std::map<std::string, std::string> weight_map;
    uint64_t total = 0;
    for (size_t i = 0; i < set.infos.size(); ++i) {
        const TensorInfo& t = set.infos[i];
        const int s = i % 2;
        shard[s].push_back({t.name, t.dtype, t.shape, std::span<const uint8_t>(set.storage[i])});
        weight_map[t.name] = "model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
        total += set.storage[i].size();
    }
    for (int s = 0; s < 2; ++s) {
        Status st = io::write_safetensors(dir / ("model-0000" + std::to_string(s + 1) + "-of-00002.safetensors"),
                                          shard[s]);
        ASSERT_TRUE(st.is_ok()) << st.to_string();
    }
    Status st = io::write_index(dir, weight_map, total);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
}

TEST(WeightMap, ShardedFilesThroughTheSafetensorsReader) {
    ModelConfig c = preset("tiny");
    {
        testing::TempDir dir;
        TensorSet set = make_set(checkpoint_schema(c, Layout::kOfficial), c.n_routed_experts);
        write_sharded(dir.path(), set);
        auto ckpt = io::Checkpoint::open(dir.path());
        ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
        auto w = map_weights(**ckpt, c);
        ASSERT_TRUE(w.is_ok()) << w.status().to_string();
        // The refs point into the mapping: the bytes read back are the bytes written.
        std::vector<float> row = rows_of(w->embed, 3, 1);
        uint16_t bits;
        std::memcpy(&bits, set.storage[0].data() + 2 * (3 * c.hidden_size + 5), 2);
        EXPECT_EQ(row[5], bf16_to_f32(bits));
    }
    {
        testing::TempDir dir;
        std::vector<TensorSpec> specs;
        for (TensorSpec s : checkpoint_schema(c, Layout::kOfficial)) {
            if (s.name == "layers.1.attn.indexer.weights_proj.weight") continue;
            if (s.name == "norm.weight") s.shape = {129};
            specs.push_back(s);
        }
        specs.push_back({"layers.0.ffn.gate.bias", DType::kF32, {8}, TensorRole::kWeight});
        TensorSet set = make_set(specs, c.n_routed_experts);
        write_sharded(dir.path(), set);
        auto ckpt = io::Checkpoint::open(dir.path());
        ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
        auto w = map_weights(**ckpt, c);
        ASSERT_FALSE(w.is_ok());
        const std::string m = w.status().message();
        EXPECT_NE(m.find(dir.path().string()), std::string::npos) << m;
        EXPECT_NE(m.find("1 missing, 1 unexpected, 1 mis-shaped"), std::string::npos) << m;
        EXPECT_NE(m.find("missing layers.1.attn.indexer.weights_proj.weight"), std::string::npos) << m;
        EXPECT_NE(m.find("unexpected layers.0.ffn.gate.bias"), std::string::npos) << m;  // hash layer: no bias
        EXPECT_NE(m.find("norm.weight: stored BF16 [129], want BF16/F16/F32 [128]"), std::string::npos) << m;
    }
}

}  // namespace
}  // namespace dsv4::model
