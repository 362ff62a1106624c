// Sparse attention on Hopper wgmma (kReference numerics, heads a multiple of 64; a packed FP8 K=V pool, or for the
// prefill pass also bf16 rows [n_kv, 512], copied into the tiles as they are): the one-pass
// kernel's arithmetic (attention.cuh) with its tensor-core steps on wgmma and one block per (token, 64 heads) instead
// of per (token, 16 heads). Two users: prefill passes (kWholeList: a block walks its token's whole list and writes the
// output; attention_prefill.cu) and split decode over long lists (attention_split.cu: a block walks one chunk of
// blocks and writes the block maxima or its partial in the split kernel's workspace layout, so the split kernel's
// combine merges them; the partials are that kernel's bit for bit).
//
// Roles (3 warpgroups, one block per SM, 221 KB of shared memory):
//   warpgroup 2   producer: per block of 64 candidates, reads the indices (any valid? one barrier-reduction), gathers
//                 and dequantises the 584-byte pool rows (or copies bf16 rows by cp.async, each thread one 16-byte
//                 column of every other row) into a bf16 tile [64 candidates][512] stored as 8 atoms of [64 rows][128
//                 bytes] in the 128-byte swizzle, two tiles in flight ("full" / "empty" named barriers); it gives
//                 registers to the consumers (setmaxnreg).
//   warpgroups 0-1 consumers, wg = 0 / 1: S = Q·Kᵀ for candidates 32·wg .. +31 of the tile (wgmma m64n32k16, Q and K
//                 K-major from shared memory, 32 k16 steps over the 512 channels); the block's per-head maximum is
//                 exchanged through shared memory; P = exp(l − M) (rounded to bf16 into a swizzled [64][64] tile, f32
//                 into a plain one), O·rescale, then O[:, 256·wg .. +255] += P·V (wgmma m64n256k16 with the same K
//                 tile read N-major as V, 4 k16 steps over the candidates). Threads 0..63 of warpgroup 0 keep the
//                 reference's running sum of head `tid`, adding the block's f32 p in candidate order while P·V runs.
//                 The epilogue stages O through the then free K tiles: a whole list is divided, rounded and
//                 de-rotated 8 channels per step with 16-byte stores, a split partial leaves in 16-byte stores.
//
// The block-maxima pass has its own loop (wgmma_attn_block_maxima): every warp gathers, warpgroups 0-1 compute S.
//
// Each step is the one-pass kernel's: S accumulates its 32 k16 products in channel order from zero, the row maximum
// and the exps are the same f32 operations (exp_softmax), the block sum is sequential in candidate order, O is rescaled
// then accumulates the 4 k16 products of P·V in candidate order, the epilogue divides, rounds and de-rotates
// identically. A block whose candidates are all -1 is skipped whole, as there.
#pragma once

#include <cuda_bf16.h>

#include "backend/cuda/common/cp_async.cuh"
#include "backend/cuda/common/named_barrier.cuh"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/common/swizzle.cuh"
#include "backend/cuda/common/wgmma.cuh"
#include "backend/cuda/kernels/attention/attention_block.cuh"
#include "backend/cuda/kernels/attention/kv_gather.cuh"
#include "backend/cuda/kernels/norm_rope/norm_rope.cuh"

