// Values CUDA keeps per device, made once per device: a kernel's function attributes (a property of the module
// loaded into each device's context), a library handle, the multiprocessor count. A process-wide `static` would set
// them on the first device used only, and a launch on another device would then fail or size its grid wrongly.
#pragma once

#include <array>
#include <mutex>

namespace dsv4::cuda {

// The current device (cudaGetDevice), 0 when none can be asked.
int current_device();

// One T per device, made by `make` the first time get() runs with that device current. Devices past kMaxDevices
// (more than any one host holds) get a fresh value on every call.
template <class T>
class PerDevice {
public:
    static constexpr int kMaxDevices = 64;

    template <class Make>
    T get(Make&& make) {
        const int d = current_device();
        if (d < 0 || d >= kMaxDevices) return make();
        std::call_once(once_[size_t(d)], [&] { value_[size_t(d)] = make(); });
        return value_[size_t(d)];
    }

private:
    std::array<std::once_flag, kMaxDevices> once_;
    std::array<T, kMaxDevices> value_{};
};

}  // namespace dsv4::cuda
