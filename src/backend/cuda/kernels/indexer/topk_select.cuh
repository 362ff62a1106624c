// Kernels of sm90_topk_select (indexer.h): the picks of sm90_topk (k largest, descending, ties by ascending index,
// -inf / NaN / past-n picks -1), found by a radix select that reads the row once (short rows) or P times in chunks
// (long rows) instead of five times from one CTA.
//
// Keys: a score maps to an order-preserving unsigned key, exactly the order of topk_key (indexer.cuh): bf16 bits b
// → 16-bit key (b | 0x8000 when positive, ~b when negative, NaN → 0), f32 → topk_key. A pick is a PickCode
// (key above the index's complement): one compare orders by key descending, then index ascending; 0 is no pick.
// Select: P passes (2 for 16-bit keys, 4 for 32-bit) of 8-bit digits from the top. Pass p histograms digit p of the
// keys whose higher digits equal the prefix chosen so far; the chosen digit d is the largest whose bin and the bins
// above it hold >= `remaining` keys; remaining -= keys in the bins above d. After the last pass the prefix is the
// threshold key T (the kk-th largest key, kk = min(n, k)), kk - remaining keys are > T, and the first `remaining`
// keys == T by index complete the picks: the same set and tie rule as sm90_topk's loop (its fallback to digit 0
// is never needed: the histogrammed keys always number >= remaining).
//
// Short rows (n <= kShortMax, or <= kShortLimit in calls of many rows): one CTA per row, keys in shared memory; the
// load builds pass 0's histogram. Long rows up to kTopkSelectClusterMax: one cluster of CTAs per row
// (topk_select_cluster.cuh). Longer rows: chunks of the row, one launch per pass (hist kernel: chunk histogram in
// shared memory, added into the row's histogram in the workspace with integer atomics, whose sums do not depend on
// their order). Every CTA derives the digits of the earlier passes again from the finished histograms. The last pass
// also stores, per chunk and last digit d, the chunk's count of keys > (prefix | d) and == (prefix | d); the collect
// kernel turns those into its output offsets by summing over the chunks before it, writes its picks into the row's pick
// slots in the workspace, and the row's last CTA to finish (ticket after a fence) sorts them, writes the output and
// sets the row's histograms and ticket back to zero (so that counters kept zero between calls need no memset).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kernels/glue/attn_index.cuh"
#include "backend/cuda/kernels/indexer/indexer.cuh"
#include "backend/cuda/kernels/indexer/indexer.h"

namespace dsv4::cuda {

struct TopKSelectConfig {
    static constexpr int kThreads = 1024;  // every kernel; the sort holds one pick per thread
    static constexpr int kMinBlocks = 2;   // two CTAs per SM: 32 registers (the long-row passes hide latency so)
    static constexpr int kMaxK = 1024;
    static constexpr int kBins = 256;
    static constexpr int kMaxPasses = 4;
    static constexpr int kBatch = 8;                               // global loads in flight per thread
    static constexpr int64_t kShortMax = kTopkSelectShortMax;      // indexer.h: the switch
    static constexpr int64_t kShortLimit = kTopkSelectShortLimit;  // the one-block path's shared-memory bound
    static constexpr int64_t kShortRows = kTopkSelectShortRows;
    static constexpr int kChunkMin = 2048, kChunkMax = kThreads * kBatch;  // long rows: scores per chunk
    static constexpr int64_t kTargetCtas = 264;                            // ≈ 2 CTAs per SM on 132 SMs
};

template <typename ScoreT>
struct SelectKey;
template <>
struct SelectKey<__nv_bfloat16> {
    using T = uint16_t;
    static constexpr int kPasses = 2;
    static constexpr uint32_t kNegInf = 0x007fu;  // key of -inf: picks at or below it are -1
    __device__ __forceinline__ static uint32_t of(__nv_bfloat16 v) {
        const uint32_t b = __bfloat16_as_ushort(v);
        if ((b & 0x7fffu) > 0x7f80u) return 0;  // NaN
        return (b & 0x8000u) ? (~b & 0xffffu) : (b | 0x8000u);
    }
};
template <>
struct SelectKey<float> {
    using T = uint32_t;
    static constexpr int kPasses = 4;
    static constexpr uint32_t kNegInf = kTopkNegInfKey;
    __device__ __forceinline__ static uint32_t of(float v) { return topk_key(v); }
};

// Workspace of the long-row path (layout: topk_select.cu).
struct TopKSelectWorkspace {
    unsigned long long* picks = nullptr;  // [rows, kMaxK] pick codes
    unsigned* hist = nullptr;             // [rows, kMaxPasses, kBins] row histograms (zeroed per call)
    unsigned* tickets = nullptr;          // [rows] CTAs of the collect kernel done (zeroed per call)
    unsigned* above = nullptr;            // [rows, chunks, kBins] keys of the chunk > (prefix | d)
    unsigned* equal = nullptr;            // [rows, chunks, kBins] keys of the chunk == (prefix | d)
};

// Where a row's k outputs go: idx[row, 0..k) (TopKArgs::idx), or with list.idx set the row's candidate list for the
// sparse attention (TopKArgs::list): its window columns, then each pick as its entry's pool row.
struct PickOut {
    int32_t* idx = nullptr;
    int k = 0;
    AttnIndexArgs list;