namespace dsv4::cuda {

struct AttnWgmmaConfig {
    static constexpr int kHeads = 64;  // the block's heads: one wgmma M tile
    static constexpr int kBlock = 64;  // candidates per online-softmax block (the reference's)
    static constexpr int kDim = 512;
    static constexpr int kThreads = 384;
    static constexpr int kAtomBytes = 64 * 128;                  // [64 rows][64 bf16], swizzled
    static constexpr int kTileBytes = (kDim / 64) * kAtomBytes;  // 64 KB: Q, or one K=V tile
    static constexpr int kPfLd = kBlock + 8;                     // f32 p rows: conflict-free float2 stores
    static constexpr int kQOff = 0;
    static constexpr int kKvOff = kQOff + kTileBytes;            // 2 tiles
    static constexpr int kPOff = kKvOff + 2 * kTileBytes;        // bf16 P [64][64], one atom
    static constexpr int kPfOff = kPOff + kAtomBytes;            // f32 p [64][kPfLd]
    static constexpr int kIdxOff = kPfOff + kHeads * kPfLd * 4;  // int32 [2][64] candidate rows per tile
    static constexpr int kRedOff = kIdxOff + 2 * kBlock * 4;     // f32 [2][64] block maxima per consumer wg
    static constexpr int kDenOff = kRedOff + 2 * kHeads * 4;     // f32 [64] denominators (prefix pass: the prefix
                                                                 // maxima), [64] RoPE cos / sin
    static constexpr int kFlagOff = kDenOff + 2 * kHeads * 4;    // int32 [2] tile has a valid candidate
    // the epilogue's f32 O [64][kOutLd] over the K tiles and P (conflict-free float2 stores)
    static constexpr int kOutLd = kDim + 8;
    static_assert(kHeads * kOutLd * 4 <= kPfOff - kKvOff, "O staging must fit the K tiles and P");
    static constexpr int kSmemBytes = kFlagOff + 16 + 1024;  // + slack to align the base to 1024 bytes
    // setmaxnreg moves registers inside the block's launch allocation (384 threads x 168 under the launch bounds):
    // 128·104 + 256·200 = 384·168; asking for more would block the consumers' increase forever.
    static constexpr int kProducerRegs = 104, kConsumerRegs = 200;
    static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= kThreads * (65536 / kThreads / 8 * 8),
                  "the warpgroups' registers must fit the launch allocation");
    // named barriers (0 is __syncthreads)
    static constexpr int kBarFull = 1, kBarEmpty = 3, kBarConsumers = 5, kBarProducer = 6;
};

// Arguments of one launch (the prefill launcher and the split launcher fill the fields their passes read).
struct WgmmaAttnParams {
    const __nv_bfloat16* q = nullptr;  // [T, H, 512]
    const uint8_t* pool = nullptr;     // n_kv packed rows, or with rows_bf16 n_kv rows of 512 bf16
    bool rows_bf16 = false;
    const int32_t* idx = nullptr;      // [T, topk]
    int heads = 0, topk = 0;
    int64_t n_kv = 0;
    float scale = 0;
    // kWholeList: the output
    const float* sink = nullptr;
    bool derotate = false;
    const int64_t* positions = nullptr;
    backend::RopeFreqs freqs;
    __nv_bfloat16* out = nullptr;
    // split passes: the chunking and the workspace, in SplitAttnParams' layout (16-head tiles)
    int n_blocks = 0, chunk_blocks = 0, chunks = 0;
    int pass_blocks = 0;  // the blocks this launch covers from the list's start (the block-maxima pass: fewer)
    float* part_o = nullptr;
    float* part_ml = nullptr;
    float* block_max = nullptr;
};

