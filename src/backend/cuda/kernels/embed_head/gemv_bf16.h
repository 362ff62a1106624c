// The decode-shape path of the bf16-weight GEMM in reference numerics (sm90_bf16_gemm_f32, embed_head.h, and the
// bf16 linears of sm90_linear): y = W·x for 1-8 tokens with the weight streamed from global memory straight into
// registers, launched like this backend's own kernels (programmatic launch, first weight loads before the wait).
// Internal to the CUDA kernels: the two launchers pick it; gemv_bf16.cu says why.
#pragma once

#include <cstdint>

#include "backend/cuda/common/stream.h"
#include "backend/cuda/common/weights.h"
#include "dsv4/status.h"

namespace dsv4::cuda {

inline constexpr int64_t kBf16GemvMaxTokens = 8;
// Larger weights stay on cuBLASLt: the V4-Flash lm head (1.06 GB) streamed at 96-98 % of copy there and at 85-88 %
// here (H200, `dsv4_bench_cuda_ops bf16`, 1-8 tokens; docs/kernels/cuda-backend.md), and at that size the launch
// latency the programmatic edge would hide is a fraction of a percent.
inline constexpr int64_t kBf16GemvMaxWeightBytes = int64_t(64) << 20;

// Whether a call takes it: 1..kBf16GemvMaxTokens tokens, a bf16 weight of at most kBf16GemvMaxWeightBytes whose K
// is a positive multiple of 64.
bool bf16_gemv_fits(int64_t tokens, const DeviceWeightView& w);

// y[t, o] = Σ_i W[o, i] · x[t, i] (x bf16 [T, K], 16-byte aligned rows) into exactly one of y32 (f32 [T, N]) or
// y16 (bf16 [T, N], the f32 sum rounded once). For a call bf16_gemv_fits accepts; no workspace.
Status launch_bf16_gemv(const void* x, int64_t tokens, const DeviceWeightView& w, float* y32, void* y16,
                        StreamHandle stream);

// A weight and its output (exactly one of y32, y16) for launch_bf16_gemv_pair.
struct Bf16GemvJob {
    DeviceWeightView w;
    float* y32 = nullptr;
    void* y16 = nullptr;
};
// Two weights of one shape against the same x in one launch (e.g. a compressor's wkv and wgate at decode: one grid
// instead of two launches in a chain), outputs of one type; each output's bits are launch_bf16_gemv's for its weight.
Status launch_bf16_gemv_pair(const void* x, int64_t tokens, const Bf16GemvJob& a, const Bf16GemvJob& b,
                             StreamHandle stream);

}  // namespace dsv4::cuda
