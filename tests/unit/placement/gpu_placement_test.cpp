// The layer split over GPUs (engine/gpu_placement.h): contiguous, within each GPU's free memory, balanced, the
// fewest GPUs unless every GPU is asked for, and a clear error when the model does not fit.
#include "engine/gpu_placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "dsv4/engine.h"

namespace dsv4::engine {
namespace {

constexpr uint64_t kGiB = uint64_t(1) << 30;

GpuPlacementCosts costs(int layers, uint64_t layer, uint64_t first = 0, uint64_t last = 0, uint64_t stage = 0) {
    GpuPlacementCosts c;
    c.layer_bytes.assign(size_t(layers), layer);
    c.first_bytes = first, c.last_bytes = last, c.stage_bytes = stage;
    return c;
}

// Contiguous from layer 0 to the last, each stage's bytes recomputed from the costs and within its GPU.
void expect_valid(const GpuPlacementCosts& c, const std::vector<GpuMemory>& gpus,
                  const std::vector<GpuStagePlan>& stages) {
    ASSERT_FALSE(stages.empty());
    int64_t next = 0;
    for (size_t i = 0; i < stages.size(); ++i) {
        const GpuStagePlan& s = stages[i];
        EXPECT_EQ(s.first_layer, next);
        EXPECT_GT(s.end_layer, s.first_layer);
        uint64_t bytes = c.stage_bytes + (i == 0 ? c.first_bytes : 0) +
                         (s.end_layer == int64_t(c.layer_bytes.size()) ? c.last_bytes : 0);
        for (int64_t l = s.first_layer; l < s.end_layer; ++l) bytes += c.layer_bytes[size_t(l)];
        EXPECT_EQ(s.bytes, bytes);
        const auto g = std::find_if(gpus.begin(), gpus.end(), [&](const GpuMemory& m) { return m.device == s.device; });
        ASSERT_NE(g, gpus.end());
        EXPECT_LE(s.bytes, g->free_bytes);
        next = s.end_layer;
    }
    EXPECT_EQ(next, int64_t(c.layer_bytes.size()));
}

TEST(GpuPlacementTest, OneGpuWhenItFits) {
    const GpuPlacementCosts c = costs(43, 3 * kGiB, kGiB, kGiB, 4 * kGiB);
    const std::vector<GpuMemory> gpus = {{0, 139 * kGiB}, {1, 139 * kGiB}};
    auto s = place_gpu_stages(c, gpus, false);
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    ASSERT_EQ(s->size(), 1u);
    EXPECT_EQ((*s)[0].device, 0);
    expect_valid(c, gpus, *s);
}

// V4-Flash-like: 43 layers of ~3.4 GiB do not fit one H200; two take them, balanced (one layer apart at most).
TEST(GpuPlacementTest, TwoGpusBalancedWhenOneIsTooSmall) {
    const GpuPlacementCosts c = costs(43, uint64_t(3.4 * double(kGiB)), kGiB, kGiB + kGiB / 2, 5 * kGiB);
    const std::vector<GpuMemory> gpus = {{0, 139 * kGiB}, {1, 139 * kGiB}, {2, 139 * kGiB}};
    auto s = place_gpu_stages(c, gpus, false);
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    ASSERT_EQ(s->size(), 2u);
    expect_valid(c, gpus, *s);
    const int64_t a = (*s)[0].end_layer - (*s)[0].first_layer, b = (*s)[1].end_layer - (*s)[1].first_layer;
    EXPECT_LE(std::abs(a - b), 1) << describe_gpu_stages(*s);
}

TEST(GpuPlacementTest, EveryGpuTakesLayersWhenAsked) {
    const GpuPlacementCosts c = costs(8, kGiB, 0, 0, kGiB);
    const std::vector<GpuMemory> gpus = {{3, 80 * kGiB}, {1, 80 * kGiB}, {0, 80 * kGiB}, {2, 80 * kGiB}};
    auto s = place_gpu_stages(c, gpus, true);
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    ASSERT_EQ(s->size(), 4u);
    expect_valid(c, gpus, *s);
    for (size_t i = 0; i < 4; ++i) {
        EXPECT_EQ((*s)[i].device, gpus[i].device);  // in the order given
        EXPECT_EQ((*s)[i].end_layer - (*s)[i].first_layer, 2);
    }
}

// A GPU with more free memory takes more layers; the largest fraction used is as small as the split allows.
TEST(GpuPlacementTest, LayersFollowFreeMemory) {
    const GpuPlacementCosts c = costs(30, kGiB);
    const std::vector<GpuMemory> gpus = {{0, 40 * kGiB}, {1, 20 * kGiB}};
    auto s = place_gpu_stages(c, gpus, true);
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    ASSERT_EQ(s->size(), 2u);
    expect_valid(c, gpus, *s);
    EXPECT_EQ((*s)[0].end_layer, 20) << describe_gpu_stages(*s);
}

// The head's bytes go with the last layer: a split that would leave the last GPU only the head is not made, and
// the embedding's bytes count on the first GPU.
TEST(GpuPlacementTest, EmbeddingAndHeadCountOnTheirStages) {
    const GpuPlacementCosts c = costs(4, 10 * kGiB, 15 * kGiB, 15 * kGiB);
    const std::vector<GpuMemory> gpus = {{0, 40 * kGiB}, {1, 40 * kGiB}};
    auto s = place_gpu_stages(c, gpus, false);
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    ASSERT_EQ(s->size(), 2u);
    expect_valid(c, gpus, *s);
    EXPECT_EQ((*s)[0].bytes, 35 * kGiB);
    EXPECT_EQ((*s)[1].bytes, 35 * kGiB);
}

// One GPU named twice (the pipeline's check on a single GPU): the caller halves its free memory per stage.
TEST(GpuPlacementTest, SameDeviceTwice) {
    const GpuPlacementCosts c = costs(3, kGiB);
    const std::vector<GpuMemory> gpus = {{0, 10 * kGiB}, {0, 10 * kGiB}};
    auto s = place_gpu_stages(c, gpus, true);
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    ASSERT_EQ(s->size(), 2u);
    EXPECT_EQ((*s)[0].device, 0);
    EXPECT_EQ((*s)[1].device, 0);
    expect_valid(c, gpus, *s);
}

TEST(GpuPlacementTest, MoreGpusThanLayersUsesWhatItNeeds) {
    const GpuPlacementCosts c = costs(2, kGiB);
    const std::vector<GpuMemory> gpus = {{0, 10 * kGiB}, {1, 10 * kGiB}, {2, 10 * kGiB}};
    auto s = place_gpu_stages(c, gpus, true);
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    EXPECT_EQ(s->size(), 2u);
    expect_valid(c, gpus, *s);
}

TEST(GpuPlacementTest, TooLargeSaysWhatIsNeededAndFree) {
    const GpuPlacementCosts c = costs(43, uint64_t(3.4 * double(kGiB)), kGiB, kGiB, 5 * kGiB);
    const std::vector<GpuMemory> gpus = {{0, 139 * kGiB}};
    auto s = place_gpu_stages(c, gpus, false);
    ASSERT_FALSE(s.is_ok());
    EXPECT_EQ(s.status().code(), StatusCode::kResourceExhausted);
    const std::string& m = s.status().message();
    EXPECT_NE(m.find("153.2 GiB"), std::string::npos) << m;  // 43 x 3.4 + 1 + 1 + 5
    EXPECT_NE(m.find("139.0 GiB free"), std::string::npos) << m;
    EXPECT_NE(m.find("--devices"), std::string::npos) << m;
}

// A single layer larger than any GPU cannot be placed however many GPUs there are.
TEST(GpuPlacementTest, LayerLargerThanAnyGpu) {
    const GpuPlacementCosts c = costs(2, 90 * kGiB);
    const std::vector<GpuMemory> gpus = {{0, 80 * kGiB}, {1, 80 * kGiB}, {2, 80 * kGiB}};
    EXPECT_EQ(place_gpu_stages(c, gpus, true).status().code(), StatusCode::kResourceExhausted);
    EXPECT_EQ(place_gpu_stages(c, gpus, false).status().code(), StatusCode::kResourceExhausted);
}

TEST(GpuPlacementTest, RejectsEmptyInputs) {
    const std::vector<GpuMemory> gpus = {{0, kGiB}};
    EXPECT_EQ(place_gpu_stages(GpuPlacementCosts{}, gpus, false).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(place_gpu_stages(costs(1, 1), {}, false).status().code(), StatusCode::kInvalidArgument);
}

TEST(GpuPlacementTest, Describes) {
    const std::vector<GpuStagePlan> s = {{0, 0, 22, 75 * kGiB}, {1, 22, 43, 72 * kGiB}};
    EXPECT_EQ(describe_gpu_stages(s), "GPU 0: layers 0-21 (75.0 GiB); GPU 1: layers 22-42 (72.0 GiB)");
}

TEST(CudaDevicesFlagTest, ParsesAutoAndLists) {
    for (const char* none : {"", "auto"}) {
        auto d = parse_cuda_devices(none);
        ASSERT_TRUE(d.is_ok()) << none;
        EXPECT_TRUE(d->empty());
    }
    auto d = parse_cuda_devices("0,1");
    ASSERT_TRUE(d.is_ok());
    EXPECT_EQ(*d, (std::vector<int>{0, 1}));
    d = parse_cuda_devices("3,0,0");
    ASSERT_TRUE(d.is_ok());
    EXPECT_EQ(*d, (std::vector<int>{3, 0, 0}));
}

TEST(CudaDevicesFlagTest, RejectsWhatIsNotAList) {
    std::string many = "0";
    for (int i = 0; i < 64; ++i) many += ",0";
    for (const std::string& bad :
         {std::string("x"), std::string("0,"), std::string(",0"), std::string("0,,1"), std::string("-1"),
          std::string(" 0"), std::string("0;1"), std::string("12345"), std::string("AUTO"), many}) {
        auto d = parse_cuda_devices(bad);
        ASSERT_FALSE(d.is_ok()) << "'" << bad << "'";
        EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
        EXPECT_NE(d.status().message().find("GPU"), std::string::npos) << d.status().message();
    }
}

}  // namespace
}  // namespace dsv4::engine
