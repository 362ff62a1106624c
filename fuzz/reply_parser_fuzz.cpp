// libFuzzer target: chat::ReplyParser on arbitrary text fed in pieces. Run through scripts/fuzz reply_parser.
// The checks live in entry/reply_parser_entry.h so that tests/unit/fuzz_replay/ replays committed inputs through the same code.
#include <cstddef>
#include <cstdint>
#include <span>

#include "entry/reply_parser_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    dsv4::fuzz::reply_parser_one_input(std::span<const uint8_t>(data, size));
    return 0;
}
