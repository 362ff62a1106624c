// Helpers for the safetensors tests: hand-made files (so that corrupt layouts can be written at all) and a
// gtest predicate for "this failed with this code and a message naming these things".
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dsv4/status.h"

namespace dsv4::io::test {

// The bytes of a safetensors file made by hand: 8-byte little-endian length (`length_override` or the header's
// size), `header` verbatim, then `data_bytes` bytes of `fill`.
inline std::vector<uint8_t> raw_safetensors(std::string_view header, uint64_t data_bytes,
                                            std::optional<uint64_t> length_override = std::nullopt,
                                            uint8_t fill = 0) {
    const uint64_t n = length_override.value_or(header.size());
    std::vector<uint8_t> out;
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
    out.insert(out.end(), header.begin(), header.end());
    out.insert(out.end(), data_bytes, fill);
    return out;
}

inline void write_bytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(f.good()) << "cannot write " << path;
}

inline void write_text(const std::filesystem::path& path, std::string_view text) {
    write_bytes(path, std::vector<uint8_t>(text.begin(), text.end()));
}

inline std::vector<uint8_t> read_bytes(const std::filesystem::path& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Success when `status` has `code` and its message contains every needle.
inline ::testing::AssertionResult fails_with(const Status& status, StatusCode code,
                                             std::initializer_list<std::string_view> needles) {
    if (status.is_ok()) return ::testing::AssertionFailure() << "expected " << status_code_name(code) << ", got ok";
    if (status.code() != code) {
        return ::testing::AssertionFailure() << "expected " << status_code_name(code) << ", got "
                                             << status.to_string();
    }
    for (std::string_view needle : needles) {
        if (status.message().find(needle) == std::string::npos) {
            return ::testing::AssertionFailure() << "message does not name '" << needle << "': "
                                                 << status.to_string();
        }
    }
    return ::testing::AssertionSuccess() << status.to_string();
}

}  // namespace dsv4::io::test
