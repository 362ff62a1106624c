// e4m3_kmajor_tensor_map (tensor_map.h).
#include "backend/cuda/common/tensor_map.h"

#include <cuda_runtime.h>

#include <mutex>
#include <string>

#include "backend/cuda/common/cuda_status.cuh"

namespace dsv4::cuda {
namespace {

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

Result<EncodeTiledFn> tensor_map_encoder(const char* op) {
    static EncodeTiledFn fn = nullptr;
    static cudaError_t err = cudaSuccess;
    static cudaDriverEntryPointQueryResult query = cudaDriverEntryPointSuccess;
    static std::once_flag once;
    std::call_once(once, [] {
        void* p = nullptr;
        err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &query);
        fn = reinterpret_cast<EncodeTiledFn>(p);
    });
    DSV4_CUDA_TRY(err, std::string(op) + ": cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
    if (query != cudaDriverEntryPointSuccess || !fn)
        return unsupported(std::string(op) + ": the CUDA driver has no cuTensorMapEncodeTiled (needs CUDA 12+)");
    return fn;
}

}  // namespace

Result<CUtensorMap> e4m3_kmajor_tensor_map(const void* base, int64_t rows, int64_t cols, int box_rows, int box_cols,
                                           const char* op, const char* what) {
    DSV4_ASSIGN_OR_RETURN(EncodeTiledFn encode, tensor_map_encoder(op));
    CUtensorMap map;
    const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
    const cuuint64_t strides[1] = {cuuint64_t(cols)};  // bytes between rows
    const cuuint32_t box[2] = {cuuint32_t(box_cols), cuuint32_t(box_rows)};
    const cuuint32_t elem_strides[2] = {1, 1};
    const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box,
                              elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return internal_error(std::string(op) + ": cuTensorMapEncodeTiled(" + what + ") failed with " +
                              std::to_string(int(r)));
    return map;
}

}  // namespace dsv4::cuda
