#include "engine/json_constraint.h"

#include <limits>

namespace dsv4::engine {
namespace {

bool is_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

constexpr std::string_view kLiterals[3] = {"true", "false", "null"};

}  // namespace

bool JsonObjectPrefix::open(uint8_t kind, Mode next) {
    if (depth_ == kMaxDepth) return false;
    stack_[depth_++] = kind;
    mode_ = next;
    return true;
}

bool JsonObjectPrefix::close(uint8_t kind) {
    if (depth_ == 0 || stack_[depth_ - 1] != kind) return false;
    --depth_;
    return end_value();
}

bool JsonObjectPrefix::end_value() {
    mode_ = depth_ == 0 ? kDone : kAfter;
    return true;
}

bool JsonObjectPrefix::value_start(uint8_t c) {
    switch (c) {
        case '"':
            key_ = false, mode_ = kString;
            return true;
        case '{':
            return open('{', kObjFirst);
        case '[':
            return open('[', kArrFirst);
        case '-':
            mode_ = kNumMinus;
            return true;
        case '0':
            mode_ = kNumZero;
            return true;
        case 't':
            literal_ = 0, literal_pos_ = 1, mode_ = kLiteral;
            return true;
        case 'f':
            literal_ = 1, literal_pos_ = 1, mode_ = kLiteral;
            return true;
        case 'n':
            literal_ = 2, literal_pos_ = 1, mode_ = kLiteral;
            return true;
        default:
            if (c >= '1' && c <= '9') {
                mode_ = kNumInt;
                return true;
            }
            return false;
    }
}

bool JsonObjectPrefix::push(uint8_t c) {
    switch (mode_) {
        case kStart:
            if (is_space(c)) return true;
            return c == '{' && open('{', kObjFirst);
        case kObjFirst:
            if (is_space(c)) return true;
            if (c == '}') return close('{');
            if (c != '"') return false;
            key_ = true, mode_ = kString;
            return true;
        case kObjKey:
            if (is_space(c)) return true;
            if (c != '"') return false;
            key_ = true, mode_ = kString;
            return true;
        case kColon:
            if (is_space(c)) return true;
            if (c != ':') return false;
            mode_ = kValue;
            return true;
        case kValue:
            if (is_space(c)) return true;
            return value_start(c);
        case kArrFirst:
            if (is_space(c)) return true;
            if (c == ']') return close('[');
            return value_start(c);
        case kAfter:
            if (is_space(c)) return true;
            if (c == ',') {
                mode_ = stack_[depth_ - 1] == '{' ? kObjKey : kValue;
                return true;
            }
            return (c == '}' || c == ']') && close(c == '}' ? '{' : '[');
        case kString:
            if (c == '"') {
                if (key_) {
                    mode_ = kColon;
                    return true;
                }
                return end_value();
            }
            if (c == '\\') {
                mode_ = kEscape;
                return true;
            }
            if (c < 0x20) return false;  // control characters must be escaped
            if (c < 0x80) return true;
            // a UTF-8 lead byte (no overlong two-byte forms, nothing past U+10FFFF)
            if (c >= 0xC2 && c <= 0xDF)
                utf8_left_ = 1;
            else if (c >= 0xE0 && c <= 0xEF)
                utf8_left_ = 2;
            else if (c >= 0xF0 && c <= 0xF4)
                utf8_left_ = 3;
            else
                return false;
            mode_ = kUtf8;
            return true;
        case kUtf8:
            if (c < 0x80 || c > 0xBF) return false;
            if (--utf8_left_ == 0) mode_ = kString;
            return true;
        case kEscape:
            if (c == 'u') {
                hex_left_ = 4, mode_ = kHex;
                return true;
            }
            if (c != '"' && c != '\\' && c != '/' && c != 'b' && c != 'f' && c != 'n' && c != 'r' && c != 't')
                return false;
            mode_ = kString;
            return true;
        case kHex:
            if (!is_hex(c)) return false;
            if (--hex_left_ == 0) mode_ = kString;
            return true;
        case kLiteral: {
            const std::string_view lit = kLiterals[literal_];
            if (c != uint8_t(lit[literal_pos_])) return false;
            if (++literal_pos_ == lit.size()) return end_value();
            return true;
        }
        case kNumMinus:
            if (c == '0')
                mode_ = kNumZero;
            else if (c >= '1' && c <= '9')
                mode_ = kNumInt;
            else
                return false;
            return true;
        case kNumZero:
        case kNumInt:
            if (is_digit(c) && mode_ == kNumInt) return true;
            if (c == '.') {
                mode_ = kNumDot;
                return true;
            }
            if (c == 'e' || c == 'E') {
                mode_ = kNumExp;
                return true;
            }
            end_value();  // the number ended: this byte belongs to what follows it
            return push(c);
        case kNumDot:
            if (!is_digit(c)) return false;
            mode_ = kNumFrac;
            return true;
        case kNumFrac:
            if (is_digit(c)) return true;
            if (c == 'e' || c == 'E') {
                mode_ = kNumExp;
                return true;
            }
            end_value();
            return push(c);
        case kNumExp:
            if (c == '+' || c == '-') {
                mode_ = kNumExpSign;
                return true;
            }
            if (!is_digit(c)) return false;
            mode_ = kNumExpInt;
            return true;
        case kNumExpSign:
            if (!is_digit(c)) return false;
            mode_ = kNumExpInt;
            return true;
        case kNumExpInt:
            if (is_digit(c)) return true;
            end_value();
            return push(c);
        case kDone:
            return is_space(c);
    }
    return false;
}

bool JsonObjectPrefix::push(std::string_view bytes) {
    for (const char c : bytes)
        if (!push(uint8_t(c))) return false;
    return true;
}

JsonConstraint::JsonConstraint(const TokenBytes& tokens)
    : tokens_(tokens), lead_space_(tokens.size(), 0), plain_(tokens.size(), false) {
    for (size_t id = 0; id < tokens.size(); ++id) {
        const std::string_view b = tokens.bytes(id);
        size_t lead = 0;
        while (lead < b.size() && lead < 255 && is_space(uint8_t(b[lead]))) ++lead;
        lead_space_[id] = uint8_t(lead);
        // plain: a string state takes it and stays a string state (checked by running it through one)
        JsonObjectPrefix s;
        plain_[id] = !tokens.added(id) && !b.empty() && b.find('"') == std::string_view::npos && s.push("{\"") &&
                     s.push(b) && s.between_string_chars();
    }
}

void JsonConstraint::mask(std::span<const float> logits, std::span<float> out, int32_t eos) const {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    const bool done = state_.complete();
    // Most tokens are decided without running them through the state: which bytes the state takes is worked out
    // once per call, for the state as it is and for the state after whitespace (the same state, or the one where a
    // number has ended); a token's leading whitespace is then skipped; inside a string, plain text is taken.
    JsonObjectPrefix spaced = state_;
    const bool space_ok = !done && spaced.push(uint8_t(' ')) && spaced.space_is_noop();
    std::array<bool, 256> first{}, first_spaced{};
    for (int c = 0; c < 256; ++c) {
        JsonObjectPrefix s = state_, t = spaced;
        first[size_t(c)] = !done && s.push(uint8_t(c));
        first_spaced[size_t(c)] = space_ok && t.push(uint8_t(c));
    }
    const bool in_string = state_.between_string_chars();
    for (size_t id = 0; id < logits.size(); ++id) {
        std::string_view b = tokens_.bytes(id);
        bool ok;
        if (int32_t(id) == eos) {
            ok = done;
        } else if (b.empty() || done || tokens_.added(id)) {
            ok = false;
        } else if (in_string && plain_[id]) {
            ok = true;
        } else {
            // (selects rather than branches: whether a token starts with whitespace follows no pattern)
            const uint8_t lead = in_string ? 0 : lead_space_[id];
            b.remove_prefix(lead);
            const bool spaced_from = lead > 0;
            const std::array<bool, 256>& takes = spaced_from ? first_spaced : first;
            if (b.empty()) {
                ok = space_ok;  // whitespace only
            } else if (!takes[uint8_t(b[0])]) {
                ok = false;
            } else if (b.size() == 1) {
                ok = true;
            } else {
                JsonObjectPrefix s = spaced_from ? spaced : state_;
                ok = s.push(b);
            }
        }
        out[id] = ok ? logits[id] : kNegInf;
    }
}

void JsonConstraint::accept(int32_t token) {
    if (token >= 0 && size_t(token) < tokens_.size()) state_.push(tokens_.bytes(size_t(token)));
}

}  // namespace dsv4::engine
