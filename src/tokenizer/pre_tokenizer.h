// The pre-tokenizer: the file's sequence of Split steps, each a regex (matched by hand-written code, see
// regex_matchers.cpp) or a literal, with its split behaviour and invert flag. Works on code point arrays.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dsv4/status.h"
#include "tokenizer/tokenizer_spec.h"

namespace dsv4::tokenizer {

// A text as code points and their class flags (unicode_classes.h); indices are code point positions.
struct CodepointText {
    const char32_t* cps;
    const uint16_t* flags;
};

// Hand-written matchers for the regexes DeepSeek's tokenizer.json uses (the only ones implemented).
enum class MatcherKind {
    kNumbersUpTo3,   // \p{N}{1,3}
    kCjkRun,         // [一-龥぀-ゟ゠-ヿ]+
    kDeepSeekWords,  // the word/punctuation/whitespace alternation of the DeepSeek V3/V4 pre-tokenizer
    kLiteral,        // a {"String": ...} pattern
};

// Returns the end of the match that starts exactly at `pos` inside [pos, end) (the piece ends at `end`, which
// the regex sees as the end of input), or `pos` if the pattern does not match there.
uint32_t match_at(MatcherKind kind, const std::u32string& literal, const CodepointText& text, uint32_t pos,
                  uint32_t end);

// Maps a Regex pattern string from tokenizer.json to its matcher; kUnsupported for any other regex.
Result<MatcherKind> matcher_for_regex(const std::string& source_file, const std::string& pattern);

struct SplitRule {
    MatcherKind kind;
    std::u32string literal;
    SplitBehavior behavior;
    bool invert;
};

using Piece = std::pair<uint32_t, uint32_t>;  // [begin, end) in code points

class PreTokenizer {
public:
    Status init(const TokenizerSpec& spec);
    // Splits code points [0, n) into non-empty pieces, in order. `pieces` and `scratch` are reused buffers.
    void split(const CodepointText& text, uint32_t n, std::vector<Piece>& pieces, std::vector<Piece>& scratch) const;
    const std::vector<SplitRule>& rules() const { return rules_; }

private:
    void split_piece(const SplitRule& rule, const CodepointText& text, Piece piece, std::vector<Piece>& out) const;
    std::vector<SplitRule> rules_;
};

}  // namespace dsv4::tokenizer
