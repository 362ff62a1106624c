// sm90_router_select: one block per token. Its 256 threads score one expert each (E / 256 rounds) into shared
// memory, as the CPU computes them (softplus(x) = x > 20 ? x : log1p(exp(x)) in double, each step rounded to f32, then
// sqrt); then warp 0 picks: expert e held by lane e % 32, top-K by K rounds of a warp arg-max on (value, -index), so
// equal values pick the lower expert; the weights in pick order. (One warp scoring all E experts of a token ran the
// double-precision softplus 8 times in sequence per lane: 24 µs per call at batch 1 under Nsight Compute.)
#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/kernels/router/router.h"
#include "backend/cuda/common/pdl.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256, kMaxPerLane = 32, kMaxExperts = 32 * kMaxPerLane, kMaxK = 16;

__device__ __forceinline__ float sqrt_softplus(float x) {
    const float sp = x > 20.0f ? x : float(log1p(double(exp_f32(x))));
    return __fsqrt_rn(sp);
}

__global__ void __launch_bounds__(kThreads)
    sm90_router_select_kernel(const float* __restrict__ logits, int n_experts, int k, const float* __restrict__ bias,
                              const int64_t* __restrict__ tid2eid, int64_t vocab,
                              const int32_t* __restrict__ token_ids, float routed_scale, float* __restrict__ scores,
                              int32_t* __restrict__ idx, float* __restrict__ weights) {
    pdl_enter();
    __shared__ float sc[kMaxExperts], sel[kMaxExperts];
    const int64_t t = blockIdx.x;
    for (int e = int(threadIdx.x); e < n_experts; e += kThreads) {
        const float s = sqrt_softplus(logits[t * n_experts + e]);
        if (scores) scores[t * n_experts + e] = s;
        sc[e] = s;
        sel[e] = bias ? __fadd_rn(s, bias[e]) : -INFINITY;
    }
    __syncthreads();
    if (threadIdx.x >= 32) return;
    const int lane = int(threadIdx.x);
    const int per_lane = (n_experts + 31) / 32;
    float mine[kMaxPerLane];  // the selection values of experts lane + 32 i
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
        const int e = lane + 32 * i;
        mine[i] = i < per_lane && e < n_experts ? sel[e] : -INFINITY;
    }
    int pick[kMaxK];
    for (int j = 0; j < k; ++j) {
        int e_best;
        if (bias) {
            float best = -INFINITY;
            int best_e = 0x7fffffff;
#pragma unroll
            for (int i = 0; i < kMaxPerLane; ++i) {
                const int e = lane + 32 * i;
                if (i < per_lane && e < n_experts && (mine[i] > best || (mine[i] == best && e < best_e)))
                    best = mine[i], best_e = e;
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const float ob = __shfl_xor_sync(0xffffffffu, best, o);
                const int oe = __shfl_xor_sync(0xffffffffu, best_e, o);
                if (ob > best || (ob == best && oe < best_e)) best = ob, best_e = oe;
            }
            e_best = best_e;
#pragma unroll
            for (int i = 0; i < kMaxPerLane; ++i)
                if (lane + 32 * i == e_best) mine[i] = -INFINITY;  // taken
        } else {
            const int32_t tok = token_ids[t];
            const int64_t e = tok >= 0 && tok < vocab ? tid2eid[int64_t(tok) * k + j] : -1;
            e_best = e >= 0 && e < n_experts ? int(e) : -1;
        }
        pick[j] = e_best;
    }
    if (lane == 0) {
        float sum = 0;
        for (int j = 0; j < k; ++j) sum = __fadd_rn(sum, pick[j] >= 0 ? sc[pick[j]] : 0.0f);
        for (int j = 0; j < k; ++j) {
            idx[t * k + j] = pick[j];
            weights[t * k + j] = pick[j] >= 0 ? __fmul_rn(__fdiv_rn(sc[pick[j]], sum), routed_scale) : 0.0f;
        }
    }
}

}  // namespace

Status sm90_router_select(const RouterSelectArgs& a, StreamHandle stream) {
    const std::string op = "sm90_router_select";
    if (!a.logits || !a.idx || !a.weights || a.tokens < 0 || a.n_experts <= 0 || a.k <= 0 || a.k > a.n_experts)
        return invalid_argument(op + ": null pointer or bad k / expert count");
    if (a.n_experts > 32 * kMaxPerLane || a.k > kMaxK)
        return invalid_argument(op + ": at most 1024 experts and 16 picks per token");
    const bool hash = a.bias.empty();
    if (hash && (!a.tid2eid || !a.token_ids || a.vocab <= 0))
        return invalid_argument(op + ": hash routing needs tid2eid, its vocab size and the token ids");
    if (!hash && (a.bias.format != backend::WeightFormat::kF32 || a.bias.rows * a.bias.cols != a.n_experts))
        return invalid_argument(op + ": bias must be f32 [" + std::to_string(a.n_experts) + "]");
    if (a.tokens == 0) return Status::ok();
    if (a.tokens > int64_t(INT32_MAX)) return invalid_argument(op + ": too many tokens for one launch");
    sm90_router_select_kernel<<<unsigned(a.tokens), kThreads, 0, stream>>>(
        a.logits, int(a.n_experts), int(a.k), hash ? nullptr : static_cast<const float*>(a.bias.data), a.tid2eid,
        a.vocab, a.token_ids, a.routed_scale, a.scores, a.idx, a.weights);
    return launch_status(op.c_str());
}

}  // namespace dsv4::cuda
