// Every CPU op against a direct formula written here in double, on small random inputs, in f32 mode (tight) and
// where it matters in reference mode (rounded where the reference rounds).
#include <algorithm>
#include <numeric>

#include "helpers.h"

namespace dsv4::cpu_test {
namespace {

double sigmoid_d(double x) { return 1.0 / (1.0 + std::exp(-x)); }

TEST(Norms, RmsNormWeighted) {
    const int64_t R = 5, D = 96;
    auto x = randn(R * D, 1), w = randn(D, 2);
    std::vector<float> y(R * D), yr(R * D), expect(R * D);
    for (int64_t r = 0; r < R; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < D; ++i) ss += double(x[r * D + i]) * x[r * D + i];
        for (int64_t i = 0; i < D; ++i) expect[r * D + i] = float(w[i] * x[r * D + i] / std::sqrt(ss / D + 1e-6));
    }
    RmsNormParams p{.x = x.data(), .rows = R, .dim = D, .weight = f32_view(w, 1, D), .y = y.data()};
    ASSERT_TRUE(cpu::rmsnorm(f32_exec(), p).is_ok());
    DSV4_EXPECT_CLOSE(y, expect, 1e-6);
    p.y = yr.data();
    ASSERT_TRUE(cpu::rmsnorm(ref_exec(), p).is_ok());
    DSV4_EXPECT_CLOSE(yr, expect, 4e-3);
    for (float v : yr) EXPECT_EQ(v, round_bf16(v));
}

TEST(Norms, QHeadNormBothModes) {
    const int64_t T = 3, H = 2, Dh = 512;
    auto q = randn(T * H * Dh, 3, 4.0f);
    std::vector<float> expect(q.size());
    for (int64_t r = 0; r < T * H; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < Dh; ++i) ss += double(q[r * Dh + i]) * q[r * Dh + i];
        for (int64_t i = 0; i < Dh; ++i) expect[r * Dh + i] = float(q[r * Dh + i] / std::sqrt(ss / Dh + 1e-6));
    }
    auto a = q, b = q;
    ASSERT_TRUE(cpu::q_head_norm(f32_exec(), {.q = a.data(), .tokens = T, .heads = H}).is_ok());
    ASSERT_TRUE(cpu::q_head_norm(ref_exec(), {.q = b.data(), .tokens = T, .heads = H}).is_ok());
    DSV4_EXPECT_CLOSE(a, expect, 1e-6);
    DSV4_EXPECT_CLOSE(b, expect, 1e-2);  // bf16 mean and rsqrt: a few ulp of bf16
}

TEST(Rope, YarnTableMatchesSpec) {
    // MODEL_SPEC §5.4.1: the CSA/HCA frequency table of the shipped config
    const double spec[32] = {1.0, 0.68766, 0.47287, 0.32517, 0.22361, 0.15376, 0.10574, 0.072711, 0.05, 0.034383,
                             0.023644, 0.016259, 0.01118, 0.0076882, 0.0052869, 0.0036355, 0.0022656, 0.0013968,
                             8.4969e-4, 5.0808e-4, 2.9698e-4, 1.6818e-4, 9.0868e-5, 4.5444e-5, 1.9531e-5, 5.3723e-6,
                             3.6943e-6, 2.5404e-6, 1.7469e-6, 1.2013e-6, 8.2607e-7, 5.6805e-7};
    RopeFreqs f = rope_freqs(160000.0, 16.0, 65536, 32.0, 1.0);
    for (int i = 0; i < 32; ++i) EXPECT_NEAR(f.f[i], spec[i], spec[i] * 1e-4) << i;
    RopeFreqs plain = rope_freqs(10000.0, 1.0, 0, 0, 0);
    for (int i = 0; i < 32; ++i) EXPECT_NEAR(plain.f[i], std::pow(10000.0, -i / 32.0), 1e-6 * plain.f[i] + 1e-12);
}

