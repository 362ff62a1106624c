// Staged weight loads for the decode expert GEMMs (format tag Mxfp4StagedWeights, MoeDecodeArgs::staged_loads): the
// repacked MXFP4 stage of expert_rows_gemm (moe.cuh) with the same conversion, MMAs and sums — the same output bits —
// but each warp's weight rows reach it through a small shared-memory ring of its own instead of straight into
// registers.
//
// Why: the register kernels issue a K step's 16-byte loads, wait for them, convert and multiply; the next step's
// loads cannot be issued earlier (no registers are free at 128 per thread, 2 blocks of 8 warps per SM), so each warp
// waits one full DRAM latency per step and the SM runs at ~41 % issue (docs/kernels/moe.md). Here the warp's lanes
// copy the step's rows (16 rows x MATS matrices; a row's 256 K values of the step are 128 contiguous bytes) into a
// slot with 16-byte `cp.async`s, S steps ahead, and each lane's `cp.async.mbarrier.arrive` counts on the slot's
// mbarrier (32 arrivals a phase); a lane reads its bytes back with the global loads' 16-byte pattern just before they
// are used, so the weights occupy registers only during the step's arithmetic. (One 128-byte `cp.async.bulk` per row
// was the first version: its operands must be warp-uniform, so 32 per-lane rows compiled to a 32-iteration loop of
// ~9 instructions per step.) The rows' scale bytes of the step (8 per row) travel in the same slot, one 8-byte
// `cp.async` per row; the activations are loaded as before (L2).
//
// Slot layout: per matrix 16 rows of 128 bytes, row r at 128·r + 64·((r + 1) / 2) (2,560 bytes: a quarter warp's
// 16-byte reads — rows g = 2p, 2p + 1, chunks t = 0..3 of one 64-byte half — land on 128 distinct bank bytes,
// because rows 2p and 2p + 1 start 64 bytes apart modulo 128), then the 16 rows' 8 scale bytes (128). Ring per warp:
// S slots of MATS · 2,688 bytes and S mbarriers; gate/up (MATS 2) S = 2, down (MATS 1) S = 4: 86,016 bytes per
// 8-warp block either way, two blocks per SM.
#pragma once

#include "backend/cuda/common/cp_async.cuh"
#include "backend/cuda/common/mbarrier.cuh"
#include "backend/cuda/kernels/moe/moe.cuh"

namespace dsv4::cuda {

struct MoeStagedConfig {
    static constexpr int kRowBytes = MoeDecodeConfig::kStepK / 2;            // one row's bytes of one K step (128)
    static constexpr int kRows = 16;                                         // a warp's rows
    static constexpr int kScaleOffset = kRows * kRowBytes + kRows / 2 * 64;  // the rows (padded), then the scales
    static constexpr int kMatBytes = kScaleOffset + kRows * 8;
    static constexpr int slots(int mats) { return mats == 2 ? 2 : 4; }
    static constexpr int slot_bytes(int mats) { return mats * kMatBytes; }
    // up to 4 mbarriers and the warp's count of steps staged so far (slot and phase of the next one), padded so
    // that the next warp's ring stays 16-byte aligned
    static constexpr int kBarBytes = 48;
    static constexpr int warp_bytes(int mats) { return slots(mats) * slot_bytes(mats) + kBarBytes; }
    // dynamic shared memory of a block of `warps` warps (plus the slack that aligns the rings to 128 bytes)
    static constexpr size_t block_bytes(int mats, int warps) { return size_t(warps) * warp_bytes(mats) + 128; }
};
static_assert(MoeStagedConfig::kMatBytes == 2688 && MoeStagedConfig::kMatBytes % 16 == 0 &&
              MoeStagedConfig::slots(1) * 8 + 4 <= MoeStagedConfig::kBarBytes &&
              MoeStagedConfig::slots(2) <= MoeStagedConfig::slots(1));

// Every thread of the block, once before its first expert_rows_gemm_staged (the caller synchronises the block after
// it): lanes 0 .. S-1 of each warp initialise the warp's mbarriers (one arrival per lane a phase), lane 0 zeroes its
// step count.
__device__ __forceinline__ void staged_rings_init(uint8_t* stage, int mats) {
    const int lane = int(threadIdx.x & 31), warp = int(threadIdx.x >> 5);
    uint8_t* ring = stage + size_t(warp) * MoeStagedConfig::warp_bytes(mats);
    auto* bars = reinterpret_cast<uint64_t*>(ring + MoeStagedConfig::slots(mats) * MoeStagedConfig::slot_bytes(mats));
    if (lane < MoeStagedConfig::slots(mats)) mbar_init(&bars[lane], 32);
    if (lane == 0) *reinterpret_cast<uint32_t*>(bars + 4) = 0;
    mbar_init_fence();
}

// Where row r (0..15) of a slot's matrix starts (header comment).
__device__ __forceinline__ int staged_row_offset(int r) { return 128 * r + 64 * ((r + 1) >> 1); }

__device__ __forceinline__ uint4 lds16(const uint8_t* p) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(smem_u32(p)));
    return v;
}

