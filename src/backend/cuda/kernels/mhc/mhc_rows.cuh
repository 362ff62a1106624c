// The mHC collapse at prefill sizes (sm_90): hc_pre / hc_head for tiles of 32 tokens, the fn dot products on f64
// tensor cores (docs/kernels/cuda-backend.md, "mHC collapse at prefill").
//
// Why: the one-block-per-token collapse reads all of fn (24 x 4D f32: 1.6 MB for V4-Flash) from L2 for every token;
// at 8,192 tokens that is 12.9 GB of L2 traffic per launch and the launch is L2-bound (1.6 ms under ncu). Here a
// block takes 32 tokens, so fn is read once per 32 tokens, and the mixes m[t, r] = Σ_k x[t, k]·fn[r, k] are a
// [32 x 4D] x [4D x 24] product done with `mma.m8n8k4.f64`: the products of two f32-representable values are exact
// in f64 and the sums are f64, as in the other collapse kernels and the CPU (the order of the f64 additions differs,
// which moves an f32 result only in rare last-bit cases: the tests' tolerance).
//
// Layout of the product: M = tokens (4 m-tiles of 8), N = mixes (3 n-tiles of 8; one for hc_head's 4), K = the 4·D
// flattened stream values in an order of our choosing — k step j of channel group c is (stream q, channel 8c + j)
// for the lane quad position q, so each lane reads its own stream's 8 consecutive channels (one 16-byte load per
// m-tile, 32 bytes of fn per n-tile) and, with hc_post fused in, computes exactly the 8 stream values it multiplies.
// The 8 warps split the channel groups (group c to warp c % 8); each warp accumulates its partial sums in its own
// fragments with no barrier in the loop, and the 8 partials are added in warp order through shared memory.
// The sum of squares is one f64 FMA per value on the same lanes, added over the quad (xor 1, then xor 2: the same
// bits on every lane) and then over the warps. Then one warp per token runs the split + Sinkhorn
// (hc_split_sinkhorn_warp, the CPU's order) and the block collapses its 32 tokens' channels.
#pragma once

#include "backend/cuda/kernels/mhc/mhc.cuh"

namespace dsv4::cuda {

struct MhcRowsConfig {
    static constexpr int kThreads = 256, kWarps = kThreads / 32;
    static constexpr int kTokens = 32;  // per block: 4 m-tiles of 8
    static constexpr int kMTiles = kTokens / 8;
    // From this many tokens a launch takes this kernel. Below one block per SM a block's time (~200 µs for hc_pre at
    // V4-Flash, ~130 for hc_head: each warp waits for its loads every channel group) does not shrink with the tokens,
    // while the one-block-per-token kernel's does (0.16 / 0.036 µs per token): measured on the H200 (docs/kernels/
    // cuda-backend.md), hc_pre 160 -> 199 µs at 1,024 tokens and 654 -> 228 at 4,096; hc_head 149 -> 159 at 4,096
    // and 290 -> 212 at 8,192.
    static constexpr int64_t min_tokens(int mix) { return mix == 24 ? 2048 : 8192; }
    static constexpr size_t smem_bytes(int mix) {
        constexpr int kHc = MhcConfig::kHc;
        return size_t(kWarps) * kTokens * (mix + 1) * sizeof(double) +
               kTokens * (kHc + kHc + kHc * kHc) * sizeof(float);
    }
};

// D = A·B + C on the f64 tensor cores, m8n8k4: lane l holds A[l / 4][l % 4], B[l % 4][l / 4] and C / D[l / 4][2(l % 4)
// + {0, 1}].
__device__ __forceinline__ void dmma_m8n8k4(double (&d)[2], double a, double b) {
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
                 : "+d"(d[0]), "+d"(d[1])
                 : "d"(a), "d"(b));
}

// 8 consecutive stream values of one token as the streams store them: bf16 kept packed (4 registers), f32 as is.
template <typename ActT>
struct RowValues8;
template <>
struct RowValues8<__nv_bfloat16> {
    uint32_t w[4];
    __device__ __forceinline__ void clear() { w[0] = w[1] = w[2] = w[3] = 0; }
    __device__ __forceinline__ void load(const __nv_bfloat16* p) {
        const uint4 u = *reinterpret_cast<const uint4*>(p);
        w[0] = u.x, w[1] = u.y, w[2] = u.z, w[3] = u.w;
    }
    __device__ __forceinline__ void set(const float (&v)[8]) {  // RNE, as store8
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
            w[i] = *reinterpret_cast<const uint32_t*>(&h);
        }
    }
    __device__ __forceinline__ float get(int j) const {
        return __uint_as_float(j & 1 ? w[j >> 1] & 0xffff0000u : w[j >> 1] << 16);
    }
};
template <>
struct RowValues8<float> {
    float v[8];
    __device__ __forceinline__ void clear() {
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = 0.0f;
    }
    __device__ __forceinline__ void load(const float* p) { load8(p, v); }
    __device__ __forceinline__ void set(const float (&o)[8]) {
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = o[j];
    }
    __device__ __forceinline__ float get(int j) const { return v[j]; }
};

