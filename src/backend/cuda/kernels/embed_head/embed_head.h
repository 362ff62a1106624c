// Embedding gather and the f32-output GEMM of bf16 weights on the GPU (MODEL_SPEC §5.1, §5.6): the lm head
// (logits = head.weight · y, f32 out) and the router gate (§5.5) — the CUDA side of backend::cpu::embedding and of
// backend::cpu::linear with a BF16 weight and LinearOut::kF32. The GEMM runs on cuBLASLt (bf16 tensor cores, f32
// accumulation and output); docs/kernels/cuda-backend.md.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/common/stream.h"
#include "backend/cuda/common/weights.h"
#include "backend/ops.h"

namespace dsv4::cuda {

// out[t] = table[tokens[t]] (bf16 rows; kReference writes bf16, kF32 f32). A token id outside [0, V) writes a zero
// row. With bad_position, the smallest such position t is recorded there too: the launcher first sets it to
// kNoBadToken (a memset), so the caller reads it back with its next synchronisation to turn it into an error. A
// caller that checked its ids already (the engine, on the host) passes none: no memset node heads its decode graph,
// whose edge into the first kernel would be a full one instead of a programmatic one (common/graph.h).
inline constexpr int32_t kNoBadToken = 0x7f7f7f7f;
struct EmbeddingArgs {
    const int32_t* tokens = nullptr;  // device [T]
    int64_t n = 0;
    DeviceWeightView table;           // bf16 [V, D], D % 8 == 0
    void* out = nullptr;              // [T, D]
    int32_t* bad_position = nullptr;  // device, one int32, or null: not reported
};
Status sm90_embedding(backend::Precision precision, const EmbeddingArgs& a, StreamHandle stream);

// y[t, o] = Σ_i W[o, i] · x[t, i], W bf16 [N, K], y f32 [T, N].
//   kReference: x bf16 [T, K]; one bf16 GEMM (products exact in f32, f32 accumulation).
//   kF32:       x f32 [T, K]; x is split into three bf16 terms (hi + mid + lo, exact) and the three GEMMs are
//               accumulated into y (lo first), which is an f32 GEMM of the exact bf16 weight up to summation order.
struct Bf16GemmF32Args {
    const void* x = nullptr;  // [T, K], 16-byte aligned
    int64_t tokens = 0;
    DeviceWeightView w;       // kBF16 [N, K], K % 8 == 0
    float* y = nullptr;       // [T, N]
    void* workspace = nullptr;  // sm90_bf16_gemm_f32_workspace_bytes(), 256-byte aligned
    size_t workspace_bytes = 0;
};
size_t sm90_bf16_gemm_f32_workspace_bytes(backend::Precision precision, int64_t tokens, int64_t k);
Status sm90_bf16_gemm_f32(backend::Precision precision, const Bf16GemmF32Args& a, StreamHandle stream);

}  // namespace dsv4::cuda
