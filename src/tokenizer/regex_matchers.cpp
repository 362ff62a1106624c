// Hand-written equivalents of the pre-tokenizer regexes. HF tokenizers runs them with Oniguruma: leftmost match,
// alternatives tried in order, greedy quantifiers with backtracking. Each function below returns exactly the
// match Oniguruma would find starting at `pos`; the comments derive it from the backtracking order.
#include <cstring>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode_classes.h"

namespace dsv4::tokenizer {
namespace {

// The regexes as they appear in DeepSeek's tokenizer.json (after JSON unescaping: \r and \n are the characters).
const char* const kNumbersUpTo3 = "\\p{N}{1,3}";
const char* const kCjkRun = "[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+";
const char* const kDeepSeekWords =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+"
    "|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\r\n]*"
    "|\\s*[\r\n]+"
    "|\\s+(?!\\S)"
    "|\\s+";

// End of the run of code points (from `pos`) that have any of `mask`.
inline uint32_t run_end(const CodepointText& t, uint32_t pos, uint32_t end, uint16_t mask) {
    while (pos < end && (t.flags[pos] & mask)) ++pos;
    return pos;
}

uint32_t match_deepseek_words(const CodepointText& t, uint32_t p, uint32_t end) {
    const uint16_t f0 = t.flags[p];
    const bool has1 = p + 1 < end;
    const uint16_t f1 = has1 ? t.flags[p + 1] : 0;

    // 1. [ASCII punctuation][A-Za-z]+
    if ((f0 & kAsciiPunct) && (f1 & kAsciiAlpha)) return run_end(t, p + 1, end, kAsciiAlpha);

    // 2. [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ — the optional char is taken if it qualifies and a letter/mark
    //    follows; otherwise the regex backtracks to a letter/mark run starting at p itself.
    const bool optional_ok = !(f0 & (kCrLf | kLetter | kPunct | kSymbol));
    if (optional_ok && (f1 & (kLetter | kMark))) return run_end(t, p + 1, end, kLetter | kMark);
    if (f0 & (kLetter | kMark)) return run_end(t, p, end, kLetter | kMark);

    // 3. " ?[\p{P}\p{S}]+[\r\n]*"
    if ((f0 & kAsciiSpace) && (f1 & (kPunct | kSymbol))) {
        const uint32_t q = run_end(t, p + 1, end, kPunct | kSymbol);
        return run_end(t, q, end, kCrLf);
    }
    if (f0 & (kPunct | kSymbol)) {
        const uint32_t q = run_end(t, p, end, kPunct | kSymbol);
        return run_end(t, q, end, kCrLf);
    }

    if (!(f0 & kSpace)) return p;                   // alternatives 4-6 all start with whitespace
    const uint32_t q = run_end(t, p, end, kSpace);  // the maximal \s run [p, q)

    // 4. \s*[\r\n]+ — \s* backs off from q until [\r\n]+ can start: at the last CR/LF of the run, and
    //    [\r\n]+ then covers just that one (anything after it in the run is not CR/LF).
    for (uint32_t k = q; k > p; --k)
        if (t.flags[k - 1] & kCrLf) return k;

    // 5. \s+(?!\S) — the whole run if it reaches the end of the piece; otherwise the run minus its last
    //    character (that one is followed by \S, the one before it by whitespace), if that leaves one or more.
    if (q == end) return q;
    if (q - p >= 2) return q - 1;

    // 6. \s+
    return q;
}

}  // namespace

Result<MatcherKind> matcher_for_regex(const std::string& source_file, const std::string& pattern) {
    // Accept the escaped spellings \r \n too: the regex means the same.
    std::string canonical;
    for (size_t i = 0; i < pattern.size(); ++i) {
        if (pattern[i] == '\\' && i + 1 < pattern.size() && (pattern[i + 1] == 'r' || pattern[i + 1] == 'n')) {
            canonical += pattern[i + 1] == 'r' ? '\r' : '\n';
            ++i;
        } else if (pattern[i] == '\\' && i + 1 < pattern.size()) {
            canonical += pattern[i];
            canonical += pattern[++i];
        } else {
            canonical += pattern[i];
        }
    }
    if (canonical == kNumbersUpTo3) return MatcherKind::kNumbersUpTo3;
    if (canonical == kCjkRun) return MatcherKind::kCjkRun;
    if (canonical == kDeepSeekWords) return MatcherKind::kDeepSeekWords;
    return unsupported(source_file + ": pre_tokenizer Split regex '" + pattern +
                       "' is not one of the regexes implemented (those of DeepSeek V3/V4's tokenizer.json); "
                       "see docs/tokenizer.md");
}

uint32_t match_at(MatcherKind kind, const std::u32string& literal, const CodepointText& t, uint32_t pos, uint32_t end) {
    switch (kind) {
        case MatcherKind::kNumbersUpTo3: {
            uint32_t q = pos;
            while (q < end && q - pos < 3 && (t.flags[q] & kNumber)) ++q;
            return q;
        }
        case MatcherKind::kCjkRun:
            return run_end(t, pos, end, kCjk);
        case MatcherKind::kDeepSeekWords:
            return match_deepseek_words(t, pos, end);
        case MatcherKind::kLiteral: {
            const size_t n = literal.size();
            if (n == 0 || end - pos < n) return pos;
            if (std::memcmp(t.cps + pos, literal.data(), n * sizeof(char32_t)) != 0) return pos;
            return pos + static_cast<uint32_t>(n);
        }
    }
    return pos;
}

}  // namespace dsv4::tokenizer
