// Indexer scores on integer wgmma (kReference, packed FP4 keys, the query's integer form from
// sm90_indexer_q_finish): the engine's path (docs/kernels/attention.md, "Indexer scores on integer wgmma").
//
// Both operands are e2m1 values times power-of-two block scales (MODEL_SPEC §5.4.5, §7.2), so every product is an
// integer times a power of two: a key value e·2^(s-127) is the integer 2e (in [-12, 12]) times 2^(s-128), and the
// query finish hands over q = q_int · 2^q_exp per 32-channel block. An s8 x s8 -> s32 wgmma sums them exactly, and
// the f32 dot assembled from the integer sums is the exact dot, as the bf16 tensor-core path computes it whenever
// that path's f32 sums are exact (they are for keys and queries within a few binades; the test checks bit identity
// against it). Two ways to assemble:
//  * fast (a tile whose 64 keys each span at most 3 binades over their four blocks, a token whose heads each have
//    one exponent): the key's block scales are folded into its integers — 2e·2^(s_b - s_min) <= 96, the query's
//    are already (<= 96) — so one accumulator over K = 128 (4 k32 steps) gives dot = I · 2^q_exp · 2^(s_min - 128),
//    |I| <= 128·96·96 < 2^21 exact in f32. Both factors are powers of two, so the tile computes bf16(I), ReLU,
//    bf16(· w'_h) with w'_h = w_h·2^q_exp made once per CTA, and applies the key's 2^(s_min - 128) to the head sum
//    only: the same bits as the product of all three, two multiplies per value fewer, inside the range that
//    indexer_fold_range.h derives (checked per head and per key in the tile's vote; a tile outside it takes the
//    general fold);
//  * general (any other tile): four k32 wgmmas into their own accumulators on the unscaled key integers, dot =
//    Σ_b I_b · 2^q_exp[b] · 2^(s_b - 128) in block order.
// Then, as the bf16 path: bf16(dot), ReLU, bf16(· w_h), f32 sum over the heads in head order, bf16 out.
//
// Structure: grid (CTAs per token, tokens), at most one wave of kCtasPerSm CTAs per SM; a CTA copies its token's
// query integers into a 64 x 128 s8 tile in the 128-byte swizzle, then walks the token's key tiles tile = blockIdx.x
// + i·gridDim.x. Thread 0 keeps kStages pages in flight as 4,352-byte bulk copies (a page = 64 packed rows, the unit
// of the page table); a tile that is not a whole page (the last, partial one, or a negative page) is read by the
// threads directly. Per tile: 128 threads widen the page's nibbles to s8 (two threads per key, prmt tables), a block
// vote picks the fold, wgmma m64n64k32 (keys = M, heads = N), the fold writes bf16(w·ReLU(bf16(dot))) per (key,
// head) to shared memory, and 64 threads sum one key's heads each, in head order.
#pragma once

#include <cstdint>

#include "backend/cuda/common/mbarrier.cuh"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/common/swizzle.cuh"
#include "backend/cuda/common/wgmma.cuh"
#include "backend/cuda/kernels/indexer/indexer_fold_range.h"
#include "backend/cuda/kernels/kv_store/kv_store.cuh"

namespace dsv4::cuda {

struct IndexerS8Config {
    static constexpr int kKeys = 64, kHeads = 64, kDim = 128, kBlocks = 4;
    static constexpr int kThreads = 128;
    static constexpr int kCtasPerSm = 5;  // 20 warps per SM: the kernel is issue- and latency-bound (96 registers)
    static constexpr int kStages = 3;
    static constexpr int kPageBytes = kKeys * int(kKeyFp4RowBytes);  // 4,352
    static constexpr int kProdLd = 72;  // bf16 per product row: 144 B, conflict-free 16-byte reads by key
    // shared memory (offsets from a 1024-byte aligned base)
    static constexpr int kQOff = 0;                                    // [64 heads][128] s8, swizzled
    static constexpr int kKOff = 8192;                                 // [64 keys][128] s8, swizzled
    static constexpr int kStageOff = 16384;                            // kStages pages
    static constexpr int kProdOff = kStageOff + kStages * kPageBytes;  // [64 keys][kProdLd] bf16
    static constexpr int kSqOff = kProdOff + kKeys * kProdLd * 2;      // [4][64] f32: the query's scale per head
    static constexpr int kWOff = kSqOff + kBlocks * kHeads * 4;        // [32] bf16 pairs: head weights (0 past heads)
    static constexpr int kSkOff = kWOff + kHeads * 2;                  // [4][64] f32: the keys' scales
    static constexpr int kWqOff = kSkOff + kBlocks * kKeys * 4;        // [32] bf16 pairs: w_h · 2^q_exp[h] (fast)
    static constexpr int kBoundOff = kWqOff + kHeads * 2;              // [2 warps][lo, hi] key exponents (fast)
    static constexpr int kBarOff = kBoundOff + 16;                     // kStages mbarriers
    static constexpr int kSmem = kBarOff + kStages * 8 + 1024;         // + alignment slack
    static_assert(kCtasPerSm * (kSmem + 1024) <= 233472, "kCtasPerSm CTAs must fit one SM's shared memory");
};

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
    uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}

