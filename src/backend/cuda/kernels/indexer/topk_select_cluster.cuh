// Cluster path of sm90_topk_select (indexer.h): one thread-block cluster of C CTAs per row (2 to 8), for rows too long
// for one CTA's shared memory. The row is read once: CTA r keeps its share of the keys (a contiguous 1/C of the row's
// visible count) in shared memory for every pass; the pass histograms are summed across the cluster through
// distributed shared memory, each CTA's picks are written straight into CTA 0's pick slots, and CTA 0 writes the row.
// Against the chunked path (one launch per pass plus the collect, a zeroed workspace, the row read once per pass) it
// is one launch, no workspace, and at batch 1 no launch chain at all; a cluster's CTAs are co-scheduled by the
// hardware, so the cluster barriers cannot wait on a CTA that is not resident.
//
// Same keys, passes, digit rule, tie rule and pick codes as the other paths (topk_select.cuh): the picks are
// identical. Per pass: every CTA histograms its keys matching the prefix into its own histogram, cluster barrier,
// one warp per CTA sums the C histograms and picks the digit (every CTA the same). Collect (cluster_collect): each
// CTA's picks straight into CTA 0's slots — for an unsorted call in the one-CTA collect's order (keys above the
// threshold T, then its ties, each in index order across the cluster), for a sorted one in any order; cluster
// barrier; CTA 0 sorts them (TopKArgs::sorted) and writes the row.
#pragma once

#include <cooperative_groups.h>

#include "backend/cuda/kernels/indexer/topk_select.cuh"

