// The GPU forward's data structures (gpu_model.h has the interface): device weights per layer, the pass buffers,
// and a sequence's device state. Everything here is sized once (load / session creation).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/common/buffer.h"
#include "backend/cuda/common/copy.h"
#include "backend/cuda/common/graph.h"
#include "backend/cuda/common/regimes.h"
#include "backend/cuda/common/stream.h"
#include "backend/cuda/common/weights.h"
#include "backend/cuda/kernels/attention/attention.h"
#include "backend/cuda/kernels/experts/experts.h"
#include "backend/cuda/kernels/gemm_fp8/gemm_fp8.h"
#include "backend/cuda/kernels/moe/moe.h"
#include "backend/cuda/kernels/sampling/sampling.h"
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
    // the MXFP4 experts were repacked on the device into the decode kernel's layout (mxfp4_repacked.h): only the
    // fused decode kernel may read them (gpu_model.cpp put_moe says when)
    bool mxfp4_repacked = false;
    // device [1]: the shared expert as the fused decode kernel runs it (FP8 blocks of the routed experts' shape,
    // V4's checkpoints), or null (it then runs as sm90_expert and the kernel adds its output)
    const cuda::Fp8BlockExpertPtrs* shared_fp8 = nullptr;
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
    // A decode step's span: every row's position is below it (decode_span_for; 0 outside decode steps). The step's
    // indexer scans and HCA lists cover the span's entries rather than a whole session's capacity — the model's 1M
    // tokens by default — and its graph is captured per span (GpuGraphCache).
    int64_t decode_span = 0;
    DeviceBuffer plan;               // int64 positions [R], int32 tokens [R], int32 session slots [R]
    int64_t* positions = nullptr;
    int32_t* tokens = nullptr;
    int32_t* slots = nullptr;
    cuda::PinnedBuffer plan_host;    // the same layout, filled on the host and uploaded once per pass
    DeviceBuffer streams_a, streams_b;  // act [R, hc, D]
    DeviceBuffer hc_x, normed, block_out;  // act [R, D]
    DeviceBuffer normed_codes, normed_scales;  // e4m3 [R, D], f32 [R, D/128]: normed quantised once (QuantizedRows)
    DeviceBuffer qr_codes, qr_scales;          // e4m3 [R, q_lora], f32 [R, q_lora/128]: the same for qr
    DeviceBuffer pre, post, comb;    // f32 [R, hc], [R, hc], [R, hc, hc]
    DeviceBuffer mixes;              // f32 [R, 24]: a decode step's hc_pre mixes, for the branch's Sinkhorn
    // The wide decode collapse with the sub-block's RMSNorm (cuda::HcWideNorm) for steps of up to hc_wide_rows rows
    // (at most the sessions and cuda::kHcWideMaxTokens; 0 where the model's width does not fit it): per-row tickets,
    // zero between uses, and the blocks' partial sums.
    int64_t hc_wide_rows = 0;
    DeviceBuffer hc_tickets, hc_partials;  // int32 [hc_wide_rows], f64 [hc_wide_rows, cuda::hc_wide_blocks(D), 25]
    DeviceBuffer qr, q, attn, z;     // act [R, q_lora], [R, H, 512], [R, H, 512], [R, G·R_o]
    DeviceBuffer window_kv;          // act [R, 512]
    DeviceBuffer proj_kv, proj_score;              // f32 [R, 2·512]
    DeviceBuffer index_proj_kv, index_proj_score;  // f32 [R, 2·128]
    DeviceBuffer index_q, index_w;   // act [R, IH, 128], [R, IH]
    DeviceBuffer index_q_int, index_q_exp;  // kReference: int8 [R, IH, 128], [R, IH, 4] (the query finish's)
    DeviceBuffer
        select_counters;  // uint32 [decode rows, kTopkSelectCounterWords]: TopKArgs::counters, zero between uses
    DeviceBuffer router_logits;      // f32 [R, E]
    DeviceBuffer moe_arrivals;       // int32: the MoE launch's routing counter (MoeRoute::arrivals), zero between uses
    DeviceBuffer route_idx, route_w; // int32 / f32 [R, K]
    DeviceBuffer expert_out;         // f32 [R, K, D]
    DeviceBuffer shared_out;         // act [R, D]
    DeviceBuffer logits;             // f32 [min(R, kHeadChunkRows), vocab]
    // the same on the host, pinned: logits land here by DMA and are copied on to the callers' buffers by the host
    // pool (a copy into pageable memory is staged by the driver: 3.8 ms of a 33.8 ms batch-64 decode step on an
    // H200 for 64 rows of V4's 129,280 logits)
    cuda::PinnedBuffer logits_host;
    struct LogitsRow {
        float* dst;       // a share's host buffer, one row
        int64_t src_row;  // the row of pass.logits (and of logits_host) it comes from
    };
    std::vector<LogitsRow> logits_rows;  // the rows one landing brings (reserved for a full pass.logits)
    // draws of the next token on the device (GpuBatchSeq::sample), one per share, up to a full pass.logits
    struct Draw {
        EngineSample* request;
        LogitsRow row;  // where the row goes if the draw is declined
    };
    std::vector<Draw> draws;
    DeviceBuffer draw_params, draw_out;  // cuda::SampleRowParams / SampleRowOut [min(R, kHeadChunkRows)]
    cuda::PinnedBuffer draw_params_host, draw_out_host;
    // the draws' penalty lists (cuda::SamplePenalty [kDrawPenalties]; a draw whose list does not fit goes to the
    // host), built on the host from each request's history with penalty_counts ([vocab] zeros) as scratch
    static constexpr int64_t kDrawPenalties = 65536;
    DeviceBuffer draw_penalties;
    cuda::PinnedBuffer draw_penalties_host;
    std::vector<int32_t> penalty_counts;
    std::vector<cuda::SamplePenalty> penalty_list;
    DeviceBuffer workspace;          // shared by the linears, experts and the MoE kernel (one stream: one user)
    DeviceBuffer attn_branch_workspace;      // the linear on m.attn_branch (decode steps' window K=V)
    DeviceBuffer compress_branch_workspace;  // the linears on m.compress_branch (main compressor projections)
    DeviceBuffer index_branch_workspace;     // the linears on m.index_branch (indexer compressor projections)
    DeviceBuffer weights_branch_workspace;   // the linear on m.weights_branch (the indexer's head weights)
    DeviceBuffer heads_branch_workspace;     // the linear on m.heads_branch (wq_b)
    // attention's per-sequence work (one sequence at a time, or every row at once in a decode step)
    DeviceBuffer series_kv, series_score;  // f32 [127 + R, 512] / [3 + R, 1024]: open window + chunk projections
    DeviceBuffer pooled;             // act [max(R, R/4 + 2), 512] pooled and finished entries before packing
    DeviceBuffer entry_rows;         // int32 [max(R, R/4 + 2)] pool rows the finished entries go to (-1: none)
    DeviceBuffer idx;                // int32 [R, 128 + max(index_topk, HCA entries per session)]
    DeviceBuffer index_scores;       // act [R, CSA entries per session]
    DeviceBuffer index_topk;         // int32 [R, index_topk]
    DeviceBuffer token_pages;        // int32 [R, CSA pages per session]: each row's key pages (decode steps)
    // a prefill pass's K=V rows decoded once (kReference, passes of the wgmma prefill kernel; decode_pass_rows):
    // bf16 [R + window + entries per session, 512] and the pool row of each
    DeviceBuffer pass_kv, pass_row_src;
    // split decode attention's partials and long-row top-k's histograms (one stream: never both at once)
    DeviceBuffer attn_workspace;
};

