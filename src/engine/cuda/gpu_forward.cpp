// The layer loop, the MoE sub-block and the head on the GPU (the CUDA side of engine/forward.cpp, same order).
#include <algorithm>
#include <cstring>
#include <string>

#include "backend/cuda/common/graph.h"
#include "backend/cuda/device.h"
#include "backend/cuda/kernels/embed_head/embed_head.h"
#include "backend/cuda/kernels/experts/experts.h"
#include "backend/cuda/kernels/glue/glue.h"
#include "backend/cuda/kernels/linear/linear.h"
#include "backend/cuda/kernels/mhc/mhc.h"
#include "backend/cuda/kernels/moe/moe.h"
#include "backend/cuda/kernels/moe_prefill/moe_prefill.h"
#include "backend/cuda/kernels/norm_rope/norm_rope.h"
#include "backend/cuda/kernels/router/router.h"
#include "core/thread_pool.h"
#include "dsv4/sampling.h"
#include "engine/cuda/gpu_internal.h"

namespace dsv4::engine {

using backend::LinearOut;
using backend::Precision;

Result<QuantizedRows> quantized_rows_in(const GpuModel& m, const void* x, int64_t rows, int64_t cols,
                                        DeviceBuffer& codes, DeviceBuffer& scales) {
    if (m.precision != Precision::kReference || cols % 128 != 0) return QuantizedRows{};
    if (codes.bytes() < size_t(rows * cols) || scales.bytes() < size_t(rows * (cols / 128)) * sizeof(float))
        return internal_error("quantized_rows_in: pass buffers too small for " + std::to_string(rows) + " rows of " +
                              std::to_string(cols));
    return QuantizedRows{x, codes.as<uint8_t>(), scales.as<float>()};
}

namespace {
cuda::LinearArgs linear_args(const void* x, int64_t rows, const DeviceWeightView& w, LinearOut out, void* y,
                             const QuantizedRows& q, const DeviceBuffer& workspace) {
    cuda::LinearArgs a;
    a.x = x;
    if (q.x == x && q.codes) a.x_codes = q.codes, a.x_scales = q.scales;
    a.tokens = rows;
    a.w = w;
    a.out = out;
    a.y = y;
    a.workspace = workspace.data();
    a.workspace_bytes = workspace.bytes();
    return a;
}
}  // namespace

Status gpu_linear(GpuModel& m, const void* x, int64_t rows, const DeviceWeightView& w, LinearOut out, void* y,
                  const QuantizedRows& q, cuda::Fp8GemmPartials* partials) {
    cuda::LinearArgs a = linear_args(x, rows, w, out, y, q, m.pass.workspace);
    a.partials = partials;
    return cuda::sm90_linear(m.precision, a, m.stream.handle());
}

Status gpu_linear_on(GpuModel& m, cuda::StreamHandle stream, const DeviceBuffer& workspace, const void* x, int64_t rows,
                     const DeviceWeightView& w, LinearOut out, void* y, const QuantizedRows& q) {
    return cuda::sm90_linear(m.precision, linear_args(x, rows, w, out, y, q, workspace), stream);
}

Status gpu_linear_pair_on(GpuModel& m, cuda::StreamHandle stream, const DeviceBuffer& workspace, const void* x,
                          int64_t rows, const DeviceWeightView& w, void* y, const DeviceWeightView& w2, void* y2,
                          LinearOut out, const QuantizedRows& q) {
    cuda::LinearArgs a = linear_args(x, rows, w, out, y, q, workspace);
    a.w2 = w2;
    a.y2 = y2;
    return cuda::sm90_linear(m.precision, a, stream);
}

bool fused_moe_shapes(const model::ModelConfig& c) {
    return c.hidden_size % 512 == 0 && c.moe_inter_dim % 512 == 0 && c.n_routed_experts <= 1024 &&
           c.n_experts_per_token <= 16;
}

namespace {

// A sub-block's hc_post not yet run: pass.block_out and the residual streams still to combine into `out` with
// pass.post / pass.comb. The next collapse (the next sub-block's hc_pre, or the head's hc_head) runs it first in its
// own launch (HcPostFirst), one launch fewer per sub-block; nothing reads the streams in between.
struct PendingPost {
    const void* residual = nullptr;  // null: none pending
    void* out = nullptr;
    bool on_branch = false;  // its post / comb are computed on m.hc_branch: joined before they are read
};

// The pending hc_post's inputs for the next collapse (none when nothing is pending), its branch joined first.
Result<cuda::HcPostFirst> take_post_first(GpuModel& m, const PendingPost& p) {
    if (!p.residual) return cuda::HcPostFirst{};
    if (p.on_branch) DSV4_RETURN_IF_ERROR(m.hc_branch.join(m.stream.handle()));
    return cuda::HcPostFirst{m.pass.block_out.data(), p.residual, m.pass.post.as<float>(), m.pass.comb.as<float>()};
}

// [pending hc_post +] hc_pre + RMSNorm: streams [rows, hc, D] → pass.normed; pre / post / comb filled. branch: the
// split + Sinkhorn (post / comb, first read by this sub-block's hc_post in the next collapse) runs on m.hc_branch
// from the mixes, beside the sub-block instead of on the step's chain (HcPreArgs::sinkhorn_apart), and steps of up
// to pass.hc_wide_rows rows take the wide collapse, which applies the RMSNorm in its own launch (HcPreArgs::wide).
// quantized: where normed's e4m3 codes go when its linears want them (written by the norm), else null.
Status enter_sub_block(GpuModel& m, const GpuHc& hc, const DeviceWeightView& norm, void* streams, int64_t rows,
                       const PendingPost& pending, bool branch, QuantizedRows* quantized) {
    const model::ModelConfig& c = m.cfg;
    GpuPass& s = m.pass;
    if (pending.residual && pending.out != streams)
        return internal_error("enter_sub_block: the pending hc_post writes other streams than this block reads");
    cuda::HcPreArgs hp;
    hp.x = streams;
    hp.tokens = rows;
    hp.dim = c.hidden_size;
    hp.fn = hc.fn;
    hp.scale = hc.scale;
    hp.base = hc.base;
    hp.iters = int(c.hc_sinkhorn_iters);
    hp.hc_eps = float(c.hc_eps);
    hp.norm_eps = float(c.rms_norm_eps);
    hp.pre = s.pre.as<float>();
    hp.post = s.post.as<float>();
    hp.comb = s.comb.as<float>();
    hp.x_out = s.hc_x.data();
    DSV4_ASSIGN_OR_RETURN(hp.post_first, take_post_first(m, pending));
    hp.sinkhorn_apart = branch;
    if (branch) hp.mixes = s.mixes.as<float>();
    if (quantized) {
        DSV4_ASSIGN_OR_RETURN(
            *quantized, quantized_rows_in(m, s.normed.data(), rows, c.hidden_size, s.normed_codes, s.normed_scales));
    }
    const bool wide = branch && rows <= s.hc_wide_rows && !norm.empty();  // the wide launch applies a weighted norm
    if (wide) {
        hp.wide.counters = s.hc_tickets.as<int32_t>();
        hp.wide.partials = s.hc_partials.as<double>();
        hp.wide.weight = norm;
        hp.wide.eps = float(c.rms_norm_eps);
        hp.wide.y = s.normed.data();
        if (quantized) hp.wide.codes = quantized->codes, hp.wide.scales = quantized->scales;
    }
    DSV4_RETURN_IF_ERROR(cuda::sm90_hc_pre(m.precision, hp, m.stream.handle()));
    if (branch) {
        DSV4_RETURN_IF_ERROR(m.hc_branch.fork(m.stream.handle()));
        cuda::HcSinkhornArgs sp;
        sp.mixes = s.mixes.as<float>();
        sp.tokens = rows;
        sp.scale = hc.scale;
        sp.base = hc.base;
        sp.iters = hp.iters;
        sp.hc_eps = hp.hc_eps;
        sp.post = s.post.as<float>();
        sp.comb = s.comb.as<float>();
        DSV4_RETURN_IF_ERROR(cuda::sm90_hc_split_sinkhorn(sp, m.hc_branch.side()));
    }
    if (wide) return Status::ok();  // normed (and its codes) written by the collapse's launch
    cuda::RmsNormArgs np;
    np.x = s.hc_x.data();
    np.rows = rows;
    np.dim = c.hidden_size;
    np.weight = norm;
    np.eps = float(c.rms_norm_eps);
    np.y = s.normed.data();
    if (quantized) np.codes = quantized->codes, np.scales = quantized->scales;
    return cuda::sm90_rmsnorm(m.precision, np, m.stream.handle());
}

// The fused W4A8 kernels (decode up to kMoeDecodeKernelMaxRows rows, prefill above) serve reference numerics with
// MXFP4 experts at the shapes they support; everything else (f32 mode, bf16 experts, tiny widths) runs the generic
// routed-experts path.
bool fused_moe_fits(const GpuModel& m, const GpuMoe& w) {
    return m.precision == Precision::kReference && w.mxfp4 && fused_moe_shapes(m.cfg);
}

// MoE sub-block (§5.5): pass.normed → pass.block_out.
Status moe_block(GpuModel& m, const GpuLayer& layer, int64_t rows) {
    const model::ModelConfig& c = m.cfg;
    GpuPass& s = m.pass;
    const GpuMoe& w = layer.ffn;
    const cuda::StreamHandle st = m.stream.handle();
    const int64_t k = c.n_experts_per_token;

    const bool fused = fused_moe_fits(m, w);
    const bool prefill_kernel = fused && rows > m.moe_prefill_above;
    // routing inside the fused path's first launch (MoeDecodeArgs::route) where GpuModel::moe_route_max_rows asks
    const bool route_in_moe = fused && !prefill_kernel &&
                              rows <= std::min(m.moe_route_max_rows, cuda::kMoeRouteMaxTokens) &&
                              cuda::moe_route_fits(c.hidden_size, w.gate);
    const bool gate_fused = !route_in_moe && m.precision == Precision::kReference && rows <= kFusedRouterGateMaxRows &&
                            cuda::router_gate_select_fits(c.hidden_size, w.gate);
    if (!gate_fused && !route_in_moe)
        DSV4_RETURN_IF_ERROR(gpu_linear(m, s.normed.data(), rows, w.gate, LinearOut::kF32, s.router_logits.data()));
    cuda::RouterSelectArgs rp;
    rp.logits = s.router_logits.as<float>();
    rp.tokens = rows;
    rp.n_experts = c.n_routed_experts;
    rp.k = k;
    if (layer.hash_routed) {
        rp.tid2eid = w.tid2eid;
        rp.vocab = c.vocab_size;
        rp.token_ids = s.tokens;
    } else {
        rp.bias = w.gate_bias;
    }
    rp.routed_scale = float(c.routed_scaling_factor);
    rp.idx = s.route_idx.as<int32_t>();
    rp.weights = s.route_w.as<float>();
    if (gate_fused) {
        cuda::RouterGateArgs g;
        g.x = s.normed.data();
        g.dim = c.hidden_size;
        g.gate = w.gate;
        DSV4_RETURN_IF_ERROR(cuda::sm90_router_gate_select(g, rp, st));
    } else if (!route_in_moe) {
        DSV4_RETURN_IF_ERROR(cuda::sm90_router_select(rp, st));
    }

    const bool has_shared = !w.shared_w1.empty();
    const bool shared_fused = fused && !prefill_kernel && w.shared_fp8 && rows <= kFusedSharedExpertMaxRows;
    if (has_shared && !shared_fused) {
        cuda::ExpertArgs ea;
        ea.x = s.normed.data();
        ea.tokens = rows;
        ea.w1 = w.shared_w1;
        ea.w2 = w.shared_w2;
        ea.w3 = w.shared_w3;
        ea.limit = float(c.swiglu_limit);
        ea.y = s.shared_out.data();
        ea.workspace = s.workspace.data();
        ea.workspace_bytes = s.workspace.bytes();
        DSV4_RETURN_IF_ERROR(cuda::sm90_expert(m.precision, ea, st));
    }
    if (w.mxfp4_repacked && !fused)
        return internal_error("moe_block: the layer's experts are in the repacked layout, which only the fused "
                              "kernels read, but this model's precision or shapes do not take them");
    if (fused) {
        cuda::MoeDecodeArgs md;
        md.x = s.normed.data();
        md.idx = s.route_idx.as<int32_t>();
        md.route_w = s.route_w.as<float>();
        cuda::MoeRoute route;
        if (route_in_moe) {
            route.gate = w.gate;
            route.select = rp;
            route.logits = s.router_logits.as<float>();
            route.arrivals = s.moe_arrivals.as<int32_t>();
            md.route = &route;
        }
        md.format = w.mxfp4_repacked ? cuda::MoeWeightFormat::kMXFP4Repacked : cuda::MoeWeightFormat::kMXFP4;
        md.experts = w.mxfp4;
        md.shared = has_shared && !shared_fused ? s.shared_out.data() : nullptr;
        md.shared_expert = shared_fused ? w.shared_fp8 : nullptr;
        md.y = s.block_out.data();
        md.tokens = rows;
        md.k = k;
        md.n_experts = c.n_routed_experts;
        md.dim = c.hidden_size;
        md.inter = c.moe_inter_dim;
        md.limit = float(c.swiglu_limit);
        md.workspace = s.workspace.data();
        md.workspace_bytes = s.workspace.bytes();
        return prefill_kernel ? cuda::sm90_mxfp4_moe_prefill(md, st) : cuda::sm90_mxfp4_moe_decode(md, st);
    }
    cuda::RoutedExpertsArgs ra;
    ra.x = s.normed.data();
    ra.tokens = rows;
    ra.k = k;
    ra.n_experts = c.n_routed_experts;
    ra.dim = c.hidden_size;
    ra.inter = c.moe_inter_dim;
    ra.experts = w.experts;
    ra.idx = s.route_idx.as<int32_t>();
    ra.weights = s.route_w.as<float>();
    ra.limit = float(c.swiglu_limit);
    ra.out = s.expert_out.as<float>();
    ra.workspace = s.workspace.data();
    ra.workspace_bytes = s.workspace.bytes();
    DSV4_RETURN_IF_ERROR(cuda::sm90_routed_experts(m.precision, ra, st));
    cuda::MoeSumArgs ms;
    ms.expert_out = s.expert_out.as<float>();
    ms.idx = s.route_idx.as<int32_t>();
    ms.shared = has_shared ? s.shared_out.data() : nullptr;
    ms.tokens = rows;
    ms.k = k;
    ms.dim = c.hidden_size;
    ms.y = s.block_out.data();
    return cuda::sm90_moe_sum(m.precision, ms, st);
}

// One layer: streams → streams, its last hc_post left pending (run by the next collapse).
Status block_forward(GpuModel& m, const GpuLayer& layer, int slot, std::span<GpuBatchSeq> seqs, int64_t rows,
                     void* streams, void* spare, bool decode, PendingPost& pending) {
    // decode steps (graph-captured chains of short kernels) take the Sinkhorn off the chain; prefill passes keep it
    // inside the collapse, where the 32-token tiles run it per token anyway
    QuantizedRows normed_q;  // the attention's linears read normed's codes; the MoE quantises inside its kernels
    DSV4_RETURN_IF_ERROR(enter_sub_block(m, layer.hc_attn, layer.attn_norm, streams, rows, pending, decode, &normed_q));
    DSV4_RETURN_IF_ERROR(gpu_attention_block(m, layer, slot, seqs, rows, decode, normed_q));
    pending = {streams, spare, decode};
    DSV4_RETURN_IF_ERROR(enter_sub_block(m, layer.hc_ffn, layer.ffn_norm, spare, rows, pending, decode, nullptr));
    DSV4_RETURN_IF_ERROR(moe_block(m, layer, rows));
    pending = {spare, streams, decode};
    return Status::ok();
}

// The head (§5.6): [the last layer's hc_post +] hc_head collapse, RMSNorm into pass.normed; then, with
// `logits`, the f32 logits [rows, vocab] of every row into pass.logits (rows <= kHeadChunkRows; otherwise the
// caller runs the head GEMM on the rows it wants: head_logits).
Status head_forward(GpuModel& m, void* streams, int64_t rows, const PendingPost& pending, bool logits) {
    const model::ModelConfig& c = m.cfg;
    GpuPass& s = m.pass;
    cuda::HcHeadArgs hp;
    hp.x = streams;
    hp.tokens = rows;
    hp.dim = c.hidden_size;
    hp.fn = m.hc_head.fn;
    hp.scale = m.hc_head.scale;
    hp.base = m.hc_head.base;
    hp.hc_eps = float(c.hc_eps);
    hp.norm_eps = float(c.rms_norm_eps);
    hp.y = s.hc_x.data();
    DSV4_ASSIGN_OR_RETURN(hp.post_first, take_post_first(m, pending));
    DSV4_RETURN_IF_ERROR(cuda::sm90_hc_head(m.precision, hp, m.stream.handle()));
    cuda::RmsNormArgs np;
    np.x = s.hc_x.data();
    np.rows = rows;
    np.dim = c.hidden_size;
    np.weight = m.norm;
    np.eps = float(c.rms_norm_eps);
    np.y = s.normed.data();
    DSV4_RETURN_IF_ERROR(cuda::sm90_rmsnorm(m.precision, np, m.stream.handle()));
    if (!logits) return Status::ok();
    return gpu_linear(m, s.normed.data(), rows, m.head, LinearOut::kF32, s.logits.data());
}

// A stage without the head: its last layer's pending hc_post run on its own into the streams it writes (streams_a),
// which the next stage takes over.
Status finish_streams(GpuModel& m, int64_t rows, const PendingPost& pending) {
    if (pending.out != m.pass.streams_a.data())
        return internal_error("finish_streams: the last layer's hc_post does not write the streams handed over");
    if (pending.on_branch) DSV4_RETURN_IF_ERROR(m.hc_branch.join(m.stream.handle()));
    cuda::HcPostArgs a;
    a.a = m.pass.block_out.data();
    a.residual = pending.residual;
    a.post = m.pass.post.as<float>();
    a.comb = m.pass.comb.as<float>();
    a.tokens = rows;
    a.dim = m.cfg.hidden_size;
    a.out = pending.out;
    return cuda::sm90_hc_post(m.precision, a, m.stream.handle());
}

// Whether every row of the pass gets logits (no share starts its logits past its first row).
bool every_row_logits(std::span<const GpuBatchSeq> seqs) {
    for (const GpuBatchSeq& q : seqs)
        if (q.logits_from != 0) return false;
    return true;
}

// Brings pass.logits_rows to the host: one DMA per run of adjacent rows of pass.logits into the pinned landing
// buffer (the same row offsets), a wait for the stream, then the host pool copies each row on to its share's buffer.
// A DMA into pinned memory runs at the link's rate; into the callers' pageable buffers the driver would stage it
// through its own pinned memory (3.8 ms for 64 rows of V4's vocabulary on an H200, docs/perf.md).
Status land_logits(GpuModel& m) {
    GpuPass& s = m.pass;
    const std::vector<GpuPass::LogitsRow>& rows = s.logits_rows;
    if (rows.empty()) return Status::ok();
    const size_t row_bytes = size_t(m.cfg.vocab_size) * 4;
    uint8_t* host = s.logits_host.as<uint8_t>();
    for (size_t i = 0; i < rows.size();) {
        size_t j = i + 1;
        while (j < rows.size() && rows[j].src_row == rows[j - 1].src_row + 1) ++j;
        const size_t off = size_t(rows[i].src_row) * row_bytes;
        DSV4_RETURN_IF_ERROR(
            cuda::copy_async(host + off, at(s.logits, int64_t(off)), (j - i) * row_bytes, m.stream.handle()));
        i = j;
    }
    DSV4_RETURN_IF_ERROR(m.stream.synchronize());
    parallel_for(m.host_pool, int64_t(rows.size()), 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
            std::memcpy(rows[size_t(i)].dst, host + size_t(rows[size_t(i)].src_row) * row_bytes, row_bytes);
    });
    return Status::ok();
}

// Appends a draw's penalty list (the tokens its penalties change, from its history) to pass.penalty_list: {first,
// count} into it. False, with nothing appended, where the list passes the kernel's or the pass's capacity: that draw
// goes to the host.
bool add_penalty_list(GpuPass& s, const EngineSample& d, int32_t vocab, int32_t& first, int32_t& count) {
    const size_t before = s.penalty_list.size();
    cuda::sample_penalty_list(d.history, *d.params, vocab, s.penalty_counts, s.penalty_list);
    const size_t n = s.penalty_list.size() - before;
    if (n > size_t(cuda::kSampleMaxPenalties) || s.penalty_list.size() > size_t(GpuPass::kDrawPenalties)) {
        s.penalty_list.resize(before);
        return false;
    }
    first = int32_t(before), count = int32_t(n);
    return true;
}

// The pass's draws (pass.draws, their parameters in draw_params_host) and its logits rows (pass.logits_rows) to the
// host: the draws' kernel and the copies of its results queued before the rows' landing, then each draw's result
// into its request, and the rows of declined draws landed after them.
Status land_with_draws(GpuModel& m) {
    GpuPass& s = m.pass;
    const size_t n = s.draws.size();
    const cuda::StreamHandle st = m.stream.handle();
    if (n > 0) {
        DSV4_RETURN_IF_ERROR(
            cuda::copy_async(s.draw_params.data(), s.draw_params_host.data(), n * sizeof(cuda::SampleRowParams), st));
        const size_t penalties = s.penalty_list.size();
        if (penalties > 0) {
            std::memcpy(s.draw_penalties_host.data(), s.penalty_list.data(), penalties * sizeof(cuda::SamplePenalty));
            DSV4_RETURN_IF_ERROR(cuda::copy_async(s.draw_penalties.data(), s.draw_penalties_host.data(),
                                                  penalties * sizeof(cuda::SamplePenalty), st));
        }
        DSV4_RETURN_IF_ERROR(
            cuda::sm90_sample_rows({.logits = s.logits.as<float>(),
                                    .vocab = m.cfg.vocab_size,
                                    .params = s.draw_params.as<cuda::SampleRowParams>(),
                                    .penalties = penalties > 0 ? s.draw_penalties.as<cuda::SamplePenalty>() : nullptr,
                                    .out = s.draw_out.as<cuda::SampleRowOut>(),
                                    .n = int64_t(n)},
                                   st));
        DSV4_RETURN_IF_ERROR(
            cuda::copy_async(s.draw_out_host.data(), s.draw_out.data(), n * sizeof(cuda::SampleRowOut), st));
    }
    DSV4_RETURN_IF_ERROR(land_logits(m));
    if (n == 0) return Status::ok();
    DSV4_RETURN_IF_ERROR(m.stream.synchronize());
    s.logits_rows.clear();
    const auto* out = s.draw_out_host.as<cuda::SampleRowOut>();
    for (size_t i = 0; i < n; ++i) {
        if (out[i].status != cuda::kSampleOk) {  // declined or not finite: the caller's sampler takes the row
            s.logits_rows.push_back(s.draws[i].row);
            continue;
        }
        SampleResult& r = *s.draws[i].request->result;
        r.token = out[i].token;
        r.logprob = out[i].logprob;
        r.num_top = out[i].num_top;
        for (int k = 0; k < r.num_top; ++k) r.top[size_t(k)] = {out[i].top_token[k], out[i].top_logprob[k]};
    }
    return land_logits(m);
}

// The logits of the rows the shares want, after head_forward without `logits`: those rows of pass.normed (all of
// them, or each share's from its logits_from gathered into pass.hc_x, free after the norm), then the head GEMM
// kHeadChunkRows rows at a time through pass.logits, each chunk landed in the host buffers of the shares it covers
// (land_logits) before the next chunk's GEMM overwrites it.
Status head_logits(GpuModel& m, std::span<const GpuBatchSeq> seqs) {
    GpuPass& s = m.pass;
    const int64_t vocab = m.cfg.vocab_size, row_bytes = m.cfg.hidden_size * int64_t(m.act_bytes);
    const cuda::StreamHandle st = m.stream.handle();
    const bool every_row = every_row_logits(seqs);
    const DeviceBuffer& in = every_row ? s.normed : s.hc_x;
    int64_t rows = 0;  // rows the head runs on; a share's start among them is out0 below
    for (const GpuBatchSeq& q : seqs) {
        const int64_t n = q.n - q.logits_from;
        if (!every_row && n > 0)
            DSV4_RETURN_IF_ERROR(cuda::copy_async(at(s.hc_x, rows * row_bytes),
                                                  at(s.normed, (q.row0 + q.logits_from) * row_bytes),
                                                  size_t(n * row_bytes), st));
        rows += n;
    }
    for (int64_t r0 = 0; r0 < rows; r0 += kHeadChunkRows) {
        const int64_t n = std::min(kHeadChunkRows, rows - r0);
        DSV4_RETURN_IF_ERROR(gpu_linear(m, at(in, r0 * row_bytes), n, m.head, LinearOut::kF32, s.logits.data()));
        s.logits_rows.clear();
        int64_t out0 = 0;
        for (const GpuBatchSeq& q : seqs) {
            const int64_t count = q.n - q.logits_from;
            for (int64_t r = std::max(r0, out0); r < std::min(r0 + n, out0 + count); ++r)
                s.logits_rows.push_back({q.logits + (r - out0) * vocab, r - r0});
            out0 += count;
        }
        DSV4_RETURN_IF_ERROR(land_logits(m));
    }
    return Status::ok();
}

}  // namespace

