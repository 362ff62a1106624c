// Kernels and launchers of the kv_store family: pack rows into compact pool rows (scattered by a device row list)
// and the exact inverse. Layouts and the losslessness argument: kv_store.h, kv_store.cuh.
//
// Pack, kReference: 8 channels per thread, so one e4m3 block (64 channels) is 8 adjacent lanes and one e2m1 block
// (32 channels) 4 adjacent lanes; the block amax is a butterfly over those lanes (every lane of the warp takes part,
// the row's validity only guards the stores, so a skipped row never leaves a shuffle half-populated).
#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/kernels/kv_store/kv_store.cuh"
#include "backend/cuda/kernels/kv_store/kv_store.h"
#include "backend/cuda/common/pdl.cuh"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using Cfg = KvStoreConfig;

constexpr int kKvChunks = Cfg::kKvDim / 8;    // 64 threads per K=V row
constexpr int kKeyChunks = Cfg::kKeyDim / 8;  // 16 threads per key

__device__ __forceinline__ int64_t pool_row_of(const int32_t* rows, int64_t first, int64_t i) {
    return rows ? int64_t(rows[i]) : first + i;
}

// kReference K=V pack: grid ceil(n / 4) x 256 threads, 64 threads per row, thread = channels 8c..8c+7.
__global__ void __launch_bounds__(Cfg::kThreads)
    sm90_kv_pack_ref_kernel(const __nv_bfloat16* __restrict__ rows, int64_t n, const int32_t* __restrict__ dst_rows,
                            int64_t dst_first, uint8_t* __restrict__ pool) {
    pdl_enter();
    const int64_t i = int64_t(blockIdx.x) * (Cfg::kThreads / kKvChunks) + threadIdx.x / kKvChunks;
    const int c = threadIdx.x % kKvChunks;
    const int64_t d = i < n ? pool_row_of(dst_rows, dst_first, i) : -1;
    const uint4 raw = d >= 0 ? *reinterpret_cast<const uint4*>(rows + i * Cfg::kKvDim + 8 * c) : make_uint4(0, 0, 0, 0);
    kv_pack_ref_chunk(raw, c, d >= 0 ? pool + d * kKvFp8RowBytes : nullptr);
}

// kReference key pack: grid ceil(n / 16) x 256 threads, 16 threads per key.
__global__ void __launch_bounds__(Cfg::kThreads)
    sm90_key_pack_ref_kernel(const __nv_bfloat16* __restrict__ rows, int64_t n, const int32_t* __restrict__ dst_rows,
                             int64_t dst_first, uint8_t* __restrict__ pool) {
    pdl_enter();
    const int64_t i = int64_t(blockIdx.x) * (Cfg::kThreads / kKeyChunks) + threadIdx.x / kKeyChunks;
    const int c = threadIdx.x % kKeyChunks;
    const int64_t d = i < n ? pool_row_of(dst_rows, dst_first, i) : -1;
    const uint4 raw =
        d >= 0 ? *reinterpret_cast<const uint4*>(rows + i * Cfg::kKeyDim + 8 * c) : make_uint4(0, 0, 0, 0);
    key_pack_ref_chunk(raw, c, d >= 0 ? pool + d * kKeyFp4RowBytes : nullptr);
}

// kF32 pack (a row copy) and every unpack: thread = 8 channels of one row. kPack: rows -> pool[dst]; else
// pool[src] -> rows (src < 0: zeros). kDim 512 or 128; kRef selects the packed formats.
template <int kDim, bool kRef, bool kPack>
__global__ void __launch_bounds__(Cfg::kThreads)
    sm90_kv_store_copy_kernel(const void* __restrict__ in, int64_t n, const int32_t* __restrict__ row_list,
                              int64_t first, void* __restrict__ out) {
    pdl_enter();
    constexpr int kChunks = kDim / 8;
    const int64_t i = int64_t(blockIdx.x) * (Cfg::kThreads / kChunks) + threadIdx.x / kChunks;
    const int c = threadIdx.x % kChunks;
    if (i >= n) return;
    const int64_t p = pool_row_of(row_list, first, i);
    if constexpr (kPack) {  // kF32 only
        if (p < 0) return;
        const float4* src = reinterpret_cast<const float4*>(static_cast<const float*>(in) + i * kDim + 8 * c);
        float4* dst = reinterpret_cast<float4*>(static_cast<float*>(out) + p * kDim + 8 * c);
        dst[0] = src[0];
        dst[1] = src[1];
    } else if constexpr (kRef) {
        uint4 u = make_uint4(0, 0, 0, 0);
        const uint8_t* pool = static_cast<const uint8_t*>(in);
        if (p >= 0)
            u = kDim == Cfg::kKvDim ? kv_packed_chunk(pool + p * kKvFp8RowBytes, c)
                                    : key_packed_chunk(pool + p * kKeyFp4RowBytes, c);
        *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(out) + i * kDim + 8 * c) = u;
    } else {
        float4 a = make_float4(0, 0, 0, 0), b = a;
        if (p >= 0) {
            const float4* src = reinterpret_cast<const float4*>(static_cast<const float*>(in) + p * kDim + 8 * c);
            a = src[0], b = src[1];
        }
        float4* dst = reinterpret_cast<float4*>(static_cast<float*>(out) + i * kDim + 8 * c);
        dst[0] = a;
        dst[1] = b;
    }
}

