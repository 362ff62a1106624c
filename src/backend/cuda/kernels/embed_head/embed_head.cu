// Embedding gather (one thread per 8 channels of a token) and the bf16-weight f32-output GEMM through cuBLASLt:
// A = W [N, K] row-major read as K x N column-major with op T, B = x [T, K] as K x T column-major, D = y [T, N] as
// N x T column-major. The f32 mode splits x into three bf16 terms first (split kernel below).
#include <algorithm>
#include <string>

#include "backend/cuda/common/cublaslt.h"
#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/mma_bf16.cuh"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kernels/embed_head/embed_head.h"
#include "backend/cuda/kernels/embed_head/gemv_bf16.h"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using backend::WeightFormat;

template <typename ActT>
__global__ void sm90_embedding_kernel(const int32_t* __restrict__ tokens, int64_t n, int64_t vocab, int dim,
                                      const __nv_bfloat16* __restrict__ table, ActT* __restrict__ out,
                                      int32_t* __restrict__ bad_position) {
    pdl_enter();
    const int chunks = dim / 8;
    for (int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < n * chunks;
         g += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = g / chunks;
        const int c = int(g % chunks) * 8;
        const int32_t id = tokens[t];
        float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (id >= 0 && id < vocab)
            load8(table + int64_t(id) * dim + c, v);
        else if (c == 0 && bad_position)
            atomicMin(bad_position, int32_t(t));
        store8(out + t * dim + c, v);  // bf16 → bf16 is exact
    }
}

// x f32 [T, K] → hi, mid, lo bf16 [3][T, K].
__global__ void sm90_split_bf16x3_kernel(const float* __restrict__ x, int64_t n, __nv_bfloat16* __restrict__ out) {
    pdl_enter();
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        __nv_bfloat16 hi, mid, lo;
        split_bf16x3(x[i], hi, mid, lo);
        out[i] = hi;
        out[n + i] = mid;
        out[2 * n + i] = lo;
    }
}

// y [T, N] (f32) = beta·y + x [T, K] · W [N, K]^T, bf16 inputs, f32 accumulation.
Status bf16_gemm_f32(const void* w, const void* x, float* y, int64_t n, int64_t k, int64_t t, float beta, void* ws,
                     cudaStream_t s) {
    LtBf16Gemm g;
    g.a = w, g.b = x, g.d = y;
    g.m = n, g.n = t, g.k = k;
    g.lda = k, g.ldb = k, g.ldd = n;
    g.beta = beta;
    return lt_bf16_gemm(g, ws, s, "sm90_bf16_gemm_f32");
}

}  // namespace

Status sm90_embedding(Precision precision, const EmbeddingArgs& a, StreamHandle stream) {
    const std::string op = "sm90_embedding";
    if (!a.tokens || !a.out || a.n < 0 || a.table.empty())
        return invalid_argument(op + ": null pointer, negative count or empty table");
    if (a.table.format != WeightFormat::kBF16 || a.table.cols % 8 != 0)
        return invalid_argument(op + ": table must be bf16 with a row width that is a multiple of 8");
    if (!is_aligned(a.out, 16) || !is_aligned(a.table.data, 16))
        return invalid_argument(op + ": out/table not 16-byte aligned");
    if (a.bad_position)
        DSV4_CUDA_TRY(cudaMemsetAsync(a.bad_position, 0x7f, sizeof(int32_t), stream), op + ": reset bad_position");
    if (a.n == 0) return Status::ok();
    const int64_t items = a.n * (a.table.cols / 8);
    const auto* table = static_cast<const __nv_bfloat16*>(a.table.data);
    if (precision == Precision::kReference)
        sm90_embedding_kernel<__nv_bfloat16><<<grid_stride_blocks(items, 256), 256, 0, stream>>>(
            a.tokens, a.n, a.table.rows, int(a.table.cols), table, static_cast<__nv_bfloat16*>(a.out), a.bad_position);
    else
        sm90_embedding_kernel<float><<<grid_stride_blocks(items, 256), 256, 0, stream>>>(
            a.tokens, a.n, a.table.rows, int(a.table.cols), table, static_cast<float*>(a.out), a.bad_position);
    return launch_status(op.c_str());
}

size_t sm90_bf16_gemm_f32_workspace_bytes(Precision precision, int64_t tokens, int64_t k) {
    const size_t split = precision == Precision::kF32 ? (size_t(3 * tokens * k) * 2 + 255) / 256 * 256 : 0;
    return kCublasLtWorkspaceBytes + split;
}

Status sm90_bf16_gemm_f32(Precision precision, const Bf16GemmF32Args& a, StreamHandle stream) {
    const std::string op = "sm90_bf16_gemm_f32";
    if (!a.x || !a.y || a.tokens < 0) return invalid_argument(op + ": null pointer or negative token count");
    if (a.w.empty() || a.w.format != WeightFormat::kBF16 || a.w.cols % 8 != 0)
        return invalid_argument(op + ": weight must be bf16 [N, K] with K a multiple of 8");
    const int64_t n = a.w.rows, k = a.w.cols;
    const size_t need = sm90_bf16_gemm_f32_workspace_bytes(precision, a.tokens, k);
    if (!a.workspace || a.workspace_bytes < need || !is_aligned(a.workspace, 256))
        return invalid_argument(op + ": needs a 256-byte aligned workspace of " + std::to_string(need) + " bytes");
    if (!is_aligned(a.x, 16) || !is_aligned(a.y, 16) || !is_aligned(a.w.data, 16))
        return invalid_argument(op + ": x, y and weight must be 16-byte aligned");
    if (a.tokens == 0) return Status::ok();
    if (precision == Precision::kReference) {
        if (bf16_gemv_fits(a.tokens, a.w)) return launch_bf16_gemv(a.x, a.tokens, a.w, a.y, nullptr, stream);
        return bf16_gemm_f32(a.w.data, a.x, a.y, n, k, a.tokens, 0.0f, a.workspace, stream);
    }
    auto* split = reinterpret_cast<__nv_bfloat16*>(static_cast<uint8_t*>(a.workspace) + kCublasLtWorkspaceBytes);
    const int64_t elems = a.tokens * k;
    sm90_split_bf16x3_kernel<<<grid_stride_blocks(elems, 256), 256, 0, stream>>>(static_cast<const float*>(a.x), elems,
                                                                                split);
    DSV4_RETURN_IF_ERROR(launch_status("sm90_split_bf16x3"));
    // lo first, hi last: the small terms are summed before they meet the large one.
    for (int part = 2; part >= 0; --part)
        DSV4_RETURN_IF_ERROR(bf16_gemm_f32(a.w.data, split + part * elems, a.y, n, k, a.tokens, part == 2 ? 0.0f : 1.0f,
                                           a.workspace, stream));
    return Status::ok();
}

}  // namespace dsv4::cuda