namespace {

// A pass as each stage runs it: its rows, whether it is a decode step, whether the head GEMM of every row runs
// inside it (gpu_forward_batch).
struct StagePass {
    int64_t rows = 0;
    bool decode = false;
    bool logits_in_pass = false;
};

// Everything a pass queues between the plan upload and the logits, without waiting for anything: the part a
// decode step captures as a CUDA graph. The host plan must already hold the pass's positions and tokens. `logits`:
// the head GEMM of every row runs inside (a decode step's, and short passes whose every row gets logits).
Status enqueue_pass(GpuModel& m, std::span<GpuBatchSeq> seqs, int64_t rows, bool decode, bool logits) {
    const model::ModelConfig& c = m.cfg;
    GpuPass& s = m.pass;
    const cuda::StreamHandle st = m.stream.handle();
    DSV4_RETURN_IF_ERROR(cuda::copy_async(s.plan.data(), s.plan_host.data(), s.plan_host.bytes(), st));
    // a pipeline's passes other than decode steps may be left running (gpu_forward_batch): mark where this stage has
    // read its pinned inputs (the plan, and the page tables reserve_gpu_pages queued before it)
    if (!decode && (m.next || !m.embeds)) DSV4_RETURN_IF_ERROR(m.inputs_read.record(st));
    if (m.embeds) {  // later stages start from the streams the previous stage handed over into streams_a
        cuda::EmbeddingArgs ep;
        ep.tokens = s.tokens;
        ep.n = rows;
        ep.table = m.embed;
        ep.out = s.hc_x.data();  // no bad_position: the engine checked every id on the host (engine.cpp, check_feed)
        DSV4_RETURN_IF_ERROR(cuda::sm90_embedding(m.precision, ep, st));
        DSV4_RETURN_IF_ERROR(cuda::sm90_broadcast_streams(
            m.precision,
            {.x = s.hc_x.data(), .rows = rows, .dim = c.hidden_size, .hc = c.hc_mult, .streams = s.streams_a.data()},
            st));
    }
    if (m.cache.csa.pages) {  // each row's indexer key pages, shared by every CSA layer
        cuda::GatherPagesArgs g;
        g.token_pages = s.token_pages.as<int32_t>();
        g.n = rows;
        g.slots = s.slots;
        g.table = m.cache.csa.table.as<int32_t>();
        g.pages_per_session = m.cache.csa.pages_per_session;
        DSV4_RETURN_IF_ERROR(cuda::sm90_gather_pages(g, st));
    }
    PendingPost pending;
    for (size_t li = 0; li < m.layers.size(); ++li)
        DSV4_RETURN_IF_ERROR(block_forward(m, m.layers[li], int(li), seqs, rows, s.streams_a.data(),
                                           s.streams_b.data(), decode, pending));
    if (m.heads) return head_forward(m, s.streams_a.data(), rows, pending, logits);
    return finish_streams(m, rows, pending);
}

// A decode step (one token per sequence, none at position 0) replays the graph captured for its number of rows and
// its span: every per-sequence value (position, slot, page tables) is read on the device, so any sequences fit.
bool is_decode_step(std::span<const GpuBatchSeq> seqs) {
    for (const GpuBatchSeq& q : seqs)
        if (q.n != 1 || q.seq->position == 0) return false;
    return true;
}

Status run_decode_graph(GpuModel& m, std::span<GpuBatchSeq> seqs, int64_t rows) {
    GpuGraphCache& cache = m.graphs;
    for (GpuGraphCache::Entry& e : cache.entries)
        if (e.rows == rows && e.span == m.pass.decode_span) {
            e.last_use = ++cache.clock;
            ++cache.replays;
            return e.graph.launch(m.stream.handle());
        }
    DSV4_ASSIGN_OR_RETURN(cuda::CapturedGraph g, cuda::CapturedGraph::capture(m.stream.handle(), [&] {
                              return enqueue_pass(m, seqs, rows, true, rows <= kHeadChunkRows);
                          }));
    ++cache.captures;
    GpuGraphCache::Entry* slot = nullptr;
    if (cache.entries.size() < GpuGraphCache::kMaxEntries) {
        slot = &cache.entries.emplace_back();
    } else {  // evict the least recently used
        slot = &cache.entries[0];
        for (GpuGraphCache::Entry& e : cache.entries)
            if (e.last_use < slot->last_use) slot = &e;
    }
    slot->rows = rows;
    slot->span = m.pass.decode_span;
    slot->graph = std::move(g);
    slot->last_use = ++cache.clock;
    slot->nodes = slot->graph.nodes();
    if (int64_t(slot->nodes) > cache.max_nodes) {
        cache.max_nodes = int64_t(slot->nodes);
        cache.max_nodes_programmatic = int64_t(slot->graph.programmatic_edges());
    }
    ++cache.replays;
    return slot->graph.launch(m.stream.handle());
}

// Queues a stage's pass on its stream: a decode step replays (or captures) the stage's graph, other passes are
// queued op by op. After the first stage, the stream first waits for the previous stage's handoff; before the
// last, the final streams are copied to the next stage and the handoff recorded after the copy. via_inbox: an
// earlier pass may still be running on the later stages, so the handoff goes through their inboxes (GpuModel::inbox).
Status queue_stage(GpuModel& m, std::span<GpuBatchSeq> seqs, const StagePass& p, const GpuModel* prev, bool via_inbox) {
    const cuda::StreamHandle st = m.stream.handle();
    const size_t bytes = size_t(p.rows * m.cfg.hc_mult * m.cfg.hidden_size) * m.act_bytes;
    if (prev) {
        DSV4_RETURN_IF_ERROR(prev->handoff.wait(st));
        if (via_inbox) {
            DSV4_RETURN_IF_ERROR(cuda::copy_async(m.pass.streams_a.data(), m.inbox.data(), bytes, st));
            DSV4_RETURN_IF_ERROR(m.inbox_free.record(st));
        }
    }
    if (m.use_graphs && p.decode) {
        DSV4_RETURN_IF_ERROR(run_decode_graph(m, seqs, p.rows));
    } else {
        DSV4_RETURN_IF_ERROR(enqueue_pass(m, seqs, p.rows, p.decode, p.logits_in_pass));
    }
    if (!m.next) return Status::ok();
    void* dst = m.next->pass.streams_a.data();
    if (via_inbox) {  // after the next stage has copied in the previous pass's streams (never recorded: no wait)
        DSV4_RETURN_IF_ERROR(m.next->inbox_free.wait(st));
        dst = m.next->inbox.data();
    }
    DSV4_RETURN_IF_ERROR(cuda::copy_async(dst, m.pass.streams_a.data(), bytes, st));
    return m.handoff.record(st);
}

}  // namespace

