// The lightning indexer of CSA layers (MODEL_SPEC §5.4.5): queries (W8A8, RoPE, Hadamard, FP4 simulation), head
// weights, scores on bf16 tensors, and a deterministic top-k.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_ops.h"

namespace dsv4::backend::cpu {

Status indexer_q(const Exec& ex, const IndexerQParams& p) {
    const char* op = "indexer_q";
    DSV4_OP_CHECK(p.qr && p.q && p.positions && p.freqs && p.heads > 0 && p.head_dim == 128, op,
                  "null pointer or bad shape (head_dim must be 128)");
    DSV4_RETURN_IF_ERROR(check_weight(p.wq_b, p.heads * p.head_dim, p.wq_b.cols, "indexer_q: wq_b"));
    DSV4_RETURN_IF_ERROR(linear(ex, {.x = p.qr, .tokens = p.tokens, .w = p.wq_b, .out = LinearOut::kBF16, .y = p.q}));
    DSV4_RETURN_IF_ERROR(rope(ex, {.x = p.q, .tokens = p.tokens, .vecs = p.heads, .vec_stride = p.head_dim,
                                   .offset = p.head_dim - p.rope_dim, .positions = p.positions, .freqs = p.freqs}));
    if (!is_ref(ex)) return Status::ok();
    parallel_rows(ex, p.tokens * p.heads, 16, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
            hadamard_row(p.q + r * 128, p.q + r * 128, true);
            fp4_sim_inplace(p.q + r * 128, 128);
        }
    });
    return Status::ok();
}

Status indexer_weights(const Exec& ex, const IndexerWeightsParams& p) {
    const char* op = "indexer_weights";
    DSV4_OP_CHECK(p.x && p.w, op, "null pointer");
    const int64_t heads = p.weights_proj.rows;
    DSV4_RETURN_IF_ERROR(
        linear(ex, {.x = p.x, .tokens = p.tokens, .w = p.weights_proj, .out = LinearOut::kBF16, .y = p.w}));
    if (p.w_raw) std::copy(p.w, p.w + p.tokens * heads, p.w_raw);
    for (int64_t i = 0; i < p.tokens * heads; ++i) p.w[i] = rnd(ex.precision, p.w[i] * p.scale);
    return Status::ok();
}

Status indexer_scores(const Exec& ex, const IndexerScoresParams& p) {
    const char* op = "indexer_scores";
    DSV4_OP_CHECK(p.q && p.keys && p.w && p.scores && p.positions && p.heads > 0 && p.ratio > 0 && p.n >= 0, op,
                  "null pointer or bad shape");
    const bool ref = is_ref(ex);
    const int64_t Dh = p.head_dim;
    parallel_rows(ex, p.tokens, 4, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
            const int64_t visible = (p.positions[t] + 1) / p.ratio;
            for (int64_t s = 0; s < p.n; ++s) {
                float& out = p.scores[t * p.n + s];
                if (s >= visible) {
                    out = -INFINITY;
                    continue;
                }
                float total = 0;
                for (int64_t h = 0; h < p.heads; ++h) {
                    const float* q = p.q + (t * p.heads + h) * Dh;
                    const float* k = p.keys + s * Dh;
                    float dot = 0;
                    for (int64_t i = 0; i < Dh; ++i) dot += q[i] * k[i];
                    if (ref) dot = round_bf16(dot);
                    const float v = std::max(dot, 0.0f) * p.w[t * p.heads + h];
                    total += ref ? round_bf16(v) : v;
                }
                out = ref ? round_bf16(total) : total;
            }
        }
    });
    return Status::ok();
}

Status topk(const Exec& ex, const TopKParams& p) {
    const char* op = "topk";
    DSV4_OP_CHECK(p.scores && p.idx && p.rows >= 0 && p.n >= 0 && p.k >= 0, op, "null pointer or bad shape");
    Scratch scratch(ex);
    int32_t* order_all = scratch.take<int32_t>(slot_count(ex, p.rows, 16) * p.n);
    parallel_slots(ex, p.rows, 16, [&](int64_t slot, int64_t b, int64_t e) {
        int32_t* order = order_all + slot * p.n;
        for (int64_t r = b; r < e; ++r) {
            const float* s = p.scores + r * p.n;
            std::iota(order, order + p.n, 0);
            const int64_t take = std::min(p.k, p.n);
            // descending score, equal scores by ascending index; NaN sorts last
            std::partial_sort(order, order + take, order + p.n, [&](int32_t a, int32_t c) {
                const float x = s[a], y = s[c];
                if (x == y || (std::isnan(x) && std::isnan(y))) return a < c;
                if (std::isnan(x)) return false;
                if (std::isnan(y)) return true;
                return x > y;
            });
            for (int64_t j = 0; j < p.k; ++j) {
                const bool ok = j < take && s[order[j]] != -INFINITY && !std::isnan(s[order[j]]);
                p.idx[r * p.k + j] = ok ? order[j] : -1;
            }
        }
    });
    return Status::ok();
}

}  // namespace dsv4::backend::cpu
