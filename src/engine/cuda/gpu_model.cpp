// Loading the GPU model (weights in their shipped formats, pass buffers) and creating sequence states.
#include <algorithm>
#include <array>
#include <string>

#include "backend/cuda/device.h"
#include "backend/cuda/kernels/attention/attention.h"
#include "backend/cuda/kernels/glue/glue.h"
#include "backend/cuda/kernels/indexer/indexer.h"
#include "backend/cuda/kernels/linear/linear.h"
#include "backend/cuda/kernels/mhc/mhc.h"
#include "backend/cuda/kernels/moe/mxfp4_repack.h"
#include "backend/cuda/kernels/moe_prefill/moe_prefill.h"
#include "core/formats.h"
#include "engine/cuda/gpu_internal.h"
#include "engine/gpu_placement.h"

namespace dsv4::engine {

using backend::LinearOut;
using backend::Precision;
using backend::WeightFormat;

namespace {

std::string layer_name(int layer, const char* what) { return "layer " + std::to_string(layer) + " " + what; }

// Bytes a weight takes on the GPU (from its shape: synthetic views carry no data).
uint64_t host_weight_bytes(const WeightView& w) {
    return w.rows <= 0 || w.cols <= 0 ? 0 : cuda::weight_data_bytes(w) + cuda::weight_scale_bytes(w);
}

Result<DeviceWeightView> keep(GpuModel& m, cuda::DeviceWeight d) {
    m.weight_bytes += d.bytes();
    m.owned.push_back(std::move(d));
    return m.owned.back().view();
}

// Uploads one weight as shipped; an absent optional weight stays an empty view.
Result<DeviceWeightView> upload(GpuModel& m, const WeightView& w, const std::string& name) {
    if (w.empty()) return DeviceWeightView{};
    DSV4_ASSIGN_OR_RETURN(cuda::DeviceWeight d, cuda::upload_weight(w, name.c_str()));
    return keep(m, std::move(d));
}

// Uploads a small table as f32 (sinks, router bias), dequantised exactly; returns the device pointer.
Result<const float*> upload_f32_table(GpuModel& m, const WeightView& w, const std::string& name) {
    if (w.empty()) return static_cast<const float*>(nullptr);
    std::vector<float> host(size_t(w.numel()));
    for (int64_t r = 0; r < w.rows; ++r) backend::dequantize_weight_row(w, r, host.data() + r * w.cols);
    DSV4_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::allocate(host.size() * 4, name.c_str()));
    DSV4_RETURN_IF_ERROR(b.upload(host.data(), host.size() * 4));
    m.weight_bytes += b.bytes();
    m.tables.push_back(std::move(b));
    return m.tables.back().as<const float>();
}

// Norm weights as bf16 (the K=V finishing kernels read bf16 norms): an f32 norm is accepted when every value is a
// bf16 value (a transformers-layout checkpoint keeps bf16-trained norms in f32), since converting it is exact.
Result<DeviceWeightView> upload_norm(GpuModel& m, const WeightView& w, const std::string& name) {
    if (w.empty() || w.format == WeightFormat::kBF16) return upload(m, w, name);
    if (w.format != WeightFormat::kF32) return unsupported(name + ": norm weight in an unexpected format");
    std::vector<uint16_t> bits(size_t(w.numel()));
    for (int64_t i = 0; i < w.numel(); ++i) {
        const float v = w.at(i);
        bits[size_t(i)] = f32_to_bf16(v);
        if (bf16_to_f32(bits[size_t(i)]) != v)
            return unsupported(name + ": an f32 norm weight that is not bf16-exact (value " + std::to_string(v) +
                               ") is not supported by the CUDA backend; use --backend cpu");
    }
    const WeightView as_bf16{WeightFormat::kBF16, w.rows, w.cols, bits.data(), nullptr};
    return upload(m, as_bf16, name);
}

// The checkpoint's weights, as shipped.
const GpuWeightSource kCheckpointSource{upload, upload_f32_table, upload_norm};

// The structure below takes every weight through m.source.
Result<DeviceWeightView> put(GpuModel& m, const WeightView& w, const std::string& name) {
    return m.source->matrix(m, w, name);
}
Result<const float*> put_f32_table(GpuModel& m, const WeightView& w, const std::string& name) {
    return m.source->f32_table(m, w, name);
}
Result<DeviceWeightView> put_norm(GpuModel& m, const WeightView& w, const std::string& name) {
    return m.source->norm(m, w, name);
}
Result<DeviceWeightView> put_f32(GpuModel& m, const WeightView& w, const std::string& name) {
    DSV4_ASSIGN_OR_RETURN(const float* p, put_f32_table(m, w, name));
    if (!p) return DeviceWeightView{};
    return DeviceWeightView{WeightFormat::kF32, w.rows, w.cols, p, nullptr};
}

Result<GpuHc> put_hc(GpuModel& m, const HcViews& v, const std::string& name) {
    GpuHc h;
    DSV4_ASSIGN_OR_RETURN(h.fn, put_f32(m, v.fn, name + " hc fn"));
    DSV4_ASSIGN_OR_RETURN(h.base, put_f32(m, v.base, name + " hc base"));
    DSV4_ASSIGN_OR_RETURN(h.scale, put_f32(m, v.scale, name + " hc scale"));
    return h;
}

Result<GpuCompressor> put_compressor(GpuModel& m, const CompressorViews& v, const std::string& name) {
    GpuCompressor c;
    DSV4_ASSIGN_OR_RETURN(c.wkv, put(m, v.wkv, name + " wkv"));
    DSV4_ASSIGN_OR_RETURN(c.wgate, put(m, v.wgate, name + " wgate"));
    DSV4_ASSIGN_OR_RETURN(c.ape, put(m, v.ape, name + " ape"));
    DSV4_ASSIGN_OR_RETURN(c.norm, put_norm(m, v.norm, name + " norm"));
    return c;
}

template <typename T>
Result<const T*> put_table(GpuModel& m, const std::vector<T>& host, const std::string& name) {
    DSV4_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::allocate(std::max<size_t>(host.size(), 1) * sizeof(T),
                                                                 name.c_str()));
    DSV4_RETURN_IF_ERROR(b.upload(host.data(), host.size() * sizeof(T)));
    m.tables.push_back(std::move(b));
    return m.tables.back().as<const T>();
}

