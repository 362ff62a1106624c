// sm90_indexer_q_finish: the indexer query's RoPE, Hadamard-128 and e2m1 simulation in one launch, and optionally the
// head weights' scale (indexer.h).
#include <cuda_bf16.h>

#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/common/warp_ops.cuh"
#include "backend/cuda/kernels/gemm_fp8/gemm_fp8.h"
#include "backend/cuda/kernels/indexer/indexer.h"
#include "backend/cuda/kernels/norm_rope/norm_rope.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kWarps = 8;                       // (token, head) vectors per block, one per warp
constexpr int kMaxQSplits = kFp8GemmMaxSplits;  // the projection's K splits the finish can reduce
constexpr float kE2m1Max = 6.0f;

// Warp = one 128-channel head vector; lane L holds channels 4L..4L+3 (hadamard128_warp's layout), so lanes 16..31
// hold the rotated channels 64..127 as pairs 2(L − 16) and 2(L − 16) + 1, and the 8 lanes 8b..8b+7 one e2m1 block.
// Each step rounds to bf16 where the three kernels store bf16: after the rotation, after the Hadamard, the
// simulation's product.
// With q_int: the simulation as integers 2·e2m1 (|i| <= 12) times 2^(e_b - 1), e_b the block's scale exponent; a head
// whose blocks' e_b span at most 3 binades folds the offsets e_b - min e into the integers (<= 96) and stores the
// minimum as all four exponents.
__global__ void __launch_bounds__(kWarps * 32)
    sm90_indexer_q_finish_kernel(__nv_bfloat16* __restrict__ q, int64_t vectors, int heads,
                                 const int64_t* __restrict__ positions,
                                 const __grid_constant__ backend::RopeFreqs freqs, int8_t* __restrict__ q_int,
                                 int8_t* __restrict__ q_exp, const float* __restrict__ partials, int splits,
                                 __nv_bfloat16* __restrict__ w, float w_scale) {
    pdl_enter();
    const int lane = threadIdx.x & 31;
    const int64_t v = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
    if (v >= vectors) return;
    if (w && lane == 0) w[v] = __float2bfloat16_rn(__fmul_rn(__bfloat162float(w[v]), w_scale));  // sm90_scale
    auto* p = reinterpret_cast<uint2*>(q + v * 128 + 4 * lane);
    float x[4];
    if (partials) {  // sm90_fp8_gemm_reduce_kernel's sum (split order) and rounding; 4 splits' loads at a time
        const float* at = partials + size_t(v) * 128 + 4 * lane;
        const size_t n_out = size_t(vectors) * 128;
        float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int z0 = 0; z0 < splits; z0 += 4) {
            float4 part[4];
#pragma unroll
            for (int i = 0; i < 4; ++i)
                if (z0 + i < splits) part[i] = *reinterpret_cast<const float4*>(at + size_t(z0 + i) * n_out);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                if (z0 + i >= splits) break;
                const float add[4] = {part[i].x, part[i].y, part[i].z, part[i].w};
#pragma unroll
                for (int c = 0; c < 4; ++c) sum[c] = z0 + i == 0 ? add[c] : __fadd_rn(sum[c], add[c]);
            }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) x[i] = round_bf16(sum[i]);
    } else {
        const uint2 in = *p;
        const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&in.x));
        const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&in.y));
        x[0] = lo.x, x[1] = lo.y, x[2] = hi.x, x[3] = hi.y;
    }
    if (lane >= 16) {  // RoPE (sm90_rope: pair i at freqs.f[i], f32 products and sums, bf16 stores)
        const int64_t pos = positions[v / heads];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            float c, s;
            rope_cos_sin(pos, freqs.f[2 * (lane - 16) + j], false, c, s);
            rotate_pair(x[2 * j], x[2 * j + 1], c, s);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) x[i] = round_bf16(x[i]);
    }
    hadamard128_warp(x);
    float amax = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) x[i] = round_bf16(x[i]), amax = fmaxf(amax, fabsf(x[i]));
    amax = group_max(amax, 8);  // the 32 channels of this lane's block
    const int e = ue8m0_exponent_for(amax, __fmul_rn(kE2m1Max, exp2_int(-126)), kE2m1Max);
    const float s = exp2_int(e);
    int twice[4];  // 2·e2m1: exact integers in [-12, 12]
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float qv = fminf(fmaxf(__fmul_rn(x[i], exp2_int(-e)), -kE2m1Max), kE2m1Max);
        const float code_value = e2m1_to_f32(f32_to_e2m1(qv));
        x[i] = round_bf16(__fmul_rn(code_value, s));
        twice[i] = int(2.0f * code_value);
    }
    const __nv_bfloat162 out_lo = __floats2bfloat162_rn(x[0], x[1]), out_hi = __floats2bfloat162_rn(x[2], x[3]);
    *p = make_uint2(*reinterpret_cast<const uint32_t*>(&out_lo), *reinterpret_cast<const uint32_t*>(&out_hi));
    if (q_int) {
        int lo_e = e, hi_e = e;  // over the warp: the head's four blocks
#pragma unroll
        for (int o = 8; o < 32; o <<= 1) {
            lo_e = min(lo_e, __shfl_xor_sync(0xffffffffu, lo_e, o));
            hi_e = max(hi_e, __shfl_xor_sync(0xffffffffu, hi_e, o));
        }
        const bool fold = hi_e - lo_e <= 3;
        const int shift = fold ? e - lo_e : 0;
        uint32_t packed = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i) packed |= uint32_t((twice[i] * (1 << shift)) & 0xff) << (8 * i);
        reinterpret_cast<uint32_t*>(q_int + v * 128)[lane] = packed;
        if ((lane & 7) == 0) q_exp[v * 4 + lane / 8] = int8_t((fold ? lo_e : e) - 1);
    }
}

}  // namespace

Status sm90_indexer_q_finish(const IndexerQFinishArgs& a, StreamHandle stream) {
    const char* op = "sm90_indexer_q_finish";
    if (!a.q || !a.positions || a.tokens < 0 || a.heads <= 0)
        return invalid_argument(std::string(op) + ": null pointer or bad shape");
    if (!is_aligned(a.q, 8) || !is_aligned(a.w, 2))
        return invalid_argument(std::string(op) + ": q must be 8-byte and w 2-byte aligned");
    if (a.q_int && (!a.q_exp || !is_aligned(a.q_int, 4)))
        return invalid_argument(std::string(op) + ": q_int needs q_exp and 4-byte alignment");
    if (a.partials && (a.splits < 1 || a.splits > kMaxQSplits || !is_aligned(a.partials, 16)))
        return invalid_argument(std::string(op) + ": partials need 1.." + std::to_string(kMaxQSplits) +
                                " splits and 16-byte alignment, got " + std::to_string(a.splits) + " splits");
    const int64_t vectors = a.tokens * a.heads;
    if (vectors == 0) return Status::ok();
    const int64_t blocks = (vectors + kWarps - 1) / kWarps;
    if (blocks > 0x7fffffff || a.heads > 0x7fffffff) return invalid_argument(std::string(op) + ": too many rows");
    sm90_indexer_q_finish_kernel<<<unsigned(blocks), kWarps * 32, 0, stream>>>(
        static_cast<__nv_bfloat16*>(a.q), vectors, int(a.heads), a.positions, a.freqs, a.q_int, a.q_exp, a.partials,
        a.partials ? a.splits : 0, static_cast<__nv_bfloat16*>(a.w), a.w_scale);
    return launch_status(op);
}

}  // namespace dsv4::cuda