TEST(Rope, RotatesInterleavedPairsAndInverts) {
    const int64_t T = 4, V = 2, S = 128;
    auto x = randn(T * V * S, 4);
    std::vector<int64_t> pos = {0, 5, 1000, 65535};
    RopeFreqs f = rope_freqs(160000.0, 16.0, 65536, 32.0, 1.0);
    auto y = x;
    RopeParams p{.x = y.data(), .tokens = T, .vecs = V, .vec_stride = S, .offset = 64, .positions = pos.data(), .freqs = &f};
    ASSERT_TRUE(cpu::rope(f32_exec(), p).is_ok());
    std::vector<float> expect = x;
    for (int64_t t = 0; t < T; ++t)
        for (int64_t v = 0; v < V; ++v)
            for (int i = 0; i < 32; ++i) {
                const double ang = double(float(pos[t]) * f.f[i]);
                const int64_t o = (t * V + v) * S + 64 + 2 * i;
                expect[o] = float(x[o] * std::cos(ang) - x[o + 1] * std::sin(ang));
                expect[o + 1] = float(x[o] * std::sin(ang) + x[o + 1] * std::cos(ang));
            }
    DSV4_EXPECT_CLOSE(y, expect, 1e-6);
    for (int64_t i = 0; i < T * V * S; ++i)
        if (i % S < 64) {
            EXPECT_EQ(y[i], x[i]);  // nope channels untouched
        }
    p.inverse = true;
    ASSERT_TRUE(cpu::rope(f32_exec(), p).is_ok());
    DSV4_EXPECT_CLOSE(y, x, 1e-6);
}

// Direct split + Sinkhorn in double.
void sinkhorn_d(const float* m, const std::vector<float>& s, const std::vector<float>& b, int iters, double eps,
                double* pre, double* post, double* comb) {
    for (int j = 0; j < 4; ++j) {
        pre[j] = sigmoid_d(m[j] * s[0] + b[j]) + eps;
        post[j] = 2 * sigmoid_d(m[4 + j] * s[1] + b[4 + j]);
    }
    double c[4][4];
    for (int j = 0; j < 4; ++j) {
        double mx = -1e300, sum = 0;
        for (int k = 0; k < 4; ++k) mx = std::max(mx, c[j][k] = m[8 + 4 * j + k] * s[2] + b[8 + 4 * j + k]);
        for (int k = 0; k < 4; ++k) sum += (c[j][k] = std::exp(c[j][k] - mx));
        for (int k = 0; k < 4; ++k) c[j][k] = c[j][k] / sum + eps;
    }
    for (int it = 0; it < iters; ++it) {
        if (it > 0)
            for (int j = 0; j < 4; ++j) {
                double sum = 0;
                for (int k = 0; k < 4; ++k) sum += c[j][k];
                for (int k = 0; k < 4; ++k) c[j][k] /= sum + eps;
            }
        for (int k = 0; k < 4; ++k) {
            double sum = 0;
            for (int j = 0; j < 4; ++j) sum += c[j][k];
            for (int j = 0; j < 4; ++j) c[j][k] /= sum + eps;
        }
    }
    for (int j = 0; j < 4; ++j)
        for (int k = 0; k < 4; ++k) comb[4 * j + k] = c[j][k];
}

