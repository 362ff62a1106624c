// Lightning-indexer scores and the deterministic top-k on the GPU (MODEL_SPEC §5.4.5, §5.4.6) — the CUDA side of
// backend::cpu::indexer_scores and topk.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/common/stream.h"
#include "backend/cuda/kernels/glue/glue.h"
#include "backend/ops.h"

namespace dsv4::cuda {

// I[t, s] = Σ_h w[t,h] · ReLU(q[t,h] · key[s]) for s < (pos_t + 1) / ratio, else -inf.
// kReference (bf16 q, keys, w, scores): bf16(dot) on tensor cores (f32 accumulation), relu, bf16(w·relu), f32 sum
// over heads in head order, bf16 out. kF32: f32 everywhere.
struct IndexerScoresArgs {
    const void* q = nullptr;                           // [T, IH, 128]
    const void* keys = nullptr;                        // [n, 128], or pages of packed keys (keys_packed / key_pages)
    const void* w = nullptr;                           // [T, IH]
    int64_t tokens = 0, heads = 64, n = 0, ratio = 4;  // 1 <= heads <= 64 (padded to 16 inside)
    const int64_t* positions = nullptr;                // device [T]
    void* scores = nullptr;                            // [T, n]
    // When set, key blocks entirely at or beyond row t's visible count (pos_t + 1) / ratio are neither computed nor
    // written (n may then be the cache's capacity; read the scores through TopKArgs::positions).
    bool visible_only = false;
    // kReference: keys are rows of kKeyFp4RowBytes (kv_store.h), dequantised on chip to exactly the bf16 values of
    // the unpacked key (scores bit-identical). kF32: keys stay f32 rows (ignored).
    bool keys_packed = false;
    // When set, key s of token t is row key_pages[t·pages_per_token + s/64]·64 + s%64 of `keys` (pages of 64 keys,
    // one page per key block); n is then the number of keys each token may see (<= pages_per_token·64). Null:
    // keys are contiguous [n] rows.
    const int32_t* key_pages = nullptr;  // device [T, pages_per_token]
    int64_t pages_per_token = 0;
    // kReference with packed keys: q's integer form (value = q_int · 2^q_exp per 32-channel block, |q_int| <= 127,
    // one exponent per head to take the folded path), as sm90_indexer_q_finish writes it. With it the scores run on
    // integer tensor cores, bit-identical to the bf16 path (which reads q) while that path's f32 sums are exact; keys
    // and q_int must then be 16-byte aligned and q_exp 4-byte aligned (otherwise the bf16 path runs).
    const int8_t* q_int = nullptr;  // [T, IH, 128]
    const int8_t* q_exp = nullptr;  // [T, IH, 4]
    // kAuto: integer whenever it can run; kInteger: integer, or an invalid-argument error saying why not; kBf16: the
    // bf16 kernel even with q_int (tests and benchmarks compare the two).
    enum class Path { kAuto, kInteger, kBf16 };
    Path path = Path::kAuto;
};
Status sm90_indexer_scores(backend::Precision precision, const IndexerScoresArgs& a, StreamHandle stream);
// Tokens per sm90_indexer_scores call that fill the integer path's waves exactly once each token's keys take a
// whole CTA (long rows: one CTA per token, kCtasPerSm per SM): a caller splitting a pass into calls cuts it into
// multiples of this, or each call ends in a part-filled wave.
int64_t indexer_scores_wave_tokens();

// The indexer query's finish in the reference numerics, in place on bf16 q [tokens, heads, 128]: RoPE on channels
// 64..127 at positions[t] (freqs: the compressed layers' table), the Hadamard-128 rotation, the e2m1 simulation at
// block 32 (MODEL_SPEC §5.4.5) — one launch, one warp per head vector, bit-identical to sm90_rope, sm90_hadamard128
// and sm90_fp4_quant_e2m1 (x_sim in place) run one after the other.
// Optionally also the simulation's integer form, the operand of the integer indexer scores: value (t, h, c) =
// q_int[t, h, c] · 2^q_exp[t, h, c / 32]. Per head, when its four blocks' scales span at most 3 binades, the
// integers carry their block's offset from the smallest scale and the four exponents are equal (|q_int| <= 96);
// otherwise each block keeps its own exponent (|q_int| <= 12: twice the e2m1 value).
struct IndexerQFinishArgs {
    void* q = nullptr;  // [tokens, heads, 128] bf16
    int64_t tokens = 0, heads = 0;
    const int64_t* positions = nullptr;  // device [tokens]
    backend::RopeFreqs freqs;
    int8_t* q_int = nullptr;  // [tokens, heads, 128] or null
    int8_t* q_exp = nullptr;  // [tokens, heads, 4]; with q_int
    // Optional: the query projection's K-split sums (LinearArgs::partials, [splits][tokens · heads · 128] f32)
    // instead of its bf16 output: the finish first reduces them exactly as the projection's own reduction would
    // (bf16 of the split-ordered f32 sum) — the projection and the finish in two launches instead of three.
    const float* partials = nullptr;
    int splits = 0;
    // Optional: the head weights [tokens, heads] bf16, scaled in place, w = bf16(w · w_scale) — sm90_scale's
    // kReference step, done by this launch (one value per (token, head) vector).
    void* w = nullptr;
    float w_scale = 1.0f;
};
Status sm90_indexer_q_finish(const IndexerQFinishArgs& a, StreamHandle stream);

// sm90_topk_select's route for a call (kAuto: the rule below); kCluster / kChunked force a path for every row length
// the path supports (tests and benchmarks compare the paths on the same rows).
enum class TopKSelectPath { kAuto, kCluster, kChunked };

// Per row the k largest scores, descending, equal scores in ascending index order; a pick whose score is -inf or
// NaN, or past the row's n entries, is -1. Scores bf16 (kReference) or f32 (kF32); k <= 1024.
struct TopKArgs {
    const void* scores = nullptr;  // [rows, n]
    int64_t rows = 0, n = 0, k = 0;
    int32_t* idx = nullptr;  // [rows, k]
    // When set, row t reads only its first min(n, (positions[t] + 1) / ratio) scores: picks are exactly those of
    // a call with n = that count (the rest of the row is never read).
    const int64_t* positions = nullptr;                  // device [rows] or null
    int64_t ratio = 0;                                   // > 0 when positions is set
    TopKSelectPath select_path = TopKSelectPath::kAuto;  // sm90_topk_select only
    // sm90_topk_select only. true: each row's picks by descending score, ties by ascending index (torch.topk's
    // order, the CPU reference's). false: the same picks in the collect's order, without the sort (~1/3 of a
    // one-block select): the keys above the k-th score in index order, then its ties in index order, on every
    // path. A -1 (a pick whose score is -inf) may then sit among the real picks rather than after them. For
    // consumers that read the picks as a set.
    bool sorted = true;
    // sm90_topk_select only. Optional (list.idx set): decode rows write the sparse attention's candidate lists
    // instead of idx — row t's list as sm90_attn_index writes it with picks = these (its window part, then pick j
    // as its entry's pool row, -1 staying -1), so that launch leaves a decode step's chain. Requires list.decode,
    // list.n = rows, list.topk = k and no pass-local rows; list.picks is ignored and idx is not written (may be null).
    AttnIndexArgs list;
    // sm90_topk_select only. Optional: the chunked path's row counters (histograms and tickets), rows ·
    // kTopkSelectCounterWords words of device memory that are zero before the call; the path leaves them zero, so it
    // needs no clearing launch (a memset node in a decode graph, whose edges cannot be programmatic). Null: the
    // counters live in the workspace and are cleared by a memset each call.
    unsigned* counters = nullptr;
};
inline constexpr int64_t kTopkSelectCounterWords = 4 * 256 + 1;  // 4 passes' histograms of 256 bins, a ticket
Status sm90_topk(backend::Precision precision, const TopKArgs& a, StreamHandle stream);

// The picks of sm90_topk, identical for every input (same indices, order and -1s), by a radix select on three paths:
// one block per row (n <= kTopkSelectShortMax scores, keys in shared memory, the row read once); one thread-block
// cluster of 2-8 CTAs per row (n <= kTopkSelectClusterMax: each CTA keeps its share of the keys in shared memory, the
// histograms are summed and the picks gathered through distributed shared memory, the row read once, one launch);
// and chunks over many blocks, one launch per pass (longer rows, or when the device cannot hold a cluster), which
// read the row 2 (bf16) or 4 (f32) times and need `workspace` (device memory, 16-byte aligned, contents ignored) of
// sm90_topk_select_workspace_bytes(a) bytes, which covers both precisions. n must fit an int32 index. Not safe to
// run concurrently on one workspace.
// The switch (H200, docs/kernels/attention.md §6, "Seventh run" and "Top-k select at batch 1"): rows of up to
// kTopkSelectShortMax scores always take the one-block path, rows up to kTopkSelectShortLimit (its shared-memory
// bound) take it when a call has at least kTopkSelectShortRows of them, longer rows take the cluster path up to
// kTopkSelectClusterMax and the chunked path beyond — and a call of one row longer than
// kTopkSelectChunkedSingleRowMin that brings zeroed counters (TopKArgs::counters) takes the chunked path too (B = 1,
// unsorted: 1M context 16.7 against the cluster's 21.2 µs, 256K 15.3 against 11.5; without the counters its memset
// node cost a 1M decode step that gain: docs/kernels/attention.md, "The select's dispatch at batch 1, 1M").
inline constexpr int64_t kTopkSelectShortMax = 8192;
inline constexpr int64_t kTopkSelectShortLimit = 16384;
inline constexpr int64_t kTopkSelectShortRows = 32;
inline constexpr int64_t kTopkSelectClusterMax = 262144;  // 8 CTAs x 32,768 keys: a 1M context's CSA entries
inline constexpr int64_t kTopkSelectChunkedSingleRowMin = 131072;
size_t sm90_topk_select_workspace_bytes(const TopKArgs& a);
Status sm90_topk_select(backend::Precision precision, const TopKArgs& a, void* workspace, size_t workspace_bytes,
                        StreamHandle stream);

}  // namespace dsv4::cuda