// Q [64 heads][512] of token t into 8 swizzled atoms by threads tid = 0 .. kThreads - 1: issued and committed as
// one cp.async group, the caller waits (and fences for the wgmma reads).
template <int kThreads>
__device__ __forceinline__ void wgmma_attn_load_q(const WgmmaAttnParams& p, uint8_t* smem, int64_t t, int h0, int tid) {
    using Cfg = AttnWgmmaConfig;
    const __nv_bfloat16* qt = p.q + (t * p.heads + h0) * Cfg::kDim;
    for (int i = tid; i < Cfg::kHeads * Cfg::kDim / 8; i += kThreads) {
        const int r = i / (Cfg::kDim / 8), c = i % (Cfg::kDim / 8);
        cp_async16_zfill(smem + Cfg::kQOff + (c / 8) * Cfg::kAtomBytes + sw128_offset(r, c % 8),
                         qt + r * Cfg::kDim + 8 * c, true);
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

// S = Q·Kᵀ for candidates 32·wg .. +31 of the tile at kv_addr, in channel order from zero: issued and committed,
// the caller waits. k step k starts (k / 4) atoms and (k % 4)·32 bytes in: added to the base descriptors' address
// field (>> 4), which cannot carry out of its 14 bits inside 256 KB of shared memory.
__device__ __forceinline__ void wgmma_attn_issue_scores(float (&sacc)[16], uint32_t q_addr, uint32_t kv_addr, int wg) {
    using Cfg = AttnWgmmaConfig;
#pragma unroll
    for (int i = 0; i < 16; ++i) sacc[i] = 0.0f;
    const uint64_t desc_q = sw128_kmajor_desc(q_addr), desc_k = sw128_kmajor_desc(kv_addr + wg * 32 * 128);
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < Cfg::kDim / 16; ++k) {
        const uint32_t off = ((k / 4) * Cfg::kAtomBytes + (k % 4) * 32) >> 4;
        wgmma_m64n32k16_bf16(sacc, desc_q + off, desc_k + off, 1u);
    }
    wgmma_commit();
}

// After the scores' wait: logits (scaled; -inf for a -1 candidate) in place, and this thread's quad's maximum of
// its two heads over the warpgroup's 32 candidates (every lane of the quad holds it).
__device__ __forceinline__ void wgmma_attn_logits_and_max(float (&sacc)[16], const int32_t* idx_b, float scale, int wg,
                                                          int tq, float& mx0, float& mx1) {
    mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int cand = 32 * wg + 8 * j + 2 * tq + (e & 1);
            const float l = idx_b[cand] >= 0 ? __fmul_rn(sacc[4 * j + e], scale) : -INFINITY;
            sacc[4 * j + e] = l;
            if (e < 2)
                mx0 = fmaxf(mx0, l);
            else
                mx1 = fmaxf(mx1, l);
        }
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o));
    }
}