TEST(Mhc, PreSinkhornPostHead) {
    const int64_t T = 3, D = 64;
    auto x = randn(T * 4 * D, 5), fn = randn(24 * 4 * D, 6, 0.1f, false), base = randn(24, 7, 0.5f, false);
    std::vector<float> scale = {0.7f, 1.3f, 0.9f};
    std::vector<float> mixes(T * 24), pre(T * 4), post(T * 4), comb(T * 16), xo(T * D);
    HcPreParams p{.x = x.data(), .tokens = T, .dim = D, .fn = f32_view(fn, 24, 4 * D), .scale = f32_view(scale, 1, 3),
                  .base = f32_view(base, 1, 24), .mixes = mixes.data(), .pre = pre.data(), .post = post.data(),
                  .comb = comb.data(), .x_out = xo.data()};
    ASSERT_TRUE(cpu::hc_pre(f32_exec(), p).is_ok());
    std::vector<double> em(T * 24), epre(T * 4), epost(T * 4), ecomb(T * 16), ex(T * D);
    for (int64_t t = 0; t < T; ++t) {
        const float* xt = x.data() + t * 4 * D;
        double ss = 0;
        for (int64_t i = 0; i < 4 * D; ++i) ss += double(xt[i]) * xt[i];
        const double rs = 1 / std::sqrt(ss / (4 * D) + 1e-6);
        std::vector<float> mt(24);
        for (int r = 0; r < 24; ++r) {
            double acc = 0;
            for (int64_t i = 0; i < 4 * D; ++i) acc += double(fn[r * 4 * D + i]) * xt[i];
            em[t * 24 + r] = acc * rs;
            mt[size_t(r)] = float(acc * rs);
        }
        sinkhorn_d(mt.data(), scale, base, 20, 1e-6, &epre[t * 4], &epost[t * 4], &ecomb[t * 16]);
        for (int64_t i = 0; i < D; ++i) {
            double acc = 0;
            for (int j = 0; j < 4; ++j) acc += epre[t * 4 + j] * xt[j * D + i];
            ex[t * D + i] = acc;
        }
        // comb is close to doubly stochastic after 20 iterations
        for (int k = 0; k < 4; ++k) {
            double col = 0;
            for (int j = 0; j < 4; ++j) col += comb[t * 16 + 4 * j + k];
            EXPECT_NEAR(col, 1.0, 1e-4);
        }
    }
    DSV4_EXPECT_CLOSE(mixes, to_float(em), 1e-6);
    DSV4_EXPECT_CLOSE(pre, to_float(epre), 1e-6);
    DSV4_EXPECT_CLOSE(post, to_float(epost), 1e-6);
    DSV4_EXPECT_CLOSE(comb, to_float(ecomb), 1e-5);
    DSV4_EXPECT_CLOSE(xo, to_float(ex), 1e-6);

    // hc_post: out[k] = post[k]·a + Σ_j comb[j][k]·R[j]
    auto a = randn(T * D, 8);
    std::vector<float> out(T * 4 * D);
    ASSERT_TRUE(cpu::hc_post(f32_exec(), {.a = a.data(), .residual = x.data(), .post = post.data(),
                                          .comb = comb.data(), .tokens = T, .dim = D, .out = out.data()})
                    .is_ok());
    std::vector<double> eo(T * 4 * D);
    for (int64_t t = 0; t < T; ++t)
        for (int k = 0; k < 4; ++k)
            for (int64_t i = 0; i < D; ++i) {
                double acc = double(post[t * 4 + k]) * a[t * D + i];
                for (int j = 0; j < 4; ++j) acc += double(comb[t * 16 + 4 * j + k]) * x[(t * 4 + j) * D + i];
                eo[(t * 4 + k) * D + i] = acc;
            }
    DSV4_EXPECT_CLOSE(out, to_float(eo), 1e-6);
    EXPECT_FALSE(cpu::hc_post(f32_exec(), {.a = a.data(), .residual = out.data(), .post = post.data(),
                                           .comb = comb.data(), .tokens = T, .dim = D, .out = out.data()})
                     .is_ok());

    // hc_head: pre = σ(m·s + b) + eps over 4 rows of fn
    std::vector<float> hs = {1.1f}, hpre(T * 4), hy(T * D);
    ASSERT_TRUE(cpu::hc_head(f32_exec(), {.x = x.data(), .tokens = T, .dim = D, .fn = f32_view(fn, 4, 4 * D),
                                          .scale = f32_view(hs, 1, 1), .base = f32_view(base, 1, 4),
                                          .pre = hpre.data(), .y = hy.data()})
                    .is_ok());
    for (int64_t t = 0; t < T; ++t) {
        const float* xt = x.data() + t * 4 * D;
        double ss = 0;
        for (int64_t i = 0; i < 4 * D; ++i) ss += double(xt[i]) * xt[i];
        for (int j = 0; j < 4; ++j) {
            double acc = 0;
            for (int64_t i = 0; i < 4 * D; ++i) acc += double(fn[j * 4 * D + i]) * xt[i];
            EXPECT_NEAR(hpre[t * 4 + j], sigmoid_d(acc / std::sqrt(ss / (4 * D) + 1e-6) * 1.1 + base[j]) + 1e-6, 1e-6);
        }
    }
}

