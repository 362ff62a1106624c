// Kernels of the kv_finish family (sm_90). Row finishing: one warp per 512- or 128-channel row, the row in
// registers (512: lane L holds chunks L and L+32 of 8 channels; 128: channels 4L..4L+3, the Hadamard layout), so
// norm, RoPE, Hadamard and the block quantisers never leave the warp: the RMS by shuffles, the e4m3 block-64 amax
// inside 8 lanes, the e2m1 block-32 amax inside 8 lanes, cos/sin computed once per lane (lane = frequency) and
// shuffled to the lanes holding the rope channels. Pooling: one thread per (window, channel), coalesced over
// channels. Both memory-bound: the floor is one read and one write of the rows.
#pragma once

#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/common/warp_ops.cuh"
#include "backend/cuda/kernels/kv_store/kv_store.cuh"
#include "backend/cuda/kernels/norm_rope/norm_rope.cuh"

namespace dsv4::cuda {

struct KvFinishConfig {
    static constexpr int kWarps = 4;
    static constexpr int kPoolThreads = 128;
    static constexpr float kE4m3Max = 448.0f, kE4m3AmaxFloor = 1e-4f, kE2m1Max = 6.0f;  // as act_quant
};

enum class FinishSim { kNone, kFp8Nope, kHadamardFp4 };

// A lane's share of what finishing a row needs besides the row itself (kv_row_finish_warp's lane layout: kChunks x
// kW channels from kv_finish_channel): its channels' norm weights, and its RoPE frequency's cos / sin at the row's
// position. Made by kv_finish_prep; a caller that knows the position before the row computes it while the row's
// loads are in flight (the fused decode compressor), taking the weights' round trip and the f64 sincos off the
// finish's chain.
template <int kDim>
struct KvFinishPrep {
    static_assert(kDim == 512 || kDim == 128);
    static constexpr int kChunks = kDim == 512 ? 2 : 1, kW = kDim == 512 ? 8 : 4;
    float norm[kChunks][kW];
    float cs, sn;
};

// First channel of a lane's chunk j: 8-channel chunks L and L+32 of a 512-row, channels 4L..4L+3 of a 128-row.
template <int kDim>
__device__ __forceinline__ int kv_finish_channel(int lane, int j) {
    return kDim == 512 ? 8 * (lane + 32 * j) : 4 * lane;
}

template <int kDim>
__device__ __forceinline__ KvFinishPrep<kDim> kv_finish_prep(const __nv_bfloat16* __restrict__ norm, int64_t pos,
                                                             const backend::RopeFreqs& freqs) {
    using P = KvFinishPrep<kDim>;
    const int lane = threadIdx.x & 31;
    P p;
#pragma unroll
    for (int j = 0; j < P::kChunks; ++j)
#pragma unroll
        for (int i = 0; i < P::kW; ++i) p.norm[j][i] = __bfloat162float(norm[kv_finish_channel<kDim>(lane, j) + i]);
    rope_cos_sin(pos, freqs.f[lane], false, p.cs, p.sn);
    return p;
}

// One 512- or 128-channel row finished by the calling warp (all 32 lanes take part; lane L holds 8-channel chunks L
// and L+32 of a 512-row, channels 4L..4L+3 of a 128-row): y = RMSNorm_norm(x) (also stored to normed_row unless
// null), RoPE at the prep's position on the last 64 channels (lane p holds frequency p's cos / sin), then the
// simulation `sim`. x, normed_row and y are 16-byte aligned rows in global or shared memory; y may alias x.
template <typename ActT, int kDim>
__device__ __forceinline__ void kv_row_finish_warp(const ActT* xr, const KvFinishPrep<kDim>& prep, float eps,
                                                   FinishSim sim, ActT* normed_row, ActT* yr) {
    static_assert(kDim == 512 || kDim == 128);
    constexpr bool kRef = std::is_same_v<ActT, __nv_bfloat16>;
    constexpr int kChunks = KvFinishPrep<kDim>::kChunks, kW = KvFinishPrep<kDim>::kW;  // per lane
    const int lane = threadIdx.x & 31;
    auto channel = [&](int j) { return kv_finish_channel<kDim>(lane, j); };
    float v[kChunks][8];
    double ss = 0;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
        if constexpr (kW == 8) {
            load8(xr + channel(j), v[j]);
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) v[j][i] = to_f32(xr[channel(j) + i]);
        }
#pragma unroll
        for (int i = 0; i < kW; ++i) ss += double(v[j][i]) * double(v[j][i]);
    }
    const float rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(float(warp_sum(ss) / double(kDim)), eps)));
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
#pragma unroll
        for (int i = 0; i < kW; ++i) {
            v[j][i] = __fmul_rn(prep.norm[j][i], __fmul_rn(v[j][i], rs));
            if constexpr (kRef) v[j][i] = round_bf16(v[j][i]);
        }
        if (normed_row) {
            if constexpr (kW == 8)
                store8(normed_row + channel(j), v[j]);
            else
#pragma unroll
                for (int i = 0; i < 4; ++i) normed_row[channel(j) + i] = from_f32<ActT>(v[j][i]);
        }
    }
    // RoPE on channels [kDim-64, kDim): lane p holds frequency p, pairs move by shuffle.
    const float cs = prep.cs, sn = prep.sn;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
        const int ch0 = channel(j);
        const bool in_rope = ch0 >= kDim - 64;
        const int pair0 = in_rope ? (ch0 - (kDim - 64)) / 2 : 0;
