// Split-candidate ("flash-decoding") sparse attention, kReference (attention.h: sm90_sparse_attn_split).
//
// grid (chunks, head tiles, tokens) x 256 threads, clusters of up to 4 along y (packed rows), one CTA per SM
// (~166 KB shared memory). A CTA owns one token, 16 heads and the chunk of candidate blocks [chunk·kb,
// chunk·kb + kb) (64 candidates a block):
//   1. scan: the chunk's indices are read once (all threads) into a bitmask of the blocks holding a valid candidate;
//      a chunk without one writes "empty" and leaves (a -1-padded capacity-wide list costs this read only).
//   2. pipeline over the non-empty blocks: the next block's rows are copied into the other stage while this one
//      computes (packed: each raw 584-byte row as one 576-byte bulk copy of its 16-byte aligned part, counted on the
//      stage's mbarrier, plus one 8-byte cp.async of the rest, decoded in shared memory into the bf16 tile exactly
//      as the one-pass kernel decodes them; unpacked: the bf16 rows by 16-byte cp.async, two tiles).
//   3. per block the one-pass kernel's arithmetic (attention.cuh): S = Q·Kᵀ on mma.m16n8k16 (warp w of 8: keys
//      8w..8w+7), logits ·scale (-inf for -1), running max and rescale in f32, P = exp(l - M) rounded to bf16,
//      the block sum in candidate order, O = O·rescale + P·V (warp w: channels 64w..64w+63). Each logit and output
//      accumulates in the one-pass kernel's k order (attention_block.cuh), so the bits are its bits.
//   4. the partial (running max m, sum l, unnormalised o[16][512], f32) goes to the workspace.
// Passes (kPass): kBlockMax runs steps 1–3 up to S and writes each block's max logit per head; kPartial starts the
// running max at -inf; kPartialFromPrefix starts it at the max of the block maxima of all earlier blocks — the
// one-pass kernel's running max at the chunk's first block — so every bf16(P) equals the one-pass kernel's.
// Combine: one CTA per (head, token), thread = 4 channels: M = max_c m_c, den = Σ_c e^{m_c-M}·l_c + e^{sink-M},
// o = Σ_c e^{m_c-M}·o_c / den in chunk order, bf16 rounding, conjugate RoPE on 448..511, bf16 out; no valid
// candidate anywhere → 0, as the one-pass kernel.
#pragma once

#include <cooperative_groups.h>

// (not attention.cuh: it defines a non-template kernel, which two translation units may not both hold)
#include "backend/cuda/common/cluster_barrier.cuh"
#include "backend/cuda/common/cp_async.cuh"
#include "backend/cuda/common/mbarrier.cuh"
#include "backend/cuda/common/mma_bf16.cuh"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kernels/attention/attention_block.cuh"
#include "backend/cuda/kernels/kv_store/kv_store.cuh"
#include "backend/cuda/kernels/norm_rope/norm_rope.cuh"

