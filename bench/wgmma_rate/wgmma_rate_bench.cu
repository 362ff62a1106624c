// FP8 wgmma issue rate on one SM, without any memory pipeline: the ceiling the block-scaled GEMMs (gemm_fp8_wgmma,
// moe_prefill) can reach with their tile shapes and wait patterns. Every block (one per SM) fills an A tile
// (128 rows x 128 bytes of K) and a B tile (N rows x 128 bytes) once with random e4m3 bytes, read through 128-byte
// swizzle descriptors as those kernels read theirs, and then runs `steps` K blocks: per K block each warpgroup issues 4
// x wgmma m64nNk32 (A rows 64·(wg % 2).., both operands from shared memory, as those kernels do) into a block
// accumulator. Variants:
//   wait      wait_group 0 after each K block's 4 wgmmas (the kernels' consumer chain without barriers)
//   fold      the same plus the per-K-block promotion out += acc · (a · w) in f32 registers (64 FMAs per thread)
//   ring      wait / fold behind moe_prefill's stage protocol with nothing to load: a producer warpgroup waits on a
//   ring + fold  stage's `empty` mbarrier and arrives on its `full` one (all 128 threads, after fence.proxy.async); the
//             consumers wait on `full` before their wgmmas and free the stage after them (lane 0 of each warp). The
//             difference to wait / fold is what the barrier round trips themselves cost.
// (N = 256 runs `wait` only: its accumulator and output would take 256 registers. Two block accumulators in flight,
// the fold of one under the other's wgmmas, are measured inside moe_prefill: docs/kernels/moe_prefill.md.)
// Reported per variant: SM clocks per K block (clock64, median over blocks), the tensor pipe's share at
// 8,192 FLOP/clock/SM (H200 dense FP8 1,979 TFLOP/s = 132 SMs x 8,192 x 1.83 GHz), and TFLOP/s from CUDA events over
// the whole grid (median of kReps launches after kWarm).
//
// Usage: dsv4_bench_wgmma_rate [steps]   (default 4096 K blocks per launch)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../bench_check.h"
#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/wgmma.cuh"

namespace {

using namespace dsv4;
using namespace dsv4::cuda;

constexpr int kWarm = 3, kReps = 11;
constexpr double kFlopPerClockPerSm = 8192.0;

#define CHECK_CUDA(call) CHECK(::dsv4::cuda::cuda_status((call), #call))

enum class Pattern { kWait, kFold, kRing, kRingFold };
__host__ __device__ constexpr bool is_ring(Pattern p) { return p == Pattern::kRing || p == Pattern::kRingFold; }
constexpr int kRingStages = 5;  // moe_prefill's ring depth

template <int kN>
__device__ __forceinline__ void wgmma_block(float (&acc)[kN / 2], uint32_t a_base, uint32_t b_base) {
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
        const uint64_t da = sw128_kmajor_desc(a_base + ks * 32), db = sw128_kmajor_desc(b_base + ks * 32);
        if constexpr (kN == 256)
            wgmma_m64n256k32_e4m3(acc, da, db, ks > 0 ? 1u : 0u);
        else
            wgmma_m64n128k32_e4m3(acc, da, db, ks > 0 ? 1u : 0u);
    }
    wgmma_commit();
}

template <int kN>
__device__ __forceinline__ void fold(const float (&acc)[kN / 2], float (&out)[kN / 2], float a, float w) {
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) out[i] = fmaf(acc[i], a * w, out[i]);
}

// Threads: the consumer warpgroups, plus for the ring patterns a producer warpgroup 0 in front of them.
template <int kWarpgroups, Pattern kPattern>
__host__ __device__ constexpr int threads_of() {
    return 128 * (kWarpgroups + (is_ring(kPattern) ? 1 : 0));
}

