// The bf16 decode GEMV (gemv_bf16.h): y = W·x for 1-8 tokens, bf16 weight and input, f32 tensor-core sums.
//
// Why a kernel of our own: at decode the bf16 linears (the compressors' projections, the indexer's head weights, the
// router gate beyond its fused kernel) are one or a few rows of x against a weight of 0.5 to 15 MB.
// cuBLASLt runs them well, but as a foreign kernel its edges in the decode graph stay full dependencies (graph.cu
// makes only edges into this backend's kernels programmatic), so each call pays its launch and drain on the step's
// chain, and a bf16 output needs a second launch to round. This kernel is the FP8 decode GEMV's structure
// (gemm_fp8/gemv_fp8.cu) without the conversion: each warp loads its 16 rows' bytes straight into registers, the
// first kWeightSets K blocks requested before the programmatic wait, and the K splits of a 16-row tile are warps of one
// block, reduced through shared memory in split order (common/gemv_stream.cuh).
//
// Block: 8 warps = RT row tiles of 16 x KS K splits (KS chosen so that the grid has about one warp per resident-warp
// slot). K block = 64 elements (128 bytes of a row). Lane (g, t) = (lane/4, lane%4) loads bytes 16t..16t+15 and
// 64+16t..64+16t+15 of the K block of rows g and g+8 (8 words of 2 bf16 per row) and the same bytes of token g's row
// of x; MMA j (m16n8k16, bf16, f32 accumulators) takes words 2j (k slots 2t, 2t+1) and 2j+1 (slots 2t+8, 2t+9) of A
// and B alike, so each product pairs matching elements. Two accumulators (even and odd j) halve the MMA chain; their
// sum, then the splits in order. Numerics: products exact in f32, sums in f32 in the tensor core's order — the class
// of the cuBLASLt path it replaces (not the CPU's summation order).
#include <algorithm>
#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/gemv_stream.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/ld_stream.cuh"
#include "backend/cuda/common/mma_bf16.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kernels/embed_head/gemv_bf16.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32, kBK = 64;
// K blocks in flight per warp (register sets of 16 registers each): three took 3 % off the small projections alone
// against two (the step unchanged); four brought the 1 GB lm head from 290 to 273 us, still 13 % slower than
// cuBLASLt (docs/kernels/cuda-backend.md, "More K blocks in flight")
constexpr int kWeightSets = 3;

// One K block's weight bytes of the lane: [row g, g+8][bytes 16t.., 64+16t..].
struct Bf16WeightRegs {
    uint4 lo[2], hi[2];
};

__device__ __forceinline__ uint32_t word8(const uint4 (&v)[2], int i) {
    const uint4& h = v[i >> 2];
    return (i & 3) == 0 ? h.x : (i & 3) == 1 ? h.y : (i & 3) == 2 ? h.z : h.w;
}

// One weight of a launch and its output (exactly one of y32, y16 non-null).
struct Bf16GemvOut {
    const __nv_bfloat16* w;
    float* y32;
    __nv_bfloat16* y16;
};

// grid: (row-tile blocks, weights); grid row 1 takes `second` (a pair of weights of one shape against one x, e.g. a
// compressor's wkv and wgate: one launch, each block the same work as in a launch of its weight alone).
template <int KS>
__global__ void __launch_bounds__(kThreads, 2)
    sm90_bf16_gemv_kernel(Bf16GemvOut first, Bf16GemvOut second, const __nv_bfloat16* __restrict__ x, int N, int K,
                          int T) {
    pdl_enter(false);
    const bool two = blockIdx.y != 0;
    const __nv_bfloat16* __restrict__ w = two ? second.w : first.w;
    float* __restrict__ y32 = two ? second.y32 : first.y32;
    __nv_bfloat16* __restrict__ y16 = two ? second.y16 : first.y16;
    // the first kWeightSets K blocks' weight loads are issued before the wait (weights are written only at model load)
    constexpr int RT = kWarps / KS, S = kWeightSets;
    __shared__ float4 red[kGemvSplitSlots<KS, RT, 1>];
    const GemvWarp<RT, KS> wp(N, K, kBK);
    const int lane = wp.lane, g = wp.g, t = wp.t, rt = wp.rt, ks = wp.ks, row0 = wp.row0;
    const int r_lo = wp.r_lo, r_hi = wp.r_hi, kb_begin = wp.kb_begin, kb_end = wp.kb_end;
    const uint8_t* wl = reinterpret_cast<const uint8_t*>(w + size_t(r_lo) * size_t(K)) + 16 * t;
    const uint8_t* wh = reinterpret_cast<const uint8_t*>(w + size_t(r_hi) * size_t(K)) + 16 * t;
    auto load = [&](int kb, Bf16WeightRegs& r, auto ld) {
        const size_t o = size_t(kb) * kBK * 2;
        r.lo[0] = ld(wl + o), r.lo[1] = ld(wl + o + 64);
        r.hi[0] = ld(wh + o), r.hi[1] = ld(wh + o + 64);
    };
    Bf16WeightRegs r[S];
    gemv_first_loads(r, kb_begin, kb_end, load);
    pdl_wait();

    // this lane's B column is token g (zeros past the last token)
    const bool tok = g < T;
    const uint4* xrow = reinterpret_cast<const uint4*>(x + size_t(tok ? g : 0) * size_t(K)) + t;
    float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    // K block kb from register set regs, which then takes K block kb + S
    auto step = [&](int kb, Bf16WeightRegs& regs) {
        uint4 xv[2];
        xv[0] = tok ? __ldg(xrow + size_t(kb) * 8) : make_uint4(0, 0, 0, 0);
        xv[1] = tok ? __ldg(xrow + size_t(kb) * 8 + 4) : make_uint4(0, 0, 0, 0);
        uint32_t a[4][4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            a[j][0] = word8(regs.lo, 2 * j), a[j][1] = word8(regs.hi, 2 * j);
            a[j][2] = word8(regs.lo, 2 * j + 1), a[j][3] = word8(regs.hi, 2 * j + 1);
        }
        if (kb + S < kb_end) load(kb + S, regs, StreamLoad16{});
#pragma unroll
        for (int j = 0; j < 4; ++j) mma_bf16_16816(acc[j & 1], a[j], word8(xv, 2 * j), word8(xv, 2 * j + 1));
    };
    gemv_walk(r, kb_begin, kb_end, step);
    float yv[1][4];
#pragma unroll
    for (int i = 0; i < 4; ++i) yv[0][i] = __fadd_rn(acc[0][i], acc[1][i]);
    if (!gemv_sum_k_splits<KS, RT, 1>(red, ks, rt, lane, yv)) {
        return;  // a warp of a later K split: split 0 now holds its sums
    }
    // C fragment: (row g, tokens 2t, 2t+1), (row g+8, the same tokens)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int row = row0 + g + (i >= 2 ? 8 : 0), tk = 2 * t + (i & 1);
        if (row >= N || tk >= T) continue;
        const size_t o = size_t(tk) * size_t(N) + size_t(row);
        if (y32)
            y32[o] = yv[0][i];
        else
            y16[o] = __float2bfloat16_rn(yv[0][i]);
    }
}

