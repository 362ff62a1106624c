// inspect (see inspect.h).
#include "model/inspect.h"

#include <cstdio>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "model/weights.h"

namespace dsv4::model {
namespace {

std::string with_commas(uint64_t v) {
    std::string digits = std::to_string(v), out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return out;
}

// 1024-based units, the largest that keeps the number at least 1.
std::string human_bytes(uint64_t bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(bytes);
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
    return buf;
}

std::string context_label(int64_t tokens) {
    if (tokens >= (1 << 20) && tokens % (1 << 20) == 0) return std::to_string(tokens >> 20) + "M";
    if (tokens >= 1024 && tokens % 1024 == 0) return std::to_string(tokens >> 10) + "K";
    return std::to_string(tokens);
}

const char* route_name(RouteKind k) { return k == RouteKind::kHash ? "hash" : "score"; }

}  // namespace

uint64_t kv_entry_bytes(const ModelConfig& c) {
    const uint64_t nope = static_cast<uint64_t>(c.head_dim - c.rope_head_dim);
    const uint64_t scales = (nope + 63) / 64;  // one UE8M0 per 64 nope dims (fp8_sim blocks, MODEL_SPEC §7.2)
    return nope + 2 * static_cast<uint64_t>(c.rope_head_dim) + (scales + 7) / 8 * 8;  // scales padded to 8 bytes
}

uint64_t kv_cache_bytes(const ModelConfig& c, int64_t tokens) {
    const uint64_t entry = kv_entry_bytes(c);
    const uint64_t n = static_cast<uint64_t>(tokens);
    const uint64_t index_key = static_cast<uint64_t>(c.index_head_dim / 2 + c.index_head_dim / 32);
    const int layers = static_cast<int>(c.num_layers + (c.has_mtp() ? 1 : 0));
    uint64_t total = 0;
    for (int l = 0; l < layers; ++l) {
        total += std::min<uint64_t>(n, static_cast<uint64_t>(c.window)) * entry;  // window ring
        const AttnKind kind = c.attn_kind(l);
        if (kind == AttnKind::kSWA) continue;
        const uint64_t ratio = static_cast<uint64_t>(c.compress_ratio(l));
        const uint64_t series = kind == AttnKind::kCSA ? 2 : 1;  // overlapping windows keep two series
        total += n / ratio * entry;
        // Compressor state: keys and scores, f32, [series*ratio, series*width].
        total += 2 * 4 * series * ratio * series * static_cast<uint64_t>(c.head_dim);
        if (kind == AttnKind::kCSA) {
            total += n / ratio * index_key;
            total += 2 * 4 * series * ratio * series * static_cast<uint64_t>(c.index_head_dim);
        }
    }
    return total;
}

Result<InspectReport> inspect_checkpoint(const std::filesystem::path& dir) {
    InspectReport r;
    r.dir = dir;
    DSV4_ASSIGN_OR_RETURN(std::unique_ptr<io::Checkpoint> ckpt, io::Checkpoint::open(dir));
    DSV4_ASSIGN_OR_RETURN(r.config, load_config(dir));
    DSV4_ASSIGN_OR_RETURN(ModelWeights weights, map_weights(*ckpt, r.config));
    r.layout = weights.layout;
    r.has_mtp = weights.mtp.has_value();
    r.files = static_cast<int>(ckpt->files().size());

    std::map<std::string, TensorRole> roles;
    for (const TensorSpec& s : checkpoint_schema(r.config, r.layout)) roles[s.name] = s.role;
    std::map<DType, InspectReport::DTypeTotals> by_dtype;
    for (const std::string& name : ckpt->names()) {
        const io::TensorEntry& e = *ckpt->find(name)->entry;
        auto& d = by_dtype[e.dtype];
        d.dtype = e.dtype;
        ++d.tensors;
        d.bytes += e.nbytes();
        ++r.tensors;
        r.bytes += e.nbytes();
        auto role = roles.find(name);
        if (role == roles.end()) continue;  // tensors the layout ignores (mtp.* next to transformers names)
        const int64_t n = e.numel();
        const int64_t params = role->second == TensorRole::kWeight      ? n
                               : role->second == TensorRole::kPackedFP4 ? 2 * n
                                                                        : 0;
        r.params += params;
        if (name.rfind("mtp.", 0) == 0) r.mtp_params += params;
    }
    for (DType t : kAllDTypes) {
        if (auto it = by_dtype.find(t); it != by_dtype.end()) r.by_dtype.push_back(it->second);
    }
    ModelConfig served = r.config;  // the MTP layer's ring only counts when its weights are there
    if (!r.has_mtp) served.num_mtp_layers = 0;
    for (int64_t tokens : {int64_t{1} << 10, int64_t{1} << 17, int64_t{1} << 20}) {
        r.kv.push_back({tokens, kv_cache_bytes(served, tokens)});
    }
    return r;
}

std::string format_report_text(const InspectReport& r) {
    const ModelConfig& c = r.config;
    std::ostringstream o;
    o << "checkpoint  " << r.dir.string() << " (" << layout_name(r.layout) << " layout, " << r.files
      << (r.files == 1 ? " file)" : " files)") << "\n";
    o << "model       " << c.name << ": vocab " << c.vocab_size << ", hidden " << c.hidden_size << ", "
      << c.num_layers << " layers" << (r.has_mtp ? " + 1 MTP" : "") << ", " << c.num_heads << " heads x "
      << c.head_dim << " (rope " << c.rope_head_dim << "), q_lora " << c.q_lora_rank << ", o_groups "
      << c.o_groups << " x " << c.o_lora_rank << "\n";
    o << "            experts " << c.n_routed_experts << " routed (top " << c.n_experts_per_token << ", x"
      << c.routed_scaling_factor << ") + " << c.n_shared_experts << " shared, width " << c.moe_inter_dim << ", "
      << expert_format_name(c.expert_format) << "; hash layers " << c.num_hash_layers << "; window " << c.window
      << "; indexer " << c.index_n_heads << " x " << c.index_head_dim << " top-" << c.index_topk << "; mHC x"
      << c.hc_mult << "\n";
    o << "schedule    layer  attention  ratio  routing\n";
    const int layers = static_cast<int>(c.num_layers + (c.has_mtp() ? 1 : 0));
    for (int l = 0; l < layers; ++l) {
        char line[96];
        const bool mtp = l == c.num_layers;
        std::snprintf(line, sizeof line, "            %-6s %-10s %-6d %s%s\n", std::to_string(l).c_str(),
                      attn_kind_name(c.attn_kind(l)), c.compress_ratio(l), route_name(c.route_kind(l)),
                      mtp ? (r.has_mtp ? "  (MTP)" : "  (MTP, not in this checkpoint)") : "");
        o << line;
    }
    o << "dtypes      dtype       tensors            bytes\n";
    for (const auto& d : r.by_dtype) {
        char line[128];
        std::snprintf(line, sizeof line, "            %-10s %8s %20s\n", std::string(dtype_name(d.dtype)).c_str(),
                      with_commas(d.tensors).c_str(), with_commas(d.bytes).c_str());
        o << line;
    }
    o << "tensors     " << with_commas(r.tensors) << "\n";
    o << "bytes       " << with_commas(r.bytes) << " (" << human_bytes(r.bytes) << ")\n";
    char share[32];
    std::snprintf(share, sizeof share, "%.2f%%", r.params ? 100.0 * r.mtp_params / r.params : 0.0);
    o << "parameters  " << with_commas(r.params) << " (MTP " << with_commas(r.mtp_params) << " = " << share << ")\n";
    o << "memory      weights " << human_bytes(r.bytes) << " + KV cache per sequence (" << kv_entry_bytes(c)
      << "-byte FP8 entries, FP4 indexer keys):\n";
    for (const auto& k : r.kv) {
        o << "            " << context_label(k.tokens) << " tokens: KV " << human_bytes(k.bytes) << ", total "
          << human_bytes(r.bytes + k.bytes) << "\n";
    }
    return o.str();
}

std::string format_report_json(const InspectReport& r) {
    using ojson = nlohmann::ordered_json;
    const ModelConfig& c = r.config;
    ojson j;
    j["dir"] = r.dir.string();
    j["layout"] = layout_name(r.layout);
    j["files"] = r.files;
    j["config"] = {{"name", c.name},
                   {"vocab_size", c.vocab_size},
                   {"hidden_size", c.hidden_size},
                   {"num_layers", c.num_layers},
                   {"num_mtp_layers", c.num_mtp_layers},
                   {"num_heads", c.num_heads},
                   {"head_dim", c.head_dim},
                   {"q_lora_rank", c.q_lora_rank},
                   {"o_groups", c.o_groups},
                   {"o_lora_rank", c.o_lora_rank},
                   {"n_routed_experts", c.n_routed_experts},
                   {"n_experts_per_token", c.n_experts_per_token},
                   {"moe_inter_dim", c.moe_inter_dim},
                   {"num_hash_layers", c.num_hash_layers},
                   {"expert_format", expert_format_name(c.expert_format)},
                   {"compress_ratios", c.compress_ratios}};
    ojson schedule = ojson::array();
    const int layers = static_cast<int>(c.num_layers + (c.has_mtp() ? 1 : 0));
    for (int l = 0; l < layers; ++l) {
        schedule.push_back({{"layer", l},
                            {"attention", attn_kind_name(c.attn_kind(l))},
                            {"compress_ratio", c.compress_ratio(l)},
                            {"routing", route_name(c.route_kind(l))},
                            {"mtp", l == c.num_layers}});
    }
    j["schedule"] = std::move(schedule);
    ojson dtypes = ojson::object();
    for (const auto& d : r.by_dtype) dtypes[std::string(dtype_name(d.dtype))] = {{"tensors", d.tensors}, {"bytes", d.bytes}};
    j["dtypes"] = std::move(dtypes);
    j["tensors"] = r.tensors;
    j["bytes"] = r.bytes;
    j["parameters"] = r.params;
    j["mtp_parameters"] = r.mtp_params;
    j["kv_entry_bytes"] = kv_entry_bytes(c);
    ojson kv = ojson::array();
    for (const auto& k : r.kv) kv.push_back({{"tokens", k.tokens}, {"kv_bytes", k.bytes}, {"total_bytes", r.bytes + k.bytes}});
    j["memory"] = {{"weights_bytes", r.bytes}, {"per_sequence", std::move(kv)}};
    return j.dump(2) + "\n";
}

}  // namespace dsv4::model
