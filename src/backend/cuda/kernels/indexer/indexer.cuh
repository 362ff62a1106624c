// Kernels of the indexer family (sm_90).
//
// Scores: block = one token x 64 keys, 4 warps. kReference: q [IH, 128] and the key tile in shared memory (rows
// padded to 136 bf16 so the ldmatrix rows fall on distinct banks; q rows past IH are zero, so a head count that is
// not a multiple of 16 runs its last MMA tile on padding rows that are never summed), warp w computes heads
// 16w..16w+15 x 64 keys with
// mma.m16n8k16 (bf16 in, f32 accumulate), rounds the dot to bf16, applies ReLU and the head weight, rounds again and
// parks the bf16 values in shared memory; then thread s sums its key's column over the heads in head order (the
// CPU's f32 order). kF32: the same tiling with f32 FMAs (the oracle mode has no bf16 tensor-core equivalent).
// Key tiles past the token's visible range are written as -inf without loading anything, or (visible_only: the
// decode step's capacity-wide call, whose readers stop at the visible count) left untouched. Keys may be paged (a
// page of 64 keys = one block's tile, found through the token's page table) and, in kReference, packed as e2m1 codes
// + UE8M0 scales (kv_store.h), dequantised to the exact bf16 key values while the tile is staged.
//
// Top-k: one 1024-thread block per row. Scores map to order-preserving uint32 keys (NaN lowest); a 4-pass 8-bit
// radix select finds the k-th largest key and how many of its ties to keep; a pass in index order (block scan)
// collects every key above it and the first ties by index; a bitonic sort of (key, ~index) orders the picks. The
// row is read 5 times: a simple, correct version (the single-pass fast one is a separate kernel to come).
// positions (decode): row t is cut to its first min(n, (positions[t] + 1) / ratio) scores, the row stride stays n.
#pragma once

#include <cub/block/block_scan.cuh>

#include "backend/cuda/common/mma_bf16.cuh"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/kernels/kv_store/kv_store.cuh"
#include "backend/cuda/common/pdl.cuh"

