// Packed weight layouts built on the scalar formats of core/formats.h (MODEL_SPEC §9.6):
//
//   MXFP4 (OCP MX, DeepSeek's routed experts): W [rows, cols] as e2m1 codes packed two per byte along a row —
//     LOW nibble = even column, HIGH nibble = odd column — bytes [rows, cols/2]; one UE8M0 scale per 32
//     consecutive inputs of a row, scales [rows, cols/32]. value = e2m1 * 2^(scale - 127).
//   NVFP4 (NVIDIA ModelOpt checkpoints): the same nibble packing, one e4m3 scale per 16 inputs, scales
//     [rows, cols/16], plus one f32 global scale per tensor. value = (e2m1 * e4m3_scale) * global_scale.
//   FP8 blocks (DeepSeek's dense linears): e4m3 bytes [rows, cols], one UE8M0 scale per 128x128 block, scales
//     [ceil(rows/128), ceil(cols/128)]. value = e4m3 * 2^(scale - 127).
//
// Encoders take f32 weights and pick scales the way DeepSeek's UE8M0 quantisers do (a power of two making the
// group's amax fit the code range: 2^ceil(log2(amax / max_code))). Decoders are exact (every product above is
// exactly representable in f32, except the NVFP4 multiply by the global scale, which rounds once).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dsv4/status.h"

namespace dsv4 {

inline constexpr int64_t kMxfp4GroupSize = 32;
inline constexpr int64_t kNvfp4GroupSize = 16;
inline constexpr int64_t kFp8BlockSize = 128;
inline constexpr float kE4m3Max = 448.0f;
inline constexpr float kE2m1Max = 6.0f;

// ---- e2m1 nibble packing (MXFP4 and NVFP4 share it) ----

// The e2m1 code of element i of a packed row: low nibble of byte i/2 for even i, high nibble for odd i.
inline uint8_t fp4_code_at(const uint8_t* packed, int64_t i) {
    const uint8_t byte = packed[i >> 1];
    return (i & 1) ? static_cast<uint8_t>(byte >> 4) : static_cast<uint8_t>(byte & 0x0f);
}
// codes.size() even; packed.size() == codes.size() / 2. Only the low 4 bits of each code are used.
void fp4_pack(std::span<const uint8_t> codes, std::span<uint8_t> packed);
void fp4_unpack(std::span<const uint8_t> packed, std::span<uint8_t> codes);

// The smallest e with x <= 2^e for a positive finite x (exact, including f32 subnormals).
int ceil_log2(float x);
// The UE8M0 exponent DeepSeek's quantisers give a group: ceil(log2(max(amax, floor) / max_code)), with the
// division in f32 as in the reference (fp8: floor 1e-4, max_code 448; fp4: floor 6 * 2^-126, max_code 6).
int ue8m0_exponent_for(float amax, float amax_floor, float max_code);

// ---- MXFP4 ----

struct Mxfp4Tensor {
    int64_t rows = 0, cols = 0;
    std::vector<uint8_t> packed;  // [rows, cols/2]
    std::vector<uint8_t> scales;  // [rows, cols/32] UE8M0
};

// One row: packed [cols/2], scales [cols/32] -> out [cols]. cols must be a multiple of 32 (unchecked).
void mxfp4_dequant_row(const uint8_t* packed, const uint8_t* scales, int64_t cols, float* out);
// w [rows, cols] f32, cols % 32 == 0, finite values. Per group: e = ceil(log2(max(amax, 6*2^-126) / 6)),
// code = e2m1(w / 2^e) (RNE, saturating at 6).
Result<Mxfp4Tensor> mxfp4_encode(std::span<const float> w, int64_t rows, int64_t cols);
// out [rows, cols]; sizes are checked.
Status mxfp4_decode(std::span<const uint8_t> packed, std::span<const uint8_t> scales, int64_t rows, int64_t cols,
                    std::span<float> out);

// ---- NVFP4 ----

struct Nvfp4Tensor {
    int64_t rows = 0, cols = 0;
    std::vector<uint8_t> packed;  // [rows, cols/2]
    std::vector<uint8_t> scales;  // [rows, cols/16] e4m3
    float global_scale = 1.0f;
};

// One row: packed [cols/2], scales [cols/16] -> out [cols]. cols must be a multiple of 16 (unchecked).
void nvfp4_dequant_row(const uint8_t* packed, const uint8_t* scales, float global_scale, int64_t cols, float* out);
// w [rows, cols] f32, cols % 16 == 0, finite. As ModelOpt: global = amax / (6 * 448) (1 for an all-zero tensor);
// per group scale = e4m3(amax16 / 6 / global); code = e2m1(w / (scale * global)).
Result<Nvfp4Tensor> nvfp4_encode(std::span<const float> w, int64_t rows, int64_t cols);
Status nvfp4_decode(std::span<const uint8_t> packed, std::span<const uint8_t> scales, float global_scale,
                    int64_t rows, int64_t cols, std::span<float> out);

// ---- FP8 e4m3 with UE8M0 128x128 block scales ----

struct Fp8BlockTensor {
    int64_t rows = 0, cols = 0;
    std::vector<uint8_t> data;    // [rows, cols] e4m3
    std::vector<uint8_t> scales;  // [ceil(rows/128), ceil(cols/128)] UE8M0
};

inline int64_t fp8_block_count(int64_t n) { return (n + kFp8BlockSize - 1) / kFp8BlockSize; }
// One row: data [cols] e4m3, block_scales [ceil(cols/128)] = the scale row of this row's block row.
void fp8_block_dequant_row(const uint8_t* data, const uint8_t* block_scales, int64_t cols, float* out);
// w [rows, cols] f32, finite. Per block: e = ceil(log2(max(amax, 1e-4) / 448)), code = e4m3(w / 2^e) (RNE).
Result<Fp8BlockTensor> fp8_block_encode(std::span<const float> w, int64_t rows, int64_t cols);
Status fp8_block_decode(std::span<const uint8_t> data, std::span<const uint8_t> scales, int64_t rows, int64_t cols,
                        std::span<float> out);

// ---- MXFP4 -> FP8 blocks (MODEL_SPEC §9.6, the official converter's --expert-dtype fp8) ----
//
// Per 128x128 block the new UE8M0 exponent is the largest of the block's (up to 4 x 128) MXFP4 sub-scales minus 6
// (clamped at 2^-127); each value becomes e2m1 * 2^(sub - new) in e4m3, at most 6 * 2^6 = 384 < 448. The result is
// exact whenever no sub-scale lies more than 14 binades below its block's largest (then 0.5 * 2^(sub-new) is still
// an e4m3 subnormal); `inexact`, when given, receives the number of values that had to be rounded (0 on every
// real checkpoint). A NaN sub-scale (0xff) is an error.
Result<Fp8BlockTensor> mxfp4_to_fp8_blocks(std::span<const uint8_t> packed, std::span<const uint8_t> scales,
                                           int64_t rows, int64_t cols, int64_t* inexact = nullptr);

}  // namespace dsv4