// The block-maxima pass (kSplitBlockMax): per block of the chunk, the per-head maximum logit and nothing else. With
// no softmax or P·V to hide it behind, one producer warpgroup decoding each tile was this pass's bottleneck, so here
// all 12 warps gather and decode tile b + 1 while warpgroups 0-1's S of tile b runs on the tensor cores. S, logits
// and maxima are the main loop's (the helpers above), so the maxima are the same bits.
__device__ __forceinline__ void wgmma_attn_block_maxima(const WgmmaAttnParams& p, uint8_t* smem, const int32_t* it,
                                                        int topk, int nblk, int64_t list0, int blk0, int64_t t,
                                                        int h0) {
    using Cfg = AttnWgmmaConfig;
    // every barrier of this pass is taken by all 384 threads, from the two warpgroup loops' own instructions: a named
    // barrier (inline asm, opaque to the compiler) rather than __syncthreads, which must not sit in divergent code
    constexpr int kBarAll = 1;
    // red_s: [2 tiles][2 warpgroups][64 heads], over the main loop's maxima and denominators (neither used here)
    static_assert(
        Cfg::kDenOff == Cfg::kRedOff + 2 * Cfg::kHeads * 4 && Cfg::kFlagOff >= Cfg::kDenOff + 2 * Cfg::kHeads * 4,
        "two tiles' maxima fit over kRedOff and kDenOff");
    auto* idx_s = reinterpret_cast<int32_t*>(smem + Cfg::kIdxOff);
    auto* red_s = reinterpret_cast<float*>(smem + Cfg::kRedOff);
    const int tid = threadIdx.x, wg = tid / 128, lane = tid % 32, tq = lane % 4;
    const int r0 = 16 * ((tid % 128) / 32) + lane / 4, r1 = r0 + 8;  // this thread's two heads (fragment rows)
    wgmma_attn_load_q<Cfg::kThreads>(p, smem, t, h0, tid);
    auto candidate = [&](int b) -> int32_t {  // thread tid < 64: candidate tid of block b, -1 past the list or pool
        const int j = b * Cfg::kBlock + tid;
        const int32_t s = tid < Cfg::kBlock && b < nblk && j < topk ? it[j] : -1;
        return s >= p.n_kv ? -1 : s;
    };
    auto gather = [&](int buf) {
        uint8_t* tile = smem + Cfg::kKvOff + buf * Cfg::kTileBytes;
        gather_packed_kv_block<Cfg::kThreads>(
            p.pool, idx_s + buf * Cfg::kBlock,
            [&](int r, int c) {
                return reinterpret_cast<uint4*>(tile + (c / 8) * Cfg::kAtomBytes + sw128_offset(r, c % 8));
            },
            tid);
    };
    int32_t next = candidate(0);
    if (tid < Cfg::kBlock) idx_s[tid] = next;
    // whether the block holds a valid candidate (else the reference skips it)
    bool any = named_bar_sync_or(kBarAll, Cfg::kThreads, next >= 0);
    if (any) gather(0);
    next = candidate(1);
    asm volatile("cp.async.wait_group 0;\n" ::);
    fence_proxy_async_smem();  // Q and tile 0: generic stores -> wgmma reads
    named_bar_sync(kBarAll, Cfg::kThreads);
    // tile b + 1 by every warp (indices, any valid candidate, gather), then the next indices
    auto gather_next = [&](int b) {
        const int nbuf = (b + 1) & 1;
        if (tid < Cfg::kBlock) idx_s[nbuf * Cfg::kBlock + tid] = next;
        const bool any_next = named_bar_sync_or(kBarAll, Cfg::kThreads, next >= 0);
        if (any_next) gather(nbuf);
        next = candidate(b + 2);
        return any_next;
    };
    // tile b + 1 and block b's maxima complete (tile b is free: its S has completed), then head tid's max of block b
    // into the workspace ([list][n_blocks][16] per 16-head tile). red_b is next written two steps on, after the next
    // barrier, which these reads precede.
    auto end_step = [&](int b, bool any) {
        const float* red_b = red_s + (b & 1) * 2 * Cfg::kHeads;
        fence_proxy_async_smem();  // tile b + 1's generic stores -> the next step's wgmma reads
        named_bar_sync(kBarAll, Cfg::kThreads);
        if (tid < Cfg::kHeads)
            p.block_max[((list0 + tid / 16) * p.n_blocks + blk0 + b) * 16 + tid % 16] =
                any ? fmaxf(red_b[tid], red_b[Cfg::kHeads + tid]) : -INFINITY;
    };
    // The warpgroups' loops are written apart (same barriers, in the same order) so that no branch separates a
    // consumer's S from its wait: ptxas serialises wgmma issued on a divergent path.
    if (wg < 2) {
        const uint32_t q_addr = smem_u32(smem + Cfg::kQOff);
        for (int b = 0; b < nblk; ++b) {
            // S of a tile without a valid candidate is computed on stale bytes and discarded by end_step
            float sacc[16];
            wgmma_attn_issue_scores(sacc, q_addr, smem_u32(smem + Cfg::kKvOff + (b & 1) * Cfg::kTileBytes), wg);
            const bool any_next = b + 1 < nblk && gather_next(b);
            wgmma_wait<0>();
            fence_accumulators(sacc);
            float mx0, mx1;
            wgmma_attn_logits_and_max(sacc, idx_s + (b & 1) * Cfg::kBlock, p.scale, wg, tq, mx0, mx1);
            float* red_b = red_s + (b & 1) * 2 * Cfg::kHeads;
            if (tq == 0) red_b[wg * Cfg::kHeads + r0] = mx0, red_b[wg * Cfg::kHeads + r1] = mx1;
            end_step(b, any);
            any = any_next;
        }
    } else {
        for (int b = 0; b < nblk; ++b) {
            const bool any_next = b + 1 < nblk && gather_next(b);
            end_step(b, any);
            any = any_next;
        }
    }
}