    // output j < k of `row`: the pick's index, or -1
    __device__ __forceinline__ void store(int64_t row, int j, int32_t pick) const {
        if (!list.idx) {
            idx[row * k + j] = pick;
            return;
        }
        list.idx[row * (list.win_cols + k) + list.win_cols + j] = attn_entry_value(list, row, pick);
    }
    // the list's window columns c = first, first + step, ... (nothing without a list)
    __device__ __forceinline__ void store_window(int64_t row, int first, int step) const {
        if (!list.idx) return;
        for (int c = first; c < list.win_cols; c += step)
            list.idx[row * (list.win_cols + k) + c] = attn_window_value(list, row, c);
    }
    // a row without picks: every output -1, and the window columns
    __device__ __forceinline__ void store_none(int64_t row, int first, int step) const {
        for (int j = first; j < k; j += step) store(row, j, -1);
        store_window(row, first, step);
    }
};

// The row's scores base + u·kThreads + tid (u < kBatch) into v, all loads issued before any is used; entries at
// or past n are left unset (callers mask them with the same i < n test).
template <typename ScoreT>
__device__ __forceinline__ void load_score_batch(ScoreT (&v)[TopKSelectConfig::kBatch], const ScoreT* src, int base,
                                                 int n, int tid) {
#pragma unroll
    for (int u = 0; u < TopKSelectConfig::kBatch; ++u) {
        const int i = base + u * TopKSelectConfig::kThreads + tid;
        if (i < n) v[u] = src[i];
    }
}

__device__ __forceinline__ int64_t select_row_count(int64_t n, const int64_t* __restrict__ positions, int64_t ratio,
                                                    int64_t row) {
    if (!positions) return n;
    const int64_t visible = (positions[row] + 1) / ratio;
    return visible < n ? (visible > 0 ? visible : 0) : n;
}

// A pick as one unsigned Code: the key above the index's complement, so one compare orders by key descending, then
// index ascending, and 0 is no pick. 64-bit codes hold any int32 index; the short-row path's bf16 codes are 32-bit
// (16-bit key, index < 65,536 > kShortLimit): half the shuffles and one compare per sorting exchange.
template <typename Code>
struct PickCode {
    static constexpr int kIndexBits = int(sizeof(Code)) * 4;
    static constexpr Code kIndexMask = Code(~Code(0)) >> kIndexBits;
    __device__ __forceinline__ static Code of(uint32_t key, int64_t index) {
        return (Code(key) << kIndexBits) | (kIndexMask - Code(index));
    }
    __device__ __forceinline__ static uint32_t key(Code c) { return uint32_t(c >> kIndexBits); }
    __device__ __forceinline__ static int32_t index(Code c) { return int32_t(kIndexMask - (c & kIndexMask)); }
};

// hist[bin] += 1 for every active lane, one shared atomic per distinct bin of the warp. All 32 lanes call it.
__device__ __forceinline__ void hist_add_warp(unsigned* hist, uint32_t bin, bool active) {
    const unsigned act = __ballot_sync(0xffffffffu, active);
    if (active) {
        const unsigned peers = __match_any_sync(act, bin);
        if (int(threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&hist[bin], unsigned(__popc(peers)));
    }
}

struct DigitPick {
    uint32_t digit, remaining;
};

// One warp: the largest digit d whose bins d..255 hold >= remaining keys, and remaining minus the keys in the bins
// above d; lane l holds bins 8l..8l+7 in h. Returns the same value in every lane.
__device__ __forceinline__ DigitPick warp_pick_digit(const uint32_t (&h)[8], uint32_t remaining) {
    const int lane = int(threadIdx.x & 31);
    uint32_t sum = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) sum += h[j];
    uint32_t incl = sum;  // keys in the bins of lanes >= lane
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const uint32_t t = __shfl_down_sync(0xffffffffu, incl, off);
        if (lane + off < 32) incl += t;
    }
    uint32_t above = incl - sum;
    int found = -1;
    uint32_t found_above = 0;
#pragma unroll
    for (int j = 7; j >= 0; --j) {
        if (found < 0) {
            if (above + h[j] >= remaining)
                found = lane * 8 + j, found_above = above;
            else
                above += h[j];
        }
    }
    const unsigned hits = __ballot_sync(0xffffffffu, found >= 0);
    if (hits == 0) {  // fewer keys than remaining (not reached): sm90_topk's loop would stop at digit 0
        const uint32_t total = __shfl_sync(0xffffffffu, incl, 0), h0 = __shfl_sync(0xffffffffu, h[0], 0);
        return {0u, remaining - (total - h0)};
    }
    const int src = 31 - __clz(int(hits));
    return {uint32_t(__shfl_sync(0xffffffffu, found, src)), remaining - __shfl_sync(0xffffffffu, found_above, src)};
}

