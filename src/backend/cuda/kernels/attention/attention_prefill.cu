// Launcher of the prefill attention (attention_wgmma.cuh, whole lists); sm90_sparse_attn validates and dispatches here.
#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/kernels/attention/attention.h"
#include "backend/cuda/kernels/attention/attention_wgmma.cuh"

namespace dsv4::cuda {

bool sparse_attn_takes_prefill_kernel(backend::Precision precision, const SparseAttnArgs& a) {
    return precision == backend::Precision::kReference && a.tokens >= kSparseAttnPrefillMinTokens &&
           a.heads % AttnWgmmaConfig::kHeads == 0;
}

Status sm90_sparse_attn_prefill(const SparseAttnArgs& a, StreamHandle stream) {
    using Cfg = AttnWgmmaConfig;
    const char* op = "sm90_sparse_attn (prefill)";
    auto* kernel = sm90_sparse_attn_wgmma_kernel<kWholeList>;
    DSV4_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes),
                  std::string(op) + ": shared memory opt-in");
    WgmmaAttnParams p;
    p.q = static_cast<const __nv_bfloat16*>(a.q);
    p.pool = static_cast<const uint8_t*>(a.kv);
    p.rows_bf16 = !a.kv_packed;
    p.idx = a.idx;
    p.heads = int(a.heads), p.topk = int(a.topk), p.n_kv = a.n_kv, p.scale = a.scale;
    p.sink = a.sink, p.derotate = a.derotate, p.positions = a.positions, p.freqs = a.freqs;
    p.out = static_cast<__nv_bfloat16*>(a.out);
    const dim3 grid(1, unsigned(a.heads / Cfg::kHeads), unsigned(a.tokens));
    kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p);
    return launch_status(op);
}

}  // namespace dsv4::cuda
