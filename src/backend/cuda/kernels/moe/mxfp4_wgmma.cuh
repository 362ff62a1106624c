// The FP8-wgmma stage of the decode expert GEMMs (format tag Mxfp4WgmmaWeights, MoeDecodeArgs::fp8_wgmma): the
// repacked MXFP4 bytes of mxfp4_repacked.h, converted to e4m3 exactly as the mma.sync stage does (prmt through the
// lane's 32-block table, sign by shift and mask), but fed to Hopper's FP8 tensor cores with
// wgmma.m64n8k32.e4m3 (A = 64 weight rows from registers, B = the token tile from shared memory) instead of being
// widened to f16 for mma.sync, which sm_90 runs as unpack + HMMA (docs/kernels/moe.md, "Further"). Per 8 weights the
// loop spends the 7-instruction conversion and a quarter of a wgmma, against 11 + 2 HMMA in the f16 stage.
//
// Layout. A warpgroup (4 warps) owns 64 rows: warp w of it the 16 rows of its row tile, as in expert_rows_gemm, so
// the accumulator fragment (rows g, g+8; token columns 2t, 2t+1) is the mma.sync one and the epilogues are shared.
// Lane (g, t) converts word i of its 32-block t of rows g and g+8 (16 bytes per row and 128-K group, one load, as
// today) into lo = e4m3 of elements (0, 4, 1, 5) and hi = (2, 6, 3, 7) of that word; instruction i of the group
// takes a0 = lo(g), a1 = lo(g+8), a2 = hi(g), a3 = hi(g+8), i.e. logical k 4t..4t+3 and 16+4t..16+4t+3 of the
// instruction are those elements. The K order inside a group is free as long as B agrees: the token tile is staged
// once per call into shared memory in that order — token n's e4m3 byte of logical k (instruction i, position p) at
// row n of the group's 8 x 128-byte swizzle atom, byte 32i + p — from the f16 pair-order activations (P(i, 3),
// P(i, 2) are lo's byte pairs, P(i, 1), P(i, 0) hi's: moe.cuh "Pair order").
//
// Scales, numerics. Each lane's bytes carry 2^(6 - delta) of its own 32-block (the tables), so the four wgmmas of a
// 128-K group sum products that share one factor 2^(e_max - 133) · a_scale per (row, token); each group overwrites
// the accumulators and is folded into f32 y once its wgmmas are done (wait_group 0: reading one set while another
// group is in flight makes ptxas serialise every wgmma, C7514). Products are exact, but the tensor core sums a group's
// 128 products with a narrower accumulator than f32 (the prefill MoE's numerics class, moe_prefill_test.cpp): on the
// H200 rel_l2 3.2e-3..4.9e-3 against the CPU and 44-58 % of bf16 outputs bit-exact over all decode test cases,
// against >= 90 % bit-exact for the mma.sync path.
//
// Speed (docs/kernels/moe.md, "FP8 wgmma stage: measured"): 533 instructions per gate/up step against 641 for the
// mma.sync stage, +5 % at 64 tokens; both are bound by the loads in flight (16 warps per SM at 128 registers), not
// by the conversion.
#pragma once

#include "backend/cuda/common/mbarrier.cuh"
#include "backend/cuda/common/wgmma.cuh"
#include "backend/cuda/kernels/moe/moe.cuh"

