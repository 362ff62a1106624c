// Sparse-attention decode at V4-Flash shapes (64 heads × 512, indexer 64 heads × 128, top-512, window 128) in the
// reference numerics (bf16 activations, packed FP8 K=V pool rows of 584 bytes, packed FP4 indexer keys of 68 bytes),
// for batch B in {1, 8, 64} × context in {4096, 65536, 1048576}:
//   CSA attention   B queries × (128 window rows + 512 selected entries) gathered from a paged pool of B·ctx/4 rows
//   HCA attention   B queries × (128 window rows + ctx/128 entries)
//   indexer         scores over ctx/4 paged packed keys per query (visible_only, positions ctx-1), then top-512
//                   (sm90_topk, sm90_topk_select sorted / unsorted / writing the attention's candidate lists)
//   compressor      one CSA close per query (batched decode: append, pool, finish, entry rows, pack, roll), main
//                   (512-d K=V entries) and indexer (128-d keys); six launches, then the fused one-launch kernel
//                   (sm90_compressor_decode_fused) on the same inputs; and both fused kernels as the engine pairs
//                   them (the key compressor independent_of_previous, overlapping the main one) against the pair
//                   launched to wait
//   baseline        the same rows gathered to contiguous bf16 (sm90_kv_unpack), then the same attention kernel over
//                   the contiguous rows 0..n-1 (sm90_sparse_attn, unpacked)
// plus the device copy bandwidth (1 GiB device-to-device, bytes read + written) measured in the same run after
// untimed warm-up copies (an idle GPU starts at its lowest clock), and the CSA layer at batch 1, 8K context:
// compressors + indexer + attention, once with the first kernels (six-launch compressors, sm90_topk, one-pass
// attention) and once with the best of each part (the overlapped fused pair, sm90_topk_select, reference-max split).
//
// Method: every pool holds valid packed rows (random bf16 rows packed by sm90_kv_pack / sm90_key_pack, never
// zeros); page tables are random permutations of 64-row pages; CSA picks are random distinct entries per query.
// Inputs are rotated over enough copies (pools, queries, index lists, compressor state) that the rotated working set
// is >= 150 MB (3x the L2). A timing is one launch of a CUDA graph holding N consecutive calls on rotated inputs
// (N sized so a graph takes ~10 ms, at least 2), captured with programmatic kernel edges as the engine's decode
// graphs are (common/graph.h); time per call = graph time / N; median of 21 timings after 2 warm
// launches. Direct launches replace the graph if capture fails (reported).
//
// --prefill adds a prefill-shaped point first (--prefill-only runs only it): CSA attention of the last 2,048 queries
// of one 8K sequence (each its own window and top-512 of the sequence's 2,048 entries), in one call (the wgmma prefill
// kernel from kSparseAttnPrefillMinTokens tokens) and the same queries in calls of 256 (the one-pass mma.sync kernel,
// one 16-head tile per block), so the prefill kernel's gain is measured at kernel level.
// --layer runs only the CSA layer at batch 1, 8K (its parts, then the graph of its launches as a decode step runs
// them — compressors on branches, the query finish, the select writing the lists — beside the same launches on one
// stream and the older serial measure: bench_layer_graph); a full run ends with the same measurement. --indexer-only runs only the indexer points, first an 8K prefill pass's
// scores (bench_indexer_prefill).
// --split adds, at every CSA / HCA attention point, the split-candidate kernel (sm90_sparse_attn_split, automatic
// chunks) in both modes — reference max (block-max pass + partials + combine) and plain (partials + combine) — on the
// same packed inputs, next to the one-pass kernel (the layer point times it always), and reference max with each of
// its two kernels forced (16-head mma.sync CTAs, 64-head wgmma CTAs); --attention-only skips the
// indexer, compressor and layer parts. Without a usable CUDA GPU it says so and exits with status 1.
//
// --indexer-only ends with the select alone on capacity-wide rows (a session sized for 1M tokens at 8K context).
// --indexer-point B CONTEXT runs that one indexer point (e.g. to profile its kernels); --attention-point csa|hca B
// CONTEXT runs that one attention point with the split kernels; --split-chunk N forces the chunk of the rows with a
// kernel forced (a multiple of 64).
//
// Usage: dsv4_bench_attention [--date YYYY-MM-DD] [--split] [--attention-only] [--prefill | --prefill-only] [--layer]
//                             [--indexer-only] [--indexer-point B CONTEXT]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "../bench_check.h"
#include "backend/cuda/common/buffer.h"
#include "backend/cuda/common/copy.h"
#include "backend/cuda/common/graph.h"
#include "backend/cuda/common/stream.h"
#include "backend/cuda/common/weights.h"
#include "backend/cuda/device.h"
#include "backend/cuda/kernels/act_quant/act_quant.h"
#include "backend/cuda/kernels/attention/attention.h"
#include "backend/cuda/kernels/compressor_decode/compressor_decode.h"
#include "backend/cuda/kernels/glue/glue.h"
#include "backend/cuda/kernels/indexer/indexer.h"
#include "backend/cuda/kernels/kv_finish/kv_finish.h"
#include "backend/cuda/kernels/kv_store/kv_store.h"
#include "backend/cuda/kernels/synthetic/synthetic.h"
#include "backend/ops.h"

namespace {

using namespace dsv4;
using namespace dsv4::cuda;
using backend::Precision;
constexpr Precision kRef = Precision::kReference;

// V4-Flash attention shapes (MODEL_SPEC §5.4)
constexpr int64_t kHeads = 64, kHeadDim = 512, kIndexHeads = 64, kIndexDim = 128, kTopk = 512, kWindow = 128;
constexpr int64_t kCsaRatio = 4, kHcaRatio = 128, kPage = 64;
constexpr int64_t kCompressorPosition = 8191;  // the token that closes window 2047 (pos % 4 == 3)

constexpr int kTimings = 21, kWarmLaunches = 2;
constexpr double kRotateBytes = 150e6;    // rotated working set: 3x the 50 MB L2
constexpr double kGraphTargetUs = 10000;  // calls per timed graph: about this long, at least 2
constexpr int kMaxRotations = 4096;
constexpr double kMarginBytes = double(size_t(1) << 30);  // free memory a point leaves untouched

#define CHECK_CUDA(call)                                                                                \
    do {                                                                                                \
        const cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                        \
            std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            std::exit(1);                                                                               \
        }                                                                                               \
    } while (0)

struct Env {
    Stream stream;
    StreamHandle s = nullptr;
    std::mt19937_64 rng{20261201};
    double copy_tbs = 0;
    backend::RopeFreqs freqs;  // compressed-entry RoPE (compress_rope_theta 160000, YaRN 16 over 65536)
    uint64_t seed = 1;
    int64_t split_chunk = 0;  // --split-chunk: the forced-kernel split rows' chunk (0: automatic)
};
Env* g = nullptr;

DeviceBuffer alloc(size_t bytes, const char* what) {
    auto r = DeviceBuffer::allocate(std::max<size_t>(bytes, 16), what);
    CHECK(r.status());
    return std::move(*r);
}
template <typename T>
DeviceBuffer upload(const std::vector<T>& v, const char* what) {
    DeviceBuffer b = alloc(v.size() * sizeof(T), what);
    CHECK(b.upload(v.data(), v.size() * sizeof(T)));
    return b;
}
void fill(void* p, int64_t count, FillKind kind, float lo = -1.0f, float hi = 1.0f) {
    FillArgs a;
    a.data = p;
    a.count = count;
    a.kind = kind;
    a.lo = lo, a.hi = hi;
    a.seed = g->seed++;
    CHECK(sm90_fill_synthetic(a, g->s));
}
DeviceBuffer random_bf16(int64_t count, const char* what, float lo = -1.0f, float hi = 1.0f) {
    DeviceBuffer b = alloc(size_t(count) * 2, what);
    fill(b.data(), count, FillKind::kBF16, lo, hi);
    return b;
}
DeviceBuffer random_f32(int64_t count, const char* what) {
    DeviceBuffer b = alloc(size_t(count) * 4, what);
    fill(b.data(), count, FillKind::kF32);
    return b;
}

// Valid packed rows: random bf16 rows of `dim` channels, packed chunk by chunk into pool rows 0..rows-1.
void fill_packed_pool(void* pool, int64_t rows, bool keys) {
    const int64_t dim = keys ? kIndexDim : kHeadDim, chunk = std::min<int64_t>(rows, (int64_t(32) << 20) / (dim * 2));
    DeviceBuffer staging = alloc(size_t(chunk * dim) * 2, "bf16 staging rows");
    for (int64_t first = 0; first < rows; first += chunk) {
        const int64_t n = std::min(chunk, rows - first);
        fill(staging.data(), n * dim, FillKind::kBF16);
        if (keys) {
            KeyPackArgs a;
            a.rows = staging.data(), a.n = n, a.dst_first = first, a.pool = pool;
            CHECK(sm90_key_pack(kRef, a, g->s));
        } else {
            KvPackArgs a;
            a.rows = staging.data(), a.n = n, a.dst_first = first, a.pool = pool;
            CHECK(sm90_kv_pack(kRef, a, g->s));
        }
    }
    CHECK(g->stream.synchronize());
}

int copies_for(double bytes) {
    return bytes >= kRotateBytes ? 1 : int(std::min<double>(kMaxRotations, std::ceil(kRotateBytes / bytes)));
}

struct Timing {
    double us = 0;  // median per call
    int calls = 0;  // calls per timing (distinct rotated inputs)
    bool graph = false;
};

