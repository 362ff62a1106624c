// sm90_rmsnorm, sm90_q_head_norm_rope and sm90_rope against the CPU reference ops (rmsnorm, q_head_norm, rope) at
// V4-Flash and V4-Pro shapes and edge shapes, in both precisions, on fresh random inputs with poisoned outputs.
#include "backend/cuda/kernels/norm_rope/norm_rope.h"

#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/kernels/act_quant/act_quant.h"
#include "core/thread_pool.h"
#include "ops/gpu_testing.h"
#include "testing/testing.h"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using namespace dsv4::cuda::testing;

// Host activations -> device in the precision's type (bf16 bits or f32); outputs come back as f32 values.
Result<DeviceBuffer> upload_act(Precision p, const std::vector<float>& v) {
    return p == Precision::kReference ? to_device(to_bf16_bits(v)) : to_device(v);
}
std::vector<float> download_act(Precision p, const DeviceBuffer& b, size_t n) {
    return p == Precision::kReference ? from_bf16_bits(to_host<uint16_t>(b, n)) : to_host<float>(b, n);
}
// rel_l2 bars: bf16 outputs (DESIGN §3); f32 mode runs the same f32 arithmetic, so only cos/sin may differ by an ulp.
// (q norm and RoPE work in place, so their outputs cannot be poisoned; every element is compared instead.)
double tolerance(Precision p) { return p == Precision::kReference ? 2e-3 : 1e-6; }

std::vector<int64_t> random_positions(std::mt19937_64& rng, int64_t n) {
    std::uniform_int_distribution<int64_t> d(0, (1 << 20) - 1);
    std::vector<int64_t> pos(static_cast<size_t>(n));
    for (auto& p : pos) p = d(rng);
    if (n > 0) pos[0] = 0;
    if (n > 1) pos[1] = 127;
    return pos;
}

backend::RopeFreqs yarn_freqs() { return backend::rope_freqs(160000, 16, 65536, 32, 1); }
backend::RopeFreqs plain_freqs() { return backend::rope_freqs(10000, 1, 0, 32, 1); }

struct NormCase {
    int64_t rows, dim;
};

class RmsNormTest : public ::testing::TestWithParam<Precision> {};

TEST_P(RmsNormTest, MatchesCpuAtModelShapes) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    // attn/ffn norm (D = 4096 Flash, 7168 Pro), q_norm (1024, 1536), kv_norm (512), indexer 128; 1 token, odd counts
    // the test models (hidden 128, q_lora 128, kv 512, indexer 128) at 1 and 300 tokens
    const NormCase cases[] = {{1, 4096}, {33, 4096}, {1, 7168}, {19, 7168}, {5, 1024}, {130, 1536}, {7, 512}, {3, 128},
                              {257, 4096}, {1, 128}, {300, 128}, {300, 512}};
    for (const NormCase& c : cases) {
        for (const bool weighted : {true, false}) {
            SCOPED_TRACE("rows " + std::to_string(c.rows) + " dim " + std::to_string(c.dim) +
                         (weighted ? " weighted" : " unweighted"));
            auto x = random_bf16(rng, size_t(c.rows * c.dim), 2.0f);
            auto w = random_bf16(rng, size_t(c.dim), 0.5f);
            auto wbits = to_bf16_bits(w);
            backend::WeightView wv{backend::WeightFormat::kBF16, 1, c.dim, wbits.data(), nullptr};
            std::vector<float> want(x.size());
            backend::RmsNormParams cp{x.data(), c.rows, c.dim, weighted ? wv : backend::WeightView{}, 1e-6f,
                                      want.data()};
            DSV4_ASSERT_OK(backend::cpu::rmsnorm({prec, &pool()}, cp));

            auto dx = upload_act(prec, x);
            ASSERT_TRUE(dx.is_ok()) << dx.status().to_string();
            auto dy = poisoned<float>(x.size());
            ASSERT_TRUE(dy.is_ok());
            auto dw = upload_weight(wv, "norm.weight");
            ASSERT_TRUE(dw.is_ok()) << dw.status().to_string();
            RmsNormArgs a{dx->data(), c.rows, c.dim, weighted ? dw->view() : DeviceWeightView{}, 1e-6f, dy->data()};
            DSV4_ASSERT_OK(sm90_rmsnorm(prec, a, nullptr));
            auto got = download_act(prec, *dy, x.size());
            DSV4_EXPECT_CLOSE(got, want, tolerance(prec));
            // Same f32 math and the same f64 sum of squares: bit-exact but for rare rounding-boundary flips.
            EXPECT_LE(count_bit_differences(got, want), got.size() / 1000 + 1);
        }
    }
}