// Routed MXFP4 experts that only the fused kernels will read — reference numerics, their shapes; the decode kernel
// below kMoeDecodeKernelMaxRows rows, the prefill kernel above, both read either layout — go into the repacked
// layout (docs/kernels/moe.md, "Repacked MXFP4": the same values, converted in fewer instructions) when every
// matrix of the layer can be repacked exactly; otherwise the layer keeps the shipped layout. Returns whether the
// layer was repacked. In place on the uploaded weights.
Result<bool> repack_layer_experts(GpuModel& m, const std::vector<cuda::Mxfp4ExpertPtrs>& experts) {
    const model::ModelConfig& c = m.cfg;
    if (m.precision != Precision::kReference || !fused_moe_shapes(c)) return false;
    const int64_t D = c.hidden_size, I = c.moe_inter_dim;
    const cuda::StreamHandle st = m.stream.handle();
    DSV4_ASSIGN_OR_RETURN(DeviceBuffer bad, DeviceBuffer::allocate(sizeof(int), "expert repack check"));
    DSV4_RETURN_IF_ERROR(bad.fill_bytes(0));
    for (const cuda::Mxfp4ExpertPtrs& e : experts) {
        DSV4_RETURN_IF_ERROR(cuda::sm90_mxfp4_repack_check(e.w1s, I, D, bad.as<int>(), st));
        DSV4_RETURN_IF_ERROR(cuda::sm90_mxfp4_repack_check(e.w3s, I, D, bad.as<int>(), st));
        DSV4_RETURN_IF_ERROR(cuda::sm90_mxfp4_repack_check(e.w2s, D, I, bad.as<int>(), st));
    }
    DSV4_RETURN_IF_ERROR(m.stream.synchronize());
    int n_bad = 0;
    DSV4_RETURN_IF_ERROR(bad.download(&n_bad, sizeof n_bad));
    if (n_bad) return false;
    // the pointers are the layer's own uploads (m.owned), written once here before any forward pass reads them
    auto mut = [](const uint8_t* p) { return const_cast<uint8_t*>(p); };
    for (const cuda::Mxfp4ExpertPtrs& e : experts) {
        DSV4_RETURN_IF_ERROR(cuda::sm90_mxfp4_repack(mut(e.w1), mut(e.w1s), I, D, st));
        DSV4_RETURN_IF_ERROR(cuda::sm90_mxfp4_repack(mut(e.w3), mut(e.w3s), I, D, st));
        DSV4_RETURN_IF_ERROR(cuda::sm90_mxfp4_repack(mut(e.w2), mut(e.w2s), D, I, st));
    }
    DSV4_RETURN_IF_ERROR(m.stream.synchronize());
    return true;
}

// The shared expert's table for the fused decode kernel, which runs it inside its launches (one FP8-block expert of
// the routed shape: [I, D] w1 / w3, [D, I] w2) where the kernel serves the layer (reference numerics); null when
// it does not fit, and the layer runs it as sm90_expert.
Result<const cuda::Fp8BlockExpertPtrs*> put_fused_shared_expert(GpuModel& m, const GpuMoe& g, int layer) {
    const model::ModelConfig& c = m.cfg;
    const int64_t D = c.hidden_size, I = c.moe_inter_dim;
    const auto fp8 = [](const DeviceWeightView& w, int64_t rows, int64_t cols) {
        return w.format == WeightFormat::kFP8Block && w.rows == rows && w.cols == cols;
    };
    if (m.precision != Precision::kReference || !fused_moe_shapes(c) || !fp8(g.shared_w1, I, D) ||
        !fp8(g.shared_w3, I, D) || !fp8(g.shared_w2, D, I))
        return nullptr;
    const cuda::Fp8BlockExpertPtrs ptrs{static_cast<const uint8_t*>(g.shared_w1.data), g.shared_w1.scale,
                                        static_cast<const uint8_t*>(g.shared_w3.data), g.shared_w3.scale,
                                        static_cast<const uint8_t*>(g.shared_w2.data), g.shared_w2.scale};
    const std::string name = layer_name(layer, "shared expert (fused)");
    DSV4_RETURN_IF_ERROR(cuda::check_moe_expert_table(&ptrs, 1, name));
    return put_table(m, std::vector<cuda::Fp8BlockExpertPtrs>{ptrs}, name);
}

