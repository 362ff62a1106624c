// sm90_mxfp4_moe_decode_v2: v1's numerics (moe.cuh) with the weight bytes streamed through an asynchronous
// shared-memory pipeline. docs/kernels/moe.md, section "v2".
//
// Both GEMM launches are persistent blocks of 1 producer warp + kConsumers consumer warps. A consumer warp's work
// item is (active expert slot, 16-row tile) over the full K and all token tiles of the expert; items are dealt
// statically (item i -> block i mod G, warp (i / G) mod kConsumers), so producer and consumer derive the same
// stream of stages without any queue. A stage is one 256-wide K step of the tile: MATS x 16 rows x 128 bytes of
// e2m1 plus MATS x 16 rows x 8 bytes of UE8M0 scales.
//
// Pipeline: consumer warp c owns S slots (ring). The producer warp fills them with cp.async (16-byte LDGSTS for the
// weights, 8-byte for the scales); each producer lane then does cp.async.mbarrier.arrive.noinc on the slot's full
// barrier (expected count 32, one arrival per producer lane, triggered when that lane's copies have landed). The
// consumer waits on full with parity (use & 1), copies the slot into registers, and lane 0 arrives on the slot's
// empty barrier (count 1); before use u >= 1 of a slot the producer waits on empty with parity ((u - 1) & 1).
// Producer lane c tracks consumer c's stream and polls its next slot without blocking (mbarrier.test_wait), so one
// slow consumer does not stall the others.
//
// Steps are visited ks-major (v1's K split: warp ks of KS summed steps ks, ks + KS, ...; the block then added the
// partials in ks order). Here one warp walks ks = 0..KS-1, accumulates the partial of ks exactly as v1's warp ks
// did, and adds it to the running total in the same order, so every f32 operation of v1 happens on the same
// values: the outputs are bit-identical to v1's.
//
// Shared-memory slot layout: weights [m][row 0..15][128 B] with the two 64-byte halves of odd rows swapped (16-byte
// part p of row r lives at part p ^ 4(r & 1)); then scales [m][row][8 B]. A consumer lane (g, t) reads part
// 4q + t of rows g and g + 8; a quarter-warp (8 lanes) covers rows 2i and 2i + 1, whose reads then fall on banks
// 0..15 and 16..31: no bank conflicts.
#pragma once

#include "backend/cuda/kernels/moe/moe.cuh"

