// Launcher of sm90_linear: validates, carves the workspace, and routes each (precision, format) pair to the GEMM
// that reproduces backend::cpu::linear (linear.h lists the routes).
#include <algorithm>
#include <climits>
#include <string>

#include "backend/cuda/common/cublaslt.h"
#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/common/workspace.h"
#include "backend/cuda/kernels/act_quant/act_quant.h"
#include "backend/cuda/kernels/embed_head/embed_head.h"
#include "backend/cuda/kernels/embed_head/gemv_bf16.h"
#include "backend/cuda/kernels/gemm_fp8/gemm_fp8.h"
#include "backend/cuda/kernels/linear/linear.cuh"
#include "backend/cuda/kernels/linear/linear.h"

namespace dsv4::cuda {
namespace {

using backend::LinearOut;
using backend::Precision;
using backend::WeightFormat;

// Consecutive 256-byte aligned pieces of the caller's workspace (sizes as sm90_linear_workspace_bytes adds them).
struct Carver {
    uint8_t* p;
    template <typename T>
    T* take(size_t bytes) {
        T* r = reinterpret_cast<T*>(p);
        p += align256(bytes);
        return r;
    }
};

__global__ void sm90_linear_f32_to_bf16_kernel(const float* __restrict__ x, int64_t n, __nv_bfloat16* __restrict__ y) {
    pdl_enter();
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        y[i] = __float2bfloat16_rn(x[i]);
}
__global__ void sm90_linear_bf16_to_f32_kernel(const __nv_bfloat16* __restrict__ x, int64_t n, float* __restrict__ y) {
    pdl_enter();
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        y[i] = __bfloat162float(x[i]);
}

template <WeightFormat F, typename XT, bool kQuant, typename YT>
Status launch_tiled(const void* x, const float* x_scale, const DeviceWeightView& w, int64_t tokens, bool round,
                    void* y, cudaStream_t s) {
    using Cfg = LinearTileConfig;
    const dim3 grid(unsigned((w.rows + Cfg::kBO - 1) / Cfg::kBO), unsigned((tokens + Cfg::kBT - 1) / Cfg::kBT));
    sm90_linear_tiled_kernel<F, XT, kQuant, YT><<<grid, Cfg::kThreads, 0, s>>>(
        static_cast<const XT*>(x), x_scale, w.data, w.scale, int(tokens), int(w.rows), int(w.cols), round,
        static_cast<YT*>(y));
    return launch_status("sm90_linear_tiled");
}

// The plain (unquantised) GEMM of any format: kReference takes bf16 x (F32 / BF16 weights only reach here), kF32
// f32 x and f32 y.
Status launch_plain(Precision p, const LinearArgs& a, cudaStream_t s) {
    const bool round = a.out == LinearOut::kBF16;
    if (p == Precision::kReference) {
        using B = __nv_bfloat16;
        if (a.w.format == WeightFormat::kF32)
            return round ? launch_tiled<WeightFormat::kF32, B, false, B>(a.x, nullptr, a.w, a.tokens, true, a.y, s)
                         : launch_tiled<WeightFormat::kF32, B, false, float>(a.x, nullptr, a.w, a.tokens, false, a.y, s);
        return round ? launch_tiled<WeightFormat::kBF16, B, false, B>(a.x, nullptr, a.w, a.tokens, true, a.y, s)
                     : launch_tiled<WeightFormat::kBF16, B, false, float>(a.x, nullptr, a.w, a.tokens, false, a.y, s);
    }
    switch (a.w.format) {
        case WeightFormat::kF32:
            return launch_tiled<WeightFormat::kF32, float, false, float>(a.x, nullptr, a.w, a.tokens, false, a.y, s);
        case WeightFormat::kBF16:
            return launch_tiled<WeightFormat::kBF16, float, false, float>(a.x, nullptr, a.w, a.tokens, false, a.y, s);
        case WeightFormat::kFP8Block:
            return launch_tiled<WeightFormat::kFP8Block, float, false, float>(a.x, nullptr, a.w, a.tokens, false, a.y,
                                                                               s);
        case WeightFormat::kMXFP4:
            return launch_tiled<WeightFormat::kMXFP4, float, false, float>(a.x, nullptr, a.w, a.tokens, false, a.y, s);
    }
    return internal_error("sm90_linear: unknown weight format");
}

// W8A8 / W4A8 over act_quant codes by the tiled kernel (bf16 result in a bf16 or f32 array).
template <WeightFormat F>
Status launch_quant(const uint8_t* codes, const float* scales, const LinearArgs& a, cudaStream_t s) {
    using B = __nv_bfloat16;
    return a.out == LinearOut::kBF16 ? launch_tiled<F, uint8_t, true, B>(codes, scales, a.w, a.tokens, true, a.y, s)
                                     : launch_tiled<F, uint8_t, true, float>(codes, scales, a.w, a.tokens, true, a.y, s);
}

bool quantized(Precision p, WeightFormat f) {
    return p == Precision::kReference && (f == WeightFormat::kFP8Block || f == WeightFormat::kMXFP4);
}

// W8A8 on cuBLASLt (linear.h): the prefill passes' row counts, output rows of whole 16-byte units.
bool fp8_as_lt_gemm(Precision p, const DeviceWeightView& w, int64_t tokens) {
    return p == Precision::kReference && w.format == WeightFormat::kFP8Block && tokens >= kFp8LinearGemmMinTokens &&
           w.rows % 8 == 0;
}

// Its workspace, in the order sm90_linear carves it: the quantised input as bf16 values, the weight's bf16 copy,
// cuBLASLt's, and the bf16 result before widening (LinearOut::kF32).
size_t fp8_lt_gemm_workspace_bytes(int64_t tokens, const DeviceWeightView& w, LinearOut out) {
    const size_t T = size_t(tokens), N = size_t(w.rows), K = size_t(w.cols);
    return align256(T * K * 2) + align256(N * K * 2) + kCublasLtWorkspaceBytes +
           (out == LinearOut::kF32 ? align256(T * N * 2) : 0);
}

// The W8A8 product through cuBLASLt: x quantised and dequantised by act_quant (x_sim: q·s, exact in bf16; any
// pre-quantised codes are the same function of x), the weight dequantised, f32 accumulation, one bf16 rounding.
// Unsupported when cuBLASLt has no algorithm for the shapes (the caller then runs the W8A8 kernel).
Status launch_fp8_lt_gemm(const LinearArgs& a, cudaStream_t s) {
    const int64_t T = a.tokens, N = a.w.rows, K = a.w.cols;
    Carver ws{static_cast<uint8_t*>(a.workspace)};
    auto* x_sim = ws.take<__nv_bfloat16>(size_t(T * K) * 2);
    auto* w_bf16 = ws.take<__nv_bfloat16>(size_t(N * K) * 2);
    void* lt_ws = ws.take<void>(kCublasLtWorkspaceBytes);
    void* y_bf16 = a.out == LinearOut::kBF16 ? a.y : ws.take<void>(size_t(T * N) * 2);
    ActQuantArgs q;
    q.x = a.x, q.rows = T, q.cols = K, q.block = 128, q.x_sim = x_sim;
    DSV4_RETURN_IF_ERROR(sm90_act_quant_e4m3(q, s));
    DSV4_RETURN_IF_ERROR(sm90_fp8_block_to_bf16(a.w, w_bf16, s));
    LtBf16Gemm g;
    g.a = w_bf16, g.b = x_sim, g.d = y_bf16, g.d_bf16 = true;
    g.m = N, g.n = T, g.k = K;
    g.lda = K, g.ldb = K, g.ldd = N;
    DSV4_RETURN_IF_ERROR(lt_bf16_gemm(g, lt_ws, s, "sm90_linear"));
    if (a.out == LinearOut::kBF16) return Status::ok();
    sm90_linear_bf16_to_f32_kernel<<<grid_stride_blocks(T * N, 256), 256, 0, s>>>(
        static_cast<const __nv_bfloat16*>(y_bf16), T * N, static_cast<float*>(a.y));
    return launch_status("sm90_linear_bf16_to_f32");
}

}  // namespace

size_t sm90_linear_workspace_bytes(Precision p, int64_t tokens, const DeviceWeightView& w, LinearOut out) {
    if (tokens <= 0 || w.rows <= 0 || w.cols <= 0) return 0;
    const size_t T = size_t(tokens), N = size_t(w.rows), K = size_t(w.cols);
    if (quantized(p, w.format)) {
        size_t b = align256(T * K) + align256(T * (K / 128) * sizeof(float));  // act_quant codes, scales
        if (w.format == WeightFormat::kFP8Block) {
            b += align256(sm90_fp8_gemm_workspace_bytes(tokens, w.rows, w.cols));
            if (out == LinearOut::kF32) b += align256(T * N * 2);  // bf16 GEMM result before widening
            // either path may run (the cuBLASLt one needs 16-byte aligned output and an algorithm)
            if (fp8_as_lt_gemm(p, w, tokens)) b = std::max(b, fp8_lt_gemm_workspace_bytes(tokens, w, out));
        }
        return b;
    }
    if (w.format == WeightFormat::kBF16 && p == Precision::kReference)
        return align256(sm90_bf16_gemm_f32_workspace_bytes(p, tokens, w.cols)) +
               (out == LinearOut::kBF16 ? align256(T * N * sizeof(float)) : 0);  // f32 GEMM result before rounding
    return 0;
}

Status sm90_linear(Precision p, const LinearArgs& a, StreamHandle stream) {
    const std::string op = "sm90_linear";
    const DeviceWeightView& w = a.w;
    if (!a.x || !a.y || a.tokens < 0) return invalid_argument(op + ": null x / y or negative token count");
    if (w.empty() || w.rows <= 0 || w.cols <= 0) return invalid_argument(op + ": empty weight");
    if ((w.format == WeightFormat::kFP8Block || w.format == WeightFormat::kMXFP4) && !w.scale)
        return invalid_argument(op + ": " + backend::weight_format_name(w.format) + " weight without scales");
    if (w.cols % 32 != 0)
        return invalid_argument(op + ": input width " + std::to_string(w.cols) + " is not a multiple of 32");
    const bool quant = quantized(p, w.format);
    if (quant && w.cols % 128 != 0)
        return invalid_argument(op + ": W8A8 / W4A8 needs the input width (" + std::to_string(w.cols) +
                                ") to be a multiple of 128");
    if (w.rows > INT_MAX || w.cols > INT_MAX || a.tokens > INT_MAX) return invalid_argument(op + ": shape too large");
    if (!is_aligned(a.x, 16) || !is_aligned(w.data, 16))
        return invalid_argument(op + ": x and weight must be 16-byte aligned");
    if ((a.x_codes == nullptr) != (a.x_scales == nullptr) || !is_aligned(a.x_codes, 16))
        return invalid_argument(op + ": pre-quantised input needs both x_codes (16-byte aligned) and x_scales");
    if (a.y2) {
        const DeviceWeightView& w2 = a.w2;
        if (w2.format != w.format || w2.rows != w.rows || w2.cols != w.cols || !is_aligned(w2.data, 16) ||
            (quant && !w2.scale))
            return invalid_argument(op +
                                    ": the second weight (w2) needs the first's format and shape, 16-byte aligned");
        if (a.partials) return invalid_argument(op + ": partials with a second weight");
        if (!(p == Precision::kReference && bf16_gemv_fits(a.tokens, w))) {  // two linears
            LinearArgs one = a;
            one.w2 = {}, one.y2 = nullptr;
            LinearArgs two = one;
            two.w = w2, two.y = a.y2;
            DSV4_RETURN_IF_ERROR(sm90_linear(p, one, stream));
            return sm90_linear(p, two, stream);
        }
    }
    const size_t need = sm90_linear_workspace_bytes(p, a.tokens, w, a.out);
    if (need > 0 && (!a.workspace || a.workspace_bytes < need || !is_aligned(a.workspace, 256)))
        return invalid_argument(op + ": needs a 256-byte aligned workspace of " + std::to_string(need) +
                                " bytes, got " + std::to_string(a.workspace_bytes));
    if (a.partials) *a.partials = {};
    if (a.tokens == 0) return Status::ok();
    const int64_t T = a.tokens, N = w.rows, K = w.cols;
    Carver ws{static_cast<uint8_t*>(a.workspace)};

    if (quant && fp8_as_lt_gemm(p, w, T) && is_aligned(a.y, 16)) {
        const Status st = launch_fp8_lt_gemm(a, stream);
        if (st.code() != StatusCode::kUnsupported) return st;
    }
    if (quant) {
        const uint8_t* codes = a.x_codes;
        const float* scales = a.x_scales;
        auto* own_codes = ws.take<uint8_t>(size_t(T * K));
        auto* own_scales = ws.take<float>(size_t(T * (K / 128)) * sizeof(float));
        if (!codes) {
            DSV4_RETURN_IF_ERROR(
                sm90_act_quant_e4m3({a.x, T, K, 128, own_codes, own_scales, nullptr, nullptr}, stream));
            codes = own_codes, scales = own_scales;
        }
        if (w.format == WeightFormat::kMXFP4) return launch_quant<WeightFormat::kMXFP4>(codes, scales, a, stream);
        const size_t gemm_bytes = sm90_fp8_gemm_workspace_bytes(T, N, K);
        auto* gemm_ws = ws.take<float>(gemm_bytes);
        void* gemm_y = a.out == LinearOut::kBF16 ? a.y : ws.take<void>(size_t(T * N) * 2);
        const Fp8GemmArgs g{codes, scales, T, w, gemm_y, gemm_ws, gemm_bytes};
        if (a.partials && a.out == LinearOut::kBF16) {  // the consumer reduces the K splits (LinearArgs::partials)
            DSV4_RETURN_IF_ERROR(sm90_fp8_gemm_block128_partials(g, *a.partials, stream));
            if (a.partials->splits > 0) return Status::ok();
        }
        DSV4_RETURN_IF_ERROR(sm90_fp8_gemm_block128(g, stream));
        if (a.out == LinearOut::kBF16) return Status::ok();
        sm90_linear_bf16_to_f32_kernel<<<grid_stride_blocks(T * N, 256), 256, 0, stream>>>(
            static_cast<const __nv_bfloat16*>(gemm_y), T * N, static_cast<float*>(a.y));
        return launch_status("sm90_linear_bf16_to_f32");
    }

    // Reference BF16: cuBLASLt, or for 1-8 tokens the register-streaming GEMV (gemv_bf16.h), which also rounds a
    // bf16 output itself (f32 accumulation on tensor cores, which align addends without rounding to nearest: f32
    // results differ from the CPU's in the last bits). f32 numerics take the tiled kernel for every format.
    if (p == Precision::kReference && bf16_gemv_fits(T, w)) {
        const bool round = a.out == LinearOut::kBF16;
        const auto job = [&](const DeviceWeightView& wi, void* yi) {
            return Bf16GemvJob{wi, round ? nullptr : static_cast<float*>(yi), round ? yi : nullptr};
        };
        if (a.y2) return launch_bf16_gemv_pair(a.x, T, job(w, a.y), job(a.w2, a.y2), stream);
        const Bf16GemvJob one = job(w, a.y);
        return launch_bf16_gemv(a.x, T, one.w, one.y32, one.y16, stream);
    }
    if (p == Precision::kReference && w.format == WeightFormat::kBF16 && is_aligned(a.y, 16)) {
        const size_t lt_bytes = sm90_bf16_gemm_f32_workspace_bytes(p, T, K);
        void* lt_ws = ws.take<void>(lt_bytes);
        const bool round = a.out == LinearOut::kBF16;
        float* y32 = round ? ws.take<float>(size_t(T * N) * sizeof(float)) : static_cast<float*>(a.y);
        const Status st = sm90_bf16_gemm_f32(p, {a.x, T, w, y32, lt_ws, lt_bytes}, stream);
        if (st.code() == StatusCode::kUnsupported) return launch_plain(p, a, stream);  // no cuBLASLt algorithm
        DSV4_RETURN_IF_ERROR(st);
        if (!round) return Status::ok();
        sm90_linear_f32_to_bf16_kernel<<<grid_stride_blocks(T * N, 256), 256, 0, stream>>>(
            y32, T * N, static_cast<__nv_bfloat16*>(a.y));
        return launch_status("sm90_linear_f32_to_bf16");
    }
    return launch_plain(p, a, stream);
}

}  // namespace dsv4::cuda
