// sm90_mxfp4_moe_decode: the routed experts of one MoE layer at decode shapes, in three launches (and, with
// MoeDecodeArgs::shared_expert, the shared expert as one more slot after the active ones: FP8 blocks, every token,
// weight 1, its picks numbered T·K + t, its bf16 output added after the routed sum).
//
//  1. sm90_moe_prepare: one block per token quantises x to e4m3 per 128 channels (UE8M0 scale) and stores the
//     codes as f16 values in the "pair order" below; one more block groups the T·K picks by expert (counting sort:
//     per-expert token lists, the ascending list of active experts) and sorts each token's picks by expert id for
//     the final combine. It also zeroes the arrival counters of launches 2 and 3.
//  2. sm90_moe_gate_up: block (64 rows of I, active expert slot). Its 8 warps are 4 row tiles of 16 x 2 K splits
//     of K = D; they stream the w1 and w3 rows once for all the expert's tokens (8 per MMA); the block reduces the
//     K splits in shared memory, rounds u1/u3 to bf16, applies clamp, SwiGLU and the routing weight, rounds to bf16
//     and stores the hidden rows. The second of the 2 blocks covering a 128-row block of I (an arrival counter)
//     quantises those hidden values to e4m3 per 128 for the down GEMM.
//  3. sm90_moe_down: block (128 rows of D, active slot; 8 row tiles, each warp all of K = I): w2 streamed once, the
//     bf16 expert output of each pick stored as f32; the last block to finish a row range (arrival counter = number
//     of active experts, + 2 for the shared expert's two half-height blocks of 4 row tiles x 2 K splits) sums every
//     token's K picks in ascending expert order in f32, adds the shared expert's output and rounds to bf16.
//
// Inner loop (both GEMMs). Weights are the MMA's A (mma.sync m16n8k16, f16 inputs, f32 accumulators), tokens
// its B. Lane (g, t) = (lane/4, lane%4) loads 16 bytes = one whole 32-element MXFP4 block (4q+t of each
// 128-element block q) of rows g and g+8 directly into registers (16-byte non-caching loads, no shared-memory
// staging: at decode shapes every byte is used by exactly one warp). e2m1 -> f16 is two shifts and two masks per
// pair of values (sign to bit 15, exponent/mantissa to bits 11..9: the f16 value is e2m1 · 2^-14, exact), then one
// f16 multiply by 2^(e_t - e_max + 14), where e_t is the block's UE8M0 exponent and e_max the largest of the four
// in the 128-block: the values stay exact (the factor is a power of two and e2m1 · 2^(e_t - e_max) is an f16
// value down to 23 binades below e_max; real checkpoints span a few). The MMA sums the 128 products exactly in
// f32, and y += acc · (2^(e_max - 127) · a_scale) reproduces the reference's Σ_32-blocks acc_b · (a_s · w_s_b).
//
// Pair order: the K permutation inside each 32-element block is free as long as A and B agree. The conversion
// yields, from 32-bit word m of the block (nibbles n0..n7 = elements 8m..8m+7), the f16 pairs
// P(m, r) = (element 8m+3-r, element 8m+7-r), r = 0..3, and MMA j (K step of 16) takes pairs 2j and 2j+1 (pair
// p = 4m + r). Activations are therefore stored permuted the same way, so a lane's B fragments are four 16-byte
// loads.
//
// Weight formats (the format tag Fmt of expert_rows_gemm, the items and the kernels; docs/kernels/moe.md "Weight
// formats"). Only the weight load and its conversion to f16 A fragments differ; activations, pair order, MMA,
// reduction and epilogues are shared.
//  * Mxfp4Weights: as above.
//  * Mxfp4RepackedWeights: MXFP4 whose words were bit-permuted at upload (mxfp4_repacked.h): each word becomes 8 e4m3
//    bytes through an 8-byte table of the lane's 32-block (prmt, block scale folded in) and then f16 pairs (cvt), 7 +
//    4 instructions per 8 weights instead of ~20; same pair order, same MMAs, the same output bits (delta <= 14).
//  * Nvfp4Weights (ModelOpt): the same nibble packing, one e4m3 scale per 16 elements, one f32 global scale per
//    matrix. A lane's 32-element block holds two scale groups: words 0-1 (MMAs j = 0..3) the first, words 2-3
//    (j = 4..7) the second. The f16 A value is (e2m1 · 2^-14) · (s16 · 2^7) = e2m1 · s16 · 2^-7, one f16 multiply,
//    exact: e2m1 · s16 has at most 6 significant bits and is a multiple of 2^-10 at most 2688, so the scaled value is
//    a multiple of 2^-17 (f16 subnormals reach 2^-24) at most 21; s16 · 2^7 <= 57344 is an f16 value. Per 128-block
//    y += acc · ((2^7 · global) · a_scale), both factors exact products with powers of two.
//  * Fp8BlockWeights (DeepSeek): e4m3 bytes [rows, cols], one UE8M0 per 128x128 block. Row bytes = K, so a step is
//    one 128-block (the same bytes per lane as the 4-bit formats' two blocks): lane t loads elements 32t..32t+31 of
//    the block (two 16-byte loads per row), permutes bytes into pair order with prmt and converts pairs with
//    cvt.rn.f16x2.e4m3x2 (exact). Per 128-block y += acc · (2^(s-127) · a_scale), s shared by the 16 rows of a tile.
#pragma once

#include <cuda_fp16.h>

#include <type_traits>

#include "backend/cuda/common/ld_stream.cuh"
#include "backend/cuda/common/mma_bf16.cuh"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/regimes.h"
#include "backend/cuda/common/workspace.h"
#include "backend/cuda/kernels/moe/moe.h"
#include "backend/cuda/kernels/moe/mxfp4_repacked.h"

