// Kernels of the attention family (sm_90).
//
// sparse attention, kReference: block = one token x 16 heads (4 warps, ~90 KB shared memory); a head count that is
// not a multiple of 16 (the 4-head test models) fills the last tile with zero q rows that are never stored. Per block
// of 64 candidates: the kv rows are gathered by cp.async (zero-filled for -1), S = Q·Kᵀ on mma.m16n8k16 (warp w: keys
// 16w..16w+15, K = 512), then the reference's online softmax — per head the running max and rescale (16 threads),
// P = exp(l - M) for all 64x16 entries in parallel (P rounded to bf16 for P·V), the block sum in candidate order —
// and O += P·V on mma (warp w: channels 128w..128w+127, 64 f32 accumulators per thread, V through the transposing
// ldmatrix). Rows are padded to 520 bf16 so ldmatrix rows hit distinct banks. kv_packed: the candidate rows are
// 584-byte FP8 rows (kv_store.h), loaded with 8-byte loads and dequantised into the same bf16 tile. Epilogue: o / (sum
// + e^{sink-M}), bf16, optional conjugate RoPE on 448..511 (warp 3 holds those channels as (even, odd) pairs). kF32:
// one warp per (token, head), lane = 16 channels; pass 1 the max, pass 2 exp, sum and the weighted rows; the indices
// are read 32 at a time (one per lane) and only the valid ones visited, in list order.
//
// wo_a, staged (prefill): swap-AB tile of 64 weight rows x 32 tokens x K 64, 4 warps x 16 rows; FP8 weights are
// dequantised to bf16 while staged (e4m3 · 2^k is exact in bf16), the next tile prefetched into registers during
// the MMAs.
// wo_a, decode (<= 32 tokens): swap-AB tile of 32 weight rows x 8 tokens (one MMA n-tile) over the whole width,
// the K-steps dealt round-robin to 16 warps (512 threads, two blocks per SM: 32 warps per SM keep the same bytes in
// flight as 16 warps with 64 rows, and hide each other's conversion). No shared-memory staging of weights and
// no block barrier in the K loop: each thread loads its 16 bytes of 8 weight rows straight into registers in MMA
// fragment order (K permuted inside each k16 step, identically for both operands), one step ahead, and converts
// two e4m3 per cvt. The 16 warp partials are summed in warp order through shared memory (deterministic).
// wo_a, prefill passes (kReference, more than kWoAGemmMinTokens tokens): the FP8 weight is dequantised to a bf16
// copy in the workspace (sm90_fp8_block_to_bf16: the same exact values the kernels stage) and one batched cuBLASLt
// GEMM runs the G groups.
#pragma once

#include "backend/cuda/common/cp_async.cuh"
#include "backend/cuda/common/mma_bf16.cuh"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/kernels/attention/attention_block.cuh"
#include "backend/cuda/kernels/attention/kv_gather.cuh"
#include "backend/cuda/kernels/kv_store/kv_store.cuh"
#include "backend/cuda/kernels/norm_rope/norm_rope.cuh"
#include "backend/cuda/common/pdl.cuh"

