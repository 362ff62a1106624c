#include "backend/cuda/common/copy.h"

#include <string>

#include "backend/cuda/common/cuda_status.cuh"

namespace dsv4::cuda {

Status copy_async(void* dst, const void* src, size_t bytes, StreamHandle stream) {
    if (bytes == 0) return Status::ok();
    return cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream), "cudaMemcpyAsync");
}

Status copy_rows_async(void* dst, size_t dst_stride, const void* src, size_t src_stride, size_t row_bytes,
                       size_t rows, StreamHandle stream) {
    if (rows == 0 || row_bytes == 0) return Status::ok();
    return cuda_status(
        cudaMemcpy2DAsync(dst, dst_stride, src, src_stride, row_bytes, rows, cudaMemcpyDefault, stream),
        "cudaMemcpy2DAsync");
}

Status fill_async(void* dst, uint8_t value, size_t bytes, StreamHandle stream) {
    if (bytes == 0) return Status::ok();
    return cuda_status(cudaMemsetAsync(dst, value, bytes, stream), "cudaMemsetAsync");
}

Result<PinnedBuffer> PinnedBuffer::allocate(size_t bytes, const char* what) {
    PinnedBuffer b;
    if (bytes == 0) return Result<PinnedBuffer>(std::move(b));
    DSV4_CUDA_TRY(cudaMallocHost(&b.p_, bytes),
                  std::string("cudaMallocHost ") + what + " (" + std::to_string(bytes) + " bytes)");
    b.n_ = bytes;
    return Result<PinnedBuffer>(std::move(b));
}

PinnedBuffer::~PinnedBuffer() {
    if (p_) cudaFreeHost(p_);
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
        if (p_) cudaFreeHost(p_);
        p_ = std::exchange(o.p_, nullptr);
        n_ = std::exchange(o.n_, 0);
    }
    return *this;
}

}  // namespace dsv4::cuda
