// sm90_act_quant_e4m3 (blocks 128 and 64), sm90_fp4_quant_e2m1 and sm90_hadamard128 against the CPU quantisers:
// codes, scale bytes, scales and simulated values must agree bit for bit (MODEL_SPEC §7; the official primitive
// cases hold the CPU ops to the same standard).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/kernels/act_quant/act_quant.h"
#include "ops/gpu_testing.h"
#include "testing/testing.h"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using namespace dsv4::cuda::testing;

// Activations whose blocks span many binades (so scales vary), with an all-zero block (the amax floor), a block of
// tiny values and exact powers of two (the ceil(log2) boundary).
std::vector<float> quant_inputs(std::mt19937_64& rng, int64_t rows, int64_t cols, int block) {
    auto x = random_bf16(rng, size_t(rows * cols));
    std::uniform_int_distribution<int> ex(-20, 12);
    for (int64_t b = 0; b < rows * cols / block; ++b) {
        const float s = std::ldexp(1.0f, ex(rng));
        for (int i = 0; i < block; ++i) x[size_t(b * block + i)] = round_bf16(x[size_t(b * block + i)] * s);
    }
    if (rows * cols >= 4 * block) {
        std::fill(x.begin(), x.begin() + block, 0.0f);
        for (int i = 0; i < block; ++i) x[size_t(block + i)] = round_bf16(x[size_t(block + i)] * 1e-7f);
        x[size_t(2 * block)] = 448.0f;  // amax/448 exactly 1: scale 2^0
        x[size_t(3 * block)] = -6.0f * 1024;
    }
    return x;
}

TEST(CudaActQuant, E4m3BitExactAtModelShapes) {
    DSV4_REQUIRE_GPU();
    std::mt19937_64 rng(fresh_seed());
    struct Case {
        int64_t rows, cols;
        int block;
    };
    // GEMM inputs (D = 4096 / 7168, q_lora 1024 / 1536, wo_b in 8192 / 16384); KV nope 448 at block 64; 1 token.
    const Case cases[] = {{1, 4096, 128},  {37, 7168, 128}, {130, 1024, 128}, {3, 16384, 128},
                          {1, 448, 64},    {99, 448, 64},   {5, 1536, 128},   {1, 128, 128},
                          // the test models' GEMM inputs (hidden 128, wo_b in 256) at a 300-token prefill
                          {300, 128, 128}, {300, 256, 128}, {300, 448, 64}};
    for (const Case& c : cases) {
        SCOPED_TRACE("rows " + std::to_string(c.rows) + " cols " + std::to_string(c.cols) + " block " +
                     std::to_string(c.block));
        const size_t n = size_t(c.rows * c.cols), nb = n / size_t(c.block);
        auto x = quant_inputs(rng, c.rows, c.cols, c.block);
        std::vector<uint8_t> codes(n), sbytes(nb);
        std::vector<float> scale(nb), sim(n);
        DSV4_ASSERT_OK(backend::cpu::act_quant(
            {x.data(), c.rows, c.cols, c.block, codes.data(), scale.data(), sbytes.data(), sim.data()}));

        auto dx = to_device(to_bf16_bits(x));
        auto dcodes = poisoned<uint8_t>(n);
        auto dscale = poisoned<float>(nb);
        auto dsb = poisoned<uint8_t>(nb);
        auto dsim = poisoned<uint16_t>(n);
        ASSERT_TRUE(dx.is_ok() && dcodes.is_ok() && dscale.is_ok() && dsb.is_ok() && dsim.is_ok());
        ActQuantArgs a{dx->data(), c.rows, c.cols, c.block, dcodes->as<uint8_t>(), dscale->as<float>(),
                       dsb->as<uint8_t>(), dsim->data()};
        DSV4_ASSERT_OK(sm90_act_quant_e4m3(a, nullptr));
        EXPECT_TRUE(dsv4::testing::bytes_equal(to_host<uint8_t>(*dcodes, n), codes)) << "e4m3 codes differ";
        EXPECT_TRUE(dsv4::testing::bytes_equal(to_host<uint8_t>(*dsb, nb), sbytes)) << "UE8M0 scale bytes differ";
        EXPECT_TRUE(dsv4::testing::bytes_equal(to_host<float>(*dscale, nb), scale)) << "scales differ";
        EXPECT_EQ(count_bit_differences(from_bf16_bits(to_host<uint16_t>(*dsim, n)), sim), 0u) << "q·s differs";
    }
}

TEST(CudaActQuant, E4m3InPlaceSimulation) {
    DSV4_REQUIRE_GPU();
    std::mt19937_64 rng(fresh_seed());
    auto x = quant_inputs(rng, 17, 448, 64);
    std::vector<float> want(x.size());
    DSV4_ASSERT_OK(backend::cpu::act_quant({x.data(), 17, 448, 64, nullptr, nullptr, nullptr, want.data()}));
    auto dx = to_device(to_bf16_bits(x));
    ASSERT_TRUE(dx.is_ok());
    DSV4_ASSERT_OK(sm90_act_quant_e4m3({dx->data(), 17, 448, 64, nullptr, nullptr, nullptr, dx->data()}, nullptr));
    EXPECT_EQ(count_bit_differences(from_bf16_bits(to_host<uint16_t>(*dx, x.size())), want), 0u);
}