namespace dsv4::cuda {

struct IndexerConfig {
    static constexpr int kKeys = 64;   // keys per block
    static constexpr int kHeads = 64;  // max indexer heads
    static constexpr int kDim = 128;
    static constexpr int kLd = kDim + 8;  // padded bf16 row (272 bytes)
    static constexpr int kThreads = 128;
    static constexpr int kTopkThreads = 1024;
    static constexpr int kTopkMax = 1024;
};

// kPacked (kReference only): keys are kKeyFp4RowBytes rows (kv_store.h), dequantised while staged. key_pages
// (or null): the block's 64 keys are rows page·64 .. page·64+63 of `keys`, page = key_pages[t·pages_per_token +
// blockIdx.x] (a negative page reads as zero keys); null: rows s0 .. s0+63.
template <typename ActT, bool kPacked>
__global__ void __launch_bounds__(IndexerConfig::kThreads)
    sm90_indexer_scores_kernel(const ActT* __restrict__ q, const void* __restrict__ keys, const ActT* __restrict__ w,
                               int heads, int64_t n, int64_t ratio, const int64_t* __restrict__ positions,
                               ActT* __restrict__ scores, bool visible_only, const int32_t* __restrict__ key_pages,
                               int64_t pages_per_token) {
    pdl_enter();
    using Cfg = IndexerConfig;
    constexpr bool kRef = std::is_same_v<ActT, __nv_bfloat16>;
    static_assert(kRef || !kPacked, "packed keys are a kReference format");
    const int64_t t = blockIdx.y;
    const int64_t s0 = int64_t(blockIdx.x) * Cfg::kKeys;
    const int64_t visible = (positions[t] + 1) / ratio;
    const int tid = threadIdx.x;
    ActT* out = scores + t * n;
    if (s0 >= visible) {
        if (visible_only) return;
        for (int i = tid; i < Cfg::kKeys; i += Cfg::kThreads)
            if (s0 + i < n) out[s0 + i] = from_f32<ActT>(-INFINITY);
        return;
    }
    // first row of this block's keys in `keys`; -1: none (zero keys)
    int64_t row0 = s0;
    if (key_pages) {
        const int32_t page = key_pages[t * pages_per_token + blockIdx.x];
        row0 = page < 0 ? -1 : int64_t(page) * Cfg::kKeys;
    }
    const int64_t key_rows = row0 < 0 ? 0 : min(int64_t(Cfg::kKeys), n - s0);  // rows r < key_rows are read
    // kReference: q tile and key tile (bf16, padded rows), then the bf16 products. kF32: key tile (f32, padded)
    // reused for the products after the dots.
    constexpr int kSmem = kRef ? 2 * Cfg::kHeads * Cfg::kLd * 2 : Cfg::kKeys * (Cfg::kDim + 1) * 4;
    __shared__ __align__(16) uint8_t smem[kSmem];
    const ActT* qt = q + t * heads * Cfg::kDim;
    const ActT* wt = w + t * heads;
    if constexpr (kRef) {
        auto* q_s = reinterpret_cast<__nv_bfloat16*>(smem);
        auto* k_s = q_s + Cfg::kHeads * Cfg::kLd;
        // thread: chunk c (8 channels) of rows r0, r0 + 8, ..., every load issued before any is used (one memory
        // round trip for the tile instead of one per row: the loop of loads-then-decode waited 8 times)
        constexpr int kChunks = Cfg::kDim / 8, kRowStep = Cfg::kThreads / kChunks;
        constexpr int kPerThread = Cfg::kHeads / kRowStep;
        static_assert(Cfg::kHeads == Cfg::kKeys && Cfg::kThreads % kChunks == 0);
        const int r0 = tid / kChunks, c = (tid % kChunks) * 8;
        uint4 qv[kPerThread], kv[kPerThread];
        uint32_t codes[kPerThread];
        uint8_t scale[kPerThread];
#pragma unroll
        for (int u = 0; u < kPerThread; ++u) {
            const int r = r0 + u * kRowStep;
            qv[u] = r < heads ? *reinterpret_cast<const uint4*>(qt + r * Cfg::kDim + c) : make_uint4(0, 0, 0, 0);
            if constexpr (kPacked) {
                const uint8_t* key_row = static_cast<const uint8_t*>(keys) + (row0 + r) * kKeyFp4RowBytes;
                codes[u] = r < key_rows ? *reinterpret_cast<const uint32_t*>(key_row + c / 2) : 0u;
                scale[u] = r < key_rows ? key_row[kKeyFp4ScaleOffset + c / 32] : uint8_t(0);
            } else {
                kv[u] = r < key_rows
                            ? *reinterpret_cast<const uint4*>(static_cast<const ActT*>(keys) + (row0 + r) * Cfg::kDim + c)
                            : make_uint4(0, 0, 0, 0);
            }
        }
#pragma unroll
        for (int u = 0; u < kPerThread; ++u) {
            const int r = r0 + u * kRowStep;
            if constexpr (kPacked) {
                kv[u] = make_uint4(0, 0, 0, 0);
                if (r < key_rows) {
                    float v[8];
                    key_decode8(codes[u], scale[u], v);
                    kv[u] = pack_bf16x8(v);
                }
            }
            *reinterpret_cast<uint4*>(q_s + r * Cfg::kLd + c) = qv[u];
            *reinterpret_cast<uint4*>(k_s + r * Cfg::kLd + c) = kv[u];
        }
        __syncthreads();
        const int warp = tid >> 5, lane = tid & 31;
        float acc[Cfg::kKeys / 8][4] = {};
        if (warp * 16 < heads) {
#pragma unroll
            for (int k0 = 0; k0 < Cfg::kDim; k0 += 16) {
                uint32_t af[4];
                load_a_frag(af, q_s, Cfg::kLd, warp * 16, k0);
#pragma unroll
                for (int nt = 0; nt < Cfg::kKeys / 8; nt += 2) {
                    uint32_t bf[4];
                    load_b_frag_nk(bf, k_s, Cfg::kLd, nt * 8, k0);
                    mma_bf16_16816(acc[nt], af, bf[0], bf[1]);
                    mma_bf16_16816(acc[nt + 1], af, bf[2], bf[3]);
                }
            }
        }
        __syncthreads();  // q_s is reused for the products below
        auto* v_s = q_s;  // [heads][kLd] bf16(w · relu(bf16(dot)))
        if (warp * 16 < heads) {
            const int g = lane >> 2, qd = lane & 3;
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int h = warp * 16 + g + 8 * half;
                const float wh = h < heads ? to_f32(wt[h]) : 0.0f;  // padding rows: not summed, not read
#pragma unroll
                for (int nt = 0; nt < Cfg::kKeys / 8; ++nt)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const float dot = round_bf16(acc[nt][2 * half + e]);
                        v_s[h * Cfg::kLd + nt * 8 + 2 * qd + e] = __float2bfloat16_rn(__fmul_rn(fmaxf(dot, 0.0f), wh));
                    }
            }
        }
        __syncthreads();
        if (tid < Cfg::kKeys && s0 + tid < n) {
            float total = 0;
            for (int h = 0; h < heads; ++h) total = __fadd_rn(total, __bfloat162float(v_s[h * Cfg::kLd + tid]));
            out[s0 + tid] = from_f32<ActT>(s0 + tid < visible ? total : -INFINITY);
        }
    } else {
        auto* k_s = reinterpret_cast<float*>(smem);  // [kKeys][kDim + 1]
        for (int i = tid; i < Cfg::kKeys * Cfg::kDim; i += Cfg::kThreads) {
            const int r = i / Cfg::kDim, c = i % Cfg::kDim;
            k_s[r * (Cfg::kDim + 1) + c] =
                r < key_rows ? to_f32(static_cast<const ActT*>(keys)[(row0 + r) * Cfg::kDim + c]) : 0.0f;
        }
        __syncthreads();
        // thread: key tid % 64, heads (tid / 64)·32 .. +32
        const int key = tid % Cfg::kKeys, h0 = (tid / Cfg::kKeys) * 32;
        float acc[32];
#pragma unroll
        for (int j = 0; j < 32; ++j) acc[j] = 0;
        for (int d = 0; d < Cfg::kDim; ++d) {
            const float kd = k_s[key * (Cfg::kDim + 1) + d];
#pragma unroll
            for (int j = 0; j < 32; ++j)
                if (h0 + j < heads) acc[j] = fmaf(to_f32(qt[(h0 + j) * Cfg::kDim + d]), kd, acc[j]);
        }
        __syncthreads();
        float* v_s = k_s;  // [heads][kKeys + 1]
#pragma unroll
        for (int j = 0; j < 32; ++j)
            if (h0 + j < heads)
                v_s[(h0 + j) * (Cfg::kKeys + 1) + key] = __fmul_rn(fmaxf(acc[j], 0.0f), to_f32(wt[h0 + j]));
        __syncthreads();
        if (tid < Cfg::kKeys && s0 + tid < n) {
            float total = 0;
            for (int h = 0; h < heads; ++h) total = __fadd_rn(total, v_s[h * (Cfg::kKeys + 1) + tid]);
            out[s0 + tid] = from_f32<ActT>(s0 + tid < visible ? total : -INFINITY);
        }
    }
}

