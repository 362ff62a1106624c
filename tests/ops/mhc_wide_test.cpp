// sm90_hc_pre's wide decode collapse with the sub-block's RMSNorm (HcPreArgs::wide) at V4-Flash (D = 4096), V4-Pro
// (D = 7168) and the test models' (128) widths, 1 to 64 tokens, with and without the previous sub-block's hc_post, in
// both precisions, fresh random inputs, poisoned outputs: against the CPU's hc_pre followed by its rmsnorm; the norm
// and its e4m3 codes bit for bit against sm90_rmsnorm run on the launch's own x_out; the streams bit for bit against
// sm90_hc_post; the tickets left zero, and a second launch the same bits.
#include <gtest/gtest.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/kernels/mhc/mhc.h"
#include "backend/cuda/kernels/norm_rope/norm_rope.h"
#include "ops/gpu_testing.h"
#include "ops/mhc_testing.h"
#include "testing/testing.h"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using backend::WeightFormat;
using namespace dsv4::cuda::testing;

struct WideCase {
    int64_t tokens, dim;
};
// Flash and Pro widths; the test models' 128 (one block, half of it past the streams) and a width whose last block is
// partly past them (1,152: 4.5 blocks)
const WideCase kWideCases[] = {{1, 4096}, {8, 4096}, {64, 4096}, {1, 7168}, {3, 7168}, {1, 128}, {5, 128}, {2, 1152}};

// One launch's outputs.
struct WideRun {
    Result<DeviceBuffer> streams, mix, pre, out, y, codes, scales, tickets, partials;
};

class HcWideTest : public ::testing::TestWithParam<Precision> {};

