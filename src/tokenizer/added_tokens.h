// Added tokens (special and not): found in the raw text before pre-tokenisation, like HF tokenizers'
// AddedVocabulary (tokenizers/src/tokenizer/added_vocabulary.rs): first the tokens declared normalized=false,
// then, in the text left between them, those declared normalized=true (the same text here: only an empty
// normalizer is supported). Each pass takes the leftmost match, the longest one there, and honours the token's
// single_word / lstrip / rstrip flags.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer_spec.h"

namespace dsv4::tokenizer {

struct Segment {
    uint32_t begin, end;  // byte range in the text
    int32_t id;           // the added token's id, or -1 for text that goes through the pre-tokenizer
};

class AddedTokenMatcher {
public:
    void init(const std::vector<AddedTokenSpec>& added);
    // Splits `text` into segments covering it (empty text gives nothing). `out` and `scratch` are reused.
    void split(std::string_view text, std::vector<Segment>& out, std::vector<Segment>& scratch) const;

private:
    // A byte trie; terminal[node] is the index into tokens_ of the token ending there, or -1.
    struct Trie {
        std::vector<int32_t> root_children = std::vector<int32_t>(256, -1);
        std::unordered_map<uint64_t, int32_t> edges;  // (node << 8 | byte) → child, below the root
        std::vector<int32_t> terminal{-1};            // node 0 is the root
        bool empty = true;
        void insert(std::string_view s, int32_t token_index);
        // Longest token starting at text[pos]: its length and token index, or length 0.
        size_t longest_at(std::string_view text, size_t pos, int32_t* token_index) const;
    };
    // HF find_matches on one sentence [begin, end), appending segments that cover it.
    void find_matches(const Trie& trie, std::string_view text, uint32_t begin, uint32_t end,
                      std::vector<Segment>& out) const;

    std::vector<AddedTokenSpec> tokens_;
    Trie non_normalized_;
    Trie normalized_;
};

}  // namespace dsv4::tokenizer
