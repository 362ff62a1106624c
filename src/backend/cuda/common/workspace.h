// Caller-provided workspaces as consecutive regions, each starting on a 256-byte boundary (cudaMalloc's alignment,
// so every region suits any vector access); a launcher and its *_workspace_bytes() size them the same way.
#pragma once

#include <cstddef>

namespace dsv4::cuda {

constexpr size_t align256(size_t n) { return (n + 255) / 256 * 256; }

// Offsets of consecutive regions: take(n) returns the next region's offset and moves past it (rounded to 256).
struct WorkspaceLayout {
    size_t bytes = 0;
    size_t take(size_t n) {
        const size_t at = bytes;
        bytes = align256(bytes + n);
        return at;
    }
};

}  // namespace dsv4::cuda