Result<GpuMoe> put_moe(GpuModel& m, const MoeViews& v, int layer) {
    GpuMoe g;
    DSV4_ASSIGN_OR_RETURN(g.gate, put(m, v.gate, layer_name(layer, "ffn.gate")));
    DSV4_ASSIGN_OR_RETURN(g.gate_bias, put_f32(m, v.gate_bias, layer_name(layer, "ffn.gate.bias")));
    if (!v.tid2eid.empty()) {
        DSV4_ASSIGN_OR_RETURN(g.tid2eid, put_table(m, v.tid2eid, layer_name(layer, "tid2eid")));
    }
    DSV4_ASSIGN_OR_RETURN(g.shared_w1, put(m, v.shared.w1, layer_name(layer, "shared w1")));
    DSV4_ASSIGN_OR_RETURN(g.shared_w2, put(m, v.shared.w2, layer_name(layer, "shared w2")));
    DSV4_ASSIGN_OR_RETURN(g.shared_w3, put(m, v.shared.w3, layer_name(layer, "shared w3")));
    std::vector<cuda::DeviceExpertWeights> experts(v.experts.size());
    std::vector<cuda::Mxfp4ExpertPtrs> mxfp4(v.experts.size());
    bool all_mxfp4 = !v.experts.empty();
    for (size_t e = 0; e < v.experts.size(); ++e) {
        const std::string name = layer_name(layer, "expert ") + std::to_string(e);
        DSV4_ASSIGN_OR_RETURN(experts[e].w1, put(m, v.experts[e].w1, name + " w1"));
        DSV4_ASSIGN_OR_RETURN(experts[e].w2, put(m, v.experts[e].w2, name + " w2"));
        DSV4_ASSIGN_OR_RETURN(experts[e].w3, put(m, v.experts[e].w3, name + " w3"));
        const auto& x = experts[e];
        all_mxfp4 &= x.w1.format == WeightFormat::kMXFP4 && x.w2.format == WeightFormat::kMXFP4 &&
                     x.w3.format == WeightFormat::kMXFP4;
        mxfp4[e] = {static_cast<const uint8_t*>(x.w1.data), x.w1.scale, static_cast<const uint8_t*>(x.w3.data),
                    x.w3.scale, static_cast<const uint8_t*>(x.w2.data), x.w2.scale};
    }
    DSV4_ASSIGN_OR_RETURN(g.experts, put_table(m, experts, layer_name(layer, "expert table")));
    DSV4_ASSIGN_OR_RETURN(g.shared_fp8, put_fused_shared_expert(m, g, layer));
    if (all_mxfp4) {
        DSV4_ASSIGN_OR_RETURN(g.mxfp4, put_table(m, mxfp4, layer_name(layer, "MXFP4 expert table")));
        DSV4_ASSIGN_OR_RETURN(g.mxfp4_repacked, repack_layer_experts(m, mxfp4));
    }
    return g;
}

Result<GpuLayer> put_layer(GpuModel& m, const LayerViews& v) {
    GpuLayer l;
    l.index = v.index;
    l.kind = v.attn_kind;
    l.hash_routed = v.hash_routed;
    l.ratio = v.ratio;
    const int i = v.index;
    DSV4_ASSIGN_OR_RETURN(l.attn_norm, put_norm(m, v.attn_norm, layer_name(i, "attn_norm")));
    DSV4_ASSIGN_OR_RETURN(l.ffn_norm, put_norm(m, v.ffn_norm, layer_name(i, "ffn_norm")));
    DSV4_ASSIGN_OR_RETURN(l.hc_attn, put_hc(m, v.hc_attn, layer_name(i, "attn")));
    DSV4_ASSIGN_OR_RETURN(l.hc_ffn, put_hc(m, v.hc_ffn, layer_name(i, "ffn")));
    const AttentionViews& a = v.attn;
    GpuAttention& g = l.attn;
    DSV4_ASSIGN_OR_RETURN(g.wq_a, put(m, a.wq_a, layer_name(i, "attn.wq_a")));
    DSV4_ASSIGN_OR_RETURN(g.q_norm, put_norm(m, a.q_norm, layer_name(i, "attn.q_norm")));
    DSV4_ASSIGN_OR_RETURN(g.wq_b, put(m, a.wq_b, layer_name(i, "attn.wq_b")));
    DSV4_ASSIGN_OR_RETURN(g.wkv, put(m, a.wkv, layer_name(i, "attn.wkv")));
    DSV4_ASSIGN_OR_RETURN(g.kv_norm, put_norm(m, a.kv_norm, layer_name(i, "attn.kv_norm")));
    DSV4_ASSIGN_OR_RETURN(g.wo_a, put(m, a.wo_a, layer_name(i, "attn.wo_a")));
    DSV4_ASSIGN_OR_RETURN(g.wo_b, put(m, a.wo_b, layer_name(i, "attn.wo_b")));
    DSV4_ASSIGN_OR_RETURN(g.sink, put_f32_table(m, a.sink, layer_name(i, "attn.attn_sink")));
    if (v.ratio) {
        DSV4_ASSIGN_OR_RETURN(g.compressor, put_compressor(m, a.compressor, layer_name(i, "compressor")));
    }
    if (v.attn_kind == model::AttnKind::kCSA) {
        DSV4_ASSIGN_OR_RETURN(g.index_compressor,
                              put_compressor(m, a.index_compressor, layer_name(i, "indexer.compressor")));
        DSV4_ASSIGN_OR_RETURN(g.index_wq_b, put(m, a.index_wq_b, layer_name(i, "indexer.wq_b")));
        DSV4_ASSIGN_OR_RETURN(g.index_weights_proj,
                              put(m, a.index_weights_proj, layer_name(i, "indexer.weights_proj")));
    }
    DSV4_ASSIGN_OR_RETURN(l.ffn, put_moe(m, v.ffn, i));
    return l;
}

// A layer's matrices on the GPU (the norms, mixes and tables beside them are a few MB per layer at V4-Flash).
uint64_t layer_weight_bytes(const LayerViews& l) {
    uint64_t n = 0;
    for (const WeightView* w :
         {&l.attn.wq_a, &l.attn.wq_b, &l.attn.wkv, &l.attn.wo_a, &l.attn.wo_b, &l.attn.compressor.wkv,
          &l.attn.compressor.wgate, &l.attn.index_wq_b, &l.attn.index_compressor.wkv, &l.attn.index_compressor.wgate,
          &l.ffn.gate, &l.ffn.shared.w1, &l.ffn.shared.w2, &l.ffn.shared.w3})
        n += host_weight_bytes(*w);
    for (const backend::ExpertWeights& e : l.ffn.experts)
        n += host_weight_bytes(e.w1) + host_weight_bytes(e.w2) + host_weight_bytes(e.w3);
    return n;
}

// The matrices of a stage's layers, with the embedding / head where it holds them.
uint64_t stage_weight_bytes(const ModelViews& v, int64_t first, int64_t end) {
    uint64_t n = first == 0 ? host_weight_bytes(v.embed) : 0;
    if (end == int64_t(v.layers.size())) n += host_weight_bytes(v.head);
    for (int64_t i = first; i < end; ++i) n += layer_weight_bytes(v.layers[size_t(i)]);
    return n;
}

