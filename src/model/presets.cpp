// Built-in configurations: the two shipped checkpoints (MODEL_SPEC §2.1 values, §3 schedules) and a tiny model
// that keeps every fixed width of the architecture (head_dim 512, rope 64, indexer 128, window 128) and covers
// SWA, CSA and HCA layers, hash and score routing and an MTP block, for tests and demos.
#include "model/config.h"

namespace dsv4::model {
namespace {

// [first..., then (4, 128) repeated `pairs` times, then 4 for the last main layer, then 0 for the MTP slot]
std::vector<int> alternating_schedule(std::vector<int> first, int pairs) {
    std::vector<int> r = std::move(first);
    for (int i = 0; i < pairs; ++i) {
        r.push_back(4);
        r.push_back(128);
    }
    r.push_back(4);
    r.push_back(0);
    return r;
}

ModelConfig flash() {
    ModelConfig c;  // the struct's defaults are V4-Flash's values
    c.name = "flash";
    c.compress_ratios = alternating_schedule({0, 0}, 20);  // 44 entries: SWA,SWA, CSA/HCA x20, CSA, MTP SWA
    return c;
}

ModelConfig pro() {
    ModelConfig c = flash();
    c.name = "pro";
    c.hidden_size = 7168;
    c.num_layers = 61;
    c.num_heads = 128;
    c.q_lora_rank = 1536;
    c.o_groups = 16;
    c.index_topk = 1024;
    c.n_routed_experts = 384;
    c.moe_inter_dim = 3072;
    c.routed_scaling_factor = 2.5;
    c.compress_ratios = alternating_schedule({128, 128}, 29);  // 62 entries: HCA,HCA, CSA/HCA x29, CSA, MTP SWA
    return c;
}

ModelConfig tiny() {
    ModelConfig c = flash();
    c.name = "tiny";
    c.vocab_size = 1024;
    c.hidden_size = 128;
    c.num_layers = 5;
    c.num_heads = 4;
    c.q_lora_rank = 128;
    c.o_groups = 2;
    c.o_lora_rank = 128;
    c.compress_ratios = {0, 4, 128, 4, 128, 0};  // SWA, CSA, HCA, CSA, HCA; MTP SWA
    c.index_n_heads = 4;
    c.index_topk = 8;
    c.n_routed_experts = 8;
    c.n_experts_per_token = 2;
    c.moe_inter_dim = 128;
    c.num_hash_layers = 3;  // layers 0..2 hash-routed (SWA, CSA, HCA), 3..4 and MTP score-routed
    c.num_mtp_layers = 1;
    return c;
}

}  // namespace

Result<ModelConfig> preset_config(std::string_view name) {
    ModelConfig c;
    if (name == "flash") c = flash();
    else if (name == "pro") c = pro();
    else if (name == "tiny") c = tiny();
    else return invalid_argument("unknown preset '" + std::string(name) + "' (want flash, pro or tiny)");
    DSV4_RETURN_IF_ERROR(validate_config(c));
    return c;
}

}  // namespace dsv4::model
