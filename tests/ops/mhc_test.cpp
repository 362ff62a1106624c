// sm90_hc_pre, sm90_hc_post and sm90_hc_head against the CPU mHC ops (hc_pre, hc_post, hc_head) at V4-Flash
// (D = 4096) and V4-Pro (D = 7168) shapes and edge shapes, in both precisions, fresh random inputs, poisoned outputs.
#include "backend/cuda/kernels/mhc/mhc.h"

#include <gtest/gtest.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/kernels/act_quant/act_quant.h"
#include "backend/cuda/kernels/norm_rope/norm_rope.h"
#include "core/thread_pool.h"
#include "ops/gpu_testing.h"
#include "testing/testing.h"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using backend::WeightFormat;
using namespace dsv4::cuda::testing;

std::vector<float> normal(std::mt19937_64& rng, size_t n, float mean, float sigma) {
    std::normal_distribution<float> d(mean, sigma);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}
backend::WeightView f32_view(const std::vector<float>& v, int64_t rows, int64_t cols) {
    return {WeightFormat::kF32, rows, cols, v.data(), nullptr};
}

// mix vectors, pre / post / comb: f32 math on both sides (f64 dot products), only last-bit differences
constexpr double kF32Tol = 1e-5;
double act_tol(Precision p) { return p == Precision::kReference ? 2e-3 : 1e-6; }

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
        DSV4_EXPECT_CLOSE(to_host<float>(*dmix, w_mix.size()), w_mix, kF32Tol);
        DSV4_EXPECT_CLOSE(to_host<float>(*dpre, w_pre.size()), w_pre, kF32Tol);
        DSV4_EXPECT_CLOSE(to_host<float>(*dpost, w_post.size()), w_post, kF32Tol);
        DSV4_EXPECT_CLOSE(to_host<float>(*dcomb, w_comb.size()), w_comb, kF32Tol);
        auto got = act_to_host(prec, *dout, w_out.size());
        DSV4_EXPECT_CLOSE(got, w_out, act_tol(prec));
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
        DSV4_EXPECT_CLOSE(got, want, act_tol(prec));
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
        DSV4_EXPECT_CLOSE(to_host<float>(*dpre, w_pre.size()), w_pre, kF32Tol);
        auto got = act_to_host(prec, *dy, w_y.size());
        DSV4_EXPECT_CLOSE(got, w_y, act_tol(prec));
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

// The sub-block's RMSNorm run in the collapse's launch (HcNormAfter; the engine's sub-block entry and head): the
// collapse's own outputs as without it, and the normed rows — with codes requested, their e4m3 codes and scales —
// those of sm90_rmsnorm on the collapsed output (then sm90_act_quant_e4m3, block 128, on the normed rows), bit for
// bit. Token counts take the cluster launch at several cluster sizes (on the 132-SM H200: 1, 2, 5 tokens -> 8 blocks
// a token, 40 -> 7, 70 -> 4, 100 -> 3, 200 -> 2), the one-block launch (300) and the 32-token tiles followed by
// sm90_rmsnorm (hc_pre from 2,048 tokens, hc_head from 8,192: at a small width). Modes: hc_pre alone; hc_pre after
// hc_post with the Sinkhorn apart (the decode steps' form); hc_head, after hc_post on odd cases. The weight is bf16
// or f32 by turns, its first 128 channels tiny (a quantisation block under the amax floor).
class HcNormAfterTest : public ::testing::TestWithParam<Precision> {};

