// RMSNorm (MODEL_SPEC §4), the per-head q normalisation on bf16 tensors (§5.4.2), RoPE with YaRN (§5.4.1) and the
// embedding gather.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_ops.h"

namespace dsv4::backend {

RopeFreqs rope_freqs(double base, double yarn_factor, int64_t original_max_position, double beta_fast,
                     double beta_slow, int rope_dim) {
    // precompute_freqs_cis of the reference: f_i = 1 / base^(2i/dim) in f32; with YaRN the high-frequency band
    // [0, low) stays, [high, dim/2) is divided by the factor, and a linear ramp blends in between.
    RopeFreqs r;
    const int half = std::min(rope_dim / 2, 32);
    for (int i = 0; i < half; ++i) r.f[i] = 1.0f / std::pow(float(base), float(2 * i) / float(rope_dim));
    if (yarn_factor > 1.0 && original_max_position > 0) {
        auto corr_dim = [&](double rotations) {
            return rope_dim * std::log(double(original_max_position) / (rotations * 2 * M_PI)) / (2 * std::log(base));
        };
        double low = std::max(std::floor(corr_dim(beta_fast)), 0.0);
        double high = std::min(std::ceil(corr_dim(beta_slow)), double(rope_dim - 1));
        if (low == high) high += 0.001;
        for (int i = 0; i < half; ++i) {
            const float ramp = std::clamp((float(i) - float(low)) / (float(high) - float(low)), 0.0f, 1.0f);
            const float smooth = 1.0f - ramp;
            r.f[i] = r.f[i] / float(yarn_factor) * (1.0f - smooth) + r.f[i] * smooth;
        }
    }
    return r;
}

namespace cpu {

Status rmsnorm(const Exec& ex, const RmsNormParams& p) {
    const char* op = "rmsnorm";
    DSV4_OP_CHECK(p.x && p.y && p.rows >= 0 && p.dim > 0, op, "null pointer or bad shape");
    DSV4_OP_CHECK(p.weight.empty() || p.weight.numel() == p.dim, op, "weight length differs from dim");
    const bool ref = is_ref(ex);
    parallel_rows(ex, p.rows, 16, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
            const float* x = p.x + r * p.dim;
            float* y = p.y + r * p.dim;
            double ss = 0;
            for (int64_t i = 0; i < p.dim; ++i) ss += double(x[i]) * double(x[i]);
            const float rs = 1.0f / std::sqrt(float(ss / double(p.dim)) + p.eps);
            for (int64_t i = 0; i < p.dim; ++i) {
                const float v = weight_or_one(p.weight, i) * (x[i] * rs);
                y[i] = ref ? round_bf16(v) : v;
            }
        }
    });
    return Status::ok();
}

Status q_head_norm(const Exec& ex, const QHeadNormParams& p) {
    DSV4_OP_CHECK(p.q && p.tokens >= 0 && p.heads > 0 && p.head_dim > 0, "q_head_norm", "null pointer or bad shape");
    const bool ref = is_ref(ex);
    parallel_rows(ex, p.tokens * p.heads, 16, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
            float* q = p.q + r * p.head_dim;
            if (ref) {
                // q.square().mean(-1) + eps, rsqrt, product: each a bf16 tensor in the reference.
                float sum = 0;
                for (int64_t i = 0; i < p.head_dim; ++i) sum += round_bf16(q[i] * q[i]);
                const float mean = round_bf16(sum / float(p.head_dim));
                const float rs = round_bf16(1.0f / std::sqrt(round_bf16(mean + p.eps)));
                for (int64_t i = 0; i < p.head_dim; ++i) q[i] = round_bf16(q[i] * rs);
            } else {
                double ss = 0;
                for (int64_t i = 0; i < p.head_dim; ++i) ss += double(q[i]) * double(q[i]);
                const float rs = 1.0f / std::sqrt(float(ss / double(p.head_dim)) + p.eps);
                for (int64_t i = 0; i < p.head_dim; ++i) q[i] *= rs;
            }
        }
    });
    return Status::ok();
}

Status rope(const Exec& ex, const RopeParams& p) {
    const char* op = "rope";
    DSV4_OP_CHECK(p.x && p.positions && p.freqs && p.tokens >= 0 && p.vecs > 0, op, "null pointer or bad shape");
    DSV4_OP_CHECK(p.offset >= 0 && p.offset + 64 <= p.vec_stride, op, "rope slice outside the vector");
    const bool ref = is_ref(ex);
    parallel_rows(ex, p.tokens, 16, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
            float cs[32], sn[32];
            const float pos = float(p.positions[t]);
            for (int i = 0; i < 32; ++i) {
                const float angle = pos * p.freqs->f[i];  // f32 as torch.outer(arange, freqs)
                cs[i] = std::cos(angle);
                sn[i] = p.inverse ? -std::sin(angle) : std::sin(angle);
            }
            for (int64_t v = 0; v < p.vecs; ++v) {
                float* x = p.x + (t * p.vecs + v) * p.vec_stride + p.offset;
                for (int i = 0; i < 32; ++i) {
                    const float a = x[2 * i], c = x[2 * i + 1];
                    const float re = a * cs[i] - c * sn[i];
                    const float im = a * sn[i] + c * cs[i];
                    x[2 * i] = ref ? round_bf16(re) : re;
                    x[2 * i + 1] = ref ? round_bf16(im) : im;
                }
            }
        }
    });
    return Status::ok();
}

Status embedding(const Exec& ex, const EmbeddingParams& p) {
    const char* op = "embedding";
    DSV4_OP_CHECK(p.tokens && p.out && p.n >= 0 && !p.table.empty(), op, "null pointer or empty table");
    const int64_t D = p.table.cols;
    for (int64_t t = 0; t < p.n; ++t) {
        if (p.tokens[t] < 0 || p.tokens[t] >= p.table.rows)
            return out_of_range(std::string(op) + ": token id " + std::to_string(p.tokens[t]) + " at position " +
                                std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(p.table.rows) +
                                ")");
    }
    (void)ex;
    for (int64_t t = 0; t < p.n; ++t) dequantize_weight_row(p.table, p.tokens[t], p.out + t * D);
    return Status::ok();
}

}  // namespace cpu
}  // namespace dsv4::backend
