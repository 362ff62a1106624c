// The two work items of the MoE decode expert GEMMs, shared by the three-launch kernels (moe.cu: one item per block)
// and the persistent TMA-ring kernel (moe_ring.cu: a block walks many items). Both run on 256 threads = 8 warps and
// synchronise through Src::sync() (moe.cuh), so they work whether or not a producer warp runs beside them.
//
//  gate/up item (active slot, 16 rows of I): w1 and w3 rows against every token of the expert (tiles of 8), u1/u3
//  rounded to bf16, clamp, SwiGLU, × routing weight, bf16 hidden row; the last of the 8 items of a 128-row block
//  of I (arrival counter) quantises it to e4m3 per 128 for the down GEMM and counts it in up_done[slot].
//  down item (active slot, 32 rows of D): w2 rows against the expert's hidden rows, the bf16 output of each pick
//  stored as f32; the last item of a row range (arrival counter = active experts) sums each token's picks in
//  ascending expert order in f32, adds the shared expert's output and rounds to bf16 (backend::cpu::moe_sum).
#pragma once

#include "backend/cuda/kernels/moe/moe.cuh"

namespace dsv4::cuda {

// w / ws point at the expert's w1, w3 (and scales) such that row r of the item is at w + (w_row0 + r) · row bytes:
// w_row0 = row0 for whole matrices in global memory, 0 for a ring slot holding just the item's rows.
// release() runs once per warp after the warp's last read of w / ws (the ring hands the slots back there).
template <class Src, class Release>
__device__ __forceinline__ void moe_gate_up_item(const MoeKernelParams& p, int slot, int row0,
                                                 const uint8_t* const (&w)[2], const uint8_t* const (&ws)[2],
                                                 int w_row0, float* red, int* flag, Release&& release) {
    constexpr int RT = MoeDecodeConfig::kUpRT, KS = MoeDecodeConfig::kUpKS, kTok = MoeDecodeConfig::kTokTile;
    const int start = p.active_start[slot], count = p.active_count[slot];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    for (int tt = 0; tt < count; tt += kTok) {
        const int ntile = min(kTok, count - tt);
        int act_row[kTok];
#pragma unroll
        for (int c = 0; c < kTok; ++c) act_row[c] = c < ntile ? p.list[start + tt + c] / p.K : 0;
        float y[2][4];
        expert_rows_gemm<2, RT, KS, Src>(w, ws, p.D, w_row0, p.xq, p.xs, act_row, ntile, red, y);
        if (warp / RT != 0) continue;
        const int rt = warp % RT;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int col = 2 * t + (i & 1), row = row0 + 16 * rt + g + 8 * (i >> 1);
            if (col >= ntile) continue;
            // reference: u1, u3 are bf16 linear outputs; clamp; silu(u1)·u3 in f32; × route weight; bf16
            float u1 = round_bf16(y[0][i]), u3 = round_bf16(y[1][i]);
            if (p.limit > 0.0f) {
                u1 = fminf(u1, p.limit);
                u3 = fminf(fmaxf(u3, -p.limit), p.limit);
            }
            const float a = __fmul_rn(__fdiv_rn(u1, __fadd_rn(1.0f, expf(-u1))), u3);
            const int pick = p.list[start + tt + col];
            p.h[size_t(start + tt + col) * p.I + row] = __float2bfloat16_rn(__fmul_rn(p.route_w[pick], a));
        }
    }
    release();
    // The last of the 128/16 items of this 128-row block of I quantises it for the down GEMM.
    __threadfence();
    Src::sync();
    constexpr int kItemsPer128 = 128 / MoeDecodeConfig::kUpRows;
    const int qb = row0 / 128;
    if (threadIdx.x == 0) *flag = atomicAdd(&p.cnt_up[slot * (p.I / 128) + qb], 1) == kItemsPer128 - 1;
    Src::sync();
    const bool last = *flag;
    Src::sync();  // flag is rewritten by the next item
    if (!last) return;
    __threadfence();
    // quad (4 lanes) per token: lane t holds elements 32t..32t+31 of the 128-block
    constexpr int kQuads = 256 / 4;
    for (int base = 0; base < count; base += kQuads) {
        const int j = base + int(threadIdx.x) / 4;
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
    Src::sync();
    if (threadIdx.x == 0) atomicAdd(&p.up_done[slot], 1);
}

// w / ws: the expert's w2 (and scales), row r of the item at w + (w_row0 + r) · row bytes.
template <class Src, class Release>
__device__ __forceinline__ void moe_down_item(const MoeKernelParams& p, int slot, int row_tile, int n_active,
                                              const uint8_t* const (&w)[1], const uint8_t* const (&ws)[1],
                                              int w_row0, float* red, int* flag, Release&& release) {
    constexpr int RT = MoeDecodeConfig::kDownRT, KS = MoeDecodeConfig::kDownKS, kTok = MoeDecodeConfig::kTokTile;
    constexpr int kRows = MoeDecodeConfig::kDownRows;
    const int start = p.active_start[slot], count = p.active_count[slot];
    const int row0 = row_tile * kRows;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    for (int tt = 0; tt < count; tt += kTok) {
        const int ntile = min(kTok, count - tt);
        int act_row[kTok];
#pragma unroll
        for (int c = 0; c < kTok; ++c) act_row[c] = start + tt + (c < ntile ? c : 0);
        float y[1][4];
        expert_rows_gemm<1, RT, KS, Src>(w, ws, p.I, w_row0, p.hq, p.hs, act_row, ntile, red, y);
        if (warp / RT != 0) continue;
        const int rt = warp % RT;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int col = 2 * t + (i & 1), row = row0 + 16 * rt + g + 8 * (i >> 1);
            if (col >= ntile) continue;
            const int pick = p.list[start + tt + col];
            p.yp[size_t(pick) * p.D + row] = round_bf16(y[0][i]);  // the expert's bf16 output
        }
    }
    release();
    __threadfence();
    Src::sync();
    if (threadIdx.x == 0) *flag = atomicAdd(&p.cnt_down[row_tile], 1) == n_active - 1;
    Src::sync();
    const bool last = *flag;
    Src::sync();
    if (!last) return;
    __threadfence();
    // out[t, d] = bf16( Σ picks in ascending expert order (f32) + shared ), as backend::cpu::moe_sum
    const int n = p.T * kRows;
    for (int i = threadIdx.x; i < n; i += 256) {
        const int tok = i / kRows, d = row0 + i % kRows;
        float acc = 0.0f;
        for (int j = 0; j < p.K; ++j) acc = __fadd_rn(acc, __ldcg(p.yp + size_t(p.order[tok * p.K + j]) * p.D + d));
        if (p.shared) acc = __fadd_rn(acc, __bfloat162float(p.shared[size_t(tok) * p.D + d]));
        p.y[size_t(tok) * p.D + d] = __float2bfloat16_rn(acc);
    }
}

}  // namespace dsv4::cuda
