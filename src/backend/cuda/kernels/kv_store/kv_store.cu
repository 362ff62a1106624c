// Launchers of the kv_store family (packing of cached rows into compact pool rows).
#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/kernels/kv_store/kv_store.h"

namespace dsv4::cuda {

using backend::Precision;

int64_t kv_row_bytes(Precision p) { return p == Precision::kReference ? kKvFp8RowBytes : 512 * 4; }
int64_t key_row_bytes(Precision p) { return p == Precision::kReference ? kKeyFp4RowBytes : 128 * 4; }

Status sm90_kv_pack(Precision, const KvPackArgs&, StreamHandle) { return unsupported("sm90_kv_pack: not built yet"); }
Status sm90_key_pack(Precision, const KeyPackArgs&, StreamHandle) {
    return unsupported("sm90_key_pack: not built yet");
}
Status sm90_kv_unpack(Precision, const void*, const int32_t*, int64_t, void*, StreamHandle) {
    return unsupported("sm90_kv_unpack: not built yet");
}
Status sm90_key_unpack(Precision, const void*, const int32_t*, int64_t, void*, StreamHandle) {
    return unsupported("sm90_key_unpack: not built yet");
}

}  // namespace dsv4::cuda