// softmax with sink in double
std::vector<float> attention_d(const std::vector<float>& q, const std::vector<float>& kv, const std::vector<int32_t>& idx,
                               int64_t T, int64_t H, int64_t D, int64_t K, const std::vector<float>& sink, double scale) {
    std::vector<float> out(T * H * D, 0.0f);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h) {
            std::vector<double> l;
            std::vector<int32_t> ids;
            for (int64_t j = 0; j < K; ++j) {
                int32_t s = idx[t * K + j];
                if (s < 0) continue;
                double d = 0;
                for (int64_t i = 0; i < D; ++i) d += double(q[(t * H + h) * D + i]) * kv[s * D + i];
                l.push_back(d * scale);
                ids.push_back(s);
            }
            double m = *std::max_element(l.begin(), l.end()), den = std::exp(sink[h] - m);
            for (double v : l) den += std::exp(v - m);
            for (int64_t i = 0; i < D; ++i) {
                double acc = 0;
                for (size_t j = 0; j < l.size(); ++j) acc += std::exp(l[j] - m) * kv[ids[j] * D + i];
                out[(t * H + h) * D + i] = float(acc / den);
            }
        }
    return out;
}

TEST(Attention, SparseWithSinkBothModes) {
    const int64_t T = 3, H = 2, D = 512, N = 150, K = 140;
    auto q = randn(T * H * D, 9), kv = randn(N * D, 10);
    std::vector<float> sink = {0.5f, -1.0f};
    std::mt19937 rng(11);
    std::vector<int32_t> idx(T * K);
    for (auto& v : idx) v = (rng() % 5 == 0) ? -1 : int32_t(rng() % N);
    idx[0] = 3;
    const double scale = 1.0 / std::sqrt(512.0);
    auto expect = attention_d(q, kv, idx, T, H, D, K, sink, scale);
    std::vector<float> o(T * H * D), orf(T * H * D);
    SparseAttnParams p{.q = q.data(), .kv = kv.data(), .idx = idx.data(), .tokens = T, .heads = H, .dim = D,
                       .n_kv = N, .topk = K, .sink = f32_view(sink, 1, H), .scale = float(scale), .out = o.data()};
    ASSERT_TRUE(cpu::sparse_attn(f32_exec(), p).is_ok());
    DSV4_EXPECT_CLOSE(o, expect, 1e-5);
    p.out = orf.data();
    ASSERT_TRUE(cpu::sparse_attn(ref_exec(), p).is_ok());
    DSV4_EXPECT_CLOSE(orf, expect, 1e-2);  // bf16 P and output
    idx[5] = int32_t(N);
    EXPECT_FALSE(cpu::sparse_attn(ref_exec(), p).is_ok());
}

TEST(Attention, WoAGroupedProjection) {
    const int64_t T = 2, H = 4, G = 2, R = 8, Dh = 512, W = (H / G) * Dh;
    auto o = randn(T * H * Dh, 12), w = randn(G * R * W, 13, 0.05f);
    std::vector<float> z(T * G * R), expect(T * G * R);
    ASSERT_TRUE(cpu::wo_a(f32_exec(), {.o = o.data(), .tokens = T, .heads = H, .groups = G, .rank = R,
                                       .wo_a = f32_view(w, G * R, W), .z = z.data()})
                    .is_ok());
    for (int64_t t = 0; t < T; ++t)
        for (int64_t r = 0; r < G * R; ++r) {
            double acc = 0;
            const int64_t g = r / R;
            for (int64_t i = 0; i < W; ++i) acc += double(w[r * W + i]) * o[t * H * Dh + g * W + i];
            expect[t * G * R + r] = float(acc);
        }
    DSV4_EXPECT_CLOSE(z, expect, 1e-5);
}