// One warp: warp_pick_digit over the kBins bins of `hist`.
__device__ __forceinline__ DigitPick warp_select_digit(const unsigned* hist, uint32_t remaining) {
    const int lane = int(threadIdx.x & 31);
    uint32_t h[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) h[j] = hist[lane * 8 + j];
    return warp_pick_digit(h, remaining);
}

// One warp: the digits of passes 0..passes-1 from the row histograms hist[p][kBins] (long rows).
template <int kPasses>
__device__ __forceinline__ void warp_select_prefix(const unsigned* hist, int passes, uint32_t kk, uint32_t& prefix,
                                                   uint32_t& mask, uint32_t& remaining) {
    prefix = 0, mask = 0, remaining = kk;
    for (int p = 0; p < passes; ++p) {
        const int shift = 8 * (kPasses - 1 - p);
        const DigitPick d = warp_select_digit(hist + p * TopKSelectConfig::kBins, remaining);
        prefix |= d.digit << shift;
        mask |= 0xffu << shift;
        remaining = d.remaining;
    }
}

// Threads 0 .. max(len, 32) - 1 of the block: sorts one value per thread descending across the first `len` threads
// (len a power of two <= kThreads; threads >= len hold 0 and only meet each other). Strides >= 32 go through buf
// [2][kThreads] (ping-pong: one barrier per stage, named barrier 1 over the len sorting threads, so the block's
// other warps neither wait nor issue), smaller ones through shuffles. A compare-exchange takes the partner's value
// when it belongs on this side (larger for the lower index of a descending pair): one 64-bit compare and a select,
// not a min and a max.
template <typename Code>
__device__ __forceinline__ Code block_sort_desc(Code v, int len, Code* buf) {
    constexpr int kT = TopKSelectConfig::kThreads;
    const int tid = int(threadIdx.x);
    int parity = 0;
    // pair (i, i ^ stride), i the lower: in a descending run (i & size == 0) i keeps the larger
    const auto exchange = [&](Code other, int size, int stride) {
        const bool keep_max = ((tid & size) == 0) == ((tid & stride) == 0);
        if ((other > v) == keep_max) v = other;  // equal values: either is right
    };
    for (int size = 2; size <= len; size <<= 1) {
        for (int stride = size >> 1; stride >= 32; stride >>= 1) {  // len >= 64 here: a whole number of warps
            Code* b = buf + parity * kT;
            parity ^= 1;
            b[tid] = v;
            asm volatile("bar.sync 1, %0;" ::"r"(len) : "memory");
            exchange(b[tid ^ stride], size, stride);
        }
#pragma unroll
        for (int stride = 16; stride > 0; stride >>= 1)
            if (stride < size) exchange(__shfl_xor_sync(0xffffffffu, v, stride), size, stride);
    }
    return v;
}