namespace dsv4::cuda {

struct MoeDecodeConfig {
    static constexpr int kPrepThreads = 256;
    static constexpr int kMaxExperts = 1024;
    static constexpr int kMaxK = 16;
    static constexpr int kMaxTokens = int(kDecodeMaxRows);
    static constexpr int kTokTile = 8;  // MMA N
    static constexpr int kStepK = 256;  // K per load step: 2 blocks of 128
    // The register-streaming kernels' blocks (256 threads each): gate/up 4 row tiles x 2 K-splits (64 rows of I,
    // 8 K steps per warp), down 8 row tiles x 1 (128 rows of D, all 8 K steps per warp, no K reduction). Larger
    // blocks pay the per-block chain (metadata loads, reduction, epilogue, arrival counter) for more bytes: the
    // measured gain over 16 / 32-row blocks is in docs/kernels/moe.md.
    static constexpr int kUpRT = 4, kUpKS = 2;
    static constexpr int kDownRT = 8, kDownKS = 1;
    static constexpr int kUpRows = 16 * kUpRT;      // rows of I per gate/up block
    static constexpr int kDownRows = 16 * kDownRT;  // rows of D per down block
    static constexpr int kMinDownRows = 32;         // the smallest down item: sizes the cnt_down array
};

// Weight format tags (header comment). kStepK: K per load step of a warp (the same 16 bytes per lane and row for
// every format: two 128-blocks of 4-bit codes or one of e4m3 bytes).
struct Mxfp4Weights {
    static constexpr int kStepK = MoeDecodeConfig::kStepK;
};
struct Mxfp4RepackedWeights {  // the same bytes, bits permuted inside each word (mxfp4_repacked.h)
    static constexpr int kStepK = MoeDecodeConfig::kStepK;
};
// The same repacked bytes through FP8 wgmma instead of f16 mma.sync (mxfp4_wgmma.cuh; MoeDecodeArgs::fp8_wgmma)
struct Mxfp4WgmmaWeights {
    static constexpr int kStepK = MoeDecodeConfig::kStepK;
};
struct Nvfp4Weights {
    static constexpr int kStepK = MoeDecodeConfig::kStepK;
};
struct Fp8BlockWeights {
    static constexpr int kStepK = 128;
};

// Workspace layout (byte offsets, each 256-aligned). Shared by the launcher and the benchmark.
struct MoeWorkspace {
    size_t n_active, active_expert, active_start, active_count, list, order, cnt_up, up_done, cnt_down, xq, xs, h, hq,
        hs, yp, route_scores, total;
    static MoeWorkspace make(int64_t T, int64_t K, int64_t E, int64_t D, int64_t I) {
        MoeWorkspace w{};
        // room for the shared expert as one more slot after the active ones (MoeDecodeArgs::shared_expert): its T
        // "picks" T·K .. T·K + T − 1 take list positions, hidden rows and output rows after the routed ones
        const int64_t picks = T * K + T, slots = (T * K < E ? T * K : E) + 1;
        WorkspaceLayout l;
        w.n_active = l.take(4);
        w.active_expert = l.take(4 * size_t(slots));
        w.active_start = l.take(4 * size_t(slots));
        w.active_count = l.take(4 * size_t(slots));
        w.list = l.take(4 * size_t(picks));
        w.order = l.take(4 * size_t(T * K));
        w.cnt_up = l.take(4 * size_t(slots) * size_t(I / 128));
        w.up_done = l.take(4 * size_t(slots));
        w.cnt_down = l.take(4 * size_t(D / MoeDecodeConfig::kMinDownRows));
        w.xq = l.take(2 * size_t(T) * size_t(D));
        w.xs = l.take(4 * size_t(T) * size_t(D / 128));
        w.h = l.take(2 * size_t(picks) * size_t(I));
        w.hq = l.take(2 * size_t(picks) * size_t(I));
        w.hs = l.take(4 * size_t(picks) * size_t(I / 128));
        w.yp = l.take(4 * size_t(picks) * size_t(D));
        w.route_scores = l.take(2 * 4 * size_t(T) * size_t(E));  // MoeDecodeArgs::route: scores, selection values
        w.total = l.bytes;
        return w;
    }
};

struct MoeKernelParams {
    const __nv_bfloat16* x;       // [T, D]
    const int32_t* idx;           // [T, K]
    const float* route_w;         // [T, K]
    const void* experts;          // [E] Mxfp4ExpertPtrs, Nvfp4ExpertPtrs or Fp8BlockExpertPtrs (the kernels' Fmt)
    const __nv_bfloat16* shared;  // [T, D] or null
    const Fp8BlockExpertPtrs* shared_expert;  // [1] or null: run as slot n_active (its picks T·K + t)
    __nv_bfloat16* y;                         // [T, D]
    int T, K, E, D, I, slots;
    float limit;
    int* n_active;       // [1]
    int* active_expert;  // [slots + 1] expert id of each active slot, ascending
    int* active_start;   // [slots + 1] first list position (the shared slot's: T*K)
    int* active_count;   // [slots + 1] picks of the expert (the shared slot's: T)
    int* list;           // [T*K + T] pick index t*K+k grouped by expert, then the shared picks T*K + t
    int* order;          // [T*K] each token's pick indices sorted by expert id
    int* cnt_up;         // [slots + 1, I/128] arrivals per 128-row block of I
    int* up_done;        // [slots + 1] 128-row blocks of I quantised for the down GEMM
    int* cnt_down;       // [D / kMinDownRows] arrivals per row range of D
    __half* xq;          // [T, D] e4m3 values of x as f16, pair order
    float* xs;           // [T, D/128]
    __nv_bfloat16* h;    // [T*K + T, I] hidden activations by list position
    __half* hq;          // [T*K + T, I] their e4m3 values as f16, pair order
    float* hs;           // [T*K + T, I/128]
    float* yp;           // [T*K + T, D] bf16-rounded expert outputs by pick index
};

// A pick's token and routing weight: routed picks t·K + j carry route_w; the shared expert's picks T·K + t weight 1.
__device__ __forceinline__ int pick_token(const MoeKernelParams& p, int pick) {
    const int routed = p.T * p.K;
    return pick < routed ? pick / p.K : pick - routed;
}
__device__ __forceinline__ float pick_weight(const MoeKernelParams& p, int pick) {
    return pick < p.T * p.K ? p.route_w[pick] : 1.0f;
}

// ---------------------------------------------------------------------------------------------- numerics helpers

// Position of element e (0..31) of a 32-element block in pair order (see the header comment).
__device__ __forceinline__ int pair_order_pos(int e) {
    const int m = e >> 3, w = e & 7;
    return w < 4 ? 2 * (4 * m + 3 - w) : 2 * (4 * m + 7 - w) + 1;
}

// Quantises one 128-block held by a quad (lane%4 = t holds elements 32t..32t+31 in v) to e4m3 as the reference's
// act_quant does, and writes the 32 values (as f16) in pair order to out (16-byte aligned). Returns the f32 scale.
// Every lane of the warp must call it (quad shuffles).
__device__ __forceinline__ float quant_block128_to_f16(const float (&v)[32], __half* out, bool active) {
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(v[i]));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    const int e = ue8m0_exponent_for(amax, 1e-4f, 448.0f);
    const float inv = exp2_int(-e);
    uint32_t words[16];
#pragma unroll
    for (int p = 0; p < 16; ++p) {
        const int m = p >> 2, r = p & 3;
        const float lo = e4m3_to_f32(f32_to_e4m3(fminf(fmaxf(v[8 * m + 3 - r] * inv, -448.0f), 448.0f)));
        const float hi = e4m3_to_f32(f32_to_e4m3(fminf(fmaxf(v[8 * m + 7 - r] * inv, -448.0f), 448.0f)));
        const __half2 h2 = __floats2half2_rn(lo, hi);  // exact: every e4m3 value is an f16 value
        words[p] = *reinterpret_cast<const uint32_t*>(&h2);
    }
    if (active) {
        uint4* o = reinterpret_cast<uint4*>(out);
#pragma unroll
        for (int i = 0; i < 4; ++i)
            o[i] = make_uint4(words[4 * i], words[4 * i + 1], words[4 * i + 2], words[4 * i + 3]);
    }
    return exp2_int(e);
}

