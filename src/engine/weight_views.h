// The engine's view of the checkpoint: every weight of model::ModelWeights turned into the backend's WeightView
// once at load, through the backend's one bridge backend::weight_view (backend/ops.h). Formats the ops read
// directly point into the memory mapping; the rest are exact f32 copies held by a backend::WeightCopies (the CPU
// reference's fallback, documented at weight_view).
#pragma once

#include <memory>
#include <vector>

#include "backend/ops.h"
#include "dsv4/status.h"
#include "model/config.h"
#include "model/weights.h"

namespace dsv4::engine {

using backend::WeightView;

struct HcViews {
    WeightView fn, base, scale;
};

struct CompressorViews {
    WeightView wkv, wgate, ape, norm;
};

struct AttentionViews {
    WeightView sink, wq_a, q_norm, wq_b, wkv, kv_norm, wo_a, wo_b;
    CompressorViews compressor;          // CSA and HCA
    WeightView index_wq_b, index_weights_proj;  // CSA
    CompressorViews index_compressor;    // CSA (c = 128)
};

struct MoeViews {
    WeightView gate, gate_bias;
    std::vector<int64_t> tid2eid;        // [vocab, K] (hash layers), copied as int64
    backend::ExpertWeights shared;
    std::vector<backend::ExpertWeights> experts;  // [E]
};

struct LayerViews {
    int index = 0;
    model::AttnKind attn_kind = model::AttnKind::kSWA;
    bool hash_routed = false;
    int ratio = 0;
    WeightView attn_norm, ffn_norm;
    HcViews hc_attn, hc_ffn;
    AttentionViews attn;
    MoeViews ffn;
};

struct MtpViews {
    LayerViews block;
    WeightView e_proj, h_proj, enorm, hnorm, norm;
    HcViews hc_head;
};

struct ModelViews {
    WeightView embed, head, norm;
    HcViews hc_head;
    std::vector<LayerViews> layers;
    std::unique_ptr<MtpViews> mtp;       // null without an MTP block
};

// Builds every view (absent optional weights stay empty); a weight in a format nothing can read (e.g. integer
// where a matrix is expected) is a Status naming the tensor. `copies` receives the f32 fallback copies.
Result<ModelViews> make_model_views(const model::ModelWeights& w, const model::ModelConfig& cfg,
                                    backend::WeightCopies& copies);

}  // namespace dsv4::engine