// The contiguous segment [begin, end) of keys[0..count) that warp `warp` of a block collects (a whole number of
// 32-key steps per warp, so the loops below are warp-uniform).
struct CollectSegment {
    int begin, end;
};
__device__ __forceinline__ CollectSegment collect_segment(int count, int warp) {
    constexpr int kWarps = TopKSelectConfig::kThreads / 32;
    const int seg = ((count + kWarps - 1) / kWarps + 31) & ~31;
    const int begin = warp * seg;
    return {begin, min(count, begin + seg)};
}

// Block, phase 1 of a collect: each warp's count of the keys > thr and == thr in its segment of keys[0..count) into
// counts[warp] and counts[kWarps + warp] (counts: shared [64]). No barrier.
template <typename KeyT>
__device__ __forceinline__ void block_collect_count(const KeyT* keys, int count, uint32_t thr, unsigned* counts) {
    constexpr int kWarps = TopKSelectConfig::kThreads / 32;
    const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
    const CollectSegment sg = collect_segment(count, warp);
    unsigned n_gt = 0, n_eq = 0;
    for (int i0 = sg.begin; i0 < sg.end; i0 += 32) {
        const int i = i0 + lane;
        const uint32_t key = i < sg.end ? uint32_t(keys[i]) : 0;
        n_gt += __popc(__ballot_sync(0xffffffffu, i < sg.end && key > thr));
        n_eq += __popc(__ballot_sync(0xffffffffu, i < sg.end && key == thr));
    }
    if (lane == 0) counts[warp] = n_gt, counts[kWarps + warp] = n_eq;
}

// Block, phase 2 (after block_collect_count and a barrier): picks of keys[0..count) (index first_index + i) into out:
// every key > thr at out[gt_base + rank], the keys == thr whose rank r = eq_base + rank < remaining at
// out[n_above + r], ranks in index order (the warps' counts give each warp its offsets). Ends without a barrier.
template <typename Code, typename KeyT>
__device__ __forceinline__ void block_collect_write(const KeyT* keys, int count, int64_t first_index, uint32_t thr,
                                                    uint32_t gt_base, uint32_t eq_base, uint32_t remaining,
                                                    uint32_t n_above, Code* out, const unsigned* counts) {
    constexpr int kWarps = TopKSelectConfig::kThreads / 32;
    const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
    const CollectSegment sg = collect_segment(count, warp);
    unsigned gt = gt_base + __reduce_add_sync(0xffffffffu, lane < warp ? counts[lane] : 0u);
    unsigned eq = eq_base + __reduce_add_sync(0xffffffffu, lane < warp ? counts[kWarps + lane] : 0u);
    const unsigned gt_end = gt + counts[warp], below = (1u << lane) - 1u;
    // warp-uniform loop; stops once this warp's keys above thr are written and the tie quota is full
    for (int i0 = sg.begin; i0 < sg.end && (gt < gt_end || eq < remaining); i0 += 32) {
        const int i = i0 + lane;
        const uint32_t key = i < sg.end ? uint32_t(keys[i]) : 0;
        const bool is_gt = i < sg.end && key > thr, is_eq = i < sg.end && key == thr;
        const unsigned b_gt = __ballot_sync(0xffffffffu, is_gt), b_eq = __ballot_sync(0xffffffffu, is_eq);
        if (is_gt) out[gt + __popc(b_gt & below)] = PickCode<Code>::of(key, first_index + i);
        if (is_eq) {
            const unsigned r = eq + __popc(b_eq & below);
            if (r < remaining) out[n_above + r] = PickCode<Code>::of(key, first_index + i);
        }
        gt += __popc(b_gt), eq += __popc(b_eq);
    }
}

// Block: both phases of a collect over one block's keys (offsets gt_base, eq_base from keys before them).
template <typename Code, typename KeyT>
__device__ __forceinline__ void block_collect(const KeyT* keys, int count, int64_t first_index, uint32_t thr,
                                              uint32_t gt_base, uint32_t eq_base, uint32_t remaining, uint32_t n_above,
                                              Code* out, unsigned* counts) {
    block_collect_count(keys, count, thr, counts);
    __syncthreads();
    block_collect_write(keys, count, first_index, thr, gt_base, eq_base, remaining, n_above, out, counts);
}

