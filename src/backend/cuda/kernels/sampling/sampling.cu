// sm90_sample_rows (sampling.h): one block of 1,024 threads per row. Passes over the row (it stays in L2):
// max and argmax; the exps, their f64 sum and the mass and count within 8 / 16 / 32 / 64 nats of the max; when the
// draw or the log-probabilities need the candidate order (higher processed logit first, then lower id), the tokens
// within the smallest sufficient gap gathered and bitonic-sorted in shared memory; the draw by inverse CDF, over the
// sorted candidates on one thread (the host's loops, in the host's order) or over every token in id order on all
// threads (contiguous ranges, a block prefix of their sums, the first token whose running sum passes the target).
#include <cmath>
#include <cstdint>
#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kernels/sampling/sampling.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 1024, kWarps = kThreads / 32;
static_assert(kSampleMaxCandidates == kThreads, "the sort gives each thread one candidate");
constexpr int kGaps = 4;
__constant__ float kGap[kGaps] = {8.0f, 16.0f, 32.0f, 64.0f};  // the host's kPrefixGaps before infinity

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

// Σ v over the block, the same value on every thread (warp sums, then the warps' sums in warp order).
template <typename T>
__device__ T block_sum(T v, T* red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    T t = 0;
    for (int w = 0; w < kWarps; ++w) t += red[w];
    __syncthreads();
    return t;
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

struct Shared {
    uint64_t keys[kSampleMaxCandidates];
    float probs[kSampleMaxCandidates];  // of the sorted candidates
    double red_f64[kWarps];
    int64_t red_i64[kWarps];
    float red_v[kWarps];
    int32_t red_i[kWarps];
    int32_t candidates;
    int32_t token;
    int32_t status;
};

__global__ void __launch_bounds__(kThreads)
    sample_rows_kernel(const float* logits, int64_t vocab, const SampleRowParams* params, SampleRowOut* outs) {
    pdl_enter();
    __shared__ Shared sh;
    const SampleRowParams p = params[blockIdx.x];
    SampleRowOut* out = outs + blockIdx.x;
    const float* row = logits + p.row * vocab;
    const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    const bool greedy = p.temperature <= 0.0f;
    const bool scaled = !greedy && p.temperature != 1.0f;
    const float inv_t = scaled ? __fdiv_rn(1.0f, p.temperature) : 1.0f;
    auto work = [&](int64_t i) {  // the processed logit (NaN -> -inf, then the temperature)
        const float l = row[i];
        const float w = isnan(l) ? -INFINITY : l;
        return scaled ? __fmul_rn(w, inv_t) : w;
    };

    // max, lowest id on ties
    float best_v = -INFINITY;
    int32_t best_i = INT32_MAX;
    for (int64_t i = tid; i < vocab; i += kThreads) {
        const float w = work(i);
        if (w > best_v || (w == best_v && int32_t(i) < best_i)) best_v = w, best_i = int32_t(i);
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float v = __shfl_xor_sync(0xffffffffu, best_v, o);
        const int32_t i = __shfl_xor_sync(0xffffffffu, best_i, o);
        if (v > best_v || (v == best_v && i < best_i)) best_v = v, best_i = i;
    }
    if (lane == 0) sh.red_v[warp] = best_v, sh.red_i[warp] = best_i;
    __syncthreads();
    best_v = sh.red_v[0], best_i = sh.red_i[0];
    for (int w = 1; w < kWarps; ++w)
        if (sh.red_v[w] > best_v || (sh.red_v[w] == best_v && sh.red_i[w] < best_i))
            best_v = sh.red_v[w], best_i = sh.red_i[w];
    const float max_logit = best_v;
    const int32_t best = best_i;
    if (max_logit == -INFINITY || max_logit == INFINITY) {
        if (tid == 0) out->status = max_logit == INFINITY ? kSampleInfiniteLogit : kSampleNoFiniteLogit;
        return;
    }

    // the partition function and each gap's candidates
    float floor_of[kGaps];
    for (int g = 0; g < kGaps; ++g) floor_of[g] = __fsub_rn(max_logit, kGap[g]);
    double z = 0, mass[kGaps] = {0, 0, 0, 0};
    int64_t count[kGaps] = {0, 0, 0, 0};
    for (int64_t i = tid; i < vocab; i += kThreads) {
        const float w = work(i);
        const float e = exp_below(w, max_logit);
        z += e;
        for (int g = 0; g < kGaps; ++g)
            if (w >= floor_of[g]) mass[g] += e, ++count[g];
    }
    z = block_sum(z, sh.red_f64);
    for (int g = 0; g < kGaps; ++g) {
        mass[g] = block_sum(mass[g], sh.red_f64);
        count[g] = block_sum(count[g], sh.red_i64);
    }
    const double log_z = double(max_logit) + log(z);

    // which candidate set the draw and the alternatives need: the smallest gap that holds them (as the host's
    // widening finds), else decline
    const bool top_k_on = !greedy && p.top_k > 0 && p.top_k < vocab;
    const bool top_p_on = !greedy && p.top_p < 1.0f;
    const int32_t n_top = int32_t(imin(p.top_logprobs, vocab));
    int g_sel = -1;
    if (top_k_on || top_p_on || n_top > 0) {
        const int64_t need = imax(top_k_on ? p.top_k : 0, n_top);
        const bool need_mass = top_p_on && !top_k_on;
        for (int g = 0; g < kGaps && g_sel < 0; ++g)
            if (count[g] >= need && (!need_mass || mass[g] >= double(p.top_p) * z)) g_sel = g;
        if (g_sel < 0 || count[g_sel] > kSampleMaxCandidates) {
            if (tid == 0) out->status = kSampleDeclined;
            return;
        }
        sh.keys[tid] = 0;
        if (tid == 0) sh.candidates = 0;
        __syncthreads();
        for (int64_t i = tid; i < vocab; i += kThreads) {
            const float w = work(i);
            if (w >= floor_of[g_sel]) sh.keys[atomicAdd(&sh.candidates, 1)] = candidate_key(w, int32_t(i));
        }
        __syncthreads();
        for (int k = 2; k <= kSampleMaxCandidates; k <<= 1)  // bitonic, descending
            for (int j = k >> 1; j > 0; j >>= 1) {
                const int partner = tid ^ j;
                if (partner > tid) {
                    const uint64_t a = sh.keys[tid], b = sh.keys[partner];
                    if ((tid & k) == 0 ? a < b : a > b) sh.keys[tid] = b, sh.keys[partner] = a;
                }
                __syncthreads();
            }
        if (tid < sh.candidates) sh.probs[tid] = exp_below(key_logit(sh.keys[tid]), max_logit);
        __syncthreads();
    }

    if (greedy || top_k_on || top_p_on) {
        if (tid == 0) {  // the host's loops over the sorted candidates, in its order
            int32_t status = kSampleOk, token = best;
            if (!greedy) {
                int64_t n = sh.candidates;
                double kept_mass = z;
                if (top_k_on) {
                    n = p.top_k;
                    kept_mass = 0;
                    for (int64_t i = 0; i < n; ++i) kept_mass += sh.probs[i];
                }
                if (top_p_on) {
                    const double limit = double(p.top_p) * kept_mass;
                    double cum = 0;
                    int64_t keep = 0;
                    while (keep < n && (keep == 0 || cum < limit)) cum += sh.probs[keep++];
                    // the host would have widened past this gap (its sums rounded the other way): decline
                    if (!top_k_on && keep == n && cum < limit) status = kSampleDeclined;
                    n = keep;
                }
                if (p.min_p > 0.0f) {
                    const double threshold = double(p.min_p);  // × the top token's e^0 = 1
                    while (n > 1 && sh.probs[n - 1] < threshold) --n;
                }
                double total = 0;
                for (int64_t i = 0; i < n; ++i) total += sh.probs[i];
                const double target = p.uniform * total;
                double cum = 0;
                token = key_id(sh.keys[n - 1]);
                for (int64_t i = 0; i < n; ++i) {
                    cum += sh.probs[i];
                    if (target < cum) {
                        token = key_id(sh.keys[i]);
                        break;
                    }
                }
            }
            sh.status = status;
            sh.token = token;
        }
        __syncthreads();
    } else {  // every token in id order (min-p: those at or above it), each thread a contiguous range
        const double threshold = double(p.min_p);
        const int64_t span = (vocab + kThreads - 1) / kThreads, lo = imin(vocab, tid * span),
                      hi = imin(vocab, lo + span);
        double part = 0;
        int32_t last_kept = -1;
        for (int64_t i = lo; i < hi; ++i) {
            const float e = exp_below(work(i), max_logit);
            if (p.min_p > 0.0f && e < threshold) continue;
            part += e;
            last_kept = int32_t(i);
        }
        // exclusive prefix of the ranges' sums: within the warp, then the earlier warps' totals in order
        double incl = part;
        for (int o = 1; o < 32; o <<= 1) {
            const double v = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += v;
        }
        if (lane == 31) sh.red_f64[warp] = incl;
        __syncthreads();
        double prefix = incl - part;
        for (int w = 0; w < warp; ++w) prefix += sh.red_f64[w];
        __syncthreads();
        const double total = p.min_p > 0.0f ? block_sum(part, sh.red_f64) : z;  // the host's totals
        const double target = p.uniform * total;
        int32_t found = INT32_MAX;
        double cum = prefix;
        for (int64_t i = lo; i < hi && found == INT32_MAX; ++i) {
            const float e = exp_below(work(i), max_logit);
            if (p.min_p > 0.0f && e < threshold) continue;
            cum += e;
            if (target < cum) found = int32_t(i);
        }
        found = block_min(found, sh.red_i);
        // past every running sum (rounding at the top edge): the last kept token, as the host
        const int32_t last = -block_min(-last_kept, sh.red_i);
        if (tid == 0) sh.status = kSampleOk, sh.token = found != INT32_MAX ? found : last;
        __syncthreads();
    }

    if (tid == 0) {
        out->status = sh.status;
        out->token = sh.token;
        out->logprob = float(double(work(sh.token)) - log_z);
        out->num_top = sh.status == kSampleOk ? n_top : 0;
        for (int i = 0; i < n_top; ++i) {
            out->top_token[i] = key_id(sh.keys[i]);
            out->top_logprob[i] = float(double(key_logit(sh.keys[i])) - log_z);
        }
    }
}

}  // namespace

Status sm90_sample_rows(const SampleRowsArgs& a, StreamHandle stream) {
    const char* op = "sm90_sample_rows";
    if (!a.logits || !a.params || !a.out || a.vocab <= 0 || a.vocab > INT32_MAX || a.n < 0)
        return invalid_argument(std::string(op) + ": null pointer or bad shape");
    if (a.n == 0) return Status::ok();
    if (a.n > 65535) return invalid_argument(std::string(op) + ": more than 65,535 rows in one call");
    sample_rows_kernel<<<unsigned(a.n), kThreads, 0, stream>>>(a.logits, a.vocab, a.params, a.out);
    return launch_status(op);
}

}  // namespace dsv4::cuda
