// libFuzzer target: encoding arbitrary bytes with the real DeepSeek-V4 tokenizer. Run through scripts/fuzz tokenizer_encode.
// The V4 tokenizer.json is loaded once (DSV4_FUZZ_TOKENIZER overrides its path); the checks live in
// entry/tokenizer_encode_entry.h so that tests/unit/fuzz_replay/ replays committed inputs through the same code.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>

#include "entry/tokenizer_encode_entry.h"

namespace {
std::unique_ptr<dsv4::Tokenizer> g_tokenizer;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    const char* path = std::getenv("DSV4_FUZZ_TOKENIZER");
    auto loaded = dsv4::Tokenizer::from_file(path ? path : DSV4_FUZZ_TOKENIZER_JSON);
    if (!loaded.is_ok()) {
        std::fprintf(stderr, "%s\n", loaded.status().to_string().c_str());
        std::exit(1);
    }
    g_tokenizer = std::move(loaded).value();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    dsv4::fuzz::tokenizer_encode_one_input(*g_tokenizer, std::span<const uint8_t>(data, size));
    return 0;
}
