// Kernels and launcher of sm90_mxfp4_moe_prefill (moe_prefill.cuh describes the five launches, the warp roles and
// the exact FP4 -> FP8 conversion).
#include <algorithm>
#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/per_device.h"
#include "backend/cuda/common/tensor_map.h"
#include "backend/cuda/kernels/moe/moe_prepare.cuh"
#include "backend/cuda/kernels/moe_prefill/moe_prefill.cuh"
#include "backend/cuda/kernels/moe_prefill/moe_prefill.h"

namespace dsv4::cuda {
namespace {

using Cfg = MoePrefillConfig;
using namespace moe_prefill;

// Exclusive prefix sum, in place, of a[0..n) (n <= 1024, shared memory) by a block of kPrepThreads threads (4
// entries each: block_scan4, the decode path's). Returns the total. Every thread of the block must call it.
__device__ int block_exclusive_scan(int* a, int n, int* warp_sums) {
    static_assert(Cfg::kPrepThreads * 4 == Cfg::kMaxExperts, "4 entries per thread cover every expert");
    static_assert(Cfg::kPrepThreads == MoeDecodeConfig::kPrepThreads, "block_scan4's block size");
    const int tid = threadIdx.x;
    int v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = 4 * tid + i < n ? a[4 * tid + i] : 0;
    const int total = block_scan4(v, warp_sums);
#pragma unroll
    for (int i = 0; i < 4; ++i)
        if (4 * tid + i < n) a[4 * tid + i] = v[i];
    __syncthreads();
    return total;
}

// Launch 1: grouping by expert + gather-quantise of x. Block b: tokens [64 b, 64 b + 64).
__global__ void __launch_bounds__(Cfg::kPrepThreads) moe_prefill_prepare_kernel(MoePrefillParams p) {
    pdl_enter();
    __shared__ int cnt[Cfg::kMaxExperts], start[Cfg::kMaxExperts], before[Cfg::kMaxExperts];
    __shared__ int pos_of[Cfg::kPrepTokens * Cfg::kMaxK];  // list position of each of the block's picks (-1: none)
    __shared__ int warp_sums[Cfg::kPrepThreads / 32];
    const int tid = threadIdx.x, picks = p.T * p.K;
    const int t0 = int(blockIdx.x) * Cfg::kPrepTokens, t1 = min(p.T, t0 + Cfg::kPrepTokens);
    const int p0 = t0 * p.K, p1 = t1 * p.K;
    for (int e = tid; e < p.E; e += Cfg::kPrepThreads) cnt[e] = 0, before[e] = 0;
    __syncthreads();
    // picks per expert, and those before this block's first pick
    for (int i = tid; i < picks; i += Cfg::kPrepThreads) {
        const int e = __ldg(p.idx + i);
        if (e >= 0 && e < p.E) {
            atomicAdd(&cnt[e], 1);
            if (i < p0) atomicAdd(&before[e], 1);
        }
    }
    __syncthreads();
    for (int e = tid; e < p.E; e += Cfg::kPrepThreads) start[e] = cnt[e];
    __syncthreads();
    block_exclusive_scan(start, p.E, warp_sums);
    if (blockIdx.x == 0) {
        // M tile table: expert e's ceil(cnt/bm) tiles, in ascending expert order (pos_of is scratch here)
        for (int e = tid; e < p.E; e += Cfg::kPrepThreads) pos_of[e] = (cnt[e] + p.bm - 1) / p.bm;
        __syncthreads();
        const int n_mtiles = block_exclusive_scan(pos_of, p.E, warp_sums);
        for (int e = tid; e < p.E; e += Cfg::kPrepThreads) {
            for (int j = 0; j * p.bm < cnt[e]; ++j) {
                const int m = pos_of[e] + j;
                p.tile_expert[m] = e;
                p.tile_row0[m] = start[e] + j * p.bm;
                p.tile_rows[m] = min(p.bm, cnt[e] - j * p.bm);
            }
        }
        if (tid == 0) *p.n_mtiles = n_mtiles;
        __syncthreads();
    }
    // this block's picks take the next free positions of their experts (order inside an expert is free: every
    // position carries its pick index, and a row's result does not depend on its neighbours)
    for (int i = p0 + tid; i < p1; i += Cfg::kPrepThreads) {
        const int e = __ldg(p.idx + i);
        int pos = -1;
        if (e >= 0 && e < p.E) {
            pos = start[e] + atomicAdd(&before[e], 1);
            p.list[pos] = i;
        }
        pos_of[i - p0] = pos;
    }
    __syncthreads();
    // act_quant of the block's token rows, each 32-element chunk written to every position of its token; a quad of
    // lanes holds one 128-block (D/32 chunks per row is a multiple of 4)
    const int cpr = p.D / 32, n_chunks = (t1 - t0) * cpr;
    for (int base = 0; base < n_chunks; base += Cfg::kPrepThreads) {
        const int c = base + tid;
        const bool active = c < n_chunks;
        const int tl = active ? c / cpr : 0, blk = active ? c % cpr : 0;
        const __nv_bfloat16* src = p.x + size_t(t0 + tl) * size_t(p.D) + size_t(blk) * 32;
        float v[32];
        load32(src, v);
        uint32_t q[8];
        const float s = quant32_e4m3(v, q);
        if (!active) continue;
        for (int k = 0; k < p.K; ++k) {
            const int pos = pos_of[tl * p.K + k];
            if (pos < 0) continue;
            uint4* dst = reinterpret_cast<uint4*>(p.xg + size_t(pos) * size_t(p.D) + size_t(blk) * 32);
            dst[0] = make_uint4(q[0], q[1], q[2], q[3]);
            dst[1] = make_uint4(q[4], q[5], q[6], q[7]);
            if ((blk & 3) == 0) p.xs[size_t(pos) * size_t(p.D / 128) + blk / 4] = s;
        }
    }
}

// Converter thread r's read cursor: the step it copies next (tile blockIdx.x + i·gridDim.x, K block kb) and the
// source rows of B row r in that tile. Advanced one step per call, so the loop needs no division by the K blocks.
// s_vec: K blocks per tile are a multiple of kScaleSteps and the row's scale words 16-byte aligned, so the scale
// words of steps g .. g + kScaleSteps - 1 (g % kScaleSteps == 0, all in one tile) arrive as 16-byte copies at step
// g; else each step copies its own word to the same place.
struct RawCursor {
    int step = 0, tile = int(blockIdx.x), kb = 0;
    bool s_vec = false;
    const uint8_t* w_row = nullptr;
    const uint8_t* s_row = nullptr;
};

// Where converter thread r finds the scale word of its step g in the scale ring: [g / 4 % kQuads][thread r] x 16 B,
// word g % 4 (a position is reused 2 · kScaleSteps steps later, after its step was converted).
template <class G>
__device__ __forceinline__ int scale_word_offset(int g, int r) {
    constexpr int kQuads = 2 * G::kScaleSteps / 4;
    static_assert(G::kScaleRingBytes == kQuads * 128 * 16, "two chunks of quads");
    return ((g / 4 % kQuads) * 128 + r) * 16 + (g % 4) * 4;
}

// Converter thread r: cp.async of B row r's 64 nibble bytes of the cursor's step into raw slot step % kRaw and of
// its scale word into the scale ring (s_vec: every kScaleSteps steps, the words of kScaleSteps steps), then the cursor
// moves on. One commit group per step, empty past the last step, so the wait_group counts stay uniform.
template <bool kGateUp, class G>
__device__ __forceinline__ void issue_raw_step(const MoePrefillParams& p, int n_steps, int KB, int n_tiles_n,
                                               size_t row_bytes, size_t srow_bytes, int r, uint8_t* raw, uint8_t* sring,
                                               RawCursor& c) {
    if (c.step < n_steps) {
        if (c.kb == 0) {  // a new tile: its expert and rows
            const int m = c.tile / n_tiles_n, n = c.tile % n_tiles_n;
            const Mxfp4ExpertPtrs& ex = p.experts[p.tile_expert[m]];
            int row;
            const uint8_t *w, *ws;
            if (kGateUp) {  // B rows 0..63: w1 rows n·64.., rows 64..127: the same rows of w3
                w = r < Cfg::kUpRows ? ex.w1 : ex.w3;
                ws = r < Cfg::kUpRows ? ex.w1s : ex.w3s;
                row = n * Cfg::kUpRows + (r % Cfg::kUpRows);
            } else {
                w = ex.w2, ws = ex.w2s;
                row = n * Cfg::kBN + r;
            }
            c.w_row = w + size_t(row) * row_bytes;
            c.s_row = ws + size_t(row) * srow_bytes;
            c.s_vec = KB % G::kScaleSteps == 0 && ((reinterpret_cast<uintptr_t>(ws) | srow_bytes) & 15) == 0;
        }
        uint8_t* slot = raw + (c.step % G::kRaw) * Cfg::kRawStageBytes;
#pragma unroll
        for (int j = 0; j < 4; ++j) cp_async16(slot + (j * 128 + r) * 16, c.w_row + size_t(c.kb) * 64 + 16 * j);
        uint8_t* sword = sring + scale_word_offset<G>(c.step, r);
        if (!c.s_vec) {
            cp_async4(sword, c.s_row + size_t(c.kb) * 4);
        } else if (c.kb % G::kScaleSteps == 0) {  // then step % kScaleSteps == 0 too: the chunk's words, 4 per copy
#pragma unroll
            for (int j = 0; j < G::kScaleSteps / 4; ++j)
                cp_async16(sword + j * 128 * 16, c.s_row + size_t(c.kb + 4 * j) * 4);
        }
        if (++c.kb == KB) c.kb = 0, c.tile += int(gridDim.x);
    }
    ++c.step;
    cp_async_commit();
}

// Launches 2 (kGateUp) and 3: the grouped GEMMs. tmap_a: xg [T·K, D] (gate/up) or hq [T·K, I] (down), e4m3, box 64
// rows x 128 bytes, 128-byte swizzle, rows past T·K zero-filled.
// kRepacked: the experts are in the repacked layout (mxfp4_repacked.h: bits permuted inside each word, scale words
// (e_max, deltas)); the converter's output is the same e4m3 tile. G: the M tile and rings (MoePrefillGemmShape).
template <bool kGateUp, bool kRepacked, class G>
__global__ void __launch_bounds__(G::kThreads, 1)
    moe_prefill_gemm_kernel(const __grid_constant__ CUtensorMap tmap_a, const MoePrefillParams p) {
    pdl_enter();
    __shared__ __align__(8) uint64_t full_bar[G::kStages];
    __shared__ __align__(8) uint64_t empty_bar[G::kStages];
    extern __shared__ uint8_t smem_raw[];
    // 1024-aligned in the shared window (TMA and the 128-byte swizzle), derived from smem_raw by pointer arithmetic
    // so that the compiler keeps every access below in the shared space (LDS / STS, not generic loads and stores)
    uint8_t* ring = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
    float* wscale = reinterpret_cast<float*>(ring + G::kStages * G::kStageBytes);  // [kStages][128 B rows]
    uint8_t* raw = reinterpret_cast<uint8_t*>(wscale + G::kStages * G::kBN);       // [kRaw][kRawStageBytes]
    uint8_t* sring = raw + G::kRaw * G::kRawStageBytes;                            // [kScaleRingBytes]
    uint8_t* tables = sring + G::kScaleRingBytes;                                  // [kDeltas][8] e4m3 bytes

    const int Kdim = kGateUp ? p.D : p.I, KB = Kdim / G::kBK;
    const int n_tiles_n = kGateUp ? p.I / G::kUpRows : p.D / G::kBN;
    const int tiles = *p.n_mtiles * n_tiles_n;
    const int tid = threadIdx.x;

    if (tid < G::kDeltas) {
        uint32_t lo, hi;
        e4m3_table_for_delta(tid, lo, hi);
        reinterpret_cast<uint2*>(tables)[tid] = make_uint2(lo, hi);
    }
    if (tid == 0) {
        for (int s = 0; s < G::kStages; ++s) {
            mbar_init(&full_bar[s], 1 + 128);  // thread 0's arrive.expect_tx (A tile) + every converter thread
            mbar_init(&empty_bar[s], 8);       // one arrival per consumer warp
        }
        mbar_init_fence();
        asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmap_a)) : "memory");
    }
    __syncthreads();

    if (tid < 128) {
        // ------------------------------------------------------------------------------- converter warpgroup
        if constexpr (G::kBlocksPerConsumer > 1)
            asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(G::kConverterRegs));
        const int r = tid;  // B row of every stage
        const int my_tiles = tiles > int(blockIdx.x) ? (tiles - int(blockIdx.x) + int(gridDim.x) - 1) / int(gridDim.x)
                                                     : 0;
        const int n_steps = my_tiles * KB;
        const size_t row_bytes = size_t(Kdim) / 2, srow_bytes = size_t(Kdim) / 32;
        // the source row of step g (cached per tile)
        RawCursor cursor;
        for (int g = 0; g < G::kRaw - 1; ++g)
            issue_raw_step<kGateUp, G>(p, n_steps, KB, n_tiles_n, row_bytes, srow_bytes, r, raw, sring, cursor);
        int stage = 0, raw_slot = 0, kb = 0, a_row0 = 0, a_boxes = 0;
        uint32_t phase = 0;
        for (int g = 0, tile = int(blockIdx.x); g < n_steps; ++g) {
            issue_raw_step<kGateUp, G>(p, n_steps, KB, n_tiles_n, row_bytes, srow_bytes, r, raw, sring, cursor);
            cp_async_wait<G::kRaw - 1>();  // this thread's copies of step g have landed
            mbar_wait(&empty_bar[stage], phase ^ 1);
            uint8_t* sA = ring + stage * G::kStageBytes;
            uint8_t* sB = sA + G::kATileBytes;
            if (r == 0) {  // the A tile's 64-row blocks that hold valid rows (the consumers read no other)
                if (kb == 0) {
                    const int mt = tile / n_tiles_n;
                    a_row0 = p.tile_row0[mt];
                    a_boxes = (p.tile_rows[mt] + G::kABoxRows - 1) / G::kABoxRows;
                }
                mbar_arrive_expect_tx(&full_bar[stage], uint32_t(a_boxes) * G::kABoxBytes);
                for (int b = 0; b < a_boxes; ++b)
                    tma_load_2d(sA + b * G::kABoxBytes, &tmap_a, kb * G::kBK, a_row0 + b * G::kABoxRows,
                                &full_bar[stage]);
            }
            const uint32_t sw = *reinterpret_cast<const uint32_t*>(sring + scale_word_offset<G>(g, r));
            if (++kb == KB) kb = 0, tile += int(gridDim.x);
            const uint8_t* slot = raw + raw_slot * G::kRawStageBytes;
            if (++raw_slot == G::kRaw) raw_slot = 0;
            // the four 32-blocks' spreads below the row's largest exponent (the repacked word holds them already)
            int e_max, delta[4];
            if constexpr (kRepacked) {
                e_max = int(sw & 0xff);
#pragma unroll
                for (int q = 0; q < 4; ++q) delta[q] = int((sw >> (8 + 4 * q)) & 15);
            } else {
                const int e[4] = {int(sw & 0xff), int((sw >> 8) & 0xff), int((sw >> 16) & 0xff), int(sw >> 24)};
                e_max = max(max(e[0], e[1]), max(e[2], e[3]));
#pragma unroll
                for (int q = 0; q < 4; ++q) delta[q] = e_max - e[q];
            }
            wscale[stage * G::kBN + r] = pow2_f32(e_max - 133);
            uint8_t* row_base = sB + r * G::kBK;
            auto to_e4m3 = [](uint32_t w, const uint2& t) {
                return kRepacked ? repacked_x8_to_e4m3(w, t.x, t.y) : e2m1x8_to_e4m3(w, t.x, t.y);
            };
            // every shared-memory read of the step before the first B-tile store: the stores may alias the raw
            // ring as far as the compiler knows, so loads written after them would wait for them
            uint4 nibs[4];
            uint2 tabs[4];
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                nibs[q] = *reinterpret_cast<const uint4*>(slot + (q * 128 + r) * 16);
                tabs[q] = *reinterpret_cast<const uint2*>(tables + 8 * min(delta[q], G::kDeltas - 1));
            }
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const uint4 nib = nibs[q];
                const uint2 t = tabs[q];
                const uint2 o0 = to_e4m3(nib.x, t), o1 = to_e4m3(nib.y, t);
                const uint2 o2 = to_e4m3(nib.z, t), o3 = to_e4m3(nib.w, t);
                // elements 32q..32q+15 = 16-byte chunk 2q, 32q+16..32q+31 = chunk 2q+1, swizzled by row % 8
                *reinterpret_cast<uint4*>(row_base + ((2 * q) ^ (r & 7)) * 16) = make_uint4(o0.x, o0.y, o1.x, o1.y);
                *reinterpret_cast<uint4*>(row_base + ((2 * q + 1) ^ (r & 7)) * 16) =
                    make_uint4(o2.x, o2.y, o3.x, o3.y);
            }
            fence_proxy_async_smem();  // the B tile is read by wgmma (async proxy)
            mbar_arrive(&full_bar[stage]);
            if (++stage == G::kStages) stage = 0, phase ^= 1;
        }
        cp_async_wait<0>();
        return;
    }

    // ------------------------------------------------------------------------------------ consumer warpgroups
    if constexpr (G::kBlocksPerConsumer > 1)
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(G::kConsumerRegs));
    const int consumer = tid / 128 - 1;  // M blocks consumer, consumer + 2, ... (64 rows each) of the tile
    const int warp = (tid / 32) % 4, lane = tid % 32;
    const int row_in_blk = warp * 16 + lane / 4;  // and row_in_blk + 8
    const int TK = p.T * p.K;
    const float* a_scale = kGateUp ? p.xs : p.hs;
    constexpr int kBlocks = G::kBlocksPerConsumer;
    float acc[64], out[kBlocks][64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    int stage = 0;
    uint32_t phase = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int m = tile / n_tiles_n, n = tile % n_tiles_n;
        const int row0 = p.tile_row0[m], rows = p.tile_rows[m];
        // M blocks this warpgroup computes (warp-uniform): j-th is block consumer + 2j; the blocks whose 64 rows
        // all lie past the expert's last pick are skipped
        int nblk = 0;
#pragma unroll
        for (int j = 0; j < kBlocks; ++j) nblk += rows > 64 * (consumer + 2 * j) ? 1 : 0;
        // per row of the thread (block j, half h): its activation scales, and the epilogue's row data (pick index,
        // for gate/up its routing weight), loaded now: two dependent global loads would otherwise sit between the
        // last stage and the stores. Rows past the tile's valid ones read some other position's scales; their
        // results are never stored.
        const float* sa[kBlocks][2];
        int pick[kBlocks][2];
        float rw[kBlocks][2];
#pragma unroll
        for (int j = 0; j < kBlocks; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int rib = 64 * (consumer + 2 * j) + row_in_blk + 8 * h, q = row0 + rib;
                const bool ok = j < nblk && rib < rows;
                sa[j][h] = a_scale + size_t(min(q, TK - 1)) * size_t(KB);
                pick[j][h] = ok ? p.list[q] : -1;
                rw[j][h] = kGateUp && ok ? p.route_w[pick[j][h]] : 0.0f;
            }
#pragma unroll
        for (int j = 0; j < kBlocks; ++j)
#pragma unroll
            for (int i = 0; i < 64; ++i) out[j][i] = 0.0f;
        for (int kb = 0; kb < KB; ++kb) {
            float a[kBlocks][2];
#pragma unroll
            for (int j = 0; j < kBlocks; ++j)
#pragma unroll
                for (int h = 0; h < 2; ++h) a[j][h] = j < nblk ? __ldg(sa[j][h] + kb) : 0.0f;
            mbar_wait(&full_bar[stage], phase);
#pragma unroll
            for (int j = 0; j < kBlocks; ++j) {
                if (j >= nblk) break;
                const uint32_t a_base = smem_u32(ring + stage * G::kStageBytes) + (consumer + 2 * j) * 64 * G::kBK;
                const uint32_t b_base = smem_u32(ring + stage * G::kStageBytes + G::kATileBytes);
                fence_accumulators(acc);
                wgmma_fence();
#pragma unroll
                for (int ks = 0; ks < G::kBK / 32; ++ks)
                    wgmma_m64n128k32_e4m3(acc, sw128_kmajor_desc(a_base + ks * 32), sw128_kmajor_desc(b_base + ks * 32),
                                          ks > 0 ? 1u : 0u);
                wgmma_commit();
                fence_accumulators(acc);
                wgmma_wait_all();
                fence_accumulators(acc);
                // out += acc · (a_scale · w_scale) with the weight scales of the thread's 32 columns
                // 8i + 2(lane%4) + {0, 1}: the scale product is a power of two, so acc times it is exact and the fma
                // rounds once, like the reference's separate multiply and add
                const float* wrow = wscale + stage * G::kBN + 2 * (lane % 4);
#pragma unroll
                for (int i = 0; i < 16; ++i) {
                    const float2 ws = *reinterpret_cast<const float2*>(wrow + 8 * i);
                    out[j][4 * i + 0] = fmaf(acc[4 * i + 0], a[j][0] * ws.x, out[j][4 * i + 0]);
                    out[j][4 * i + 1] = fmaf(acc[4 * i + 1], a[j][0] * ws.y, out[j][4 * i + 1]);
                    out[j][4 * i + 2] = fmaf(acc[4 * i + 2], a[j][1] * ws.x, out[j][4 * i + 2]);
                    out[j][4 * i + 3] = fmaf(acc[4 * i + 3], a[j][1] * ws.y, out[j][4 * i + 3]);
                }
            }
            __syncwarp();  // the warp's reads of the stage (wgmma operands, scales) are done
            if (lane == 0) mbar_arrive(&empty_bar[stage]);
            if (++stage == G::kStages) stage = 0, phase ^= 1;
        }

        const int col = 2 * (lane % 4);
#pragma unroll
        for (int j = 0; j < kBlocks; ++j) {
            if (j >= nblk) break;
            const int rib = 64 * (consumer + 2 * j) + row_in_blk;  // the thread's rows rib, rib + 8 of the tile
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                if (pick[j][half] < 0) continue;
                const int pos = row0 + rib + 8 * half;
                if (kGateUp) {
                    // columns 0..63 are w1 rows n·64 + c, columns 64..127 the same rows of w3: fragment i pairs with
                    // i + 8
                    __nv_bfloat16* dst = p.h + size_t(pos) * size_t(p.I) + size_t(n) * G::kUpRows + col;
#pragma unroll
                    for (int i = 0; i < 8; ++i) {
                        float hv[2];
#pragma unroll
                        for (int c = 0; c < 2; ++c) {
                            // reference: u1, u3 are bf16 linear outputs; clamp; silu(u1)·u3 in f32; × route weight
                            float u1 = round_bf16(out[j][4 * i + 2 * half + c]);
                            float u3 = round_bf16(out[j][4 * (i + 8) + 2 * half + c]);
                            if (p.limit > 0.0f) {
                                u1 = fminf(u1, p.limit);
                                u3 = fminf(fmaxf(u3, -p.limit), p.limit);
                            }
                            const float av = __fmul_rn(__fdiv_rn(u1, __fadd_rn(1.0f, expf(-u1))), u3);
                            hv[c] = __fmul_rn(rw[j][half], av);
                        }
                        *reinterpret_cast<__nv_bfloat162*>(dst + 8 * i) = __floats2bfloat162_rn(hv[0], hv[1]);
                    }
                } else {
                    // each pick's bf16 expert output, by pick index
                    __nv_bfloat16* dst = p.yp + size_t(pick[j][half]) * size_t(p.D) + size_t(n) * G::kBN + col;
#pragma unroll
                    for (int i = 0; i < 16; ++i)
                        *reinterpret_cast<__nv_bfloat162*>(dst + 8 * i) =
                            __floats2bfloat162_rn(out[j][4 * i + 2 * half], out[j][4 * i + 2 * half + 1]);
                }
            }
        }
    }
}