// Paged caches (DESIGN §5), one set per engine, sized by resize_gpu_cache. Per attention layer, a K=V pool of rows
// in the storage format of kernels/kv_store (584-byte FP8 rows in reference numerics, f32 rows in f32 mode):
//   [0, R)              pass rows: the window K=V of the pass's tokens (row = pass row)
//   [R, E0)             window rings: session slot s owns the 128 rows R + 128·s + pos % 128
//   [E0, E0 + 64·P)     compressed entries in pages of 64: entry j of a session is E0 + 64·table[j/64] + j%64, with
//                       the session's page table of the layer's kind (CSA or HCA; one table serves every layer of
//                       the kind, since they hold the same number of entries)
// Per CSA layer an indexer key pool (the CSA pages, kv_store's key rows); per compressed layer the compressors'
// running states per slot: the open window [S, m, width] and, CSA, the previous window.
struct GpuCacheKind {
    int64_t ratio = 0;
    int64_t pages = 0;                // in the pool
    int64_t pages_per_session = 0;    // table width: a session's max context / ratio / 64, rounded up
    std::vector<int32_t> free;        // free pages (host)
    DeviceBuffer table;               // int32 [S, pages_per_session]
    cuda::PinnedBuffer table_host;    // its host mirror (uploads are stream-ordered from here)
};

