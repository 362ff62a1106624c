// Host-side helpers the kernel launchers share: argument alignment checks and grid sizes of grid-stride kernels.
#pragma once

#include <algorithm>
#include <cstdint>

#include "backend/cuda/common/stream.h"

namespace dsv4::cuda {

// True when p is a multiple of `bytes` (a power of two).
inline bool is_aligned(const void* p, uintptr_t bytes) { return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0; }

// Blocks of a grid-stride kernel over `items` work items, `threads` per block: one block per `threads` items, at
// most 16 per SM (the GPU filled several times over; the kernels loop over the rest), at least 1.
inline unsigned grid_stride_blocks(int64_t items, int threads) {
    const int64_t want = (items + threads - 1) / threads;
    return unsigned(std::max<int64_t>(1, std::min<int64_t>(want, int64_t(current_sm_count()) * 16)));
}

}  // namespace dsv4::cuda
