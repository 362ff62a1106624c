// Kernel of the compressor_decode family (sm_90): one block per row (a session's new token), kDim threads (512 for
// main K=V entries, 128 for indexer keys). Phases of a row's block, each the device code of one of the six kernels
// it replaces, with the same intermediate roundings so that every byte it writes equals theirs:
//   1. append   all threads copy the token's f32 kv/score rows into the open window row pos % ratio (16-byte words);
//               the block leaves here unless the window closes (the condition is the same for all its threads)
//   2. pool     thread ch pools channel ch with compressor_pool_values (kv_finish.cuh) into a shared-memory row of
//               the activation type (bf16 in kReference: the pooled tensor the six-launch sequence writes). CSA
//               (ratio 4): every input is loaded into registers before the append, the closing row from the
//               token's projection itself, so positions → one round trip → pool; other ratios (HCA's 128 rows) read
//               the window after a barrier that makes the appended row visible
//   3. finish   after a barrier, warp 0 finishes that row in place with kv_row_finish_warp (kv_finish.cuh; RoPE at
//               (pos / ratio)·ratio) and packs it with kv_pack_ref_chunk / key_pack_ref_chunk (kv_store.cuh; kF32:
//               the row copied) into pool row entry_base + 64·table[slot·P + j/64] + j%64
//   4. roll     meanwhile warps 1.. copy the open window to the previous one (CSA); the pool has finished reading
//               the previous window at the barrier before phase 3
// The open and previous windows are read and written through the same pointers in one kernel, so none of their
// loads may take the non-coherent path: they are plain (non-restrict) pointers here.
//
// Bounds: at decode batch sizes the block's dependent chain (position and slot → window and projection loads →
// pool → f64 RMS and sincos → pack stores) and the one launch; bytes (≤ 112 KB per closing CSA main row, mostly the
// roll) only start to matter at B ≈ 64 (docs/kernels/attention.md, "Fused compressor").
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
    const void* ape;               // [ratio, width] f32 or bf16, or null (CompressorDecodeArgs::ape)
    bool ape_bf16;
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

// dst[i] = src[i] for i < n4 16-byte words, thread t of `threads` taking words t, t + threads, ... Unrolled 4 times,
// not ptxas' 16 with remainder copies: the kernel is short and runs once per launch on a cold instruction cache, where
// every instruction line costs a fetch (ncu: the finishing warp stalled mostly on no_inst).
__device__ __forceinline__ void copy_words(float4* dst, const float4* src, int n4, int t, int threads) {
#pragma unroll 4
    for (int i = t; i < n4; i += threads) dst[i] = src[i];
}

// Position-embedding bias of the score row: element c of ape row t (f32 or bf16 weights).
__device__ __forceinline__ float ape_at(const void* ape, bool bf16, int64_t i) {
    return bf16 ? to_f32(static_cast<const __nv_bfloat16*>(ape)[i]) : static_cast<const float*>(ape)[i];
}

// Words of the rows 0..2 of a CSA window (ratio 4, overlap: 2·kDim channels) each roll thread (warps 1.., kDim - 32
// threads) holds from the pool's round trip to its stores: 2 for both kDims.
template <int kDim>
inline constexpr int kRollWords = (3 * (kDim / 2) + (kDim - 32) - 1) / (kDim - 32);

