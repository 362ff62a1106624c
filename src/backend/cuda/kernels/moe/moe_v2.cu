// Kernels and launcher of sm90_mxfp4_moe_decode_v2 (moe_v2.cuh describes the pipeline; moe.cuh the numerics).
#include <algorithm>
#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/kernels/moe/moe.h"
#include "backend/cuda/kernels/moe/moe_v2.cuh"

namespace dsv4::cuda {
namespace {

using Cfg = MoeDecodeConfig;
using V2 = MoeV2Config;
constexpr unsigned kFull = 0xffffffffu;

// Exclusive block-wide scan of 4 values per thread (256 threads, 1024 entries). Returns the total.
__device__ int block_scan4_v2(int (&v)[4], int* warp_sums) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int s = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int x = v[i];
        v[i] = s;
        s += x;
    }
    int incl = s;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const int o = __shfl_up_sync(kFull, incl, d);
        if (lane >= d) incl += o;
    }
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    int base = 0, total = 0;
    for (int w = 0; w < Cfg::kPrepThreads / 32; ++w) {
        if (w < warp) base += warp_sums[w];
        total += warp_sums[w];
    }
    base += incl - s;
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] += base;
    __syncthreads();
    return total;
}

// Launch 1 (as v1's): blocks 0..T-1 quantise token b's row of x into pair order; block T groups the picks by
// expert, sorts each token's picks by expert id and zeroes the v2 arrival counters.
__global__ void __launch_bounds__(Cfg::kPrepThreads) sm90_moe_v2_prepare_kernel(MoeKernelParams p) {
    const int tid = threadIdx.x;
    if (int(blockIdx.x) < p.T) {
        const int tok = blockIdx.x, nblk = p.D / 32;
        for (int base = 0; base < nblk; base += Cfg::kPrepThreads) {
            const int blk = base + tid;
            const bool active = blk < nblk;
            float v[32];
            const __nv_bfloat16* src = p.x + size_t(tok) * p.D + size_t(active ? blk : 0) * 32;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                float f[8];
                load8(src + 8 * i, f);
#pragma unroll
                for (int j = 0; j < 8; ++j) v[8 * i + j] = f[j];
            }
            const float s = quant_block128_to_f16(v, p.xq + size_t(tok) * p.D + size_t(blk) * 32, active);
            if (active && (blk & 3) == 0) p.xs[size_t(tok) * (p.D / 128) + blk / 4] = s;
        }
        return;
    }
    __shared__ int cnt[Cfg::kMaxExperts], off[Cfg::kMaxExperts], warp_sums[Cfg::kPrepThreads / 32];
    const int picks = p.T * p.K;
    for (int e = tid; e < Cfg::kMaxExperts; e += Cfg::kPrepThreads) cnt[e] = 0;
    __syncthreads();
    for (int i = tid; i < picks; i += Cfg::kPrepThreads) {
        const int e = p.idx[i];
        if (e >= 0 && e < p.E) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    int c[4], f[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        c[i] = cnt[4 * tid + i];
        f[i] = c[i] > 0;
    }
    block_scan4_v2(c, warp_sums);
    const int n_active = block_scan4_v2(f, warp_sums);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int e = 4 * tid + i;
        off[e] = c[i];
        if (e < p.E && cnt[e] > 0) {
            p.active_expert[f[i]] = e;
            p.active_start[f[i]] = c[i];
            p.active_count[f[i]] = cnt[e];
        }
    }
    if (tid == 0) *p.n_active = n_active;
    __syncthreads();
    for (int i = tid; i < picks; i += Cfg::kPrepThreads) {
        const int e = p.idx[i];
        if (e >= 0 && e < p.E) p.list[atomicAdd(&off[e], 1)] = i;
    }
    for (int t = tid; t < p.T; t += Cfg::kPrepThreads) {
        int o[Cfg::kMaxK];
        for (int j = 0; j < p.K; ++j) {
            int k = j;
            const int e = p.idx[t * p.K + j];
            for (; k > 0 && p.idx[o[k - 1]] > e; --k) o[k] = o[k - 1];
            o[k] = t * p.K + j;
        }
        for (int j = 0; j < p.K; ++j) p.order[t * p.K + j] = o[j];
    }
    for (int i = tid; i < p.slots * (p.I / 128); i += Cfg::kPrepThreads) p.cnt_up[i] = 0;
    for (int i = tid; i < p.D / V2::kRows; i += Cfg::kPrepThreads) p.cnt_down[i] = 0;
}

