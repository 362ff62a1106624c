// Kernels and launchers of the experts family (experts.cuh describes the routed launches and the numerics).
#include <algorithm>
#include <climits>
#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/workspace.h"
#include "backend/cuda/kernels/experts/experts.cuh"
#include "backend/cuda/kernels/experts/experts.h"
#include "backend/cuda/kernels/linear/linear.h"
#include "backend/cuda/common/pdl.cuh"

namespace dsv4::cuda {
namespace {

using backend::LinearOut;
using backend::Precision;
using backend::WeightFormat;
using Cfg = ExpertsConfig;

template <typename AT, bool kRef>
__global__ void sm90_swiglu_kernel(const AT* u1, const AT* u3, int64_t rows, int64_t inter,
                                   const float* __restrict__ route_w, float limit, AT* a) {
    pdl_enter();
    const int64_t n = rows * inter;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        a[i] = from_f32<AT>(swiglu_value<kRef>(to_f32(u1[i]), to_f32(u3[i]), route_w, i / inter, limit));
}

// Routed launch 1: a[pick, o] = swiglu(w1 x, w3 x)[o] · weight of the pick, for o in this block's 128 rows.
// Shared memory: xs [D] f32, sa [D/128].
template <typename XT, bool kRef>
__global__ void __launch_bounds__(Cfg::kRows)
    sm90_routed_up_kernel(const XT* __restrict__ x, int k, int n_experts, int dim, int inter,
                          const DeviceExpertWeights* __restrict__ experts, const int32_t* __restrict__ idx,
                          const float* __restrict__ route_w, float limit, float* __restrict__ a_out) {
    pdl_enter();
    extern __shared__ __align__(16) float smem[];
    float* xs = smem;
    float* sa = smem + dim;
    const int64_t pick = blockIdx.x;
    const int e = idx[pick];
    if (e < 0 || e >= n_experts) return;  // the down launch writes the zero row
    const DeviceWeightView w1 = experts[e].w1, w3 = experts[e].w3;
    stage_row(x + (pick / k) * int64_t(dim), xs, dim);
    if (kRef && is_block_quantized(w1.format)) quantize_shared(xs, sa, dim);
    const int64_t o = int64_t(blockIdx.y) * Cfg::kRows + threadIdx.x;
    if (o >= inter) return;
    const float u1 = expert_row<kRef>(w1, o, xs, sa), u3 = expert_row<kRef>(w3, o, xs, sa);
    a_out[pick * inter + o] = swiglu_value<kRef>(u1, u3, route_w, pick, limit);
}

// Routed launch 2: out[pick, o] = w2[o] · a[pick] (bf16 values in kReference), or 0 for an invalid expert id.
// Shared memory: xs [inter] f32, sa [inter/128].
template <bool kRef>
__global__ void __launch_bounds__(Cfg::kRows)
    sm90_routed_down_kernel(const float* __restrict__ a_in, int n_experts, int dim, int inter,
                            const DeviceExpertWeights* __restrict__ experts, const int32_t* __restrict__ idx,
                            float* __restrict__ out) {
    pdl_enter();
    extern __shared__ __align__(16) float smem[];
    float* xs = smem;
    float* sa = smem + inter;
    const int64_t pick = blockIdx.x;
    const int e = idx[pick];
    const int64_t o = int64_t(blockIdx.y) * Cfg::kRows + threadIdx.x;
    if (e < 0 || e >= n_experts) {
        if (o < dim) out[pick * dim + o] = 0.0f;
        return;
    }
    const DeviceWeightView w2 = experts[e].w2;
    stage_row(a_in + pick * inter, xs, inter);
    if (kRef && is_block_quantized(w2.format)) quantize_shared(xs, sa, inter);
    if (o >= dim) return;
    out[pick * dim + o] = expert_row<kRef>(w2, o, xs, sa);
}

// One block per token: the picks' order by ascending expert id (stable insertion sort, as the CPU), then each
// channel's f32 sum in that order, plus the shared expert, stored as YT (bf16 rounds).
template <typename ST, typename YT>
__global__ void sm90_moe_sum_kernel(const float* __restrict__ expert_out, const int32_t* __restrict__ idx,
                                    const ST* __restrict__ shared, int k, int64_t dim, YT* __restrict__ y) {
    pdl_enter();
    __shared__ int order[64];
    const int64_t t = blockIdx.x;
    if (threadIdx.x == 0) {
        const int32_t* id = idx + t * k;
        for (int j = 0; j < k; ++j) order[j] = j;
        for (int a = 1; a < k; ++a)
            for (int c = a; c > 0 && id[order[c]] < id[order[c - 1]]; --c) {
                const int tmp = order[c];
                order[c] = order[c - 1], order[c - 1] = tmp;
            }
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < k; ++j) acc = __fadd_rn(acc, expert_out[(t * k + order[j]) * dim + i]);
        if (shared) acc = __fadd_rn(acc, to_f32(shared[t * dim + i]));
        y[t * dim + i] = from_f32<YT>(acc);
    }
}

// Dynamic shared memory of a routed launch over rows of n activations; opts the kernel in above 48 KiB.
template <typename Kernel>
Status shared_bytes(Kernel kernel, int64_t n, size_t* bytes) {
    *bytes = size_t(n + n / 128) * sizeof(float);
    if (*bytes > (size_t(200) << 10))
        return invalid_argument("sm90_routed_experts: rows of " + std::to_string(n) + " activations exceed shared memory");
    if (*bytes > (size_t(48) << 10))
        DSV4_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(*bytes)),
                      "cudaFuncSetAttribute(sm90_routed_experts shared memory)");
    return Status::ok();
}

