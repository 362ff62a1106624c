// Launchers of the kv_finish family: validate, pick the activation type and row width, launch on the stream.
#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/kernels/kv_finish/kv_finish.cuh"
#include "backend/cuda/kernels/kv_finish/kv_finish.h"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using backend::WeightFormat;
using Cfg = KvFinishConfig;

Status check_norm(const DeviceWeightView& w, int64_t dim, const std::string& op) {
    if (w.empty() || w.format != WeightFormat::kBF16 || w.rows * w.cols != dim)
        return invalid_argument(op + ": norm weight must be bf16 of length " + std::to_string(dim));
    return Status::ok();
}

template <typename ActT>
void launch_rows(const void* x, int64_t rows, int64_t dim, const DeviceWeightView& norm, float eps,
                 const int64_t* positions, int64_t first_window, int64_t ratio, const backend::RopeFreqs& freqs,
                 FinishSim sim, void* normed, void* y, const int64_t* decode_position, const int64_t* decode_positions,
                 cudaStream_t s, void* pack_pool = nullptr, int64_t pack_first = 0) {
    const unsigned grid = unsigned((rows + Cfg::kWarps - 1) / Cfg::kWarps);
    const auto* w = static_cast<const __nv_bfloat16*>(norm.data);
    if (dim == 512)
        sm90_kv_row_finish_kernel<ActT, 512>
            <<<grid, Cfg::kWarps * 32, 0, s>>>(static_cast<const ActT*>(x), rows, w, eps, positions, first_window,
                                               ratio, freqs, sim, static_cast<ActT*>(normed), static_cast<ActT*>(y),
                                               decode_position, decode_positions, pack_pool, pack_first);
    else
        sm90_kv_row_finish_kernel<ActT, 128><<<grid, Cfg::kWarps * 32, 0, s>>>(
            static_cast<const ActT*>(x), rows, w, eps, positions, first_window, ratio, freqs, sim,
            static_cast<ActT*>(normed), static_cast<ActT*>(y), decode_position, decode_positions, nullptr, 0);
}

}  // namespace

Status sm90_window_kv_finish(Precision precision, const WindowKvFinishArgs& a, StreamHandle stream) {
    const std::string op = "sm90_window_kv_finish";
    if (!a.kv || !a.positions || a.tokens < 0) return invalid_argument(op + ": null pointer or negative tokens");
    DSV4_RETURN_IF_ERROR(check_norm(a.kv_norm, 512, op));
    if (!is_aligned(a.kv, 16)) return invalid_argument(op + ": kv not 16-byte aligned");
    if (a.pool && (a.pool_first < 0 || !is_aligned(a.pool, 16)))
        return invalid_argument(op + ": pool must be 16-byte aligned and pool_first >= 0");
    if (a.tokens == 0) return Status::ok();
    const FinishSim sim = precision == Precision::kReference ? FinishSim::kFp8Nope : FinishSim::kNone;
    if (precision == Precision::kReference)
        launch_rows<__nv_bfloat16>(a.kv, a.tokens, 512, a.kv_norm, a.eps, a.positions, 0, 1, a.freqs, sim, nullptr,
                                   a.kv, nullptr, nullptr, stream, a.pool, a.pool_first);
    else
        launch_rows<float>(a.kv, a.tokens, 512, a.kv_norm, a.eps, a.positions, 0, 1, a.freqs, sim, nullptr, a.kv,
                           nullptr, nullptr, stream, a.pool, a.pool_first);
    return launch_status(op.c_str());
}

