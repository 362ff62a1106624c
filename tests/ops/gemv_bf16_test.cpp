// The bf16 decode GEMV (kernels/embed_head/gemv_bf16.h) against backend::cpu::linear in reference numerics, at the
// V4 shapes that take it at decode — the compressors' projections, the indexer's head weights, the router gate — at
// the largest weight it takes and at ragged ones (rows not a multiple of 16, K a multiple of 64 but not of 128, one
// row), for 1-8 tokens, f32 and bf16 outputs, through both launchers that pick it (sm90_linear, sm90_bf16_gemm_f32).
// Fresh random inputs per run (seed printed on failure), outputs poisoned first. Bars: the cuBLASLt path's
// (linear_test.cpp): rel_l2 <= 5e-5 for f32 outputs (the same exact products, summed in the tensor core's order), <=
// 2e-3 and >= 97 % bit-identical for bf16 outputs.
#include "backend/cuda/kernels/embed_head/gemv_bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/kernels/embed_head/embed_head.h"
#include "backend/cuda/kernels/linear/linear.h"
#include "ops/gpu_testing.h"
#include "testing/testing.h"

namespace dsv4::cuda {
namespace {

using backend::LinearOut;
using backend::Precision;
using backend::WeightFormat;
using namespace dsv4::cuda::testing;

struct GemvShape {
    const char* name;
    int64_t rows, cols;
};

// bf16 weight [rows, cols] with values of a few binades, as host bits and on the device
struct Bf16Weight {
    std::vector<uint16_t> bits;
    DeviceWeight dev;
    backend::WeightView host(int64_t rows, int64_t cols) const {
        return {WeightFormat::kBF16, rows, cols, bits.data(), nullptr};
    }
};

Bf16Weight make_weight(std::mt19937_64& rng, const GemvShape& s) {
    const auto v = random_bf16(rng, size_t(s.rows * s.cols), 2.0f / std::sqrt(float(s.cols)));
    Bf16Weight w;
    w.bits = to_bf16_bits(v);
    auto d = upload_weight(w.host(s.rows, s.cols), s.name);
    EXPECT_TRUE(d.is_ok()) << d.status().to_string();
    if (d.is_ok()) w.dev = std::move(*d);
    return w;
}

struct BitCount {
    size_t same = 0, total = 0;
};

// One call through sm90_linear against the CPU; f32 outputs also through sm90_bf16_gemm_f32, which must give the
// same bits (the same kernel).
void check(const GemvShape& s, const Bf16Weight& w, int64_t T, LinearOut out, std::mt19937_64& rng, BitCount& bits) {
    SCOPED_TRACE(std::string(s.name) + " T " + std::to_string(T) + (out == LinearOut::kBF16 ? " bf16" : " f32"));
    const Precision ref = Precision::kReference;
    const int64_t N = s.rows, K = s.cols;
    ASSERT_TRUE(bf16_gemv_fits(T, w.dev.view()));
    const auto x = random_act(ref, rng, size_t(T * K), 1.0f);
    std::vector<float> want(size_t(T * N));
    DSV4_ASSERT_OK(backend::cpu::linear({ref, &pool()}, {x.data(), T, w.host(N, K), out, want.data()}));
    const bool y16 = out == LinearOut::kBF16;
    auto dx = act_to_device(ref, x);
    auto dy = y16 ? poisoned<uint16_t>(want.size()) : poisoned<float>(want.size());
    const size_t ws_bytes = sm90_linear_workspace_bytes(ref, T, w.dev.view(), out);
    auto ws = poisoned<uint8_t>(std::max<size_t>(ws_bytes, 256));
    ASSERT_TRUE(dx.is_ok() && dy.is_ok() && ws.is_ok());
    DSV4_ASSERT_OK(sm90_linear(ref, {dx->data(), T, w.dev.view(), out, dy->data(), ws->data(), ws_bytes}, nullptr));
    const auto got = y16 ? from_bf16_bits(to_host<uint16_t>(*dy, want.size())) : to_host<float>(*dy, want.size());
    DSV4_EXPECT_CLOSE(got, want, y16 ? 2e-3 : 5e-5);
    if (y16) {
        bits.same += got.size() - count_bit_differences(got, want);
        bits.total += got.size();
        return;
    }
    const size_t gb = sm90_bf16_gemm_f32_workspace_bytes(ref, T, K);
    auto gws = poisoned<uint8_t>(gb);
    auto dy2 = poisoned<float>(want.size());
    ASSERT_TRUE(gws.is_ok() && dy2.is_ok());
    DSV4_ASSERT_OK(sm90_bf16_gemm_f32(ref, {dx->data(), T, w.dev.view(), dy2->as<float>(), gws->data(), gb}, nullptr));
    EXPECT_EQ(count_bit_differences(to_host<float>(*dy2, want.size()), got), 0u) << "the two launchers differ";
}

TEST(CudaBf16Gemv, MatchesCpuLinearAtDecodeShapes) {
    DSV4_REQUIRE_GPU();
    std::mt19937_64 rng(fresh_seed());
    const GemvShape shapes[] = {
        {"flash compressor wkv (CSA, two windows)", 1024, 4096},
        {"flash indexer compressor wkv", 256, 4096},
        {"flash indexer weights_proj", 64, 4096},
        {"flash router gate", 256, 4096},
        {"pro indexer weights_proj", 64, 7168},
        {"pro compressor wkv (HCA)", 512, 7168},
        {"ragged rows 40, K 192", 40, 192},
        {"one row", 1, 64},
    };
    BitCount bits;
    for (const GemvShape& s : shapes) {
        const Bf16Weight w = make_weight(rng, s);
        if (::testing::Test::HasFailure()) return;
        for (const int64_t T : {1, 2, 5, 8})
            for (const LinearOut out : {LinearOut::kF32, LinearOut::kBF16}) {
                check(s, w, T, out, rng, bits);
                if (::testing::Test::HasFatalFailure()) return;
            }
    }
    const double frac = double(bits.same) / double(bits.total);
    std::printf("  bf16 GEMV: %zu / %zu bf16 outputs bit-identical to the CPU (%.4f%%)\n", bits.same, bits.total,
                100.0 * frac);
    EXPECT_GE(frac, 0.97);
}

// The largest weight it takes (64 MiB: 8,192 rows of 4,096); one more 16-row tile goes to cuBLASLt.
TEST(CudaBf16Gemv, MatchesCpuLinearAtItsLargestWeight) {
    DSV4_REQUIRE_GPU();
    std::mt19937_64 rng(fresh_seed());
    const GemvShape largest{"8192 x 4096", 8192, 4096};
    const Bf16Weight w = make_weight(rng, largest);
    if (::testing::Test::HasFailure()) return;
    BitCount bits;
    check(largest, w, 3, LinearOut::kF32, rng, bits);
    EXPECT_FALSE(bf16_gemv_fits(1, DeviceWeightView{WeightFormat::kBF16, 8192 + 16, 4096, w.dev.view().data}));
}

// Two weights of one shape against one x (LinearArgs::w2, a compressor's wkv and wgate): one launch on the GEMV
// (1-8 rows), two linears past it (9 rows: cuBLASLt); either way each output has the bits of its weight's linear alone.
TEST(CudaBf16Gemv, PairGivesEachWeightsOwnBits) {
    DSV4_REQUIRE_GPU();
    std::mt19937_64 rng(fresh_seed());
    const Precision ref = Precision::kReference;
    const GemvShape shapes[] = {
        {"flash compressor wkv/wgate (CSA)", 1024, 4096},
        {"flash indexer compressor wkv/wgate", 256, 4096},
        {"pro compressor wkv/wgate (HCA)", 512, 7168},
        {"ragged rows 40, K 192", 40, 192},
    };
    for (const GemvShape& s : shapes) {
        const Bf16Weight w = make_weight(rng, s), w2 = make_weight(rng, s);
        if (::testing::Test::HasFailure()) return;
        const int64_t N = s.rows, K = s.cols;
        for (const int64_t T : {1, 5, 8, 9})
            for (const LinearOut out : {LinearOut::kF32, LinearOut::kBF16}) {
                SCOPED_TRACE(std::string(s.name) + " T " + std::to_string(T) +
                             (out == LinearOut::kBF16 ? " bf16" : " f32"));
                const size_t n = size_t(T * N), esize = out == LinearOut::kBF16 ? 2 : 4;
                auto dx = act_to_device(ref, random_act(ref, rng, size_t(T * K), 1.0f));
                auto single = poisoned<uint8_t>(2 * n * esize), pair = poisoned<uint8_t>(2 * n * esize);
                const size_t ws_bytes = std::max<size_t>(sm90_linear_workspace_bytes(ref, T, w.dev.view(), out), 256);
                auto ws = poisoned<uint8_t>(ws_bytes);
                ASSERT_TRUE(dx.is_ok() && single.is_ok() && pair.is_ok() && ws.is_ok());
                uint8_t* ys = single->as<uint8_t>();
                uint8_t* yp = pair->as<uint8_t>();
                LinearArgs a{dx->data(), T, w.dev.view(), out, ys, ws->data(), ws_bytes};
                DSV4_ASSERT_OK(sm90_linear(ref, a, nullptr));
                a.w = w2.dev.view(), a.y = ys + n * esize;
                DSV4_ASSERT_OK(sm90_linear(ref, a, nullptr));
                a.w = w.dev.view(), a.y = yp, a.w2 = w2.dev.view(), a.y2 = yp + n * esize;
                DSV4_ASSERT_OK(sm90_linear(ref, a, nullptr));
                const auto got = to_host<uint8_t>(*pair, 2 * n * esize),
                           want = to_host<uint8_t>(*single, 2 * n * esize);
                EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0);
            }
    }
}

// The size rule and the argument checks come before any CUDA call, so they run without a GPU too (the pointers are
// never dereferenced).
TEST(CudaBf16GemvArgs, TakesOnlyItsShapes) {
    alignas(16) static uint8_t host_bytes[256];
    void* p = host_bytes;
    const DeviceWeightView w{WeightFormat::kBF16, 64, 128, p, nullptr};
    EXPECT_TRUE(bf16_gemv_fits(1, w));
    EXPECT_TRUE(bf16_gemv_fits(kBf16GemvMaxTokens, w));
    EXPECT_FALSE(bf16_gemv_fits(0, w));
    EXPECT_FALSE(bf16_gemv_fits(kBf16GemvMaxTokens + 1, w));
    DeviceWeightView odd = w;
    odd.cols = 96;  // a multiple of 32, not of 64: cuBLASLt's
    EXPECT_FALSE(bf16_gemv_fits(1, odd));
    DeviceWeightView fp8 = w;
    fp8.format = WeightFormat::kFP8Block;
    EXPECT_FALSE(bf16_gemv_fits(1, fp8));
    const int64_t cols = 4096, max_rows = kBf16GemvMaxWeightBytes / (2 * cols);  // 8,192: the lm head is not taken
    EXPECT_TRUE(bf16_gemv_fits(1, DeviceWeightView{WeightFormat::kBF16, max_rows, cols, p, nullptr}));
    EXPECT_FALSE(bf16_gemv_fits(1, DeviceWeightView{WeightFormat::kBF16, max_rows + 1, cols, p, nullptr}));
    EXPECT_FALSE(bf16_gemv_fits(1, DeviceWeightView{WeightFormat::kBF16, 129280, cols, p, nullptr}));
    Status s = launch_bf16_gemv(p, 9, w, static_cast<float*>(p), nullptr, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("1..8 tokens"), std::string::npos) << s.message();
    s = launch_bf16_gemv(p, 1, w, nullptr, nullptr, nullptr);
    EXPECT_NE(s.message().find("exactly one output"), std::string::npos) << s.message();
    s = launch_bf16_gemv(p, 1, w, static_cast<float*>(p), p, nullptr);
    EXPECT_NE(s.message().find("exactly one output"), std::string::npos) << s.message();
    DeviceWeightView taller = w;
    taller.rows = 80;
    s = launch_bf16_gemv_pair(p, 1, {w, static_cast<float*>(p), nullptr}, {taller, static_cast<float*>(p), nullptr},
                              nullptr);
    EXPECT_NE(s.message().find("one shape"), std::string::npos) << s.message();
    s = launch_bf16_gemv_pair(p, 1, {w, static_cast<float*>(p), nullptr}, {w, nullptr, p}, nullptr);
    EXPECT_NE(s.message().find("outputs of one type"), std::string::npos) << s.message();
    LinearArgs a{p, 1, w, LinearOut::kF32, p, nullptr, 0};
    a.w2 = taller, a.y2 = p;
    s = sm90_linear(Precision::kReference, a, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("w2"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace dsv4::cuda
