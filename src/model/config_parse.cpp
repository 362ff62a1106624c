// config.json parsing for the three styles (MODEL_SPEC §2):
//   official HF      hidden_size, num_hidden_layers, compress_ratios [L+1], num_hash_layers, rope_scaling {yarn}
//   transformers     layer_types / mlp_layer_types [L], compress_rates, rope_parameters {main, compress},
//                    partial_rotary_factor (what transformers' DeepseekV4Config saves: it drops compress_ratios,
//                    num_hash_layers and qk_rope_head_dim, and its layer_types exclude the MTP layer)
//   DeepSeek inference  dim, n_layers, n_heads, moe_inter_dim, route_scale, window_size, rope_factor, ...
// Every key is looked up under all of its spellings; two spellings that disagree are an error. Keys that define
// tensor shapes are required; the rest default to what transformers / DeepSeek's ModelArgs assume.
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/config.h"

namespace dsv4::model {
namespace {

using json = nlohmann::json;

class KeyReader {
public:
    KeyReader(const json& root, std::string_view source) : root_(root), source_(source) {}

    Status error(const std::string& key, const std::string& what) const {
        return invalid_argument(source_ + ": key '" + key + "': " + what);
    }

    // The value under the first present spelling; nullptr when none is present (null counts as absent).
    // Sets *error_out when two present spellings hold different values.
    const json* find(std::initializer_list<const char*> keys, std::string* used, Status* error_out,
                     const json* object = nullptr) const {
        const json& obj = object ? *object : root_;
        const json* found = nullptr;
        for (const char* k : keys) {
            auto it = obj.find(k);
            if (it == obj.end() || it->is_null()) continue;
            if (!found) {
                found = &*it;
                *used = k;
            } else if (*found != *it) {
                *error_out = error(*used, "disagrees with key '" + std::string(k) + "' (" + found->dump() + " vs " +
                                              it->dump() + ")");
            }
        }
        return found;
    }

    Status get_int(std::initializer_list<const char*> keys, int64_t* out, bool required,
                   const json* object = nullptr) const {
        std::string used;
        Status st;
        const json* v = find(keys, &used, &st, object);
        DSV4_RETURN_IF_ERROR(st);
        if (!v) return required ? error(*keys.begin(), "missing (a required size)") : Status::ok();
        if (v->is_number_integer() || v->is_number_unsigned()) {
            *out = v->get<int64_t>();
        } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
                   std::fabs(v->get<double>()) < 9e15) {
            *out = static_cast<int64_t>(v->get<double>());
        } else {
            return error(used, "expected an integer, got " + v->dump());
        }
        return Status::ok();
    }

    Status get_double(std::initializer_list<const char*> keys, double* out, const json* object = nullptr) const {
        std::string used;
        Status st;
        const json* v = find(keys, &used, &st, object);
        DSV4_RETURN_IF_ERROR(st);
        if (!v) return Status::ok();
        if (!v->is_number()) return error(used, "expected a number, got " + v->dump());
        *out = v->get<double>();
        return Status::ok();
    }

    Status get_string(std::initializer_list<const char*> keys, std::string* out, const json* object = nullptr) const {
        std::string used;
        Status st;
        const json* v = find(keys, &used, &st, object);
        DSV4_RETURN_IF_ERROR(st);
        if (!v) return Status::ok();
        if (!v->is_string()) return error(used, "expected a string, got " + v->dump());
        *out = v->get<std::string>();
        return Status::ok();
    }

