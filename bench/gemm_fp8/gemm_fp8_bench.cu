// FP8 GEMM at prefill sizes: M (tokens) in {256, 512, 1024, 2048, 4096, 8192, 16384} x (N, K) in {(4096, 4096),
// (2048, 4096), (4096, 2048), (32768, 1024), (1024, 4096)} (the last two: V4-Flash's wq_b and wq_a), side by side:
//   wgmma     sm90_fp8_gemm_wgmma (block-scaled, reference numerics; not used by the engine: docs/kernels/
//             gemm_fp8_wgmma.md, "Accumulation precision")
//   block128  sm90_fp8_gemm_block128 (block-scaled, mma.sync; the engine's W8A8 kernel below kFp8LinearGemmMinTokens)
//   linear    sm90_linear in reference numerics from bf16 input: what the engine runs at that M, i.e. from
//             kFp8LinearGemmMinTokens rows act_quant's simulation + the weight's bf16 copy + cuBLASLt (linear.h), below
//             act_quant + block128; the column to read for the switch point
//   cublasLt  cuBLASLt FP8 e4m3 with one per-tensor scale per operand, bf16 out: a speed reference only (it does not
//             compute the block-scaled product)
// Inputs: random e4m3 bytes (no NaN codes), power-of-two activation scales, UE8M0 weight scales; for `linear` random
// bf16 activations, whose act_quant codes and scales then also feed block128 and wgmma (so all three compute the same
// product). Time: CUDA events around each call after warm-up, median of kReps calls. TFLOP/s = 2·M·N·K / time. The
// last columns give the share of bf16 outputs of wgmma and of linear identical in every bit to block128's, and
// wgmma's rel_l2 (smoke checks; the tests are tests/ops/gemm_fp8_wgmma_test.cpp and linear_test.cpp).
//
// Usage: dsv4_bench_gemm_fp8 [--no-cublas]
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cuda/common/buffer.h"
#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/common/stream.h"
#include "backend/cuda/kernels/act_quant/act_quant.h"
#include "backend/cuda/kernels/gemm_fp8/gemm_fp8.h"
#include "backend/cuda/kernels/gemm_fp8_wgmma/gemm_fp8_wgmma.h"
#include "backend/cuda/kernels/linear/linear.h"
#include "../bench_check.h"

namespace {

using namespace dsv4;
using namespace dsv4::cuda;

constexpr int kWarm = 3, kReps = 20;

#define CHECK_CUDA(call) CHECK(::dsv4::cuda::cuda_status((call), #call))

__device__ __forceinline__ uint32_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return uint32_t(x);
}
// Random e4m3 bytes without the NaN codes 0x7f / 0xff.
__global__ void fill_e4m3(uint8_t* p, size_t n, uint64_t seed) {
    dsv4::cuda::pdl_enter();
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        uint32_t v = mix(seed * 0x9e3779b97f4a7c15ull + i) & 0xff;
        if ((v & 0x7f) == 0x7f) v &= 0xfe;
        p[i] = uint8_t(v);
    }
}
// Random bf16 activations in [-2, 2).
__global__ void fill_bf16(__nv_bfloat16* p, size_t n, uint64_t seed) {
    dsv4::cuda::pdl_enter();
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        p[i] = __float2bfloat16_rn(float(mix(seed * 0x9e3779b97f4a7c15ull + i) & 0xffff) / 16384.0f - 2.0f);
}
// Power-of-two f32 scales 2^-12..2^-5 (act_quant's range for |x| ~ 1) or UE8M0 bytes 122..134.
__global__ void fill_scales(float* f, uint8_t* b, size_t n, uint64_t seed) {
    dsv4::cuda::pdl_enter();
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        const uint32_t r = mix(seed * 0x9e3779b97f4a7c15ull + i);
        if (f) f[i] = ldexpf(1.0f, -12 + int(r % 8));
        if (b) b[i] = uint8_t(122 + r % 13);
    }
}

DeviceBuffer alloc(size_t bytes) {
    auto b = DeviceBuffer::allocate(bytes + 16);
    CHECK(b.status());
    return std::move(*b);
}

