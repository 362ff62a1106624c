// The real DeepSeek-V4 tokenizer for fuzz targets that need one, loaded once (DSV4_FUZZ_TOKENIZER overrides the
// path compiled in as DSV4_FUZZ_TOKENIZER_JSON). A target that cannot load it stops at start-up with the reason.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "dsv4/tokenizer.h"

namespace dsv4::fuzz {

inline const Tokenizer& fuzz_tokenizer() {
    static const std::unique_ptr<Tokenizer> tokenizer = [] {
        const char* path = std::getenv("DSV4_FUZZ_TOKENIZER");
        auto loaded = Tokenizer::from_file(path ? path : DSV4_FUZZ_TOKENIZER_JSON);
        if (!loaded.is_ok()) {
            std::fprintf(stderr, "%s\n", loaded.status().to_string().c_str());
            std::exit(1);
        }
        return std::move(loaded).value();
    }();
    return *tokenizer;
}

}  // namespace dsv4::fuzz
