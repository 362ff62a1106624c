// Attention (MODEL_SPEC §5.4.2, §5.4.3, §5.4.7, §5.4.8): the query path, window K=V, sparse attention with a
// per-head sink, and the grouped low-rank output projection wo_a. (wo_b is a plain `linear`.)
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_ops.h"

namespace dsv4::backend::cpu {

Status q_path(const Exec& ex, const QPathParams& p) {
    const char* op = "q_path";
    DSV4_OP_CHECK(p.x && p.qr && p.q && p.positions && p.freqs && p.heads > 0, op, "null pointer or bad shape");
    const int64_t q_lora = p.wq_a.rows;
    DSV4_RETURN_IF_ERROR(check_weight(p.wq_b, p.heads * p.head_dim, q_lora, "q_path: wq_b"));
    DSV4_OP_CHECK(p.q_norm.numel() == q_lora, op, "q_norm length differs from wq_a rows");
    DSV4_RETURN_IF_ERROR(linear(ex, {.x = p.x, .tokens = p.tokens, .w = p.wq_a, .out = LinearOut::kBF16, .y = p.qr}));
    DSV4_RETURN_IF_ERROR(
        rmsnorm(ex, {.x = p.qr, .rows = p.tokens, .dim = q_lora, .weight = p.q_norm, .eps = p.eps, .y = p.qr}));
    DSV4_RETURN_IF_ERROR(linear(ex, {.x = p.qr, .tokens = p.tokens, .w = p.wq_b, .out = LinearOut::kBF16, .y = p.q}));
    DSV4_RETURN_IF_ERROR(
        q_head_norm(ex, {.q = p.q, .tokens = p.tokens, .heads = p.heads, .head_dim = p.head_dim, .eps = p.eps}));
    return rope(ex, {.x = p.q, .tokens = p.tokens, .vecs = p.heads, .vec_stride = p.head_dim,
                     .offset = p.head_dim - p.rope_dim, .positions = p.positions, .freqs = p.freqs});
}

Status window_kv(const Exec& ex, const WindowKvParams& p) {
    const char* op = "window_kv";
    DSV4_OP_CHECK(p.x && p.kv && p.positions && p.freqs, op, "null pointer");
    DSV4_RETURN_IF_ERROR(check_weight(p.wkv, p.head_dim, p.wkv.cols, "window_kv: wkv"));
    DSV4_RETURN_IF_ERROR(linear(ex, {.x = p.x, .tokens = p.tokens, .w = p.wkv, .out = LinearOut::kBF16, .y = p.kv}));
    DSV4_RETURN_IF_ERROR(
        rmsnorm(ex, {.x = p.kv, .rows = p.tokens, .dim = p.head_dim, .weight = p.kv_norm, .eps = p.eps, .y = p.kv}));
    DSV4_RETURN_IF_ERROR(rope(ex, {.x = p.kv, .tokens = p.tokens, .vecs = 1, .vec_stride = p.head_dim,
                                   .offset = p.head_dim - p.rope_dim, .positions = p.positions, .freqs = p.freqs}));
    return kv_fp8_sim(ex, {.x = p.kv, .rows = p.tokens, .dim = p.head_dim, .rope_dim = p.rope_dim});
}

namespace {

// l[k] = scale · (q · kv[idx[k]]) for the valid k of idx[0, n) (others -inf), Acc the sum's type (f32: the
// reference kernel's; double: the exact mode's). Eight rows at a time so their sequential sums run side by side;
// each sum still adds its products in index order.
template <typename Acc>
void scaled_dots(const SparseAttnParams& p, const float* q, const int32_t* idx, int64_t n, float* l) {
    constexpr int64_t kRows = 8;
    const int64_t D = p.dim;
    for (int64_t j0 = 0; j0 < n; j0 += kRows) {
        const float* kv[kRows];
        for (int64_t k = 0; k < kRows; ++k)
            kv[k] = j0 + k < n && idx[j0 + k] >= 0 ? p.kv + int64_t(idx[j0 + k]) * D : q;  // q: a harmless stand-in
        Acc acc[kRows] = {};
        for (int64_t i = 0; i < D; ++i)
            for (int64_t k = 0; k < kRows; ++k) acc[k] += Acc(q[i]) * Acc(kv[k][i]);
        for (int64_t k = 0; k < kRows && j0 + k < n; ++k)
            l[j0 + k] = idx[j0 + k] < 0 ? -INFINITY : float(acc[k] * Acc(p.scale));
    }
}

// DeepSeek's sparse_attn kernel for one (token, head): index blocks of 64, running max / sum in f32, P rounded to
// bf16 before P·V, the sink added to the denominator at the end.
void attend_reference(const SparseAttnParams& p, const float* q, const int32_t* idx, float sink, float* l,
                      float* acc, float* out) {
    const int64_t D = p.dim;
    constexpr int64_t kBlock = 64;
    float m = -INFINITY, sum = 0;
    std::fill(acc, acc + D, 0.0f);
    for (int64_t b0 = 0; b0 < p.topk; b0 += kBlock) {
        const int64_t b1 = std::min(p.topk, b0 + kBlock);
        float m_new = m;
        scaled_dots<float>(p, q, idx + b0, b1 - b0, l);
        for (int64_t j = b0; j < b1; ++j)
            if (idx[j] >= 0) m_new = std::max(m_new, l[j - b0]);
        if (m_new == -INFINITY) continue;  // nothing valid so far
        const float rescale = std::exp(m - m_new);  // 0 on the first valid block
        float block_sum = 0;
        for (int64_t i = 0; i < D; ++i) acc[i] *= rescale;
        for (int64_t j = b0; j < b1; ++j) {
            if (idx[j] < 0) continue;
            const float pj = std::exp(l[j - b0] - m_new);
            block_sum += pj;
            const float pb = round_bf16(pj);
            const float* kv = p.kv + int64_t(idx[j]) * D;
            for (int64_t i = 0; i < D; ++i) acc[i] += pb * kv[i];
        }
        sum = sum * rescale + block_sum;
        m = m_new;
    }
    if (m == -INFINITY) {
        std::fill(out, out + D, 0.0f);
        return;
    }
    sum += std::exp(sink - m);
    for (int64_t i = 0; i < D; ++i) out[i] = round_bf16(acc[i] / sum);
}

// Exact softmax with sink, f32 inputs, double sums.
void attend_exact(const SparseAttnParams& p, const float* q, const int32_t* idx, float sink, float* l, double* acc,
                  float* out) {
    const int64_t D = p.dim;
    float m = -INFINITY;
    scaled_dots<double>(p, q, idx, p.topk, l);
    for (int64_t j = 0; j < p.topk; ++j)
        if (idx[j] >= 0) m = std::max(m, l[j]);
    if (m == -INFINITY) {
        std::fill(out, out + D, 0.0f);
        return;
    }
    std::fill(acc, acc + D, 0.0);
    double denom = std::exp(double(sink) - double(m));
    for (int64_t j = 0; j < p.topk; ++j) {
        if (idx[j] < 0) continue;
        const double w = std::exp(double(l[j]) - double(m));
        denom += w;
        const float* kv = p.kv + int64_t(idx[j]) * D;
        for (int64_t i = 0; i < D; ++i) acc[i] += w * double(kv[i]);
    }
    for (int64_t i = 0; i < D; ++i) out[i] = float(acc[i] / denom);
}

}  // namespace

Status sparse_attn(const Exec& ex, const SparseAttnParams& p) {
    const char* op = "sparse_attn";
    DSV4_OP_CHECK(p.q && p.kv && p.idx && p.out && p.tokens >= 0 && p.heads > 0 && p.dim > 0 && p.topk >= 0, op,
                  "null pointer or bad shape");
    DSV4_OP_CHECK(p.sink.numel() == p.heads, op, "sink must have one value per head");
    for (int64_t i = 0; i < p.tokens * p.topk; ++i)
        DSV4_OP_CHECK(p.idx[i] >= -1 && p.idx[i] < p.n_kv, op,
                      "index " + std::to_string(p.idx[i]) + " outside [-1, " + std::to_string(p.n_kv) + ")");
    const bool ref = is_ref(ex);
    Scratch scratch(ex);
    const int64_t slots = slot_count(ex, p.tokens * p.heads, 1), l_len = std::max<int64_t>(p.topk, 64);
    float* l_all = scratch.take<float>(slots * l_len);
    float* acc_all = scratch.take<float>(slots * p.dim);
    double* acc_d_all = scratch.take<double>(slots * p.dim);
    parallel_slots(ex, p.tokens * p.heads, 1, [&](int64_t slot, int64_t b, int64_t e) {
        float* l = l_all + slot * l_len;
        float* acc = acc_all + slot * p.dim;
        double* acc_d = acc_d_all + slot * p.dim;
        for (int64_t r = b; r < e; ++r) {
            const int64_t t = r / p.heads, h = r % p.heads;
            const float* q = p.q + r * p.dim;
            const int32_t* idx = p.idx + t * p.topk;
            float* out = p.out + r * p.dim;
            if (ref)
                attend_reference(p, q, idx, p.sink.at(h), l, acc, out);
            else
                attend_exact(p, q, idx, p.sink.at(h), l, acc_d, out);
        }
    });
    return Status::ok();
}

Status wo_a(const Exec& ex, const WoAParams& p) {
    const char* op = "wo_a";
    DSV4_OP_CHECK(p.o && p.z && p.tokens >= 0 && p.groups > 0 && p.heads % p.groups == 0, op,
                  "null pointer or heads not divisible by groups");
    const int64_t width = (p.heads / p.groups) * p.head_dim;
    DSV4_RETURN_IF_ERROR(check_weight(p.wo_a, p.groups * p.rank, width, "wo_a"));
    const bool ref = is_ref(ex);
    const int64_t rows = p.groups * p.rank, T = p.tokens;
    // Weight tiles of kRowTile rows decoded once per call for all tokens (linear.cpp explains the layout).
    const int64_t tiles = (rows + kRowTile - 1) / kRowTile;
    Scratch scratch(ex);
    const int64_t grain = tile_grain(width, T);
    float* tile_all = scratch.take<float>(slot_count(ex, tiles, grain) * width * kRowTile);
    parallel_slots(ex, tiles, grain, [&](int64_t slot, int64_t tb, int64_t te) {
        float* tile = tile_all + slot * width * kRowTile;
        for (int64_t tl = tb; tl < te; ++tl) {
            const int64_t r0 = tl * kRowTile, r1 = std::min(rows, r0 + kRowTile);
            decode_weight_tile(p.wo_a, r0, false, tile);
            if (ref)  // the converter stores wo_a as bf16 (exact for e4m3 · 2^k)
                for (int64_t i = 0; i < width * kRowTile; ++i) tile[i] = round_bf16_inline(tile[i]);
            // a tile's rows can span two groups (rank not a multiple of kRowTile): one pass per group
            for (int64_t g = r0 / p.rank; g * p.rank < r1; ++g) {
                const int64_t gb = std::max(r0, g * p.rank), ge = std::min(r1, (g + 1) * p.rank);
                const int64_t x_stride = p.heads * p.head_dim;
                for (int64_t t0 = 0; t0 < T; t0 += kDotTokens) {
                    const int nt = int(std::min<int64_t>(kDotTokens, T - t0));
                    float y[kDotTokens][kRowTile];
                    tile_dot(p.o + t0 * x_stride + g * width, x_stride, nt, tile, width, y);
                    for (int u = 0; u < nt; ++u)
                        for (int64_t r = gb; r < ge; ++r)
                            p.z[(t0 + u) * rows + r] = ref ? round_bf16(y[u][r - r0]) : y[u][r - r0];
                }
            }
        }
    });
    return Status::ok();
}

}  // namespace dsv4::backend::cpu
