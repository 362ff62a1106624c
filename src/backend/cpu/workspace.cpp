#include "backend/cpu/workspace.h"

#include <algorithm>

#include "backend/cpu/cpu_common.h"

namespace dsv4::backend::cpu {

namespace {
constexpr size_t kAlign = 64;
size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

Workspace::Workspace(size_t reserve_bytes) {
    if (reserve_bytes) add_block(0, reserve_bytes);
}

size_t Workspace::capacity() const {
    size_t total = 0;
    for (const Block& b : blocks_) total += b.size;
    return total;
}

void Workspace::add_block(size_t at, size_t bytes) {
    Block b;
    b.size = round_up(bytes);
    b.memory = std::make_unique<std::byte[]>(b.size + kAlign);
    const auto addr = reinterpret_cast<uintptr_t>(b.memory.get());
    b.base = b.memory.get() + (kAlign - addr % kAlign) % kAlign;
    blocks_.insert(blocks_.begin() + static_cast<std::ptrdiff_t>(at), std::move(b));
}

void* Workspace::take(size_t bytes) {
    bytes = round_up(bytes);
    if (!blocks_.empty() && offset_ + bytes <= blocks_[current_].size) {
        void* p = blocks_[current_].base + offset_;
        offset_ += bytes;
        return p;
    }
    // The rest of the current block stays unused until released; later blocks are free (stack discipline).
    const size_t next = blocks_.empty() ? 0 : current_ + 1;
    if (next >= blocks_.size() || blocks_[next].size < bytes) add_block(next, std::max(bytes, capacity()));
    current_ = next;
    offset_ = bytes;
    return blocks_[current_].base;
}

Scratch::Scratch(const Exec& ex)
    : ws_(ex.workspace ? *ex.workspace : [&]() -> Workspace& {
          thread_local Workspace fallback;
          return fallback;
      }()),
      mark_(ws_.mark()) {}

size_t workspace_bytes(const WorkspaceLimits& l) {
    const size_t f = 4, slots = size_t(4 * std::max(l.threads, 1)), T = size_t(std::max<int64_t>(l.tokens, 1));
    const size_t tk = T * size_t(std::max<int64_t>(l.k, 1));  // rows an expert can see
    const size_t in = size_t(l.max_in), D = size_t(l.dim), I = size_t(l.inter), E = size_t(l.experts);
    const size_t hd = size_t(l.head_dim), m = size_t(l.max_ratio);
    size_t b = 0;
    // linear (tokens up to T·K inside the routed experts): quantised activations + scales; per slot a row tile.
    b += tk * in * f + tk * (in / 128 + 1) * f + slots * (kRowTile * in * f + kRowTile * (in / 32 + 1) * f);
    b += slots * kRowTile * in * f;                                          // wo_a
    b += slots * (size_t(std::max<int64_t>(l.attn_width, 64)) * f + hd * 12);  // sparse_attn
    b += slots * 4 * m * f + T * 8;                                          // compressor pool, finish
    b += T * E * f + 3 * E * f;                                              // router
    b += 2 * tk * I * f;                                                     // expert u1, u3
    b += 2 * tk * D * f + tk * 12;                                           // routed_experts gather / scatter
    b += slots * size_t(std::max<int64_t>(l.max_entries, 1)) * f;           // topk
    b += slots * size_t(std::max<int64_t>(l.k, 1)) * 8;                      // moe_sum
    return b + 64 * kAlign;  // alignment padding of the takes
}

}  // namespace dsv4::backend::cpu
