// sm90_moe_route: the MoE decode path's first launch when it routes too (MoeDecodeArgs::route). Blocks
// 0 .. dot_blocks-1 compute the router gate's dot products and scores, one warp per expert row for every token (the
// row's first 4096 columns in registers, requested before the programmatic wait); each block then arrives on a
// counter, and the last to arrive selects each token's experts (one warp per token: router.cuh, the arithmetic of
// sm90_router_gate_select) and groups the picks (moe_prepare.cuh). Blocks dot_blocks .. dot_blocks+T-1 quantise x's
// rows as the prepare's blocks do. One launch instead of the router's and the prepare's, and the gate
// spread over ⌈E / 8⌉ blocks instead of one 16-CTA cluster per token (docs/kernels/moe.md, "Routing in the first
// launch"). One token takes the router's cluster form instead, with the prepare's work after its cluster barrier
// (sm90_moe_route_one_kernel).
#include <algorithm>
#include <string>

#include "backend/cuda/common/cluster_launch.h"
#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/ld_stream.cuh"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/common/per_device.h"
#include "backend/cuda/kernels/moe/moe_prepare.cuh"
#include "backend/cuda/kernels/moe/moe_route.h"
#include "backend/cuda/kernels/router/router.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kRouteThreads = MoeDecodeConfig::kPrepThreads;  // the grouping's block size
constexpr int kRouteWarps = kRouteThreads / 32;               // one expert row per warp
constexpr int kRowChunks = 16;  // 16-byte gate chunks a lane holds at once: 4096 columns per pass of a warp
constexpr int kMaxTokens = int(kMoeRouteMaxTokens);

struct RouteParams {
    const __nv_bfloat16* gate;  // [E, D]
    float* logits;              // [T, E]
    float* scores;              // [T, E] scores, then [T, E] selection values (the workspace's)
    int* arrivals;
    int dot_blocks;
};

// ld: EarlyLoad16 for the requests before the programmatic wait, else StreamLoad16 (ld_stream.cuh).
template <class Ld>
__device__ __forceinline__ void load_row_chunks(const __nv_bfloat16* row, int c0, int dim, uint4 (&g)[kRowChunks],
                                                Ld ld) {
    const int lane = int(threadIdx.x) & 31;
#pragma unroll
    for (int i = 0; i < kRowChunks; ++i) {
        const int c = c0 + lane * 8 + 256 * i;
        if (c < dim) g[i] = ld(row + c);
    }
}

// This warp's expert's logit, score and selection value for every token (TB >= T tokens, a compile-time bound so
// that the token loops unroll without branches). x's rows are staged in shared memory once per block; lane l sums
// columns l·8 + 256·i of each pass (i ascending, 8 fmaf each), then the warp adds across lanes by xor butterfly:
// sm90_router_gate_select's order, so the same logits; lane t scores token t. Waits for the previous launch (after
// requesting the row's first pass).
template <int TB>
__device__ __forceinline__ void gate_dots(const MoeKernelParams& p, const RouteParams& r,
                                          const router::SelectParams& q) {
    extern __shared__ __align__(16) unsigned char route_smem[];
    __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(route_smem);  // [T, D]
    const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
    const int e = int(blockIdx.x) * kRouteWarps + warp;
    const int E = q.n_experts, D = p.D, T = TB == 1 ? 1 : p.T;
    const __nv_bfloat16* row = r.gate + int64_t(e) * D;
    uint4 g[kRowChunks];
    if (e < E) load_row_chunks(row, 0, D, g, EarlyLoad16{});  // weights, written only at load (pdl.cuh)
    pdl_wait();
    for (int c = int(threadIdx.x) * 8; c < T * D; c += kRouteThreads * 8)
        *reinterpret_cast<uint4*>(xs + c) = *reinterpret_cast<const uint4*>(p.x + c);
    __syncthreads();
    if (e >= E) return;
    float acc[TB];
#pragma unroll
    for (int t = 0; t < TB; ++t) acc[t] = 0.0f;
    for (int c0 = 0; c0 < D; c0 += 256 * kRowChunks) {
        if (c0 != 0) load_row_chunks(row, c0, D, g, StreamLoad16{});
        const int chunks = min(kRowChunks, (D - c0) >> 8);  // D is a multiple of 256: the same for every lane
        const __nv_bfloat16* xc = xs + c0 + lane * 8;
#pragma unroll
        for (int i = 0; i < kRowChunks; ++i) {
            if (i >= chunks) break;
            float gv[8];
            bf16x8_to_f32(g[i], gv);
#pragma unroll
            for (int t = 0; t < TB; ++t) {
                if (t < T) {
                    float xv[8];
                    load8(xc + t * D + 256 * i, xv);
#pragma unroll
                    for (int h = 0; h < 8; ++h) acc[t] = fmaf(xv[h], gv[h], acc[t]);
                }
            }
        }
    }
    float mine = 0.0f;  // lane t: token t's logit
#pragma unroll
    for (int t = 0; t < TB; ++t) {
        float a = acc[t];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
        if (lane == t) mine = a;
    }
    if (lane < T) {
        const int64_t i = int64_t(lane) * E + e;
        float sc, sel;
        router::score_one(mine, e, q, sc, sel);
        r.logits[i] = mine;
        r.scores[i] = sc;
        r.scores[int64_t(T) * E + i] = sel;
        if (q.scores) q.scores[i] = sc;
    }
}

