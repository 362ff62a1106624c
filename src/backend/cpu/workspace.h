// Scratch memory of the CPU reference ops, so that a forward step allocates nothing (DESIGN §5).
//
// A Workspace is a stack of bump allocations: an op takes the arrays it needs through a Scratch (RAII) and gives
// them back when it returns; ops called inside an op stack on top. Memory lives in blocks that never move, so a
// pointer stays valid while its Scratch lives. The owner (the engine's session) reserves one block at creation,
// sized by workspace_bytes() for its largest pass; if an estimate ever falls short the workspace adds a block on
// first need and reuses it afterwards (blocks() > 1 shows it; tests/model checks it stays 1).
//
// Per-thread scratch: parallel_slots() splits a loop into at most slot_count() contiguous ranges and tells each
// range its slot number; an op takes slot_count() equal parts before the loop and range `slot` uses part `slot`
// only (a slot is run by exactly one thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/ops.h"
#include "core/thread_pool.h"

namespace dsv4::backend::cpu {

class Workspace {
public:
    explicit Workspace(size_t reserve_bytes = 0);

    size_t capacity() const;  // bytes over all blocks
    size_t blocks() const { return blocks_.size(); }

    struct Mark {
        size_t block = 0, offset = 0;
    };
    Mark mark() const { return {current_, offset_}; }
    void release(Mark m) {
        current_ = m.block;
        offset_ = m.offset;
    }
    // `bytes` of uninitialised memory, 64-byte aligned.
    void* take(size_t bytes);

private:
    struct Block {
        std::unique_ptr<std::byte[]> memory;
        std::byte* base = nullptr;  // 64-byte aligned start
        size_t size = 0;
    };
    void add_block(size_t at, size_t bytes);

    std::vector<Block> blocks_;
    size_t current_ = 0, offset_ = 0;
};

// The scratch of one op call: arrays taken from the Exec's workspace (or, without one, from a per-thread default
// workspace that grows on first use — tests and tools), all given back when the Scratch is destroyed.
class Scratch {
public:
    explicit Scratch(const Exec& ex);
    ~Scratch() { ws_.release(mark_); }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;

    template <typename T>
    T* take(int64_t n) {
        return static_cast<T*>(ws_.take(sizeof(T) * static_cast<size_t>(n > 0 ? n : 1)));
    }

private:
    Workspace& ws_;
    Workspace::Mark mark_;
};

// How many ranges parallel_slots uses for n indices with a minimum range of `grain` (>= 1).
inline int64_t slot_count(const Exec& ex, int64_t n, int64_t grain) {
    const int64_t threads = ex.pool ? ex.pool->size() : 1;
    const int64_t by_grain = (n + grain - 1) / (grain > 0 ? grain : 1);
    const int64_t slots = by_grain < 4 * threads ? by_grain : 4 * threads;
    return slots > 1 ? slots : 1;
}

// body(slot, begin, end) on slot_count() contiguous ranges covering [0, n), in parallel on the Exec's pool.
template <typename F>
void parallel_slots(const Exec& ex, int64_t n, int64_t grain, F&& body) {
    if (n <= 0) return;
    const int64_t slots = slot_count(ex, n, grain), per = (n + slots - 1) / slots;
    parallel_for(ex.pool, slots, 1, [&](int64_t sb, int64_t se) {
        for (int64_t s = sb; s < se; ++s) {
            const int64_t b = s * per, e = b + per < n ? b + per : n;
            if (b < e) body(s, b, e);
        }
    });
}

// An upper bound of the scratch the ops take for passes of the given sizes (the engine reserves it per session).
struct WorkspaceLimits {
    int64_t tokens = 0;         // T: rows of the largest pass
    int64_t max_in = 0;         // widest linear / wo_a input
    int64_t dim = 0;            // D
    int64_t inter = 0;          // expert intermediate size
    int64_t experts = 0;        // E
    int64_t k = 0;              // experts per token
    int64_t attn_width = 0;     // widest sparse-attention index list
    int64_t head_dim = 512;
    int64_t max_entries = 0;    // most candidates a top-k row sorts (indexer entries)
    int64_t max_ratio = 128;    // largest compress ratio
    int threads = 1;
};
size_t workspace_bytes(const WorkspaceLimits& l);

}  // namespace dsv4::backend::cpu
