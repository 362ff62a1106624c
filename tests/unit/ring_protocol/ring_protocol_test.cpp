// The TMA-ring expert kernel's pipeline protocol (src/backend/cuda/kernels/moe/moe_ring.cu), simulated on the host
// with the kernel's own bookkeeping (moe_ring_plan.h) under random interleavings of every block's producer, copy
// completions and consumer groups. Each step is one thing a real GPU may do next, so the runs cover orders a few
// hardware runs would not. Checked:
//  - every consumer wait that passes by parity finds exactly its unit's bytes in the slot (the barrier's completed
//    phase count is the unit's use + 1: not the previous unit still in flight, not a later one);
//  - every producer wait on an empty barrier passes only once the slot's previous unit was released;
//  - no deadlock: until every item is done some step is possible (down items wait for all gate/up items of their
//    expert, across blocks, as the kernel's counter spin does).
// The same simulation with the earlier mapping (all groups of a block on one ring, unit numbers counted over the
// block) must find a stale read: that is the race which hung the H200 (docs/kernels/moe.md), so the check can fail.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "backend/cuda/kernels/moe/moe_ring_plan.h"

namespace dsv4::cuda {
namespace {

enum class Mapping { kPlan, kSharedRing };

struct Shape {
    int slots = 6;         // ring slots of a block
    int n_active = 3;      // experts touched
    int up_tiles = 4;      // gate/up items per expert
    int down_tiles = 4;    // down items per expert
    int grid = 3;          // blocks
};

struct Unit {
    int group = 0;
    uint32_t local = 0;   // the group's n-th unit (MoeRingPlan numbering)
    uint32_t global = 0;  // the block's n-th unit (the shared-ring numbering)
};

struct Item {
    bool up = false;
    int expert = 0;
    int group = 0;
    std::vector<Unit> units;
};

struct Slot {
    int completed = 0;      // full barrier: completed phases (units landed)
    bool in_flight = false;  // a copy issued, not landed
    int released = 0;       // empty barrier: completed phases (units released)
};

struct Group {
    std::vector<int> items;  // indices into Block::items, in order
    size_t item = 0;         // current
    int tile = 0;            // current tile of the item
    int waited = 0;          // units of the tile waited for
    bool spun = false;       // a down item's wait for its expert's gate/up items is over
};

struct Block {
    std::vector<Item> items;
    size_t p_item = 0, p_unit = 0;  // producer position
    std::vector<Slot> slots;
    std::vector<Group> groups;
};

struct Sim {
    Shape shape;
    Mapping mapping;
    MoeRingPlan plan;
    std::vector<Block> blocks;
    std::vector<int> up_done;  // gate/up items finished per expert
    std::string failure;

    Sim(const Shape& s, Mapping m) : shape(s), mapping(m), plan(moe_ring_plan(s.slots)) {
        up_done.assign(size_t(s.n_active), 0);
        const int n_up = s.n_active * s.up_tiles, n_items = n_up + s.n_active * s.down_tiles;
        blocks.resize(size_t(s.grid));
        for (int b = 0; b < s.grid; ++b) {
            Block& blk = blocks[size_t(b)];
            blk.slots.resize(size_t(s.slots));
            blk.groups.resize(size_t(plan.groups));
            std::vector<uint32_t> local(size_t(plan.groups), 0);
            uint32_t global = 0;
            int k = 0;
            for (int i = b; i < n_items; i += s.grid, ++k) {  // the kernel's item walk
                Item it;
                it.up = i < n_up;
                it.expert = it.up ? i / s.up_tiles : (i - n_up) / s.down_tiles;
                it.group = plan.group_of_item(k);
                for (int u = 0; u < MoeRingPlan::units_of_item(it.up); ++u)
                    it.units.push_back({it.group, local[size_t(it.group)]++, global++});
                blk.groups[size_t(it.group)].items.push_back(int(blk.items.size()));
                blk.items.push_back(it);
            }
        }
    }

    int slot_of(const Unit& u) const {
        return mapping == Mapping::kPlan ? plan.slot(u.group, u.local) : int(u.global % uint32_t(shape.slots));
    }
    int use_of(const Unit& u) const {
        return mapping == Mapping::kPlan ? int(plan.use(u.local)) : int(u.global / uint32_t(shape.slots));
    }

    // One possible step: the producer issuing its next unit, a copy landing, a group passing a wait or releasing a
    // tile. `apply` false only asks whether the step is possible.
    bool producer_step(Block& b, bool apply) {
        if (b.p_item == b.items.size()) return false;
        const Unit& u = b.items[b.p_item].units[b.p_unit];
        Slot& s = b.slots[size_t(slot_of(u))];
        const int use = use_of(u);
        // the producer waits on the empty barrier for phase use − 1 by parity: passes when released ≢ use − 1 (mod 2)
        if (use > 0 && (s.released & 1) == ((use - 1) & 1)) return false;
        if (!apply) return true;
        if (use > 0 && s.released != use) failure = "producer reused a slot whose previous unit was not released";
        if (s.in_flight) failure = "producer armed a slot whose previous copy had not landed";
        s.in_flight = true;
        if (++b.p_unit == b.items[b.p_item].units.size()) ++b.p_item, b.p_unit = 0;
        return true;
    }

    bool land_step(Block& b, int slot, bool apply) {
        Slot& s = b.slots[size_t(slot)];
        if (!s.in_flight) return false;
        if (apply) s.in_flight = false, ++s.completed;
        return true;
    }

