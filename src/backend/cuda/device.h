// GPU discovery and the support check every CUDA entry point runs first: a missing driver, no GPU, a GPU that is
// not Hopper (sm_90) or too little free memory each give one clear message instead of a crash.
#pragma once

#include <cstdint>
#include <string>

#include "dsv4/status.h"

namespace dsv4::cuda {

struct DeviceInfo {
    int index = -1;
    std::string name;
    int cc_major = 0, cc_minor = 0;
    int sm_count = 0;
    uint64_t total_bytes = 0, free_bytes = 0;
    std::string driver_version;  // "13.0"
};

// Number of visible CUDA devices; an error Status when the driver or runtime is missing.
Result<int> device_count();
// Describes device `index`.
Result<DeviceInfo> describe_device(int index);
// Ok when device `index` can run this build's kernels (sm_90 / sm_90a) and has at least `need_bytes` free.
Status check_device_supported(int index, uint64_t need_bytes);
// Makes device `index` current for the calling thread (every later allocation, stream and launch is on it).
Status set_device(int index);
// Lets kernels and copies on device `from` reach device `to`'s memory directly (NVLink or PCIe peer to peer); false
// where the pair cannot or the driver refuses (copies between them are then staged through host memory by the
// driver, only slower). Leaves `from` current when it gets that far.
Result<bool> enable_peer_access(int from, int to);

}  // namespace dsv4::cuda