struct GpuLayerCache {
    DeviceBuffer kv;                  // [rows, kv_row_bytes]
    DeviceBuffer keys;                // CSA: [64·csa pages, key_row_bytes]
    int64_t width = 0, index_width = 0;  // compressor projection widths
    DeviceBuffer open_kv, open_score, prev_kv, prev_score;        // f32 [S, m, width] (prev: CSA)
    DeviceBuffer iopen_kv, iopen_score, iprev_kv, iprev_score;    // CSA indexer: f32 [S, 4, 256]
};

struct GpuCache {
    int64_t sessions = 0, window = 128, pass_rows = 0, entry_base = 0, max_context = 0;
    int64_t kv_row_bytes = 0, key_row_bytes = 0;
    GpuCacheKind csa, hca;
    std::vector<GpuLayerCache> layers;
    std::vector<int32_t> free_slots;
    uint64_t bytes = 0;
    GpuCacheKind& kind(int64_t ratio) { return ratio == 4 ? csa : hca; }
};

// Decode steps captured as CUDA graphs, keyed by their number of rows and their span (GpuPass::decode_span): every
// other step-dependent value (positions, slots, page tables) is read on the device, so a step of any sequences with
// that many rows and that span replays the graph. At most kMaxEntries, least recently used out (a graph of 32
// V4-Flash layers holds ~18 MB of GPU memory, docs/perf.md).
struct GpuGraphCache {
    static constexpr size_t kMaxEntries = 32;
    struct Entry {
        int64_t rows = 0, span = 0;
        cuda::CapturedGraph graph;
        uint64_t last_use = 0;
        size_t nodes = 0;
    };
    std::vector<Entry> entries;
    uint64_t clock = 0;
    int64_t captures = 0, replays = 0;
    int64_t max_nodes = 0;               // of any graph captured
    int64_t max_nodes_programmatic = 0;  // programmatic edges of that largest graph
};

// How each weight reaches the GPU: uploaded from the checkpoint (gpu_model.cpp), or generated in place for
// benchmarks (gpu_synthetic.cpp). An absent optional weight gives an empty view / null table.
struct GpuWeightSource {
    Result<DeviceWeightView> (*matrix)(GpuModel& m, const WeightView& w, const std::string& name);  // as shipped
    Result<const float*> (*f32_table)(GpuModel& m, const WeightView& w, const std::string& name);
    Result<DeviceWeightView> (*norm)(GpuModel& m, const WeightView& w, const std::string& name);    // bf16
};

// Passes of up to this many rows run the routed experts in the decode kernel (bandwidth-shaped, one sweep of the
// touched experts); longer ones in the prefill kernel (FP8 wgmma grouped GEMMs). docs/kernels/moe_prefill.md: at
// 256 tokens the decode kernel takes 2.1 ms per V4-Flash layer and the prefill kernel 4.2; at 1,024 it is 8.3
// (4 passes) against 4.4.
constexpr int64_t kMoeDecodeKernelMaxRows = cuda::kDecodeMaxRows;

