// Device memory behind a plain C++ interface: DeviceBuffer owns one cudaMalloc allocation (freed on destruction),
// with blocking copies to and from host memory for loading and for tests. Decode-loop code allocates nothing:
// buffers are made at load time (DESIGN §5).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "backend/cuda/common/stream.h"
#include "dsv4/status.h"

namespace dsv4::cuda {

class DeviceBuffer {
public:
    // `what` names the allocation in the out-of-memory message.
    static Result<DeviceBuffer> allocate(size_t bytes, const char* what = "device buffer");
    DeviceBuffer() = default;
    ~DeviceBuffer();
    DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void* data() const { return p_; }
    template <typename T>
    T* as() const { return static_cast<T*>(p_); }
    size_t bytes() const { return n_; }

    // Blocking copies of `bytes` at byte `offset` (checked against the allocation).
    Status upload(const void* host, size_t bytes, size_t offset = 0);
    Status download(void* host, size_t bytes, size_t offset = 0) const;
    // Every byte set to `value` (tests poison outputs with 0xff: NaN in bf16, f32 and e4m3).
    Status fill_bytes(uint8_t value);

private:
    void* p_ = nullptr;
    size_t n_ = 0;
};

}  // namespace dsv4::cuda