Status sm90_compressor_finish(Precision precision, const CompressorFinishArgs& a, StreamHandle stream) {
    const std::string op = "sm90_compressor_finish";
    if (!a.pooled || !a.out || a.n < 0 || a.ratio <= 0 || a.first_window < 0)
        return invalid_argument(op + ": null pointer or bad shape");
    if (a.decode_position && a.decode_positions)
        return invalid_argument(op + ": decode_position (one sequence) and decode_positions (a batch) are exclusive");
    const bool main = a.kind == backend::CompressedKind::kMain;
    if ((main && a.head_dim != 512) || (!main && a.head_dim != 128))
        return invalid_argument(op + ": head_dim must be 512 for main entries and 128 for indexer keys");
    DSV4_RETURN_IF_ERROR(check_norm(a.norm, a.head_dim, op));
    if (!is_aligned(a.pooled, 16) || !is_aligned(a.out, 16) || !is_aligned(a.normed, 16))
        return invalid_argument(op + ": rows not 16-byte aligned");
    if (a.decode_position && a.n != 1)
        return invalid_argument(op + ": decode_position finishes one entry (n must be 1, got " + std::to_string(a.n) +
                                ")");
    if (a.n == 0) return Status::ok();
    const bool ref = precision == Precision::kReference;
    const FinishSim sim = !ref ? FinishSim::kNone : main ? FinishSim::kFp8Nope : FinishSim::kHadamardFp4;
    if (ref)
        launch_rows<__nv_bfloat16>(a.pooled, a.n, a.head_dim, a.norm, a.eps, nullptr, a.first_window, a.ratio,
                                   a.freqs, sim, a.normed, a.out, a.decode_position, a.decode_positions, stream);
    else
        launch_rows<float>(a.pooled, a.n, a.head_dim, a.norm, a.eps, nullptr, a.first_window, a.ratio, a.freqs, sim,
                           a.normed, a.out, a.decode_position, a.decode_positions, stream);
    return launch_status(op.c_str());
}

Status sm90_compressor_pool(Precision precision, const CompressorPoolArgs& a, StreamHandle stream) {
    const std::string op = "sm90_compressor_pool";
    if (!a.kv || !a.score || !a.out || a.n_windows < 0 || a.ratio <= 0 || a.head_dim <= 0)
        return invalid_argument(op + ": null pointer or bad shape");
    if ((a.prev_kv == nullptr) != (a.prev_score == nullptr))
        return invalid_argument(op + ": prev_kv and prev_score go together");
    if (a.decode_position && a.decode_positions)
        return invalid_argument(op + ": decode_position (one sequence) and decode_positions (a batch) are exclusive");
    if (a.decode_position && a.n_windows != 1)
        return invalid_argument(op + ": decode_position pools the one open window (n_windows must be 1, got " +
                                std::to_string(a.n_windows) + ")");
    if (a.decode_position && a.overlap && !a.prev_kv)
        return invalid_argument(op + ": decode_position with overlap needs prev_kv/prev_score (the previous window)");
    if (a.decode_positions) {
        if (!a.slots) return invalid_argument(op + ": decode_positions needs slots (each window's state slot)");
        const int64_t window_elems = a.ratio * (a.overlap ? 2 * a.head_dim : a.head_dim);
        if (a.slot_stride < window_elems)
            return invalid_argument(op + ": slot_stride " + std::to_string(a.slot_stride) +
                                    " is smaller than one window of ratio x width = " + std::to_string(window_elems) +
                                    " f32 elements");
        if (a.overlap && !a.prev_kv)
            return invalid_argument(op + ": decode_positions with overlap needs prev_kv/prev_score (the previous "
                                         "windows)");
    }
    // the single-sequence form is the batched one with one window in slot 0
    const int64_t* decode_positions = a.decode_positions ? a.decode_positions : a.decode_position;
    const int32_t* slots = a.decode_positions ? a.slots : nullptr;
    const int64_t slot_stride = a.decode_positions ? a.slot_stride : 0;
    const int64_t total = a.n_windows * a.head_dim;
    if (total == 0) return Status::ok();
    const unsigned grid = unsigned((total + Cfg::kPoolThreads - 1) / Cfg::kPoolThreads);
    if (precision == Precision::kReference)
        sm90_compressor_pool_kernel<__nv_bfloat16><<<grid, Cfg::kPoolThreads, 0, stream>>>(
            a.kv, a.score, a.prev_kv, a.prev_score, a.n_windows, int(a.ratio), int(a.head_dim), a.overlap,
            static_cast<__nv_bfloat16*>(a.out), decode_positions, slots, slot_stride);
    else
        sm90_compressor_pool_kernel<float><<<grid, Cfg::kPoolThreads, 0, stream>>>(
            a.kv, a.score, a.prev_kv, a.prev_score, a.n_windows, int(a.ratio), int(a.head_dim), a.overlap,
            static_cast<float*>(a.out), decode_positions, slots, slot_stride);
    return launch_status(op.c_str());
}

}  // namespace dsv4::cuda
