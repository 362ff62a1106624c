// sm90_mxfp4_moe_prefill: device side. Five launches (docs/kernels/moe_prefill.md):
//
//  1. prepare: every block counts the T·K picks per expert (each block redundantly: a few hundred KB of L2 reads) so
//     it knows each expert's segment of the expert-sorted pick list and how many of an expert's picks precede its own
//     tokens; it then places its own picks in that list and quantises its tokens' rows of x (act_quant, e4m3 per 128
//     with a UE8M0 scale) into every position the token occupies: xg [T·K, D], contiguous per expert. Block 0 writes
//     the table of 128-row M tiles (expert, first list position, valid rows).
//  2. gate/up grouped GEMM: tile = (M tile, 64 rows of I): B = 64 rows of w1 stacked on the same 64 rows of w3 (128
//     wgmma N columns), so a thread holds u1 and u3 of the same (token, row) and applies clamp, SwiGLU and the routing
//     weight in registers; bf16 hidden h [T·K, I].
//  3. hidden quantisation: h to e4m3 per 128 for the down GEMM: hq [T·K, I], hs [T·K, I/128]. Its own launch (it
//     was the gate/up epilogue's, by the second of the two tiles of a 128-block, found by an arrival counter: the
//     fence, barriers and L2 round trips of that handshake held the consumers ~10 % of the kernel's time).
//  4. down grouped GEMM: tile = (M tile, 128 rows of D), A = hq, B = w2; each pick's bf16 output yp [T·K, D].
//  5. combine: per token, Σ of its picks in ascending expert order in f32, + shared expert, one bf16 rounding.
//
// GEMM kernels (2, 4): 3 warpgroups, one persistent block per SM walking tiles M-major (blocks running together share
// an expert and sweep its weight rows, which L2 then serves to the other M tiles of that expert).
//   warpgroup 0, "converter": per 128-wide K step each thread owns one B row. It streams the row's 64 bytes of
//     e2m1 nibbles with cp.async into a private ring (kRaw steps ahead) and its UE8M0 words 8 steps at a time, converts
//     them to e4m3 and writes them into the stage's B tile in the 128-byte-swizzled K-major layout the wgmma descriptor
//     reads (16-byte chunk c of row r at chunk c ^ (r % 8)), plus the row's scale 2^(e_max - 133) as f32;
//     fence.proxy.async, arrive on the stage's "full" barrier. Thread 0 also issues the stage's A tile (TMA, one box of
//     64 rows x 128 B per 64-row block of the M tile that holds valid rows, 128B swizzle).
//   warpgroups 1, 2, consumers: an M tile of 128 or 256 rows (MoePrefillGemmShape) is 64-row blocks, consumer c
//     computing blocks c and (256 rows) c + 2; per stage and block 4 x wgmma m64n128k32 e4m3 into a block
//     accumulator, then out[block] += acc · (a_scale[row] · w_scale[col]) ("promotion" per 128 K, as
//     sm90_fp8_gemm_wgmma, but with one weight scale per column). Blocks whose rows all lie past the tile's valid
//     rows are skipped (a consumer with none left keeps the barrier protocol).
//
// FP4 -> FP8 (exact): a 32-block b of a weight row holds e2m1 codes c with scale 2^(e_b - 127); e_max = the largest
// e_b of the row's four blocks in the 128-K step, δ_b = e_max - e_b >= 0. The converter writes e4m3(c · 2^(6 - δ_b)):
// |c| <= 6 so the largest is 384 < 448, and every c · 2^(6 - δ) is an e4m3 value (normal or subnormal, step 2^-9) for
// δ <= 14 (smallest non-zero magnitude 0.5 · 2^(6-δ) >= 2^-9 needs δ <= 14; the 3-bit significand of e4m3 holds
// e2m1's 2 bits). So w = e4m3 · 2^(e_max - 133) exactly, and the per-column scale 2^(e_max - 133) moves to the
// promotion. δ > 14 (a 32-block 2^15 smaller than its 128-block neighbour) rounds RNE (documented, not exact).
// The conversion is a table lookup: for each δ an 8-byte table (magnitude code -> e4m3 byte) in shared memory; prmt
// picks 4 bytes per instruction from the nibbles (low nibble = even element, so the bytes come out in element
// order: the activation rows need no permutation) and a second prmt in sign-replicate mode yields the signs.
#pragma once

#include <cuda.h>  // CUtensorMap (types only)

#include "backend/cuda/common/mbarrier.cuh"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/workspace.h"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/common/wgmma.cuh"
#include "backend/cuda/kernels/moe/moe.h"
#include "backend/cuda/kernels/moe/mxfp4_repacked.h"

