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
// Loads. With the weights loaded into registers one step ahead, ptxas sinks the loads below the step's wgmmas (their
// registers are busy until then), so a warp's loads and its conversion never overlapped and both the mma.sync and
// the first wgmma version waited for memory once per step (docs/kernels/moe.md, "FP8 wgmma stage"). Here each warp
// streams its rows through its own shared-memory ring of kRing groups with cp.async: lane (g, t) copies its 16 bytes
// of rows g and g+8 of every matrix (and lanes t = 0 / 1 the rows' 4-byte scale words), kRing − 1 groups ahead, and
// reads back only its own bytes (the scale words after a __syncwarp), so no block barrier is involved and no
// register is held by a load in flight.
#pragma once

#include "backend/cuda/common/cp_async.cuh"
#include "backend/cuda/common/mbarrier.cuh"
#include "backend/cuda/common/wgmma.cuh"
#include "backend/cuda/kernels/moe/moe.cuh"

namespace dsv4::cuda {

// Groups of 128 K a warp keeps in its ring (kRing − 1 of them in flight while it converts one). Gate/up rings hold
// two matrices, so fewer groups fit beside two blocks' tiles per SM.
template <int MATS>
constexpr int kWgmmaRing = MATS == 2 ? 3 : 4;
// One ring slot of a warp: per matrix, rows g (half 0) and g+8 (half 1) x 32 lanes x 16 bytes, then the 16 rows'
// 4-byte scale words.
constexpr int kWgmmaSlotWeights = 2 * 32 * 16, kWgmmaSlotScales = 16 * 4;
template <int MATS>
constexpr int kWgmmaSlotBytes = MATS * (kWgmmaSlotWeights + kWgmmaSlotScales);
constexpr int kWgmmaWarps = 8;  // both expert kernels run 256-thread blocks

// Dynamic shared memory of a block for K columns and MATS matrices: the e4m3 token tile (K · 8, 1024-aligned), the
// tokens' activation scales [8][K/128] f32, the warps' rings, and the alignment slack.
constexpr size_t moe_wgmma_smem_bytes(int64_t K, int mats) {
    const size_t ring = size_t(kWgmmaWarps) * size_t(mats == 2 ? kWgmmaRing<2> * kWgmmaSlotBytes<2>
                                                                  : kWgmmaRing<1> * kWgmmaSlotBytes<1>);
    return size_t(K) * MoeDecodeConfig::kTokTile + size_t(K / 128) * MoeDecodeConfig::kTokTile * 4 + ring + 1024;
}

// Stages the token tile (act_row[n], n < ntile; zeros for the other rows) into `tile` (header comment) and the
// tokens' activation scales into `scales` ([n][K/128], zeros past ntile).
template <class Src>
__device__ __forceinline__ void stage_token_tile_e4m3(const Src& src, const __half* act, const float* act_s,
                                                      const int (&act_row)[MoeDecodeConfig::kTokTile], int ntile,
                                                      int K, uint8_t* tile, float* scales) {
    // per token: nq · 16 words of 16 bytes of pair-order f16, word (group q, block t, word i) = q · 16 + t · 4 + i
    const int nq = K / 128, per_token = nq * 16;
#pragma unroll
    for (int n = 0; n < MoeDecodeConfig::kTokTile; ++n) {
        const size_t row = size_t(n < ntile ? act_row[n] : 0);
        const uint4* words = reinterpret_cast<const uint4*>(act + row * size_t(K));
        for (int it = src.tid(); it < per_token; it += Src::kThreads) {
            const int q = it >> 4, t = (it >> 2) & 3, i = it & 3;
            const uint4 v = n < ntile ? Src::act16(words + it) : make_uint4(0, 0, 0, 0);
            const uint32_t lo = f16x2_e4m3x2(v.w) | f16x2_e4m3x2(v.z) << 16;
            const uint32_t hi = f16x2_e4m3x2(v.y) | f16x2_e4m3x2(v.x) << 16;
            uint8_t* atom_row = tile + q * 1024 + n * 128;  // 16-byte chunk c of row n lands at chunk c ^ n
            *reinterpret_cast<uint32_t*>(atom_row + (((2 * i) ^ n) << 4) + 4 * t) = lo;
            *reinterpret_cast<uint32_t*>(atom_row + (((2 * i + 1) ^ n) << 4) + 4 * t) = hi;
        }
        for (int j = src.tid(); j < nq; j += Src::kThreads)
            scales[n * nq + j] = n < ntile ? Src::act_s(act_s + row * size_t(nq) + j) : 0.0f;
    }
}

// expert_rows_gemm (moe.cuh) for Mxfp4WgmmaWeights: the same contract (warps = RT row tiles x KS K splits, y in the
// mma.sync fragment, K splits reduced through `red`), RT a multiple of 4 (warpgroups of row tiles), weights from
// global memory (src: GlobalWeights with e4m3_tables and act_tile: moe_wgmma_smem_bytes(K, MATS) of it).
template <int MATS, int RT, int KS, class Src>
__device__ __forceinline__ void expert_rows_gemm_wgmma(const Src& src, const uint8_t* const (&w)[MATS],
                                                       const uint8_t* const (&ws)[MATS], int K, int row0,
                                                       const __half* act, const float* act_s,
                                                       const int (&act_row)[MoeDecodeConfig::kTokTile], int ntile,
                                                       float* red, float (&y)[MATS][4]) {
    static_assert(RT % 4 == 0, "a warpgroup is 4 row-tile warps of one K split");
    static_assert(RT * KS == kWgmmaWarps, "the rings are laid out for 8 warps");
    constexpr int kRing = kWgmmaRing<MATS>, kSlot = kWgmmaSlotBytes<MATS>;
    const int lane = src.tid() & 31, warp = src.tid() >> 5, g = lane >> 2, t = lane & 3;
    const int rt = warp % RT, ks = warp / RT;
    const int r_lo = row0 + 16 * rt + g, r_hi = r_lo + 8;
    const size_t row_bytes = size_t(K) / 2, srow_bytes = size_t(K) / 32;
    const int nsteps = K / MoeDecodeConfig::kStepK, nq = K / 128;
    const int c0 = 2 * t, c1 = 2 * t + 1;
    // the warp's groups along K: steps ks, ks + KS, ... of two groups each
    const int ngroups = nsteps > ks ? 2 * ((nsteps - ks + KS - 1) / KS) : 0;
    auto group_index = [&](int j) { return 2 * (ks + (j >> 1) * KS) + (j & 1); };

    float* tile_scales = reinterpret_cast<float*>(src.act_tile + size_t(K) * MoeDecodeConfig::kTokTile);
    uint8_t* ring = reinterpret_cast<uint8_t*>(tile_scales + size_t(nq) * MoeDecodeConfig::kTokTile) +
                    size_t(warp) * kRing * kSlot;
    // lane's copies of group j into slot j % kRing: 16 bytes of rows g, g+8 per matrix; lanes t = 0, 1 the scale
    // words of rows g, g+8
    auto issue = [&](int j) {
        if (j < ngroups) {
            const int gq = group_index(j);
            uint8_t* slot = ring + (j % kRing) * kSlot;
#pragma unroll
            for (int m = 0; m < MATS; ++m) {
                uint8_t* sm = slot + m * (kWgmmaSlotWeights + kWgmmaSlotScales);
                const size_t off = size_t(gq) * 64 + size_t(t) * 16;
                cp_async16(sm + lane * 16, w[m] + size_t(r_lo) * row_bytes + off);
                cp_async16(sm + 512 + lane * 16, w[m] + size_t(r_hi) * row_bytes + off);
                if (t < 2)
                    cp_async4(sm + kWgmmaSlotWeights + (g + 8 * t) * 4,
                              ws[m] + size_t(t ? r_hi : r_lo) * srow_bytes + size_t(gq) * 4);
            }
        }
        cp_async_commit();  // one group per call, empty or not, so the wait below counts groups
    };
    __syncwarp();  // the previous call's lanes have read their scale words
#pragma unroll
    for (int j = 0; j < kRing - 1; ++j) issue(j);  // in flight while the tile is staged
    src.sync();  // the previous call's wgmmas are done with the tile (every warpgroup waited for all of its groups)
    stage_token_tile_e4m3(src, act, act_s, act_row, ntile, K, src.act_tile, tile_scales);
    fence_proxy_async_smem();
    src.sync();
    const uint32_t tile = smem_u32(src.act_tile);

    float acc[MATS][4];
#pragma unroll
    for (int m = 0; m < MATS; ++m) {
#pragma unroll
        for (int i = 0; i < 4; ++i) y[m][i] = acc[m][i] = 0.0f;
    }
    for (int j = 0; j < ngroups; ++j) {
        __syncwarp();  // every lane has read slot (j − 1) % kRing's scale words before it is refilled
        issue(j + kRing - 1);
        cp_async_wait<kRing - 1>();  // this lane's copies of group j have landed
        __syncwarp();                // and the scale words the other lanes copied
        const int gq = group_index(j);
        const uint8_t* slot = ring + (j % kRing) * kSlot;
        const float sa0 = tile_scales[c0 * nq + gq], sa1 = tile_scales[c1 * nq + gq];
        uint32_t a[MATS][4][4];  // [matrix][instruction i][a0..a3]
        float fac[MATS][4];      // the group's fold factors
#pragma unroll
        for (int m = 0; m < MATS; ++m) {
            const uint8_t* sm = slot + m * (kWgmmaSlotWeights + kWgmmaSlotScales);
            const uint4 w_lo = *reinterpret_cast<const uint4*>(sm + lane * 16);
            const uint4 w_hi = *reinterpret_cast<const uint4*>(sm + 512 + lane * 16);
            const uint32_t s_lo = *reinterpret_cast<const uint32_t*>(sm + kWgmmaSlotWeights + g * 4);
            const uint32_t s_hi = *reinterpret_cast<const uint32_t*>(sm + kWgmmaSlotWeights + (g + 8) * 4);
            const uint2 tab_lo = src.e4m3_tables[(s_lo >> (8 + 4 * t)) & 15];
            const uint2 tab_hi = src.e4m3_tables[(s_hi >> (8 + 4 * t)) & 15];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                mxfp4_repacked_to_e4m3(word_of(w_lo, i), tab_lo.x, tab_lo.y, a[m][i][0], a[m][i][2]);
                mxfp4_repacked_to_e4m3(word_of(w_hi, i), tab_hi.x, tab_hi.y, a[m][i][1], a[m][i][3]);
            }
            // 2^(e_max - 133) (normal: the repack guarantees 7 <= e_max <= 254) times the token's scale
            const float s_row_lo = __uint_as_float(((s_lo & 0xff) - 6) << 23);
            const float s_row_hi = __uint_as_float(((s_hi & 0xff) - 6) << 23);
            fac[m][0] = __fmul_rn(s_row_lo, sa0), fac[m][1] = __fmul_rn(s_row_lo, sa1);
            fac[m][2] = __fmul_rn(s_row_hi, sa0), fac[m][3] = __fmul_rn(s_row_hi, sa1);
        }
        wgmma_fence();
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint64_t desc = sw128_kmajor_desc(tile + uint32_t(gq) * 1024u + 32u * uint32_t(i));
#pragma unroll
            for (int m = 0; m < MATS; ++m)
                wgmma_m64n8k32_e4m3_rs(acc[m], a[m][i][0], a[m][i][1], a[m][i][2], a[m][i][3], desc, i > 0 ? 1u : 0u);
        }
        wgmma_commit();
        // wait for the group before reading its accumulators: with a group still in flight (wait_group 1 and two
        // accumulator sets) ptxas serialises every wgmma (C7514)
        wgmma_wait<0>();
#pragma unroll
        for (int m = 0; m < MATS; ++m) {
            fence_accumulators(acc[m]);
#pragma unroll
            for (int i = 0; i < 4; ++i) y[m][i] = __fadd_rn(y[m][i], __fmul_rn(acc[m][i], fac[m][i]));
        }
    }
    reduce_k_splits<MATS, RT, KS>(src, red, y);
}

}  // namespace dsv4::cuda
