// K=V row finishing on the GPU (MODEL_SPEC §5.4.3, §5.4.4): the window K=V glue after the wkv GEMM (kv_norm, RoPE
// on 448..511, FP8 simulation of the nope channels) and the compressor's window pooling and finish — the CUDA side
// of backend::cpu::window_kv (after its linear), compressor_pool and compressor_finish, with the same arithmetic.
//
// Rows are bf16 in Precision::kReference and f32 in kF32; compressor projections (kv, score) are f32 in both modes.
#pragma once

#include <cstdint>

#include "backend/cuda/common/stream.h"
#include "backend/cuda/common/weights.h"
#include "backend/ops.h"

namespace dsv4::cuda {

// In place on the wkv output: kv = RMSNorm_{kv_norm}(kv); RoPE on [448, 512) at positions[t]; kReference:
// act_quant(64) → bf16(q·s) on [0, 448). pool (optional): row t is also packed into pool row pool_first + t, the
// bytes sm90_kv_pack (dst_first = pool_first) stores from kv — the pack fused into the finish's launch.
struct WindowKvFinishArgs {
    void* kv = nullptr;                  // [T, 512]
    int64_t tokens = 0;
    DeviceWeightView kv_norm;            // bf16 [512]
    const int64_t* positions = nullptr;  // device [T]
    backend::RopeFreqs freqs;
    float eps = 1e-6f;
    void* pool = nullptr;  // [pool rows, kv_row_bytes] (kv_store.h), 16-byte aligned
    int64_t pool_first = 0;
};
Status sm90_window_kv_finish(backend::Precision precision, const WindowKvFinishArgs& a, StreamHandle stream);

// Pooling of whole windows (backend::CompressorPoolParams): per channel a softmax over the window's m slots (CSA:
// and the previous window's m slots of the first half), f32 math, output bf16 in kReference.
struct CompressorPoolArgs {
    const float* kv = nullptr;          // [n_windows·m, width]
    const float* score = nullptr;       // [n_windows·m, width] (ape included)
    const float* prev_kv = nullptr;     // [m, width] or null (first window of the sequence)
    const float* prev_score = nullptr;  // [m, width] or null
    int64_t n_windows = 0, ratio = 4, head_dim = 512;
    bool overlap = true;                // CSA: width = 2·head_dim
    void* out = nullptr;                // [n_windows, head_dim]
    // Decode mode (graph-capturable: nothing depends on the host's view of the position). When set, the token at
    // *decode_position has already been written to slot pos % ratio of the open window and kv/score are that
    // window's [ratio, width] rows; n_windows must be 1. The kernel pools only when pos % ratio == ratio - 1 (the
    // window closed), using prev_kv/prev_score (non-null in this mode) iff overlap && pos / ratio > 0; otherwise
    // it writes nothing.
    const int64_t* decode_position = nullptr;  // device [1] or null (host-driven windows)
    // Batched decode (decode_positions set; n_windows = B; decode_position must be null): window w belongs to a
    // sequence whose new token is at decode_positions[w]; its open window's `ratio` rows are at
    // kv/score + slots[w]·slot_stride and its previous window's at prev_kv/prev_score + slots[w]·slot_stride (f32
    // elements). Window w is pooled iff pos % ratio == ratio - 1, with the previous window iff overlap &&
    // pos / ratio > 0; its output is out row w. Windows that do not close write nothing and their slots are not
    // read (a negative position never closes: padding rows of a fixed-size batch). The single-sequence form above
    // is this one with B = 1 and slot 0 (same arithmetic, bit for bit).
    const int64_t* decode_positions = nullptr;  // device [B] or null
    const int32_t* slots = nullptr;             // device [B] (required with decode_positions)
    int64_t slot_stride = 0;                    // f32 elements between slots (>= ratio·width)
};
Status sm90_compressor_pool(backend::Precision precision, const CompressorPoolArgs& a, StreamHandle stream);

// RMSNorm_{norm}, RoPE on the last 64 channels at (first_window + i)·ratio, then (kReference) kMain: FP8 simulation
// of [0, c-64); kIndexer (c = 128): Hadamard-128 and FP4 simulation.
struct CompressorFinishArgs {
    const void* pooled = nullptr;  // [n, c]
    int64_t n = 0, head_dim = 512, ratio = 4, first_window = 0;
    backend::CompressedKind kind = backend::CompressedKind::kMain;
    DeviceWeightView norm;         // bf16 [c]
    backend::RopeFreqs freqs;
    float eps = 1e-6f;
    void* normed = nullptr;        // [n, c] after the norm (may be null)
    void* out = nullptr;           // [n, c] (may alias pooled)
    // Decode mode (see CompressorPoolArgs): n must be 1; acts only when pos % ratio == ratio - 1, with
    // first_window = pos / ratio read on the device (the field above is ignored); out is then the entries array's
    // entry 0 and the kernel writes entry first_window (out + first_window·c; normed stays [1, c]).
    const int64_t* decode_position = nullptr;  // device [1] or null
    // Batched decode (decode_positions set; n = B; decode_position must be null): row w of `pooled` is finished
    // iff decode_positions[w] % ratio == ratio - 1, in place or into out row w (out is [B, c], not an entries
    // array: the caller scatters finished rows into its cache), with RoPE at (pos / ratio)·ratio and the kind's
    // simulation; rows that do not close are not written (normed likewise, [B, c]; negative positions never close).
    // first_window is ignored.
    const int64_t* decode_positions = nullptr;  // device [B] or null
};
Status sm90_compressor_finish(backend::Precision precision, const CompressorFinishArgs& a, StreamHandle stream);

}  // namespace dsv4::cuda