struct GpuModel {
    ~GpuModel();  // the later stages first, then this one's memory with its device current
    model::ModelConfig cfg;
    // The GPU this stage's memory, streams and launches are on, and its layers [first_layer, end_layer) of the
    // model's (m.layers; the embedding with layer 0, the final norm and head with the last layer).
    int device = 0;
    int64_t first_layer = 0, end_layer = 0;
    bool embeds = true, heads = true;  // holds layer 0 / the last layer
    // The stage with the following layers (null: this one has the last). A pass queues each stage on its own
    // stream; a stage's final streams (its last hc_post run, [rows, hc, D] in pass.streams_a) are copied into the
    // next stage's pass.streams_a and `handoff` is recorded after the copy, which the next stage's stream waits for.
    std::shared_ptr<GpuModel> next;
    cuda::Event handoff;
    // A pipeline's pass that returns nothing to the host (a long prompt's passes before its last) is left running
    // (gpu_forward_batch): the first stage starts the next pass while the later stages finish this one. A pass
    // queued while another runs hands its streams into the next stage's `inbox` instead (that stage may still be
    // reading its streams), which the stage copies in when it starts, recording `inbox_free` for the previous stage
    // to wait on before its next handoff; `inputs_read` is recorded once a stage's pass has read its pinned plan and
    // page tables, which the host waits for before writing them again. Pipelines only (empty on one GPU).
    DeviceBuffer inbox;
    cuda::Event inbox_free, inputs_read;
    bool in_flight = false;           // the first stage: a pass may still be running on the stages
    std::vector<GpuBatchSeq> shares;  // a pass's shares with this stage's sequences (the stages after the first)
    uint64_t planned_bytes = 0;       // what the placement charged this stage (gpu_placement)
    const GpuWeightSource* source = nullptr;
    int64_t max_rows = 0;  // the largest pass, known before the weights are uploaded
    bool use_graphs = true;
    // Passes of more rows than this run the routed experts in the prefill kernel. Tests lower it, on a model whose
    // pass exceeds kMoeDecodeKernelMaxRows (so the workspace holds the prefill kernel's), to compare the kernels.
    int64_t moe_prefill_above = kMoeDecodeKernelMaxRows;
    // Passes of up to this many rows (at most cuda::kMoeRouteMaxTokens) route inside the fused MoE path's first
    // launch (MoeDecodeArgs::route); the others run the router's launch and the prepare. 1: one row routes on the
    // router's own cluster with the prepare's work after its barrier, no prepare launch (docs/kernels/moe.md, "One
    // token routed and prepared in one launch"); 2-8 rows take the route's ⌈E / 8⌉-block form, measured slower in the
    // decode graph than the router + prepare (2026-12-02: B = 8 13.05-13.30 vs 12.59-12.85 ms; "Routing in the first
    // launch"). Tests set it to compare the forms.
    int64_t moe_route_max_rows = 1;
    // Bytes of indexer scores a prefill pass holds at once (size_gpu_pass_for_cache; run_indexer takes a longer pass
    // in row chunks). A whole 8,192-row pass at a 1M-token capacity would be 4.3 GB of bf16 scores. Tests lower it.
    int64_t index_scores_budget = int64_t(512) << 20;
    backend::Precision precision = backend::Precision::kReference;
    size_t act_bytes = 2;            // bytes of one activation value
    cuda::Stream stream;
    cuda::StreamFork hc_branch;  // decode steps' split + Sinkhorn, beside `stream` (gpu_forward.cpp enter_sub_block)
    // Decode steps' branches beside the query path, each joined where its outputs are first read
    // (gpu_attention.cpp gpu_attention_block):
    cuda::StreamFork attn_branch;           // the window K=V
    cuda::StreamFork compress_branch;       // the main compressor (CSA and HCA layers)
    cuda::StreamFork index_branch;          // the indexer's compressor (CSA layers)
    cuda::StreamFork weights_branch;        // the indexer's head weights (CSA layers)
    cuda::StreamFork heads_branch;          // the attention's query heads, beside the indexer's queries (CSA layers)
    std::vector<cuda::DeviceWeight> owned;  // every uploaded weight
    std::vector<DeviceBuffer> tables;       // f32 vectors, tid2eid, expert pointer arrays
    uint64_t weight_bytes = 0;
    DeviceWeightView embed, head, norm;
    GpuHc hc_head;
    std::vector<GpuLayer> layers;
    backend::RopeFreqs freqs_window, freqs_compress;
    GpuPass pass;
    ThreadPool* host_pool = nullptr;  // the host copies out of pass.logits_host (the engine's pool; null: inline)
    GpuCache cache;
    std::mutex cache_lock;  // slots and pages: sessions are created and destroyed outside steps
    GpuGraphCache graphs;
};

