// Unicode character classes for the pre-tokenizer regexes, and UTF-8 helpers.
// The class data is generated (unicode_tables.cpp, by tests/reference/gen_unicode_tables.py); see docs/tokenizer.md
// for the Unicode version and why it matters.
#pragma once

#include "core/utf8.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4::tokenizer {

// One bit per class. Bits 0..6 come from the generated table; the rest are ASCII/CJK facts the hand-written
// regex matchers need, computed in char_flags().
enum CharFlag : uint16_t {
    kLetter = 1,        // \p{L}
    kMark = 2,          // \p{M}
    kNumber = 4,        // \p{N}
    kPunct = 8,         // \p{P}
    kSymbol = 16,       // \p{S}
    kSpace = 32,        // \s (Oniguruma, Unicode: 9..D, 85, Zs, Zl, Zp)
    kWord = 64,         // \w (Rust regex crate; only for single_word added tokens)
    kCrLf = 128,        // \r or \n
    kAsciiPunct = 256,  // [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]
    kAsciiAlpha = 512,  // [A-Za-z]
    kCjk = 1024,        // [一-龥぀-ゟ゠-ヿ] = U+4E00..U+9FA5, U+3040..U+309F, U+30A0..U+30FF
    kAsciiSpace = 2048  // ' ' (U+0020)
};

struct UnicodeRun {
    uint32_t first;
    uint8_t flags;
};
extern const char* const kUnicodeVersion;
extern const size_t kUnicodeRunCount;
extern const UnicodeRun kUnicodeRuns[];

// All flags of one code point. O(1) below U+20000 (a table built on first use), a binary search above.
uint16_t char_flags(char32_t cp);

// Decodes well-formed UTF-8 (as produced by sanitize_utf8) into code points, their flags and the byte offset of
// each code point; byte_offsets gets one extra entry (text.size()). The vectors are reused: no allocation once
// they are large enough.
void decode_utf8(std::string_view text, std::vector<char32_t>& cps, std::vector<uint16_t>& flags,
                 std::vector<uint32_t>& byte_offsets);

// UTF-8 validation and repair live in core/utf8.h.
using dsv4::append_utf8;
using dsv4::code_point_at;
using dsv4::is_valid_utf8;
using dsv4::sanitize_utf8;
using dsv4::utf8_sequence_length;

}  // namespace dsv4::tokenizer
