// Warp-level helpers shared by several kernel families: the max over an aligned lane group (block quantisers) and
// the Hadamard-128 butterflies of a 128-vector held 4 values per lane (act_quant, the indexer key finish).
#pragma once

#include <cuda_runtime.h>

namespace dsv4::cuda {

// Max over the `group` lanes (a power of two <= 32, aligned) that share a block.
__device__ __forceinline__ float group_max(float v, int group) {
    for (int o = 1; o < group; o <<= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// (v · H128)·128^-½ of one 128-vector held by a warp, lane L holding values 4L..4L+3 (all lanes take part).
__device__ __forceinline__ void hadamard128_warp(float (&v)[4]) {
    const int lane = threadIdx.x & 31;
    // h = 1, 2 inside the lane: (a, b) -> (a + b, a - b) with a the lower index.
    float t0 = __fadd_rn(v[0], v[1]), t1 = __fsub_rn(v[0], v[1]), t2 = __fadd_rn(v[2], v[3]),
          t3 = __fsub_rn(v[2], v[3]);
    v[0] = __fadd_rn(t0, t2), v[2] = __fsub_rn(t0, t2), v[1] = __fadd_rn(t1, t3), v[3] = __fsub_rn(t1, t3);
    // h = 4 .. 64 across lanes: partner lane = lane ^ (h/4); the lower lane keeps a + b, the upper a - b.
#pragma unroll
    for (int m = 1; m < 32; m <<= 1) {
        const bool upper = lane & m;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float other = __shfl_xor_sync(0xffffffffu, v[i], m);
            v[i] = upper ? __fsub_rn(other, v[i]) : __fadd_rn(v[i], other);
        }
    }
    const float scale = __fdiv_rn(1.0f, __fsqrt_rn(128.0f));
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = __fmul_rn(v[i], scale);
}

}  // namespace dsv4::cuda
