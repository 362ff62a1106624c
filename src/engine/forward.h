// The CPU forward of DeepSeek-V4 over one batched pass (MODEL_SPEC §5, §6, §8.2): embedding, the layer loop
// (mHC → attention with window ring / compressor / indexer → mHC → MoE), the head. A pass carries the token rows of
// one or more sequences, concatenated: every weight-bound op (linears, experts, router, mHC, norms, the head) runs
// once over all rows, while the per-sequence parts (window ring, compressors, indexer, index lists, sparse
// attention) run per sequence on its own state and positions. A sequence's share of T tokens at positions
// p0 .. p0+T-1 reads and advances its state, so any split of a prompt into chunks — and any company in the batch —
// computes the same function as one pass alone (the invariants tests/model checks).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/workspace.h"
#include "backend/ops.h"
#include "engine/sequence_state.h"
#include "engine/weight_views.h"
#include "model/config.h"

namespace dsv4::engine {

// Row-wise work buffers of passes of up to `rows` token rows (all sequences of the pass together); allocated once.
struct ForwardScratch {
    int64_t rows = 0;                // R
    std::vector<int64_t> positions;  // [R] each row's position in its own sequence
    std::vector<int32_t> tokens;     // [R] the rows' token ids
    std::vector<float> streams_a, streams_b;  // [R, 4, D] mHC streams (double-buffered: hc_post cannot alias)
    std::vector<float> hc_x;         // [R, D] collapsed streams
    std::vector<float> normed;       // [R, D]
    std::vector<float> block_out;    // [R, D] attention / MoE output
    std::vector<float> pre, post;    // [R, 4]
    std::vector<float> comb;         // [R, 4, 4]
    // attention
    std::vector<float> qr;           // [R, q_lora]
    std::vector<float> q;            // [R, H, 512]
    std::vector<float> attn;         // [R, H, 512]
    std::vector<float> z;            // [R, G·R]
    std::vector<float> window_kv;    // [R, 512] window K=V, copied into each sequence's pool chunk rows
    std::vector<float> proj_kv, proj_score;            // [R, 2·512] main compressor projections
    std::vector<float> index_proj_kv, index_proj_score;  // [R, 2·128] indexer compressor projections (CSA)
    // indexer
    std::vector<float> index_q;      // [R, IH, 128]
    std::vector<float> index_w;      // [R, IH]
    // MoE
    std::vector<int32_t> route_idx;  // [R, K]
    std::vector<float> route_w;      // [R, K]
    std::vector<float> expert_out;   // [R, K, D]
    std::vector<float> shared_out;   // [R, D]
};

ForwardScratch make_forward_scratch(const model::ModelConfig& cfg, int64_t rows);

// Per-sequence work buffers for that sequence's share of a pass, up to `rows` tokens (its SequenceState's
// chunk_rows) at a context of up to `max_context`; allocated once with the session.
struct SequenceScratch {
    int64_t rows = 0;                // S
    std::vector<float> series_kv, series_score;  // [m-1+S, width] open window + chunk projections
    std::vector<float> pooled;       // [S/4+2, 512]
    std::vector<int32_t> idx;        // [S, 128 + max(index_topk, HCA entries)]
    int64_t idx_width = 0;
    std::vector<float> index_scores; // [S, max CSA entries]
    std::vector<int32_t> index_topk; // [S, index_topk]
};

SequenceScratch make_sequence_scratch(const model::ModelConfig& cfg, int64_t rows, int64_t max_context);

// The largest shapes the CPU ops see in passes of up to `rows` tokens (the MTP block's h_proj runs rows·hc_mult
// token rows) at a context of up to `max_context`, for sizing a backend::cpu::Workspace once.
backend::cpu::WorkspaceLimits workspace_limits(const model::ModelConfig& cfg, int64_t rows, int64_t max_context,
                                               int threads);

// What a forward needs besides the state: config, weights, numerics and threads, RoPE tables. exec's workspace
// serves the row-wise (batched) ops.
struct ForwardContext {
    const model::ModelConfig* cfg = nullptr;
    const ModelViews* weights = nullptr;
    backend::Exec exec;
    backend::RopeFreqs freqs_window;     // θ = rope_theta, no YaRN (SWA layers, MTP)
    backend::RopeFreqs freqs_compress;   // θ = compress_rope_theta with YaRN (CSA / HCA layers)
};

ForwardContext make_forward_context(const model::ModelConfig& cfg, const ModelViews& weights, backend::Exec exec);

// One sequence's share of a pass: rows [row0, row0+n) of the pass at positions state->position .. +n-1.
// (This is the CPU form of DESIGN §5's BatchPlan entry: token rows, positions, the sequence's cache.)
struct BatchSeq {
    SequenceState* state = nullptr;
    SequenceScratch* scratch = nullptr;  // its per-sequence buffers
    backend::Exec exec;                  // per-sequence ops run on the sequence's own workspace (sized by its context)
    const int32_t* tokens = nullptr;     // [n], ids already range-checked
    int64_t n = 0;                       // 1 <= n <= state->chunk_rows
    int64_t row0 = 0;                    // filled by forward_batch
    // the share's rows logits_from .. n-1 get logits (n: none); the head runs on no other row
    int64_t logits_from = 0;
    int64_t head_row0 = 0;  // filled by forward_batch: where those rows start among the rows the head runs on
    float* logits = nullptr;             // [n - logits_from, vocab]
    float* final_streams = nullptr;      // may be null: the last layer's streams [n, 4, D], before the head
};

// Runs every sequence's tokens in one pass (sum of n <= s.rows) and advances each state by its n. The head's
// logits (of each share's rows from logits_from) go straight to the one sequence's buffer, or through head_staging
// ([k, vocab], k >= 1 rows at a time) when there are several. On error the states are unusable until reset
// (partially absorbed layers).
Status forward_batch(const ForwardContext& ctx, ForwardScratch& s, std::span<BatchSeq> seqs,
                     std::span<float> head_staging);

// One Block (§5.2) on streams [rows, 4, D] in place; spare is a work buffer of the same size. Layer state
// seqs[i].state->layers[layer_slot]; positions and tokens: s.positions / s.tokens.
Status block_forward(const ForwardContext& ctx, const LayerViews& layer, int layer_slot, std::span<BatchSeq> seqs,
                     ForwardScratch& s, int64_t rows, float* streams, float* spare);
// The head (§5.6): hc_head collapse, RMSNorm `norm`, the model's f32 lm head → logits [n, vocab].
Status head_forward(const ForwardContext& ctx, const HcViews& hc_head, const backend::WeightView& norm,
                    ForwardScratch& s, const float* streams, int64_t n, float* logits);

// One attention sub-block (MODEL_SPEC §5.4) of `layer` over the pass (positions filled): x [rows, D] attn_norm
// output → out [rows, D]. Absorbs each sequence's rows into its layer state (ring, compressors, entries).
Status attention_block(const ForwardContext& ctx, const LayerViews& layer, int layer_slot, std::span<BatchSeq> seqs,
                       ForwardScratch& s, const float* x, int64_t rows, float* out);

// One MoE sub-block (MODEL_SPEC §5.5): x [n, D] ffn_norm output → out [n, D].
Status moe_block(const ForwardContext& ctx, const LayerViews& layer, ForwardScratch& s, const int32_t* tokens,
                 const float* x, int64_t n, float* out);

}  // namespace dsv4::engine