namespace {

// One stage's plan of the pass (positions, tokens, session slots in its pinned plan; each share's row0), the
// pages its sequences need, the decode span.
Result<StagePass> plan_stage(GpuModel& m, std::span<GpuBatchSeq> seqs) {
    GpuPass& s = m.pass;
    StagePass p;
    int64_t* positions = s.plan_host.as<int64_t>();
    int32_t* tokens = reinterpret_cast<int32_t*>(s.plan_host.as<uint8_t>() + s.rows * 8);
    int32_t* slots = reinterpret_cast<int32_t*>(s.plan_host.as<uint8_t>() + s.rows * 12);
    for (GpuBatchSeq& q : seqs) {
        if (q.seq->model != &m)
            return internal_error("gpu_forward_batch: a sequence made by another model (or stage) was given");
        if (q.n <= 0 || q.n > q.seq->chunk_rows || p.rows + q.n > s.rows)
            return internal_error("gpu_forward_batch: a share of " + std::to_string(q.n) + " tokens at row " +
                                  std::to_string(p.rows) + " does not fit (sequence chunk " +
                                  std::to_string(q.seq->chunk_rows) + ", pass " + std::to_string(s.rows) + ")");
        if (q.logits_from < 0 || q.logits_from > q.n)
            return internal_error("gpu_forward_batch: logits from row " + std::to_string(q.logits_from) +
                                  " of a share of " + std::to_string(q.n) + " tokens");
        q.row0 = p.rows;
        for (int64_t i = 0; i < q.n; ++i) {
            positions[p.rows + i] = q.seq->position + i;
            tokens[p.rows + i] = q.tokens[i];
            slots[p.rows + i] = q.seq->slot;
        }
        p.rows += q.n;
    }
    for (GpuBatchSeq& q : seqs) DSV4_RETURN_IF_ERROR(reserve_gpu_pages(m, *q.seq, q.seq->position + q.n));
    // without graphs a decode step queues the same launches the graph would replay (the batched decode kernels:
    // split attention, for one, rounds its sums unlike the per-sequence path)
    p.decode = is_decode_step(seqs);
    int64_t span_tokens = 0;  // decode: the rows' largest position + 1
    for (const GpuBatchSeq& q : seqs) span_tokens = std::max(span_tokens, q.seq->position + q.n);
    s.decode_span = p.decode ? decode_span_for(span_tokens, m.cache.max_context) : 0;
    // passes of at most kHeadChunkRows rows run the head GEMM of every row inside when they are decode steps (the
    // graph holds it) or want every row's logits
    p.logits_in_pass = p.rows <= kHeadChunkRows && (p.decode || every_row_logits(seqs));
    return p;
}

// The head's output of the last stage to the host: the draws and logits rows of a pass that ran the head inside,
// else the head GEMM over the rows that want logits, chunk by chunk.
Status land_head(GpuModel& m, std::span<GpuBatchSeq> seqs, const StagePass& p) {
    if (!p.logits_in_pass) return head_logits(m, seqs);
    GpuPass& s = m.pass;
    const int64_t vocab = m.cfg.vocab_size;
    s.logits_rows.clear();
    s.draws.clear();
    s.penalty_list.clear();
    auto* params = s.draw_params_host.as<cuda::SampleRowParams>();
    for (const GpuBatchSeq& q : seqs) {
        // the share's one logits row, drawn on the device where its penalty list fits and no logit bias is asked
        // for (the device draw has none: the host sampler applies it)
        int32_t pen_first = 0, pen_count = 0;
        if (q.sample && q.logits_from == q.n - 1 && q.sample->params->logit_bias.empty() &&
            add_penalty_list(s, *q.sample, int32_t(vocab), pen_first, pen_count)) {
            const SamplingParams& sp = *q.sample->params;
            params[s.draws.size()] = {.row = q.row0 + q.n - 1,
                                      .uniform = q.sample->uniform,
                                      .temperature = sp.temperature,
                                      .top_k = sp.top_k,
                                      .top_p = sp.top_p,
                                      .min_p = sp.min_p,
                                      .top_logprobs = sp.top_logprobs,
                                      .repetition_penalty = sp.repetition_penalty,
                                      .presence_penalty = sp.presence_penalty,
                                      .frequency_penalty = sp.frequency_penalty,
                                      .penalty_first = pen_first,
                                      .penalty_count = pen_count};
            s.draws.push_back({q.sample, {q.logits, q.row0 + q.n - 1}});
            continue;
        }
        for (int64_t r = q.logits_from; r < q.n; ++r)
            s.logits_rows.push_back({q.logits + (r - q.logits_from) * vocab, q.row0 + r});
    }
    return land_with_draws(m);
}

// The shares each stage runs: the first stage's are the caller's; each later stage's are the same tokens with that
// stage's sequences (GpuSequence::next).
Status stage_shares(GpuModel& m, std::span<const GpuBatchSeq> from) {
    m.shares.assign(from.begin(), from.end());
    for (GpuBatchSeq& q : m.shares) {
        if (!q.seq->next) return internal_error("gpu_forward_batch: a sequence without a state on every GPU stage");
        q.seq = q.seq->next.get();
    }
    return Status::ok();
}

}  // namespace