// Launch 3: the hidden rows h [T·K, I] to e4m3 per 128 with UE8M0 scales (hq, hs), the down GEMM's A operand. A
// quad of lanes holds one 128-block (each lane 32 elements); rows of unused list positions are quantised too (their
// GEMM rows are never stored).
__global__ void __launch_bounds__(Cfg::kQuantThreads) moe_prefill_hidden_quant_kernel(MoePrefillParams p) {
    pdl_enter();
    const int64_t c = int64_t(blockIdx.x) * Cfg::kQuantThreads + threadIdx.x;  // 32-element chunk
    const int64_t n_chunks = int64_t(p.T) * p.K * (p.I / 32);
    const bool ok = c < n_chunks;
    const int64_t cc = ok ? c : n_chunks - 1;  // every lane of a quad takes part in the shuffles
    const __nv_bfloat16* src = p.h + cc * 32;
    float v[32];
    load32(src, v);
    uint32_t q[8];
    const float s = quant32_e4m3(v, q);
    if (!ok) return;
    uint4* dst = reinterpret_cast<uint4*>(p.hq + cc * 32);
    dst[0] = make_uint4(q[0], q[1], q[2], q[3]);
    dst[1] = make_uint4(q[4], q[5], q[6], q[7]);
    if ((cc & 3) == 0) p.hs[cc / 4] = s;  // I is a multiple of 128: chunk 4b starts 128-block b of the flat rows
}