// f16 pair r (0..3) of a word of 8 e2m1 nibbles: (nibble 3-r, nibble 7-r) as f16 values e2m1 · 2^-14.
template <int R>
__device__ __forceinline__ uint32_t e2m1_pair_f16(uint32_t w) {
    const uint32_t x = w << (4 * R);
    return (x & 0x80008000u) | ((x >> 3) & 0x0E000E00u);
}

__device__ __forceinline__ uint32_t hmul2_bits(uint32_t a, uint32_t b) {
    uint32_t d;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

// f16x2 bits of (2^n, 2^n) for n <= 15 (subnormal below -14, zero below -24).
__device__ __forceinline__ uint32_t pow2_f16x2(int n) {
    const uint32_t b = n >= -14 ? uint32_t(n + 15) << 10 : (n >= -24 ? 1u << (n + 24) : 0u);
    return b | (b << 16);
}

// y += acc · f per (row, token) of an accumulator fragment (f0 / f1: tokens 2t / 2t+1 of row g, f2 / f3 of row
// g+8) where every f is a power of two: acc · f is then exact (barring f32 underflow below 2^-126, which the
// weight-scale and activation-floor ranges keep far away), so one fma rounds exactly as the reference's separate
// multiply and add do, in one instruction instead of two.
__device__ __forceinline__ void fold_pow2(float (&y)[4], const float (&acc)[4], float f0, float f1, float f2,
                                          float f3) {
    y[0] = __fmaf_rn(acc[0], f0, y[0]);
    y[1] = __fmaf_rn(acc[1], f1, y[1]);
    y[2] = __fmaf_rn(acc[2], f2, y[2]);
    y[3] = __fmaf_rn(acc[3], f3, y[3]);
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// The 8 MMAs of one 128-element block of e2m1 weights (rows g and g+8: w_lo / w_hi, the lane's 32 nibbles each)
// times the token tile, into a fresh accumulator. Each f16 pair of the A fragments (e2m1 · 2^-14) is multiplied by the
// factor of its half of the block: f_lo / f_hi [0] for elements 0-15 (MMAs 0-3), [1] for 16-31 (MMAs 4-7).
__device__ __forceinline__ void e2m1_block_mma(const uint4& w_lo, const uint4& w_hi, const uint32_t (&f_lo)[2],
                                               const uint32_t (&f_hi)[2], const uint4 (&act)[4], float (&acc)[4]) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const uint32_t wl = word_of(w_lo, j >> 1), wh = word_of(w_hi, j >> 1);
        uint32_t a0, a1, a2, a3;
        if (j & 1) {
            a0 = e2m1_pair_f16<2>(wl), a2 = e2m1_pair_f16<3>(wl);
            a1 = e2m1_pair_f16<2>(wh), a3 = e2m1_pair_f16<3>(wh);
        } else {
            a0 = e2m1_pair_f16<0>(wl), a2 = e2m1_pair_f16<1>(wl);
            a1 = e2m1_pair_f16<0>(wh), a3 = e2m1_pair_f16<1>(wh);
        }
        const uint32_t fl = f_lo[j >> 2], fh = f_hi[j >> 2];
        a0 = hmul2_bits(a0, fl), a2 = hmul2_bits(a2, fl);
        a1 = hmul2_bits(a1, fh), a3 = hmul2_bits(a3, fh);
        const uint4& b = act[j >> 1];
        const uint32_t b0 = (j & 1) ? b.z : b.x, b1 = (j & 1) ? b.w : b.y;
        mma_f16_16816(acc, a0, a1, a2, a3, b0, b1);
    }
}

