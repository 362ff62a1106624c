#include <cstdint>

#include "core/utf8.h"

namespace dsv4 {
namespace {
inline bool in(uint8_t b, uint8_t lo, uint8_t hi) { return b >= lo && b <= hi; }
}  // namespace

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

size_t incomplete_utf8_tail(std::string_view s) {
    // Walk back over at most 3 bytes to the start of the last sequence; hold it back only if it is a valid prefix
    // that the end of the input cut off.
    const size_t n = s.size();
    for (size_t back = 1; back <= 4 && back <= n; ++back) {
        const auto b = static_cast<uint8_t>(s[n - back]);
        if ((b & 0xC0) == 0x80 && back < 4) continue;  // continuation byte: look further back
        size_t bad;
        bool truncated;
        if (utf8_sequence_length(s, n - back, &bad, &truncated) == 0 && truncated && bad == back) return back;
        return 0;
    }
    return 0;
}

}  // namespace dsv4
