#include "engine/weight_views.h"

#include <cstring>
#include <string>

namespace dsv4::engine {

using backend::WeightFormat;
using model::WeightRef;

const float* WeightStore::add(std::vector<float> values) {
    owned_.push_back(std::make_unique<std::vector<float>>(std::move(values)));
    return owned_.back()->data();
}

namespace {

// An exact f32 copy of the weight (any format model::dequantize_rows reads).
WeightView owned_f32(const WeightRef& r, WeightStore& store) {
    WeightView v;
    v.format = WeightFormat::kF32;
    v.rows = r.rows();
    v.cols = r.cols();
    std::vector<float> values(size_t(v.rows * v.cols));
    model::dequantize_rows(r, 0, v.rows, values.data());
    v.data = store.add(std::move(values));
    return v;
}

Result<WeightView> view_of(const WeightRef& r, WeightStore& store) {
    WeightView v;
    if (!r.present()) return v;
    v.rows = r.rows();
    v.cols = r.cols();
    const int64_t off = r.row_offset;
    switch (r.format) {
        case model::WeightFormat::kF32:
            v.format = WeightFormat::kF32;
            v.data = r.data + off * v.cols * 4;
            return v;
        case model::WeightFormat::kBF16:
            v.format = WeightFormat::kBF16;
            v.data = r.data + off * v.cols * 2;
            return v;
        case model::WeightFormat::kFP8Block128:
            if (r.scale_dtype == DType::kF8E8M0 && off % 128 == 0) {
                v.format = WeightFormat::kFP8Block;
                v.data = r.data + off * v.cols;
                const int64_t scale_cols = (v.cols + 127) / 128;
                v.scale = r.scale + (off / 128) * scale_cols;
                return v;
            }
            return owned_f32(r, store);
        case model::WeightFormat::kMXFP4:
            if (r.scale_dtype == DType::kF8E8M0) {
                v.format = WeightFormat::kMXFP4;
                v.data = r.data + off * (v.cols / 2);
                v.scale = r.scale + off * (v.cols / 32);
                return v;
            }
            return owned_f32(r, store);
        case model::WeightFormat::kF16:
        case model::WeightFormat::kNVFP4:
            return owned_f32(r, store);
        default:
            return unsupported("weight '" + r.name + "' has format " + model::weight_format_name(r.format) +
                               ", which no matrix op reads");
    }
}

#define DSV4_VIEW(dst, ref) DSV4_ASSIGN_OR_RETURN(dst, view_of(ref, store))

Status hc_views(const model::HyperConnWeights& w, HcViews* v, WeightStore& store) {
    DSV4_VIEW(v->fn, w.fn);
    DSV4_VIEW(v->base, w.base);
    DSV4_VIEW(v->scale, w.scale);
    return Status::ok();
}

Status compressor_views(const model::CompressorWeights& w, CompressorViews* v, WeightStore& store) {
    DSV4_VIEW(v->wkv, w.wkv);
    DSV4_VIEW(v->wgate, w.wgate);
    DSV4_VIEW(v->ape, w.ape);
    DSV4_VIEW(v->norm, w.norm);
    return Status::ok();
}

Status expert_views(const model::ExpertWeights& w, backend::ExpertWeights* v, WeightStore& store) {
    DSV4_VIEW(v->w1, w.w1);
    DSV4_VIEW(v->w2, w.w2);
    DSV4_VIEW(v->w3, w.w3);
    return Status::ok();
}

Status layer_views(const model::LayerWeights& w, const model::ModelConfig& cfg, LayerViews* v, WeightStore& store) {
    v->index = w.index;
    v->attn_kind = w.attn_kind;
    v->hash_routed = w.route_kind == model::RouteKind::kHash;
    v->ratio = w.compress_ratio;
    DSV4_VIEW(v->attn_norm, w.attn_norm);
    DSV4_VIEW(v->ffn_norm, w.ffn_norm);
    DSV4_RETURN_IF_ERROR(hc_views(w.hc_attn, &v->hc_attn, store));
    DSV4_RETURN_IF_ERROR(hc_views(w.hc_ffn, &v->hc_ffn, store));
    const model::AttentionWeights& a = w.attn;
    AttentionViews& av = v->attn;
    DSV4_VIEW(av.sink, a.sink);
    DSV4_VIEW(av.wq_a, a.wq_a);
    DSV4_VIEW(av.q_norm, a.q_norm);
    DSV4_VIEW(av.wq_b, a.wq_b);
    DSV4_VIEW(av.wkv, a.wkv);
    DSV4_VIEW(av.kv_norm, a.kv_norm);
    DSV4_VIEW(av.wo_a, a.wo_a);
    DSV4_VIEW(av.wo_b, a.wo_b);
    DSV4_RETURN_IF_ERROR(compressor_views(a.compressor, &av.compressor, store));
    DSV4_VIEW(av.index_wq_b, a.indexer.wq_b);
    DSV4_VIEW(av.index_weights_proj, a.indexer.weights_proj);
    DSV4_RETURN_IF_ERROR(compressor_views(a.indexer.compressor, &av.index_compressor, store));
    if (w.attn_kind != model::AttnKind::kSWA && av.compressor.wkv.empty())
        return corrupt("layer " + std::to_string(w.index) + " is compressed but has no compressor weights");
    if (w.attn_kind == model::AttnKind::kCSA && av.index_wq_b.empty())
        return corrupt("layer " + std::to_string(w.index) + " is CSA but has no indexer weights");

    const model::MoEWeights& m = w.ffn;
    DSV4_VIEW(v->ffn.gate, m.gate);
    DSV4_VIEW(v->ffn.gate_bias, m.gate_bias);
    if (v->hash_routed) {
        if (!m.tid2eid.present())
            return corrupt("layer " + std::to_string(w.index) + " is hash-routed but has no tid2eid table");
        const int64_t n = m.tid2eid.numel();
        v->ffn.tid2eid.resize(size_t(n));
        if (m.tid2eid.dtype == DType::kI64) {
            std::memcpy(v->ffn.tid2eid.data(), m.tid2eid.data, size_t(n) * 8);
        } else if (m.tid2eid.dtype == DType::kI32) {
            for (int64_t i = 0; i < n; ++i) {
                int32_t x;
                std::memcpy(&x, m.tid2eid.data + 4 * i, 4);
                v->ffn.tid2eid[size_t(i)] = x;
            }
        } else {
            return unsupported("tid2eid '" + m.tid2eid.name + "' must be I64 or I32");
        }
        if (n != cfg.vocab_size * cfg.n_experts_per_token)
            return corrupt("tid2eid '" + m.tid2eid.name + "' does not hold vocab x experts_per_token ids");
    }
    DSV4_RETURN_IF_ERROR(expert_views(m.shared, &v->ffn.shared, store));
    v->ffn.experts.resize(m.experts.size());
    for (size_t e = 0; e < m.experts.size(); ++e)
        DSV4_RETURN_IF_ERROR(expert_views(m.experts[e], &v->ffn.experts[e], store));
    return Status::ok();
}

}  // namespace

Result<ModelViews> make_model_views(const model::ModelWeights& w, const model::ModelConfig& cfg, WeightStore& store) {
    ModelViews v;
    DSV4_VIEW(v.embed, w.embed);
    DSV4_VIEW(v.head, w.head);
    DSV4_VIEW(v.norm, w.norm);
    DSV4_RETURN_IF_ERROR(hc_views(w.hc_head, &v.hc_head, store));
    v.layers.resize(w.layers.size());
    for (size_t i = 0; i < w.layers.size(); ++i)
        DSV4_RETURN_IF_ERROR(layer_views(w.layers[i], cfg, &v.layers[i], store));
    if (w.mtp) {
        v.mtp = std::make_unique<MtpViews>();
        DSV4_RETURN_IF_ERROR(layer_views(w.mtp->block, cfg, &v.mtp->block, store));
        DSV4_VIEW(v.mtp->e_proj, w.mtp->e_proj);
        DSV4_VIEW(v.mtp->h_proj, w.mtp->h_proj);
        DSV4_VIEW(v.mtp->enorm, w.mtp->enorm);
        DSV4_VIEW(v.mtp->hnorm, w.mtp->hnorm);
        DSV4_VIEW(v.mtp->norm, w.mtp->norm);
        DSV4_RETURN_IF_ERROR(hc_views(w.mtp->hc_head, &v.mtp->hc_head, store));
    }
    return v;
}

}  // namespace dsv4::engine