// Block: sort the kk picks in buf[0..kk) (thread t reads slot t only) and write the row's outputs. Only the warps
// that hold picks sort; every thread < k writes (and, into a list, the threads < its window columns). sorted = false
// (TopKArgs::sorted) writes them in the order they are in, which the callers make deterministic (the keys above the
// threshold in index order, then the ties).
template <typename ScoreT, typename Code>
__device__ __forceinline__ void block_sort_write(Code v, int kk, Code* buf, const PickOut& out, int64_t row,
                                                 bool sorted) {
    int len = 1;
    while (len < kk) len <<= 1;
    const int tid = int(threadIdx.x);
    if (sorted && tid < (len > 32 ? len : 32)) v = block_sort_desc(v, len, buf);
    if (tid < out.k) {
        int32_t r = -1;
        if (tid < kk && PickCode<Code>::key(v) > SelectKey<ScoreT>::kNegInf) r = PickCode<Code>::index(v);
        out.store(row, tid, r);
    }
    out.store_window(row, tid, TopKSelectConfig::kThreads);
}

// Short rows: pick codes of the one-block path (32-bit for bf16 keys, see PickCode).
template <typename ScoreT>
using ShortCode = std::conditional_t<SelectKey<ScoreT>::kPasses == 2, uint32_t, unsigned long long>;

// hist[bin] += 1 for every active lane by one shared atomic each. In the one-CTA path this is faster than
// hist_add_warp's match_any aggregation even for the top digit, where most of a warp's keys share a few bins
// (docs/kernels/attention.md, "Top-k select at batch 1").
__device__ __forceinline__ void hist_add_spread(unsigned* hist, uint32_t bin, bool active) {
    if (active) atomicAdd(&hist[bin], 1u);
}

// Block: keys[0..count) of the scores at src into shared memory, and pass 0's histogram (top digit, every key) into
// hist0. kFirstLoaded: v already holds the first batch (load_score_batch at base 0 for at least i < count), issued
// by the caller before it knew count. No barrier at the end.
template <bool kFirstLoaded, typename ScoreT>
__device__ __forceinline__ void block_load_keys(const ScoreT* __restrict__ src, int count,
                                                ScoreT (&v)[TopKSelectConfig::kBatch],
                                                typename SelectKey<ScoreT>::T* keys, unsigned* hist0) {
    using Cfg = TopKSelectConfig;
    using Key = SelectKey<ScoreT>;
    const int tid = int(threadIdx.x);
    for (int base = 0; base < count; base += Cfg::kThreads * Cfg::kBatch) {
        if (!kFirstLoaded || base > 0) load_score_batch(v, src, base, count, tid);
#pragma unroll
        for (int u = 0; u < Cfg::kBatch; ++u) {
            const int i = base + u * Cfg::kThreads + tid;
            const uint32_t key = i < count ? Key::of(v[u]) : 0u;
            if (i < count) keys[i] = typename Key::T(key);
            hist_add_spread(hist0, key >> (8 * (Key::kPasses - 1)), i < count);
        }
    }
}

// Block: the histogram of digit (key >> shift) & 0xff of the keys[0..count) whose higher digits (mask) equal prefix.
// No barrier at the end.
template <typename KeyT>
__device__ __forceinline__ void block_pass_hist(const KeyT* keys, int count, unsigned* hist, int shift, uint32_t mask,
                                                uint32_t prefix) {
    const int count_pad = (count + 31) & ~31;  // warp-uniform trip counts
    for (int i = int(threadIdx.x); i < count_pad; i += TopKSelectConfig::kThreads) {
        const uint32_t key = i < count ? uint32_t(keys[i]) : 0u;
        hist_add_spread(hist, (key >> shift) & 0xffu, i < count && (key & mask) == prefix);
    }
}

// Shared memory of block_select beside the caller's pick slots and keys.
template <int kP>
struct BlockSelectShared {
    unsigned hist[kP][TopKSelectConfig::kBins];  // one per pass, zeroed once
    unsigned counts[64];
    DigitPick sel[kP];
};