// One timed part of the CSA layer as its bench function set it up: on(i, stream) launches it on rotation
// i < rotations. Handed to a caller's continuation while the function's buffers are alive, so the whole layer can be
// timed as one graph (--layer), parts on graph branches where a decode step runs them beside its chain.
struct Part {
    int rotations = 0;
    std::function<Status(int, StreamHandle)> on;
    Status call(int i) const { return on(i % rotations, g->s); }
};

// Median time of one call(i) (i = rotation index < rotations).
Timing time_op(int rotations, const std::function<Status(int)>& call) {
    auto timer = EventTimer::create();
    CHECK(timer.status());
    CHECK(call(0));  // first launch (lazy set-up), then one timed call to size the graph
    CHECK(g->stream.synchronize());
    CHECK(timer->start(g->s));
    CHECK(call(1 % rotations));
    CHECK(timer->stop(g->s));
    auto one = timer->elapsed_ms();
    CHECK(one.status());
    CHECK(g->stream.synchronize());
    Timing t;
    t.calls = std::min(rotations, std::max(2, int(kGraphTargetUs / std::max(1.0, double(*one) * 1e3))));

    // captured as the engine captures a decode step: kernel-to-kernel edges programmatic (common/graph.h), so a
    // kernel's launch overlaps its predecessor as it does in `dsv4 generate`
    auto captured = CapturedGraph::capture(g->s, [&]() -> Status {
        for (int i = 0; i < t.calls; ++i) DSV4_RETURN_IF_ERROR(call(i));
        return Status::ok();
    });
    t.graph = captured.is_ok();
    if (!t.graph) (void)cudaGetLastError();  // clear a failed capture; the direct launches below report real errors
    std::vector<double> per;
    for (int k = 0; k < kWarmLaunches + kTimings; ++k) {
        CHECK(timer->start(g->s));
        if (t.graph)
            CHECK(captured->launch(g->s));
        else
            for (int i = 0; i < t.calls; ++i) CHECK(call(i));
        CHECK(timer->stop(g->s));
        auto ms = timer->elapsed_ms();
        CHECK(ms.status());
        if (k >= kWarmLaunches) per.push_back(double(*ms) * 1e3 / t.calls);
    }
    CHECK(g->stream.synchronize());
    std::sort(per.begin(), per.end());
    t.us = per[per.size() / 2];
    return t;
}

std::string ctx_name(int64_t ctx) {
    if (ctx % 1048576 == 0) return std::to_string(ctx / 1048576) + "M";
    if (ctx % 1024 == 0) return std::to_string(ctx / 1024) + "K";
    return std::to_string(ctx);
}

