// GPU discovery and the support check (label gpu). Without a GPU every test skips and says why.
#include <gtest/gtest.h>

#include "backend/cuda/device.h"
#include "ops/gpu_testing.h"

namespace dsv4::cuda {
namespace {

TEST(CudaDevice, DescribesTheGpuAndAcceptsHopper) {
    DSV4_REQUIRE_GPU();
    auto info = describe_device(0);
    ASSERT_TRUE(info.is_ok()) << info.status().to_string();
    EXPECT_FALSE(info->name.empty());
    EXPECT_GT(info->sm_count, 0);
    EXPECT_GT(info->total_bytes, info->free_bytes / 2);
    std::printf("GPU 0: %s, sm_%d%d, %d SMs, %.1f GiB, driver %s\n", info->name.c_str(), info->cc_major,
                info->cc_minor, info->sm_count, double(info->total_bytes) / double(1ull << 30),
                info->driver_version.c_str());
    Status s = check_device_supported(0, 1ull << 30);
    if (info->cc_major == 9 && info->cc_minor == 0) {
        EXPECT_TRUE(s.is_ok()) << s.to_string();
    } else {
        EXPECT_EQ(s.code(), StatusCode::kUnsupported);
        EXPECT_NE(s.message().find("Hopper"), std::string::npos) << s.message();
    }
}

TEST(CudaDevice, TooLittleMemoryIsAClearError) {
    DSV4_REQUIRE_GPU();
    auto info = describe_device(0);
    ASSERT_TRUE(info.is_ok());
    if (info->cc_major != 9) GTEST_SKIP() << "not a Hopper GPU: the architecture check fires first";
    Status s = check_device_supported(0, info->total_bytes * 2);
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
    EXPECT_NE(s.message().find("GiB free"), std::string::npos) << s.message();
}

TEST(CudaDevice, NonexistentGpuIsAnError) {
    DSV4_REQUIRE_GPU();
    auto n = device_count();
    auto info = describe_device(*n + 3);
    EXPECT_FALSE(info.is_ok());
    EXPECT_NE(info.status().message().find("does not exist"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::cuda
