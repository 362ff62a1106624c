// Manifold hyper-connections (MODEL_SPEC §5.3, §5.6): mix vectors, split + Sinkhorn, the collapse of the 4 streams
// before a sub-block (hc_pre), their update after it (hc_post), and the head's collapse (hc_head). f32 math in
// both modes; only the collapsed / updated streams are rounded to bf16 in reference mode.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_ops.h"

namespace dsv4::backend::cpu {

namespace {

constexpr int kHc = 4;

// One mix vector m[24] → pre[4], post[4], comb[4][4].
void split_sinkhorn_one(const float* m, const WeightView& scale, const WeightView& base, int iters, float eps,
                        float* pre, float* post, float* comb) {
    const float s0 = scale.at(0), s1 = scale.at(1), s2 = scale.at(2);
    for (int j = 0; j < kHc; ++j) {
        pre[j] = sigmoid(m[j] * s0 + base.at(j)) + eps;
        post[j] = 2.0f * sigmoid(m[kHc + j] * s1 + base.at(kHc + j));
    }
    float c[kHc][kHc];
    for (int j = 0; j < kHc; ++j) {
        float mx = -INFINITY;
        for (int k = 0; k < kHc; ++k) {
            c[j][k] = m[2 * kHc + kHc * j + k] * s2 + base.at(2 * kHc + kHc * j + k);
            mx = std::max(mx, c[j][k]);
        }
        float sum = 0;
        for (int k = 0; k < kHc; ++k) sum += (c[j][k] = std::exp(c[j][k] - mx));
        for (int k = 0; k < kHc; ++k) c[j][k] = c[j][k] / sum + eps;
    }
    auto normalise_columns = [&] {
        for (int k = 0; k < kHc; ++k) {
            float sum = 0;
            for (int j = 0; j < kHc; ++j) sum += c[j][k];
            for (int j = 0; j < kHc; ++j) c[j][k] /= (sum + eps);
        }
    };
    normalise_columns();
    for (int it = 1; it < iters; ++it) {
        for (int j = 0; j < kHc; ++j) {
            float sum = 0;
            for (int k = 0; k < kHc; ++k) sum += c[j][k];
            for (int k = 0; k < kHc; ++k) c[j][k] /= (sum + eps);
        }
        normalise_columns();
    }
    for (int j = 0; j < kHc; ++j)
        for (int k = 0; k < kHc; ++k) comb[kHc * j + k] = c[j][k];
}

// m[rows of fn] = (fn @ flat(X)) · rsqrt(mean(flat(X)²) + eps), X = [4, D].
void mixes_one(const float* x, int64_t dim, const WeightView& fn, float norm_eps, float* m) {
    const int64_t n = kHc * dim;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * double(x[i]);
    const float rs = 1.0f / std::sqrt(float(ss / double(n)) + norm_eps);
    for (int64_t r = 0; r < fn.rows; ++r) {
        double acc = 0;
        for (int64_t i = 0; i < n; ++i) acc += double(fn.at(r * n + i)) * double(x[i]);
        m[r] = float(acc) * rs;
    }
}

// y = Σ_j pre[j]·X[j] (f32), rounded per mode.
void collapse_one(const float* x, int64_t dim, const float* pre, bool ref, float* y) {
    for (int64_t i = 0; i < dim; ++i) {
        float acc = 0;
        for (int j = 0; j < kHc; ++j) acc += pre[j] * x[j * dim + i];
        y[i] = ref ? round_bf16(acc) : acc;
    }
}

Status check_hc(const WeightView& fn, const WeightView& scale, const WeightView& base, int64_t mix, int64_t dim,
                int64_t n_scale, const char* op) {
    DSV4_RETURN_IF_ERROR(check_weight(fn, mix, kHc * dim, op));
    DSV4_OP_CHECK(fn.format == WeightFormat::kF32 || fn.format == WeightFormat::kBF16, op, "fn must be f32");
    DSV4_OP_CHECK(scale.numel() == n_scale && base.numel() == mix, op, "scale/base length");
    return Status::ok();
}

}  // namespace

Status hc_split_sinkhorn(const Exec& ex, const HcSinkhornParams& p) {
    const char* op = "hc_split_sinkhorn";
    DSV4_OP_CHECK(p.mixes && p.pre && p.post && p.comb && p.n >= 0 && p.iters >= 1, op, "null pointer or bad shape");
    DSV4_OP_CHECK(p.scale.numel() == 3 && p.base.numel() == 24, op, "scale must be [3] and base [24]");
    parallel_rows(ex, p.n, 64, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t)
            split_sinkhorn_one(p.mixes + t * 24, p.scale, p.base, p.iters, p.eps, p.pre + t * 4, p.post + t * 4,
                               p.comb + t * 16);
    });
    return Status::ok();
}