// grid: (chunks, heads / 64, tokens) (chunks = 1 for kWholeList), AttnWgmmaConfig::kThreads threads, kSmemBytes of
// dynamic shared memory.
template <int kPass>
__global__ void __launch_bounds__(AttnWgmmaConfig::kThreads, 1)
    sm90_sparse_attn_wgmma_kernel(const __grid_constant__ WgmmaAttnParams p) {
    pdl_enter(kPass != kSplitPartialFromPrefix);
    // the prefix pass reads nothing its immediate predecessor (the block-maxima pass) writes until the first block's
    // softmax, so its gathers, decodes and S overlap that pass (common/pdl.cuh; attention_split.cuh does the same)
    PdlWaitAtExit wait_at_exit{kPass == kSplitPartialFromPrefix};
    using Cfg = AttnWgmmaConfig;
    constexpr bool kWhole = kPass == kWholeList;
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    uint8_t* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    auto* idx_s = reinterpret_cast<int32_t*>(smem + Cfg::kIdxOff);
    auto* flag_s = reinterpret_cast<int32_t*>(smem + Cfg::kFlagOff);
    const int tid = threadIdx.x, wg = tid / 128;
    const int chunk = blockIdx.x;
    const int64_t t = blockIdx.z;
    const int h0 = blockIdx.y * Cfg::kHeads;
    // this block's candidate blocks: blk0 .. blk0 + nblk − 1 of the list
    const int blk0 = kWhole ? 0 : chunk * p.chunk_blocks;
    const int nblk = kWhole ? (p.topk + Cfg::kBlock - 1) / Cfg::kBlock : min(p.chunk_blocks, p.pass_blocks - blk0);
    const int32_t* it = p.idx + t * p.topk + int64_t(blk0) * Cfg::kBlock;
    const int topk = p.topk - blk0 * Cfg::kBlock;  // candidates from the chunk's first on
    // split passes: the workspace's 16-head tiles of this block's heads are h0 / 16 .. + 3
    const int64_t n_tiles = p.heads / 16, list0 = t * n_tiles + h0 / 16;
    if constexpr (kPass == kSplitBlockMax) {
        wgmma_attn_block_maxima(p, smem, it, topk, nblk, list0, blk0, t, h0);
        return;
    }

    if (wg == 2) {  // producer
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Cfg::kProducerRegs));
        const int ptid = tid - 256;
        // thread ptid < 64 reads candidate ptid of each block, one block ahead of its use
        auto candidate = [&](int b) -> int32_t {
            const int j = b * Cfg::kBlock + ptid;
            const int32_t s = ptid < Cfg::kBlock && j < topk ? it[j] : -1;
            return s >= p.n_kv ? -1 : s;
        };
        int32_t next = candidate(0);
        for (int b = 0; b < nblk; ++b) {
            const int buf = b & 1;
            const int32_t s = next;
            next = candidate(b + 1);
            if (b >= 2) named_bar_sync(Cfg::kBarEmpty + buf, Cfg::kThreads);  // the consumers are done with it
            int32_t* idx_b = idx_s + buf * Cfg::kBlock;
            if (ptid < Cfg::kBlock) idx_b[ptid] = s;
            const bool any = named_bar_sync_or(Cfg::kBarProducer, 128, s >= 0);
            if (any) {
                uint8_t* tile = smem + Cfg::kKvOff + buf * Cfg::kTileBytes;
                auto dst = [&](int r, int c) {  // channels 8c .. 8c + 7 of candidate r
                    return reinterpret_cast<uint4*>(tile + (c / 8) * Cfg::kAtomBytes + sw128_offset(r, c % 8));
                };
                if (p.rows_bf16) {
                    // 64 rows x 64 chunks of 16 bytes; thread ptid copies chunk c = ptid % 64 of rows ptid / 64 + 2n
                    // (-1: zeros). Its destinations dst(r, c) differ only by 256 n and the swizzle slot (c % 8) ^
                    // (r % 8) = slot0 ^ (2n % 8): four addresses and immediate offsets, no index arithmetic per copy
                    // (the generic loop over i = ptid + 128 k spent ~34 instructions per 16-byte copy).
                    static_assert(Cfg::kDim / 8 == 64 && Cfg::kBlock == 64, "one chunk column per thread");
                    const int c = ptid % 64, r_first = ptid / 64;
                    uint8_t* const dst0 =
                        tile + (c / 8) * Cfg::kAtomBytes + r_first * 128;  // = dst(r_first, c) less its slot
                    const int slot0 = (c % 8) ^ r_first;
                    const uint8_t* const src_c = p.pool + 16 * c;
#pragma unroll
                    for (int n = 0; n < Cfg::kBlock / 2; ++n) {
                        const int32_t row = idx_b[r_first + 2 * n];
                        cp_async16_zfill(dst0 + 256 * n + ((slot0 ^ ((2 * n) % 8)) << 4),
                                         src_c + int64_t(row < 0 ? 0 : row) * (Cfg::kDim * 2), row >= 0);
                    }
                    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
                } else {
                    gather_packed_kv_block<128, 16>(p.pool, idx_b, dst, ptid);
                }
            }
            if (ptid == 0) flag_s[buf] = any;
            fence_proxy_async_smem();  // the tile's generic stores -> the consumers' wgmma reads
            named_bar_arrive(Cfg::kBarFull + buf, Cfg::kThreads);
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Cfg::kConsumerRegs));

    // Q by the consumers
    wgmma_attn_load_q<256>(p, smem, t, h0, tid);
    asm volatile("cp.async.wait_group 0;\n" ::);
    fence_proxy_async_smem();
    auto* p_f32 = reinterpret_cast<float*>(smem + Cfg::kPfOff);
    auto* red_s = reinterpret_cast<float*>(smem + Cfg::kRedOff);
    auto* den_s = reinterpret_cast<float*>(smem + Cfg::kDenOff);
    const uint32_t q_addr = smem_u32(smem + Cfg::kQOff), p_addr = smem_u32(smem + Cfg::kPOff);
    const int w = (tid % 128) / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
    const int r0 = 16 * w + g, r1 = r0 + 8;            // this thread's two heads (fragment rows)
    const bool summer = wg == 0 && tid < Cfg::kHeads;  // keeps the running sum of head tid
    float m0 = -INFINITY, m1 = -INFINITY;              // running maxima of heads r0, r1
    float m_sum = -INFINITY, sum = 0;                  // summer: running max and sum of head tid
    float acc[128];  // O[r0 | r1][256·wg + 8j + 2tq + {0,1}]: acc[4j + {0,1}] row r0, acc[4j + {2,3}] row r1
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
    bool seen = false;      // a block of the chunk held a valid candidate
    bool prefixed = false;  // prefix pass: the running maxima were set from the block maxima
    // prefix pass, at the first valid block: the running max of every head at the chunk's first block, the max of
    // the earlier blocks' maxima (4 threads per head), after the wait for the block-maxima pass that wrote them
    auto prefix_running_max = [&] {
        pdl_wait();
        const int h = tid / 4, part = tid % 4;
        const float* bm = p.block_max + (list0 + h / 16) * p.n_blocks * 16 + h % 16;
        float mx = -INFINITY;
#pragma unroll 8
        for (int k = part; k < blk0; k += 4) mx = fmaxf(mx, bm[k * 16]);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        if (part == 0) den_s[h] = mx;
        named_bar_sync(Cfg::kBarConsumers, 256);
        m0 = den_s[r0], m1 = den_s[r1];
        if (summer) m_sum = den_s[tid];
    };
    named_bar_sync(Cfg::kBarConsumers, 256);  // Q complete

    for (int b = 0; b < nblk; ++b) {
        const int buf = b & 1;
        named_bar_sync(Cfg::kBarFull + buf, Cfg::kThreads);
        const bool release = b + 2 < nblk;  // the producer refills this tile
        if (!flag_s[buf]) {                 // no valid candidate: the reference skips the block whole
            if (release) named_bar_arrive(Cfg::kBarEmpty + buf, Cfg::kThreads);
            continue;
        }
        seen = true;
        const uint32_t kv_addr = smem_u32(smem + Cfg::kKvOff + buf * Cfg::kTileBytes);
        const int32_t* idx_b = idx_s + buf * Cfg::kBlock;

        // S = Q · Kᵀ for candidates 32·wg .. +31, the logits and this half's per-head maximum
        float sacc[16];
        wgmma_attn_issue_scores(sacc, q_addr, kv_addr, wg);
        wgmma_wait<0>();
        fence_accumulators(sacc);
        float mx0, mx1;
        wgmma_attn_logits_and_max(sacc, idx_b, p.scale, wg, tq, mx0, mx1);
        if (tq == 0) red_s[wg * Cfg::kHeads + r0] = mx0, red_s[wg * Cfg::kHeads + r1] = mx1;
        named_bar_sync(Cfg::kBarConsumers, 256);
        if (kPass == kSplitPartialFromPrefix && !prefixed) {
            prefix_running_max();
            prefixed = true;
        }
        const float n0 = fmaxf(m0, fmaxf(red_s[r0], red_s[Cfg::kHeads + r0]));
        const float n1 = fmaxf(m1, fmaxf(red_s[r1], red_s[Cfg::kHeads + r1]));
        float n_sum = -INFINITY, c_sum = 1.0f;
        if (summer) {  // read before the next barrier: red_s is rewritten by the next block
            n_sum = fmaxf(m_sum, fmaxf(red_s[tid], red_s[Cfg::kHeads + tid]));
            c_sum = n_sum == -INFINITY ? 1.0f : exp_softmax(__fsub_rn(m_sum, n_sum));
        }
        const float c0 = n0 == -INFINITY ? 1.0f : exp_softmax(__fsub_rn(m0, n0));
        const float c1 = n1 == -INFINITY ? 1.0f : exp_softmax(__fsub_rn(m1, n1));

        // P: bf16 into the swizzled tile (P·V's A operand), f32 for the block sum
        uint8_t* p_tile = smem + Cfg::kPOff;
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int row = half ? r1 : r0, cand = 32 * wg + 8 * j + 2 * tq;
                const float n = half ? n1 : n0;
                const float la = sacc[4 * j + 2 * half], lb = sacc[4 * j + 2 * half + 1];
                const float pa = (la == -INFINITY || n == -INFINITY) ? 0.0f : exp_softmax(__fsub_rn(la, n));
                const float pb = (lb == -INFINITY || n == -INFINITY) ? 0.0f : exp_softmax(__fsub_rn(lb, n));
                *reinterpret_cast<__nv_bfloat162*>(p_tile + sw128_offset(row, cand / 8) + (cand % 8) * 2) =
                    __floats2bfloat162_rn(pa, pb);
                *reinterpret_cast<float2*>(p_f32 + row * Cfg::kPfLd + cand) = make_float2(pa, pb);
            }
        m0 = n0, m1 = n1;
        // once the maxima settle most blocks rescale by exactly 1: skipped when no lane of the warp needs it (x · 1 =
        // x)
        if (__any_sync(0xffffffffu, c0 != 1.0f || c1 != 1.0f)) {
#pragma unroll
            for (int j = 0; j < 32; ++j) {
                acc[4 * j] = __fmul_rn(acc[4 * j], c0), acc[4 * j + 1] = __fmul_rn(acc[4 * j + 1], c0);
                acc[4 * j + 2] = __fmul_rn(acc[4 * j + 2], c1), acc[4 * j + 3] = __fmul_rn(acc[4 * j + 3], c1);
            }
        }
        fence_proxy_async_smem();  // P's generic stores -> both warpgroups' wgmma reads
        named_bar_sync(Cfg::kBarConsumers, 256);

        // O[:, 256·wg .. +255] += P · V, in candidate order
        const uint64_t desc_p = sw128_kmajor_desc(p_addr);
        const uint64_t desc_v = sw128_mnmajor_desc(kv_addr + wg * 4 * Cfg::kAtomBytes, Cfg::kAtomBytes, 8 * 128);
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < Cfg::kBlock / 16; ++k)  // candidates 16k ..: 32 bytes into P's rows, 16 rows into V
            wgmma_m64n256k16_bf16_bt(acc, desc_p + ((32 * k) >> 4), desc_v + ((k * 16 * 128) >> 4), 1u);
        wgmma_commit();
        if (summer && n_sum != -INFINITY) {  // the block sum in candidate order, while P·V runs
            const float* pr = p_f32 + tid * Cfg::kPfLd;
            float block_sum = 0;
#pragma unroll 16
            for (int j = 0; j < Cfg::kBlock; ++j) block_sum = __fadd_rn(block_sum, pr[j]);
            sum = __fadd_rn(__fmul_rn(sum, c_sum), block_sum);
            m_sum = n_sum;
        }
        wgmma_wait<0>();
        fence_accumulators(acc);
        if (release) named_bar_arrive(Cfg::kBarEmpty + buf, Cfg::kThreads);
    }

    // epilogue. O goes through shared memory (the K tiles, free once every P·V has completed), so that the whole
    // list's divisions run in one compact loop over 8-channel chunks with 16-byte stores instead of 128 unrolled ones
    // per thread, and a partial leaves in coalesced 16-byte stores instead of 64 scattered 8-byte ones per thread.
    float* o_s = reinterpret_cast<float*>(smem + Cfg::kKvOff);  // [64][kOutLd]
    float* rope_s = den_s + Cfg::kHeads;                        // [32] cos, [32] sin of the 32 rotated pairs
    if constexpr (kWhole) {  // o / (sum + e^{sink − M}) (0 without a valid candidate), bf16, conjugate RoPE
        if (summer) {
            const float sk = p.sink[h0 + tid];
            den_s[tid] = m_sum == -INFINITY ? 0.0f : __fadd_rn(sum, exp_softmax(__fsub_rn(sk, m_sum)));
        }
        if (p.derotate && wg == 1 && tid - 128 < 32) {
            const int pair = tid - 128;
            rope_cos_sin(p.positions[t], p.freqs.f[pair], true, rope_s[pair], rope_s[32 + pair]);
        }
    } else {
        // the partial of each 16-head tile: (m, l) by the summers, o below; a chunk without a valid candidate has
        // max -inf and no o, as the split kernel's (seen is the same in every consumer thread)
        if (summer) {
            float* ml = p.part_ml + ((list0 + tid / 16) * p.chunks + chunk) * 32 + tid % 16;
            ml[0] = seen ? m_sum : -INFINITY;
            ml[16] = seen ? sum : 0.0f;
        }
        if (!seen) return;
    }
    named_bar_sync(Cfg::kBarConsumers, 256);  // every P·V done: the K tiles may be overwritten
