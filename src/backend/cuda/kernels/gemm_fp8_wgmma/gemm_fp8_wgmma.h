// The W8A8 FP8 GEMM of the reference numerics for prefill-sized token counts (MODEL_SPEC §7.1, §9.6): Hopper wgmma
// (QGMMA) on tiles of 128 tokens x 128 weight rows, fed by the bulk tensor copy engine. Same contract as
// sm90_fp8_gemm_block128 (gemm_fp8/gemm_fp8.h): weights e4m3 with UE8M0 128x128 block scales as shipped,
// activations e4m3 with one f32 power-of-two scale per token and 128 channels (sm90_act_quant_e4m3), f32
// accumulation per 128-wide K block, then y += acc · (a_scale · w_scale) in f32 over the K blocks, bf16 output.
// The CPU op it matches is backend::cpu::linear on an FP8 weight in kReference. For decode-sized token counts
// (< ~128) sm90_fp8_gemm_block128 is the better kernel: this one always computes 128-token tiles.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/common/stream.h"
#include "backend/cuda/common/weights.h"

namespace dsv4::cuda {

struct Fp8WgmmaGemmArgs {
    const uint8_t* a_codes = nullptr;  // [T, K] e4m3, 16-byte aligned (K % 128 == 0)
    const float* a_scale = nullptr;    // [T, K/128]
    int64_t tokens = 0;                // T: any count >= 0 (the last tile is guarded)
    DeviceWeightView w;                // kFP8Block [N, K], N % 128 == 0, K % 128 == 0
    void* y = nullptr;                 // bf16 [T, N] row-major
};

// Validates (format, shape, alignment) and launches on the stream; no workspace.
Status sm90_fp8_gemm_wgmma(const Fp8WgmmaGemmArgs& a, StreamHandle stream);

}  // namespace dsv4::cuda
