// The launch configuration of a kernel in thread-block clusters (cudaLaunchKernelEx with the cluster-dimension
// attribute), shared by every launcher and occupancy query that uses clusters.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace dsv4::cuda {

// Launch with cudaLaunchKernelEx(&launch.cfg, kernel, args...). cfg points at attr, so the object is neither copied
// nor moved.
struct ClusterLaunch {
    cudaLaunchConfig_t cfg{};
    cudaLaunchAttribute attr{};

    ClusterLaunch(dim3 grid, dim3 block, size_t dynamic_smem, cudaStream_t stream, dim3 cluster) {
        cfg.gridDim = grid;
        cfg.blockDim = block;
        cfg.dynamicSmemBytes = dynamic_smem;
        cfg.stream = stream;
        attr.id = cudaLaunchAttributeClusterDimension;
        attr.val.clusterDim.x = cluster.x;
        attr.val.clusterDim.y = cluster.y;
        attr.val.clusterDim.z = cluster.z;
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
    }
    ClusterLaunch(const ClusterLaunch&) = delete;
    ClusterLaunch& operator=(const ClusterLaunch&) = delete;
};

}  // namespace dsv4::cuda
