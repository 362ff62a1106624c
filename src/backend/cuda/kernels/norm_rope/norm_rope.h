// Norms and rotary embedding on the GPU (MODEL_SPEC §4, §5.4.1, §5.4.2) — the CUDA side of backend::cpu::rmsnorm,
// q_head_norm and rope, with the same arithmetic (docs/kernels/cuda-backend.md).
//
// Activations are device arrays of bf16 in Precision::kReference (every value the reference holds in bf16) and
// of f32 in Precision::kF32; rows are 16-byte aligned (dims multiples of 8). Launches are asynchronous on `stream`.
#pragma once

#include <cstdint>

#include "backend/cuda/common/stream.h"
#include "backend/cuda/common/weights.h"
#include "backend/ops.h"

namespace dsv4::cuda {

// y = w · (x · rsqrt(mean(x²) + eps)), f32 math with the sum of squares in f64 as the CPU reference; kReference
// rounds y to bf16. weight: bf16 or f32 [dim], or empty (unweighted).
struct RmsNormArgs {
    const void* x = nullptr;  // [rows, dim]
    int64_t rows = 0, dim = 0;  // dim % 8 == 0, dim <= 8192
    DeviceWeightView weight;
    float eps = 1e-6f;
    void* y = nullptr;  // [rows, dim] (may alias x)
    // Optional (kReference, dim % 128 == 0): y's e4m3 codes [rows, dim] and f32 scales [rows, dim / 128] for the W8A8
    // linears that read it, the bits sm90_act_quant_e4m3 (block 128) gives on y — the quantisation fused into the
    // norm's launch. Both or neither.
    uint8_t* codes = nullptr;
    float* scales = nullptr;
};
Status sm90_rmsnorm(backend::Precision precision, const RmsNormArgs& a, StreamHandle stream);

// Interleaved RoPE on the 64 channels [offset, offset+64) of each vector, at the token's position
// (θ_i = f32(pos)·f_i; cos/sin of θ rounded from f64; f32 complex product; kReference rounds to bf16).
struct RopeArgs {
    void* x = nullptr;               // [tokens, vecs, vec_stride], in place
    int64_t tokens = 0, vecs = 1, vec_stride = 0, offset = 0;  // offset even, offset + 64 <= vec_stride
    const int64_t* positions = nullptr;  // device [tokens]
    backend::RopeFreqs freqs;
    bool inverse = false;            // conjugate rotation (output de-rotation)
};
Status sm90_rope(backend::Precision precision, const RopeArgs& a, StreamHandle stream);

// The per-head unweighted q RMSNorm (kReference: the reference's bf16 steps — bf16(q²) summed in f32, bf16(mean),
// bf16(mean + eps), bf16(rsqrt), bf16(q·rs); kF32: f64 sum of squares, f32 product), optionally fused with RoPE on
// the head's last 64 channels (the q path does both back to back; the unfused composition is the test's reference).
struct QHeadNormRopeArgs {
    void* q = nullptr;  // [tokens, heads, head_dim], in place
    int64_t tokens = 0, heads = 0, head_dim = 512;  // head_dim % 8 == 0, 64 <= head_dim <= 1024
    float eps = 1e-6f;
    bool rope = true;
    const int64_t* positions = nullptr;  // device [tokens] (rope only)
    backend::RopeFreqs freqs;
};
Status sm90_q_head_norm_rope(backend::Precision precision, const QHeadNormRopeArgs& a, StreamHandle stream);

}  // namespace dsv4::cuda
