// Python-compatible JSON writer and reader (see python_json.h for the rules and why they matter).
#include "chat/python_json.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/utf8.h"

namespace dsv4::chat {

PyJson::~PyJson() = default;

std::string python_float_repr(double value) {
    if (std::isnan(value)) return "NaN";
    if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
    // Shortest round-trip digits in scientific form, e.g. "-1.5e+16" (std::to_chars without precision).
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
    std::string sci(buf, res.ptr);
    bool negative = !sci.empty() && sci[0] == '-';
    size_t e_pos = sci.find('e');
    std::string digits;
    for (size_t i = negative ? 1 : 0; i < e_pos; ++i) {
        if (sci[i] != '.') digits.push_back(sci[i]);
    }
    int exponent = std::atoi(sci.c_str() + e_pos + 1);
    int n = static_cast<int>(digits.size());
    int decpt = exponent + 1;  // position of the decimal point relative to the first digit
    std::string out = negative ? "-" : "";
    // CPython float_repr_style 'short': exponent notation when decpt <= -4 or decpt > 16.
    if (decpt <= -4 || decpt > 16) {
        out += digits[0];
        if (n > 1) {
            out += '.';
            out.append(digits, 1, std::string::npos);
        }
        char exp_buf[16];
        std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
        out += exp_buf;
    } else if (decpt <= 0) {
        out += "0.";
        out.append(static_cast<size_t>(-decpt), '0');
        out += digits;
    } else if (decpt >= n) {
        out += digits;
        out.append(static_cast<size_t>(decpt - n), '0');
        out += ".0";
    } else {
        out.append(digits, 0, static_cast<size_t>(decpt));
        out += '.';
        out.append(digits, static_cast<size_t>(decpt), std::string::npos);
    }
    return out;
}

void append_python_json_string(std::string& out, std::string_view text) {
    out += '"';
    for (char ch : text) {
        unsigned char c = static_cast<unsigned char>(ch);
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20) {
                    char esc[8];
                    std::snprintf(esc, sizeof(esc), "\\u%04x", c);
                    out += esc;
                } else {
                    out += ch;
                }
        }
    }
    out += '"';
}

void append_python_json(std::string& out, const Json& value) {
    switch (value.type()) {
        case Json::value_t::null: out += "null"; break;
        case Json::value_t::boolean: out += value.get<bool>() ? "true" : "false"; break;
        case Json::value_t::number_integer: out += std::to_string(value.get<int64_t>()); break;
        case Json::value_t::number_unsigned: out += std::to_string(value.get<uint64_t>()); break;
        case Json::value_t::number_float: out += python_float_repr(value.get<double>()); break;
        case Json::value_t::string: append_python_json_string(out, value.get_ref<const std::string&>()); break;
        case Json::value_t::array: {
            out += '[';
            bool first = true;
            for (const auto& item : value) {
                if (!first) out += ", ";
                first = false;
                append_python_json(out, item);
            }
            out += ']';
            break;
        }
        case Json::value_t::object: {
            out += '{';
            bool first = true;
            for (const auto& [key, item] : value.items()) {
                if (!first) out += ", ";
                first = false;
                append_python_json_string(out, key);
                out += ": ";
                append_python_json(out, item);
            }
            out += '}';
            break;
        }
        default: out += "null"; break;  // binary / discarded never come from parsed JSON text
    }
}

std::string python_json_dumps(const Json& value) {
    std::string out;
    append_python_json(out, value);
    return out;
}

void append_python_json(std::string& out, const PyJson& value) {
    switch (value.kind) {
        case PyJson::Kind::kNull: out += "null"; break;
        case PyJson::Kind::kBool: out += value.boolean ? "true" : "false"; break;
        case PyJson::Kind::kInt: out += value.text; break;
        case PyJson::Kind::kFloat: out += python_float_repr(value.number); break;
        case PyJson::Kind::kString: append_python_json_string(out, value.text); break;
        case PyJson::Kind::kArray: {
            out += '[';
            for (size_t i = 0; i < value.items.size(); ++i) {
                if (i) out += ", ";
                append_python_json(out, value.items[i]);
            }
            out += ']';
            break;
        }
        case PyJson::Kind::kObject: {
            out += '{';
            for (size_t i = 0; i < value.members.size(); ++i) {
                if (i) out += ", ";
                append_python_json_string(out, value.members[i].first);
                out += ": ";
                append_python_json(out, value.members[i].second);
            }
            out += '}';
            break;
        }
    }
}