template <typename XT, bool kRef>
Status launch_routed(const RoutedExpertsArgs& a, float* act, cudaStream_t s) {
    const int64_t picks = a.tokens * a.k;
    size_t up_bytes = 0, down_bytes = 0;
    auto up = sm90_routed_up_kernel<XT, kRef>;
    auto down = sm90_routed_down_kernel<kRef>;
    DSV4_RETURN_IF_ERROR(shared_bytes(up, a.dim, &up_bytes));
    DSV4_RETURN_IF_ERROR(shared_bytes(down, a.inter, &down_bytes));
    const dim3 g_up(unsigned(picks), unsigned((a.inter + Cfg::kRows - 1) / Cfg::kRows));
    up<<<g_up, Cfg::kRows, up_bytes, s>>>(static_cast<const XT*>(a.x), int(a.k), int(a.n_experts), int(a.dim),
                                           int(a.inter), a.experts, a.idx, a.weights, a.limit, act);
    DSV4_RETURN_IF_ERROR(launch_status("sm90_routed_up"));
    const dim3 g_down(unsigned(picks), unsigned((a.dim + Cfg::kRows - 1) / Cfg::kRows));
    down<<<g_down, Cfg::kRows, down_bytes, s>>>(act, int(a.n_experts), int(a.dim), int(a.inter), a.experts, a.idx,
                                                a.out);
    return launch_status("sm90_routed_down");
}

}  // namespace

Status sm90_swiglu(Precision p, const SwigluArgs& a, StreamHandle stream) {
    if (!a.u1 || !a.u3 || !a.a || a.rows < 0 || a.inter <= 0)
        return invalid_argument("sm90_swiglu: null pointer or bad shape");
    const int64_t n = a.rows * a.inter;
    if (n == 0) return Status::ok();
    if (p == Precision::kReference) {
        using B = __nv_bfloat16;
        sm90_swiglu_kernel<B, true><<<grid_stride_blocks(n, 256), 256, 0, stream>>>(
            static_cast<const B*>(a.u1), static_cast<const B*>(a.u3), a.rows, a.inter, a.route_w, a.limit,
            static_cast<B*>(a.a));
    } else {
        sm90_swiglu_kernel<float, false><<<grid_stride_blocks(n, 256), 256, 0, stream>>>(
            static_cast<const float*>(a.u1), static_cast<const float*>(a.u3), a.rows, a.inter, a.route_w, a.limit,
            static_cast<float*>(a.a));
    }
    return launch_status("sm90_swiglu");
}

size_t sm90_expert_workspace_bytes(Precision p, int64_t tokens, const DeviceWeightView& w1,
                                   const DeviceWeightView& w2) {
    if (tokens <= 0) return 0;
    const size_t act = p == Precision::kReference ? 2 : 4;
    const size_t u = align256(size_t(tokens) * size_t(w1.rows) * act);
    const size_t lin = std::max(sm90_linear_workspace_bytes(p, tokens, w1, LinearOut::kBF16),
                                sm90_linear_workspace_bytes(p, tokens, w2, LinearOut::kBF16));
    return 2 * u + align256(lin);
}

