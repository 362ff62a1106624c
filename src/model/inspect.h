// inspect: what a checkpoint folder holds and what running it costs — the config, the per-layer schedule, tensor
// counts and bytes per dtype, logical parameters (with the MTP share), and GPU memory (weights as stored plus the
// per-sequence KV cache at a few context lengths, MODEL_SPEC §8.3). Opening validates everything the loader
// validates (io::Checkpoint, load_config, map_weights); any failure is one Status.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "dsv4/status.h"
#include "model/config.h"
#include "model/schema.h"

namespace dsv4::model {

struct KvCacheEstimate {
    int64_t tokens = 0;
    uint64_t bytes = 0;  // one sequence: window rings + compressed entries + indexer keys + compressor state
};

// Bytes of one sequence's decode state at `tokens` of context, in the engine's layout (DESIGN §5): window ring of
// min(tokens, window) entries per attention layer (MTP included), floor(tokens/ratio) compressed entries per
// CSA/HCA layer, all as 584-byte FP8 entries (448 e4m3 + 64 bf16 rope + 8 scale bytes); CSA indexer keys as e2m1
// + UE8M0 per 32 (68 bytes at 128 dims); f32 compressor state ((1+ov)*ratio x (1+ov)*width, keys and scores).
uint64_t kv_cache_bytes(const ModelConfig& c, int64_t tokens);
// Bytes of one FP8 KV entry (584 for head_dim 512, rope 64).
uint64_t kv_entry_bytes(const ModelConfig& c);

struct InspectReport {
    std::filesystem::path dir;
    ModelConfig config;
    Layout layout = Layout::kOfficial;
    int files = 0;
    struct DTypeTotals {
        DType dtype;
        int64_t tensors = 0;
        uint64_t bytes = 0;
    };
    std::vector<DTypeTotals> by_dtype;  // in kAllDTypes order, only dtypes present
    int64_t tensors = 0;
    uint64_t bytes = 0;
    int64_t params = 0;      // logical: packed FP4 bytes count two, scales and tid2eid none
    int64_t mtp_params = 0;  // of which in mtp.*
    bool has_mtp = false;    // the checkpoint carries the MTP block (official layout)
    std::vector<KvCacheEstimate> kv;  // 1K, 128K, 1M tokens
};

Result<InspectReport> inspect_checkpoint(const std::filesystem::path& dir);
std::string format_report_text(const InspectReport& r);
std::string format_report_json(const InspectReport& r);

}  // namespace dsv4::model
