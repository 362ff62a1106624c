// Code point classes (lookup in the generated run table) and UTF-8 decoding/validation.
#include "tokenizer/unicode_classes.h"

#include <algorithm>
#include <mutex>

namespace dsv4::tokenizer {
namespace {

constexpr char32_t kFlatLimit = 0x20000;  // BMP + SMP (emoji): one table lookup; rarer planes binary-search

uint16_t extra_flags(char32_t cp) {
    uint16_t f = 0;
    if (cp == '\r' || cp == '\n') f |= kCrLf;
    if (cp == ' ') f |= kAsciiSpace;
    if (cp < 0x80) {
        const char c = static_cast<char>(cp);
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')) f |= kAsciiAlpha;
        if ((c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') || (c >= '{' && c <= '~'))
            f |= kAsciiPunct;
    }
    if ((cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x3040 && cp <= 0x309F) || (cp >= 0x30A0 && cp <= 0x30FF)) f |= kCjk;
    return f;
}

uint16_t table_flags(char32_t cp) {
    // Last run whose first <= cp.
    const UnicodeRun* end = kUnicodeRuns + kUnicodeRunCount;
    const UnicodeRun* it = std::upper_bound(kUnicodeRuns, end, static_cast<uint32_t>(cp),
                                            [](uint32_t v, const UnicodeRun& r) { return v < r.first; });
    return it == kUnicodeRuns ? 0 : (it - 1)->flags;
}

const std::vector<uint16_t>& flat_table() {
    static std::vector<uint16_t> table;
    static std::once_flag once;
    std::call_once(once, [] {
        table.resize(kFlatLimit);
        size_t r = 0;
        for (char32_t cp = 0; cp < kFlatLimit; ++cp) {
            while (r + 1 < kUnicodeRunCount && kUnicodeRuns[r + 1].first <= cp) ++r;
            table[cp] = static_cast<uint16_t>(kUnicodeRuns[r].flags | extra_flags(cp));
        }
    });
    return table;
}


}  // namespace

uint16_t char_flags(char32_t cp) {
    if (cp < kFlatLimit) return flat_table()[cp];
    if (cp > 0x10FFFF) return 0;
    return table_flags(cp);  // no ASCII/CJK extras up here
}

void decode_utf8(std::string_view text, std::vector<char32_t>& cps, std::vector<uint16_t>& flags,
                 std::vector<uint32_t>& byte_offsets) {
    cps.clear();
    flags.clear();
    byte_offsets.clear();
    const auto* p = reinterpret_cast<const uint8_t*>(text.data());
    const size_t n = text.size();
    const auto& table = flat_table();
    size_t i = 0;
    while (i < n) {
        char32_t cp;
        size_t len;
        const uint8_t b0 = p[i];
        if (b0 < 0x80) {
            cp = b0;
            len = 1;
        } else if (b0 < 0xE0) {
            cp = (char32_t(b0 & 0x1F) << 6) | (p[i + 1] & 0x3F);
            len = 2;
        } else if (b0 < 0xF0) {
            cp = (char32_t(b0 & 0x0F) << 12) | (char32_t(p[i + 1] & 0x3F) << 6) | (p[i + 2] & 0x3F);
            len = 3;
        } else {
            cp = (char32_t(b0 & 0x07) << 18) | (char32_t(p[i + 1] & 0x3F) << 12) | (char32_t(p[i + 2] & 0x3F) << 6) |
                 (p[i + 3] & 0x3F);
            len = 4;
        }
        cps.push_back(cp);
        flags.push_back(cp < kFlatLimit ? table[cp] : char_flags(cp));
        byte_offsets.push_back(static_cast<uint32_t>(i));
        i += len;
    }
    byte_offsets.push_back(static_cast<uint32_t>(n));
}

}  // namespace dsv4::tokenizer
