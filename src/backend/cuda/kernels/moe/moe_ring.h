// Launcher of the persistent TMA-ring expert kernel (moe_ring.cu), called by sm90_mxfp4_moe_decode after
// sm90_moe_prepare in place of the gate/up and down launches.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/kernels/moe/moe.cuh"
#include "dsv4/status.h"

namespace dsv4::cuda {

// Whether the ring holds at least two weight units of this shape (D, I) in its shared memory.
bool moe_ring_supported(int64_t dim, int64_t inter);
Status launch_moe_ring(const MoeKernelParams& p, cudaStream_t stream);

}  // namespace dsv4::cuda
