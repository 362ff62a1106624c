// The checkpoint schema: the logical tensor list of a config (MODEL_SPEC §9.1-9.5) and its encoding in the
// official and transformers layouts (§9.6, §9.8). The published totals of both shipped checkpoints (§2.3, §14.13)
// are asserted against this file in tests/unit/model.
#include <map>

#include "model/schema.h"

namespace dsv4::model {

const char* layout_name(Layout l) { return l == Layout::kOfficial ? "official" : "transformers"; }

int64_t TensorSpec::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

uint64_t TensorSpec::nbytes() const { return static_cast<uint64_t>(numel()) * dtype_size(dtype); }

int64_t TensorSpec::logical_params() const {
    switch (role) {
        case TensorRole::kWeight: return numel();
        case TensorRole::kPackedFP4: return 2 * numel();
        case TensorRole::kScale:
        case TensorRole::kTable: return 0;
    }
    return 0;
}

SchemaTotals schema_totals(const std::vector<TensorSpec>& specs) {
    SchemaTotals t;
    for (const TensorSpec& s : specs) {
        ++t.tensors;
        t.logical_params += s.logical_params();
        t.bytes += s.nbytes();
    }
    return t;
}

std::string scale_name(const std::string& weight_name) {
    const std::string suffix = ".weight";
    if (weight_name.size() > suffix.size() &&
        weight_name.compare(weight_name.size() - suffix.size(), suffix.size(), suffix) == 0)
        return weight_name.substr(0, weight_name.size() - suffix.size()) + ".scale";
    return weight_name + ".scale";
}

std::string global_scale_name(const std::string& weight_name) { return scale_name(weight_name) + "_2"; }

namespace {

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

class Lister {
public:
    explicit Lister(const ModelConfig& c) : c_(c) {}
    std::vector<LogicalTensor> out;

    void add(std::string name, std::vector<int64_t> shape, ParamKind kind) {
        out.push_back({std::move(name), std::move(shape), kind});
    }

    void hyper_connection(const std::string& prefix, const std::string& which) {
        const int64_t D = c_.hidden_size, hc = c_.hc_mult;
        add(prefix + "hc_" + which + "_fn", {c_.hc_mix_dim(), hc * D}, ParamKind::kF32);
        add(prefix + "hc_" + which + "_base", {c_.hc_mix_dim()}, ParamKind::kF32);
        add(prefix + "hc_" + which + "_scale", {3}, ParamKind::kF32);
    }

    // Compressor of head width `width` over windows of `ratio` (MODEL_SPEC §5.4.4): overlapping (CSA, ratio 4)
    // compressors project to two series, so their projections and ape are twice as wide.
    void compressor(const std::string& p, int64_t width, int ratio) {
        const int64_t series = (ratio == 4 ? 2 : 1) * width;
        add(p + "wkv.weight", {series, c_.hidden_size}, ParamKind::kBF16);
        add(p + "wgate.weight", {series, c_.hidden_size}, ParamKind::kBF16);
        add(p + "ape", {ratio, series}, ParamKind::kF32);
        add(p + "norm.weight", {width}, ParamKind::kBF16);
    }

    // One block: layer `index` in [0, L] (L = the MTP block) under `p` ("layers.i." or "mtp.0.").
    void block(const std::string& p, int index) {
        const int64_t D = c_.hidden_size, E = c_.n_routed_experts, I = c_.moe_inter_dim;
        add(p + "attn_norm.weight", {D}, ParamKind::kBF16);
        add(p + "ffn_norm.weight", {D}, ParamKind::kBF16);
        hyper_connection(p, "attn");
        hyper_connection(p, "ffn");
        add(p + "attn.attn_sink", {c_.num_heads}, ParamKind::kF32);
        add(p + "attn.wq_a.weight", {c_.q_lora_rank, D}, ParamKind::kLinear);
        add(p + "attn.q_norm.weight", {c_.q_lora_rank}, ParamKind::kBF16);
        add(p + "attn.wq_b.weight", {c_.q_head_dims(), c_.q_lora_rank}, ParamKind::kLinear);
        add(p + "attn.wkv.weight", {c_.head_dim, D}, ParamKind::kLinear);
        add(p + "attn.kv_norm.weight", {c_.head_dim}, ParamKind::kBF16);
        add(p + "attn.wo_a.weight", {c_.o_groups * c_.o_lora_rank, c_.o_group_in()}, ParamKind::kLinear);
        add(p + "attn.wo_b.weight", {D, c_.o_groups * c_.o_lora_rank}, ParamKind::kLinear);
        const AttnKind kind = c_.attn_kind(index);
        if (kind != AttnKind::kSWA) compressor(p + "attn.compressor.", c_.head_dim, c_.compress_ratio(index));
        if (kind == AttnKind::kCSA) {
            add(p + "attn.indexer.wq_b.weight", {c_.index_n_heads * c_.index_head_dim, c_.q_lora_rank},
                ParamKind::kLinear);
            add(p + "attn.indexer.weights_proj.weight", {c_.index_n_heads, D}, ParamKind::kBF16);
            compressor(p + "attn.indexer.compressor.", c_.index_head_dim, 4);
        }
        add(p + "ffn.gate.weight", {E, D}, ParamKind::kBF16);
        if (c_.route_kind(index) == RouteKind::kHash)
            add(p + "ffn.gate.tid2eid", {c_.vocab_size, c_.n_experts_per_token}, ParamKind::kTable);
        else
            add(p + "ffn.gate.bias", {E}, ParamKind::kF32);
        add(p + "ffn.shared_experts.w1.weight", {I, D}, ParamKind::kLinear);
        add(p + "ffn.shared_experts.w3.weight", {I, D}, ParamKind::kLinear);
        add(p + "ffn.shared_experts.w2.weight", {D, I}, ParamKind::kLinear);
        for (int64_t e = 0; e < E; ++e) {
            const std::string ep = p + "ffn.experts." + std::to_string(e) + ".";
            add(ep + "w1.weight", {I, D}, ParamKind::kExpert);
            add(ep + "w3.weight", {I, D}, ParamKind::kExpert);
            add(ep + "w2.weight", {D, I}, ParamKind::kExpert);
        }
    }

