// sm90_fp8_gemm_block128: W8A8 GEMM on FP8 tensor cores (mma.sync m16n8k32 e4m3, f32 accumulators), swap-AB:
// the weight [N, K] is the MMA's A (row-major) and the activations [T, K] its B ("col"), so small token counts
// (decode) waste no MMA rows and N tiles of 64 map onto the 128-row weight scale blocks.
//
// Block: 4 warps, tile 64 weight rows x BN tokens, K step 128 = one scale block. Each warp owns 16 weight rows x
// BN tokens. Tiles stream through a kStages-deep cp.async ring in shared memory (16-byte chunks, XOR-swizzled by
// row so ldmatrix reads are bank-conflict free). Per K block the warp zeroes a block accumulator, runs 4 MMA k-steps
// and folds it into the f32 output as y += acc · (a_scale · w_scale) — the reference's per-128 scaling order, with
// separate IEEE multiply and add (no FMA), as the CPU op rounds. K may be split across blockIdx.z for small grids;
// splits write f32 partials that sm90_fp8_gemm_reduce_kernel sums in split order.
//
// Floors (H200, measured ceilings 4.27 TB/s, FP8 dense ~1580 TFLOP/s assumed = 2x bf16): decode is the weight read,
// prefill the MMA rate. This first version uses mma.sync, not wgmma: docs/kernels/cuda-backend.md says what
// replaces it and records the measurements.
#pragma once

#include "backend/cuda/common/cp_async.cuh"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/common/swizzle.cuh"
#include "backend/cuda/kernels/gemm_fp8/gemm_fp8.h"

