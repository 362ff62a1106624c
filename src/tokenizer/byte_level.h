// The byte-level alphabet (GPT-2's bytes_to_unicode): every byte is shown as one printable code point, so BPE
// vocabularies are strings of those code points. Printable Latin-1 bytes stand for themselves, the other 68
// bytes map to U+0100.. in byte order.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsv4::tokenizer {

// byte → code point of the alphabet.
const std::array<char32_t, 256>& byte_to_char();
// code point → byte, or -1 if the code point is not in the alphabet.
int byte_of_char(char32_t cp);

// Raw bytes → byte-level string (UTF-8).
std::string bytes_to_byte_level(std::string_view bytes);

// What the ByteLevel decoder makes of one token string: if every code point is in the alphabet, the bytes they
// stand for; otherwise (e.g. added tokens like "<｜User｜>") the token's own UTF-8 bytes — the rule HF's
// ByteLevel decoder uses (tokenizers/src/pre_tokenizers/byte_level.rs, decode_chain).
std::string byte_level_token_bytes(std::string_view token);

}  // namespace dsv4::tokenizer