// Order-preserving key: larger score → larger key; NaN → 0 (below -inf, as the CPU sorts NaN last).
__device__ __forceinline__ uint32_t topk_key(float f) {
    if (f != f) return 0;
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
constexpr uint32_t kTopkNegInfKey = 0x007fffffu;  // topk_key(-inf)

template <typename ActT>
__global__ void __launch_bounds__(IndexerConfig::kTopkThreads)
    sm90_topk_kernel(const ActT* __restrict__ scores, int64_t stride, int k, const int64_t* __restrict__ positions,
                     int64_t ratio, int32_t* __restrict__ idx) {
    pdl_enter();
    constexpr int kT = IndexerConfig::kTopkThreads;
    using Scan = cub::BlockScan<int, kT>;
    __shared__ typename Scan::TempStorage scan_tmp;
    __shared__ unsigned hist[256];
    __shared__ uint32_t sel_prefix;
    __shared__ int sel_remaining, n_gt, eq_taken;
    __shared__ unsigned long long picks[IndexerConfig::kTopkMax];
    const ActT* row = scores + int64_t(blockIdx.x) * stride;
    int64_t n = stride;
    if (positions) {
        const int64_t visible = (positions[blockIdx.x] + 1) / ratio;
        n = visible < n ? (visible > 0 ? visible : 0) : n;
    }
    const int tid = threadIdx.x;
    const int kk = int(n < int64_t(k) ? n : int64_t(k));
    // radix select of the kk-th largest key
    uint32_t prefix = 0, mask = 0;
    int remaining = kk;
    for (int shift = 24; shift >= 0 && kk > 0; shift -= 8) {
        for (int i = tid; i < 256; i += kT) hist[i] = 0;
        __syncthreads();
        for (int64_t i = tid; i < n; i += kT) {
            const uint32_t u = topk_key(to_f32(row[i]));
            if ((u & mask) == prefix) atomicAdd(&hist[(u >> shift) & 0xff], 1u);
        }
        __syncthreads();
        if (tid == 0) {
            int above = 0, d = 255;
            for (; d > 0; --d) {
                if (above + int(hist[d]) >= remaining) break;
                above += int(hist[d]);
            }
            sel_prefix = prefix | (uint32_t(d) << shift);
            sel_remaining = remaining - above;
        }
        __syncthreads();
        prefix = sel_prefix;
        remaining = sel_remaining;
        mask |= 0xffu << shift;
        __syncthreads();
    }
    // collect: every key above the threshold, and the first `remaining` ties in index order
    if (tid == 0) n_gt = 0, eq_taken = 0;
    for (int i = tid; i < IndexerConfig::kTopkMax; i += kT) picks[i] = 0;
    __syncthreads();
    const int n_above = kk - remaining;
    for (int64_t base = 0; base < n && kk > 0; base += kT) {
        const int64_t i = base + tid;
        const uint32_t u = i < n ? topk_key(to_f32(row[i])) : 0;
        const bool gt = i < n && u > prefix, eq = i < n && u == prefix;
        int eq_rank, eq_total;
        Scan(scan_tmp).ExclusiveSum(eq ? 1 : 0, eq_rank, eq_total);
        const int taken_before = eq_taken;
        const auto code = [&](uint32_t key, int64_t index) {
            return (static_cast<unsigned long long>(key) << 32) | (0xffffffffu - uint32_t(index));
        };
        if (gt) picks[atomicAdd(&n_gt, 1)] = code(u, i);
        if (eq && taken_before + eq_rank < remaining) picks[n_above + taken_before + eq_rank] = code(u, i);
        __syncthreads();
        if (tid == 0) eq_taken = taken_before + eq_total;
        __syncthreads();
    }
    // bitonic sort, descending, over the next power of two >= kk (zero codes sort last)
    int len = 1;
    while (len < kk) len <<= 1;
    for (int size = 2; size <= len; size <<= 1) {
        for (int stride = size / 2; stride > 0; stride >>= 1) {
            for (int i = tid; i < len; i += kT) {
                const int j = i ^ stride;
                if (j > i) {
                    const bool desc = (i & size) == 0;
                    const unsigned long long a = picks[i], b = picks[j];
                    if (desc ? a < b : a > b) picks[i] = b, picks[j] = a;
                }
            }
            __syncthreads();
        }
    }
    int32_t* out = idx + int64_t(blockIdx.x) * k;
    for (int j = tid; j < k; j += kT) {
        int32_t v = -1;
        if (j < kk) {
            const unsigned long long c = picks[j];
            if (uint32_t(c >> 32) > kTopkNegInfKey) v = int32_t(0xffffffffu - uint32_t(c & 0xffffffffu));
        }
        out[j] = v;
    }
}

}  // namespace dsv4::cuda