Status sm90_expert(Precision p, const ExpertArgs& a, StreamHandle stream) {
    const std::string op = "sm90_expert";
    if (!a.x || !a.y || a.tokens < 0) return invalid_argument(op + ": null x / y or negative token count");
    const int64_t inter = a.w1.rows, dim = a.w1.cols;
    if (a.w3.rows != inter || a.w3.cols != dim || a.w3.format != a.w1.format)
        return invalid_argument(op + ": w3 must have w1's shape [" + std::to_string(inter) + ", " +
                                std::to_string(dim) + "] and format");
    if (a.w2.rows != dim || a.w2.cols != inter)
        return invalid_argument(op + ": w2 must be [" + std::to_string(dim) + ", " + std::to_string(inter) + "]");
    const size_t need = sm90_expert_workspace_bytes(p, a.tokens, a.w1, a.w2);
    if (need > 0 && (!a.workspace || a.workspace_bytes < need || !is_aligned(a.workspace, 256)))
        return invalid_argument(op + ": needs a 256-byte aligned workspace of " + std::to_string(need) +
                                " bytes, got " + std::to_string(a.workspace_bytes));
    if (a.tokens == 0) return Status::ok();
    const size_t act = p == Precision::kReference ? 2 : 4;
    const size_t u_bytes = align256(size_t(a.tokens) * size_t(inter) * act);
    auto* base = static_cast<uint8_t*>(a.workspace);
    void* u1 = base;
    void* u3 = base + u_bytes;
    void* lin_ws = base + 2 * u_bytes;
    const size_t lin_bytes = a.workspace_bytes - 2 * u_bytes;
    DSV4_RETURN_IF_ERROR(sm90_linear(p, {a.x, a.tokens, a.w1, LinearOut::kBF16, u1, lin_ws, lin_bytes}, stream));
    DSV4_RETURN_IF_ERROR(sm90_linear(p, {a.x, a.tokens, a.w3, LinearOut::kBF16, u3, lin_ws, lin_bytes}, stream));
    DSV4_RETURN_IF_ERROR(sm90_swiglu(p, {u1, u3, a.tokens, inter, a.route_w, a.limit, u1}, stream));
    return sm90_linear(p, {u1, a.tokens, a.w2, LinearOut::kBF16, a.y, lin_ws, lin_bytes}, stream);
}

size_t sm90_routed_experts_workspace_bytes(Precision, int64_t tokens, int64_t k, int64_t, int64_t inter) {
    if (tokens <= 0 || k <= 0 || inter <= 0) return 0;
    return align256(size_t(tokens) * size_t(k) * size_t(inter) * sizeof(float));
}

Status sm90_routed_experts(Precision p, const RoutedExpertsArgs& a, StreamHandle stream) {
    const std::string op = "sm90_routed_experts";
    if (!a.x || !a.experts || !a.idx || !a.weights || !a.out)
        return invalid_argument(op + ": null pointer");
    if (a.tokens < 0 || a.k <= 0 || a.n_experts <= 0 || a.dim <= 0 || a.inter <= 0)
        return invalid_argument(op + ": bad token / pick / expert count or dimension");
    const int64_t mult = p == Precision::kReference ? 128 : 32;
    if (a.dim % mult != 0 || a.inter % mult != 0)
        return invalid_argument(op + ": dim " + std::to_string(a.dim) + " and inter " + std::to_string(a.inter) +
                                " must be multiples of " + std::to_string(mult) + " in " +
                                backend::precision_name(p) + " numerics");
    if (a.tokens * a.k > INT_MAX || a.dim > INT_MAX / 2 || a.inter > INT_MAX / 2 || a.n_experts > INT_MAX)
        return invalid_argument(op + ": shape too large");
    if (!is_aligned(a.x, 16)) return invalid_argument(op + ": x must be 16-byte aligned");
    const size_t need = sm90_routed_experts_workspace_bytes(p, a.tokens, a.k, a.dim, a.inter);
    if (need > 0 && (!a.workspace || a.workspace_bytes < need || !is_aligned(a.workspace, 256)))
        return invalid_argument(op + ": needs a 256-byte aligned workspace of " + std::to_string(need) +
                                " bytes, got " + std::to_string(a.workspace_bytes));
    if (a.tokens == 0) return Status::ok();
    auto* act = static_cast<float*>(a.workspace);
    return p == Precision::kReference ? launch_routed<__nv_bfloat16, true>(a, act, stream)
                                      : launch_routed<float, false>(a, act, stream);
}

Status sm90_moe_sum(Precision p, const MoeSumArgs& a, StreamHandle stream) {
    if (!a.expert_out || !a.idx || !a.y || a.tokens < 0 || a.k <= 0 || a.k > 64 || a.dim <= 0)
        return invalid_argument("sm90_moe_sum: null pointer or bad shape (K must be 1..64)");
    if (a.tokens == 0) return Status::ok();
    const unsigned grid = unsigned(a.tokens);
    if (p == Precision::kReference) {
        using B = __nv_bfloat16;
        sm90_moe_sum_kernel<B, B><<<grid, 256, 0, stream>>>(a.expert_out, a.idx, static_cast<const B*>(a.shared),
                                                            int(a.k), a.dim, static_cast<B*>(a.y));
    } else {
        sm90_moe_sum_kernel<float, float><<<grid, 256, 0, stream>>>(
            a.expert_out, a.idx, static_cast<const float*>(a.shared), int(a.k), a.dim, static_cast<float*>(a.y));
    }
    return launch_status("sm90_moe_sum");
}

}  // namespace dsv4::cuda
