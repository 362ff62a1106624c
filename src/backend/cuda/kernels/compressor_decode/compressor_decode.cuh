// Kernel of the compressor_decode family (sm_90): one block per row (a session's new token), kDim threads (512 for
// main K=V entries, 128 for indexer keys). Phases of a row's block, each the device code of one of the six kernels
// it replaces, with the same intermediate roundings so that every byte it writes equals theirs:
//   1. append   all threads copy the token's f32 kv/score rows into the open window row pos % ratio (16-byte words);
//               the block leaves here unless the window closes (the condition is the same for all its threads)
//   2. pool     after a barrier (the appended row visible block-wide), thread ch pools channel ch with
//               compressor_pool_channel (kv_finish.cuh) into a shared-memory row of the activation type (bf16 in
//               kReference: the pooled tensor the six-launch sequence writes)
//   3. finish   after a barrier, warp 0 finishes that row in place with kv_row_finish_warp (kv_finish.cuh; RoPE at
//               (pos / ratio)·ratio) and packs it with kv_pack_ref_chunk / key_pack_ref_chunk (kv_store.cuh; kF32:
//               the row copied) into pool row entry_base + 64·table[slot·P + j/64] + j%64
//   4. roll     meanwhile warps 1.. copy the open window to the previous one (CSA); the pool has finished reading
//               the previous window at the barrier before phase 3
// The open and previous windows are read and written through the same pointers in one kernel, so none of their
// loads may take the non-coherent path: they are plain (non-restrict) pointers here.
//
// Bounds: at decode batch sizes the block's dependent chain (positions → slot → append → window loads → pool →
// f64 RMS and sincos → pack stores) and the one launch; bytes (≤ 112 KB per closing CSA main row, mostly the roll)
// only start to matter at B ≈ 64. Not yet measured (prediction: docs/kernels/cuda-backend.md, "Fused decode
// compressor").
#pragma once

#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/kernels/kv_finish/kv_finish.cuh"
#include "backend/cuda/kernels/kv_store/kv_store.cuh"
#include "backend/cuda/common/pdl.cuh"