struct GpuSequence {
    uint64_t id = 0;  // unique per process: keys the decode graphs (an address or a slot could be reused)
    GpuModel* model = nullptr;  // releases the slot and pages (the engine outlives its sessions)
    int32_t slot = -1;
    int64_t position = 0, max_context = 0, chunk_rows = 0;
    std::vector<int32_t> csa_pages, hca_pages;  // entry pages held, in entry order
    GpuSequencePtr next;                        // the same session on the next stage of a pipeline (GpuModel::next)
};

// Sizes the caches of every stage for `sessions` sessions of up to `max_context` tokens, `tokens` tokens in all
// (pages are taken as sessions grow). Fails while sessions exist. The bench resizes per point; the engine once at
// load.
Status resize_gpu_cache(GpuModel& m, int64_t sessions, int64_t max_context, int64_t tokens);
// What resize_gpu_cache gives one layer: its K=V pool rows, indexer key rows (CSA) and compressor states, in bytes.
// ratio: the layer's compression (0: sliding window only, 4: CSA, 128: HCA).
uint64_t gpu_layer_cache_bytes(const model::ModelConfig& cfg, backend::Precision precision, int64_t ratio,
                               int64_t pass_rows, int64_t sessions, int64_t max_context, int64_t tokens);
// Takes the pages a sequence needs to hold `position` tokens (uploading its tables); kResourceExhausted when the
// pool is out of pages (nothing taken then).
Status reserve_gpu_pages(GpuModel& m, GpuSequence& s, int64_t position);

// Byte pointer arithmetic on device buffers.
inline uint8_t* at(const DeviceBuffer& b, int64_t byte_offset) { return b.as<uint8_t>() + byte_offset; }

// The weights of `views` a stage holds through `source`, then its pass buffers (load_gpu_model = the checkpoint
// source), on stage.device. The default stage: every layer on GPU 0.
struct GpuStage {
    int device = 0;
    int64_t first_layer = 0, end_layer = -1;  // -1: through the last layer
};
Result<std::shared_ptr<GpuModel>> build_gpu_model(const model::ModelConfig& cfg, const ModelViews& views,
                                                  backend::Precision precision, int64_t max_rows,
                                                  const GpuWeightSource& source, const GpuStage& stage = {});
// The stages of `views` over `devices` (load_gpu_model's placement), each built through `source`, linked, their
// caches sized per `cache`: load_gpu_model with the checkpoint's weights, benchmarks with generated ones.
Result<std::shared_ptr<GpuModel>> build_gpu_pipeline(const model::ModelConfig& cfg, const ModelViews& views,
                                                     backend::Precision precision, int64_t max_rows,
                                                     const GpuCacheOptions& cache, std::span<const int> devices,
                                                     const GpuWeightSource& source);
// Keeps a weight in m.owned and returns its view.
Result<DeviceWeightView> keep_gpu_weight(GpuModel& m, cuda::DeviceWeight d);
Status make_gpu_pass(GpuModel& m, int64_t rows);
// The model shapes the fused MoE kernels take (sm90_mxfp4_moe_decode: D, I multiples of 512, E <= 1024, K <= 16;
// sm90_mxfp4_moe_prefill takes these too).
bool fused_moe_shapes(const model::ModelConfig& c);
// The head's logits are computed (and copied out) this many rows at a time: a real vocabulary's f32 logits are
// 0.5 MB a row, so a 2,048-row pass would otherwise hold 1 GB of them.
constexpr int64_t kHeadChunkRows = 256;

// A decode step's span (GpuPass::decode_span) for rows whose positions are all below `tokens`: the smallest power of
// two >= tokens and >= kMinDecodeSpan, at most the cache's max_context. Doubling steps keep a growing session to one
// graph capture per doubling; the floor (1,024 CSA entries, one HCA page) keeps short sessions to one.
constexpr int64_t kMinDecodeSpan = 4096;
inline int64_t decode_span_for(int64_t tokens, int64_t max_context) {
    int64_t span = kMinDecodeSpan;
    while (span < tokens) span <<= 1;
    return span < max_context ? span : max_context;
}