TEST(Compressor, ProjectPoolFinish) {
    const int64_t c = 128, m = 4, D = 32, T = 12;
    for (bool overlap : {false, true}) {
        const int64_t width = (overlap ? 2 : 1) * c;
        auto x = randn(T * D, 14), wkv = randn(width * D, 15, 0.2f), wg = randn(width * D, 16, 0.2f),
             ape = randn(m * width, 17, 0.1f, false);
        std::vector<int64_t> pos(T);
        std::iota(pos.begin(), pos.end(), 8);  // windows 2, 3, 4 of the sequence
        std::vector<float> kv(T * width), sc(T * width);
        ASSERT_TRUE(cpu::compressor_project(f32_exec(), {.x = x.data(), .tokens = T, .wkv = f32_view(wkv, width, D),
                                                         .wgate = f32_view(wg, width, D),
                                                         .ape = f32_view(ape, m, width), .ratio = m,
                                                         .positions = pos.data(), .kv = kv.data(), .score = sc.data()})
                        .is_ok());
        for (int64_t t = 0; t < T; ++t)
            for (int64_t o = 0; o < width; o += 37) {
                double k = 0, s = 0;
                for (int64_t i = 0; i < D; ++i) {
                    k += double(wkv[o * D + i]) * x[t * D + i];
                    s += double(wg[o * D + i]) * x[t * D + i];
                }
                EXPECT_NEAR(kv[t * width + o], k, 1e-5);
                EXPECT_NEAR(sc[t * width + o], s + ape[(pos[t] % m) * width + o], 1e-5);
            }
        // pool windows 1 and 2 of the arrays (rows 4..11), window 0 as the "previous" state
        std::vector<float> out(2 * c);
        CompressorPoolParams pp{.kv = kv.data() + m * width, .score = sc.data() + m * width,
                                .prev_kv = kv.data(), .prev_score = sc.data(), .n_windows = 2, .ratio = m,
                                .head_dim = c, .overlap = overlap, .out = out.data()};
        ASSERT_TRUE(cpu::compressor_pool(f32_exec(), pp).is_ok());
        for (int64_t w = 1; w <= 2; ++w)
            for (int64_t ch = 0; ch < c; ++ch) {
                std::vector<double> s, v;
                if (overlap)
                    for (int64_t t = (w - 1) * m; t < w * m; ++t) { s.push_back(sc[t * width + ch]); v.push_back(kv[t * width + ch]); }
                const int64_t cur = overlap ? c + ch : ch;
                for (int64_t t = w * m; t < (w + 1) * m; ++t) { s.push_back(sc[t * width + cur]); v.push_back(kv[t * width + cur]); }
                double mx = *std::max_element(s.begin(), s.end()), den = 0, acc = 0;
                for (size_t i = 0; i < s.size(); ++i) den += std::exp(s[i] - mx);
                for (size_t i = 0; i < s.size(); ++i) acc += std::exp(s[i] - mx) / den * v[i];
                EXPECT_NEAR(out[(w - 1) * c + ch], acc, 1e-5 * (1 + std::fabs(acc)));
            }
        if (overlap) {
            // the first window of a sequence has no previous window: only its own 4 slots count
            std::vector<float> first(c);
            ASSERT_TRUE(cpu::compressor_pool(f32_exec(), {.kv = kv.data(), .score = sc.data(), .n_windows = 1,
                                                          .ratio = m, .head_dim = c, .overlap = true,
                                                          .out = first.data()})
                            .is_ok());
            double mx = -1e300, den = 0, acc = 0;
            for (int64_t t = 0; t < m; ++t) mx = std::max(mx, double(sc[t * width + c]));
            for (int64_t t = 0; t < m; ++t) den += std::exp(sc[t * width + c] - mx);
            for (int64_t t = 0; t < m; ++t) acc += std::exp(sc[t * width + c] - mx) / den * kv[t * width + c];
            EXPECT_NEAR(first[0], acc, 1e-5 * (1 + std::fabs(acc)));
        }
    }
    // finish: norm, RoPE at the window's first position; f32 mode has no simulation
    auto pooled = randn(2 * c, 18), nw = randn(c, 19);
    RopeFreqs f = rope_freqs(160000.0, 16.0, 65536, 32.0, 1.0);
    std::vector<float> normed(2 * c), out(2 * c), rout(2 * c);
    CompressorFinishParams fp{.pooled = pooled.data(), .n = 2, .head_dim = c, .ratio = m, .first_window = 3,
                              .kind = CompressedKind::kIndexer, .norm = f32_view(nw, 1, c), .freqs = &f,
                              .normed = normed.data(), .out = out.data()};
    ASSERT_TRUE(cpu::compressor_finish(f32_exec(), fp).is_ok());
    std::vector<float> expect = normed;
    std::vector<int64_t> p2 = {12, 16};
    ASSERT_TRUE(cpu::rope(f32_exec(), {.x = expect.data(), .tokens = 2, .vecs = 1, .vec_stride = c, .offset = 64,
                                       .positions = p2.data(), .freqs = &f})
                    .is_ok());
    EXPECT_EQ(out, expect);
    // reference mode: keys are Hadamard-rotated then FP4-simulated (every block on its e2m1 grid)
    fp.out = rout.data();
    ASSERT_TRUE(cpu::compressor_finish(ref_exec(), fp).is_ok());
    std::vector<float> check(rout);
    ASSERT_TRUE(cpu::fp4_act_quant({.x = rout.data(), .rows = 2, .cols = c, .x_sim = check.data()}).is_ok());
    EXPECT_EQ(check, rout);  // idempotent: already on the grid
}

