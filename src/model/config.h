// The model configuration: one struct, filled from any of the three config.json styles a DeepSeek-V4 checkpoint
// may carry (MODEL_SPEC §2): the official HF config (compress_ratios list), the transformers-saved style
// (layer_types, mlp_layer_types, compress_rates, rope_parameters) and DeepSeek's inference/config.json names.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "dsv4/status.h"

namespace dsv4::model {

enum class AttnKind : uint8_t { kSWA, kCSA, kHCA };  // compress ratio 0, 4, 128
enum class RouteKind : uint8_t { kHash, kScore };    // tid2eid table, or sqrt-softplus scores + bias
enum class ExpertFormat : uint8_t { kMXFP4, kNVFP4, kFP8 };

const char* attn_kind_name(AttnKind k);   // "SWA", "CSA", "HCA"
const char* expert_format_name(ExpertFormat f);  // "mxfp4", "nvfp4", "fp8"

// Which of the three config.json styles a file was written in (MODEL_SPEC §2.1, §2.2; transformers' own class).
enum class ConfigStyle : uint8_t { kOfficialHF, kTransformers, kDeepSeekInference };
const char* config_style_name(ConfigStyle s);  // "official-hf", "transformers", "deepseek-inference"

struct ModelConfig {
    std::string name;  // preset name or the folder it came from, for messages
    int64_t vocab_size = 129280;
    int64_t hidden_size = 4096;        // D
    int64_t num_layers = 43;           // L, main layers (MTP not included)
    int64_t num_heads = 64;            // H
    int64_t head_dim = 512;
    int64_t rope_head_dim = 64;        // last 64 dims of each head
    int64_t q_lora_rank = 1024;
    int64_t o_groups = 8;
    int64_t o_lora_rank = 1024;
    int64_t window = 128;              // sliding_window
    std::vector<int> compress_ratios;  // L + 1 entries (the last is the MTP layer), each 0, 4 or 128
    double rope_theta = 10000.0;
    double compress_rope_theta = 160000.0;
    // YaRN (compressed layers only)
    double rope_factor = 16.0;
    int64_t original_max_position = 65536;
    double beta_fast = 32.0, beta_slow = 1.0;
    int64_t max_position = 1048576;
    int64_t index_n_heads = 64;
    int64_t index_head_dim = 128;
    int64_t index_topk = 512;
    int64_t hc_mult = 4;
    int64_t hc_sinkhorn_iters = 20;
    double hc_eps = 1e-6;
    double rms_norm_eps = 1e-6;
    int64_t n_routed_experts = 256;
    int64_t n_shared_experts = 1;
    int64_t n_experts_per_token = 6;
    int64_t moe_inter_dim = 2048;
    int64_t num_hash_layers = 3;
    double routed_scaling_factor = 1.5;
    double swiglu_limit = 10.0;
    int64_t num_mtp_layers = 1;
    int64_t bos_token_id = 0, eos_token_id = 1;
    ExpertFormat expert_format = ExpertFormat::kMXFP4;  // config key expert_dtype: "fp4" (default), "nvfp4", "fp8"
    ConfigStyle style = ConfigStyle::kOfficialHF;        // the style it was parsed from (presets: official HF)

    // Derived
    int64_t hc_mix_dim() const { return (2 + hc_mult) * hc_mult; }          // 24: [pre | post | comb]
    int64_t q_head_dims() const { return num_heads * head_dim; }            // wq_b rows
    int64_t o_group_in() const { return num_heads / o_groups * head_dim; }  // wo_a input width per group
    bool has_mtp() const { return num_mtp_layers > 0; }
    AttnKind attn_kind(int layer) const;  // layer in [0, L]; L is the MTP layer
    RouteKind route_kind(int layer) const { return layer < num_hash_layers ? RouteKind::kHash : RouteKind::kScore; }
    int compress_ratio(int layer) const { return compress_ratios.at(layer); }
};

// Parses config.json text of any of the three styles; `source` names the file in errors.
Result<ModelConfig> parse_config_json(std::string_view text, std::string_view source);
// Reads DIR/config.json (or DIR/inference/config.json when only that exists) and validates it.
Result<ModelConfig> load_config(const std::filesystem::path& dir);
// Every rule a config must satisfy (ratios in {0,4,128}, L+1 ratios, hash layers <= L, divisibility the formats
// need, ...); the first violation names the key. parse_config_json and preset_config already call it.
Status validate_config(const ModelConfig& c);
// Built-in presets: "flash", "pro" (the shipped checkpoints) and "tiny" (small widths, real head_dim 512,
// rope 64, index_head_dim 128, window 128, ratios 4/128) for tests and demos.
Result<ModelConfig> preset_config(std::string_view name);
// Serialises in the official HF style (what make-model writes for the official layout) or the transformers style.
std::string config_to_json(const ModelConfig& c, bool transformers_style);

}  // namespace dsv4::model
