// map_weights: binds checkpoint tensors to ModelWeights. The list of what must exist comes from
// logical_tensors() (the same list checkpoint_schema encodes); each logical tensor is accepted in any encoding
// of docs/checkpoint-formats.md that fits its kind, and every problem is collected before one error is returned.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "io/safetensors.h"
#include "model/weights.h"

namespace dsv4::model {

const char* weight_format_name(WeightFormat f) {
    switch (f) {
        case WeightFormat::kNone: return "none";
        case WeightFormat::kF32: return "f32";
        case WeightFormat::kBF16: return "bf16";
        case WeightFormat::kF16: return "f16";
        case WeightFormat::kFP8Block128: return "fp8-block128";
        case WeightFormat::kMXFP4: return "mxfp4";
        case WeightFormat::kNVFP4: return "nvfp4";
        case WeightFormat::kI64: return "i64";
        case WeightFormat::kI32: return "i32";
    }
    return "?";
}

int64_t WeightRef::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

namespace {

constexpr size_t kMaxListedProblems = 20;

std::string shape_str(const std::vector<int64_t>& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
}

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t numel_of(const std::vector<int64_t>& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
}

std::optional<WeightFormat> float_format(DType t) {
    switch (t) {
        case DType::kF32: return WeightFormat::kF32;
        case DType::kBF16: return WeightFormat::kBF16;
        case DType::kF16: return WeightFormat::kF16;
        default: return std::nullopt;
    }
}

class Binder {
public:
    Binder(const std::vector<TensorInfo>& tensors, const ModelConfig& c, Layout layout)
        : c_(c), layout_(layout) {
        for (const TensorInfo& t : tensors) by_name_[t.name] = &t;
    }

    bool has(const std::string& name) const { return by_name_.count(name) > 0; }

    const TensorInfo* take(const std::string& name) {
        auto it = by_name_.find(name);
        if (it == by_name_.end()) return nullptr;
        used_.insert(name);
        return it->second;
    }

    void missing(const std::string& name, const std::string& want) { missing_.push_back(name + " (want " + want + ")"); }
    void wrong(const TensorInfo& t, const std::string& want) {
        wrong_.push_back(t.name + ": stored " + std::string(dtype_name(t.dtype)) + " " + shape_str(t.shape) +
                         ", want " + want);
    }

    // BF16 / F32 parameters: any float storage of exactly the logical shape.
    void bind_float(WeightRef* out, const std::string& name, const std::vector<int64_t>& shape) {
        const std::string want = "BF16/F16/F32 " + shape_str(shape);
        const TensorInfo* t = take(name);
        if (!t) return missing(name, want);
        auto f = float_format(t->dtype);
        if (!f || t->shape != shape) return wrong(*t, want);
        fill(out, *t, *f, shape);
    }

    void bind_table(WeightRef* out, const std::string& name, const std::vector<int64_t>& shape) {
        const std::string want = "I64 " + shape_str(shape) + " expert ids";
        const TensorInfo* t = take(name);
        if (!t) return missing(name, want);
        if ((t->dtype != DType::kI64 && t->dtype != DType::kI32) || t->shape != shape) return wrong(*t, want);
        fill(out, *t, t->dtype == DType::kI64 ? WeightFormat::kI64 : WeightFormat::kI32, shape);
        if (!t->data) return;
        // The reference indexes experts with these ids directly: one out of range would read another tensor.
        const int64_t n = numel_of(shape);
        for (int64_t i = 0; i < n; ++i) {
            int64_t id;
            if (t->dtype == DType::kI64) {
                std::memcpy(&id, t->data + 8 * i, 8);
            } else {
                int32_t v;
                std::memcpy(&v, t->data + 4 * i, 4);
                id = v;
            }
            if (id < 0 || id >= c_.n_routed_experts) {
                wrong_.push_back(name + ": entry " + std::to_string(i) + " (token " + std::to_string(i / shape[1]) +
                                 ") is expert id " + std::to_string(id) + ", outside [0, n_routed_experts = " +
                                 std::to_string(c_.n_routed_experts) + ")");
                return;
            }
        }
    }

