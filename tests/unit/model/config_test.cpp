// Config parsing of the three config.json styles, presets, round trips and every validation rule.
#include <fstream>

#include <gtest/gtest.h>

#include "model/config.h"
#include "testing/testing.h"

namespace dsv4::model {
namespace {

// Every field that defines the model (name and style are provenance, not model).
void expect_same_model(const ModelConfig& a, const ModelConfig& b) {
    EXPECT_EQ(a.vocab_size, b.vocab_size);
    EXPECT_EQ(a.hidden_size, b.hidden_size);
    EXPECT_EQ(a.num_layers, b.num_layers);
    EXPECT_EQ(a.num_heads, b.num_heads);
    EXPECT_EQ(a.head_dim, b.head_dim);
    EXPECT_EQ(a.rope_head_dim, b.rope_head_dim);
    EXPECT_EQ(a.q_lora_rank, b.q_lora_rank);
    EXPECT_EQ(a.o_groups, b.o_groups);
    EXPECT_EQ(a.o_lora_rank, b.o_lora_rank);
    EXPECT_EQ(a.window, b.window);
    EXPECT_EQ(a.compress_ratios, b.compress_ratios);
    EXPECT_DOUBLE_EQ(a.rope_theta, b.rope_theta);
    EXPECT_DOUBLE_EQ(a.compress_rope_theta, b.compress_rope_theta);
    EXPECT_DOUBLE_EQ(a.rope_factor, b.rope_factor);
    EXPECT_EQ(a.original_max_position, b.original_max_position);
    EXPECT_DOUBLE_EQ(a.beta_fast, b.beta_fast);
    EXPECT_DOUBLE_EQ(a.beta_slow, b.beta_slow);
    EXPECT_EQ(a.max_position, b.max_position);
    EXPECT_EQ(a.index_n_heads, b.index_n_heads);
    EXPECT_EQ(a.index_head_dim, b.index_head_dim);
    EXPECT_EQ(a.index_topk, b.index_topk);
    EXPECT_EQ(a.hc_mult, b.hc_mult);
    EXPECT_EQ(a.hc_sinkhorn_iters, b.hc_sinkhorn_iters);
    EXPECT_DOUBLE_EQ(a.hc_eps, b.hc_eps);
    EXPECT_DOUBLE_EQ(a.rms_norm_eps, b.rms_norm_eps);
    EXPECT_EQ(a.n_routed_experts, b.n_routed_experts);
    EXPECT_EQ(a.n_shared_experts, b.n_shared_experts);
    EXPECT_EQ(a.n_experts_per_token, b.n_experts_per_token);
    EXPECT_EQ(a.moe_inter_dim, b.moe_inter_dim);
    EXPECT_EQ(a.num_hash_layers, b.num_hash_layers);
    EXPECT_DOUBLE_EQ(a.routed_scaling_factor, b.routed_scaling_factor);
    EXPECT_DOUBLE_EQ(a.swiglu_limit, b.swiglu_limit);
    EXPECT_EQ(a.num_mtp_layers, b.num_mtp_layers);
    EXPECT_EQ(a.bos_token_id, b.bos_token_id);
    EXPECT_EQ(a.eos_token_id, b.eos_token_id);
    EXPECT_EQ(a.expert_format, b.expert_format);
}

ModelConfig preset(const char* name) {
    auto r = preset_config(name);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return r.is_ok() ? *r : ModelConfig{};
}

TEST(Config, OfficialHfConfigOfTheOfficialOpsCheckpoint) {
    auto r = load_config(testing::test_data_dir() / "official_ops" / "ds");
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    const ModelConfig& c = *r;
    EXPECT_EQ(c.style, ConfigStyle::kOfficialHF);
    EXPECT_EQ(c.vocab_size, 512);
    EXPECT_EQ(c.hidden_size, 128);
    EXPECT_EQ(c.num_layers, 5);
    EXPECT_EQ(c.num_heads, 4);
    EXPECT_EQ(c.q_lora_rank, 128);
    EXPECT_EQ(c.o_groups, 2);
    EXPECT_EQ(c.compress_ratios, (std::vector<int>{0, 4, 128, 4, 128, 0}));
    EXPECT_EQ(c.num_hash_layers, 3);
    EXPECT_EQ(c.num_mtp_layers, 0);
    EXPECT_EQ(c.n_routed_experts, 4);
    EXPECT_EQ(c.n_experts_per_token, 2);
    EXPECT_EQ(c.index_n_heads, 4);
    EXPECT_EQ(c.index_topk, 8);
    EXPECT_DOUBLE_EQ(c.rope_factor, 16.0);
    EXPECT_EQ(c.original_max_position, 65536);
    EXPECT_EQ(c.expert_format, ExpertFormat::kMXFP4);  // no expert_dtype key: MXFP4
    EXPECT_EQ(c.attn_kind(0), AttnKind::kSWA);
    EXPECT_EQ(c.attn_kind(1), AttnKind::kCSA);
    EXPECT_EQ(c.attn_kind(2), AttnKind::kHCA);
    EXPECT_EQ(c.route_kind(2), RouteKind::kHash);
    EXPECT_EQ(c.route_kind(3), RouteKind::kScore);
}

TEST(Config, FlashAndProPresetsFollowTheSpec) {
    ModelConfig f = preset("flash"), p = preset("pro");
    EXPECT_EQ(f.compress_ratios.size(), 44u);
    EXPECT_EQ(p.compress_ratios.size(), 62u);
    // Flash: SWA 0,1; CSA even 2..42; HCA odd 3..41; MTP SWA (MODEL_SPEC §3).
    for (int i = 0; i <= 43; ++i) {
        AttnKind want = i < 2 || i == 43 ? AttnKind::kSWA : i % 2 == 0 ? AttnKind::kCSA : AttnKind::kHCA;
        EXPECT_EQ(f.attn_kind(i), want) << "flash layer " << i;
    }
    // Pro: HCA 0,1 and odd 3..59; CSA even 2..60; MTP SWA.
    for (int i = 0; i <= 61; ++i) {
        AttnKind want = i == 61 ? AttnKind::kSWA : (i < 2 || i % 2 == 1) ? AttnKind::kHCA : AttnKind::kCSA;
        EXPECT_EQ(p.attn_kind(i), want) << "pro layer " << i;
    }
    EXPECT_EQ(f.hidden_size, 4096);
    EXPECT_EQ(p.hidden_size, 7168);
    EXPECT_EQ(p.num_heads, 128);
    EXPECT_EQ(p.q_lora_rank, 1536);
    EXPECT_EQ(p.o_groups, 16);
    EXPECT_EQ(p.index_topk, 1024);
    EXPECT_EQ(p.n_routed_experts, 384);
    EXPECT_EQ(p.moe_inter_dim, 3072);
    EXPECT_DOUBLE_EQ(p.routed_scaling_factor, 2.5);
    EXPECT_DOUBLE_EQ(f.routed_scaling_factor, 1.5);
    EXPECT_EQ(f.num_mtp_layers, 1);
    EXPECT_FALSE(preset_config("huge").is_ok());
}

TEST(Config, TinyPresetCoversEveryLayerKindAndRouting) {
    ModelConfig t = preset("tiny");
    EXPECT_EQ(t.vocab_size, 1024);
    EXPECT_EQ(t.hidden_size, 128);
    EXPECT_EQ(t.compress_ratios, (std::vector<int>{0, 4, 128, 4, 128, 0}));
    EXPECT_EQ(t.num_hash_layers, 3);
    EXPECT_EQ(t.n_routed_experts, 8);
    EXPECT_EQ(t.n_experts_per_token, 2);
    EXPECT_EQ(t.num_mtp_layers, 1);
    EXPECT_EQ(t.head_dim, 512);
    EXPECT_EQ(t.index_head_dim, 128);
}

TEST(Config, PresetsRoundTripThroughBothStyles) {
    for (const char* name : {"flash", "pro", "tiny"}) {
        ModelConfig c = preset(name);
        for (ExpertFormat f : {ExpertFormat::kMXFP4, ExpertFormat::kNVFP4, ExpertFormat::kFP8}) {
            c.expert_format = f;
            for (bool tf : {false, true}) {
                SCOPED_TRACE(std::string(name) + (tf ? " transformers " : " official ") + expert_format_name(f));
                std::string text = config_to_json(c, tf);
                auto back = parse_config_json(text, "roundtrip.json");
                ASSERT_TRUE(back.is_ok()) << back.status().to_string() << "\n" << text;
                EXPECT_EQ(back->style, tf ? ConfigStyle::kTransformers : ConfigStyle::kOfficialHF);
                expect_same_model(*back, c);
                // The transformers style writes what transformers saves: no official-only keys.
                EXPECT_EQ(text.find("compress_ratios") == std::string::npos, tf);
                EXPECT_EQ(text.find("num_hash_layers") == std::string::npos, tf);
            }
        }
    }
}

// What transformers' DeepseekV4Config.save_pretrained writes for a 5-layer model: layer_types over the main layers
// only, mlp_layer_types, compress_rates, rope_parameters {main, compress} and partial_rotary_factor.
const char* kTransformersSaved = R"({
  "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "dtype": "bfloat16",
  "vocab_size": 512, "hidden_size": 128, "num_hidden_layers": 5, "num_attention_heads": 4,
  "num_key_value_heads": 1, "head_dim": 512, "q_lora_rank": 128, "o_groups": 2, "o_lora_rank": 128,
  "layer_types": ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                  "compressed_sparse_attention", "heavily_compressed_attention"],
  "mlp_layer_types": ["hash_moe", "hash_moe", "moe", "moe", "moe"],
  "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128},
  "compress_rope_theta": 160000.0, "rope_theta": 10000.0, "partial_rotary_factor": 0.125,
  "rope_parameters": {
    "main": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.125},
    "compress": {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536,
                 "beta_fast": 32, "beta_slow": 1, "rope_theta": 160000.0, "partial_rotary_factor": 0.125,
                 "attention_factor": 1.0}},
  "sliding_window": 128, "max_position_embeddings": 1048576, "index_n_heads": 4, "index_head_dim": 128,
  "index_topk": 8, "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-06, "rms_norm_eps": 1e-06,
  "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2, "moe_intermediate_size": 128,
  "scoring_func": "sqrtsoftplus", "norm_topk_prob": true, "routed_scaling_factor": 1.5, "swiglu_limit": 10.0,
  "num_nextn_predict_layers": 1, "hidden_act": "silu", "bos_token_id": 0, "eos_token_id": 1,
  "tie_word_embeddings": false, "output_router_logits": false, "router_aux_loss_coef": 0.001
})";