// Block: the row's outputs from its n scores at src (1 <= n, kk = min(n, k) >= 1), the whole row in one CTA: keys
// in keys[n], picks in buf [2][kThreads]. v holds the first batch of scores (load_score_batch at base 0, loaded for
// at least i < n): callers issue it before they know n. Every pass has its own histogram (zeroed once, while those
// loads are in flight); one warp picks each digit (every warp picking it redundantly measured slower: 32 warps'
// shuffle chains contend for the schedulers).
template <typename ScoreT, typename Code>
__device__ __forceinline__ void block_select(const ScoreT* __restrict__ src, int n, int kk, const PickOut& out,
                                             int64_t row, ScoreT (&v)[TopKSelectConfig::kBatch], Code* buf,
                                             typename SelectKey<ScoreT>::T* keys,
                                             BlockSelectShared<SelectKey<ScoreT>::kPasses>& sh, bool sorted) {
    using Cfg = TopKSelectConfig;
    constexpr int kP = SelectKey<ScoreT>::kPasses;
    const int tid = int(threadIdx.x);
    for (int j = tid; j < kP * Cfg::kBins; j += Cfg::kThreads) (&sh.hist[0][0])[j] = 0;
    __syncthreads();
    block_load_keys<true>(src, n, v, keys, sh.hist[0]);
    __syncthreads();
    uint32_t prefix = 0, mask = 0, remaining = uint32_t(kk);
#pragma unroll 1
    for (int p = 0; p < kP; ++p) {
        const int shift = 8 * (kP - 1 - p);
        if (p > 0) {
            block_pass_hist(keys, n, sh.hist[p], shift, mask, prefix);
            __syncthreads();
        }
        if (tid < 32) {
            const DigitPick dd = warp_select_digit(sh.hist[p], remaining);
            if (tid == 0) sh.sel[p] = dd;
        }
        __syncthreads();
        const DigitPick d = sh.sel[p];
        prefix |= d.digit << shift;
        mask |= 0xffu << shift;
        remaining = d.remaining;
    }
    const uint32_t n_above = uint32_t(kk) - remaining;
    block_collect(keys, n, 0, prefix, 0u, 0u, remaining, n_above, buf, sh.counts);
    __syncthreads();
    const Code c = tid < kk ? buf[tid] : Code(0);
    block_sort_write<ScoreT>(c, kk, buf, out, row, sorted);
}

// Short rows: grid = rows, kThreads threads, dynamic shared memory = 2·kThreads picks + n keys (topk_select.cu).
// One CTA's chain of barriers is the cost at these sizes, so the row's loads are issued before its visible count is
// known (the whole stride is read, keys past the count are masked).
template <typename ScoreT>
__global__ void __launch_bounds__(TopKSelectConfig::kThreads, TopKSelectConfig::kMinBlocks)
    sm90_topk_select_short_kernel(const ScoreT* __restrict__ scores, int64_t stride,
                                  const int64_t* __restrict__ positions, int64_t ratio, bool sorted, PickOut out) {
    pdl_enter();
    using Cfg = TopKSelectConfig;
    using KeyT = typename SelectKey<ScoreT>::T;
    using Code = ShortCode<ScoreT>;
    extern __shared__ __align__(16) unsigned char topk_select_smem[];
    auto* buf = reinterpret_cast<Code*>(topk_select_smem);  // [2][kThreads]; buf[0..kk) = picks
    auto* keys = reinterpret_cast<KeyT*>(topk_select_smem + 2 * Cfg::kThreads * sizeof(unsigned long long));  // [n]
    __shared__ BlockSelectShared<SelectKey<ScoreT>::kPasses> sh;

    const int64_t row = blockIdx.x;
    const int tid = int(threadIdx.x);
    const ScoreT* src = scores + row * stride;
    ScoreT v[Cfg::kBatch];
    load_score_batch(v, src, 0, int(stride), tid);  // stride <= kShortLimit (launcher); in flight while n is read
    const int n = int(select_row_count(stride, positions, ratio, row));
    const int kk = min(n, out.k);
    if (kk == 0) {
        out.store_none(row, tid, Cfg::kThreads);
        return;
    }
    block_select(src, n, kk, out, row, v, buf, keys, sh, sorted);
}