TEST(Indexer, ScoresAndTopK) {
    const int64_t T = 6, IH = 3, Dh = 128, n = 5;
    auto q = randn(T * IH * Dh, 20), k = randn(n * Dh, 21), w = randn(T * IH, 22);
    std::vector<int64_t> pos = {0, 3, 7, 11, 18, 19};
    std::vector<float> s(T * n);
    ASSERT_TRUE(cpu::indexer_scores(f32_exec(), {.q = q.data(), .keys = k.data(), .w = w.data(), .tokens = T,
                                                 .heads = IH, .head_dim = Dh, .n = n, .ratio = 4,
                                                 .positions = pos.data(), .scores = s.data()})
                    .is_ok());
    for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < n; ++j) {
            if (j >= (pos[t] + 1) / 4) {
                EXPECT_EQ(s[t * n + j], -INFINITY);
                continue;
            }
            double total = 0;
            for (int64_t h = 0; h < IH; ++h) {
                double d = 0;
                for (int64_t i = 0; i < Dh; ++i) d += double(q[(t * IH + h) * Dh + i]) * k[j * Dh + i];
                total += w[t * IH + h] * std::max(d, 0.0);
            }
            EXPECT_NEAR(s[t * n + j], total, 1e-4 * (1 + std::fabs(total)));
        }
    // top-k: descending, ties to the lower index, -inf and missing picks -> -1
    std::vector<float> sc = {1, 3, 3, -INFINITY, 2, /* row 2 */ -INFINITY, -INFINITY, 5, -INFINITY, -INFINITY};
    std::vector<int32_t> idx(2 * 3);
    ASSERT_TRUE(cpu::topk(f32_exec(), {.scores = sc.data(), .rows = 2, .n = 5, .k = 3, .idx = idx.data()}).is_ok());
    EXPECT_EQ(idx, (std::vector<int32_t>{1, 2, 4, 2, -1, -1}));
}