#pragma unroll
        for (int p = 0; p < kW / 2; ++p) {
            const float pc = __shfl_sync(0xffffffffu, cs, pair0 + p);
            const float ps = __shfl_sync(0xffffffffu, sn, pair0 + p);
            if (in_rope) {
                rotate_pair(v[j][2 * p], v[j][2 * p + 1], pc, ps);
                if constexpr (kRef)
                    v[j][2 * p] = round_bf16(v[j][2 * p]), v[j][2 * p + 1] = round_bf16(v[j][2 * p + 1]);
            }
        }
    }
    if (kRef && sim == FinishSim::kFp8Nope && kDim == 512) {
        // act_quant block 64 = 8 chunks = 8 aligned lanes; the rope chunks (j = 1, lanes 24..31) form their own
        // group and are left as they are.
#pragma unroll
        for (int j = 0; j < kChunks; ++j) {
            float amax = 0;
#pragma unroll
            for (int i = 0; i < kW; ++i) amax = fmaxf(amax, fabsf(v[j][i]));
            amax = group_max(amax, 8);
            if (channel(j) >= kDim - 64) continue;
            const int e = ue8m0_exponent_for(amax, KvFinishConfig::kE4m3AmaxFloor, KvFinishConfig::kE4m3Max);
            const float s = exp2_int(e), inv = exp2_int(-e);
#pragma unroll
            for (int i = 0; i < kW; ++i) {
                const float q =
                    fminf(fmaxf(__fmul_rn(v[j][i], inv), -KvFinishConfig::kE4m3Max), KvFinishConfig::kE4m3Max);
                v[j][i] = round_bf16(__fmul_rn(e4m3_to_f32(f32_to_e4m3(q)), s));
            }
        }
    }
    if (kRef && sim == FinishSim::kHadamardFp4 && kDim == 128) {
        float h[4] = {v[0][0], v[0][1], v[0][2], v[0][3]};
        hadamard128_warp(h);
        float amax = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            h[i] = round_bf16(h[i]);
            amax = fmaxf(amax, fabsf(h[i]));
        }
        amax = group_max(amax, 8);  // block 32 = 8 lanes x 4
        const int e = ue8m0_exponent_for(amax, __fmul_rn(6.0f, exp2_int(-126)), KvFinishConfig::kE2m1Max);
        const float s = exp2_int(e);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float q =
                fminf(fmaxf(__fmul_rn(h[i], exp2_int(-e)), -KvFinishConfig::kE2m1Max), KvFinishConfig::kE2m1Max);
            v[0][i] = round_bf16(__fmul_rn(e2m1_to_f32(f32_to_e2m1(q)), s));
        }
    }
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
        if constexpr (kW == 8)
            store8(yr + channel(j), v[j]);
        else
#pragma unroll
            for (int i = 0; i < 4; ++i) yr[channel(j) + i] = from_f32<ActT>(v[j][i]);
    }
}