// The last block: every (token, expert)'s score and selection value into shared memory, each token's picks and
// weights by one warp, then the grouping; the counter is left zero for the next launch.
__device__ __forceinline__ void select_and_group(const MoeKernelParams& p, const RouteParams& r,
                                                 const router::SelectParams& q) {
    extern __shared__ __align__(16) unsigned char route_smem[];
    float* sc = reinterpret_cast<float*>(route_smem);  // [T, E] scores, then [T, E] selection values
    const int n = p.T * q.n_experts;
    for (int i = int(threadIdx.x); i < 2 * n; i += kRouteThreads) sc[i] = __ldcg(r.scores + i);
    __syncthreads();
    for (int t = int(threadIdx.x) >> 5; t < p.T; t += kRouteWarps)
        router::select_top_k(sc + t * q.n_experts, sc + n + t * q.n_experts, t, q);
    __syncthreads();  // the picks (global) visible to the whole block
    moe_group_picks(p);
    if (threadIdx.x == 0) *r.arrivals = 0;
}

template <int TB>
__global__ void __launch_bounds__(kRouteThreads)
    sm90_moe_route_kernel(MoeKernelParams p, RouteParams r, router::SelectParams q) {
    pdl_enter(false);
    // every path below waits: gate_dots after its first loads, the quantisation blocks at once
    if (int(blockIdx.x) >= r.dot_blocks) {
        pdl_wait();
        moe_quantize_row(p, int(blockIdx.x) - r.dot_blocks);
        return;
    }
    gate_dots<TB>(p, r, q);
    __shared__ bool last;
    __syncthreads();  // also: the block's x rows are no longer read (select_and_group reuses their shared memory)
    if (threadIdx.x == 0) {
        __threadfence();  // this block's scores before its arrival
        last = atomicAdd(r.arrivals, 1) == r.dot_blocks - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();  // the other blocks fenced their scores before arriving
    select_and_group(p, r, q);
}

// One token (T = 1): the router's own cluster form (router::gate_scores_cluster: 16 CTAs, the gate rows spread over
// their warps, scores in the first CTA's shared memory) with the prepare's work in its shadow: after the cluster
// barrier the first CTA's warp 0 picks and groups (moe_group_one_token_warp) while its other warps zero the counters,
// and the other 15 CTAs, idle until now at that point, quantise x from their staged copies, a share of the 128-blocks
// each. No arrival counter, no fence: the expert launches wait for this launch's completion.
__global__ void __launch_bounds__(router::kGateThreads)
    sm90_moe_route_one_kernel(MoeKernelParams p, const __nv_bfloat16* __restrict__ gate, float* __restrict__ logits,
                              router::SelectParams q) {
    pdl_enter(false, false);
    __shared__ float sc[router::kMaxExperts], sel[router::kMaxExperts];
    __shared__ __align__(16) __nv_bfloat16 xs[kMoeRouteMaxDim];
    const int r = router::gate_scores_cluster(p.x, p.D, gate, logits, q, 0, sc, sel, xs);
    const int tid = int(threadIdx.x);
    if (r == 0) {
        // The gate/up launch after this one: triggered here, once the other CTAs are about to leave (they exit after
        // their quantisation); triggered at the start, its blocks would be placed beside this launch's, off its SMs.
        pdl_trigger();
        if (tid < 32) {
            router::select_top_k(sc, sel, 0, q);
            __syncwarp();  // the picks (global) visible to the warp
            moe_group_one_token_warp(p);
        } else {
            moe_zero_counters(p, tid - 32, router::kGateThreads - 32);
        }
        return;
    }
    constexpr int kQuantCtas = router::kGateCtas - 1;
    const int blocks = p.D / 128, per = (blocks + kQuantCtas - 1) / kQuantCtas;
    const int b0 = min(blocks, (r - 1) * per), b1 = min(blocks, r * per);
    if (tid < 32) moe_quantize_chunks(p, 0, xs, 4 * b0, 4 * b1, tid, 32);
}

// Dynamic shared memory: x's rows in the dot blocks, the scores and selection values in the last block.
size_t route_smem_bytes(int64_t tokens, int64_t dim, int64_t n_experts) {
    return size_t(std::max(tokens * dim * 2, 2 * tokens * n_experts * 4));
}

}  // namespace