// One 128-element block (q) of one weight matrix for rows g and g+8 of a warp's 16-row tile, times the token
// tile: 8 MMAs into a fresh accumulator, then y += acc · (2^(e_max-127) · a_scale) per (row, token).
__device__ __forceinline__ void block128_mma(const uint4& w_lo, const uint4& w_hi, uint32_t s_lo, uint32_t s_hi, int t,
                                             const uint4 (&act)[4], float sa0, float sa1, float (&y)[4]) {
    // s_*: the 4 UE8M0 bytes of the row's 32-blocks in this 128-block; lane t owns block t.
    uint32_t m_lo = __vmaxu4(s_lo, s_lo >> 16), m_hi = __vmaxu4(s_hi, s_hi >> 16);
    m_lo = __vmaxu4(m_lo, m_lo >> 8) & 0xff;
    m_hi = __vmaxu4(m_hi, m_hi >> 8) & 0xff;
    const int e_lo = int((s_lo >> (8 * t)) & 0xff), e_hi = int((s_hi >> (8 * t)) & 0xff);
    const uint32_t f_lo = pow2_f16x2(e_lo - int(m_lo) + 14), f_hi = pow2_f16x2(e_hi - int(m_hi) + 14);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const uint32_t fl[2] = {f_lo, f_lo}, fh[2] = {f_hi, f_hi};  // one factor for the whole 32-block
    e2m1_block_mma(w_lo, w_hi, fl, fh, act, acc);
    const float s_row_lo = e8m0_to_f32(uint8_t(m_lo)), s_row_hi = e8m0_to_f32(uint8_t(m_hi));
    // acc · (w_s · a_s): the product of scales is exact (powers of two)
    fold_pow2(y, acc, __fmul_rn(s_row_lo, sa0), __fmul_rn(s_row_lo, sa1), __fmul_rn(s_row_hi, sa0),
              __fmul_rn(s_row_hi, sa1));
}

// ---------------------------------------------------------------------------------- NVFP4 and FP8-block stages

// NVFP4 stage of one 128-block: as block128_mma, but lane t's 32-block carries two e4m3 group scales per row
// (sc_lo / sc_hi: bits 0-7 for elements 0-15 = MMAs j < 4, bits 8-15 for elements 16-31), and the per-(row, token)
// factors f0 / f1 = 2^7 · global · a_scale of tokens 2t and 2t+1 are the same for both rows.
__device__ __forceinline__ void block128_mma_nvfp4(const uint4& w_lo, const uint4& w_hi, uint32_t sc_lo, uint32_t sc_hi,
                                                   const uint4 (&act)[4], float f0, float f1, float (&y)[4]) {
    constexpr uint32_t kTwo7 = 0x58005800u;  // f16x2 (128, 128)
    const uint32_t s_lo = hmul2_bits(e4m3x2_f16x2(sc_lo), kTwo7), s_hi = hmul2_bits(e4m3x2_f16x2(sc_hi), kTwo7);
    // (s, s) of each group: halves duplicated
    const uint32_t f_lo[2] = {prmt_b32(s_lo, 0, 0x1010u), prmt_b32(s_lo, 0, 0x3232u)};
    const uint32_t f_hi[2] = {prmt_b32(s_hi, 0, 0x1010u), prmt_b32(s_hi, 0, 0x3232u)};
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    e2m1_block_mma(w_lo, w_hi, f_lo, f_hi, act, acc);
    y[0] = __fadd_rn(y[0], __fmul_rn(acc[0], f0));
    y[1] = __fadd_rn(y[1], __fmul_rn(acc[1], f1));
    y[2] = __fadd_rn(y[2], __fmul_rn(acc[2], f0));
    y[3] = __fadd_rn(y[3], __fmul_rn(acc[3], f1));
}

// FP8-block stage of one 128-block: w_lo / w_hi = the 32 e4m3 bytes (elements 32t..32t+31) of rows g and g+8.
// Pair P(m, r) = (element 8m+3-r, element 8m+7-r) = (byte 3-r of word 2m, byte 3-r of word 2m+1): prmt gathers
// pairs r = 0, 1 (selector 0x6273) or r = 2, 3 (0x4051) of a word pair into one register, one cvt per pair.
// f0 / f1 = 2^(s-127) · a_scale of tokens 2t and 2t+1 (one block scale for the tile's 16 rows).
__device__ __forceinline__ void block128_mma_fp8(const uint4 (&w_lo)[2], const uint4 (&w_hi)[2], const uint4 (&act)[4],
                                                 float f0, float f1, float (&y)[4]) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int m = j >> 1;
        const uint32_t sel = (j & 1) ? 0x4051u : 0x6273u;
        const uint4& l = w_lo[m >> 1];
        const uint4& h = w_hi[m >> 1];
        const uint32_t pl = prmt_b32((m & 1) ? l.z : l.x, (m & 1) ? l.w : l.y, sel);
        const uint32_t ph = prmt_b32((m & 1) ? h.z : h.x, (m & 1) ? h.w : h.y, sel);
        const uint32_t a0 = e4m3x2_f16x2(pl), a2 = e4m3x2_f16x2_hi(pl);
        const uint32_t a1 = e4m3x2_f16x2(ph), a3 = e4m3x2_f16x2_hi(ph);
        const uint4& b = act[m];
        const uint32_t b0 = (j & 1) ? b.z : b.x, b1 = (j & 1) ? b.w : b.y;
        mma_f16_16816(acc, a0, a1, a2, a3, b0, b1);
    }
    fold_pow2(y, acc, f0, f1, f0, f1);
}