// Launch 5: token b's output = bf16(Σ picks in ascending expert order (f32) + shared), as backend::cpu::moe_sum.
__global__ void __launch_bounds__(Cfg::kCombineThreads) moe_prefill_combine_kernel(MoePrefillParams p) {
    pdl_enter();
    __shared__ int order[Cfg::kMaxK];
    __shared__ int n_valid;
    const int t = blockIdx.x;
    if (threadIdx.x == 0) {
        int n = 0;
        for (int j = 0; j < p.K; ++j) {
            const int e = p.idx[t * p.K + j];
            if (e < 0 || e >= p.E) continue;
            int k = n++;
            for (; k > 0 && p.idx[order[k - 1]] > e; --k) order[k] = order[k - 1];
            order[k] = t * p.K + j;
        }
        n_valid = n;
    }
    __syncthreads();
    for (int c = threadIdx.x; c < p.D / 8; c += Cfg::kCombineThreads) {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int j = 0; j < n_valid; ++j) {
            float v[8];
            load8(p.yp + size_t(order[j]) * size_t(p.D) + size_t(c) * 8, v);
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[i] = __fadd_rn(acc[i], v[i]);
        }
        if (p.shared) {
            float v[8];
            load8(p.shared + size_t(t) * size_t(p.D) + size_t(c) * 8, v);
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[i] = __fadd_rn(acc[i], v[i]);
        }
        store8(p.y + size_t(t) * size_t(p.D) + size_t(c) * 8, acc);
    }
}

}  // namespace