void print_table_header() {
    std::printf("| B | ctx | op | us/call | MB | GFLOP | TB/s | %% copy | TFLOP/s | calls | note |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    std::fflush(stdout);
}

// | B | ctx | op | us/call | MB moved | GFLOP | TB/s | % copy | TFLOP/s | calls | note |
void print_row(int64_t B, const std::string& ctx, const char* op, const Timing& t, double bytes, double flops,
               const std::string& note) {
    const double tbs = bytes / (t.us * 1e-6) / 1e12, tf = flops / (t.us * 1e-6) / 1e12;
    std::printf("| %lld | %s | %s | %.2f | %.2f | %.3f | %.3f | %.1f%% | %.1f | %d%s | %s |\n", (long long)B,
                ctx.c_str(), op, t.us, bytes / 1e6, flops / 1e9, tbs, 100.0 * tbs / g->copy_tbs, tf, t.calls,
                t.graph ? "" : " direct", note.c_str());
    std::fflush(stdout);
}

bool fits(double need, int64_t B, const std::string& ctx, const char* op) {
    size_t free_b = 0, total_b = 0;
    CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
    if (need + kMarginBytes <= double(free_b)) return true;
    std::printf("| %lld | %s | %s | skipped: needs %.2f GB, %.2f GB free (1 GiB kept) | | | | | | | |\n", (long long)B,
                ctx.c_str(), op, need / 1e9, double(free_b) / 1e9);
    std::fflush(stdout);
    return false;
}

// k distinct values of [0, n) in random order (Floyd's sampling, then a shuffle).
std::vector<int64_t> distinct_sample(int64_t n, int64_t k) {
    std::vector<int64_t> out;
    std::unordered_set<int64_t> seen;
    out.reserve(size_t(k));
    for (int64_t j = n - k; j < n; ++j) {
        const int64_t t = std::uniform_int_distribution<int64_t>(0, j)(g->rng);
        const int64_t v = seen.count(t) ? j : t;
        seen.insert(v);
        out.push_back(v);
    }
    std::shuffle(out.begin(), out.end(), g->rng);
    return out;
}

// A random page table: the B·pages entry pages of the B sequences (sequence b owns pages b·pages ..) land on a
// random permutation of the pool's pages.
std::vector<int32_t> page_permutation(int64_t n_pages) {
    std::vector<int32_t> perm(static_cast<size_t>(n_pages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), g->rng);
    return perm;
}

DeviceBuffer positions_at(int64_t B, int64_t pos) { return upload(std::vector<int64_t>(size_t(B), pos), "positions"); }

// CSA (csa) or HCA attention at batch B, context ctx; split: also time sm90_sparse_attn_split in both modes.
// Returns the packed one-pass and (split) reference-max split times (µs); -1 when skipped or not timed.
struct AttentionTimes {
    double one_pass = -1, split_ref = -1;
};
// one_sequence: the B queries are the last B positions of one sequence (a prefill pass): one pool of that sequence's
// entries and B + 127 window rows, query b's window the 128 rows ending at its own; otherwise B sequences of ctx each.
AttentionTimes bench_attention(bool csa, int64_t B, int64_t ctx, bool split,
                               const std::function<void(const Part& split_plain)>& with_part = {},
                               bool one_sequence = false) {
    const std::string cn = ctx_name(ctx);
    const char* op = one_sequence ? (csa ? "CSA attention, one sequence's queries (packed FP8 gather)"
                                         : "HCA attention, one sequence's queries (packed FP8 gather)")
                                  : (csa ? "CSA attention (packed FP8 gather)" : "HCA attention (packed FP8 gather)");
    const char* base_op = csa ? "CSA baseline: unpack to bf16 + attention" : "HCA baseline: unpack to bf16 + attention";
    const int64_t entries = csa ? ctx / kCsaRatio : ctx / kHcaRatio;
    const int64_t pps = (entries + kPage - 1) / kPage;  // entry pages per sequence
    const int64_t width = kWindow + (csa ? kTopk : entries);
    const int64_t seqs = one_sequence ? 1 : B, window_rows = one_sequence ? B + kWindow - 1 : B * kWindow;
    const int64_t copy_rows = seqs * pps * kPage + window_rows;  // [entry pages | window rows]
    const double copy_bytes = double(copy_rows) * double(kKvFp8RowBytes);
    const double touched = double(B * width) * double(kKvFp8RowBytes);
    const int pool_copies = copies_for(copy_bytes);
    const int rotations = std::min(kMaxRotations, std::max({2, pool_copies, copies_for(touched)}));
    const size_t q_bytes = size_t(B * kHeads * kHeadDim) * 2, list = size_t(B * width);
    // the split kernel's workspace (partials and block maxima) at this shape, automatic chunks
    SparseAttnArgs shape;
    shape.tokens = B, shape.heads = kHeads, shape.topk = width, shape.kv_packed = true;
    SparseAttnSplitOptions with_mma, with_wgmma;  // each kernel forced (the automatic call takes one of them)
    with_mma.kernel = SplitKernel::kMmaSync, with_wgmma.kernel = SplitKernel::kWgmma;
    with_mma.chunk = with_wgmma.chunk = g->split_chunk;
    const size_t ws_bytes = split ? std::max({sm90_sparse_attn_split_workspace_bytes(shape),
                                              sm90_sparse_attn_split_workspace_bytes(shape, with_mma),
                                              sm90_sparse_attn_split_workspace_bytes(shape, with_wgmma)})
                                  : 0;
    const double need = pool_copies * copy_bytes + double(rotations) * double(q_bytes + list * 4) + double(q_bytes) +
                        double(list) * (1024 + 4) + double(ws_bytes) + 33e6;
    if (!fits(need, B, cn, op)) return {};

    DeviceBuffer pool = alloc(size_t(pool_copies * copy_bytes), "K=V pool");
    fill_packed_pool(pool.data(), pool_copies * copy_rows, false);
    DeviceBuffer q = random_bf16(int64_t(rotations) * B * kHeads * kHeadDim, "q");
    DeviceBuffer out = alloc(q_bytes, "attention out");
    DeviceBuffer sink = random_f32(kHeads, "sink");
    DeviceBuffer pos = positions_at(B, ctx - 1);
    DeviceBuffer unpacked = alloc(list * 1024, "baseline bf16 rows");

    // index lists [rotation][b][window | entries] as pool rows
    const std::vector<int32_t> perm = page_permutation(seqs * pps);
    std::vector<int32_t> idx(size_t(rotations) * list);
    for (int r = 0; r < rotations; ++r) {
        const int64_t base = int64_t(r % pool_copies) * copy_rows;
        for (int64_t b = 0; b < B; ++b) {
            int32_t* row = &idx[size_t(r) * list + size_t(b * width)];
            const int64_t window0 = base + seqs * pps * kPage + (one_sequence ? b : b * kWindow);
            for (int64_t j = 0; j < kWindow; ++j) row[j] = int32_t(window0 + j);
            std::vector<int64_t> picks;
            if (csa) {
                picks = distinct_sample(entries, kTopk);
            } else {
                picks.resize(size_t(entries));
                std::iota(picks.begin(), picks.end(), 0);
            }
            for (size_t k = 0; k < picks.size(); ++k) {
                const int64_t e = picks[k];
                const int64_t page = perm[size_t((one_sequence ? 0 : b) * pps + e / kPage)];
                row[kWindow + int64_t(k)] = int32_t(base + page * kPage + e % kPage);
            }
        }
    }
    DeviceBuffer d_idx = upload(idx, "index lists");
    std::vector<int32_t> contiguous(list);
    std::iota(contiguous.begin(), contiguous.end(), 0);
    DeviceBuffer d_contig = upload(contiguous, "contiguous index list");
    CHECK(g->stream.synchronize());

    auto args = [&](int i, bool packed) {
        SparseAttnArgs a;
        a.q = q.as<uint8_t>() + size_t(i) * q_bytes;
        a.kv = packed ? pool.data() : unpacked.data();
        a.idx = packed ? d_idx.as<int32_t>() + size_t(i) * list : d_contig.as<int32_t>();
        a.tokens = B, a.heads = kHeads, a.topk = width;
        a.n_kv = packed ? pool_copies * copy_rows : int64_t(list);
        a.sink = sink.as<float>();
        a.scale = float(1.0 / std::sqrt(double(kHeadDim)));
        a.derotate = true;
        a.positions = pos.as<int64_t>();
        a.freqs = g->freqs;
        a.out = out.data();
        a.kv_packed = packed;
        return a;
    };
    const Timing tp = time_op(rotations, [&](int i) { return sm90_sparse_attn(kRef, args(i, true), g->s); });
    // prefill-shaped calls: the same queries in calls of kDecodeMaxRows tokens, i.e. one head tile per block
    Timing t_small;
    if (B >= kSparseAttnPrefillMinTokens)
        t_small = time_op(rotations, [&](int i) -> Status {
            for (int64_t t0 = 0; t0 < B; t0 += kDecodeMaxRows) {
                SparseAttnArgs a = args(i, true);
                a.tokens = std::min<int64_t>(kDecodeMaxRows, B - t0);
                a.q = static_cast<const uint8_t*>(a.q) + size_t(t0 * kHeads * kHeadDim) * 2;
                a.idx += t0 * width;
                a.positions += t0;
                a.out = static_cast<uint8_t*>(a.out) + size_t(t0 * kHeads * kHeadDim) * 2;
                DSV4_RETURN_IF_ERROR(sm90_sparse_attn(kRef, a, g->s));
            }
            return Status::ok();
        });
    // a prefill pass whose distinct rows (the sequence's entry pages and window rows: pool copy 0) are first decoded
    // once into bf16 rows, which the wgmma kernel then copies instead of decoding every candidate it gathers
    Timing t_once, t_once_unpack;
    if (one_sequence && B >= kSparseAttnPrefillMinTokens) {
        auto unpack_once = [&] {
            return sm90_kv_unpack(kRef, pool.data(), d_contig.as<int32_t>(), copy_rows, unpacked.data(), g->s);
        };
        t_once_unpack = time_op(rotations, [&](int) { return unpack_once(); });
        t_once = time_op(rotations, [&](int i) {
            DSV4_RETURN_IF_ERROR(unpack_once());
            SparseAttnArgs a = args(i, true);
            a.kv = unpacked.data(), a.kv_packed = false, a.n_kv = copy_rows;
            a.idx = d_idx.as<int32_t>();  // rotation 0's lists: rows of pool copy 0
            return sm90_sparse_attn(kRef, a, g->s);
        });
    }
    Timing ts_ref, ts_plain, ts_mma, ts_wgmma;
    int64_t split_chunk = 0;
    DeviceBuffer ws = alloc(ws_bytes, "split workspace");
    if (split) {
        split_chunk = sm90_sparse_attn_split_chunk(shape);
        SparseAttnSplitOptions ref_max, plain;
        plain.match_reference_max = false;
        ts_ref = time_op(rotations, [&](int i) {
            return sm90_sparse_attn_split(kRef, args(i, true), ws.data(), ws_bytes, g->s, ref_max);
        });
        ts_plain = time_op(rotations, [&](int i) {
            return sm90_sparse_attn_split(kRef, args(i, true), ws.data(), ws_bytes, g->s, plain);
        });
        ts_mma = time_op(rotations, [&](int i) {
            return sm90_sparse_attn_split(kRef, args(i, true), ws.data(), ws_bytes, g->s, with_mma);
        });
        ts_wgmma = time_op(rotations, [&](int i) {
            return sm90_sparse_attn_split(kRef, args(i, true), ws.data(), ws_bytes, g->s, with_wgmma);
        });
    }
    const Timing tu = time_op(rotations, [&](int i) {
        return sm90_kv_unpack(kRef, pool.data(), d_idx.as<int32_t>() + size_t(i) * list, int64_t(list), unpacked.data(),
                              g->s);
    });
    const Timing tb = time_op(rotations, [&](int i) {
        DSV4_RETURN_IF_ERROR(sm90_kv_unpack(kRef, pool.data(), d_idx.as<int32_t>() + size_t(i) * list, int64_t(list),
                                            unpacked.data(), g->s));
        return sm90_sparse_attn(kRef, args(i, false), g->s);
    });
    const double bytes = double(list) * double(kKvFp8RowBytes + 4) + 2.0 * double(q_bytes);
    const double flops = 4.0 * double(B) * double(kHeads) * double(width) * double(kHeadDim);
    char note[256];
    std::snprintf(note, sizeof note, "%lld candidates/query; pool %.1f MB x %d copies", (long long)width,
                  copy_bytes / 1e6, pool_copies);
    print_row(B, cn, op, tp, bytes, flops, note);
    if (B >= kSparseAttnPrefillMinTokens) {
        std::snprintf(note, sizeof note,
                      "the same queries in calls of %lld (one-pass mma.sync kernel); the one "
                      "call (wgmma prefill kernel) is %.2fx faster",
                      (long long)kDecodeMaxRows, t_small.us / tp.us);
        print_row(B, cn, csa ? "CSA attention, calls of 256" : "HCA attention, calls of 256", t_small, bytes, flops,
                  note);
    }
    if (t_once.us > 0) {
        std::snprintf(note, sizeof note,
                      "the pass's %lld distinct rows decoded to bf16 first (%.2f us of it), then the wgmma kernel on "
                      "them; %.2fx the packed call",
                      (long long)copy_rows, t_once_unpack.us, tp.us / t_once.us);
        print_row(B, cn, csa ? "CSA attention, rows decoded once" : "HCA attention, rows decoded once", t_once, bytes,
                  flops, note);
    }
    if (split) {
        const int64_t chunks = split_chunk > 0 ? (width + split_chunk - 1) / split_chunk : 0;
        std::snprintf(note, sizeof note,
                      "chunk %lld (%lld chunks, %lld partials); block-max pass + partials + combine; %.2fx the one-pass "
                      "speed; workspace %.1f MB",
                      (long long)split_chunk, (long long)chunks, (long long)(chunks * B * kHeads / 16),
                      tp.us / ts_ref.us, double(ws_bytes) / 1e6);
        print_row(B, cn, csa ? "CSA split attention, reference max" : "HCA split attention, reference max", ts_ref,
                  bytes, flops, note);
        std::snprintf(note, sizeof note,
                      "chunk %lld; partials + combine (P re-rounded per chunk); %.2fx the one-pass "
                      "speed",
                      (long long)split_chunk, tp.us / ts_plain.us);
        print_row(B, cn, csa ? "CSA split attention, plain" : "HCA split attention, plain", ts_plain, bytes, flops,
                  note);
        for (const auto* o : {&with_mma, &with_wgmma}) {
            const bool wg = o == &with_wgmma;
            std::snprintf(note, sizeof note, "reference max, %s forced: chunk %lld",
                          wg ? "64-head wgmma CTAs" : "16-head mma.sync CTAs",
                          (long long)sm90_sparse_attn_split_chunk(shape, *o));
            print_row(B, cn,
                      csa ? (wg ? "CSA split attention, wgmma" : "CSA split attention, mma.sync")
                          : (wg ? "HCA split attention, wgmma" : "HCA split attention, mma.sync"),
                      wg ? ts_wgmma : ts_mma, bytes, flops, note);
        }
    }
    std::snprintf(note, sizeof note, "unpack alone %.2f us; packed is %.2fx faster (rates on the packed bytes)", tu.us,
                  tb.us / tp.us);
    print_row(B, cn, base_op, tb, bytes, flops, note);
    AttentionTimes times;
    times.one_pass = tp.us;
    if (split) times.split_ref = ts_ref.us;
    if (split && with_part)  // the mode a decode step runs: plain (each chunk from its own maximum)
        with_part(Part{rotations, [&](int i, StreamHandle st) {
                           SparseAttnSplitOptions plain;
                           plain.match_reference_max = false;
                           return sm90_sparse_attn_split(kRef, args(i, true), ws.data(), ws_bytes, st, plain);
                       }});
    return times;
}

// The indexer queries as the engine hands them over: `rows` random query rows finished by sm90_indexer_q_finish at
// position `pos` (positions: one per row, or null for pos everywhere), the bf16 simulation in q and its integer form.
struct FinishedQueries {
    DeviceBuffer q, q_int, q_exp;
};
FinishedQueries finished_queries(int64_t rows, const int64_t* positions) {
    FinishedQueries f;
    f.q = random_bf16(rows * kIndexHeads * kIndexDim, "indexer q");
    f.q_int = alloc(size_t(rows * kIndexHeads * kIndexDim), "indexer q integers");
    f.q_exp = alloc(size_t(rows * kIndexHeads * 4), "indexer q exponents");
    IndexerQFinishArgs a;
    a.q = f.q.data(), a.tokens = rows, a.heads = kIndexHeads, a.positions = positions, a.freqs = g->freqs;
    a.q_int = f.q_int.as<int8_t>(), a.q_exp = f.q_exp.as<int8_t>();
    CHECK(sm90_indexer_q_finish(a, g->s));
    return f;
}

// An indexer scores call of `tokens` finished queries (64 heads, row offset `row`) over `n` paged packed keys,
// kernel by `path`.
IndexerScoresArgs finished_query_call(const FinishedQueries& fq, int64_t row, const void* keys, const void* w,
                                      int64_t tokens, int64_t n, const int64_t* positions, void* scores,
                                      const int32_t* pages, int64_t pages_per_token, IndexerScoresArgs::Path path) {
    IndexerScoresArgs a;
    a.q = fq.q.as<uint8_t>() + size_t(row * kIndexHeads * kIndexDim) * 2;
    a.q_int = fq.q_int.as<int8_t>() + row * kIndexHeads * kIndexDim;
    a.q_exp = fq.q_exp.as<int8_t>() + row * kIndexHeads * 4;
    a.keys = keys, a.w = w;
    a.tokens = tokens, a.heads = kIndexHeads, a.n = n, a.ratio = kCsaRatio;
    a.positions = positions;
    a.scores = scores;
    a.keys_packed = true;
    a.key_pages = pages, a.pages_per_token = pages_per_token;
    a.path = path;
    return a;
}

// Indexer scores + top-512 at batch B, context ctx; returns scores + sm90_topk and scores + sm90_topk_select (µs),
// -1 when skipped.
struct IndexerTimes {
    double with_topk = -1, with_select = -1;
};
// The indexer's launches of a decode step for the layer graph: the query finish, the scores, the unsorted select
// into picks and sm90_attn_index over them (the engine's chain before the select wrote the lists), and the select
// writing the attention's candidate lists itself (TopKArgs::list, the engine's chain since).
struct IndexerParts {
    Part q_finish, scores, select, attn_index, select_lists;
};
IndexerTimes bench_indexer(int64_t B, int64_t ctx, const std::function<void(const IndexerParts&)>& with_parts = {}) {
    const std::string cn = ctx_name(ctx);
    const int64_t entries = ctx / kCsaRatio, pps = (entries + kPage - 1) / kPage;
    const int64_t copy_rows = B * pps * kPage;
    const double copy_bytes = double(copy_rows) * double(kKeyFp4RowBytes);
    const int pool_copies = copies_for(copy_bytes);
    const int rotations = std::max(2, pool_copies);
    const size_t q_bytes = size_t(B * kIndexHeads * kIndexDim) * 2, w_bytes = size_t(B * kIndexHeads) * 2;
    const size_t scores_bytes = size_t(B * entries) * 2;
    const double need = pool_copies * copy_bytes + double(rotations) * double(q_bytes + w_bytes + size_t(B * pps) * 4) +
                        double(scores_bytes) + 33e6;
    if (!fits(need, B, cn, "indexer")) return {};

    DeviceBuffer keys = alloc(size_t(pool_copies * copy_bytes), "indexer key pool");
    fill_packed_pool(keys.data(), pool_copies * copy_rows, true);
    DeviceBuffer q_pos = positions_at(int64_t(rotations) * B, ctx - 1);
    const FinishedQueries fq = finished_queries(int64_t(rotations) * B, q_pos.as<int64_t>());
    DeviceBuffer w = random_bf16(int64_t(rotations) * B * kIndexHeads, "indexer weights", 0.0f, 0.1f);
    DeviceBuffer scores = alloc(scores_bytes, "scores");
    DeviceBuffer picks = alloc(size_t(B * kTopk) * 4, "top-k");
    DeviceBuffer pos = positions_at(B, ctx - 1);
    const std::vector<int32_t> perm = page_permutation(B * pps);
    std::vector<int32_t> pages(size_t(rotations * B * pps));
    for (int r = 0; r < rotations; ++r)
        for (int64_t p = 0; p < B * pps; ++p)
            pages[size_t(r * B * pps + p)] = int32_t(int64_t(r % pool_copies) * (copy_rows / kPage) + perm[size_t(p)]);
    DeviceBuffer d_pages = upload(pages, "key pages");
    CHECK(g->stream.synchronize());

    // the finished query as the engine hands it over; path: the engine's (kAuto: integer) or the bf16 kernel
    auto score_with = [&](int i, IndexerScoresArgs::Path path, StreamHandle st) {
        IndexerScoresArgs a = finished_query_call(
            fq, int64_t(i) * B, keys.data(), w.as<uint8_t>() + size_t(i) * w_bytes, B, entries, pos.as<int64_t>(),
            scores.data(), d_pages.as<int32_t>() + size_t(i) * size_t(B * pps), pps, path);
        a.visible_only = true;
        return sm90_indexer_scores(kRef, a, st);
    };
    auto score = [&](int i) { return score_with(i, IndexerScoresArgs::Path::kAuto, g->s); };
    auto topk = [&]() {
        TopKArgs a;
        a.scores = scores.data();
        a.rows = B, a.n = entries, a.k = kTopk;
        a.idx = picks.as<int32_t>();
        a.positions = pos.as<int64_t>();
        a.ratio = kCsaRatio;
        return sm90_topk(kRef, a, g->s);
    };
    const Timing ts = time_op(rotations, score);
    const Timing tt = time_op(rotations, [&](int i) {
        DSV4_RETURN_IF_ERROR(score(i));
        return topk();
    });
    const double key_bytes = double(B * entries) * double(kKeyFp4RowBytes) + double(q_bytes + w_bytes);
    const double flops = 2.0 * double(B) * double(entries) * double(kIndexHeads) * double(kIndexDim);
    const double topk_bytes = double(scores_bytes) + double(B * kTopk) * 4;
    char note[256];
    std::snprintf(note, sizeof note, "%lld keys/query (68 B); key pool %.1f MB x %d copies; + bf16 scores written",
                  (long long)entries, copy_bytes / 1e6, pool_copies);
    print_row(B, cn, "indexer scores (paged packed FP4 keys, integer wgmma)", ts, key_bytes + double(scores_bytes),
              flops, note);
    const Timing ts_bf16 =
        time_op(rotations, [&](int i) { return score_with(i, IndexerScoresArgs::Path::kBf16, g->s); });
    std::snprintf(note, sizeof note, "same scores bit for bit; the integer path (row above) is %.2fx its speed",
                  ts_bf16.us / ts.us);
    print_row(B, cn, "indexer scores, bf16 mma.sync path", ts_bf16, key_bytes + double(scores_bytes), flops, note);
    Timing tk = tt;
    tk.us = std::max(1e-3, tt.us - ts.us);
    print_row(B, cn, "top-512 (total minus scores)", tk, topk_bytes, 0, "scores read once + picks written");
    // sm90_topk_select (the same picks) on the same scores, timed the same way: scores + select minus scores
    TopKArgs sa;
    sa.scores = scores.data(), sa.rows = B, sa.n = entries, sa.k = kTopk, sa.idx = picks.as<int32_t>();
    sa.positions = pos.as<int64_t>(), sa.ratio = kCsaRatio;
    const size_t sel_bytes = sm90_topk_select_workspace_bytes(sa);
    DeviceBuffer sel_ws = alloc(sel_bytes, "top-k select workspace");
    const auto select_time = [&](const TopKArgs& a, void* ws, size_t ws_bytes) {  // scores + select minus scores
        Timing t = time_op(rotations, [&](int i) {
            DSV4_RETURN_IF_ERROR(score(i));
            return sm90_topk_select(kRef, a, ws, ws_bytes, g->s);
        });
        t.us = std::max(1e-3, t.us - ts.us);
        return t;
    };
    const Timing tks = select_time(sa, sel_ws.data(), sel_bytes);
    std::snprintf(note, sizeof note, "sm90_topk_select, same picks; %.2fx the speed of sm90_topk", tk.us / tks.us);
    print_row(B, cn, "top-512 select (total minus scores)", tks, topk_bytes, 0, note);
    // the same picks unsorted, as a decode step asks for them (TopKArgs::sorted; the split attention reads a set)
    TopKArgs ua = sa;
    ua.sorted = false;
    const Timing tun = select_time(ua, sel_ws.data(), sel_bytes);
    std::snprintf(note, sizeof note, "the same picks unsorted, as decode takes them; %.2fx the sorted speed",
                  tks.us / tun.us);
    print_row(B, cn, "top-512 select, unsorted (total minus scores)", tun, topk_bytes, 0, note);
    // the attention's candidate lists [B, window | picks] as a decode step makes them: sm90_attn_index over the
    // picks, or the select writing them (TopKArgs::list); the K=V entry table is the key pages' (same shape)
    std::vector<int32_t> slot_ids(static_cast<size_t>(B));
    std::iota(slot_ids.begin(), slot_ids.end(), 0);
    DeviceBuffer d_slots = upload(slot_ids, "slots");
    DeviceBuffer lists = alloc(size_t(B * (kWindow + kTopk)) * 4, "candidate lists");
    AttnIndexArgs ia;
    ia.idx = lists.as<int32_t>(), ia.n = B, ia.win_cols = kWindow, ia.window = kWindow;
    ia.positions = pos.as<int64_t>(), ia.decode = true, ia.slots = d_slots.as<int32_t>(), ia.pass_rows = B;
    ia.entries = PagedEntries{B + kWindow * B, d_pages.as<int32_t>(), pps};
    ia.picks = picks.as<int32_t>(), ia.topk = kTopk;
    TopKArgs la = ua;
    la.idx = nullptr, la.list = ia;
    Timing t_two = time_op(rotations, [&](int i) {
        DSV4_RETURN_IF_ERROR(score(i));
        DSV4_RETURN_IF_ERROR(sm90_topk_select(kRef, ua, sel_ws.data(), sel_bytes, g->s));
        return sm90_attn_index(ia, g->s);
    });
    const Timing t_lists = select_time(la, sel_ws.data(), sel_bytes);
    t_two.us = std::max(1e-3, t_two.us - ts.us);
    std::snprintf(note, sizeof note,
                  "unsorted, the window part and each pick's pool row written by the select; select + "
                  "sm90_attn_index: %.2f us",
                  t_two.us);
    print_row(B, cn, "top-512 select writing the attention's lists (total minus scores)", t_lists,
              topk_bytes + double(B * kWindow) * 4, 0, note);
    if (entries > kTopkSelectShortMax) {  // rows the one-block path does not take: the chunked path beside the default
        TopKArgs ca = sa;
        ca.select_path = TopKSelectPath::kChunked;
        const size_t chunked_bytes = sm90_topk_select_workspace_bytes(ca);
        DeviceBuffer chunked_ws = alloc(chunked_bytes, "chunked top-k select workspace");
        const Timing tc = select_time(ca, chunked_ws.data(), chunked_bytes);
        std::snprintf(note, sizeof note, "same picks; the default path (row above) is %.2fx its speed", tc.us / tks.us);
        print_row(B, cn, "top-512 select, chunked path (total minus scores)", tc, topk_bytes, 0, note);
        ca.sorted = false;  // as decode asks for them
        const Timing tcu = select_time(ca, chunked_ws.data(), chunked_bytes);
        std::snprintf(note, sizeof note, "the same picks unsorted; the default path unsorted is %.2fx its speed",
                      tcu.us / tun.us);
        print_row(B, cn, "top-512 select, chunked path, unsorted (total minus scores)", tcu, topk_bytes, 0, note);
    }
    print_row(B, cn, "indexer total (scores + top-512)", tt, key_bytes + double(scores_bytes) + topk_bytes, flops,
              "fused minimum would be keys + q + w + picks");
    IndexerTimes times;
    times.with_topk = tt.us, times.with_select = ts.us + tks.us;
    if (with_parts) {
        // the query finish on scratch copies (it rewrites its query in place; the scores keep their inputs)
        DeviceBuffer qf_q = random_bf16(int64_t(rotations) * B * kIndexHeads * kIndexDim, "query finish q");
        DeviceBuffer qf_w = random_bf16(int64_t(rotations) * B * kIndexHeads, "query finish w", 0.0f, 0.1f);
        DeviceBuffer qf_int = alloc(size_t(rotations) * size_t(B * kIndexHeads * kIndexDim), "query finish ints");
        DeviceBuffer qf_exp = alloc(size_t(rotations) * size_t(B * kIndexHeads * 4), "query finish exponents");
        IndexerParts parts;
        parts.q_finish = Part{rotations, [&](int i, StreamHandle st) {
                                  IndexerQFinishArgs a;
                                  a.q = qf_q.as<uint8_t>() + size_t(i) * q_bytes, a.tokens = B, a.heads = kIndexHeads;
                                  a.positions = pos.as<int64_t>(), a.freqs = g->freqs;
                                  a.q_int = qf_int.as<int8_t>() + i * B * kIndexHeads * kIndexDim;
                                  a.q_exp = qf_exp.as<int8_t>() + i * B * kIndexHeads * 4;
                                  a.w = qf_w.as<uint8_t>() + size_t(i) * w_bytes;
                                  a.w_scale =
                                      float(1.0 / std::sqrt(double(kIndexDim)) / std::sqrt(double(kIndexHeads)));
                                  return sm90_indexer_q_finish(a, st);
                              }};
        parts.scores =
            Part{rotations, [&](int i, StreamHandle st) { return score_with(i, IndexerScoresArgs::Path::kAuto, st); }};
        parts.select =
            Part{1, [&](int, StreamHandle st) { return sm90_topk_select(kRef, ua, sel_ws.data(), sel_bytes, st); }};
        parts.attn_index = Part{1, [&](int, StreamHandle st) { return sm90_attn_index(ia, st); }};
        parts.select_lists =
            Part{1, [&](int, StreamHandle st) { return sm90_topk_select(kRef, la, sel_ws.data(), sel_bytes, st); }};
        with_parts(parts);
    }
    return times;
}

// The top-512 select as a decode step runs it in a session sized for `capacity` tokens, at context ctx: rows of
// capacity / 4 scores of which ctx / 4 are visible (the engine's calls span the session's key capacity), each path
// on the same scores, the select alone.
void bench_select_capacity(int64_t B, int64_t capacity, int64_t ctx) {
    const int64_t n = capacity / kCsaRatio;
    if (!fits(double(B * n) * 2 + 33e6, B, ctx_name(ctx), "select")) return;
    DeviceBuffer scores = random_bf16(B * n, "scores", -4.0f, 4.0f);
    DeviceBuffer picks = alloc(size_t(B * kTopk) * 4, "top-k");
    DeviceBuffer pos = positions_at(B, ctx - 1);
    const std::string where = ctx_name(ctx) + " of " + ctx_name(capacity);
    const double bytes = double(B) * double(ctx / kCsaRatio) * 2 + double(B * kTopk) * 4;
    for (const TopKSelectPath path : {TopKSelectPath::kAuto, TopKSelectPath::kChunked}) {
        TopKArgs a;
        a.scores = scores.data(), a.rows = B, a.n = n, a.k = kTopk, a.idx = picks.as<int32_t>();
        a.positions = pos.as<int64_t>(), a.ratio = kCsaRatio;
        a.select_path = path;
        const size_t ws_bytes = sm90_topk_select_workspace_bytes(a);
        DeviceBuffer ws = alloc(ws_bytes, "top-k select workspace");
        const Timing t = time_op(1, [&](int) { return sm90_topk_select(kRef, a, ws.data(), ws_bytes, g->s); });
        print_row(B, where,
                  path == TopKSelectPath::kAuto ? "top-512 select alone, capacity-wide row (default path)"
                                                : "top-512 select alone, capacity-wide row (chunked path)",
                  t, bytes, 0, "decode in a session sized for the larger context: only the visible scores are read");
    }
}

// The indexer scores of an 8K prefill pass as the engine runs them: 8,192 queries at positions 0..8191 of one
// sequence over its 2,048 entries (each query sees (pos + 1) / 4 of them, the rest written -inf), all queries through
// the sequence's one page table; the integer and the bf16 kernel on the same simulated queries.
void bench_indexer_prefill() {
    constexpr int64_t T = 8192, entries = T / kCsaRatio, pps = entries / kPage;
    const int rotations = 2;
    const size_t q_bytes = size_t(T * kIndexHeads * kIndexDim) * 2, w_bytes = size_t(T * kIndexHeads) * 2;
    DeviceBuffer keys = alloc(size_t(entries) * size_t(kKeyFp4RowBytes), "indexer key pages");
    fill_packed_pool(keys.data(), entries, true);
    DeviceBuffer w = random_bf16(int64_t(rotations) * T * kIndexHeads, "indexer weights", 0.0f, 0.1f);
    DeviceBuffer scores = alloc(size_t(T * entries) * 2, "scores");
    std::vector<int64_t> pos(static_cast<size_t>(T) * rotations);
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = int64_t(i) % T;
    DeviceBuffer d_pos = upload(pos, "positions");
    const FinishedQueries fq = finished_queries(int64_t(rotations) * T, d_pos.as<int64_t>());
    const std::vector<int32_t> perm = page_permutation(pps);
    std::vector<int32_t> pages(size_t(T * pps));
    for (int64_t t = 0; t < T; ++t)
        for (int64_t p = 0; p < pps; ++p) pages[size_t(t * pps + p)] = perm[size_t(p)];
    DeviceBuffer d_pages = upload(pages, "key pages");
    CHECK(g->stream.synchronize());
    auto score = [&](int i, IndexerScoresArgs::Path path) {
        return sm90_indexer_scores(
            kRef,
            finished_query_call(fq, int64_t(i) * T, keys.data(), w.as<uint8_t>() + size_t(i) * w_bytes, T, entries,
                                d_pos.as<int64_t>(), scores.data(), d_pages.as<int32_t>(), pps, path),
            g->s);
    };
    const Timing ti = time_op(rotations, [&](int i) { return score(i, IndexerScoresArgs::Path::kInteger); });
    const Timing tb = time_op(rotations, [&](int i) { return score(i, IndexerScoresArgs::Path::kBf16); });
    // bytes: keys once + q + w + the score matrix; FLOPs: the visible keys' dot products only
    const double bytes = double(entries * kKeyFp4RowBytes) + double(q_bytes + w_bytes) + double(T * entries) * 2;
    double visible_keys = 0;
    for (int64_t t = 0; t < T; ++t) visible_keys += double((t + 1) / kCsaRatio);
    const double flops = 2.0 * visible_keys * double(kIndexHeads) * double(kIndexDim);
    char note[160];
    std::snprintf(note, sizeof note, "8,192 queries of one sequence over its 2,048 entries; bf16 path %.2fx this time",
                  tb.us / ti.us);
    print_row(T, "8K", "indexer scores (prefill pass), integer wgmma path", ti, bytes, flops, note);
    print_row(T, "8K", "indexer scores (prefill pass), bf16 mma.sync path", tb, bytes, flops, "same scores");
}

// One compressor close per query (batched decode, every window closing), as a decode step runs it: append, pool,
// finish, entry rows, pack, roll (six launches), then sm90_compressor_decode_fused (the same work and the same bytes
// in one launch) on the same rotated inputs. indexer: the indexer's 128-d key compressor, else the CSA main (512-d)
// one. Returns both times (µs), -1 when skipped.
struct CompressorTimes {
    double six = -1, fused = -1;
};
CompressorTimes bench_compressor(int64_t B, bool indexer) {
    const char* op =
        indexer ? "compressor close, CSA indexer keys (6 launches)" : "compressor close, CSA main (6 launches)";
    const char* fused_op = indexer ? "compressor close, CSA indexer keys (fused, 1 launch)"
                                   : "compressor close, CSA main (fused, 1 launch)";
    const int64_t hd = indexer ? kIndexDim : kHeadDim, width = 2 * hd, ratio = kCsaRatio;
    const int64_t row_bytes = indexer ? kKeyFp4RowBytes : kKvFp8RowBytes;
    const int64_t pps = (kCompressorPosition + 1) / ratio / kPage;
    const size_t state = size_t(B * ratio * width) * 4, proj = size_t(B * width) * 4;
    const int rotations = std::min(kMaxRotations, std::max(2, copies_for(double(4 * state + 2 * proj))));
    const double need = double(rotations) * double(4 * state + 2 * proj) + double(B * kPage * row_bytes) + 1e6;
    if (!fits(need, B, "any", op)) return {};

    DeviceBuffer open_kv = random_f32(int64_t(rotations) * B * ratio * width, "open kv");
    DeviceBuffer open_score = random_f32(int64_t(rotations) * B * ratio * width, "open score");
    DeviceBuffer prev_kv = random_f32(int64_t(rotations) * B * ratio * width, "prev kv");
    DeviceBuffer prev_score = random_f32(int64_t(rotations) * B * ratio * width, "prev score");
    DeviceBuffer proj_kv = random_f32(int64_t(rotations) * B * width, "projected kv");
    DeviceBuffer proj_score = random_f32(int64_t(rotations) * B * width, "projected score");
    DeviceBuffer pooled = alloc(size_t(B * hd) * 2, "pooled");
    DeviceBuffer norm = random_bf16(hd, "norm weight", 0.5f, 1.5f);
    DeviceBuffer entry_rows = alloc(size_t(B) * 4, "entry rows");
    DeviceBuffer pool = alloc(size_t(B * kPage * row_bytes), "entry pool");
    DeviceBuffer pos = positions_at(B, kCompressorPosition);
    std::vector<int32_t> slots(static_cast<size_t>(B)), table(static_cast<size_t>(B * pps));
    std::iota(slots.begin(), slots.end(), 0);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < pps; ++j) table[size_t(b * pps + j)] = int32_t(b);  // sequence b's pages: page b
    DeviceBuffer d_slots = upload(slots, "slots"), d_table = upload(table, "entry page table");
    CHECK(g->stream.synchronize());
    const DeviceWeightView norm_view{backend::WeightFormat::kBF16, 1, hd, norm.data(), nullptr};
    const backend::CompressedKind kind = indexer ? backend::CompressedKind::kIndexer : backend::CompressedKind::kMain;
    const PagedEntries entries{0, d_table.as<int32_t>(), pps};

    auto close = [&](int i) {
        const size_t so = size_t(i) * size_t(B * ratio * width), po = size_t(i) * size_t(B * width);
        float *ok = open_kv.as<float>() + so, *os = open_score.as<float>() + so;
        float *pk = prev_kv.as<float>() + so, *ps = prev_score.as<float>() + so;
        CompressorAppendArgs ap;
        ap.n = B, ap.positions = pos.as<int64_t>(), ap.slots = d_slots.as<int32_t>();
        ap.kv = proj_kv.as<float>() + po, ap.score = proj_score.as<float>() + po;
        ap.ratio = ratio, ap.width = width, ap.open_kv = ok, ap.open_score = os;
        DSV4_RETURN_IF_ERROR(sm90_compressor_append(ap, g->s));
        CompressorPoolArgs pl;
        pl.kv = ok, pl.score = os, pl.prev_kv = pk, pl.prev_score = ps;
        pl.n_windows = B, pl.ratio = ratio, pl.head_dim = hd, pl.overlap = true, pl.out = pooled.data();
        pl.decode_positions = pos.as<int64_t>(), pl.slots = d_slots.as<int32_t>(), pl.slot_stride = ratio * width;
        DSV4_RETURN_IF_ERROR(sm90_compressor_pool(kRef, pl, g->s));
        CompressorFinishArgs fp;
        fp.pooled = pooled.data(), fp.n = B, fp.head_dim = hd, fp.ratio = ratio;
        fp.kind = kind;
        fp.norm = norm_view, fp.freqs = g->freqs, fp.eps = 1e-6f, fp.out = pooled.data();
        fp.decode_positions = pos.as<int64_t>();
        DSV4_RETURN_IF_ERROR(sm90_compressor_finish(kRef, fp, g->s));
        EntryRowsArgs er;
        er.rows = entry_rows.as<int32_t>(), er.n = B, er.decode = true, er.positions = pos.as<int64_t>();
        er.slots = d_slots.as<int32_t>(), er.ratio = ratio;
        er.entries = entries;
        DSV4_RETURN_IF_ERROR(sm90_entry_rows(er, g->s));
        if (indexer) {
            KeyPackArgs k;
            k.rows = pooled.data(), k.n = B, k.dst_rows = entry_rows.as<int32_t>(), k.pool = pool.data();
            DSV4_RETURN_IF_ERROR(sm90_key_pack(kRef, k, g->s));
        } else {
            KvPackArgs k;
            k.rows = pooled.data(), k.n = B, k.dst_rows = entry_rows.as<int32_t>(), k.pool = pool.data();
            DSV4_RETURN_IF_ERROR(sm90_kv_pack(kRef, k, g->s));
        }
        CompressorRollArgs rl;
        rl.n = B, rl.positions = pos.as<int64_t>(), rl.slots = d_slots.as<int32_t>(), rl.ratio = ratio;
        rl.width = width, rl.open_kv = ok, rl.open_score = os, rl.prev_kv = pk, rl.prev_score = ps;
        return sm90_compressor_roll(rl, g->s);
    };
    // The fused launch on the same rotation's state: the arguments map one to one onto the sequence's (append's
    // rows and windows, pool's previous windows, finish's norm and frequencies, entry_rows' page table, pack's pool);
    // the pooled row and the entry rows stay on chip.
    auto fused = [&](int i) {
        const size_t so = size_t(i) * size_t(B * ratio * width), po = size_t(i) * size_t(B * width);
        CompressorDecodeArgs a;
        a.n = B, a.positions = pos.as<int64_t>(), a.slots = d_slots.as<int32_t>();
        a.kv = proj_kv.as<float>() + po, a.score = proj_score.as<float>() + po;
        a.ratio = ratio, a.head_dim = hd, a.overlap = true, a.kind = kind;
        a.open_kv = open_kv.as<float>() + so, a.open_score = open_score.as<float>() + so;
        a.prev_kv = prev_kv.as<float>() + so, a.prev_score = prev_score.as<float>() + so;
        a.norm = norm_view, a.freqs = g->freqs, a.eps = 1e-6f;
        a.entries = entries, a.pool = pool.data();
        return sm90_compressor_decode_fused(kRef, a, g->s);
    };
    CompressorTimes out;
    const Timing t = time_op(rotations, close);
    const Timing tf = time_op(rotations, fused);
    out.six = t.us, out.fused = tf.us;
    // per window: append (proj read, open written), pool (2 arrays x 8 slots x hd read, hd bf16 written), finish
    // (hd bf16 in and out), pack (hd bf16 in, one row out), roll (open read, prev written); the fused launch keeps
    // the bf16 pooled row on chip, so its bytes are the same less the pool write, finish and pack reads
    const double per_io =
        4.0 * double(width) * 4 + 2.0 * 8 * double(hd) * 4 + double(row_bytes) + 2.0 * 2 * double(ratio * width) * 4;
    const double per = per_io + 2.0 * double(hd) + 4.0 * double(hd) + 2.0 * double(hd);
    print_row(B, "any", op, t, double(B) * per, 0, "append, pool, finish, entry rows, pack, roll; all B windows close");
    char note[256];
    std::snprintf(note, sizeof note,
                  "sm90_compressor_decode_fused, same bytes written; %.2fx the speed of the 6 "
                  "launches (%.2f us saved)",
                  t.us / tf.us, t.us - tf.us);
    print_row(B, "any", fused_op, tf, double(B) * per_io, 0, note);
    return out;
}

