// sm90_mxfp4_moe_decode — both kernel paths, the register-streaming launches ("register", the default) and the
// persistent TMA-ring kernel ("ring") — at V4-Flash shapes (D 4096, I 2048, 256 experts, top-6) for 1, 4, 16,
// 64, 256, 1024 and 8192 tokens — above 256 as the engine runs a prefill today, in passes of 256 tokens through the
// decode kernel —
// side by side in one run with (a) a plain baseline — dequantise each touched expert to bf16, then cuBLAS GEMMs
// ([w1;w3] · x and w2 · h per expert; no gather, no SwiGLU: a lower bound on that path) — and (b) the device copy
// bandwidth (cudaMemcpy D2D of 1 GiB, bytes read + written).
//
// Weights: two layers' worth of experts (2 × 256 × 13.4 MB = 6.8 GB of random MXFP4 bytes, UE8M0 scales 2^-9..2^-1)
// and 32 random routings per token count, rotated call by call so neither the weights nor the routing repeat
// within L2's reach. Time: CUDA events around batches of 16 calls after warm-up, median of 15 batches (above 256
// tokens: batches of 2, median of 5).
// Bytes touched per call: experts read × (3 · I · D/2 + 3 · I · D/32), where each pass of 256 tokens reads its own
// distinct experts (the baseline, one pass over all tokens, reads fewer above 256 tokens; its TB/s uses the same
// bytes, so the columns compare times). FLOPs per call: 6 · D · I per pick
// (gate and up 2 · 2·I·D, down 2·I·D), T · K picks.
//
// From 256 tokens on, the "prefill" columns time sm90_mxfp4_moe_prefill (one call over all T tokens: grouped FP8
// wgmma GEMMs, docs/kernels/moe_prefill.md) with the same FLOP count.
//
// `dsv4_bench_moe --profile T` runs a few calls of each path (ring, register, register on the repacked layout with
// mma.sync and with wgmma) at T tokens only (for a profiler's per-kernel view; from 256 tokens on the prefill kernel
// too);
// `dsv4_bench_moe --decode` only the first table's T <= 256 rows;
// `dsv4_bench_moe --prefill` only the prefill kernel, shipped and repacked layouts (the repacked one also with each M
// tile forced: 128 and 256 rows), at 256, 1,024, 2,048, 4,096 and 8,192 tokens, and 8,192 with skewed routing
// (kSkewSigma: what a real router's uneven expert load gives the M tiles) (a quick comparison of prefill variants).
//
// A second table times the decode kernel's weight formats (MXFP4, MXFP4 in the repacked layout through f16 mma.sync
// and through FP8 wgmma, NVFP4, FP8 128x128 blocks) at T <= 256. The repacked columns read the same random bytes as if
// they were repacked (weights and scale fields of arbitrary value; the kernel's time does not depend on the values,
// only on the bytes it reads). A third streams, for T <= 256, exactly the bytes the kernel must read (every touched
// expert's weights and scales, contiguous per expert here) through sm90_stream_probe — the TMA-ring load pipeline
// without arithmetic, read only — with a few ring shapes: what a weight-streaming MoE kernel on that pipeline could
// reach at best.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "../bench_check.h"
#include "backend/cuda/common/buffer.h"
#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/stream.h"
#include "backend/cuda/kernels/moe/moe.h"
#include "backend/cuda/kernels/moe_prefill/moe_prefill.h"
#include "backend/cuda/kernels/stream_probe/stream_probe.h"

