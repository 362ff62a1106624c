// The MoE router's selection on the GPU (MODEL_SPEC §5.5) — the CUDA side of backend::cpu::router after its f32
// gate GEMM (which runs on sm90_bf16_gemm_f32, kernels/embed_head): sqrt-softplus scores, top-K of scores + bias
// (ties to the lower expert) or the hash table, weights = scores[idx] / Σ · routed_scale. f32 in both modes.
#pragma once

#include <cstdint>
#include <string>

#include "backend/cuda/common/stream.h"
#include "backend/cuda/common/weights.h"

namespace dsv4::cuda {

// An expert id from tid2eid or a token id outside its table gives idx -1 and weight 0 (the tables are checked when
// the model loads; the kernel only refuses to read out of bounds).
struct RouterSelectArgs {
    const float* logits = nullptr;     // [T, E] gate(x), f32
    int64_t tokens = 0, n_experts = 0, k = 0;  // E <= 1024, k <= 16
    DeviceWeightView bias;             // f32 [E]; empty for hash routing
    const int64_t* tid2eid = nullptr;  // device [vocab, k] (hash layers)
    int64_t vocab = 0;
    const int32_t* token_ids = nullptr;  // device [T] (hash layers)
    float routed_scale = 1.5f;
    float* scores = nullptr;           // [T, E] (may be null)
    int32_t* idx = nullptr;            // [T, K]
    float* weights = nullptr;          // [T, K]
};
Status sm90_router_select(const RouterSelectArgs& a, StreamHandle stream);
// The selection arguments' checks every launcher that selects runs (messages start with `op`).
Status check_router_select(const RouterSelectArgs& a, const std::string& op);

// The gate and the selection in one launch, for decode batches (reference numerics): logits = x · gateᵀ with bf16 x
// and gate and f32 sums (the order differs from the GEMM's: the last bits of a logit may), then as
// sm90_router_select (whose `logits` field it ignores). One cluster of 16 CTAs per token.
struct RouterGateArgs {
    const void* x = nullptr;  // bf16 [T, D], 16-byte aligned
    int64_t dim = 0;          // D, a multiple of 256 up to 16384
    DeviceWeightView gate;    // bf16 [E, D]
    float* logits = nullptr;  // [T, E] the gate's output, or null (not stored)
};
bool router_gate_select_fits(int64_t dim, const DeviceWeightView& gate);
Status sm90_router_gate_select(const RouterGateArgs& g, const RouterSelectArgs& a, StreamHandle stream);

}  // namespace dsv4::cuda