// The e4m3 quantisation fused into the norm's launch (RmsNormArgs::codes) against sm90_act_quant_e4m3 run on the
// norm's own output: the engine quantises normed and qr this way, so the two must be the same bits.
TEST(RmsNormFusedQuant, SameBitsAsActQuantOnTheOutput) {
    DSV4_REQUIRE_GPU();
    std::mt19937_64 rng(fresh_seed());
    // D 4096 / 7168 and q_lora 1024 / 1536 at 1 and several tokens; 384 and 1152 put a pass boundary mid-warp (the
    // quantisation groups are half warps); 128 the test models' width
    const NormCase cases[] = {{1, 4096},   {33, 4096}, {1, 7168}, {9, 7168}, {1, 1024},
                              {130, 1024}, {5, 1536},  {3, 384},  {2, 1152}, {300, 128}};
    for (const NormCase& c : cases) {
        for (const auto format : {backend::WeightFormat::kBF16, backend::WeightFormat::kF32}) {
            SCOPED_TRACE("rows " + std::to_string(c.rows) + " dim " + std::to_string(c.dim) +
                         (format == backend::WeightFormat::kF32 ? " f32 weight" : " bf16 weight"));
            const size_t n = size_t(c.rows * c.dim), nb = n / 128;
            auto x = random_bf16(rng, n, 2.0f);
            for (size_t i = 0; i < std::min<size_t>(n, 128); ++i) x[i] *= 1e-6f;  // a block near the amax floor
            auto w = random_bf16(rng, size_t(c.dim), 0.5f);
            auto wbits = to_bf16_bits(w);
            backend::WeightView wv = format == backend::WeightFormat::kF32
                                         ? backend::WeightView{format, 1, c.dim, w.data(), nullptr}
                                         : backend::WeightView{format, 1, c.dim, wbits.data(), nullptr};
            auto dx = to_device(to_bf16_bits(x));
            auto dw = upload_weight(wv, "norm.weight");
            auto y_plain = poisoned<uint16_t>(n), y_fused = poisoned<uint16_t>(n);
            auto codes_plain = poisoned<uint8_t>(n), codes_fused = poisoned<uint8_t>(n);
            auto scales_plain = poisoned<float>(nb), scales_fused = poisoned<float>(nb);
            ASSERT_TRUE(dx.is_ok() && dw.is_ok() && y_plain.is_ok() && y_fused.is_ok() && codes_plain.is_ok() &&
                        codes_fused.is_ok() && scales_plain.is_ok() && scales_fused.is_ok());
            RmsNormArgs a{dx->data(), c.rows, c.dim, dw->view(), 1e-6f, y_plain->data()};
            DSV4_ASSERT_OK(sm90_rmsnorm(Precision::kReference, a, nullptr));
            ActQuantArgs q{y_plain->data(),           c.rows,  c.dim,  128, codes_plain->as<uint8_t>(),
                           scales_plain->as<float>(), nullptr, nullptr};
            DSV4_ASSERT_OK(sm90_act_quant_e4m3(q, nullptr));
            a.y = y_fused->data();
            a.codes = codes_fused->as<uint8_t>();
            a.scales = scales_fused->as<float>();
            DSV4_ASSERT_OK(sm90_rmsnorm(Precision::kReference, a, nullptr));
            EXPECT_TRUE(dsv4::testing::bytes_equal(to_host<uint16_t>(*y_fused, n), to_host<uint16_t>(*y_plain, n)))
                << "normed rows differ";
            EXPECT_TRUE(
                dsv4::testing::bytes_equal(to_host<uint8_t>(*codes_fused, n), to_host<uint8_t>(*codes_plain, n)))
                << "e4m3 codes differ";
            EXPECT_TRUE(
                dsv4::testing::bytes_equal(to_host<float>(*scales_fused, nb), to_host<float>(*scales_plain, nb)))
                << "scales differ";
        }
    }
}