    // A linear [out, in]: float (dequantised), FP8 e4m3 + 128x128 block scales (UE8M0 or F32) and, for routed
    // experts, MXFP4 or NVFP4.
    void bind_linear(WeightRef* out, const std::string& name, const std::vector<int64_t>& shape, bool expert) {
        const int64_t rows = shape[0], cols = shape[1];
        const std::vector<int64_t> block_scales = {cdiv(rows, 128), cdiv(cols, 128)};
        std::string want = "F8_E4M3 " + shape_str(shape) + " + .scale F8_E8M0/F32 " + shape_str(block_scales);
        if (expert) want += ", or I8/U8 " + shape_str({rows, cols / 2}) + " (MXFP4/NVFP4) + .scale";
        want += ", or BF16/F16/F32 " + shape_str(shape);
        const std::string sname = scale_name(name), gname = global_scale_name(name);
        const TensorInfo* t = take(name);
        if (!t) {  // its sidecars, if any, go with it: one line for the user, not three
            take(sname);
            take(gname);
            return missing(name, want);
        }
        // A rejected weight takes its sidecars with it, so they are not reported a second time as unexpected.
        auto reject = [&](const TensorInfo& bad, const std::string& w) {
            take(sname);
            take(gname);
            wrong(bad, w);
        };
        if (auto f = float_format(t->dtype)) {
            if (t->shape != shape) return reject(*t, want);
            return fill(out, *t, *f, shape);
        }
        if (t->dtype == DType::kF8E4M3) {
            if (t->shape != shape) return reject(*t, want);
            const TensorInfo* s = take(sname);
            const std::string swant = "F8_E8M0 or F32 " + shape_str(block_scales);
            if (!s) return missing(sname, swant);
            if ((s->dtype != DType::kF8E8M0 && s->dtype != DType::kF32) || s->shape != block_scales)
                return reject(*s, swant);
            fill(out, *t, WeightFormat::kFP8Block128, shape);
            return fill_scale(out, *s);
        }
        if (expert && (t->dtype == DType::kI8 || t->dtype == DType::kU8)) {
            if (t->shape != std::vector<int64_t>{rows, cols / 2} || cols % 32 != 0) return reject(*t, want);
            const TensorInfo* s = take(sname);
            const std::vector<int64_t> mx = {rows, cols / 32}, nv = {rows, cols / 16};
            const std::string swant = "F8_E8M0 " + shape_str(mx) + " (MXFP4) or F8_E4M3 " + shape_str(nv) + " (NVFP4)";
            if (!s) return missing(sname, swant);
            if (s->dtype == DType::kF8E8M0 && s->shape == mx) {
                fill(out, *t, WeightFormat::kMXFP4, shape);
                return fill_scale(out, *s);
            }
            if (s->dtype != DType::kF8E4M3 || s->shape != nv) return reject(*s, swant);
            const TensorInfo* g = take(gname);
            if (!g) return missing(gname, "F32 [1] NVFP4 global scale");
            if (g->dtype != DType::kF32 || numel_of(g->shape) != 1) return reject(*g, "F32 [1] NVFP4 global scale");
            fill(out, *t, WeightFormat::kNVFP4, shape);
            fill_scale(out, *s);
            if (g->data) std::memcpy(&out->global_scale, g->data, 4);
            return;
        }
        reject(*t, want);
    }

    // transformers' merged experts of one layer: gate_up_proj [E, 2I, D] (w1 rows, then w3 rows), down_proj
    // [E, D, I]; both stored as floats.
    void bind_merged_experts(MoEWeights* ffn, int layer) {
        const int64_t E = c_.n_routed_experts, I = c_.moe_inter_dim, D = c_.hidden_size;
        auto [gate_up_name, down_name] = merged_expert_names(layer);
        const TensorInfo* gu = take_float(gate_up_name, {E, 2 * I, D});
        const TensorInfo* dn = take_float(down_name, {E, D, I});
        for (int64_t e = 0; e < E; ++e) {
            ExpertWeights& x = ffn->experts[static_cast<size_t>(e)];
            if (gu) {
                fill(&x.w1, *gu, *float_format(gu->dtype), {I, D});
                x.w1.row_offset = e * 2 * I;
                fill(&x.w3, *gu, *float_format(gu->dtype), {I, D});
                x.w3.row_offset = e * 2 * I + I;
            }
            if (dn) {
                fill(&x.w2, *dn, *float_format(dn->dtype), {D, I});
                x.w2.row_offset = e * D;
            }
        }
    }