// The largest workspace any op of a pass of `rows` rows asks for.
size_t workspace_bytes(const GpuModel& m, int64_t rows) {
    const model::ModelConfig& c = m.cfg;
    const Precision p = m.precision;
    size_t n = 0;
    auto lin = [&](const DeviceWeightView& w, LinearOut out) {
        if (!w.empty()) n = std::max(n, cuda::sm90_linear_workspace_bytes(p, rows, w, out));
    };
    if (!m.head.empty()) n = std::max(n, cuda::sm90_linear_workspace_bytes(p, std::min(rows, kHeadChunkRows), m.head,
                                                                           LinearOut::kF32));
    for (const GpuLayer& l : m.layers) {
        const GpuAttention& a = l.attn;
        for (const DeviceWeightView* w : {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_b, &a.index_wq_b, &a.index_weights_proj})
            lin(*w, LinearOut::kBF16);
        for (const DeviceWeightView* w : {&a.compressor.wkv, &a.compressor.wgate, &a.index_compressor.wkv,
                                          &a.index_compressor.wgate, &l.ffn.gate})
            lin(*w, LinearOut::kF32);
        cuda::WoAArgs wo_a;
        wo_a.tokens = rows;
        wo_a.heads = c.num_heads;
        wo_a.groups = c.o_groups;
        wo_a.rank = c.o_lora_rank;
        wo_a.wo_a = a.wo_a;
        n = std::max(n, cuda::sm90_wo_a_workspace_bytes(p, wo_a));
        if (!l.ffn.shared_w1.empty())
            n = std::max(n, cuda::sm90_expert_workspace_bytes(p, rows, l.ffn.shared_w1, l.ffn.shared_w2));
    }
    const int64_t k = c.n_experts_per_token;
    n = std::max(n, cuda::sm90_routed_experts_workspace_bytes(p, rows, k, c.hidden_size, c.moe_inter_dim));
    if (p == Precision::kReference)
        n = std::max(n, cuda::sm90_mxfp4_moe_decode_workspace_bytes(std::min(rows, kMoeDecodeKernelMaxRows), k,
                                                                    c.n_routed_experts, c.hidden_size,
                                                                    c.moe_inter_dim));
    if (p == Precision::kReference && rows > kMoeDecodeKernelMaxRows)
        n = std::max(n, cuda::sm90_mxfp4_moe_prefill_workspace_bytes(rows, k, c.n_routed_experts, c.hidden_size,
                                                                     c.moe_inter_dim));
    return n;
}

// A decode branch's linears in one layer's attention, each with its output type.
struct BranchLinear {
    const DeviceWeightView* w;
    LinearOut out;
};

// The workspace a decode branch needs: the largest of its linears' over the layers, at the branch's rows.
template <class Linears>
size_t branch_workspace_bytes(const GpuModel& m, int64_t rows, Linears linears) {
    const int64_t r = std::min(rows, kAttnBranchMaxRows);
    size_t n = 0;
    for (const GpuLayer& l : m.layers)
        for (const BranchLinear& b : linears(l.attn))
            if (!b.w->empty()) n = std::max(n, cuda::sm90_linear_workspace_bytes(m.precision, r, *b.w, b.out));
    return n;
}

// m.attn_branch: the window K=V projection (gpu_attention.cpp).
size_t attn_branch_workspace_bytes(const GpuModel& m, int64_t rows) {
    return branch_workspace_bytes(m, rows, [](const GpuAttention& a) {
        return std::array<BranchLinear, 1>{{{&a.wkv, LinearOut::kBF16}}};
    });
}

// m.compress_branch: the main compressor's projections.
size_t compress_branch_workspace_bytes(const GpuModel& m, int64_t rows) {
    return branch_workspace_bytes(m, rows, [](const GpuAttention& a) {
        return std::array<BranchLinear, 2>{
            {{&a.compressor.wkv, LinearOut::kF32}, {&a.compressor.wgate, LinearOut::kF32}}};
    });
}

// m.index_branch: the indexer compressor's projections.
size_t index_branch_workspace_bytes(const GpuModel& m, int64_t rows) {
    return branch_workspace_bytes(m, rows, [](const GpuAttention& a) {
        return std::array<BranchLinear, 2>{
            {{&a.index_compressor.wkv, LinearOut::kF32}, {&a.index_compressor.wgate, LinearOut::kF32}}};
    });
}

// m.weights_branch: the indexer's head weights.
size_t weights_branch_workspace_bytes(const GpuModel& m, int64_t rows) {
    return branch_workspace_bytes(m, rows, [](const GpuAttention& a) {
        return std::array<BranchLinear, 1>{{{&a.index_weights_proj, LinearOut::kBF16}}};
    });
}

// m.heads_branch: the query heads' projection.
size_t heads_branch_workspace_bytes(const GpuModel& m, int64_t rows) {
    return branch_workspace_bytes(m, rows, [](const GpuAttention& a) {
        return std::array<BranchLinear, 1>{{{&a.wq_b, LinearOut::kBF16}}};
    });
}

// The largest workspace of split decode attention (CSA and HCA lists) and of the indexer's top-k over any row
// count up to the pass's: the split plan depends on the row count, so every count a step may have is asked.
size_t attention_workspace_bytes(const GpuModel& m, int64_t csa_cap, int64_t hca_cap) {
    const model::ModelConfig& c = m.cfg;
    size_t n = 0;
    for (int64_t r = 1; r <= m.pass.rows; ++r) {
        cuda::SparseAttnArgs a;
        a.tokens = r;
        a.heads = c.num_heads;
        a.kv_packed = m.precision == Precision::kReference;
        for (const int64_t width : {c.window, c.window + c.index_topk, c.window + hca_cap}) {  // SWA, CSA, HCA
            a.topk = width;
            n = std::max(n, cuda::sm90_sparse_attn_split_workspace_bytes(a, decode_split_options()));
        }
        cuda::TopKArgs t;
        t.rows = r;
        t.n = csa_cap;
        t.k = c.index_topk;
        n = std::max(n, cuda::sm90_topk_select_workspace_bytes(t));
    }
    return n;
}

