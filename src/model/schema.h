// The checkpoint schema: every tensor a DeepSeek-V4 checkpoint of a given config holds, with its name, storage
// dtype and shape, in either naming scheme (MODEL_SPEC §9 official, §9.8 transformers). One source of truth for
// the weight map's validation, make-model's writer, inspect's counts and the header-only size checks.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"

namespace dsv4::model {

enum class Layout : uint8_t { kOfficial, kTransformers };
const char* layout_name(Layout l);  // "official", "transformers"

enum class TensorRole : uint8_t {
    kWeight,      // counts towards logical parameters
    kPackedFP4,   // a weight whose bytes each hold two e2m1 codes: counts 2 parameters per byte
    kScale,       // block / group scale sidecar: not a parameter
    kTable,       // int64 tid2eid: not a parameter
};

struct TensorSpec {
    std::string name;
    DType dtype;                  // what make-model writes
    std::vector<int64_t> shape;
    TensorRole role = TensorRole::kWeight;
    int64_t numel() const;
    uint64_t nbytes() const;
    int64_t logical_params() const;  // 0 for scales and tables; 2 per byte for packed FP4
};

// All tensors of a checkpoint with config `c` (main layers and, when c.num_mtp_layers > 0, the MTP block), in a
// stable order (globals, then layer by layer, then mtp).
// Official layout (MODEL_SPEC §9.1-9.6): dense linears FP8 e4m3 `.weight` + F8_E8M0 `.scale` [ceil(out/128),
// ceil(in/128)]; routed experts per c.expert_format: MXFP4 I8 [out, in/2] + F8_E8M0 `.scale` [out, in/32];
// NVFP4 U8 [out, in/2] + F8_E4M3 `.scale` [out, in/16] + F32 `.scale_2` [1]; FP8 F8_E4M3 [out, in] + F32 `.scale`
// [ceil(out/128), ceil(in/128)] (the -Base checkpoints, MODEL_SPEC §12).
// Transformers layout (§9.8): transformers names, every quantised linear stored dequantised as BF16 without
// scales, routed experts merged per layer into `mlp.experts.gate_up_proj` [E, 2I, D] (w1 rows, then w3 rows) and
// `mlp.experts.down_proj` [E, D, I]; no MTP block (transformers neither builds nor saves it), whatever
// c.num_mtp_layers says.
std::vector<TensorSpec> checkpoint_schema(const ModelConfig& c, Layout layout);

// Totals over a schema: what inspect prints and what the published checkpoint figures are checked against.
struct SchemaTotals {
    int64_t tensors = 0;
    int64_t logical_params = 0;
    uint64_t bytes = 0;
};
SchemaTotals schema_totals(const std::vector<TensorSpec>& specs);

// ---- The model's logical tensors, before any encoding (shared by the schema and the weight map) ----

enum class ParamKind : uint8_t {
    kBF16,    // stored BF16 in the official layout: norms, embed, head, compressor wkv/wgate, router, weights_proj
    kF32,     // stored F32: mHC fn/base/scale, attn_sink, compressor ape, router bias
    kLinear,  // a dense linear [out, in]: FP8 + 128x128 block scales officially (wo_a included, MODEL_SPEC §9.2)
    kExpert,  // a routed-expert linear [out, in]: MXFP4 / NVFP4 / FP8 per ModelConfig::expert_format
    kTable,   // tid2eid [vocab, top-k] int64
};

struct LogicalTensor {
    std::string name;            // official name of the main tensor, e.g. "layers.3.attn.wq_a.weight"
    std::vector<int64_t> shape;  // logical shape ([out, in] for linears, unpacked)
    ParamKind kind;
};

// Official-order list of every logical tensor: globals, layers 0..L-1, then (include_mtp and c.num_mtp_layers > 0)
// the MTP block.
std::vector<LogicalTensor> logical_tensors(const ModelConfig& c, bool include_mtp);

// The transformers name of an official tensor name (MODEL_SPEC §9.8); routed-expert tensors have none (they are
// merged: see merged_expert_names). Returns an empty string for names outside the scheme (e.g. mtp.*).
std::string transformers_name(const std::string& official);
// The merged transformers expert tensors of main layer `layer`: {gate_up_proj, down_proj}.
std::pair<std::string, std::string> merged_expert_names(int layer);
// The scale sidecar names of an official linear `X.weight`: "X.scale" and (NVFP4) "X.scale_2".
std::string scale_name(const std::string& weight_name);
std::string global_scale_name(const std::string& weight_name);

}  // namespace dsv4::model