    bool group_step(Block& b, Group& g, bool apply) {
        if (g.item == g.items.size()) return false;
        const Item& it = b.items[size_t(g.items[g.item])];
        if (!it.up && !g.spun) {  // the kernel's spin on up_done[expert]
            if (up_done[size_t(it.expert)] < shape.up_tiles) return false;
            if (apply) g.spun = true;
            return true;
        }
        const int per_tile = MoeRingPlan::units_per_tile(it.up);
        if (g.waited < per_tile) {  // wait for the next unit of the tile
            const Unit& u = it.units[size_t(g.tile * per_tile + g.waited)];
            const Slot& s = b.slots[size_t(slot_of(u))];
            const int use = use_of(u);
            if ((s.completed & 1) == (use & 1)) return false;  // try_wait.parity(use & 1) fails: spin
            if (!apply) return true;
            if (s.completed != use + 1)
                failure = "a parity wait passed on a slot holding another unit (completed phases " +
                          std::to_string(s.completed) + ", unit use " + std::to_string(use) + ")";
            ++g.waited;
            return true;
        }
        if (!apply) return true;
        for (int j = 0; j < per_tile; ++j) ++b.slots[size_t(slot_of(it.units[size_t(g.tile * per_tile + j)]))].released;
        g.waited = 0;
        if (++g.tile * per_tile == int(it.units.size())) {
            if (it.up) ++up_done[size_t(it.expert)];
            ++g.item, g.tile = 0, g.spun = false;
        }
        return true;
    }

    // Runs one random schedule to the end. Returns false on a deadlock or a protocol violation (failure says which).
    bool run(std::mt19937_64& rng) {
        struct Step {
            int block, kind, index;  // kind 0 producer, 1 land (index = slot), 2 group (index = group)
        };
        for (;;) {
            std::vector<Step> steps;
            bool done = true;
            for (int b = 0; b < int(blocks.size()); ++b) {
                Block& blk = blocks[size_t(b)];
                if (producer_step(blk, false)) steps.push_back({b, 0, 0});
                for (int s = 0; s < int(blk.slots.size()); ++s)
                    if (land_step(blk, s, false)) steps.push_back({b, 1, s});
                for (int g = 0; g < int(blk.groups.size()); ++g) {
                    if (blk.groups[size_t(g)].item < blk.groups[size_t(g)].items.size()) done = false;
                    if (group_step(blk, blk.groups[size_t(g)], false)) steps.push_back({b, 2, g});
                }
            }
            if (done) return true;
            if (steps.empty()) {
                failure = "deadlock: no block can make progress";
                return false;
            }
            const Step st = steps[std::uniform_int_distribution<size_t>(0, steps.size() - 1)(rng)];
            Block& blk = blocks[size_t(st.block)];
            if (st.kind == 0) producer_step(blk, true);
            if (st.kind == 1) land_step(blk, st.index, true);
            if (st.kind == 2) group_step(blk, blk.groups[size_t(st.index)], true);
            if (!failure.empty()) return false;
        }
    }
};

TEST(MoeRingProtocol, SubRingPerGroupIsExactAndDeadlockFree) {
    std::mt19937_64 rng(20261130);
    int runs = 0;
    // V4-Flash's ring (6 slots: two groups of 3), V4-Pro's (3 slots: one group), and the other sizes the geometry
    // can produce; expert counts and grids from a single block up to more blocks than items
    for (int slots : {2, 3, 4, 5, 6, 7, 8})
        for (int n_active : {1, 2, 6})
            for (int grid : {1, 2, 5, 40})
                for (int rep = 0; rep < 12; ++rep) {
                    Sim sim({slots, n_active, 4, 4, grid}, Mapping::kPlan);
                    ASSERT_TRUE(sim.run(rng)) << sim.failure << " (slots " << slots << ", experts " << n_active
                                              << ", grid " << grid << ")";
                    ++runs;
                }
    EXPECT_EQ(runs, 7 * 3 * 4 * 12);
}

TEST(MoeRingProtocol, TheSharedRingOfTheEarlierBuildReadsStaleSlots) {
    // two consumer groups over one 6-slot ring, unit numbers counted over the block: some interleaving lets a group
    // pass a parity wait while the slot still holds (or awaits) the other group's previous unit
    std::mt19937_64 rng(7);
    int stale = 0;
    for (int rep = 0; rep < 200 && stale == 0; ++rep) {
        Sim sim({6, 2, 4, 4, 1}, Mapping::kSharedRing);
        ASSERT_EQ(sim.plan.groups, 2);
        if (!sim.run(rng)) {
            EXPECT_NE(sim.failure.find("parity wait passed"), std::string::npos) << sim.failure;
            ++stale;
        }
    }
    EXPECT_GT(stale, 0) << "the simulation should find the race of the shared ring";
}

TEST(MoeRingProtocol, PlanGivesEachGroupTwoSlotsOrOneGroup) {
    for (int slots = 2; slots <= 8; ++slots) {
        const MoeRingPlan p = moe_ring_plan(slots);
        EXPECT_GE(p.slots_per_group, 2) << slots;
        EXPECT_LE(p.groups * p.slots_per_group, slots) << slots;
        for (int g = 0; g < p.groups; ++g)
            for (uint32_t n = 0; n < 20; ++n) {
                const int s = p.slot(g, n);
                EXPECT_GE(s, g * p.slots_per_group);
                EXPECT_LT(s, (g + 1) * p.slots_per_group);
            }
    }
}

}  // namespace
}  // namespace dsv4::cuda
