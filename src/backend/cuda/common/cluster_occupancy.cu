#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <tuple>

#include "backend/cuda/common/cluster_launch.h"
#include "backend/cuda/common/cluster_occupancy.h"

namespace dsv4::cuda {

int max_active_clusters(const void* kernel, int threads, size_t smem, int size) {
    static std::mutex mu;
    static std::map<std::tuple<int, const void*, int, size_t, int>, int> known;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    const std::lock_guard<std::mutex> lock(mu);
    const auto key = std::make_tuple(dev, kernel, threads, smem, size);
    if (const auto it = known.find(key); it != known.end()) return it->second;
    const ClusterLaunch launch(dim3(unsigned(size)), dim3(unsigned(threads)), smem, nullptr, dim3(unsigned(size)));
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, kernel, &launch.cfg) != cudaSuccess) {
        (void)cudaGetLastError();
        n = 0;
    }
    known.emplace(key, n);
    return n;
}

}  // namespace dsv4::cuda
