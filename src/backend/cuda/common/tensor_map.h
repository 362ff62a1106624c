// Tensor maps for the TMA tile loads of the wgmma kernels (common/wgmma.cuh). cuTensorMapEncodeTiled is a driver
// function; it is fetched once through the runtime's driver entry point, so the backend links no -lcuda.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "dsv4/status.h"

namespace dsv4::cuda {

// Map of a row-major [rows, cols] byte matrix (e4m3 codes; rows of `cols` bytes, a multiple of 16) read as boxes of
// box_rows x box_cols bytes in the 128-byte swizzle (box_cols 128); rows past the end read as zeros. `op` and `what`
// name the caller and the matrix in errors.
Result<CUtensorMap> e4m3_kmajor_tensor_map(const void* base, int64_t rows, int64_t cols, int box_rows, int box_cols,
                                           const char* op, const char* what);

}  // namespace dsv4::cuda
