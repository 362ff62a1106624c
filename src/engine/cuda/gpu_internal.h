// The GPU forward's data structures (gpu_model.h has the interface): device weights per layer, the pass buffers,
// and a sequence's device state. Everything here is sized once (load / session creation).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/common/buffer.h"
#include "backend/cuda/common/copy.h"
#include "backend/cuda/common/graph.h"
#include "backend/cuda/common/stream.h"
#include "backend/cuda/common/weights.h"
#include "backend/cuda/kernels/experts/experts.h"
#include "backend/cuda/kernels/moe/moe.h"
#include "engine/cuda/gpu_model.h"

namespace dsv4::engine {

using cuda::DeviceBuffer;
using cuda::DeviceWeightView;

struct GpuHc {
    DeviceWeightView fn, base, scale;
};

struct GpuCompressor {
    DeviceWeightView wkv, wgate, ape, norm;
};

struct GpuAttention {
    DeviceWeightView wq_a, q_norm, wq_b, wkv, kv_norm, wo_a, wo_b;
    const float* sink = nullptr;  // f32 [H]
    GpuCompressor compressor, index_compressor;
    DeviceWeightView index_wq_b, index_weights_proj;
};

struct GpuMoe {
    DeviceWeightView gate, gate_bias;  // gate_bias f32 [E] (score routing)
    const int64_t* tid2eid = nullptr;  // device [vocab, K] (hash routing)
    DeviceWeightView shared_w1, shared_w2, shared_w3;
    const cuda::DeviceExpertWeights* experts = nullptr;  // device [E]
    const cuda::Mxfp4ExpertPtrs* mxfp4 = nullptr;         // device [E] when every routed expert is MXFP4
};

struct GpuLayer {
    int index = 0;
    model::AttnKind kind = model::AttnKind::kSWA;
    bool hash_routed = false;
    int ratio = 0;
    DeviceWeightView attn_norm, ffn_norm;
    GpuHc hc_attn, hc_ffn;
    GpuAttention attn;
    GpuMoe ffn;
};

// Pass buffers for R rows; "act" buffers hold bf16 (reference) or f32 (f32 mode) values.
struct GpuPass {
    int64_t rows = 0;
    DeviceBuffer plan;               // int64 positions [R], then int32 tokens [R]
    int64_t* positions = nullptr;
    int32_t* tokens = nullptr;
    cuda::PinnedBuffer plan_host;    // the same layout, filled on the host and uploaded once per pass
    DeviceBuffer streams_a, streams_b;  // act [R, hc, D]
    DeviceBuffer hc_x, normed, block_out;  // act [R, D]
    DeviceBuffer pre, post, comb;    // f32 [R, hc], [R, hc], [R, hc, hc]
    DeviceBuffer qr, q, attn, z;     // act [R, q_lora], [R, H, 512], [R, H, 512], [R, G·R_o]
    DeviceBuffer window_kv;          // act [R, 512]
    DeviceBuffer proj_kv, proj_score;              // f32 [R, 2·512]
    DeviceBuffer index_proj_kv, index_proj_score;  // f32 [R, 2·128]
    DeviceBuffer index_q, index_w;   // act [R, IH, 128], [R, IH]
    DeviceBuffer router_logits;      // f32 [R, E]
    DeviceBuffer route_idx, route_w; // int32 / f32 [R, K]
    DeviceBuffer expert_out;         // f32 [R, K, D]
    DeviceBuffer shared_out;         // act [R, D]
    DeviceBuffer logits;             // f32 [R, vocab]
    DeviceBuffer bad_token;          // int32, the embedding's out-of-range report
    DeviceBuffer workspace;          // shared by the linears, experts and the MoE kernel (one stream: one user)
};

// Decode steps captured as CUDA graphs, keyed by the step's sequences (their ids, in order): a step of the same
// sequences replays the graph, since every step-dependent value is read from the uploaded plan.
struct GpuGraphCache {
    static constexpr size_t kMaxEntries = 16;
    struct Entry {
        std::vector<uint64_t> ids;
        cuda::CapturedGraph graph;
        uint64_t last_use = 0;
        size_t nodes = 0;
    };
    std::vector<Entry> entries;
    std::vector<uint64_t> key;  // scratch
    uint64_t clock = 0;
    int64_t captures = 0, replays = 0;
};

// How each weight reaches the GPU: uploaded from the checkpoint (gpu_model.cpp), or generated in place for
// benchmarks (gpu_synthetic.cpp). An absent optional weight gives an empty view / null table.
struct GpuWeightSource {
    Result<DeviceWeightView> (*matrix)(GpuModel& m, const WeightView& w, const std::string& name);  // as shipped
    Result<const float*> (*f32_table)(GpuModel& m, const WeightView& w, const std::string& name);
    Result<DeviceWeightView> (*norm)(GpuModel& m, const WeightView& w, const std::string& name);    // bf16
};

struct GpuModel {
    model::ModelConfig cfg;
    const GpuWeightSource* source = nullptr;
    bool use_graphs = true;
    backend::Precision precision = backend::Precision::kReference;
    size_t act_bytes = 2;            // bytes of one activation value
    cuda::Stream stream;
    std::vector<cuda::DeviceWeight> owned;  // every uploaded weight
    std::vector<DeviceBuffer> tables;       // f32 vectors, tid2eid, expert pointer arrays
    uint64_t weight_bytes = 0;
    DeviceWeightView embed, head, norm;
    GpuHc hc_head;
    std::vector<GpuLayer> layers;
    backend::RopeFreqs freqs_window, freqs_compress;
    GpuPass pass;
    GpuGraphCache graphs;
};

struct GpuCompressorState {
    int64_t ratio = 0, width = 0;
    bool overlap = false;
    DeviceBuffer open_kv, open_score, prev_kv, prev_score;  // f32 [m, width]
};

struct GpuLayerState {
    model::AttnKind kind = model::AttnKind::kSWA;
    int64_t ratio = 0, max_entries = 0;
    DeviceBuffer pool;        // act [S + window + max_entries, 512] (sequence_state.h's layout)
    DeviceBuffer index_keys;  // act [max_entries, 128] (CSA)
    GpuCompressorState compressor, index_compressor;
};

struct GpuSequence {
    uint64_t id = 0;  // unique per process: keys the decode graphs (an address could be reused)
    int64_t position = 0, max_context = 0, chunk_rows = 0, window = 128;
    std::vector<GpuLayerState> layers;
    // per-sequence work buffers
    DeviceBuffer series_kv, series_score;  // f32 [m-1+S, width] (largest over the layer kinds)
    DeviceBuffer pooled;                   // act [S/4 + 2, 512]
    DeviceBuffer idx;                      // int32 [S, window + max(index_topk, HCA entries)]
    DeviceBuffer index_scores;             // act [S, CSA entries]
    DeviceBuffer index_topk;               // int32 [S, index_topk]

