// sm90_linear against backend::cpu::linear for every weight format (F32, BF16, FP8 blocks, MXFP4) in both numerics
// modes and both output kinds, at the test-model shapes (in 128; out 512 / 128 / 24 / 4; up to 4100 tokens), at
// V4-Flash shapes (wq_a 4096→1024, wq_b 1024→32768, shared w2 2048→4096) and V4-Pro shapes (wq_a 7168→1536, shared
// w2 3072→7168), T in {1, 3, 16, 128, 300}.
//
// Weights: one Gaussian master per shape (each 32-block scaled by 2^u, u in [-3, 1], so MXFP4 sub-scales differ)
// encoded into each format by core's encoders. Inputs are fresh per run (seed printed on failure), outputs are
// poisoned with 0xff. f32 numerics: rel_l2 <= 1e-5 (no TF32 anywhere). Reference numerics: rel_l2 <= 2e-3 for
// bf16-valued outputs (W8A8 / W4A8 always, plain GEMMs with bf16 output), 1e-5 for f32 outputs; the share of
// bit-identical bf16 outputs is printed and must be >= 97 % per format (the tiled kernels reproduce the CPU's sums
// exactly; the tensor-core FP8 and cuBLASLt BF16 GEMMs differ in summation order only). Every W8A8 / W4A8 case also
// runs with the input quantised beforehand (LinearArgs::x_codes, as the engine shares one quantisation between the
// linears that read the same rows) and must give the same bits.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <map>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/kernels/act_quant/act_quant.h"
#include "backend/cuda/kernels/linear/linear.h"
#include "core/quant_formats.h"
#include "ops/gpu_testing.h"
#include "testing/testing.h"