// One warp per row. kDim 512 (sim kNone / kFp8Nope) or 128 (kNone / kHadamardFp4). Position of row r:
// positions ? positions[r] : (first_window + r)·ratio. decode_position (rows = 1): the row is finished only when
// that position closes a window, with first_window = pos / ratio read here and y moved to entry first_window, so
// the host never needs the position (a captured graph replays with the step's position). decode_positions
// (rows = B, one per sequence): row r is finished only when decode_positions[r] closes a window, at RoPE position
// (pos / ratio)·ratio, into y row r (no entry offset: the caller scatters). A negative position never closes.
// pack_pool (kDim 512, or null): the finished row r is also packed into pool row pack_first + r as sm90_kv_pack
// stores it (WindowKvFinishArgs::pool).
template <typename ActT, int kDim>
__global__ void __launch_bounds__(KvFinishConfig::kWarps * 32)
    sm90_kv_row_finish_kernel(const ActT* x, int64_t rows, const __nv_bfloat16* __restrict__ norm, float eps,
                              const int64_t* __restrict__ positions, int64_t first_window, int64_t ratio,
                              const __grid_constant__ backend::RopeFreqs freqs, FinishSim sim,
                              ActT* __restrict__ normed, ActT* y, const int64_t* __restrict__ decode_position,
                              const int64_t* __restrict__ decode_positions, void* __restrict__ pack_pool,
                              int64_t pack_first) {
    pdl_enter();
    static_assert(kDim == 512 || kDim == 128);
    const int64_t r = int64_t(blockIdx.x) * KvFinishConfig::kWarps + (threadIdx.x >> 5);
    if (r >= rows) return;  // whole warps leave together
    if (decode_position) {
        const int64_t dp = *decode_position;
        if (dp % ratio != ratio - 1) return;  // the open window did not close: nothing to finish
        first_window = dp / ratio;
        y += first_window * kDim;
    }
    int64_t pos = 0;  // RoPE position of the row
    if (decode_positions) {
        const int64_t dp = decode_positions[r];
        if (dp % ratio != ratio - 1) return;  // this sequence's window is still open (the whole warp leaves)
        pos = dp / ratio * ratio;
    } else {
        pos = positions ? positions[r] : (first_window + r) * ratio;
    }
    kv_row_finish_warp<ActT, kDim>(x + r * kDim, kv_finish_prep<kDim>(norm, pos, freqs), eps, sim,
                                   normed ? normed + r * kDim : nullptr, y + r * kDim);
    if constexpr (kDim == 512) {
        if (pack_pool) {  // each lane packs the chunks it stored (lane L: chunks L, L + 32), read back from y
            const int lane = threadIdx.x & 31;
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int c = lane + 32 * j;
                if constexpr (std::is_same_v<ActT, __nv_bfloat16>) {
                    const uint4 raw = *reinterpret_cast<const uint4*>(y + r * kDim + 8 * c);
                    kv_pack_ref_chunk(raw, c, static_cast<uint8_t*>(pack_pool) + (pack_first + r) * kKvFp8RowBytes);
                } else {  // kF32 pool rows are the f32 rows
                    const float4* src = reinterpret_cast<const float4*>(y + r * kDim + 8 * c);
                    float4* dst =
                        reinterpret_cast<float4*>(static_cast<float*>(pack_pool) + (pack_first + r) * kDim + 8 * c);
                    dst[0] = src[0];
                    dst[1] = src[1];
                }
            }
        }
    }
}

// Pooled value (f32) of one channel of one window, backend/cpu/compressor.cpp compressor_pool's order of operations:
// a softmax over the window's m rows (kv(t), score(t), t < m) and, with_prev, first over the previous window's m rows
// (prev_kv(t), prev_score(t)), weighting the kv values. The accessors read memory (compressor_pool_channel) or
// registers loaded earlier (the fused decode compressor, kM = m known at compile time: each exp is computed once and
// kept, where a runtime m computes it in the sum pass and again in the weighting pass), with the same values either
// way.
template <int kM, typename PrevKv, typename PrevScore, typename Kv, typename Score>
__device__ __forceinline__ float compressor_pool_values(int m, bool with_prev, PrevKv prev_kv, PrevScore prev_score,
                                                        Kv kv, Score score) {
    if constexpr (kM > 0) m = kM;
    float ep[kM > 0 ? kM : 1], ec[kM > 0 ? kM : 1];  // kM > 0: the exps of the previous and current rows
    float mx = -INFINITY;
    if (with_prev)
        for (int t = 0; t < m; ++t) mx = fmaxf(mx, prev_score(t));
    for (int t = 0; t < m; ++t) mx = fmaxf(mx, score(t));
    float sum = 0;
    if (with_prev)
        for (int t = 0; t < m; ++t) {
            const float e = exp_f32(__fsub_rn(prev_score(t), mx));
            if constexpr (kM > 0) ep[t] = e;
            sum = __fadd_rn(sum, e);
        }
    for (int t = 0; t < m; ++t) {
        const float e = exp_f32(__fsub_rn(score(t), mx));
        if constexpr (kM > 0) ec[t] = e;
        sum = __fadd_rn(sum, e);
    }
    float acc = 0;
    if (with_prev)
        for (int t = 0; t < m; ++t) {
            const float e = kM > 0 ? ep[kM > 0 ? t : 0] : exp_f32(__fsub_rn(prev_score(t), mx));
            acc = __fadd_rn(acc, __fmul_rn(prev_kv(t), __fdiv_rn(e, sum)));
        }
    for (int t = 0; t < m; ++t) {
        const float e = kM > 0 ? ec[kM > 0 ? t : 0] : exp_f32(__fsub_rn(score(t), mx));
        acc = __fadd_rn(acc, __fmul_rn(kv(t), __fdiv_rn(e, sum)));
    }
    return acc;
}

