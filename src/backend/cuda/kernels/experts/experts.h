// SwiGLU experts of any weight format in both numerics modes (MODEL_SPEC §5.5, §7.1): the CUDA side of
// backend::cpu::expert, routed_experts and moe_sum (backend/ops.h ExpertParams, RoutedExpertsParams, MoeSumParams).
// Activations are bf16 arrays in kReference (holding the CPU's bf16-rounded values) and f32 arrays in kF32.
//
// The routed path here is the general correctness path (any format, any T, both modes); the fast reference-mode
// MXFP4 decode path is kernels/moe (sm90_mxfp4_moe_decode).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/common/stream.h"
#include "backend/cuda/common/weights.h"
#include "backend/ops.h"

namespace dsv4::cuda {

// SwiGLU glue: u1 = min(u1, limit); u3 = clamp(u3, ±limit) (limit <= 0: no clamp); a = silu(u1)·u3 in f32;
// a *= route_w[row] if given; a stored bf16 (kReference) / f32 (kF32). a may alias u1 or u3.
struct SwigluArgs {
    const void* u1 = nullptr;       // [rows, inter]
    const void* u3 = nullptr;       // [rows, inter]
    int64_t rows = 0, inter = 0;
    const float* route_w = nullptr; // [rows] or null
    float limit = 10.0f;
    void* a = nullptr;              // [rows, inter]
};
Status sm90_swiglu(backend::Precision p, const SwigluArgs& a, StreamHandle stream);

// One dense expert (the shared expert): y = w2(swiglu(w1 x, w3 x)) as backend::cpu::expert, any format.
struct ExpertArgs {
    const void* x = nullptr;         // [T, D] bf16 (kReference) / f32 (kF32), 16-byte aligned
    int64_t tokens = 0;
    DeviceWeightView w1, w2, w3;     // w1, w3 [inter, D]; w2 [D, inter]
    const float* route_w = nullptr;  // [T] or null
    float limit = 10.0f;
    void* y = nullptr;               // [T, D] bf16 (kReference) / f32 (kF32)
    void* workspace = nullptr;       // sm90_expert_workspace_bytes(), 256-byte aligned
    size_t workspace_bytes = 0;
};
size_t sm90_expert_workspace_bytes(backend::Precision p, int64_t tokens, const DeviceWeightView& w1,
                                   const DeviceWeightView& w2);
Status sm90_expert(backend::Precision p, const ExpertArgs& a, StreamHandle stream);

// Device array element: one routed expert's three weights (w1, w3 [inter, dim]; w2 [dim, inter]). The kernels
// read formats and pointers from device memory; the launcher cannot check them.
struct DeviceExpertWeights {
    DeviceWeightView w1, w2, w3;
};

// All routed experts of a layer (backend::cpu::routed_experts): out[t, k] = expert idx[t,k] applied to x[t] with
// routing weight weights[t,k], f32 [T, K, D] in both modes (bf16 values in kReference). idx < 0 or >= n_experts:
// a zero row. One block per (pick, 128 output rows), weights decoded in registers, the pick's activations (act_quant
// codes in kReference for FP8 / MXFP4 weights) in shared memory; sums in the CPU's order. No host synchronisation.
// dim and inter: multiples of 128 in kReference, of 32 in kF32.
struct RoutedExpertsArgs {
    const void* x = nullptr;  // [T, D] bf16 / f32
    int64_t tokens = 0, k = 0, n_experts = 0, dim = 0, inter = 0;
    const DeviceExpertWeights* experts = nullptr;  // device array [E]
    const int32_t* idx = nullptr;                  // [T, K]
    const float* weights = nullptr;                // [T, K]
    float limit = 10.0f;
    float* out = nullptr;                          // [T, K, D]
    void* workspace = nullptr;                     // sm90_routed_experts_workspace_bytes(), 256-byte aligned
    size_t workspace_bytes = 0;
};
size_t sm90_routed_experts_workspace_bytes(backend::Precision p, int64_t tokens, int64_t k, int64_t dim,
                                           int64_t inter);
Status sm90_routed_experts(backend::Precision p, const RoutedExpertsArgs& a, StreamHandle stream);

// backend::cpu::moe_sum: y = Σ over the K picks in ascending expert index (ties in pick order) of expert_out (f32)
// + shared; bf16(y) in kReference (shared bf16), f32 in kF32 (shared f32). shared may be null. K <= 64.
struct MoeSumArgs {
    const float* expert_out = nullptr;  // [T, K, D]
    const int32_t* idx = nullptr;       // [T, K]
    const void* shared = nullptr;       // [T, D] or null
    int64_t tokens = 0, k = 0, dim = 0;
    void* y = nullptr;                  // [T, D]
};
Status sm90_moe_sum(backend::Precision p, const MoeSumArgs& a, StreamHandle stream);

}  // namespace dsv4::cuda
