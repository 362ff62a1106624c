// backend::weight_view, the one bridge from a mapped checkpoint weight to an op's WeightView: every format the
// weight map accepts, read in place where a WeightFormat describes it and through an exact f32 copy otherwise.
// Expected values are computed by hand from the format definitions (docs/checkpoint-formats.md).
#include <cstring>

#include "helpers.h"
#include "model/weights.h"

namespace dsv4::cpu_test {
namespace {

model::WeightRef ref(const char* name, model::WeightFormat f, const void* data, std::vector<int64_t> shape) {
    model::WeightRef r;
    r.name = name;
    r.format = f;
    r.data = static_cast<const uint8_t*>(data);
    r.shape = std::move(shape);
    return r;
}

std::vector<float> row(const WeightView& v, int64_t r) {
    std::vector<float> out(size_t(v.cols));
    dequantize_weight_row(v, r, out.data());
    return out;
}

TEST(WeightView, Fp8Ue8m0ReadInPlaceAndMisalignedSliceCopied) {
    // [256, 128] e4m3: row r holds 0x38 (1.0) everywhere except column 0 = 0xb0 (-0.5); block scales 2^1, 2^-2.
    std::vector<uint8_t> data(256 * 128, 0x38);
    for (int r = 0; r < 256; ++r) data[size_t(r) * 128] = 0xb0;
    const uint8_t scales[2] = {128, 125};
    auto w = ref("fp8", model::WeightFormat::kFP8Block128, data.data(), {128, 128});
    w.scale = scales;
    w.scale_dtype = DType::kF8E8M0;
    w.scale_shape = {2, 1};
    w.row_offset = 128;  // the second 128-row block: scale 2^-2, in place
    WeightCopies copies;
    auto v = weight_view(w, &copies);
    ASSERT_TRUE(v.is_ok()) << v.status().to_string();
    EXPECT_EQ(v.value().format, WeightFormat::kFP8Block);
    EXPECT_EQ(copies.count(), 0u);
    EXPECT_EQ(row(v.value(), 5)[0], -0.125f);
    EXPECT_EQ(row(v.value(), 5)[1], 0.25f);

    w.row_offset = 127;  // rows 127..254 straddle two scale blocks: an exact f32 copy
    w.shape = {128, 128};
    EXPECT_EQ(weight_view(w).status().code(), StatusCode::kUnsupported);
    v = weight_view(w, &copies);
    ASSERT_TRUE(v.is_ok()) << v.status().to_string();
    EXPECT_EQ(v.value().format, WeightFormat::kF32);
    EXPECT_EQ(copies.count(), 1u);
    EXPECT_EQ(row(v.value(), 0)[1], 2.0f);    // stored row 127: scale 2^1
    EXPECT_EQ(row(v.value(), 1)[0], -0.125f); // stored row 128: scale 2^-2
}

TEST(WeightView, Fp8F32ScalesF16Nvfp4AreExactCopies) {
    WeightCopies copies;
    // FP8 with an F32 block scale of 0.75: 0x38 (1.0) -> 0.75, 0xc0 (-2.0) -> -1.5.
    const uint8_t fp8[2] = {0x38, 0xc0};
    const float f32_scale = 0.75f;
    auto w = ref("fp8_f32", model::WeightFormat::kFP8Block128, fp8, {1, 2});
    w.scale = reinterpret_cast<const uint8_t*>(&f32_scale);
    w.scale_dtype = DType::kF32;
    w.scale_shape = {1, 1};
    EXPECT_EQ(weight_view(w).status().code(), StatusCode::kUnsupported);
    auto v = weight_view(w, &copies);
    ASSERT_TRUE(v.is_ok()) << v.status().to_string();
    EXPECT_EQ(row(v.value(), 0), (std::vector<float>{0.75f, -1.5f}));

    // F16: 0x3c00 = 1.0, 0xc000 = -2.0, 0x0001 = 2^-24.
    const uint16_t f16[3] = {0x3c00, 0xc000, 0x0001};
    v = weight_view(ref("f16", model::WeightFormat::kF16, f16, {1, 3}), &copies);
    ASSERT_TRUE(v.is_ok()) << v.status().to_string();
    EXPECT_EQ(row(v.value(), 0), (std::vector<float>{1.0f, -2.0f, std::ldexp(1.0f, -24)}));

    // NVFP4 [1, 16]: codes 2 (1.0) and 0xb (-1.5) alternating, e4m3 group scale 0x40 (2.0), global 0.25.
    std::vector<uint8_t> packed(8, 0xb2);
    const uint8_t nv_scale = 0x40;
    auto n = ref("nvfp4", model::WeightFormat::kNVFP4, packed.data(), {1, 16});
    n.scale = &nv_scale;
    n.scale_dtype = DType::kF8E4M3;
    n.scale_shape = {1, 1};
    n.global_scale = 0.25f;
    EXPECT_EQ(weight_view(n).status().code(), StatusCode::kUnsupported);
    v = weight_view(n, &copies);
    ASSERT_TRUE(v.is_ok()) << v.status().to_string();
    const auto nr = row(v.value(), 0);
    EXPECT_EQ(nr[0], 0.5f);
    EXPECT_EQ(nr[1], -0.75f);
    EXPECT_EQ(copies.count(), 3u);
}

TEST(WeightView, DirectFormatsAndErrors) {
    // MXFP4 [1, 32]: low nibble 1 (0.5), high nibble 0xe (-4), UE8M0 scale 2^3.
    std::vector<uint8_t> packed(16, 0xe1);
    const uint8_t mx_scale = 130;
    auto m = ref("mxfp4", model::WeightFormat::kMXFP4, packed.data(), {1, 32});
    m.scale = &mx_scale;
    m.scale_dtype = DType::kF8E8M0;
    m.scale_shape = {1, 1};
    auto v = weight_view(m);
    ASSERT_TRUE(v.is_ok()) << v.status().to_string();
    EXPECT_EQ(v.value().format, WeightFormat::kMXFP4);
    EXPECT_EQ(row(v.value(), 0)[0], 4.0f);
    EXPECT_EQ(row(v.value(), 0)[31], -32.0f);

    const uint16_t bf16[2] = {0x3f80, 0xbf00};  // 1.0, -0.5
    v = weight_view(ref("bf16", model::WeightFormat::kBF16, bf16, {2}));
    ASSERT_TRUE(v.is_ok());
    EXPECT_EQ(v.value().format, WeightFormat::kBF16);
    EXPECT_EQ(v.value().rows, 1);
    EXPECT_EQ(row(v.value(), 0), (std::vector<float>{1.0f, -0.5f}));

    WeightCopies copies;
    const int64_t ids[2] = {1, 2};
    auto bad = weight_view(ref("tid2eid", model::WeightFormat::kI64, ids, {1, 2}), &copies);
    EXPECT_EQ(bad.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(bad.status().message().find("tid2eid"), std::string::npos);
    model::WeightRef absent;
    absent.name = "gate.bias";
    EXPECT_FALSE(weight_view(absent, &copies).is_ok());
    EXPECT_EQ(copies.count(), 0u);
}

}  // namespace
}  // namespace dsv4::cpu_test