namespace dsv4::cuda {

struct Fp8GemmConfig {
    static constexpr int kBM = 64;       // weight rows per block (divides the 128-row scale block)
    static constexpr int kBK = 128;      // K per stage = one scale block
    static constexpr int kThreads = 128; // 4 warps x 16 weight rows
    static constexpr int kStages = 4;
    static constexpr int kMaxSplits = kFp8GemmMaxSplits;
    static constexpr int stage_bytes(int bn) { return (kBM + bn) * kBK; }
    static constexpr int smem_bytes(int bn) { return kStages * stage_bytes(bn); }
};


__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
    const unsigned s = unsigned(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* p) {
    const unsigned s = unsigned(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
}

// D = A·B + D, A 16x32 e4m3 (row), B 32x8 e4m3 (col), f32 accumulators.
__device__ __forceinline__ void mma_e4m3_16832(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// grid: (ceil(N/64), ceil(T/BN), splits). partial == nullptr: write bf16 y; else f32 partial[z][T][N].
template <int BN>
__global__ void __launch_bounds__(Fp8GemmConfig::kThreads, 2)
    sm90_fp8_gemm_block128_kernel(const uint8_t* __restrict__ w, const uint8_t* __restrict__ w_scale,
                                  const uint8_t* __restrict__ a, const float* __restrict__ a_scale, int N, int K,
                                  int T, int kb_per_split, __nv_bfloat16* __restrict__ y,
                                  float* __restrict__ partial) {
    pdl_enter(false);
    // the first stages' weight tiles are requested before the wait (below)
    using Cfg = Fp8GemmConfig;
    constexpr int NT = BN / 8;  // n8 tiles (tokens) per warp
    extern __shared__ __align__(128) uint8_t smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n0 = blockIdx.x * Cfg::kBM, t0 = blockIdx.y * BN;
    const int KB = K / Cfg::kBK;
    const int kb_begin = blockIdx.z * kb_per_split;
    const int nkb = min(KB, kb_begin + kb_per_split) - kb_begin;

    auto load_weights = [&](int stage, int kb) {
        uint8_t* sA = smem + stage * Cfg::stage_bytes(BN);
        const size_t kofs = size_t(kb) * Cfg::kBK;
        for (int c = threadIdx.x; c < Cfg::kBM * 8; c += Cfg::kThreads) {
            const int r = c >> 3, ch = c & 7, gr = n0 + r;
            cp_async16_zfill(sA + sw128_offset(r, ch), w + size_t(min(gr, N - 1)) * K + kofs + ch * 16, gr < N);
        }
    };
    auto load_activations = [&](int stage, int kb) {
        uint8_t* sB = smem + stage * Cfg::stage_bytes(BN) + Cfg::kBM * Cfg::kBK;
        const size_t kofs = size_t(kb) * Cfg::kBK;
        for (int c = threadIdx.x; c < BN * 8; c += Cfg::kThreads) {
            const int r = c >> 3, ch = c & 7, gt = t0 + r;
            cp_async16_zfill(sB + sw128_offset(r, ch), a + size_t(min(gt, T - 1)) * K + kofs + ch * 16, gt < T);
        }
    };

    // Weights are written only when a model is loaded, never by the launch before this one, so the first stages'
    // weight tiles are requested before the programmatic wait (common/pdl.cuh) and stream while the previous kernel
    // (the activation quantisation) finishes; the activations and their scales are read after it. The first
    // commit group holds every early weight tile and stage 0's activations, so cp.async's in-order group
    // completion still gives stage s both halves by the time the loop waits for group s.
#pragma unroll
    for (int s = 0; s < Cfg::kStages - 1; ++s)
        if (s < nkb) load_weights(s, kb_begin + s);
    pdl_wait();
#pragma unroll
    for (int s = 0; s < Cfg::kStages - 1; ++s) {
        if (s < nkb) load_activations(s, kb_begin + s);
        cp_async_commit();
    }

    float out[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) out[nt][i] = 0.0f;

    const uint8_t* w_scale_row = w_scale + size_t(n0 / 128) * KB;
    for (int i = 0; i < nkb; ++i) {
        cp_async_wait<Cfg::kStages - 2>();
        __syncthreads();  // stage i landed for every thread; stage i-1 is free to refill
        const int ahead = i + Cfg::kStages - 1;
        if (ahead < nkb) {
            load_weights(ahead % Cfg::kStages, kb_begin + ahead);
            load_activations(ahead % Cfg::kStages, kb_begin + ahead);
        }
        cp_async_commit();

        const uint8_t* sA = smem + (i % Cfg::kStages) * Cfg::stage_bytes(BN);
        const uint8_t* sB = sA + Cfg::kBM * Cfg::kBK;
        float acc[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[nt][j] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
            uint32_t af[4];
            ldmatrix_x4(af, sA + sw128_offset(warp * 16 + (lane & 15), ks * 2 + (lane >> 4)));
            if constexpr (NT == 1) {
                uint32_t bf[2];
                ldmatrix_x2(bf, sB + sw128_offset(lane & 7, ks * 2 + ((lane >> 3) & 1)));
                mma_e4m3_16832(acc[0], af, bf[0], bf[1]);
            } else {
#pragma unroll
                for (int np = 0; np < NT / 2; ++np) {
                    uint32_t bf[4];
                    ldmatrix_x4(bf, sB + sw128_offset(np * 16 + (lane & 7) + ((lane >> 4) << 3), ks * 2 + ((lane >> 3) & 1)));
                    mma_e4m3_16832(acc[2 * np], af, bf[0], bf[1]);
                    mma_e4m3_16832(acc[2 * np + 1], af, bf[2], bf[3]);
                }
            }
        }
        const int kb = kb_begin + i;
        const float ws = e8m0_to_f32(w_scale_row[kb]);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int t = t0 + nt * 8 + (lane & 3) * 2 + j;
                const float s = t < T ? __fmul_rn(a_scale[size_t(t) * KB + kb], ws) : 0.0f;
                out[nt][j] = __fadd_rn(out[nt][j], __fmul_rn(acc[nt][j], s));
                out[nt][j + 2] = __fadd_rn(out[nt][j + 2], __fmul_rn(acc[nt][j + 2], s));
            }
        }
    }
    cp_async_wait<0>();

    // C fragment: c0,c1 = (row g, tokens 2q, 2q+1), c2,c3 = (row g+8, same tokens); g = lane/4, q = lane%4.
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int n = n0 + warp * 16 + (lane >> 2) + (i >= 2 ? 8 : 0);
            const int t = t0 + nt * 8 + (lane & 3) * 2 + (i & 1);
            if (n < N && t < T) {
                if (partial) partial[(size_t(blockIdx.z) * T + t) * N + n] = out[nt][i];
                else y[size_t(t) * N + n] = __float2bfloat16_rn(out[nt][i]);
            }
        }
    }
}

// y[t, n] = bf16(Σ_z partial[z, t, n]), z in order.
__global__ void sm90_fp8_gemm_reduce_kernel(const float* __restrict__ partial, int splits, int64_t n_out,
                                            __nv_bfloat16* __restrict__ y) {
    pdl_enter();
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_out; i += int64_t(gridDim.x) * blockDim.x) {
        float s = partial[i];
        for (int z = 1; z < splits; ++z) s = __fadd_rn(s, partial[size_t(z) * n_out + i]);
        y[i] = __float2bfloat16_rn(s);
    }
}

}  // namespace dsv4::cuda
