// libFuzzer target: model::parse_config_json (with validation) on arbitrary text. Run through scripts/fuzz model_config.
// The checks live in entry/model_config_entry.h so that tests/unit/fuzz_replay/ replays committed inputs through the same code.
#include <cstddef>
#include <cstdint>
#include <span>

#include "entry/model_config_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    dsv4::fuzz::model_config_one_input(std::span<const uint8_t>(data, size));
    return 0;
}
