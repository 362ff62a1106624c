// The two work items of the MoE decode expert GEMMs, shared by the three-launch kernels (moe.cu: one item per block)
// and the persistent TMA-ring kernel (moe_ring.cu: consumer groups of a block walk many items). An item runs on the
// RT · KS warps of `src` (moe.cuh: the whole block, or one consumer group) and synchronises through src.sync() only.
// wait() is called once, after the item's metadata loads and before its first weight read (the ring's consumers wait
// for the weight bytes there, so the latency of those loads overlaps the copies); release() once per warp after its
// last weight read.
//
//  gate/up item (active slot, 16 rows of I): w1 and w3 rows against every token of the expert (tiles of 8), u1/u3
//  rounded to bf16, clamp, SwiGLU, × routing weight, bf16 hidden row; the last of the 8 items of a 128-row block
//  of I (arrival counter) quantises it to e4m3 per 128 for the down GEMM and counts it in up_done[slot].
//  down item (active slot, 32 rows of D or more): w2 rows against the expert's hidden rows, the bf16 output of each
//  pick stored as f32; the last item of a row range (arrival counter = the range's items) sums each token's picks in
//  ascending expert order in f32, adds the shared expert's output and rounds to bf16 (backend::cpu::moe_sum).
#pragma once

#include "backend/cuda/kernels/moe/moe.cuh"
#include "backend/cuda/kernels/moe/mxfp4_wgmma.cuh"

