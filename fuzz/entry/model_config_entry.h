// Fuzz entry point: model::parse_config_json (with validate_config) on arbitrary text. A config that parses must be
// valid, have one compress ratio per layer (+ MTP), and survive a round trip through config_to_json in both styles.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "fuzz_check.h"
#include "model/config.h"

namespace dsv4::fuzz {

inline void model_config_one_input(std::span<const uint8_t> input) {
    const std::string_view text(reinterpret_cast<const char*>(input.data()), input.size());
    auto parsed = model::parse_config_json(text, "fuzz/config.json");
    if (!parsed.is_ok()) {
        check(parsed.status().message().find("fuzz/config.json") != std::string::npos, "error does not name the file");
        return;
    }
    const model::ModelConfig& c = parsed.value();
    check(validate_config(c).is_ok(), "a parsed config fails validate_config");
    check(static_cast<int64_t>(c.compress_ratios.size()) == c.num_layers + 1, "compress_ratios is not L + 1 long");
    for (int layer = 0; layer <= c.num_layers; ++layer) (void)c.attn_kind(layer);
    for (bool transformers_style : {false, true}) {
        auto again = model::parse_config_json(model::config_to_json(c, transformers_style), "fuzz/round_trip.json");
        check(again.is_ok(), "config_to_json output does not parse back");
        const model::ModelConfig& d = again.value();
        check(d.num_layers == c.num_layers && d.compress_ratios == c.compress_ratios &&
                  d.hidden_size == c.hidden_size && d.num_hash_layers == c.num_hash_layers &&
                  d.rope_head_dim == c.rope_head_dim && d.expert_format == c.expert_format,
              "config_to_json round trip changed the config");
    }
}

}  // namespace dsv4::fuzz