namespace dsv4::cuda {

struct AttnConfig {
    static constexpr int kDim = 512;
    static constexpr int kLd = kDim + 8;  // padded bf16 row
    static constexpr int kHeads = 16;     // heads per block (one MMA row tile)
    static constexpr int kBlock = 64;     // candidates per online-softmax block (the reference's)
    static constexpr int kThreads = 128;
    static constexpr int kPLd = kBlock + 8;
    static constexpr size_t smem_bytes() {
        constexpr size_t h = kHeads;
        return (h + kBlock) * kLd * 2 + h * kBlock * 4 + h * kPLd * 2 + kBlock * 4 + 4 * h * 4;
    }
    static constexpr int kF32Warps = 4;
    // wo_a, staged (more than kWoDecMaxTokens tokens)
    static constexpr int kWoRows = 64, kWoTokens = 32, kWoK = 64, kWoLd = kWoK + 8;
    // wo_a, decode (up to kWoDecMaxTokens tokens, in tiles of 8): 32 rows x 8 tokens per block, the width split
    // over 16 warps; kWoDecPartLd pads the partial-sum rows so that the fragment stores hit distinct banks.
    static constexpr int kWoDecRows = 32, kWoDecTokens = 8, kWoDecWarps = 16, kWoDecMaxTokens = 32;
    static constexpr int kWoDecThreads = kWoDecWarps * 32, kWoDecPartLd = kWoDecRows + 4;
    static constexpr size_t kWoDecMaxSmem = 200 * 1024;  // beyond it (very wide groups) the staged kernel runs
    // Dynamic shared memory of the decode kernel: the tile's activation rows (padded by 16 bytes), reused for the
    // warps' partial sums.
    static constexpr size_t wo_dec_smem_bytes(int64_t tile_tokens, int64_t width, size_t act_bytes) {
        const size_t act = size_t(tile_tokens) * (size_t(width) * act_bytes + 16);
        const size_t part = size_t(kWoDecWarps) * kWoDecTokens * kWoDecPartLd * 4;
        return act > part ? act : part;
    }
};

// grid: (ceil(heads / 16), tokens), 128 threads; dynamic shared memory AttnConfig::smem_bytes(). Warp w holds the
// channel quarter w of the 16 heads. Rows h0 + r >= heads are padding: q zero-filled (logits 0, a finite softmax),
// sink not read, output not stored.
template <bool kPacked>
__global__ void __launch_bounds__(AttnConfig::kThreads)
    sm90_sparse_attn_ref_kernel(const __nv_bfloat16* __restrict__ q, const void* __restrict__ kv,
                                const int32_t* __restrict__ idx, int heads, int64_t n_kv, int topk,
                                const float* __restrict__ sink, float scale, bool derotate,
                                const int64_t* __restrict__ positions, const __grid_constant__ backend::RopeFreqs freqs,
                                __nv_bfloat16* __restrict__ out) {
    pdl_enter();
    using Cfg = AttnConfig;
    constexpr int kH = Cfg::kHeads, kT = Cfg::kThreads;  // heads and threads of the block
    extern __shared__ __align__(16) uint8_t smem[];
    auto* q_s = reinterpret_cast<__nv_bfloat16*>(smem);                   // [kH][kLd]
    auto* kv_s = q_s + kH * Cfg::kLd;                                     // [64][kLd]
    auto* l_s = reinterpret_cast<float*>(kv_s + Cfg::kBlock * Cfg::kLd);  // [kH][64] logits, then p
    auto* p_s = reinterpret_cast<__nv_bfloat16*>(l_s + kH * Cfg::kBlock);  // [kH][kPLd] bf16(p)
    auto* idx_s = reinterpret_cast<int32_t*>(p_s + kH * Cfg::kPLd);       // [64]
    float* m_s = reinterpret_cast<float*>(idx_s + Cfg::kBlock);           // [kH] running max
    float* sum_s = m_s + kH;                                              // [kH] running sum
    float* mnew_s = sum_s + kH;                                           // [kH] this block's max
    float* resc_s = mnew_s + kH;                                          // [kH] rescale of the accumulators
    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, qd = lane & 3;
    const int warp = tid >> 5;  // channel quarter
    const int64_t t = blockIdx.y;
    const int h0 = blockIdx.x * kH;
    const int h_valid = min(kH, heads - h0);  // rows of this block that are real heads
    const __nv_bfloat16* qt = q + (t * heads + h0) * Cfg::kDim;
    for (int i = tid; i < kH * Cfg::kDim / 8; i += kT) {
        const int r = i / (Cfg::kDim / 8), c = (i % (Cfg::kDim / 8)) * 8;
        const bool valid = r < h_valid;
        cp_async16_zfill(q_s + r * Cfg::kLd + c, qt + (valid ? r : 0) * Cfg::kDim + c, valid);
    }
    if (tid < kH) m_s[tid] = -INFINITY, sum_s[tid] = 0;
    float acc[16][4] = {};  // O rows g, g + 8 x channels 128·warp + 8·nt + 2qd (+1)
    const int32_t* it = idx + t * topk;
    for (int b0 = 0; b0 < topk; b0 += Cfg::kBlock) {
        if (tid < Cfg::kBlock) {
            const int j = b0 + tid;
            int32_t s = j < topk ? it[j] : -1;
            if (s >= n_kv) s = -1;
            idx_s[tid] = s;
        }
        // A block without a valid candidate is skipped whole: running max, sum and accumulators stay exactly as
        // they are, so a list padded with -1 (a capacity-wide decode list) gives the unpadded list's bits, and
        // costs only this index read.
        if (!__syncthreads_or(tid < Cfg::kBlock && idx_s[tid] >= 0)) continue;
        if constexpr (kPacked) {
            gather_packed_kv_block<kT>(static_cast<const uint8_t*>(kv), idx_s, [&](int r, int c) {
                return reinterpret_cast<uint4*>(kv_s + r * Cfg::kLd + 8 * c);
            }, tid);
        } else {
            const auto* kv_rows = static_cast<const __nv_bfloat16*>(kv);
            for (int i = tid; i < Cfg::kBlock * Cfg::kDim / 8; i += kT) {
                const int r = i / (Cfg::kDim / 8), c = (i % (Cfg::kDim / 8)) * 8;
                const int32_t s = idx_s[r];
                cp_async16_zfill(kv_s + r * Cfg::kLd + c, kv_rows + int64_t(s < 0 ? 0 : s) * Cfg::kDim + c, s >= 0);
            }
        }
        asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::);
        __syncthreads();
        // S = Q·Kᵀ for the tile's 16 heads and keys 16·warp .. +15
        float sacc[2][4] = {};
        block_qk<Cfg::kDim, Cfg::kLd>(sacc, q_s, kv_s, warp);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int h = g + 8 * (e >> 1), key = warp * 16 + nt * 8 + 2 * qd + (e & 1);
                l_s[h * Cfg::kBlock + key] = idx_s[key] >= 0 ? __fmul_rn(sacc[nt][e], scale) : -INFINITY;
            }
        __syncthreads();
        if (tid < kH) {
            float mx = m_s[tid];
            for (int j = 0; j < Cfg::kBlock; ++j) mx = fmaxf(mx, l_s[tid * Cfg::kBlock + j]);
            mnew_s[tid] = mx;
            resc_s[tid] = mx == -INFINITY ? 1.0f : exp_softmax(__fsub_rn(m_s[tid], mx));  // e^{-inf} = 0 first time
        }
        __syncthreads();
        for (int i = tid; i < kH * Cfg::kBlock; i += kT) {
            const int h = i / Cfg::kBlock, j = i % Cfg::kBlock;
            const float l = l_s[i], mx = mnew_s[h];
            const float p = (l == -INFINITY || mx == -INFINITY) ? 0.0f : exp_softmax(__fsub_rn(l, mx));
            l_s[i] = p;
            p_s[h * Cfg::kPLd + j] = __float2bfloat16_rn(p);
        }
        __syncthreads();
        if (tid < kH && mnew_s[tid] != -INFINITY) {
            float block_sum = 0;
            for (int j = 0; j < Cfg::kBlock; ++j) block_sum = __fadd_rn(block_sum, l_s[tid * Cfg::kBlock + j]);
            sum_s[tid] = __fadd_rn(__fmul_rn(sum_s[tid], resc_s[tid]), block_sum);
            m_s[tid] = mnew_s[tid];
        }
        // O = O·rescale + P·V (P 16 x 64 keys, V 64 keys x channels 128·warp ..)
        rescale_add_pv<Cfg::kBlock, Cfg::kPLd, Cfg::kLd>(acc, resc_s[g], resc_s[g + 8],
                                                         p_s, kv_s, warp);
        __syncthreads();  // kv_s, p_s and the softmax state are rewritten by the next block
    }
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::);  // the q copies when topk == 0
    if (tid < kH) {
        // final denominator (0 marks "no valid candidate": the output is 0)
        const float mx = m_s[tid];
        const float sk = tid < h_valid ? sink[h0 + tid] : 0.0f;
        sum_s[tid] = mx == -INFINITY ? 0.0f : __fadd_rn(sum_s[tid], exp_softmax(__fsub_rn(sk, mx)));
    }
    __syncthreads();
    const int64_t pos = derotate ? positions[t] : 0;