// prmt tables of 2e·2^shift for the e2m1 magnitude codes 0..7 (0 1 2 3 4 6 8 12, shift <= 3 keeps every byte
// <= 96) and of their negations as two's-complement bytes: a whole-word shift of the negative table moves each
// byte's top bits into its neighbour's low bits, which the mask clears (those bits of a shifted byte are zero).
struct S8Table {
    uint32_t p0, p1, n0, n1;
};
__device__ __forceinline__ S8Table s8_table(int shift) {
    const uint32_t keep = 0x01010101u * ((0xffu << shift) & 0xffu);
    return {0x03020100u << shift, 0x0C080604u << shift, (0xFDFEFF00u << shift) & keep, (0xF4F8FAFCu << shift) & keep};
}

// 8 e2m1 codes (nibble i = channel i, low nibble first) -> their table values as 8 s8 bytes in channel order (two
// words). The magnitude code selects a byte of the positive and of the negative table; the sign bits of channels
// 2j (moved to bit 7 of byte j by << 4) and 2j+1 (bit 7 of byte j already) become byte masks through prmt's
// sign-replicate selectors (selector nibble 8 + byte index).
__device__ __forceinline__ void e2m1x8_to_s8(uint32_t codes, const S8Table& tb, uint32_t& lo, uint32_t& hi) {
    const uint32_t m = codes & 0x77777777u, mh = m >> 16;
    const uint32_t pos_lo = prmt(tb.p0, tb.p1, m), pos_hi = prmt(tb.p0, tb.p1, mh);
    const uint32_t neg_lo = prmt(tb.n0, tb.n1, m), neg_hi = prmt(tb.n0, tb.n1, mh);
    const uint32_t e = codes << 4;
    const uint32_t s_lo = prmt(e, codes, 0xD9C8u), s_hi = prmt(e, codes, 0xFBEAu);
    lo = (pos_lo & ~s_lo) | (neg_lo & s_lo);
    hi = (pos_hi & ~s_hi) | (neg_hi & s_hi);
}

// Key tile `tile` of token t: s0 its first key, row0 that key's row in `keys` (-1: a negative page, zero keys), rows
// how many of its 64 keys exist (< 64 only for the last tile).
struct IndexerS8Tile {
    int64_t s0, row0;
    int rows;
};
__device__ __forceinline__ IndexerS8Tile indexer_s8_tile(int64_t tile, int64_t t, int64_t n,
                                                         const int32_t* __restrict__ key_pages,
                                                         int64_t pages_per_token) {
    constexpr int kKeys = IndexerS8Config::kKeys;
    IndexerS8Tile r;
    r.s0 = tile * kKeys;
    r.row0 = r.s0;
    if (key_pages) {
        const int32_t page = key_pages[t * pages_per_token + tile];
        r.row0 = page < 0 ? -1 : int64_t(page) * kKeys;
    }
    r.rows = r.row0 < 0 ? 0 : int(min(int64_t(kKeys), n - r.s0));
    return r;
}