// compressor_pool_values over rows of `width` f32 in memory: column `cur` of the window's rows at kw / sw, column ch
// of the previous window's at pkv / psc. Two passes over the (L1/L2-resident) candidates instead of a local array.
__device__ __forceinline__ float compressor_pool_channel(const float* kw, const float* sw, const float* pkv,
                                                         const float* psc, int m, int width, int ch, int cur,
                                                         bool with_prev) {
    return compressor_pool_values<0>(
        m, with_prev, [&](int t) { return pkv[int64_t(t) * width + ch]; },
        [&](int t) { return psc[int64_t(t) * width + ch]; }, [&](int t) { return kw[int64_t(t) * width + cur]; },
        [&](int t) { return sw[int64_t(t) * width + cur]; });
}

// One thread per (window, channel); backend/cpu/compressor.cpp compressor_pool's order of operations. Host-driven
// (decode_positions null): window w's rows follow window w-1's, window 0's previous window is prev_kv. Decode
// (decode_positions set, one window per sequence): window w is pooled only when decode_positions[w] closes it; its
// rows are at kv + slots[w]·slot_stride and its previous window's at prev_kv + slots[w]·slot_stride (slots null:
// slot 0, the single-sequence form), the previous window used iff overlap && pos / m > 0.
template <typename ActT>
__global__ void __launch_bounds__(KvFinishConfig::kPoolThreads)
    sm90_compressor_pool_kernel(const float* __restrict__ kv, const float* __restrict__ score,
                                const float* __restrict__ prev_kv, const float* __restrict__ prev_score,
                                int64_t n_windows, int m, int c, bool overlap, ActT* __restrict__ out,
                                const int64_t* __restrict__ decode_positions,
                                const int32_t* __restrict__ slots, int64_t slot_stride) {
    pdl_enter();
    const int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (g >= n_windows * c) return;
    const int64_t w = g / c;
    const int ch = int(g % c);
    const int width = overlap ? 2 * c : c;
    const float *kw, *sw, *pkv, *psc;
    bool first_of_sequence = false;  // decode: the closing window is the sequence's first (no previous window)
    if (decode_positions) {
        const int64_t dp = decode_positions[w];
        if (dp % m != m - 1) return;  // the open window did not close: nothing to pool (slots[w] never read)
        first_of_sequence = dp / m == 0;
        const int64_t off = slots ? int64_t(slots[w]) * slot_stride : 0;
        kw = kv + off;
        sw = score + off;
        pkv = prev_kv ? prev_kv + off : nullptr;
        psc = prev_score ? prev_score + off : nullptr;
    } else {
        kw = kv + w * m * width;
        sw = score + w * m * width;
        pkv = w > 0 ? kw - int64_t(m) * width : prev_kv;
        psc = w > 0 ? sw - int64_t(m) * width : prev_score;
    }
    const bool with_prev = overlap && pkv != nullptr && !first_of_sequence;
    const int cur = overlap ? c + ch : ch;
    const float acc = compressor_pool_channel(kw, sw, pkv, psc, m, width, ch, cur, with_prev);
    out[w * c + ch] = from_f32<ActT>(acc);
}

}  // namespace dsv4::cuda
