// libFuzzer target: chat::encode_messages on arbitrary request JSON. Run through scripts/fuzz chat_encoder.
// The checks live in entry/chat_encoder_entry.h so that tests/unit/fuzz_replay/ replays committed inputs through the same code.
#include <cstddef>
#include <cstdint>
#include <span>

#include "entry/chat_encoder_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    dsv4::fuzz::chat_encoder_one_input(std::span<const uint8_t>(data, size));
    return 0;
}