// expert_rows_gemm (moe.cuh) for Mxfp4StagedWeights: the same contract (warps = RT row tiles x KS K splits, y in the
// mma.sync fragment, K splits reduced through `red`) and the same arithmetic as its repacked MXFP4 stage. src is
// GlobalWeights with e4m3_tables and stage (the block's rings, MoeStagedConfig::block_bytes(MATS, warps), set up by
// staged_rings_init). Every copy a call issues is waited for in the same call, so calls may follow each other.
template <int MATS, int RT, int KS, class Src>
__device__ __forceinline__ void expert_rows_gemm_staged(const Src& src, const uint8_t* const (&w)[MATS],
                                                        const uint8_t* const (&ws)[MATS], int K, int row0,
                                                        const __half* act, const float* act_s,
                                                        const int (&act_row)[MoeDecodeConfig::kTokTile], int ntile,
                                                        float* red, float (&y)[MATS][4]) {
    using SCfg = MoeStagedConfig;
    constexpr int S = SCfg::slots(MATS), kSlot = SCfg::slot_bytes(MATS);
    const int lane = src.tid() & 31, warp = src.tid() >> 5, g = lane >> 2, t = lane & 3;
    const int rt = warp % RT, ks = warp / RT;
    const int row_w = row0 + 16 * rt;  // the warp's first row
    const size_t row_bytes = size_t(K) / 2, srow_bytes = size_t(K) / 32;
    const int nsteps = K / MoeDecodeConfig::kStepK, nq = K / 128;
    const int nj = ks < nsteps ? (nsteps - ks + KS - 1) / KS : 0;  // this warp's steps ks, ks + KS, ...
    const bool tok_b = g < ntile;
    const __half* arow = act + size_t(tok_b ? act_row[g] : 0) * size_t(K);
    const int c0 = 2 * t, c1 = 2 * t + 1;
    const float* srow0 = act_s + size_t(c0 < ntile ? act_row[c0] : 0) * size_t(nq);
    const float* srow1 = act_s + size_t(c1 < ntile ? act_row[c1] : 0) * size_t(nq);
    uint8_t* ring = src.stage + size_t(warp) * SCfg::warp_bytes(MATS);
    auto* bars = reinterpret_cast<uint64_t*>(ring + S * kSlot);
    uint32_t* staged = reinterpret_cast<uint32_t*>(bars + 4);  // steps this warp staged in earlier calls
    const uint32_t u0 = *staged;                               // (staged_rings_init; written by lane 0 below)
#pragma unroll
    for (int m = 0; m < MATS; ++m) y[m][0] = y[m][1] = y[m][2] = y[m][3] = 0.0f;

    // the warp's u-th staged step (counted over calls) uses slot u % S in phase u / S
    const auto slot_of = [&](int j) { return int((u0 + uint32_t(j)) % S); };
    const auto parity_of = [&](int j) { return ((u0 + uint32_t(j)) / S) & 1u; };
    // step j of this call into its slot: the 16·MATS rows' 8 chunks of 16 bytes, C = 4·MATS chunks per lane (lane l:
    // row pair l / (8 / C), chunks from (l % (8 / C))·C). The slot was last read (by every lane) before the
    // __syncwarp that precedes every issue.
    constexpr int C = 4 * MATS, kLanesPerRow = 8 / C;
    const int pair = lane / kLanesPerRow, m_c = pair / SCfg::kRows, r_c = pair % SCfg::kRows;
    const int c_first = (lane % kLanesPerRow) * C;
    const uint8_t* w_c = w[0];
    const uint8_t* ws_c = ws[0];
    if constexpr (MATS == 2) {  // no runtime index into w, ws: they would live in local memory
        w_c = m_c ? w[1] : w[0];
        ws_c = m_c ? ws[1] : ws[0];
    }
    ws_c += size_t(row_w + r_c) * srow_bytes;
    const uint8_t* src_c = w_c + size_t(row_w + r_c) * row_bytes + 16 * c_first;
    const int dst_c = m_c * SCfg::kMatBytes + staged_row_offset(r_c) + 16 * c_first;
    auto issue = [&](int j) {
        const int slot = slot_of(j), step = ks + KS * j;
        uint8_t* dst = ring + slot * kSlot + dst_c;
        const uint8_t* src_row = src_c + size_t(step) * SCfg::kRowBytes;
#pragma unroll
        for (int c = 0; c < C; ++c) cp_async16(dst + 16 * c, src_row + 16 * c);
        if (c_first == 0)  // the row's scale bytes of the step
            cp_async8_zfill(ring + slot * kSlot + m_c * SCfg::kMatBytes + SCfg::kScaleOffset + 8 * r_c,
                            ws_c + size_t(step) * 8, true);
        cp_async_mbar_arrive_noinc(&bars[slot]);
    };
    for (int j = 0; j < S && j < nj; ++j) issue(j);
    const int lo_off = staged_row_offset(g) + 16 * t, hi_off = staged_row_offset(g + 8) + 16 * t;
    for (int j = 0; j < nj; ++j) {
        const int step = ks + KS * j, slot = slot_of(j);
        uint4 av[2][4];
        float sa[2][2];
        load_step_activations<Src>(arow, srow0, srow1, step, t, tok_b, c0 < ntile, c1 < ntile, av, sa);
        mbar_wait(&bars[slot], parity_of(j));
        uint4 wv[MATS][2][2];  // [matrix][row g, g+8][128-block q]: the register stage's layout
        uint2 sv[MATS][2];     // the scale words of rows g, g+8
        const uint8_t* s = ring + slot * kSlot;
#pragma unroll
        for (int m = 0; m < MATS; ++m) {
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                wv[m][0][q] = lds16(s + m * SCfg::kMatBytes + lo_off + 64 * q);
                wv[m][1][q] = lds16(s + m * SCfg::kMatBytes + hi_off + 64 * q);
            }
            sv[m][0] = *reinterpret_cast<const uint2*>(s + m * SCfg::kMatBytes + SCfg::kScaleOffset + 8 * g);
            sv[m][1] = *reinterpret_cast<const uint2*>(s + m * SCfg::kMatBytes + SCfg::kScaleOffset + 8 * (g + 8));
        }
        __syncwarp();  // every lane has read the slot: it takes step j + S
        if (j + S < nj) issue(j + S);
#pragma unroll
        for (int q = 0; q < 2; ++q) {
#pragma unroll
            for (int m = 0; m < MATS; ++m) {
                const uint32_t s_lo = q ? sv[m][0].y : sv[m][0].x, s_hi = q ? sv[m][1].y : sv[m][1].x;
                block128_mma_repacked(wv[m][0][q], wv[m][1][q], s_lo, s_hi, t, src.e4m3_tables, av[q], sa[q][0],
                                      sa[q][1], y[m]);
            }
        }
    }
    __syncwarp();  // every lane has read the count
    if (lane == 0) *staged = u0 + uint32_t(nj);
    __syncwarp();
    reduce_k_splits<MATS, RT, KS>(src, red, y);
}

}  // namespace dsv4::cuda