Status alloc(DeviceBuffer& b, int64_t bytes, const char* what) {
    DSV4_ASSIGN_OR_RETURN(b, DeviceBuffer::allocate(size_t(std::max<int64_t>(bytes, 16)), what));
    return Status::ok();
}

}  // namespace

Status size_gpu_pass_for_cache(GpuModel& m) {
    const model::ModelConfig& c = m.cfg;
    GpuPass& s = m.pass;
    const GpuCache& k = m.cache;
    const int64_t R = s.rows, a = int64_t(m.act_bytes), hd = c.head_dim;
    const int64_t series = std::max((128 - 1 + R) * hd, (4 - 1 + R) * 2 * hd);
    DSV4_RETURN_IF_ERROR(alloc(s.series_kv, series * 4, "compressor series"));
    DSV4_RETURN_IF_ERROR(alloc(s.series_score, series * 4, "compressor series"));
    const int64_t entries = std::max(R, R / 4 + 2);
    DSV4_RETURN_IF_ERROR(alloc(s.pooled, entries * hd * a, "pooled entries"));
    DSV4_RETURN_IF_ERROR(alloc(s.entry_rows, entries * 4, "entry rows"));
    const int64_t csa_cap = 64 * k.csa.pages_per_session, hca_cap = 64 * k.hca.pages_per_session;
    DSV4_RETURN_IF_ERROR(alloc(s.idx, R * (c.window + std::max<int64_t>(c.index_topk, hca_cap)) * 4, "index lists"));
    // indexer scores: a decode step's rows (at most the sessions) at the capacity's width, else the budget's rows
    const int64_t score_row = std::max<int64_t>(csa_cap, 1) * a;
    const int64_t score_rows = std::min(R, std::max(std::min(R, k.sessions), m.index_scores_budget / score_row));
    DSV4_RETURN_IF_ERROR(alloc(s.index_scores, score_rows * score_row, "indexer scores"));
    // the select's chunked-path counters for a decode step's rows (kept zero: no memset node in the decode graph)
    DSV4_RETURN_IF_ERROR(
        alloc(s.select_counters, std::min(R, k.sessions) * cuda::kTopkSelectCounterWords * 4, "top-k select counters"));
    DSV4_RETURN_IF_ERROR(s.select_counters.fill_bytes(0));
    const int64_t hc_blocks = cuda::hc_wide_blocks(c.hidden_size);
    s.hc_wide_rows = hc_blocks > 0 ? std::min({R, k.sessions, cuda::kHcWideMaxTokens}) : 0;
    DSV4_RETURN_IF_ERROR(alloc(s.hc_tickets, s.hc_wide_rows * 4, "mHC collapse tickets"));
    DSV4_RETURN_IF_ERROR(s.hc_tickets.fill_bytes(0));
    DSV4_RETURN_IF_ERROR(alloc(s.hc_partials, s.hc_wide_rows * hc_blocks * 25 * 8, "mHC collapse partial sums"));
    DSV4_RETURN_IF_ERROR(alloc(s.index_topk, R * c.index_topk * 4, "indexer top-k"));
    DSV4_RETURN_IF_ERROR(alloc(s.token_pages, R * std::max<int64_t>(k.csa.pages_per_session, 1) * 4, "key pages"));
    // passes that can take the wgmma prefill kernel decode their K=V rows once (gpu_attention.cpp, decode_pass_rows)
    cuda::SparseAttnArgs probe;
    probe.tokens = R, probe.heads = c.num_heads;
    const int64_t local = cuda::sparse_attn_takes_prefill_kernel(m.precision, probe)
                              ? cuda::pass_local_rows(R, k.window, std::max(csa_cap, hca_cap))
                              : 0;
    DSV4_RETURN_IF_ERROR(alloc(s.pass_kv, local * hd * a, "pass K=V rows"));
    DSV4_RETURN_IF_ERROR(alloc(s.pass_row_src, local * 4, "pass K=V row numbers"));
    return alloc(s.attn_workspace, int64_t(attention_workspace_bytes(m, csa_cap, hca_cap)), "attention workspace");
}

