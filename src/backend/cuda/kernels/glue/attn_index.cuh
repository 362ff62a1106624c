// The sparse attention's candidate lists (AttnIndexArgs, glue.h) one value at a time: for sm90_attn_index, and for
// the decode top-k select that writes the lists itself (TopKArgs::list, indexer.h), which takes that launch off the
// decode chain.
#pragma once

#include <cstdint>

#include "backend/cuda/kernels/glue/glue.h"

namespace dsv4::cuda {

// Pool row of entry j of the session in `slot` (PagedEntries).
__device__ __forceinline__ int32_t entry_row(const PagedEntries& e, int32_t slot, int64_t j) {
    return int32_t(e.entry_base + 64 * int64_t(e.table[int64_t(slot) * e.pages_per_session + j / 64]) + j % 64);
}

// Column c < win_cols of query row q's list: the window part.
__device__ __forceinline__ int32_t attn_window_value(const AttnIndexArgs& a, int64_t q, int64_t c) {
    const int64_t pos = a.positions[q];
    const int64_t p0 = a.decode ? pos : a.p0, row0 = a.decode ? a.row0 + q : a.row0;
    const int32_t slot = a.decode ? a.slots[q] : a.slot;
    // the pass's local rows (PassRowsArgs): [chunk rows | ring | entries]
    const int64_t ring0 = a.pass_local ? a.n : a.pass_rows + a.window * slot;
    const int64_t first = pos - (a.window - 1) > 0 ? pos - (a.window - 1) : 0;
    const int64_t p = first + c;
    if (p > pos) return -1;
    return int32_t(p >= p0 ? (a.pass_local ? 0 : row0) + (p - p0) : ring0 + p % a.window);
}

// The list value of compressed entry j (>= 0; -1 stays -1) of query row q.
__device__ __forceinline__ int32_t attn_entry_value(const AttnIndexArgs& a, int64_t q, int64_t j) {
    if (j < 0) return -1;
    if (a.pass_local) return int32_t(a.n + a.window + j);
    return entry_row(a.entries, a.decode ? a.slots[q] : a.slot, j);
}

}  // namespace dsv4::cuda
