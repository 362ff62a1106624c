// bf16 select keys eight at a time (the cluster path of sm90_topk_select, topk_select_cluster.cuh): one 16-byte load
// of 8 scores, the keys made two per 32-bit register, stored 8 per 16-byte shared store and read back 8 per load in
// the later pass and the collect. The scalar path spends a global load, a shared store and a shared load per pass
// for every key (~21 lane-instructions per key in the load and pass 0 alone at 32,768 keys per CTA, measured); here
// those are per 8 keys, and the collect tests 8 keys against the threshold with three packed maxima.
//
// Layout: a CTA's keys sit in shared memory at position p = i + off for the key of index i (0 <= i < count), off =
// (source address / 2) mod 8, so that shared group g (positions 8g .. 8g+7) is one aligned 16-byte granule in both
// memories. Positions outside [off, off + count) hold key 0 and are masked by position in every pass (key 0 is also
// a NaN's key, so the value alone cannot tell them apart). Only the first and the last group can be partial; their
// valid keys are loaded one by one, so no load leaves the row's bytes.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/kernels/indexer/topk_select.cuh"

namespace dsv4::cuda {

// SelectKey<bf16>::of of both halves of w: b | 0x8000 for a positive half, ~b for a negative one, 0 for a NaN.
__device__ __forceinline__ uint32_t bf16x2_select_keys(uint32_t w) {
    const uint32_t flip = ((w >> 15) & 0x00010001u) * 0x7fffu | 0x80008000u;  // 0x8000 or 0xffff per half
    const uint32_t nan = __vcmpgtu2(w & 0x7fff7fffu, 0x7f807f80u);            // 0xffff per NaN half
    return (w ^ flip) & ~nan;
}

// The valid positions of a CTA's groups: group g holds keys j in [lo, hi) of its 8 (both 0 .. 8).
struct KeyGroups {
    int off = 0;     // position of index 0
    int end = 0;     // off + count
    int groups = 0;  // ceil(end / 8)
    __device__ __forceinline__ int lo(int g) const { return max(off - 8 * g, 0); }
    __device__ __forceinline__ int hi(int g) const { return min(end - 8 * g, 8); }
    __device__ __forceinline__ bool full(int g) const { return 8 * g >= off && 8 * g + 8 <= end; }
};

__device__ __forceinline__ KeyGroups key_groups(const __nv_bfloat16* src, int count) {
    KeyGroups kg;
    kg.off = int((reinterpret_cast<uintptr_t>(src) >> 1) & 7);
    kg.end = kg.off + count;
    kg.groups = (kg.end + 7) / 8;
    return kg;
}

// Key j (0..7) of a group; j is a compile-time constant at every use (unrolled loops).
__device__ __forceinline__ uint32_t key_half(const uint4& w, int j) {
    const uint32_t v = (j >> 1) == 0 ? w.x : (j >> 1) == 1 ? w.y : (j >> 1) == 2 ? w.z : w.w;
    return (j & 1) ? (v >> 16) : (v & 0xffffu);
}

// Block: the count scores at src into keys (shared, 16-byte aligned, kg.groups groups), and pass 0's histogram (the
// top byte of every valid key) into hist0. Four 16-byte loads per thread in flight. No barrier at the end.
__device__ __forceinline__ void block_load_keys_x8(const __nv_bfloat16* __restrict__ src, const KeyGroups& kg,
                                                   uint4* keys, unsigned* hist0) {
    constexpr int kT = TopKSelectConfig::kThreads, kBatch = 4;
    const auto* granules = reinterpret_cast<const uint4*>(src - kg.off);  // 16-byte aligned by the choice of off
    const auto* bits = reinterpret_cast<const uint16_t*>(src);
    const int tid = int(threadIdx.x);
    for (int g0 = 0; g0 < kg.groups; g0 += kT * kBatch) {
        uint4 w[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
            const int g = g0 + u * kT + tid;
            if (g < kg.groups && kg.full(g)) {
                asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                             : "=r"(w[u].x), "=r"(w[u].y), "=r"(w[u].z), "=r"(w[u].w)
                             : "l"(granules + g));
            } else if (g < kg.groups) {  // a partial first or last group: its valid scores one by one
                uint32_t h[8];
#pragma unroll
                for (int j = 0; j < 8; ++j)
                    h[j] = j >= kg.lo(g) && j < kg.hi(g) ? uint32_t(bits[8 * g + j - kg.off]) : 0u;
                w[u] = make_uint4(h[0] | h[1] << 16, h[2] | h[3] << 16, h[4] | h[5] << 16, h[6] | h[7] << 16);
            }
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
            const int g = g0 + u * kT + tid;
            if (g >= kg.groups) continue;
            const int lo = kg.lo(g), hi = kg.hi(g);
            // positions outside the row hold key 0 (a partial group's were loaded as 0 bits, whose key is 0x8000)
            const auto valid = [&](int j) { return j >= lo && j < hi; };
            const auto keep = [&](int q) {
                return (valid(2 * q) ? 0x0000ffffu : 0u) | (valid(2 * q + 1) ? 0xffff0000u : 0u);
            };
            const uint4 k = make_uint4(bf16x2_select_keys(w[u].x) & keep(0), bf16x2_select_keys(w[u].y) & keep(1),
                                       bf16x2_select_keys(w[u].z) & keep(2), bf16x2_select_keys(w[u].w) & keep(3));
            keys[g] = k;
#pragma unroll
            for (int j = 0; j < 8; ++j)
                if (valid(j)) atomicAdd(&hist0[key_half(k, j) >> 8], 1u);
        }
    }
}

// Block: pass 1 of the 16-bit keys — the histogram of the low byte of the valid keys whose top byte is d0.
// No barrier at the end.
__device__ __forceinline__ void block_pass_hist_x8(const uint4* keys, const KeyGroups& kg, unsigned* hist,
                                                   uint32_t d0) {
    for (int g = int(threadIdx.x); g < kg.groups; g += TopKSelectConfig::kThreads) {
        const uint4 k = keys[g];
        const int lo = kg.lo(g), hi = kg.hi(g);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const uint32_t key = key_half(k, j);
            if (j >= lo && j < hi && (key >> 8) == d0) atomicAdd(&hist[key & 0xffu], 1u);
        }
    }
}

// The largest of the group's 8 keys (positions outside the row hold 0).
__device__ __forceinline__ uint32_t group_max_key(const uint4& k) {
    const uint32_t m = __vmaxu2(__vmaxu2(k.x, k.y), __vmaxu2(k.z, k.w));
    return max(m & 0xffffu, m >> 16);
}

}  // namespace dsv4::cuda
