// sm90_fp8_gemv: y = W·x for 1-16 tokens (decode), the numerics of sm90_fp8_gemm_block128 (gemm_fp8.cuh): per
// 128-wide K block an f32 tensor-core sum of exact e4m3 products, then y += acc · (a_scale · w_scale) with separate
// IEEE multiply and add; bf16 out.
//
// Why a second kernel: at decode shapes the shared-memory ring GEMM splits K across blocks wherever the output tiles
// are few (o_b, q_a, wkv, the indexer's q_b) and needs a second launch to reduce, and its 64-row tiles live only a
// few K blocks. Here every byte goes from global memory straight into the registers of the one warp that uses it, as
// in the MoE decode kernel's FP8-block stage: no shared-memory staging, no block-wide barrier per K block, the next
// K block's weight loads issued before the current one is multiplied, and the K splits of a 16-row tile are warps of
// the same block, reduced through shared memory in split order in the same launch (common/gemv_stream.cuh, shared
// with the bf16 decode GEMV). Measured against the ring GEMM
// (docs/kernels/cuda-backend.md): ~2x faster on the small projections, -22 % on o_b, the same ~61 % of copy on q_b at
// one token, 22-44 % faster at 9-16 tokens.
//
// Block: 8 warps = RT row tiles of 16 x KS K splits (RT · KS = 8; KS chosen by the launcher so that the grid has
// about one warp per resident-warp slot of the GPU). Warp (rt, ks) owns rows row0 + 16·rt + {g, g+8} (g = lane/4)
// and a contiguous run of K blocks. Lane t = lane%4 owns bytes 16t..16t+15 and 64+16t..64+16t+15 of each 128-byte
// K block (each 16-byte load of the warp covers whole 64-byte row segments); its 32 bytes form 16 e4m3 pairs
// (bytes 2p, 2p+1), MMA j (m16n8k16, f16 from cvt.f16x2.e4m3x2, exact) takes pairs 2j (a0/a1, b0) and 2j+1
// (a2/a3, b1). The token's activation bytes are loaded with the same pattern (token = MMA column g: lanes with
// g >= T feed zeros), so each lane multiplies matching elements; which 16 elements one MMA sums is a permutation
// of the block's, exact products either way. From 9 tokens a second tile of 8 has its own accumulators and reuses
// the K block's f16 weight fragments, converted once. (Four and eight tiles were built and measured, 2026-12-02: at
// 64 tokens they need 206-255 registers, one block per SM, and lost to the ring GEMM on q_b, q_a and wkv; the limit
// is kFp8GemvMaxTokens.)
#include <algorithm>
#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/gemv_stream.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/ld_stream.cuh"
#include "backend/cuda/common/mma_bf16.cuh"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kernels/gemm_fp8/gemv_fp8.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32, kBK = 128;

// K blocks in flight per warp (register sets of 16 registers each). Two: three or four (one token tile, 96 / 122
// registers, two blocks per SM) made the decode step 0.05-0.1 ms slower at batch 1 than two at three blocks per SM
// (docs/kernels/cuda-backend.md, "More K blocks in flight"); two token tiles use all 128 registers with two sets.
constexpr int kWeightSets = 2;
// Resident blocks per SM: one token tile fits three (<= 85 registers; the step at batch 1 0.07-0.09 ms faster than
// with two), two token tiles two. The K-split rule (gemv_k_splits) counts two either way: counting three changed
// nothing measurable.
template <int NT>
constexpr int kMinBlocksPerSm = NT == 1 ? 3 : 2;

__device__ __forceinline__ uint32_t word(const uint4 (&v)[2], int i) {
    const uint4& h = v[i >> 2];
    return (i & 3) == 0 ? h.x : (i & 3) == 1 ? h.y : (i & 3) == 2 ? h.z : h.w;
}

// One K block's weight bytes of the lane: [row g, g+8][half].
struct WeightRegs {
    uint4 lo[2], hi[2];
};