template <int kN, int kWarpgroups, Pattern kPattern>
__global__ void __launch_bounds__(threads_of<kWarpgroups, kPattern>(), 1)
    wgmma_rate_kernel(int steps, long long* clocks, float* sink) {
    constexpr bool kRing = is_ring(kPattern);
    constexpr bool kFolds = kPattern == Pattern::kFold || kPattern == Pattern::kRingFold;
    __shared__ __align__(8) uint64_t full_bar[kRingStages];
    __shared__ __align__(8) uint64_t empty_bar[kRingStages];
    extern __shared__ uint8_t smem_raw[];
    uint8_t* a_tile = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
    uint8_t* b_tile = a_tile + 128 * 128;
    // random e4m3 bytes (no NaN codes): the tensor pipe's power, and so the clock, depends on the data
    for (int i = threadIdx.x; i < (128 + kN) * 128 / 4; i += blockDim.x) {
        uint32_t x = uint32_t(i) * 0x9e3779b9u + blockIdx.x * 0x85ebca6bu;
        x ^= x >> 15;
        x *= 0x2c1b3c6du;
        x ^= x >> 12;
        reinterpret_cast<uint32_t*>(a_tile)[i] = x & 0x76767676u;  // exponents <= 14, no 0x7f
    }
    if (kRing && threadIdx.x == 0) {
        for (int st = 0; st < kRingStages; ++st) {
            mbar_init(&full_bar[st], 128);               // every producer thread, as moe_prefill's converter
            mbar_init(&empty_bar[st], 4 * kWarpgroups);  // lane 0 of every consumer warp
        }
        mbar_init_fence();
    }
    fence_proxy_async_smem();
    __syncthreads();

    const int first_consumer = kRing ? 128 : 0;
    if (kRing && threadIdx.x < 128) {
        // producer: frees nothing and loads nothing, only the barrier round trip of each stage
        int st = 0;
        uint32_t phase = 0;
        for (int s = 0; s < steps; ++s) {
            mbar_wait(&empty_bar[st], phase ^ 1);
            fence_proxy_async_smem();
            mbar_arrive(&full_bar[st]);
            if (++st == kRingStages) st = 0, phase ^= 1;
        }
        return;
    }
    const int wg = (threadIdx.x - first_consumer) / 128;
    const uint32_t a_base = smem_u32(a_tile) + (wg % 2) * 64 * 128, b_base = smem_u32(b_tile);
    float acc0[kN / 2], out[kN / 2];
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) acc0[i] = out[i] = 0.0f;
    const float a = 1.0f + 1e-7f * float(threadIdx.x), w = 0.5f;
    const long long t0 = clock64();
    int st = 0;
    uint32_t phase = 0;
#pragma unroll 1
    for (int s = 0; s < steps; ++s) {
        if constexpr (kRing) mbar_wait(&full_bar[st], phase);
        wgmma_block<kN>(acc0, a_base, b_base);
        wgmma_wait<0>();
        fence_accumulators(acc0);
        if constexpr (kFolds) fold<kN>(acc0, out, a, w);
        if constexpr (kRing) {
            __syncwarp();
            if (threadIdx.x % 32 == 0) mbar_arrive(&empty_bar[st]);
            if (++st == kRingStages) st = 0, phase ^= 1;
        }
    }
    const long long t1 = clock64();
    float keep = 0.0f;
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) keep += (kFolds ? out[i] : acc0[i]);
    if (keep == 1234.5f) sink[threadIdx.x] = keep;  // keeps the work alive; practically never true
    if (threadIdx.x == first_consumer) clocks[blockIdx.x] = t1 - t0;
}

struct Result {
    double clocks_per_block, tensor_share, tflops, mhz;
};