    // Tensors nobody asked for (mtp.* is ignored in the transformers layout, as transformers does).
    std::vector<std::string> unexpected() const {
        std::vector<std::string> r;
        for (const auto& [name, t] : by_name_) {
            if (used_.count(name)) continue;
            if (layout_ == Layout::kTransformers && name.rfind("mtp.", 0) == 0) continue;
            r.push_back(name);
        }
        return r;
    }

    std::vector<std::string> missing_, wrong_;

private:
    const TensorInfo* take_float(const std::string& name, const std::vector<int64_t>& shape) {
        const std::string want = "BF16/F16/F32 " + shape_str(shape);
        const TensorInfo* t = take(name);
        if (!t) {
            missing(name, want);
            return nullptr;
        }
        if (!float_format(t->dtype) || t->shape != shape) {
            wrong(*t, want);
            return nullptr;
        }
        return t;
    }

    static void fill(WeightRef* out, const TensorInfo& t, WeightFormat f, const std::vector<int64_t>& shape) {
        out->name = t.name;
        out->format = f;
        out->dtype = t.dtype;
        out->data = t.data;
        out->shape = shape;
    }
    static void fill_scale(WeightRef* out, const TensorInfo& s) {
        out->scale = s.data;
        out->scale_dtype = s.dtype;
        out->scale_shape = s.shape;
    }

