// Shared helpers for the tokenizer tests: the committed tokenizer files and golden fixtures.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dsv4/tokenizer.h"
#include "testing/testing.h"

namespace dsv4::testing {

inline std::filesystem::path v4_tokenizer_path() { return test_data_dir() / "tokenizer/deepseek_v4_tokenizer.json"; }

// Loaded once per test executable (loading parses ~6 MB of JSON).
inline const Tokenizer& v4_tokenizer() {
    static std::unique_ptr<Tokenizer> tok = [] {
        auto r = Tokenizer::from_file(v4_tokenizer_path());
        if (!r.is_ok()) {
            ADD_FAILURE() << r.status().to_string();
            std::abort();
        }
        return std::move(r).value();
    }();
    return *tok;
}

inline std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path) {
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << "cannot open " << path;
    std::vector<nlohmann::json> rows;
    std::string line;
    while (std::getline(in, line))
        if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
    return rows;
}

inline std::string from_hex(const std::string& hex) {
    std::string out;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    return out;
}

}  // namespace dsv4::testing