TEST(Moe, RouterScoreAndHash) {
    const int64_t T = 4, D = 16, E = 6, K = 2;
    auto x = randn(T * D, 23), g = randn(E * D, 24), bias = randn(E, 25, 0.3f, false);
    std::vector<float> logits(T * E), scores(T * E), w(T * K);
    std::vector<int32_t> idx(T * K);
    ASSERT_TRUE(cpu::router(f32_exec(), {.x = x.data(), .tokens = T, .n_experts = E, .k = K,
                                         .gate = f32_view(g, E, D), .bias = f32_view(bias, 1, E),
                                         .routed_scale = 1.5f, .logits = logits.data(), .scores = scores.data(),
                                         .idx = idx.data(), .weights = w.data()})
                    .is_ok());
    for (int64_t t = 0; t < T; ++t) {
        std::vector<double> s(E);
        for (int64_t e = 0; e < E; ++e) {
            double l = 0;
            for (int64_t i = 0; i < D; ++i) l += double(g[e * D + i]) * x[t * D + i];
            s[e] = std::sqrt(std::log1p(std::exp(l)));
            EXPECT_NEAR(scores[t * E + e], s[e], 1e-5);
        }
        std::vector<int> order(E);
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(), [&](int a, int b) { return s[a] + bias[a] > s[b] + bias[b]; });
        EXPECT_EQ(idx[t * K], order[0]);
        EXPECT_EQ(idx[t * K + 1], order[1]);
        const double sum = s[order[0]] + s[order[1]];
        EXPECT_NEAR(w[t * K], s[order[0]] / sum * 1.5, 1e-5);
    }
    // hash routing: experts from the table, weights from the scores
    std::vector<int64_t> table = {5, 0, 2, 3, 1, 1};  // vocab 3, k 2 (a repeated expert is allowed)
    std::vector<int32_t> tokens = {2, 0, 1, 2};
    ASSERT_TRUE(cpu::router(f32_exec(), {.x = x.data(), .tokens = T, .n_experts = E, .k = K,
                                         .gate = f32_view(g, E, D), .bias = {}, .tid2eid = table.data(), .vocab = 3,
                                         .token_ids = tokens.data(), .routed_scale = 1.5f, .scores = scores.data(),
                                         .idx = idx.data(), .weights = w.data()})
                    .is_ok());
    EXPECT_EQ(idx, (std::vector<int32_t>{1, 1, 5, 0, 2, 3, 1, 1}));
    EXPECT_NEAR(w[0], 0.75, 1e-6);
    tokens[0] = 3;
    EXPECT_FALSE(cpu::router(f32_exec(), {.x = x.data(), .tokens = T, .n_experts = E, .k = K,
                                          .gate = f32_view(g, E, D), .bias = {}, .tid2eid = table.data(), .vocab = 3,
                                          .token_ids = tokens.data(), .idx = idx.data(), .weights = w.data()})
                     .is_ok());
}

