// libFuzzer target: the server's OpenAI request parsing (body -> ParsedRequest), no sockets. Run through scripts/fuzz openai_request.
// The V4 tokenizer comes from entry/fuzz_tokenizer.h, loaded at start-up; the checks live in
// entry/openai_request_entry.h so that tests/unit/fuzz_replay/ replays committed inputs through the same code.
#include <cstddef>
#include <cstdint>
#include <span>

#include "entry/fuzz_tokenizer.h"
#include "entry/openai_request_entry.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    dsv4::fuzz::fuzz_tokenizer();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    dsv4::fuzz::openai_request_one_input(dsv4::fuzz::fuzz_tokenizer(), std::span<const uint8_t>(data, size));
    return 0;
}
