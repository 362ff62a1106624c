// Compact storage of cached rows (MODEL_SPEC §7.2): in the reference numerics a cached K=V row holds e4m3·2^k values
// per 64 channels on channels 0..447 plus 64 bf16 rope channels, and an indexer key holds e2m1·2^k values per 32
// channels, so storing codes + UE8M0 exponents is lossless. Packing scatters rows into pool rows; unpacking is the
// exact inverse (tests, debugging). The attention and indexer kernels read the packed pools directly.
#pragma once

#include <cstdint>

#include "backend/cuda/common/stream.h"
#include "backend/ops.h"

namespace dsv4::cuda {

// Storage of one cached 512-d K=V row. kReference: kKvFp8RowBytes = 584 bytes: [0,448) e4m3 codes of channels
// 0..447, [448,455) 7 UE8M0 scale bytes (one per 64 channels), [455] 0, [456,584) 64 bf16 = channels 448..511.
// kF32 rows are 512 f32 (2048 bytes). Rows are 8-byte aligned in a pool (584 = 8·73).
inline constexpr int64_t kKvFp8RowBytes = 584;
inline constexpr int64_t kKvFp8CodeChannels = 448;  // channels stored as e4m3 codes
inline constexpr int64_t kKvFp8ScaleOffset = 448;   // 7 UE8M0 bytes + 1 zero byte
inline constexpr int64_t kKvFp8RopeOffset = 456;    // 64 bf16 rope channels
// One cached 128-d indexer key. kReference: 68 bytes: [0,64) 128 e2m1 codes (low nibble = even channel), [64,68)
// 4 UE8M0 scales (one per 32 channels). kF32: 128 f32 (512 bytes). Rows are 4-byte aligned in a pool.
inline constexpr int64_t kKeyFp4RowBytes = 68;
inline constexpr int64_t kKeyFp4ScaleOffset = 64;

int64_t kv_row_bytes(backend::Precision p);   // 584 (kReference) or 2048 (kF32)
int64_t key_row_bytes(backend::Precision p);  // 68 (kReference) or 512 (kF32)

// Packs rows (bf16 [n, 512] in kReference, f32 in kF32) into pool rows: row i goes to pool row dst_rows[i]
// (dst_rows == null: row i -> pool row dst_first + i); dst_rows[i] < 0 skips row i. dst_rows is a device array
// read by the kernel (it may be written by an earlier kernel on the same stream). kReference recovers the e4m3
// codes and the per-64 exponent from the values (amax per 64 → UE8M0 as act_quant, codes exact); this is lossless
// for every row an FP8-simulated K=V row can hold (bf16(q·s), q e4m3, s a power of two). Values outside that set
// are stored rounded (no error is reported).
struct KvPackArgs {
    const void* rows = nullptr;        // [n, 512] bf16 (kReference) / f32 (kF32), 16-byte aligned
    int64_t n = 0;
    const int32_t* dst_rows = nullptr; // device [n] or null
    int64_t dst_first = 0;
    void* pool = nullptr;              // [pool rows, kv_row_bytes]
};
Status sm90_kv_pack(backend::Precision p, const KvPackArgs& a, StreamHandle stream);

// Same for indexer keys (rows [n, 128], e2m1 codes per 32 channels in kReference).
struct KeyPackArgs {
    const void* rows = nullptr;        // [n, 128] bf16 / f32, 16-byte aligned
    int64_t n = 0;
    const int32_t* dst_rows = nullptr; // device [n] or null
    int64_t dst_first = 0;
    void* pool = nullptr;              // [pool rows, key_row_bytes]
};
Status sm90_key_pack(backend::Precision p, const KeyPackArgs& a, StreamHandle stream);

// The inverse: pool rows src_rows[i] (device [n]; null = rows 0..n-1) -> rows [n, 512] / [n, 128] (bf16 or f32).
// A negative src_rows[i] writes zeros.
Status sm90_kv_unpack(backend::Precision p, const void* pool, const int32_t* src_rows, int64_t n, void* rows,
                      StreamHandle s);
Status sm90_key_unpack(backend::Precision p, const void* pool, const int32_t* src_rows, int64_t n, void* rows,
                       StreamHandle s);

}  // namespace dsv4::cuda
