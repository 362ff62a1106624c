// Mixture of experts (MODEL_SPEC §5.5): router (sqrt-softplus scores; hash table or biased top-k selection),
// SwiGLU experts with clamp (W8A8 shared, W4A8 routed), and the f32 sum over experts in ascending index.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

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
    Scratch scratch(ex);
    float* logits = scratch.take<float>(p.tokens * E);
    // f32 GEMM on f32 input in both modes
    DSV4_RETURN_IF_ERROR(
        linear(ex, {.x = p.x, .tokens = p.tokens, .w = p.gate, .out = LinearOut::kF32, .y = logits}));
    int32_t* order = scratch.take<int32_t>(E);
    float* sel = scratch.take<float>(E);
    float* scores = scratch.take<float>(E);
    for (int64_t t = 0; t < p.tokens; ++t) {
        const float* lg = logits + t * E;
        for (int64_t e = 0; e < E; ++e) scores[e] = std::sqrt(softplus(lg[e]));
        if (p.logits) std::copy(lg, lg + E, p.logits + t * E);
        if (p.scores) std::copy(scores, scores + E, p.scores + t * E);
        int32_t* idx = p.idx + t * p.k;
        if (hash) {
            for (int64_t j = 0; j < p.k; ++j) idx[j] = int32_t(p.tid2eid[int64_t(p.token_ids[t]) * p.k + j]);
        } else {
            for (int64_t e = 0; e < E; ++e) sel[e] = scores[e] + p.bias.at(e);
            std::iota(order, order + E, 0);
            std::partial_sort(order, order + p.k, order + E,
                              [&](int32_t a, int32_t b) { return sel[a] != sel[b] ? sel[a] > sel[b] : a < b; });
            for (int64_t j = 0; j < p.k; ++j) idx[j] = order[j];
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
    Scratch scratch(ex);
    float* u1 = scratch.take<float>(p.tokens * inter);
    float* u3 = scratch.take<float>(p.tokens * inter);
    DSV4_RETURN_IF_ERROR(linear(ex, {.x = p.x, .tokens = p.tokens, .w = p.w.w1, .out = LinearOut::kBF16, .y = u1}));
    DSV4_RETURN_IF_ERROR(linear(ex, {.x = p.x, .tokens = p.tokens, .w = p.w.w3, .out = LinearOut::kBF16, .y = u3}));
    for (int64_t t = 0; t < p.tokens; ++t) {
        for (int64_t i = 0; i < inter; ++i) {
            float g = u1[t * inter + i], u = u3[t * inter + i];
            if (p.limit > 0) {
                g = std::min(g, p.limit);
                u = std::clamp(u, -p.limit, p.limit);
            }
            float a = g / (1.0f + std::exp(-g)) * u;
            if (p.route_w) a = p.route_w[t] * a;
            u1[t * inter + i] = rnd(ex.precision, a);
        }
    }
    return linear(ex, {.x = u1, .tokens = p.tokens, .w = p.w.w2, .out = LinearOut::kBF16, .y = p.y});
}

Status routed_experts(const Exec& ex, const RoutedExpertsParams& p) {
    const char* op = "routed_experts";
    DSV4_OP_CHECK(p.x && p.experts && p.idx && p.weights && p.out && p.n_experts > 0, op, "null pointer");
    for (int64_t i = 0; i < p.tokens * p.k; ++i)
        DSV4_OP_CHECK(p.idx[i] >= 0 && p.idx[i] < p.n_experts, op, "expert id " + std::to_string(p.idx[i]) + " out of range");
    const int64_t D = p.experts[0].w1.cols, picks_max = p.tokens * p.k;
    Scratch scratch(ex);
    float* xs = scratch.take<float>(picks_max * D);  // the tokens routed to one expert, gathered
    float* ws = scratch.take<float>(picks_max);
    float* ys = scratch.take<float>(picks_max * D);
    int64_t* picks = scratch.take<int64_t>(picks_max);
    for (int64_t e = 0; e < p.n_experts; ++e) {
        int64_t n = 0;
        for (int64_t i = 0; i < picks_max; ++i)
            if (p.idx[i] == e) picks[n++] = i;
        if (n == 0) continue;
        for (int64_t j = 0; j < n; ++j) {
            const int64_t t = picks[j] / p.k;
            std::copy(p.x + t * D, p.x + (t + 1) * D, xs + j * D);
            ws[j] = p.weights[picks[j]];
        }
        DSV4_RETURN_IF_ERROR(
            expert(ex, {.x = xs, .tokens = n, .w = p.experts[e], .route_w = ws, .limit = p.limit, .y = ys}));
        for (int64_t j = 0; j < n; ++j) std::copy(ys + j * D, ys + (j + 1) * D, p.out + picks[j] * D);
    }
    return Status::ok();
}

Status moe_sum(const Exec& ex, const MoeSumParams& p) {
    DSV4_OP_CHECK(p.expert_out && p.idx && p.y && p.tokens >= 0 && p.k > 0 && p.dim > 0, "moe_sum",
                  "null pointer or bad shape");
    Scratch scratch(ex);
    int64_t* order_all = scratch.take<int64_t>(slot_count(ex, p.tokens, 16) * p.k);
    parallel_slots(ex, p.tokens, 16, [&](int64_t slot, int64_t b, int64_t e) {
        int64_t* order = order_all + slot * p.k;
        for (int64_t t = b; t < e; ++t) {
            std::iota(order, order + p.k, 0);
            const int32_t* idx = p.idx + t * p.k;
            // insertion sort: stable and in place (std::stable_sort may allocate)
            for (int64_t a = 1; a < p.k; ++a)
                for (int64_t c = a; c > 0 && idx[order[c]] < idx[order[c - 1]]; --c) std::swap(order[c], order[c - 1]);
            for (int64_t i = 0; i < p.dim; ++i) {
                float acc = 0;
                for (int64_t jj = 0; jj < p.k; ++jj) acc += p.expert_out[(t * p.k + order[jj]) * p.dim + i];
                if (p.shared) acc += p.shared[t * p.dim + i];
                p.y[t * p.dim + i] = rnd(ex.precision, acc);
            }
        }
    });
    return Status::ok();
}

}  // namespace dsv4::backend::cpu
