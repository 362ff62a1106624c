// Config rules (MODEL_SPEC §2, §3, §7.1, §9.6) and the small derived accessors of ModelConfig.
#include <string>

#include "model/config.h"

namespace dsv4::model {

const char* attn_kind_name(AttnKind k) {
    switch (k) {
        case AttnKind::kSWA: return "SWA";
        case AttnKind::kCSA: return "CSA";
        case AttnKind::kHCA: return "HCA";
    }
    return "?";
}

const char* expert_format_name(ExpertFormat f) {
    switch (f) {
        case ExpertFormat::kMXFP4: return "mxfp4";
        case ExpertFormat::kNVFP4: return "nvfp4";
        case ExpertFormat::kFP8: return "fp8";
    }
    return "?";
}

const char* config_style_name(ConfigStyle s) {
    switch (s) {
        case ConfigStyle::kOfficialHF: return "official-hf";
        case ConfigStyle::kTransformers: return "transformers";
        case ConfigStyle::kDeepSeekInference: return "deepseek-inference";
    }
    return "?";
}

AttnKind ModelConfig::attn_kind(int layer) const {
    switch (compress_ratios.at(layer)) {
        case 4: return AttnKind::kCSA;
        case 128: return AttnKind::kHCA;
        default: return AttnKind::kSWA;
    }
}

namespace {

Status bad(const std::string& key, const std::string& what) {
    return invalid_argument("key '" + key + "': " + what);
}
Status unsup(const std::string& key, const std::string& what) {
    return unsupported("key '" + key + "': " + what);
}
std::string num(int64_t v) { return std::to_string(v); }

Status positive(const char* key, int64_t v) {
    return v > 0 ? Status::ok() : bad(key, "must be positive, got " + num(v));
}
Status positive(const char* key, double v) {
    return v > 0 ? Status::ok() : bad(key, "must be positive, got " + std::to_string(v));
}
// The FP8 GEMMs quantise activations per 128 contiguous channels (MODEL_SPEC §7.1) and MXFP4/NVFP4 group 32/16
// inputs, so every width that is a GEMM input (and the rows of the 128x128 weight blocks) must be a multiple of 128.
Status multiple_of_128(const char* key, int64_t v) {
    return v % 128 == 0 ? Status::ok()
                        : bad(key, num(v) + " is not a multiple of 128 (FP8 128x128 blocks and per-128 activation "
                                            "scales need it)");
}

}  // namespace

Status validate_config(const ModelConfig& c) {
    DSV4_RETURN_IF_ERROR(positive("vocab_size", c.vocab_size));
    DSV4_RETURN_IF_ERROR(positive("hidden_size", c.hidden_size));
    DSV4_RETURN_IF_ERROR(positive("num_hidden_layers", c.num_layers));
    DSV4_RETURN_IF_ERROR(positive("num_attention_heads", c.num_heads));
    DSV4_RETURN_IF_ERROR(positive("q_lora_rank", c.q_lora_rank));
    DSV4_RETURN_IF_ERROR(positive("o_groups", c.o_groups));
    DSV4_RETURN_IF_ERROR(positive("o_lora_rank", c.o_lora_rank));
    DSV4_RETURN_IF_ERROR(positive("n_routed_experts", c.n_routed_experts));
    DSV4_RETURN_IF_ERROR(positive("num_experts_per_tok", c.n_experts_per_token));
    DSV4_RETURN_IF_ERROR(positive("moe_intermediate_size", c.moe_inter_dim));
    DSV4_RETURN_IF_ERROR(positive("index_n_heads", c.index_n_heads));
    DSV4_RETURN_IF_ERROR(positive("index_topk", c.index_topk));
    DSV4_RETURN_IF_ERROR(positive("hc_mult", c.hc_mult));
    DSV4_RETURN_IF_ERROR(positive("hc_sinkhorn_iters", c.hc_sinkhorn_iters));
    DSV4_RETURN_IF_ERROR(positive("max_position_embeddings", c.max_position));
    DSV4_RETURN_IF_ERROR(positive("rms_norm_eps", c.rms_norm_eps));
    DSV4_RETURN_IF_ERROR(positive("hc_eps", c.hc_eps));
    DSV4_RETURN_IF_ERROR(positive("rope_theta", c.rope_theta));
    DSV4_RETURN_IF_ERROR(positive("compress_rope_theta", c.compress_rope_theta));
    DSV4_RETURN_IF_ERROR(positive("routed_scaling_factor", c.routed_scaling_factor));
    DSV4_RETURN_IF_ERROR(positive("swiglu_limit", c.swiglu_limit));
    if (c.rope_factor < 1.0) return bad("rope_scaling.factor", "must be >= 1, got " + std::to_string(c.rope_factor));
    if (c.rope_factor > 1.0) DSV4_RETURN_IF_ERROR(positive("rope_scaling.original_max_position_embeddings",
                                                           c.original_max_position));

    // Fixed widths of the architecture.
    if (c.head_dim != 512) return unsup("head_dim", num(c.head_dim) + " (DeepSeek-V4 K=V heads are 512 wide)");
    if (c.rope_head_dim != 64)
        return unsup("qk_rope_head_dim", num(c.rope_head_dim) + " (DeepSeek-V4 ropes the last 64 dims of each head)");
    if (c.index_head_dim != 128)
        return unsup("index_head_dim", num(c.index_head_dim) + " (the indexer's Hadamard rotation is 128 wide)");
    if (c.window != 128) return unsup("sliding_window", num(c.window) + " (the window ring holds 128 tokens)");
    if (c.n_shared_experts != 1)
        return unsup("n_shared_experts", num(c.n_shared_experts) + " (DeepSeek-V4 has exactly one shared expert)");

    if (c.num_heads % c.o_groups != 0)
        return bad("o_groups", num(c.o_groups) + " does not divide num_attention_heads " + num(c.num_heads));
    DSV4_RETURN_IF_ERROR(multiple_of_128("hidden_size", c.hidden_size));
    DSV4_RETURN_IF_ERROR(multiple_of_128("q_lora_rank", c.q_lora_rank));
    DSV4_RETURN_IF_ERROR(multiple_of_128("o_lora_rank", c.o_lora_rank));
    DSV4_RETURN_IF_ERROR(multiple_of_128("moe_intermediate_size", c.moe_inter_dim));
    if (c.n_experts_per_token > c.n_routed_experts)
        return bad("num_experts_per_tok", num(c.n_experts_per_token) + " exceeds n_routed_experts " +
                                              num(c.n_routed_experts));

    // Schedule: L main layers + the MTP slot, each 0 (SWA), 4 (CSA) or 128 (HCA).
    if (static_cast<int64_t>(c.compress_ratios.size()) != c.num_layers + 1)
        return bad("compress_ratios", "has " + num(static_cast<int64_t>(c.compress_ratios.size())) +
                                          " entries, want num_hidden_layers + 1 = " + num(c.num_layers + 1) +
                                          " (the last entry is the MTP layer)");
    for (size_t i = 0; i < c.compress_ratios.size(); ++i) {
        int r = c.compress_ratios[i];
        if (r != 0 && r != 4 && r != 128)
            return bad("compress_ratios", "entry " + num(static_cast<int64_t>(i)) + " is " + num(r) +
                                              " (each must be 0, 4 or 128)");
    }
    if (c.num_hash_layers < 0 || c.num_hash_layers > c.num_layers)
        return bad("num_hash_layers", num(c.num_hash_layers) + " is outside [0, num_hidden_layers = " +
                                          num(c.num_layers) + "]");
    if (c.num_mtp_layers < 0 || c.num_mtp_layers > 1)
        return unsup("num_nextn_predict_layers", num(c.num_mtp_layers) +
                                                     " (compress_ratios has one MTP slot; want 0 or 1)");
    if (c.vocab_size > 0 && (c.bos_token_id < 0 || c.bos_token_id >= c.vocab_size))
        return bad("bos_token_id", num(c.bos_token_id) + " is outside the vocabulary of " + num(c.vocab_size));
    if (c.eos_token_id < 0 || c.eos_token_id >= c.vocab_size)
        return bad("eos_token_id", num(c.eos_token_id) + " is outside the vocabulary of " + num(c.vocab_size));
    return Status::ok();
}

}  // namespace dsv4::model
