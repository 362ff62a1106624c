// Synthetic weights and caches generated on the GPU (benchmarks: nothing is read from disk): pseudo-random bytes in
// a storage format's valid range, from a counter-based hash, so the same seed gives the same tensor.
#pragma once

#include <cstdint>

#include "backend/cuda/common/stream.h"
#include "dsv4/status.h"

namespace dsv4::cuda {

enum class FillKind : uint8_t {
    kE4M3,     // bytes: random e4m3 codes, NaN codes (0x7f, 0xff) avoided
    kUE8M0,    // bytes: exponent bytes in [ue8m0_lo, ue8m0_hi]
    kE2M1x2,   // bytes: two random e2m1 codes each (every code is valid)
    kBF16,     // bf16 values uniform in [lo, hi]
    kF32,      // f32 values uniform in [lo, hi]
    kI32Mod,   // int32 values in [0, modulus)
};

struct FillArgs {
    void* data = nullptr;
    int64_t count = 0;  // elements (bytes for the byte kinds)
    FillKind kind = FillKind::kBF16;
    float lo = -1.0f, hi = 1.0f;              // kBF16 / kF32
    uint8_t ue8m0_lo = 120, ue8m0_hi = 124;   // kUE8M0
    int32_t modulus = 1;                      // kI32Mod
    uint64_t seed = 0;
};
Status sm90_fill_synthetic(const FillArgs& a, StreamHandle stream);

}  // namespace dsv4::cuda