namespace {

using namespace dsv4;
using namespace dsv4::cuda;

constexpr int64_t kD = 4096, kI = 2048, kE = 256, kK = 6, kLayers = 2, kRoutings = 32;
constexpr int kBatch = 16, kBatches = 15, kWarm = 3;
constexpr int64_t kPassT = 256, kMaxT = 8192;  // the decode kernel's largest T; the largest T benchmarked
// --prefill's skewed row: expert popularity lognormal with this sigma (at 8,192 tokens the busiest of 256 experts
// takes ~3x the mean load and ~50 experts exceed one 256-row tile, which uniform routing never does)
constexpr double kSkewSigma = 0.5;

#define CHECK_CUDA(call) CHECK(::dsv4::cuda::cuda_status((call), #call))
#define CHECK_BLAS(call)                                                                         \
    do {                                                                                         \
        const cublasStatus_t b_ = (call);                                                        \
        if (b_ != CUBLAS_STATUS_SUCCESS) {                                                       \
            std::fprintf(stderr, "%s:%d: %s failed (%d)\n", __FILE__, __LINE__, #call, int(b_)); \
            std::exit(1);                                                                        \
        }                                                                                        \
    } while (0)

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
// Random bytes; for scales (is_scale) UE8M0 exponents in [118, 126] (2^-9 .. 2^-1).
__global__ void fill_random(uint8_t* p, size_t n, uint64_t seed, bool is_scale) {
    const size_t stride = size_t(gridDim.x) * blockDim.x * 8;
    for (size_t i = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * 8; i < n; i += stride) {
        const uint64_t r = mix64(seed + i);
        for (int j = 0; j < 8 && i + j < n; ++j) {
            const uint8_t b = uint8_t(r >> (8 * j));
            p[i + j] = is_scale ? uint8_t(118 + b % 9) : b;
        }
    }
}
__global__ void fill_bf16(__nv_bfloat16* p, size_t n, uint64_t seed) {
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        p[i] = __float2bfloat16(float(int(mix64(seed + i) & 0xffff) - 32768) / 16384.0f);
}
// Baseline dequantisation: MXFP4 [rows, cols] -> bf16 [rows, cols], 8 values (4 bytes) per thread.
__global__ void dequant_mxfp4_bf16(const uint8_t* w, const uint8_t* s, __nv_bfloat16* out, size_t n8, int cols) {
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n8; i += size_t(gridDim.x) * blockDim.x) {
        const uint32_t q = reinterpret_cast<const uint32_t*>(w)[i];
        const size_t e0 = i * 8;
        const float sc = __uint_as_float(uint32_t(s[e0 / 32]) << 23);
        __align__(16) __nv_bfloat16 v[8];
        for (int j = 0; j < 8; ++j) {
            const uint32_t c = (q >> (4 * j)) & 0xf, m = c & 7;
            const float mag = m < 2 ? 0.5f * float(m) : __uint_as_float((((m >> 1) + 126u) << 23) | ((m & 1u) << 22));
            v[j] = __float2bfloat16((c & 8 ? -mag : mag) * sc);
        }
        *reinterpret_cast<uint4*>(out + e0) = *reinterpret_cast<const uint4*>(v);
        (void)cols;
    }
}

struct Routing {
    std::vector<int32_t> idx;
    std::vector<float> w;
    std::vector<int> distinct;  // expert ids, ascending
    std::vector<int> count;     // tokens per distinct expert
    int64_t pass_experts = 0;   // Σ over the passes of 256 tokens of the distinct experts each pass reads
    DeviceBuffer d_idx, d_w;
};

// skew_sigma = 0: every token's K experts uniform without replacement. skew_sigma > 0: expert e has popularity
// exp(skew_sigma · N(0, 1)) (one draw per routing) and a token's K experts are a weighted draw without replacement
// (the K largest u^(1/popularity), u uniform: Efraimidis-Spirakis), so some experts take several times the mean.
Routing make_routing(std::mt19937_64& rng, int64_t T, double skew_sigma = 0) {
    Routing r;
    std::vector<int32_t> all(kE);
    std::iota(all.begin(), all.end(), 0);
    std::uniform_real_distribution<float> u(0.5f, 2.0f);
    std::vector<double> popularity(kE, 1.0), key(kE);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::uniform_real_distribution<double> unit(1e-12, 1.0);
    if (skew_sigma > 0)
        for (double& p : popularity) p = std::exp(skew_sigma * normal(rng));
    std::vector<int> cnt(kE, 0);
    for (int64_t t = 0; t < T; ++t) {
        if (skew_sigma > 0) {
            for (int e = 0; e < kE; ++e) key[size_t(e)] = std::log(unit(rng)) / popularity[size_t(e)];
            std::partial_sort(all.begin(), all.begin() + kK, all.end(),
                              [&](int32_t a, int32_t b) { return key[size_t(a)] > key[size_t(b)]; });
        } else {
            std::shuffle(all.begin(), all.end(), rng);
        }
        float sum = 0;
        for (int64_t j = 0; j < kK; ++j) {
            r.idx.push_back(all[size_t(j)]);
            ++cnt[size_t(all[size_t(j)])];
            r.w.push_back(u(rng));
            sum += r.w.back();
        }
        for (int64_t j = 0; j < kK; ++j) r.w[size_t(t * kK + j)] *= 1.5f / sum;
    }
    for (int e = 0; e < kE; ++e)
        if (cnt[size_t(e)]) r.distinct.push_back(e), r.count.push_back(cnt[size_t(e)]);
    for (int64_t t0 = 0; t0 < T; t0 += kPassT) {
        std::set<int32_t> pass(r.idx.begin() + t0 * kK, r.idx.begin() + std::min<int64_t>(T, t0 + kPassT) * kK);
        r.pass_experts += int64_t(pass.size());
    }
    auto a = DeviceBuffer::allocate(r.idx.size() * 4, "routing");
    CHECK(a.status());
    r.d_idx = std::move(*a);
    CHECK(r.d_idx.upload(r.idx.data(), r.idx.size() * 4));
    auto b = DeviceBuffer::allocate(r.w.size() * 4, "routing weights");
    CHECK(b.status());
    r.d_w = std::move(*b);
    CHECK(r.d_w.upload(r.w.data(), r.w.size() * 4));
    return r;
}

constexpr size_t kW13Bytes = size_t(kI) * kD / 2, kW13Scale = size_t(kI) * kD / 32;
constexpr size_t kW2Bytes = size_t(kD) * kI / 2, kW2Scale = size_t(kD) * kI / 32;
constexpr size_t kExpertBytes = 2 * (kW13Bytes + kW13Scale) + kW2Bytes + kW2Scale;

template <typename F>
float median_ms_per_call(cudaStream_t s, F&& call, bool long_calls = false) {
    auto timer = EventTimer::create();
    CHECK(timer.status());
    // calls of tens of ms (prefill sizes) need no batching against launch overhead; fewer keep the run short
    const int batch = long_calls ? 2 : kBatch, batches = long_calls ? 5 : kBatches, warm = long_calls ? 1 : kWarm;
    for (int i = 0; i < warm; ++i) call(i);
    std::vector<float> v;
    int n = 0;
    for (int b = 0; b < batches; ++b) {
        CHECK(timer->start(s));
        for (int i = 0; i < batch; ++i) call(n++);
        CHECK(timer->stop(s));
        auto ms = timer->elapsed_ms();
        CHECK(ms.status());
        v.push_back(*ms / float(batch));
    }
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Read-only streaming of the touched experts' bytes through sm90_stream_probe for several ring shapes (tile bytes
// x stages); an expert's kExpertBytes is a whole number of tiles of each size.
void stream_probe_table(cudaStream_t s, const uint8_t* base, std::mt19937_64& rng, double copy_tbs) {
    const std::pair<int64_t, int> shapes[] = {{32 * 1024, 4}, {32 * 1024, 6}, {16 * 1024, 8}, {64 * 1024, 3}};
    auto sum = DeviceBuffer::allocate(16, "probe checksum");
    CHECK(sum.status());
    std::printf("\n| T | experts | MB read | 4 x 32 KB TB/s | 6 x 32 KB TB/s | 8 x 16 KB TB/s | 3 x 64 KB TB/s | "
                "best %% copy |\n|---|---|---|---|---|---|---|---|\n");
    for (int64_t T : {int64_t(1), int64_t(4), int64_t(16), int64_t(64), int64_t(256)}) {
        std::vector<std::vector<int>> touched;  // per routing: the distinct experts
        double experts = 0;
        for (int i = 0; i < kRoutings; ++i) {
            touched.push_back(make_routing(rng, T).distinct);
            experts += double(touched.back().size());
        }
        experts /= kRoutings;
        const double bytes = experts * double(kExpertBytes);
        std::printf("| %lld | %.1f | %.1f |", (long long)T, experts, bytes / 1e6);
        double best = 0;
        for (const auto& [tile, stages] : shapes) {
            if (int64_t(kExpertBytes) % tile != 0) {
                std::printf(" - |");
                continue;
            }
            std::vector<DeviceBuffer> offsets;  // per routing: byte offsets of its tiles
            std::vector<int64_t> counts;
            for (int i = 0; i < kRoutings; ++i) {
                std::vector<int64_t> off;
                for (int e : touched[size_t(i)])
                    for (int64_t j = 0; j < int64_t(kExpertBytes) / tile; ++j)
                        off.push_back((int64_t(i % kLayers) * kE + e) * int64_t(kExpertBytes) + j * tile);
                auto d = DeviceBuffer::allocate(off.size() * 8, "probe offsets");
                CHECK(d.status());
                CHECK(d->upload(off.data(), off.size() * 8));
                offsets.push_back(std::move(*d));
                counts.push_back(int64_t(off.size()));
            }
            const float ms = median_ms_per_call(s, [&](int i) {
                StreamProbeArgs a;
                a.src = base;
                a.tile_offset = offsets[size_t(i % kRoutings)].as<int64_t>();
                a.n_tiles = counts[size_t(i % kRoutings)];
                a.tile_bytes = tile;
                a.stages = stages;
                a.checksum = sum->as<uint32_t>();
                CHECK(sm90_stream_probe(a, s));
            });
            const double tbs = bytes / (ms * 1e-3) / 1e12;
            best = std::max(best, tbs);
            std::printf(" %.2f |", tbs);
        }
        std::printf(" %.1f%% |\n", 100.0 * best / copy_tbs);
    }
}


// A fill for scale bytes of the other formats: NVFP4 e4m3 group scales in [0x28, 0x57] (2^-3 .. 15: positive,
// normal, never NaN); FP8 weights: random e4m3 bytes with the two NaN codes (0x7f, 0xff) moved to their neighbours.
__global__ void fill_e4m3(uint8_t* p, size_t n, uint64_t seed, bool scales) {
    const size_t stride = size_t(gridDim.x) * blockDim.x * 8;
    for (size_t i = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * 8; i < n; i += stride) {
        const uint64_t r = mix64(seed + i);
        for (int j = 0; j < 8 && i + j < n; ++j) {
            const uint8_t b = uint8_t(r >> (8 * j));
            p[i + j] = scales ? uint8_t(0x28 + b % 48) : ((b & 0x7f) == 0x7f ? uint8_t(b ^ 1) : b);
        }
    }
}

// The three weight formats of the decode kernel (register-streaming path) side by side at T <= 256: MXFP4 (the
// table above's weights), NVFP4 (the same e2m1 bytes with e4m3 per-16 scales and an f32 global per matrix) and FP8
// 128x128 blocks (1 byte per weight). Bytes per expert: MXFP4 3·I·D·(1/2 + 1/32), NVFP4 3·I·D·(1/2 + 1/16), FP8
// 3·I·D·(1 + 1/16384).
void format_table(cudaStream_t s, const Mxfp4ExpertPtrs* host_mx, const Mxfp4ExpertPtrs* dev_mx,
                  std::mt19937_64& rng, double copy_tbs) {
    constexpr size_t kNvScale13 = size_t(kI) * kD / 16, kNvScale2 = size_t(kD) * kI / 16;
    constexpr size_t kNvBytes = 2 * (kW13Bytes + kNvScale13) + kW2Bytes + kNvScale2;
    constexpr size_t kF13 = size_t(kI) * kD, kF2 = size_t(kD) * kI;
    constexpr size_t kFs13 = size_t(kI / 128) * (kD / 128), kFs2 = size_t(kD / 128) * (kI / 128);
    constexpr size_t kFpBytes = 2 * (kF13 + kFs13) + kF2 + kFs2;
    const size_t n = size_t(kLayers * kE);
    auto nv_scales = DeviceBuffer::allocate(n * (2 * kNvScale13 + kNvScale2), "NVFP4 scales");
    auto nv_global = DeviceBuffer::allocate(n * 3 * sizeof(float), "NVFP4 globals");
    auto fp_bytes = DeviceBuffer::allocate(n * (2 * (kF13 + kFs13) + kF2 + kFs2), "FP8 experts");
    CHECK(nv_scales.status());
    CHECK(nv_global.status());
    CHECK(fp_bytes.status());
    fill_e4m3<<<1024, 256, 0, s>>>(nv_scales->as<uint8_t>(), n * (2 * kNvScale13 + kNvScale2), 77, true);
    const std::vector<float> globals(n * 3, 1.0f / 2688.0f);
    CHECK(nv_global->upload(globals.data(), globals.size() * sizeof(float)));
    std::vector<Nvfp4ExpertPtrs> nv(n);
    std::vector<Fp8BlockExpertPtrs> fp(n);
    for (size_t i = 0; i < n; ++i) {
        uint8_t* ns = nv_scales->as<uint8_t>() + i * (2 * kNvScale13 + kNvScale2);
        const float* g = nv_global->as<float>() + 3 * i;
        nv[i] = {host_mx[i].w1, ns, g, host_mx[i].w3, ns + kNvScale13, g + 1, host_mx[i].w2, ns + 2 * kNvScale13,
                 g + 2};
        uint8_t* f = fp_bytes->as<uint8_t>() + i * kFpBytes;
        fill_e4m3<<<1024, 256, 0, s>>>(f, 2 * kF13 + kF2, uint64_t(i) << 40, false);
        fill_random<<<16, 256, 0, s>>>(f + 2 * kF13 + kF2, 2 * kFs13 + kFs2, (uint64_t(i) << 40) ^ 0x3333, true);
        fp[i] = {f, f + 2 * kF13 + kF2, f + kF13, f + 2 * kF13 + kF2 + kFs13, f + 2 * kF13,
                 f + 2 * kF13 + kF2 + 2 * kFs13};
    }
    CHECK(launch_status("fill_e4m3"));
    CHECK(check_moe_expert_table(nv.data(), int64_t(n), "bench NVFP4 experts"));
    CHECK(check_moe_expert_table(fp.data(), int64_t(n), "bench FP8 experts"));
    auto d_nv = DeviceBuffer::allocate(n * sizeof(Nvfp4ExpertPtrs), "NVFP4 table");
    auto d_fp = DeviceBuffer::allocate(n * sizeof(Fp8BlockExpertPtrs), "FP8 table");
    CHECK(d_nv.status());
    CHECK(d_fp.status());
    CHECK(d_nv->upload(nv.data(), n * sizeof(Nvfp4ExpertPtrs)));
    CHECK(d_fp->upload(fp.data(), n * sizeof(Fp8BlockExpertPtrs)));
    std::printf("\n| T | experts | MXFP4 us | MXFP4 TB/s | repacked us | repacked TB/s | repacked %% copy | "
                "repacked wgmma us | wgmma TB/s | wgmma %% copy | NVFP4 us | NVFP4 TB/s | FP8 block us | "
                "FP8 block TB/s | FP8 %% copy |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int64_t T : {int64_t(1), int64_t(4), int64_t(16), int64_t(64), int64_t(256)}) {
        std::vector<Routing> routings;
        double experts = 0;
        for (int i = 0; i < kRoutings; ++i) {
            routings.push_back(make_routing(rng, T));
            experts += double(routings.back().distinct.size());
        }
        experts /= kRoutings;
        auto x = DeviceBuffer::allocate(size_t(T) * kD * 2, "x");
        auto y = DeviceBuffer::allocate(size_t(T) * kD * 2, "y");
        CHECK(x.status());
        CHECK(y.status());
        fill_bf16<<<64, 256, 0, s>>>(x->as<__nv_bfloat16>(), size_t(T) * kD, 7);
        const size_t ws_bytes = sm90_mxfp4_moe_decode_workspace_bytes(T, kK, kE, kD, kI);
        auto ws = DeviceBuffer::allocate(ws_bytes, "workspace");
        CHECK(ws.status());
        auto time_format = [&](MoeWeightFormat f, bool fp8_wgmma = false) {
            return median_ms_per_call(s, [&](int i) {
                const Routing& r = routings[size_t(i % kRoutings)];
                const int64_t layer = (i % kLayers) * kE;
                MoeDecodeArgs a;
                a.x = x->data();
                a.idx = r.d_idx.as<int32_t>();
                a.route_w = r.d_w.as<float>();
                a.format = f;
                a.fp8_wgmma = fp8_wgmma;
                if (f == MoeWeightFormat::kMXFP4 || f == MoeWeightFormat::kMXFP4Repacked) a.experts = dev_mx + layer;
                if (f == MoeWeightFormat::kNVFP4) a.nvfp4_experts = d_nv->as<Nvfp4ExpertPtrs>() + layer;
                if (f == MoeWeightFormat::kFP8Block) a.fp8_experts = d_fp->as<Fp8BlockExpertPtrs>() + layer;
                a.y = y->data();
                a.tokens = T, a.k = kK, a.n_experts = kE, a.dim = kD, a.inter = kI;
                a.workspace = ws->data();
                a.workspace_bytes = ws_bytes;
                CHECK(sm90_mxfp4_moe_decode(a, s));
            });
        };
        const float mx = time_format(MoeWeightFormat::kMXFP4), rp = time_format(MoeWeightFormat::kMXFP4Repacked),
                    wg = time_format(MoeWeightFormat::kMXFP4Repacked, true),
                    nvt = time_format(MoeWeightFormat::kNVFP4), fpt = time_format(MoeWeightFormat::kFP8Block);
        auto tbs = [&](size_t per_expert, float ms) { return experts * double(per_expert) / (ms * 1e-3) / 1e12; };
        std::printf("| %lld | %.1f | %.1f | %.2f | %.1f | %.2f | %.1f%% | %.1f | %.2f | %.1f%% | %.1f | %.2f | %.1f | "
                    "%.2f | %.1f%% |\n",
                    (long long)T, experts, mx * 1e3, tbs(kExpertBytes, mx), rp * 1e3, tbs(kExpertBytes, rp),
                    100.0 * tbs(kExpertBytes, rp) / copy_tbs, wg * 1e3, tbs(kExpertBytes, wg),
                    100.0 * tbs(kExpertBytes, wg) / copy_tbs, nvt * 1e3, tbs(kNvBytes, nvt), fpt * 1e3,
                    tbs(kFpBytes, fpt), 100.0 * tbs(kFpBytes, fpt) / copy_tbs);
    }
    CHECK_CUDA(cudaStreamSynchronize(s));
}

}  // namespace

int main(int argc, char** argv) {
    int64_t profile_T = 0;
    bool decode_only = false;  // --decode: T <= 256 and no probe table (a quick comparison)
    if (argc == 3 && std::strcmp(argv[1], "--profile") == 0) profile_T = std::atoll(argv[2]);
    if (argc == 2 && std::strcmp(argv[1], "--decode") == 0) decode_only = true;
    const bool prefill_only = argc == 2 && std::strcmp(argv[1], "--prefill") == 0;
    if (argc > 1 && !profile_T && !decode_only && !prefill_only) {
        std::fprintf(stderr, "usage: %s [--decode | --prefill | --profile T]\n", argv[0]);
        return 2;
    }
    cudaDeviceProp prop{};
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
    auto stream = Stream::create();
    CHECK(stream.status());
    cudaStream_t s = stream->handle();

    // weights: kLayers × kE experts in one allocation
    const size_t total = size_t(kLayers) * kE * kExpertBytes;
    auto wbuf = DeviceBuffer::allocate(total, "expert weights");
    CHECK(wbuf.status());
    uint8_t* base = wbuf->as<uint8_t>();
    std::vector<Mxfp4ExpertPtrs> table(size_t(kLayers * kE));
    for (int64_t l = 0; l < kLayers; ++l) {
        for (int64_t e = 0; e < kE; ++e) {
            uint8_t* p = base + size_t(l * kE + e) * kExpertBytes;
            Mxfp4ExpertPtrs& x = table[size_t(l * kE + e)];
            x.w1 = p, x.w3 = p + kW13Bytes, x.w2 = p + 2 * kW13Bytes;
            x.w1s = p + 2 * kW13Bytes + kW2Bytes, x.w3s = x.w1s + kW13Scale, x.w2s = x.w3s + kW13Scale;
            fill_random<<<1024, 256, 0, s>>>(p, 2 * kW13Bytes + kW2Bytes, uint64_t(l * kE + e) << 40, false);
            fill_random<<<256, 256, 0, s>>>(p + 2 * kW13Bytes + kW2Bytes, 2 * kW13Scale + kW2Scale,
                                            (uint64_t(l * kE + e) << 40) ^ 0x5555, true);
        }
    }
    CHECK(launch_status("fill_random"));
    auto dtable = DeviceBuffer::allocate(table.size() * sizeof(Mxfp4ExpertPtrs), "expert table");
    CHECK(dtable.status());
    CHECK(dtable->upload(table.data(), table.size() * sizeof(Mxfp4ExpertPtrs)));
    const auto* layer_table = dtable->as<Mxfp4ExpertPtrs>();
    std::printf("expert weights: %.2f GB (%lld layers x %lld experts x %.2f MB)\n", double(total) / 1e9,
                (long long)kLayers, (long long)kE, double(kExpertBytes) / 1e6);

    // copy bandwidth
    const size_t copy_bytes = size_t(1) << 30;
    auto c0 = DeviceBuffer::allocate(copy_bytes, "copy src");
    auto c1 = DeviceBuffer::allocate(copy_bytes, "copy dst");
    CHECK(c0.status());
    CHECK(c1.status());
    const float copy_ms = median_ms_per_call(s, [&](int) {
        CHECK_CUDA(cudaMemcpyAsync(c1->data(), c0->data(), copy_bytes, cudaMemcpyDeviceToDevice, s));
    });
    const double copy_tbs = 2.0 * double(copy_bytes) / (copy_ms * 1e-3) / 1e12;
    std::printf("copy D2D 1 GiB: %.3f ms = %.2f TB/s (read + write)\n", copy_ms, copy_tbs);

    cublasHandle_t blas;
    CHECK_BLAS(cublasCreate(&blas));
    CHECK_BLAS(cublasSetStream(blas, s));
    auto deq = DeviceBuffer::allocate(size_t(3) * kI * kD * 2, "baseline bf16 expert");
    auto hbuf = DeviceBuffer::allocate(size_t(kMaxT) * 2 * kI * 2, "baseline hidden");
    auto obuf = DeviceBuffer::allocate(size_t(kMaxT) * kD * 2, "baseline out");
    CHECK(deq.status());
    CHECK(hbuf.status());
    CHECK(obuf.status());

    std::mt19937_64 rng(20261130);
    std::vector<int64_t> token_counts = {1, 4, 16, 64, 256, 1024, kMaxT};
    if (profile_T) token_counts = {profile_T};
    if (decode_only) token_counts = {1, 4, 16, 64, 256};
    if (prefill_only) {
        std::printf(
            "\n| T | prefill us (MXFP4) | TFLOP/s | prefill us (repacked MXFP4) | TFLOP/s "
            "| repacked, 128-row M tiles us | repacked, 256-row M tiles us |\n|---|---|---|---|---|---|---|\n");
        token_counts = {256, 1024, 2048, 4096, kMaxT, kMaxT};  // the last row with skewed routing
    }
    if (!prefill_only)
        std::printf("\n| T | experts read | MB touched | ring us | ring TB/s | ring %% copy | ring TFLOP/s | register us | "
                "register TB/s | baseline us | baseline TB/s | baseline TFLOP/s | ring vs baseline | prefill us | "
                "prefill TFLOP/s |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (size_t point = 0; point < token_counts.size(); ++point) {
        const int64_t T = token_counts[point];
        const bool skewed = prefill_only && point + 1 == token_counts.size();
        std::vector<Routing> routings;
        for (int i = 0; i < kRoutings; ++i) routings.push_back(make_routing(rng, T, skewed ? kSkewSigma : 0.0));
        auto x = DeviceBuffer::allocate(size_t(T) * kD * 2, "x");
        auto shared = DeviceBuffer::allocate(size_t(T) * kD * 2, "shared");
        auto y = DeviceBuffer::allocate(size_t(T) * kD * 2, "y");
        CHECK(x.status());
        CHECK(shared.status());
        CHECK(y.status());
        fill_bf16<<<64, 256, 0, s>>>(x->as<__nv_bfloat16>(), size_t(T) * kD, 7);
        fill_bf16<<<64, 256, 0, s>>>(shared->as<__nv_bfloat16>(), size_t(T) * kD, 9);
        // the decode kernel takes at most 256 tokens: larger T runs in passes of 256 (the engine's prefill today)
        const int64_t pass_T = std::min<int64_t>(T, kPassT), passes = (T + kPassT - 1) / kPassT;
        const size_t ws_bytes = sm90_mxfp4_moe_decode_workspace_bytes(pass_T, kK, kE, kD, kI);
        auto ws = DeviceBuffer::allocate(ws_bytes, "workspace");
        CHECK(ws.status());
        // pass p of call i: tokens [p · 256, min(T, (p + 1) · 256))
        auto args_for = [&](int i, int64_t p, bool tma_ring) {
            const Routing& r = routings[size_t(i % kRoutings)];
            const int64_t t0 = p * kPassT;
            MoeDecodeArgs a;
            a.x = x->as<__nv_bfloat16>() + t0 * kD;
            a.idx = r.d_idx.as<int32_t>() + t0 * kK;
            a.route_w = r.d_w.as<float>() + t0 * kK;
            a.experts = layer_table + (i % kLayers) * kE;
            a.shared = shared->as<__nv_bfloat16>() + t0 * kD;
            a.y = y->as<__nv_bfloat16>() + t0 * kD;
            a.tokens = std::min<int64_t>(kPassT, T - t0), a.k = kK, a.n_experts = kE, a.dim = kD, a.inter = kI;
            a.workspace = ws->data();
            a.workspace_bytes = ws_bytes;
            a.tma_ring = tma_ring;
            return a;
        };
        auto ring_call = [&](int i) {
            for (int64_t p = 0; p < passes; ++p) CHECK(sm90_mxfp4_moe_decode(args_for(i, p, true), s));
        };
        auto register_call = [&](int i) {
            for (int64_t p = 0; p < passes; ++p) CHECK(sm90_mxfp4_moe_decode(args_for(i, p, false), s));
        };
        if (prefill_only) {
            const size_t pws_bytes = sm90_mxfp4_moe_prefill_workspace_bytes(T, kK, kE, kD, kI);
            auto pws = DeviceBuffer::allocate(pws_bytes, "prefill workspace");
            CHECK(pws.status());
            const double flops = 6.0 * double(kD) * double(kI) * double(kK) * double(T);
            if (skewed) {  // the label names the load of the busiest expert and the experts above 256 picks
                int max_picks = 0, above = 0;
                for (const int c : routings[0].count) max_picks = std::max(max_picks, c), above += c > 256;
                std::printf("| %lld skewed (busiest expert %d picks = %.1fx the mean, %d above 256) |", (long long)T,
                            max_picks, double(max_picks) * kE / double(T * kK), above);
            } else {
                std::printf("| %lld |", (long long)T);
            }
            const struct {
                MoeWeightFormat format;
                MoePrefillTile tile;
                bool tflops;
            } runs[] = {{MoeWeightFormat::kMXFP4, MoePrefillTile::kAuto, true},
                        {MoeWeightFormat::kMXFP4Repacked, MoePrefillTile::kAuto, true},
                        {MoeWeightFormat::kMXFP4Repacked, MoePrefillTile::k128, false},
                        {MoeWeightFormat::kMXFP4Repacked, MoePrefillTile::k256, false}};
            for (const auto& run : runs) {
                const float ms = median_ms_per_call(s, [&](int i) {
                    MoeDecodeArgs a = args_for(i, 0, false);
                    a.tokens = T;
                    a.format = run.format;
                    a.workspace = pws->data();
                    a.workspace_bytes = pws_bytes;
                    CHECK(sm90_mxfp4_moe_prefill(a, s, run.tile));
                }, true);
                if (run.tflops)
                    std::printf(" %.1f | %.1f |", ms * 1e3, flops / (ms * 1e-3) / 1e12);
                else
                    std::printf(" %.1f |", ms * 1e3);
            }
            std::printf("\n");
            std::fflush(stdout);
            CHECK(stream->synchronize());
            continue;
        }
        if (profile_T) {
            for (int i = 0; i < 8; ++i) ring_call(i);
            for (int i = 0; i < 8; ++i) register_call(i);
            // the same bytes read as the repacked layout (values differ; the kernel's work does not), through
            // mma.sync and through FP8 wgmma
            for (const bool fp8_wgmma : {false, true}) {
                for (int i = 0; i < 8; ++i) {
                    for (int64_t p = 0; p < passes; ++p) {
                        MoeDecodeArgs a = args_for(i, p, false);
                        a.format = MoeWeightFormat::kMXFP4Repacked;
                        a.fp8_wgmma = fp8_wgmma;
                        CHECK(sm90_mxfp4_moe_decode(a, s));
                    }
                }
            }
            if (T >= kPassT) {  // and the prefill kernel over all T tokens
                const size_t pws_bytes = sm90_mxfp4_moe_prefill_workspace_bytes(T, kK, kE, kD, kI);
                auto pws = DeviceBuffer::allocate(pws_bytes, "prefill workspace");
                CHECK(pws.status());
                for (int i = 0; i < 4; ++i) {
                    MoeDecodeArgs a = args_for(i, 0, false);
                    a.tokens = T;
                    a.workspace = pws->data();
                    a.workspace_bytes = pws_bytes;
                    CHECK(sm90_mxfp4_moe_prefill(a, s));
                }
                CHECK(stream->synchronize());
            }
            CHECK(stream->synchronize());
            std::printf("profile run at T %lld done\n", (long long)T);
            return 0;
        }
        const bool long_calls = T > kPassT;
        const float moe_ms = median_ms_per_call(s, ring_call, long_calls);
        const float reg_ms = median_ms_per_call(s, register_call, long_calls);
        CHECK(stream->synchronize());
        // baseline: per distinct expert, dequantise w1, w3, w2 to bf16 and run two cuBLAS GEMMs
        const float one = 1.0f, zero = 0.0f;
        const float base_ms = median_ms_per_call(s, [&](int i) {
            const Routing& r = routings[size_t(i % kRoutings)];
            const Mxfp4ExpertPtrs* tab = table.data() + (i % kLayers) * kE;
            __nv_bfloat16* d = deq->as<__nv_bfloat16>();
            for (size_t j = 0; j < r.distinct.size(); ++j) {
                const Mxfp4ExpertPtrs& e = tab[r.distinct[j]];
                const int n = r.count[j];
                dequant_mxfp4_bf16<<<528, 256, 0, s>>>(e.w1, e.w1s, d, size_t(kI) * kD / 8, int(kD));
                dequant_mxfp4_bf16<<<528, 256, 0, s>>>(e.w3, e.w3s, d + size_t(kI) * kD, size_t(kI) * kD / 8,
                                                       int(kD));
                dequant_mxfp4_bf16<<<528, 256, 0, s>>>(e.w2, e.w2s, d + 2 * size_t(kI) * kD, size_t(kI) * kD / 8,
                                                       int(kI));
                CHECK_BLAS(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, int(2 * kI), n, int(kD), &one, d,
                                        CUDA_R_16BF, int(kD), x->data(), CUDA_R_16BF, int(kD), &zero, hbuf->data(),
                                        CUDA_R_16BF, int(2 * kI), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
                CHECK_BLAS(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, int(kD), n, int(kI), &one,
                                        d + 2 * size_t(kI) * kD, CUDA_R_16BF, int(kI), hbuf->data(), CUDA_R_16BF,
                                        int(2 * kI), &zero, obuf->data(), CUDA_R_16BF, int(kD), CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT));
            }
        }, long_calls);
        CHECK(stream->synchronize());
        // the prefill kernel: one call over all T tokens
        float prefill_ms = 0;
        if (T >= kPassT) {
            const size_t pws_bytes = sm90_mxfp4_moe_prefill_workspace_bytes(T, kK, kE, kD, kI);
            auto pws = DeviceBuffer::allocate(pws_bytes, "prefill workspace");
            CHECK(pws.status());
            prefill_ms = median_ms_per_call(s, [&](int i) {
                MoeDecodeArgs a = args_for(i, 0, false);
                a.tokens = T;
                a.workspace = pws->data();
                a.workspace_bytes = pws_bytes;
                CHECK(sm90_mxfp4_moe_prefill(a, s));
            }, long_calls);
            CHECK(stream->synchronize());
        }
        // bytes the kernel reads: every pass reads its own distinct experts (= the distinct experts up to 256 tokens)
        double experts = 0;
        for (const auto& r : routings) experts += double(r.pass_experts);
        experts /= kRoutings;
        const double bytes = experts * double(kExpertBytes);
        const double flops = 6.0 * double(kD) * double(kI) * double(kK) * double(T);
        const double tbs = bytes / (moe_ms * 1e-3) / 1e12, base_tbs = bytes / (base_ms * 1e-3) / 1e12;
        std::printf("| %lld | %.1f | %.1f | %.1f | %.2f | %.1f%% | %.1f | %.1f | %.2f | %.1f | %.2f | %.1f | %.1fx |",
                    (long long)T, experts, bytes / 1e6, moe_ms * 1e3, tbs, 100.0 * tbs / copy_tbs,
                    flops / (moe_ms * 1e-3) / 1e12, reg_ms * 1e3, bytes / (reg_ms * 1e-3) / 1e12, base_ms * 1e3,
                    base_tbs, flops / (base_ms * 1e-3) / 1e12, base_ms / moe_ms);
        if (prefill_ms > 0)
            std::printf(" %.1f | %.1f |\n", prefill_ms * 1e3, flops / (prefill_ms * 1e-3) / 1e12);
        else
            std::printf(" - | - |\n");
    }
    CHECK_BLAS(cublasDestroy(blas));
    if (prefill_only) return 0;
    format_table(s, table.data(), layer_table, rng, copy_tbs);
    if (!decode_only) stream_probe_table(s, base, rng, copy_tbs);
    return 0;
}
