// Constrained decoding to a given opening: the reply must begin with a text (the server's tool_choice "required" or
// a named function: the opening of a DSML tool call). Until the text is written, only tokens whose bytes agree with
// what is left of it are allowed; a token may run past its end (the rest is the model's).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "engine/token_bytes.h"

namespace dsv4::engine {

class PrefixConstraint {
public:
    explicit PrefixConstraint(const TokenBytes& tokens) : tokens_(tokens) {}  // `tokens` outlives the constraint
    void reset(std::string text) { text_ = std::move(text), written_ = 0; }
    bool active() const { return written_ < text_.size(); }
    // out = logits with every token that disagrees with the rest of the text set to -infinity (the end token too:
    // its bytes never agree).
    void mask(std::span<const float> logits, std::span<float> out) const;
    void accept(int32_t token);

private:
    const TokenBytes& tokens_;
    std::string text_;
    size_t written_ = 0;
};

}  // namespace dsv4::engine