// Both compressors of a CSA layer's decode step back to back, as the engine launches them when it does not run them
// on graph branches: the main one, then the indexer-key one with CompressorDecodeArgs::independent_of_previous (it
// starts alongside the main one in the programmatic graph and waits for it at exit) against the same pair without
// it. Returns the pair's time (µs). with_parts gets the pair and each compressor alone (main, index).
double bench_compressor_pair(
    int64_t B, const std::function<void(const Part& pair, const Part& main, const Part& index)>& with_parts = {}) {
    const char* op = "compressor close, CSA main + indexer keys (fused pair, overlapped)";
    const int64_t ratio = kCsaRatio;
    struct Side {
        int64_t hd, width, row_bytes;
        backend::CompressedKind kind;
        DeviceBuffer open_kv, open_score, prev_kv, prev_score, proj_kv, proj_score, norm, pool;
    };
    const int64_t pps = (kCompressorPosition + 1) / ratio / kPage;
    const size_t state_main = size_t(B * ratio * 2 * kHeadDim) * 4, state_keys = size_t(B * ratio * 2 * kIndexDim) * 4;
    const int rotations = std::min(kMaxRotations, std::max(2, copies_for(double(4 * (state_main + state_keys)))));
    const double need = double(rotations) * 5.0 * double(state_main + state_keys) +
                        double(B * kPage * (kKvFp8RowBytes + kKeyFp4RowBytes)) + 1e6;
    if (!fits(need, B, "any", op)) return -1;
    auto make_side = [&](bool indexer) {
        Side sd;
        sd.hd = indexer ? kIndexDim : kHeadDim, sd.width = 2 * sd.hd;
        sd.row_bytes = indexer ? kKeyFp4RowBytes : kKvFp8RowBytes;
        sd.kind = indexer ? backend::CompressedKind::kIndexer : backend::CompressedKind::kMain;
        const int64_t n = int64_t(rotations) * B * ratio * sd.width;
        sd.open_kv = random_f32(n, "open kv"), sd.open_score = random_f32(n, "open score");
        sd.prev_kv = random_f32(n, "prev kv"), sd.prev_score = random_f32(n, "prev score");
        sd.proj_kv = random_f32(int64_t(rotations) * B * sd.width, "projected kv");
        sd.proj_score = random_f32(int64_t(rotations) * B * sd.width, "projected score");
        sd.norm = random_bf16(sd.hd, "norm weight", 0.5f, 1.5f);
        sd.pool = alloc(size_t(B * kPage * sd.row_bytes), "entry pool");
        return sd;
    };
    Side sides[2] = {make_side(false), make_side(true)};
    DeviceBuffer pos = positions_at(B, kCompressorPosition);
    std::vector<int32_t> slots(static_cast<size_t>(B)), table(static_cast<size_t>(B * pps));
    std::iota(slots.begin(), slots.end(), 0);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < pps; ++j) table[size_t(b * pps + j)] = int32_t(b);
    DeviceBuffer d_slots = upload(slots, "slots"), d_table = upload(table, "entry page table");
    CHECK(g->stream.synchronize());
    auto launch = [&](const Side& sd, int i, bool independent, StreamHandle st) {
        const size_t so = size_t(i) * size_t(B * ratio * sd.width), po = size_t(i) * size_t(B * sd.width);
        CompressorDecodeArgs a;
        a.n = B, a.positions = pos.as<int64_t>(), a.slots = d_slots.as<int32_t>();
        a.kv = sd.proj_kv.as<float>() + po, a.score = sd.proj_score.as<float>() + po;
        a.ratio = ratio, a.head_dim = sd.hd, a.overlap = true, a.kind = sd.kind;
        a.open_kv = sd.open_kv.as<float>() + so, a.open_score = sd.open_score.as<float>() + so;
        a.prev_kv = sd.prev_kv.as<float>() + so, a.prev_score = sd.prev_score.as<float>() + so;
        a.norm = DeviceWeightView{backend::WeightFormat::kBF16, 1, sd.hd, sd.norm.data(), nullptr};
        a.freqs = g->freqs, a.eps = 1e-6f;
        a.entries = PagedEntries{0, d_table.as<int32_t>(), pps}, a.pool = sd.pool.data();
        a.independent_of_previous = independent;
        return sm90_compressor_decode_fused(kRef, a, st);
    };
    auto pair = [&](int i, StreamHandle st) {
        DSV4_RETURN_IF_ERROR(launch(sides[0], i, false, st));
        return launch(sides[1], i, true, st);
    };
    const Timing serial = time_op(rotations, [&](int i) {
        DSV4_RETURN_IF_ERROR(launch(sides[0], i, false, g->s));
        return launch(sides[1], i, false, g->s);
    });
    const Timing overlapped = time_op(rotations, [&](int i) { return pair(i, g->s); });
    char note[256];
    std::snprintf(note, sizeof note,
                  "the key compressor independent_of_previous; the same pair waiting: %.2f us "
                  "(%.2fx)",
                  serial.us, serial.us / overlapped.us);
    print_row(B, "any", op, overlapped, 0, 0, note);
    if (with_parts)
        with_parts(Part{rotations, pair},
                   Part{rotations, [&](int i, StreamHandle st) { return launch(sides[0], i, false, st); }},
                   Part{rotations, [&](int i, StreamHandle st) { return launch(sides[1], i, false, st); }});
    return overlapped.us;
}

