#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/kernels/synthetic/synthetic.h"
#include "backend/cuda/common/pdl.cuh"

namespace dsv4::cuda {

namespace {

// splitmix64 of (seed, index): independent, reproducible values per element.
__device__ __forceinline__ uint64_t mix(uint64_t seed, uint64_t i) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * (i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__device__ __forceinline__ float unit(uint64_t h) { return float(h >> 40) * (1.0f / 16777216.0f); }  // [0, 1)

__global__ void fill_kernel(FillArgs a) {
    pdl_enter();
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < a.count;
         i += int64_t(gridDim.x) * blockDim.x) {
        const uint64_t h = mix(a.seed, uint64_t(i));
        switch (a.kind) {
            case FillKind::kE4M3: {
                uint8_t b = uint8_t(h);
                if ((b & 0x7f) == 0x7f) b ^= 1;
                static_cast<uint8_t*>(a.data)[i] = b;
                break;
            }
            case FillKind::kUE8M0:
                static_cast<uint8_t*>(a.data)[i] = uint8_t(a.ue8m0_lo + h % uint64_t(a.ue8m0_hi - a.ue8m0_lo + 1));
                break;
            case FillKind::kE2M1x2: static_cast<uint8_t*>(a.data)[i] = uint8_t(h); break;
            case FillKind::kBF16:
                static_cast<__nv_bfloat16*>(a.data)[i] = __float2bfloat16_rn(a.lo + (a.hi - a.lo) * unit(h));
                break;
            case FillKind::kF32: static_cast<float*>(a.data)[i] = a.lo + (a.hi - a.lo) * unit(h); break;
            case FillKind::kI32Mod: static_cast<int32_t*>(a.data)[i] = int32_t(h % uint64_t(a.modulus)); break;
        }
    }
}

}  // namespace

Status sm90_fill_synthetic(const FillArgs& a, StreamHandle stream) {
    const char* op = "sm90_fill_synthetic";
    if (!a.data || a.count < 0) return invalid_argument(std::string(op) + ": null pointer or negative count");
    if (a.kind == FillKind::kUE8M0 && a.ue8m0_hi < a.ue8m0_lo)
        return invalid_argument(std::string(op) + ": empty exponent range");
    if (a.kind == FillKind::kI32Mod && a.modulus < 1) return invalid_argument(std::string(op) + ": modulus < 1");
    if (a.count == 0) return Status::ok();
    const int64_t blocks = (a.count + 255) / 256;
    fill_kernel<<<unsigned(blocks > 65535 * 8 ? 65535 * 8 : blocks), 256, 0, stream>>>(a);
    return launch_status(op);
}

}  // namespace dsv4::cuda
