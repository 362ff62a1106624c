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
struct AttnIndexArgs {
    int32_t* idx = nullptr;  // [n, width], width = win_cols + (CSA: topk, HCA: hca_entries)
    int64_t n = 0, p0 = 0, win_cols = 0, window = 128, chunk_rows = 0;
    const int32_t* picks = nullptr;  // CSA: device [n, topk] entry numbers, -1 = none; null otherwise
    int64_t topk = 0;
    int64_t hca_entries = 0, ratio = 0;  // HCA
};
Status sm90_attn_index(const AttnIndexArgs& a, StreamHandle stream);

}  // namespace dsv4::cuda
