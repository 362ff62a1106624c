// The persistent expert kernel of sm90_mxfp4_moe_decode: both expert GEMMs of a MoE layer in one launch (after
// sm90_moe_prepare), with every weight byte brought into shared memory by TMA bulk copies.
//
// Work items (moe_items.cuh) in one sequence: all gate/up items (slot-major: active slot, 64 rows of I = 4 tiles of
// 16), then all down items (slot, 128 rows of D = 4 tiles of 32). Block b of the grid (one block per SM) takes items
// b, b + grid, ... in order; its consumer groups take turns (item k of the block → group k % kGroups). Warp 8 is the
// producer: one thread walks the same items and copies each tile's weights — 16 rows of w1, 16 rows of w3 (gate/up)
// or 32 rows of w2 (down), each a contiguous range of the row-major matrix, plus its UE8M0 scale rows — into the
// next "unit" of the item's group's sub-ring of shared-memory slots, counting the bytes on that slot's full barrier.
// A group waits for a tile's units, runs the tile on them (RingWeights: weights from shared memory) and releases
// them (empty barrier, one arrival per warp of the group). The producer so runs ahead by the sub-rings' depth —
// across tiles, items, the gate/up → down boundary, and while a group waits for a down item's inputs — which is
// what the register-streaming kernels could not do (sm90_stream_probe measured this pipeline: docs/kernels/moe.md).
//
// A down item needs its slot's hidden rows quantised by gate/up items of other blocks: its group spins on
// up_done[slot] (I/128 when complete) before waiting for its units. No deadlock: the grid is no larger than the
// number of SMs and one block fits per SM, so every block runs; every block's gate/up items come before its down
// items in the producer's order, so a gate/up unit is never queued behind a down unit; and gate/up items wait for
// nothing but their own units, so every gate/up item completes.
//
// Barriers per slot s: full[s] (count 1: the producer's arrive.expect_tx) and empty[s] (count: the group's warps).
// A group's n-th unit uses slot MoeRingPlan::slot(g, n) = g·SG + n % SG (SG slots per group) for the use-th time,
// use = n / SG: the group waits full with parity use & 1, the producer waits empty with parity (use − 1) & 1 before
// reusing the slot.
#include <algorithm>
#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/mbarrier.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kernels/moe/moe.h"
#include "backend/cuda/kernels/moe/moe_items.cuh"
#include "backend/cuda/kernels/moe/moe_ring.h"
#include "backend/cuda/kernels/moe/moe_ring_plan.h"

