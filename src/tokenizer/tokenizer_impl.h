// Tokenizer internals shared by the encode (tokenizer.cpp) and decode (decoder.cpp) sides.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "dsv4/tokenizer.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"

namespace dsv4 {

struct Tokenizer::Impl {
    std::string source;
    tokenizer::AddedTokenMatcher added;
    tokenizer::PreTokenizer pre_tokenizer;
    tokenizer::BpeModel bpe;

    // Per id in [0, vocab_size): the token string as the file writes it, the bytes it decodes to, and flags.
    std::vector<std::string> token_strings;  // [vocab_size]
    std::vector<std::string> token_bytes;    // [vocab_size]
    std::vector<uint8_t> id_flags;           // [vocab_size] kKnown | kSpecial | kAdded
    std::unordered_map<std::string, int32_t> token_to_id;
    static constexpr uint8_t kKnown = 1, kSpecial = 2, kAdded = 4;

    Status check_id(int32_t id) const;
    // Appends the ids of well-formed UTF-8 text.
    void encode_valid(std::string_view text, std::vector<int32_t>& ids) const;
};

}  // namespace dsv4