// Repacked-MXFP4 stage of one 128-block (mxfp4_repacked.h): as block128_mma, but each word converts to e4m3 by its
// 32-block's table and then to f16 pairs with cvt, with no f16 multiply, and the row's scale word already holds
// (e_max, spreads). s_lo / s_hi: that word for rows g and g+8; tables: e4m3_table_for_delta for delta 0..15 in shared
// memory. The f16 values are 2^6 times block128_mma's (c · 2^(6 - delta) against c · 2^-delta), all exact, so the f32
// MMA sums are exactly 2^6 times as large and the fold by 2^(e_max - 133) gives block128_mma's bits.
// The e4m3 table (uint2) of this lane's 32-block from a repacked scale word s: `tables` is the shared-memory address
// of the 16 tables (128-byte aligned, so the byte offset is or-ed in: one lop3 with the mask), `shift` = 5 + 4t
// puts the block's delta nibble (bits 8 + 4t ..) at byte offset delta · 8.
__device__ __forceinline__ uint2 e4m3_table_of(uint32_t tables, int shift, uint32_t s) {
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(tables | ((s >> shift) & 0x78u)));
    return v;
}

__device__ __forceinline__ void block128_mma_repacked(const uint4& w_lo, const uint4& w_hi, uint32_t s_lo,
                                                      uint32_t s_hi, uint32_t tables, int shift, const uint4 (&act)[4],
                                                      float sa0, float sa1, float (&y)[4]) {
    const uint2 tab_lo = e4m3_table_of(tables, shift, s_lo), tab_hi = e4m3_table_of(tables, shift, s_hi);
    const uint32_t tl_lo = tab_lo.x, th_lo = tab_lo.y, tl_hi = tab_hi.x, th_hi = tab_hi.y;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int m = 0; m < 4; ++m) {
        // rows g (…_g) and g+8 (…_h): lo = e4m3 of elements (0, 4, 1, 5), hi = (2, 6, 3, 7) of word m, i.e. the
        // f16 pairs P(m, 3), P(m, 2) (lo) and P(m, 1), P(m, 0) (hi); MMA 2m takes P(m, 0), P(m, 1), MMA 2m+1
        // P(m, 2), P(m, 3), as in e2m1_block_mma
        uint32_t lo_g, hi_g, lo_h, hi_h;
        mxfp4_repacked_to_e4m3(word_of(w_lo, m), tl_lo, th_lo, lo_g, hi_g);
        mxfp4_repacked_to_e4m3(word_of(w_hi, m), tl_hi, th_hi, lo_h, hi_h);
        const uint4& b = act[m];
        mma_f16_16816(acc, e4m3x2_f16x2_hi(hi_g), e4m3x2_f16x2_hi(hi_h), e4m3x2_f16x2(hi_g), e4m3x2_f16x2(hi_h), b.x,
                      b.y);
        mma_f16_16816(acc, e4m3x2_f16x2_hi(lo_g), e4m3x2_f16x2_hi(lo_h), e4m3x2_f16x2(lo_g), e4m3x2_f16x2(lo_h), b.z,
                      b.w);
    }
    // 2^(e_max - 133), normal (the repack guarantees 7 <= e_max <= 254): the tables' values carry 2^6. (One shift-add
    // with the stray delta bit dropped by fabsf is 8 instructions fewer per step and, beside the fma fold, measured
    // 6-8 % slower: docs/kernels/moe.md, "The fold by fma".)
    const float s_row_lo = __uint_as_float(((s_lo & 0xff) - 6) << 23);
    const float s_row_hi = __uint_as_float(((s_hi & 0xff) - 6) << 23);
    fold_pow2(y, acc, __fmul_rn(s_row_lo, sa0), __fmul_rn(s_row_lo, sa1), __fmul_rn(s_row_hi, sa0),
              __fmul_rn(s_row_hi, sa1));
}

