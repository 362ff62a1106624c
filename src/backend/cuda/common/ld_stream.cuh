// Streaming loads of bytes a kernel reads exactly once (model weights at decode shapes): the read-only path without
// an L1 allocation, so the lines do not evict what the kernel reuses (activations, tables). Shared by the MoE decode
// kernels and the FP8 decode GEMV.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

__device__ __forceinline__ uint4 ld_stream16(const void* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
// The same 16 bytes by a coherent load (ld.global, no L1 allocation), for weight requests issued before the
// programmatic wait (pdl.cuh). ptxas moves griddepcontrol.wait above ld.global.nc loads of the same basic block,
// predicated ones included, so that such "early" requests issue after the wait (SASS: ACQBULK ahead of every
// LDG.E.NA.128.CONSTANT; nvcc 13, sm_90a); a coherent load keeps its place before it. Weights are written only at model
// load, so both paths read the same bytes.
__device__ __forceinline__ uint4 ld_early16(const void* p) {
    uint4 v;
    asm volatile("ld.global.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
// The two as function objects, for load code shared by the requests before the wait and those after it.
struct StreamLoad16 {
    __device__ __forceinline__ uint4 operator()(const void* p) const { return ld_stream16(p); }
};
struct EarlyLoad16 {
    __device__ __forceinline__ uint4 operator()(const void* p) const { return ld_early16(p); }
};
__device__ __forceinline__ uint2 ld_stream8(const void* p) {
    uint2 v;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}
__device__ __forceinline__ uint32_t ld_stream_u16(const void* p) {
    unsigned short v;
    asm volatile("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ uint32_t ld_stream_u8(const void* p) {
    uint32_t v;
    asm volatile("ld.global.nc.L1::no_allocate.u8 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

}  // namespace dsv4::cuda
