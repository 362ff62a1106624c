#include "tokenizer/byte_level.h"

#include "tokenizer/unicode_classes.h"

namespace dsv4::tokenizer {

const std::array<char32_t, 256>& byte_to_char() {
    static const std::array<char32_t, 256> table = [] {
        std::array<char32_t, 256> t{};
        char32_t next = 256;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            t[b] = printable ? static_cast<char32_t>(b) : next++;
        }
        return t;
    }();
    return table;
}

int byte_of_char(char32_t cp) {
    static const std::array<int16_t, 512> inverse = [] {
        std::array<int16_t, 512> inv{};
        inv.fill(-1);
        const auto& fwd = byte_to_char();
        for (int b = 0; b < 256; ++b) inv[fwd[b]] = static_cast<int16_t>(b);
        return inv;
    }();
    return cp < 512 ? inverse[cp] : -1;
}

std::string bytes_to_byte_level(std::string_view bytes) {
    const auto& fwd = byte_to_char();
    std::string out;
    out.reserve(bytes.size() * 2);
    for (unsigned char b : bytes) append_utf8(fwd[b], out);
    return out;
}

std::string byte_level_token_bytes(std::string_view token) {
    std::string out;
    out.reserve(token.size());
    size_t i = 0;
    while (i < token.size()) {
        size_t bad;
        bool truncated;
        const size_t n = utf8_sequence_length(token, i, &bad, &truncated);
        if (n == 0) return std::string(token);  // not UTF-8 at all: keep as is
        size_t len;
        const char32_t cp = code_point_at(token, i, &len);
        const int b = byte_of_char(cp);
        if (b < 0) return std::string(token);
        out += static_cast<char>(b);
        i += n;
    }
    return out;
}

}  // namespace dsv4::tokenizer
