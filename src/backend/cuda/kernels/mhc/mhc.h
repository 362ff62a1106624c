// Manifold hyper-connections on the GPU (MODEL_SPEC §5.3, §5.6) — the CUDA side of backend::cpu::hc_pre, hc_post
// and hc_head with the same arithmetic (docs/kernels/cuda-backend.md).
//
// Streams and collapsed activations are device arrays of bf16 in Precision::kReference and f32 in kF32; mix
// vectors, pre / post / comb are f32 in both modes. D % 8 == 0, activation rows 16-byte aligned. Launches are
// asynchronous on `stream`.
#pragma once

#include <cstdint>

#include "backend/cuda/common/stream.h"
#include "backend/cuda/common/weights.h"
#include "backend/ops.h"

namespace dsv4::cuda {

// Optional for hc_pre / hc_head: the previous sub-block's hc_post run first in the same launch. The streams x are then
// an output: x[t, k] = post[t, k]·a[t] + Σ_j comb[t, j, k]·residual[t, j], exactly as sm90_hc_post would store them
// into x, and the collapse reads those stored values. post / comb may be the same buffers as HcPreArgs' post / comb
// (each token's are read before they are overwritten). residual must not alias x. All four set, or none.
struct HcPostFirst {
    const void* a = nullptr;         // [T, D]
    const void* residual = nullptr;  // [T, 4, D]
    const float* post = nullptr;     // [T, 4]
    const float* comb = nullptr;     // [T, 4, 4]
};

// Optional for hc_pre at decode (HcPreArgs::wide): the collapse spread over hc_wide_blocks(dim) blocks per token,
// joined by a ticket instead of a cluster, and the sub-block's RMSNorm of x_out in the same launch, so that the norm
// is not a launch of its own: y (and its e4m3 codes and scales) exactly as sm90_rmsnorm writes them from x_out.
// Needs sinkhorn_apart (the wide collapse computes pre and the mixes only), hc_wide_blocks(dim) > 0 and a norm weight.
struct HcWideNorm {
    int32_t* counters = nullptr;  // [T], zero before the launch; the launch leaves them zero
    double* partials = nullptr;   // [T, hc_wide_blocks(dim), 25] workspace
    DeviceWeightView weight;      // the RMSNorm's, bf16 or f32 [D]
    float eps = 1e-6f;
    void* y = nullptr;            // [T, D]
    // optional, both or neither (kReference, D % 128 == 0): y's e4m3 codes [T, D] and f32 scales [T, D / 128], as
    // RmsNormArgs::codes / scales
    uint8_t* codes = nullptr;
    float* scales = nullptr;
};
// Blocks per token of the wide collapse (⌈4·dim / 1,024⌉), 0 where it does not apply (dim % 8 != 0 or dim > 8,192).
int64_t hc_wide_blocks(int64_t dim);
// Decode steps up to this many rows take the wide collapse (the engine's choice; the launch itself takes any count).
// Against the collapse + norm pair on an H200 (dsv4_bench_cuda_ops mhc, 2026-12-05): V4-Flash -2.4 / -2.1 / +0.8 us at
// 1 / 8 / 64 rows, V4-Pro -4.6 / -0.7 / +12.7: one block per SM and a row per last block stop paying past 8 rows.
constexpr int64_t kHcWideMaxTokens = 8;

// m = (fn @ flat(X)) · rsqrt(mean(flat(X)²) + norm_eps) (f64 dot products and sum of squares, as the CPU);
// pre = σ(m[0:4]·s0 + b) + eps; post = 2σ(m[4:8]·s1 + b); comb = Sinkhorn(softmax_rows(m[8:24]·s2 + b) + eps);
// x_out = Σ_j pre[j]·X[j] (bf16 in kReference).
struct HcPreArgs {
    const void* x = nullptr;  // [T, 4, D]
    int64_t tokens = 0, dim = 0;
    DeviceWeightView fn;     // f32 [24, 4D]
    DeviceWeightView scale;  // f32 [3]
    DeviceWeightView base;   // f32 [24]
    int iters = 20;
    float hc_eps = 1e-6f, norm_eps = 1e-6f;
    float* mixes = nullptr;  // [T, 24] (may be null)
    float* pre = nullptr;    // [T, 4]
    float* post = nullptr;   // [T, 4]
    float* comb = nullptr;   // [T, 4, 4], comb[j][k]
    void* x_out = nullptr;   // [T, D]
    HcPostFirst post_first;  // optional: x is then written (above)
    // true: post and comb are neither computed nor written (pointers may be null); mixes is required, and
    // sm90_hc_split_sinkhorn computes post and comb from it later, bit for bit as here. Only pre (4 sigmoids) is on
    // the collapse's own chain; the split + 20 Sinkhorn iterations (a serial ~4.5 µs on one warp at decode) can then
    // run beside the sub-block, whose hc_post is the first reader of post and comb.
    bool sinkhorn_apart = false;
    HcWideNorm wide;  // optional (counters set): the wide collapse with the RMSNorm (HcWideNorm)
};
Status sm90_hc_pre(backend::Precision precision, const HcPreArgs& a, StreamHandle stream);

// post / comb of hc_pre from its mixes (HcPreArgs::sinkhorn_apart): each token's split + Sinkhorn, every value as
// sm90_hc_pre computes it (the same warp-level arithmetic). f32 in both precisions; one warp per token.
struct HcSinkhornArgs {
    const float* mixes = nullptr;  // [T, 24]
    int64_t tokens = 0;
    DeviceWeightView scale;  // f32 [3]
    DeviceWeightView base;   // f32 [24]
    int iters = 20;
    float hc_eps = 1e-6f;
    float* post = nullptr;  // [T, 4]
    float* comb = nullptr;  // [T, 4, 4], comb[j][k]
};
Status sm90_hc_split_sinkhorn(const HcSinkhornArgs& a, StreamHandle stream);

// out[k] = post[k]·a + Σ_j comb[j][k]·R[j] (f32, the CPU's order), bf16 in kReference.
struct HcPostArgs {
    const void* a = nullptr;         // [T, D]
    const void* residual = nullptr;  // [T, 4, D]
    const float* post = nullptr;     // [T, 4]
    const float* comb = nullptr;     // [T, 4, 4]
    int64_t tokens = 0, dim = 0;
    void* out = nullptr;  // [T, 4, D] (must not alias residual)
};
Status sm90_hc_post(backend::Precision precision, const HcPostArgs& a, StreamHandle stream);

// m = (fn @ flat(X)) · rsqrt(mean(flat(X)²) + norm_eps); pre = σ(m·scale[0] + base) + hc_eps; y = Σ_j pre[j]·X[j].
struct HcHeadArgs {
    const void* x = nullptr;  // [T, 4, D]
    int64_t tokens = 0, dim = 0;
    DeviceWeightView fn;     // f32 [4, 4D]
    DeviceWeightView scale;  // f32 [1]
    DeviceWeightView base;   // f32 [4]
    float hc_eps = 1e-6f, norm_eps = 1e-6f;
    float* pre = nullptr;  // [T, 4] (may be null)
    void* y = nullptr;     // [T, D]
    HcPostFirst post_first;  // optional: x is then written (above)
};
Status sm90_hc_head(backend::Precision precision, const HcHeadArgs& a, StreamHandle stream);

}  // namespace dsv4::cuda