// The producer warp of one block: lane c (< kConsumers) tracks consumer c's stream of stages; each round the lanes
// whose consumer has a free slot are collected by a ballot and the whole warp issues their stages one by one.
template <bool kUp>
__device__ void produce(const MoeKernelParams& p, uint8_t* ring, uint64_t* full, uint64_t* empty, int n_items,
                        int rows_per_expert, int depth) {
    using G = MoeV2Gemm<kUp>;
    constexpr int M = G::kMats, KS = G::kSplits, S = G::kSlots;
    const int lane = threadIdx.x & 31, grid = gridDim.x, stride = grid * V2::kConsumers;
    const int nsteps = depth / V2::kStepK;
    const size_t row_bytes = size_t(depth) / 2, srow_bytes = size_t(depth) / 32;
    // this lane's consumer stream: item, token tile, K split, step, stage counter
    int item = lane * grid + int(blockIdx.x), tile = 0, ks = 0, step = 0, n = 0, count = 0;
    bool live = lane < V2::kConsumers && item < n_items;
    const uint8_t* wbase[M] = {};  // the item's first row of each matrix (weights, scales)
    const uint8_t* sbase[M] = {};
    auto load_item = [&]() {
        const int slot = item / rows_per_expert, rt = item % rows_per_expert;
        const Mxfp4ExpertPtrs ex = static_cast<const Mxfp4ExpertPtrs*>(p.experts)[p.active_expert[slot]];
        count = p.active_count[slot];
        const size_t r0 = size_t(rt) * V2::kRows;
        if constexpr (kUp) {
            wbase[0] = ex.w1 + r0 * row_bytes, sbase[0] = ex.w1s + r0 * srow_bytes;
            wbase[M - 1] = ex.w3 + r0 * row_bytes, sbase[M - 1] = ex.w3s + r0 * srow_bytes;
        } else {
            wbase[0] = ex.w2 + r0 * row_bytes, sbase[0] = ex.w2s + r0 * srow_bytes;
        }
    };
    if (live) load_item();
    const int ks_end = min(KS, nsteps);  // K splits that own at least one step
    while (__any_sync(kFull, live)) {
        const bool ready = live && (n < S || mbar_test(empty + lane * S + n % S, uint32_t((n / S - 1) & 1)));
        unsigned todo = __ballot_sync(kFull, ready);
        if (!todo) __nanosleep(32);  // nothing free: leave the issue slots to the consumers for a moment
        while (todo) {
            const int c = __ffs(todo) - 1;
            todo &= todo - 1;
            const int nc = __shfl_sync(kFull, n, c);
            const int sc = __shfl_sync(kFull, step, c);
            uint8_t* dst = ring + size_t(c * S + nc % S) * G::kSlotBytes;
            const uint32_t dst_s = smem_addr(dst);
#pragma unroll
            for (int m = 0; m < M; ++m) {
                const uint8_t* w = reinterpret_cast<const uint8_t*>(
                    __shfl_sync(kFull, reinterpret_cast<unsigned long long>(wbase[m]), c));
                w += size_t(sc) * V2::kRowStageBytes;
                // 16 rows x 8 parts of 16 B: 4 per lane, 8 lanes per row segment
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int ch = j * 32 + lane, r = ch >> 3, part = ch & 7;
                    const int phys = part ^ ((r & 1) << 2);
                    cp_async_16(dst_s + uint32_t(m * V2::kRows * V2::kRowStageBytes + r * V2::kRowStageBytes +
                                                 phys * 16),
                                w + size_t(r) * row_bytes + size_t(part) * 16);
                }
            }
            {
                const int m = lane / V2::kRows, r = lane % V2::kRows;
                const uint8_t* sp = reinterpret_cast<const uint8_t*>(
                    __shfl_sync(kFull, reinterpret_cast<unsigned long long>(m == 0 ? sbase[0] : sbase[M - 1]), c));
                if (m < M)
                    cp_async_8(dst_s + uint32_t(G::kSlotWeightBytes + (m * V2::kRows + r) * 8),
                               sp + size_t(r) * srow_bytes + size_t(sc) * 8);
            }
            cp_async_arrive_noinc(full + c * S + nc % S);
            if (lane == c) {  // advance consumer c's stream: step, then K split, then token tile, then item
                ++n;
                step += KS;
                if (step >= nsteps) {
                    step = ++ks;
                    if (ks >= ks_end) {
                        ks = step = 0;
                        tile += Cfg::kTokTile;
                        if (tile >= count) {
                            tile = 0;
                            item += stride;
                            live = item < n_items;
                            if (live) load_item();
                        }
                    }
                }
            }
        }
    }
    cp_async_wait_all();
}