namespace {

// Recursive-descent reader following CPython's json.scanner / json.decoder (strict=True).
class PyJsonReader {
public:
    explicit PyJsonReader(std::string_view text) : s_(text) {}

    Result<PyJson> read_document() {
        skip_ws();
        PyJson value;
        if (!read_value(value, 0)) return error();
        skip_ws();
        if (pos_ != s_.size()) {
            error_ = "extra data";
            return error();
        }
        return value;
    }

private:
    static constexpr int kMaxDepth = 512;

    Status error() const {
        return invalid_argument("not JSON (" + error_ + " at byte " + std::to_string(pos_) + ")");
    }
    bool fail(const char* what) {
        if (error_.empty()) error_ = what;
        return false;
    }
    void skip_ws() {
        while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
            ++pos_;
        }
    }
    bool starts_with(std::string_view word) const { return s_.substr(pos_, word.size()) == word; }

    bool read_value(PyJson& out, int depth) {
        if (depth > kMaxDepth) return fail("nesting too deep");
        if (pos_ >= s_.size()) return fail("expecting value");
        char c = s_[pos_];
        if (c == '"') {
            out.kind = PyJson::Kind::kString;
            return read_string(out.text);
        }
        if (c == '{') return read_object(out, depth);
        if (c == '[') return read_array(out, depth);
        struct Word { std::string_view text; PyJson::Kind kind; bool boolean; double number; };
        static const Word kWords[] = {
            {"null", PyJson::Kind::kNull, false, 0},
            {"true", PyJson::Kind::kBool, true, 0},
            {"false", PyJson::Kind::kBool, false, 0},
            {"NaN", PyJson::Kind::kFloat, false, NAN},
            {"Infinity", PyJson::Kind::kFloat, false, INFINITY},
            {"-Infinity", PyJson::Kind::kFloat, false, -INFINITY},
        };
        for (const auto& w : kWords) {
            if (starts_with(w.text)) {
                pos_ += w.text.size();
                out.kind = w.kind;
                out.boolean = w.boolean;
                out.number = w.number;
                return true;
            }
        }
        return read_number(out);
    }

