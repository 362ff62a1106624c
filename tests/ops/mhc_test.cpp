// sm90_hc_pre, sm90_hc_post and sm90_hc_head against the CPU mHC ops (hc_pre, hc_post, hc_head) at V4-Flash
// (D = 4096) and V4-Pro (D = 7168) shapes and edge shapes, in both precisions, fresh random inputs, poisoned outputs.
#include "backend/cuda/kernels/mhc/mhc.h"

#include <gtest/gtest.h>

#include "backend/cpu/cpu_ops.h"
#include "core/thread_pool.h"
#include "ops/gpu_testing.h"
#include "ops/mhc_testing.h"
#include "testing/testing.h"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using backend::WeightFormat;
using namespace dsv4::cuda::testing;

struct HcCase {
    int64_t tokens, dim;
};
// Flash D 4096, Pro D 7168; 1 token, odd counts; the test models' D 128 (1 and 300 tokens); a small D; prefill
// passes that take the 32-token-tile kernel (mhc_rows.cuh: hc_pre from 2,048 tokens, hc_head from 8,192), with
// partial last tiles
const HcCase kCases[] = {{1, 4096}, {7, 4096},  {1, 7168},   {3, 7168},   {5, 128},     {33, 1024},
                         {1, 128},  {300, 128}, {2050, 128}, {8200, 128}, {2048, 4096}, {2049, 7168}};

class HcPreTest : public ::testing::TestWithParam<Precision> {};

TEST_P(HcPreTest, MatchesCpu) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    for (const HcCase& c : kCases) {
        SCOPED_TRACE("tokens " + std::to_string(c.tokens) + " dim " + std::to_string(c.dim));
        const int64_t T = c.tokens, D = c.dim;
        auto x = random_act(prec, rng, size_t(T * 4 * D), 1.0f);
        auto fn = normal(rng, size_t(24 * 4 * D), 0.0f, 0.02f);
        auto scale = normal(rng, 3, 1.0f, 0.3f);
        auto base = normal(rng, 24, 0.0f, 1.0f);
        std::vector<float> w_mix(size_t(T * 24)), w_pre(size_t(T * 4)), w_post(size_t(T * 4)), w_comb(size_t(T * 16)),
            w_out(size_t(T * D));
        backend::HcPreParams cp{x.data(), T, D, f32_view(fn, 24, 4 * D), f32_view(scale, 1, 3), f32_view(base, 1, 24),
                                20, 1e-6f, 1e-6f, w_mix.data(), w_pre.data(), w_post.data(), w_comb.data(),
                                w_out.data()};
        DSV4_ASSERT_OK(backend::cpu::hc_pre({prec, &pool()}, cp));

        auto dfn = upload_weight(f32_view(fn, 24, 4 * D), "hc_attn_fn");
        auto dscale = upload_weight(f32_view(scale, 1, 3), "hc_attn_scale");
        auto dbase = upload_weight(f32_view(base, 1, 24), "hc_attn_base");
        auto dx = act_to_device(prec, x);
        auto dmix = poisoned<float>(w_mix.size());
        auto dpre = poisoned<float>(w_pre.size());
        auto dpost = poisoned<float>(w_post.size());
        auto dcomb = poisoned<float>(w_comb.size());
        auto dout = act_poisoned(prec, w_out.size());
        ASSERT_TRUE(dfn.is_ok() && dscale.is_ok() && dbase.is_ok() && dx.is_ok() && dmix.is_ok() && dpre.is_ok() &&
                    dpost.is_ok() && dcomb.is_ok() && dout.is_ok());
        HcPreArgs a{dx->data(), T, D, dfn->view(), dscale->view(), dbase->view(), 20, 1e-6f, 1e-6f,
                    dmix->as<float>(), dpre->as<float>(), dpost->as<float>(), dcomb->as<float>(), dout->data()};
        DSV4_ASSERT_OK(sm90_hc_pre(prec, a, nullptr));
        DSV4_EXPECT_CLOSE(to_host<float>(*dmix, w_mix.size()), w_mix, kHcF32Tol);
        DSV4_EXPECT_CLOSE(to_host<float>(*dpre, w_pre.size()), w_pre, kHcF32Tol);
        DSV4_EXPECT_CLOSE(to_host<float>(*dpost, w_post.size()), w_post, kHcF32Tol);
        DSV4_EXPECT_CLOSE(to_host<float>(*dcomb, w_comb.size()), w_comb, kHcF32Tol);
        auto got = act_to_host(prec, *dout, w_out.size());
        DSV4_EXPECT_CLOSE(got, w_out, hc_act_tol(prec));
        if (prec == Precision::kReference) {
            EXPECT_LE(count_bit_differences(got, w_out), got.size() / 1000 + 1);
        }
    }
}