TEST(Config, TransformersSavedStyle) {
    auto r = parse_config_json(kTransformersSaved, "tf.json");
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->style, ConfigStyle::kTransformers);
    EXPECT_EQ(r->compress_ratios, (std::vector<int>{0, 4, 128, 4, 128, 0}));  // MTP slot appended as SWA
    EXPECT_EQ(r->num_hash_layers, 2);
    EXPECT_EQ(r->rope_head_dim, 64);
    EXPECT_DOUBLE_EQ(r->rope_factor, 16.0);
    EXPECT_EQ(r->original_max_position, 65536);
    EXPECT_DOUBLE_EQ(r->compress_rope_theta, 160000.0);
    EXPECT_EQ(r->num_mtp_layers, 1);
}

TEST(Config, TransformersStyleErrorsNameTheKey) {
    auto edit = [](const std::string& from, const std::string& to) {
        std::string s = kTransformersSaved;
        size_t at = s.find(from);
        EXPECT_NE(at, std::string::npos) << from;
        return s.replace(at, from.size(), to);
    };
    struct Case {
        std::string text, key;
    } cases[] = {
        {edit("\"heavily_compressed_attention\"],", "\"full_attention\"],"), "layer_types"},
        {edit("\"sliding_attention\", ", ""), "layer_types"},
        {edit("[\"hash_moe\", \"hash_moe\", \"moe\"", "[\"hash_moe\", \"moe\", \"hash_moe\""), "mlp_layer_types"},
        {edit("\"moe\", \"moe\"]", "\"moe\"]"), "mlp_layer_types"},
        {edit("\"model_type\": \"deepseek_v4\",", "\"model_type\": \"deepseek_v4\", \"compress_ratios\": [0,4,4,4,128,0],"),
         "layer_types"},
        {edit("\"partial_rotary_factor\": 0.125,", "\"partial_rotary_factor\": 0.25,"), "qk_rope_head_dim"},
    };
    for (const Case& c : cases) {
        auto r = parse_config_json(c.text, "tf.json");
        ASSERT_FALSE(r.is_ok()) << c.key;
        EXPECT_NE(r.status().message().find("'" + c.key + "'"), std::string::npos) << r.status().message();
        EXPECT_NE(r.status().message().find("tf.json"), std::string::npos) << r.status().message();
    }
    // The official keys alongside (transformers accepts them): consistent ones are fine.
    auto ok = parse_config_json(edit("\"model_type\": \"deepseek_v4\",",
                                     "\"model_type\": \"deepseek_v4\", \"compress_ratios\": [0,4,128,4,128,0],"),
                                "tf.json");
    ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
}

