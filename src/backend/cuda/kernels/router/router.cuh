// The router's scoring and selection as device functions (MODEL_SPEC §5.5), shared by its kernels (router.cu) and
// the MoE decode launch that routes in its first launch (kernels/moe/moe_route.cu).
#pragma once

#include <cooperative_groups.h>

#include <cstdint>

#include "backend/cuda/common/ld_stream.cuh"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kernels/router/router.h"

namespace dsv4::cuda::router {

constexpr int kMaxPerLane = 32, kMaxExperts = 32 * kMaxPerLane, kMaxK = 16;
constexpr int kGateCtas = 16;  // CTAs per token of the fused gate (a non-portable cluster size)
// The fused gate's CTAs: 16 warps, each lane holding kGateChunks 16-byte chunks of one gate row at a time (a whole
// V4-Flash row per warp: 4096 columns), x staged once per CTA in shared memory.
constexpr int kGateThreads = 512, kGateWarps = kGateThreads / 32, kGateChunks = 16, kMaxGateDim = 16384;

__device__ __forceinline__ float sqrt_softplus(float x) {
    const float sp = x > 20.0f ? x : float(log1p(double(exp_f32(x))));
    return __fsqrt_rn(sp);
}

// The selection's inputs that are not per token.
struct SelectParams {
    int n_experts, k;
    const float* bias;  // null: hash routing
    const int64_t* tid2eid;
    int64_t vocab;
    const int32_t* token_ids;
    float routed_scale;
    float* scores;  // may be null
    int32_t* idx;
    float* weights;
};

// Expert e's score and selection value (bias null: hash routing, no selection value).
__device__ __forceinline__ void score_one(float logit, int e, const SelectParams& q, float& score, float& select) {
    score = sqrt_softplus(logit);
    select = q.bias ? __fadd_rn(score, q.bias[e]) : -INFINITY;
}

// An unsigned key ordered as the selection values: -0 counts as +0 (the floats compare equal, so the lower expert must
// win the tie, as in the CPU's comparison), NaN below every number (1), 0 reserved for "taken". Numbers map to
// 0x007fffff (-INF) and up.
__device__ __forceinline__ uint32_t select_key(float v) {
    if (v != v) return 1u;
    const uint32_t u = __float_as_uint(v == 0.0f ? 0.0f : v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Token t's picks and weights by one warp from the scores sc and selection values sel in shared memory: expert e held
// by lane e % 32 as entry e / 32 of PL; K rounds of a warp arg-max on (value, -index) through two reductions (the
// largest key, then the lowest expert holding it), so equal values pick the lower expert; then lane j computes
// weight j from the picks' score sum in pick order.
template <int PL>
__device__ __forceinline__ void pick_top_k(const float* sc, const float* sel, int64_t t, const SelectParams& q) {
    const int lane = int(threadIdx.x) & 31;
    int pick[kMaxK];
    if (q.bias) {
        uint32_t key[PL];
#pragma unroll
        for (int i = 0; i < PL; ++i) {
            const int e = lane + 32 * i;
            key[i] = e < q.n_experts ? select_key(sel[e]) : 0u;
        }
        // this lane's best live key and its expert (the first of equal keys: the lowest expert)
        uint32_t best = 0;
        int best_e = 0x7fffffff;
        auto rescan = [&]() {
            best = 0, best_e = 0x7fffffff;
#pragma unroll
            for (int i = 0; i < PL; ++i)
                if (key[i] > best) best = key[i], best_e = lane + 32 * i;
        };
        rescan();
#pragma unroll
        for (int j = 0; j < kMaxK; ++j) {
            if (j >= q.k) break;
            const uint32_t top = __reduce_max_sync(0xffffffffu, best);
            const int e = int(__reduce_min_sync(0xffffffffu, best == top ? uint32_t(best_e) : 0xffffffffu));
            pick[j] = e;
            if (lane == (e & 31)) {
#pragma unroll
                for (int i = 0; i < PL; ++i)
                    if (i == (e >> 5)) key[i] = 0u;  // taken
                rescan();
            }
        }
    } else {
        int mine = -1;  // lane j < k: pick j of the table (out-of-range ids and experts: -1)
        if (lane < q.k) {
            const int32_t tok = q.token_ids[t];
            const int64_t e = tok >= 0 && tok < q.vocab ? q.tid2eid[int64_t(tok) * q.k + lane] : -1;
            mine = e >= 0 && e < q.n_experts ? int(e) : -1;
        }
#pragma unroll
        for (int j = 0; j < kMaxK; ++j) {
            if (j >= q.k) break;
            pick[j] = __shfl_sync(0xffffffffu, mine, j);
        }
    }
    float sum = 0;
#pragma unroll
    for (int j = 0; j < kMaxK; ++j) {
        if (j >= q.k) break;
        sum = __fadd_rn(sum, pick[j] >= 0 ? sc[pick[j]] : 0.0f);
    }
    int e = -1;
#pragma unroll
    for (int j = 0; j < kMaxK; ++j)
        if (j == lane && j < q.k) e = pick[j];
    if (lane < q.k) {
        q.idx[t * q.k + lane] = e;
        q.weights[t * q.k + lane] = e >= 0 ? __fmul_rn(__fdiv_rn(sc[e], sum), q.routed_scale) : 0.0f;
    }
}

// pick_top_k with the fewest entries per lane that hold E experts.
__device__ __forceinline__ void select_top_k(const float* sc, const float* sel, int64_t t, const SelectParams& q) {
    if (q.n_experts <= 256)
        pick_top_k<8>(sc, sel, t, q);
    else if (q.n_experts <= 384)
        pick_top_k<12>(sc, sel, t, q);
    else
        pick_top_k<kMaxPerLane>(sc, sel, t, q);
}

// The fused gate of one token on a cluster of kGateCtas CTAs of kGateThreads threads (the caller's launch, after its
// pdl_enter(false)): warp w of CTA r takes experts r · per_cta + w + kGateWarps · i; lane l sums columns l·8 + 256·i
// (i ascending, 8 fmaf each) of x (the token's row, staged into xs [dim] after the programmatic wait), then the warp
// adds across lanes by xor butterfly: the order of the earlier one-warp-per-expert kernel, so the same logits. Each
// warp stores its experts' scores and selection values into the first CTA's sc / sel (distributed shared memory) and
// the logits (logits_out: the token's row, or null). Returns the CTA's rank after a cluster barrier: sc / sel of CTA 0
// then hold every expert, and every CTA's xs still holds x.
__device__ __forceinline__ int gate_scores_cluster(const __nv_bfloat16* __restrict__ x, int dim,
                                                   const __nv_bfloat16* __restrict__ gate, float* logits_out,
                                                   const SelectParams& q, int64_t t, float* sc, float* sel,
                                                   __nv_bfloat16* xs) {
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    const int r = int(cluster.block_rank());
    const int per_cta = (q.n_experts + kGateCtas - 1) / kGateCtas;
    const int e0 = r * per_cta, e1 = min(q.n_experts, e0 + per_cta);
    const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
    // The warp's first expert row's first kGateChunks chunks (and its bias) into registers before the wait: weights,
    // written only at load (pdl.cuh). The CTA's other rows go to L2 meanwhile.
    const int first = e0 + warp;
    uint4 g[kGateChunks];
    float bias_first = 0.0f;
    if (first < e1) {
        const __nv_bfloat16* gr = gate + int64_t(first) * dim;
#pragma unroll
        for (int i = 0; i < kGateChunks; ++i) {
            const int c = lane * 8 + 256 * i;
            if (c < dim) g[i] = ld_early16(gr + c);  // not ld_stream16: the wait would overtake it (ld_stream.cuh)
        }
        if (q.bias) bias_first = __ldg(q.bias + first);
    }
    for (int e = first + kGateWarps; e < e1; e += kGateWarps)
        if (lane == 0)
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(gate + int64_t(e) * dim),
                         "r"(uint32_t(dim) * 2u)
                         : "memory");
    pdl_wait();
    for (int c = int(threadIdx.x) * 8; c < dim; c += kGateThreads * 8)
        *reinterpret_cast<uint4*>(xs + c) = *reinterpret_cast<const uint4*>(x + c);
    __syncthreads();
    float* sc0 = cluster.map_shared_rank(sc, 0);
    float* sel0 = cluster.map_shared_rank(sel, 0);
    for (int e = first; e < e1; e += kGateWarps) {
        const __nv_bfloat16* gr = gate + int64_t(e) * dim;
        float acc = 0.0f;
        for (int c0 = 0; c0 < dim; c0 += 256 * kGateChunks) {
            if (e != first || c0 != 0) {
#pragma unroll
                for (int i = 0; i < kGateChunks; ++i) {
                    const int c = c0 + lane * 8 + 256 * i;
                    if (c < dim) g[i] = ld_stream16(gr + c);
                }
            }
#pragma unroll
            for (int i = 0; i < kGateChunks; ++i) {
                const int c = c0 + lane * 8 + 256 * i;
                if (c >= dim) break;
                float xv[8], gv[8];
                load8(xs + c, xv);
                bf16x8_to_f32(g[i], gv);
#pragma unroll
                for (int h = 0; h < 8; ++h) acc = fmaf(xv[h], gv[h], acc);
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0) {
            const float s = sqrt_softplus(acc);
            sc0[e] = s;
            sel0[e] = q.bias ? __fadd_rn(s, e == first ? bias_first : q.bias[e]) : -INFINITY;
            if (logits_out) logits_out[e] = acc;
            if (q.scores) q.scores[t * q.n_experts + e] = s;
        }
    }
    cluster.sync();  // every score is in CTA 0's shared memory; the others are done
    return r;
}

inline SelectParams select_params(const RouterSelectArgs& a) {
    return {int(a.n_experts), int(a.k), a.bias.empty() ? nullptr : static_cast<const float*>(a.bias.data),
            a.tid2eid,        a.vocab,  a.token_ids,
            a.routed_scale,   a.scores, a.idx,
            a.weights};
}

}  // namespace dsv4::cuda::router
