// Kernels of mxfp4_repack.h: grid-stride loops over 32-bit words, each word's transform from mxfp4_repacked.h.
#include <algorithm>
#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kernels/moe/mxfp4_repack.h"
#include "backend/cuda/kernels/moe/mxfp4_repacked.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256, kMaxBlocks = 1024;

__global__ void __launch_bounds__(kThreads) mxfp4_repack_check_kernel(const uint32_t* groups, int64_t n, int* bad) {
    pdl_enter();
    int count = 0;
    for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads) {
        uint32_t out;
        count += mxfp4_repack_scale_group(groups[i], out) ? 0 : 1;
    }
    if (count) atomicAdd(bad, count);
}

__global__ void __launch_bounds__(kThreads) mxfp4_repack_kernel(uint32_t* words, int64_t n_words, uint32_t* groups,
                                                                 int64_t n_groups) {
    pdl_enter();
    const int64_t stride = int64_t(gridDim.x) * kThreads;
    for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n_words; i += stride)
        words[i] = mxfp4_repack_word(words[i]);
    for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n_groups; i += stride) {
        uint32_t out;
        if (mxfp4_repack_scale_group(groups[i], out)) groups[i] = out;
    }
}

// The shape and pointer rules of both calls (packed may be null for the check, which reads scales only).
Status check_matrix(const std::string& op, const void* packed, bool need_packed, const uint8_t* scales, int64_t rows,
                    int64_t cols) {
    if (!scales || (need_packed && !packed)) return invalid_argument(op + ": null weight or scale pointer");
    if (rows < 1 || cols < 128 || cols % 128 != 0)
        return invalid_argument(op + ": need rows >= 1 and cols a positive multiple of 128, got " +
                                std::to_string(rows) + " x " + std::to_string(cols));
    if ((reinterpret_cast<uintptr_t>(scales) & 3) || (reinterpret_cast<uintptr_t>(packed) & 3))
        return invalid_argument(op + ": weights and scales must be 4-byte aligned");
    return Status::ok();
}

unsigned blocks_for(int64_t n) { return unsigned(std::min<int64_t>(kMaxBlocks, (n + kThreads - 1) / kThreads)); }

}  // namespace

Status sm90_mxfp4_repack_check(const uint8_t* scales, int64_t rows, int64_t cols, int* bad, StreamHandle stream) {
    DSV4_RETURN_IF_ERROR(check_matrix("sm90_mxfp4_repack_check", nullptr, false, scales, rows, cols));
    if (!bad) return invalid_argument("sm90_mxfp4_repack_check: null counter");
    const int64_t n = rows * (cols / 128);
    mxfp4_repack_check_kernel<<<blocks_for(n), kThreads, 0, stream>>>(reinterpret_cast<const uint32_t*>(scales), n,
                                                                       bad);
    return launch_status("mxfp4_repack_check");
}

Status sm90_mxfp4_repack(uint8_t* packed, uint8_t* scales, int64_t rows, int64_t cols, StreamHandle stream) {
    DSV4_RETURN_IF_ERROR(check_matrix("sm90_mxfp4_repack", packed, true, scales, rows, cols));
    const int64_t n_words = rows * cols / 8, n_groups = rows * (cols / 128);
    mxfp4_repack_kernel<<<blocks_for(n_words), kThreads, 0, stream>>>(
        reinterpret_cast<uint32_t*>(packed), n_words, reinterpret_cast<uint32_t*>(scales), n_groups);
    return launch_status("mxfp4_repack");
}

}  // namespace dsv4::cuda