#pragma unroll
    for (int nt = 0; nt < 16; ++nt) {
        const int ch = warp * 128 + nt * 8 + 2 * qd;
        float cs = 1, sn = 0;
        const bool rot = derotate && ch >= Cfg::kDim - 64;
        if (rot) rope_cos_sin(pos, freqs.f[(ch - (Cfg::kDim - 64)) / 2], true, cs, sn);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int h = g + 8 * half;
            if (h >= h_valid) continue;
            const float den = sum_s[h];
            float a = den == 0.0f ? 0.0f : round_bf16(__fdiv_rn(acc[nt][2 * half], den));
            float b = den == 0.0f ? 0.0f : round_bf16(__fdiv_rn(acc[nt][2 * half + 1], den));
            if (rot) rotate_pair(a, b, cs, sn);
            *reinterpret_cast<__nv_bfloat162*>(out + (t * heads + h0 + h) * Cfg::kDim + ch) =
                __floats2bfloat162_rn(a, b);
        }
    }
}

// kF32: grid ceil(tokens·heads / kF32Warps); one warp per (token, head), lane L holds channels 16L..16L+15.
__global__ void __launch_bounds__(AttnConfig::kF32Warps * 32)
    sm90_sparse_attn_f32_kernel(const float* __restrict__ q, const float* __restrict__ kv,
                                const int32_t* __restrict__ idx, int64_t tokens, int heads, int64_t n_kv, int topk,
                                const float* __restrict__ sink, float scale, bool derotate,
                                const int64_t* __restrict__ positions, const __grid_constant__ backend::RopeFreqs freqs,
                                float* __restrict__ out) {
    pdl_enter();
    using Cfg = AttnConfig;
    const int lane = threadIdx.x & 31;
    const int64_t r = int64_t(blockIdx.x) * Cfg::kF32Warps + (threadIdx.x >> 5);
    if (r >= tokens * heads) return;
    const int64_t t = r / heads;
    const int h = int(r % heads);
    float qv[16];
#pragma unroll
    for (int i = 0; i < 16; i += 4) {
        const float4 v = *reinterpret_cast<const float4*>(q + r * Cfg::kDim + 16 * lane + i);
        qv[i] = v.x, qv[i + 1] = v.y, qv[i + 2] = v.z, qv[i + 3] = v.w;
    }
    const int32_t* it = idx + t * topk;
    auto logit = [&](int32_t s) {
        const float* row = kv + int64_t(s) * Cfg::kDim + 16 * lane;
        float d = 0;
#pragma unroll
        for (int i = 0; i < 16; i += 4) {
            const float4 v = *reinterpret_cast<const float4*>(row + i);
            d = fmaf(qv[i], v.x, d), d = fmaf(qv[i + 1], v.y, d), d = fmaf(qv[i + 2], v.z, d),
            d = fmaf(qv[i + 3], v.w, d);
        }
        return warp_sum(d) * scale;
    };
    // visit(s) for every valid candidate s in list order
    auto for_each_valid = [&](auto&& visit) {
        for (int j0 = 0; j0 < topk; j0 += 32) {
            const int32_t mine = j0 + lane < topk ? it[j0 + lane] : -1;
            unsigned valid = __ballot_sync(0xffffffffu, mine >= 0 && mine < n_kv);
            while (valid) {
                const int b = __ffs(valid) - 1;
                valid &= valid - 1;
                visit(__shfl_sync(0xffffffffu, mine, b));
            }
        }
    };
    float mx = -INFINITY;
    for_each_valid([&](int32_t s) { mx = fmaxf(mx, logit(s)); });
    float o[16] = {};
    float den = 0;
    if (mx != -INFINITY) {
        den = expf(sink[h] - mx);
        for_each_valid([&](int32_t s) {
            const float w = expf(logit(s) - mx);
            den += w;
            const float* row = kv + int64_t(s) * Cfg::kDim + 16 * lane;
#pragma unroll
            for (int i = 0; i < 16; ++i) o[i] = fmaf(w, row[i], o[i]);
        });
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) o[i] = den == 0.0f ? 0.0f : o[i] / den;
    if (derotate && 16 * lane >= Cfg::kDim - 64) {
        const int64_t pos = positions[t];
#pragma unroll
        for (int p = 0; p < 8; ++p) {
            float c, s;
            rope_cos_sin(pos, freqs.f[(16 * lane - (Cfg::kDim - 64)) / 2 + p], true, c, s);
            rotate_pair(o[2 * p], o[2 * p + 1], c, s);
        }
    }
#pragma unroll
    for (int i = 0; i < 16; i += 4)
        *reinterpret_cast<float4*>(out + r * Cfg::kDim + 16 * lane + i) =
            make_float4(o[i], o[i + 1], o[i + 2], o[i + 3]);
}