Status gpu_forward_batch(GpuModel& first, std::span<GpuBatchSeq> seqs) {
    if (seqs.empty()) return internal_error("gpu_forward_batch: no sequences");
    // A pass left running: each stage must have read the pinned plan and page tables it was given before they are
    // written for this one; this pass's handoffs then go through the inboxes.
    const bool after_running = first.next && first.in_flight;
    if (after_running)
        for (GpuModel* m = &first; m; m = m->next.get()) {
            DSV4_RETURN_IF_ERROR(cuda::set_device(m->device));
            DSV4_RETURN_IF_ERROR(m->inputs_read.synchronize());
        }
    // the caller's shares on the first stage, the same tokens with each later stage's sequences (stage_shares)
    const auto shares_of = [&](GpuModel* m) { return m == &first ? seqs : std::span<GpuBatchSeq>(m->shares); };
    // every stage's plan and pages before any work is queued (a full cache stops the pass before it runs)
    StagePass pass;
    for (GpuModel* m = &first; m; m = m->next.get()) {
        DSV4_RETURN_IF_ERROR(cuda::set_device(m->device));
        DSV4_ASSIGN_OR_RETURN(pass, plan_stage(*m, shares_of(m)));
        if (m->next) DSV4_RETURN_IF_ERROR(stage_shares(*m->next, shares_of(m)));
    }
    GpuModel* last = &first;
    if (first.next) first.in_flight = true;  // until every stage is synchronised below
    for (GpuModel *m = &first, *prev = nullptr; m; prev = m, m = m->next.get()) {
        DSV4_RETURN_IF_ERROR(cuda::set_device(m->device));
        DSV4_RETURN_IF_ERROR(queue_stage(*m, shares_of(m), pass, prev, after_running));
        last = m;
    }
    DSV4_RETURN_IF_ERROR(land_head(*last, shares_of(last), pass));
    // A pipeline's pass that returns nothing to the host (no share wants a logits row: a long prompt's passes before
    // its last) is left running, so that the first stage starts the next pass while the others finish this one;
    // any other pass ends with every stage synchronised (the last stage waited for every earlier one; their streams
    // are asked too, for an error of their own).
    const bool leave_running =
        first.next && !pass.decode &&
        std::all_of(seqs.begin(), seqs.end(), [](const GpuBatchSeq& q) { return q.logits_from == q.n; });
    if (!leave_running) {
        for (GpuModel* m = &first; m; m = m->next.get()) {
            DSV4_RETURN_IF_ERROR(cuda::set_device(m->device));
            DSV4_RETURN_IF_ERROR(m->stream.synchronize());
        }
        first.in_flight = false;
    }
    for (GpuModel* m = &first; m; m = m->next.get())
        for (GpuBatchSeq& q : shares_of(m)) q.seq->position += q.n;
    return Status::ok();
}

GpuGraphStats gpu_graph_stats(const GpuModel& m) {
    // a pipeline's stages capture and replay one graph each per step: a step is counted once, its nodes over all
    GpuGraphStats g;
    g.captures = m.graphs.captures;
    g.replays = m.graphs.replays;
    for (const GpuModel* s = &m; s; s = s->next.get()) {
        g.nodes += s->graphs.max_nodes;
        g.programmatic_edges += s->graphs.max_nodes_programmatic;
    }
    return g;
}

}  // namespace dsv4::engine
