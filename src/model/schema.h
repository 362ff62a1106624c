// The checkpoint schema: every tensor a DeepSeek-V4 checkpoint of a given config holds, with its name, storage
// dtype and shape, in either naming scheme (MODEL_SPEC §9 official, §9.8 transformers). One source of truth for
// the weight map's validation, make-model's writer, inspect's counts and the header-only size checks.
#pragma once

#include <cstdint>
#include <string>
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
std::vector<TensorSpec> checkpoint_schema(const ModelConfig& c, Layout layout);

}  // namespace dsv4::model
