// Launcher of the MoE decode path's routing first launch (moe_route.cu), called by sm90_mxfp4_moe_decode in place
// of sm90_moe_prepare when MoeDecodeArgs::route is set.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/kernels/moe/moe.cuh"
#include "dsv4/status.h"

namespace dsv4::cuda {

// The route's checks against the call's arguments (messages start with `op`); no CUDA call.
Status check_moe_route(const MoeDecodeArgs& a, const std::string& op);
// scratch: f32 [2, T, E] of the workspace (MoeWorkspace::route_scores).
Status launch_moe_route(const MoeKernelParams& p, const MoeRoute& route, float* scratch, cudaStream_t stream);

}  // namespace dsv4::cuda