class QHeadNormRopeTest : public ::testing::TestWithParam<Precision> {};

TEST_P(QHeadNormRopeTest, FusedMatchesCpuNormThenRope) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    struct Case {
        int64_t tokens, heads;
        bool rope, yarn;
    };
    // Flash 64 heads, Pro 128 heads, 512-d; rope off (the norm alone), plain and YaRN tables.
    // the test models' 4 heads (1 and 300 tokens); head counts off the 4-head warp group (1, 6). Launches of fewer
    // than 4,096 head vectors run one head per warp, larger ones 4 (65 x 64, 700 x 6: a ragged last group).
    const Case cases[] = {{1, 64, true, true},   {37, 64, true, false}, {1, 128, true, true},
                          {9, 128, false, true}, {65, 64, true, true},  {1, 4, true, true},
                          {300, 4, true, false}, {7, 1, true, true},    {3, 6, false, true},
                          {700, 6, true, true}};
    for (const Case& c : cases) {
        SCOPED_TRACE("tokens " + std::to_string(c.tokens) + " heads " + std::to_string(c.heads));
        const int64_t n = c.tokens * c.heads * 512;
        auto q = random_bf16(rng, size_t(n), 3.0f);
        auto pos = random_positions(rng, c.tokens);
        const auto freqs = c.yarn ? yarn_freqs() : plain_freqs();
        std::vector<float> want = q;
        const backend::Exec ex{prec, &pool()};
        DSV4_ASSERT_OK(backend::cpu::q_head_norm(ex, {want.data(), c.tokens, c.heads, 512, 1e-6f}));
        if (c.rope) {
            backend::RopeParams rp{want.data(), c.tokens, c.heads, 512, 448, pos.data(), &freqs, false};
            DSV4_ASSERT_OK(backend::cpu::rope(ex, rp));
        }
        auto dq = upload_act(prec, q);
        auto dpos = to_device(pos);
        ASSERT_TRUE(dq.is_ok() && dpos.is_ok());
        QHeadNormRopeArgs a{dq->data(), c.tokens, c.heads, 512, 1e-6f, c.rope, dpos->as<int64_t>(), freqs};
        DSV4_ASSERT_OK(sm90_q_head_norm_rope(prec, a, nullptr));
        auto got = download_act(prec, *dq, size_t(n));
        DSV4_EXPECT_CLOSE(got, want, tolerance(prec));
        if (prec == Precision::kReference) {
            EXPECT_LE(count_bit_differences(got, want), got.size() / 200 + 1);
        }
    }
}

class RopeTest : public ::testing::TestWithParam<Precision> {};