TEST_P(HcNormAfterTest, EqualsCollapseThenRmsNorm) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    const bool ref = prec == Precision::kReference;
    const size_t act_bytes = ref ? 2 : 4;
    std::mt19937_64 rng(fresh_seed());
    std::vector<HcCase> cases;
    for (const int64_t D : {4096, 7168})
        for (const int64_t T : {1, 2, 5, 40, 70, 100, 200, 300, 2048}) cases.push_back({T, D});
    cases.push_back({8200, 512});
    for (size_t ci = 0; ci < cases.size(); ++ci) {
        const int64_t T = cases[ci].tokens, D = cases[ci].dim;
        const size_t n_streams = size_t(T * 4 * D), n_act = size_t(T * D), n_scales = n_act / 128;
        auto x = random_act(prec, rng, n_streams, 1.0f);
        auto a = random_act(prec, rng, n_act, 1.0f);
        auto r = random_act(prec, rng, n_streams, 1.0f);
        auto post = normal(rng, size_t(T * 4), 1.0f, 0.5f);
        auto comb = normal(rng, size_t(T * 16), 0.25f, 0.1f);
        auto fn = normal(rng, size_t(24 * 4 * D), 0.0f, 0.02f);
        auto scale = normal(rng, 3, 1.0f, 0.3f);
        auto base = normal(rng, 24, 0.0f, 1.0f);
        auto w = normal(rng, size_t(D), 1.0f, 0.3f);
        for (size_t i = 0; i < 128; ++i) w[i] *= 1e-6f;
        const auto w_bits = to_bf16_bits(w);
        auto dfn = upload_weight(f32_view(fn, 24, 4 * D), "hc_fn");
        auto dfn4 = upload_weight(f32_view(fn, 4, 4 * D), "hc_head_fn");
        auto dscale = upload_weight(f32_view(scale, 1, 3), "hc_scale");
        auto dscale1 = upload_weight(f32_view(scale, 1, 1), "hc_head_scale");
        auto dbase = upload_weight(f32_view(base, 1, 24), "hc_base");
        auto dbase4 = upload_weight(f32_view(base, 1, 4), "hc_head_base");
        auto dw_f32 = upload_weight(f32_view(w, 1, D), "norm_f32");
        auto dw_bf16 = upload_weight({WeightFormat::kBF16, 1, D, w_bits.data(), nullptr}, "norm_bf16");
        auto da = act_to_device(prec, a);
        auto dr = act_to_device(prec, r);
        ASSERT_TRUE(dfn.is_ok() && dfn4.is_ok() && dscale.is_ok() && dscale1.is_ok() && dbase.is_ok() &&
                    dbase4.is_ok() && dw_f32.is_ok() && dw_bf16.is_ok() && da.is_ok() && dr.is_ok());
        // one path's buffers: streams (written with the hc_post first, else x), outputs poisoned
        struct Run {
            Result<DeviceBuffer> streams, mix, pre, post, comb, out, normed, codes, scales;
        };
        auto fresh = [&](bool first) {
            Run run{first ? act_poisoned(prec, n_streams) : act_to_device(prec, x),
                    poisoned<float>(size_t(T * 24)),
                    poisoned<float>(size_t(T * 4)),
                    to_device(post),
                    to_device(comb),
                    act_poisoned(prec, n_act),
                    act_poisoned(prec, n_act),
                    poisoned<uint8_t>(n_act),
                    poisoned<float>(n_scales)};
            return run;
        };
        enum class Mode { kPre, kPreAfterPost, kHead };
        for (const Mode mode : {Mode::kPre, Mode::kPreAfterPost, Mode::kHead}) {
            const bool head = mode == Mode::kHead;
            const bool first = mode == Mode::kPreAfterPost || (head && ci % 2 == 1);
            const bool f32_weight = (ci + size_t(mode)) % 2 == 1;
            const bool quant = ref && (!head || ci % 2 == 0);
            SCOPED_TRACE("tokens " + std::to_string(T) + " dim " + std::to_string(D) + (head ? " hc_head" : " hc_pre") +
                         (first ? " after hc_post" : "") + (f32_weight ? ", f32 weight" : ", bf16 weight") +
                         (quant ? ", codes" : ""));
            const DeviceWeightView wv = f32_weight ? dw_f32->view() : dw_bf16->view();
            Run sep = fresh(first), fused = fresh(first);
            for (Run* run : {&sep, &fused})
                ASSERT_TRUE(run->streams.is_ok() && run->mix.is_ok() && run->pre.is_ok() && run->post.is_ok() &&
                            run->comb.is_ok() && run->out.is_ok() && run->normed.is_ok() && run->codes.is_ok() &&
                            run->scales.is_ok());
            auto collapse = [&](Run& run, const HcNormAfter& norm) {
                const HcPostFirst pf =
                    first ? HcPostFirst{da->data(), dr->data(), run.post->as<float>(), run.comb->as<float>()}
                          : HcPostFirst{};
                if (head) {
                    HcHeadArgs h{run.streams->data(), T,     D,     dfn4->view(),         dscale1->view(),
                                 dbase4->view(),      1e-6f, 1e-6f, run.pre->as<float>(), run.out->data()};
                    h.post_first = pf;
                    h.norm_after = norm;
                    return sm90_hc_head(prec, h, nullptr);
                }
                HcPreArgs h{run.streams->data(),
                            T,
                            D,
                            dfn->view(),
                            dscale->view(),
                            dbase->view(),
                            20,
                            1e-6f,
                            1e-6f,
                            run.mix->as<float>(),
                            run.pre->as<float>(),
                            run.post->as<float>(),
                            run.comb->as<float>(),
                            run.out->data()};
                h.post_first = pf;
                h.sinkhorn_apart = mode == Mode::kPreAfterPost;
                h.norm_after = norm;
                return sm90_hc_pre(prec, h, nullptr);
            };
            // separate: the collapse, sm90_rmsnorm on its output, sm90_act_quant_e4m3 on the normed rows
            DSV4_ASSERT_OK(collapse(sep, HcNormAfter{}));
            RmsNormArgs na{sep.out->data(), T, D, wv, 1e-6f, sep.normed->data()};
            DSV4_ASSERT_OK(sm90_rmsnorm(prec, na, nullptr));
            if (quant) {
                ActQuantArgs q{sep.normed->data(),      T,       D,      128, sep.codes->as<uint8_t>(),
                               sep.scales->as<float>(), nullptr, nullptr};
                DSV4_ASSERT_OK(sm90_act_quant_e4m3(q, nullptr));
            }
            // fused
            HcNormAfter norm{wv, 1e-6f, fused.normed->data()};
            if (quant) norm.codes = fused.codes->as<uint8_t>(), norm.scales = fused.scales->as<float>();
            DSV4_ASSERT_OK(collapse(fused, norm));
            auto same = [&](const Result<DeviceBuffer>& p, const Result<DeviceBuffer>& q, size_t bytes,
                            const char* what) { EXPECT_EQ(differing_bytes(*p, *q, bytes), 0u) << what; };
            same(sep.out, fused.out, n_act * act_bytes, head ? "y" : "x_out");
            same(sep.normed, fused.normed, n_act * act_bytes, "normed");
            same(sep.codes, fused.codes, n_act, "codes");  // both still poisoned without quant
            same(sep.scales, fused.scales, n_scales * 4, "scales");
            same(sep.pre, fused.pre, size_t(T * 4) * 4, "pre");
            if (first) same(sep.streams, fused.streams, n_streams * act_bytes, "streams");
            if (!head) {
                same(sep.mix, fused.mix, size_t(T * 24) * 4, "mixes");
                same(sep.post, fused.post, size_t(T * 4) * 4, "post");
                same(sep.comb, fused.comb, size_t(T * 16) * 4, "comb");
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

// HcNormAfter's errors, found before any launch (fn and the other weights are left empty: they are checked later).
TEST(MhcValidation, NormAfterErrorsAreClear) {
    DSV4_REQUIRE_GPU();
    auto buf = DeviceBuffer::allocate(1 << 20);
    ASSERT_TRUE(buf.is_ok());
    auto* base = buf->as<uint8_t>();
    constexpr int64_t D = 128;
    HcPreArgs a{};
    a.x = base;             // [1, 4, 128] bf16: bytes [0, 1024)
    a.x_out = base + 4096;  // [1, 128]
    a.pre = a.post = a.comb = reinterpret_cast<float*>(base + 8192);
    a.tokens = 1, a.dim = D;
    void* y = base + 12288;
    auto* codes = base + 16384;
    auto* scales = reinterpret_cast<float*>(base + 20480);
    const DeviceWeightView w{WeightFormat::kBF16, 1, D, base + 24576, nullptr};
    auto expect = [&](Precision p, const HcNormAfter& n, const char* text) {
        a.norm_after = n;
        const Status s = sm90_hc_pre(p, a, nullptr);
        EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << text;
        EXPECT_NE(s.message().find(text), std::string::npos) << s.message();
    };
    expect(Precision::kReference, HcNormAfter{w, 1e-6f, nullptr}, "norm_after.y is null");
    expect(Precision::kReference, HcNormAfter{{}, 1e-6f, y}, "without a norm_after.weight");
    expect(Precision::kReference, HcNormAfter{{WeightFormat::kBF16, 1, 64, w.data, nullptr}, 1e-6f, y},
           "length differs from dim");
    expect(Precision::kReference, HcNormAfter{{WeightFormat::kFP8Block, 1, D, w.data, nullptr}, 1e-6f, y},
           "must be bf16 or f32");
    expect(Precision::kReference, HcNormAfter{w, 1e-6f, a.x_out}, "must not alias");
    expect(Precision::kReference, HcNormAfter{w, 1e-6f, base + 512}, "must not alias");  // inside the streams
    expect(Precision::kReference, HcNormAfter{w, 1e-6f, y, codes, nullptr}, "codes and scales go together");
    expect(Precision::kF32, HcNormAfter{w, 1e-6f, y, codes, scales}, "needs reference precision");
    expect(Precision::kReference, HcNormAfter{w, 1e-6f, base + 12296}, "16-byte aligned");
    expect(Precision::kReference, HcNormAfter{w, 1e-6f, y, codes + 4, scales}, "8-byte");
    expect(Precision::kReference, HcNormAfter{w, 1e-6f, y, codes, reinterpret_cast<float*>(base + 20482)},
           "4-byte aligned");
    a.dim = 136;  // a multiple of 8, not of 128: no e4m3 blocks
    expect(Precision::kReference, HcNormAfter{{WeightFormat::kBF16, 1, 136, w.data, nullptr}, 1e-6f, y, codes, scales},
           "dim % 128 == 0");
    a.dim = 8200;
    expect(Precision::kReference, HcNormAfter{{WeightFormat::kF32, 1, 8200, w.data, nullptr}, 1e-6f, y}, "dim <= 8192");
    // hc_head takes the same checks against its own output y
    HcHeadArgs h{};
    h.x = base, h.y = a.x_out, h.tokens = 1, h.dim = D;
    h.norm_after = HcNormAfter{w, 1e-6f, a.x_out};
    const Status s = sm90_hc_head(Precision::kReference, h, nullptr);
    EXPECT_NE(s.message().find("must not alias"), std::string::npos) << s.message();
}

const auto kPrecisions = ::testing::Values(Precision::kReference, Precision::kF32);
std::string precision_label(const ::testing::TestParamInfo<Precision>& i) { return backend::precision_name(i.param); }
INSTANTIATE_TEST_SUITE_P(Cuda, HcPreTest, kPrecisions, precision_label);
INSTANTIATE_TEST_SUITE_P(Cuda, HcPostTest, kPrecisions, precision_label);
INSTANTIATE_TEST_SUITE_P(Cuda, HcPostFirstTest, kPrecisions, precision_label);
INSTANTIATE_TEST_SUITE_P(Cuda, HcHeadTest, kPrecisions, precision_label);
INSTANTIATE_TEST_SUITE_P(Cuda, HcNormAfterTest, kPrecisions, precision_label);

}  // namespace
}  // namespace dsv4::cuda
