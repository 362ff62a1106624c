// A decode step's whole compressor work in one launch (MODEL_SPEC §5.4.4, §5.4.5, §7.2): for B rows, each a
// session's single new token, the token joins its slot's open window and, where that closes the window, the window
// is pooled, finished, packed into its paged pool row and (CSA) kept as the previous window. It is the fusion of
// the six-launch sequence sm90_compressor_append → sm90_compressor_pool (batched decode) → sm90_compressor_finish
// (batched decode) → sm90_entry_rows → sm90_kv_pack / sm90_key_pack → sm90_compressor_roll, with the same device
// arithmetic (kv_finish.cuh, kv_store.cuh) and byte-identical results in the pool rows and both windows.
#pragma once

#include <cstdint>

#include "backend/cuda/common/stream.h"
#include "backend/cuda/common/weights.h"
#include "backend/cuda/kernels/glue/glue.h"
#include "backend/ops.h"

namespace dsv4::cuda {

// Row r: the token at positions[r] of the session in state slot slots[r] (slots distinct within a call).
//   open[slot][pos % ratio] = (kv[r], score[r]);
//   if pos % ratio == ratio - 1 (the window closes), with j = pos / ratio:
//     e = pool(open[slot], CSA and j > 0: prev[slot]'s first half)        (bf16 in kReference)
//     e = finish(e): RMSNorm_norm, RoPE at j·ratio on the last 64 channels, kReference: kMain FP8 simulation of
//         channels [0, 448), kIndexer Hadamard-128 + FP4 simulation
//     pool row entry_base + 64·table[slot·P + j/64] + j%64 = pack(e)   (kReference: 584-byte FP8 K=V row or
//         68-byte FP4 key, kv_store.h; kF32: the f32 row)
//     CSA (overlap): prev[slot] = open[slot]
// A negative position is a padding row of a fixed-size batch: nothing is read or written for it. Rows that do not
// close write only their open window's row.
struct CompressorDecodeArgs {
    int64_t n = 0;                       // B
    const int64_t* positions = nullptr;  // device [B]
    const int32_t* slots = nullptr;      // device [B]
    const float* kv = nullptr;           // [B, width] f32 projections, width = overlap ? 2·head_dim : head_dim
    const float* score = nullptr;        // [B, width] f32 (ape included unless `ape` is given)
    // Optional f32 or bf16 [ratio, width]: row pos % ratio is added to the token's score row first, sm90_add_ape's
    // arithmetic in this launch (the score projection then leaves it out).
    DeviceWeightView ape;
    int64_t ratio = 4, head_dim = 512;   // CSA main: 4, 512; HCA: 128, 512; indexer keys: 4, 128
    bool overlap = true;                 // CSA (ratio 4): two series and a previous window
    backend::CompressedKind kind = backend::CompressedKind::kMain;  // kMain: head_dim 512; kIndexer: 128
    float* open_kv = nullptr;            // [sessions, ratio, width] f32
    float* open_score = nullptr;         // [sessions, ratio, width]
    float* prev_kv = nullptr;            // [sessions, ratio, width] (overlap only, else null)
    float* prev_score = nullptr;         // [sessions, ratio, width]
    DeviceWeightView norm;               // bf16 [head_dim]
    backend::RopeFreqs freqs;            // compress-layer frequencies
    float eps = 1e-6f;
    PagedEntries entries;                // the pool's page table (indexer keys: entry_base 0)
    void* pool = nullptr;                // [pool rows, kv_row_bytes / key_row_bytes(precision)]
    // The launch just before this one on the stream is a backend kernel that writes nothing this one reads or
    // writes and reads nothing this one writes (the engine: the indexer-key compressor right after the layer's main
    // compressor). In a graph with programmatic edges the kernel then runs alongside it and waits for it only at
    // exit (common/pdl.cuh).
    bool independent_of_previous = false;
};
Status sm90_compressor_decode_fused(backend::Precision precision, const CompressorDecodeArgs& a, StreamHandle stream);

}  // namespace dsv4::cuda
