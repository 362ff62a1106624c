// Launcher of the prefill attention kernel (attention_prefill.cuh); sm90_sparse_attn validates and dispatches here.
#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/kernels/attention/attention.h"
#include "backend/cuda/kernels/attention/attention_prefill.cuh"

namespace dsv4::cuda {

bool sparse_attn_takes_prefill_kernel(backend::Precision precision, const SparseAttnArgs& a) {
    return precision == backend::Precision::kReference && a.kv_packed && a.tokens >= kSparseAttnPrefillMinTokens &&
           a.heads % AttnPrefillConfig::kHeads == 0;
}

Status sm90_sparse_attn_prefill(const SparseAttnArgs& a, StreamHandle stream) {
    using Cfg = AttnPrefillConfig;
    const char* op = "sm90_sparse_attn (prefill)";
    DSV4_CUDA_TRY(cudaFuncSetAttribute(sm90_sparse_attn_prefill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Cfg::kSmemBytes),
                  std::string(op) + ": shared memory opt-in");
    const dim3 grid(unsigned(a.heads / Cfg::kHeads), unsigned(a.tokens));
    sm90_sparse_attn_prefill_kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(
        static_cast<const __nv_bfloat16*>(a.q), static_cast<const uint8_t*>(a.kv), a.idx, int(a.heads), a.n_kv,
        int(a.topk), a.sink, a.scale, a.derotate, a.positions, a.freqs, static_cast<__nv_bfloat16*>(a.out));
    return launch_status(op);
}

}  // namespace dsv4::cuda
