// Named block barriers (PTX ISA "bar.sync / bar.arrive / bar.red"): barrier `id` (1..15; 0 is __syncthreads) completes
// when `threads` threads (a multiple of 32) have reached it. sync waits; arrive counts itself and goes on, which is
// how a producer warpgroup signals "this buffer is full" to consumers that sync on the same id without waiting for
// them. Both sides must agree on the count; a barrier must not be reused before its previous round has completed.
#pragma once

#include <cstdint>

namespace dsv4::cuda {

__device__ __forceinline__ void named_bar_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// bar.sync that also returns whether any participating thread passed pred = true.
__device__ __forceinline__ bool named_bar_sync_or(int id, int threads, bool pred) {
    uint32_t any;
    asm volatile(
        "{ .reg .pred pi, po;\n"
        "  setp.ne.u32 pi, %1, 0;\n"
        "  bar.red.or.pred po, %2, %3, pi;\n"
        "  selp.u32 %0, 1, 0, po; }"
        : "=r"(any)
        : "r"(uint32_t(pred)), "r"(id), "r"(threads)
        : "memory");
    return any != 0;
}

}  // namespace dsv4::cuda
