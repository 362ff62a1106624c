// Consumers of a K-split FP8 GEMM's partial sums (Fp8GemmPartials, gemm_fp8.h): a kernel that reads the GEMM's
// output reduces the partials itself as its first step, exactly as sm90_fp8_gemm_reduce_kernel would have stored
// them, and the reduction's launch goes away.
#pragma once

#include <cstddef>

#include "backend/cuda/common/numerics.cuh"

namespace dsv4::cuda {

// Values [i, i + N) of the GEMM's bf16 output (N = 4 or 8, i a multiple of 4): the f32 partials of splits 0, 1, ...
// summed in split order (IEEE adds, sm90_fp8_gemm_reduce_kernel's order), rounded to bf16, returned as floats.
// partial: [splits][n_out] f32, 16-byte aligned. Four splits' loads are issued before any is added.
template <int N>
__device__ __forceinline__ void reduce_partials(const float* __restrict__ partial, int splits, size_t n_out, size_t i,
                                                float (&v)[N]) {
    static_assert(N == 4 || N == 8);
    constexpr int kQuads = N / 4;
    float sum[N];
    for (int z0 = 0; z0 < splits; z0 += 4) {
        float4 part[4][kQuads];
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
            for (int q = 0; q < kQuads; ++q)
                if (z0 + u < splits)
                    part[u][q] = *reinterpret_cast<const float4*>(partial + size_t(z0 + u) * n_out + i + 4 * q);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            if (z0 + u >= splits) break;
#pragma unroll
            for (int q = 0; q < kQuads; ++q) {
                const float add[4] = {part[u][q].x, part[u][q].y, part[u][q].z, part[u][q].w};
#pragma unroll
                for (int c = 0; c < 4; ++c) sum[4 * q + c] = z0 + u == 0 ? add[c] : __fadd_rn(sum[4 * q + c], add[c]);
            }
        }
    }
#pragma unroll
    for (int c = 0; c < N; ++c) v[c] = round_bf16(sum[c]);
}

}  // namespace dsv4::cuda
