// Launcher of sm90_fp8_gemm_wgmma: validates, encodes the two tensor maps (the driver's cuTensorMapEncodeTiled,
// fetched through the runtime so the backend needs no -lcuda), launches one persistent block per SM.
#include <algorithm>
#include <mutex>
#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/kernels/gemm_fp8_wgmma/gemm_fp8_wgmma.cuh"
#include "backend/cuda/kernels/gemm_fp8_wgmma/gemm_fp8_wgmma.h"

namespace dsv4::cuda {
namespace {

using Cfg = Fp8WgmmaConfig;

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

Result<EncodeTiledFn> tensor_map_encoder() {
    static EncodeTiledFn fn = nullptr;
    static cudaError_t err = cudaSuccess;
    static cudaDriverEntryPointQueryResult query = cudaDriverEntryPointSuccess;
    static std::once_flag once;
    std::call_once(once, [] {
        void* p = nullptr;
        err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &query);
        fn = reinterpret_cast<EncodeTiledFn>(p);
    });
    DSV4_CUDA_TRY(err, "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
    if (query != cudaDriverEntryPointSuccess || !fn)
        return unsupported("sm90_fp8_gemm_wgmma: the CUDA driver has no cuTensorMapEncodeTiled (needs CUDA 12+)");
    return fn;
}

// Tensor map of a row-major [rows, K] e4m3 matrix read as 128-row x 128-byte boxes in the 128-byte swizzle; rows past
// the end of the matrix read as zeros.
Result<CUtensorMap> kmajor_e4m3_map(EncodeTiledFn encode, const void* base, int64_t rows, int64_t k,
                                    const char* what) {
    CUtensorMap map;
    const cuuint64_t dims[2] = {cuuint64_t(k), cuuint64_t(rows)};
    const cuuint64_t strides[1] = {cuuint64_t(k)};  // bytes between rows
    const cuuint32_t box[2] = {cuuint32_t(Cfg::kBK), cuuint32_t(Cfg::kBM)};
    const cuuint32_t elem_strides[2] = {1, 1};
    const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box,
                              elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return internal_error(std::string("sm90_fp8_gemm_wgmma: cuTensorMapEncodeTiled(") + what + ") failed with " +
                              std::to_string(int(r)));
    return map;
}

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

    DSV4_ASSIGN_OR_RETURN(EncodeTiledFn encode, tensor_map_encoder());
    DSV4_ASSIGN_OR_RETURN(CUtensorMap map_a, kmajor_e4m3_map(encode, a.a_codes, a.tokens, a.w.cols, "activations"));
    DSV4_ASSIGN_OR_RETURN(CUtensorMap map_b, kmajor_e4m3_map(encode, a.w.data, a.w.rows, a.w.cols, "weight"));

    static const cudaError_t attr = cudaFuncSetAttribute(
        sm90_fp8_gemm_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
    DSV4_CUDA_TRY(attr, "cudaFuncSetAttribute(sm90_fp8_gemm_wgmma shared memory)");

    const int64_t tiles = ((a.tokens + Cfg::kBM - 1) / Cfg::kBM) * (a.w.rows / Cfg::kBN);
    const unsigned grid = unsigned(std::min<int64_t>(tiles, current_sm_count()));
    sm90_fp8_gemm_wgmma_kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(
        map_a, map_b, a.a_scale, a.w.scale, int(a.tokens), int(a.w.rows), int(a.w.cols),
        static_cast<__nv_bfloat16*>(a.y));
    return launch_status("sm90_fp8_gemm_wgmma");
}

}  // namespace dsv4::cuda
