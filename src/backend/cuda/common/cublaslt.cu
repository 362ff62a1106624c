// cuBLASLt bf16 GEMM (cublaslt.h): descriptors made per call (cheap next to the prefill-sized products this serves),
// one handle per device.
#include <cublasLt.h>

#include <string>

#include "backend/cuda/common/cublaslt.h"
#include "backend/cuda/common/per_device.h"

namespace dsv4::cuda {
namespace {

Status cublas_status(cublasStatus_t s, const std::string& what) {
    if (s == CUBLAS_STATUS_SUCCESS) return Status::ok();
    return internal_error(what + ": cuBLASLt status " + std::to_string(int(s)));
}

// The handle is thread-safe; descriptors are per call. One per device: a handle is made for the device current
// at its creation.
Result<cublasLtHandle_t> lt_handle() {
    struct Made {
        cublasLtHandle_t h = nullptr;
        cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    };
    static PerDevice<Made> handles;
    const Made m = handles.get([] {
        Made made;
        made.st = cublasLtCreate(&made.h);
        return made;
    });
    if (m.st != CUBLAS_STATUS_SUCCESS) return cublas_status(m.st, "cublasLtCreate");
    return m.h;
}

// A column-major layout of rows x cols with leading dimension ld, repeated `batch` times at `stride` elements.
cublasStatus_t make_layout(cublasLtMatrixLayout_t* l, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                           int64_t batch, int64_t stride) {
    cublasStatus_t r = cublasLtMatrixLayoutCreate(l, type, uint64_t(rows), uint64_t(cols), ld);
    if (r != CUBLAS_STATUS_SUCCESS || batch == 1) return r;
    const int32_t count = int32_t(batch);
    r = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count));
    if (r != CUBLAS_STATUS_SUCCESS) return r;
    return cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride));
}

}  // namespace

Status lt_bf16_gemm(const LtBf16Gemm& g, void* workspace, StreamHandle stream, const char* op) {
    DSV4_ASSIGN_OR_RETURN(cublasLtHandle_t h, lt_handle());
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    cublasStatus_t failed = CUBLAS_STATUS_SUCCESS;
    const char* failed_step = "";
    auto step = [&](cublasStatus_t r, const char* what) {
        if (failed == CUBLAS_STATUS_SUCCESS && r != CUBLAS_STATUS_SUCCESS) failed = r, failed_step = what;
        return failed == CUBLAS_STATUS_SUCCESS;
    };
    bool no_algo = false;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const cudaDataType_t d_type = g.d_bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const size_t ws_bytes = kCublasLtWorkspaceBytes;
    if (step(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor") &&
        step(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "transa") &&
        step(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "transb") &&
        step(make_layout(&la, CUDA_R_16BF, g.k, g.m, g.lda, g.batch, g.stride_a), "A layout") &&
        step(make_layout(&lb, CUDA_R_16BF, g.k, g.n, g.ldb, g.batch, g.stride_b), "B layout") &&
        step(make_layout(&ld, d_type, g.m, g.n, g.ldd, g.batch, g.stride_d), "D layout") &&
        step(cublasLtMatmulPreferenceCreate(&pref), "preference") &&
        step(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                  sizeof(ws_bytes)),
             "workspace preference")) {
        cublasLtMatmulHeuristicResult_t heur{};
        int found = 0;
        if (step(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, 1, &heur, &found), "heuristic")) {
            no_algo = found == 0;
            const float alpha = 1.0f;
            if (!no_algo)
                step(cublasLtMatmul(h, desc, &alpha, g.a, la, g.b, lb, &g.beta, g.d, ld, g.d, ld, &heur.algo,
                                    workspace, ws_bytes, stream),
                     "matmul");
        }
    }
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (no_algo)
        return unsupported(std::string(op) + ": cuBLASLt has no algorithm for bf16 x bf16 -> " +
                           (g.d_bf16 ? "bf16" : "f32") + " at M " + std::to_string(g.m) + " K " + std::to_string(g.k) +
                           " N " + std::to_string(g.n) + " batch " + std::to_string(g.batch));
    return cublas_status(failed, std::string(op) + ": " + failed_step);
}

}  // namespace dsv4::cuda
