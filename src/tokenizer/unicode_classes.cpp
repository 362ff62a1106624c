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

inline bool in(uint8_t b, uint8_t lo, uint8_t hi) { return b >= lo && b <= hi; }

}  // namespace

uint16_t char_flags(char32_t cp) {
    if (cp < kFlatLimit) return flat_table()[cp];
    if (cp > 0x10FFFF) return 0;
    return table_flags(cp);  // no ASCII/CJK extras up here
}

size_t utf8_sequence_length(std::string_view s, size_t i, size_t* invalid_len, bool* truncated) {
    const auto b0 = static_cast<uint8_t>(s[i]);
    *truncated = false;
    if (b0 < 0x80) return 1;
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte (Unicode Table 3-7)
    if (in(b0, 0xC2, 0xDF)) {
        need = 2;
    } else if (in(b0, 0xE0, 0xEF)) {
        need = 3;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
    } else if (in(b0, 0xF0, 0xF4)) {
        need = 4;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        *invalid_len = 1;
        return 0;
    }
    size_t k = 1;
    for (; k < need; ++k) {
        if (i + k >= s.size()) {
            *invalid_len = k;
            *truncated = true;
            return 0;
        }
        const auto b = static_cast<uint8_t>(s[i + k]);
        const bool ok = k == 1 ? in(b, lo, hi) : in(b, 0x80, 0xBF);
        if (!ok) {
            *invalid_len = k;
            return 0;
        }
    }
    return need;
}

bool is_valid_utf8(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        if (static_cast<uint8_t>(s[i]) < 0x80) {
            ++i;
            continue;
        }
        size_t bad;
        bool truncated;
        const size_t n = utf8_sequence_length(s, i, &bad, &truncated);
        if (n == 0) return false;
        i += n;
    }
    return true;
}

std::string sanitize_utf8(std::string_view s) {
    std::string out;
    out.reserve(s.size() + 8);
    size_t i = 0;
    while (i < s.size()) {
        size_t bad;
        bool truncated;
        const size_t n = utf8_sequence_length(s, i, &bad, &truncated);
        if (n > 0) {
            out.append(s.data() + i, n);
            i += n;
        } else {
            out += "\xEF\xBF\xBD";
            i += bad;
        }
    }
    return out;
}

char32_t code_point_at(std::string_view s, size_t i, size_t* len) {
    const auto* p = reinterpret_cast<const uint8_t*>(s.data() + i);
    if (p[0] < 0x80) return *len = 1, p[0];
    if (p[0] < 0xE0) return *len = 2, (char32_t(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
    if (p[0] < 0xF0) return *len = 3, (char32_t(p[0] & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    *len = 4;
    return (char32_t(p[0] & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) | (char32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
}

void append_utf8(char32_t cp, std::string& out) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
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
