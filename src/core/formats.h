// Scalar number formats of DeepSeek-V4 checkpoints and reference numerics: bf16, f16, FP8 e4m3 (e4m3fn: max 448,
// no inf, 0x7f/0xff NaN), UE8M0 (2^(byte-127), 0xff NaN), FP4 e2m1 (bit 3 sign; magnitudes 0,.5,1,1.5,2,3,4,6).
// Packed layouts (MXFP4, NVFP4, FP8 128x128 blocks) build on these in core/quant_formats.h.
// All encoders round to nearest, ties to even (RNE), like PyTorch's casts.
#pragma once

#include <cstdint>

namespace dsv4 {

float bf16_to_f32(uint16_t bits);
uint16_t f32_to_bf16(float x);  // RNE; NaN stays NaN
float round_bf16(float x);       // f32 -> bf16 -> f32

float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float x);  // RNE; overflow -> inf

float e4m3_to_f32(uint8_t bits);
// RNE. With saturate, |x| > 448 (inf included) becomes ±448: what the reference gets after its clamp, and what
// PyTorch 2.x's .to(float8_e4m3fn) does (checked bit for bit on 3M values with torch 2.15). Without, a value that
// rounds past 448 becomes NaN (the non-saturating e4m3fn convention). NaN -> 0x7f.
uint8_t f32_to_e4m3(float x, bool saturate = true);

float e8m0_to_f32(uint8_t bits);  // 2^(bits-127); 0xff -> NaN
// The UE8M0 byte of a power of two 2^e, e in [-127, 127]; callers pass exponents they computed.
uint8_t e8m0_from_exponent(int e);

float e2m1_to_f32(uint8_t code);  // low 4 bits used
uint8_t f32_to_e2m1(float x);     // RNE on the e2m1 grid, saturating at ±6; returns a 4-bit code

}  // namespace dsv4
