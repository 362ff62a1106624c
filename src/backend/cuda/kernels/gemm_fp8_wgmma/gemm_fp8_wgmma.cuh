// sm90_fp8_gemm_wgmma: W8A8 block-scaled GEMM on Hopper wgmma (m64n128k32 e4m3 -> f32, QGMMA in SASS).
//
// Roles (warp specialisation, 3 warpgroups of 128 threads, one block per SM, persistent over output tiles):
//   warpgroup 0   producer: one thread streams the A (activation) and B (weight) tiles of each 128-wide K block into
//                 a kStages-deep shared-memory ring with the bulk tensor copy engine (cp.async.bulk.tensor, 128-byte
//                 swizzle), each stage completing on its "full" mbarrier; it gives its registers away (setmaxnreg).
//   warpgroups 1-2 consumers: each owns 64 of the tile's 128 token rows x all 128 weight rows. Per K block it waits
//                 for the stage, issues 4 wgmma k32 steps (A and B both from shared memory through matrix
//                 descriptors) into a block accumulator, waits for them, frees the stage ("empty" mbarrier, one
//                 arrival per warp) and folds the block accumulator into the output accumulator as
//                 out = out + acc · (a_scale · w_scale): the reference's per-128 scaling ("promotion" of the
//                 tensor-core partial sums into f32 registers, as DeepSeek's fp8_gemm and deepseek-ai/DeepGEMM do),
//                 with IEEE multiply and add kept separate (no FMA) to round exactly as the CPU op does.
//
// Shared memory: stage s = A tile [128 tokens][128 bytes of K] then B tile [128 weight rows][128 bytes of K]. A tile
// row is exactly one 128-byte swizzle row, so the copy engine writes it in the SWIZZLE_128B pattern (16-byte chunk c
// of row r lands at chunk c ^ (r % 8)) and a K-major wgmma descriptor with swizzle mode 128B reads it back: 8-row
// groups are 1024 bytes apart (stride byte offset), the leading byte offset is unused for a swizzled K-major operand
// whose k32 slice (32 bytes) lies inside one swizzle row, and k step j starts 32·j bytes into the row (the hardware
// applies the XOR to the final address, so tiles must be 1024-byte aligned). Rows past T are zero-filled by the copy
// engine (out-of-bounds box rows), so the last token tile needs no special load path; its stores are guarded.
//
// Accumulator fragment of m64nNk32 with f32 D (PTX ISA, "wgmma register fragments", matrix D): in warp w of the
// warpgroup, lane l holds d[4j+0], d[4j+1] = (row 16w + l/4, cols 8j + 2(l%4) + {0,1}) and d[4j+2], d[4j+3] = the same
// columns of row 16w + l/4 + 8, for j = 0 .. N/8-1. So each thread needs two token scales per K block (its two rows)
// and one weight scale (the tile's 128 weight rows are one scale block).
#pragma once

#include <cuda.h>  // CUtensorMap (types only: the encoder is fetched through the runtime, no -lcuda)

#include "backend/cuda/common/mbarrier.cuh"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/common/wgmma.cuh"

