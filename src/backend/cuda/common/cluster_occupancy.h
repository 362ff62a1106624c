// How many thread-block clusters of a kernel can be resident at once: the launchers that use clusters size them
// (or fall back to another path) by it, since a cluster's CTAs must share a GPC and a grid whose clusters do not all
// fit runs in waves.
#pragma once

#include <cstddef>

namespace dsv4::cuda {

// Clusters of `size` CTAs of `kernel` (`threads` per CTA, `smem` bytes of dynamic shared memory) that can be
// resident at once on the current device (cudaOccupancyMaxActiveClusters), asked once per (device, kernel,
// threads, smem, size); 0 when the query fails or none fits.
int max_active_clusters(const void* kernel, int threads, size_t smem, int size);

}  // namespace dsv4::cuda