// DeepSeek's inference/config.json for Flash, with the values MODEL_SPEC §2.2 lists.
const char* kInferenceFlash = R"({
  "vocab_size": 129280, "dim": 4096, "moe_inter_dim": 2048, "n_layers": 43, "n_hash_layers": 3, "n_heads": 64,
  "n_routed_experts": 256, "n_shared_experts": 1, "n_activated_experts": 6, "score_func": "sqrtsoftplus",
  "route_scale": 1.5, "swiglu_limit": 10.0, "q_lora_rank": 1024, "head_dim": 512, "rope_head_dim": 64,
  "o_groups": 8, "o_lora_rank": 1024, "window_size": 128, "original_seq_len": 65536, "rope_theta": 10000,
  "rope_factor": 16, "beta_fast": 32, "beta_slow": 1, "index_n_heads": 64, "index_head_dim": 128,
  "index_topk": 512, "hc_mult": 4, "hc_sinkhorn_iters": 20, "dtype": "fp8", "scale_fmt": "ue8m0",
  "expert_dtype": "fp4", "compress_rope_theta": 160000,
  "compress_ratios": [0, 0, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128,
                      4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 0]
})";

TEST(Config, DeepSeekInferenceStyleEqualsTheFlashPreset) {
    auto r = parse_config_json(kInferenceFlash, "inference/config.json");
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->style, ConfigStyle::kDeepSeekInference);
    expect_same_model(*r, preset("flash"));  // n_mtp_layers and norm_eps take ModelArgs' defaults (1, 1e-6)
}