// Launches 2 and 3: persistent GEMM over (active expert, 16-row tile) items. kUp: w1/w3 over K = D, SwiGLU, the
// hidden activations and their per-128 quantisation. !kUp: w2 over K = I, per-pick outputs, ordered combine.
template <bool kUp>
__global__ void __launch_bounds__(V2::kThreads, 1) sm90_moe_v2_gemm_kernel(MoeKernelParams p) {
    using G = MoeV2Gemm<kUp>;
    constexpr int M = G::kMats, KS = G::kSplits, S = G::kSlots;
    extern __shared__ __align__(128) uint8_t smem[];
    uint8_t* ring = smem;                                            // [consumer][slot][kSlotBytes]
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + G::kRingBytes);  // [consumer][slot]
    uint64_t* empty = full + V2::kConsumers * S;                     // [consumer][slot]
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    if (threadIdx.x < V2::kConsumers * S) {
        mbar_init(full + threadIdx.x, 32);
        mbar_init(empty + threadIdx.x, 1);
        // make the initialised barriers visible to the asynchronous arrivals (cp.async completion) as well
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();  // the only block-wide barrier: the roles never meet again
    const int n_active = *p.n_active;
    const int depth = kUp ? p.D : p.I, rows_total = kUp ? p.I : p.D;
    const int rows_per_expert = rows_total / V2::kRows, n_items = n_active * rows_per_expert;
    if (warp == V2::kConsumers) {
        produce<kUp>(p, ring, full, empty, n_items, rows_per_expert, depth);
        return;
    }
    const int nsteps = depth / V2::kStepK, nq = depth / 128;
    const __half* act = kUp ? p.xq : p.hq;
    const float* act_s = kUp ? p.xs : p.hs;
    const uint32_t ring_s = smem_addr(ring + size_t(warp) * S * G::kSlotBytes);
    // this lane's smem offsets inside a slot: part 4q + t of rows g and g + 8 (same parity: same swizzle)
    const uint32_t w_off = uint32_t(g * V2::kRowStageBytes), w_off_hi = w_off + 8 * V2::kRowStageBytes;
    const int swz = (g & 1) << 2;
    int n = 0;  // stage counter of this warp's stream (the producer lane for this warp counts alike)
    for (int item = warp * int(gridDim.x) + int(blockIdx.x); item < n_items;
         item += int(gridDim.x) * V2::kConsumers) {
        const int slot = item / rows_per_expert, rt = item % rows_per_expert, row0 = rt * V2::kRows;
        const int start = p.active_start[slot], count = p.active_count[slot];
        for (int tt = 0; tt < count; tt += Cfg::kTokTile) {
            const int ntile = min(Cfg::kTokTile, count - tt);
            // activation row of token column c of this tile (v1's act_row)
            auto act_row = [&](int c) {
                const int cc = c < ntile ? c : 0;
                return kUp ? p.list[start + tt + cc] / p.K : start + tt + cc;
            };
            const bool tok_b = g < ntile;
            const __half* arow = act + size_t(act_row(g)) * size_t(depth);
            const int c0 = 2 * t, c1 = 2 * t + 1;
            const float* srow0 = act_s + size_t(act_row(c0)) * size_t(nq);
            const float* srow1 = act_s + size_t(act_row(c1)) * size_t(nq);
            float ytot[M][4], ycur[M][4];
            for (int ks = 0; ks < KS; ++ks) {
#pragma unroll
                for (int m = 0; m < M; ++m) ycur[m][0] = ycur[m][1] = ycur[m][2] = ycur[m][3] = 0.0f;
                for (int step = ks; step < nsteps; step += KS, ++n) {
                    // activations first (L1/L2, v1's loads), so their latency overlaps the barrier wait
                    uint4 av[2][4];
                    float sa[2][2];
#pragma unroll
                    for (int q = 0; q < 2; ++q) {
                        const uint4* ap = reinterpret_cast<const uint4*>(arow + size_t(step * 2 + q) * 128 + t * 32);
#pragma unroll
                        for (int i = 0; i < 4; ++i) av[q][i] = tok_b ? __ldg(ap + i) : make_uint4(0, 0, 0, 0);
                        sa[q][0] = c0 < ntile ? __ldg(srow0 + step * 2 + q) : 0.0f;
                        sa[q][1] = c1 < ntile ? __ldg(srow1 + step * 2 + q) : 0.0f;
                    }
                    const int si = n % S;
                    mbar_wait(full + warp * S + si, uint32_t((n / S) & 1));
                    const uint32_t st = ring_s + uint32_t(si * G::kSlotBytes);
                    uint2 sv[M][2];  // [matrix][row g / g+8]: the 8 scale bytes of the step
#pragma unroll
                    for (int m = 0; m < M; ++m) {
                        const uint32_t sb = st + uint32_t(G::kSlotWeightBytes + m * V2::kRows * 8);
                        sv[m][0] = lds64(sb + uint32_t(g * 8));
                        sv[m][1] = lds64(sb + uint32_t((g + 8) * 8));
                    }
#pragma unroll
                    for (int q = 0; q < 2; ++q) {
                        // one 128-block at a time (keeps 16 weight registers live, not 32); the slot is handed
                        // back right after the last read of q = 1, before its MMAs
                        uint4 wv[M][2];  // [matrix][row g / g+8]
                        const uint32_t part = uint32_t(((4 * q + t) ^ swz) * 16);
#pragma unroll
                        for (int m = 0; m < M; ++m) {
                            const uint32_t mb = st + uint32_t(m * V2::kRows * V2::kRowStageBytes);
                            wv[m][0] = lds128(mb + w_off + part);
                            wv[m][1] = lds128(mb + w_off_hi + part);
                        }
                        if (q == 1) {
                            __syncwarp();  // every lane's slot reads are done (the arrive releases them)
                            if (lane == 0) mbar_arrive(empty + warp * S + si);
                        }
#pragma unroll
                        for (int m = 0; m < M; ++m) {
                            const uint32_t s_lo = q ? sv[m][0].y : sv[m][0].x, s_hi = q ? sv[m][1].y : sv[m][1].x;
                            block128_mma_v2(wv[m][0], wv[m][1], s_lo, s_hi, t, av[q], sa[q][0], sa[q][1], ycur[m]);
                        }
                    }
                }
                // v1: the block sums the K-split partials in split order, starting from split 0's own value
#pragma unroll
                for (int m = 0; m < M; ++m)
#pragma unroll
                    for (int i = 0; i < 4; ++i) ytot[m][i] = ks == 0 ? ycur[m][i] : __fadd_rn(ytot[m][i], ycur[m][i]);
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int col = 2 * t + (i & 1), row = row0 + g + 8 * (i >> 1);
                if (col >= ntile) continue;
                if constexpr (kUp) {
                    float u1 = round_bf16(ytot[0][i]), u3 = round_bf16(ytot[M - 1][i]);
                    if (p.limit > 0.0f) {
                        u1 = fminf(u1, p.limit);
                        u3 = fminf(fmaxf(u3, -p.limit), p.limit);
                    }
                    const float a = __fmul_rn(__fdiv_rn(u1, __fadd_rn(1.0f, expf(-u1))), u3);
                    const int pick = p.list[start + tt + col];
                    p.h[size_t(start + tt + col) * p.I + row] = __float2bfloat16_rn(__fmul_rn(p.route_w[pick], a));
                } else {
                    const int pick = p.list[start + tt + col];
                    p.yp[size_t(pick) * p.D + row] = round_bf16(ytot[0][i]);
                }
            }
        }
        // arrival: the last warp of a 128-row block of I quantises it (up); the last of a 16-row range of D
        // (one arrival per active expert) combines it (down)
        __threadfence();
        __syncwarp();
        int last = 0;
        if (lane == 0) {
            last = kUp ? atomicAdd(&p.cnt_up[slot * (p.I / 128) + row0 / 128], 1) == 128 / V2::kRows - 1
                       : atomicAdd(&p.cnt_down[rt], 1) == n_active - 1;
        }
        last = __shfl_sync(kFull, last, 0);
        if (!last) continue;
        __threadfence();
        if constexpr (kUp) {
            // quad (4 lanes) per token: lane t holds elements 32t..32t+31 of the 128-block
            const int qb = row0 / 128;
            for (int base = 0; base < count; base += 8) {
                const int j = base + g;
                const bool active = j < count;
                const size_t pos = size_t(start + (active ? j : 0));
                float v[32];
                const __nv_bfloat16* src = p.h + pos * p.I + qb * 128 + t * 32;
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const uint4 u = __ldcg(reinterpret_cast<const uint4*>(src) + i);  // other warps' rows: L2
                    const uint32_t wd[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
                    for (int k = 0; k < 4; ++k) {
                        v[8 * i + 2 * k] = __uint_as_float(wd[k] << 16);
                        v[8 * i + 2 * k + 1] = __uint_as_float(wd[k] & 0xffff0000u);
                    }
                }
                const float s = quant_block128_to_f16(v, p.hq + pos * p.I + qb * 128 + t * 32, active);
                if (active && t == 0) p.hs[pos * (p.I / 128) + qb] = s;
            }
        } else {
            // out[t, d] = bf16( Σ picks in ascending expert order (f32) + shared ), as backend::cpu::moe_sum
            const int total = p.T * V2::kRows;
            for (int i = lane; i < total; i += 32) {
                const int tok = i / V2::kRows, d = row0 + i % V2::kRows;
                float acc = 0.0f;
                for (int j = 0; j < p.K; ++j)
                    acc = __fadd_rn(acc, __ldcg(p.yp + size_t(p.order[tok * p.K + j]) * p.D + d));
                if (p.shared) acc = __fadd_rn(acc, __bfloat162float(p.shared[size_t(tok) * p.D + d]));
                p.y[size_t(tok) * p.D + d] = __float2bfloat16_rn(acc);
            }
        }
    }
}