Status hc_pre(const Exec& ex, const HcPreParams& p) {
    const char* op = "hc_pre";
    DSV4_OP_CHECK(p.x && p.pre && p.post && p.comb && p.x_out && p.tokens >= 0 && p.dim > 0, op,
                  "null pointer or bad shape");
    DSV4_RETURN_IF_ERROR(check_hc(p.fn, p.scale, p.base, 24, p.dim, 3, op));
    const bool ref = is_ref(ex);
    parallel_rows(ex, p.tokens, 4, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
            float m[24];
            const float* x = p.x + t * kHc * p.dim;
            mixes_one(x, p.dim, p.fn, p.norm_eps, m);
            if (p.mixes) std::copy(m, m + 24, p.mixes + t * 24);
            split_sinkhorn_one(m, p.scale, p.base, p.iters, p.hc_eps, p.pre + t * 4, p.post + t * 4, p.comb + t * 16);
            collapse_one(x, p.dim, p.pre + t * 4, ref, p.x_out + t * p.dim);
        }
    });
    return Status::ok();
}

Status hc_post(const Exec& ex, const HcPostParams& p) {
    DSV4_OP_CHECK(p.a && p.residual && p.post && p.comb && p.out && p.tokens >= 0 && p.dim > 0, "hc_post",
                  "null pointer or bad shape");
    DSV4_OP_CHECK(p.out != p.residual, "hc_post", "out must not alias residual");
    const bool ref = is_ref(ex);
    parallel_rows(ex, p.tokens, 8, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
            const float* a = p.a + t * p.dim;
            const float* r = p.residual + t * kHc * p.dim;
            const float* c = p.comb + t * 16;
            for (int k = 0; k < kHc; ++k) {
                float* y = p.out + (t * kHc + k) * p.dim;
                const float post = p.post[t * 4 + k];
                for (int64_t i = 0; i < p.dim; ++i) {
                    float s = 0;
                    for (int j = 0; j < kHc; ++j) s += c[kHc * j + k] * r[j * p.dim + i];
                    const float v = post * a[i] + s;
                    y[i] = ref ? round_bf16(v) : v;
                }
            }
        }
    });
    return Status::ok();
}

Status hc_head(const Exec& ex, const HcHeadParams& p) {
    const char* op = "hc_head";
    DSV4_OP_CHECK(p.x && p.y && p.tokens >= 0 && p.dim > 0, op, "null pointer or bad shape");
    DSV4_RETURN_IF_ERROR(check_hc(p.fn, p.scale, p.base, kHc, p.dim, 1, op));
    const bool ref = is_ref(ex);
    parallel_rows(ex, p.tokens, 4, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
            float m[kHc], pre[kHc];
            const float* x = p.x + t * kHc * p.dim;
            mixes_one(x, p.dim, p.fn, p.norm_eps, m);
            for (int j = 0; j < kHc; ++j) pre[j] = sigmoid(m[j] * p.scale.at(0) + p.base.at(j)) + p.hc_eps;
            if (p.pre) std::copy(pre, pre + kHc, p.pre + t * kHc);
            collapse_one(x, p.dim, pre, ref, p.y + t * p.dim);
        }
    });
    return Status::ok();
}

}  // namespace dsv4::backend::cpu
