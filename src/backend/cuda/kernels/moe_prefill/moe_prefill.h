// The routed experts of one MoE layer at prefill shapes (hundreds to thousands of tokens): the contract of
// sm90_mxfp4_moe_decode (moe/moe.h, MODEL_SPEC §5.5, §7.1, §9.6) — activations e4m3 per 128 with UE8M0 scales,
// MXFP4 expert weights as shipped, f32 accumulation per 128-K block, bf16 u1/u3, clamp, SwiGLU, routing weight
// before w2, bf16 hidden, per-token sum of the K picks in ascending expert index in f32 plus the shared expert,
// one bf16 rounding (backend::cpu::routed_experts + backend::cpu::moe_sum in kReference) — as compute-bound grouped
// GEMMs on Hopper FP8 wgmma, the MXFP4 weights converted to e4m3 in shared memory inside the kernel (exactly: the
// 32-block scales are folded into the e4m3 values, docs/kernels/moe_prefill.md). Five launches, no host sync.
//
// Numerics: the products are exact and the per-128-K promotion is the reference's, but Hopper's FP8 wgmma sums a
// K block with a narrower internal accumulator than f32: ~10 % of bf16 outputs one ulp away from the CPU reference
// (the class of sm90_fp8_gemm_wgmma).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/common/stream.h"
#include "backend/cuda/kernels/moe/moe.h"
#include "dsv4/status.h"

namespace dsv4::cuda {

// Scratch of the five launches (sorted pick list, gathered e4m3 activations, hidden activations, per-pick outputs,
// tile table, counters): about T·K·(D·3 + I·3.1) bytes (≈ 0.7 GB at 8192 tokens, V4-Flash).
size_t sm90_mxfp4_moe_prefill_workspace_bytes(int64_t tokens, int64_t k, int64_t n_experts, int64_t dim,
                                              int64_t inter);

// The GEMMs' M tile: kAuto takes 256 rows when the experts average more than 128 picks (T·K > 128·E), where one
// converted weight tile then serves up to 256 rows, else 128 (fewer registers and a deeper ring). Both give the same
// bits (a row's result depends on its own activations only); k128 / k256 force one (tests, benchmarks).
enum class MoePrefillTile : uint8_t { kAuto, k128, k256 };

// Same arguments as the decode kernel (a.register_streaming is ignored). T >= 1 with T·K < 2^26, D and I positive
// multiples of 128, 1 <= K <= 16, K <= E <= 1024; workspace 256-byte aligned; x 16-byte aligned.
Status sm90_mxfp4_moe_prefill(const MoeDecodeArgs& a, StreamHandle stream, MoePrefillTile tile = MoePrefillTile::kAuto);

}  // namespace dsv4::cuda
