// The KV compressor (MODEL_SPEC §5.4.4), split for incremental use: per-token projections (f32), per-window
// pooling (softmax over the window's slots per channel; CSA adds the previous window's first-half channels), and
// the finish (RMSNorm, RoPE at the window's first position, QAT simulation). The caller keeps the running state.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_ops.h"

namespace dsv4::backend::cpu {

Status compressor_project(const Exec& ex, const CompressorProjectParams& p) {
    const char* op = "compressor_project";
    DSV4_OP_CHECK(p.x && p.kv && p.score && p.positions && p.ratio > 0, op, "null pointer or bad ratio");
    const int64_t width = p.wkv.rows;
    DSV4_RETURN_IF_ERROR(check_weight(p.wgate, width, p.wkv.cols, "compressor_project: wgate"));
    DSV4_RETURN_IF_ERROR(check_weight(p.ape, p.ratio, width, "compressor_project: ape"));
    // "x.float() @ f32 copy of the bf16 weight" in both modes: f32 output, no rounding.
    DSV4_RETURN_IF_ERROR(linear(ex, {.x = p.x, .tokens = p.tokens, .w = p.wkv, .out = LinearOut::kF32, .y = p.kv}));
    DSV4_RETURN_IF_ERROR(
        linear(ex, {.x = p.x, .tokens = p.tokens, .w = p.wgate, .out = LinearOut::kF32, .y = p.score}));
    for (int64_t t = 0; t < p.tokens; ++t) {
        const int64_t slot = p.positions[t] % p.ratio;
        for (int64_t c = 0; c < width; ++c) p.score[t * width + c] += p.ape.at(slot * width + c);
    }
    return Status::ok();
}

Status compressor_pool(const Exec& ex, const CompressorPoolParams& p) {
    const char* op = "compressor_pool";
    DSV4_OP_CHECK(p.kv && p.score && p.out && p.n_windows >= 0 && p.ratio > 0 && p.head_dim > 0, op,
                  "null pointer or bad shape");
    DSV4_OP_CHECK((p.prev_kv == nullptr) == (p.prev_score == nullptr), op, "prev_kv and prev_score go together");
    const int64_t m = p.ratio, c = p.head_dim, width = p.overlap ? 2 * c : c;
    const bool ref = is_ref(ex);
    Scratch scratch(ex);
    float* sv_all = scratch.take<float>(slot_count(ex, p.n_windows, 1) * 4 * m);
    parallel_slots(ex, p.n_windows, 1, [&](int64_t slot, int64_t b, int64_t e) {
        float* s = sv_all + slot * 4 * m;  // [2m] scores, then [2m] values
        float* v = s + 2 * m;
        for (int64_t w = b; w < e; ++w) {
            const float* kv = p.kv + w * m * width;
            const float* sc = p.score + w * m * width;
            const float* pkv = w > 0 ? kv - m * width : p.prev_kv;
            const float* psc = w > 0 ? sc - m * width : p.prev_score;
            for (int64_t ch = 0; ch < c; ++ch) {
                int64_t n = 0;
                if (p.overlap && pkv) {  // previous window, first half ("overlap" series)
                    for (int64_t t = 0; t < m; ++t, ++n) {
                        s[n] = psc[t * width + ch];
                        v[n] = pkv[t * width + ch];
                    }
                }
                const int64_t cur = p.overlap ? c + ch : ch;
                for (int64_t t = 0; t < m; ++t, ++n) {
                    s[n] = sc[t * width + cur];
                    v[n] = kv[t * width + cur];
                }
                float mx = -INFINITY;
                for (int64_t i = 0; i < n; ++i) mx = std::max(mx, s[i]);
                float sum = 0;
                for (int64_t i = 0; i < n; ++i) sum += (s[i] = std::exp(s[i] - mx));
                float acc = 0;
                for (int64_t i = 0; i < n; ++i) acc += v[i] * (s[i] / sum);
                p.out[w * c + ch] = ref ? round_bf16(acc) : acc;
            }
        }
    });
    return Status::ok();
}

Status compressor_finish(const Exec& ex, const CompressorFinishParams& p) {
    const char* op = "compressor_finish";
    DSV4_OP_CHECK(p.pooled && p.out && p.freqs && p.n >= 0 && p.ratio > 0, op, "null pointer or bad shape");
    DSV4_OP_CHECK(p.kind == CompressedKind::kMain || p.head_dim == 128, op, "indexer keys must be 128 wide");
    DSV4_OP_CHECK(p.norm.numel() == p.head_dim, op, "norm length differs from head_dim");
    DSV4_RETURN_IF_ERROR(
        rmsnorm(ex, {.x = p.pooled, .rows = p.n, .dim = p.head_dim, .weight = p.norm, .eps = p.eps, .y = p.out}));
    if (p.normed) std::copy(p.out, p.out + p.n * p.head_dim, p.normed);
    Scratch scratch(ex);
    int64_t* positions = scratch.take<int64_t>(p.n);
    for (int64_t i = 0; i < p.n; ++i) positions[i] = (p.first_window + i) * p.ratio;
    DSV4_RETURN_IF_ERROR(rope(ex, {.x = p.out, .tokens = p.n, .vecs = 1, .vec_stride = p.head_dim,
                                   .offset = p.head_dim - p.rope_dim, .positions = positions,
                                   .freqs = p.freqs}));
    if (!is_ref(ex)) return Status::ok();
    if (p.kind == CompressedKind::kMain)
        return kv_fp8_sim(ex, {.x = p.out, .rows = p.n, .dim = p.head_dim, .rope_dim = p.rope_dim});
    for (int64_t i = 0; i < p.n; ++i) {
        hadamard_row(p.out + i * 128, p.out + i * 128, true);
        fp4_sim_inplace(p.out + i * 128, 128);
    }
    return Status::ok();
}

}  // namespace dsv4::backend::cpu