namespace dsv4::cuda {

struct MoePrefillConfig {
    static constexpr int kPrepThreads = 256;
    static constexpr int kPrepTokens = 64;   // tokens per prepare block
    static constexpr int kMaxExperts = 1024;
    static constexpr int kMaxK = 16;
    static constexpr int kMinBM = 128;       // the smaller M tile (sizes the tile table)
    static constexpr int kBN = 128;          // B rows per tile (gate/up: 64 of w1 + 64 of w3; down: 128 of w2)
    static constexpr int kBK = 128;          // K per stage: one activation scale block, one swizzle row
    static constexpr int kUpRows = 64;       // rows of I per gate/up tile
    static constexpr int kThreads = 384;     // converter warpgroup + 2 consumer warpgroups
    static constexpr int kABoxRows = 64;     // A arrives in 64-row TMA boxes, the blocks with valid rows only
    static constexpr int kABoxBytes = kABoxRows * kBK;
    static constexpr int kBTileBytes = kBN * kBK;    // 16 KiB
    static constexpr int kRawStageBytes = 128 * 64;  // [4 chunks][128 threads] x 16 B of nibbles
    static constexpr int kDeltas = 32;               // conversion tables for δ = 0..31
    static constexpr int kCombineThreads = 256;
    static constexpr int kQuantThreads = 256;         // hidden quantisation: one 32-element chunk per thread
    static constexpr int kMaxSmemBytes = 227 * 1024;  // per block on sm_90
};

// The GEMM kernels' M tile and rings. An M tile is BM positions of one expert in the sorted pick list, 64-row
// blocks b = 0 .. BM/64 - 1, consumer warpgroup c computing blocks c, c + 2, ...: with BM = 256 one converted B tile
// serves twice the rows (an expert with 129-256 picks costs one conversion of its weights instead of two), at the
// price of a consumer holding two blocks' f32 outputs (setmaxnreg) and a shallower ring (the A tile is twice as
// large). docs/kernels/moe_prefill.md, "256-row M tiles".
template <int BM, int Stages, int Raw, int ScaleSteps>
struct MoePrefillGemmShape : MoePrefillConfig {
    static constexpr int kBM = BM;
    static constexpr int kBlocksPerConsumer = BM / 128;  // 64-row M blocks per consumer warpgroup
    static constexpr int kStages = Stages;               // A + B tile ring
    static constexpr int kRaw = Raw;                     // converter's raw-weight ring (prefetch distance kRaw - 1)
    // A row's UE8M0 scale words are copied kScaleSteps steps at a time (16-byte copies) into a double-buffered
    // ring, not 4 bytes per step: 128 rows' 4-byte words lie 128 B (64 B) apart, so per-step copies cost a warp 32
    // sectors per step (docs/kernels/moe_prefill.md, "Scale words eight steps at a time").
    static constexpr int kScaleSteps = ScaleSteps;
    static constexpr int kScaleRingBytes = 2 * kScaleSteps * 4 * 128;  // [2 chunks][steps / 4][128 threads] x 16 B
    static constexpr int kATileBytes = kBM * kBK;
    static constexpr int kStageBytes = kATileBytes + kBTileBytes;  // A then B
    // registers after setmaxnreg with two blocks per consumer (launch: 384 x 168): acc + 2 x out = 192 floats
    static constexpr int kConverterRegs = 56, kConsumerRegs = 224;
    static constexpr int kSmemBytes = kStages * kStageBytes + kStages * kBN * 4 + kRaw * kRawStageBytes +
                                      kScaleRingBytes + kDeltas * 8 + 1024;  // + slack for the 1024-aligned ring
    static_assert(BM == 128 || BM == 256, "one or two 64-row blocks per consumer warpgroup");
    static_assert(kScaleSteps % 4 == 0 && kRaw - 1 <= kScaleSteps,
                  "a scale chunk is overwritten only after its last step was converted");
    static_assert(kSmemBytes + 64 <= kMaxSmemBytes, "dynamic + static shared memory of one block");
};
using MoePrefillGemm128 = MoePrefillGemmShape<128, 5, 5, 8>;
using MoePrefillGemm256 = MoePrefillGemmShape<256, 4, 3, 4>;

// Workspace layout (byte offsets, 256-aligned); the launcher and the tests size it the same way.
struct MoePrefillWorkspace {
    size_t n_mtiles, tile_expert, tile_row0, tile_rows, list, xg, xs, h, hq, hs, yp, total;
    int64_t max_mtiles;
    static MoePrefillWorkspace make(int64_t T, int64_t K, int64_t E, int64_t D, int64_t I) {
        MoePrefillWorkspace w{};
        const int64_t picks = T * K;
        // each expert's last tile may be partial: at most one extra tile per touched expert
        w.max_mtiles = (picks + MoePrefillConfig::kMinBM - 1) / MoePrefillConfig::kMinBM + (picks < E ? picks : E);
        WorkspaceLayout l;
        w.n_mtiles = l.take(4);
        w.tile_expert = l.take(4 * size_t(w.max_mtiles));
        w.tile_row0 = l.take(4 * size_t(w.max_mtiles));
        w.tile_rows = l.take(4 * size_t(w.max_mtiles));
        w.list = l.take(4 * size_t(picks));
        w.xg = l.take(size_t(picks) * size_t(D));
        w.xs = l.take(4 * size_t(picks) * size_t(D / 128));
        w.h = l.take(2 * size_t(picks) * size_t(I));
        w.hq = l.take(size_t(picks) * size_t(I));
        w.hs = l.take(4 * size_t(picks) * size_t(I / 128));
        w.yp = l.take(2 * size_t(picks) * size_t(D));
        w.total = l.bytes;
        return w;
    }
};

struct MoePrefillParams {
    const __nv_bfloat16* x;        // [T, D]
    const int32_t* idx;            // [T, K]
    const float* route_w;          // [T, K]
    const Mxfp4ExpertPtrs* experts;  // [E]
    const __nv_bfloat16* shared;   // [T, D] or null
    __nv_bfloat16* y;              // [T, D]
    int T, K, E, D, I, max_mtiles;
    int bm;  // M tile rows of this call (MoePrefillGemm128 / 256)
    float limit;
    int* n_mtiles;                 // [1]
    int* tile_expert;              // [max_mtiles]
    int* tile_row0;                // [max_mtiles] first list position of the tile
    int* tile_rows;                // [max_mtiles] valid rows (1..bm)
    int* list;                     // [T·K] pick index t·K + k of each list position, grouped by expert
    uint8_t* xg;                   // [T·K, D] e4m3 rows of x by list position
    float* xs;                     // [T·K, D/128]
    __nv_bfloat16* h;              // [T·K, I] hidden activations by list position
    uint8_t* hq;                   // [T·K, I] e4m3
    float* hs;                     // [T·K, I/128]
    __nv_bfloat16* yp;             // [T·K, D] each pick's bf16 expert output, by pick index
};

namespace moe_prefill {

// ------------------------------------------------------------------------------------ cp.async (converter ring)

__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// -------------------------------------------------------------------------------------------- FP4 -> FP8

// 8 e2m1 codes (nibble j = element j, bit 3 = sign) -> 8 e4m3 bytes in element order. (tl, th): the 8-byte table
// magnitude code -> e4m3 byte of the block's δ. prmt's selector nibble picks a byte of (tl, th) with bits 0-2; with
// bit 3 set (the default mode's sign-replicate) it yields the selected byte's msb replicated instead, so a constant
// 0x7f source gives 0x7f for positive codes and 0x00 for negative ones: bit 0 of each byte is the inverted sign,
// shifted up to bit 7 of the same byte (the bits shifted into the next byte are masked off).
__device__ __forceinline__ uint2 e2m1x8_to_e4m3(uint32_t w, uint32_t tl, uint32_t th) {
    const uint32_t mag = w & 0x77777777u;
    const uint32_t lo = prmt_b32(tl, th, mag), hi = prmt_b32(tl, th, mag >> 16);
    const uint32_t pos_lo = prmt_b32(0x7f7f7f7fu, 0x7f7f7f7fu, w), pos_hi = prmt_b32(0x7f7f7f7fu, 0x7f7f7f7fu, w >> 16);
    return make_uint2(lo | (~(pos_lo << 7) & 0x80808080u), hi | (~(pos_hi << 7) & 0x80808080u));
}

// The same for a word of the repacked layout (mxfp4_repacked.h): its table conversion yields the bytes in the order
// (v0, v4, v1, v5 | v2, v6, v3, v7); two byte permutations put them back in element order, so the B tile (and its K
// order against the activations) is the shipped layout's, bit for bit. (tl, th): the table of the block's delta.
__device__ __forceinline__ uint2 repacked_x8_to_e4m3(uint32_t r, uint32_t tl, uint32_t th) {
    uint32_t lo, hi;
    mxfp4_repacked_to_e4m3(r, tl, th, lo, hi);
    return make_uint2(prmt_b32(lo, hi, 0x6420u), prmt_b32(lo, hi, 0x7531u));
}

// 2^e as f32 for e >= -149 (subnormal below -126), e <= 127.
__device__ __forceinline__ float pow2_f32(int e) {
    return e >= -126 ? __uint_as_float(uint32_t(e + 127) << 23) : (e >= -149 ? __uint_as_float(1u << (e + 149)) : 0.f);
}

// act_quant of one 128-block held by a quad (lane%4 = t holds elements 32t..32t+31 in v): the 32 e4m3 codes (element
// order) in q, returns the f32 scale. Every lane of the warp must call it (quad shuffles).
__device__ __forceinline__ float quant32_e4m3(const float (&v)[32], uint32_t (&q)[8]) {
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(v[i]));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    const int e = ue8m0_exponent_for(amax, 1e-4f, 448.0f);
    const float inv = exp2_int(-e);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        uint32_t wd = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j)
            wd |= uint32_t(f32_to_e4m3(fminf(fmaxf(v[4 * i + j] * inv, -448.0f), 448.0f))) << (8 * j);
        q[i] = wd;
    }
    return exp2_int(e);
}

}  // namespace moe_prefill
}  // namespace dsv4::cuda
