// sm90_router_select: one block per token. Its 256 threads score one expert each (E / 256 rounds) into shared
// memory, as the CPU computes them (softplus(x) = x > 20 ? x : log1p(exp(x)) in double, each step rounded to f32, then
// sqrt); then warp 0 picks: expert e held by lane e % 32, top-K by K rounds of a warp arg-max on (value, -index), so
// equal values pick the lower expert; the weights in pick order. (One warp scoring all E experts of a token ran the
// double-precision softplus 8 times in sequence per lane: 24 µs per call at batch 1 under Nsight Compute.)
// sm90_router_gate_select: the gate GEMV in the same launch for decode batches — a cluster of kGateCtas CTAs per
// token, each the dot products of a share of the experts (one warp per expert row, f32 sums), gathered into the first
// CTA's shared memory (distributed shared memory), which then scores and picks as above.
#include <cooperative_groups.h>

#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/kernels/router/router.h"
#include "backend/cuda/common/pdl.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256, kMaxPerLane = 32, kMaxExperts = 32 * kMaxPerLane, kMaxK = 16;
constexpr int kGateCtas = 16;  // CTAs per token of the fused gate (a non-portable cluster size)

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

// Token t's scores and picks from its logits (global or shared memory), by the whole block (header comment); sc and
// sel are the block's shared [kMaxExperts] buffers. Ends with only warp 0 running: no block barrier after it.
__device__ __forceinline__ void score_and_pick(const float* logits, int64_t t, const SelectParams& q, float* sc,
                                               float* sel) {
    for (int e = int(threadIdx.x); e < q.n_experts; e += kThreads) {
        const float s = sqrt_softplus(logits[e]);
        if (q.scores) q.scores[t * q.n_experts + e] = s;
        sc[e] = s;
        sel[e] = q.bias ? __fadd_rn(s, q.bias[e]) : -INFINITY;
    }
    __syncthreads();
    if (threadIdx.x >= 32) return;
    const int lane = int(threadIdx.x);
    const int per_lane = (q.n_experts + 31) / 32;
    float mine[kMaxPerLane];  // the selection values of experts lane + 32 i
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
        const int e = lane + 32 * i;
        mine[i] = i < per_lane && e < q.n_experts ? sel[e] : -INFINITY;
    }
    int pick[kMaxK];
    for (int j = 0; j < q.k; ++j) {
        int e_best;
        if (q.bias) {
            float best = -INFINITY;
            int best_e = 0x7fffffff;
#pragma unroll
            for (int i = 0; i < kMaxPerLane; ++i) {
                const int e = lane + 32 * i;
                if (i < per_lane && e < q.n_experts && (mine[i] > best || (mine[i] == best && e < best_e)))
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
            const int32_t tok = q.token_ids[t];
            const int64_t e = tok >= 0 && tok < q.vocab ? q.tid2eid[int64_t(tok) * q.k + j] : -1;
            e_best = e >= 0 && e < q.n_experts ? int(e) : -1;
        }
        pick[j] = e_best;
    }
    if (lane == 0) {
        float sum = 0;
        for (int j = 0; j < q.k; ++j) sum = __fadd_rn(sum, pick[j] >= 0 ? sc[pick[j]] : 0.0f);
        for (int j = 0; j < q.k; ++j) {
            q.idx[t * q.k + j] = pick[j];
            q.weights[t * q.k + j] = pick[j] >= 0 ? __fmul_rn(__fdiv_rn(sc[pick[j]], sum), q.routed_scale) : 0.0f;
        }
    }
}

__global__ void __launch_bounds__(kThreads) sm90_router_select_kernel(const float* __restrict__ logits, SelectParams q) {
    pdl_enter();
    __shared__ float sc[kMaxExperts], sel[kMaxExperts];
    const int64_t t = blockIdx.x;
    score_and_pick(logits + t * q.n_experts, t, q, sc, sel);
}