class HcPostTest : public ::testing::TestWithParam<Precision> {};

TEST_P(HcPostTest, BitExactToCpu) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    for (const HcCase& c : kCases) {
        SCOPED_TRACE("tokens " + std::to_string(c.tokens) + " dim " + std::to_string(c.dim));
        const int64_t T = c.tokens, D = c.dim;
        auto a = random_act(prec, rng, size_t(T * D), 1.0f);
        auto r = random_act(prec, rng, size_t(T * 4 * D), 1.0f);
        auto post = normal(rng, size_t(T * 4), 1.0f, 0.5f);
        auto comb = normal(rng, size_t(T * 16), 0.25f, 0.1f);
        std::vector<float> want(size_t(T * 4 * D));
        backend::HcPostParams cp{a.data(), r.data(), post.data(), comb.data(), T, D, want.data()};
        DSV4_ASSERT_OK(backend::cpu::hc_post({prec, &pool()}, cp));
        auto da = act_to_device(prec, a);
        auto dr = act_to_device(prec, r);
        auto dpost = to_device(post);
        auto dcomb = to_device(comb);
        auto dout = act_poisoned(prec, want.size());
        ASSERT_TRUE(da.is_ok() && dr.is_ok() && dpost.is_ok() && dcomb.is_ok() && dout.is_ok());
        HcPostArgs args{da->data(), dr->data(), dpost->as<float>(), dcomb->as<float>(), T, D, dout->data()};
        DSV4_ASSERT_OK(sm90_hc_post(prec, args, nullptr));
        auto got = act_to_host(prec, *dout, want.size());
        DSV4_EXPECT_CLOSE(got, want, hc_act_tol(prec));
        // the same IEEE operations in the same order: every element identical
        EXPECT_EQ(count_bit_differences(got, want), 0u);
    }
}

class HcHeadTest : public ::testing::TestWithParam<Precision> {};

TEST_P(HcHeadTest, MatchesCpu) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    for (const HcCase& c : kCases) {
        SCOPED_TRACE("tokens " + std::to_string(c.tokens) + " dim " + std::to_string(c.dim));
        const int64_t T = c.tokens, D = c.dim;
        auto x = random_act(prec, rng, size_t(T * 4 * D), 1.0f);
        auto fn = normal(rng, size_t(4 * 4 * D), 0.0f, 0.02f);
        auto scale = normal(rng, 1, 1.0f, 0.3f);
        auto base = normal(rng, 4, 0.0f, 1.0f);
        std::vector<float> w_pre(size_t(T * 4)), w_y(size_t(T * D));
        backend::HcHeadParams cp{x.data(), T, D, f32_view(fn, 4, 4 * D), f32_view(scale, 1, 1), f32_view(base, 1, 4),
                                 1e-6f, 1e-6f, w_pre.data(), w_y.data()};
        DSV4_ASSERT_OK(backend::cpu::hc_head({prec, &pool()}, cp));
        auto dfn = upload_weight(f32_view(fn, 4, 4 * D), "hc_head_fn");
        auto dscale = upload_weight(f32_view(scale, 1, 1), "hc_head_scale");
        auto dbase = upload_weight(f32_view(base, 1, 4), "hc_head_base");
        auto dx = act_to_device(prec, x);
        auto dpre = poisoned<float>(w_pre.size());
        auto dy = act_poisoned(prec, w_y.size());
        ASSERT_TRUE(dfn.is_ok() && dscale.is_ok() && dbase.is_ok() && dx.is_ok() && dpre.is_ok() && dy.is_ok());
        HcHeadArgs a{dx->data(), T, D, dfn->view(), dscale->view(), dbase->view(), 1e-6f, 1e-6f, dpre->as<float>(),
                     dy->data()};
        DSV4_ASSERT_OK(sm90_hc_head(prec, a, nullptr));
        DSV4_EXPECT_CLOSE(to_host<float>(*dpre, w_pre.size()), w_pre, kHcF32Tol);
        auto got = act_to_host(prec, *dy, w_y.size());
        DSV4_EXPECT_CLOSE(got, w_y, hc_act_tol(prec));
        if (prec == Precision::kReference) {
            EXPECT_LE(count_bit_differences(got, w_y), got.size() / 1000 + 1);
        }
    }
}

// hc_post run first inside hc_pre / hc_head (HcPostFirst, the engine's sub-block boundary): the streams it stores,
// the mixes, pre / post / comb and the collapse must be those of sm90_hc_post followed by the plain collapse, bit for
// bit (the same operations in the same order on the same stored values), with post / comb updated in place. The same
// for hc_pre with the split + Sinkhorn left to sm90_hc_split_sinkhorn on its mixes (HcPreArgs::sinkhorn_apart, the
// engine's decode steps): post / comb untouched by the collapse, then equal to the one-launch values.
class HcPostFirstTest : public ::testing::TestWithParam<Precision> {};

