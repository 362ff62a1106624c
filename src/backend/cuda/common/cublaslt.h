// One bf16 GEMM through cuBLASLt, for the ops that run a plain bf16 x bf16 product with f32 accumulation
// (the head's and compressors' f32-output linears, wo_a in the prefill passes). Column-major view, as cuBLASLt
// takes it: D [M x N] = A^T · B with A = a weight stored row-major [M, K] (K x M column-major, op T) and B = rows
// of activations stored row-major [N, K] (K x N column-major). Leading dimensions are in elements; a batch repeats
// the product at fixed element strides (groups of a grouped projection).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/common/stream.h"
#include "dsv4/status.h"

namespace dsv4::cuda {

inline constexpr size_t kCublasLtWorkspaceBytes = size_t(32) << 20;  // cuBLASLt's recommendation for Hopper

struct LtBf16Gemm {
    const void* a = nullptr;  // bf16 weight rows: row m of batch b at a + b·stride_a + m·lda
    const void* b = nullptr;  // bf16 activation rows: row n at b + b·stride_b + n·ldb
    void* d = nullptr;        // row n of batch b at d + b·stride_d + n·ldd; f32 or bf16 (d_bf16), f32 accumulation
    bool d_bf16 = false;      // bf16 output: each f32 sum rounded once, to nearest even
    int64_t m = 0, n = 0, k = 0;
    int64_t lda = 0, ldb = 0, ldd = 0;
    int64_t batch = 1, stride_a = 0, stride_b = 0, stride_d = 0;
    float beta = 0.0f;        // D = A^T·B + beta·D (f32 output only)
};

// Runs the product on `stream`; workspace: kCublasLtWorkspaceBytes bytes of device memory, 256-byte aligned.
// `op` names the caller in errors (a cuBLASLt failure, or no algorithm for the shapes).
Status lt_bf16_gemm(const LtBf16Gemm& g, void* workspace, StreamHandle stream, const char* op);

}  // namespace dsv4::cuda