template <bool kUp>
Status launch_gemm(const MoeKernelParams& p, int sms, StreamHandle stream, const char* name) {
    using G = MoeV2Gemm<kUp>;
    DSV4_RETURN_IF_ERROR(cuda_status(cudaFuncSetAttribute(sm90_moe_v2_gemm_kernel<kUp>,
                                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                          G::kSmemBytes),
                                     name));
    // upper bound of the items (every slot active): at most one block per SM, never more blocks than items
    const int64_t items = int64_t(p.slots) * ((kUp ? p.I : p.D) / V2::kRows);
    const unsigned grid = unsigned(std::max<int64_t>(1, std::min<int64_t>(sms, items)));
    sm90_moe_v2_gemm_kernel<kUp><<<grid, V2::kThreads, G::kSmemBytes, stream>>>(p);
    return launch_status(name);
}

}  // namespace

size_t sm90_mxfp4_moe_decode_v2_workspace_bytes(int64_t tokens, int64_t k, int64_t n_experts, int64_t dim,
                                                int64_t inter) {
    if (tokens <= 0 || k <= 0 || n_experts <= 0 || dim <= 0 || inter <= 0) return 0;
    return MoeV2Workspace::make(tokens, k, n_experts, dim, inter).total;
}

Status sm90_mxfp4_moe_decode_v2(const MoeDecodeArgs& a, StreamHandle stream) {
    const std::string op = "sm90_mxfp4_moe_decode_v2";
    if (!a.x || !a.idx || !a.route_w || !a.experts || !a.y || !a.workspace)
        return invalid_argument(op + ": null pointer (x, idx, route_w, experts, y and workspace are required)");
    if (a.tokens < 1 || a.tokens > Cfg::kMaxTokens)
        return invalid_argument(op + ": tokens " + std::to_string(a.tokens) + " outside 1.." +
                                std::to_string(Cfg::kMaxTokens) + " (the decode kernel; prefill is a separate path)");
    if (a.k < 1 || a.k > Cfg::kMaxK || a.n_experts < a.k || a.n_experts > Cfg::kMaxExperts)
        return invalid_argument(op + ": need 1 <= K <= 16 and K <= E <= 1024, got K " + std::to_string(a.k) +
                                ", E " + std::to_string(a.n_experts));
    if (a.dim % 512 != 0 || a.inter % 512 != 0 || a.dim <= 0 || a.inter <= 0 || a.dim > (1 << 20) ||
        a.inter > (1 << 20))
        return invalid_argument(op + ": D " + std::to_string(a.dim) + " and I " + std::to_string(a.inter) +
                                " must be positive multiples of 512");
    const MoeV2Workspace wl = MoeV2Workspace::make(a.tokens, a.k, a.n_experts, a.dim, a.inter);
    if (a.workspace_bytes < wl.total || (reinterpret_cast<uintptr_t>(a.workspace) & 255))
        return invalid_argument(op + ": workspace must be 256-byte aligned and hold " + std::to_string(wl.total) +
                                " bytes (sm90_mxfp4_moe_decode_v2_workspace_bytes), got " +
                                std::to_string(a.workspace_bytes));
    if (reinterpret_cast<uintptr_t>(a.x) & 15) return invalid_argument(op + ": x must be 16-byte aligned");
    int device = 0, sms = 0;
    DSV4_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&device), "cudaGetDevice"));
    DSV4_RETURN_IF_ERROR(
        cuda_status(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SM count"));
    char* ws = static_cast<char*>(a.workspace);
    MoeKernelParams p{};
    p.x = static_cast<const __nv_bfloat16*>(a.x);
    p.idx = a.idx;
    p.route_w = a.route_w;
    p.experts = a.experts;
    p.shared = static_cast<const __nv_bfloat16*>(a.shared);
    p.y = static_cast<__nv_bfloat16*>(a.y);
    p.T = int(a.tokens), p.K = int(a.k), p.E = int(a.n_experts), p.D = int(a.dim), p.I = int(a.inter);
    p.slots = int(std::min<int64_t>(a.tokens * a.k, a.n_experts));
    p.limit = a.limit;
    p.n_active = reinterpret_cast<int*>(ws + wl.n_active);
    p.active_expert = reinterpret_cast<int*>(ws + wl.active_expert);
    p.active_start = reinterpret_cast<int*>(ws + wl.active_start);
    p.active_count = reinterpret_cast<int*>(ws + wl.active_count);
    p.list = reinterpret_cast<int*>(ws + wl.list);
    p.order = reinterpret_cast<int*>(ws + wl.order);
    p.cnt_up = reinterpret_cast<int*>(ws + wl.cnt_up);
    p.cnt_down = reinterpret_cast<int*>(ws + wl.cnt_down);
    p.xq = reinterpret_cast<__half*>(ws + wl.xq);
    p.xs = reinterpret_cast<float*>(ws + wl.xs);
    p.h = reinterpret_cast<__nv_bfloat16*>(ws + wl.h);
    p.hq = reinterpret_cast<__half*>(ws + wl.hq);
    p.hs = reinterpret_cast<float*>(ws + wl.hs);
    p.yp = reinterpret_cast<float*>(ws + wl.yp);

    sm90_moe_v2_prepare_kernel<<<unsigned(p.T + 1), Cfg::kPrepThreads, 0, stream>>>(p);
    DSV4_RETURN_IF_ERROR(launch_status("sm90_moe_v2_prepare"));
    DSV4_RETURN_IF_ERROR(launch_gemm<true>(p, sms, stream, "sm90_moe_v2_gate_up"));
    return launch_gemm<false>(p, sms, stream, "sm90_moe_v2_down");
}

}  // namespace dsv4::cuda