TEST_P(HcWideTest, MatchesCpuAndTheNormOnItsOwnCollapse) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    const bool ref = prec == Precision::kReference;
    std::mt19937_64 rng(fresh_seed());
    for (const WideCase& c : kWideCases) {
        for (const bool post_first : {false, true}) {
            for (const WeightFormat wf : {WeightFormat::kBF16, WeightFormat::kF32}) {
                SCOPED_TRACE("tokens " + std::to_string(c.tokens) + " dim " + std::to_string(c.dim) +
                             (post_first ? ", hc_post first" : "") +
                             (wf == WeightFormat::kF32 ? ", f32 norm weight" : ", bf16 norm weight"));
                const int64_t T = c.tokens, D = c.dim, blocks = hc_wide_blocks(D);
                ASSERT_GT(blocks, 0);
                const size_t n_streams = size_t(T * 4 * D);
                auto x = random_act(prec, rng, n_streams, 1.0f);
                auto a = random_act(prec, rng, size_t(T * D), 1.0f);
                auto post = normal(rng, size_t(T * 4), 1.0f, 0.5f);
                auto comb = normal(rng, size_t(T * 16), 0.25f, 0.1f);
                auto fn = normal(rng, size_t(24 * 4 * D), 0.0f, 0.02f);
                auto scale = normal(rng, 3, 1.0f, 0.3f);
                auto base = normal(rng, 24, 0.0f, 1.0f);
                auto nw = random_bf16(rng, size_t(D), 0.5f);
                const auto nw_bits = to_bf16_bits(nw);
                const backend::WeightView nwv = wf == WeightFormat::kBF16
                                                    ? backend::WeightView{wf, 1, D, nw_bits.data(), nullptr}
                                                    : backend::WeightView{wf, 1, D, nw.data(), nullptr};
                auto dfn = upload_weight(f32_view(fn, 24, 4 * D), "hc_fn");
                auto dscale = upload_weight(f32_view(scale, 1, 3), "hc_scale");
                auto dbase = upload_weight(f32_view(base, 1, 24), "hc_base");
                auto dnw = upload_weight(nwv, "attn_norm.weight");
                auto dx = act_to_device(prec, x);
                auto da = act_to_device(prec, a);
                auto dpost = to_device(post);
                auto dcomb = to_device(comb);
                ASSERT_TRUE(dfn.is_ok() && dscale.is_ok() && dbase.is_ok() && dnw.is_ok() && dx.is_ok() && da.is_ok() &&
                            dpost.is_ok() && dcomb.is_ok());
                // with hc_post first the streams are sm90_hc_post's (bit-exact to the CPU's: HcPostTest)
                auto want_streams = act_poisoned(prec, n_streams);
                ASSERT_TRUE(want_streams.is_ok());
                if (post_first) {
                    DSV4_ASSERT_OK(sm90_hc_post(prec,
                                                HcPostArgs{da->data(), dx->data(), dpost->as<float>(),
                                                           dcomb->as<float>(), T, D, want_streams->data()},
                                                nullptr));
                    x = act_to_host(prec, *want_streams, n_streams);
                }
                // the CPU: hc_pre, then the weighted RMSNorm of its collapse
                std::vector<float> w_mix(size_t(T * 24)), w_pre(size_t(T * 4)), w_post(size_t(T * 4)),
                    w_comb(size_t(T * 16)), w_out(size_t(T * D)), w_y(size_t(T * D));
                backend::HcPreParams cp{x.data(),
                                        T,
                                        D,
                                        f32_view(fn, 24, 4 * D),
                                        f32_view(scale, 1, 3),
                                        f32_view(base, 1, 24),
                                        20,
                                        1e-6f,
                                        1e-6f,
                                        w_mix.data(),
                                        w_pre.data(),
                                        w_post.data(),
                                        w_comb.data(),
                                        w_out.data()};
                DSV4_ASSERT_OK(backend::cpu::hc_pre({prec, &pool()}, cp));
                DSV4_ASSERT_OK(backend::cpu::rmsnorm({prec, &pool()}, {w_out.data(), T, D, nwv, 1e-6f, w_y.data()}));

                auto fresh = [&]() {
                    return WideRun{post_first ? act_poisoned(prec, n_streams) : act_to_device(prec, x),
                                   poisoned<float>(size_t(T * 24)),
                                   poisoned<float>(size_t(T * 4)),
                                   act_poisoned(prec, size_t(T * D)),
                                   act_poisoned(prec, size_t(T * D)),
                                   poisoned<uint8_t>(size_t(T * D)),
                                   poisoned<float>(size_t(T * D / 128)),
                                   to_device(std::vector<int32_t>(size_t(T), 0)),
                                   poisoned<double>(size_t(T * blocks * 25))};
                };
                auto launch = [&](WideRun& run) {
                    ASSERT_TRUE(run.streams.is_ok() && run.mix.is_ok() && run.pre.is_ok() && run.out.is_ok() &&
                                run.y.is_ok() && run.codes.is_ok() && run.scales.is_ok() && run.tickets.is_ok() &&
                                run.partials.is_ok());
                    HcPreArgs h;
                    h.x = run.streams->data();
                    h.tokens = T, h.dim = D;
                    h.fn = dfn->view(), h.scale = dscale->view(), h.base = dbase->view();
                    h.mixes = run.mix->as<float>(), h.pre = run.pre->as<float>();
                    h.x_out = run.out->data();
                    h.sinkhorn_apart = true;
                    if (post_first) h.post_first = {da->data(), dx->data(), dpost->as<float>(), dcomb->as<float>()};
                    h.wide.counters = run.tickets->as<int32_t>();
                    h.wide.partials = run.partials->as<double>();
                    h.wide.weight = dnw->view();
                    h.wide.eps = 1e-6f;
                    h.wide.y = run.y->data();
                    if (ref) h.wide.codes = run.codes->as<uint8_t>(), h.wide.scales = run.scales->as<float>();
                    DSV4_ASSERT_OK(sm90_hc_pre(prec, h, nullptr));
                };
                WideRun run = fresh();
                launch(run);
                if (HasFatalFailure()) return;

                DSV4_EXPECT_CLOSE(to_host<float>(*run.mix, w_mix.size()), w_mix, kHcF32Tol);
                DSV4_EXPECT_CLOSE(to_host<float>(*run.pre, w_pre.size()), w_pre, kHcF32Tol);
                const auto out = act_to_host(prec, *run.out, w_out.size());
                DSV4_EXPECT_CLOSE(out, w_out, hc_act_tol(prec));
                const auto y = act_to_host(prec, *run.y, w_y.size());
                DSV4_EXPECT_CLOSE(y, w_y, hc_act_tol(prec));
                // bf16 rows round away the last-bit differences of another summation order than the CPU's; f32 rows
                // keep them (one in a token's pre reaches its whole row), so there only the tolerance holds, as in
                // HcPreTest
                if (ref) {
                    EXPECT_LE(count_bit_differences(out, w_out), out.size() / 1000 + 1);
                    EXPECT_LE(count_bit_differences(y, w_y), y.size() / 1000 + 1);
                }
                if (post_first) {
                    EXPECT_EQ(differing_bytes(*run.streams, *want_streams, n_streams * (ref ? 2 : 4)), 0u) << "streams";
                }
                EXPECT_EQ(to_host<int32_t>(*run.tickets, size_t(T)), std::vector<int32_t>(size_t(T), 0))
                    << "tickets left non-zero";

                // sm90_rmsnorm on the launch's own x_out: the same y and codes, bit for bit
                auto y2 = act_poisoned(prec, size_t(T * D));
                auto codes2 = poisoned<uint8_t>(size_t(T * D));
                auto scales2 = poisoned<float>(size_t(T * D / 128));
                ASSERT_TRUE(y2.is_ok() && codes2.is_ok() && scales2.is_ok());
                RmsNormArgs na{run.out->data(), T, D, dnw->view(), 1e-6f, y2->data()};
                if (ref) na.codes = codes2->as<uint8_t>(), na.scales = scales2->as<float>();
                DSV4_ASSERT_OK(sm90_rmsnorm(prec, na, nullptr));
                EXPECT_EQ(differing_bytes(*run.y, *y2, size_t(T * D) * (ref ? 2 : 4)), 0u) << "y";
                if (ref) {
                    EXPECT_EQ(differing_bytes(*run.codes, *codes2, size_t(T * D)), 0u) << "codes";
                    EXPECT_EQ(differing_bytes(*run.scales, *scales2, size_t(T * D / 128) * 4), 0u) << "scales";
                }

                // a second launch: the same bits (a fixed summation order, whichever block arrives last)
                WideRun again = fresh();
                launch(again);
                if (HasFatalFailure()) return;
                EXPECT_EQ(differing_bytes(*run.mix, *again.mix, size_t(T * 24) * 4), 0u) << "mixes again";
                EXPECT_EQ(differing_bytes(*run.y, *again.y, size_t(T * D) * (ref ? 2 : 4)), 0u) << "y again";
            }
        }
    }
}