namespace dsv4::cuda {

// The GEMM core of the item's format: the FP8 wgmma stage (mxfp4_wgmma.cuh) or expert_rows_gemm (moe.cuh).
template <class Fmt, int MATS, int RT, int KS, class Src>
__device__ __forceinline__ void rows_gemm(const Src& src, const uint8_t* const (&w)[MATS],
                                          const uint8_t* const (&ws)[MATS], const float (&wg)[MATS], int K, int row0,
                                          const __half* act, const float* act_s,
                                          const int (&act_row)[MoeDecodeConfig::kTokTile], int ntile, float* red,
                                          float (&y)[MATS][4]) {
    if constexpr (std::is_same_v<Fmt, Mxfp4WgmmaWeights>)
        expert_rows_gemm_wgmma<MATS, RT, KS>(src, w, ws, K, row0, act, act_s, act_row, ntile, red, y);
    else
        expert_rows_gemm<Fmt, MATS, RT, KS>(src, w, ws, wg, K, row0, act, act_s, act_row, ntile, red, y);
}

// An item is kSub consecutive 16-row tiles of I (rows row0 .. row0 + 16·kSub − 1). w[sub] / ws[sub] point at the
// expert's w1, w3 (and scales) such that row r of tile sub is at w[sub][m] + (w_row0 + r) · row bytes: w_row0 = row0
// for whole matrices in global memory, 0 for ring slots holding just the tile's rows. wait(sub) / release(sub) bracket
// the reads of tile sub's weights. Larger items pay the fences and arrival counters below once for more bytes.
// Fmt: the weight format (moe.cuh); wg[sub][m]: NVFP4 global scales (ignored by the other formats).
template <int RT, int KS, int kSub, class Fmt, class Src, class Wait, class Release>
__device__ __forceinline__ void moe_gate_up_item(Fmt, const Src& src, const MoeKernelParams& p, int slot, int row0,
                                                 const uint8_t* const (&w)[kSub][2],
                                                 const uint8_t* const (&ws)[kSub][2], const float (&wg)[kSub][2],
                                                 int w_row0, float* red, int* flag, Wait&& wait, Release&& release) {
    static_assert(RT * KS * 32 == Src::kThreads, "the item's warps are its RT x KS tiles");
    constexpr int kTileRows = 16 * RT;  // rows of I per tile: RT warps' 16-row tiles side by side
    static_assert(128 % (kTileRows * kSub) == 0, "an item's rows lie within one 128-row block of I");
    constexpr int kTok = MoeDecodeConfig::kTokTile;
    const int start = p.active_start[slot], count = p.active_count[slot];
    const int lane = src.tid() & 31, warp = src.tid() >> 5, g = lane >> 2, t = lane & 3;
    for (int sub = 0; sub < kSub; ++sub) {
        for (int tt = 0; tt < count; tt += kTok) {
            const int ntile = min(kTok, count - tt);
            int act_row[kTok];
#pragma unroll
            for (int c = 0; c < kTok; ++c) act_row[c] = c < ntile ? pick_token(p, p.list[start + tt + c]) : 0;
            // the epilogue's routing weights of this lane's two token columns, loaded before the GEMM so that their
            // latency overlaps it
            float rw[2] = {0.0f, 0.0f};
            if (warp / RT == 0)
#pragma unroll
                for (int c = 0; c < 2; ++c)
                    if (2 * t + c < ntile) rw[c] = pick_weight(p, p.list[start + tt + 2 * t + c]);
            if (tt == 0) wait(sub);
            float y[2][4];
            rows_gemm<Fmt, 2, RT, KS>(src, w[sub], ws[sub], wg[sub], p.D, w_row0, p.xq, p.xs, act_row, ntile, red, y);
            if (warp / RT != 0) continue;
            const int rt = warp % RT;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int col = 2 * t + (i & 1), row = row0 + kTileRows * sub + 16 * rt + g + 8 * (i >> 1);
                if (col >= ntile) continue;
                // reference: u1, u3 are bf16 linear outputs; clamp; silu(u1)·u3 in f32; × route weight; bf16
                float u1 = round_bf16(y[0][i]), u3 = round_bf16(y[1][i]);
                if (p.limit > 0.0f) {
                    u1 = fminf(u1, p.limit);
                    u3 = fminf(fmaxf(u3, -p.limit), p.limit);
                }
                const float a = __fmul_rn(__fdiv_rn(u1, __fadd_rn(1.0f, expf(-u1))), u3);
                p.h[size_t(start + tt + col) * p.I + row] = __float2bfloat16_rn(__fmul_rn(rw[i & 1], a));
            }
        }
        release(sub);
    }
    // The last of the items of this 128-row block of I quantises it for the down GEMM.
    __threadfence();
    src.sync();
    constexpr int kItemsPer128 = 128 / (kTileRows * kSub);
    const int qb = row0 / 128;
    if (src.tid() == 0) *flag = atomicAdd(&p.cnt_up[slot * (p.I / 128) + qb], 1) == kItemsPer128 - 1;
    src.sync();
    const bool last = *flag;
    src.sync();  // flag is rewritten by the next item
    if (!last) return;
    __threadfence();
    // quad (4 lanes) per token: lane t holds elements 32t..32t+31 of the 128-block
    constexpr int kQuads = Src::kThreads / 4;
    for (int base = 0; base < count; base += kQuads) {
        const int j = base + src.tid() / 4;
        const bool active = j < count;
        const size_t pos = size_t(start + (active ? j : 0));
        float v[32];
        const __nv_bfloat16* src = p.h + pos * p.I + qb * 128 + t * 32;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint4 u = __ldcg(reinterpret_cast<const uint4*>(src) + i);  // written by other blocks: L2
            const uint32_t wd[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                v[8 * i + 2 * k] = __uint_as_float(wd[k] << 16);
                v[8 * i + 2 * k + 1] = __uint_as_float(wd[k] & 0xffff0000u);
            }
        }
        const float s = quant_block128_to_f16(v, p.hq + pos * p.I + qb * 128 + t * 32, active);
        if (active && t == 0) p.hs[pos * (p.I / 128) + qb] = s;
    }
    // publish: the persistent kernel's down items of this slot wait for all I/128 blocks
    __threadfence();
    src.sync();
    if (src.tid() == 0) atomicAdd(&p.up_done[slot], 1);
}

