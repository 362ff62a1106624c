// UTF-8 validation, repair and encoding: the one implementation the tokenizer, the chat encoder and reply parser,
// generation and the server share. Repair follows Unicode §3.9 "U+FFFD substitution of maximal subparts" — what
// Python's errors="replace" and Rust's from_utf8_lossy do, so our text matches HF tokenizers' byte for byte.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace dsv4 {

// Length of the well-formed UTF-8 sequence starting at s[i], or 0 if the bytes there are not one (invalid lead,
// bad continuation, overlong, surrogate, > U+10FFFF, or truncated). When 0, *invalid_len is the length of the
// maximal ill-formed subpart (what gets one U+FFFD), and *truncated says whether that subpart is a valid prefix cut
// off by the end of the input.
size_t utf8_sequence_length(std::string_view s, size_t i, size_t* invalid_len, bool* truncated);

// True if every byte of `s` forms well-formed UTF-8.
bool is_valid_utf8(std::string_view s);

// Copy of `s` with each maximal ill-formed subpart replaced by U+FFFD (EF BF BD).
std::string sanitize_utf8(std::string_view s);

// Bytes at the end of `s` that are a valid but incomplete UTF-8 prefix (0 when `s` ends on a character boundary
// or in bytes that can never complete): what a streaming writer holds back until the next piece arrives.
size_t incomplete_utf8_tail(std::string_view s);

// The code point of the well-formed UTF-8 sequence at s[i] and its length in bytes.
char32_t code_point_at(std::string_view s, size_t i, size_t* len);

// Appends the UTF-8 encoding of cp (cp <= U+10FFFF).
void append_utf8(char32_t cp, std::string& out);

}  // namespace dsv4