TEST_P(HcPostFirstTest, EqualsPostThenCollapse) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    for (const HcCase& c : kCases) {
        SCOPED_TRACE("tokens " + std::to_string(c.tokens) + " dim " + std::to_string(c.dim));
        const int64_t T = c.tokens, D = c.dim;
        const size_t n_streams = size_t(T * 4 * D);
        auto a = random_act(prec, rng, size_t(T * D), 1.0f);
        auto r = random_act(prec, rng, n_streams, 1.0f);
        auto post = normal(rng, size_t(T * 4), 1.0f, 0.5f);
        auto comb = normal(rng, size_t(T * 16), 0.25f, 0.1f);
        auto fn = normal(rng, size_t(24 * 4 * D), 0.0f, 0.02f);
        auto scale = normal(rng, 3, 1.0f, 0.3f);
        auto base = normal(rng, 24, 0.0f, 1.0f);
        auto dfn = upload_weight(f32_view(fn, 24, 4 * D), "hc_fn");
        auto dfn4 = upload_weight(f32_view(fn, 4, 4 * D), "hc_head_fn");
        auto dscale = upload_weight(f32_view(scale, 1, 3), "hc_scale");
        auto dscale1 = upload_weight(f32_view(scale, 1, 1), "hc_head_scale");
        auto dbase = upload_weight(f32_view(base, 1, 24), "hc_base");
        auto dbase4 = upload_weight(f32_view(base, 1, 4), "hc_head_base");
        auto da = act_to_device(prec, a);
        auto dr = act_to_device(prec, r);
        ASSERT_TRUE(dfn.is_ok() && dfn4.is_ok() && dscale.is_ok() && dscale1.is_ok() && dbase.is_ok() &&
                    dbase4.is_ok() && da.is_ok() && dr.is_ok());
        // one path's outputs; post / comb start as the previous sub-block's and are overwritten by hc_pre
        struct Run {
            Result<DeviceBuffer> streams, mix, pre, post, comb, out, head_pre, head_y;
        };
        auto fresh = [&]() {
            Run run{act_poisoned(prec, n_streams),       poisoned<float>(size_t(T * 24)), poisoned<float>(size_t(T * 4)),
                    to_device(post),                     to_device(comb),                 act_poisoned(prec, size_t(T * D)),
                    poisoned<float>(size_t(T * 4)),      act_poisoned(prec, size_t(T * D))};
            return run;
        };
        auto pre_args = [&](Run& run) {
            return HcPreArgs{run.streams->data(), T, D, dfn->view(), dscale->view(), dbase->view(), 20, 1e-6f, 1e-6f,
                             run.mix->as<float>(), run.pre->as<float>(), run.post->as<float>(), run.comb->as<float>(),
                             run.out->data()};
        };
        auto head_args = [&](Run& run) {
            return HcHeadArgs{run.streams->data(), T, D, dfn4->view(), dscale1->view(), dbase4->view(), 1e-6f, 1e-6f,
                              run.head_pre->as<float>(), run.head_y->data()};
        };
        enum class Mode { kHead, kPre, kPreApart };
        for (const Mode mode : {Mode::kHead, Mode::kPre, Mode::kPreApart}) {
            const bool head = mode == Mode::kHead;
            SCOPED_TRACE(head ? "hc_head" : mode == Mode::kPre ? "hc_pre" : "hc_pre, Sinkhorn apart");
            Run sep = fresh(), fused = fresh();
            for (Run* run : {&sep, &fused})
                ASSERT_TRUE(run->streams.is_ok() && run->mix.is_ok() && run->pre.is_ok() && run->post.is_ok() &&
                            run->comb.is_ok() && run->out.is_ok() && run->head_pre.is_ok() && run->head_y.is_ok());
            // separate: sm90_hc_post, then the collapse
            HcPostArgs pa{da->data(), dr->data(), sep.post->as<float>(), sep.comb->as<float>(), T, D,
                          sep.streams->data()};
            DSV4_ASSERT_OK(sm90_hc_post(prec, pa, nullptr));
            const HcPostFirst first{da->data(), dr->data(), fused.post->as<float>(), fused.comb->as<float>()};
            if (head) {
                DSV4_ASSERT_OK(sm90_hc_head(prec, head_args(sep), nullptr));
                HcHeadArgs h = head_args(fused);
                h.post_first = first;
                DSV4_ASSERT_OK(sm90_hc_head(prec, h, nullptr));
            } else {
                DSV4_ASSERT_OK(sm90_hc_pre(prec, pre_args(sep), nullptr));
                HcPreArgs h = pre_args(fused);
                h.post_first = first;
                h.sinkhorn_apart = mode == Mode::kPreApart;
                DSV4_ASSERT_OK(sm90_hc_pre(prec, h, nullptr));
                if (h.sinkhorn_apart) {  // the collapse left post / comb as the previous sub-block's
                    EXPECT_EQ(count_bit_differences(to_host<float>(*fused.post, post.size()), post), 0u);
                    EXPECT_EQ(count_bit_differences(to_host<float>(*fused.comb, comb.size()), comb), 0u);
                    const HcSinkhornArgs sa{
                        fused.mix->as<float>(), T, dscale->view(), dbase->view(), 20, 1e-6f, fused.post->as<float>(),
                        fused.comb->as<float>()};
                    DSV4_ASSERT_OK(sm90_hc_split_sinkhorn(sa, nullptr));
                }
            }
            auto same = [&](const DeviceBuffer& x, const DeviceBuffer& y, size_t n, bool act, const char* what) {
                const auto gx = act ? act_to_host(prec, x, n) : to_host<float>(x, n);
                const auto gy = act ? act_to_host(prec, y, n) : to_host<float>(y, n);
                EXPECT_EQ(count_bit_differences(gx, gy), 0u) << what;
            };
            same(*sep.streams, *fused.streams, n_streams, true, "streams");
            if (head) {
                same(*sep.head_pre, *fused.head_pre, size_t(T * 4), false, "pre");
                same(*sep.head_y, *fused.head_y, size_t(T * D), true, "y");
            } else {
                same(*sep.mix, *fused.mix, size_t(T * 24), false, "mixes");
                same(*sep.pre, *fused.pre, size_t(T * 4), false, "pre");
                same(*sep.post, *fused.post, size_t(T * 4), false, "post");
                same(*sep.comb, *fused.comb, size_t(T * 16), false, "comb");
                same(*sep.out, *fused.out, size_t(T * D), true, "x_out");
            }
        }
    }
}