// Where expert_rows_gemm (and expert_rows_gemm_wgmma) reads from and who runs it. GlobalWeights: weights streamed from
// global memory straight into registers, by the whole 256-thread block (the register-streaming kernels); activations
// written by an earlier launch, through the read-only path. RingWeights<kCoherentAct, kThreads>: weights from a
// shared-memory ring slot (moe_ring.cu), run by one consumer group of kThreads threads (threads group · kThreads ...,
// named barrier 1 + group, so groups and the producer warp never wait for each other); with kCoherentAct the
// activations are read through L2 (written by other blocks of the same kernel, which the read-only path may not see).
struct GlobalWeights {
    static constexpr int kThreads = 256;
    // Mxfp4RepackedWeights and Mxfp4WgmmaWeights: the 16 e4m3 tables (e4m3_table_for_delta, delta 0..15) in
    // shared memory
    const uint2* e4m3_tables = nullptr;
    // Mxfp4WgmmaWeights: the token tile's e4m3 activations (K · 8 bytes, 1024-byte aligned; mxfp4_wgmma.cuh)
    uint8_t* act_tile = nullptr;
    __device__ __forceinline__ int tid() const { return int(threadIdx.x); }
    __device__ __forceinline__ void sync() const { __syncthreads(); }
    static __device__ __forceinline__ uint4 w16(const uint8_t* p) { return ld_stream16(p); }
    static __device__ __forceinline__ uint2 s8(const uint8_t* p) { return ld_stream8(p); }
    // NVFP4 / FP8-block scales (register-streaming kernels only: the ring is MXFP4-only)
    static __device__ __forceinline__ uint32_t s2(const uint8_t* p) { return ld_stream_u16(p); }
    static __device__ __forceinline__ uint32_t s1(const uint8_t* p) { return ld_stream_u8(p); }
    static __device__ __forceinline__ uint4 act16(const uint4* p) { return __ldg(p); }
    static __device__ __forceinline__ float act_s(const float* p) { return __ldg(p); }
};
template <bool kCoherentAct, int kGroupThreads>
struct RingWeights {
    static constexpr int kThreads = kGroupThreads;
    int group;
    __device__ __forceinline__ int tid() const { return int(threadIdx.x) - group * kThreads; }
    __device__ __forceinline__ void sync() const {
        asm volatile("bar.sync %0, %1;" ::"r"(1 + group), "n"(kThreads) : "memory");
    }
    static __device__ __forceinline__ uint4 w16(const uint8_t* p) {
        uint4 v;
        asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "r"(uint32_t(__cvta_generic_to_shared(p))));
        return v;
    }
    static __device__ __forceinline__ uint2 s8(const uint8_t* p) {
        uint2 v;
        asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];"
                     : "=r"(v.x), "=r"(v.y)
                     : "r"(uint32_t(__cvta_generic_to_shared(p))));
        return v;
    }
    static __device__ __forceinline__ uint4 act16(const uint4* p) { return kCoherentAct ? __ldcg(p) : __ldg(p); }
    static __device__ __forceinline__ float act_s(const float* p) { return kCoherentAct ? __ldcg(p) : __ldg(p); }
};

// The B fragments and activation scales of one 256-wide K step (two 128-blocks q) of the 4-bit formats: lane t's
// 32 pair-ordered f16 values of block 4q+t of its token (zeros when the token column does not exist) and the scales
// of its two accumulator columns.
template <class Src>
__device__ __forceinline__ void load_step_activations(const __half* arow, const float* srow0, const float* srow1,
                                                      int step, int t, bool tok_b, bool col0, bool col1,
                                                      uint4 (&av)[2][4], float (&sa)[2][2]) {
#pragma unroll
    for (int q = 0; q < 2; ++q) {
        const uint4* ap = reinterpret_cast<const uint4*>(arow + size_t(step * 2 + q) * 128 + t * 32);
#pragma unroll
        for (int i = 0; i < 4; ++i) av[q][i] = tok_b ? Src::act16(ap + i) : make_uint4(0, 0, 0, 0);
        sa[q][0] = col0 ? Src::act_s(srow0 + step * 2 + q) : 0.0f;
        sa[q][1] = col1 ? Src::act_s(srow1 + step * 2 + q) : 0.0f;
    }
}

// One K step's 4-bit weight loads of one matrix (MXFP4 and NVFP4 pack alike): lane t's 16 bytes of 32-block t of
// both 128-blocks q of rows r_lo, r_hi (wv[row][q]).
template <class Src>
__device__ __forceinline__ void load_fp4_step_weights(const uint8_t* w, int r_lo, int r_hi, size_t row_bytes, int step,
                                                      int t, uint4 (&wv)[2][2]) {
#pragma unroll
    for (int q = 0; q < 2; ++q) {
        const size_t off = size_t(step * 2 + q) * 64 + size_t(t) * 16;
        wv[0][q] = Src::w16(w + size_t(r_lo) * row_bytes + off);
        wv[1][q] = Src::w16(w + size_t(r_hi) * row_bytes + off);
    }
}

// One K step's loads of the MXFP4 formats for rows r_lo, r_hi of each matrix: the weights (wv[m][row][q]) and the two
// rows' 8 scale bytes of the step (sv[m][row]).
template <int MATS, class Src>
__device__ __forceinline__ void load_mxfp4_step(const uint8_t* const (&w)[MATS], const uint8_t* const (&ws)[MATS],
                                                int r_lo, int r_hi, size_t row_bytes, size_t srow_bytes, int step,
                                                int t, uint4 (&wv)[MATS][2][2], uint2 (&sv)[MATS][2]) {
#pragma unroll
    for (int m = 0; m < MATS; ++m) {
        load_fp4_step_weights<Src>(w[m], r_lo, r_hi, row_bytes, step, t, wv[m]);
        sv[m][0] = Src::s8(ws[m] + size_t(r_lo) * srow_bytes + size_t(step) * 8);
        sv[m][1] = Src::s8(ws[m] + size_t(r_hi) * srow_bytes + size_t(step) * 8);
    }
}

