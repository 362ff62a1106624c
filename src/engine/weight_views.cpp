#include "engine/weight_views.h"

#include <cstring>
#include <string>

namespace dsv4::engine {

using model::WeightRef;
using backend::WeightCopies;

namespace {

// An absent optional weight (e.g. gate.bias of a hash layer) is an empty view.
Result<WeightView> view_of(const WeightRef& r, WeightCopies& copies) {
    if (!r.present()) return WeightView{};
    return backend::weight_view(r, &copies);
}

#define DSV4_VIEW(dst, ref) DSV4_ASSIGN_OR_RETURN(dst, view_of(ref, copies))

Status hc_views(const model::HyperConnWeights& w, HcViews* v, WeightCopies& copies) {
    DSV4_VIEW(v->fn, w.fn);
    DSV4_VIEW(v->base, w.base);
    DSV4_VIEW(v->scale, w.scale);
    return Status::ok();
}

Status compressor_views(const model::CompressorWeights& w, CompressorViews* v, WeightCopies& copies) {
    DSV4_VIEW(v->wkv, w.wkv);
    DSV4_VIEW(v->wgate, w.wgate);
    DSV4_VIEW(v->ape, w.ape);
    DSV4_VIEW(v->norm, w.norm);
    return Status::ok();
}

Status expert_views(const model::ExpertWeights& w, backend::ExpertWeights* v, WeightCopies& copies) {
    DSV4_VIEW(v->w1, w.w1);
    DSV4_VIEW(v->w2, w.w2);
    DSV4_VIEW(v->w3, w.w3);
    return Status::ok();
}

Status layer_views(const model::LayerWeights& w, const model::ModelConfig& cfg, LayerViews* v, WeightCopies& copies) {
    v->index = w.index;
    v->attn_kind = w.attn_kind;
    v->hash_routed = w.route_kind == model::RouteKind::kHash;
    v->ratio = w.compress_ratio;
    DSV4_VIEW(v->attn_norm, w.attn_norm);
    DSV4_VIEW(v->ffn_norm, w.ffn_norm);
    DSV4_RETURN_IF_ERROR(hc_views(w.hc_attn, &v->hc_attn, copies));
    DSV4_RETURN_IF_ERROR(hc_views(w.hc_ffn, &v->hc_ffn, copies));
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
    DSV4_RETURN_IF_ERROR(compressor_views(a.compressor, &av.compressor, copies));
    DSV4_VIEW(av.index_wq_b, a.indexer.wq_b);
    DSV4_VIEW(av.index_weights_proj, a.indexer.weights_proj);
    DSV4_RETURN_IF_ERROR(compressor_views(a.indexer.compressor, &av.index_compressor, copies));
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
    DSV4_RETURN_IF_ERROR(expert_views(m.shared, &v->ffn.shared, copies));
    v->ffn.experts.resize(m.experts.size());
    for (size_t e = 0; e < m.experts.size(); ++e)
        DSV4_RETURN_IF_ERROR(expert_views(m.experts[e], &v->ffn.experts[e], copies));
    return Status::ok();
}

}  // namespace

Result<ModelViews> make_model_views(const model::ModelWeights& w, const model::ModelConfig& cfg, WeightCopies& copies) {
    ModelViews v;
    DSV4_VIEW(v.embed, w.embed);
    DSV4_VIEW(v.head, w.head);
    DSV4_VIEW(v.norm, w.norm);
    DSV4_RETURN_IF_ERROR(hc_views(w.hc_head, &v.hc_head, copies));
    v.layers.resize(w.layers.size());
    for (size_t i = 0; i < w.layers.size(); ++i)
        DSV4_RETURN_IF_ERROR(layer_views(w.layers[i], cfg, &v.layers[i], copies));
    if (w.mtp) {
        v.mtp = std::make_unique<MtpViews>();
        DSV4_RETURN_IF_ERROR(layer_views(w.mtp->block, cfg, &v.mtp->block, copies));
        DSV4_VIEW(v.mtp->e_proj, w.mtp->e_proj);
        DSV4_VIEW(v.mtp->h_proj, w.mtp->h_proj);
        DSV4_VIEW(v.mtp->enorm, w.mtp->enorm);
        DSV4_VIEW(v.mtp->hnorm, w.mtp->hnorm);
        DSV4_VIEW(v.mtp->norm, w.mtp->norm);
        DSV4_RETURN_IF_ERROR(hc_views(w.mtp->hc_head, &v.mtp->hc_head, copies));
    }
    return v;
}

}  // namespace dsv4::engine