unsigned blocks_for(int64_t n, int dim) {
    const int64_t per_block = Cfg::kThreads / (dim / 8);
    return unsigned((n + per_block - 1) / per_block);
}

Status check(const std::string& op, const void* rows, const void* pool, int64_t n, uintptr_t pool_align) {
    if (!rows || !pool || n < 0) return invalid_argument(op + ": null rows or pool, or negative n");
    if (!is_aligned(rows, 16)) return invalid_argument(op + ": rows must be 16-byte aligned");
    if (!is_aligned(pool, pool_align))
        return invalid_argument(op + ": pool must be " + std::to_string(pool_align) + "-byte aligned");
    if (n > (int64_t(1) << 36)) return invalid_argument(op + ": too many rows (" + std::to_string(n) + ")");
    return Status::ok();
}

template <int kDim, bool kPack>
void launch_copy(Precision p, const void* in, int64_t n, const int32_t* list, int64_t first, void* out,
                 cudaStream_t s) {
    if (!kPack && p == Precision::kReference)  // packing kReference rows has its own kernels
        sm90_kv_store_copy_kernel<kDim, !kPack, kPack><<<blocks_for(n, kDim), Cfg::kThreads, 0, s>>>(in, n, list,
                                                                                                   first, out);
    else
        sm90_kv_store_copy_kernel<kDim, false, kPack><<<blocks_for(n, kDim), Cfg::kThreads, 0, s>>>(in, n, list,
                                                                                                    first, out);
}

}  // namespace

int64_t kv_row_bytes(Precision p) { return p == Precision::kReference ? kKvFp8RowBytes : 512 * 4; }
int64_t key_row_bytes(Precision p) { return p == Precision::kReference ? kKeyFp4RowBytes : 128 * 4; }

Status sm90_kv_pack(Precision p, const KvPackArgs& a, StreamHandle stream) {
    const std::string op = "sm90_kv_pack";
    DSV4_RETURN_IF_ERROR(check(op, a.rows, a.pool, a.n, p == Precision::kReference ? 8 : 16));
    if (!a.dst_rows && a.dst_first < 0) return invalid_argument(op + ": dst_first must be >= 0");
    if (a.n == 0) return Status::ok();
    if (p == Precision::kReference)
        sm90_kv_pack_ref_kernel<<<blocks_for(a.n, Cfg::kKvDim), Cfg::kThreads, 0, stream>>>(
            static_cast<const __nv_bfloat16*>(a.rows), a.n, a.dst_rows, a.dst_first, static_cast<uint8_t*>(a.pool));
    else
        launch_copy<Cfg::kKvDim, true>(p, a.rows, a.n, a.dst_rows, a.dst_first, a.pool, stream);
    return launch_status(op.c_str());
}

Status sm90_key_pack(Precision p, const KeyPackArgs& a, StreamHandle stream) {
    const std::string op = "sm90_key_pack";
    DSV4_RETURN_IF_ERROR(check(op, a.rows, a.pool, a.n, p == Precision::kReference ? 4 : 16));
    if (!a.dst_rows && a.dst_first < 0) return invalid_argument(op + ": dst_first must be >= 0");
    if (a.n == 0) return Status::ok();
    if (p == Precision::kReference)
        sm90_key_pack_ref_kernel<<<blocks_for(a.n, Cfg::kKeyDim), Cfg::kThreads, 0, stream>>>(
            static_cast<const __nv_bfloat16*>(a.rows), a.n, a.dst_rows, a.dst_first, static_cast<uint8_t*>(a.pool));
    else
        launch_copy<Cfg::kKeyDim, true>(p, a.rows, a.n, a.dst_rows, a.dst_first, a.pool, stream);
    return launch_status(op.c_str());
}

Status sm90_kv_unpack(Precision p, const void* pool, const int32_t* src_rows, int64_t n, void* rows,
                      StreamHandle stream) {
    const std::string op = "sm90_kv_unpack";
    DSV4_RETURN_IF_ERROR(check(op, rows, pool, n, p == Precision::kReference ? 8 : 16));
    if (n == 0) return Status::ok();
    launch_copy<Cfg::kKvDim, false>(p, pool, n, src_rows, 0, rows, stream);
    return launch_status(op.c_str());
}

Status sm90_key_unpack(Precision p, const void* pool, const int32_t* src_rows, int64_t n, void* rows,
                       StreamHandle stream) {
    const std::string op = "sm90_key_unpack";
    DSV4_RETURN_IF_ERROR(check(op, rows, pool, n, p == Precision::kReference ? 4 : 16));
    if (n == 0) return Status::ok();
    launch_copy<Cfg::kKeyDim, false>(p, pool, n, src_rows, 0, rows, stream);
    return launch_status(op.c_str());
}

}  // namespace dsv4::cuda