namespace dsv4::cuda {

// Shared-memory bytes of a token tile for K columns (plus the slack that aligns it to 1024).
constexpr size_t moe_wgmma_tile_bytes(int64_t K) { return size_t(K) * MoeDecodeConfig::kTokTile + 1024; }

// Stages the token tile (act_row[n], n < ntile; zeros for the other rows) into `tile` (header comment).
template <class Src>
__device__ __forceinline__ void stage_token_tile_e4m3(const Src& src, const __half* act,
                                                      const int (&act_row)[MoeDecodeConfig::kTokTile], int ntile,
                                                      int K, uint8_t* tile) {
    const int per_token = (K / 128) * 16;  // 16-byte words of pair-order f16 per token: (group q, block t, word i)
#pragma unroll
    for (int n = 0; n < MoeDecodeConfig::kTokTile; ++n) {
        const uint4* row = reinterpret_cast<const uint4*>(act + size_t(n < ntile ? act_row[n] : 0) * size_t(K));
        for (int it = src.tid(); it < per_token; it += Src::kThreads) {
            const int q = it >> 4, t = (it >> 2) & 3, i = it & 3;
            const uint4 v = n < ntile ? Src::act16(row + it) : make_uint4(0, 0, 0, 0);
            const uint32_t lo = f16x2_e4m3x2(v.w) | f16x2_e4m3x2(v.z) << 16;
            const uint32_t hi = f16x2_e4m3x2(v.y) | f16x2_e4m3x2(v.x) << 16;
            uint8_t* atom_row = tile + q * 1024 + n * 128;  // 16-byte chunk c of row n lands at chunk c ^ n
            *reinterpret_cast<uint32_t*>(atom_row + (((2 * i) ^ n) << 4) + 4 * t) = lo;
            *reinterpret_cast<uint32_t*>(atom_row + (((2 * i + 1) ^ n) << 4) + 4 * t) = hi;
        }
    }
}

// expert_rows_gemm (moe.cuh) for Mxfp4WgmmaWeights: the same contract (warps = RT row tiles x KS K splits, y in the
// mma.sync fragment, K splits reduced through `red`), RT a multiple of 4 (warpgroups of row tiles), weights from
// global memory (src: GlobalWeights with e4m3_tables and act_tile).
template <int MATS, int RT, int KS, class Src>
__device__ __forceinline__ void expert_rows_gemm_wgmma(const Src& src, const uint8_t* const (&w)[MATS],
                                                       const uint8_t* const (&ws)[MATS], int K, int row0,
                                                       const __half* act, const float* act_s,
                                                       const int (&act_row)[MoeDecodeConfig::kTokTile], int ntile,
                                                       float* red, float (&y)[MATS][4]) {
    static_assert(RT % 4 == 0, "a warpgroup is 4 row-tile warps of one K split");
    const int lane = src.tid() & 31, warp = src.tid() >> 5, g = lane >> 2, t = lane & 3;
    const int rt = warp % RT, ks = warp / RT;
    const int r_lo = row0 + 16 * rt + g, r_hi = r_lo + 8;
    const size_t row_bytes = size_t(K) / 2, srow_bytes = size_t(K) / 32;
    const int nsteps = K / MoeDecodeConfig::kStepK, nq = K / 128;
    const int c0 = 2 * t, c1 = 2 * t + 1;
    const float* srow0 = act_s + size_t(c0 < ntile ? act_row[c0] : 0) * size_t(nq);
    const float* srow1 = act_s + size_t(c1 < ntile ? act_row[c1] : 0) * size_t(nq);

    uint4 wv[MATS][2][2];  // [matrix][row g, g+8][group q of the step]
    uint2 sv[MATS][2];     // scale words (e_max, spreads) of both groups, rows g, g+8
    auto load_step = [&](int step) {
        load_mxfp4_step<MATS, Src>(w, ws, r_lo, r_hi, row_bytes, srow_bytes, step, t, wv, sv);
    };
    // the first step's weights are requested before the tile is staged, so their latency overlaps the staging
    if (ks < nsteps) load_step(ks);
    src.sync();  // the previous call's wgmmas are done with the tile (every warpgroup waited for all of its groups)
    stage_token_tile_e4m3(src, act, act_row, ntile, K, src.act_tile);
    fence_proxy_async_smem();
    src.sync();
    const uint32_t tile = smem_u32(src.act_tile);

    float acc[MATS][4];
#pragma unroll
    for (int m = 0; m < MATS; ++m) {
#pragma unroll
        for (int i = 0; i < 4; ++i) y[m][i] = acc[m][i] = 0.0f;
    }
    for (int step = ks; step < nsteps; step += KS) {
        float sa[2][2];
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            sa[q][0] = c0 < ntile ? Src::act_s(srow0 + step * 2 + q) : 0.0f;
            sa[q][1] = c1 < ntile ? Src::act_s(srow1 + step * 2 + q) : 0.0f;
        }
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            uint32_t a[MATS][4][4];  // [matrix][instruction i][a0..a3]
            float fac[MATS][4];      // the group's fold factors
#pragma unroll
            for (int m = 0; m < MATS; ++m) {
                const uint32_t s_lo = q ? sv[m][0].y : sv[m][0].x, s_hi = q ? sv[m][1].y : sv[m][1].x;
                const uint2 tab_lo = src.e4m3_tables[(s_lo >> (8 + 4 * t)) & 15];
                const uint2 tab_hi = src.e4m3_tables[(s_hi >> (8 + 4 * t)) & 15];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    mxfp4_repacked_to_e4m3(word_of(wv[m][0][q], i), tab_lo.x, tab_lo.y, a[m][i][0], a[m][i][2]);
                    mxfp4_repacked_to_e4m3(word_of(wv[m][1][q], i), tab_hi.x, tab_hi.y, a[m][i][1], a[m][i][3]);
                }
                // 2^(e_max - 133) (normal: the repack guarantees 7 <= e_max <= 254) times the token's scale
                const float s_row_lo = __uint_as_float(((s_lo & 0xff) - 6) << 23);
                const float s_row_hi = __uint_as_float(((s_hi & 0xff) - 6) << 23);
                fac[m][0] = __fmul_rn(s_row_lo, sa[q][0]), fac[m][1] = __fmul_rn(s_row_lo, sa[q][1]);
                fac[m][2] = __fmul_rn(s_row_hi, sa[q][0]), fac[m][3] = __fmul_rn(s_row_hi, sa[q][1]);
            }
            // every weight register of the step is converted: the next step's loads start before the MMAs
            if (q == 1 && step + KS < nsteps) load_step(step + KS);
            wgmma_fence();
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const uint64_t desc = sw128_kmajor_desc(tile + uint32_t(step * 2 + q) * 1024u + 32u * uint32_t(i));
#pragma unroll
                for (int m = 0; m < MATS; ++m)
                    wgmma_m64n8k32_e4m3_rs(acc[m], a[m][i][0], a[m][i][1], a[m][i][2], a[m][i][3], desc,
                                           i > 0 ? 1u : 0u);
            }
            wgmma_commit();
            // wait for the group before reading its accumulators: with a group still in flight (wait_group 1 and
            // two accumulator sets) ptxas serialises every wgmma (C7514), so the fold does not overlap the MMAs
            wgmma_wait<0>();
#pragma unroll
            for (int m = 0; m < MATS; ++m) {
                fence_accumulators(acc[m]);
#pragma unroll
                for (int i = 0; i < 4; ++i) y[m][i] = __fadd_rn(y[m][i], __fmul_rn(acc[m][i], fac[m][i]));
            }
        }
    }
    reduce_k_splits<MATS, RT, KS>(src, red, y);
}

}  // namespace dsv4::cuda
