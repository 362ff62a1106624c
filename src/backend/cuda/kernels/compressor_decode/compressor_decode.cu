// Launcher of the compressor_decode family: validate, pick the activation type and row width, one launch of B
// blocks on the stream. Kernel and phases: compressor_decode.cuh.
#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/kernels/compressor_decode/compressor_decode.cuh"
#include "backend/cuda/kernels/compressor_decode/compressor_decode.h"

namespace dsv4::cuda {
namespace {

using backend::CompressedKind;
using backend::Precision;
using Cfg = CompressorDecodeConfig;

Status check(Precision precision, const CompressorDecodeArgs& a, const std::string& op) {
    if (!a.positions || !a.slots || !a.kv || !a.score || !a.open_kv || !a.open_score || !a.pool)
        return invalid_argument(op + ": null positions, slots, kv, score, open window or pool");
    if (a.n < 0 || a.n > 0x7fffffff) return invalid_argument(op + ": bad row count " + std::to_string(a.n));
    const bool main = a.kind == CompressedKind::kMain;
    if ((main && a.head_dim != Cfg::kMainThreads) || (!main && a.head_dim != Cfg::kKeyThreads))
        return invalid_argument(op + ": head_dim must be 512 for main entries and 128 for indexer keys (got " +
                                std::to_string(a.head_dim) + ")");
    if (a.ratio <= 0 || a.ratio > 4096) return invalid_argument(op + ": bad ratio " + std::to_string(a.ratio));
    if (a.overlap && (!a.prev_kv || !a.prev_score))
        return invalid_argument(op + ": overlap (CSA) needs prev_kv/prev_score (the previous windows)");
    if (!a.overlap && (a.prev_kv || a.prev_score))
        return invalid_argument(op + ": prev_kv/prev_score are only for overlap (CSA); pass null without it");
    if (a.norm.empty() || a.norm.format != backend::WeightFormat::kBF16 || a.norm.rows * a.norm.cols != a.head_dim)
        return invalid_argument(op + ": norm weight must be bf16 of length " + std::to_string(a.head_dim));
    if (!a.entries.table || a.entries.pages_per_session <= 0 || a.entries.entry_base < 0)
        return invalid_argument(op + ": the entries need a page table and pages_per_session > 0");
    for (const void* p : {static_cast<const void*>(a.kv), static_cast<const void*>(a.score),
                          static_cast<const void*>(a.open_kv), static_cast<const void*>(a.open_score),
                          static_cast<const void*>(a.prev_kv), static_cast<const void*>(a.prev_score)})
        if (!is_aligned(p, 16)) return invalid_argument(op + ": kv, score and the windows must be 16-byte aligned");
    const bool ref = precision == Precision::kReference;
    if (!a.ape.empty()) {
        const int64_t width = a.overlap ? 2 * a.head_dim : a.head_dim;
        if ((a.ape.format != backend::WeightFormat::kF32 && a.ape.format != backend::WeightFormat::kBF16) ||
            a.ape.rows * a.ape.cols != a.ratio * width)
            return invalid_argument(op + ": ape must be f32 or bf16 [ratio, width] = [" + std::to_string(a.ratio) +
                                    ", " + std::to_string(width) + "]");
    }
    const uintptr_t pool_align = !ref ? 16 : main ? 8 : 4;
    if (!is_aligned(a.pool, pool_align))
        return invalid_argument(op + ": pool must be " + std::to_string(pool_align) + "-byte aligned");
    return Status::ok();
}

template <typename ActT, int kDim>
void launch(const CompressorDecodeParams& p, int64_t n, cudaStream_t s) {
    sm90_compressor_decode_fused_kernel<ActT, kDim><<<unsigned(n), kDim, 0, s>>>(p);
}

}  // namespace

Status sm90_compressor_decode_fused(Precision precision, const CompressorDecodeArgs& a, StreamHandle stream) {
    const std::string op = "sm90_compressor_decode_fused";
    DSV4_RETURN_IF_ERROR(check(precision, a, op));
    if (a.n == 0) return Status::ok();
    const bool ref = precision == Precision::kReference, main = a.kind == CompressedKind::kMain;
    const FinishSim sim = !ref ? FinishSim::kNone : main ? FinishSim::kFp8Nope : FinishSim::kHadamardFp4;
    const CompressorDecodeParams p{a.positions,
                                   a.slots,
                                   a.kv,
                                   a.score,
                                   a.ape.empty() ? nullptr : a.ape.data,
                                   a.ape.format == backend::WeightFormat::kBF16,
                                   a.open_kv,
                                   a.open_score,
                                   a.prev_kv,
                                   a.prev_score,
                                   int(a.ratio),
                                   a.overlap,
                                   static_cast<const __nv_bfloat16*>(a.norm.data),
                                   a.freqs,
                                   a.eps,
                                   sim,
                                   a.entries.entry_base,
                                   a.entries.table,
                                   a.entries.pages_per_session,
                                   static_cast<uint8_t*>(a.pool),
                                   a.independent_of_previous};
    if (ref && main)
        launch<__nv_bfloat16, Cfg::kMainThreads>(p, a.n, stream);
    else if (ref)
        launch<__nv_bfloat16, Cfg::kKeyThreads>(p, a.n, stream);
    else if (main)
        launch<float, Cfg::kMainThreads>(p, a.n, stream);
    else
        launch<float, Cfg::kKeyThreads>(p, a.n, stream);
    return launch_status(op.c_str());
}

}  // namespace dsv4::cuda
