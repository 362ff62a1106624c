// sm90_router_select: one block per token. Its 256 threads score one expert each (E / 256 rounds) into shared
// memory, as the CPU computes them (softplus(x) = x > 20 ? x : log1p(exp(x)) in double, each step rounded to f32, then
// sqrt); then warp 0 picks: expert e held by lane e % 32, top-K by K rounds of a warp arg-max on (value, -index), so
// equal values pick the lower expert, each round two warp reductions (redux.sync) on an ordered key; lane j computes
// weight j. (One warp scoring all E experts of a token ran the double-precision softplus 8 times in sequence per
// lane: 24 µs per call at batch 1 under Nsight Compute.)
// sm90_router_gate_select: the gate GEMV in the same launch for decode batches — a cluster of kGateCtas CTAs per
// token, each the dot products of a share of the experts (one warp per expert row, its first 4096 columns in
// registers requested before the programmatic wait, x staged in shared memory after it, f32 sums), each warp scoring
// its expert and storing score and selection value into the first CTA's shared memory (distributed shared memory),
// which then picks as above. In-graph price and measurements: docs/perf.md, "Second pricing round".
#include <cooperative_groups.h>

#include <string>

#include "backend/cuda/common/cluster_launch.h"
#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/ld_stream.cuh"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kernels/router/router.cuh"

namespace dsv4::cuda {
namespace {

using namespace router;

constexpr int kThreads = 256;
constexpr int kGateCtas = 16;  // CTAs per token of the fused gate (a non-portable cluster size)
// The fused gate's CTAs: 16 warps, each lane holding kGateChunks 16-byte chunks of one gate row at a time (a whole
// V4-Flash row per warp: 4096 columns), x staged once per CTA in shared memory.
constexpr int kGateThreads = 512, kGateWarps = kGateThreads / 32, kGateChunks = 16, kMaxGateDim = 16384;

__global__ void __launch_bounds__(kThreads) sm90_router_select_kernel(const float* __restrict__ logits, SelectParams q) {
    pdl_enter();
    __shared__ float sc[kMaxExperts], sel[kMaxExperts];
    const int64_t t = blockIdx.x;
    for (int e = int(threadIdx.x); e < q.n_experts; e += kThreads) {
        score_one(logits[t * q.n_experts + e], e, q, sc[e], sel[e]);
        if (q.scores) q.scores[t * q.n_experts + e] = sc[e];
    }
    __syncthreads();
    if (threadIdx.x < 32) select_top_k(sc, sel, t, q);
}

// grid: kGateCtas · tokens in clusters of kGateCtas (cluster c: token c); kGateThreads threads, warp w of CTA r takes
// experts r · per_cta + w + kGateWarps · i. Lane l sums columns l·8 + 256·i (i ascending, 8 fmaf each), then the warp
// adds across lanes by xor butterfly: the order of the earlier one-warp-per-expert kernel, so the same logits.
__global__ void __launch_bounds__(kGateThreads)
    sm90_router_gate_select_kernel(const __nv_bfloat16* __restrict__ x, int dim, const __nv_bfloat16* __restrict__ gate,
                                   float* __restrict__ logits_out, SelectParams q) {
    pdl_enter(false);
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    __shared__ float sc[kMaxExperts], sel[kMaxExperts];
    __shared__ __align__(16) __nv_bfloat16 xs[kMaxGateDim];
    const int r = int(cluster.block_rank());
    const int64_t t = blockIdx.x / kGateCtas;
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
            if (c < dim) g[i] = ld_stream16(gr + c);
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
        *reinterpret_cast<uint4*>(xs + c) = *reinterpret_cast<const uint4*>(x + t * dim + c);
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
            if (logits_out) logits_out[t * q.n_experts + e] = acc;
            if (q.scores) q.scores[t * q.n_experts + e] = s;
        }
    }
    cluster.sync();  // every score is in CTA 0's shared memory; the others are done
    if (r == 0 && threadIdx.x < 32) select_top_k(sc, sel, t, q);
}

}  // namespace

Status check_router_select(const RouterSelectArgs& a, const std::string& op) {
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

Status sm90_router_select(const RouterSelectArgs& a, StreamHandle stream) {
    const std::string op = "sm90_router_select";
    if (!a.logits) return invalid_argument(op + ": null logits");
    DSV4_RETURN_IF_ERROR(check_router_select(a, op));
    if (a.tokens == 0) return Status::ok();
    sm90_router_select_kernel<<<unsigned(a.tokens), kThreads, 0, stream>>>(a.logits, select_params(a));
    return launch_status(op.c_str());
}

bool router_gate_select_fits(int64_t dim, const DeviceWeightView& gate) {
    return gate.format == backend::WeightFormat::kBF16 && dim > 0 && dim % 256 == 0 && dim <= kMaxGateDim &&
           gate.cols == dim;
}

Status sm90_router_gate_select(const RouterGateArgs& g, const RouterSelectArgs& a, StreamHandle stream) {
    const std::string op = "sm90_router_gate_select";
    if (!g.x || g.gate.empty()) return invalid_argument(op + ": null x or gate");
    if (!router_gate_select_fits(g.dim, g.gate) || g.gate.rows != a.n_experts)
        return invalid_argument(op + ": needs a bf16 gate [" + std::to_string(a.n_experts) +
                                ", D] with D = " + std::to_string(g.dim) + " a positive multiple of 256 up to 16384");
    if ((reinterpret_cast<uintptr_t>(g.x) | reinterpret_cast<uintptr_t>(g.gate.data)) & 15)
        return invalid_argument(op + ": x and gate must be 16-byte aligned");
    DSV4_RETURN_IF_ERROR(check_router_select(a, op));
    if (a.tokens == 0) return Status::ok();
    static const cudaError_t attr =
        cudaFuncSetAttribute(sm90_router_gate_select_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    DSV4_CUDA_TRY(attr, op + ": cluster size attribute");
    const ClusterLaunch launch(dim3(unsigned(a.tokens * kGateCtas)), dim3(kGateThreads), 0, stream, dim3(kGateCtas));
    DSV4_CUDA_TRY(
        cudaLaunchKernelEx(&launch.cfg, sm90_router_gate_select_kernel, static_cast<const __nv_bfloat16*>(g.x),
                           int(g.dim), static_cast<const __nv_bfloat16*>(g.gate.data), g.logits, select_params(a)),
        op + ": cluster launch");
    return launch_status(op.c_str());
}

}  // namespace dsv4::cuda