TEST(CudaActQuant, Fp4BitExact) {
    DSV4_REQUIRE_GPU();
    std::mt19937_64 rng(fresh_seed());
    // indexer q [T, 64 heads, 128] and keys [n, 128]
    for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 8192}, {23, 8192}, {300, 128}}) {
        SCOPED_TRACE("rows " + std::to_string(rows) + " cols " + std::to_string(cols));
        const size_t n = size_t(rows * cols), nb = n / 32;
        auto x = quant_inputs(rng, rows, cols, 32);
        std::vector<uint8_t> codes(n / 2), sbytes(nb);
        std::vector<float> scale(nb), sim(n);
        DSV4_ASSERT_OK(backend::cpu::fp4_act_quant(
            {x.data(), rows, cols, codes.data(), scale.data(), sbytes.data(), sim.data()}));
        auto dx = to_device(to_bf16_bits(x));
        auto dcodes = poisoned<uint8_t>(n / 2);
        auto dscale = poisoned<float>(nb);
        auto dsb = poisoned<uint8_t>(nb);
        auto dsim = poisoned<uint16_t>(n);
        ASSERT_TRUE(dx.is_ok() && dcodes.is_ok() && dscale.is_ok() && dsb.is_ok() && dsim.is_ok());
        DSV4_ASSERT_OK(sm90_fp4_quant_e2m1({dx->data(), rows, cols, dcodes->as<uint8_t>(), dscale->as<float>(),
                                            dsb->as<uint8_t>(), dsim->data()},
                                           nullptr));
        EXPECT_TRUE(dsv4::testing::bytes_equal(to_host<uint8_t>(*dcodes, n / 2), codes)) << "packed e2m1 codes differ";
        EXPECT_TRUE(dsv4::testing::bytes_equal(to_host<uint8_t>(*dsb, nb), sbytes)) << "UE8M0 scale bytes differ";
        EXPECT_TRUE(dsv4::testing::bytes_equal(to_host<float>(*dscale, nb), scale)) << "scales differ";
        EXPECT_EQ(count_bit_differences(from_bf16_bits(to_host<uint16_t>(*dsim, n)), sim), 0u) << "q·s differs";
    }
}

class HadamardTest : public ::testing::TestWithParam<Precision> {};

TEST_P(HadamardTest, BitExactBothPrecisions) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    for (const int64_t rows : {int64_t(1), int64_t(64), int64_t(64 * 37), int64_t(301)}) {
        SCOPED_TRACE("rows " + std::to_string(rows));
        const size_t n = size_t(rows * 128);
        auto x = random_bf16(rng, n, 2.0f);
        std::vector<float> want(n);
        DSV4_ASSERT_OK(backend::cpu::hadamard128({prec, nullptr}, {x.data(), rows, want.data()}));
        std::vector<float> got;
        if (prec == Precision::kReference) {
            auto dx = to_device(to_bf16_bits(x));
            auto dy = poisoned<uint16_t>(n);
            ASSERT_TRUE(dx.is_ok() && dy.is_ok());
            DSV4_ASSERT_OK(sm90_hadamard128(prec, {dx->data(), rows, dy->data()}, nullptr));
            got = from_bf16_bits(to_host<uint16_t>(*dy, n));
        } else {
            auto dx = to_device(x);
            auto dy = poisoned<float>(n);
            ASSERT_TRUE(dx.is_ok() && dy.is_ok());
            DSV4_ASSERT_OK(sm90_hadamard128(prec, {dx->data(), rows, dy->data()}, nullptr));
            got = to_host<float>(*dy, n);
        }
        EXPECT_EQ(count_bit_differences(got, want), 0u);
        DSV4_EXPECT_CLOSE(got, want, 1e-7);
    }
}

INSTANTIATE_TEST_SUITE_P(Cuda, HadamardTest, ::testing::Values(Precision::kReference, Precision::kF32),
                         [](const auto& i) { return std::string(backend::precision_name(i.param)); });

TEST(CudaActQuant, BadShapesAreClearErrors) {
    DSV4_REQUIRE_GPU();
    auto buf = DeviceBuffer::allocate(4096);
    ASSERT_TRUE(buf.is_ok());
    Status s = sm90_act_quant_e4m3({buf->data(), 1, 200, 128, nullptr, nullptr, nullptr, nullptr}, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("multiple of the block"), std::string::npos) << s.message();
    s = sm90_fp4_quant_e2m1({buf->data(), 1, 48, nullptr, nullptr, nullptr, nullptr}, nullptr);
    EXPECT_NE(s.message().find("multiple of 32"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace dsv4::cuda
