#include <string>

#include "backend/cuda/common/buffer.h"
#include "backend/cuda/common/cuda_status.cuh"

namespace dsv4::cuda {

Result<DeviceBuffer> DeviceBuffer::allocate(size_t bytes, const char* what) {
    DeviceBuffer b;
    if (bytes == 0) return Result<DeviceBuffer>(std::move(b));
    DSV4_CUDA_TRY(cudaMalloc(&b.p_, bytes),
                  std::string("cudaMalloc ") + what + " (" + std::to_string(bytes) + " bytes)");
    b.n_ = bytes;
    return Result<DeviceBuffer>(std::move(b));
}

DeviceBuffer::~DeviceBuffer() {
    if (p_) cudaFree(p_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
        if (p_) cudaFree(p_);
        p_ = std::exchange(o.p_, nullptr);
        n_ = std::exchange(o.n_, 0);
    }
    return *this;
}

Status DeviceBuffer::upload(const void* host, size_t bytes, size_t offset) {
    if (offset + bytes > n_)
        return invalid_argument("upload of " + std::to_string(bytes) + " bytes at " + std::to_string(offset) +
                                " overruns a device buffer of " + std::to_string(n_));
    if (bytes == 0) return Status::ok();
    return cuda_status(cudaMemcpy(static_cast<uint8_t*>(p_) + offset, host, bytes, cudaMemcpyHostToDevice),
                       "cudaMemcpy host->device");
}

Status DeviceBuffer::download(void* host, size_t bytes, size_t offset) const {
    if (offset + bytes > n_)
        return invalid_argument("download of " + std::to_string(bytes) + " bytes at " + std::to_string(offset) +
                                " overruns a device buffer of " + std::to_string(n_));
    if (bytes == 0) return Status::ok();
    return cuda_status(cudaMemcpy(host, static_cast<const uint8_t*>(p_) + offset, bytes, cudaMemcpyDeviceToHost),
                       "cudaMemcpy device->host");
}

Status DeviceBuffer::fill_bytes(uint8_t value) {
    if (n_ == 0) return Status::ok();
    DSV4_CUDA_TRY(cudaMemset(p_, value, n_), "cudaMemset");
    return cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize after cudaMemset");
}

}  // namespace dsv4::cuda