// The end of the GEMM core: the K splits' partial sums y of each (row tile, matrix) are added in split order through
// shared memory `red` (KS·RT·MATS·128 floats; red[(ks · RT + rt) · MATS + m][lane · 4 + i]); the warps with ks == 0
// hold the totals.
template <int MATS, int RT, int KS, class Src>
__device__ __forceinline__ void reduce_k_splits(const Src& src, float* red, float (&y)[MATS][4]) {
    if constexpr (KS > 1) {
        const int lane = src.tid() & 31, warp = src.tid() >> 5, rt = warp % RT, ks = warp / RT;
#pragma unroll
        for (int m = 0; m < MATS; ++m)
            *reinterpret_cast<float4*>(red + size_t((ks * RT + rt) * MATS + m) * 128 + lane * 4) =
                make_float4(y[m][0], y[m][1], y[m][2], y[m][3]);
        src.sync();
        if (ks == 0) {
#pragma unroll
            for (int m = 0; m < MATS; ++m) {
                for (int s = 1; s < KS; ++s) {
                    const float4 v =
                        *reinterpret_cast<const float4*>(red + size_t((s * RT + rt) * MATS + m) * 128 + lane * 4);
                    y[m][0] = __fadd_rn(y[m][0], v.x), y[m][1] = __fadd_rn(y[m][1], v.y);
                    y[m][2] = __fadd_rn(y[m][2], v.z), y[m][3] = __fadd_rn(y[m][3], v.w);
                }
            }
        }
        src.sync();  // red is reused by the next token tile
    }
}

