// Kernel and launcher of sm90_stream_probe (stream_probe.h). One producer thread (warp 0, lane 0) issues one bulk
// copy per tile into the next ring slot after the consumers have released it; kConsumers warps wait for the slot's
// bytes, read it (copy to dst or fold into an XOR) and release it.
//
// Barriers per slot s: full[s] (count 1: the producer's arrive.expect_tx; the phase completes when the copy's bytes
// have landed) and empty[s] (count kConsumers: one arrive per consumer warp). Use u of slot s (tile k = u · S + s
// of the block): consumers wait full[s] with parity u & 1; before use u >= 1 the producer waits empty[s] with parity
// (u − 1) & 1. Completion of the async copy observed through full[s] makes its bytes visible to the waiting
// threads (PTX ISA, "mbarrier" and "cp.async.bulk").
#include <algorithm>
#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/mbarrier.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kernels/stream_probe/stream_probe.h"

namespace dsv4::cuda {
namespace {

constexpr int kConsumers = 4;
constexpr int kThreads = 32 * (1 + kConsumers);
constexpr int kMaxStages = 8;

__global__ void __launch_bounds__(kThreads, 1)
    sm90_stream_probe_kernel(const uint8_t* __restrict__ src, const int64_t* __restrict__ tile_offset,
                             int64_t n_tiles, uint32_t tile_bytes, int stages, uint8_t* __restrict__ dst,
                             uint32_t* __restrict__ checksum) {
    pdl_enter();
    extern __shared__ __align__(128) uint8_t ring[];  // [stages][tile_bytes], then the barriers
    __shared__ uint64_t full[kMaxStages], empty[kMaxStages];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) {
        for (int s = 0; s < stages; ++s) mbar_init(&full[s], 1), mbar_init(&empty[s], kConsumers);
        mbar_init_fence();  // visible to the async proxy too
    }
    __syncthreads();
    const int64_t first = blockIdx.x, step = gridDim.x;
    if (warp == 0) {
        if (lane != 0) return;
        int64_t k = 0, off = first < n_tiles ? tile_offset[first] : 0;
        for (int64_t i = first; i < n_tiles; i += step, ++k) {
            // the next tile's offset is loaded before this tile's wait, so its latency is not on the issue path
            const int64_t next = i + step < n_tiles ? tile_offset[i + step] : 0;
            const int s = int(k % stages);
            const int64_t use = k / stages;
            if (use > 0) mbar_wait(&empty[s], uint32_t((use - 1) & 1));
            mbar_arrive_expect_tx(&full[s], tile_bytes);
            bulk_copy_g2s(ring + size_t(s) * tile_bytes, src + off, tile_bytes, &full[s]);
            off = next;
        }
        return;
    }
    const int ct = threadIdx.x - 32;  // consumer thread 0 .. 32·kConsumers − 1
    const uint32_t chunks = tile_bytes / 16;
    uint32_t x = 0;
    int64_t k = 0;
    for (int64_t i = first; i < n_tiles; i += step, ++k) {
        const int s = int(k % stages);
        mbar_wait(&full[s], uint32_t((k / stages) & 1));
        const uint4* slot = reinterpret_cast<const uint4*>(ring + size_t(s) * tile_bytes);
        if (dst) {
            uint4* out = reinterpret_cast<uint4*>(dst + i * int64_t(tile_bytes));
            for (uint32_t c = ct; c < chunks; c += 32 * kConsumers) out[c] = slot[c];
        } else {
            for (uint32_t c = ct; c < chunks; c += 32 * kConsumers) {
                const uint4 v = slot[c];
                x ^= v.x ^ v.y ^ v.z ^ v.w;
            }
        }
        __syncwarp();  // every lane's reads of the slot are done before the warp releases it
        if (lane == 0) mbar_arrive(&empty[s]);
    }
    if (!dst) {
        for (int o = 16; o > 0; o >>= 1) x ^= __shfl_xor_sync(0xffffffffu, x, o);
        if (lane == 0) atomicXor(checksum, x);
    }
}

}  // namespace

Status sm90_stream_probe(const StreamProbeArgs& a, StreamHandle stream) {
    const std::string op = "sm90_stream_probe";
    if (!a.src || (a.n_tiles > 0 && !a.tile_offset) || (!a.dst && !a.checksum))
        return invalid_argument(op + ": src, tile_offset and dst or checksum are required");
    if (a.n_tiles < 0) return invalid_argument(op + ": negative tile count");
    if (a.tile_bytes < 16 || a.tile_bytes % 16 != 0 || a.tile_bytes > kStreamProbeMaxStageBytes)
        return invalid_argument(op + ": tile_bytes " + std::to_string(a.tile_bytes) +
                                " must be a multiple of 16 in 16.." + std::to_string(kStreamProbeMaxStageBytes));
    if (a.stages < 2 || a.stages > kMaxStages || a.stages * a.tile_bytes > kStreamProbeMaxRingBytes)
        return invalid_argument(op + ": stages " + std::to_string(a.stages) + " x " + std::to_string(a.tile_bytes) +
                                " bytes: need 2..8 stages and at most " + std::to_string(kStreamProbeMaxRingBytes) +
                                " bytes of ring");
    if ((reinterpret_cast<uintptr_t>(a.src) | reinterpret_cast<uintptr_t>(a.dst)) & 15)
        return invalid_argument(op + ": src and dst must be 16-byte aligned");
    if (a.checksum && !a.dst) DSV4_CUDA_TRY(cudaMemsetAsync(a.checksum, 0, 4, stream), op + ": checksum reset");
    if (a.n_tiles == 0) return Status::ok();
    int device = 0, sms = 0;
    DSV4_CUDA_TRY(cudaGetDevice(&device), "cudaGetDevice");
    DSV4_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SM count");
    const size_t smem = size_t(a.stages) * size_t(a.tile_bytes);
    DSV4_CUDA_TRY(cudaFuncSetAttribute(sm90_stream_probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       int(smem)),
                  op + ": shared memory opt-in");
    const unsigned grid = unsigned(std::min<int64_t>(a.n_tiles, sms));
    sm90_stream_probe_kernel<<<grid, kThreads, smem, stream>>>(a.src, a.tile_offset, a.n_tiles,
                                                                uint32_t(a.tile_bytes), a.stages, a.dst, a.checksum);
    return launch_status(op.c_str());
}

}  // namespace dsv4::cuda
