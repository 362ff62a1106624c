// Launcher of sm90_fp8_gemm_wgmma: validates, encodes the two tensor maps (common/tensor_map.h), launches one
// persistent block per SM.
#include <algorithm>
#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/per_device.h"
#include "backend/cuda/common/tensor_map.h"
#include "backend/cuda/kernels/gemm_fp8_wgmma/gemm_fp8_wgmma.cuh"
#include "backend/cuda/kernels/gemm_fp8_wgmma/gemm_fp8_wgmma.h"

namespace dsv4::cuda {
namespace {

using Cfg = Fp8WgmmaConfig;

}  // namespace

Status sm90_fp8_gemm_wgmma(const Fp8WgmmaGemmArgs& a, StreamHandle stream) {
    const std::string op = "sm90_fp8_gemm_wgmma";
    static_assert(Cfg::kBM == Cfg::kBN, "one box shape serves both tensor maps");
    if (!a.a_codes || !a.a_scale || !a.y || a.w.empty() || !a.w.scale || a.tokens < 0)
        return invalid_argument(op + ": null pointer or negative token count");
    if (a.w.format != backend::WeightFormat::kFP8Block)
        return invalid_argument(op + ": weight is " + backend::weight_format_name(a.w.format) + ", expected fp8");
    if (a.w.cols <= 0 || a.w.cols % Cfg::kBK != 0 || a.w.rows <= 0 || a.w.rows % Cfg::kBN != 0)
        return invalid_argument(op + ": weight [" + std::to_string(a.w.rows) + ", " + std::to_string(a.w.cols) +
                                "]: N and K must be positive multiples of 128 (sm90_fp8_gemm_block128 takes any N)");
    if (a.w.rows > 0x7fffffff || a.w.cols > 0x7fffffff || a.tokens > 0x7fffffff ||
        a.tokens * a.w.rows > (int64_t(1) << 40))
        return invalid_argument(op + ": shape too large");
    if ((reinterpret_cast<uintptr_t>(a.a_codes) | reinterpret_cast<uintptr_t>(a.w.data)) & 15)
        return invalid_argument(op + ": activation codes and weight must be 16-byte aligned (tensor-map base)");
    if (reinterpret_cast<uintptr_t>(a.y) & 3) return invalid_argument(op + ": output must be 4-byte aligned");
    if (a.tokens == 0) return Status::ok();

    DSV4_ASSIGN_OR_RETURN(CUtensorMap map_a, e4m3_kmajor_tensor_map(a.a_codes, a.tokens, a.w.cols, Cfg::kBM, Cfg::kBK,
                                                                     op.c_str(), "activations"));
    DSV4_ASSIGN_OR_RETURN(CUtensorMap map_b, e4m3_kmajor_tensor_map(a.w.data, a.w.rows, a.w.cols, Cfg::kBN, Cfg::kBK,
                                                                     op.c_str(), "weight"));

    static PerDevice<cudaError_t> attr;
    DSV4_CUDA_TRY(attr.get([] {
        return cudaFuncSetAttribute(sm90_fp8_gemm_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    Cfg::kSmemBytes);
    }),
                  "cudaFuncSetAttribute(sm90_fp8_gemm_wgmma shared memory)");

    const int64_t tiles = ((a.tokens + Cfg::kBM - 1) / Cfg::kBM) * (a.w.rows / Cfg::kBN);
    const unsigned grid = unsigned(std::min<int64_t>(tiles, current_sm_count()));
    sm90_fp8_gemm_wgmma_kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(
        map_a, map_b, a.a_scale, a.w.scale, int(a.tokens), int(a.w.rows), int(a.w.cols),
        static_cast<__nv_bfloat16*>(a.y));
    return launch_status("sm90_fp8_gemm_wgmma");
}

}  // namespace dsv4::cuda