Status make_gpu_pass(GpuModel& m, int64_t R) {
    const model::ModelConfig& c = m.cfg;
    GpuPass& s = m.pass;
    const int64_t a = int64_t(m.act_bytes), D = c.hidden_size, hc = c.hc_mult, H = c.num_heads, hd = c.head_dim;
    s.rows = R;
    const int64_t plan_bytes = R * 8 + R * 4 + R * 4;
    DSV4_RETURN_IF_ERROR(alloc(s.plan, plan_bytes, "step plan"));
    DSV4_ASSIGN_OR_RETURN(s.plan_host, cuda::PinnedBuffer::allocate(size_t(plan_bytes), "step plan"));
    s.positions = s.plan.as<int64_t>();
    s.tokens = reinterpret_cast<int32_t*>(s.plan.as<uint8_t>() + R * 8);
    s.slots = reinterpret_cast<int32_t*>(s.plan.as<uint8_t>() + R * 12);
    DSV4_RETURN_IF_ERROR(alloc(s.streams_a, R * hc * D * a, "hc streams"));
    DSV4_RETURN_IF_ERROR(alloc(s.streams_b, R * hc * D * a, "hc streams"));
    DSV4_RETURN_IF_ERROR(alloc(s.hc_x, R * D * a, "activations"));
    DSV4_RETURN_IF_ERROR(alloc(s.normed, R * D * a, "activations"));
    DSV4_RETURN_IF_ERROR(alloc(s.normed_codes, R * D, "quantised activations"));
    DSV4_RETURN_IF_ERROR(alloc(s.normed_scales, R * (D / 128) * 4, "quantised activations"));
    DSV4_RETURN_IF_ERROR(alloc(s.qr_codes, R * c.q_lora_rank, "quantised q lora"));
    DSV4_RETURN_IF_ERROR(alloc(s.qr_scales, R * (c.q_lora_rank / 128) * 4, "quantised q lora"));
    DSV4_RETURN_IF_ERROR(alloc(s.block_out, R * D * a, "activations"));
    DSV4_RETURN_IF_ERROR(alloc(s.pre, R * hc * 4, "hc pre"));
    DSV4_RETURN_IF_ERROR(alloc(s.mixes, R * (2 + hc) * hc * 4, "hc mixes"));
    DSV4_RETURN_IF_ERROR(alloc(s.post, R * hc * 4, "hc post"));
    DSV4_RETURN_IF_ERROR(alloc(s.comb, R * hc * hc * 4, "hc comb"));
    DSV4_RETURN_IF_ERROR(alloc(s.qr, R * c.q_lora_rank * a, "q lora"));
    DSV4_RETURN_IF_ERROR(alloc(s.q, R * H * hd * a, "queries"));
    DSV4_RETURN_IF_ERROR(alloc(s.attn, R * H * hd * a, "attention output"));
    DSV4_RETURN_IF_ERROR(alloc(s.z, R * c.o_groups * c.o_lora_rank * a, "wo_a output"));
    DSV4_RETURN_IF_ERROR(alloc(s.window_kv, R * hd * a, "window K=V"));
    DSV4_RETURN_IF_ERROR(alloc(s.proj_kv, R * 2 * hd * 4, "compressor projections"));
    DSV4_RETURN_IF_ERROR(alloc(s.proj_score, R * 2 * hd * 4, "compressor projections"));
    DSV4_RETURN_IF_ERROR(alloc(s.index_proj_kv, R * 2 * c.index_head_dim * 4, "indexer projections"));
    DSV4_RETURN_IF_ERROR(alloc(s.index_proj_score, R * 2 * c.index_head_dim * 4, "indexer projections"));
    DSV4_RETURN_IF_ERROR(alloc(s.index_q, R * c.index_n_heads * c.index_head_dim * a, "indexer queries"));
    DSV4_RETURN_IF_ERROR(alloc(s.index_w, R * c.index_n_heads * a, "indexer weights"));
    if (m.precision == Precision::kReference) {
        DSV4_RETURN_IF_ERROR(alloc(s.index_q_int, R * c.index_n_heads * c.index_head_dim, "indexer query integers"));
        DSV4_RETURN_IF_ERROR(alloc(s.index_q_exp, R * c.index_n_heads * 4, "indexer query exponents"));
    }
    DSV4_RETURN_IF_ERROR(alloc(s.router_logits, R * c.n_routed_experts * 4, "router logits"));
    DSV4_RETURN_IF_ERROR(alloc(s.moe_arrivals, 4, "MoE routing counter"));
    DSV4_RETURN_IF_ERROR(s.moe_arrivals.fill_bytes(0));
    DSV4_RETURN_IF_ERROR(alloc(s.route_idx, R * c.n_experts_per_token * 4, "routes"));
    DSV4_RETURN_IF_ERROR(alloc(s.route_w, R * c.n_experts_per_token * 4, "routes"));
    DSV4_RETURN_IF_ERROR(alloc(s.expert_out, R * c.n_experts_per_token * D * 4, "expert outputs"));
    DSV4_RETURN_IF_ERROR(alloc(s.shared_out, R * D * a, "shared expert output"));
    // logits only where the head is (the last stage of a pipeline): 0.5 MB a row at V4's vocabulary
    const int64_t head_rows = m.heads ? std::min(R, kHeadChunkRows) : 0;
    DSV4_RETURN_IF_ERROR(alloc(s.logits, head_rows * c.vocab_size * 4, "logits"));
    DSV4_ASSIGN_OR_RETURN(s.logits_host,
                          cuda::PinnedBuffer::allocate(size_t(head_rows * c.vocab_size * 4), "logits landing buffer"));
    s.logits_rows.reserve(size_t(head_rows));
    s.draws.reserve(size_t(head_rows));
    DSV4_RETURN_IF_ERROR(alloc(s.draw_params, head_rows * int64_t(sizeof(cuda::SampleRowParams)), "draw parameters"));
    DSV4_RETURN_IF_ERROR(alloc(s.draw_out, head_rows * int64_t(sizeof(cuda::SampleRowOut)), "draws"));
    DSV4_ASSIGN_OR_RETURN(
        s.draw_params_host,
        cuda::PinnedBuffer::allocate(size_t(head_rows) * sizeof(cuda::SampleRowParams), "draw parameters"));
    DSV4_ASSIGN_OR_RETURN(s.draw_out_host,
                          cuda::PinnedBuffer::allocate(size_t(head_rows) * sizeof(cuda::SampleRowOut), "draws"));
    DSV4_RETURN_IF_ERROR(
        alloc(s.draw_penalties, GpuPass::kDrawPenalties * int64_t(sizeof(cuda::SamplePenalty)), "draw penalty lists"));
    DSV4_ASSIGN_OR_RETURN(s.draw_penalties_host,
                          cuda::PinnedBuffer::allocate(size_t(GpuPass::kDrawPenalties) * sizeof(cuda::SamplePenalty),
                                                       "draw penalty lists"));
    s.penalty_counts.assign(size_t(c.vocab_size), 0);
    s.penalty_list.reserve(size_t(GpuPass::kDrawPenalties));
    DSV4_RETURN_IF_ERROR(alloc(s.workspace, int64_t(workspace_bytes(m, R)), "op workspace"));
    DSV4_RETURN_IF_ERROR(
        alloc(s.attn_branch_workspace, int64_t(attn_branch_workspace_bytes(m, R)), "attention branch workspace"));
    DSV4_RETURN_IF_ERROR(alloc(s.compress_branch_workspace, int64_t(compress_branch_workspace_bytes(m, R)),
                               "compressor branch workspace"));
    DSV4_RETURN_IF_ERROR(
        alloc(s.index_branch_workspace, int64_t(index_branch_workspace_bytes(m, R)), "indexer branch workspace"));
    DSV4_RETURN_IF_ERROR(alloc(s.weights_branch_workspace, int64_t(weights_branch_workspace_bytes(m, R)),
                               "head weights branch workspace"));
    DSV4_RETURN_IF_ERROR(
        alloc(s.heads_branch_workspace, int64_t(heads_branch_workspace_bytes(m, R)), "query heads branch workspace"));
    return Status::ok();
}

