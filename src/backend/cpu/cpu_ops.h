// The CPU reference backend: every op of backend/ops.h as plain loops (f32 accumulation; double only where a sum
// must not depend on order), multi-threaded on the heavy ops through the Exec's thread pool. This is the oracle
// the CUDA kernels are tested against, and it is itself tested against DeepSeek's recorded outputs
// (tests/unit/official_ops) and against direct formulas (tests/unit/cpu_ops). docs/kernels/cpu-reference.md.
//
// Every op validates its Params (null pointers, shapes, weight formats) and returns a Status; it never aborts.
#pragma once

#include "backend/ops.h"

namespace dsv4::backend::cpu {

// quant primitives (quant.cpp)
Status act_quant(const ActQuantParams& p);
Status fp4_act_quant(const Fp4QuantParams& p);
Status hadamard128(const Exec& ex, const HadamardParams& p);
Status kv_fp8_sim(const Exec& ex, const KvFp8SimParams& p);

// dense (linear.cpp, norm_rope.cpp)
Status linear(const Exec& ex, const LinearParams& p);
Status rmsnorm(const Exec& ex, const RmsNormParams& p);
Status rope(const Exec& ex, const RopeParams& p);
Status embedding(const Exec& ex, const EmbeddingParams& p);

// mHC (mhc.cpp)
Status hc_split_sinkhorn(const Exec& ex, const HcSinkhornParams& p);
Status hc_pre(const Exec& ex, const HcPreParams& p);
Status hc_post(const Exec& ex, const HcPostParams& p);
Status hc_head(const Exec& ex, const HcHeadParams& p);

// attention (attention.cpp, compressor.cpp, indexer.cpp)
Status q_head_norm(const Exec& ex, const QHeadNormParams& p);
Status q_path(const Exec& ex, const QPathParams& p);
Status window_kv(const Exec& ex, const WindowKvParams& p);
Status compressor_project(const Exec& ex, const CompressorProjectParams& p);
Status compressor_pool(const Exec& ex, const CompressorPoolParams& p);
Status compressor_finish(const Exec& ex, const CompressorFinishParams& p);
Status indexer_q(const Exec& ex, const IndexerQParams& p);
Status indexer_weights(const Exec& ex, const IndexerWeightsParams& p);
Status indexer_scores(const Exec& ex, const IndexerScoresParams& p);
Status topk(const Exec& ex, const TopKParams& p);
Status sparse_attn(const Exec& ex, const SparseAttnParams& p);
Status wo_a(const Exec& ex, const WoAParams& p);

// MoE (moe.cpp)
Status router(const Exec& ex, const RouterParams& p);
Status expert(const Exec& ex, const ExpertParams& p);
Status routed_experts(const Exec& ex, const RoutedExpertsParams& p);
Status moe_sum(const Exec& ex, const MoeSumParams& p);

}  // namespace dsv4::backend::cpu