    const ModelConfig& c_;
    Layout layout_;
    std::map<std::string, const TensorInfo*, std::less<>> by_name_;
    std::set<std::string> used_;
};

void register_hc(std::map<std::string, WeightRef*>& m, const std::string& p, const std::string& which,
                 HyperConnWeights& hc) {
    m[p + "hc_" + which + "_fn"] = &hc.fn;
    m[p + "hc_" + which + "_base"] = &hc.base;
    m[p + "hc_" + which + "_scale"] = &hc.scale;
}

void register_compressor(std::map<std::string, WeightRef*>& m, const std::string& p, CompressorWeights& cw) {
    m[p + "wkv.weight"] = &cw.wkv;
    m[p + "wgate.weight"] = &cw.wgate;
    m[p + "ape"] = &cw.ape;
    m[p + "norm.weight"] = &cw.norm;
}

// Official name -> slot, for one block.
void register_block(std::map<std::string, WeightRef*>& m, const std::string& p, LayerWeights& L) {
    m[p + "attn_norm.weight"] = &L.attn_norm;
    m[p + "ffn_norm.weight"] = &L.ffn_norm;
    register_hc(m, p, "attn", L.hc_attn);
    register_hc(m, p, "ffn", L.hc_ffn);
    AttentionWeights& a = L.attn;
    m[p + "attn.attn_sink"] = &a.sink;
    m[p + "attn.wq_a.weight"] = &a.wq_a;
    m[p + "attn.q_norm.weight"] = &a.q_norm;
    m[p + "attn.wq_b.weight"] = &a.wq_b;
    m[p + "attn.wkv.weight"] = &a.wkv;
    m[p + "attn.kv_norm.weight"] = &a.kv_norm;
    m[p + "attn.wo_a.weight"] = &a.wo_a;
    m[p + "attn.wo_b.weight"] = &a.wo_b;
    register_compressor(m, p + "attn.compressor.", a.compressor);
    m[p + "attn.indexer.wq_b.weight"] = &a.indexer.wq_b;
    m[p + "attn.indexer.weights_proj.weight"] = &a.indexer.weights_proj;
    register_compressor(m, p + "attn.indexer.compressor.", a.indexer.compressor);
    MoEWeights& f = L.ffn;
    m[p + "ffn.gate.weight"] = &f.gate;
    m[p + "ffn.gate.bias"] = &f.gate_bias;
    m[p + "ffn.gate.tid2eid"] = &f.tid2eid;
    m[p + "ffn.shared_experts.w1.weight"] = &f.shared.w1;
    m[p + "ffn.shared_experts.w2.weight"] = &f.shared.w2;
    m[p + "ffn.shared_experts.w3.weight"] = &f.shared.w3;
    for (size_t e = 0; e < f.experts.size(); ++e) {
        const std::string ep = p + "ffn.experts." + std::to_string(e) + ".";
        m[ep + "w1.weight"] = &f.experts[e].w1;
        m[ep + "w2.weight"] = &f.experts[e].w2;
        m[ep + "w3.weight"] = &f.experts[e].w3;
    }
}

void init_block(LayerWeights& L, const ModelConfig& c, int index) {
    L.index = index;
    L.attn_kind = c.attn_kind(index);
    L.route_kind = c.route_kind(index);
    L.compress_ratio = c.compress_ratio(index);
    L.ffn.experts.resize(static_cast<size_t>(c.n_routed_experts));
}

std::string format_problems(std::string_view source, const ModelConfig& c, Layout layout, const Binder& b,
                            const std::vector<std::string>& unexpected, const std::string& hint) {
    std::vector<std::string> lines;
    for (const std::string& s : b.missing_) lines.push_back("missing " + s);
    for (const std::string& s : unexpected) lines.push_back("unexpected " + s);
    for (const std::string& s : b.wrong_) lines.push_back("mis-shaped/mis-typed " + s);
    std::ostringstream m;
    m << source << ": does not match config '" << c.name << "' (" << layout_name(layout) << " layout): "
      << b.missing_.size() << " missing, " << unexpected.size() << " unexpected, " << b.wrong_.size()
      << " mis-shaped or mis-typed tensor(s)";
    if (!hint.empty()) m << "\n  " << hint;
    for (size_t i = 0; i < lines.size() && i < kMaxListedProblems; ++i) m << "\n  " << lines[i];
    if (lines.size() > kMaxListedProblems) m << "\n  ... and " << (lines.size() - kMaxListedProblems) << " more";
    return m.str();
}

}  // namespace

Result<Layout> detect_layout(const std::vector<TensorInfo>& tensors) {
    bool official = false, transformers = false;
    for (const TensorInfo& t : tensors) {
        if (t.name == "embed.weight" || t.name.rfind("layers.", 0) == 0) official = true;
        if (t.name == "model.embed_tokens.weight" || t.name == "lm_head.weight" || t.name.rfind("model.layers.", 0) == 0)
            transformers = true;
    }
    if (official && transformers)
        return corrupt("checkpoint mixes official names (embed.weight, layers.*) and transformers names "
                       "(model.embed_tokens.weight, model.layers.*)");
    if (official) return Layout::kOfficial;
    if (transformers) return Layout::kTransformers;
    return corrupt("checkpoint holds neither embed.weight / layers.* (official) nor model.embed_tokens.weight / "
                   "model.layers.* (transformers): not a DeepSeek-V4 checkpoint");
}

Result<ModelWeights> map_weights(const std::vector<TensorInfo>& tensors, const ModelConfig& c,
                                 std::string_view source) {
    DSV4_RETURN_IF_ERROR(validate_config(c));
    DSV4_ASSIGN_OR_RETURN(Layout layout, detect_layout(tensors));
    const bool with_mtp = layout == Layout::kOfficial && c.num_mtp_layers > 0;

    ModelWeights w;
    w.layout = layout;
    w.layers.resize(static_cast<size_t>(c.num_layers));
    std::map<std::string, WeightRef*> slots = {
        {"embed.weight", &w.embed},          {"head.weight", &w.head},
        {"norm.weight", &w.norm},            {"hc_head_fn", &w.hc_head.fn},
        {"hc_head_base", &w.hc_head.base},   {"hc_head_scale", &w.hc_head.scale},
    };
    for (int i = 0; i < c.num_layers; ++i) {
        init_block(w.layers[static_cast<size_t>(i)], c, i);
        register_block(slots, "layers." + std::to_string(i) + ".", w.layers[static_cast<size_t>(i)]);
    }
    if (with_mtp) {
        w.mtp.emplace();
        MtpWeights& t = *w.mtp;
        init_block(t.block, c, static_cast<int>(c.num_layers));
        register_block(slots, "mtp.0.", t.block);
        slots["mtp.0.e_proj.weight"] = &t.e_proj;
        slots["mtp.0.h_proj.weight"] = &t.h_proj;
        slots["mtp.0.enorm.weight"] = &t.enorm;
        slots["mtp.0.hnorm.weight"] = &t.hnorm;
        slots["mtp.0.norm.weight"] = &t.norm;
        slots["mtp.0.hc_head_fn"] = &t.hc_head.fn;
        slots["mtp.0.hc_head_base"] = &t.hc_head.base;
        slots["mtp.0.hc_head_scale"] = &t.hc_head.scale;
    }

    Binder b(tensors, c, layout);
    int64_t mtp_expected = 0;
    for (const LogicalTensor& t : logical_tensors(c, with_mtp)) {
        auto slot = slots.find(t.name);
        if (slot == slots.end()) return internal_error("weight map has no slot for logical tensor " + t.name);
        if (t.name.rfind("mtp.", 0) == 0) ++mtp_expected;
        if (layout == Layout::kTransformers && t.kind == ParamKind::kExpert) {
            // Bound once per layer from the merged tensors, when expert 0's w1 comes by.
            if (t.name.find(".ffn.experts.0.w1.") != std::string::npos) {
                const int layer = std::stoi(t.name.substr(7));
                b.bind_merged_experts(&w.layers[static_cast<size_t>(layer)].ffn, layer);
            }
            continue;
        }
        std::string name = t.name;
        if (layout == Layout::kTransformers) {
            name = transformers_name(t.name);
            // Some transformers versions nest weights_proj under the indexer's scorer module.
            const std::string plain = ".indexer.weights_proj.", nested = ".indexer.scorer.weights_proj.";
            if (size_t at = name.find(plain); at != std::string::npos && !b.has(name)) {
                std::string alt = name;
                alt.replace(at, plain.size(), nested);
                if (b.has(alt)) name = alt;
            }
        }
        switch (t.kind) {
            case ParamKind::kBF16:
            case ParamKind::kF32: b.bind_float(slot->second, name, t.shape); break;
            case ParamKind::kTable: b.bind_table(slot->second, name, t.shape); break;
            case ParamKind::kLinear: b.bind_linear(slot->second, name, t.shape, false); break;
            case ParamKind::kExpert: b.bind_linear(slot->second, name, t.shape, true); break;
        }
    }

    std::vector<std::string> unexpected = b.unexpected();
    if (b.missing_.empty() && b.wrong_.empty() && unexpected.empty()) return w;

    // A config that promises MTP over a checkpoint without any mtp.* tensor: say so once instead of listing them.
    std::string hint;
    if (with_mtp) {
        int64_t mtp_missing = 0;
        for (const std::string& s : b.missing_) mtp_missing += s.rfind("mtp.", 0) == 0;
        if (mtp_missing > 0 && mtp_missing >= mtp_expected / 2) {
            hint = "the config declares num_nextn_predict_layers 1 but the checkpoint lacks the mtp.0.* block; set "
                   "num_nextn_predict_layers to 0 in config.json to load it without MTP";
        }
    }
    return corrupt(format_problems(source, c, layout, b, unexpected, hint));
}

Result<ModelWeights> map_weights(const io::Checkpoint& ckpt, const ModelConfig& c) {
    std::vector<TensorInfo> infos;
    infos.reserve(ckpt.names().size());
    for (const std::string& name : ckpt.names()) {
        const io::Checkpoint::Tensor* t = ckpt.find(name);
        if (!t) continue;
        infos.push_back({name, t->entry->dtype, t->entry->shape, t->bytes().data()});
    }
    return map_weights(infos, c, ckpt.dir().string());
}

}  // namespace dsv4::model
