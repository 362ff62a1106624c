// The W8A8 FP8 GEMM of the reference numerics on the GPU (MODEL_SPEC §7.1, DeepSeek's fp8_gemm): weights e4m3 with
// UE8M0 128x128 block scales exactly as shipped, activations e4m3 with one f32 (power-of-two) scale per token and
// 128 channels (sm90_act_quant_e4m3), f32 accumulation per 128-wide K block on FP8 tensor cores, then
// y += acc · (a_scale · w_scale) in f32 over the K blocks, bf16 output. The CPU op it matches is backend::cpu::linear
// on an FP8 weight in kReference (act_quant + quantized_gemm). Up to 16 tokens (decode) it runs as the
// register-streaming sm90_fp8_gemv (gemv_fp8.cu), which splits K only inside a block: no workspace, no partials.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/common/stream.h"
#include "backend/cuda/common/weights.h"

namespace dsv4::cuda {

struct Fp8GemmArgs {
    const uint8_t* a_codes = nullptr;  // [T, K] e4m3, 16-byte aligned rows (K % 128 == 0)
    const float* a_scale = nullptr;    // [T, K/128]
    int64_t tokens = 0;                // T
    DeviceWeightView w;                // kFP8Block [N, K]; read before the programmatic wait: a model weight,
                                       // never written by the launch just before this one (common/pdl.cuh)
    void* y = nullptr;                 // bf16 [T, N]
    float* workspace = nullptr;        // split-K partial sums; sm90_fp8_gemm_workspace_bytes() bytes
    size_t workspace_bytes = 0;
};

// Token counts up to this run the register-streaming decode kernel (gemv_fp8.cu; one or two MMA column tiles of 8).
inline constexpr int64_t kFp8GemvMaxTokens = 16;

// The most K splits a launch uses (a consumer of Fp8GemmPartials may rely on it).
inline constexpr int kFp8GemmMaxSplits = 32;

// Workspace the launcher needs for T tokens and an [N, K] weight (0 when it will not split K).
size_t sm90_fp8_gemm_workspace_bytes(int64_t tokens, int64_t n, int64_t k);
Status sm90_fp8_gemm_block128(const Fp8GemmArgs& a, StreamHandle stream);

// The K-split partial sums of a launch that splits K (decode shapes above 16 tokens), left in the workspace for a
// consumer that reduces them itself as the first step of its own work: y = bf16(partial[0] + partial[1] + ... in split
// order, each an IEEE f32 add) is exactly sm90_fp8_gemm_block128's y, one launch (its reduction) fewer.
struct Fp8GemmPartials {
    const float* partial = nullptr;  // [splits][T][N] f32, in Fp8GemmArgs::workspace
    int splits = 0;                  // 0: nothing was launched (the launch would not split K)
};
// Validates as sm90_fp8_gemm_block128. When the launch would split K: runs the GEMM without its reduction (y is not
// written) and returns the partials; otherwise launches nothing and returns splits = 0 (call sm90_fp8_gemm_block128).
Status sm90_fp8_gemm_block128_partials(const Fp8GemmArgs& a, Fp8GemmPartials& out, StreamHandle stream);

}  // namespace dsv4::cuda
