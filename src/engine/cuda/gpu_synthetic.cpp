// Synthetic models and caches generated on the GPU for benchmarks (nothing is read from disk): every weight in its
// shipped format and shape (FP8 e4m3 + UE8M0 128x128 blocks, MXFP4 + UE8M0 per 32, BF16, F32), random codes in
// ranges that keep activations finite, and caches filled as if `position` tokens had been absorbed.
#include "engine/cuda/gpu_synthetic.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <string>

#include "backend/cuda/device.h"
#include "backend/cuda/kernels/kv_store/kv_store.h"
#include "backend/cuda/kernels/synthetic/synthetic.h"
#include "engine/cuda/gpu_internal.h"

namespace dsv4::engine {

using backend::WeightFormat;

namespace {

uint64_t next_seed() {
    static uint64_t seed = 0x5eed;
    return seed += 0x9e3779b97f4a7c15ull;
}

Status fill(GpuModel& m, void* data, int64_t count, cuda::FillKind kind, float lo = -1, float hi = 1,
            uint8_t e_lo = 120, uint8_t e_hi = 124) {
    cuda::FillArgs f;
    f.data = data;
    f.count = count;
    f.kind = kind;
    f.lo = lo;
    f.hi = hi;
    f.ue8m0_lo = e_lo;
    f.ue8m0_hi = e_hi;
    f.seed = next_seed();
    return cuda::sm90_fill_synthetic(f, m.stream.handle());
}

// Absent (rows == 0) stays empty. Magnitudes: FP8 codes up to 448 x 2^-14..-12, MXFP4 codes up to 6 x 2^-8..-6,
// bf16 matrices +-0.03 (typical trained weights), embeddings +-1.
Result<DeviceWeightView> synthetic_matrix(GpuModel& m, const WeightView& w, const std::string& name) {
    if (w.rows <= 0 || w.cols <= 0) return DeviceWeightView{};
    DSV4_ASSIGN_OR_RETURN(cuda::DeviceWeight d, cuda::allocate_weight(w.format, w.rows, w.cols, name.c_str()));
    const DeviceWeightView v = d.view();
    const int64_t n = w.rows * w.cols;
    void* data = const_cast<void*>(v.data);
    uint8_t* scale = const_cast<uint8_t*>(v.scale);
    switch (w.format) {
        case WeightFormat::kFP8Block:
            DSV4_RETURN_IF_ERROR(fill(m, data, n, cuda::FillKind::kE4M3));
            DSV4_RETURN_IF_ERROR(fill(m, scale, ((w.rows + 127) / 128) * ((w.cols + 127) / 128),
                                      cuda::FillKind::kUE8M0, 0, 0, 127 - 14, 127 - 12));
            break;
        case WeightFormat::kMXFP4:
            DSV4_RETURN_IF_ERROR(fill(m, data, n / 2, cuda::FillKind::kE2M1x2));
            DSV4_RETURN_IF_ERROR(fill(m, scale, w.rows * (w.cols / 32), cuda::FillKind::kUE8M0, 0, 0, 127 - 8, 127 - 6));
            break;
        case WeightFormat::kBF16: {
            const float a = name == "embed" ? 1.0f : 0.03f;
            DSV4_RETURN_IF_ERROR(fill(m, data, n, cuda::FillKind::kBF16, -a, a));
            break;
        }
        case WeightFormat::kF32: DSV4_RETURN_IF_ERROR(fill(m, data, n, cuda::FillKind::kF32, -0.03f, 0.03f)); break;
    }
    return keep_gpu_weight(m, std::move(d));
}

Result<const float*> synthetic_f32_table(GpuModel& m, const WeightView& w, const std::string& name) {
    if (w.rows <= 0 || w.cols <= 0) return static_cast<const float*>(nullptr);
    DSV4_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::allocate(size_t(w.rows * w.cols) * 4, name.c_str()));
    DSV4_RETURN_IF_ERROR(fill(m, b.data(), w.rows * w.cols, cuda::FillKind::kF32, -0.5f, 0.5f));
    m.weight_bytes += b.bytes();
    m.tables.push_back(std::move(b));
    return m.tables.back().as<const float>();
}

Result<DeviceWeightView> synthetic_norm(GpuModel& m, const WeightView& w, const std::string& name) {
    if (w.rows <= 0 || w.cols <= 0) return DeviceWeightView{};
    DSV4_ASSIGN_OR_RETURN(cuda::DeviceWeight d, cuda::allocate_weight(WeightFormat::kBF16, w.rows, w.cols, name.c_str()));
    DSV4_RETURN_IF_ERROR(fill(m, const_cast<void*>(d.view().data), w.rows * w.cols, cuda::FillKind::kBF16, 0.9f, 1.1f));
    return keep_gpu_weight(m, std::move(d));
}

const GpuWeightSource kSyntheticSource{synthetic_matrix, synthetic_f32_table, synthetic_norm};

WeightView shape(WeightFormat f, int64_t rows, int64_t cols) { return WeightView{f, rows, cols, nullptr, nullptr}; }

HcViews hc_views(const model::ModelConfig& c, int64_t mixes) {
    return {shape(WeightFormat::kF32, mixes, c.hc_mult * c.hidden_size), shape(WeightFormat::kF32, 1, mixes),
            shape(WeightFormat::kF32, 1, mixes == c.hc_mult ? 1 : 3)};
}

CompressorViews compressor_views(const model::ModelConfig& c, int64_t ratio, int64_t dim, bool overlap) {
    const int64_t width = (overlap ? 2 : 1) * dim;
    return {shape(WeightFormat::kBF16, width, c.hidden_size), shape(WeightFormat::kBF16, width, c.hidden_size),
            shape(WeightFormat::kF32, ratio, width), shape(WeightFormat::kBF16, 1, dim)};
}

// The shapes and formats of every weight of layer i of an official checkpoint (MODEL_SPEC §9).
LayerViews layer_views(const model::ModelConfig& c, int i, std::mt19937_64& rng) {
    const auto fp8 = [](int64_t r, int64_t k) { return shape(WeightFormat::kFP8Block, r, k); };
    const int64_t D = c.hidden_size, H = c.num_heads, hd = c.head_dim, I = c.moe_inter_dim;
    LayerViews l;
    l.index = i;
    l.attn_kind = c.attn_kind(i);
    l.ratio = c.compress_ratios[size_t(i)];
    l.hash_routed = i < c.num_hash_layers;
    l.attn_norm = shape(WeightFormat::kBF16, 1, D);
    l.ffn_norm = shape(WeightFormat::kBF16, 1, D);
    l.hc_attn = hc_views(c, c.hc_mix_dim());
    l.hc_ffn = hc_views(c, c.hc_mix_dim());
    AttentionViews& a = l.attn;
    a.sink = shape(WeightFormat::kF32, 1, H);
    a.wq_a = fp8(c.q_lora_rank, D);
    a.q_norm = shape(WeightFormat::kBF16, 1, c.q_lora_rank);
    a.wq_b = fp8(H * hd, c.q_lora_rank);
    a.wkv = fp8(hd, D);
    a.kv_norm = shape(WeightFormat::kBF16, 1, hd);
    a.wo_a = fp8(c.o_groups * c.o_lora_rank, c.o_group_in());
    a.wo_b = fp8(D, c.o_groups * c.o_lora_rank);
    const bool csa = l.attn_kind == model::AttnKind::kCSA;
    if (l.ratio) a.compressor = compressor_views(c, l.ratio, hd, csa);
    if (csa) {
        a.index_compressor = compressor_views(c, l.ratio, c.index_head_dim, true);
        a.index_wq_b = fp8(c.index_n_heads * c.index_head_dim, c.q_lora_rank);
        a.index_weights_proj = shape(WeightFormat::kBF16, c.index_n_heads, D);
    }
    MoeViews& f = l.ffn;
    const int64_t E = c.n_routed_experts, K = c.n_experts_per_token;
    f.gate = shape(WeightFormat::kBF16, E, D);
    if (l.hash_routed) {  // K distinct experts per token id
        f.tid2eid.resize(size_t(c.vocab_size * K));
        std::vector<int64_t> ids(static_cast<size_t>(E));
        std::iota(ids.begin(), ids.end(), 0);
        for (int64_t t = 0; t < c.vocab_size; ++t) {
            for (int64_t k = 0; k < K; ++k) std::swap(ids[size_t(k)], ids[size_t(k + int64_t(rng() % uint64_t(E - k)))]);
            std::copy(ids.begin(), ids.begin() + K, f.tid2eid.begin() + t * K);
        }
    } else {
        f.gate_bias = shape(WeightFormat::kF32, 1, E);
    }
    if (c.n_shared_experts > 0) f.shared = {fp8(I, D), fp8(D, I), fp8(I, D)};
    const auto fp4 = [](int64_t r, int64_t k) { return shape(WeightFormat::kMXFP4, r, k); };
    f.experts.assign(size_t(E), backend::ExpertWeights{fp4(I, D), fp4(D, I), fp4(I, D)});
    return l;
}

}  // namespace

