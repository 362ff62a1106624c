// Stream-ordered copies and fills, and page-locked host memory, behind a plain C++ interface (the forward uses them
// between kernels; none synchronises the host, so they can sit inside a captured CUDA graph).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "backend/cuda/common/stream.h"
#include "dsv4/status.h"

namespace dsv4::cuda {

// cudaMemcpyAsync with the direction inferred from the pointers (device <-> device, pinned host <-> device).
Status copy_async(void* dst, const void* src, size_t bytes, StreamHandle stream);
// cudaMemcpy2DAsync: `rows` rows of `row_bytes`, strides in bytes.
Status copy_rows_async(void* dst, size_t dst_stride, const void* src, size_t src_stride, size_t row_bytes,
                       size_t rows, StreamHandle stream);
Status fill_async(void* dst, uint8_t value, size_t bytes, StreamHandle stream);

// Page-locked host memory (cudaMallocHost): the source of asynchronous uploads of a step's plan.
class PinnedBuffer {
public:
    static Result<PinnedBuffer> allocate(size_t bytes, const char* what = "pinned host buffer");
    PinnedBuffer() = default;
    ~PinnedBuffer();
    PinnedBuffer(PinnedBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
    PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;

    void* data() const { return p_; }
    template <typename T>
    T* as() const { return static_cast<T*>(p_); }
    size_t bytes() const { return n_; }

private:
    void* p_ = nullptr;
    size_t n_ = 0;
};

}  // namespace dsv4::cuda