namespace dsv4::cuda {
namespace {

using Cfg = MoeDecodeConfig;
constexpr int kConsumerWarps = 8, kThreads = 32 * (kConsumerWarps + 1), kMaxSlots = 8;
// Items of 4 tiles (moe_ring_plan.h): the item's fences and arrival counters are paid once per 4 tiles' bytes.
constexpr int kUpSub = kMoeRingUpSub, kDownSub = kMoeRingDownSub;
// A ring unit: the rows of one tile, 16 of I (gate/up, one row tile per group) or 32 of D (down, two row tiles).
constexpr int kUpRows = 16, kDownRows = 32;
// Consumer groups: a group of warps runs every kGroups-th item of the block on its own named barrier, so one group's
// per-item latency chain (metadata loads, reduction, epilogue, fences and arrival counters) overlaps the other's
// GEMM. Each group has its own sub-ring of slots: a slot's full barrier is waited on by phase parity, which is right
// only while the waiter is at most one phase ahead of the barrier, i.e. when one group consumes all of the slot's
// units in order. (Two groups sharing one ring broke that: a group could wait on unit u while the same slot's unit
// u − S, the other group's, had not landed; the parity test passed at once on a stale slot. Those builds hung on
// the H200: docs/kernels/moe.md; tests/unit/ring_protocol simulates both.) moe_ring_plan picks the groups: 2 where
// the ring holds two slots per group (V4-Flash: 6 slots of 34 KB), else 1. Gate/up tiles run as 1 row tile x
// kGroupWarps K-splits, down tiles as 2 row tiles.
template <int kGroups>
struct GroupShape {
    static constexpr int kGroupWarps = kConsumerWarps / kGroups, kGroupThreads = 32 * kGroupWarps;
    static constexpr int kUpKS = kGroupWarps, kDownRT = kDownRows / 16, kDownKS = kGroupWarps / kDownRT;
};
constexpr size_t kMaxRingBytes = 210 * 1024;  // + ~9 KB static shared memory, under the 227 KB

struct RingGeometry {
    uint32_t up_w_bytes, up_s_bytes, down_w_bytes, down_s_bytes;  // one unit's weight and scale bytes
    uint32_t unit_bytes;                                          // slot size (max of both, 128-aligned)
    int slots;
};

__host__ __device__ inline RingGeometry ring_geometry(int D, int I) {
    RingGeometry g{};
    g.up_w_bytes = uint32_t(kUpRows) * uint32_t(D / 2);
    g.up_s_bytes = uint32_t(kUpRows) * uint32_t(D / 32);
    g.down_w_bytes = uint32_t(kDownRows) * uint32_t(I / 2);
    g.down_s_bytes = uint32_t(kDownRows) * uint32_t(I / 32);
    const uint32_t up = (g.up_w_bytes + g.up_s_bytes + 127) / 128 * 128;
    const uint32_t down = (g.down_w_bytes + g.down_s_bytes + 127) / 128 * 128;
    g.unit_bytes = up > down ? up : down;
    const size_t fit = kMaxRingBytes / g.unit_bytes;
    g.slots = int(fit < size_t(kMaxSlots) ? fit : size_t(kMaxSlots));
    return g;
}

template <int kGroups>
__global__ void __launch_bounds__(kThreads, 1) sm90_moe_ring_kernel(MoeKernelParams p) {
    pdl_enter();
    using G = GroupShape<kGroups>;
    extern __shared__ __align__(128) uint8_t ring[];  // [slots][unit_bytes]; group g owns slots g·SG .. g·SG + SG − 1
    __shared__ uint64_t full[kMaxSlots], empty[kMaxSlots];
    // per group: the K-split reduction buffer (gate/up: KS · 2 matrices · 128 floats ≥ down: KS · RT · 128)
    __shared__ __align__(16) float red[kGroups][G::kUpKS * 2 * 128];
    __shared__ int flag[kGroups];
    const RingGeometry geo = ring_geometry(p.D, p.I);
    // = moe_ring_plan(geo.slots), whose group count the launcher passed as kGroups (a constant here)
    const MoeRingPlan plan{kGroups, geo.slots / kGroups};
    if (threadIdx.x == 0) {
        for (int s = 0; s < plan.slots_per_group * kGroups; ++s)
            mbar_init(&full[s], 1), mbar_init(&empty[s], G::kGroupWarps);
        mbar_init_fence();
    }
    __syncthreads();
    const int n_active = *p.n_active;
    const int up_tiles = p.I / (kUpRows * kUpSub), down_tiles = p.D / (kDownRows * kDownSub);
    const int n_up = n_active * up_tiles, n_items = n_up + n_active * down_tiles;
    const Mxfp4ExpertPtrs* experts = static_cast<const Mxfp4ExpertPtrs*>(p.experts);
    const int warp = threadIdx.x >> 5;

    if (warp == kConsumerWarps) {  // producer: the block's items in order, each into its group's sub-ring
        if ((threadIdx.x & 31) != 0) return;
        uint32_t u[kGroups] = {};
        int k = 0;  // the block's item count so far
        auto produce = [&](int g, const uint8_t* w, uint32_t w_bytes, const uint8_t* ws, uint32_t s_bytes) {
            const int s = plan.slot(g, u[g]);
            const uint32_t use = plan.use(u[g]);
            if (use > 0) mbar_wait(&empty[s], (use - 1) & 1);
            uint8_t* slot = ring + size_t(s) * geo.unit_bytes;
            mbar_arrive_expect_tx(&full[s], w_bytes + s_bytes);
            bulk_copy_g2s(slot, w, w_bytes, &full[s]);
            bulk_copy_g2s(slot + w_bytes, ws, s_bytes, &full[s]);
            ++u[g];
        };
        for (int i = blockIdx.x; i < n_items; i += gridDim.x, ++k) {
            const int g = plan.group_of_item(k);
            if (i < n_up) {
                const Mxfp4ExpertPtrs ex = experts[p.active_expert[i / up_tiles]];
                for (int sub = 0; sub < kUpSub; ++sub) {
                    const size_t r0 = (size_t(i % up_tiles) * kUpSub + sub) * kUpRows;
                    produce(g, ex.w1 + r0 * (p.D / 2), geo.up_w_bytes, ex.w1s + r0 * (p.D / 32), geo.up_s_bytes);
                    produce(g, ex.w3 + r0 * (p.D / 2), geo.up_w_bytes, ex.w3s + r0 * (p.D / 32), geo.up_s_bytes);
                }
            } else {
                const int j = i - n_up;
                const Mxfp4ExpertPtrs ex = experts[p.active_expert[j / down_tiles]];
                for (int sub = 0; sub < kDownSub; ++sub) {
                    const size_t r0 = (size_t(j % down_tiles) * kDownSub + sub) * kDownRows;
                    produce(g, ex.w2 + r0 * (p.I / 2), geo.down_w_bytes, ex.w2s + r0 * (p.I / 32),
                            geo.down_s_bytes);
                }
            }
        }
        return;
    }

    // consumers: group gi takes the block's items k = gi, gi + kGroups, ... and consumes its sub-ring in order
    const int gi = warp / G::kGroupWarps, lane = threadIdx.x & 31;
    uint32_t u = 0;  // the group's units so far
    int k = 0;
    auto unit = [&](uint32_t n) { return ring + size_t(plan.slot(gi, n)) * geo.unit_bytes; };
    auto wait_unit = [&](uint32_t n) { mbar_wait(&full[plan.slot(gi, n)], plan.use(n) & 1); };
    auto release_unit = [&](uint32_t n) {
        __syncwarp();  // every lane's reads of the slot are done
        if (lane == 0) mbar_arrive(&empty[plan.slot(gi, n)]);
    };
    for (int i = blockIdx.x; i < n_items; i += gridDim.x, ++k) {
        if (plan.group_of_item(k) != gi) continue;
        const uint32_t n = u;
        if (i < n_up) {
            u += MoeRingPlan::units_of_item(true);
            const RingWeights<false, G::kGroupThreads> src{gi};
            const int slot = i / up_tiles, row0 = (i % up_tiles) * kUpSub * kUpRows;
            const uint8_t* w[kUpSub][2];
            const uint8_t* ws[kUpSub][2];
            for (int sub = 0; sub < kUpSub; ++sub)
                for (int m = 0; m < 2; ++m) {
                    w[sub][m] = unit(n + 2 * sub + m);
                    ws[sub][m] = unit(n + 2 * sub + m) + geo.up_w_bytes;
                }
            moe_gate_up_item<1, G::kUpKS, kUpSub>(
                src, p, slot, row0, w, ws, 0, red[gi], &flag[gi],
                [&](int sub) {
                    wait_unit(n + 2 * sub);
                    wait_unit(n + 2 * sub + 1);
                },
                [&](int sub) {
                    release_unit(n + 2 * sub);
                    release_unit(n + 2 * sub + 1);
                });
        } else {
            u += MoeRingPlan::units_of_item(false);
            const RingWeights<true, G::kGroupThreads> src{gi};
            const int j = i - n_up, slot = j / down_tiles, range = j % down_tiles;
            const uint8_t* w[kDownSub][1];
            const uint8_t* ws[kDownSub][1];
            for (int sub = 0; sub < kDownSub; ++sub) {
                w[sub][0] = unit(n + sub);
                ws[sub][0] = unit(n + sub) + geo.down_w_bytes;
            }
            // the slot's hidden rows: every 128-row block of I quantised by the gate/up items
            if (src.tid() == 0) {
                const int want = p.I / 128;
                Watchdog dog;
                while (atomicAdd(&p.up_done[slot], 0) < want) {
                    __nanosleep(64);
                    dog.check();
                }
                __threadfence();
            }
            src.sync();
            moe_down_item<G::kDownRT, G::kDownKS, kDownSub>(src, p, slot, range, n_active, w, ws, 0, red[gi],
                                                            &flag[gi], [&](int sub) { wait_unit(n + sub); },
                                                            [&](int sub) { release_unit(n + sub); });
        }
    }
}

}  // namespace

bool moe_ring_supported(int64_t dim, int64_t inter) {
    return ring_geometry(int(dim), int(inter)).slots >= 2;  // a gate/up tile reads two units at once
}

namespace {
template <int kGroups>
Status launch_groups(const MoeKernelParams& p, const RingGeometry& geo, cudaStream_t stream) {
    const size_t smem = size_t(geo.slots) * geo.unit_bytes;
    DSV4_CUDA_TRY(cudaFuncSetAttribute(sm90_moe_ring_kernel<kGroups>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       int(smem)),
                  "sm90_moe_ring: shared memory opt-in");
    int device = 0, sms = 0;
    DSV4_CUDA_TRY(cudaGetDevice(&device), "cudaGetDevice");
    DSV4_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SM count");
    sm90_moe_ring_kernel<kGroups><<<unsigned(sms), kThreads, smem, stream>>>(p);
    return launch_status("sm90_moe_ring");
}
}  // namespace

Status launch_moe_ring(const MoeKernelParams& p, cudaStream_t stream) {
    const RingGeometry geo = ring_geometry(p.D, p.I);
    return moe_ring_plan(geo.slots).groups == 2 ? launch_groups<2>(p, geo, stream) : launch_groups<1>(p, geo, stream);
}

}  // namespace dsv4::cuda