// wo_a. grid: (G·R / 64, ceil(T / 32)); kFp8: weight e4m3 + UE8M0 [ceil(rows/128), cols/128] scales, else bf16.
// kSplit 1 (bf16 o) or 3 (f32 o as hi + mid + lo bf16).
template <typename ActT, bool kFp8, int kSplit>
__global__ void __launch_bounds__(AttnConfig::kThreads, 1)
    sm90_wo_a_kernel(const ActT* __restrict__ o, int64_t tokens, int64_t o_stride, int64_t width, int64_t rank,
                     const void* __restrict__ w, const uint8_t* __restrict__ w_scale, int64_t w_rows,
                     ActT* __restrict__ z) {
    pdl_enter();
    using Cfg = AttnConfig;
    constexpr int kBM = Cfg::kWoRows, kBN = Cfg::kWoTokens, kBK = Cfg::kWoK, kLd = Cfg::kWoLd;
    __shared__ __align__(16) __nv_bfloat16 w_s[kBM * kLd];
    __shared__ __align__(16) __nv_bfloat16 o_s[kSplit][kBN * kLd];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int64_t row0 = int64_t(blockIdx.x) * kBM, t0 = int64_t(blockIdx.y) * kBN;
    const int64_t grp = row0 / rank;
    const ActT* og = o + grp * width;  // this group's input slice of each token
    // Loads run kDepth K-steps ahead of the MMAs, weights and activations alike, in registers: with one step in
    // flight every step was a dependent global round trip (64 of them per block at width 4096) and the kernel was
    // latency-bound (74 µs for 33.5 MB at one token on an H200). The arithmetic and its order are unchanged.
    constexpr int kDepth = kFp8 ? 4 : 2;
    constexpr int kWWords = kFp8 ? 2 : 4;
    // weight staging: thread → row tid / 2, 32 consecutive k (kFp8: 2 x 16 bytes; bf16: 4 x 16 bytes)
    const int wr = tid >> 1, wc = (tid & 1) * 32;
    uint4 wreg[kDepth][kWWords];
    auto load_w = [&](uint4 (&r)[kWWords], int64_t k0) {
        if constexpr (kFp8) {
            const uint8_t* p = static_cast<const uint8_t*>(w) + (row0 + wr) * width + k0 + wc;
            r[0] = *reinterpret_cast<const uint4*>(p);
            r[1] = *reinterpret_cast<const uint4*>(p + 16);
        } else {
            const __nv_bfloat16* p = static_cast<const __nv_bfloat16*>(w) + (row0 + wr) * width + k0 + wc;
#pragma unroll
            for (int i = 0; i < 4; ++i) r[i] = *reinterpret_cast<const uint4*>(p + 8 * i);
        }
    };
    auto store_w = [&](const uint4 (&r)[kWWords], int64_t k0) {
        __nv_bfloat16* dst = w_s + wr * kLd + wc;
        if constexpr (kFp8) {
            const float s = e8m0_to_f32(w_scale[((row0 + wr) / 128) * (width / 128) + k0 / 128]);
            // bytes by shifts (indexing the register array through a byte pointer would put it in local memory)
            const uint32_t words[8] = {r[0].x, r[0].y, r[0].z, r[0].w, r[1].x, r[1].y, r[1].z, r[1].w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                float v[8];
#pragma unroll
                for (int e = 0; e < 8; ++e)
                    v[e] = __fmul_rn(e4m3_to_f32(uint8_t(words[2 * i + e / 4] >> (8 * (e % 4)))), s);
                store8(dst + 8 * i, v);
            }
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) *reinterpret_cast<uint4*>(dst + 8 * i) = r[i];
        }
    };
    // activation staging: 32 tokens x 64 k = 256 chunks of 8, two per thread (zeros past the real tokens)
    float oreg[kDepth][2][8];
    auto load_o = [&](float (&v)[2][8], int64_t k0) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            const int i = tid + c * Cfg::kThreads, tr = i / (kBK / 8), kc = (i % (kBK / 8)) * 8;
