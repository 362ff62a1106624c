// Gather of packed K=V pool rows into a bf16 tile, shared by the one-pass decode attention (attention.cuh) and the
// wgmma kernel (attention_wgmma.cuh), each with its own tile layout.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/kernels/kv_store/kv_store.cuh"

namespace dsv4::cuda {

inline constexpr int kKvGatherDim = 512, kKvGatherRows = 64;  // channels of a row, rows of a tile

// The 64 candidate rows idx_s[0..64) of a packed pool (kv_store.h: 584-byte rows, 8-byte aligned) dequantised into
// a bf16 tile (-1: zeros): exactly the bf16 values of the unpacked rows. dst(r, c) is where channels 8c..8c+7 of row
// r go (16 bytes). Thread = channel chunk tid % 64 (8 channels) of rows tid / 64 + kThreads/64 · k; a warp reads 256
// consecutive bytes of one row. The loads of kMaxBatch rows are issued before any is decoded so that they are in
// flight together. kThreads is a multiple of 64; where kThreads / 64 does not divide the 64 rows (384 threads: 6
// rows per pass), the last pass is partial.
template <int kThreads, int kMaxBatch = 16, class Dst>
__device__ __forceinline__ void gather_packed_kv_block(const uint8_t* __restrict__ pool, const int32_t* idx_s, Dst dst,
                                                       int tid) {
    constexpr int kChunks = kKvGatherDim / 8, kRowsPerPass = kThreads / kChunks;  // 64, 2 (8 for 512 threads)
    static_assert(kThreads % kChunks == 0 && kRowsPerPass >= 1, "whole rows per pass");
    constexpr int kCodeChunks = int(kKvFp8CodeChannels) / 8;                        // 56
    constexpr int kRowsPerThread = (kKvGatherRows + kRowsPerPass - 1) / kRowsPerPass;
    constexpr int kBatch = kRowsPerThread < kMaxBatch ? kRowsPerThread : kMaxBatch;
    // every (thread, k) names a row of the tile: no row test is compiled in
    constexpr bool kExact = kKvGatherRows % kRowsPerPass == 0 && kRowsPerThread % kBatch == 0;
    const int c = tid % kChunks, r0 = tid / kChunks;
    const bool codes = c < kCodeChunks;
    // byte offsets inside a row: the 8 codes (or the first 8 rope bytes), the second 8 rope bytes, the scale
    const int off_a = codes ? 8 * c : int(kKvFp8RopeOffset) + 16 * (c - kCodeChunks);
    const int off_s = int(kKvFp8ScaleOffset) + (codes ? c / 8 : 0);
#pragma unroll 1
    for (int k0 = 0; k0 < kRowsPerThread; k0 += kBatch) {
        uint2 a[kBatch], b[kBatch];
        uint8_t sc[kBatch];
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
            const int r = r0 + kRowsPerPass * (k0 + k);
            const int32_t s = kExact || r < kKvGatherRows ? idx_s[r] : -1;
            a[k] = make_uint2(0, 0), b[k] = make_uint2(0, 0), sc[k] = 0;
            if (s >= 0) {
                const uint8_t* row = pool + int64_t(s) * kKvFp8RowBytes;
                a[k] = *reinterpret_cast<const uint2*>(row + off_a);
                if (codes) sc[k] = row[off_s];
                else b[k] = *reinterpret_cast<const uint2*>(row + off_a + 8);
            }
        }
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
            const int r = r0 + kRowsPerPass * (k0 + k);
            if (!kExact && r >= kKvGatherRows) continue;
            uint4 u = make_uint4(a[k].x, a[k].y, b[k].x, b[k].y);
            if (codes) {
                // a -1 row decodes its zero codes with scale byte 0 (2^-127): +0, as the zero-filled unpacked tile
                u = kv_decode8_bf16(a[k], sc[k]);
            }
            *dst(r, c) = u;
        }
    }
}

}  // namespace dsv4::cuda