__global__ void __launch_bounds__(IndexerS8Config::kThreads, IndexerS8Config::kCtasPerSm)
    sm90_indexer_scores_s8_kernel(const int8_t* __restrict__ q_int, const int8_t* __restrict__ q_exp,
                                  const uint8_t* __restrict__ keys, const __nv_bfloat16* __restrict__ w, int heads,
                                  int64_t n, int64_t ratio, const int64_t* __restrict__ positions,
                                  __nv_bfloat16* __restrict__ scores, bool visible_only,
                                  const int32_t* __restrict__ key_pages, int64_t pages_per_token) {
    pdl_enter();
    using Cfg = IndexerS8Config;
    extern __shared__ uint8_t smem_raw[];
    // aligned by pointer arithmetic on the shared array (an integer round trip would make every access generic)
    uint8_t* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
    uint8_t* q_s = smem + Cfg::kQOff;
    uint8_t* k_s = smem + Cfg::kKOff;
    uint8_t* stage_s = smem + Cfg::kStageOff;
    auto* prod_s = reinterpret_cast<__nv_bfloat16*>(smem + Cfg::kProdOff);
    auto* sq_s = reinterpret_cast<float*>(smem + Cfg::kSqOff);
    auto* w_s = reinterpret_cast<__nv_bfloat162*>(smem + Cfg::kWOff);
    auto* sk_s = reinterpret_cast<float*>(smem + Cfg::kSkOff);
    auto* wq_s = reinterpret_cast<__nv_bfloat162*>(smem + Cfg::kWqOff);
    auto* bound_s = reinterpret_cast<int*>(smem + Cfg::kBoundOff);
    auto* bars = reinterpret_cast<uint64_t*>(smem + Cfg::kBarOff);

    const int tid = threadIdx.x;
    const int64_t t = blockIdx.y;
    const int64_t visible = (positions[t] + 1) / ratio;
    const int64_t live_end = min(n, max(visible, int64_t(0)));  // keys below it are computed
    const int64_t tiles = (n + Cfg::kKeys - 1) / Cfg::kKeys, live_tiles = (live_end + Cfg::kKeys - 1) / Cfg::kKeys;
    __nv_bfloat16* out = scores + t * n;
    if (!visible_only)
        for (int64_t tile = live_tiles + blockIdx.x; tile < tiles; tile += gridDim.x)
            if (tid < Cfg::kKeys && tile * Cfg::kKeys + tid < n)
                out[tile * Cfg::kKeys + tid] = __float2bfloat16_rn(-INFINITY);
    const int64_t first = blockIdx.x, step = gridDim.x;
    const int64_t count = first < live_tiles ? (live_tiles - 1 - first) / step + 1 : 0;
    if (count == 0) return;

    // Thread 0: the first pages in flight before the query is loaded.
    const auto issue = [&](int64_t i) {
        uint64_t* bar = bars + i % Cfg::kStages;
        const IndexerS8Tile tl = indexer_s8_tile(first + i * step, t, n, key_pages, pages_per_token);
        if (tl.rows == Cfg::kKeys) {
            mbar_arrive_expect_tx(bar, Cfg::kPageBytes);
            bulk_copy_g2s(stage_s + (i % Cfg::kStages) * Cfg::kPageBytes, keys + tl.row0 * kKeyFp4RowBytes,
                          Cfg::kPageBytes, bar);
        } else {
            mbar_arrive(bar);  // read directly by the threads
        }
    };
    if (tid == 0) {
        for (int st = 0; st < Cfg::kStages; ++st) mbar_init(bars + st, 1);
        mbar_init_fence();
        for (int64_t i = 0; i < min(count, int64_t(Cfg::kStages)); ++i) issue(i);
    }

    // The query's integer form (sm90_indexer_q_finish): 64 rows of 128 int8 into the 128-byte swizzle (heads past
    // `heads` zero), per head and block the scale 2^exp, and the head weights. The token folds fast when every head
    // has one exponent q for its four blocks (its integers carry the block offsets) and allows the short form
    // (folded_head_range); the key exponents every head allows bound the keys that may.
    for (int c = tid; c < Cfg::kHeads * 8; c += Cfg::kThreads) {
        const int h = c >> 3, chunk = c & 7;
        const uint4 v = h < heads ? *reinterpret_cast<const uint4*>(q_int + (t * heads + h) * Cfg::kDim + 16 * chunk)
                                  : make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(q_s + sw128_offset(h, chunk)) = v;
    }
    bool head_fast = true;
    if (tid < Cfg::kHeads) {
        const uint32_t ex = tid < heads ? *reinterpret_cast<const uint32_t*>(q_exp + (t * heads + tid) * 4) : 0u;
        head_fast = ex == (ex & 0xffu) * 0x01010101u;
#pragma unroll
        for (int b = 0; b < 4; ++b) sq_s[b * Cfg::kHeads + tid] = exp2_int(int(int8_t(ex >> (8 * b))));
        const __nv_bfloat16 wh = tid < heads ? w[t * heads + tid] : __float2bfloat16_rn(0.0f);
        reinterpret_cast<__nv_bfloat16*>(w_s)[tid] = wh;
        const int q = int(int8_t(ex & 0xffu));
        const FoldedHeadRange range = folded_head_range(q, __bfloat16_as_ushort(wh));
        head_fast = head_fast && range.ok;
        int lo = range.k_lo, hi = range.k_hi;
        // w'_h, exact for an admitted head (a normal product); unused where the token is not folded
        const float wq = head_fast ? __fmul_rn(__bfloat162float(wh), exp2_int(q)) : 0.0f;
        reinterpret_cast<__nv_bfloat16*>(wq_s)[tid] = __float2bfloat16_rn(wq);
        lo = __reduce_max_sync(0xffffffffu, lo), hi = __reduce_min_sync(0xffffffffu, hi);  // warps 0 and 1
        if ((tid & 31) == 0) bound_s[2 * (tid >> 5)] = lo, bound_s[2 * (tid >> 5) + 1] = hi;
    }
    fence_proxy_async_smem();
    const bool token_fast = __syncthreads_and(head_fast);
    const int k_lo = max(bound_s[0], bound_s[2]), k_hi = min(bound_s[1], bound_s[3]);

    const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, qd = lane & 3;
    const int key = tid >> 1, half = tid & 1;  // conversion: key row, channels 64·half .. 64·half + 63
    const uint32_t q_addr = smem_u32(q_s), k_addr = smem_u32(k_s);
    for (int64_t i = 0; i < count; ++i) {
        const IndexerS8Tile tl = indexer_s8_tile(first + i * step, t, n, key_pages, pages_per_token);
        mbar_wait(bars + i % Cfg::kStages, uint32_t((i / Cfg::kStages) & 1));
        // this thread's 32 code bytes (blocks 2·half, 2·half + 1) and the key's 4 scale bytes
        uint32_t codes[8], sc = 0;
        if (tl.rows == Cfg::kKeys) {
            const uint8_t* row = stage_s + (i % Cfg::kStages) * Cfg::kPageBytes + key * kKeyFp4RowBytes;
#pragma unroll
            for (int k = 0; k < 8; ++k) codes[k] = *reinterpret_cast<const uint32_t*>(row + 32 * half + 4 * k);
            sc = *reinterpret_cast<const uint32_t*>(row + kKeyFp4ScaleOffset);
        } else {
            const bool have = key < tl.rows;
            const uint8_t* row = keys + (tl.row0 + key) * kKeyFp4RowBytes;
#pragma unroll
            for (int k = 0; k < 8; ++k)
                codes[k] = have ? *reinterpret_cast<const uint32_t*>(row + 32 * half + 4 * k) : 0u;
            sc = have ? *reinterpret_cast<const uint32_t*>(row + kKeyFp4ScaleOffset) : 0x7f7f7f7fu;
        }
        const int s0b = int(sc & 0xff), s1b = int((sc >> 8) & 0xff), s2b = int((sc >> 16) & 0xff), s3b = int(sc >> 24);
        const int smin = min(min(s0b, s1b), min(s2b, s3b)), smax = max(max(s0b, s1b), max(s2b, s3b));
        // one barrier: every thread has its bytes out of the stage, the previous tile's wgmmas and head sums are
        // done (k_s, the scales and the product buffer are free), and the tile's fold is agreed on
        const bool fast = __syncthreads_and(smax - smin <= 3 && smin - 128 >= k_lo && smin - 128 <= k_hi) && token_fast;
        if (tid == 0 && i + Cfg::kStages < count) {
            fence_proxy_async_smem();
            issue(i + Cfg::kStages);
        }
#pragma unroll
        for (int bb = 0; bb < 2; ++bb) {
            const int b = 2 * half + bb;
            const int sb = int((sc >> (8 * b)) & 0xff);
            const S8Table tb = s8_table(fast ? sb - smin : 0);
#pragma unroll
            for (int c = 0; c < 2; ++c) {  // 16-byte chunk 2b + c = codes words 4bb + 2c, 4bb + 2c + 1
                uint32_t o[4];
                e2m1x8_to_s8(codes[4 * bb + 2 * c], tb, o[0], o[1]);
                e2m1x8_to_s8(codes[4 * bb + 2 * c + 1], tb, o[2], o[3]);
                *reinterpret_cast<uint4*>(k_s + sw128_offset(key, 2 * b + c)) = make_uint4(o[0], o[1], o[2], o[3]);
            }
            // 2^(s_b - 128) (general) or 2^(s_min - 128) (fast): exact
            sk_s[b * Cfg::kKeys + key] = __fmul_rn(e8m0_to_f32(uint8_t(fast ? smin : sb)), 0.5f);
        }
        fence_proxy_async_smem();
        __syncthreads();

        // S = keys · heads: thread holds keys r0 = 16·warp + g, r1 = r0 + 8, heads 8j + 2·qd + e
        const int r0 = 16 * warp + g, r1 = r0 + 8;
        float dot[32];
        if (fast) {
            int32_t acc[32];
            wgmma_fence();
#pragma unroll
            for (int b = 0; b < 4; ++b)
                wgmma_m64n64k32_s8(acc, sw128_kmajor_desc(k_addr + 32 * b), sw128_kmajor_desc(q_addr + 32 * b), b > 0);
            wgmma_commit();
            wgmma_wait_all();
            fence_accumulators(acc);
            // I itself (exact: |I| < 2^21); 2^q is in w', 2^k in the head sum's last multiply
#pragma unroll
            for (int k = 0; k < 32; ++k) dot[k] = float(acc[k]);
        } else {
#pragma unroll
            for (int k = 0; k < 32; ++k) dot[k] = 0.0f;
                // one block at a time: a second accumulator set would cost the fourth CTA per SM its registers
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                int32_t acc[32];
                wgmma_fence();
                wgmma_m64n64k32_s8(acc, sw128_kmajor_desc(k_addr + 32 * b), sw128_kmajor_desc(q_addr + 32 * b), 0);
                wgmma_commit();
                wgmma_wait_all();
                fence_accumulators(acc);
                const float sk0 = sk_s[b * Cfg::kKeys + r0], sk1 = sk_s[b * Cfg::kKeys + r1];
#pragma unroll
                for (int j = 0; j < 8; ++j)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const float sq = sq_s[b * Cfg::kHeads + 8 * j + 2 * qd + e];
                        dot[4 * j + e] = __fmaf_rn(__fmul_rn(float(acc[4 * j + e]), sq), sk0, dot[4 * j + e]);
                        dot[4 * j + 2 + e] =
                            __fmaf_rn(__fmul_rn(float(acc[4 * j + 2 + e]), sq), sk1, dot[4 * j + 2 + e]);
                    }
            }
        }
        // bf16(w · ReLU(bf16(dot))) per (key, head) (fast: w' and I), parked by key, on bf16 pairs: the pack rounds
        // each dot to bf16 (round_bf16), the max against 0 is ReLU (a NaN dot gives 0, as fmaxf), and the bf16 product
        // is the exact product of two bf16 values rounded once, as the f32 product (exact) rounded to bf16
        const __nv_bfloat162* wsrc = fast ? wq_s : w_s;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int h = 8 * j + 2 * qd;
            const __nv_bfloat162 wh = wsrc[h / 2];
