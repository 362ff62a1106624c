// Launchers of the indexer family: validate, pick the activation type, launch on the stream.
#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/kernels/indexer/indexer.cuh"
#include "backend/cuda/kernels/indexer/indexer.h"
#include "backend/cuda/kernels/indexer/indexer_scores_s8.h"

namespace dsv4::cuda {

using backend::Precision;

Status sm90_indexer_scores(Precision precision, const IndexerScoresArgs& a, StreamHandle stream) {
    const std::string op = "sm90_indexer_scores";
    if (!a.q || !a.keys || !a.w || !a.positions || !a.scores || a.tokens < 0 || a.n < 0 || a.ratio <= 0)
        return invalid_argument(op + ": null pointer or bad shape");
    if (a.heads <= 0 || a.heads > IndexerConfig::kHeads)
        return invalid_argument(op + ": heads " + std::to_string(a.heads) + " must be in [1, 64]");
    const bool packed = a.keys_packed && precision == Precision::kReference;
    if ((reinterpret_cast<uintptr_t>(a.q) & 15) || (reinterpret_cast<uintptr_t>(a.keys) & (packed ? 3 : 15)))
        return invalid_argument(op + ": q and keys must be 16-byte aligned (packed keys 4-byte)");
    if (a.key_pages && (a.pages_per_token <= 0 || a.n > a.pages_per_token * IndexerConfig::kKeys))
        return invalid_argument(op + ": " + std::to_string(a.n) + " keys need pages_per_token >= " +
                                std::to_string((a.n + IndexerConfig::kKeys - 1) / IndexerConfig::kKeys) + " (got " +
                                std::to_string(a.pages_per_token) + ")");
    const bool integer = precision == Precision::kReference && indexer_scores_s8_applies(a);
    if (a.path == IndexerScoresArgs::Path::kInteger && !integer)
        return invalid_argument(op +
                                ": the integer path needs kReference, packed keys, q_int and q_exp, 16-byte "
                                "aligned keys and q_int, and a 4-byte aligned q_exp");
    if (a.tokens == 0 || a.n == 0) return Status::ok();
    if (a.tokens > 65535) return invalid_argument(op + ": at most 65535 tokens per call");
    if (integer) return launch_indexer_scores_s8(a, stream);
    const dim3 grid(unsigned((a.n + IndexerConfig::kKeys - 1) / IndexerConfig::kKeys), unsigned(a.tokens));
    if (precision == Precision::kReference)
        (packed ? sm90_indexer_scores_kernel<__nv_bfloat16, true>
                : sm90_indexer_scores_kernel<__nv_bfloat16, false>)<<<grid, IndexerConfig::kThreads, 0, stream>>>(
            static_cast<const __nv_bfloat16*>(a.q), a.keys, static_cast<const __nv_bfloat16*>(a.w), int(a.heads), a.n,
            a.ratio, a.positions, static_cast<__nv_bfloat16*>(a.scores), a.visible_only, a.key_pages,
            a.pages_per_token);
    else
        sm90_indexer_scores_kernel<float, false><<<grid, IndexerConfig::kThreads, 0, stream>>>(
            static_cast<const float*>(a.q), a.keys, static_cast<const float*>(a.w), int(a.heads), a.n, a.ratio,
            a.positions, static_cast<float*>(a.scores), a.visible_only, a.key_pages, a.pages_per_token);
    return launch_status(op.c_str());
}

Status sm90_topk(Precision precision, const TopKArgs& a, StreamHandle stream) {
    const std::string op = "sm90_topk";
    if (!a.scores || !a.idx || a.rows < 0 || a.n < 0 || a.k < 0)
        return invalid_argument(op + ": null pointer or bad shape");
    if (a.k > IndexerConfig::kTopkMax)
        return invalid_argument(op + ": k " + std::to_string(a.k) + " above the supported 1024");
    if (a.positions && a.ratio <= 0)
        return invalid_argument(op + ": positions need the compression ratio (got " + std::to_string(a.ratio) + ")");
    if (a.rows == 0 || a.k == 0) return Status::ok();
    if (a.rows > 0x7fffffff) return invalid_argument(op + ": too many rows");
    if (precision == Precision::kReference)
        sm90_topk_kernel<__nv_bfloat16><<<unsigned(a.rows), IndexerConfig::kTopkThreads, 0, stream>>>(
            static_cast<const __nv_bfloat16*>(a.scores), a.n, int(a.k), a.positions, a.ratio, a.idx);
    else
        sm90_topk_kernel<float><<<unsigned(a.rows), IndexerConfig::kTopkThreads, 0, stream>>>(
            static_cast<const float*>(a.scores), a.n, int(a.k), a.positions, a.ratio, a.idx);
    return launch_status(op.c_str());
}

}  // namespace dsv4::cuda