namespace dsv4::cuda {

struct TopKClusterConfig {
    static constexpr int kMaxCtas = 8;           // portable cluster size (16 measured slower from batch 8 on)
    static constexpr int kCtaKeysTarget = 8192;  // C doubles from 2 while a CTA's share would exceed this
    static constexpr int kCtaKeysMax = 32768;    // a CTA's share at most: n <= kMaxCtas · this
    static constexpr size_t kPickBytes = 2 * TopKSelectConfig::kThreads * sizeof(unsigned long long);
};

// CTA `rank` of the cluster: its picks of keys[0..count) (indices first_index + i) into CTA 0's slots `picks`, in
// one of two ways. kInOrder (calls that take the picks unsorted): at the places the one-CTA collect would give them
// (keys above thr in index order, then the first `remaining` ties in index order) — each CTA counts its keys above
// and equal to thr per warp (block_collect_count), publishes its totals in cta_counts, and after the cluster barrier
// writes its picks past the earlier CTAs' totals (block_collect_write): two passes over the keys. Otherwise (CTA 0
// sorts the picks afterwards) in one pass: every key > thr takes a slot from CTA 0's counter gt_next in any order
// while the ties are counted; the ties are ranked in index order across the cluster, and only the warps whose ties
// reach into the quota read their segment again, writing rank r < remaining at n_above + r (at 1M, B = 1 the two
// passes cost the sorted call 1.8 us: docs/kernels/attention.md). counts: shared [64]; cta_counts: this CTA's
// totals above / equal, read by the later CTAs. Synchronises the cluster once; ends without a barrier after the
// writes.
template <bool kInOrder, typename KeyT>
__device__ __forceinline__ void cluster_collect(const KeyT* keys, int count, int64_t first_index, uint32_t thr,
                                                uint32_t remaining, uint32_t n_above, unsigned long long* picks,
                                                unsigned* gt_next, unsigned* counts, unsigned* cta_counts,
                                                const cooperative_groups::cluster_group& cluster, int rank) {
    using Code = PickCode<unsigned long long>;
    constexpr int kWarps = TopKSelectConfig::kThreads / 32;
    const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
    const CollectSegment sg = collect_segment(count, warp);
    const unsigned below = (1u << lane) - 1u;
    if constexpr (kInOrder) {
        block_collect_count(keys, count, thr, counts);
    } else {
        unsigned n_eq = 0;
        for (int i0 = sg.begin; i0 < sg.end; i0 += 32) {
            const int i = i0 + lane;
            const uint32_t key = i < sg.end ? uint32_t(keys[i]) : 0;
            const unsigned b_gt = __ballot_sync(0xffffffffu, i < sg.end && key > thr);
            n_eq += __popc(__ballot_sync(0xffffffffu, i < sg.end && key == thr));
            if (b_gt) {  // warp-uniform
                unsigned base = 0;
                if (lane == 0) base = atomicAdd(gt_next, unsigned(__popc(b_gt)));
                base = __shfl_sync(0xffffffffu, base, 0);
                if ((b_gt >> lane) & 1u) picks[base + __popc(b_gt & below)] = Code::of(key, first_index + i);
            }
        }
        if (lane == 0) counts[warp] = 0, counts[kWarps + warp] = n_eq;
    }
    __syncthreads();
    if (warp == 0) {
        const unsigned gt = __reduce_add_sync(0xffffffffu, counts[lane]);
        const unsigned eq = __reduce_add_sync(0xffffffffu, counts[kWarps + lane]);
        if (lane == 0) cta_counts[0] = gt, cta_counts[1] = eq;
    }
    cluster.sync();  // every CTA's totals are published
    unsigned gt_base = 0, eq_base = 0;
#pragma unroll
    for (int r = 0; r < TopKClusterConfig::kMaxCtas; ++r)
        if (r < rank) {
            const unsigned* other = cluster.map_shared_rank(cta_counts, r);
            gt_base += other[0], eq_base += other[1];
        }
    if constexpr (kInOrder) {
        block_collect_write(keys, count, first_index, thr, gt_base, eq_base, remaining, n_above, picks, counts);
        return;
    }
    unsigned eq = eq_base + __reduce_add_sync(0xffffffffu, lane < warp ? counts[kWarps + lane] : 0u);
    if (counts[kWarps + warp] == 0 || eq >= remaining) return;
    for (int i0 = sg.begin; i0 < sg.end && eq < remaining; i0 += 32) {
        const int i = i0 + lane;
        const uint32_t key = i < sg.end ? uint32_t(keys[i]) : 0;
        const bool is_eq = i < sg.end && key == thr;
        const unsigned b_eq = __ballot_sync(0xffffffffu, is_eq);
        if (is_eq) {
            const unsigned r = eq + __popc(b_eq & below);
            if (r < remaining) picks[n_above + r] = Code::of(thr, first_index + i);
        }
        eq += __popc(b_eq);
    }
}

// Grid = rows · C CTAs in clusters of C along x (cluster c = row c), kThreads threads, dynamic shared memory =
// kPickBytes + share_max keys, share_max >= the largest share (launcher: ceil(n / C) rounded up to 32). A row whose
// visible count is at most single_max (<= share_max; decode calls span a session's whole key capacity, of which a
// short context sees little) is selected by CTA 0 alone on the one-block path's code, without the cluster's barriers.
// kSorted (TopKArgs::sorted) picks the collect at compile time: one instance holding both spilled more under the
// 32-register cap of two CTAs per SM.
template <typename ScoreT, bool kSorted>
__global__ void __launch_bounds__(TopKSelectConfig::kThreads, TopKSelectConfig::kMinBlocks)
    sm90_topk_select_cluster_kernel(const ScoreT* __restrict__ scores, int64_t stride,
                                    const int64_t* __restrict__ positions, int64_t ratio, int single_max, PickOut out) {
    pdl_enter();
    using Cfg = TopKSelectConfig;
    using Key = SelectKey<ScoreT>;
    using KeyT = typename Key::T;
    using Code = unsigned long long;  // indices up to kMaxCtas · kCtaKeysMax need more than 16 bits
    constexpr int kP = Key::kPasses;
    extern __shared__ __align__(16) unsigned char topk_cluster_smem[];
    auto* buf = reinterpret_cast<Code*>(topk_cluster_smem);  // [2][kThreads]; CTA 0: buf[0..kk) = the row's picks
    auto* keys = reinterpret_cast<KeyT*>(topk_cluster_smem + TopKClusterConfig::kPickBytes);  // [share]
    __shared__ __align__(16) unsigned hist[kP][Cfg::kBins];
    __shared__ unsigned counts[64];
    __shared__ DigitPick sel[kP];
    __shared__ BlockSelectShared<kP> single;  // a row of <= single_max visible scores: CTA 0 alone
    __shared__ unsigned gt_next;              // CTA 0's: the next free slot for a key above the threshold (sorted)
    __shared__ unsigned cta_counts[2];        // this CTA's keys above and equal to the threshold (later CTAs read)

    const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    const int ctas = int(cluster.num_blocks()), rank = int(cluster.block_rank());
    const int64_t row = blockIdx.x / unsigned(ctas);
    const int tid = int(threadIdx.x);
    const int n = int(select_row_count(stride, positions, ratio, row));
    const int kk = min(n, out.k);
    if (kk == 0) {  // the same for every CTA of the cluster: none touches another's memory
        if (rank == 0) out.store_none(row, tid, Cfg::kThreads);
        return;
    }
    if (n <= single_max) {  // the same for every CTA: CTA 0 takes the row alone, no cluster barrier at all
        if (rank != 0) return;
        ScoreT v[Cfg::kBatch];
        load_score_batch(v, scores + row * stride, 0, n, tid);
        auto* short_buf = reinterpret_cast<ShortCode<ScoreT>*>(topk_cluster_smem);
        block_select(scores + row * stride, n, kk, out, row, v, short_buf, keys, single, kSorted);
        return;
    }
    const int share = ((n + ctas - 1) / ctas + 31) & ~31;
    const int begin = min(n, rank * share), count = min(n, begin + share) - begin;
    for (int j = tid; j < kP * Cfg::kBins; j += Cfg::kThreads) (&hist[0][0])[j] = 0;
    if (tid == 0) gt_next = 0;  // before the first cluster barrier, so before any CTA's atomic on it
    __syncthreads();
    ScoreT v[Cfg::kBatch];
    block_load_keys<false>(scores + row * stride + begin, count, v, keys, hist[0]);
    cluster.sync();  // every CTA's pass-0 histogram is complete (and every CTA has started)
    uint32_t prefix = 0, mask = 0, remaining = uint32_t(kk);
#pragma unroll 1
    for (int p = 0; p < kP; ++p) {
        const int shift = 8 * (kP - 1 - p);
        if (p > 0) {
            block_pass_hist(keys, count, hist[p], shift, mask, prefix);
            cluster.sync();
        }
        if (tid < 32) {  // bins 8·lane .. 8·lane + 7 summed over the cluster's histograms
            uint32_t h[8] = {};
#pragma unroll
            for (int c = 0; c < TopKClusterConfig::kMaxCtas; ++c) {  // every load issued before any is summed
                if (c >= ctas) continue;
                const uint4* b = reinterpret_cast<const uint4*>(cluster.map_shared_rank(&hist[p][tid * 8], c));
                const uint4 lo = b[0], hi = b[1];
                h[0] += lo.x, h[1] += lo.y, h[2] += lo.z, h[3] += lo.w;
                h[4] += hi.x, h[5] += hi.y, h[6] += hi.z, h[7] += hi.w;
            }
            const DigitPick d = warp_pick_digit(h, remaining);
            if (tid == 0) sel[p] = d;
        }
        __syncthreads();
        const DigitPick d = sel[p];
        prefix |= d.digit << shift;
        mask |= 0xffu << shift;
        remaining = d.remaining;
    }
    cluster_collect<!kSorted>(keys, count, begin, prefix, remaining, uint32_t(kk) - remaining,
                              cluster.map_shared_rank(buf, 0), cluster.map_shared_rank(&gt_next, 0), counts, cta_counts,
                              cluster, rank);
    cluster.sync();  // every pick is in CTA 0's slots; no CTA reads another's memory after this
    if (rank != 0) return;
    const Code c = tid < kk ? buf[tid] : Code(0);
    block_sort_write<ScoreT>(c, kk, buf, out, row, kSorted);
}

}  // namespace dsv4::cuda