#pragma unroll
    for (int j = 0; j < 32; ++j) {
        const int ch = 256 * wg + 8 * j + 2 * tq;
        *reinterpret_cast<float2*>(o_s + r0 * Cfg::kOutLd + ch) = make_float2(acc[4 * j], acc[4 * j + 1]);
        *reinterpret_cast<float2*>(o_s + r1 * Cfg::kOutLd + ch) = make_float2(acc[4 * j + 2], acc[4 * j + 3]);
    }
    named_bar_sync(Cfg::kBarConsumers, 256);
    if constexpr (!kWhole) {  // row h of the block = row h % 16 of tile list0 + h / 16's partial
#pragma unroll 4
        for (int i = tid; i < Cfg::kHeads * Cfg::kDim / 4; i += 256) {
            const int row = i / (Cfg::kDim / 4), ch = (i % (Cfg::kDim / 4)) * 4;
            float* po = p.part_o + ((list0 + row / 16) * p.chunks + chunk) * (16 * Cfg::kDim) + (row % 16) * Cfg::kDim;
            *reinterpret_cast<float4*>(po + ch) = *reinterpret_cast<const float4*>(o_s + row * Cfg::kOutLd + ch);
        }
    } else {
#pragma unroll 1
        for (int i = tid; i < Cfg::kHeads * Cfg::kDim / 8; i += 256) {
            const int row = i / (Cfg::kDim / 8), ch = (i % (Cfg::kDim / 8)) * 8;
            const float den = den_s[row];
            float v[8];
            load8(o_s + row * Cfg::kOutLd + ch, v);
#pragma unroll
            for (int e = 0; e < 8; ++e) v[e] = den == 0.0f ? 0.0f : round_bf16(__fdiv_rn(v[e], den));
            if (p.derotate && ch >= Cfg::kDim - 64) {
#pragma unroll
                for (int e = 0; e < 8; e += 2) {
                    const int pair = (ch - (Cfg::kDim - 64) + e) / 2;
                    rotate_pair(v[e], v[e + 1], rope_s[pair], rope_s[32 + pair]);
                }
            }
            store8(p.out + (t * p.heads + h0 + row) * Cfg::kDim + ch, v);
        }
    }
}

}  // namespace dsv4::cuda