    const json& root() const { return root_; }
    const std::string& source() const { return source_; }

private:
    const json& root_;
    std::string source_;
};

ConfigStyle detect_style(const json& j) {
    if (j.contains("dim") || j.contains("n_layers")) return ConfigStyle::kDeepSeekInference;
    if (j.contains("layer_types") || j.contains("mlp_layer_types") || j.contains("rope_parameters"))
        return ConfigStyle::kTransformers;
    return ConfigStyle::kOfficialHF;
}

// Keys whose only supported value is fixed by the architecture: reject anything else up front.
Status check_fixed_keys(const KeyReader& r) {
    std::string s;
    DSV4_RETURN_IF_ERROR(r.get_string({"model_type"}, &s));
    if (!s.empty() && s != "deepseek_v4")
        return unsupported(r.source() + ": key 'model_type': \"" + s + "\" is not a DeepSeek-V4 model (want deepseek_v4)");
    s.clear();
    DSV4_RETURN_IF_ERROR(r.get_string({"scoring_func", "score_func"}, &s));
    if (!s.empty() && s != "sqrtsoftplus")
        return unsupported(r.source() + ": key 'scoring_func': \"" + s + "\" (DeepSeek-V4 routes with sqrtsoftplus)");
    s.clear();
    DSV4_RETURN_IF_ERROR(r.get_string({"topk_method"}, &s));
    if (!s.empty() && s != "noaux_tc")
        return unsupported(r.source() + ": key 'topk_method': \"" + s + "\" (only noaux_tc is supported)");
    s.clear();
    DSV4_RETURN_IF_ERROR(r.get_string({"hidden_act"}, &s));
    if (!s.empty() && s != "silu") return unsupported(r.source() + ": key 'hidden_act': \"" + s + "\" (want silu)");
    for (const char* k : {"n_group", "topk_group"}) {
        int64_t v = 1;
        DSV4_RETURN_IF_ERROR(r.get_int({k}, &v, false));
        if (v != 1) return unsupported(r.source() + ": key '" + k + "': " + std::to_string(v) +
                                       " (DeepSeek-V4 has no expert groups; want 1)");
    }
    int64_t kv_heads = 1;
    DSV4_RETURN_IF_ERROR(r.get_int({"num_key_value_heads"}, &kv_heads, false));
    if (kv_heads != 1)
        return unsupported(r.source() + ": key 'num_key_value_heads': " + std::to_string(kv_heads) +
                           " (DeepSeek-V4 has one shared K=V head)");
    if (auto it = r.root().find("tie_word_embeddings"); it != r.root().end() && it->is_boolean() && it->get<bool>())
        return unsupported(r.source() + ": key 'tie_word_embeddings': true (DeepSeek-V4 has a separate head)");
    if (auto it = r.root().find("quantization_config"); it != r.root().end() && it->is_object()) {
        std::string method;
        DSV4_RETURN_IF_ERROR(r.get_string({"quant_method"}, &method, &*it));
        auto bs = it->find("weight_block_size");
        if (method == "fp8" && bs != it->end() && *bs != json::array({128, 128}))
            return unsupported(r.source() + ": key 'quantization_config.weight_block_size': " + bs->dump() +
                               " (FP8 weights need 128x128 blocks)");
    }
    return Status::ok();
}

Status parse_expert_dtype(const KeyReader& r, ModelConfig* c) {
    std::string s;
    DSV4_RETURN_IF_ERROR(r.get_string({"expert_dtype"}, &s));
    if (s.empty() || s == "fp4" || s == "mxfp4") {
        c->expert_format = ExpertFormat::kMXFP4;  // absent means the shipped MXFP4 (what vLLM assumes too)
    } else if (s == "nvfp4") {
        c->expert_format = ExpertFormat::kNVFP4;
    } else if (s == "fp8") {
        c->expert_format = ExpertFormat::kFP8;
    } else {
        return unsupported(r.source() + ": key 'expert_dtype': \"" + s + "\" (want fp4, nvfp4 or fp8)");
    }
    return Status::ok();
}

// The layer schedule: compress_ratios [L+1] (official, inference) or layer_types [L] + compress_rates
// (transformers; the MTP slot, which both shipped models run as SWA, is appended as 0).
Status parse_schedule(const KeyReader& r, ModelConfig* c) {
    const json& j = r.root();
    bool have_ratios = false;
    if (auto it = j.find("compress_ratios"); it != j.end() && !it->is_null()) {
        if (!it->is_array()) return r.error("compress_ratios", "expected a list of integers");
        for (const json& v : *it) {
            if (!v.is_number_integer()) return r.error("compress_ratios", "expected integers, got " + v.dump());
            c->compress_ratios.push_back(v.get<int>());
        }
        have_ratios = true;
    }
    auto lt = j.find("layer_types");
    if (lt != j.end() && !lt->is_null()) {
        if (!lt->is_array()) return r.error("layer_types", "expected a list of strings");
        int csa = 4, hca = 128;
        if (auto cr = j.find("compress_rates"); cr != j.end() && cr->is_object()) {
            int64_t v = csa;
            DSV4_RETURN_IF_ERROR(r.get_int({"compressed_sparse_attention"}, &v, false, &*cr));
            csa = static_cast<int>(v);
            v = hca;
            DSV4_RETURN_IF_ERROR(r.get_int({"heavily_compressed_attention"}, &v, false, &*cr));
            hca = static_cast<int>(v);
        }
        std::vector<int> derived;
        for (const json& v : *lt) {
            std::string t = v.is_string() ? v.get<std::string>() : v.dump();
            if (t == "sliding_attention") derived.push_back(0);
            else if (t == "compressed_sparse_attention") derived.push_back(csa);
            else if (t == "heavily_compressed_attention") derived.push_back(hca);
            else return r.error("layer_types", "unknown layer type " + v.dump() +
                                " (want sliding_attention, compressed_sparse_attention or heavily_compressed_attention)");
        }
        if (static_cast<int64_t>(derived.size()) != c->num_layers)
            return r.error("layer_types", "has " + std::to_string(derived.size()) + " entries, num_hidden_layers is " +
                                              std::to_string(c->num_layers));
        if (have_ratios) {
            for (size_t i = 0; i < derived.size() && i < c->compress_ratios.size(); ++i)
                if (derived[i] != c->compress_ratios[i])
                    return r.error("layer_types", "entry " + std::to_string(i) + " disagrees with compress_ratios[" +
                                                      std::to_string(i) + "] = " +
                                                      std::to_string(c->compress_ratios[i]));
        } else {
            derived.push_back(0);  // MTP slot: SWA (MODEL_SPEC §3)
            c->compress_ratios = derived;
        }
        have_ratios = true;
    }
    if (!have_ratios) return r.error("compress_ratios", "missing (neither compress_ratios nor layer_types is given)");
    return Status::ok();
}

Status parse_hash_layers(const KeyReader& r, ModelConfig* c) {
    int64_t n = -1;
    DSV4_RETURN_IF_ERROR(r.get_int({"num_hash_layers", "n_hash_layers"}, &n, false));
    auto mt = r.root().find("mlp_layer_types");
    if (mt != r.root().end() && !mt->is_null()) {
        if (!mt->is_array()) return r.error("mlp_layer_types", "expected a list of strings");
        int64_t leading = 0;
        bool seen_moe = false;
        for (const json& v : *mt) {
            std::string t = v.is_string() ? v.get<std::string>() : v.dump();
            if (t == "hash_moe") {
                if (seen_moe) return unsupported(r.source() + ": key 'mlp_layer_types': hash_moe after moe (hash "
                                                 "layers must be the first layers)");
                ++leading;
            } else if (t == "moe") {
                seen_moe = true;
            } else {
                return r.error("mlp_layer_types", "unknown type " + v.dump() + " (want hash_moe or moe)");
            }
        }
        if (static_cast<int64_t>(mt->size()) != c->num_layers)
            return r.error("mlp_layer_types", "has " + std::to_string(mt->size()) +
                                                  " entries, num_hidden_layers is " + std::to_string(c->num_layers));
        if (n >= 0 && n != leading)
            return r.error("mlp_layer_types", std::to_string(leading) + " hash_moe layers disagree with num_hash_layers " +
                                                  std::to_string(n));
        n = leading;
    }
    c->num_hash_layers = n >= 0 ? n : 3;  // transformers' default when nothing says otherwise
    return Status::ok();
}

// RoPE: thetas and YaRN from rope_scaling (HF), top-level rope_factor/original_seq_len/beta_* (inference) or
// rope_parameters {main, compress} (transformers). No YaRN information at all means no YaRN (factor 1).
Status parse_rope(const KeyReader& r, ModelConfig* c) {
    const json& j = r.root();
    const json* main = nullptr;
    const json* compress = nullptr;
    if (auto rp = j.find("rope_parameters"); rp != j.end() && rp->is_object()) {
        if (auto m = rp->find("main"); m != rp->end() && m->is_object()) main = &*m;
        if (auto m = rp->find("compress"); m != rp->end() && m->is_object()) compress = &*m;
    }
    DSV4_RETURN_IF_ERROR(r.get_double({"rope_theta"}, &c->rope_theta));
    if (main) DSV4_RETURN_IF_ERROR(r.get_double({"rope_theta"}, &c->rope_theta, main));
    DSV4_RETURN_IF_ERROR(r.get_double({"compress_rope_theta"}, &c->compress_rope_theta));
    if (compress) DSV4_RETURN_IF_ERROR(r.get_double({"rope_theta"}, &c->compress_rope_theta, compress));

    const json* yarn = nullptr;
    if (auto rs = j.find("rope_scaling"); rs != j.end() && rs->is_object()) yarn = &*rs;
    if (compress) yarn = compress;
    c->rope_factor = 1.0;
    if (yarn) {
        std::string type = "yarn";
        DSV4_RETURN_IF_ERROR(r.get_string({"rope_type", "type"}, &type, yarn));
        if (type == "yarn") {
            DSV4_RETURN_IF_ERROR(r.get_double({"factor"}, &c->rope_factor, yarn));
            DSV4_RETURN_IF_ERROR(r.get_int({"original_max_position_embeddings"}, &c->original_max_position, false, yarn));
            DSV4_RETURN_IF_ERROR(r.get_double({"beta_fast"}, &c->beta_fast, yarn));
            DSV4_RETURN_IF_ERROR(r.get_double({"beta_slow"}, &c->beta_slow, yarn));
        } else if (type != "default") {
            return unsupported(r.source() + ": rope type \"" + type + "\" (want yarn or default)");
        }
    } else if (j.contains("rope_factor")) {
        DSV4_RETURN_IF_ERROR(r.get_double({"rope_factor"}, &c->rope_factor));
        DSV4_RETURN_IF_ERROR(r.get_int({"original_seq_len"}, &c->original_max_position, false));
        DSV4_RETURN_IF_ERROR(r.get_double({"beta_fast"}, &c->beta_fast));
        DSV4_RETURN_IF_ERROR(r.get_double({"beta_slow"}, &c->beta_slow));
    }

    // Rope width: qk_rope_head_dim / rope_head_dim, else partial_rotary_factor x head_dim (transformers).
    int64_t rope_dim = -1;
    DSV4_RETURN_IF_ERROR(r.get_int({"qk_rope_head_dim", "rope_head_dim"}, &rope_dim, false));
    double factor = -1;
    DSV4_RETURN_IF_ERROR(r.get_double({"partial_rotary_factor"}, &factor));
    if (factor < 0 && main) DSV4_RETURN_IF_ERROR(r.get_double({"partial_rotary_factor"}, &factor, main));
    if (factor >= 0) {
        double dims = factor * static_cast<double>(c->head_dim);
        if (std::fabs(dims - std::round(dims)) > 1e-6)
            return r.error("partial_rotary_factor", "times head_dim is not a whole number of dims");
        if (rope_dim >= 0 && rope_dim != static_cast<int64_t>(std::round(dims)))
            return r.error("partial_rotary_factor", "disagrees with qk_rope_head_dim " + std::to_string(rope_dim));
        rope_dim = static_cast<int64_t>(std::round(dims));
    }
    if (rope_dim >= 0) c->rope_head_dim = rope_dim;
    return Status::ok();
}

}  // namespace

