// The weight map: every tensor of a checkpoint bound to its place in one per-layer struct, from either naming
// scheme (MODEL_SPEC §9 official, §9.8 transformers; the layout is detected from the names) and any accepted
// encoding (docs/checkpoint-formats.md). A WeightRef points into the checkpoint's memory mapping; it stays valid
// while the io::Checkpoint lives. map_weights validates everything at once: missing, unexpected, mis-shaped and
// mis-typed tensors are reported together in one Status.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "dsv4/status.h"
#include "model/config.h"
#include "model/schema.h"

namespace dsv4::io {
class Checkpoint;
}

namespace dsv4::model {

// How a tensor's bytes encode its logical values.
enum class WeightFormat : uint8_t {
    kNone,         // not present (an optional slot, e.g. gate.bias of a hash layer)
    kF32,
    kBF16,
    kF16,
    kFP8Block128,  // e4m3 [out, in] + one scale per 128x128 block [ceil(out/128), ceil(in/128)], UE8M0 or F32
    kMXFP4,        // e2m1 packed two per byte (low nibble = even input) [out, in/2] + UE8M0 per 32 inputs [out, in/32]
    kNVFP4,        // same packing [out, in/2] + e4m3 per 16 inputs [out, in/16] + one F32 global scale
    kI64,          // integer tables (tid2eid)
    kI32,
};
const char* weight_format_name(WeightFormat f);

struct WeightRef {
    std::string name;                // tensor name in the checkpoint (the merged tensor for transformers experts)
    WeightFormat format = WeightFormat::kNone;
    DType dtype = DType::kU8;        // storage dtype of `data`
    const uint8_t* data = nullptr;   // start of the stored tensor (not of the slice: see row_offset)
    std::vector<int64_t> shape;      // LOGICAL shape: [out, in] for linears (unpacked), as stored otherwise
    int64_t row_offset = 0;          // first row of this matrix inside the stored [total_rows, in] tensor
    // Scales (block / group formats only).
    const uint8_t* scale = nullptr;
    DType scale_dtype = DType::kU8;
    std::vector<int64_t> scale_shape;  // of the whole scale tensor
    float global_scale = 1.0f;         // NVFP4 only (read from `.scale_2` at load)

    bool present() const { return format != WeightFormat::kNone; }  // data may be null for header-only sets
    int64_t rows() const { return shape.empty() ? 0 : shape.size() == 1 ? 1 : shape[0]; }
    int64_t cols() const { return shape.empty() ? 0 : shape.back(); }
    int64_t numel() const;
};

struct HyperConnWeights {
    WeightRef fn;     // [(2+hc)*hc, hc*D] f32 (the head's: [hc, hc*D])
    WeightRef base;   // [(2+hc)*hc] (head: [hc])
    WeightRef scale;  // [3] (head: [1])
};

struct CompressorWeights {
    WeightRef wkv;    // [(1+ov)*c, D]   ov = 1 for CSA (ratio 4)
    WeightRef wgate;  // [(1+ov)*c, D]
    WeightRef ape;    // [ratio, (1+ov)*c] f32
    WeightRef norm;   // [c]
    bool present() const { return wkv.present(); }
};

struct IndexerWeights {
    WeightRef wq_b;          // [index_heads*128, q_lora_rank]
    WeightRef weights_proj;  // [index_heads, D]
    CompressorWeights compressor;  // c = 128, ratio 4
    bool present() const { return wq_b.present(); }
};

struct AttentionWeights {
    WeightRef sink;     // [H] f32
    WeightRef wq_a;     // [q_lora_rank, D]
    WeightRef q_norm;   // [q_lora_rank]
    WeightRef wq_b;     // [H*512, q_lora_rank]
    WeightRef wkv;      // [512, D]
    WeightRef kv_norm;  // [512]
    WeightRef wo_a;     // [g*r, H/g*512]
    WeightRef wo_b;     // [D, g*r]
    CompressorWeights compressor;  // CSA and HCA layers
    IndexerWeights indexer;        // CSA layers
};

struct ExpertWeights {
    WeightRef w1;  // gate [I, D]
    WeightRef w2;  // down [D, I]
    WeightRef w3;  // up   [I, D]
};

struct MoEWeights {
    WeightRef gate;       // router [E, D]
    WeightRef gate_bias;  // [E] f32, score-routed layers
    WeightRef tid2eid;    // [vocab, top-k] int, hash-routed layers (ids validated < E at load)
    ExpertWeights shared;
    std::vector<ExpertWeights> experts;  // [E]
};

struct LayerWeights {
    int index = 0;  // 0..L-1, or L for the MTP block
    AttnKind attn_kind = AttnKind::kSWA;
    RouteKind route_kind = RouteKind::kScore;
    int compress_ratio = 0;
    WeightRef attn_norm, ffn_norm;  // [D]
    HyperConnWeights hc_attn, hc_ffn;
    AttentionWeights attn;
    MoEWeights ffn;
};

struct MtpWeights {
    LayerWeights block;
    WeightRef e_proj, h_proj;        // [D, D]
    WeightRef enorm, hnorm, norm;    // [D]
    HyperConnWeights hc_head;
};

struct ModelWeights {
    Layout layout = Layout::kOfficial;
    WeightRef embed;  // [vocab, D]
    WeightRef head;   // [vocab, D]
    WeightRef norm;   // [D]
    HyperConnWeights hc_head;
    std::vector<LayerWeights> layers;  // [L]
    std::optional<MtpWeights> mtp;     // official layout with num_mtp_layers 1
};

// What map_weights needs to know of a tensor; io::Checkpoint entries are turned into these, tests build them.
struct TensorInfo {
    std::string name;
    DType dtype = DType::kU8;
    std::vector<int64_t> shape;
    const uint8_t* data = nullptr;  // may be null for header-only checks (then tid2eid is not range-checked)
};

// Binds every tensor of `ckpt` for config `c`. One error lists every missing / unexpected / mis-shaped /
// mis-typed tensor (up to 20 lines, then "... and N more"). The transformers layout carries no MTP block and
// ignores mtp.* tensors (as transformers does); the official layout needs mtp.0.* exactly when
// c.num_mtp_layers is 1.
Result<ModelWeights> map_weights(const io::Checkpoint& ckpt, const ModelConfig& c);
Result<ModelWeights> map_weights(const std::vector<TensorInfo>& tensors, const ModelConfig& c,
                                 std::string_view source = "checkpoint");
// The layout a tensor set is written in, from its names (embed.weight vs model.embed_tokens.weight).
Result<Layout> detect_layout(const std::vector<TensorInfo>& tensors);

// Dequantises rows [row_begin, row_begin + row_count) of a 2-D weight (or a 1-D one as a single row) to f32,
// row-major [row_count, cols()], exactly (every format's value is representable in f32; NVFP4 rounds once at
// the global scale). Integer tables are converted to float. Bounds are the caller's responsibility.
void dequantize_rows(const WeightRef& w, int64_t row_begin, int64_t row_count, float* out);

}  // namespace dsv4::model
