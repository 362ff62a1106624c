// Shared-memory mbarriers and TMA bulk copies (PTX ISA: "mbarrier", "cp.async.bulk"), the load pipeline of the
// weight-streaming kernels: a producer thread arms a barrier with the bytes it expects (arrive.expect_tx) and issues
// bulk copies that count their bytes on it; consumers wait on the barrier's phase parity, which completes when every
// byte has landed and makes those bytes visible to the waiting threads.
#pragma once

#include <cstdint>

namespace dsv4::cuda {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
// After the inits, before any other thread or the async proxy uses the barriers.
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
                 : "memory");
}
// A spin that cannot end is a protocol bug (a barrier phase or counter that will never complete). Rather than hang
// the GPU, a waiter that has spun for ~2^34 cycles (~9 s at 1.98 GHz) traps: the launch fails with an error the host
// sees ("unspecified launch failure") instead of never returning. No printf: its argument buffer would give every
// kernel using these waits a stack frame. The price: a loop holding only the try_wait would be laid out without a
// YIELD on its fast path, ~3 % faster in the MoE prefill GEMMs with every wait bare, no faster elsewhere, and bare
// in one role only (its partner guarded) 0 to 10 % slower (docs/kernels/moe_prefill.md).
__device__ __forceinline__ long long clock_cycles() {
    long long t;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
    return t;
}
struct Watchdog {
    long long start;
    uint32_t spins = 0;
    __device__ __forceinline__ Watchdog() : start(clock_cycles()) {}
    __device__ __forceinline__ void check() {
        if ((++spins & 1023u) == 0 && clock_cycles() - start > (1ll << 34)) __trap();
    }
};

// kClusterScope: for a barrier that other CTAs of the cluster complete (st_async_cluster), acquire at cluster scope,
// so their stores are visible to this thread once the phase has completed.
template <bool kClusterScope = false>
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
    uint32_t done = 0;
    Watchdog dog;
    while (!done) {
        if constexpr (kClusterScope)
            asm volatile(
                "{ .reg .pred p;\n"
                "  mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                "  selp.u32 %0, 1, 0, p; }"
                : "=r"(done)
                : "r"(smem_u32(bar)), "r"(parity)
                : "memory");
        else
            asm volatile(
                "{ .reg .pred p;\n"
                "  mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                "  selp.u32 %0, 1, 0, p; }"
                : "=r"(done)
                : "r"(smem_u32(bar)), "r"(parity)
                : "memory");
        if (!done) dog.check();
    }
}

// 16 bytes into CTA `rank` of the cluster at the offset of `dst` in this CTA's shared memory, counted (16 bytes of
// complete_tx) on that CTA's barrier at the offset of `bar`: a remote store that needs no cluster barrier to be seen,
// only the receiver's wait on its barrier (which its own thread armed with the bytes it expects).
__device__ __forceinline__ void st_async_cluster(void* dst, const uint4& v, uint64_t* bar, uint32_t rank) {
    uint32_t rdst, rbar;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rdst) : "r"(smem_u32(dst)), "r"(rank));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rbar) : "r"(smem_u32(bar)), "r"(rank));
    asm volatile(
        "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(rdst),
        "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(rbar)
        : "memory");
}
// Global → shared bulk copy of `bytes` (multiple of 16, both addresses 16-byte aligned), completion counted on bar.
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_u32(dst)),
        "l"(src), "r"(bytes), "r"(smem_u32(bar))
        : "memory");
}

}  // namespace dsv4::cuda