namespace dsv4::cuda {

struct CompressorDecodeConfig {
    static constexpr int kMainThreads = 512;  // one thread per channel of a 512-d K=V entry
    static constexpr int kKeyThreads = 128;   // one thread per channel of a 128-d indexer key
};

// Kernel arguments (raw device pointers; the launcher validates them).
struct CompressorDecodeParams {
    const int64_t* positions;      // [B]
    const int32_t* slots;          // [B]
    const float* kv;               // [B, width]
    const float* score;            // [B, width]
    float* open_kv;                // [sessions, ratio, width]
    float* open_score;
    float* prev_kv;                // [sessions, ratio, width] or null (no overlap)
    float* prev_score;
    int ratio;
    bool overlap;
    const __nv_bfloat16* norm;     // [kDim]
    backend::RopeFreqs freqs;
    float eps;
    FinishSim sim;
    int64_t entry_base;
    const int32_t* table;          // [sessions, pages_per_session]
    int64_t pages_per_session;
    uint8_t* pool;                 // pool rows of kv_row_bytes / key_row_bytes
    bool independent_of_previous;  // CompressorDecodeArgs::independent_of_previous
};

// dst[i] = src[i] for i < n4 16-byte words, thread t of `threads` taking words t, t + threads, ...
__device__ __forceinline__ void copy_words(float4* dst, const float4* src, int n4, int t, int threads) {
    for (int i = t; i < n4; i += threads) dst[i] = src[i];
}

// grid: B blocks; block: kDim threads. ActT: __nv_bfloat16 (kReference) or float (kF32); kDim 512 or 128. The
// minimum of one block per SM in the launch bounds lets ptxas keep the unrolled f64 exp polynomials of the m = 4
// pool in registers (67 registers, no spills; with the default heuristic it spilled 16–32 bytes at kDim 128).
template <typename ActT, int kDim>
__global__ void __launch_bounds__(kDim, 1) sm90_compressor_decode_fused_kernel(const CompressorDecodeParams a) {
    pdl_enter(!a.independent_of_previous);
    const PdlWaitAtExit wait_at_exit{a.independent_of_previous};  // every return below waits (common/pdl.cuh)
    static_assert(kDim == CompressorDecodeConfig::kMainThreads || kDim == CompressorDecodeConfig::kKeyThreads);
    constexpr bool kRef = std::is_same_v<ActT, __nv_bfloat16>;
    __shared__ __align__(16) ActT row[kDim];  // pooled, then finished in place
    const int64_t r = blockIdx.x;
    const int tid = threadIdx.x;
    const int64_t pos = a.positions[r];
    if (pos < 0) return;  // padding row: the whole block leaves
    const int m = a.ratio;
    const int width = a.overlap ? 2 * kDim : kDim;
    const int32_t slot = a.slots[r];
    const int64_t slot_off = int64_t(slot) * m * width;  // f32 elements, [sessions, m, width]
    float* okv = a.open_kv + slot_off;
    float* osc = a.open_score + slot_off;
    const int t = int(pos % m);

    // 1. append (sm90_compressor_append)
    copy_words(reinterpret_cast<float4*>(okv + int64_t(t) * width), reinterpret_cast<const float4*>(a.kv + r * width),
               width / 4, tid, kDim);
    copy_words(reinterpret_cast<float4*>(osc + int64_t(t) * width),
               reinterpret_cast<const float4*>(a.score + r * width), width / 4, tid, kDim);
    if (t != m - 1) return;  // the window stays open (uniform over the block)
    __syncthreads();         // the appended row is visible to every thread of the block

    // 2. pool (sm90_compressor_pool, batched decode): the previous window iff overlap and not the first window
    {
        const int ch = tid;
        const bool with_prev = a.overlap && pos / m > 0;
        const int cur = a.overlap ? kDim + ch : ch;
        const float* pkv = a.overlap ? a.prev_kv + slot_off : nullptr;
        const float* psc = a.overlap ? a.prev_score + slot_off : nullptr;
        // CSA's m = 4 as a constant lets the loops unroll (the order of operations is the same)
        const float acc = m == 4 ? compressor_pool_channel(okv, osc, pkv, psc, 4, width, ch, cur, with_prev)
                                 : compressor_pool_channel(okv, osc, pkv, psc, m, width, ch, cur, with_prev);
        row[ch] = from_f32<ActT>(acc);
    }
    __syncthreads();  // the pooled row is complete and the previous window no longer read

    const int warp = tid >> 5, lane = tid & 31;
    if (warp != 0) {
        // 4. roll (sm90_compressor_roll): prev[slot] = open[slot]
        if (a.overlap) {
            const int n4 = m * width / 4;
            copy_words(reinterpret_cast<float4*>(a.prev_kv + slot_off), reinterpret_cast<const float4*>(okv), n4,
                       tid - 32, kDim - 32);
            copy_words(reinterpret_cast<float4*>(a.prev_score + slot_off), reinterpret_cast<const float4*>(osc), n4,
                       tid - 32, kDim - 32);
        }
        return;
    }
    // 3. finish (sm90_compressor_finish, batched decode: in place, RoPE at the window's first position), then the
    // entry's pool row (sm90_entry_rows) and the pack (sm90_kv_pack / sm90_key_pack)
    const int64_t j = pos / m;
    kv_row_finish_warp<ActT, kDim>(row, a.norm, a.eps, j * m, a.freqs, a.sim, nullptr, row);
    __syncwarp();  // every lane's finished channels visible to the lanes that pack them
    const int64_t dst = a.entry_base + 64 * int64_t(a.table[int64_t(slot) * a.pages_per_session + j / 64]) + j % 64;
    if constexpr (kRef) {
        if constexpr (kDim == KvStoreConfig::kKvDim) {
            uint8_t* out = a.pool + dst * kKvFp8RowBytes;
#pragma unroll
            for (int h = 0; h < 2; ++h) {  // chunk lane + 32h: a 64-channel block is 8 aligned lanes
                const int c = lane + 32 * h;
                kv_pack_ref_chunk(*reinterpret_cast<const uint4*>(row + 8 * c), c, out);
            }
        } else {
            // 16 chunks on lanes 0..15; lanes 16..31 join the shuffles with a skipped row
            const bool live = lane < KvStoreConfig::kKeyDim / 8;
            const uint4 raw = live ? *reinterpret_cast<const uint4*>(row + 8 * lane) : make_uint4(0, 0, 0, 0);
            key_pack_ref_chunk(raw, lane, live ? a.pool + dst * kKeyFp4RowBytes : nullptr);
        }
    } else {
        copy_words(reinterpret_cast<float4*>(a.pool + dst * (kDim * 4)), reinterpret_cast<const float4*>(row),
                   kDim / 4, lane, 32);
    }
}

}  // namespace dsv4::cuda