// An item is kSub consecutive tiles of 16·RT rows of D: rows item · kRows + 16·RT·sub + r (kRows = 16·RT·kSub);
// w[sub] / ws[sub]: the expert's w2 (and scales), row r of tile sub at w[sub][0] + (w_row0 + r) · row bytes (w_row0
// as for gate/up). kParts consecutive items share a row range of kParts · kRows rows (the shared expert's FP8 rows,
// twice the bytes of an MXFP4 row, run as two half-height items per range); cnt_down counts the items of each range
// and the last of the n_items combines it.
template <int RT, int KS, int kSub, int kParts = 1, class Fmt, class Src, class Wait, class Release>
__device__ __forceinline__ void moe_down_item(Fmt, const Src& src, const MoeKernelParams& p, int slot, int item,
                                              int n_items, const uint8_t* const (&w)[kSub][1],
                                              const uint8_t* const (&ws)[kSub][1], const float (&wg)[kSub][1],
                                              int w_row0, float* red, int* flag, Wait&& wait, Release&& release) {
    static_assert(RT * KS * 32 == Src::kThreads, "the item's warps are its RT x KS tiles");
    constexpr int kTileRows = 16 * RT;  // rows of D per tile
    constexpr int kTok = MoeDecodeConfig::kTokTile, kRows = kTileRows * kSub, kRangeRows = kRows * kParts;
    static_assert(kRangeRows >= MoeDecodeConfig::kMinDownRows, "cnt_down holds D / kMinDownRows ranges");
    const int start = p.active_start[slot], count = p.active_count[slot];
    const int row0 = item * kRows, row_range = item / kParts;
    const int lane = src.tid() & 31, warp = src.tid() >> 5, g = lane >> 2, t = lane & 3;
    for (int sub = 0; sub < kSub; ++sub) {
        for (int tt = 0; tt < count; tt += kTok) {
            const int ntile = min(kTok, count - tt);
            int act_row[kTok];
#pragma unroll
            for (int c = 0; c < kTok; ++c) act_row[c] = start + tt + (c < ntile ? c : 0);
            if (tt == 0) wait(sub);
            float y[1][4];
            rows_gemm<Fmt, 1, RT, KS>(src, w[sub], ws[sub], wg[sub], p.I, w_row0, p.hq, p.hs, act_row, ntile, red, y);
            if (warp / RT != 0) continue;
            const int rt = warp % RT;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int col = 2 * t + (i & 1);
                const int row = row0 + kTileRows * sub + 16 * rt + g + 8 * (i >> 1);
                if (col >= ntile) continue;
                const int pick = p.list[start + tt + col];
                p.yp[size_t(pick) * p.D + row] = round_bf16(y[0][i]);  // the expert's bf16 output
            }
        }
        release(sub);
    }
    __threadfence();
    src.sync();
    if (src.tid() == 0) *flag = atomicAdd(&p.cnt_down[row_range], 1) == n_items - 1;
    src.sync();
    const bool last = *flag;
    src.sync();
    if (!last) return;
    __threadfence();
    // out[t, d] = bf16( Σ picks in ascending expert order (f32) + shared ), as backend::cpu::moe_sum; the shared
    // expert's bf16 output is its pick T·K + t when it ran here
    const int n = p.T * kRangeRows;
    for (int i = src.tid(); i < n; i += Src::kThreads) {
        const int tok = i / kRangeRows, d = row_range * kRangeRows + i % kRangeRows;
        float acc = 0.0f;
        for (int j = 0; j < p.K; ++j) acc = __fadd_rn(acc, __ldcg(p.yp + size_t(p.order[tok * p.K + j]) * p.D + d));
        if (p.shared) acc = __fadd_rn(acc, __bfloat162float(p.shared[size_t(tok) * p.D + d]));
        if (p.shared_expert) acc = __fadd_rn(acc, __ldcg(p.yp + size_t(p.T * p.K + tok) * p.D + d));
        p.y[size_t(tok) * p.D + d] = __float2bfloat16_rn(acc);
    }
}

// The MXFP4 items as the TMA-ring kernel calls them (no format tag, no global scales).
template <int RT, int KS, int kSub, class Src, class Wait, class Release>
__device__ __forceinline__ void moe_gate_up_item(const Src& src, const MoeKernelParams& p, int slot, int row0,
                                                 const uint8_t* const (&w)[kSub][2],
                                                 const uint8_t* const (&ws)[kSub][2], int w_row0, float* red,
                                                 int* flag, Wait&& wait, Release&& release) {
    float wg[kSub][2];
    for (int sub = 0; sub < kSub; ++sub) wg[sub][0] = wg[sub][1] = 1.0f;
    moe_gate_up_item<RT, KS, kSub>(Mxfp4Weights{}, src, p, slot, row0, w, ws, wg, w_row0, red, flag,
                                   static_cast<Wait&&>(wait), static_cast<Release&&>(release));
}
template <int RT, int KS, int kSub, class Src, class Wait, class Release>
__device__ __forceinline__ void moe_down_item(const Src& src, const MoeKernelParams& p, int slot, int row_range,
                                              int n_items, const uint8_t* const (&w)[kSub][1],
                                              const uint8_t* const (&ws)[kSub][1], int w_row0, float* red, int* flag,
                                              Wait&& wait, Release&& release) {
    float wg[kSub][1];
    for (int sub = 0; sub < kSub; ++sub) wg[sub][0] = 1.0f;
    moe_down_item<RT, KS, kSub>(Mxfp4Weights{}, src, p, slot, row_range, n_items, w, ws, wg, w_row0, red, flag,
                                static_cast<Wait&&>(wait), static_cast<Release&&>(release));
}

}  // namespace dsv4::cuda
