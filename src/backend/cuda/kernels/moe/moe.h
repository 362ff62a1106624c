// The routed experts of one MoE layer at decode shapes (MODEL_SPEC §5.5, §7.1): W4A8 — activations quantised to
// e4m3 with per-128 UE8M0 scales, MXFP4 expert weights (e2m1 + UE8M0 per 32) as shipped (or NVFP4 / FP8-block
// experts through the same kernels, MoeWeightFormat), f32 accumulation, SwiGLU
// with clamp, the routing weight multiplied in before w2, and the per-token sum over the K picks in ascending
// expert index (f32), plus the shared expert's output, rounded once to bf16. The CPU composition it matches is
// backend::cpu::routed_experts followed by backend::cpu::moe_sum in kReference.
//
// No host synchronisation (CUDA-graph capturable): group tokens by expert and quantise x; then gate/up GEMM +
// SwiGLU + quantisation of the hidden activations and down GEMM + ordered combine, either in one persistent kernel
// fed by TMA bulk copies (moe_ring.cu) or in two register-streaming launches (moe.cu). docs/kernels/moe.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/cuda/common/stream.h"
#include "backend/cuda/common/weights.h"
#include "backend/cuda/kernels/router/router.h"
#include "dsv4/status.h"

namespace dsv4::cuda {

// Device pointers of one routed expert's MXFP4 weights exactly as shipped (16-byte aligned).
struct Mxfp4ExpertPtrs {
    const uint8_t* w1 = nullptr;   // gate [I, D/2] packed e2m1 (low nibble = even column)
    const uint8_t* w1s = nullptr;  // [I, D/32] UE8M0
    const uint8_t* w3 = nullptr;   // up   [I, D/2]
    const uint8_t* w3s = nullptr;  // [I, D/32]
    const uint8_t* w2 = nullptr;   // down [D, I/2]
    const uint8_t* w2s = nullptr;  // [D, I/32]
};

// NVFP4 experts (NVIDIA ModelOpt checkpoints): value = (e2m1 · e4m3 scale) · global, as nvfp4_dequant_row
// (core/quant_formats.h). The global scales are device pointers to the checkpoint's f32 scalars (weight_scale_2).
struct Nvfp4ExpertPtrs {
    const uint8_t* w1 = nullptr;   // gate [I, D/2] packed e2m1 (low nibble = even column), 16-byte aligned
    const uint8_t* w1s = nullptr;  // [I, D/16] e4m3, 2-byte aligned
    const float* w1g = nullptr;    // [1] f32
    const uint8_t* w3 = nullptr;   // up   [I, D/2]
    const uint8_t* w3s = nullptr;  // [I, D/16]
    const float* w3g = nullptr;    // [1]
    const uint8_t* w2 = nullptr;   // down [D, I/2]
    const uint8_t* w2s = nullptr;  // [D, I/16]
    const float* w2g = nullptr;    // [1]
};

// FP8 block experts (DeepSeek base checkpoints, MODEL_SPEC §9.6): value = e4m3 · 2^(s - 127), one UE8M0 s per
// 128x128 block, as fp8_block_dequant_row.
struct Fp8BlockExpertPtrs {
    const uint8_t* w1 = nullptr;   // gate [I, D] e4m3, 16-byte aligned
    const uint8_t* w1s = nullptr;  // [I/128, D/128] UE8M0
    const uint8_t* w3 = nullptr;   // up   [I, D]
    const uint8_t* w3s = nullptr;  // [I/128, D/128]
    const uint8_t* w2 = nullptr;   // down [D, I]
    const uint8_t* w2s = nullptr;  // [D/128, I/128]
};

// Which expert table the kernels read: only the weight load + conversion stage differs (docs/kernels/moe.md).
// kMXFP4Repacked: MXFP4 experts whose packed words were passed through mxfp4_repack_word once (mxfp4_repacked.h:
// bits permuted inside each 32-bit word, scales unchanged) — the same values, converted in fewer instructions.
enum class MoeWeightFormat : uint8_t { kMXFP4, kNVFP4, kFP8Block, kMXFP4Repacked };
const char* moe_weight_format_name(MoeWeightFormat f);

// Routing in the decode path's first launch (MoeDecodeArgs::route): the router's gate GEMV and selection, with
// sm90_router_gate_select's arithmetic (the same logits, picks and weights bit for bit), in the launch that groups the
// picks and quantises x — three launches per MoE layer instead of four (the router's, the prepare's and these two).
// One token runs on the router's own 16-CTA cluster, the prepare's work after its barrier: the engine's form at
// batch 1. For 2-8 tokens the gate is spread over ⌈E / 8⌉ blocks, the last to arrive selecting and grouping: measured
// slower than the four launches in the decode graph (docs/kernels/moe.md, "Routing in the first launch"), so the
// engine routes those separately (GpuModel::moe_route_max_rows).
constexpr int64_t kMoeRouteMaxTokens = 8, kMoeRouteMaxDim = 12288;
struct MoeRoute {
    DeviceWeightView gate;        // bf16 [E, D], 16-byte aligned
    RouterSelectArgs select;      // bias or hash table, scale; idx / weights: the call's idx / route_w (logits unused)
    float* logits = nullptr;      // f32 [T, E]: the gate's output, written by the launch (its scratch)
    int32_t* arrivals = nullptr;  // one int, zero before the first launch; each launch leaves it zero
};
// Whether the route takes this gate (bf16 [E, D], D a multiple of 256 up to kMoeRouteMaxDim: x's rows are staged in
// shared memory).
bool moe_route_fits(int64_t dim, const DeviceWeightView& gate);

struct MoeDecodeArgs {
    const void* x = nullptr;                // bf16 [T, D]
    const int32_t* idx = nullptr;           // [T, K] expert ids (router output; distinct within a token)
    const float* route_w = nullptr;         // [T, K] routing weights (already × routed_scale)
    // Or the routing itself, in the first launch, which then writes idx / route_w (T <= kMoeRouteMaxTokens; the
    // routing buffers must stay the same between calls through one workspace: the arrival counter is per buffer).
    const MoeRoute* route = nullptr;
    // The expert weights: `format` names the one table that is set (device arrays [E]; the others stay null).
    MoeWeightFormat format = MoeWeightFormat::kMXFP4;
    const Mxfp4ExpertPtrs* experts = nullptr;          // kMXFP4, kMXFP4Repacked
    const Nvfp4ExpertPtrs* nvfp4_experts = nullptr;    // kNVFP4
    const Fp8BlockExpertPtrs* fp8_experts = nullptr;   // kFP8Block
    const void* shared = nullptr;           // bf16 [T, D] shared-expert output, or null
    // Or the shared expert itself, run inside the launches: a device pointer to one FP8-block expert of the routed
    // experts' shape ([I, D] w1 / w3, [D, I] w2; V4's shared experts). Its tokens are all T with weight 1; its bf16
    // output is added after the routed sum exactly where `shared` would be. At most one of the two; not with
    // tma_ring.
    const Fp8BlockExpertPtrs* shared_expert = nullptr;
    void* y = nullptr;                      // bf16 [T, D]
    int64_t tokens = 0, k = 0, n_experts = 0, dim = 0, inter = 0;  // T, K, E, D, I
    float limit = 10.0f;                    // swiglu_limit; <= 0 disables the clamp
    void* workspace = nullptr;              // sm90_mxfp4_moe_decode_workspace_bytes() bytes, 256-byte aligned
    size_t workspace_bytes = 0;
    // false (default): the three-launch register-streaming kernels. true: sm90_moe_prepare + the persistent TMA-ring
    // expert kernel (two launches) where the shape fits its shared-memory ring — slower so far (docs/kernels/moe.md),
    // kept for bench/moe and its test while it is being developed. MXFP4 only.
    bool tma_ring = false;
    // kMXFP4Repacked only: the register kernels feed the converted e4m3 weights to FP8 wgmma (mxfp4_wgmma.cuh)
    // instead of f16 mma.sync. Fewer instructions per weight; the tensor core's FP8 sums make it the prefill MoE's
    // numerics class (rel_l2 of a few 1e-3 against the CPU) instead of the mma.sync path's mostly bit-exact one.
    bool fp8_wgmma = false;
};

// Scratch the three launches share (token lists, quantised activations, per-pick outputs, counters).
size_t sm90_mxfp4_moe_decode_workspace_bytes(int64_t tokens, int64_t k, int64_t n_experts, int64_t dim,
                                             int64_t inter);
// T in 1..256, D % 512 == 0, I % 512 == 0, E <= 1024, K <= 16. Any MoeWeightFormat (the name is historical).
Status sm90_mxfp4_moe_decode(const MoeDecodeArgs& a, StreamHandle stream);

// The routing and matrix shape rules both MoE launchers share (decode, moe_prefill): 1 <= K <= 16, K <= E <= 1024, D
// and I positive multiples of `dim_multiple` up to 2^20. Messages start with `op`.
Status check_moe_shape(const MoeDecodeArgs& a, const std::string& op, int64_t dim_multiple);

// Host-side checks of an expert table before it is uploaded (the launcher cannot read the device copy): every
// weight and scale pointer (and NVFP4 global pointer) set, weights 16-byte aligned, NVFP4 scales 2-byte aligned.
// `what` names the table in the message (e.g. the layer). No GPU needed.
Status check_moe_expert_table(const Mxfp4ExpertPtrs* host, int64_t n_experts, const std::string& what);
Status check_moe_expert_table(const Nvfp4ExpertPtrs* host, int64_t n_experts, const std::string& what);
Status check_moe_expert_table(const Fp8BlockExpertPtrs* host, int64_t n_experts, const std::string& what);

}  // namespace dsv4::cuda