namespace dsv4::cuda {

struct Fp8WgmmaConfig {
    static constexpr int kBM = 128;                 // tokens per tile (2 consumer warpgroups x 64)
    static constexpr int kBN = 128;                 // weight rows per tile = one weight scale block
    static constexpr int kBK = 128;                 // K bytes per stage = one scale block = one swizzle row
    static constexpr int kStages = 6;
    static constexpr int kThreads = 384;            // producer warpgroup + 2 consumer warpgroups
    static constexpr int kTileBytesA = kBM * kBK;   // 16 KiB
    static constexpr int kTileBytesB = kBN * kBK;   // 16 KiB
    static constexpr int kStageBytes = kTileBytesA + kTileBytesB;
    static constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + slack to align the ring to 1024 bytes
    static constexpr int kProducerRegs = 40;
    static constexpr int kConsumerRegs = 232;       // 128·40 + 256·232 <= 64 Ki registers
};


// grid: min(tiles, SMs) persistent blocks; tile t -> (token tile t / (N/128), weight tile t % (N/128)), so the blocks
// running together share a few token tiles and sweep the whole weight, which stays in L2.
__global__ void __launch_bounds__(Fp8WgmmaConfig::kThreads, 1)
    sm90_fp8_gemm_wgmma_kernel(const __grid_constant__ CUtensorMap tmap_a,  // [T, K] e4m3, box 128 x 128 B
                               const __grid_constant__ CUtensorMap tmap_b,  // [N, K] e4m3, box 128 x 128 B
                               const float* __restrict__ a_scale,           // [T, K/128]
                               const uint8_t* __restrict__ w_scale,         // [N/128, K/128] UE8M0
                               // T tokens, N weight rows, K; y: [T, N] bf16
                               int T, int N, int K,
                               __nv_bfloat16* __restrict__ y) {
    pdl_enter();
    using Cfg = Fp8WgmmaConfig;
    __shared__ __align__(8) uint64_t full_bar[Cfg::kStages];
    __shared__ __align__(8) uint64_t empty_bar[Cfg::kStages];
    extern __shared__ uint8_t smem_raw[];
    uint8_t* ring = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));

    const int KB = K / Cfg::kBK, n_tiles = N / Cfg::kBN, m_tiles = (T + Cfg::kBM - 1) / Cfg::kBM;
    const int tiles = m_tiles * n_tiles;
    const int warpgroup = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        for (int s = 0; s < Cfg::kStages; ++s) {
            mbar_init(&full_bar[s], 1);  // the producer's arrive.expect_tx; the copy engine completes the bytes
            mbar_init(&empty_bar[s], 8); // one arrival per consumer warp
        }
        mbar_init_fence();
        asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&tmap_a)) : "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&tmap_b)) : "memory");
    }
    __syncthreads();

    if (warpgroup == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Cfg::kProducerRegs));
        if (threadIdx.x != 0) return;
        int stage = 0;
        uint32_t phase = 0;
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            const int m0 = (tile / n_tiles) * Cfg::kBM, n0 = (tile % n_tiles) * Cfg::kBN;
            for (int kb = 0; kb < KB; ++kb) {
                mbar_wait(&empty_bar[stage], phase ^ 1);
                uint8_t* sA = ring + stage * Cfg::kStageBytes;
                mbar_arrive_expect_tx(&full_bar[stage], Cfg::kStageBytes);
                tma_load_2d(sA, &tmap_a, kb * Cfg::kBK, m0, &full_bar[stage]);
                tma_load_2d(sA + Cfg::kTileBytesA, &tmap_b, kb * Cfg::kBK, n0, &full_bar[stage]);
                if (++stage == Cfg::kStages) stage = 0, phase ^= 1;
            }
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Cfg::kConsumerRegs));
    const int consumer = warpgroup - 1;  // token rows 64·consumer .. +63 of the tile
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const int row_in_tile = consumer * 64 + warp * 16 + lane / 4;  // and row_in_tile + 8
    float acc[64], out[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    int stage = 0;
    uint32_t phase = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int m0 = (tile / n_tiles) * Cfg::kBM, n0 = (tile % n_tiles) * Cfg::kBN;
        const int r0 = m0 + row_in_tile, r1 = r0 + 8;
        // Rows past T read the last token's scales: their A rows are zero-filled, so their sums are 0, never stored.
        const float* sa0 = a_scale + size_t(min(r0, T - 1)) * KB;
        const float* sa1 = a_scale + size_t(min(r1, T - 1)) * KB;
        const uint8_t* sw = w_scale + size_t(n0 / Cfg::kBN) * KB;
#pragma unroll
        for (int i = 0; i < 64; ++i) out[i] = 0.0f;

        for (int kb = 0; kb < KB; ++kb) {
            // Scale loads first: their latency overlaps the wait for the stage and the MMAs.
            const float a0 = __ldg(sa0 + kb), a1 = __ldg(sa1 + kb);
            const float ws = e8m0_to_f32(__ldg(sw + kb));
            mbar_wait(&full_bar[stage], phase);
            const uint32_t a_base = smem_u32(ring + stage * Cfg::kStageBytes) + consumer * 64 * Cfg::kBK;
            const uint32_t b_base = smem_u32(ring + stage * Cfg::kStageBytes + Cfg::kTileBytesA);
            fence_accumulators(acc);
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < Cfg::kBK / 32; ++ks)
                wgmma_m64n128k32_e4m3(acc, sw128_kmajor_desc(a_base + ks * 32), sw128_kmajor_desc(b_base + ks * 32),
                                      ks > 0 ? 1u : 0u);
            wgmma_commit();
            fence_accumulators(acc);
            wgmma_wait_all();
            fence_accumulators(acc);
            if (lane == 0) mbar_arrive(&empty_bar[stage]);  // this warp's reads of the stage are done
            if (++stage == Cfg::kStages) stage = 0, phase ^= 1;

            const float s0 = __fmul_rn(a0, ws), s1 = __fmul_rn(a1, ws);
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                out[4 * j + 0] = __fadd_rn(out[4 * j + 0], __fmul_rn(acc[4 * j + 0], s0));
                out[4 * j + 1] = __fadd_rn(out[4 * j + 1], __fmul_rn(acc[4 * j + 1], s0));
                out[4 * j + 2] = __fadd_rn(out[4 * j + 2], __fmul_rn(acc[4 * j + 2], s1));
                out[4 * j + 3] = __fadd_rn(out[4 * j + 3], __fmul_rn(acc[4 * j + 3], s1));
            }
        }

        // Two adjacent columns per store (4 bytes); rows past T are not written.
        const int col = n0 + 2 * (lane % 4);
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            if (r0 < T)
                *reinterpret_cast<__nv_bfloat162*>(y + size_t(r0) * N + col + 8 * j) =
                    __floats2bfloat162_rn(out[4 * j + 0], out[4 * j + 1]);
            if (r1 < T)
                *reinterpret_cast<__nv_bfloat162*>(y + size_t(r1) * N + col + 8 * j) =
                    __floats2bfloat162_rn(out[4 * j + 2], out[4 * j + 3]);
        }
    }
}

}  // namespace dsv4::cuda