// The CSA layer at batch 1, 8K context as a decode step runs it, timed as one graph of its launches with
// programmatic edges (the launch and drain of each kernel overlap its neighbours as in `dsv4 generate`) and the
// engine's branches (gpu_attention.cpp): the main compressor on one branch joined before the attention, the indexer's
// compressor on another joined before the scores, beside the query finish; then scores, top-512 select (unsorted)
// writing the candidate lists, and the plain split attention (partials and combine). Also timed: the same with the
// select's picks listed by sm90_attn_index (decode before the select wrote the lists), and the serial chain this
// benchmark timed until 2026-12-04 (compressor pair, scores, select, attention; no query finish, no lists). The
// parts read their own rotated inputs (the attention's lists are not the select's output), so a graph has the
// engine's launch chain, not its data flow. The query projections before the finish and the ring store after the
// attention are not in it.
void bench_layer_graph() {
    constexpr int64_t B = 1, ctx = 8192;
    auto main_fork = StreamFork::create(), index_fork = StreamFork::create();
    CHECK(main_fork.status());
    CHECK(index_fork.status());
    bench_compressor_pair(B, [&](const Part& pair, const Part& main_c, const Part& index_c) {
        bench_indexer(B, ctx, [&](const IndexerParts& ix) {
            bench_attention(true, B, ctx, true, [&](const Part& attn) {
                auto alone = [](const Part& p) { return time_op(p.rotations, [&](int i) { return p.call(i); }); };
                const Timing t_main = alone(main_c), t_index = alone(index_c), t_qf = alone(ix.q_finish),
                             t_scores = alone(ix.scores), t_attn = alone(attn);
                const int rotations = std::max({pair.rotations, ix.scores.rotations, attn.rotations});
                const auto chain = [&](bool lists) {
                    return time_op(rotations, [&](int i) -> Status {
                        const StreamHandle s = g->s;
                        DSV4_RETURN_IF_ERROR(main_fork->fork(s));
                        DSV4_RETURN_IF_ERROR(main_c.on(i % main_c.rotations, main_fork->side()));
                        DSV4_RETURN_IF_ERROR(index_fork->fork(s));
                        DSV4_RETURN_IF_ERROR(index_c.on(i % index_c.rotations, index_fork->side()));
                        DSV4_RETURN_IF_ERROR(ix.q_finish.call(i));
                        DSV4_RETURN_IF_ERROR(index_fork->join(s));
                        DSV4_RETURN_IF_ERROR(ix.scores.call(i));
                        if (lists) {
                            DSV4_RETURN_IF_ERROR(ix.select_lists.call(i));
                        } else {
                            DSV4_RETURN_IF_ERROR(ix.select.call(i));
                            DSV4_RETURN_IF_ERROR(ix.attn_index.call(i));
                        }
                        DSV4_RETURN_IF_ERROR(main_fork->join(s));
                        return attn.call(i);
                    });
                };
                const Timing whole = chain(true), whole_two = chain(false);
                // the same launches on one stream (the pair first), to price the branches' edges
                const Timing one_stream = time_op(rotations, [&](int i) {
                    DSV4_RETURN_IF_ERROR(pair.call(i));
                    DSV4_RETURN_IF_ERROR(ix.q_finish.call(i));
                    DSV4_RETURN_IF_ERROR(ix.scores.call(i));
                    DSV4_RETURN_IF_ERROR(ix.select_lists.call(i));
                    return attn.call(i);
                });
                const Timing serial = time_op(rotations, [&](int i) {
                    DSV4_RETURN_IF_ERROR(pair.call(i));
                    DSV4_RETURN_IF_ERROR(ix.scores.call(i));
                    DSV4_RETURN_IF_ERROR(ix.select.call(i));
                    return attn.call(i);
                });
                std::printf(
                    "\nCSA layer at batch 1, 8K context, parts alone: main compressor %.2f us, indexer compressor "
                    "%.2f, query finish %.2f, indexer scores %.2f, split attention (plain) %.2f (the select's rows "
                    "above)\n"
                    "**one graph of the layer's launches as decode runs them (compressors on branches, the select "
                    "writing the lists): %.2f us** (target <= 25 us: %s); with sm90_attn_index listing the picks: "
                    "%.2f us; the same launches on one stream: %.2f us; the serial chain of compressor pair, scores, "
                    "select and attention (this line's measure until 2026-12-04): %.2f us\n",
                    t_main.us, t_index.us, t_qf.us, t_scores.us, t_attn.us, whole.us,
                    whole.us <= 25.0 ? "met" : "missed", whole_two.us, one_stream.us, serial.us);
            });
        });
    });
}

