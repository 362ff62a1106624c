// The CPU forward of DeepSeek-V4 over one chunk of a sequence (MODEL_SPEC §5, §6, §8.2): embedding, the layer
// loop (mHC → attention with window ring / compressor / indexer → mHC → MoE), the head. A chunk of T tokens at
// positions p0 .. p0+T-1 reads and advances the sequence state, so any split of a prompt into chunks computes the
// same function as one pass (the invariant tests/model checks).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/workspace.h"
#include "backend/ops.h"
#include "engine/sequence_state.h"
#include "engine/weight_views.h"
#include "model/config.h"

namespace dsv4::engine {

// Per-session work buffers for forward passes of up to `rows` tokens; allocated once (no allocation per step).
struct ForwardScratch {
    int64_t rows = 0;                // S
    std::vector<int64_t> positions;  // [S]
    std::vector<float> streams_a, streams_b;  // [S, 4, D] mHC streams (double-buffered: hc_post cannot alias)
    std::vector<float> hc_x;         // [S, D] collapsed streams
    std::vector<float> normed;       // [S, D]
    std::vector<float> block_out;    // [S, D] attention / MoE output
    std::vector<float> pre, post;    // [S, 4]
    std::vector<float> comb;         // [S, 4, 4]
    // attention
    std::vector<float> qr;           // [S, q_lora]
    std::vector<float> q;            // [S, H, 512]
    std::vector<float> attn;         // [S, H, 512]
    std::vector<float> z;            // [S, G·R]
    std::vector<float> series_kv, series_score;  // [m-1+S, width] open window + chunk projections
    std::vector<float> pooled;       // [S/4+2, 512]
    std::vector<int32_t> idx;        // [S, 128 + max(index_topk, HCA entries)]
    int64_t idx_width = 0;
    // indexer
    std::vector<float> index_q;      // [S, IH, 128]
    std::vector<float> index_w;      // [S, IH]
    std::vector<float> index_scores; // [S, max CSA entries]
    std::vector<int32_t> index_topk; // [S, index_topk]
    // MoE
    std::vector<int32_t> route_idx;  // [S, K]
    std::vector<float> route_w;      // [S, K]
    std::vector<float> expert_out;   // [S, K, D]
    std::vector<float> shared_out;   // [S, D]
};

ForwardScratch make_forward_scratch(const model::ModelConfig& cfg, int64_t rows, int64_t max_context);

// The largest shapes the CPU ops see in passes of up to `rows` tokens (the MTP block's h_proj runs rows·hc_mult
// token rows), for sizing the session's backend::cpu::Workspace once.
backend::cpu::WorkspaceLimits workspace_limits(const model::ModelConfig& cfg, int64_t rows, int64_t max_context,
                                               int threads);

// What a forward needs besides the state: config, weights, numerics and threads, RoPE tables.
struct ForwardContext {
    const model::ModelConfig* cfg = nullptr;
    const ModelViews* weights = nullptr;
    backend::Exec exec;
    backend::RopeFreqs freqs_window;     // θ = rope_theta, no YaRN (SWA layers, MTP)
    backend::RopeFreqs freqs_compress;   // θ = compress_rope_theta with YaRN (CSA / HCA layers)
};

ForwardContext make_forward_context(const model::ModelConfig& cfg, const ModelViews& weights, backend::Exec exec);

// Runs tokens[0..n) (n <= scratch.rows, ids already range-checked) at state.position and advances it by n.
// logits: [n, vocab] f32; final_streams (may be null): the last layer's streams [n, 4, D], before the head.
// On error the state is unusable until reset (partially absorbed layers).
Status forward_chunk(const ForwardContext& ctx, SequenceState& state, ForwardScratch& scratch, const int32_t* tokens,
                     int64_t n, float* logits, float* final_streams = nullptr);

// One Block (§5.2) on streams [n, 4, D] in place; spare is a work buffer of the same size. Positions: s.positions.
Status block_forward(const ForwardContext& ctx, const LayerViews& layer, LayerState& ls, const SequenceState& state,
                     ForwardScratch& s, const int32_t* tokens, int64_t n, float* streams, float* spare);
// The head (§5.6): hc_head collapse, RMSNorm `norm`, the model's f32 lm head → logits [n, vocab].
Status head_forward(const ForwardContext& ctx, const HcViews& hc_head, const backend::WeightView& norm,
                    ForwardScratch& s, const float* streams, int64_t n, float* logits);

// One attention sub-block (MODEL_SPEC §5.4) of `layer` for the chunk in `scratch` (positions filled):
// x [n, D] attn_norm output → out [n, D]. Absorbs the chunk into the layer's state (ring, compressors, entries).
Status attention_block(const ForwardContext& ctx, const LayerViews& layer, LayerState& ls, const SequenceState& state,
                       ForwardScratch& s, const float* x, int64_t n, float* out);

// One MoE sub-block (MODEL_SPEC §5.5): x [n, D] ffn_norm output → out [n, D].
Status moe_block(const ForwardContext& ctx, const LayerViews& layer, ForwardScratch& s, const int32_t* tokens,
                 const float* x, int64_t n, float* out);

}  // namespace dsv4::engine