// The fused kernel runs the shared expert as one more slot up to this many rows. Its slot holds every row, so past
// a few rows it is the launches' longest item while the routed slots hold 1-3 rows each: dsv4 bench 4K on the
// H200 (2026-11-30), fused vs sm90_expert, B 1 / 8 / 16 / 32 / 64: 8.57 vs 9.23, 15.87 vs 16.44, 23.19 vs 22.98,
// 33.21 vs 31.28, 48.97 vs 44.02 ms.
constexpr int64_t kFusedSharedExpertMaxRows = 8;
// Passes of at most this many rows run the router's gate GEMV inside the selection launch (sm90_router_gate_select:
// a 16-CTA cluster per row re-reads the 2 MB gate per row, which the GEMM reads once for all rows).
constexpr int64_t kFusedRouterGateMaxRows = 8;

// The per-session parts of the pass buffers, sized for the cache's max context (resize_gpu_cache calls it).
Status size_gpu_pass_for_cache(GpuModel& m);

// Rows quantised once (e4m3, 128-blocks, the bits of sm90_act_quant_e4m3) for the several W8A8 / W4A8 linears that
// read them, by the launch that writes the rows (sm90_rmsnorm's codes): gpu_linear takes the codes when its x is
// `x`, so a QuantizedRows must not be used after x is rewritten. Empty (x null: every linear quantises for itself)
// in f32 numerics or when the width is not a multiple of 128.
struct QuantizedRows {
    const void* x = nullptr;
    uint8_t* codes = nullptr;
    float* scales = nullptr;
};
// Where x [rows, cols]'s codes go: the pass buffers codes ([R, cols] bytes) and scales ([R, cols / 128] floats).
Result<QuantizedRows> quantized_rows_in(const GpuModel& m, const void* x, int64_t rows, int64_t cols,
                                        DeviceBuffer& codes, DeviceBuffer& scales);

// The split decode attention's options: each chunk's softmax from its own running maximum (no block-maxima pass).
// Class F of the official tolerances (3e-3 rel_l2, no bitwise criterion); the split's model puts it 2.0-2.3e-3 from
// the one-pass kernel (attention.h).
inline cuda::SparseAttnSplitOptions decode_split_options() {
    cuda::SparseAttnSplitOptions o;
    o.match_reference_max = false;
    return o;
}

// y = W·x on the pass's workspace (backend::cpu::linear's meaning; kernels/linear); q: x's codes if quantised.
// partials: cuda::LinearArgs::partials (the K-split sums left in the pass workspace for the next launch to reduce).
Status gpu_linear(GpuModel& m, const void* x, int64_t rows, const DeviceWeightView& w, backend::LinearOut out,
                  void* y, const QuantizedRows& q = {}, cuda::Fp8GemmPartials* partials = nullptr);
// The same on another stream with its own workspace: a graph branch beside m.stream (m.attn_branch and the others).
Status gpu_linear_on(GpuModel& m, cuda::StreamHandle stream, const DeviceBuffer& workspace, const void* x, int64_t rows,
                     const DeviceWeightView& w, backend::LinearOut out, void* y, const QuantizedRows& q = {});
// Two linears of one shape on the same rows, y = w·x and y2 = w2·x (a compressor's wkv and wgate): one launch at
// decode (cuda::LinearArgs::w2).
Status gpu_linear_pair_on(GpuModel& m, cuda::StreamHandle stream, const DeviceBuffer& workspace, const void* x,
                          int64_t rows, const DeviceWeightView& w, void* y, const DeviceWeightView& w2, void* y2,
                          backend::LinearOut out, const QuantizedRows& q = {});
// Decode steps of up to this many rows run the window K=V, the compressors, the indexer's head weights and (CSA)
// the query heads on graph branches (gpu_attention.cpp gpu_attention_block).
constexpr int64_t kAttnBranchMaxRows = cuda::kDecodeMaxRows;

// One attention sub-block over the pass (gpu_attention.cpp): x = m.pass.normed → out = m.pass.block_out; normed_q:
// normed's codes, written with it (empty where the linears quantise for themselves).
// decode: every share is one token past position 0; per-sequence steps then read the position from the device plan
// (same launches every step: capturable once, replayable).
Status gpu_attention_block(GpuModel& m, const GpuLayer& layer, int layer_slot, std::span<GpuBatchSeq> seqs,
                           int64_t rows, bool decode, const QuantizedRows& normed_q);

}  // namespace dsv4::engine