// --------------------------------------------------------------------------------------------- host side

namespace {

using GemmKernel = void (*)(CUtensorMap, MoePrefillParams);
struct GemmLaunch {
    GemmKernel gate_up, down;
    int smem;
    cudaError_t attr;  // of raising the kernels' shared-memory limit, once per tile shape and device
};
template <class G>
GemmLaunch gemm_launch(bool repacked) {
    static PerDevice<cudaError_t> attrs;
    const cudaError_t attr = attrs.get([] {
        for (GemmKernel k : {moe_prefill_gemm_kernel<true, false, G>, moe_prefill_gemm_kernel<false, false, G>,
                             moe_prefill_gemm_kernel<true, true, G>, moe_prefill_gemm_kernel<false, true, G>}) {
            const cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, G::kSmemBytes);
            if (e != cudaSuccess) return e;
        }
        return cudaSuccess;
    });
    return repacked ? GemmLaunch{moe_prefill_gemm_kernel<true, true, G>, moe_prefill_gemm_kernel<false, true, G>,
                                 G::kSmemBytes, attr}
                    : GemmLaunch{moe_prefill_gemm_kernel<true, false, G>, moe_prefill_gemm_kernel<false, false, G>,
                                 G::kSmemBytes, attr};
}

}  // namespace

size_t sm90_mxfp4_moe_prefill_workspace_bytes(int64_t tokens, int64_t k, int64_t n_experts, int64_t dim,
                                              int64_t inter) {
    if (tokens <= 0 || k <= 0 || n_experts <= 0 || dim <= 0 || inter <= 0) return 0;
    return MoePrefillWorkspace::make(tokens, k, n_experts, dim, inter).total;
}