// Long rows, pass `pass`: grid = rows · chunks (block b: row b / chunks, chunk b % chunks), kThreads threads.
template <typename ScoreT>
__global__ void __launch_bounds__(TopKSelectConfig::kThreads, TopKSelectConfig::kMinBlocks)
    sm90_topk_select_hist_kernel(const ScoreT* __restrict__ scores, int64_t stride, int k,
                                 const int64_t* __restrict__ positions, int64_t ratio, int chunk, int chunks, int pass,
                                 TopKSelectWorkspace ws) {
    pdl_enter();
    using Cfg = TopKSelectConfig;
    using Key = SelectKey<ScoreT>;
    constexpr int kP = Key::kPasses;
    __shared__ unsigned hist[Cfg::kBins];
    __shared__ unsigned warp_suffix[Cfg::kBins / 32];
    __shared__ unsigned above_total;
    __shared__ uint32_t sel_prefix, sel_mask;

    const int64_t row = blockIdx.x / unsigned(chunks);
    const int c = int(blockIdx.x % unsigned(chunks));
    const int tid = int(threadIdx.x), lane = tid & 31;
    const int64_t n = select_row_count(stride, positions, ratio, row);
    const int64_t kk = n < k ? n : k;
    const int64_t begin = int64_t(c) * chunk;
    if (kk == 0 || begin >= n) return;
    const int count = int(n - begin < chunk ? n - begin : chunk);
    const bool last = pass == kP - 1;
    unsigned* row_hist = ws.hist + row * Cfg::kMaxPasses * Cfg::kBins;
    if (tid < Cfg::kBins) hist[tid] = 0;
    if (tid == 0) above_total = 0;
    if (tid < 32) {
        uint32_t prefix, mask, remaining;
        warp_select_prefix<kP>(row_hist, pass, uint32_t(kk), prefix, mask, remaining);
        if (tid == 0) sel_prefix = prefix, sel_mask = mask;
    }
    __syncthreads();
    const uint32_t prefix = sel_prefix, mask = sel_mask;
    const int shift = 8 * (kP - 1 - pass);
    const ScoreT* src = scores + row * stride + begin;
    unsigned above = 0;  // last pass: keys whose higher digits exceed the prefix
    for (int base = 0; base < count; base += Cfg::kThreads * Cfg::kBatch) {
        ScoreT v[Cfg::kBatch];
        load_score_batch(v, src, base, count, tid);
#pragma unroll
        for (int u = 0; u < Cfg::kBatch; ++u) {
            const int i = base + u * Cfg::kThreads + tid;
            const uint32_t key = i < count ? Key::of(v[u]) : 0u;
            hist_add_warp(hist, (key >> shift) & 0xffu, i < count && (key & mask) == prefix);
            above += unsigned(i < count && (key & mask) > prefix);
        }
    }
    if (last) {
        above = __reduce_add_sync(0xffffffffu, above);
        if (lane == 0 && above) atomicAdd(&above_total, above);
    }
    __syncthreads();
    if (tid < Cfg::kBins && hist[tid]) atomicAdd(&row_hist[pass * Cfg::kBins + tid], hist[tid]);
    if (!last) return;
    // per chunk and last digit b: keys > (prefix | b) and == (prefix | b)
    const unsigned h = tid < Cfg::kBins ? hist[tid] : 0u;
    unsigned incl = h;  // bins b.. of this warp's 32
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const unsigned t = __shfl_down_sync(0xffffffffu, incl, off);
        if (lane + off < 32) incl += t;
    }
    if (tid < Cfg::kBins && lane == 0) warp_suffix[tid >> 5] = incl;
    __syncthreads();
    if (tid < Cfg::kBins) {
        for (int w = (tid >> 5) + 1; w < Cfg::kBins / 32; ++w) incl += warp_suffix[w];
        const int64_t at = (row * chunks + c) * Cfg::kBins + tid;
        ws.above[at] = above_total + incl - h;
        ws.equal[at] = h;
    }
}