// Device-to-device copy bandwidth (bytes read + written) of a 1 GiB copy, at working clocks: an idle GPU starts at
// its lowest clock and needs tens of milliseconds of sustained work to ramp up, so untimed copies run first (at least
// kCopyWarmMs of GPU time and kCopyWarmMin copies), then the median of kTimings individually timed copies.
constexpr double kCopyWarmMs = 500;
constexpr int kCopyWarmMin = 50;
struct CopyBandwidth {
    double tbs = 0;
    int warm_copies = 0;
    double warm_ms = 0;
};
CopyBandwidth measure_copy_bandwidth() {
    const size_t bytes = size_t(1) << 30;
    DeviceBuffer a = alloc(bytes, "copy source"), b = alloc(bytes, "copy destination");
    fill(a.data(), int64_t(bytes / 2), FillKind::kBF16);
    fill(b.data(), int64_t(bytes / 2), FillKind::kBF16);
    auto timer = EventTimer::create();
    CHECK(timer.status());
    CopyBandwidth r;
    while (r.warm_copies < kCopyWarmMin || r.warm_ms < kCopyWarmMs) {  // untimed for the result: clocks ramping
        CHECK(timer->start(g->s));
        for (int i = 0; i < 10; ++i) CHECK(copy_async(b.data(), a.data(), bytes, g->s));
        CHECK(timer->stop(g->s));
        auto ms = timer->elapsed_ms();
        CHECK(ms.status());
        r.warm_copies += 10, r.warm_ms += double(*ms);
    }
    std::vector<double> per;
    for (int k = 0; k < kTimings; ++k) {
        CHECK(timer->start(g->s));
        CHECK(copy_async(k % 2 ? a.data() : b.data(), k % 2 ? b.data() : a.data(), bytes, g->s));
        CHECK(timer->stop(g->s));
        auto ms = timer->elapsed_ms();
        CHECK(ms.status());
        per.push_back(double(*ms));
    }
    CHECK(g->stream.synchronize());
    std::sort(per.begin(), per.end());
    r.tbs = 2.0 * double(bytes) / (per[per.size() / 2] * 1e-3) / 1e12;
    return r;
}

