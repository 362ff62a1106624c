// The 128-byte shared-memory swizzle shared by the tensor-core kernels: a tile of 128-byte rows whose 16-byte chunk c
// of row r is stored at chunk c ^ (r % 8), so that the 8 rows an ldmatrix / wgmma access touches hit distinct banks.
// It is the layout of TMA's SWIZZLE_128B and of the wgmma descriptors' 128-byte swizzle mode (common/wgmma.cuh; those
// need the tile 1024-byte aligned).
#pragma once

#include <cstdint>

namespace dsv4::cuda {

// Byte offset of 16-byte chunk c (0..7) of row r.
__device__ __forceinline__ uint32_t sw128_offset(int r, int c) { return uint32_t(r * 128 + ((c ^ (r & 7)) << 4)); }

}  // namespace dsv4::cuda