// grid: ceil(tokens / 32) blocks of 256 threads; dynamic shared memory MhcRowsConfig::smem_bytes(kMix). Arguments
// and outputs as sm90_hc_collapse_kernel's (mhc.cuh), post_in likewise (its post / comb may be this launch's: a
// block reads its own tokens' before it writes them).
template <typename ActT, int kMix, bool kPostFirst>
__global__ void __launch_bounds__(MhcRowsConfig::kThreads, 2)
    sm90_hc_collapse_rows_kernel(ActT* x, int64_t tokens, int dim, const float* __restrict__ fn,
                                 const float* __restrict__ scale, const float* __restrict__ base, int iters,
                                 float hc_eps, float norm_eps, float* __restrict__ mixes, float* __restrict__ pre,
                                 float* post, float* comb, ActT* __restrict__ y, HcPostInput post_in) {
    pdl_enter();
    using Cfg = MhcRowsConfig;
    constexpr int kHc = MhcConfig::kHc, kNTiles = (kMix + 7) / 8, kStride = kMix + 1;
    static_assert(kMix == 24 || kMix == 4, "hc_pre (24 mixes) or hc_head (4)");
    extern __shared__ double rows_smem[];
    double* partial = rows_smem;  // [warp][token][kStride]; warp 0's slots end up holding the block's sums
    float* pre_s = reinterpret_cast<float*>(rows_smem + Cfg::kWarps * Cfg::kTokens * kStride);  // [token][4]
    float* post_s = pre_s + Cfg::kTokens * kHc;  // [token][4 + 16]: post_in's post and comb (hc_post first)

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
    const int64_t t0 = int64_t(blockIdx.x) * Cfg::kTokens;
    const int n = kHc * dim, groups = dim / 8;

    // this lane's tokens (row g of each m-tile); with hc_post first, every token's post[q] and comb[., q] (q = 0..3)
    // are parked in shared memory (read before this block writes the new ones: post_in may alias post / comb)
    bool live[Cfg::kMTiles];
#pragma unroll
    for (int m = 0; m < Cfg::kMTiles; ++m) live[m] = t0 + 8 * m + g < tokens;
    if constexpr (kPostFirst) {
        for (int e = tid; e < Cfg::kTokens * (kHc + kHc * kHc); e += Cfg::kThreads) {
            const int tt = e / (kHc + kHc * kHc), r = e - tt * (kHc + kHc * kHc);
            const int64_t t = t0 + tt;
            post_s[e] = t >= tokens ? 0.0f
                        : r < kHc   ? post_in.post[t * kHc + r]
                                    : post_in.comb[t * kHc * kHc + r - kHc];
        }
        __syncthreads();
    }

    double acc[Cfg::kMTiles][kNTiles][2], ss[Cfg::kMTiles];
#pragma unroll
    for (int m = 0; m < Cfg::kMTiles; ++m) {
        ss[m] = 0;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) acc[m][nt][0] = acc[m][nt][1] = 0;
    }