TEST_P(RopeTest, MatchesCpuForKvIndexerAndDerotation) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    struct Case {
        int64_t tokens, vecs, stride, offset;
        bool inverse, yarn;
    };
    // window kv [T, 512] at 448; indexer q [T, 64, 128] at 64; attention output de-rotation [T, 128, 512].
    const Case cases[] = {{1, 1, 512, 448, false, true},  {77, 1, 512, 448, false, false},
                          {5, 64, 128, 64, false, true},  {1, 128, 512, 448, true, true},
                          {13, 64, 512, 448, true, false},
                          // the test models: indexer q [T, 4, 128], de-rotation [T, 4, 512], 300-token prefill
                          {1, 4, 128, 64, false, true},   {300, 4, 128, 64, false, false},
                          {300, 4, 512, 448, true, true}};
    for (const Case& c : cases) {
        SCOPED_TRACE("tokens " + std::to_string(c.tokens) + " vecs " + std::to_string(c.vecs));
        const int64_t n = c.tokens * c.vecs * c.stride;
        auto x = random_bf16(rng, size_t(n), 1.0f);
        auto pos = random_positions(rng, c.tokens);
        const auto freqs = c.yarn ? yarn_freqs() : plain_freqs();
        std::vector<float> want = x;
        backend::RopeParams rp{want.data(), c.tokens, c.vecs, c.stride, c.offset, pos.data(), &freqs, c.inverse};
        DSV4_ASSERT_OK(backend::cpu::rope({prec, &pool()}, rp));
        auto dx = upload_act(prec, x);
        auto dpos = to_device(pos);
        ASSERT_TRUE(dx.is_ok() && dpos.is_ok());
        RopeArgs a{dx->data(), c.tokens, c.vecs, c.stride, c.offset, dpos->as<int64_t>(), freqs, c.inverse};
        DSV4_ASSERT_OK(sm90_rope(prec, a, nullptr));
        auto got = download_act(prec, *dx, size_t(n));
        DSV4_EXPECT_CLOSE(got, want, tolerance(prec));
        // bf16 outputs hide the last-bit cos/sin differences (f64-rounded here, f32 libm on the CPU) but for rare
        // rounding-boundary flips; f32 outputs show them, so there only the rel_l2 bar applies.
        if (prec == Precision::kReference) {
            EXPECT_LE(count_bit_differences(got, want), got.size() / 1000 + 1);
        }
    }
}

TEST(NormRopeValidation, BadShapesAreClearErrors) {
    DSV4_REQUIRE_GPU();
    auto buf = DeviceBuffer::allocate(1 << 16);
    ASSERT_TRUE(buf.is_ok());
    RmsNormArgs a{buf->data(), 1, 100, {}, 1e-6f, buf->data()};
    Status s = sm90_rmsnorm(Precision::kReference, a, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("multiple of 8"), std::string::npos) << s.message();
    // the fused quantisation: both outputs or neither, reference precision, whole 128-blocks
    RmsNormArgs f{buf->data(), 1, 256, {}, 1e-6f, buf->data(), buf->as<uint8_t>(), nullptr};
    s = sm90_rmsnorm(Precision::kReference, f, nullptr);
    EXPECT_NE(s.message().find("codes and scales go together"), std::string::npos) << s.message();
    f.scales = buf->as<float>();
    s = sm90_rmsnorm(Precision::kF32, f, nullptr);
    EXPECT_NE(s.message().find("reference precision"), std::string::npos) << s.message();
    f.dim = 136;
    s = sm90_rmsnorm(Precision::kReference, f, nullptr);
    EXPECT_NE(s.message().find("dim % 128"), std::string::npos) << s.message();
    RopeArgs r{buf->data(), 1, 1, 100, 64, buf->as<int64_t>(), {}, false};
    s = sm90_rope(Precision::kReference, r, nullptr);
    EXPECT_NE(s.message().find("outside the vector"), std::string::npos) << s.message();
}

const auto kPrecisions = ::testing::Values(Precision::kReference, Precision::kF32);
std::string precision_label(const ::testing::TestParamInfo<Precision>& i) { return backend::precision_name(i.param); }
INSTANTIATE_TEST_SUITE_P(Cuda, RmsNormTest, kPrecisions, precision_label);
INSTANTIATE_TEST_SUITE_P(Cuda, QHeadNormRopeTest, kPrecisions, precision_label);
INSTANTIATE_TEST_SUITE_P(Cuda, RopeTest, kPrecisions, precision_label);

}  // namespace
}  // namespace dsv4::cuda
