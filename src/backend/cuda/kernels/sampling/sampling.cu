// sm90_sample_rows (sampling.h): a cluster of C CTAs of 1,024 threads per row (C = 1..8: few rows spread over more
// SMs; CTA r takes the r-th 1/C of the row, and after each pass the CTAs' results are combined in rank order through
// distributed shared memory, so every CTA holds the same values and the result does not depend on timing). Passes
// over the row (it stays in L2): max and argmax; the exps, their f64 sum and, when the draw or the alternatives need
// the candidate order, the mass and count within each gap of the max (sample_gap: 2, 4, ..., 64 nats); then the
// tokens within the smallest sufficient gap (at most 4,096) gathered into CTA 0 and bitonic-sorted there (higher
// processed logit first, then lower id); the draw by inverse CDF, over the sorted candidates on one thread of CTA 0
// (the host's loops, in the host's order) or over every token in id order on all threads of the cluster (contiguous
// ranges, a prefix of their sums, the first token whose running sum passes the target).
#include <cooperative_groups.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "backend/cuda/common/cluster_launch.h"
#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kernels/sampling/sampling.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 1024, kWarps = kThreads / 32;
constexpr int kMaxCluster = 8;  // CTAs per row at most (the portable cluster size)
constexpr int kGaps = kSampleGaps;