bool gpu_available(std::string* why) {
    Status st = []() -> Status {
        DSV4_ASSIGN_OR_RETURN(int count, cuda::device_count());
        if (count < 1) return unsupported("no CUDA GPU is visible");
        return cuda::check_device_supported(0, 0);
    }();
    if (!st && why) *why = st.message();
    return st.is_ok();
}

Result<DeviceWeightView> keep_gpu_weight(GpuModel& m, cuda::DeviceWeight d) { return keep(m, std::move(d)); }

namespace {

// What a stage needs besides its layers' weights and caches: the pass buffers (~100·D bytes a row: 0.41 MB at
// V4-Flash, where docs/perf.md counts ~0.4 MB) and 2.5 GiB for the rest, which grows with neither the layers nor the
// rows: the indexer scores (GpuModel::index_scores_budget), op workspaces, the CUDA context, cuBLASLt, decode graphs.
// Measured on an H200 (2026-12-05, 8 V4-Flash layers, 8,192-row passes): one stage took 33.86 GiB where 2 GiB
// planned 33.87, two stages 39.18 where they planned 38.99 (a stage beyond the first: ~5.3 GiB).
uint64_t stage_allowance_bytes(const model::ModelConfig& cfg, int64_t max_rows) {
    return uint64_t(max_rows) * 100 * uint64_t(cfg.hidden_size) + (uint64_t(5) << 29);
}

// What each layer and stage costs on its GPU (GpuPlacementCosts) at these pass and cache sizes.
GpuPlacementCosts placement_costs(const model::ModelConfig& cfg, const ModelViews& views, Precision precision,
                                  int64_t max_rows, const GpuCacheOptions& cache) {
    GpuPlacementCosts costs;
    for (const LayerViews& l : views.layers)
        costs.layer_bytes.push_back(layer_weight_bytes(l) + gpu_layer_cache_bytes(cfg, precision, l.ratio, max_rows,
                                                                                  cache.sessions, cache.max_context,
                                                                                  cache.tokens));
    costs.first_bytes = host_weight_bytes(views.embed);
    costs.last_bytes =
        host_weight_bytes(views.head) + uint64_t(std::min(max_rows, kHeadChunkRows) * cfg.vocab_size) * 4;
    costs.stage_bytes = stage_allowance_bytes(cfg, max_rows);
    return costs;
}

// The layer split over the GPUs named, or (none named) over the fewest GPUs from 0 up that hold the model. A GPU
// named n times gives each of its stages 1/n of its free memory. GPUs are asked for their free memory only as far
// as they are needed: asking makes the process a CUDA context on each (a few hundred MB).
Result<std::vector<GpuStagePlan>> plan_gpu_stages(const model::ModelConfig& cfg, const ModelViews& views,
                                                  Precision precision, int64_t max_rows, const GpuCacheOptions& cache,
                                                  std::span<const int> devices) {
    DSV4_ASSIGN_OR_RETURN(int count, cuda::device_count());
    if (count < 1) return unsupported("no CUDA GPU is visible; use --backend cpu");
    if (max_rows < 1) return invalid_argument("GPU pass rows must be >= 1");
    const GpuPlacementCosts costs = placement_costs(cfg, views, precision, max_rows, cache);
    const auto memory = [](int device, uint64_t share) -> Result<GpuMemory> {
        DSV4_RETURN_IF_ERROR(cuda::check_device_supported(device, 0));
        DSV4_ASSIGN_OR_RETURN(const cuda::DeviceInfo info, cuda::describe_device(device));
        return GpuMemory{device, info.free_bytes / share};
    };
    std::vector<GpuMemory> gpus;
    if (!devices.empty()) {
        for (int d : devices) {
            DSV4_ASSIGN_OR_RETURN(GpuMemory g, memory(d, uint64_t(std::count(devices.begin(), devices.end(), d))));
            gpus.push_back(g);
        }
        return place_gpu_stages(costs, gpus, true);
    }
    Status last = unsupported("no GPU");
    for (int d = 0; d < count; ++d) {
        Result<GpuMemory> g = memory(d, 1);
        if (!g.is_ok()) {
            if (d == 0) return g.status();  // GPU 0's own error when it is not a usable Hopper GPU
            continue;                       // another kind of GPU beside Hopper ones is left out
        }
        gpus.push_back(*g);
        Result<std::vector<GpuStagePlan>> plan = place_gpu_stages(costs, gpus, false);
        if (plan.is_ok()) return plan;
        last = plan.status();
    }
    return last;
}

}  // namespace

Result<std::shared_ptr<GpuModel>> load_gpu_model(const model::ModelConfig& cfg, const ModelViews& views,
                                                 Precision precision, int64_t max_rows, const GpuCacheOptions& cache,
                                                 std::span<const int> devices) {
    return build_gpu_pipeline(cfg, views, precision, max_rows, cache, devices, kCheckpointSource);
}

