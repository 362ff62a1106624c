// The two regimes the CUDA backend's ops serve: decode batches of at most kDecodeMaxRows rows (one token per
// sequence; the MoE decode kernel's limit) and prefill passes above that. Ops with a faster path for many rows —
// wo_a and the FP8 linears on cuBLASLt, the prefill MoE kernel, attention with grouped head tiles — switch to it at
// kPrefillMinRows, so which path a call takes is decided by one number, and every decode batch stays on the decode
// kernels.
#pragma once

#include <cstdint>

namespace dsv4::cuda {

inline constexpr int64_t kDecodeMaxRows = 256;
inline constexpr int64_t kPrefillMinRows = kDecodeMaxRows + 1;

}  // namespace dsv4::cuda