Status sm90_mxfp4_moe_prefill(const MoeDecodeArgs& a, StreamHandle stream, MoePrefillTile tile) {
    const std::string op = "sm90_mxfp4_moe_prefill";
    if (!a.x || !a.idx || !a.route_w || !a.experts || !a.y || !a.workspace)
        return invalid_argument(op + ": null pointer (x, idx, route_w, experts, y and workspace are required)");
    if (a.route)
        return invalid_argument(op +
                                ": routing in the first launch is the decode path's (MoeDecodeArgs::route): "
                                "route with sm90_router_select and pass idx / route_w");
    if ((a.format != MoeWeightFormat::kMXFP4 && a.format != MoeWeightFormat::kMXFP4Repacked) || a.nvfp4_experts ||
        a.fp8_experts)
        return invalid_argument(op + ": MXFP4 experts only, shipped or repacked (format " +
                                moe_weight_format_name(a.format) +
                                "); NVFP4 and FP8-block experts run through sm90_mxfp4_moe_decode");
    if (a.shared_expert)
        return invalid_argument(op +
                                ": the shared expert runs inside sm90_mxfp4_moe_decode only; pass its output in "
                                "`shared`");
    static_assert(Cfg::kMaxK == 16 && Cfg::kMaxExperts == 1024, "the limits check_moe_shape enforces");
    DSV4_RETURN_IF_ERROR(check_moe_shape(a, op, 128));
    if (a.tokens < 1 || a.tokens * a.k >= (int64_t(1) << 26))
        return invalid_argument(op + ": tokens " + std::to_string(a.tokens) + " outside 1..2^26/K");
    const MoePrefillWorkspace wl = MoePrefillWorkspace::make(a.tokens, a.k, a.n_experts, a.dim, a.inter);
    if (a.workspace_bytes < wl.total || (reinterpret_cast<uintptr_t>(a.workspace) & 255))
        return invalid_argument(op + ": workspace must be 256-byte aligned and hold " + std::to_string(wl.total) +
                                " bytes (sm90_mxfp4_moe_prefill_workspace_bytes), got " +
                                std::to_string(a.workspace_bytes));
    if ((reinterpret_cast<uintptr_t>(a.x) | reinterpret_cast<uintptr_t>(a.y) |
         reinterpret_cast<uintptr_t>(a.shared)) & 15)
        return invalid_argument(op + ": x, y and shared must be 16-byte aligned");

    char* ws = static_cast<char*>(a.workspace);
    MoePrefillParams p{};
    p.x = static_cast<const __nv_bfloat16*>(a.x);
    p.idx = a.idx;
    p.route_w = a.route_w;
    p.experts = a.experts;
    p.shared = static_cast<const __nv_bfloat16*>(a.shared);
    p.y = static_cast<__nv_bfloat16*>(a.y);
    p.T = int(a.tokens), p.K = int(a.k), p.E = int(a.n_experts), p.D = int(a.dim), p.I = int(a.inter);
    p.max_mtiles = int(wl.max_mtiles);
    p.limit = a.limit;
    p.n_mtiles = reinterpret_cast<int*>(ws + wl.n_mtiles);
    p.tile_expert = reinterpret_cast<int*>(ws + wl.tile_expert);
    p.tile_row0 = reinterpret_cast<int*>(ws + wl.tile_row0);
    p.tile_rows = reinterpret_cast<int*>(ws + wl.tile_rows);
    p.list = reinterpret_cast<int*>(ws + wl.list);
    p.xg = reinterpret_cast<uint8_t*>(ws + wl.xg);
    p.xs = reinterpret_cast<float*>(ws + wl.xs);
    p.h = reinterpret_cast<__nv_bfloat16*>(ws + wl.h);
    p.hq = reinterpret_cast<uint8_t*>(ws + wl.hq);
    p.hs = reinterpret_cast<float*>(ws + wl.hs);
    p.yp = reinterpret_cast<__nv_bfloat16*>(ws + wl.yp);

    const int64_t picks = a.tokens * a.k;
    DSV4_ASSIGN_OR_RETURN(CUtensorMap map_x, e4m3_kmajor_tensor_map(p.xg, picks, a.dim, Cfg::kABoxRows, Cfg::kBK,
                                                                    op.c_str(), "gathered activations"));
    DSV4_ASSIGN_OR_RETURN(CUtensorMap map_h, e4m3_kmajor_tensor_map(p.hq, picks, a.inter, Cfg::kABoxRows, Cfg::kBK,
                                                                    op.c_str(), "hidden activations"));

    const bool repacked = a.format == MoeWeightFormat::kMXFP4Repacked;
    const bool big = tile == MoePrefillTile::k256 ||
                     (tile == MoePrefillTile::kAuto && picks > int64_t(MoePrefillGemm128::kBM) * a.n_experts);
    p.bm = big ? MoePrefillGemm256::kBM : MoePrefillGemm128::kBM;
    const GemmLaunch gl = big ? gemm_launch<MoePrefillGemm256>(repacked) : gemm_launch<MoePrefillGemm128>(repacked);
    DSV4_CUDA_TRY(gl.attr, "cudaFuncSetAttribute(moe_prefill shared memory)");
    const int64_t sms = current_sm_count();
    const unsigned prep_grid = unsigned((a.tokens + Cfg::kPrepTokens - 1) / Cfg::kPrepTokens);
    moe_prefill_prepare_kernel<<<prep_grid, Cfg::kPrepThreads, 0, stream>>>(p);
    DSV4_RETURN_IF_ERROR(launch_status("moe_prefill_prepare"));
    const unsigned up_grid = unsigned(std::min<int64_t>(sms, wl.max_mtiles * (a.inter / Cfg::kUpRows)));
    gl.gate_up<<<up_grid, Cfg::kThreads, gl.smem, stream>>>(map_x, p);
    DSV4_RETURN_IF_ERROR(launch_status("moe_prefill_gate_up"));
    const int64_t quant_chunks = picks * (a.inter / 32);
    moe_prefill_hidden_quant_kernel<<<unsigned((quant_chunks + Cfg::kQuantThreads - 1) / Cfg::kQuantThreads),
                                      Cfg::kQuantThreads, 0, stream>>>(p);
    DSV4_RETURN_IF_ERROR(launch_status("moe_prefill_hidden_quant"));
    const unsigned down_grid = unsigned(std::min<int64_t>(sms, wl.max_mtiles * (a.dim / Cfg::kBN)));
    gl.down<<<down_grid, Cfg::kThreads, gl.smem, stream>>>(map_h, p);
    DSV4_RETURN_IF_ERROR(launch_status("moe_prefill_down"));
    moe_prefill_combine_kernel<<<unsigned(a.tokens), Cfg::kCombineThreads, 0, stream>>>(p);
    return launch_status("moe_prefill_combine");
}

}  // namespace dsv4::cuda
