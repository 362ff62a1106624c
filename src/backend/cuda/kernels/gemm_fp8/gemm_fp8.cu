// Launcher of sm90_fp8_gemm_block128: validates, picks the token tile and the K split, launches on the stream.
#include <algorithm>
#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/per_device.h"
#include "backend/cuda/kernels/gemm_fp8/gemm_fp8.cuh"
#include "backend/cuda/kernels/gemm_fp8/gemm_fp8.h"
#include "backend/cuda/kernels/gemm_fp8/gemv_fp8.h"

namespace dsv4::cuda {
namespace {

using Cfg = Fp8GemmConfig;

int token_tile(int64_t tokens) {
    if (tokens <= 8) return 8;
    if (tokens <= 16) return 16;
    if (tokens <= 32) return 32;
    return 64;  // 128 would need 128 accumulator registers per thread and spills (ptxas -v)
}

struct Plan {
    int bn = 8, splits = 1, kb_per_split = 1;
    unsigned gx = 1, gy = 1;
};

// Split K only when the output tiles cannot fill the GPU twice over (decode): each split then streams its share of
// the weight from its own SM.
Plan make_plan(int64_t tokens, int64_t n, int64_t k) {
    Plan p;
    p.bn = token_tile(tokens);
    p.gx = unsigned((n + Cfg::kBM - 1) / Cfg::kBM);
    p.gy = unsigned((tokens + p.bn - 1) / p.bn);
    const int64_t kb = k / Cfg::kBK, tiles = int64_t(p.gx) * p.gy, target = 2 * int64_t(current_sm_count());
    int64_t splits = tiles >= target ? 1 : std::min<int64_t>({kb, Cfg::kMaxSplits, (target + tiles - 1) / tiles});
    splits = std::max<int64_t>(splits, 1);
    p.kb_per_split = int((kb + splits - 1) / splits);
    p.splits = int((kb + p.kb_per_split - 1) / p.kb_per_split);
    return p;
}

template <int BN>
Status launch(const Fp8GemmArgs& a, const Plan& p, cudaStream_t s) {
    auto kernel = sm90_fp8_gemm_block128_kernel<BN>;
    static PerDevice<cudaError_t> attr;
    DSV4_CUDA_TRY(attr.get([&] {
        return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::smem_bytes(BN));
    }),
                  "cudaFuncSetAttribute(sm90_fp8_gemm_block128 shared memory)");
    const dim3 grid(p.gx, p.gy, unsigned(p.splits));
    kernel<<<grid, Cfg::kThreads, Cfg::smem_bytes(BN), s>>>(
        static_cast<const uint8_t*>(a.w.data), a.w.scale, a.a_codes, a.a_scale, int(a.w.rows), int(a.w.cols),
        int(a.tokens), p.kb_per_split, static_cast<__nv_bfloat16*>(a.y), p.splits > 1 ? a.workspace : nullptr);
    return launch_status("sm90_fp8_gemm_block128");
}

}  // namespace

size_t sm90_fp8_gemm_workspace_bytes(int64_t tokens, int64_t n, int64_t k) {
    if (tokens <= 0 || n <= 0 || k < Cfg::kBK || tokens <= kFp8GemvMaxTokens) return 0;
    const Plan p = make_plan(tokens, n, k);
    return p.splits > 1 ? size_t(p.splits) * size_t(tokens) * size_t(n) * sizeof(float) : 0;
}

namespace {

// The argument checks of both entry points; on success `plan` is the launch's plan.
Status check_and_plan(const Fp8GemmArgs& a, const std::string& op, Plan& plan) {
    if (!a.a_codes || !a.a_scale || !a.y || a.w.empty() || !a.w.scale || a.tokens < 0)
        return invalid_argument(op + ": null pointer or negative token count");
    if (a.w.format != backend::WeightFormat::kFP8Block)
        return invalid_argument(op + ": weight is " + backend::weight_format_name(a.w.format) + ", expected fp8");
    if (a.w.cols % Cfg::kBK != 0 || a.w.cols <= 0 || a.w.rows <= 0)
        return invalid_argument(op + ": K " + std::to_string(a.w.cols) + " must be a positive multiple of 128");
    if (a.w.rows > 0x7fffffff || a.w.cols > 0x7fffffff || a.tokens > 0x7fffffff)
        return invalid_argument(op + ": shape too large");
    if ((reinterpret_cast<uintptr_t>(a.a_codes) | reinterpret_cast<uintptr_t>(a.w.data)) & 15)
        return invalid_argument(op + ": activation codes and weight must be 16-byte aligned");
    if (a.tokens == 0) return Status::ok();
    plan = make_plan(a.tokens, a.w.rows, a.w.cols);
    if (plan.splits > 1 && a.tokens > kFp8GemvMaxTokens) {  // the decode path (gemv_fp8.h) needs no workspace
        const size_t need = sm90_fp8_gemm_workspace_bytes(a.tokens, a.w.rows, a.w.cols);
        if (!a.workspace || a.workspace_bytes < need)
            return invalid_argument(op + ": split-K needs a workspace of " + std::to_string(need) + " bytes, got " +
                                    std::to_string(a.workspace_bytes));
    }
    return Status::ok();
}

Status launch_plan(const Fp8GemmArgs& a, const Plan& p, cudaStream_t stream) {
    return p.bn == 8    ? launch<8>(a, p, stream)
           : p.bn == 16 ? launch<16>(a, p, stream)
           : p.bn == 32 ? launch<32>(a, p, stream)
                        : launch<64>(a, p, stream);
}

}  // namespace

Status sm90_fp8_gemm_block128_partials(const Fp8GemmArgs& a, Fp8GemmPartials& out, StreamHandle stream) {
    out = {};
    Plan p;
    DSV4_RETURN_IF_ERROR(check_and_plan(a, "sm90_fp8_gemm_block128", p));
    if (a.tokens == 0 || a.tokens <= kFp8GemvMaxTokens || p.splits <= 1) return Status::ok();
    DSV4_RETURN_IF_ERROR(launch_plan(a, p, stream));
    out = {a.workspace, p.splits};
    return Status::ok();
}

Status sm90_fp8_gemm_block128(const Fp8GemmArgs& a, StreamHandle stream) {
    const std::string op = "sm90_fp8_gemm_block128";
    Plan p;
    DSV4_RETURN_IF_ERROR(check_and_plan(a, op, p));
    if (a.tokens == 0) return Status::ok();
    if (a.tokens <= kFp8GemvMaxTokens) return launch_fp8_gemv(a, stream);
    DSV4_RETURN_IF_ERROR(launch_plan(a, p, stream));
    if (p.splits > 1) {
        const int64_t n_out = a.tokens * a.w.rows;
        const unsigned grid = unsigned(std::min<int64_t>((n_out + 255) / 256, int64_t(current_sm_count()) * 8));
        sm90_fp8_gemm_reduce_kernel<<<grid, 256, 0, stream>>>(a.workspace, p.splits, n_out,
                                                              static_cast<__nv_bfloat16*>(a.y));
        return launch_status("sm90_fp8_gemm_reduce");
    }
    return Status::ok();
}

}  // namespace dsv4::cuda