Result<std::shared_ptr<GpuModel>> make_synthetic_gpu_model(const model::ModelConfig& cfg, backend::Precision precision,
                                                           int64_t max_rows, std::span<const int> devices) {
    std::mt19937_64 rng(42);
    ModelViews v;
    v.embed = shape(WeightFormat::kBF16, cfg.vocab_size, cfg.hidden_size);
    v.head = shape(WeightFormat::kBF16, cfg.vocab_size, cfg.hidden_size);
    v.norm = shape(WeightFormat::kBF16, 1, cfg.hidden_size);
    v.hc_head = hc_views(cfg, cfg.hc_mult);
    for (int i = 0; i < int(cfg.num_layers); ++i) v.layers.push_back(layer_views(cfg, i, rng));
    DSV4_ASSIGN_OR_RETURN(
        std::shared_ptr<GpuModel> m,
        build_gpu_pipeline(cfg, v, precision, max_rows, GpuCacheOptions{1, 4096, 4096}, devices, kSyntheticSource));
    for (GpuModel* s = m.get(); s; s = s->next.get()) {
        DSV4_RETURN_IF_ERROR(cuda::set_device(s->device));
        DSV4_RETURN_IF_ERROR(s->stream.synchronize());
    }
    return m;
}

namespace {

Status fill_stage_cache(GpuModel& m) {
    GpuCache& c = m.cache;
    const bool ref = m.precision == backend::Precision::kReference;
    const cuda::FillKind act = ref ? cuda::FillKind::kBF16 : cuda::FillKind::kF32;
    const int64_t a = int64_t(m.act_bytes), chunk = 4096;
    // random rows, packed into every pool row (packing keeps the stored codes and scales valid)
    DSV4_ASSIGN_OR_RETURN(DeviceBuffer rows, DeviceBuffer::allocate(size_t(chunk * 512 * a), "synthetic rows"));
    DSV4_RETURN_IF_ERROR(fill(m, rows.data(), chunk * 512, act, -1.0f, 1.0f));
    for (GpuLayerCache& l : c.layers) {
        const int64_t kv_rows = int64_t(l.kv.bytes()) / c.kv_row_bytes;
        for (int64_t r = 0; r < kv_rows; r += chunk) {
            cuda::KvPackArgs k;
            k.rows = rows.data();
            k.n = std::min(chunk, kv_rows - r);
            k.dst_first = r;
            k.pool = l.kv.data();
            DSV4_RETURN_IF_ERROR(cuda::sm90_kv_pack(m.precision, k, m.stream.handle()));
        }
        const int64_t key_rows = c.key_row_bytes ? int64_t(l.keys.bytes()) / c.key_row_bytes : 0;
        for (int64_t r = 0; l.keys.bytes() > 16 && r < key_rows; r += chunk * 4) {
            cuda::KeyPackArgs k;
            k.rows = rows.data();
            k.n = std::min(chunk * 4, key_rows - r);
            k.dst_first = r;
            k.pool = l.keys.data();
            DSV4_RETURN_IF_ERROR(cuda::sm90_key_pack(m.precision, k, m.stream.handle()));
        }
        for (DeviceBuffer* b : {&l.open_kv, &l.open_score, &l.prev_kv, &l.prev_score, &l.iopen_kv, &l.iopen_score,
                                &l.iprev_kv, &l.iprev_score})
            if (b->bytes() > 16) DSV4_RETURN_IF_ERROR(fill(m, b->data(), int64_t(b->bytes()) / 4, cuda::FillKind::kF32));
    }
    return m.stream.synchronize();
}

}  // namespace

Status fill_gpu_cache_synthetic(GpuModel& m) {
    for (GpuModel* s = &m; s; s = s->next.get()) {
        DSV4_RETURN_IF_ERROR(cuda::set_device(s->device));
        DSV4_RETURN_IF_ERROR(fill_stage_cache(*s));
    }
    return Status::ok();
}

Status set_gpu_sequence_position(GpuModel& m, GpuSequence& s, int64_t position) {
    if (position > s.max_context) return invalid_argument("synthetic position beyond the sequence's context");
    GpuSequence* q = &s;
    for (GpuModel* stage = &m; stage; stage = stage->next.get(), q = q->next.get()) {
        if (!q || q->model != stage) return internal_error("set_gpu_sequence_position: a sequence of another model");
        DSV4_RETURN_IF_ERROR(cuda::set_device(stage->device));
        DSV4_RETURN_IF_ERROR(reserve_gpu_pages(*stage, *q, position));
        q->position = position;
        DSV4_RETURN_IF_ERROR(stage->stream.synchronize());
    }
    return Status::ok();
}

}  // namespace dsv4::engine
