// Kernels of the norm_rope family (sm_90): weighted RMSNorm (one block per row, the row held in registers, one
// 16-byte load per 8 values), fused per-head q norm + RoPE (one warp per 4 head vectors of a token), and standalone
// interleaved RoPE (one warp per token, lane i = frequency i). All three are memory-bound: the floor is one read
// and one write of the activations. Measured: docs/kernels/cuda-backend.md.
#pragma once

#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kernels/act_quant/e4m3_chunk.cuh"
#include "backend/ops.h"

namespace dsv4::cuda {

struct NormRopeConfig {
    static constexpr int kNormThreads = 256;   // RMSNorm block (8 warps) per row
    static constexpr int kNormMaxChunks = 4;   // 8-value chunks per thread: dim <= 256·8·4 = 8192
    static constexpr int kWarpsPerBlock = 4;   // q norm / rope blocks
    static constexpr int kHeadMaxChunks = 4;   // q head: head_dim <= 32·8·4 = 1024
    // q heads per warp when the launch has warps to spare (prefill): one f64 sincos per 4 head vectors; small launches
    // (decode) take one head per warp, so a token's heads run side by side instead of 4 in a row per warp
    static constexpr int kHeadsPerWarp = 4;
    static constexpr int kHeadsPerWarpFrom = 4096;  // warps a one-head-per-warp launch would have
};

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// cos/sin of θ = f32(pos)·f rounded from f64 (the CPU reference takes f32 cos/sin of the same f32 angle; the
// correctly rounded value is what both aim at).
__device__ __forceinline__ void rope_cos_sin(int64_t pos, float f, bool inverse, float& c, float& s) {
    const float angle = __fmul_rn(float(pos), f);
    double sd, cd;
    sincos(double(angle), &sd, &cd);
    c = float(cd);
    s = inverse ? -float(sd) : float(sd);
}

// (a, b) · (c + i·s): re = a·c − b·s, im = a·s + b·c, each product and sum rounded in f32 as on the CPU.
__device__ __forceinline__ void rotate_pair(float& a, float& b, float c, float s) {
    const float re = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    const float im = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
    a = re;
    b = im;
}

// sm90_rmsnorm's arithmetic on one row that a block of kNormThreads holds (thread t: the 8-value chunks c = (t +
// kNormThreads·j)·8 < dim in v[j]): the f64 sum of squares (per thread in chunk order, warp_sum, then the warps in
// order), y = w·(v·rs) (rounded by the store: bf16 RNE in kReference) and, with codes (bf16 activations, dim % 128 ==
// 0), y's e4m3 block-128 codes and scale, the 16 lanes of a half warp holding a block's chunks. Every thread of the
// block calls it (one __syncthreads inside); yr, codes_row and scales_row point at the row's outputs. WeightT: void
// (none), __nv_bfloat16 or float.
template <typename ActT, typename WeightT>
__device__ __forceinline__ void rmsnorm_block_row(const float (&v)[NormRopeConfig::kNormMaxChunks][8], int dim,
                                                  const WeightT* __restrict__ w, float eps, ActT* __restrict__ yr,
                                                  uint8_t* __restrict__ codes_row, float* __restrict__ scales_row) {
    constexpr int kT = NormRopeConfig::kNormThreads, kC = NormRopeConfig::kNormMaxChunks;
    double ss = 0;
#pragma unroll
    for (int j = 0; j < kC; ++j) {
        if ((threadIdx.x + j * kT) * 8 < dim) {
#pragma unroll
            for (int i = 0; i < 8; ++i) ss += double(v[j][i]) * double(v[j][i]);
        }
    }
    __shared__ double partial[kT / 32];
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
    __syncthreads();
    double total = 0;
#pragma unroll
    for (int i = 0; i < kT / 32; ++i) total += partial[i];
    const float rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(float(total / double(dim)), eps)));
#pragma unroll
    for (int j = 0; j < kC; ++j) {
        const int c = (threadIdx.x + j * kT) * 8;
        if (j * kT * 8 >= dim) break;  // uniform over the block: every lane of a live pass reaches the quantisation
        float out[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (c < dim) {
            if constexpr (std::is_void_v<WeightT>) {
#pragma unroll
                for (int i = 0; i < 8; ++i) out[i] = __fmul_rn(v[j][i], rs);
            } else {
                float wv[8];
                load8(w + c, wv);
#pragma unroll
                for (int i = 0; i < 8; ++i) out[i] = __fmul_rn(wv[i], __fmul_rn(v[j][i], rs));
            }
            store8(yr + c, out);  // bf16 store rounds (RNE) in kReference
        }
        if constexpr (std::is_same_v<ActT, __nv_bfloat16>) {
            if (codes_row) {  // the stored bf16 values, quantised as act_quant would read them back
#pragma unroll
                for (int i = 0; i < 8; ++i) out[i] = round_bf16(out[i]);
                const E4m3Chunk q = e4m3_quantize_chunk(out, 16);
                if (c < dim) {
                    *reinterpret_cast<uint2*>(codes_row + c) = make_uint2(q.packed[0], q.packed[1]);
                    if ((threadIdx.x & 15) == 0) scales_row[c / 128] = exp2_int(q.e);
                }
            }
        }
    }
}

