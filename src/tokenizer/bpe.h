// Byte-level BPE: a word (one pre-tokenizer piece, raw bytes) → token ids by applying merges in rank order.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "dsv4/status.h"
#include "tokenizer/tokenizer_spec.h"

namespace dsv4::tokenizer {

class BpeModel {
public:
    // Builds the merge table from the spec's vocab and merges. Every merge's parts and result must be in the
    // vocabulary (as HF requires), else kCorrupt naming the merge.
    Status init(const TokenizerSpec& spec);

    // Appends the ids of one word. Results are cached per word (words up to kMaxCachedWordBytes bytes).
    void encode_word(std::string_view word_bytes, std::vector<int32_t>& out) const;
    // The same without the cache (the tests compare both).
    void encode_word_uncached(std::string_view word_bytes, std::vector<int32_t>& out) const;

    size_t cache_size() const;
    static constexpr size_t kMaxCachedWordBytes = 256;
    static constexpr size_t kMaxCacheEntries = 1u << 18;

private:
    struct Merge {
        int32_t rank;
        int32_t new_id;
    };
    static uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

    struct StringHash {
        using is_transparent = void;
        size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    struct StringEq {
        using is_transparent = void;
        bool operator()(std::string_view a, std::string_view b) const { return a == b; }
    };

    std::array<int32_t, 256> byte_ids_{};  // id of each one-byte symbol, -1 if the vocab lacks it
    std::unordered_map<uint64_t, Merge> merges_;
    std::unordered_map<std::string, int32_t, StringHash, StringEq> vocab_;  // only for ignore_merges
    bool ignore_merges_ = false;

    mutable std::mutex cache_mu_;
    mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, StringEq> cache_;
};

}  // namespace dsv4::tokenizer
