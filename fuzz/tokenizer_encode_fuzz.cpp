// libFuzzer target: encoding arbitrary bytes with the real DeepSeek-V4 tokenizer. Run through scripts/fuzz tokenizer_encode.
// The V4 tokenizer comes from entry/fuzz_tokenizer.h, loaded at start-up; the checks live in
// entry/tokenizer_encode_entry.h so that tests/unit/fuzz_replay/ replays committed inputs through the same code.
#include <cstddef>
#include <cstdint>
#include <span>

#include "entry/fuzz_tokenizer.h"
#include "entry/tokenizer_encode_entry.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    dsv4::fuzz::fuzz_tokenizer();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    dsv4::fuzz::tokenizer_encode_one_input(dsv4::fuzz::fuzz_tokenizer(), std::span<const uint8_t>(data, size));
    return 0;
}
