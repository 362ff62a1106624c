// The parts of an HF tokenizer.json this engine implements, parsed and checked (tokenizer_json.cpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "dsv4/status.h"

namespace dsv4::tokenizer {

struct AddedTokenSpec {
    int32_t id = 0;
    std::string content;
    bool single_word = false;
    bool lstrip = false;
    bool rstrip = false;
    bool normalized = true;
    bool special = false;
};

// HF SplitDelimiterBehavior.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct SplitSpec {
    std::string pattern;   // the regex source or the literal string, as in the file
    bool is_regex = true;  // {"Regex": ...} vs {"String": ...}
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
};

struct TokenizerSpec {
    std::string source;                 // file path, for messages
    std::vector<AddedTokenSpec> added;  // in file order
    std::vector<SplitSpec> splits;      // Split pre-tokenizers in order (before the ByteLevel step)
    bool byte_level_add_prefix_space = false;
    std::vector<std::pair<std::string, int32_t>> vocab;       // BPE vocabulary, byte-level strings
    std::vector<std::pair<std::string, std::string>> merges;  // in rank order
    bool ignore_merges = false;
};

// Reads and checks tokenizer.json. Unsupported components (normalizers other than an empty Sequence, non-BPE
// models, BPE dropout/byte_fallback/prefixes, pre-tokenizers other than Split and ByteLevel, ByteLevel with
// use_regex, decoders other than ByteLevel, post-processors that add tokens) give kUnsupported naming the key.
Result<TokenizerSpec> load_tokenizer_spec(const std::filesystem::path& path);

}  // namespace dsv4::tokenizer