template <int kN, int kWarpgroups, Pattern kPattern>
Result run(int steps, int sms) {
    auto kernel = wgmma_rate_kernel<kN, kWarpgroups, kPattern>;
    const int smem = (128 + kN) * 128 + 1024;
    CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    long long* clocks = nullptr;
    float* sink = nullptr;
    CHECK_CUDA(cudaMalloc(&clocks, sizeof(long long) * sms));
    CHECK_CUDA(cudaMalloc(&sink, sizeof(float) * threads_of<kWarpgroups, kPattern>()));
    cudaEvent_t e0, e1;
    CHECK_CUDA(cudaEventCreate(&e0));
    CHECK_CUDA(cudaEventCreate(&e1));
    std::vector<float> ms;
    for (int r = 0; r < kWarm + kReps; ++r) {
        CHECK_CUDA(cudaEventRecord(e0));
        kernel<<<sms, threads_of<kWarpgroups, kPattern>(), smem>>>(steps, clocks, sink);
        CHECK_CUDA(cudaEventRecord(e1));
        CHECK_CUDA(cudaEventSynchronize(e1));
        float t = 0.0f;
        CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
        if (r >= kWarm) ms.push_back(t);
    }
    std::vector<long long> c(sms);
    CHECK_CUDA(cudaMemcpy(c.data(), clocks, sizeof(long long) * sms, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaFree(clocks));
    CHECK_CUDA(cudaFree(sink));
    CHECK_CUDA(cudaEventDestroy(e0));
    CHECK_CUDA(cudaEventDestroy(e1));
    std::sort(ms.begin(), ms.end());
    std::sort(c.begin(), c.end());
    const double med_ms = ms[ms.size() / 2], med_clocks = double(c[c.size() / 2]);
    const double flop_per_block_per_sm = 2.0 * 64.0 * kN * 128.0 * kWarpgroups;  // one K block, every warpgroup
    Result res;
    res.clocks_per_block = med_clocks / steps;
    res.tensor_share = flop_per_block_per_sm / kFlopPerClockPerSm / res.clocks_per_block;
    res.tflops = flop_per_block_per_sm * steps * sms / (med_ms * 1e-3) / 1e12;
    res.mhz = med_clocks / (med_ms * 1e-3) / 1e6;  // the kernel's clocks over its wall time: ~ the SM clock
    return res;
}

template <int kN, int kWarpgroups, Pattern kPattern>
void row(const char* pattern, int steps, int sms) {
    const Result r = run<kN, kWarpgroups, kPattern>(steps, sms);
    const double ideal = 2.0 * 64.0 * kN * 128.0 * kWarpgroups / kFlopPerClockPerSm;
    std::printf("| m64n%dk32 | %d | %s | %.0f | %.0f | %.1f %% | %.0f | %.0f |\n", kN, kWarpgroups, pattern,
                r.clocks_per_block, ideal, 100.0 * r.tensor_share, r.tflops, r.mhz);
}

}  // namespace

int main(int argc, char** argv) {
    int steps = 4096;
    if (argc > 2 || (argc == 2 && (steps = std::atoi(argv[1])) < 1)) {
        std::fprintf(stderr, "usage: %s [steps]   (K blocks of 128 per launch, >= 1, default 4096)\n", argv[0]);
        return 2;
    }
    cudaDeviceProp prop{};
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    if (prop.major != 9) {
        std::fprintf(stderr, "dsv4_bench_wgmma_rate needs a Hopper GPU (sm_90a); found %s (sm_%d%d)\n", prop.name,
                     prop.major, prop.minor);
        return 1;
    }
    const int sms = prop.multiProcessorCount;
    std::printf("%s, %d SMs, %d K blocks of 128 per launch, one block per SM\n\n", prop.name, sms, steps);
    std::printf(
        "| wgmma | warpgroups | pattern | clocks per K block | at peak | tensor pipe | TFLOP/s | MHz |\n"
        "|---|---:|---|---:|---:|---:|---:|---:|\n");
    row<128, 1, Pattern::kWait>("wait", steps, sms);
    row<128, 2, Pattern::kWait>("wait", steps, sms);
    row<128, 2, Pattern::kFold>("fold", steps, sms);
    row<128, 3, Pattern::kWait>("wait", steps, sms);
    row<256, 1, Pattern::kWait>("wait", steps, sms);
    row<256, 2, Pattern::kWait>("wait", steps, sms);
    row<128, 2, Pattern::kRing>("ring", steps, sms);
    row<128, 2, Pattern::kRingFold>("ring + fold", steps, sms);
    return 0;
}