#pragma unroll 1
    for (int c = warp; c < groups; c += Cfg::kWarps) {
        const int ch = 8 * c, k0 = q * dim + ch;  // this lane's 8 values: stream q, channels ch .. ch + 7
        RowValues8<ActT> a[Cfg::kMTiles];         // token 8m + g's 8 stream values, as stored
#pragma unroll
        for (int m = 0; m < Cfg::kMTiles; ++m) {
            const int64_t t = t0 + 8 * m + g;
            if (!live[m]) {
                a[m].clear();
            } else if constexpr (kPostFirst) {
                const float* pc = post_s + (8 * m + g) * (kHc + kHc * kHc);  // post[4], then comb[4][4]
                const float cm[kHc * kHc] = {pc[kHc + q],     0, 0, 0, pc[2 * kHc + q], 0, 0, 0,
                                             pc[3 * kHc + q], 0, 0, 0, pc[4 * kHc + q], 0, 0, 0};
                float av[8], res[kHc][8], o[8];
                load8(static_cast<const ActT*>(post_in.a) + t * dim + ch, av);
#pragma unroll
                for (int j = 0; j < kHc; ++j)
                    load8(static_cast<const ActT*>(post_in.residual) + (t * kHc + j) * dim + ch, res[j]);
                hc_post_mix(cm, pc[q], 0, av, res, o);  // comb[j][q] sits at cm[4j] here
                store8(x + t * n + k0, o);               // the stream as sm90_hc_post stores it, and its stored
                a[m].set(o);                             // values are what the collapse uses
            } else {
                a[m].load(x + t * n + k0);
            }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // channels ch + 4h .. ch + 4h + 3: fn rows 8·nt + g (zero past kMix)
            float4 b[kNTiles];
#pragma unroll
            for (int nt = 0; nt < kNTiles; ++nt)
                b[nt] = 8 * nt + g < kMix ? *reinterpret_cast<const float4*>(fn + int64_t(8 * nt + g) * n + k0 + 4 * h)
                                          : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {  // k step 4h + jj: channel ch + 4h + jj of stream q
                double bj[kNTiles];
#pragma unroll
                for (int nt = 0; nt < kNTiles; ++nt)
                    bj[nt] = double(jj == 0 ? b[nt].x : jj == 1 ? b[nt].y : jj == 2 ? b[nt].z : b[nt].w);
#pragma unroll
                for (int m = 0; m < Cfg::kMTiles; ++m) {
                    const double av = double(a[m].get(4 * h + jj));
                    ss[m] = fma(av, av, ss[m]);
#pragma unroll
                    for (int nt = 0; nt < kNTiles; ++nt) dmma_m8n8k4(acc[m][nt], av, bj[nt]);
                }
            }
        }
    }

    // this warp's partial sums: mix 8·nt + 2q + i of token 8m + g; the sum of squares over the quad, then by lane q 0
#pragma unroll
    for (int m = 0; m < Cfg::kMTiles; ++m) {
        double* row = partial + (warp * Cfg::kTokens + 8 * m + g) * kStride;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
            for (int i = 0; i < 2; ++i)
                if (8 * nt + 2 * q + i < kMix) row[8 * nt + 2 * q + i] = acc[m][nt][i];
        double s = ss[m];
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        s += __shfl_xor_sync(0xffffffffu, s, 2);
        if (q == 0) row[kMix] = s;
    }
    __syncthreads();
    for (int e = tid; e < Cfg::kTokens * kStride; e += Cfg::kThreads) {  // over the warps in order, into warp 0's slot
        double s = 0;
#pragma unroll
        for (int w = 0; w < Cfg::kWarps; ++w) s += partial[w * Cfg::kTokens * kStride + e];
        partial[e] = s;
    }
    __syncthreads();

    // one warp per token: lane r holds mix r (r < kMix) or the sum of squares (r == kMix), as the other kernels
    for (int tt = warp; tt < Cfg::kTokens; tt += Cfg::kWarps) {
        const int64_t t = t0 + tt;
        if (t >= tokens) break;  // warp-uniform
        const double tot = lane <= kMix ? partial[tt * kStride + lane] : 0.0;
        const float p = hc_finish_token_warp<kMix>(tot, n, t, scale, base, iters, hc_eps, norm_eps, mixes, post, comb);
        if (lane < kHc) {
            pre_s[tt * kHc + lane] = p;
            if (pre) pre[t * kHc + lane] = p;
        }
    }
    __syncthreads();  // pre_s, and with hc_post first the streams this block stored, are visible to the block

    for (int e = tid; e < Cfg::kTokens * groups; e += Cfg::kThreads) {
        const int tt = e / groups, ch = 8 * (e - tt * groups);
        const int64_t t = t0 + tt;
        if (t >= tokens) break;  // tokens are the slow index: every later e is past the end too
        const float p0 = pre_s[tt * kHc], p1 = pre_s[tt * kHc + 1], p2 = pre_s[tt * kHc + 2], p3 = pre_s[tt * kHc + 3];
        float v[kHc][8], out[8];
#pragma unroll
        for (int j = 0; j < kHc; ++j) load8(x + t * n + j * dim + ch, v[j]);
        hc_collapse8(p0, p1, p2, p3, v, out);
        store8(y + t * dim + ch, out);  // bf16 store rounds (RNE) in kReference
    }
}

}  // namespace dsv4::cuda