TEST(MhcValidation, BadShapesAreClearErrors) {
    DSV4_REQUIRE_GPU();
    auto buf = DeviceBuffer::allocate(1 << 16);
    ASSERT_TRUE(buf.is_ok());
    HcPostArgs p{buf->data(), buf->data(), buf->as<float>(), buf->as<float>(), 1, 100, buf->data()};
    Status s = sm90_hc_post(Precision::kReference, p, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("multiple of 8"), std::string::npos) << s.message();
    HcPreArgs a{};
    a.x = a.x_out = buf->data();
    a.pre = a.post = a.comb = buf->as<float>();
    a.tokens = 1, a.dim = 64;
    s = sm90_hc_pre(Precision::kReference, a, nullptr);
    EXPECT_NE(s.message().find("fn must be an f32 tensor"), std::string::npos) << s.message();
    // hc_post first: all four inputs or none, and its residual is not the streams it writes
    a.dim = 128;
    a.post_first.a = buf->data();
    s = sm90_hc_pre(Precision::kReference, a, nullptr);
    EXPECT_NE(s.message().find("or none of them"), std::string::npos) << s.message();
    a.post_first = {buf->data(), a.x, buf->as<float>(), buf->as<float>()};
    s = sm90_hc_pre(Precision::kReference, a, nullptr);
    EXPECT_NE(s.message().find("must not alias"), std::string::npos) << s.message();
    // the Sinkhorn apart needs the mixes it is computed from
    a.post_first = {};
    a.sinkhorn_apart = true;
    s = sm90_hc_pre(Precision::kReference, a, nullptr);
    EXPECT_NE(s.message().find("needs the mixes"), std::string::npos) << s.message();
    HcSinkhornArgs sa{};
    sa.mixes = buf->as<float>(), sa.post = sa.comb = buf->as<float>(), sa.tokens = 1;
    s = sm90_hc_split_sinkhorn(sa, nullptr);
    EXPECT_NE(s.message().find("scale must be an f32 tensor"), std::string::npos) << s.message();
}

const auto kPrecisions = ::testing::Values(Precision::kReference, Precision::kF32);
std::string precision_label(const ::testing::TestParamInfo<Precision>& i) { return backend::precision_name(i.param); }
INSTANTIATE_TEST_SUITE_P(Cuda, HcPreTest, kPrecisions, precision_label);
INSTANTIATE_TEST_SUITE_P(Cuda, HcPostTest, kPrecisions, precision_label);
INSTANTIATE_TEST_SUITE_P(Cuda, HcPostFirstTest, kPrecisions, precision_label);
INSTANTIATE_TEST_SUITE_P(Cuda, HcHeadTest, kPrecisions, precision_label);

}  // namespace
}  // namespace dsv4::cuda