namespace dsv4::cuda {
namespace {

using backend::LinearOut;
using backend::Precision;
using backend::WeightFormat;
using namespace dsv4::cuda::testing;

// A weight in one checkpoint format on the host (bytes as shipped) with its view.
struct HostWeight {
    WeightFormat format = WeightFormat::kF32;
    int64_t rows = 0, cols = 0;
    std::vector<uint8_t> data, scale;
    backend::WeightView view() const { return {format, rows, cols, data.data(), scale.empty() ? nullptr : scale.data()}; }
};

// Gaussian master [rows, cols] (sigma), each 32-block scaled by a random power of two in [2^-3, 2^1].
std::vector<float> random_master(std::mt19937_64& rng, int64_t rows, int64_t cols, float sigma) {
    std::normal_distribution<float> n(0.0f, sigma);
    std::uniform_int_distribution<int> binade(-3, 1);
    std::vector<float> w(size_t(rows * cols));
    for (size_t b = 0; b < w.size(); b += 32) {
        const float s = std::ldexp(1.0f, binade(rng));
        for (size_t i = b; i < b + 32 && i < w.size(); ++i) w[i] = n(rng) * s;
    }
    return w;
}

HostWeight encode(WeightFormat f, const std::vector<float>& m, int64_t rows, int64_t cols) {
    HostWeight w;
    w.format = f, w.rows = rows, w.cols = cols;
    switch (f) {
        case WeightFormat::kF32:
            w.data.resize(m.size() * 4);
            std::memcpy(w.data.data(), m.data(), w.data.size());
            break;
        case WeightFormat::kBF16: {
            w.data.resize(m.size() * 2);
            for (size_t i = 0; i < m.size(); ++i) {
                const uint16_t b = f32_to_bf16(m[i]);
                std::memcpy(w.data.data() + 2 * i, &b, 2);
            }
            break;
        }
        case WeightFormat::kFP8Block: {
            auto t = fp8_block_encode(m, rows, cols);
            EXPECT_TRUE(t.is_ok()) << t.status().to_string();
            w.data = std::move(t->data), w.scale = std::move(t->scales);
            break;
        }
        case WeightFormat::kMXFP4: {
            auto t = mxfp4_encode(m, rows, cols);
            EXPECT_TRUE(t.is_ok()) << t.status().to_string();
            w.data = std::move(t->packed), w.scale = std::move(t->scales);
            break;
        }
    }
    return w;
}

struct Shape {
    const char* name;
    int64_t out, in;
    std::vector<int64_t> tokens;
};

// Bit-identical bf16 outputs over all cases of one test.
struct BitStats {
    size_t same = 0, total = 0;
};

void run_case(Precision prec, const HostWeight& hw, const DeviceWeight& dw, LinearOut out, int64_t T,
              std::mt19937_64& rng, BitStats& bits) {
    const int64_t N = hw.rows, K = hw.cols;
    SCOPED_TRACE(std::string(backend::precision_name(prec)) + " " + backend::weight_format_name(hw.format) +
                 (out == LinearOut::kBF16 ? " out bf16" : " out f32") + " T " + std::to_string(T) + " N " +
                 std::to_string(N) + " K " + std::to_string(K));
    auto x = random_act(prec, rng, size_t(T * K), 1.0f);
    std::vector<float> want(size_t(T * N));
    DSV4_ASSERT_OK(backend::cpu::linear({prec, &pool()}, {x.data(), T, hw.view(), out, want.data()}));

    const bool ref = prec == Precision::kReference;
    const bool y_bf16 = ref && out == LinearOut::kBF16;
    const bool quant = ref && (hw.format == WeightFormat::kFP8Block || hw.format == WeightFormat::kMXFP4);
    const bool bf16_valued = y_bf16 || quant;
    auto dx = act_to_device(prec, x);
    auto dy = y_bf16 ? poisoned<uint16_t>(want.size()) : poisoned<float>(want.size());
    const size_t ws_bytes = sm90_linear_workspace_bytes(prec, T, dw.view(), out);
    auto ws = poisoned<uint8_t>(ws_bytes);
    ASSERT_TRUE(dx.is_ok() && dy.is_ok() && ws.is_ok());
    LinearArgs a{dx->data(), T, dw.view(), out, dy->data(), ws->data(), ws_bytes};
    DSV4_ASSERT_OK(sm90_linear(prec, a, nullptr));
    const auto got = y_bf16 ? from_bf16_bits(to_host<uint16_t>(*dy, want.size())) : to_host<float>(*dy, want.size());
    if (N * K >= (int64_t(1) << 22) && out == LinearOut::kBF16) {  // large shapes: time a second, warm call
        auto timer = EventTimer::create();
        ASSERT_TRUE(timer.is_ok());
        DSV4_ASSERT_OK(timer->start(nullptr));
        DSV4_ASSERT_OK(sm90_linear(prec, a, nullptr));
        DSV4_ASSERT_OK(timer->stop(nullptr));
        auto ms = timer->elapsed_ms();
        ASSERT_TRUE(ms.is_ok());
        std::printf("  linear %-9s %-12s T %4lld N %6lld K %5lld: %9.1f us\n", backend::precision_name(prec),
                    backend::weight_format_name(hw.format), (long long)T, (long long)N, (long long)K, 1000.0 * *ms);
    }
    if (quant) {  // the same rows quantised beforehand (LinearArgs::x_codes): the same bits
        auto codes = poisoned<uint8_t>(size_t(T * K));
        auto scales = poisoned<float>(size_t(T * (K / 128)));
        auto dy2 = y_bf16 ? poisoned<uint16_t>(want.size()) : poisoned<float>(want.size());
        ASSERT_TRUE(codes.is_ok() && scales.is_ok() && dy2.is_ok());
        DSV4_ASSERT_OK(sm90_act_quant_e4m3(
            {dx->data(), T, K, 128, codes->as<uint8_t>(), scales->as<float>(), nullptr, nullptr}, nullptr));
        LinearArgs b = a;
        b.y = dy2->data(), b.x_codes = codes->as<uint8_t>(), b.x_scales = scales->as<float>();
        DSV4_ASSERT_OK(sm90_linear(prec, b, nullptr));
        const auto got2 =
            y_bf16 ? from_bf16_bits(to_host<uint16_t>(*dy2, want.size())) : to_host<float>(*dy2, want.size());
        EXPECT_EQ(count_bit_differences(got2, got), 0u) << "pre-quantised input changed the result";
    }
    // f32 outputs: exact sums in another order (reference BF16 on tensor cores, whose f32 accumulation aligns
    // addends without rounding to nearest) or the CPU's own order (everything else)
    const bool tensor_core_f32 = ref && hw.format == WeightFormat::kBF16;
    DSV4_EXPECT_CLOSE(got, want, bf16_valued ? 2e-3 : tensor_core_f32 ? 5e-5 : 1e-5);
    if (!ref) {
        EXPECT_EQ(count_bit_differences(got, want), 0u) << "f32 numerics add in the CPU's order";
    }
    if (bf16_valued) {
        bits.same += got.size() - count_bit_differences(got, want);
        bits.total += got.size();
    }
}

const std::vector<Shape>& shapes() {
    static const std::vector<Shape> s = {
        // test models: hidden / q_lora / o_lora / moe_intermediate 128, vocab 512, small projections
        {"tiny vocab", 512, 128, {1, 3, 16, 128, 300, 4100}},
        {"tiny square", 128, 128, {1, 3, 16, 128, 300}},
        {"tiny 24", 24, 128, {1, 3, 16, 300}},
        {"tiny 4", 4, 128, {1, 3, 16}},
        {"tiny wide in", 72, 384, {1, 17}},
        {"flash wq_a", 1024, 4096, {3, 128}},
        {"flash wq_b", 32768, 1024, {1, 16, 300}},
        {"flash shared w2", 4096, 2048, {1, 300}},
        {"pro wq_a", 1536, 7168, {1, 128}},
        {"pro shared w2", 7168, 3072, {16, 300}},
    };
    return s;
}

struct Param {
    Precision prec;
    WeightFormat format;
};

class CudaLinear : public ::testing::TestWithParam<Param> {};

TEST_P(CudaLinear, MatchesCpuLinear) {
    DSV4_REQUIRE_GPU();
    const Param prm = GetParam();
    std::mt19937_64 rng(fresh_seed());
    BitStats bits;
    for (const Shape& s : shapes()) {
        const auto master = random_master(rng, s.out, s.in, 2.0f / std::sqrt(float(s.in)));
        const HostWeight hw = encode(prm.format, master, s.out, s.in);
        auto dw = upload_weight(hw.view(), s.name);
        ASSERT_TRUE(dw.is_ok()) << dw.status().to_string();
        for (const int64_t T : s.tokens)
            for (const LinearOut out : {LinearOut::kBF16, LinearOut::kF32}) {
                // f32 output (compressor / router / head projections): every tiny case, the large shapes at T <= 16
                if (out == LinearOut::kF32 && (T > 300 || (s.in * s.out > 65536 && T > 16))) continue;
                run_case(prm.prec, hw, *dw, out, T, rng, bits);
                if (::testing::Test::HasFatalFailure()) return;
            }
    }
    if (bits.total > 0) {
        const double frac = double(bits.same) / double(bits.total);
        std::printf("  linear %s %s: %zu / %zu bf16 outputs bit-identical (%.4f%%)\n",
                    backend::precision_name(prm.prec), backend::weight_format_name(prm.format), bits.same, bits.total,
                    100.0 * frac);
        EXPECT_GE(frac, 0.97);
    }
}

// f32 numerics take any input width that is a multiple of 32 (the MXFP4 group), like the CPU.
TEST_P(CudaLinear, F32ModeInputWidthMultipleOf32) {
    DSV4_REQUIRE_GPU();
    const Param prm = GetParam();
    if (prm.prec != Precision::kF32) GTEST_SKIP() << "reference W8A8 / W4A8 need multiples of 128";
    std::mt19937_64 rng(fresh_seed());
    BitStats bits;
    const auto master = random_master(rng, 40, 160, 0.2f);
    const HostWeight hw = encode(prm.format, master, 40, 160);
    auto dw = upload_weight(hw.view(), "w");
    ASSERT_TRUE(dw.is_ok()) << dw.status().to_string();
    for (const int64_t T : {1, 5, 70}) run_case(prm.prec, hw, *dw, LinearOut::kF32, T, rng, bits);
}

std::string param_name(const ::testing::TestParamInfo<Param>& i) {
    std::string n = std::string(backend::precision_name(i.param.prec)) + "_" + backend::weight_format_name(i.param.format);
    for (char& c : n)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    return n;
}
INSTANTIATE_TEST_SUITE_P(Linear, CudaLinear,
                         ::testing::Values(Param{Precision::kReference, WeightFormat::kF32},
                                           Param{Precision::kReference, WeightFormat::kBF16},
                                           Param{Precision::kReference, WeightFormat::kFP8Block},
                                           Param{Precision::kReference, WeightFormat::kMXFP4},
                                           Param{Precision::kF32, WeightFormat::kF32},
                                           Param{Precision::kF32, WeightFormat::kBF16},
                                           Param{Precision::kF32, WeightFormat::kFP8Block},
                                           Param{Precision::kF32, WeightFormat::kMXFP4}),
                         param_name);

TEST(LinearValidation, RejectsBadShapesAndMissingWorkspace) {
    DSV4_REQUIRE_GPU();
    auto buf = DeviceBuffer::allocate(1 << 20);
    ASSERT_TRUE(buf.is_ok());
    DeviceWeightView w{WeightFormat::kMXFP4, 64, 96, buf->data(), buf->as<uint8_t>()};
    LinearArgs a{buf->data(), 2, w, LinearOut::kBF16, buf->data(), nullptr, 0};
    Status s = sm90_linear(Precision::kReference, a, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("multiple of 128"), std::string::npos) << s.message();
    a.w.cols = 128;
    s = sm90_linear(Precision::kReference, a, nullptr);
    EXPECT_NE(s.message().find("workspace"), std::string::npos) << s.message();
    a.w.cols = 100;
    s = sm90_linear(Precision::kF32, a, nullptr);
    EXPECT_NE(s.message().find("multiple of 32"), std::string::npos) << s.message();
    a.w.format = WeightFormat::kFP8Block, a.w.scale = nullptr, a.w.cols = 128;
    s = sm90_linear(Precision::kF32, a, nullptr);
    EXPECT_NE(s.message().find("without scales"), std::string::npos) << s.message();
    a.w.scale = buf->as<uint8_t>(), a.x_codes = buf->as<uint8_t>();  // codes without their scales
    s = sm90_linear(Precision::kReference, a, nullptr);
    EXPECT_NE(s.message().find("needs both x_codes"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace dsv4::cuda