    int64_t ring_row(int64_t pos) const { return chunk_rows + pos % window; }
    int64_t entry_row(int64_t j) const { return chunk_rows + window + j; }
};

// Byte pointer arithmetic on device buffers.
inline uint8_t* at(const DeviceBuffer& b, int64_t byte_offset) { return b.as<uint8_t>() + byte_offset; }

// Every weight of `views` through `source`, then the pass buffers (load_gpu_model = the checkpoint source).
Result<std::shared_ptr<GpuModel>> build_gpu_model(const model::ModelConfig& cfg, const ModelViews& views,
                                                  backend::Precision precision, int64_t max_rows,
                                                  const GpuWeightSource& source);
// Keeps a weight in m.owned and returns its view.
Result<DeviceWeightView> keep_gpu_weight(GpuModel& m, cuda::DeviceWeight d);
Status make_gpu_pass(GpuModel& m, int64_t rows);

// One attention sub-block over the pass (gpu_attention.cpp): x = m.pass.normed → out = m.pass.block_out.
// decode: every share is one token past position 0; per-sequence steps then read the position from the device plan
// (same launches every step: capturable once, replayable).
Status gpu_attention_block(GpuModel& m, const GpuLayer& layer, int layer_slot, std::span<GpuBatchSeq> seqs,
                           int64_t rows, bool decode);

}  // namespace dsv4::engine
