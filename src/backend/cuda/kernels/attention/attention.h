// Sparse attention with sink, the output de-rotation and the grouped low-rank projection wo_a on the GPU
// (MODEL_SPEC §5.4.7, §5.4.8) — the CUDA side of backend::cpu::sparse_attn (+ rope with inverse) and wo_a.
#pragma once

#include <cstdint>

#include "backend/cuda/common/regimes.h"
#include "backend/cuda/common/stream.h"
#include "backend/cuda/common/weights.h"
#include "backend/ops.h"

namespace dsv4::cuda {

// For token t, head h over the candidates idx[t] (-1 = none; an index outside [0, n_kv) is skipped as -1):
//   l_s = (q·kv_s)·scale; o = Σ e^{l_s-M} kv_s / (Σ e^{l_s-M} + e^{sink_h-M}); no valid candidate → o = 0.
// kReference (bf16 q, kv, out): the reference kernel's blocks of 64 candidates, online softmax with f32 running
// max / sum, P rounded to bf16 before P·V, f32 accumulation on tensor cores, bf16 out. kF32: exact softmax in f32.
// derotate: then the conjugate RoPE on channels 448..511 at positions[t] (the CPU's rope with inverse, on the
// rounded output), fused into the epilogue.
struct SparseAttnArgs {
    const void* q = nullptr;       // [T, H, 512]
    const void* kv = nullptr;      // [n_kv, 512], or a pool of n_kv packed rows (kv_packed)
    const int32_t* idx = nullptr;  // [T, topk]
    int64_t tokens = 0, heads = 0, n_kv = 0, topk = 0;  // any heads >= 1 (padded to 16 inside); topk >= 0
    const float* sink = nullptr;   // device [H]
    float scale = 0;               // 512^-½
    bool derotate = false;
    const int64_t* positions = nullptr;  // device [T] (derotate only)
    backend::RopeFreqs freqs;
    void* out = nullptr;           // [T, H, 512]
    // kReference only (ignored in kF32): kv is a pool of n_kv rows of kKvFp8RowBytes (kv_store.h) and idx entries
    // are row numbers of that pool. Each gathered row is dequantised on chip to exactly the bf16 values an
    // unpacked row holds, so the output is bit-identical to the unpacked call on the same values.
    bool kv_packed = false;
};
Status sm90_sparse_attn(backend::Precision precision, const SparseAttnArgs& a, StreamHandle stream);
// From this many tokens (the prefill passes; decode batches are at most 256 rows), in kReference with heads a
// multiple of 64, sm90_sparse_attn runs the prefill kernel (attention_wgmma.cuh): one block per token and 64 heads
// on wgmma, each candidate tile gathered (packed rows: and decoded) once per token and 64 heads, a producer
// warpgroup filling the next tile while the consumers compute. Every head's arithmetic is the one-pass kernel's.
inline constexpr int64_t kSparseAttnPrefillMinTokens = kPrefillMinRows;
// Whether sm90_sparse_attn takes that kernel for these arguments, and the kernel itself (arguments as validated by
// sm90_sparse_attn; exposed for the benchmark).
bool sparse_attn_takes_prefill_kernel(backend::Precision precision, const SparseAttnArgs& a);
Status sm90_sparse_attn_prefill(const SparseAttnArgs& a, StreamHandle stream);

// The same op for decode with the candidate axis split over CTAs (flash-decoding; attention_split.cuh): each list is
// cut into chunks of `chunk` candidates; a CTA computes the partial (running max, sum, unnormalised o) of one
// 16-head tile over one chunk with the reference kernel's per-64-block arithmetic, and a combine kernel merges the
// partials in chunk order with the sink, then de-rotates and writes bf16. match_reference_max (default) first runs
// a block-max pass so that every chunk starts from the reference's running max: bf16(P) is then the one-pass
// kernel's bit for bit and only the f32 rounding of the final sums differs. Without it each chunk starts from its
// own max (one launch and one K read fewer), which re-rounds P: as accurate against the exact softmax as the
// reference, but about 2e-3 rel_l2 away from it. kF32 falls back to sm90_sparse_attn (no workspace used).
// Two kernels compute the block maxima and the partials: kMmaSync — CTAs of 16 heads on mma.sync, the head tiles of
// a chunk in a cluster sharing each block's gather (any pool, any heads); kWgmma — CTAs of 64 heads on wgmma with a
// producer warpgroup (attention_wgmma.cuh; packed pools, heads a multiple of 64), the same partials bit for bit at a
// given chunk and ~4x the heads per block-step (a longer chain per block), for calls with work for every SM. kAuto
// takes kWgmma where it can run, for lists of at least kSplitWgmmaMinListBlocks blocks of 64 candidates and
// kSplitWgmmaMinBlocks blocks in all (tokens x list blocks), else kMmaSync (measured crossover:
// docs/kernels/attention.md, "Split decode on 64-head wgmma CTAs").
enum class SplitKernel { kAuto, kMmaSync, kWgmma };
inline constexpr int64_t kSplitWgmmaMinListBlocks = 8, kSplitWgmmaMinBlocks = 64;
struct SparseAttnSplitOptions {
    int64_t chunk = 0;                // candidates per chunk, a multiple of 64 up to 16384; 0: chosen to fill the SMs
    bool match_reference_max = true;
    SplitKernel kernel = SplitKernel::kAuto;
};
// Device workspace the call needs (partials, block maxima) for these shapes; 0 when there is nothing to split.
size_t sm90_sparse_attn_split_workspace_bytes(const SparseAttnArgs& a, const SparseAttnSplitOptions& o = {});
// Candidates per chunk the call would use (a multiple of 64; 0 when there is nothing to split), for reports.
int64_t sm90_sparse_attn_split_chunk(const SparseAttnArgs& a, const SparseAttnSplitOptions& o = {});
// workspace: at least sm90_sparse_attn_split_workspace_bytes(a, o) bytes, 16-byte aligned; no initial contents.
Status sm90_sparse_attn_split(backend::Precision precision, const SparseAttnArgs& a, void* workspace,
                              size_t workspace_bytes, StreamHandle stream, const SparseAttnSplitOptions& o = {});

// z[t, g·R + r] = Σ_i wo_a[g·R + r, i] · o[t, g·W + i], W = (H/G)·512. The weight (FP8 blocks or bf16) is
// dequantised to bf16 in registers (exact); kReference: bf16 o, f32 accumulation on tensor cores, bf16 z.
// kF32: f32 o split into three bf16 terms (exact), f32 z.
struct WoAArgs {
    const void* o = nullptr;  // [T, H, 512]
    int64_t tokens = 0, heads = 0, groups = 0, rank = 0;  // rank % 64 == 0
    DeviceWeightView wo_a;    // [G·R, (H/G)·512] kFP8Block or kBF16; a model weight: the decode kernel reads its
                              // first step before the programmatic wait (common/pdl.cuh)
    void* z = nullptr;        // [T, G·R]
    // Needed above kWoAGemmMinTokens tokens in kReference: sm90_wo_a_workspace_bytes() bytes, 256-byte aligned.
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
};
// From this many tokens (the prefill passes; decode batches are at most 256 rows) kReference runs wo_a as one batched
// cuBLASLt bf16 GEMM over the G groups, the FP8 weight first dequantised to bf16 in the workspace (the exact values
// the kernels use): the same products, f32 sums in another order, about 10x the staged kernel's 57 TFLOP/s at
// V4-Flash's 2,048-row passes. Below it (and in kF32) the kernels run and no workspace is needed.
inline constexpr int64_t kWoAGemmMinTokens = kPrefillMinRows;
size_t sm90_wo_a_workspace_bytes(backend::Precision precision, const WoAArgs& a);
Status sm90_wo_a(backend::Precision precision, const WoAArgs& a, StreamHandle stream);

}  // namespace dsv4::cuda