bool moe_route_fits(int64_t dim, const DeviceWeightView& gate) {
    return gate.format == backend::WeightFormat::kBF16 && dim > 0 && dim % 256 == 0 && dim <= kMoeRouteMaxDim &&
           gate.cols == dim;
}

Status check_moe_route(const MoeDecodeArgs& a, const std::string& op) {
    const MoeRoute& r = *a.route;
    const RouterSelectArgs& s = r.select;
    if (a.tokens > kMoeRouteMaxTokens)
        return invalid_argument(op + ": routing in the first launch takes at most " +
                                std::to_string(kMoeRouteMaxTokens) + " tokens, got " + std::to_string(a.tokens) +
                                " (route with sm90_router_select and pass idx / route_w)");
    if (!moe_route_fits(a.dim, r.gate) || r.gate.rows != a.n_experts)
        return invalid_argument(op + ": route.gate must be bf16 [" + std::to_string(a.n_experts) + ", " +
                                std::to_string(a.dim) + "] (D a multiple of 256 up to " +
                                std::to_string(kMoeRouteMaxDim) + ")");
    if (!is_aligned(r.gate.data, 16)) return invalid_argument(op + ": route.gate must be 16-byte aligned");
    if (!r.arrivals || !r.logits)
        return invalid_argument(op + ": route needs its arrival counter and a logits buffer [T, E]");
    if (s.idx != a.idx || s.weights != a.route_w || s.tokens != a.tokens || s.n_experts != a.n_experts || s.k != a.k)
        return invalid_argument(op +
                                ": route.select must write this call's idx / route_w with its tokens, experts "
                                "and k");
    return check_router_select(s, op);
}

namespace {

// The instantiation for at most TB tokens.
template <int TB>
Status launch_route(const MoeKernelParams& p, const RouteParams& r, const router::SelectParams& q,
                    cudaStream_t stream) {
    static PerDevice<cudaError_t> attr;
    DSV4_CUDA_TRY(attr.get([] {
        return cudaFuncSetAttribute(sm90_moe_route_kernel<TB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(route_smem_bytes(TB, kMoeRouteMaxDim, router::kMaxExperts)));
    }),
                  "sm90_moe_route: shared memory attribute");
    sm90_moe_route_kernel<TB>
        <<<unsigned(r.dot_blocks + p.T), kRouteThreads, route_smem_bytes(p.T, p.D, p.E), stream>>>(p, r, q);
    return launch_status("sm90_moe_route");
}

}  // namespace

Status launch_moe_route(const MoeKernelParams& p, const MoeRoute& route, float* scratch, cudaStream_t stream) {
    RouteParams r;
    r.gate = static_cast<const __nv_bfloat16*>(route.gate.data);
    r.logits = route.logits;
    r.scores = scratch;
    r.arrivals = route.arrivals;
    r.dot_blocks = (p.E + kRouteWarps - 1) / kRouteWarps;
    const router::SelectParams q = router::select_params(route.select);
    if (p.T == 1) {
        static PerDevice<cudaError_t> attr;
        DSV4_CUDA_TRY(attr.get([] {
            return cudaFuncSetAttribute(sm90_moe_route_one_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
        }),
                      "sm90_moe_route: cluster size attribute");
        const ClusterLaunch launch(dim3(router::kGateCtas), dim3(router::kGateThreads), 0, stream,
                                   dim3(router::kGateCtas));
        DSV4_CUDA_TRY(cudaLaunchKernelEx(&launch.cfg, sm90_moe_route_one_kernel, p, r.gate, r.logits, q),
                      "sm90_moe_route: cluster launch");
        return launch_status("sm90_moe_route");
    }
    static_assert(kMaxTokens == 8, "the instantiations below cover 2..8 tokens");
    if (p.T == 2) return launch_route<2>(p, r, q, stream);
    if (p.T <= 4) return launch_route<4>(p, r, q, stream);
    return launch_route<8>(p, r, q, stream);
}

}  // namespace dsv4::cuda
