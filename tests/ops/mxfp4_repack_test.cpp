// sm90_mxfp4_repack_check / sm90_mxfp4_repack (the engine's load-time repack of routed experts into the decode
// kernel's layout) against the host's mxfp4_repack_matrix, which tests/unit/moe_repacked checks value by value
// against the shipped format: the same bytes for random expert matrices at V4 shapes, the same verdict on matrices
// that cannot be repacked exactly (counted, left untouched), and clear argument errors.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backend/cuda/kernels/moe/mxfp4_repack.h"
#include "backend/cuda/kernels/moe/mxfp4_repacked.h"
#include "ops/gpu_testing.h"
#include "ops/moe_test_inputs.h"

namespace dsv4::cuda {
namespace {

using namespace dsv4::cuda::testing;
using namespace dsv4::cuda::moe_testing;

// Runs the device check and repack on copies of (packed, scales); returns the check's count and the device bytes.
int device_repack(std::vector<uint8_t>& packed, std::vector<uint8_t>& scales, int64_t rows, int64_t cols) {
    auto dp = to_device(packed);
    auto ds = to_device(scales);
    auto bad = to_device(std::vector<int>{0});
    auto st = Stream::create();
    EXPECT_TRUE(dp.is_ok() && ds.is_ok() && bad.is_ok() && st.is_ok());
    EXPECT_TRUE(sm90_mxfp4_repack_check(ds->as<uint8_t>(), rows, cols, bad->as<int>(), st->handle()).is_ok());
    EXPECT_TRUE(st->synchronize().is_ok());
    const int n_bad = to_host<int>(*bad, 1)[0];
    if (n_bad == 0) {
        EXPECT_TRUE(sm90_mxfp4_repack(dp->as<uint8_t>(), ds->as<uint8_t>(), rows, cols, st->handle()).is_ok());
        EXPECT_TRUE(st->synchronize().is_ok());
    }
    packed = to_host<uint8_t>(*dp, packed.size());
    scales = to_host<uint8_t>(*ds, scales.size());
    return n_bad;
}

TEST(CudaMxfp4Repack, SameBytesAsTheHostRepack) {
    DSV4_REQUIRE_GPU();
    std::mt19937_64 rng(fresh_seed());
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{2048, 4096}, {4096, 2048}, {3072, 7168}, {8, 128}}) {
        SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(cols));
        const Mxfp4Tensor t = random_mxfp4(rng, rows, cols);
        std::vector<uint8_t> hp = t.packed, hs = t.scales, dp = t.packed, ds = t.scales;
        ASSERT_TRUE(mxfp4_repack_matrix(hp.data(), hs.data(), rows, cols).is_ok());
        EXPECT_EQ(device_repack(dp, ds, rows, cols), 0);
        EXPECT_TRUE(dp == hp) << "packed words differ from the host repack";
        EXPECT_TRUE(ds == hs) << "scale words differ from the host repack";
        EXPECT_FALSE(dp == t.packed) << "nothing was repacked";
    }
}

TEST(CudaMxfp4Repack, CountsWhatCannotBeRepackedAndChangesNothing) {
    DSV4_REQUIRE_GPU();
    const int64_t rows = 64, cols = 512;
    std::vector<uint8_t> packed(size_t(rows * cols / 2), 0x3c), scales(size_t(rows * cols / 32), 120);
    scales[37] = 105;   // 15 binades below its group
    scales[200] = 255;  // NaN scale
    std::vector<uint8_t> dp = packed, ds = scales;
    EXPECT_EQ(device_repack(dp, ds, rows, cols), 2);
    EXPECT_TRUE(dp == packed && ds == scales);
    EXPECT_FALSE(mxfp4_repack_matrix(packed.data(), scales.data(), rows, cols).is_ok());
}

TEST(CudaMxfp4Repack, BadArgumentsAreClearErrors) {
    alignas(16) static uint8_t bytes[4096];
    int* bad = reinterpret_cast<int*>(bytes);
    Status s = sm90_mxfp4_repack(bytes, bytes, 4, 96, nullptr);
    EXPECT_NE(s.message().find("multiple of 128"), std::string::npos) << s.to_string();
    s = sm90_mxfp4_repack(nullptr, bytes, 4, 128, nullptr);
    EXPECT_NE(s.message().find("null"), std::string::npos) << s.to_string();
    s = sm90_mxfp4_repack(bytes + 2, bytes, 4, 128, nullptr);
    EXPECT_NE(s.message().find("4-byte aligned"), std::string::npos) << s.to_string();
    s = sm90_mxfp4_repack_check(bytes, 4, 128, nullptr, nullptr);
    EXPECT_NE(s.message().find("null counter"), std::string::npos) << s.to_string();
    s = sm90_mxfp4_repack_check(bytes, 0, 128, bad, nullptr);
    EXPECT_NE(s.message().find("rows >= 1"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace dsv4::cuda