namespace dsv4::cuda {

struct AttnSplitConfig {
    static constexpr int kDim = 512;
    static constexpr int kLd = kDim + 8;   // padded bf16 row (ldmatrix rows on distinct banks)
    static constexpr int kHeads = 16;      // heads per CTA (one MMA row tile)
    static constexpr int kBlock = 64;      // candidates per online-softmax block (the reference's)
    // 8 warps (two per scheduler): the per-block chain — gather, shared-memory decode, S, softmax, P·V — runs on
    // one CTA per SM, so its latency is hidden only by the CTA's own warps (4 warps measured ≈ 8 µs a block-step).
    static constexpr int kThreads = 256;
    static constexpr int kWarps = kThreads / 32;
    static constexpr int kKeyTiles = 64 / (8 * kWarps);   // n-tiles of 8 keys per warp in S = Q·Kᵀ
    static constexpr int kChanTiles = 512 / (8 * kWarps);  // n-tiles of 8 channels per warp in O
    static constexpr int kLLd = kBlock + 4;  // f32 logit rows: float4 reads of 8 heads hit distinct banks
    static constexpr int kPLd = kBlock + 8;
    static constexpr int kRawRow = int(kKvFp8RowBytes);  // 584
    // A pool row starts 8 bytes into a 16-byte granule or on one (584 = 36.5 granules): its 16-byte aligned 576
    // bytes go by one bulk copy and the other 8 (head or tail) by cp.async. In shared memory row r starts at
    // r · kRawPitch + (source address mod 16), so both copies keep their alignment.
    static constexpr int kRawPitch = kRawRow + 8;  // 592 = 37 granules
    static constexpr int kRawBulk = kRawRow - 8;   // 576
    static constexpr uint32_t kTileRowBytes = kDim * 2;   // what a decode writes of a tile row (not the padding)
    static constexpr int kMaxChunkBlocks = 256;           // bitmask of non-empty blocks: 8 words
    static constexpr int kMaskWords = kMaxChunkBlocks / 32;
    static constexpr int kCombineThreads = kDim / 4;      // 4 channels per thread
    static constexpr int kCombineMaxBatch = 16;           // the combine's largest one-batch instance
    static constexpr int kPartialFloats = kHeads * kDim;  // o of one partial
    // the partial's o staged in f32 rows [16][kOutLd] (conflict-free float2 fragment stores, float4 row reads)
    static constexpr int kOutLd = kDim + 8;
    // shared-memory layout (bytes; every region 16-byte aligned)
    static constexpr size_t kQBytes = size_t(kHeads) * kLd * 2;               // 16,640
    static constexpr size_t kTileBytes = size_t(kBlock) * kLd * 2;            // 66,560
    static constexpr size_t kRawStageBytes = size_t(kBlock) * kRawPitch;     // 37,888
    static constexpr size_t kLBytes = size_t(kHeads) * kLLd * 4;              // 4,352
    static constexpr size_t kPBytes = size_t(kHeads) * kPLd * 2;              // 2,304
    static constexpr size_t kIdxBytes = 2 * kBlock * 4;                       // 512
    static constexpr size_t kMaskBytes = kMaskWords * 4;                      // 32
    static constexpr size_t kStateBytes = 4 * kHeads * 4;                     // 256
    static constexpr size_t kBarBytes = 3 * 8;  // the raw stages' mbarriers, the tile's (the cluster's shares)
    // packed: one decoded tile + two raw stages; unpacked: two bf16 tiles
    static constexpr size_t tiles_bytes(bool packed) { return packed ? kTileBytes + 2 * kRawStageBytes : 2 * kTileBytes; }
    static constexpr size_t smem_bytes(bool packed) {
        return kQBytes + tiles_bytes(packed) + kLBytes + kPBytes + kIdxBytes + kMaskBytes + kStateBytes + kBarBytes;
    }
};
static_assert(AttnSplitConfig::smem_bytes(true) == 166456 && AttnSplitConfig::smem_bytes(false) == 157240,
              "the layout the documentation quotes");
// the o staging reuses one raw stage (packed) or one bf16 tile (unpacked)
static_assert(size_t(AttnSplitConfig::kHeads) * AttnSplitConfig::kOutLd * 4 <= AttnSplitConfig::kRawStageBytes &&
              size_t(AttnSplitConfig::kHeads) * AttnSplitConfig::kOutLd * 4 <= AttnSplitConfig::kTileBytes);
static_assert(AttnSplitConfig::kRawRow % 16 == 8 && AttnSplitConfig::kRawPitch % 16 == 0 &&
              AttnSplitConfig::kRawBulk % 16 == 0 && AttnSplitConfig::kRawStageBytes % 16 == 0);

struct SplitAttnParams {
    const __nv_bfloat16* q = nullptr;  // [T, H, 512]
    const void* kv = nullptr;          // [n_kv, 512] bf16 or n_kv packed rows
    const int32_t* idx = nullptr;      // [T, topk]
    int heads = 0, topk = 0;
    int64_t n_kv = 0;
    float scale = 0;
    int n_blocks = 0;      // ceil(topk / 64)
    int chunk_blocks = 0;  // blocks per chunk (<= kMaxChunkBlocks)
    int chunks = 0;        // chunks per list: ceil(n_blocks / chunk_blocks)
    float* part_o = nullptr;     // [T][tiles][chunks][16][512] unnormalised o (rows of real heads only)
    float* part_ml = nullptr;    // [T][tiles][chunks][2][16]: running max (-inf: no valid candidate), sum
    float* block_max = nullptr;  // [T][tiles][n_blocks][16] max logit per block and head (-inf: none valid)
};


// The first block >= from (chunk-relative) whose bit is set in mask, or n when there is none. Uniform: every
// thread reads the same shared words.
__device__ __forceinline__ int next_valid_block(const uint32_t* mask, int from, int n) {
    for (int w = from >> 5; w * 32 < n; ++w) {
        const int sh = from - 32 * w;  // in [0, 31] for the first word, <= 0 after
        const uint32_t bits = mask[w] & (sh > 0 ? (~0u << sh) : ~0u);
        if (bits) return 32 * w + __ffs(bits) - 1;
    }
    return n;
}

// Where pool row s lies in a raw stage's row slot: its source address mod 16 (0 or 8; AttnSplitConfig::kRawPitch).
__device__ __forceinline__ int raw_row_shift(const uint8_t* pool, int32_t s) {
    return int((reinterpret_cast<uintptr_t>(pool) + uint64_t(s) * AttnSplitConfig::kRawRow) & 15);
}

// This CTA's share of a block's raw packed rows (rows row_lo .. row_lo + share − 1; row r of pool row bi[r] at
// r · kRawPitch + raw_row_shift; -1 rows were not copied and decode to +0) decoded into the bf16 tile kv_s
// [64][kLd] of every CTA of the cluster (the CTAs of a cluster share the token and the chunk, so they need the same
// rows): its own by plain stores, the others' by st.async counted on their tile barrier `tile_bar`
// (share · kTileRowBytes bytes), so a CTA needs no cluster barrier to see the tile, only its barrier's phase. The same
// values, in the same thread layout, as gather_packed_kv_block (attention.cuh) produces. Thread = channel chunk
// tid % 64 (8 channels) of rows row_lo + tid / 64 + 4k.
__device__ __forceinline__ void decode_packed_block(const uint8_t* raw, const int32_t* bi, const uint8_t* pool,
                                                    __nv_bfloat16* kv_s, uint64_t* tile_bar, int tid, int row_lo,
                                                    int share, int ctas, int rank) {
    using Cfg = AttnSplitConfig;
    constexpr int kChunks = Cfg::kDim / 8, kRowsPerPass = Cfg::kThreads / kChunks;  // 64, 4
    constexpr int kCodeChunks = int(kKvFp8CodeChannels) / 8;                           // 56
    const int c = tid % kChunks, r0 = tid / kChunks;
    const bool codes = c < kCodeChunks;
    const int off_a = codes ? 8 * c : int(kKvFp8RopeOffset) + 16 * (c - kCodeChunks);
    const int off_s = int(kKvFp8ScaleOffset) + (codes ? c / 8 : 0);
#pragma unroll 4
    for (int k = 0; k < share / kRowsPerPass; ++k) {
        const int r = row_lo + r0 + kRowsPerPass * k;
        const int32_t s = bi[r];
        const uint8_t* row = raw + r * Cfg::kRawPitch + (s < 0 ? 0 : raw_row_shift(pool, s));
        const uint2 a = s < 0 ? make_uint2(0, 0) : *reinterpret_cast<const uint2*>(row + off_a);
        uint4 u;
        if (codes) {
            // a -1 row decodes zero codes with scale byte 0: +0, as the one-pass kernel
            u = kv_decode8_bf16(a, s < 0 ? uint8_t(0) : row[off_s]);
        } else {
            const uint2 b = s < 0 ? make_uint2(0, 0) : *reinterpret_cast<const uint2*>(row + off_a + 8);
            u = make_uint4(a.x, a.y, b.x, b.y);
        }
        uint4* dst = reinterpret_cast<uint4*>(kv_s + r * Cfg::kLd + 8 * c);
        *dst = u;
        for (int j = 1; j < ctas; ++j) st_async_cluster(dst, u, tile_bar, uint32_t((rank + j) % ctas));
    }
}

template <bool kPacked, int kPass>
__global__ void __launch_bounds__(AttnSplitConfig::kThreads, 1)
    sm90_sparse_attn_split_kernel(const SplitAttnParams p) {
    pdl_enter(kPass != kSplitPartialFromPrefix);
    // the prefix pass reads nothing its immediate predecessor (the block-maxima pass) writes until the running
    // state below, so everything up to the first block's logits overlaps that pass (pdl_enter, deferred wait)
    using Cfg = AttnSplitConfig;
    extern __shared__ __align__(16) uint8_t smem[];
    auto* q_s = reinterpret_cast<__nv_bfloat16*>(smem);                  // [16][kLd]
    auto* tiles = reinterpret_cast<__nv_bfloat16*>(smem + Cfg::kQBytes);  // kv_s [64][kLd] (x2 unpacked)
    uint8_t* raw_s = smem + Cfg::kQBytes + Cfg::kTileBytes;              // packed: [2][64][kRawPitch]
    auto* l_s = reinterpret_cast<float*>(smem + Cfg::kQBytes + Cfg::tiles_bytes(kPacked));  // [16][kLLd]
    auto* p_s = reinterpret_cast<__nv_bfloat16*>(l_s + Cfg::kHeads * Cfg::kLLd);            // [16][kPLd]
    auto* idx_s = reinterpret_cast<int32_t*>(p_s + Cfg::kHeads * Cfg::kPLd);                // [2][64]
    auto* mask_s = reinterpret_cast<uint32_t*>(idx_s + 2 * Cfg::kBlock);                    // [kMaskWords]
    float* m_s = reinterpret_cast<float*>(mask_s + Cfg::kMaskWords);                        // [16] running max
    float* sum_s = m_s + Cfg::kHeads;                                                       // [16] running sum
    float* mnew_s = sum_s + Cfg::kHeads;                                                    // [16] block's max
    float* resc_s = mnew_s + Cfg::kHeads;                                                   // [16] rescale
    auto* bars = reinterpret_cast<uint64_t*>(resc_s + Cfg::kHeads);                         // [2] raw stages
    uint64_t* tile_bar = bars + 2;  // packed: the other CTAs' shares of the tile have landed

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, qd = lane & 3;
    // packed rows: the cluster's CTAs (head tiles of one token and chunk, launched in clusters along y) each
    // gather and decode 64 / ctas rows of every block into all their tiles (unpacked: clusters of one)
    const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    const int ctas = int(cluster.num_blocks()), rank = int(cluster.block_rank());
    const int share = Cfg::kBlock / ctas, row_lo = rank * share;
    // the bytes the other CTAs' decodes store into this CTA's tile per block
    const uint32_t remote_tile_bytes = uint32_t(ctas - 1) * uint32_t(share) * Cfg::kTileRowBytes;
    const int chunk = blockIdx.x, tile = blockIdx.y;
    const int64_t t = blockIdx.z, n_tiles = gridDim.y;
    const int h0 = tile * Cfg::kHeads;
    const int h_valid = min(Cfg::kHeads, p.heads - h0);
    const int blk0 = chunk * p.chunk_blocks;                   // first block of the chunk in the whole list
    const int nblk = min(p.chunk_blocks, p.n_blocks - blk0);  // blocks of this chunk
    const int64_t list = t * n_tiles + tile;                   // (token, tile)
    const int64_t part = list * p.chunks + chunk;              // this CTA's partial
    const int32_t* it = p.idx + t * p.topk;
    float* bmax = p.block_max + list * p.n_blocks * Cfg::kHeads;

    // 1. scan the chunk's indices: bit b of mask_s = block b holds a valid candidate; block 0's indices land in
    // idx_s[0] (thread tid < 64 writes both the -1 default and, at j = tid, the index: same thread, in order).
    if (tid < Cfg::kMaskWords) mask_s[tid] = 0;
    if (tid < Cfg::kBlock) idx_s[tid] = -1;
    if (kPacked && tid == 0) {
        mbar_init(&bars[0], share);  // one arrival per row of the CTA's share (its thread, copy or not)
        mbar_init(&bars[1], share);
        mbar_init(tile_bar, 1);  // thread 0's arrival with the remote bytes
        mbar_init_fence();
    }
    // every CTA of the cluster must have started before any writes into another's tile: arrive now, wait just before
    // the first decode, so the index scan and the first gather do not wait for the cluster (a relaxed arrive: this
    // CTA has written nothing another one reads)
    cluster_arrive_relaxed();
    bool cluster_started = false;
    const int j_begin = blk0 * Cfg::kBlock, j_end = min(p.topk, (blk0 + nblk) * Cfg::kBlock);
    for (int base = j_begin; base < j_end; base += Cfg::kThreads) {  // uniform trip count
        const int j = base + tid, rel = j - j_begin;
        int32_t s = j < j_end ? it[j] : -1;
        if (s < 0 || s >= p.n_kv) s = -1;
        if (rel < Cfg::kBlock) idx_s[rel] = s;
        // a warp's 32 positions are one aligned run inside one block
        const unsigned any = __ballot_sync(0xffffffffu, s >= 0);
        if (lane == 0 && any) atomicOr(&mask_s[(rel >> 6) >> 5], 1u << ((rel >> 6) & 31));
    }
    __syncthreads();
    if constexpr (kPass == kSplitBlockMax) {  // empty blocks: -inf (the non-empty ones are written below)
        for (int i = tid; i < nblk * Cfg::kHeads; i += Cfg::kThreads) {
            const int rb = i / Cfg::kHeads;
            if (!((mask_s[rb >> 5] >> (rb & 31)) & 1u)) bmax[(blk0 + rb) * Cfg::kHeads + i % Cfg::kHeads] = -INFINITY;
        }
    }
    int b = next_valid_block(mask_s, 0, nblk);
    if (b >= nblk) {  // no valid candidate in the chunk
        if constexpr (kPass == kSplitPartialFromPrefix) pdl_wait();  // every block waits before it ends
        if constexpr (kPass != kSplitBlockMax) {
            if (tid < Cfg::kHeads) {
                p.part_ml[part * 2 * Cfg::kHeads + tid] = -INFINITY;
                p.part_ml[part * 2 * Cfg::kHeads + Cfg::kHeads + tid] = 0.0f;
            }
        }
        return;
    }

    // q (zero rows past the real heads), in the first copy group with the first block's rows
    const __nv_bfloat16* qt = p.q + (t * p.heads + h0) * Cfg::kDim;
    for (int i = tid; i < Cfg::kHeads * Cfg::kDim / 8; i += Cfg::kThreads) {
        const int r = i / (Cfg::kDim / 8), c = (i % (Cfg::kDim / 8)) * 8;
        const bool valid = r < h_valid;
        cp_async16_zfill(q_s + r * Cfg::kLd + c, qt + (valid ? r : 0) * Cfg::kDim + c, valid);
    }
    // running state: -inf, or (prefix pass) the one-pass kernel's running max at this chunk's first block, which
    // is read from the block-maxima pass's output after the deferred wait, just before the first block's softmax
    if constexpr (kPass != kSplitPartialFromPrefix) {
        if (tid < Cfg::kHeads) m_s[tid] = -INFINITY, sum_s[tid] = 0.0f;
    }
    // prefix pass: wait for the block-maxima pass, then the max over blocks 0 .. blk0 − 1 per head by 8 threads per
    // head (an aligned 8-lane group); thread (h, r = 0) writes m_s[h], the same thread that reads it next
    auto prefix_running_max = [&] {
        pdl_wait();
        const int h = (tid >> 3) & (Cfg::kHeads - 1), r = tid & 7;
        const float* bm = p.block_max + list * p.n_blocks * Cfg::kHeads;
        float mx = -INFINITY;
        for (int k = r; k < blk0; k += 8) mx = fmaxf(mx, bm[k * Cfg::kHeads + h]);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        if (r == 0 && tid < 8 * Cfg::kHeads) m_s[h] = mx, sum_s[h] = 0.0f;
    };

    auto load_idx = [&](int rb, int stage) {  // block rb's indices into idx_s[stage] (-1 past the list / n_kv)
        if (tid < Cfg::kBlock) {
            const int j = (blk0 + rb) * Cfg::kBlock + tid;
            int32_t s = j < p.topk ? it[j] : -1;
            if (s < 0 || s >= p.n_kv) s = -1;
            idx_s[stage * Cfg::kBlock + tid] = s;
        }
    };
    auto issue_gather = [&](int stage) {  // the rows of idx_s[stage] into stage `stage` (zeros for -1)
        const int32_t* bi = idx_s + stage * Cfg::kBlock;
        if constexpr (kPacked) {
            // thread i < share: row row_lo + i. Its own expect_tx precedes its own bulk copy; a -1 row only
            // arrives. The stage's bytes were last read (decode) before the previous iteration's final barrier; the
            // proxy fence orders those generic reads before the async-proxy writes.
            if (tid < share) {
                const int r = row_lo + tid;
                const int32_t s = bi[r];
                uint64_t* bar = &bars[stage];
                if (s >= 0) {
                    const auto* src = static_cast<const uint8_t*>(p.kv) + int64_t(s) * Cfg::kRawRow;
                    uint8_t* dst = raw_s + stage * Cfg::kRawStageBytes + r * Cfg::kRawPitch +
                                   raw_row_shift(static_cast<const uint8_t*>(p.kv), s);
                    const int bulk_at = raw_row_shift(static_cast<const uint8_t*>(p.kv), s) ? 8 : 0;
                    const int rest_at = bulk_at ? 0 : Cfg::kRawBulk;
                    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                    mbar_arrive_expect_tx(bar, Cfg::kRawBulk);
                    bulk_copy_g2s(dst + bulk_at, src + bulk_at, Cfg::kRawBulk, bar);
                    cp_async8_zfill(dst + rest_at, src + rest_at, true);
                } else {
                    mbar_arrive(bar);
                }
            }
        } else {
            const auto* rows = static_cast<const __nv_bfloat16*>(p.kv);
            __nv_bfloat16* dst = tiles + stage * Cfg::kBlock * Cfg::kLd;
            for (int i = tid; i < Cfg::kBlock * Cfg::kDim / 8; i += Cfg::kThreads) {
                const int r = i / (Cfg::kDim / 8), c = (i % (Cfg::kDim / 8)) * 8;
                const int32_t s = bi[r];
                cp_async16_zfill(dst + r * Cfg::kLd + c, rows + int64_t(s < 0 ? 0 : s) * Cfg::kDim + c, s >= 0);
            }
        }
    };

    if (b != 0) {  // (block 0's indices came with the scan, ordered by the barrier after it)
        load_idx(b, 0);
        __syncthreads();  // idx_s[0]
    }
    issue_gather(0);
    asm volatile("cp.async.commit_group;\n" ::);
    uint32_t phases = 0;  // packed: bit i = parity of raw stage i's next completion, bit 2 the tile barrier's

    float acc[Cfg::kChanTiles][4] = {};  // O rows g, g+8 x channels 8·kChanTiles·warp + 8·nt + 2qd (+1)
    int stage = 0;
    bool first_block = true;
    while (b < nblk) {
        const int nb = next_valid_block(mask_s, b + 1, nblk);
        // idx_s[stage ^ 1] and the other stage were last read before the previous iteration's final barrier
        if (nb < nblk) {
            load_idx(nb, stage ^ 1);
            __syncthreads();  // idx_s[stage ^ 1]
            issue_gather(stage ^ 1);
            asm volatile("cp.async.commit_group;\ncp.async.wait_group 1;\n" ::);
        } else {
            asm volatile("cp.async.wait_group 0;\n" ::);
        }
        if constexpr (kPacked) {  // this stage's bulk copies
            mbar_wait(&bars[stage], (phases >> stage) & 1u);
            phases ^= 1u << stage;
        }
        __syncthreads();  // this stage's rows (and q) from every thread's copies
        const int32_t* bi = idx_s + stage * Cfg::kBlock;
        const __nv_bfloat16* kv_s;
        if constexpr (kPacked) {
            if (!cluster_started) cluster_wait(), cluster_started = true;
            // (the other CTAs' stores may complete before this arrival: the phase needs both)
            if (ctas > 1 && tid == 0) mbar_arrive_expect_tx(tile_bar, remote_tile_bytes);
            decode_packed_block(raw_s + stage * Cfg::kRawStageBytes, bi, static_cast<const uint8_t*>(p.kv), tiles,
                                tile_bar, tid, row_lo, share, ctas, rank);
            __syncthreads();  // this CTA's share
            if (ctas > 1) {   // the others'
                mbar_wait<true>(tile_bar, (phases >> 2) & 1u);
                phases ^= 4u;
            }
            kv_s = tiles;
        } else {
            kv_s = tiles + stage * Cfg::kBlock * Cfg::kLd;
        }
        // S = Q·Kᵀ for this warp's keys (the one-pass kernel's k order)
        float sacc[Cfg::kKeyTiles][4] = {};
        block_qk<Cfg::kDim, Cfg::kLd, Cfg::kKeyTiles>(sacc, q_s, kv_s, warp);
#pragma unroll
        for (int nt = 0; nt < Cfg::kKeyTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int h = g + 8 * (e >> 1), key = (warp * Cfg::kKeyTiles + nt) * 8 + 2 * qd + (e & 1);
                l_s[h * Cfg::kLLd + key] = bi[key] >= 0 ? __fmul_rn(sacc[nt][e], p.scale) : -INFINITY;
            }
        __syncthreads();
        // the block's max per head: 8 threads per head, 8 logits each (a max is exact in any order); warps past
        // the 16 heads compute a duplicate and write nothing
        const int mh = (tid >> 3) & (Cfg::kHeads - 1), mr = tid & 7;
        const bool max_owner = mr == 0 && tid < 8 * Cfg::kHeads;
        float bmx;
        {
            const float4 x = *reinterpret_cast<const float4*>(l_s + mh * Cfg::kLLd + 8 * mr);
            const float4 y = *reinterpret_cast<const float4*>(l_s + mh * Cfg::kLLd + 8 * mr + 4);
            bmx = fmaxf(fmaxf(fmaxf(x.x, x.y), fmaxf(x.z, x.w)), fmaxf(fmaxf(y.x, y.y), fmaxf(y.z, y.w)));
            bmx = fmaxf(bmx, __shfl_xor_sync(0xffffffffu, bmx, 4));
            bmx = fmaxf(bmx, __shfl_xor_sync(0xffffffffu, bmx, 2));
            bmx = fmaxf(bmx, __shfl_xor_sync(0xffffffffu, bmx, 1));
        }
        if constexpr (kPass == kSplitPartialFromPrefix) {
            if (first_block) prefix_running_max();
        }
        first_block = false;
        if constexpr (kPass == kSplitBlockMax) {
            if (max_owner) bmax[(blk0 + b) * Cfg::kHeads + mh] = bmx;
        } else {
            if (max_owner) {
                const float mo = m_s[mh], mx = fmaxf(mo, bmx);
                mnew_s[mh] = mx;
                resc_s[mh] = mx == -INFINITY ? 1.0f : exp_softmax(__fsub_rn(mo, mx));  // e^{-inf} = 0 the first time
            }
            __syncthreads();
            for (int i = tid; i < Cfg::kHeads * Cfg::kBlock; i += Cfg::kThreads) {
                const int h = i / Cfg::kBlock, j = i % Cfg::kBlock;
                const float l = l_s[h * Cfg::kLLd + j], mx = mnew_s[h];
                const float pv = (l == -INFINITY || mx == -INFINITY) ? 0.0f : exp_softmax(__fsub_rn(l, mx));
                l_s[h * Cfg::kLLd + j] = pv;
                p_s[h * Cfg::kPLd + j] = __float2bfloat16_rn(pv);
            }
            __syncthreads();
            if (tid < Cfg::kHeads && mnew_s[tid] != -INFINITY) {
                // the block sum in candidate order (the one-pass kernel's order): 16 float4 reads, 64 adds
                const float* row = l_s + tid * Cfg::kLLd;
                float block_sum = 0;
#pragma unroll
                for (int j = 0; j < Cfg::kBlock; j += 4) {
                    const float4 v = *reinterpret_cast<const float4*>(row + j);
                    block_sum = __fadd_rn(block_sum, v.x), block_sum = __fadd_rn(block_sum, v.y);
                    block_sum = __fadd_rn(block_sum, v.z), block_sum = __fadd_rn(block_sum, v.w);
                }
                sum_s[tid] = __fadd_rn(__fmul_rn(sum_s[tid], resc_s[tid]), block_sum);
                m_s[tid] = mnew_s[tid];
            }
            // O = O·rescale + P·V (P 16 x 64 keys, V 64 keys x this warp's channels)
            rescale_add_pv<Cfg::kBlock, Cfg::kPLd, Cfg::kLd, Cfg::kChanTiles>(acc, resc_s[g], resc_s[g + 8], p_s,
                                                                             kv_s, warp);
        }
        // the stages, kv_s, l_s, p_s, idx_s and the softmax state are rewritten next; packed: other CTAs write this
        // tile in the next decode, so the whole cluster must be done reading it. After the last block nothing is
        // rewritten and no CTA writes another's tile again, so the chunk's partial leaves without that wait.
        if (nb >= nblk) break;
        if constexpr (kPacked) cluster.sync();
        else __syncthreads();
        b = nb;
        stage ^= 1;
    }
    if constexpr (kPass != kSplitBlockMax) {
        // the partial: m, l of the 16 rows; o of the real heads (the combine reads no other row)
        if (tid < Cfg::kHeads) {
            p.part_ml[part * 2 * Cfg::kHeads + tid] = m_s[tid];
            p.part_ml[part * 2 * Cfg::kHeads + Cfg::kHeads + tid] = sum_s[tid];
        }
        // o goes through shared memory, as the wgmma kernel's partials do (attention_wgmma.cuh), so that it leaves
        // in coalesced 16-byte row stores instead of 16 scattered 8-byte ones per thread (their drain was ~15% of
        // the CTA's samples at batch 1). The buffer is the stage the last block did not use: no copy is pending into
        // it (none is issued for a last block, and every issued one was waited for), this CTA last read it before
        // the previous iteration's final barrier (or never), and no other CTA ever writes it (the cluster's st.async
        // stores go to the decoded tile only, packed), so no barrier is needed before the writes.
        float* o_s = kPacked ? reinterpret_cast<float*>(raw_s + (stage ^ 1) * Cfg::kRawStageBytes)
                             : reinterpret_cast<float*>(tiles + (stage ^ 1) * Cfg::kBlock * Cfg::kLd);
#pragma unroll
        for (int nt = 0; nt < Cfg::kChanTiles; ++nt) {
            const int ch = (warp * Cfg::kChanTiles + nt) * 8 + 2 * qd;
#pragma unroll
            for (int half = 0; half < 2; ++half)
                *reinterpret_cast<float2*>(o_s + (g + 8 * half) * Cfg::kOutLd + ch) =
                    make_float2(acc[nt][2 * half], acc[nt][2 * half + 1]);
        }
        __syncthreads();  // (every thread reaches it: the loop's exit is uniform)
        // thread = 16 bytes of row 2k + tid / 128: a warp stores 512 contiguous bytes of one head row
        float* po = p.part_o + part * Cfg::kPartialFloats;
        constexpr int kRowPieces = Cfg::kDim / 4, kRowsPerPass = Cfg::kThreads / kRowPieces;  // 128, 2
        const int ch = 4 * (tid % kRowPieces);
#pragma unroll
        for (int k = 0; k < Cfg::kHeads / kRowsPerPass; ++k) {
            const int h = kRowsPerPass * k + tid / kRowPieces;
            if (h < h_valid)
                *reinterpret_cast<float4*>(po + h * Cfg::kDim + ch) =
                    *reinterpret_cast<const float4*>(o_s + h * Cfg::kOutLd + ch);
        }
    }
}

// grid (heads, tokens) x kCombineThreads; thread = channels 4·tid .. 4·tid + 3. kBatch > 0 (at least `chunks`):
// every chunk's (m, l, o) requested at once, one L2 round trip after the wait (batch 1 has 10 chunks at CSA, 3 at
// HCA 8K), where the grouped loop (kBatch = 0) pays one for the maxima and one per group. The batch is the smallest
// instance that holds the chunks: its registers grow with it, and 16 slots (109 registers against 64) made the
// 2-chunk lists of batch 64 slower by the combine's lost occupancy.
template <int kBatch>
__global__ void __launch_bounds__(AttnSplitConfig::kCombineThreads)
    sm90_sparse_attn_split_combine_kernel(const float* __restrict__ part_o, const float* __restrict__ part_ml,
                                          int heads, int chunks, const float* __restrict__ sink, bool derotate,
                                          const int64_t* __restrict__ positions,
                                          const __grid_constant__ backend::RopeFreqs freqs,
                                          __nv_bfloat16* __restrict__ out) {
    pdl_enter();
    using Cfg = AttnSplitConfig;
    const int h = blockIdx.x, tid = threadIdx.x, ch = 4 * tid;
    const int64_t t = blockIdx.y;
    const int n_tiles = (heads + Cfg::kHeads - 1) / Cfg::kHeads, tile = h / Cfg::kHeads, hr = h % Cfg::kHeads;
    const int64_t first = (t * n_tiles + tile) * chunks;  // the (token, tile)'s first partial
    const float sink_h = sink[h];  // both loaded up front, off the dependent chain
    const int64_t pos = derotate ? positions[t] : 0;
    const float* ml0 = part_ml + first * 2 * Cfg::kHeads;
    const float* o0 = part_o + first * Cfg::kPartialFloats + hr * Cfg::kDim + ch;
    float M = -INFINITY, den = 0.0f, o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    bool seen = false;
    // chunk c's share e^{m_c - M}·(l_c, o_c) added in chunk order (a chunk with no valid candidate has max -inf and
    // an unwritten o: skipped)
    auto take = [&](float mc, float lc, const float4& v) {
        if (mc == -INFINITY) return;
        const float w = exp_softmax(__fsub_rn(mc, M));  // w = 1 exactly at the max
        const float wv[4] = {__fmul_rn(w, v.x), __fmul_rn(w, v.y), __fmul_rn(w, v.z), __fmul_rn(w, v.w)};
        const float wl = __fmul_rn(w, lc);
        den = seen ? __fadd_rn(den, wl) : wl;
#pragma unroll
        for (int e = 0; e < 4; ++e) o[e] = seen ? __fadd_rn(o[e], wv[e]) : wv[e];
        seen = true;
    };
    if constexpr (kBatch > 0) {
        float mc[kBatch], lc[kBatch];
        float4 v[kBatch];
#pragma unroll
        for (int i = 0; i < kBatch; ++i) {
            const bool in = i < chunks;
            mc[i] = in ? ml0[i * 2 * Cfg::kHeads + hr] : -INFINITY;
            lc[i] = in ? ml0[i * 2 * Cfg::kHeads + Cfg::kHeads + hr] : 0.0f;
            v[i] = in ? *reinterpret_cast<const float4*>(o0 + i * Cfg::kPartialFloats)
                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int i = 0; i < kBatch; ++i) M = fmaxf(M, mc[i]);
        if (M != -INFINITY) {
#pragma unroll
            for (int i = 0; i < kBatch; ++i) take(mc[i], lc[i], v[i]);
        }
    } else {
        // loads in groups of kGroup chunks, all issued before any is used: a loop that read a chunk's o only after
        // testing its max waited two dependent L2 round trips per chunk (~9 µs for 10 chunks at batch 1, ncu)
        constexpr int kGroup = 8;
        for (int c0 = 0; c0 < chunks; c0 += kGroup) {
            float mc[kGroup];
#pragma unroll
            for (int i = 0; i < kGroup; ++i) mc[i] = c0 + i < chunks ? ml0[(c0 + i) * 2 * Cfg::kHeads + hr] : -INFINITY;
#pragma unroll
            for (int i = 0; i < kGroup; ++i) M = fmaxf(M, mc[i]);
        }
        if (M != -INFINITY) {
            for (int c0 = 0; c0 < chunks; c0 += kGroup) {
                float mc[kGroup], lc[kGroup];
                float4 v[kGroup];
#pragma unroll
                for (int i = 0; i < kGroup; ++i) {
                    const bool in = c0 + i < chunks;
                    const float* ml = ml0 + (c0 + i) * 2 * Cfg::kHeads;
                    mc[i] = in ? ml[hr] : -INFINITY;
                    lc[i] = in ? ml[Cfg::kHeads + hr] : 0.0f;
                    v[i] = in ? *reinterpret_cast<const float4*>(o0 + (c0 + i) * Cfg::kPartialFloats)
                              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
#pragma unroll
                for (int i = 0; i < kGroup; ++i) take(mc[i], lc[i], v[i]);
            }
        }
    }
    if (M != -INFINITY) den = __fadd_rn(den, exp_softmax(__fsub_rn(sink_h, M)));
    float a[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = den == 0.0f ? 0.0f : round_bf16(__fdiv_rn(o[i], den));
    if (derotate && ch >= Cfg::kDim - 64) {
#pragma unroll
        for (int pr = 0; pr < 2; ++pr) {
            float cs, sn;
            rope_cos_sin(pos, freqs.f[(ch - (Cfg::kDim - 64)) / 2 + pr], true, cs, sn);
            rotate_pair(a[2 * pr], a[2 * pr + 1], cs, sn);
        }
    }
    __nv_bfloat16* dst = out + (t * heads + h) * Cfg::kDim + ch;
    *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(a[0], a[1]);
    *reinterpret_cast<__nv_bfloat162*>(dst + 2) = __floats2bfloat162_rn(a[2], a[3]);
}

}  // namespace dsv4::cuda