// grid: B blocks; block: kDim threads. ActT: __nv_bfloat16 (kReference) or float (kF32); kDim 512 or 128. The
// minimum of one block per SM in the launch bounds lets ptxas keep the unrolled f64 exp polynomials of the m = 4
// pool in registers (67 registers, no spills; with the default heuristic it spilled 16–32 bytes at kDim 128).
// Latency at batch 1 is the block's chain of round trips, so every load is issued as early as its address is known:
// the token's projection words with the position (they need neither position nor slot); the window, the page, the
// finish's norm weights and RoPE cos / sin (warp 0) and the roll's rows (warps 1..) in one round trip after it.
template <typename ActT, int kDim>
__global__ void __launch_bounds__(kDim, 1)
    sm90_compressor_decode_fused_kernel(const __grid_constant__ CompressorDecodeParams a) {
    pdl_enter(!a.independent_of_previous);
    const PdlWaitAtExit wait_at_exit{a.independent_of_previous};  // every return below waits (common/pdl.cuh)
    static_assert(kDim == CompressorDecodeConfig::kMainThreads || kDim == CompressorDecodeConfig::kKeyThreads);
    constexpr bool kRef = std::is_same_v<ActT, __nv_bfloat16>;
    __shared__ __align__(16) ActT row[kDim];  // pooled, then finished in place
    const int64_t r = blockIdx.x;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int m = a.ratio;
    const int width = a.overlap ? 2 * kDim : kDim;
    const int n4 = width / 4;  // 16-byte words of a window row: kDim / 2 or kDim / 4, at most one per thread
    // the token's projection words (thread tid < n4 holds word tid), loaded with the position and the slot
    const bool has_word = tid < n4;
    float4 tok_kv = make_float4(0, 0, 0, 0), tok_sc = tok_kv;
    if (has_word) {
        tok_kv = reinterpret_cast<const float4*>(a.kv + r * width)[tid];
        tok_sc = reinterpret_cast<const float4*>(a.score + r * width)[tid];
    }
    const int64_t pos = a.positions[r];
    const int32_t slot = a.slots[r];  // issued with the position: independent loads
    if (pos < 0) return;              // padding row: the whole block leaves
    const int64_t slot_off = int64_t(slot) * m * width;  // f32 elements, [sessions, m, width]
    float* okv = a.open_kv + slot_off;
    float* osc = a.open_score + slot_off;
    const int t = int(pos % m);
    const bool closes = t == m - 1;  // uniform over the block
    // the token's score (+ its ape row, where the projection left it out: sm90_add_ape)
    const void* ape_row =
        a.ape ? static_cast<const uint8_t*>(a.ape) + int64_t(t) * width * (a.ape_bf16 ? 2 : 4) : nullptr;
    if (has_word && ape_row) {
        tok_sc.x = __fadd_rn(tok_sc.x, ape_at(ape_row, a.ape_bf16, 4 * tid));
        tok_sc.y = __fadd_rn(tok_sc.y, ape_at(ape_row, a.ape_bf16, 4 * tid + 1));
        tok_sc.z = __fadd_rn(tok_sc.z, ape_at(ape_row, a.ape_bf16, 4 * tid + 2));
        tok_sc.w = __fadd_rn(tok_sc.w, ape_at(ape_row, a.ape_bf16, 4 * tid + 3));
    }
    const auto token_score = [&](int c) {
        const float v = a.score[r * width + c];
        return ape_row ? __fadd_rn(v, ape_at(ape_row, a.ape_bf16, c)) : v;
    };
    // sm90_compressor_append: the token's words into row t of the open window (and, below, of the previous one)
    const auto store_token = [&](float* kv_rows, float* score_rows, int row_t) {
        if (!has_word) return;
        reinterpret_cast<float4*>(kv_rows + int64_t(row_t) * width)[tid] = tok_kv;
        reinterpret_cast<float4*>(score_rows + int64_t(row_t) * width)[tid] = tok_sc;
    };

    // 2. pool (sm90_compressor_pool, batched decode): the previous window iff overlap and not the first window
    const int ch = tid;
    const bool with_prev = a.overlap && pos / m > 0;
    const int cur = a.overlap ? kDim + ch : ch;
    const float* pkv = a.overlap ? a.prev_kv + slot_off : nullptr;
    const float* psc = a.overlap ? a.prev_score + slot_off : nullptr;
    const int64_t j = pos / m;  // the closing window's entry
    // warp 0 packs the entry: its pool page, loaded with the first loads of a closing step
    const int32_t page = closes && warp == 0 ? a.table[int64_t(slot) * a.pages_per_session + j / 64] : 0;
    KvFinishPrep<kDim> prep;  // warp 0's (the finish's norm weights and RoPE cos / sin at the window's start)
    const bool roll4 = a.overlap && m == 4;  // CSA: the roll's rows are loaded in the pool's round trip
    float4 roll_kv[kRollWords<kDim>], roll_sc[kRollWords<kDim>];
    float pooled;
    if (m == 4) {
        // CSA: every pool input is loaded in one round trip after the position: the previous window and rows 0..2
        // of the open one (earlier steps wrote them), row 3 straight from the token's projection (the append writes
        // the same values there), so the pool needs no barrier after the append and no reload
        if (!closes) {
            store_token(okv, osc, t);
            return;
        }
        float pk[4], ps[4], ok[4], os[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            pk[u] = with_prev ? pkv[int64_t(u) * width + ch] : 0.0f;
            ps[u] = with_prev ? psc[int64_t(u) * width + ch] : 0.0f;
            ok[u] = u < 3 ? okv[int64_t(u) * width + cur] : a.kv[r * width + cur];
            os[u] = u < 3 ? osc[int64_t(u) * width + cur] : token_score(cur);
        }
        if (warp == 0) {
            prep = kv_finish_prep<kDim>(a.norm, j * m, a.freqs);
        } else if (roll4) {  // prev rows 0..2 = open rows 0..2 after this step (row 3: the token's words)
#pragma unroll
            for (int k = 0; k < kRollWords<kDim>; ++k) {
                const int w = tid - 32 + k * (kDim - 32);
                if (w < 3 * n4) {
                    roll_kv[k] = reinterpret_cast<const float4*>(okv)[w];
                    roll_sc[k] = reinterpret_cast<const float4*>(osc)[w];
                }
            }
        }
        store_token(okv, osc, t);
        pooled = compressor_pool_values<4>(
            4, with_prev, [&](int u) { return pk[u]; }, [&](int u) { return ps[u]; }, [&](int u) { return ok[u]; },
            [&](int u) { return os[u]; });
    } else {
        store_token(okv, osc, t);
        if (!closes) return;
        if (warp == 0) prep = kv_finish_prep<kDim>(a.norm, j * m, a.freqs);
        __syncthreads();  // the appended row is visible to every thread of the block
        pooled = compressor_pool_channel(okv, osc, pkv, psc, m, width, ch, cur, with_prev);
    }
    row[ch] = from_f32<ActT>(pooled);
    __syncthreads();  // the pooled row is complete, the previous window no longer read, the appended rows visible

    // 4. roll (sm90_compressor_roll): prev[slot] = open[slot]; CSA from the words loaded above
    if (roll4) store_token(a.prev_kv + slot_off, a.prev_score + slot_off, 3);
    if (warp != 0) {
        if (roll4) {
#pragma unroll
            for (int k = 0; k < kRollWords<kDim>; ++k) {
                const int w = tid - 32 + k * (kDim - 32);
                if (w < 3 * n4) {
                    reinterpret_cast<float4*>(a.prev_kv + slot_off)[w] = roll_kv[k];
                    reinterpret_cast<float4*>(a.prev_score + slot_off)[w] = roll_sc[k];
                }
            }
        } else if (a.overlap) {
            const int words = m * n4;
            copy_words(reinterpret_cast<float4*>(a.prev_kv + slot_off), reinterpret_cast<const float4*>(okv), words,
                       tid - 32, kDim - 32);
            copy_words(reinterpret_cast<float4*>(a.prev_score + slot_off), reinterpret_cast<const float4*>(osc), words,
                       tid - 32, kDim - 32);
        }
        return;
    }
    // 3. finish (sm90_compressor_finish, batched decode: in place, RoPE at the window's first position), then the
    // entry's pool row (sm90_entry_rows) and the pack (sm90_kv_pack / sm90_key_pack)
    kv_row_finish_warp<ActT, kDim>(row, prep, a.eps, a.sim, nullptr, row);
    __syncwarp();  // every lane's finished channels visible to the lanes that pack them
    const int64_t dst = a.entry_base + 64 * int64_t(page) + j % 64;
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
