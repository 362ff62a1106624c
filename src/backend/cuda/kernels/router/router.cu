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
#include <string>

#include "backend/cuda/common/cluster_launch.h"
#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/ld_stream.cuh"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/common/per_device.h"
#include "backend/cuda/kernels/router/router.cuh"

namespace dsv4::cuda {
namespace {

using namespace router;

constexpr int kThreads = 256;

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

// grid: kGateCtas · tokens in clusters of kGateCtas (cluster c: token c): gate_scores_cluster (router.cuh), then the
// first CTA's warp 0 picks.
__global__ void __launch_bounds__(kGateThreads)
    sm90_router_gate_select_kernel(const __nv_bfloat16* __restrict__ x, int dim, const __nv_bfloat16* __restrict__ gate,
                                   float* __restrict__ logits_out, SelectParams q) {
    pdl_enter(false);
    __shared__ float sc[kMaxExperts], sel[kMaxExperts];
    __shared__ __align__(16) __nv_bfloat16 xs[kMaxGateDim];
    const int64_t t = blockIdx.x / kGateCtas;
    if (gate_scores_cluster(x + t * dim, dim, gate, logits_out ? logits_out + t * q.n_experts : nullptr, q, t, sc, sel,
                            xs) == 0 &&
        threadIdx.x < 32)
        select_top_k(sc, sel, t, q);
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
    static PerDevice<cudaError_t> attr;
    DSV4_CUDA_TRY(attr.get([] {
        return cudaFuncSetAttribute(sm90_router_gate_select_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    }),
                  op + ": cluster size attribute");
    const ClusterLaunch launch(dim3(unsigned(a.tokens * kGateCtas)), dim3(kGateThreads), 0, stream, dim3(kGateCtas));
    DSV4_CUDA_TRY(
        cudaLaunchKernelEx(&launch.cfg, sm90_router_gate_select_kernel, static_cast<const __nv_bfloat16*>(g.x),
                           int(g.dim), static_cast<const __nv_bfloat16*>(g.gate.data), g.logits, select_params(a)),
        op + ": cluster launch");
    return launch_status(op.c_str());
}

}  // namespace dsv4::cuda
