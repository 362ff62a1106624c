// sm90_stream_probe: streams tiles of global memory through a shared-memory ring filled by TMA bulk copies
// (cp.async.bulk, completion counted in bytes on an expect-tx mbarrier) and consumed by other warps — the load
// pipeline a weight-streaming kernel (the MoE decode GEMMs) would sit on, without the arithmetic. It exists to prove
// that pipeline (bytes out = bytes in, under racecheck / synccheck) and to measure what it reaches on the bytes a
// decode step must read (bench/moe), before any numerics are built on it (docs/kernels/moe.md, "Next step").
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/common/stream.h"
#include "dsv4/status.h"

namespace dsv4::cuda {

struct StreamProbeArgs {
    const uint8_t* src = nullptr;          // device
    const int64_t* tile_offset = nullptr;  // device [n_tiles]: byte offset of tile i in src (16-byte aligned)
    int64_t n_tiles = 0;
    int64_t tile_bytes = 0;  // multiple of 16, 16 .. kStreamProbeMaxStageBytes
    int stages = 4;          // ring slots, 2 .. 8, stages · tile_bytes <= kStreamProbeMaxRingBytes
    // copy mode: dst [n_tiles · tile_bytes] receives tile i at i · tile_bytes. checksum mode (dst null): checksum[0]
    // receives the XOR of every 32-bit word of every tile (read-only streaming: nothing written but one word per
    // block).
    uint8_t* dst = nullptr;
    uint32_t* checksum = nullptr;  // device [1], checksum mode
};

inline constexpr int64_t kStreamProbeMaxStageBytes = 64 * 1024;
inline constexpr int64_t kStreamProbeMaxRingBytes = 200 * 1024;

// One persistent block per SM (fewer when there are fewer tiles); block b takes tiles b, b + grid, ...
Status sm90_stream_probe(const StreamProbeArgs& a, StreamHandle stream);

}  // namespace dsv4::cuda
