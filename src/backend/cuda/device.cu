#include <cuda_runtime.h>

#include "backend/cuda/device.h"

namespace dsv4::cuda {
namespace {

std::string error_text(cudaError_t e) { return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")"; }

std::string gib(uint64_t bytes) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.1f GiB", double(bytes) / double(1ull << 30));
    return buf;
}

}  // namespace

Result<int> device_count() {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorNoDevice) return 0;
    if (e == cudaErrorInsufficientDriver)
        // The runtime reports a machine with no driver at all the same way as one with an old driver.
        return unsupported("no usable NVIDIA driver: none is installed, or it is older than this build's CUDA "
                           "runtime needs (install or update the driver, or use --backend cpu)");
    if (e != cudaSuccess) return unsupported("CUDA is not usable on this machine: " + error_text(e));
    return n;
}

Result<DeviceInfo> describe_device(int index) {
    DSV4_ASSIGN_OR_RETURN(int n, device_count());
    if (index < 0 || index >= n)
        return invalid_argument("GPU " + std::to_string(index) + " does not exist (" + std::to_string(n) +
                                " visible)");
    cudaDeviceProp prop{};
    cudaError_t e = cudaGetDeviceProperties(&prop, index);
    if (e != cudaSuccess) return unsupported("cannot query GPU " + std::to_string(index) + ": " + error_text(e));
    DeviceInfo info;
    info.index = index;
    info.name = prop.name;
    info.cc_major = prop.major;
    info.cc_minor = prop.minor;
    info.sm_count = prop.multiProcessorCount;
    int driver = 0;
    cudaDriverGetVersion(&driver);
    info.driver_version = std::to_string(driver / 1000) + "." + std::to_string((driver % 1000) / 10);
    size_t free_b = 0, total_b = 0;
    if (cudaSetDevice(index) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
        info.free_bytes = free_b;
        info.total_bytes = total_b;
    }
    return info;
}

Status check_device_supported(int index, uint64_t need_bytes) {
    DSV4_ASSIGN_OR_RETURN(DeviceInfo info, describe_device(index));
    if (info.cc_major != 9 || info.cc_minor != 0)
        return unsupported("GPU " + std::to_string(index) + " (" + info.name + ", sm_" + std::to_string(info.cc_major) +
                           std::to_string(info.cc_minor) +
                           ") is not supported: the CUDA backend needs a Hopper GPU (H100/H200, sm_90); use "
                           "--backend cpu");
    if (need_bytes > info.free_bytes)
        return {StatusCode::kResourceExhausted,
                "GPU " + std::to_string(index) + " (" + info.name + ") has " + gib(info.free_bytes) +
                    " free but the weights it is to hold need " + gib(need_bytes) +
                    "; spread the model over more GPUs (--devices) or use --backend cpu"};
    return Status::ok();
}

Status set_device(int index) {
    const cudaError_t e = cudaSetDevice(index);
    if (e != cudaSuccess) return unsupported("cannot use GPU " + std::to_string(index) + ": " + error_text(e));
    return Status::ok();
}

Result<bool> enable_peer_access(int from, int to) {
    if (from == to) return true;
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, from, to) != cudaSuccess || !can) {
        (void)cudaGetLastError();
        return false;
    }
    DSV4_RETURN_IF_ERROR(set_device(from));
    const cudaError_t e = cudaDeviceEnablePeerAccess(to, 0);
    if (e == cudaSuccess) return true;
    (void)cudaGetLastError();  // already enabled: true; refused (too many peers, ...): copies go through the host
    return e == cudaErrorPeerAccessAlreadyEnabled;
}

}  // namespace dsv4::cuda