// The GEMM core shared by both expert GEMMs. The block's warps are RT row tiles x KS K-splits; warp (rt, ks)
// owns rows row0 + 16·rt + {g, g+8} and the K steps (Fmt::kStepK wide) ks, ks+KS, ... For one tile of up to 8 tokens
// (act_row[c] = activation row of token column c, c < ntile) it accumulates y[m][.] = (row g, col 2t),
// (row g, col 2t+1), (row g+8, col 2t), (row g+8, col 2t+1) for each of the MATS matrices, and reduces the K splits
// through shared memory `red` (KS·RT·MATS·128 floats) in split order. On return the warps with ks == 0 hold the
// totals. Fmt selects the weight stage (header comment): w[m] = the matrix, ws[m] = its scales (MXFP4 [rows, K/32]
// UE8M0, NVFP4 [rows, K/16] e4m3, FP8 block [rows/128, K/128] UE8M0, for which row0 must be the row in the whole
// matrix: global weights only), wg[m] = the NVFP4 global scale (unused by the other formats).
template <class Fmt, int MATS, int RT, int KS, class Src>
__device__ __forceinline__ void expert_rows_gemm(const Src& src, const uint8_t* const (&w)[MATS],
                                                 const uint8_t* const (&ws)[MATS], const float (&wg)[MATS], int K,
                                                 int row0, const __half* act, const float* act_s,
                                                 const int (&act_row)[MoeDecodeConfig::kTokTile], int ntile, float* red,
                                                 float (&y)[MATS][4]) {
    const int lane = src.tid() & 31, warp = src.tid() >> 5, g = lane >> 2, t = lane & 3;
    const int rt = warp % RT, ks = warp / RT;
    const int r_lo = row0 + 16 * rt + g, r_hi = r_lo + 8;
    const size_t row_bytes = size_t(K) / 2, srow_bytes = size_t(K) / 32;
    const int nsteps = K / MoeDecodeConfig::kStepK, nq = K / 128;
    const bool tok_b = g < ntile;  // this lane's B column (token g) exists
    const __half* arow = act + size_t(tok_b ? act_row[g] : 0) * size_t(K);
    const int c0 = 2 * t, c1 = 2 * t + 1;
    const float* srow0 = act_s + size_t(c0 < ntile ? act_row[c0] : 0) * size_t(nq);
    const float* srow1 = act_s + size_t(c1 < ntile ? act_row[c1] : 0) * size_t(nq);
#pragma unroll
    for (int m = 0; m < MATS; ++m) y[m][0] = y[m][1] = y[m][2] = y[m][3] = 0.0f;
    if constexpr (std::is_same_v<Fmt, Nvfp4Weights>) {
        // as MXFP4, with the lane's two e4m3 group scales (2 bytes at group 2(4q+t)) per row and 128-block
        const size_t nsrow_bytes = size_t(K) / 16;
        float gk[MATS];  // 2^7 · global: exact
#pragma unroll
        for (int m = 0; m < MATS; ++m) gk[m] = __fmul_rn(wg[m], 128.0f);
        for (int step = ks; step < nsteps; step += KS) {
            uint4 wv[MATS][2][2];
            uint32_t sv[MATS][2][2];  // [matrix][row g, g+8][128-block]
#pragma unroll
            for (int m = 0; m < MATS; ++m) {
                load_fp4_step_weights<Src>(w[m], r_lo, r_hi, row_bytes, step, t, wv[m]);
#pragma unroll
                for (int q = 0; q < 2; ++q) {
                    const size_t soff = size_t(step * 2 + q) * 8 + size_t(t) * 2;
                    sv[m][0][q] = Src::s2(ws[m] + size_t(r_lo) * nsrow_bytes + soff);
                    sv[m][1][q] = Src::s2(ws[m] + size_t(r_hi) * nsrow_bytes + soff);
                }
            }
            uint4 av[2][4];
            float sa[2][2];
            load_step_activations<Src>(arow, srow0, srow1, step, t, tok_b, c0 < ntile, c1 < ntile, av, sa);
#pragma unroll
            for (int q = 0; q < 2; ++q) {
#pragma unroll
                for (int m = 0; m < MATS; ++m)
                    block128_mma_nvfp4(wv[m][0][q], wv[m][1][q], sv[m][0][q], sv[m][1][q], av[q],
                                       __fmul_rn(gk[m], sa[q][0]), __fmul_rn(gk[m], sa[q][1]), y[m]);
            }
        }
    } else if constexpr (std::is_same_v<Fmt, Fp8BlockWeights>) {
        // one 128-block per step: rows of K bytes, lane t's 32 bytes as two 16-byte loads per row; one UE8M0 per
        // (128-row block, 128-block), the same for rows g and g+8 (16-row tiles never straddle 128 rows)
        const size_t frow_bytes = size_t(K);
        const size_t srow = size_t(r_lo / 128) * size_t(nq);
        for (int step = ks; step < nq; step += KS) {
            uint4 wv[MATS][2][2];  // [matrix][row g, g+8][bytes 0-15, 16-31 of the lane's 32]
            uint32_t sv[MATS];
#pragma unroll
            for (int m = 0; m < MATS; ++m) {
                const size_t off = size_t(step) * 128 + size_t(t) * 32;
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    wv[m][0][h] = Src::w16(w[m] + size_t(r_lo) * frow_bytes + off + 16 * h);
                    wv[m][1][h] = Src::w16(w[m] + size_t(r_hi) * frow_bytes + off + 16 * h);
                }
                sv[m] = Src::s1(ws[m] + srow + size_t(step));
            }
            uint4 av[4];
            const uint4* ap = reinterpret_cast<const uint4*>(arow + size_t(step) * 128 + t * 32);
#pragma unroll
            for (int i = 0; i < 4; ++i) av[i] = tok_b ? Src::act16(ap + i) : make_uint4(0, 0, 0, 0);
            const float sa0 = c0 < ntile ? Src::act_s(srow0 + step) : 0.0f;
            const float sa1 = c1 < ntile ? Src::act_s(srow1 + step) : 0.0f;
#pragma unroll
            for (int m = 0; m < MATS; ++m) {
                const float s_w = e8m0_to_f32(uint8_t(sv[m]));
                block128_mma_fp8(wv[m][0], wv[m][1], av, __fmul_rn(s_w, sa0), __fmul_rn(s_w, sa1), y[m]);
            }
        }
    } else {
        static_assert(std::is_same_v<Fmt, Mxfp4Weights> || std::is_same_v<Fmt, Mxfp4RepackedWeights>,
                      "weight format tag");
        // the lane's base addresses, advanced by a constant per step (not rebuilt from row, step and lane)
        const uint8_t* wp[MATS][2];
        const uint8_t* sp[MATS][2];
#pragma unroll
        for (int m = 0; m < MATS; ++m) {
            wp[m][0] = w[m] + size_t(r_lo) * row_bytes + size_t(ks) * 128 + size_t(t) * 16;
            wp[m][1] = w[m] + size_t(r_hi) * row_bytes + size_t(ks) * 128 + size_t(t) * 16;
            sp[m][0] = ws[m] + size_t(r_lo) * srow_bytes + size_t(ks) * 8;
            sp[m][1] = ws[m] + size_t(r_hi) * srow_bytes + size_t(ks) * 8;
        }
        const uint4* ap = reinterpret_cast<const uint4*>(arow + size_t(ks) * 256 + t * 32);
        const float* sa0p = srow0 + ks * 2;
        const float* sa1p = srow1 + ks * 2;
        // repacked: the shared-memory address of the e4m3 tables and the shift of this lane's delta nibbles
        uint32_t tables = 0;
        if constexpr (std::is_same_v<Fmt, Mxfp4RepackedWeights>)
            tables = uint32_t(__cvta_generic_to_shared(src.e4m3_tables));
        const int table_shift = 5 + 4 * t;
        for (int step = ks; step < nsteps; step += KS) {
            // issue every load of the step first: weights (2 blocks of 128 x 2 rows x MATS), scales, activations
            uint4 wv[MATS][2][2];
            uint2 sv[MATS][2];
#pragma unroll
            for (int m = 0; m < MATS; ++m) {
#pragma unroll
                for (int q = 0; q < 2; ++q) {
                    wv[m][0][q] = Src::w16(wp[m][0] + q * 64);
                    wv[m][1][q] = Src::w16(wp[m][1] + q * 64);
                }
                sv[m][0] = Src::s8(sp[m][0]);
                sv[m][1] = Src::s8(sp[m][1]);
                wp[m][0] += KS * 128, wp[m][1] += KS * 128, sp[m][0] += KS * 8, sp[m][1] += KS * 8;
            }
            uint4 av[2][4];
            float sa[2][2];
#pragma unroll
            for (int q = 0; q < 2; ++q) {
#pragma unroll
                for (int i = 0; i < 4; ++i) av[q][i] = tok_b ? Src::act16(ap + q * 16 + i) : make_uint4(0, 0, 0, 0);
                sa[q][0] = c0 < ntile ? Src::act_s(sa0p + q) : 0.0f;
                sa[q][1] = c1 < ntile ? Src::act_s(sa1p + q) : 0.0f;
            }
            ap += KS * 32, sa0p += KS * 2, sa1p += KS * 2;
#pragma unroll
            for (int q = 0; q < 2; ++q) {
#pragma unroll
                for (int m = 0; m < MATS; ++m) {
                    const uint32_t s_lo = q ? sv[m][0].y : sv[m][0].x, s_hi = q ? sv[m][1].y : sv[m][1].x;
                    if constexpr (std::is_same_v<Fmt, Mxfp4RepackedWeights>)
                        block128_mma_repacked(wv[m][0][q], wv[m][1][q], s_lo, s_hi, tables, table_shift, av[q],
                                              sa[q][0], sa[q][1], y[m]);
                    else
                        block128_mma(wv[m][0][q], wv[m][1][q], s_lo, s_hi, t, av[q], sa[q][0], sa[q][1], y[m]);
                }
            }
        }
    }
    reduce_k_splits<MATS, RT, KS>(src, red, y);
}

}  // namespace dsv4::cuda