TEST(HcWideValidation, BadArgumentsAreClearErrors) {
    DSV4_REQUIRE_GPU();
    auto buf = DeviceBuffer::allocate(1 << 22);
    ASSERT_TRUE(buf.is_ok());
    std::vector<float> fn(size_t(24 * 4 * 4096)), three(3), base(24), nw(4096);
    auto dfn = upload_weight(f32_view(fn, 24, 4 * 4096), "hc_fn");
    auto dscale = upload_weight(f32_view(three, 1, 3), "hc_scale");
    auto dbase = upload_weight(f32_view(base, 1, 24), "hc_base");
    auto dnw = upload_weight(f32_view(nw, 1, 4096), "norm");
    ASSERT_TRUE(dfn.is_ok() && dscale.is_ok() && dbase.is_ok() && dnw.is_ok());
    uint8_t* p = buf->as<uint8_t>();
    HcPreArgs h;
    h.x = p, h.tokens = 1, h.dim = 4096, h.fn = dfn->view(), h.scale = dscale->view(), h.base = dbase->view();
    h.mixes = reinterpret_cast<float*>(p + (1 << 20)), h.pre = h.mixes + 64, h.x_out = p + (2 << 20);
    h.sinkhorn_apart = true;
    h.wide.counters = reinterpret_cast<int32_t*>(p + (3 << 20));
    h.wide.partials = reinterpret_cast<double*>(p + (3 << 20) + 4096);
    h.wide.weight = dnw->view();
    h.wide.y = p + (2 << 20) + 65536;
    auto expect = [&](HcPreArgs args, const char* what) {
        const Status s = sm90_hc_pre(Precision::kReference, args, nullptr);
        EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what;
        EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
    };
    HcPreArgs b = h;
    b.sinkhorn_apart = false, b.post = h.mixes, b.comb = h.mixes;
    expect(b, "needs sinkhorn_apart");
    b = h;
    b.wide.y = nullptr;
    expect(b, "null counters, partials or y");
    b = h;
    b.wide.weight = DeviceWeightView{};
    expect(b, "the norm weight must be");
    b = h;
    b.wide.codes = p;
    expect(b, "codes and scales go together");
    b = h;
    b.dim = 8200;  // past the RMSNorm's 8,192 (fn sized to match, so that the width is what fails)
    std::vector<float> fn_wide(size_t(24 * 4 * 8200));
    auto dfn_wide = upload_weight(f32_view(fn_wide, 24, 4 * 8200), "hc_fn");
    ASSERT_TRUE(dfn_wide.is_ok());
    b.fn = dfn_wide->view();
    expect(b, "must be a multiple of 8 and at most 8192");
    EXPECT_EQ(hc_wide_blocks(4096), 16);
    EXPECT_EQ(hc_wide_blocks(7168), 28);
    EXPECT_EQ(hc_wide_blocks(128), 1);
    EXPECT_EQ(hc_wide_blocks(1152), 5);
    EXPECT_EQ(hc_wide_blocks(8192), 32);
    EXPECT_EQ(hc_wide_blocks(8200), 0);
    EXPECT_EQ(hc_wide_blocks(100), 0);
}

INSTANTIATE_TEST_SUITE_P(Cuda, HcWideTest, ::testing::Values(Precision::kReference, Precision::kF32),
                         [](const ::testing::TestParamInfo<Precision>& i) { return backend::precision_name(i.param); });

}  // namespace
}  // namespace dsv4::cuda
