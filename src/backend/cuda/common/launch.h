// Host-side helpers the kernel launchers share: argument alignment checks, grid sizes of grid-stride kernels, the K
// splits of the register-streaming decode GEMVs.
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

// K splits per 16-row tile of the register-streaming decode GEMVs (gemm_fp8/gemv_fp8.cu, embed_head/gemv_bf16.cu;
// blocks of `warps` warps, counted at 2 blocks per SM) for a weight [rows, cols]: the fewest that give at least 3/4 of
// a warp per resident-warp slot, at most `warps` (one block) and at least 512 columns per split.
inline int gemv_k_splits(int64_t rows, int64_t cols, int warps) {
    const int64_t tiles = (rows + 15) / 16, slots = int64_t(current_sm_count()) * 2 * warps;
    int ks = 1;
    while (ks < warps && 4 * tiles * ks < 3 * slots && 512 * ks <= cols) ks *= 2;
    return ks;
}

}  // namespace dsv4::cuda