Result<ModelConfig> parse_config_json(std::string_view text, std::string_view source) {
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return invalid_argument(std::string(source) + ": not valid JSON");
    if (!j.is_object()) return invalid_argument(std::string(source) + ": expected a JSON object at the top level");
    KeyReader r(j, source);
    ModelConfig c;
    c.name = std::string(source);
    c.style = detect_style(j);
    DSV4_RETURN_IF_ERROR(check_fixed_keys(r));

    DSV4_RETURN_IF_ERROR(r.get_int({"vocab_size"}, &c.vocab_size, true));
    DSV4_RETURN_IF_ERROR(r.get_int({"hidden_size", "dim"}, &c.hidden_size, true));
    DSV4_RETURN_IF_ERROR(r.get_int({"num_hidden_layers", "n_layers"}, &c.num_layers, true));
    DSV4_RETURN_IF_ERROR(r.get_int({"num_attention_heads", "n_heads"}, &c.num_heads, true));
    DSV4_RETURN_IF_ERROR(r.get_int({"head_dim"}, &c.head_dim, true));
    DSV4_RETURN_IF_ERROR(r.get_int({"q_lora_rank"}, &c.q_lora_rank, true));
    DSV4_RETURN_IF_ERROR(r.get_int({"o_groups"}, &c.o_groups, true));
    DSV4_RETURN_IF_ERROR(r.get_int({"o_lora_rank"}, &c.o_lora_rank, true));
    DSV4_RETURN_IF_ERROR(r.get_int({"n_routed_experts", "num_local_experts"}, &c.n_routed_experts, true));
    DSV4_RETURN_IF_ERROR(r.get_int({"num_experts_per_tok", "n_activated_experts"}, &c.n_experts_per_token, true));
    DSV4_RETURN_IF_ERROR(r.get_int({"moe_intermediate_size", "moe_inter_dim"}, &c.moe_inter_dim, true));
    DSV4_RETURN_IF_ERROR(r.get_double({"routed_scaling_factor", "route_scale"}, &c.routed_scaling_factor));

    DSV4_RETURN_IF_ERROR(r.get_int({"sliding_window", "window_size"}, &c.window, false));
    DSV4_RETURN_IF_ERROR(r.get_int({"max_position_embeddings"}, &c.max_position, false));
    DSV4_RETURN_IF_ERROR(r.get_int({"index_n_heads"}, &c.index_n_heads, false));
    DSV4_RETURN_IF_ERROR(r.get_int({"index_head_dim"}, &c.index_head_dim, false));
    DSV4_RETURN_IF_ERROR(r.get_int({"index_topk"}, &c.index_topk, false));
    DSV4_RETURN_IF_ERROR(r.get_int({"hc_mult"}, &c.hc_mult, false));
    DSV4_RETURN_IF_ERROR(r.get_int({"hc_sinkhorn_iters"}, &c.hc_sinkhorn_iters, false));
    DSV4_RETURN_IF_ERROR(r.get_double({"hc_eps"}, &c.hc_eps));
    DSV4_RETURN_IF_ERROR(r.get_double({"rms_norm_eps", "norm_eps"}, &c.rms_norm_eps));
    DSV4_RETURN_IF_ERROR(r.get_int({"n_shared_experts"}, &c.n_shared_experts, false));
    DSV4_RETURN_IF_ERROR(r.get_double({"swiglu_limit"}, &c.swiglu_limit));
    DSV4_RETURN_IF_ERROR(r.get_int({"num_nextn_predict_layers", "n_mtp_layers"}, &c.num_mtp_layers, false));
    DSV4_RETURN_IF_ERROR(r.get_int({"bos_token_id"}, &c.bos_token_id, false));
    if (auto it = j.find("eos_token_id"); it != j.end() && it->is_array() && !it->empty() &&
                                          it->front().is_number_integer()) {
        c.eos_token_id = it->front().get<int64_t>();  // transformers allows a list; the first is the model's own
    } else {
        DSV4_RETURN_IF_ERROR(r.get_int({"eos_token_id"}, &c.eos_token_id, false));
    }
    DSV4_RETURN_IF_ERROR(parse_expert_dtype(r, &c));
    DSV4_RETURN_IF_ERROR(parse_schedule(r, &c));
    DSV4_RETURN_IF_ERROR(parse_hash_layers(r, &c));
    DSV4_RETURN_IF_ERROR(parse_rope(r, &c));

    Status valid = validate_config(c);
    if (!valid.is_ok()) return Status(valid.code(), std::string(source) + ": " + valid.message());
    return c;
}

Result<ModelConfig> load_config(const std::filesystem::path& dir) {
    std::filesystem::path path = dir / "config.json";
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
        std::filesystem::path alt = dir / "inference" / "config.json";
        if (!std::filesystem::exists(alt, ec))
            return not_found(path.string() + ": no config.json (nor inference/config.json) in the checkpoint folder");
        path = alt;
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) return io_error(path.string() + ": cannot open for reading");
    std::ostringstream text;
    text << in.rdbuf();
    DSV4_ASSIGN_OR_RETURN(ModelConfig c, parse_config_json(text.str(), path.string()));
    c.name = dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
    return c;
}

}  // namespace dsv4::model