template <int KS, int NT>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm<NT>)
    sm90_fp8_gemv_kernel(const uint8_t* __restrict__ w, const uint8_t* __restrict__ w_scale,
                         const uint8_t* __restrict__ a, const float* __restrict__ a_scale, int N, int K, int T,
                         __nv_bfloat16* __restrict__ y) {
    pdl_enter(false);
    // the first kWeightSets K blocks' weight loads are issued before the wait (weights are written only at model load)
    constexpr int RT = kWarps / KS, S = kWeightSets;
    __shared__ float4 red[kGemvSplitSlots<KS, RT, NT>];
    const GemvWarp<RT, KS> wp(N, K, kBK);
    const int lane = wp.lane, g = wp.g, t = wp.t, rt = wp.rt, ks = wp.ks, row0 = wp.row0;
    const int r_lo = wp.r_lo, r_hi = wp.r_hi, kb_begin = wp.kb_begin, kb_end = wp.kb_end, KB = K / kBK;
    const uint8_t* wl = w + size_t(r_lo) * size_t(K) + 16 * t;
    const uint8_t* wh = w + size_t(r_hi) * size_t(K) + 16 * t;
    auto load = [&](int kb, WeightRegs& r, auto ld) {
        const size_t o = size_t(kb) * kBK;
        r.lo[0] = ld(wl + o), r.lo[1] = ld(wl + o + 64);
        r.hi[0] = ld(wh + o), r.hi[1] = ld(wh + o + 64);
    };
    WeightRegs r[S];
    gemv_first_loads(r, kb_begin, kb_end, load);
    pdl_wait();

    const uint8_t* wsrow = w_scale + size_t(min(row0, N - 1) / 128) * size_t(KB);
    float yv[NT][4];
#pragma unroll
    for (int n = 0; n < NT; ++n) yv[n][0] = yv[n][1] = yv[n][2] = yv[n][3] = 0.0f;
    // Token tile n: this lane's B column is token 8n + g, its accumulator columns tokens 8n + 2t and 8n + 2t + 1.
    auto tile_mma = [&](int kb, int n, const uint32_t(&af)[8][4], float sw) {
        const int tb = 8 * n + g, c0 = 8 * n + 2 * t, c1 = c0 + 1;
        const uint4* ap =
            reinterpret_cast<const uint4*>(a + size_t(tb < T ? tb : 0) * size_t(K) + size_t(kb) * kBK + 16 * t);
        uint4 av[2];
        av[0] = tb < T ? __ldg(ap) : make_uint4(0, 0, 0, 0);
        av[1] = tb < T ? __ldg(ap + 4) : make_uint4(0, 0, 0, 0);
        const float sa0 = c0 < T ? __ldg(a_scale + size_t(c0) * KB + kb) : 0.0f;
        const float sa1 = c1 < T ? __ldg(a_scale + size_t(c1) * KB + kb) : 0.0f;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const uint32_t b = word(av, j);
            mma_f16_16816(acc, af[j][0], af[j][1], af[j][2], af[j][3], e4m3x2_f16x2(b), e4m3x2_f16x2_hi(b));
        }
        const float s0 = __fmul_rn(sa0, sw), s1 = __fmul_rn(sa1, sw);
        yv[n][0] = __fadd_rn(yv[n][0], __fmul_rn(acc[0], s0));
        yv[n][1] = __fadd_rn(yv[n][1], __fmul_rn(acc[1], s1));
        yv[n][2] = __fadd_rn(yv[n][2], __fmul_rn(acc[2], s0));
        yv[n][3] = __fadd_rn(yv[n][3], __fmul_rn(acc[3], s1));
    };
    // K block kb from register set r, which then takes K block kb + S: one token tile converts the weights inside
    // its MMAs and refills r after them; two convert once into f16 fragments, refill r at once (the loads are in
    // flight during both tiles' MMAs) and reuse the fragments for each tile.
    auto step = [&](int kb, WeightRegs& regs) {
        const float sw = e8m0_to_f32(__ldg(wsrow + kb));
        uint32_t af[8][4];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const uint32_t l = word(regs.lo, j), h = word(regs.hi, j);
            af[j][0] = e4m3x2_f16x2(l), af[j][1] = e4m3x2_f16x2(h);
            af[j][2] = e4m3x2_f16x2_hi(l), af[j][3] = e4m3x2_f16x2_hi(h);
        }
        if constexpr (NT == 1) {
            tile_mma(kb, 0, af, sw);
            if (kb + S < kb_end) load(kb + S, regs, StreamLoad16{});
        } else {
            if (kb + S < kb_end) load(kb + S, regs, StreamLoad16{});
#pragma unroll
            for (int n = 0; n < NT; ++n) tile_mma(kb, n, af, sw);
        }
    };
    gemv_walk(r, kb_begin, kb_end, step);
    if (!gemv_sum_k_splits<KS, RT, NT>(red, ks, rt, lane, yv)) {
        return;  // a warp of a later K split: split 0 now holds its sums
    }
    // C fragment: (row g, tokens 2t, 2t+1), (row g+8, the same tokens) of each token tile
#pragma unroll
    for (int n = 0; n < NT; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = row0 + g + (i >= 2 ? 8 : 0), tok = 8 * n + 2 * t + (i & 1);
            if (row < N && tok < T) y[size_t(tok) * size_t(N) + row] = __float2bfloat16_rn(yv[n][i]);
        }
    }
}

template <int KS, int NT>
Status launch(const Fp8GemmArgs& a, StreamHandle s) {
    constexpr int RT = kWarps / KS;
    const int64_t tiles = (a.w.rows + 15) / 16;
    const unsigned grid = unsigned((tiles + RT - 1) / RT);
    sm90_fp8_gemv_kernel<KS, NT><<<grid, kThreads, 0, s>>>(static_cast<const uint8_t*>(a.w.data), a.w.scale, a.a_codes,
                                                           a.a_scale, int(a.w.rows), int(a.w.cols), int(a.tokens),
                                                           static_cast<__nv_bfloat16*>(a.y));
    return launch_status("sm90_fp8_gemv");
}

template <int NT>
Status launch_tiles(const Fp8GemmArgs& a, StreamHandle s) {
    switch (gemv_k_splits(a.w.rows, a.w.cols, kWarps)) {
        case 1:
            return launch<1, NT>(a, s);
        case 2:
            return launch<2, NT>(a, s);
        case 4:
            return launch<4, NT>(a, s);
        default:
            return launch<8, NT>(a, s);
    }
}

}  // namespace

Status launch_fp8_gemv(const Fp8GemmArgs& a, StreamHandle stream) {
    if (a.tokens < 1 || a.tokens > kFp8GemvMaxTokens)
        return invalid_argument("sm90_fp8_gemv: " + std::to_string(a.tokens) + " tokens, expected 1.." +
                                std::to_string(kFp8GemvMaxTokens));
    return a.tokens <= 8 ? launch_tiles<1>(a, stream) : launch_tiles<2>(a, stream);
}

}  // namespace dsv4::cuda
