// The repacked MXFP4 layout of the decode kernel (mxfp4_repacked.h) made on the device, in place, for weights that
// are already uploaded: a check that counts the 128-column groups that could not be repacked exactly, and the repack
// itself, to be run only where the check counted none (the engine does both per layer at load time). Byte for byte
// what mxfp4_repack_matrix gives on the host.
#pragma once

#include <cstdint>

#include "backend/cuda/common/stream.h"
#include "dsv4/status.h"

namespace dsv4::cuda {

// Adds to *bad (device int) the number of (row, 128-column group) scale words of the [rows, cols] MXFP4 matrix whose
// block exponents spread over more than 14 binades or whose largest is outside 7..254. cols % 128 == 0; scales
// 4-byte aligned. Changes nothing.
Status sm90_mxfp4_repack_check(const uint8_t* scales, int64_t rows, int64_t cols, int* bad, StreamHandle stream);

// Repacks the matrix in place (packed rows · cols/2 bytes, 4-byte aligned; scales rows · cols/32). Only for matrices
// the check passed: a group that cannot be repacked is left as shipped, which the decode kernel would misread.
Status sm90_mxfp4_repack(uint8_t* packed, uint8_t* scales, int64_t rows, int64_t cols, StreamHandle stream);

}  // namespace dsv4::cuda
