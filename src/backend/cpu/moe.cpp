// Mixture of experts (MODEL_SPEC §5.5): router (sqrt-softplus scores; hash table or biased top-k selection),
// SwiGLU experts with clamp (W8A8 shared, W4A8 routed), and the f32 sum over experts in ascending index.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_ops.h"

namespace dsv4::backend::cpu {

Status router(const Exec& ex, const RouterParams& p) {
    const char* op = "router";
    DSV4_OP_CHECK(p.x && p.idx && p.weights && p.n_experts > 0 && p.k > 0 && p.k <= p.n_experts, op,
                  "null pointer or bad k / expert count");
    DSV4_RETURN_IF_ERROR(check_weight(p.gate, p.n_experts, p.gate.cols, "router: gate"));
    const bool hash = p.bias.empty();
    if (hash) {
        DSV4_OP_CHECK(p.tid2eid && p.token_ids, op, "hash routing needs tid2eid and token ids");
        for (int64_t t = 0; t < p.tokens; ++t) {
            DSV4_OP_CHECK(p.token_ids[t] >= 0 && p.token_ids[t] < p.vocab, op,
                          "token id " + std::to_string(p.token_ids[t]) + " outside tid2eid");
            for (int64_t j = 0; j < p.k; ++j) {
                const int64_t eid = p.tid2eid[int64_t(p.token_ids[t]) * p.k + j];
                DSV4_OP_CHECK(eid >= 0 && eid < p.n_experts, op, "tid2eid entry " + std::to_string(eid) + " out of range");
            }
        }
    } else {
        DSV4_OP_CHECK(p.bias.numel() == p.n_experts, op, "bias length differs from the expert count");
    }
    const int64_t E = p.n_experts;
    std::vector<float> logits(static_cast<size_t>(p.tokens * E));
    // f32 GEMM on f32 input in both modes
    DSV4_RETURN_IF_ERROR(
        linear(ex, {.x = p.x, .tokens = p.tokens, .w = p.gate, .out = LinearOut::kF32, .y = logits.data()}));
    std::vector<int32_t> order(static_cast<size_t>(E));
    std::vector<float> sel(static_cast<size_t>(E));
    for (int64_t t = 0; t < p.tokens; ++t) {
        const float* lg = logits.data() + t * E;
        float sc[1024];
        float* scores = E <= 1024 ? sc : nullptr;
        std::vector<float> big;
        if (!scores) {
            big.resize(size_t(E));
            scores = big.data();
        }
        for (int64_t e = 0; e < E; ++e) scores[e] = std::sqrt(softplus(lg[e]));
        if (p.logits) std::copy(lg, lg + E, p.logits + t * E);
        if (p.scores) std::copy(scores, scores + E, p.scores + t * E);
        int32_t* idx = p.idx + t * p.k;
        if (hash) {
            for (int64_t j = 0; j < p.k; ++j) idx[j] = int32_t(p.tid2eid[int64_t(p.token_ids[t]) * p.k + j]);
        } else {
            for (int64_t e = 0; e < E; ++e) sel[size_t(e)] = scores[e] + p.bias.at(e);
            std::iota(order.begin(), order.end(), 0);
            std::partial_sort(order.begin(), order.begin() + p.k, order.end(), [&](int32_t a, int32_t b) {
                return sel[size_t(a)] != sel[size_t(b)] ? sel[size_t(a)] > sel[size_t(b)] : a < b;
            });
            for (int64_t j = 0; j < p.k; ++j) idx[j] = order[size_t(j)];
        }
        float sum = 0;
        for (int64_t j = 0; j < p.k; ++j) sum += scores[idx[j]];
        for (int64_t j = 0; j < p.k; ++j) p.weights[t * p.k + j] = scores[idx[j]] / sum * p.routed_scale;
    }
    return Status::ok();
}

Status expert(const Exec& ex, const ExpertParams& p) {
    const char* op = "expert";
    DSV4_OP_CHECK(p.x && p.y && p.tokens >= 0, op, "null pointer or negative token count");
    const int64_t inter = p.w.w1.rows, D = p.w.w1.cols;
    DSV4_RETURN_IF_ERROR(check_weight(p.w.w3, inter, D, "expert: w3"));
    DSV4_RETURN_IF_ERROR(check_weight(p.w.w2, D, inter, "expert: w2"));
    std::vector<float> u1(static_cast<size_t>(p.tokens * inter)), u3(static_cast<size_t>(p.tokens * inter));
    DSV4_RETURN_IF_ERROR(linear(ex, {.x = p.x, .tokens = p.tokens, .w = p.w.w1, .out = LinearOut::kBF16, .y = u1.data()}));
    DSV4_RETURN_IF_ERROR(linear(ex, {.x = p.x, .tokens = p.tokens, .w = p.w.w3, .out = LinearOut::kBF16, .y = u3.data()}));
    for (int64_t t = 0; t < p.tokens; ++t) {
        for (int64_t i = 0; i < inter; ++i) {
            float g = u1[size_t(t * inter + i)], u = u3[size_t(t * inter + i)];
            if (p.limit > 0) {
                g = std::min(g, p.limit);
                u = std::clamp(u, -p.limit, p.limit);
            }
            float a = g / (1.0f + std::exp(-g)) * u;
            if (p.route_w) a = p.route_w[t] * a;
            u1[size_t(t * inter + i)] = rnd(ex.precision, a);
        }
    }
    return linear(ex, {.x = u1.data(), .tokens = p.tokens, .w = p.w.w2, .out = LinearOut::kBF16, .y = p.y});
}

Status routed_experts(const Exec& ex, const RoutedExpertsParams& p) {
    const char* op = "routed_experts";
    DSV4_OP_CHECK(p.x && p.experts && p.idx && p.weights && p.out && p.n_experts > 0, op, "null pointer");
    for (int64_t i = 0; i < p.tokens * p.k; ++i)
        DSV4_OP_CHECK(p.idx[i] >= 0 && p.idx[i] < p.n_experts, op, "expert id " + std::to_string(p.idx[i]) + " out of range");
    const int64_t D = p.experts[0].w1.cols;
    std::vector<float> xs, ws, ys;
    std::vector<int64_t> picks;
    for (int64_t e = 0; e < p.n_experts; ++e) {
        picks.clear();
        for (int64_t i = 0; i < p.tokens * p.k; ++i)
            if (p.idx[i] == e) picks.push_back(i);
        if (picks.empty()) continue;
        const int64_t n = int64_t(picks.size());
        xs.resize(size_t(n * D));
        ws.resize(size_t(n));
        ys.resize(size_t(n * D));
        for (int64_t j = 0; j < n; ++j) {
            const int64_t t = picks[size_t(j)] / p.k;
            std::copy(p.x + t * D, p.x + (t + 1) * D, xs.data() + j * D);
            ws[size_t(j)] = p.weights[picks[size_t(j)]];
        }
        DSV4_RETURN_IF_ERROR(expert(ex, {.x = xs.data(), .tokens = n, .w = p.experts[e], .route_w = ws.data(),
                                         .limit = p.limit, .y = ys.data()}));
        for (int64_t j = 0; j < n; ++j)
            std::copy(ys.data() + j * D, ys.data() + (j + 1) * D, p.out + picks[size_t(j)] * D);
    }
    return Status::ok();
}

Status moe_sum(const Exec& ex, const MoeSumParams& p) {
    DSV4_OP_CHECK(p.expert_out && p.idx && p.y && p.tokens >= 0 && p.k > 0 && p.dim > 0, "moe_sum",
                  "null pointer or bad shape");
    parallel_rows(ex, p.tokens, 16, [&](int64_t b, int64_t e) {
        std::vector<int64_t> order(static_cast<size_t>(p.k));
        for (int64_t t = b; t < e; ++t) {
            std::iota(order.begin(), order.end(), 0);
            const int32_t* idx = p.idx + t * p.k;
            std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t c) { return idx[a] < idx[c]; });
            for (int64_t i = 0; i < p.dim; ++i) {
                float acc = 0;
                for (int64_t j : order) acc += p.expert_out[(t * p.k + j) * p.dim + i];
                if (p.shared) acc += p.shared[t * p.dim + i];
                p.y[t * p.dim + i] = rnd(ex.precision, acc);
            }
        }
    });
    return Status::ok();
}

}  // namespace dsv4::backend::cpu
