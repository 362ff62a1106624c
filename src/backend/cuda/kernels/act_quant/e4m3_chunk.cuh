// The per-chunk e4m3 block quantisation shared by the kernels that quantise activations (act_quant.cuh's kernel and
// the norm that writes its output's codes: norm_rope.cuh). Device functions only, so that any kernel
// header may include it (act_quant.cuh defines kernels and belongs to act_quant.cu alone).
#pragma once

#include <cstdint>

#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/warp_ops.cuh"

namespace dsv4::cuda {

inline constexpr float kE4m3ChunkMax = 448.0f, kE4m3ChunkAmaxFloor = 1e-4f;

// One thread's 8 consecutive values of an e4m3 quantisation block held by `group` aligned consecutive lanes (block
// = 8·group values; every lane of the warp must call it, `v` zero on lanes without values): the block's UE8M0
// exponent e (amax over the group, floored, over 448) and the thread's 8 codes of v·2^-e (exact scaling, clamped
// to ±448, RNE) in channel order, four per word. Every kernel that quantises activations to e4m3 blocks
// takes this one function, so their codes and scales are the same bits (the fused norm's against act_quant's).
struct E4m3Chunk {
    uint32_t packed[2];
    int e;
};
__device__ __forceinline__ E4m3Chunk e4m3_quantize_chunk(const float (&v)[8], int group) {
    float amax = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
    amax = group_max(amax, group);
    E4m3Chunk r{{0, 0}, ue8m0_exponent_for(amax, kE4m3ChunkAmaxFloor, kE4m3ChunkMax)};
    const float inv = exp2_int(-r.e);  // x·2^-e is exact: e >= -22 here
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const float q = fminf(fmaxf(__fmul_rn(v[i], inv), -kE4m3ChunkMax), kE4m3ChunkMax);
        r.packed[i / 4] |= uint32_t(f32_to_e4m3(q)) << (8 * (i % 4));
    }
    return r;
}

}  // namespace dsv4::cuda
