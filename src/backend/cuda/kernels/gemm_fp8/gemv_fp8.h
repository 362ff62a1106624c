// The decode-shape path of sm90_fp8_gemm_block128 (gemm_fp8.h): the same W8A8 product for up to 16 tokens, with the
// weight streamed from global memory straight into registers instead of through a shared-memory ring. Internal to
// gemm_fp8/: the launcher there picks it; gemv_fp8.cu says why it is faster at these shapes.
#pragma once

#include <cstdint>

#include "backend/cuda/common/stream.h"
#include "backend/cuda/kernels/gemm_fp8/gemm_fp8.h"

namespace dsv4::cuda {

// Launches it for a validated call with 1 <= a.tokens <= kFp8GemvMaxTokens (no workspace: K splits are reduced
// inside each block).
Status launch_fp8_gemv(const Fp8GemmArgs& a, StreamHandle stream);

}  // namespace dsv4::cuda
