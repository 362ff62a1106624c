// Small element-wise steps of the forward between the big kernels (MODEL_SPEC §5.1, §5.4.4–§5.4.6), each the
// CUDA side of a few lines of the CPU forward (src/engine/forward.cpp, attention_block.cpp, backend::cpu ops):
// the embedding's copy into the hc streams, the compressor's positional bias, the indexer weights' scale, and the
// per-query candidate index lists of sparse attention.
//
// Activations are bf16 in Precision::kReference and f32 in kF32, as everywhere in backend/cuda.
#pragma once

#include <cstdint>

#include "backend/cuda/common/stream.h"
#include "backend/cuda/common/weights.h"
#include "backend/ops.h"

namespace dsv4::cuda {

// streams[t, j, :] = x[t, :] for j in [0, hc).
struct BroadcastStreamsArgs {
    const void* x = nullptr;  // [rows, dim]
    int64_t rows = 0, dim = 0, hc = 4;
    void* streams = nullptr;  // [rows, hc, dim]
};
Status sm90_broadcast_streams(backend::Precision precision, const BroadcastStreamsArgs& a, StreamHandle stream);

// score[t, c] += ape[positions[t] % ratio, c] (f32 scores in both modes; backend::cpu::compressor_project).
struct AddApeArgs {
    float* score = nullptr;              // [rows, width]
    int64_t rows = 0, width = 0, ratio = 0;
    const int64_t* positions = nullptr;  // device [rows]
    DeviceWeightView ape;                // f32 or bf16 [ratio, width]
};
Status sm90_add_ape(const AddApeArgs& a, StreamHandle stream);

// x = rnd(x · scale) in place, rnd = bf16 rounding in kReference (backend::cpu::indexer_weights' scale step).
struct ScaleArgs {
    void* x = nullptr;  // [n]
    int64_t n = 0;
    float scale = 1.0f;
};
Status sm90_scale(backend::Precision precision, const ScaleArgs& a, StreamHandle stream);

// Candidate lists of one sequence's n queries at positions p0 .. p0+n-1 (the CPU forward's step 4): per query a
// window part of win_cols columns — positions ascending from max(0, pos-window+1), -1 past pos; a position of the
// chunk is pool row pos-p0, an older one its ring row chunk_rows + pos % window — then the compressed part:
// CSA: picks[i, c] → entry row chunk_rows + window + pick (-1 stays -1); HCA: entry j visible iff
// j < (pos+1)/ratio, for j < hca_entries.
// Decode mode (p0_device set): p0 is read from the device (*p0_device), so the launch is the same every step.
struct AttnIndexArgs {
    int32_t* idx = nullptr;  // [n, width], width = win_cols + (CSA: topk, HCA: hca_entries)
    int64_t n = 0, p0 = 0, win_cols = 0, window = 128, chunk_rows = 0;
    const int64_t* p0_device = nullptr;
    const int32_t* picks = nullptr;  // CSA: device [n, topk] entry numbers, -1 = none; null otherwise
    int64_t topk = 0;
    int64_t hca_entries = 0, ratio = 0;  // HCA
};
Status sm90_attn_index(const AttnIndexArgs& a, StreamHandle stream);

// ---- decode steps: one new token per sequence at pos = *position (device), so a step replays as a CUDA graph ----

// A compressor's open window takes the token's projections: open_kv[pos % ratio] = kv, open_score[..] = score.
struct CompressorAppendArgs {
    const int64_t* position = nullptr;  // device, one value
    const float* kv = nullptr;          // [width]
    const float* score = nullptr;       // [width] (ape included)
    int64_t ratio = 0, width = 0;
    float* open_kv = nullptr;           // [ratio, width]
    float* open_score = nullptr;        // [ratio, width]
};
Status sm90_compressor_append(const CompressorAppendArgs& a, StreamHandle stream);

// After the entry of a window that just closed (pos % ratio == ratio - 1) was pooled: the window becomes the
// previous window of the next entry (CSA): prev = open. Nothing happens at other positions.
struct CompressorRollArgs {
    const int64_t* position = nullptr;
    int64_t ratio = 0, width = 0;
    const float* open_kv = nullptr;
    const float* open_score = nullptr;
    float* prev_kv = nullptr;
    float* prev_score = nullptr;
};
Status sm90_compressor_roll(const CompressorRollArgs& a, StreamHandle stream);

// The window ring keeps the token's K=V row: pool[chunk_rows + pos % window] = pool[0] (the chunk row).
struct RingStoreArgs {
    const int64_t* position = nullptr;
    void* pool = nullptr;  // [rows, row_elems]
    int64_t chunk_rows = 0, window = 128, row_elems = 512;
};
Status sm90_ring_store(backend::Precision precision, const RingStoreArgs& a, StreamHandle stream);

}  // namespace dsv4::cuda