TEST(Config, LoadConfigFallsBackToInferenceFolder) {
    testing::TempDir dir;
    std::filesystem::create_directories(dir.path() / "inference");
    std::ofstream(dir.path() / "inference" / "config.json") << kInferenceFlash;
    auto r = load_config(dir.path());
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->num_layers, 43);
    auto missing = load_config(dir.path() / "nowhere");
    ASSERT_FALSE(missing.is_ok());
    EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
    EXPECT_NE(missing.status().message().find("config.json"), std::string::npos);
}

TEST(Config, ExpertDtypeKey) {
    ModelConfig c = preset("tiny");
    std::string text = config_to_json(c, false);
    auto with = [&](const std::string& v) {
        std::string s = text;
        s.insert(s.find("\"vocab_size\""), "\"expert_dtype\": \"" + v + "\", ");
        return parse_config_json(s, "x.json");
    };
    EXPECT_EQ(with("fp4")->expert_format, ExpertFormat::kMXFP4);
    EXPECT_EQ(with("fp8")->expert_format, ExpertFormat::kFP8);
    EXPECT_EQ(with("nvfp4")->expert_format, ExpertFormat::kNVFP4);
    auto bad = with("int4");
    ASSERT_FALSE(bad.is_ok());
    EXPECT_EQ(bad.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(bad.status().message().find("'expert_dtype'"), std::string::npos);
}

TEST(Config, ParseErrorsNameTheKey) {
    const std::string base = config_to_json(preset("tiny"), false);
    auto replace = [&](const std::string& from, const std::string& to) {
        std::string s = base;
        size_t at = s.find(from);
        EXPECT_NE(at, std::string::npos) << from;
        return s.replace(at, from.size(), to);
    };
    struct Case {
        std::string text, key;
        StatusCode code;
    } cases[] = {
        {replace("\"hidden_size\": 128,", ""), "hidden_size", StatusCode::kInvalidArgument},
        {replace("\"hidden_size\": 128,", "\"hidden_size\": \"128\","), "hidden_size", StatusCode::kInvalidArgument},
        {replace("\"hidden_size\": 128,", "\"hidden_size\": 128, \"dim\": 256,"), "hidden_size",
         StatusCode::kInvalidArgument},
        {replace("\"deepseek_v4\"", "\"deepseek_v3\""), "model_type", StatusCode::kUnsupported},
        {replace("\"sqrtsoftplus\"", "\"softmax\""), "scoring_func", StatusCode::kUnsupported},
        {replace("\"num_key_value_heads\": 1", "\"num_key_value_heads\": 8"), "num_key_value_heads",
         StatusCode::kUnsupported},
        {replace("\"compress_ratios\": [", "\"compress_ratios\": [\"x\", "), "compress_ratios",
         StatusCode::kInvalidArgument},
        {replace("\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true"), "tie_word_embeddings",
         StatusCode::kUnsupported},
    };
    for (const Case& c : cases) {
        auto r = parse_config_json(c.text, "cfg.json");
        ASSERT_FALSE(r.is_ok()) << c.key;
        EXPECT_EQ(r.status().code(), c.code) << r.status().to_string();
        EXPECT_NE(r.status().message().find("'" + c.key + "'"), std::string::npos) << r.status().message();
        EXPECT_NE(r.status().message().find("cfg.json"), std::string::npos) << r.status().message();
    }
    EXPECT_FALSE(parse_config_json("{not json", "cfg.json").is_ok());
    EXPECT_FALSE(parse_config_json("[1, 2]", "cfg.json").is_ok());
}

TEST(Config, EveryValidationRuleNamesItsKey) {
    struct Case {
        const char* key;
        void (*mutate)(ModelConfig&);
    } cases[] = {
        {"compress_ratios", [](ModelConfig& c) { c.compress_ratios.pop_back(); }},
        {"compress_ratios", [](ModelConfig& c) { c.compress_ratios[3] = 8; }},
        {"num_hash_layers", [](ModelConfig& c) { c.num_hash_layers = c.num_layers + 1; }},
        {"num_hash_layers", [](ModelConfig& c) { c.num_hash_layers = -1; }},
        {"num_experts_per_tok", [](ModelConfig& c) { c.n_experts_per_token = c.n_routed_experts + 1; }},
        {"head_dim", [](ModelConfig& c) { c.head_dim = 256; }},
        {"qk_rope_head_dim", [](ModelConfig& c) { c.rope_head_dim = 32; }},
        {"index_head_dim", [](ModelConfig& c) { c.index_head_dim = 64; }},
        {"o_groups", [](ModelConfig& c) { c.o_groups = 3; }},
        {"hidden_size", [](ModelConfig& c) { c.hidden_size = 4000; }},
        {"q_lora_rank", [](ModelConfig& c) { c.q_lora_rank = 1000; }},
        {"o_lora_rank", [](ModelConfig& c) { c.o_lora_rank = 1000; }},
        {"moe_intermediate_size", [](ModelConfig& c) { c.moe_inter_dim = 2000; }},
        {"vocab_size", [](ModelConfig& c) { c.vocab_size = 0; }},
        {"num_hidden_layers", [](ModelConfig& c) { c.num_layers = 0; }},
        {"num_attention_heads", [](ModelConfig& c) { c.num_heads = -4; }},
        {"n_routed_experts", [](ModelConfig& c) { c.n_routed_experts = 0; }},
        {"index_topk", [](ModelConfig& c) { c.index_topk = 0; }},
        {"sliding_window", [](ModelConfig& c) { c.window = 256; }},
        {"n_shared_experts", [](ModelConfig& c) { c.n_shared_experts = 2; }},
        {"num_nextn_predict_layers", [](ModelConfig& c) { c.num_mtp_layers = 2; }},
        {"eos_token_id", [](ModelConfig& c) { c.eos_token_id = c.vocab_size; }},
        {"rms_norm_eps", [](ModelConfig& c) { c.rms_norm_eps = 0; }},
        {"rope_scaling.factor", [](ModelConfig& c) { c.rope_factor = 0.5; }},
        {"routed_scaling_factor", [](ModelConfig& c) { c.routed_scaling_factor = -1; }},
    };
    ASSERT_TRUE(validate_config(preset("flash")).is_ok());
    for (const Case& k : cases) {
        ModelConfig c = preset("flash");
        k.mutate(c);
        Status s = validate_config(c);
        ASSERT_FALSE(s.is_ok()) << k.key;
        EXPECT_NE(s.message().find(std::string("'") + k.key + "'"), std::string::npos) << s.message();
    }
    // A model without MTP keeps its L+1 ratios and validates.
    ModelConfig no_mtp = preset("tiny");
    no_mtp.num_mtp_layers = 0;
    EXPECT_TRUE(validate_config(no_mtp).is_ok());
}

}  // namespace
}  // namespace dsv4::model
