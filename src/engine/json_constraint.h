// Constrained decoding to one JSON object (OpenAI's response_format json_object): a byte-level recogniser of JSON
// text (RFC 8259) whose top level is an object, and the token mask it gives a sampler. Byte-level BPE tokens may end
// inside a UTF-8 character or an escape; the recogniser's state carries over between tokens.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/token_bytes.h"

namespace dsv4::engine {

class JsonObjectPrefix {
public:
    static constexpr int kMaxDepth = 32;  // nesting of objects and arrays; deeper is refused

    // Takes one byte; false when no JSON object text continues this way (the state is then unspecified).
    bool push(uint8_t c);
    bool push(std::string_view bytes);
    // A whole object has been read; only whitespace may follow.
    bool complete() const { return mode_ == kDone; }
    // Inside a string, between characters: any run of whole UTF-8 characters other than '"', '\' and controls is taken
    // and leaves the state as it is.
    bool between_string_chars() const { return mode_ == kString; }
    // Whitespace is taken and leaves the state as it is (between tokens of the JSON text, not inside a number).
    bool space_is_noop() const { return mode_ <= kAfter || mode_ == kDone; }

private:
    enum Mode : uint8_t {
        kStart,       // before the top-level '{'
        kObjFirst,    // after '{': a key or '}'
        kObjKey,      // after ',' in an object: a key
        kColon,       // after a key
        kValue,       // after ':' or ',' in an array: a value
        kArrFirst,    // after '[': a value or ']'
        kAfter,       // after a value inside a container: ',' or its closing bracket
        kString,      // inside a string (key_ says which kind)
        kEscape,      // after '\' in a string
        kHex,         // inside \uXXXX (hex_left_ digits to go)
        kUtf8,        // inside a multi-byte UTF-8 character (utf8_left_ continuation bytes to go)
        kLiteral,     // inside true / false / null
        kNumMinus,    // '-': a digit must follow
        kNumZero,     // a leading 0
        kNumInt,      // integer digits
        kNumDot,      // '.': a digit must follow
        kNumFrac,     // fraction digits
        kNumExp,      // 'e' / 'E': a sign or digit must follow
        kNumExpSign,  // exponent sign: a digit must follow
        kNumExpInt,   // exponent digits
        kDone,        // the top-level object closed
    };
    bool value_start(uint8_t c);
    bool end_value();  // a value ended: back in its container, or done at the top
    bool open(uint8_t kind, Mode next);
    bool close(uint8_t kind);

    Mode mode_ = kStart;
    bool key_ = false;  // the string being read is an object key
    uint8_t depth_ = 0;
    uint8_t literal_ = 0;  // which of true / false / null
    uint8_t literal_pos_ = 0;
    uint8_t hex_left_ = 0;
    uint8_t utf8_left_ = 0;
    std::array<uint8_t, kMaxDepth> stack_{};  // '{' or '['
};

// The token-level constraint: which tokens the recogniser accepts next, given every token's bytes.
class JsonConstraint {
public:
    // Added tokens (the chat template's markers) are never allowed. `tokens` outlives the constraint.
    explicit JsonConstraint(const TokenBytes& tokens);
    void reset() { state_ = JsonObjectPrefix{}; }
    // out = logits with every token the JSON cannot take set to -infinity; the end token `eos` is allowed only once
    // the object is complete, and then it is the only token allowed.
    void mask(std::span<const float> logits, std::span<float> out, int32_t eos) const;
    // The sampled token's bytes advance the state (a token mask() allowed).
    void accept(int32_t token);
    bool complete() const { return state_.complete(); }

private:
    const TokenBytes& tokens_;
    std::vector<uint8_t> lead_space_;  // [vocab] leading whitespace bytes (at most 255)
    std::vector<bool> plain_;          // [vocab] whole UTF-8 characters, none of them '"', '\' or a control
    JsonObjectPrefix state_;
};

}  // namespace dsv4::engine