    void model(bool include_mtp) {
        const int64_t D = c_.hidden_size, hc = c_.hc_mult;
        add("embed.weight", {c_.vocab_size, D}, ParamKind::kBF16);
        add("head.weight", {c_.vocab_size, D}, ParamKind::kBF16);
        add("norm.weight", {D}, ParamKind::kBF16);
        add("hc_head_fn", {hc, hc * D}, ParamKind::kF32);
        add("hc_head_base", {hc}, ParamKind::kF32);
        add("hc_head_scale", {1}, ParamKind::kF32);
        for (int i = 0; i < c_.num_layers; ++i) block("layers." + std::to_string(i) + ".", i);
        if (!include_mtp || c_.num_mtp_layers <= 0) return;
        // MODEL_SPEC §9.5: a block at layer id L plus the MTP-only projections, norms and head mix.
        const std::string p = "mtp.0.";
        block(p, static_cast<int>(c_.num_layers));
        add(p + "e_proj.weight", {D, D}, ParamKind::kLinear);
        add(p + "h_proj.weight", {D, D}, ParamKind::kLinear);
        add(p + "enorm.weight", {D}, ParamKind::kBF16);
        add(p + "hnorm.weight", {D}, ParamKind::kBF16);
        add(p + "norm.weight", {D}, ParamKind::kBF16);
        add(p + "hc_head_fn", {hc, hc * D}, ParamKind::kF32);
        add(p + "hc_head_base", {hc}, ParamKind::kF32);
        add(p + "hc_head_scale", {1}, ParamKind::kF32);
    }

private:
    const ModelConfig& c_;
};

void official_specs(const ModelConfig& c, const LogicalTensor& t, std::vector<TensorSpec>& out) {
    const int64_t rows = t.shape.size() == 2 ? t.shape[0] : 0, cols = t.shape.size() == 2 ? t.shape[1] : 0;
    switch (t.kind) {
        case ParamKind::kBF16: out.push_back({t.name, DType::kBF16, t.shape, TensorRole::kWeight}); return;
        case ParamKind::kF32: out.push_back({t.name, DType::kF32, t.shape, TensorRole::kWeight}); return;
        case ParamKind::kTable: out.push_back({t.name, DType::kI64, t.shape, TensorRole::kTable}); return;
        case ParamKind::kLinear:
            out.push_back({t.name, DType::kF8E4M3, t.shape, TensorRole::kWeight});
            out.push_back({scale_name(t.name), DType::kF8E8M0, {cdiv(rows, 128), cdiv(cols, 128)}, TensorRole::kScale});
            return;
        case ParamKind::kExpert:
            switch (c.expert_format) {
                case ExpertFormat::kMXFP4:
                    out.push_back({t.name, DType::kI8, {rows, cols / 2}, TensorRole::kPackedFP4});
                    out.push_back({scale_name(t.name), DType::kF8E8M0, {rows, cols / 32}, TensorRole::kScale});
                    return;
                case ExpertFormat::kNVFP4:
                    out.push_back({t.name, DType::kU8, {rows, cols / 2}, TensorRole::kPackedFP4});
                    out.push_back({scale_name(t.name), DType::kF8E4M3, {rows, cols / 16}, TensorRole::kScale});
                    out.push_back({global_scale_name(t.name), DType::kF32, {1}, TensorRole::kScale});
                    return;
                case ExpertFormat::kFP8:
                    out.push_back({t.name, DType::kF8E4M3, t.shape, TensorRole::kWeight});
                    out.push_back({scale_name(t.name), DType::kF32, {cdiv(rows, 128), cdiv(cols, 128)},
                                   TensorRole::kScale});
                    return;
            }
    }
}

// Official names after "layers.i." and their transformers counterparts after "model.layers.i." (MODEL_SPEC §9.8,
// transformers' conversion_mapping.py rules for deepseek_v4 applied in order).
const std::map<std::string, std::string>& layer_renames() {
    static const std::map<std::string, std::string> m = {
        {"attn_norm.weight", "input_layernorm.weight"},
        {"ffn_norm.weight", "post_attention_layernorm.weight"},
        {"hc_attn_fn", "attn_hc.fn"},
        {"hc_attn_base", "attn_hc.base"},
        {"hc_attn_scale", "attn_hc.scale"},
        {"hc_ffn_fn", "ffn_hc.fn"},
        {"hc_ffn_base", "ffn_hc.base"},
        {"hc_ffn_scale", "ffn_hc.scale"},
        {"attn.attn_sink", "self_attn.sinks"},
        {"attn.wq_a.weight", "self_attn.q_a_proj.weight"},
        {"attn.q_norm.weight", "self_attn.q_a_norm.weight"},
        {"attn.wq_b.weight", "self_attn.q_b_proj.weight"},
        {"attn.wkv.weight", "self_attn.kv_proj.weight"},
        {"attn.kv_norm.weight", "self_attn.kv_norm.weight"},
        {"attn.wo_a.weight", "self_attn.o_a_proj.weight"},
        {"attn.wo_b.weight", "self_attn.o_b_proj.weight"},
        {"attn.compressor.wkv.weight", "self_attn.compressor.kv_proj.weight"},
        {"attn.compressor.wgate.weight", "self_attn.compressor.gate_proj.weight"},
        {"attn.compressor.ape", "self_attn.compressor.position_bias"},
        {"attn.compressor.norm.weight", "self_attn.compressor.kv_norm.weight"},
        {"attn.indexer.wq_b.weight", "self_attn.compressor.indexer.q_b_proj.weight"},
        {"attn.indexer.weights_proj.weight", "self_attn.compressor.indexer.weights_proj.weight"},
        {"attn.indexer.compressor.wkv.weight", "self_attn.compressor.indexer.kv_proj.weight"},
        {"attn.indexer.compressor.wgate.weight", "self_attn.compressor.indexer.gate_proj.weight"},
        {"attn.indexer.compressor.ape", "self_attn.compressor.indexer.position_bias"},
        {"attn.indexer.compressor.norm.weight", "self_attn.compressor.indexer.kv_norm.weight"},
        {"ffn.gate.weight", "mlp.gate.weight"},
        {"ffn.gate.bias", "mlp.gate.e_score_correction_bias"},
        {"ffn.gate.tid2eid", "mlp.gate.tid2eid"},
        {"ffn.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight"},
        {"ffn.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight"},
        {"ffn.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight"},
    };
    return m;
}

}  // namespace

std::vector<LogicalTensor> logical_tensors(const ModelConfig& c, bool include_mtp) {
    Lister l(c);
    l.model(include_mtp);
    return std::move(l.out);
}

std::string transformers_name(const std::string& official) {
    static const std::map<std::string, std::string> globals = {
        {"embed.weight", "model.embed_tokens.weight"}, {"head.weight", "lm_head.weight"},
        {"norm.weight", "model.norm.weight"},          {"hc_head_fn", "model.hc_head.hc_fn"},
        {"hc_head_base", "model.hc_head.hc_base"},     {"hc_head_scale", "model.hc_head.hc_scale"},
    };
    if (auto it = globals.find(official); it != globals.end()) return it->second;
    const std::string lp = "layers.";
    if (official.compare(0, lp.size(), lp) != 0) return {};
    const size_t dot = official.find('.', lp.size());
    if (dot == std::string::npos) return {};
    const std::string index = official.substr(lp.size(), dot - lp.size());
    auto it = layer_renames().find(official.substr(dot + 1));
    if (it == layer_renames().end()) return {};
    return "model.layers." + index + "." + it->second;
}

std::pair<std::string, std::string> merged_expert_names(int layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".mlp.experts.";
    return {p + "gate_up_proj", p + "down_proj"};
}

std::vector<TensorSpec> checkpoint_schema(const ModelConfig& c, Layout layout) {
    std::vector<TensorSpec> out;
    if (layout == Layout::kOfficial) {
        for (const LogicalTensor& t : logical_tensors(c, /*include_mtp=*/true)) official_specs(c, t, out);
        return out;
    }
    const int64_t D = c.hidden_size, E = c.n_routed_experts, I = c.moe_inter_dim;
    int merged_layer = -1;
    for (const LogicalTensor& t : logical_tensors(c, /*include_mtp=*/false)) {
        if (t.kind == ParamKind::kExpert) {
            const int layer = std::stoi(t.name.substr(7));  // "layers.<i>.ffn.experts..."
            if (layer != merged_layer) {
                merged_layer = layer;
                auto [gate_up, down] = merged_expert_names(layer);
                out.push_back({gate_up, DType::kBF16, {E, 2 * I, D}, TensorRole::kWeight});
                out.push_back({down, DType::kBF16, {E, D, I}, TensorRole::kWeight});
            }
            continue;
        }
        DType dt = t.kind == ParamKind::kF32 ? DType::kF32 : t.kind == ParamKind::kTable ? DType::kI64 : DType::kBF16;
        out.push_back({transformers_name(t.name), dt, t.shape,
                       t.kind == ParamKind::kTable ? TensorRole::kTable : TensorRole::kWeight});
    }
    return out;
}

}  // namespace dsv4::model