Result<std::shared_ptr<GpuModel>> build_gpu_pipeline(const model::ModelConfig& cfg, const ModelViews& views,
                                                     Precision precision, int64_t max_rows,
                                                     const GpuCacheOptions& cache, std::span<const int> devices,
                                                     const GpuWeightSource& source) {
    DSV4_ASSIGN_OR_RETURN(const std::vector<GpuStagePlan> plan,
                          plan_gpu_stages(cfg, views, precision, max_rows, cache, devices));
    // built last to first, each stage holding the next
    std::shared_ptr<GpuModel> next;
    for (size_t i = plan.size(); i-- > 0;) {
        const GpuStagePlan& p = plan[i];
        DSV4_ASSIGN_OR_RETURN(std::shared_ptr<GpuModel> m, build_gpu_model(cfg, views, precision, max_rows, source,
                                                                           {p.device, p.first_layer, p.end_layer}));
        DSV4_RETURN_IF_ERROR(resize_gpu_cache(*m, cache.sessions, cache.max_context, cache.tokens));
        m->planned_bytes = p.bytes;
        if (plan.size() > 1) {
            DSV4_ASSIGN_OR_RETURN(m->inputs_read, cuda::Event::create());
            if (i > 0) {  // the streams handed over while this stage may still run an earlier pass land here
                DSV4_ASSIGN_OR_RETURN(m->inbox_free, cuda::Event::create());
                DSV4_RETURN_IF_ERROR(alloc(m->inbox, max_rows * cfg.hc_mult * cfg.hidden_size * int64_t(m->act_bytes),
                                           "pipeline inbox"));
            }
        }
        if (next) {
            DSV4_ASSIGN_OR_RETURN(m->handoff, cuda::Event::create());
            DSV4_ASSIGN_OR_RETURN(bool direct, cuda::enable_peer_access(m->device, next->device));
            (void)direct;  // without peer access the handoff copies are staged through host memory, only slower
            next->shares.reserve(size_t(max_rows));  // the pass's shares with the next stage's sequences
        }
        m->next = std::move(next);
        next = std::move(m);
    }
    return next;
}

std::string gpu_placement(const GpuModel& m) {
    std::vector<GpuStagePlan> stages;
    for (const GpuModel* s = &m; s; s = s->next.get())
        stages.push_back({s->device, s->first_layer, s->end_layer, s->planned_bytes});
    return describe_gpu_stages(stages);
}

GpuModel::~GpuModel() {
    next.reset();
    (void)cuda::set_device(device);  // the members below are freed on their own device
    (void)stream.synchronize();      // after a pass left running (in_flight)
}

Result<std::shared_ptr<GpuModel>> build_gpu_model(const model::ModelConfig& cfg, const ModelViews& views,
                                                  Precision precision, int64_t max_rows, const GpuWeightSource& source,
                                                  const GpuStage& stage) {
    DSV4_ASSIGN_OR_RETURN(int count, cuda::device_count());
    if (count < 1) return unsupported("no CUDA GPU is visible; use --backend cpu");
    const int64_t layers = int64_t(views.layers.size());
    const int64_t end = stage.end_layer < 0 ? layers : stage.end_layer;
    if (stage.first_layer < 0 || stage.first_layer >= end || end > layers)
        return invalid_argument("GPU stage: layers [" + std::to_string(stage.first_layer) + ", " + std::to_string(end) +
                                ") are not a range of the model's " + std::to_string(layers));
    DSV4_RETURN_IF_ERROR(cuda::check_device_supported(stage.device, stage_weight_bytes(views, stage.first_layer, end)));
    DSV4_RETURN_IF_ERROR(cuda::set_device(stage.device));
    if (max_rows < 1) return invalid_argument("GPU pass rows must be >= 1");
    auto m = std::make_shared<GpuModel>();
    m->device = stage.device;
    m->first_layer = stage.first_layer;
    m->end_layer = end;
    m->source = &source;
    m->max_rows = max_rows;
    m->cfg = cfg;
    m->precision = precision;
    m->act_bytes = precision == Precision::kReference ? 2 : 4;
    DSV4_ASSIGN_OR_RETURN(m->stream, cuda::Stream::create());
    DSV4_ASSIGN_OR_RETURN(m->hc_branch, cuda::StreamFork::create());
    DSV4_ASSIGN_OR_RETURN(m->attn_branch, cuda::StreamFork::create());
    DSV4_ASSIGN_OR_RETURN(m->compress_branch, cuda::StreamFork::create());
    DSV4_ASSIGN_OR_RETURN(m->index_branch, cuda::StreamFork::create());
    DSV4_ASSIGN_OR_RETURN(m->weights_branch, cuda::StreamFork::create());
    DSV4_ASSIGN_OR_RETURN(m->heads_branch, cuda::StreamFork::create());
    m->embeds = stage.first_layer == 0;
    m->heads = end == layers;
    if (m->embeds) {
        DSV4_ASSIGN_OR_RETURN(m->embed, put(*m, views.embed, "embed"));
    }
    if (m->heads) {
        DSV4_ASSIGN_OR_RETURN(m->head, put(*m, views.head, "head"));
        DSV4_ASSIGN_OR_RETURN(m->norm, put_norm(*m, views.norm, "norm"));
        DSV4_ASSIGN_OR_RETURN(m->hc_head, put_hc(*m, views.hc_head, "head"));
    }
    m->owned.reserve(m->owned.size() + 64 * size_t(end - stage.first_layer));
    for (int64_t i = stage.first_layer; i < end; ++i) {
        DSV4_ASSIGN_OR_RETURN(GpuLayer g, put_layer(*m, views.layers[size_t(i)]));
        m->layers.push_back(g);
    }
    m->freqs_window = backend::rope_freqs(cfg.rope_theta, 1.0, cfg.original_max_position, cfg.beta_fast,
                                          cfg.beta_slow, int(cfg.rope_head_dim));
    m->freqs_compress = backend::rope_freqs(cfg.compress_rope_theta, cfg.rope_factor, cfg.original_max_position,
                                            cfg.beta_fast, cfg.beta_slow, int(cfg.rope_head_dim));
    DSV4_RETURN_IF_ERROR(make_gpu_pass(*m, max_rows));
    return m;
}

int64_t gpu_max_rows(const GpuModel& m) { return m.pass.rows; }

void set_gpu_graphs(GpuModel& m, bool enabled) {
    for (GpuModel* s = &m; s; s = s->next.get()) s->use_graphs = enabled;
}

void set_gpu_host_pool(GpuModel& m, ThreadPool* pool) {
    for (GpuModel* s = &m; s; s = s->next.get()) s->host_pool = pool;
}

uint64_t gpu_weight_bytes(const GpuModel& m) {
    uint64_t n = 0;
    for (const GpuModel* s = &m; s; s = s->next.get()) n += s->weight_bytes;
    return n;
}

}  // namespace dsv4::engine