// grid: kGateCtas · tokens in clusters of kGateCtas (cluster c: token c).
__global__ void __launch_bounds__(kThreads)
    sm90_router_gate_select_kernel(const __nv_bfloat16* __restrict__ x, int dim, const __nv_bfloat16* __restrict__ gate,
                                   float* __restrict__ logits_out, SelectParams q) {
    pdl_enter(false);
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    __shared__ float lg[kMaxExperts], sc[kMaxExperts], sel[kMaxExperts];
    const int r = int(cluster.block_rank());
    const int64_t t = blockIdx.x / kGateCtas;
    const int per_cta = (q.n_experts + kGateCtas - 1) / kGateCtas;
    const int e0 = r * per_cta, e1 = min(q.n_experts, e0 + per_cta);
    // this CTA's gate rows — a weight, written only at load (pdl.cuh) — into L2 while the previous kernel finishes
    if (int(threadIdx.x) < e1 - e0)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(gate + int64_t(e0 + int(threadIdx.x)) * dim),
                     "r"(uint32_t(dim) * 2u)
                     : "memory");
    pdl_wait();
    const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
    const __nv_bfloat16* xr = x + t * dim;
    float* lg0 = cluster.map_shared_rank(lg, 0);
    for (int e = e0 + warp; e < e1; e += kThreads / 32) {
        const __nv_bfloat16* gr = gate + int64_t(e) * dim;
        float acc = 0.0f;
        for (int c = lane * 8; c < dim; c += 32 * 8) {
            float xv[8], gv[8];
            load8(xr + c, xv);
            load8(gr + c, gv);
#pragma unroll
            for (int i = 0; i < 8; ++i) acc = fmaf(xv[i], gv[i], acc);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0) lg0[e] = acc;
    }
    cluster.sync();  // every logit is in CTA 0's shared memory; the others are done
    if (r != 0) return;
    if (logits_out)
        for (int e = int(threadIdx.x); e < q.n_experts; e += kThreads) logits_out[t * q.n_experts + e] = lg[e];
    score_and_pick(lg, t, q, sc, sel);
}

Status check_select(const RouterSelectArgs& a, const std::string& op) {
    if (!a.idx || !a.weights || a.tokens < 0 || a.n_experts <= 0 || a.k <= 0 || a.k > a.n_experts)
        return invalid_argument(op + ": null pointer or bad k / expert count");
    if (a.n_experts > kMaxExperts || a.k > kMaxK)
        return invalid_argument(op + ": at most 1024 experts and 16 picks per token");
    const bool hash = a.bias.empty();
    if (hash && (!a.tid2eid || !a.token_ids || a.vocab <= 0))
        return invalid_argument(op + ": hash routing needs tid2eid, its vocab size and the token ids");
    if (!hash && (a.bias.format != backend::WeightFormat::kF32 || a.bias.rows * a.bias.cols != a.n_experts))
        return invalid_argument(op + ": bias must be f32 [" + std::to_string(a.n_experts) + "]");
    if (a.tokens > int64_t(INT32_MAX) / kGateCtas) return invalid_argument(op + ": too many tokens for one launch");
    return Status::ok();
}

SelectParams select_params(const RouterSelectArgs& a) {
    return {int(a.n_experts), int(a.k), a.bias.empty() ? nullptr : static_cast<const float*>(a.bias.data),
            a.tid2eid, a.vocab, a.token_ids, a.routed_scale, a.scores, a.idx, a.weights};
}

}  // namespace

Status sm90_router_select(const RouterSelectArgs& a, StreamHandle stream) {
    const std::string op = "sm90_router_select";
    if (!a.logits) return invalid_argument(op + ": null logits");
    DSV4_RETURN_IF_ERROR(check_select(a, op));
    if (a.tokens == 0) return Status::ok();
    sm90_router_select_kernel<<<unsigned(a.tokens), kThreads, 0, stream>>>(a.logits, select_params(a));
    return launch_status(op.c_str());
}

bool router_gate_select_fits(int64_t dim, const DeviceWeightView& gate) {
    return gate.format == backend::WeightFormat::kBF16 && dim > 0 && dim % 256 == 0 && gate.cols == dim;
}

Status sm90_router_gate_select(const RouterGateArgs& g, const RouterSelectArgs& a, StreamHandle stream) {
    const std::string op = "sm90_router_gate_select";
    if (!g.x || g.gate.empty()) return invalid_argument(op + ": null x or gate");
    if (!router_gate_select_fits(g.dim, g.gate) || g.gate.rows != a.n_experts)
        return invalid_argument(op + ": needs a bf16 gate [" + std::to_string(a.n_experts) + ", D] with D = " +
                                std::to_string(g.dim) + " a positive multiple of 256");
    if ((reinterpret_cast<uintptr_t>(g.x) | reinterpret_cast<uintptr_t>(g.gate.data)) & 15)
        return invalid_argument(op + ": x and gate must be 16-byte aligned");
    DSV4_RETURN_IF_ERROR(check_select(a, op));
    if (a.tokens == 0) return Status::ok();
    static const cudaError_t attr =
        cudaFuncSetAttribute(sm90_router_gate_select_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    DSV4_CUDA_TRY(attr, op + ": cluster size attribute");
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(unsigned(a.tokens * kGateCtas));
    cfg.blockDim = dim3(kThreads);
    cfg.stream = stream;
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = kGateCtas;
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = 1;
    cfg.attrs = &cluster;
    cfg.numAttrs = 1;
    DSV4_CUDA_TRY(cudaLaunchKernelEx(&cfg, sm90_router_gate_select_kernel, static_cast<const __nv_bfloat16*>(g.x),
                                     int(g.dim), static_cast<const __nv_bfloat16*>(g.gate.data), g.logits,
                                     select_params(a)),
                  op + ": cluster launch");
    return launch_status(op.c_str());
}

}  // namespace dsv4::cuda
