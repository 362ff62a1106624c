// The repository's DeepSeek-V4 tokenizer.json (tests/data/tokenizer), loaded once per test binary. Header-only, so that
// only the tests that use it link the tokenizer.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "dsv4/tokenizer.h"
#include "testing/testing.h"

namespace dsv4::testing {

inline const Tokenizer& v4_tokenizer() {
    static const std::unique_ptr<Tokenizer> tokenizer = [] {
        auto loaded = Tokenizer::from_file(test_data_dir() / "tokenizer" / "deepseek_v4_tokenizer.json");
        EXPECT_TRUE(loaded.is_ok()) << loaded.status().to_string();
        return loaded.is_ok() ? std::move(loaded).value() : nullptr;
    }();
    return *tokenizer;
}

}  // namespace dsv4::testing
