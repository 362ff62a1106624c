// The CUDA forward of DeepSeek-V4 (MODEL_SPEC §5, §6, §8.2): the same schedule as the CPU forward
// (engine/forward.h, attention_block.cpp) with every op on the GPU, one stream, nothing allocated per step.
//
//   GpuModel     the checkpoint's weights resident on the GPU in their shipped formats (FP8 blocks, MXFP4, BF16,
//                F32: no dequantised copies), the pass buffers for up to max_rows token rows, the step's plan
//                (token ids, positions, session slots) uploaded once per pass from pinned memory, and the paged
//                caches every session shares (gpu_internal.h GpuCache; docs/architecture.md). A model larger than
//                one GPU is a pipeline: each GpuModel holds a contiguous range of layers on its GPU and the next
//                stage (GpuModel::next) the following ones; the functions below take the first stage and serve
//                them all.
//   GpuSequence  one session: its slot in the caches (window ring, compressor states), the entry pages it
//                holds, its position; on a pipeline, one per stage (GpuSequence::next).
//
// Activations are bf16 in reference numerics and f32 in f32 mode (backend/cuda's convention); compressor
// projections and states are f32 in both, as on the CPU.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "dsv4/engine.h"
#include "dsv4/status.h"
#include "engine/weight_views.h"
#include "model/config.h"

namespace dsv4 {
class ThreadPool;  // core/thread_pool.h
}  // namespace dsv4

namespace dsv4::engine {

struct GpuModel;     // gpu_internal.h
struct GpuSequence;  // gpu_internal.h
struct GpuSequenceDeleter {
    void operator()(GpuSequence* s) const;
};
using GpuSequencePtr = std::unique_ptr<GpuSequence, GpuSequenceDeleter>;

// Whether a GPU this build can use is present; otherwise *why (if given) says what is missing.
bool gpu_available(std::string* why);

// The paged caches' size: up to `sessions` sessions at once, each of up to `max_context` tokens, `tokens` tokens in
// all (pages are taken as sessions grow, so many short sessions and a few long ones share one pool).
struct GpuCacheOptions {
    int64_t sessions = 64;
    int64_t max_context = 4096;
    int64_t tokens = 64 * 4096;
};

// Uploads every weight of `views` (the MTP block is not run on the GPU and is left out), sizes the pass buffers
// for up to `max_rows` rows and the caches per `cache`. `devices`: the GPUs to spread the layers over, in order
// (engine/gpu_placement.h; a GPU named twice holds two stages, which checks the pipeline on one GPU); empty: GPU 0
// alone when the model fits it, else the fewest GPUs from 0 up that hold it. Checks the devices first: a missing
// driver, no GPU, a GPU that is not sm_90 or too little memory each give one clear Status.
Result<std::shared_ptr<GpuModel>> load_gpu_model(const model::ModelConfig& cfg, const ModelViews& views,
                                                 backend::Precision precision, int64_t max_rows,
                                                 const GpuCacheOptions& cache, std::span<const int> devices = {});
// Which GPU holds which layers: "GPU 0: layers 0-42 (136.2 GiB)", stages separated by "; ".
std::string gpu_placement(const GpuModel& m);
// Rows of the largest pass (the pass buffers' size).
int64_t gpu_max_rows(const GpuModel& m);
// The largest GPU pass: 8,192 rows. The prefill MoE kernel (above 256 rows: docs/kernels/moe_prefill.md) fills its
// 128-row expert tiles only with enough tokens per pass (2,048 rows give ~48 per expert at V4-Flash): an 8K prompt
// took 1,673 ms in passes of 2,048, 1,513 in passes of 4,096, 1,413 in one pass (H200, docs/perf.md). The pass
// buffers cost ~0.4 MB per row at V4-Flash plus the indexer scores (2 bytes per row and cached CSA entry: 0.5 MB
// per row at 1M context); EngineOptions::max_batch_rows lowers it.
constexpr int64_t kGpuMaxPassRows = 8192;
// Bytes of weights resident on the GPUs.
uint64_t gpu_weight_bytes(const GpuModel& m);

// A sequence of up to `max_context` tokens (<= the cache's) in shares of at most `chunk_rows` tokens per pass: a
// session slot of the paged caches; kResourceExhausted when every slot is taken. Pages are taken as it grows and
// given back on reset and destruction.
Result<GpuSequencePtr> make_gpu_sequence(GpuModel& m, int64_t max_context, int64_t chunk_rows);
int64_t gpu_position(const GpuSequence& s);
int64_t gpu_chunk_rows(const GpuSequence& s);
void reset_gpu_sequence(GpuSequence& s);

// One sequence's share of a GPU pass (the GPU form of BatchSeq).
struct GpuBatchSeq {
    GpuSequence* seq = nullptr;
    const int32_t* tokens = nullptr;  // host [n], ids already range-checked
    int64_t n = 0;                    // 1 <= n <= chunk rows
    float* logits = nullptr;          // host [n - logits_from, vocab]
    // the share's rows logits_from .. n-1 get logits (n: none); the head runs on no other row of a pass that is not
    // a decode step
    int64_t logits_from = 0;
    // a draw of the next token from the share's last row, on the device where that row's logits are in the pass's
    // logits buffer (decode steps); result->token stays -1 and the row is copied to `logits` otherwise
    EngineSample* sample = nullptr;
    int64_t row0 = 0;  // filled by gpu_forward_batch
};

// Runs every share in one pass (sum of n <= gpu_max_rows), copies each share's logits to its host buffer (or draws
// its next token on the device: GpuBatchSeq::sample) and advances each sequence by its n. Waits for the GPU at the
// end, to hand back the logits and draws (once more for the rows of declined draws; a long pass's head once per
// kHeadChunkRows chunk). A full cache is
// kResourceExhausted before any work (the sequences unchanged, though pages taken for earlier shares stay theirs);
// after another error the sequences are unusable until reset.
// A pass whose shares are all single tokens past position 0 (a decode step) is captured as a CUDA graph the first
// time its sequences step together and replayed afterwards (set_gpu_graphs(false): always queued op by op).
Status gpu_forward_batch(GpuModel& m, std::span<GpuBatchSeq> seqs);

void set_gpu_graphs(GpuModel& m, bool enabled);
// The pool that copies each pass's logits from the pinned landing buffer to the shares' buffers (null: the calling
// thread alone). It must outlive `m`'s passes; the engine gives its own.
void set_gpu_host_pool(GpuModel& m, ThreadPool* pool);
struct GpuGraphStats {
    int64_t captures = 0, replays = 0;
    int64_t nodes = 0;               // of the largest cached graph
    int64_t programmatic_edges = 0;  // of the same graph
};
GpuGraphStats gpu_graph_stats(const GpuModel& m);

}  // namespace dsv4::engine