#pragma unroll
            for (int rr = 0; rr < 2; ++rr) {
                const __nv_bfloat162 d = __floats2bfloat162_rn(dot[4 * j + 2 * rr], dot[4 * j + 2 * rr + 1]);
                *reinterpret_cast<__nv_bfloat162*>(prod_s + (rr ? r1 : r0) * Cfg::kProdLd + h) =
                    __hmul2(__hmax2(d, __float2bfloat162_rn(0.0f)), wh);
            }
        }
        __syncthreads();
        // the head sum of one key per thread, a chain in head order (the next tile's vote barrier waits for it)
        if (tid < Cfg::kKeys && tl.s0 + tid < n) {
            float total = 0.0f;
            const __nv_bfloat16* row = prod_s + tid * Cfg::kProdLd;
            const auto add8 = [&](const uint4 v, int count8) {
                const uint32_t wv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int k = 0; k < 8; ++k)
                    if (k < count8)
                        total = __fadd_rn(total, __uint_as_float(k & 1 ? wv[k >> 1] & 0xffff0000u : wv[k >> 1] << 16));
            };
            if (heads == Cfg::kHeads) {
#pragma unroll
                for (int h0 = 0; h0 < Cfg::kHeads; h0 += 8) add8(*reinterpret_cast<const uint4*>(row + h0), 8);
            } else {
                for (int h0 = 0; h0 < heads; h0 += 8) add8(*reinterpret_cast<const uint4*>(row + h0), heads - h0);
            }
            // the short form's key scale 2^(s_min - 128): exact on the normal partial sums (indexer_fold_range.h)
            if (fast) total = __fmul_rn(total, sk_s[tid]);
            out[tl.s0 + tid] = __float2bfloat16_rn(tl.s0 + tid >= visible ? -INFINITY : total);
        }
    }
}

}  // namespace dsv4::cuda
