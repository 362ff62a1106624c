// config_to_json: the official HF style (MODEL_SPEC §2.1, what the shipped checkpoints carry) or the style
// transformers' DeepseekV4Config saves (layer_types / mlp_layer_types over the L main layers only,
// compress_rates, rope_parameters {main, compress}, partial_rotary_factor; no compress_ratios, num_hash_layers or
// qk_rope_head_dim). parse_config_json reads both back to an equal ModelConfig (the transformers style cannot
// carry the MTP slot's ratio; it reads back as 0, which is what both shipped models use).
#include <nlohmann/json.hpp>

#include "model/config.h"

namespace dsv4::model {
namespace {

using ojson = nlohmann::ordered_json;

void common_keys(const ModelConfig& c, ojson& j) {
    j["architectures"] = ojson::array({"DeepseekV4ForCausalLM"});
    j["model_type"] = "deepseek_v4";
    j["vocab_size"] = c.vocab_size;
    j["hidden_size"] = c.hidden_size;
    j["num_hidden_layers"] = c.num_layers;
    j["num_attention_heads"] = c.num_heads;
    j["num_key_value_heads"] = 1;
    j["head_dim"] = c.head_dim;
}

void tail_keys(const ModelConfig& c, ojson& j) {
    j["q_lora_rank"] = c.q_lora_rank;
    j["o_groups"] = c.o_groups;
    j["o_lora_rank"] = c.o_lora_rank;
    j["sliding_window"] = c.window;
    j["max_position_embeddings"] = c.max_position;
    j["index_n_heads"] = c.index_n_heads;
    j["index_head_dim"] = c.index_head_dim;
    j["index_topk"] = c.index_topk;
    j["hc_mult"] = c.hc_mult;
    j["hc_sinkhorn_iters"] = c.hc_sinkhorn_iters;
    j["hc_eps"] = c.hc_eps;
    j["rms_norm_eps"] = c.rms_norm_eps;
    j["n_routed_experts"] = c.n_routed_experts;
    j["n_shared_experts"] = c.n_shared_experts;
    j["num_experts_per_tok"] = c.n_experts_per_token;
    j["moe_intermediate_size"] = c.moe_inter_dim;
    j["scoring_func"] = "sqrtsoftplus";
    j["topk_method"] = "noaux_tc";
    j["norm_topk_prob"] = true;
    j["routed_scaling_factor"] = c.routed_scaling_factor;
    j["swiglu_limit"] = c.swiglu_limit;
    j["num_nextn_predict_layers"] = c.num_mtp_layers;
    j["hidden_act"] = "silu";
    j["bos_token_id"] = c.bos_token_id;
    j["eos_token_id"] = c.eos_token_id;
    j["tie_word_embeddings"] = false;
    j["attention_bias"] = false;
    // Absent means MXFP4 (the shipped checkpoints carry no expert_dtype); written only when it says more.
    if (c.expert_format != ExpertFormat::kMXFP4)
        j["expert_dtype"] = c.expert_format == ExpertFormat::kFP8 ? "fp8" : "nvfp4";
}

ojson yarn_object(const ModelConfig& c, bool transformers_style) {
    ojson y;
    y[transformers_style ? "rope_type" : "type"] = "yarn";
    y["factor"] = c.rope_factor;
    y["original_max_position_embeddings"] = c.original_max_position;
    y["beta_fast"] = c.beta_fast;
    y["beta_slow"] = c.beta_slow;
    return y;
}

std::string official_hf(const ModelConfig& c) {
    ojson j;
    common_keys(c, j);
    j["qk_rope_head_dim"] = c.rope_head_dim;
    j["compress_ratios"] = c.compress_ratios;
    j["num_hash_layers"] = c.num_hash_layers;
    j["compress_rope_theta"] = c.compress_rope_theta;
    j["rope_theta"] = c.rope_theta;
    if (c.rope_factor != 1.0) j["rope_scaling"] = yarn_object(c, false);
    tail_keys(c, j);
    j["torch_dtype"] = "bfloat16";
    // Dense linears are FP8 e4m3 with UE8M0 128x128 block scales in the official layout (MODEL_SPEC §9.6).
    j["quantization_config"] = {{"quant_method", "fp8"},
                                {"fmt", "e4m3"},
                                {"scale_fmt", "ue8m0"},
                                {"activation_scheme", "dynamic"},
                                {"weight_block_size", {128, 128}}};
    return j.dump(2) + "\n";
}

std::string transformers(const ModelConfig& c) {
    ojson j;
    common_keys(c, j);
    const double partial = static_cast<double>(c.rope_head_dim) / static_cast<double>(c.head_dim);
    ojson layer_types = ojson::array();
    for (int64_t i = 0; i < c.num_layers; ++i) {
        switch (c.attn_kind(static_cast<int>(i))) {
            case AttnKind::kSWA: layer_types.push_back("sliding_attention"); break;
            case AttnKind::kCSA: layer_types.push_back("compressed_sparse_attention"); break;
            case AttnKind::kHCA: layer_types.push_back("heavily_compressed_attention"); break;
        }
    }
    ojson mlp_types = ojson::array();
    for (int64_t i = 0; i < c.num_layers; ++i) mlp_types.push_back(i < c.num_hash_layers ? "hash_moe" : "moe");
    j["layer_types"] = layer_types;
    j["mlp_layer_types"] = mlp_types;
    j["compress_rates"] = {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 128}};
    j["rope_theta"] = c.rope_theta;
    j["compress_rope_theta"] = c.compress_rope_theta;
    j["partial_rotary_factor"] = partial;
    ojson main = {{"rope_type", "default"}, {"rope_theta", c.rope_theta}, {"partial_rotary_factor", partial}};
    ojson compress;
    if (c.rope_factor != 1.0) {
        compress = yarn_object(c, true);
        compress["attention_factor"] = 1.0;  // the reference applies no YaRN magnitude scaling (MODEL_SPEC §5.4.1)
    } else {
        compress["rope_type"] = "default";
    }
    compress["rope_theta"] = c.compress_rope_theta;
    compress["partial_rotary_factor"] = partial;
    j["rope_parameters"] = {{"main", main}, {"compress", compress}};
    tail_keys(c, j);
    j["dtype"] = "bfloat16";  // the transformers layout stores every linear dequantised (MODEL_SPEC §9.8)
    return j.dump(2) + "\n";
}

}  // namespace

std::string config_to_json(const ModelConfig& c, bool transformers_style) {
    return transformers_style ? transformers(c) : official_hf(c);
}

}  // namespace dsv4::model