    // NUMBER_RE = (-?(?:0|[1-9]\d*))(\.\d+)?([eE][-+]?\d+)?  — an int unless a fraction or exponent follows.
    bool read_number(PyJson& out) {
        size_t start = pos_;
        size_t p = pos_;
        if (p < s_.size() && s_[p] == '-') ++p;
        if (p >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[p]))) return fail("expecting value");
        if (s_[p] == '0') {
            ++p;
        } else {
            while (p < s_.size() && std::isdigit(static_cast<unsigned char>(s_[p]))) ++p;
        }
        size_t int_end = p;
        bool is_float = false;
        if (p + 1 < s_.size() && s_[p] == '.' && std::isdigit(static_cast<unsigned char>(s_[p + 1]))) {
            p += 2;
            while (p < s_.size() && std::isdigit(static_cast<unsigned char>(s_[p]))) ++p;
            is_float = true;
        }
        if (p < s_.size() && (s_[p] == 'e' || s_[p] == 'E')) {
            size_t q = p + 1;
            if (q < s_.size() && (s_[q] == '+' || s_[q] == '-')) ++q;
            if (q < s_.size() && std::isdigit(static_cast<unsigned char>(s_[q]))) {
                while (q < s_.size() && std::isdigit(static_cast<unsigned char>(s_[q]))) ++q;
                p = q;
                is_float = true;
            }
        }
        pos_ = p;
        if (is_float) {
            std::string literal(s_.substr(start, p - start));
            out.kind = PyJson::Kind::kFloat;
            out.number = std::strtod(literal.c_str(), nullptr);  // correctly rounded; overflow gives +-inf
        } else {
            out.kind = PyJson::Kind::kInt;
            out.text = std::string(s_.substr(start, int_end - start));
            if (out.text == "-0") out.text = "0";
        }
        return true;
    }

    bool read_hex4(uint32_t& cp) {
        if (pos_ + 4 > s_.size()) return fail("invalid \\uXXXX escape");
        cp = 0;
        for (int i = 0; i < 4; ++i) {
            char h = s_[pos_ + i];
            cp <<= 4;
            if (h >= '0' && h <= '9') cp |= h - '0';
            else if (h >= 'a' && h <= 'f') cp |= h - 'a' + 10;
            else if (h >= 'A' && h <= 'F') cp |= h - 'A' + 10;
            else return fail("invalid \\uXXXX escape");
        }
        pos_ += 4;
        return true;
    }

    bool read_string(std::string& out) {
        ++pos_;  // opening quote
        while (true) {
            if (pos_ >= s_.size()) return fail("unterminated string");
            unsigned char c = static_cast<unsigned char>(s_[pos_]);
            if (c == '"') {
                ++pos_;
                return true;
            }
            if (c < 0x20) return fail("invalid control character in string");
            if (c != '\\') {
                out += static_cast<char>(c);
                ++pos_;
                continue;
            }
            ++pos_;
            if (pos_ >= s_.size()) return fail("unterminated string");
            char e = s_[pos_++];
            switch (e) {
                case '"': out += '"'; break;
                case '\\': out += '\\'; break;
                case '/': out += '/'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'n': out += '\n'; break;
                case 'r': out += '\r'; break;
                case 't': out += '\t'; break;
                case 'u': {
                    uint32_t cp;
                    if (!read_hex4(cp)) return false;
                    if (cp >= 0xD800 && cp <= 0xDBFF && starts_with("\\u")) {
                        size_t save = pos_;
                        pos_ += 2;
                        uint32_t low;
                        if (read_hex4(low) && low >= 0xDC00 && low <= 0xDFFF) {
                            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                        } else {
                            error_.clear();
                            pos_ = save;
                        }
                    }
                    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;  // lone surrogate
                    dsv4::append_utf8(char32_t(cp), out);
                    break;
                }
                default: --pos_; return fail("invalid escape");
            }
        }
    }

    bool read_array(PyJson& out, int depth) {
        out.kind = PyJson::Kind::kArray;
        ++pos_;
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == ']') {
            ++pos_;
            return true;
        }
        while (true) {
            skip_ws();
            PyJson item;
            if (!read_value(item, depth + 1)) return false;
            out.items.push_back(std::move(item));
            skip_ws();
            if (pos_ < s_.size() && s_[pos_] == ',') {
                ++pos_;
                continue;
            }
            if (pos_ < s_.size() && s_[pos_] == ']') {
                ++pos_;
                return true;
            }
            return fail("expecting ',' or ']'");
        }
    }

    bool read_object(PyJson& out, int depth) {
        out.kind = PyJson::Kind::kObject;
        ++pos_;
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == '}') {
            ++pos_;
            return true;
        }
        while (true) {
            skip_ws();
            if (pos_ >= s_.size() || s_[pos_] != '"') return fail("expecting property name in double quotes");
            std::string key;
            if (!read_string(key)) return false;
            skip_ws();
            if (pos_ >= s_.size() || s_[pos_] != ':') return fail("expecting ':'");
            ++pos_;
            skip_ws();
            PyJson item;
            if (!read_value(item, depth + 1)) return false;
            bool replaced = false;
            for (auto& member : out.members) {  // dict semantics: first position, last value
                if (member.first == key) {
                    member.second = std::move(item);
                    replaced = true;
                    break;
                }
            }
            if (!replaced) out.members.emplace_back(std::move(key), std::move(item));
            skip_ws();
            if (pos_ < s_.size() && s_[pos_] == ',') {
                ++pos_;
                continue;
            }
            if (pos_ < s_.size() && s_[pos_] == '}') {
                ++pos_;
                return true;
            }
            return fail("expecting ',' or '}'");
        }
    }

    std::string_view s_;
    size_t pos_ = 0;
    std::string error_;
};

}  // namespace

Result<PyJson> python_json_loads(std::string_view text) { return PyJsonReader(text).read_document(); }

}  // namespace dsv4::chat
