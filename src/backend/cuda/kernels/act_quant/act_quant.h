// Activation quantisers of the reference numerics on the GPU (MODEL_SPEC §7.1–7.3), bit-exact to backend::cpu
// act_quant / fp4_act_quant / hadamard128: UE8M0 per-128 (GEMM inputs) and per-64 (KV simulation) e4m3
// quantisation, the e2m1 (FP4) simulation at block 32, and the Hadamard-128 rotation.
#pragma once

#include <cstdint>

#include "backend/cuda/common/stream.h"
#include "backend/ops.h"

namespace dsv4::cuda {

// Per row, per `block` channels: amax = max(|x|, 1e-4); s = 2^ceil(log2(amax/448)); q = e4m3(clamp(x/s)).
// x is bf16 (the reference quantises bf16 tensors). Outputs may each be null.
struct ActQuantArgs {
    const void* x = nullptr;        // bf16 [rows, cols]
    int64_t rows = 0, cols = 0;     // cols % block == 0
    int block = 128;                // 128 or 64
    uint8_t* codes = nullptr;       // [rows, cols] e4m3
    float* scale = nullptr;         // [rows, cols/block] s
    uint8_t* scale_e8m0 = nullptr;  // [rows, cols/block]
    void* x_sim = nullptr;          // bf16 [rows, cols] q·s (may alias x)
};
Status sm90_act_quant_e4m3(const ActQuantArgs& a, StreamHandle stream);

// Per row, per 32 channels: amax = max(|x|, 6·2^-126); s = 2^ceil(log2(amax/6)); q = e2m1(clamp(x/s, ±6)).
struct Fp4QuantArgs {
    const void* x = nullptr;          // bf16 [rows, cols]
    int64_t rows = 0, cols = 0;       // cols % 32 == 0
    uint8_t* codes_packed = nullptr;  // [rows, cols/2], low nibble = even element
    float* scale = nullptr;           // [rows, cols/32]
    uint8_t* scale_e8m0 = nullptr;    // [rows, cols/32]
    void* x_sim = nullptr;            // bf16 [rows, cols] (may alias x)
};
Status sm90_fp4_quant_e2m1(const Fp4QuantArgs& a, StreamHandle stream);

// y = (x · H128)·128^-½ (Sylvester order, f32 butterflies in the CPU's order); kReference: bf16 in and out,
// kF32: f32 in and out.
struct HadamardArgs {
    const void* x = nullptr;  // [rows, 128]
    int64_t rows = 0;
    void* y = nullptr;        // [rows, 128] (may alias x)
};
Status sm90_hadamard128(backend::Precision precision, const HadamardArgs& a, StreamHandle stream);

}  // namespace dsv4::cuda