#pragma unroll
            for (int e = 0; e < 8; ++e) v[c][e] = 0.0f;
            if (t0 + tr < tokens) load8(og + (t0 + tr) * o_stride + k0 + kc, v[c]);
        }
    };
    auto store_o = [&](const float (&v)[2][8]) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            const int i = tid + c * Cfg::kThreads, tr = i / (kBK / 8), kc = (i % (kBK / 8)) * 8;
            if constexpr (kSplit == 1) {
                store8(o_s[0] + tr * kLd + kc, v[c]);
            } else {
                float part[3][8];
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    __nv_bfloat16 hi, mid, lo;
                    split_bf16x3(v[c][e], hi, mid, lo);
                    part[0][e] = __bfloat162float(hi), part[1][e] = __bfloat162float(mid),
                    part[2][e] = __bfloat162float(lo);
                }
#pragma unroll
                for (int s = 0; s < kSplit; ++s) store8(o_s[s] + tr * kLd + kc, part[s]);
            }
        }
    };
    float acc[kBN / 8][4] = {};
    const int64_t steps = width / kBK;
#pragma unroll
    for (int d = 0; d < kDepth; ++d)
        if (d < steps) load_w(wreg[d], d * kBK), load_o(oreg[d], d * kBK);
    for (int64_t s0 = 0; s0 < steps; s0 += kDepth) {
#pragma unroll
        for (int d = 0; d < kDepth; ++d) {  // static register slot d holds step s0 + d
            const int64_t step = s0 + d;
            if (step >= steps) break;  // uniform over the block
            const int64_t k0 = step * kBK;
            store_w(wreg[d], k0);
            store_o(oreg[d]);
            __syncthreads();
            if (step + kDepth < steps) {  // in flight during the next kDepth steps' MMAs
                load_w(wreg[d], k0 + kDepth * kBK);
                load_o(oreg[d], k0 + kDepth * kBK);
            }
#pragma unroll
            for (int kk = 0; kk < kBK; kk += 16) {
                uint32_t af[4];
                load_a_frag(af, w_s, kLd, warp * 16, kk);
#pragma unroll
                for (int s = kSplit - 1; s >= 0; --s)
#pragma unroll
                    for (int nt = 0; nt < kBN / 8; nt += 2) {
                        uint32_t bf[4];
                        load_b_frag_nk(bf, o_s[s], kLd, nt * 8, kk);
                        mma_bf16_16816(acc[nt], af, bf[0], bf[1]);
                        mma_bf16_16816(acc[nt + 1], af, bf[2], bf[3]);
                    }
            }
            __syncthreads();
        }
    }
    const int g = lane >> 2, qd = lane & 3;
    const int64_t n_out = w_rows;
