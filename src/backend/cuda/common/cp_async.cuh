// Ampere-style asynchronous global → shared copies (PTX ISA "cp.async") for the kernels that stage tiles per thread.
// The zfill forms copy `valid ? size : 0` source bytes and fill the rest of the destination with zeros (rows past
// the end of a matrix or a candidate list). Both addresses must be aligned to the copy size.
#pragma once

namespace dsv4::cuda {

// The 16-byte form passes the ignore-src predicate (zeros when set) rather than a source size: one instruction fewer
// per copy (SASS), which the prefill producer issues 32 times per thread and tile.
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool valid) {
    const unsigned s = unsigned(__cvta_generic_to_shared(smem));
    asm volatile(
        "{\n\t.reg .pred z;\n\tsetp.eq.u32 z, %2, 0;\n\tcp.async.cg.shared.global [%0], [%1], 16, z;\n\t}\n" ::"r"(s),
        "l"(gmem), "r"(unsigned(valid)));
}
__device__ __forceinline__ void cp_async8_zfill(void* smem, const void* gmem, bool valid) {
    const unsigned s = unsigned(__cvta_generic_to_shared(smem));
    const int n = valid ? 8 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

}  // namespace dsv4::cuda