template <typename F>
double median_ms(F&& call) {
    cudaEvent_t e0, e1;
    CHECK_CUDA(cudaEventCreate(&e0));
    CHECK_CUDA(cudaEventCreate(&e1));
    for (int i = 0; i < kWarm; ++i) CHECK(call());
    std::vector<float> ms(kReps);
    for (int i = 0; i < kReps; ++i) {
        CHECK_CUDA(cudaEventRecord(e0));
        CHECK(call());
        CHECK_CUDA(cudaEventRecord(e1));
        CHECK_CUDA(cudaEventSynchronize(e1));
        CHECK_CUDA(cudaEventElapsedTime(&ms[size_t(i)], e0, e1));
    }
    CHECK_CUDA(cudaEventDestroy(e0));
    CHECK_CUDA(cudaEventDestroy(e1));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

// cuBLASLt FP8 (e4m3 x e4m3 -> bf16, f32 compute, per-tensor scales = 1): y[M, N] = x[M, K] · w[N, K]ᵀ, i.e. the
// column-major D[N, M] = op_T(w as K x N) · x as K x M ("TN", the layout FP8 cuBLASLt requires).
struct CublasLtFp8 {
    cublasLtHandle_t handle = nullptr;
    DeviceBuffer workspace = alloc(64 << 20), one = alloc(sizeof(float));
    CublasLtFp8() {
        if (cublasLtCreate(&handle) != CUBLAS_STATUS_SUCCESS) handle = nullptr;
        const float f = 1.0f;
        CHECK(one.upload(&f, sizeof f));
    }
    ~CublasLtFp8() {
        if (handle) cublasLtDestroy(handle);
    }
    // Returns a negative time where cuBLASLt offers no algorithm for the shape.
    double time_ms(const void* w, const void* x, void* y, int64_t m, int64_t n, int64_t k) {
        if (!handle) return -1;
        cublasLtMatmulDesc_t op = nullptr;
        cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
        const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        const float* sp = one.as<float>();
        bool ok = cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
                  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == 0 &&
                  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == 0 &&
                  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sp, sizeof sp) == 0 &&
                  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sp, sizeof sp) == 0 &&
                  cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, uint64_t(k), uint64_t(n), k) == 0 &&
                  cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, uint64_t(k), uint64_t(m), k) == 0 &&
                  cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, uint64_t(n), uint64_t(m), n) == 0;
        cublasLtMatmulPreference_t pref = nullptr;
        cublasLtMatmulHeuristicResult_t heur{};
        int found = 0;
        const size_t ws = workspace.bytes() - 16;
        ok = ok && cublasLtMatmulPreferenceCreate(&pref) == 0 &&
             cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) ==
                 0 &&
             cublasLtMatmulAlgoGetHeuristic(handle, op, la, lb, lc, lc, pref, 1, &heur, &found) == 0 && found > 0;
        double t = -1;
        if (ok) {
            const float alpha = 1.0f, beta = 0.0f;
            t = median_ms([&]() -> Status {
                const cublasStatus_t s = cublasLtMatmul(handle, op, &alpha, w, la, x, lb, &beta, y, lc, y, lc,
                                                        &heur.algo, workspace.data(), ws, nullptr);
                return s == CUBLAS_STATUS_SUCCESS ? Status::ok() : internal_error("cublasLtMatmul failed");
            });
        }
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
        if (lc) cublasLtMatrixLayoutDestroy(lc);
        if (lb) cublasLtMatrixLayoutDestroy(lb);
        if (la) cublasLtMatrixLayoutDestroy(la);
        if (op) cublasLtMatmulDescDestroy(op);
        return t;
    }
};

float bf16_bits_to_f32(uint16_t b) {
    const uint32_t u = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Share of equal bf16 words of two device outputs, and the rel_l2 of a against b.
struct Agreement {
    double same = 0, rel_l2 = 0;
};
Agreement agreement(const DeviceBuffer& a, const DeviceBuffer& b, size_t n) {
    std::vector<uint16_t> ha(n), hb(n);
    CHECK(a.download(ha.data(), n * 2));
    CHECK(b.download(hb.data(), n * 2));
    size_t same = 0;
    double num = 0, den = 0;
    for (size_t i = 0; i < n; ++i) {
        same += ha[i] == hb[i];
        const double x = bf16_bits_to_f32(ha[i]), y = bf16_bits_to_f32(hb[i]);
        num += (x - y) * (x - y);
        den += y * y;
    }
    return {double(same) / double(n), std::sqrt(num / std::max(den, 1e-300))};
}

}  // namespace

