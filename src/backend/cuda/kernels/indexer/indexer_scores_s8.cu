// Launcher of the integer-wgmma indexer scores: one CTA per (share of the key tiles, token), at most kCtasPerSm CTAs
// per SM over the whole grid (one wave), so that each CTA loads its token's query once and walks many tiles.
#include <algorithm>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/per_device.h"
#include "backend/cuda/kernels/indexer/indexer_scores_s8.cuh"
#include "backend/cuda/kernels/indexer/indexer_scores_s8.h"

namespace dsv4::cuda {

// Every call with the query's integer form, packed keys and aligned operands: faster than the bf16 kernel at every
// measured point (H200, 1.2x at batch 1 and 4K context to 2.4x on an 8K prefill pass; docs/kernels/attention.md).
bool indexer_scores_s8_applies(const IndexerScoresArgs& a) {
    if (!a.keys_packed || !a.q_int || !a.q_exp || (reinterpret_cast<uintptr_t>(a.keys) & 15) != 0 ||
        (reinterpret_cast<uintptr_t>(a.q_int) & 15) != 0 || (reinterpret_cast<uintptr_t>(a.q_exp) & 3) != 0)
        return false;
    return a.path != IndexerScoresArgs::Path::kBf16;
}

int64_t indexer_scores_wave_tokens() { return int64_t(IndexerS8Config::kCtasPerSm) * current_sm_count(); }

Status launch_indexer_scores_s8(const IndexerScoresArgs& a, StreamHandle stream) {
    using Cfg = IndexerS8Config;
    static PerDevice<cudaError_t> attr;
    DSV4_CUDA_TRY(attr.get([] {
        return cudaFuncSetAttribute(sm90_indexer_scores_s8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    Cfg::kSmem);
    }),
                  "cudaFuncSetAttribute(sm90_indexer_scores_s8 shared memory)");
    const int64_t tiles = (a.n + Cfg::kKeys - 1) / Cfg::kKeys;
    // one wave: at most kCtasPerSm x SMs CTAs in all (a second, partial wave would double the time)
    const int64_t want = int64_t(Cfg::kCtasPerSm) * current_sm_count() / a.tokens;
    const dim3 grid(unsigned(std::clamp<int64_t>(want, 1, tiles)), unsigned(a.tokens));
    sm90_indexer_scores_s8_kernel<<<grid, Cfg::kThreads, Cfg::kSmem, stream>>>(
        a.q_int, a.q_exp, static_cast<const uint8_t*>(a.keys), static_cast<const __nv_bfloat16*>(a.w), int(a.heads),
        a.n, a.ratio, a.positions, static_cast<__nv_bfloat16*>(a.scores), a.visible_only, a.key_pages,
        a.pages_per_token);
    return launch_status("sm90_indexer_scores_s8");
}

}  // namespace dsv4::cuda