// Long rows: each chunk writes its picks into the row's slots, the row's last CTA sorts them and writes the outputs.
template <typename ScoreT>
__global__ void __launch_bounds__(TopKSelectConfig::kThreads, TopKSelectConfig::kMinBlocks)
    sm90_topk_select_collect_kernel(const ScoreT* __restrict__ scores, int64_t stride,
                                    const int64_t* __restrict__ positions, int64_t ratio, int chunk, int chunks,
                                    bool sorted, TopKSelectWorkspace ws, PickOut out) {
    pdl_enter();
    using Cfg = TopKSelectConfig;
    using Key = SelectKey<ScoreT>;
    using KeyT = typename Key::T;
    constexpr int kP = Key::kPasses;
    constexpr int kKeyBytes = Cfg::kChunkMax * int(sizeof(KeyT)), kSortBytes = 2 * Cfg::kThreads * 8;
    __shared__ __align__(16) unsigned char smem[kKeyBytes > kSortBytes ? kKeyBytes : kSortBytes];
    auto* keys = reinterpret_cast<KeyT*>(smem);               // [chunk] (collect)
    auto* buf = reinterpret_cast<unsigned long long*>(smem);  // [2][kThreads] (sort, row's last CTA)
    __shared__ unsigned counts[64];
    __shared__ uint32_t sel_prefix, sel_remaining;
    __shared__ unsigned offsets[2], mine[2];
    __shared__ int is_last;

    const int64_t row = blockIdx.x / unsigned(chunks);
    const int c = int(blockIdx.x % unsigned(chunks));
    const int tid = int(threadIdx.x), lane = tid & 31;
    const int64_t n = select_row_count(stride, positions, ratio, row);
    const int kk = int(n < out.k ? n : out.k);
    const int64_t begin = int64_t(c) * chunk;
    unsigned long long* row_picks = ws.picks + row * Cfg::kMaxK;
    if (kk > 0 && begin < n) {  // block-uniform
        const int count = int(n - begin < chunk ? n - begin : chunk);
        if (tid < 32) {
            uint32_t prefix, mask, remaining;
            warp_select_prefix<kP>(ws.hist + row * Cfg::kMaxPasses * Cfg::kBins, kP, uint32_t(kk), prefix, mask,
                                   remaining);
            if (tid == 0) sel_prefix = prefix, sel_remaining = remaining;
        }
        if (tid < 2) offsets[tid] = 0;
        __syncthreads();
        const uint32_t thr = sel_prefix, remaining = sel_remaining, d = thr & 0xffu;
        const unsigned* above = ws.above + row * chunks * Cfg::kBins + d;
        const unsigned* equal = ws.equal + row * chunks * Cfg::kBins + d;
        unsigned gt_before = 0, eq_before = 0;
        for (int cc = tid; cc < c; cc += Cfg::kThreads)
            gt_before += above[int64_t(cc) * Cfg::kBins], eq_before += equal[int64_t(cc) * Cfg::kBins];
        gt_before = __reduce_add_sync(0xffffffffu, gt_before);
        eq_before = __reduce_add_sync(0xffffffffu, eq_before);
        if (lane == 0 && (gt_before | eq_before)) atomicAdd(&offsets[0], gt_before), atomicAdd(&offsets[1], eq_before);
        if (tid == 0) mine[0] = above[int64_t(c) * Cfg::kBins], mine[1] = equal[int64_t(c) * Cfg::kBins];
        __syncthreads();
        const unsigned gt_off = offsets[0], eq_off = offsets[1];
        if (mine[0] > 0 || (mine[1] > 0 && eq_off < remaining)) {  // the chunk holds picks
            const ScoreT* src = scores + row * stride + begin;
            for (int base = 0; base < count; base += Cfg::kThreads * Cfg::kBatch) {
                ScoreT v[Cfg::kBatch];
                load_score_batch(v, src, base, count, tid);
#pragma unroll
                for (int u = 0; u < Cfg::kBatch; ++u) {
                    const int i = base + u * Cfg::kThreads + tid;
                    if (i < count) keys[i] = KeyT(Key::of(v[u]));
                }
            }
            __syncthreads();
            block_collect(keys, count, begin, thr, gt_off, eq_off, remaining, uint32_t(kk) - remaining, row_picks,
                          counts);
        }
    }
    // ticket: the row's last CTA sees every pick (each writer fenced before its CTA took a ticket)
    __threadfence();
    __syncthreads();
    if (tid == 0) is_last = atomicAdd(&ws.tickets[row], 1u) == unsigned(chunks - 1);
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    // the row's counters back to zero for the next call (TopKArgs::counters: no clearing launch); every CTA of the
    // row read the histograms before taking its ticket
    for (int j = tid; j < Cfg::kMaxPasses * Cfg::kBins; j += Cfg::kThreads)
        ws.hist[row * Cfg::kMaxPasses * Cfg::kBins + j] = 0;
    if (tid == 0) ws.tickets[row] = 0;
    const unsigned long long v = tid < kk ? __ldcg(row_picks + tid) : 0ull;
    // (the chunks placed their picks at offsets from the prefix over chunks: index order, then the ties)
    block_sort_write<ScoreT, unsigned long long>(v, kk, buf, out, row, sorted);
}

}  // namespace dsv4::cuda