namespace dsv4::cuda {

struct MoeV2Config {
    // consumer warps per block: 15 + 1 producer = 16 warps, so that ptxas may give each thread 128 registers
    // (with 17 warps it caps them at 96 and spills)
    static constexpr int kConsumers = 15;
    static constexpr int kThreads = 32 * (kConsumers + 1);  // + 1 producer warp
    static constexpr int kRows = 16;                        // rows per work item (MMA M)
    static constexpr int kStepK = 256;                      // K per stage (2 blocks of 128)
    static constexpr int kRowStageBytes = kStepK / 2;       // 128 bytes of e2m1 per row and stage
    static constexpr int kMatStageBytes = kRows * kRowStageBytes + kRows * (kStepK / 32);  // 2048 + 128
};

// Compile-time shape of one GEMM launch: gate/up (w1 and w3 together, v1's 8 K splits, 3 slots of 4.25 KB per
// consumer) or down (w2, v1's 4 K splits, 6 slots of 2.1 KB per consumer).
template <bool kUp>
struct MoeV2Gemm {
    static constexpr int kMats = kUp ? 2 : 1;
    static constexpr int kSplits = kUp ? MoeDecodeConfig::kUpKS : MoeDecodeConfig::kDownKS;
    static constexpr int kSlots = kUp ? 3 : 6;
    static constexpr int kSlotWeightBytes = kMats * MoeV2Config::kRows * MoeV2Config::kRowStageBytes;
    static constexpr int kSlotBytes = kMats * MoeV2Config::kMatStageBytes;
    static constexpr int kRingBytes = MoeV2Config::kConsumers * kSlots * kSlotBytes;
    static constexpr int kSmemBytes = kRingBytes + 2 * MoeV2Config::kConsumers * kSlots * 8;  // + full, empty
    static_assert(kSlotBytes % 128 == 0 && kRingBytes % 8 == 0, "slot alignment");
    static_assert(kSmemBytes <= 227 * 1024, "shared memory of one block on sm_90");
};

// Workspace layout of v2: v1's, with the down arrival counters per 16-row range of D.
struct MoeV2Workspace {
    size_t n_active, active_expert, active_start, active_count, list, order, cnt_up, cnt_down, xq, xs, h, hq, hs,
        yp, total;
    static MoeV2Workspace make(int64_t T, int64_t K, int64_t E, int64_t D, int64_t I) {
        MoeV2Workspace w{};
        const int64_t picks = T * K, slots = picks < E ? picks : E;
        size_t o = 0;
        auto take = [&](size_t bytes) {
            const size_t at = o;
            o = MoeWorkspace::align(o + bytes);
            return at;
        };
        w.n_active = take(4);
        w.active_expert = take(4 * size_t(E));
        w.active_start = take(4 * size_t(E));
        w.active_count = take(4 * size_t(E));
        w.list = take(4 * size_t(picks));
        w.order = take(4 * size_t(picks));
        w.cnt_up = take(4 * size_t(slots) * size_t(I / 128));
        w.cnt_down = take(4 * size_t(D / MoeV2Config::kRows));
        w.xq = take(2 * size_t(T) * size_t(D));
        w.xs = take(4 * size_t(T) * size_t(D / 128));
        w.h = take(2 * size_t(picks) * size_t(I));
        w.hq = take(2 * size_t(picks) * size_t(I));
        w.hs = take(4 * size_t(picks) * size_t(I / 128));
        w.yp = take(4 * size_t(picks) * size_t(D));
        w.total = o;
        return w;
    }
};

// ------------------------------------------------------------------------------- mbarrier and cp.async helpers

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
// True once the phase of the given parity has completed (non-blocking probe, acquire).
__device__ __forceinline__ bool mbar_test(uint64_t* bar, uint32_t parity) {
    uint32_t done;
    asm volatile(
        "{ .reg .pred p;\n"
        "  mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "  selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
    return done != 0;
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile(
            "{ .reg .pred p;\n"
            "  mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            "  selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(smem_addr(bar)), "r"(parity)
            : "memory");
    } while (!done);
}
// The barrier's pending count drops by one when every cp.async this thread issued so far has landed.
__device__ __forceinline__ void cp_async_arrive_noinc(uint64_t* bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_8(uint32_t dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

__device__ __forceinline__ uint4 lds128(uint32_t addr) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
    return v;
}
__device__ __forceinline__ uint2 lds64(uint32_t addr) {
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(addr));
    return v;
}

// ------------------------------------------------------------------------------------------ conversion (v2)

// The same bits as v1's e2m1_pair_f16<R> (f16 pair (nibble 3-R, nibble 7-R) as e2m1 · 2^-14), built with two
// ALU operations and two multiplies instead of three ALU operations and one: magnitude bits of the two nibbles
// masked in place and moved to bits 9..11 / 25..27 by a multiply (a high multiply for the right shift of R = 0),
// sign bits moved to 15 / 31 by a multiply, then one LOP3 (sign & 0x80008000) | magnitude.
template <int R>
__device__ __forceinline__ uint32_t e2m1_pair_f16_v2(uint32_t w) {
    constexpr uint32_t kMag = 0x70007000u >> (4 * R);
    uint32_t mag;
    if constexpr (R == 0) {
        mag = __umulhi(w & kMag, 1u << 29);  // (w & kMag) >> 3
    } else {
        mag = (w & kMag) * (1u << (4 * R - 3));
    }
    const uint32_t sgn = w * (1u << (4 * R));
    return (sgn & 0x80008000u) | mag;
}

// v1's block128_mma (moe.cuh) with the v2 conversion: identical A fragments, MMA sequence and fold.
__device__ __forceinline__ void block128_mma_v2(const uint4& w_lo, const uint4& w_hi, uint32_t s_lo, uint32_t s_hi,
                                                int t, const uint4 (&act)[4], float sa0, float sa1, float (&y)[4]) {
    uint32_t m_lo = __vmaxu4(s_lo, s_lo >> 16), m_hi = __vmaxu4(s_hi, s_hi >> 16);
    m_lo = __vmaxu4(m_lo, m_lo >> 8) & 0xff;
    m_hi = __vmaxu4(m_hi, m_hi >> 8) & 0xff;
    const int e_lo = int((s_lo >> (8 * t)) & 0xff), e_hi = int((s_hi >> (8 * t)) & 0xff);
    const uint32_t f_lo = pow2_f16x2(e_lo - int(m_lo) + 14), f_hi = pow2_f16x2(e_hi - int(m_hi) + 14);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const uint32_t wl = word_of(w_lo, j >> 1), wh = word_of(w_hi, j >> 1);
        uint32_t a0, a1, a2, a3;
        if (j & 1) {
            a0 = e2m1_pair_f16_v2<2>(wl), a2 = e2m1_pair_f16_v2<3>(wl);
            a1 = e2m1_pair_f16_v2<2>(wh), a3 = e2m1_pair_f16_v2<3>(wh);
        } else {
            a0 = e2m1_pair_f16_v2<0>(wl), a2 = e2m1_pair_f16_v2<1>(wl);
            a1 = e2m1_pair_f16_v2<0>(wh), a3 = e2m1_pair_f16_v2<1>(wh);
        }
        a0 = hmul2_bits(a0, f_lo), a2 = hmul2_bits(a2, f_lo);
        a1 = hmul2_bits(a1, f_hi), a3 = hmul2_bits(a3, f_hi);
        const uint4& b = act[j >> 1];
        const uint32_t b0 = (j & 1) ? b.z : b.x, b1 = (j & 1) ? b.w : b.y;
        mma_f16_16816(acc, a0, a1, a2, a3, b0, b1);
    }
    const float s_row_lo = e8m0_to_f32(uint8_t(m_lo)), s_row_hi = e8m0_to_f32(uint8_t(m_hi));
    y[0] = __fadd_rn(y[0], __fmul_rn(acc[0], __fmul_rn(s_row_lo, sa0)));
    y[1] = __fadd_rn(y[1], __fmul_rn(acc[1], __fmul_rn(s_row_lo, sa1)));
    y[2] = __fadd_rn(y[2], __fmul_rn(acc[2], __fmul_rn(s_row_hi, sa0)));
    y[3] = __fadd_rn(y[3], __fmul_rn(acc[3], __fmul_rn(s_row_hi, sa1)));
}

}  // namespace dsv4::cuda