int main(int argc, char** argv) {
    const bool use_cublas = !(argc > 1 && std::strcmp(argv[1], "--no-cublas") == 0);
    const int64_t ms_list[] = {256, 512, 1024, 2048, 4096, 8192, 16384};
    const int64_t nk_list[][2] = {{4096, 4096}, {2048, 4096}, {4096, 2048}, {32768, 1024}, {1024, 4096}};
    const int64_t max_m = 16384, max_nk = 32768 * 1024, max_mk = max_m * 4096, max_mn = max_m * 32768;

    DeviceBuffer x = alloc(size_t(max_mk)), xs = alloc(size_t(max_mk / 128) * sizeof(float));
    DeviceBuffer xb = alloc(size_t(max_mk) * 2);
    DeviceBuffer w = alloc(size_t(max_nk)), wsc = alloc(size_t(max_nk / (128 * 128)));
    DeviceBuffer y1 = alloc(size_t(max_mn) * 2), y2 = alloc(size_t(max_mn) * 2), y3 = alloc(size_t(max_mn) * 2);
    size_t ws_bytes = 0;
    for (const auto& nk : nk_list)
        for (const int64_t m : ms_list) {
            const DeviceWeightView v{backend::WeightFormat::kFP8Block, nk[0], nk[1], nullptr, nullptr};
            ws_bytes = std::max({ws_bytes, sm90_fp8_gemm_workspace_bytes(m, nk[0], nk[1]),
                                 sm90_linear_workspace_bytes(backend::Precision::kReference, m, v,
                                                             backend::LinearOut::kBF16)});
        }
    DeviceBuffer ws = alloc(ws_bytes);
    fill_e4m3<<<1024, 256>>>(w.as<uint8_t>(), size_t(max_nk), 2);
    fill_scales<<<64, 256>>>(nullptr, wsc.as<uint8_t>(), size_t(max_nk / (128 * 128)), 4);
    fill_bf16<<<1024, 256>>>(xb.as<__nv_bfloat16>(), size_t(max_mk), 5);
    CHECK_CUDA(cudaDeviceSynchronize());
    CublasLtFp8 lt;

    std::printf("%6s %6s %6s | %10s %8s | %10s %8s | %10s %8s | %10s %8s | %9s %9s %9s\n", "M", "N", "K", "wgmma ms",
                "TFLOP/s", "block128", "TFLOP/s", "linear", "TFLOP/s", "cublasLt", "TFLOP/s", "wg=b128", "rel_l2",
                "lin=b128");
    for (const auto& nk : nk_list) {
        const int64_t n = nk[0], k = nk[1];
        for (const int64_t m : ms_list) {
            // the activations of this M as linear quantises them, so every column computes the same product
            CHECK(sm90_act_quant_e4m3({xb.data(), m, k, 128, x.as<uint8_t>(), xs.as<float>(), nullptr,
                                                      nullptr},
                                                     nullptr));
            DeviceWeightView wv{backend::WeightFormat::kFP8Block, n, k, w.data(), wsc.as<uint8_t>()};
            const Fp8WgmmaGemmArgs wa{x.as<uint8_t>(), xs.as<float>(), m, wv, y1.data()};
            const Fp8GemmArgs ba{x.as<uint8_t>(), xs.as<float>(), m, wv, y2.data(), ws.as<float>(), ws_bytes};
            LinearArgs la;
            la.x = xb.data(), la.tokens = m, la.w = wv, la.y = y3.data(), la.workspace = ws.data();
            la.workspace_bytes = ws_bytes;
            const double t_w = median_ms([&] { return sm90_fp8_gemm_wgmma(wa, nullptr); });
            const double t_l = median_ms([&] { return sm90_linear(backend::Precision::kReference, la, nullptr); });
            const double t_b = median_ms([&] { return sm90_fp8_gemm_block128(ba, nullptr); });
            CHECK_CUDA(cudaDeviceSynchronize());
            const Agreement wg = agreement(y1, y2, size_t(m * n)), lin = agreement(y3, y2, size_t(m * n));
            const double t_c = use_cublas ? lt.time_ms(w.data(), x.data(), y1.data(), m, n, k) : -1;
            const double flop = 2.0 * double(m) * double(n) * double(k);
            auto tf = [&](double t) { return t > 0 ? flop / (t * 1e-3) / 1e12 : 0.0; };
            std::printf("%6lld %6lld %6lld | %10.4f %8.1f | %10.4f %8.1f | %10.4f %8.1f | %10.4f %8.1f | %8.4f%% %9.2e "
                        "%8.4f%%\n",
                        (long long)m, (long long)n, (long long)k, t_w, tf(t_w), t_b, tf(t_b), t_l, tf(t_l), t_c,
                        tf(t_c), 100.0 * wg.same, wg.rel_l2, 100.0 * lin.same);
            std::fflush(stdout);
        }
    }
    return 0;
}
