// CUDA error -> Status (internal to backend/cuda: includes the CUDA runtime). Every runtime call and every launch in
// this backend goes through DSV4_CUDA_TRY / launch_status so a failure becomes one message naming what failed.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "dsv4/status.h"

namespace dsv4::cuda {

// "cudaMalloc(1.0 GiB): cudaErrorMemoryAllocation (out of memory)"; out-of-memory maps to kResourceExhausted.
inline Status cuda_status(cudaError_t e, const std::string& what) {
    if (e == cudaSuccess) return Status::ok();
    std::string m = what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
    if (e == cudaErrorMemoryAllocation) return {StatusCode::kResourceExhausted, m};
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorNoKernelImageForDevice)
        return unsupported(m);
    return internal_error(m);
}

// The launch error of the kernel just launched (configuration, missing image); asynchronous faults surface at the
// next synchronising call.
inline Status launch_status(const char* kernel) {
    return cuda_status(cudaGetLastError(), std::string("launch ") + kernel);
}

}  // namespace dsv4::cuda

#define DSV4_CUDA_TRY(call, what)                                                       \
    do {                                                                                \
        ::dsv4::Status dsv4_cuda_status_ = ::dsv4::cuda::cuda_status((call), (what));    \
        if (!dsv4_cuda_status_.is_ok()) return dsv4_cuda_status_;                       \
    } while (0)