// A clear message and false when this machine cannot run the kernels (no driver, no GPU, not a Hopper GPU).
bool gpu_usable(const char* argv0) {
    auto n = dsv4::cuda::device_count();
    if (!n.is_ok() || *n == 0) {
        std::fprintf(stderr, "%s: no CUDA GPU: %s; this benchmark times sm_90a kernels and needs an H100/H200\n", argv0,
                     n.is_ok() ? "no device is visible" : n.status().to_string().c_str());
        return false;
    }
    const Status s = dsv4::cuda::check_device_supported(0, 0);
    if (!s.is_ok()) {
        std::fprintf(stderr, "%s: GPU 0 cannot run this benchmark: %s\n", argv0, s.to_string().c_str());
        return false;
    }
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    std::string date = "undated";
    bool split = false, attention_only = false, prefill = false, prefill_only = false, layer_only = false,
         indexer_only = false;
    int64_t point_batch = 0, point_context = 0;  // --indexer-point: that one indexer point alone
    std::string attn_point;                      // --attention-point: "csa" or "hca" at (point_batch, point_context)
    int64_t split_chunk = 0;                     // --split-chunk
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--date") == 0 && i + 1 < argc) {
            date = argv[++i];
        } else if (std::strcmp(argv[i], "--split") == 0) {
            split = true;
        } else if (std::strcmp(argv[i], "--attention-only") == 0) {
            attention_only = true;
        } else if (std::strcmp(argv[i], "--prefill") == 0) {
            prefill = true;
        } else if (std::strcmp(argv[i], "--prefill-only") == 0) {
            prefill = prefill_only = true;
        } else if (std::strcmp(argv[i], "--layer") == 0) {
            layer_only = true;
        } else if (std::strcmp(argv[i], "--indexer-only") == 0) {
            indexer_only = true;
        } else if (std::strcmp(argv[i], "--indexer-point") == 0 && i + 2 < argc) {
            point_batch = std::atoll(argv[i + 1]), point_context = std::atoll(argv[i + 2]);
            i += 2;
        } else if (std::strcmp(argv[i], "--attention-point") == 0 && i + 3 < argc &&
                   (std::strcmp(argv[i + 1], "csa") == 0 || std::strcmp(argv[i + 1], "hca") == 0)) {
            attn_point = argv[i + 1];
            point_batch = std::atoll(argv[i + 2]), point_context = std::atoll(argv[i + 3]);
            i += 3;
        } else if (std::strcmp(argv[i], "--split-chunk") == 0 && i + 1 < argc) {
            split_chunk = std::atoll(argv[++i]);
        } else {
            std::fprintf(stderr,
                         "usage: %s [--date YYYY-MM-DD] [--split] [--attention-only] [--prefill | --prefill-only] "
                         "[--layer] [--indexer-only] [--indexer-point B CONTEXT] [--attention-point csa|hca B "
                         "CONTEXT] [--split-chunk N]\n",
                         argv[0]);
            return 2;
        }
    }
    // the split call's own bound (SparseAttnSplitOptions::chunk), checked here so a bad value is a usage error
    if (split_chunk < 0 || split_chunk % 64 != 0 || split_chunk > 16384) {
        std::fprintf(stderr, "%s: --split-chunk must be a multiple of 64 in 64..16384 (0: automatic), got %s\n",
                     argv[0], std::to_string(split_chunk).c_str());
        return 2;
    }
    if (!attn_point.empty() && (point_batch < 1 || point_batch > 256 || point_context < 1)) {
        std::fprintf(stderr, "%s: --attention-point needs a batch in 1..256 and a positive context\n", argv[0]);
        return 2;
    }
    if (!gpu_usable(argv[0])) return 1;
    Env env;
    g = &env;
    auto stream = Stream::create();
    CHECK(stream.status());
    env.stream = std::move(*stream);
    env.s = env.stream.handle();
    env.split_chunk = split_chunk;
    env.freqs = backend::rope_freqs(160000.0, 16.0, 65536, 32.0, 1.0, 64);

    cudaDeviceProp prop{};
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    size_t free_b = 0, total_b = 0;
    CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
    const CopyBandwidth copy = measure_copy_bandwidth();
    env.copy_tbs = copy.tbs;

    std::printf("## Sparse-attention decode, V4-Flash shapes, reference numerics (%s)\n\n", date.c_str());
    std::printf("GPU: %s, %d SMs, L2 %d MB, %.1f GB (%.1f GB free at start)\n", prop.name, prop.multiProcessorCount,
                prop.l2CacheSize >> 20, double(total_b) / 1e9, double(free_b) / 1e9);
    std::printf(
        "Copy bandwidth (device-to-device 1 GiB, read + write): %.3f TB/s (median of %d copies after %d "
        "untimed warm-up copies, %.0f ms)\n\n",
        copy.tbs, kTimings, copy.warm_copies, copy.warm_ms);
    std::printf(
        "Time per call: CUDA graph of `calls` consecutive calls on rotated inputs (>= 150 MB rotated or the "
        "calls that fit ~10 ms), median of 21 timings after 2 warm-ups. MB = bytes that must move per call "
        "(attention: packed rows gathered + idx + q + out; indexer: packed keys + q + w + scores; top-k: "
        "scores + picks). Baseline = sm90_kv_unpack of the same rows to contiguous bf16, then "
        "sm90_sparse_attn over rows 0..n-1 (unpacked); its TB/s uses the packed path's bytes.\n\n");
    print_table_header();

    if (layer_only) {
        bench_layer_graph();
        return 0;
    }
    if (point_batch > 0 && point_context > 0) {
        if (attn_point.empty()) bench_indexer(point_batch, point_context);
        else bench_attention(attn_point == "csa", point_batch, point_context, true);
        return 0;
    }
    const int64_t batches[] = {1, 8, 64}, contexts[] = {4096, 65536, 1048576};
    if (indexer_only) {
        bench_indexer_prefill();
        for (int64_t ctx : contexts)
            for (int64_t B : batches) bench_indexer(B, ctx);
        for (int64_t B : batches) bench_select_capacity(B, 1048576, 8192);
        return 0;
    }
    if (prefill) {  // 2,048 queries of one 8K sequence: a prefill pass's shape
        bench_attention(true, 2048, 8192, false, {}, true);
        if (prefill_only) return 0;
    }
    for (int64_t ctx : contexts)
        for (int64_t B : batches) bench_attention(true, B, ctx, split);
    for (int64_t ctx : contexts)
        for (int64_t B : batches) bench_attention(false, B, ctx, split);
    if (attention_only) return 0;
    for (int64_t ctx : contexts)
        for (int64_t B : batches) bench_indexer(B, ctx);
    CompressorTimes main_b1, keys_b1;
    double pair_b1 = -1;
    for (int64_t B : batches) {
        const CompressorTimes m = bench_compressor(B, false), k = bench_compressor(B, true);
        const double pair = bench_compressor_pair(B);
        if (B == 1) main_b1 = m, keys_b1 = k, pair_b1 = pair;
    }
    // the CSA layer at batch 1, 8K context; the split kernel is always timed here for the second composition
    const AttentionTimes attn = bench_attention(true, 1, 8192, true);
    const IndexerTimes index = bench_indexer(1, 8192);
    CHECK(env.stream.synchronize());
    if (attn.one_pass < 0 || index.with_topk < 0 || main_b1.six < 0 || keys_b1.six < 0) {
        std::printf("\nLayer at batch 1, 8K context: not measured (a part was skipped)\n");
        return 0;
    }
    const double sum = main_b1.six + keys_b1.six + index.with_topk + attn.one_pass;
    std::printf(
        "\nCSA layer at batch 1, 8K context: %.2f us = compressor close main %.2f + indexer keys %.2f + "
        "indexer scores and top-512 %.2f + CSA attention %.2f (target <= 25 us: %s; projections, index "
        "lists and the window ring are not counted)\n",
        sum, main_b1.six, keys_b1.six, index.with_topk, attn.one_pass, sum <= 25.0 ? "met" : "missed");
    // the same layer with the best kernel of each part: fused compressors, top-k select, reference-max split
    const double compressors = pair_b1 > 0 ? pair_b1 : main_b1.fused + keys_b1.fused;
    const double best = compressors + index.with_select + attn.split_ref;
    std::printf(
        "CSA layer at batch 1, 8K context, best kernels: %.2f us = fused compressors %.2f (%s) + indexer "
        "scores and top-512 select %.2f + CSA split attention (reference max) %.2f (target <= 25 us: %s; "
        "%.2fx the first composition)\n",
        best, compressors, pair_b1 > 0 ? "overlapped pair" : "main + indexer keys", index.with_select, attn.split_ref,
        best <= 25.0 ? "met" : "missed", sum / best);
    // the parts' sum ignores how the launches overlap in a step's graph: the same layer as one graph (as --layer)
    std::printf("\nThe same layer as one graph of its launches (dsv4_bench_attention --layer):\n\n");
    print_table_header();
    bench_layer_graph();
    return 0;
}
