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

// ---- paged caches (src/engine/cuda/gpu_internal.h GpuCache): a layer's K=V pool holds [pass rows R | window
// rings, 128 rows per session slot | entry pages of 64]; entry j of the session in slot s is
// entry_base + 64·table[s·pages_per_session + j/64] + j%64 (an indexer key pool: entry_base 0).
struct PagedEntries {
    int64_t entry_base = 0;
    const int32_t* table = nullptr;  // device [sessions, pages_per_session]
    int64_t pages_per_session = 0;
};

// Candidate lists (the CPU forward's step 4) as pool rows, per query row i at position pos_i = positions[i]:
// a window part of win_cols columns — positions ascending from max(0, pos-window+1), -1 past pos; a position of the
// chunk (>= p0) is pass row row0 + (q - p0), an older one its ring row R + window·slot + q % window — then the
// compressed part: CSA picks[i, c] → entry row (-1 stays -1); HCA entry j visible iff j < (pos+1)/ratio, for
// j < hca_entries.
// Rows are one sequence's n tokens (decode false: p0, slot from the arguments), or each row its own sequence's
// single new token (decode true: p0 = pos_i, slot = slots[i]), so a decode step's launch never changes.
struct AttnIndexArgs {
    int32_t* idx = nullptr;  // [n, width], width = win_cols + (CSA: topk, HCA: hca_entries)
    int64_t n = 0, win_cols = 0, window = 128;
    const int64_t* positions = nullptr;  // device [n]
    bool decode = false;
    int64_t p0 = 0, row0 = 0;            // pass row of row 0; p0: first chunk position (decode false)
    int32_t slot = 0;                    // decode false
    const int32_t* slots = nullptr;      // decode true: device [n]
    int64_t pass_rows = 0;               // R
    PagedEntries entries;
    const int32_t* picks = nullptr;      // CSA: device [n, topk] entry numbers, -1 = none; null otherwise
    int64_t topk = 0;
    int64_t hca_entries = 0, ratio = 0;  // HCA
    // decode false: rows of the pass's local row space (PassRowsArgs) instead of pool rows
    bool pass_local = false;
};
Status sm90_attn_index(const AttnIndexArgs& a, StreamHandle stream);

// A prefill pass's local row space, for decoding each K=V row its lists name once (docs/kernels/attention.md,
// "decode the pass's rows once"): local row k < n is the pass row row0 + k (the chunk's own window rows), k < n +
// window the ring row R + window·slot + (k − n), and n + window + j the sequence's entry j, for j < n_entries.
// rows[k] = that pool row: sm90_kv_unpack of these rows gives the bf16 rows that AttnIndexArgs::pass_local lists
// index. Every local row is a pool row that exists; one whose position holds nothing yet (a ring row of a new
// sequence) is unpacked too, and no list names it.
struct PassRowsArgs {
    int32_t* rows = nullptr;  // [n + window + n_entries]
    int64_t n = 0, window = 128, row0 = 0, pass_rows = 0, n_entries = 0;
    int32_t slot = 0;
    PagedEntries entries;  // read when n_entries > 0
};
inline int64_t pass_local_rows(int64_t n, int64_t window, int64_t n_entries) { return n + window + n_entries; }
Status sm90_pass_rows(const PassRowsArgs& a, StreamHandle stream);

// Pool rows the finished entries go to. decode false: entries first .. first+n-1 of the session in `slot`;
// decode true: row i is its session's new token at positions[i] — the entry positions[i]/ratio when that token
// closes a window (pos % ratio == ratio-1), else -1.
struct EntryRowsArgs {
    int32_t* rows = nullptr;  // [n]
    int64_t n = 0;
    bool decode = false;
    int64_t first = 0;
    int32_t slot = 0;
    const int64_t* positions = nullptr;  // decode: device [n]
    const int32_t* slots = nullptr;      // decode: device [n]
    int64_t ratio = 0;
    PagedEntries entries;
};
Status sm90_entry_rows(const EntryRowsArgs& a, StreamHandle stream);

// Each row's indexer key pages: token_pages[i] = table[slots[i]] (pages_per_session entries).
struct GatherPagesArgs {
    int32_t* token_pages = nullptr;      // [n, pages_per_session]
    int64_t n = 0;
    const int32_t* slots = nullptr;      // device [n]
    const int32_t* table = nullptr;      // device [sessions, pages_per_session]
    int64_t pages_per_session = 0;
};
Status sm90_gather_pages(const GatherPagesArgs& a, StreamHandle stream);

// ---- decode steps: each row is one session's single new token at positions[i], slot slots[i] ----

// The compressors' open windows take the tokens' projections: open_kv[slot][pos % ratio] = kv[i] (and score).
struct CompressorAppendArgs {
    int64_t n = 0;
    const int64_t* positions = nullptr;  // device [n]
    const int32_t* slots = nullptr;      // device [n]
    const float* kv = nullptr;           // [n, width]
    const float* score = nullptr;        // [n, width] (ape included)
    int64_t ratio = 0, width = 0;
    float* open_kv = nullptr;            // [sessions, ratio, width]
    float* open_score = nullptr;
};
Status sm90_compressor_append(const CompressorAppendArgs& a, StreamHandle stream);

// After the entries of windows that just closed were pooled: each such window becomes its session's previous
// window (CSA): prev[slot] = open[slot]. Rows whose token does not close a window change nothing.
struct CompressorRollArgs {
    int64_t n = 0;
    const int64_t* positions = nullptr;
    const int32_t* slots = nullptr;
    int64_t ratio = 0, width = 0;
    const float* open_kv = nullptr;      // [sessions, ratio, width]
    const float* open_score = nullptr;
    float* prev_kv = nullptr;
    float* prev_score = nullptr;
};
Status sm90_compressor_roll(const CompressorRollArgs& a, StreamHandle stream);

// The window rings keep the tokens' K=V rows: pool row R + window·slot + pos % window = pool row row0 + i
// (rows of `row_bytes`, any storage format).
struct RingStoreArgs {
    int64_t n = 0;
    const int64_t* positions = nullptr;
    const int32_t* slots = nullptr;
    void* pool = nullptr;
    int64_t row_bytes = 0, row0 = 0, pass_rows = 0, window = 128;
};
Status sm90_ring_store(const RingStoreArgs& a, StreamHandle stream);

}  // namespace dsv4::cuda