template <int KS>
Status launch(const void* x, int64_t T, const Bf16GemvJob* jobs, int count, StreamHandle s) {
    constexpr int RT = kWarps / KS;
    const DeviceWeightView& w = jobs[0].w;
    const int64_t tiles = (w.rows + 15) / 16;
    const dim3 grid(unsigned((tiles + RT - 1) / RT), unsigned(count));
    Bf16GemvOut out[2];
    for (int i = 0; i < 2; ++i) {
        const Bf16GemvJob& j = jobs[i < count ? i : 0];
        out[i] = {static_cast<const __nv_bfloat16*>(j.w.data), j.y32, static_cast<__nv_bfloat16*>(j.y16)};
    }
    sm90_bf16_gemv_kernel<KS><<<grid, kThreads, 0, s>>>(out[0], out[1], static_cast<const __nv_bfloat16*>(x),
                                                        int(w.rows), int(w.cols), int(T));
    return launch_status("sm90_bf16_gemv");
}

Status launch_jobs(const void* x, int64_t tokens, const Bf16GemvJob* jobs, int count, StreamHandle stream) {
    const DeviceWeightView& w = jobs[0].w;
    for (int i = 0; i < count; ++i) {
        const Bf16GemvJob& j = jobs[i];
        if (!bf16_gemv_fits(tokens, j.w))
            return invalid_argument("sm90_bf16_gemv: " + std::to_string(tokens) + " tokens, weight " +
                                    std::to_string(j.w.rows) + " x " + std::to_string(j.w.cols) +
                                    ": expected 1..8 tokens and a bf16 weight of at most 64 MiB with K a multiple of "
                                    "64");
        if ((j.y32 == nullptr) == (j.y16 == nullptr))
            return invalid_argument("sm90_bf16_gemv: give exactly one output");
        if (j.w.rows != w.rows || j.w.cols != w.cols || (j.y32 == nullptr) != (jobs[0].y32 == nullptr))
            return invalid_argument("sm90_bf16_gemv: a pair needs two weights of one shape and outputs of one type");
    }
    switch (gemv_k_splits(w.rows, w.cols, kWarps)) {
        case 1:
            return launch<1>(x, tokens, jobs, count, stream);
        case 2:
            return launch<2>(x, tokens, jobs, count, stream);
        case 4:
            return launch<4>(x, tokens, jobs, count, stream);
        default:
            return launch<8>(x, tokens, jobs, count, stream);
    }
}

}  // namespace

bool bf16_gemv_fits(int64_t tokens, const DeviceWeightView& w) {
    return tokens >= 1 && tokens <= kBf16GemvMaxTokens && w.format == backend::WeightFormat::kBF16 && w.rows >= 1 &&
           w.cols >= kBK && w.cols % kBK == 0 && w.rows <= kBf16GemvMaxWeightBytes / (2 * w.cols);
}

Status launch_bf16_gemv(const void* x, int64_t tokens, const DeviceWeightView& w, float* y32, void* y16,
                        StreamHandle stream) {
    const Bf16GemvJob job{w, y32, y16};
    return launch_jobs(x, tokens, &job, 1, stream);
}

Status launch_bf16_gemv_pair(const void* x, int64_t tokens, const Bf16GemvJob& a, const Bf16GemvJob& b,
                             StreamHandle stream) {
    const Bf16GemvJob jobs[2] = {a, b};
    return launch_jobs(x, tokens, jobs, 2, stream);
}

}  // namespace dsv4::cuda