#pragma unroll
    for (int nt = 0; nt < kBN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int64_t row = row0 + warp * 16 + g + 8 * (e >> 1), tok = t0 + nt * 8 + 2 * qd + (e & 1);
            if (tok < tokens) z[tok * n_out + row] = from_f32<ActT>(acc[nt][e]);
        }
}

// Two e4m3 codes (low byte = low half) to two bf16 times the power-of-two block scale s. The codes are exact in
// f16, f32 and bf16, and the bf16 product is the rounding of the exact product: the same value as the f32
// multiply then bf16 rounding of the staged kernel.
__device__ __forceinline__ uint32_t wo_e4m3x2_to_bf16x2(uint32_t two, __nv_bfloat162 s) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(two & 0xffffu), __NV_E4M3);
    const float2 f = __half22float2(__half2(h));
    const __nv_bfloat162 b = __hmul2(__floats2bfloat162_rn(f.x, f.y), s);
    return *reinterpret_cast<const uint32_t*>(&b);
}

__device__ __forceinline__ uint32_t wo_word(const uint4& u, int i) {
    return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w;
}

__device__ __forceinline__ uint32_t wo_bf16x2_bits(__nv_bfloat16 lo, __nv_bfloat16 hi) {
    const __nv_bfloat162 h = __halves2bfloat162(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
}

// wo_a, decode. grid: (ceil(T / 8), G·R / 32), AttnConfig::kWoDecThreads threads, dynamic shared memory
// AttnConfig::wo_dec_smem_bytes(min(T, 8), width, sizeof(ActT)). Same arguments and arithmetic as
// sm90_wo_a_kernel (exact products, f32 accumulation), the sum over K in a different order.
//
// A step is the 16 bytes of a weight row one thread loads: K 64 (e4m3) or 32 (bf16) per warp, kChunk = K/4 per
// quad lane q. Inside a step, MMA j (k16) takes from lane q the physical k q·kChunk + 4j + {0,1} as the fragment's
// k {2q, 2q+1} and q·kChunk + 4j + {2,3} as {2q+8, 2q+9}, for the weights (A) and the activations (B) alike, so
// the dot product is unchanged.
template <typename ActT, bool kFp8, int kSplit>
__global__ void __launch_bounds__(AttnConfig::kWoDecThreads, 2)
    sm90_wo_a_decode_kernel(const ActT* __restrict__ o, int64_t tokens, int64_t o_stride, int64_t width, int64_t rank,
                            const void* __restrict__ w, const uint8_t* __restrict__ w_scale, int64_t w_rows,
                            ActT* __restrict__ z) {
    pdl_enter(false);
    // the first weight step is loaded before the wait (below): weights are written only at model load
    using Cfg = AttnConfig;
    constexpr int kRows = Cfg::kWoDecRows, kBN = Cfg::kWoDecTokens, kWarps = Cfg::kWoDecWarps;
    constexpr int kMT = kRows / 16;                // m-tiles per warp (all the block's rows)
    constexpr int kWBytes = kFp8 ? 1 : 2;          // bytes per weight element
    constexpr int kStepK = 64 / kWBytes;           // K per step: 16 bytes per row and quad lane
    constexpr int kChunk = kStepK / 4;             // K per quad lane per step
    constexpr int kSub = kStepK / 16;              // k16 MMAs per step
    constexpr int kActPad = 16 / int(sizeof(ActT));
    static_assert(kBN * kRows <= Cfg::kWoDecThreads, "the final sum takes one (token, row) per thread");
    extern __shared__ __align__(16) uint8_t smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, qd = lane & 3;
    const int64_t t0 = int64_t(blockIdx.x) * kBN, row0 = int64_t(blockIdx.y) * kRows;
    const int nt = int(min(int64_t(kBN), tokens - t0));  // real tokens of this tile
    const int64_t grp = row0 / rank, steps = width / kStepK, act_ld = width + kActPad;

    // weights of a step: rows 16m + g and 16m + g + 8 of the tile (m < kMT), 16 bytes at K k0 + kChunk·q
    const uint8_t* wq = static_cast<const uint8_t*>(w) + ((row0 + g) * width + kChunk * qd) * kWBytes;
    const int64_t row_bytes = width * kWBytes;
    const uint8_t* scale_row = kFp8 ? w_scale + (row0 / 128) * (width / 128) : nullptr;
    auto load_step = [&](uint4 (&r)[2 * kMT], uint32_t& sc, int64_t s) {
        const uint8_t* p = wq + s * kStepK * kWBytes;
#pragma unroll
        for (int m = 0; m < kMT; ++m) {
            r[2 * m] = __ldg(reinterpret_cast<const uint4*>(p + 16 * m * row_bytes));
            r[2 * m + 1] = __ldg(reinterpret_cast<const uint4*>(p + (16 * m + 8) * row_bytes));
        }
        if constexpr (kFp8) sc = __ldg(scale_row + s * kStepK / 128);
    };
    uint4 wa[2 * kMT], wb[2 * kMT];
    uint32_t sa = 0, sb = 0;
    if (warp < steps) load_step(wa, sa, warp);
    pdl_wait();  // the activations come from the launch before this one (common/pdl.cuh)

    // the tile's activation rows (nt x width) into shared memory while the first weights are in flight
    ActT* act_s = reinterpret_cast<ActT*>(smem);  // [nt][act_ld]
    {
        const int row_chunks = int(width * int64_t(sizeof(ActT)) / 16);
        const ActT* og = o + grp * width + t0 * o_stride;
        for (int i = tid; i < nt * row_chunks; i += Cfg::kWoDecThreads) {
            const int t = i / row_chunks, c = (i % row_chunks) * kActPad;
            cp_async16_zfill(act_s + t * act_ld + c, og + t * o_stride + c, true);
        }
        asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::);
        __syncthreads();
    }

    float acc[kMT][4] = {};
    const ActT* act_g = act_s + g * act_ld + kChunk * qd;  // token g of the tile (read only when g < nt)
    auto compute = [&](const uint4 (&r)[2 * kMT], uint32_t sc, int64_t s) {
        // B fragments of the step: token g (zeros past the real tokens), split into kSplit bf16 terms
        uint32_t bfr[kSub][kSplit][2];
        const ActT* a = act_g + s * kStepK;
        if constexpr (kSplit == 1) {
            uint4 u[kChunk / 8];
#pragma unroll
            for (int i = 0; i < kChunk / 8; ++i)
                u[i] = g < nt ? *reinterpret_cast<const uint4*>(a + 8 * i) : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int j = 0; j < kSub; ++j)
#pragma unroll
                for (int h = 0; h < 2; ++h) bfr[j][0][h] = wo_word(u[(2 * j + h) / 4], (2 * j + h) % 4);
        } else {
#pragma unroll
            for (int j = 0; j < kSub; ++j) {
                float4 f = make_float4(0, 0, 0, 0);
                if (g < nt) f = *reinterpret_cast<const float4*>(a + 4 * j);
                const float v[4] = {f.x, f.y, f.z, f.w};
                __nv_bfloat16 part[3][4];
#pragma unroll
                for (int e = 0; e < 4; ++e) split_bf16x3(v[e], part[0][e], part[1][e], part[2][e]);
#pragma unroll
                for (int p = 0; p < kSplit; ++p)
#pragma unroll
                    for (int h = 0; h < 2; ++h)
                        bfr[j][p][h] = wo_bf16x2_bits(part[p][2 * h], part[p][2 * h + 1]);
            }
        }
        __nv_bfloat162 s2;
        if constexpr (kFp8) s2 = __float2bfloat162_rn(e8m0_to_f32(uint8_t(sc)));
#pragma unroll
        for (int j = 0; j < kSub; ++j)
#pragma unroll
            for (int m = 0; m < kMT; ++m) {
                uint32_t af[4];  // {row g, k 2q..}, {row g+8, k 2q..}, {row g, k 2q+8..}, {row g+8, k 2q+8..}
                if constexpr (kFp8) {
                    const uint32_t lo = wo_word(r[2 * m], j), hi = wo_word(r[2 * m + 1], j);
                    af[0] = wo_e4m3x2_to_bf16x2(lo, s2), af[2] = wo_e4m3x2_to_bf16x2(lo >> 16, s2);
                    af[1] = wo_e4m3x2_to_bf16x2(hi, s2), af[3] = wo_e4m3x2_to_bf16x2(hi >> 16, s2);
                } else {
                    af[0] = wo_word(r[2 * m], 2 * j), af[2] = wo_word(r[2 * m], 2 * j + 1);
                    af[1] = wo_word(r[2 * m + 1], 2 * j), af[3] = wo_word(r[2 * m + 1], 2 * j + 1);
                }
#pragma unroll
                for (int p = kSplit - 1; p >= 0; --p) mma_bf16_16816(acc[m], af, bfr[j][p][0], bfr[j][p][1]);
            }
    };
    // warp w: steps w, w + kWarps, ...; the registers of the next step are loaded while this one computes
    for (int64_t s = warp; s < steps; s += 2 * kWarps) {
        if (s + kWarps < steps) load_step(wb, sb, s + kWarps);
        compute(wa, sa, s);
        if (s + kWarps >= steps) break;
        if (s + 2 * kWarps < steps) load_step(wa, sa, s + 2 * kWarps);
        compute(wb, sb, s + kWarps);
    }

    // z = Σ over the warps, in warp order, of their partial sums
    __syncthreads();  // every warp is done with act_s
    float* part = reinterpret_cast<float*>(smem);  // [kWarps][kBN][kWoDecPartLd]
#pragma unroll
    for (int m = 0; m < kMT; ++m)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int row = 16 * m + g + 8 * (e >> 1), tok = 2 * qd + (e & 1);
            part[(warp * kBN + tok) * Cfg::kWoDecPartLd + row] = acc[m][e];
        }
    __syncthreads();
    const int tok = tid / kRows, row = tid % kRows;
    if (tok < nt) {
        float sum = part[tok * Cfg::kWoDecPartLd + row];
#pragma unroll
        for (int v = 1; v < kWarps; ++v) sum += part[(v * kBN + tok) * Cfg::kWoDecPartLd + row];
        z[(t0 + tok) * w_rows + row0 + row] = from_f32<ActT>(sum);
    }
}

}  // namespace dsv4::cuda
