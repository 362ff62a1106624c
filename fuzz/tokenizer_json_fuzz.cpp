// libFuzzer target: Tokenizer::from_file on an arbitrary tokenizer.json. Run through scripts/fuzz tokenizer_json.
// The checks live in entry/tokenizer_json_entry.h so that tests/unit/fuzz_replay/ replays committed inputs through the same code.
#include <cstddef>
#include <cstdint>
#include <span>

#include "entry/tokenizer_json_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    dsv4::fuzz::tokenizer_json_one_input(std::span<const uint8_t>(data, size));
    return 0;
}
