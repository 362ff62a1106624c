// Every token's bytes, read from the tokenizer once, for the constraints that mask a generation's draws
// (json_constraint.h, prefix_constraint.h): added tokens (the chat template's markers) as their text, flagged.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dsv4/tokenizer.h"

namespace dsv4::engine {

class TokenBytes {
public:
    // Ids [0, vocab_size); ids the tokenizer does not know have no bytes.
    TokenBytes(const Tokenizer& tokenizer, int32_t vocab_size);
    size_t size() const { return added_.size(); }
    std::string_view bytes(size_t id) const { return {flat_.data() + offset_[id], offset_[id + 1] - offset_[id]}; }
    bool added(size_t id) const { return added_[id]; }

private:
    std::string flat_;              // every token's bytes, back to back
    std::vector<uint32_t> offset_;  // [vocab + 1] token id's bytes at flat_[offset_[id], offset_[id + 1])
    std::vector<bool> added_;       // [vocab] from the file's added_tokens
};

}  // namespace dsv4::engine
