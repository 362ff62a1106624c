// y = W·x on the GPU for every weight format and both numerics modes: the CUDA side of backend::cpu::linear
// (backend/ops.h LinearParams, MODEL_SPEC §7.1).
//
// kReference (activations bf16 on the GPU):
//   FP8 weight   W8A8: sm90_act_quant_e4m3 (128) then sm90_fp8_gemm_block128; bf16 result (also for
//                LinearOut::kF32, as the CPU: its quantised path always rounds; then written as f32 values).
//                From kFp8LinearGemmMinTokens rows (the prefill passes) the same products through cuBLASLt: the
//                quantised input as bf16 values (q·s, act_quant's simulation output) times a bf16 copy of the
//                weight (e4m3·2^k) made per call in the workspace. Every product is exact in both, so only the f32
//                summation order differs from the CPU's (as cuBLASLt's bf16 linears); the FP8 wgmma GEMM, faster
//                still, sums inside a 128-block with a narrower accumulator and misses the official FP8 bars
//                (docs/kernels/gemm_fp8_wgmma.md).
//   MXFP4 weight W4A8: act_quant (128) then per 32-K block acc_b = Σ qa·e2m1 (f32, in the CPU's order),
//                y = Σ_b acc_b·(sa·sw), bf16 result (f32 array for LinearOut::kF32).
//   BF16 weight: f32 accumulation of bf16 x and W (cuBLASLt), kBF16 → bf16(y), kF32 → f32 y.
//   F32 weight:  f32 GEMM, output per LinearOut.
// kF32 (activations f32): W dequantised exactly, f32 products and sums (no TF32, no tensor cores), f32 out, by a
//   shared-memory tiled kernel that adds each output's products in the CPU's order with separately rounded multiply
//   and add: bit-identical to backend::cpu::linear for every format. (The tiled kernel also serves reference F32
//   weights, MXFP4, and BF16 / FP8 where the tensor-core GEMMs do not fit.)
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/common/regimes.h"
#include "backend/cuda/common/stream.h"
#include "backend/cuda/common/weights.h"
#include "backend/cuda/kernels/gemm_fp8/gemm_fp8.h"
#include "backend/ops.h"

namespace dsv4::cuda {

struct LinearArgs {
    const void* x = nullptr;       // [T, in] bf16 (kReference) or f32 (kF32), 16-byte aligned
    int64_t tokens = 0;            // T, 0..any
    DeviceWeightView w;            // [out, in]; in % 32 == 0 (kReference FP8 / MXFP4: in % 128 == 0)
    backend::LinearOut out = backend::LinearOut::kBF16;
    void* y = nullptr;             // [T, out]: kReference+kBF16 bf16, otherwise f32
    void* workspace = nullptr;     // sm90_linear_workspace_bytes() bytes, 256-byte aligned (may be null when 0)
    size_t workspace_bytes = 0;
    // Optional, read only by the W8A8 / W4A8 paths (kReference, FP8-block or MXFP4 weights): x already quantised by
    // sm90_act_quant_e4m3 in 128-blocks (codes [T, in] e4m3, scales [T, in/128]), e.g. once for the several linears
    // that read the same rows; the linear then skips its own quantisation (the same codes: the same result).
    const uint8_t* x_codes = nullptr;
    const float* x_scales = nullptr;
    // Optional (kReference, FP8-block weight, bf16 out): when the linear runs on sm90_fp8_gemm_block128 and that
    // launch splits K (decode), it stops before the reduction: y is not written, *partials holds the K-split sums in
    // the workspace (sm90_fp8_gemm_block128_partials), for a consumer that reduces them itself before anything
    // reuses the workspace. Otherwise the linear runs as usual and partials->splits is 0.
    Fp8GemmPartials* partials = nullptr;
    // Optional: a second weight of w's format and shape read against the same x, its result into y2 (a compressor's
    // wkv and wgate). Where the linear runs on the bf16 decode GEMV (kReference, BF16, 1-8 rows) both are one launch,
    // otherwise two linears one after the other; either way each output is what its weight's linear alone gives.
    DeviceWeightView w2;
    void* y2 = nullptr;
};

// From this many rows (the prefill passes; decode batches are at most 256 rows) kReference FP8-block linears run on
// cuBLASLt (header comment), when the output rows are 16-byte aligned.
inline constexpr int64_t kFp8LinearGemmMinTokens = kPrefillMinRows;

size_t sm90_linear_workspace_bytes(backend::Precision p, int64_t tokens, const DeviceWeightView& w,
                                   backend::LinearOut out);
Status sm90_linear(backend::Precision p, const LinearArgs& a, StreamHandle stream);

// The bf16 copy of an FP8-block weight [rows, cols] (cols % 8 == 0): bf16(e4m3 · 2^k), exact. out: rows·cols bf16,
// 16-byte aligned.
Status sm90_fp8_block_to_bf16(const DeviceWeightView& w, void* out, StreamHandle stream);

}  // namespace dsv4::cuda