// e^(l - max) by the host's exp_below_max, operation for operation; the explicit roundings forbid the contraction
// into FMAs that the host's x86-64 build does not do either.
__device__ __forceinline__ float exp_below(float l, float max_logit) {
    const float x = __fsub_rn(l, max_logit);
    const float xc = x > -87.0f ? x : -87.0f;
    const float t = __fadd_rn(__fmul_rn(xc, 1.44269504088896341f), 12582912.0f);
    const float k = __fsub_rn(t, 12582912.0f);
    float r = __fsub_rn(xc, __fmul_rn(k, 0.693359375f));
    r = __fsub_rn(r, __fmul_rn(k, -2.12194440e-4f));
    float p = 1.9875691500e-4f;
    p = __fadd_rn(__fmul_rn(p, r), 1.3981999507e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
    p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
    p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
    p = __fadd_rn(__fadd_rn(__fmul_rn(__fmul_rn(p, r), r), r), 1.0f);
    const float scale = __int_as_float((int(k) + 127) << 23);
    return x >= -87.0f ? __fmul_rn(p, scale) : 0.0f;
}

// The candidate order as one descending 64-bit key: the processed logit's order-preserving bits, then the id's
// complement (equal logits: the lower id first). Empty slots are 0, below every finite logit's key.
__device__ __forceinline__ uint64_t candidate_key(float w, int32_t id) {
    uint32_t u = __float_as_uint(w);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return (uint64_t(u) << 32) | uint32_t(~uint32_t(id));
}
__device__ __forceinline__ float key_logit(uint64_t key) {
    const uint32_t u = uint32_t(key >> 32);
    return __uint_as_float((u & 0x80000000u) ? (u & 0x7fffffffu) : ~u);
}
__device__ __forceinline__ int32_t key_id(uint64_t key) { return int32_t(~uint32_t(key)); }

__device__ __forceinline__ int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ __forceinline__ int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

// f(i, x) for the raw logits x = row[i], i = lo .. hi - 1 in order, 8 loads in flight (two 16-byte loads where
// `vec`: row + lo 16-byte aligned): a thread's range is read in a few round trips to L2 instead of one per logit,
// which is what bounded a pass over a row (the loads, not the arithmetic; 16 in flight spill at 64 registers).
constexpr int kVecLoads = 2;  // 16-byte loads in flight per thread
template <typename F>
__device__ __forceinline__ void each_logit(const float* row, int64_t lo, int64_t hi, bool vec, F&& f) {
    int64_t i = lo;
    if (vec)
        for (; i + 4 * kVecLoads <= hi; i += 4 * kVecLoads) {
            float4 v[kVecLoads];
#pragma unroll
            for (int j = 0; j < kVecLoads; ++j) v[j] = *reinterpret_cast<const float4*>(row + i + 4 * j);
#pragma unroll
            for (int j = 0; j < kVecLoads; ++j) {
                f(i + 4 * j, v[j].x);
                f(i + 4 * j + 1, v[j].y);
                f(i + 4 * j + 2, v[j].z);
                f(i + 4 * j + 3, v[j].w);
            }
        }
    for (; i < hi; i += 4 * kVecLoads) {
        float v[4 * kVecLoads];
#pragma unroll
        for (int j = 0; j < 4 * kVecLoads; ++j) v[j] = i + j < hi ? row[i + j] : 0.0f;
#pragma unroll
        for (int j = 0; j < 4 * kVecLoads; ++j)
            if (i + j < hi) f(i + j, v[j]);
    }
}

static_assert(kWarps == 32, "a warp reduces the warps' partials, one per lane");

// The larger (value, lowest index on ties) of two, for the max's shuffle trees.
__device__ __forceinline__ void max_lowest(float& v, int32_t& i, float v2, int32_t i2) {
    if (v2 > v || (v2 == v && i2 < i)) v = v2, i = i2;
}

template <typename T>
__device__ T block_min(T v, T* red) {
    for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    T t = red[0];
    for (int w = 1; w < kWarps; ++w) t = min(t, red[w]);
    __syncthreads();
    return t;
}

// What a CTA publishes to the cluster after each pass (one field per pass, so a CTA that runs ahead never
// overwrites a value another is still reading).
constexpr int kSums = 1 + 2 * kGaps;  // z, then each gap's mass, then each gap's count (exact in f64)
struct Published {
    float max_v;
    int32_t max_i;
    double sums[kSums];
    double part;  // the CTA's ranges' sum (id-order draw)
    int32_t found, last;
};

struct Shared {
    double red_sums[kSums][kWarps];  // the warps' partial sums
    double red_f64[kWarps];
    float red_v[kWarps];
    int32_t red_i[kWarps];
    Published pub;
    int32_t candidates;  // CTA 0's: the gather's next slot
    int32_t token;
    int32_t status;
};

// Dynamic shared memory: CTA 0's gathered candidates (then sorted) and their probabilities; every CTA's copy of the
// row's penalty list.
struct Candidates {
    uint64_t keys[kSampleMaxCandidates];
    float probs[kSampleMaxCandidates];
    SamplePenalty penalties[kSampleMaxPenalties];
};

// The first of list[0..n) (ascending tokens) whose token is >= t.
__device__ __forceinline__ int first_at_or_after(const SamplePenalty* list, int n, int64_t t) {
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (list[mid].token < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

// kPenalties: some row of the call has a penalty list (SampleRowsArgs::penalties); without, the passes skip the
// list's cursor, and a row that has one anyway is declined.
template <bool kPenalties>
__global__ void __launch_bounds__(kThreads)
    sample_rows_kernel(const float* logits, int64_t vocab, const SampleRowParams* params,
                       const SamplePenalty* penalties, SampleRowOut* outs) {
    pdl_enter();
    __shared__ Shared sh;
    extern __shared__ __align__(16) unsigned char sample_rows_smem[];
    Candidates& cand = *reinterpret_cast<Candidates*>(sample_rows_smem);
    namespace cg = cooperative_groups;
    const cg::cluster_group cluster = cg::this_cluster();
    const int ctas = int(cluster.num_blocks()), rank = int(cluster.block_rank());
    const auto pub_of = [&](int r) { return cluster.map_shared_rank(&sh.pub, r); };
    Shared* const sh0 = cluster.map_shared_rank(&sh, 0);          // CTA 0's gather counter
    Candidates* const cand0 = cluster.map_shared_rank(&cand, 0);  // CTA 0's candidates
    const int64_t row_index = blockIdx.x / unsigned(ctas);
    const SampleRowParams p = params[row_index];
    SampleRowOut* out = outs + row_index;
    const float* row = logits + p.row * vocab;
    const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    // each thread of the cluster one contiguous range of `span` logits (a multiple of 4), in id order over the cluster
    const int64_t span = ((vocab + int64_t(ctas) * kThreads - 1) / (int64_t(ctas) * kThreads) + 3) / 4 * 4;
    const int64_t lo = imin(vocab, (int64_t(rank) * kThreads + tid) * span), hi = imin(vocab, lo + span);
    const bool vec = (reinterpret_cast<uintptr_t>(row) & 15u) == 0;
    const bool greedy = p.temperature <= 0.0f;
    const bool scaled = !greedy && p.temperature != 1.0f;
    const float inv_t = scaled ? __fdiv_rn(1.0f, p.temperature) : 1.0f;
    const bool top_k_on = !greedy && p.top_k > 0 && p.top_k < vocab;
    const bool top_p_on = !greedy && p.top_p < 1.0f;
    const int32_t n_top = int32_t(imin(p.top_logprobs, vocab));
    const bool need_order = top_k_on || top_p_on || n_top > 0;  // the sorted candidates (and the gaps' sums)
    // The penalties as Sampler::apply_penalties computes them, on the logit after NaN -> -inf (no contraction).
    const int n_pen = p.penalty_count;
    if (n_pen > (kPenalties ? kSampleMaxPenalties : 0)) {  // the same in every CTA, before any cluster barrier
        if (rank == 0 && tid == 0) out->status = kSampleDeclined;
        return;
    }
    const auto penalize = [&](float l, int32_t count) {
        if (p.repetition_penalty != 1.0f)
            l = l > 0.0f ? __fdiv_rn(l, p.repetition_penalty) : __fmul_rn(l, p.repetition_penalty);
        return __fsub_rn(l, __fadd_rn(__fmul_rn(p.frequency_penalty, float(count)), p.presence_penalty));
    };
    // A pass walks this thread's range in id order beside the penalty list (cursor pen_at; pen_next its token).
    int pen_start = 0, pen_at = 0;
    int64_t pen_next = INT64_MAX;
    const auto begin_pass = [&] {
        pen_at = pen_start;
        pen_next = pen_at < n_pen ? cand.penalties[pen_at].token : INT64_MAX;
    };
    const auto process = [&](int64_t i, float l) {  // the processed logit: NaN -> -inf, penalties, temperature
        float w = isnan(l) ? -INFINITY : l;
        if (kPenalties && i == pen_next) {
            w = penalize(w, cand.penalties[pen_at].count);
            ++pen_at;
            pen_next = pen_at < n_pen ? cand.penalties[pen_at].token : INT64_MAX;
        }
        return scaled ? __fmul_rn(w, inv_t) : w;
    };
    const auto work = [&](int64_t i) {  // the processed logit of any one token
        float w = isnan(row[i]) ? -INFINITY : row[i];
        if constexpr (kPenalties) {
            const int at = first_at_or_after(cand.penalties, n_pen, i);
            if (at < n_pen && cand.penalties[at].token == i) w = penalize(w, cand.penalties[at].count);
        }
        return scaled ? __fmul_rn(w, inv_t) : w;
    };
    if (kPenalties && n_pen > 0) {  // the same in every CTA
        for (int j = tid; j < n_pen; j += kThreads) cand.penalties[j] = penalties[p.penalty_first + j];
        __syncthreads();
        pen_start = first_at_or_after(cand.penalties, n_pen, lo);
    }
    if (tid == 0) sh.candidates = 0;  // before the first cluster barrier, so before any CTA gathers into CTA 0
    for (int j = tid; j < kSampleMaxCandidates; j += kThreads) cand.keys[j] = 0;

    // max, lowest id on ties
    float best_v = -INFINITY;
    int32_t best_i = INT32_MAX;
    begin_pass();
    each_logit(row, lo, hi, vec, [&](int64_t i, float x) {
        const float w = process(i, x);
        if (w > best_v) best_v = w, best_i = int32_t(i);  // in id order: the first of equals stays
    });
    for (int o = 16; o > 0; o >>= 1)
        max_lowest(best_v, best_i, __shfl_xor_sync(0xffffffffu, best_v, o), __shfl_xor_sync(0xffffffffu, best_i, o));
    if (lane == 0) sh.red_v[warp] = best_v, sh.red_i[warp] = best_i;
    __syncthreads();
    if (warp == 0) {  // the warps' maxima, one per lane
        best_v = sh.red_v[lane], best_i = sh.red_i[lane];
        for (int o = 16; o > 0; o >>= 1)
            max_lowest(best_v, best_i, __shfl_xor_sync(0xffffffffu, best_v, o),
                       __shfl_xor_sync(0xffffffffu, best_i, o));
        if (lane == 0) sh.pub.max_v = best_v, sh.pub.max_i = best_i;
    }
    cluster.sync();  // every CTA's max is published
    best_v = -INFINITY, best_i = INT32_MAX;
    for (int r = 0; r < ctas; ++r) max_lowest(best_v, best_i, pub_of(r)->max_v, pub_of(r)->max_i);
    const float max_logit = best_v;
    const int32_t best = best_i;
    if (max_logit == -INFINITY || max_logit == INFINITY) {  // the same in every CTA
        if (rank == 0 && tid == 0) out->status = max_logit == INFINITY ? kSampleInfiniteLogit : kSampleNoFiniteLogit;
        cluster.sync();  // no CTA leaves while another reads its published max
        return;
    }

    // the partition function, where the order is needed each gap's candidates, and for the draw in id order this
    // range's sum of the kept exps (min-p: those at or above it) and its last kept token
    float floor_of[kGaps];
#pragma unroll
    for (int g = 0; g < kGaps; ++g) floor_of[g] = __fsub_rn(max_logit, sample_gap(g));
    const bool id_order = !(greedy || top_k_on || top_p_on);
    const double min_p = double(p.min_p);
    double z = 0, mass[kGaps] = {}, part = 0;
    int32_t count[kGaps] = {};  // <= vocab < 2^31
    int32_t last_kept = -1;
    begin_pass();
    each_logit(row, lo, hi, vec, [&](int64_t i, float x) {
        const float w = process(i, x);
        const float e = exp_below(w, max_logit);
        z += e;
        if (need_order)
            for (int g = 0; g < kGaps; ++g)
                if (w >= floor_of[g]) mass[g] += e, ++count[g];
        if (id_order && (p.min_p <= 0.0f || e >= min_p)) part += e, last_kept = int32_t(i);
    });
    // the CTA's sums (z alone unless the order is needed): each warp's by a shuffle tree, then the warps' partials
    // of sum n by a shuffle tree in warp n, whose lane 0 publishes it; one barrier for all of them
    const int n_sums = need_order ? kSums : 1;
    {
        int n = 0;
        const auto warp_part = [&](double x) {
            for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
            if (lane == 0) sh.red_sums[n][warp] = x;
            ++n;
        };
        warp_part(z);
        if (need_order) {
            for (int g = 0; g < kGaps; ++g) warp_part(mass[g]);
            for (int g = 0; g < kGaps; ++g) warp_part(double(count[g]));
        }
    }
    __syncthreads();
    if (warp < n_sums) {
        double x = sh.red_sums[warp][lane];
        for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
        if (lane == 0) sh.pub.sums[warp] = x;
    }
    cluster.sync();  // every CTA's sums are published
    z = 0;
    for (int g = 0; g < kGaps; ++g) mass[g] = 0, count[g] = 0;
    for (int r = 0; r < ctas; ++r) {  // in rank order: the same sums in every CTA
        const Published* q = pub_of(r);
        z += q->sums[0];
        if (need_order)
            for (int g = 0; g < kGaps; ++g) mass[g] += q->sums[1 + g], count[g] += int32_t(q->sums[1 + kGaps + g]);
    }
    const double log_z = double(max_logit) + log(z);

    // which candidate set the draw and the alternatives need: the smallest gap that holds them (as the host's
    // widening finds), else decline
    int g_sel = -1;
    if (need_order) {
        const int64_t need = imax(top_k_on ? p.top_k : 0, n_top);
        const bool need_mass = top_p_on && !top_k_on;
        for (int g = 0; g < kGaps && g_sel < 0; ++g)
            if (count[g] >= need && (!need_mass || mass[g] >= double(p.top_p) * z)) g_sel = g;
        if (g_sel < 0 || count[g_sel] > kSampleMaxCandidates) {  // the same in every CTA
            if (rank == 0 && tid == 0) out->status = kSampleDeclined;
            cluster.sync();  // no CTA leaves while another reads its published sums
            return;
        }
        begin_pass();
        each_logit(row, lo, hi, vec, [&](int64_t i, float x) {
            const float w = process(i, x);
            if (w >= floor_of[g_sel]) cand0->keys[atomicAdd(&sh0->candidates, 1)] = candidate_key(w, int32_t(i));
        });
    }
    cluster.sync();  // every candidate is in CTA 0; no CTA reads another's sums after this
    if (rank != 0 && !id_order) return;
    if (need_order && rank == 0) {
        int n_sort = 2;  // the empty slots (key 0) sort last, so the power of two that holds the candidates will do
        while (n_sort < sh.candidates) n_sort <<= 1;
        for (int k = 2; k <= n_sort; k <<= 1)  // bitonic, descending; n_sort / 2 pairs per step over the threads
            for (int j = k >> 1; j > 0; j >>= 1) {
                for (int t = tid; t < n_sort / 2; t += kThreads) {
                    const int a_i = 2 * j * (t / j) + t % j, b_i = a_i + j;  // a_i: bit j clear
                    const uint64_t a = cand.keys[a_i], b = cand.keys[b_i];
                    if ((a_i & k) == 0 ? a < b : a > b) cand.keys[a_i] = b, cand.keys[b_i] = a;
                }
                __syncthreads();
            }
        for (int t = tid; t < sh.candidates; t += kThreads)
            cand.probs[t] = exp_below(key_logit(cand.keys[t]), max_logit);
        __syncthreads();
    }

    if (!id_order) {     // CTA 0 alone
        if (tid == 0) {  // the host's loops over the sorted candidates, in its order
            int32_t status = kSampleOk, token = best;
            if (!greedy) {
                int64_t n = sh.candidates;
                double kept_mass = z;
                if (top_k_on) {
                    n = p.top_k;
                    kept_mass = 0;
                    for (int64_t i = 0; i < n; ++i) kept_mass += cand.probs[i];
                }
                if (top_p_on) {
                    const double limit = double(p.top_p) * kept_mass;
                    double cum = 0;
                    int64_t keep = 0;
                    while (keep < n && (keep == 0 || cum < limit)) cum += cand.probs[keep++];
                    // the host would have widened past this gap (its sums rounded the other way): decline
                    if (!top_k_on && keep == n && cum < limit) status = kSampleDeclined;
                    n = keep;
                }
                if (p.min_p > 0.0f) {
                    const double threshold = min_p;  // × the top token's e^0 = 1
                    while (n > 1 && cand.probs[n - 1] < threshold) --n;
                }
                double total = 0;
                for (int64_t i = 0; i < n; ++i) total += cand.probs[i];
                const double target = p.uniform * total;
                double cum = 0;
                token = key_id(cand.keys[n - 1]);
                for (int64_t i = 0; i < n; ++i) {
                    cum += cand.probs[i];
                    if (target < cum) {
                        token = key_id(cand.keys[i]);
                        break;
                    }
                }
            }
            sh.status = status;
            sh.token = token;
        }
        __syncthreads();
    } else {  // every token in id order (min-p: those at or above it) over the threads' ranges (sums from above)
        // exclusive prefix of the ranges' sums: within the warp, the earlier warps' totals in order, the earlier
        // CTAs' totals in rank order
        double incl = part;
        for (int o = 1; o < 32; o <<= 1) {
            const double v = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += v;
        }
        if (lane == 31) sh.red_f64[warp] = incl;
        __syncthreads();
        if (tid == 0) {
            double cta_total = 0;
            for (int w = 0; w < kWarps; ++w) cta_total += sh.red_f64[w];
            sh.pub.part = cta_total;
        }
        cluster.sync();  // every CTA's total is published
        double base = 0, all = 0;
        for (int r = 0; r < ctas; ++r) {
            const double t = pub_of(r)->part;
            if (r < rank) base += t;
            all += t;
        }
        double prefix = incl - part;
        for (int w = 0; w < warp; ++w) prefix += sh.red_f64[w];
        prefix += base;
        const double total = p.min_p > 0.0f ? all : z;  // the host's totals
        const double target = p.uniform * total;
        int32_t found = INT32_MAX;
        double cum = prefix;
        // only ranges not wholly below the target (with a margin far above the sums' rounding) look at their tokens
        if (prefix + part >= target - 1e-9 * total) {
            begin_pass();
            each_logit(row, lo, hi, vec, [&](int64_t i, float x) {
                if (found != INT32_MAX) return;  // the later tokens' values are not needed
                const float e = exp_below(process(i, x), max_logit);
                if (p.min_p > 0.0f && e < min_p) return;
                cum += e;
                if (target < cum) found = int32_t(i);
            });
        }
        found = block_min(found, sh.red_i);
        // past every running sum (rounding at the top edge): the last kept token, as the host
        const int32_t last = -block_min(-last_kept, sh.red_i);
        if (tid == 0) sh.pub.found = found, sh.pub.last = last;
        cluster.sync();  // every CTA's search is published (and no CTA reads a total after this)
        if (rank == 0 && tid == 0) {
            int32_t f = INT32_MAX, l = -1;
            for (int r = 0; r < ctas; ++r) f = min(f, pub_of(r)->found), l = max(l, pub_of(r)->last);
            sh.status = kSampleOk, sh.token = f != INT32_MAX ? f : l;
        }
        cluster.sync();  // CTA 0 has read every search; the other CTAs may leave
        if (rank != 0) return;
        __syncthreads();
    }

    if (tid == 0) {
        out->status = sh.status;
        out->token = sh.token;
        out->logprob = float(double(work(sh.token)) - log_z);
        out->num_top = sh.status == kSampleOk ? n_top : 0;
        for (int i = 0; i < n_top; ++i) {
            out->top_token[i] = key_id(cand.keys[i]);
            out->top_logprob[i] = float(double(key_logit(cand.keys[i])) - log_z);
        }
    }
}

}  // namespace

int sample_cluster_ctas(int64_t rows) {
    int c = kMaxCluster;
    while (c > 1 && rows * c > int64_t(current_sm_count())) c /= 2;
    return c;
}

Status sm90_sample_rows(const SampleRowsArgs& a, StreamHandle stream) {
    const char* op = "sm90_sample_rows";
    if (!a.logits || !a.params || !a.out || a.vocab <= 0 || a.vocab > INT32_MAX || a.n < 0)
        return invalid_argument(std::string(op) + ": null pointer or bad shape");
    if (a.cluster != 0 && a.cluster != 1 && a.cluster != 2 && a.cluster != 4 && a.cluster != kMaxCluster)
        return invalid_argument(std::string(op) + ": cluster must be 0 (by row count), 1, 2, 4 or 8, got " +
                                std::to_string(a.cluster));
    if (a.n == 0) return Status::ok();
    if (a.n > 65535) return invalid_argument(std::string(op) + ": more than 65,535 rows in one call");
    const int ctas = a.cluster != 0 ? a.cluster : sample_cluster_ctas(a.n);
    auto* kernel = a.penalties ? sample_rows_kernel<true> : sample_rows_kernel<false>;
    DSV4_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sizeof(Candidates))),
                  std::string(op) + ": shared memory opt-in");
    const ClusterLaunch launch(dim3(unsigned(a.n * ctas)), dim3(kThreads), sizeof(Candidates), stream,
                               dim3(unsigned(ctas)));
    DSV4_CUDA_TRY(cudaLaunchKernelEx(&launch.cfg, kernel, a.logits, a.vocab, a.params, a.penalties, a.out),
                  std::string(op) + ": launch");
    return launch_status(op);
}

}  // namespace dsv4::cuda