// grid: rows; block: kNormThreads. codes / scales (bf16 activations, dim % 128 == 0, or null): rmsnorm_block_row's.
template <typename ActT, typename WeightT>
__global__ void __launch_bounds__(NormRopeConfig::kNormThreads)
    sm90_rmsnorm_kernel(const ActT* __restrict__ x, const WeightT* __restrict__ w, int dim, float eps,
                        ActT* __restrict__ y, uint8_t* __restrict__ codes, float* __restrict__ scales) {
    pdl_enter();
    constexpr int kT = NormRopeConfig::kNormThreads, kC = NormRopeConfig::kNormMaxChunks;
    const int64_t row = blockIdx.x;
    const ActT* xr = x + row * dim;
    float v[kC][8];
#pragma unroll
    for (int j = 0; j < kC; ++j) {
        const int c = (threadIdx.x + j * kT) * 8;
        if (c < dim) load8(xr + c, v[j]);
    }
    rmsnorm_block_row<ActT, WeightT>(v, dim, w, eps, y + row * dim, codes ? codes + row * dim : nullptr,
                                     codes ? scales + row * (dim / 128) : nullptr);
}

// grid: ceil(tokens·ceil(heads/hpw) / kWarpsPerBlock); one warp per hpw head vectors of one token (the f64 cos/sin
// is computed once per warp and reused); lane L holds chunks L, L+32, ... of a vector.
template <typename ActT>
__global__ void __launch_bounds__(NormRopeConfig::kWarpsPerBlock * 32)
    sm90_q_head_norm_rope_kernel(ActT* __restrict__ q, int64_t tokens, int heads, int head_dim, int hpw, float eps,
                                 bool rope, const int64_t* __restrict__ positions,
                                 const __grid_constant__ backend::RopeFreqs freqs) {
    pdl_enter();
    constexpr bool kRef = std::is_same_v<ActT, __nv_bfloat16>;
    constexpr int kC = NormRopeConfig::kHeadMaxChunks;
    const int lane = threadIdx.x & 31;
    const int64_t groups = (heads + hpw - 1) / hpw;
    const int64_t wid = int64_t(blockIdx.x) * NormRopeConfig::kWarpsPerBlock + (threadIdx.x >> 5);
    if (wid >= tokens * groups) return;  // whole warps leave together
    const int64_t t = wid / groups;
    const int h0 = int(wid % groups) * hpw, h1 = min(h0 + hpw, heads);
    float cs = 1, sn = 0;
    if (rope) rope_cos_sin(positions[t], freqs.f[lane], false, cs, sn);
    const int chunks = head_dim / 8;
    const int first_rope_chunk = chunks - 8;  // the last 64 channels
    for (int h = h0; h < h1; ++h) {
        ActT* qv = q + (t * heads + h) * head_dim;
        float v[kC][8];
        float sum_f = 0;
        double sum_d = 0;
#pragma unroll
        for (int j = 0; j < kC; ++j) {
            const int c = lane + 32 * j;
            if (c < chunks) {
                load8(qv + c * 8, v[j]);
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    if constexpr (kRef) sum_f = __fadd_rn(sum_f, round_bf16(__fmul_rn(v[j][i], v[j][i])));
                    else sum_d += double(v[j][i]) * double(v[j][i]);
                }
            }
        }
        float rs;
        if constexpr (kRef) {
            const float mean = round_bf16(__fdiv_rn(warp_sum(sum_f), float(head_dim)));
            rs = round_bf16(__fdiv_rn(1.0f, __fsqrt_rn(round_bf16(__fadd_rn(mean, eps)))));
        } else {
            rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(float(warp_sum(sum_d) / double(head_dim)), eps)));
        }
#pragma unroll
        for (int j = 0; j < kC; ++j) {
            const int c = lane + 32 * j;
            if (32 * j >= chunks) break;  // warp-uniform
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                v[j][i] = __fmul_rn(v[j][i], rs);
                if constexpr (kRef) v[j][i] = round_bf16(v[j][i]);
            }
            if (rope) {
                // pairs (c - first_rope_chunk)·4 + p of this chunk take their frequency lanes by shuffle
                // (every lane shuffles).
                const int pair0 = max(0, min(c - first_rope_chunk, 7)) * 4;
#pragma unroll
                for (int p = 0; p < 4; ++p) {
                    const float pc = __shfl_sync(0xffffffffu, cs, pair0 + p);
                    const float ps = __shfl_sync(0xffffffffu, sn, pair0 + p);
                    if (c >= first_rope_chunk && c < chunks) rotate_pair(v[j][2 * p], v[j][2 * p + 1], pc, ps);
                }
            }
            if (c < chunks) store8(qv + c * 8, v[j]);
        }
    }
}

// grid: ceil(tokens / kWarpsPerBlock); one warp per token, lane i rotates pair i of every vector of the token.
template <typename ActT>
__global__ void __launch_bounds__(NormRopeConfig::kWarpsPerBlock * 32)
    sm90_rope_kernel(ActT* __restrict__ x, int64_t tokens, int64_t vecs, int64_t vec_stride, int64_t offset,
                     const int64_t* __restrict__ positions, const __grid_constant__ backend::RopeFreqs freqs,
                     bool inverse) {
    pdl_enter();
    const int lane = threadIdx.x & 31;
    const int64_t t = int64_t(blockIdx.x) * NormRopeConfig::kWarpsPerBlock + (threadIdx.x >> 5);
    if (t >= tokens) return;
    float c, s;
    rope_cos_sin(positions[t], freqs.f[lane], inverse, c, s);
    for (int64_t v = 0; v < vecs; ++v) {
        ActT* p = x + (t * vecs + v) * vec_stride + offset + 2 * lane;
        float a = to_f32(p[0]), b = to_f32(p[1]);
        rotate_pair(a, b, c, s);
        p[0] = from_f32<ActT>(a);
        p[1] = from_f32<ActT>(b);
    }
}

}  // namespace dsv4::cuda