TEST(Moe, ExpertsAndSum) {
    const int64_t T = 3, D = 32, I = 64, E = 3, K = 2;
    auto x = randn(T * D, 26, 2.0f);
    std::vector<std::vector<float>> ws;
    std::vector<ExpertWeights> experts;
    for (int64_t e = 0; e < E; ++e) {
        ws.push_back(randn(I * D, 30 + uint32_t(e) * 3, 1.0f));
        ws.push_back(randn(D * I, 31 + uint32_t(e) * 3, 0.2f));
        ws.push_back(randn(I * D, 32 + uint32_t(e) * 3, 1.0f));
    }
    for (int64_t e = 0; e < E; ++e)
        experts.push_back({f32_view(ws[e * 3], I, D), f32_view(ws[e * 3 + 1], D, I), f32_view(ws[e * 3 + 2], I, D)});
    auto swiglu_d = [&](int64_t e, int64_t t, double rw, int64_t o) {
        double y = 0;
        for (int64_t i = 0; i < I; ++i) {
            double u1 = 0, u3 = 0;
            for (int64_t d = 0; d < D; ++d) {
                u1 += double(ws[e * 3][i * D + d]) * x[t * D + d];
                u3 += double(ws[e * 3 + 2][i * D + d]) * x[t * D + d];
            }
            u1 = std::min(u1, 10.0);
            u3 = std::clamp(u3, -10.0, 10.0);
            y += double(ws[e * 3 + 1][o * I + i]) * (rw * u1 * sigmoid_d(u1) * u3);
        }
        return y;
    };
    std::vector<int32_t> idx = {2, 0, 1, 1, 0, 2};
    std::vector<float> rw = {0.6f, 0.9f, 1.0f, 0.5f, 0.7f, 0.8f}, out(T * K * D);
    ASSERT_TRUE(cpu::routed_experts(f32_exec(), {.x = x.data(), .tokens = T, .k = K, .n_experts = E,
                                                 .experts = experts.data(), .idx = idx.data(), .weights = rw.data(),
                                                 .out = out.data()})
                    .is_ok());
    std::vector<float> expect(T * K * D);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t k = 0; k < K; ++k)
            for (int64_t o = 0; o < D; ++o) expect[(t * K + k) * D + o] = float(swiglu_d(idx[t * K + k], t, rw[t * K + k], o));
    DSV4_EXPECT_CLOSE(out, expect, 1e-5);
    // the clamp is active in this case
    int clamped = 0;
    for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < I; ++i) {
            double u1 = 0;
            for (int64_t d = 0; d < D; ++d) u1 += double(ws[0][i * D + d]) * x[t * D + d];
            clamped += u1 > 10;
        }
    EXPECT_GT(clamped, 0);

    auto shared = randn(T * D, 40);
    std::vector<float> y(T * D);
    ASSERT_TRUE(cpu::moe_sum(f32_exec(), {.expert_out = out.data(), .idx = idx.data(), .shared = shared.data(),
                                          .tokens = T, .k = K, .dim = D, .y = y.data()})
                    .is_ok());
    for (int64_t t = 0; t < T; ++t)
        for (int64_t o = 0; o < D; ++o)
            EXPECT_NEAR(y[t * D + o], double(out[(t * K) * D + o]) + out[(t * K + 1) * D + o] + shared[t * D + o], 1e-4);
}

TEST(Misc, EmbeddingAndStatusOnBadInput) {
    std::vector<uint16_t> table = {0x3f80, 0x4000, 0xbf80, 0x4040};  // [[1, 2], [-1, 3]] bf16
    WeightView tv{WeightFormat::kBF16, 2, 2, table.data(), nullptr};
    std::vector<int32_t> tok = {1, 0};
    std::vector<float> out(4);
    ASSERT_TRUE(cpu::embedding(f32_exec(), {.tokens = tok.data(), .n = 2, .table = tv, .out = out.data()}).is_ok());
    EXPECT_EQ(out, (std::vector<float>{-1, 3, 1, 2}));
    tok[1] = 2;
    EXPECT_EQ(cpu::embedding(f32_exec(), {.tokens = tok.data(), .n = 2, .table = tv, .out = out.data()}).code(),
              StatusCode::kOutOfRange);
    EXPECT_FALSE(cpu::linear(f32_exec(), {}).is_ok());
    EXPECT_FALSE(cpu::sparse_attn(f32_exec(), {}).is_ok());
    EXPECT_FALSE(cpu::hc_pre(f32_exec(), {}).is_ok());
    EXPECT_FALSE(cpu::router(f32_exec(), {}).is_ok());
    EXPECT_FALSE(cpu::compressor_pool(f32_exec(), {}).is_ok());
    std::vector<float> w(4);
    std::vector<float> x(4);
    LinearParams lp{.x = x.data(), .tokens = 1, .w = {WeightFormat::kFP8Block, 2, 2, w.data(), nullptr}, .y = out.data()};
    EXPECT_FALSE(cpu::linear(f32_exec(), lp).is_ok());  // FP8 weight without scales
}

}  // namespace
}  // namespace dsv4::cpu_test
