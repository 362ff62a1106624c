// The unit bookkeeping of the TMA-ring expert kernel (moe_ring.cu) in one place, for the kernel and for the host
// simulation that checks its protocol (tests/unit/ring_protocol): how many ring units an item streams and holds at
// once, which consumer group runs a block's k-th item, and which slot and use (barrier phase) a group's n-th unit
// takes. Plain C++ (no CUDA headers) so that CPU-only builds compile the simulation.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DSV4_RING_HD __host__ __device__
#else
#define DSV4_RING_HD
#endif

namespace dsv4::cuda {

// An item is kMoeRingUpSub 16-row tiles of I (gate/up: two units per tile, w1 and w3) or kMoeRingDownSub 32-row
// tiles of D (down: one unit, w2).
inline constexpr int kMoeRingUpSub = 4, kMoeRingDownSub = 4;

struct MoeRingPlan {
    int groups = 1;           // consumer groups; group g owns slots g·slots_per_group ...
    int slots_per_group = 1;  // its sub-ring: every slot is consumed in order by one group, so parity waits are exact

    DSV4_RING_HD int group_of_item(int k) const { return k % groups; }  // k: the block's k-th item
    DSV4_RING_HD static int units_of_item(bool gate_up) { return gate_up ? 2 * kMoeRingUpSub : kMoeRingDownSub; }
    DSV4_RING_HD static int units_per_tile(bool gate_up) { return gate_up ? 2 : 1; }  // waited for, then released
    // the slot and the use (how many times the slot was filled before) of group g's n-th unit
    DSV4_RING_HD int slot(int g, uint32_t n) const { return g * slots_per_group + int(n % uint32_t(slots_per_group)); }
    DSV4_RING_HD uint32_t use(uint32_t n) const { return n / uint32_t(slots_per_group); }
};

// Two groups where each gets at least two slots (a gate/up tile holds two units at once), else one.
DSV4_RING_HD inline MoeRingPlan moe_ring_plan(int slots) {
    MoeRingPlan p;
    p.groups = slots >= 4 ? 2 : 1;
    p.slots_per_group = slots / p.groups;
    return p;
}

}  // namespace dsv4::cuda
