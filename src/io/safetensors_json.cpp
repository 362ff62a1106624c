// Strict JSON parsing and small arithmetic/formatting helpers for safetensors headers and indexes.
#include <cstdio>
#include <limits>
#include <set>
#include <sstream>

#include "io/safetensors_internal.h"

namespace dsv4::io::detail {

using nlohmann::json;

int json_nesting_depth(std::string_view text, int limit) {
    // Tracks strings exactly as the JSON grammar does (a string starts at '"' and ends at the next unescaped '"'),
    // so for any prefix the parser accepts, this depth is the parser's depth. Past the first error the parser
    // stops, so extra brackets there cannot make it go deeper than counted here.
    int depth = 0, deepest = 0;
    bool in_string = false, escaped = false;
    for (char c : text) {
        if (in_string) {
            if (escaped) {
                escaped = false;
            } else if (c == '\\') {
                escaped = true;
            } else if (c == '"') {
                in_string = false;
            }
            continue;
        }
        if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > deepest) {
                deepest = depth;
                if (deepest > limit) return deepest;
            }
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    return deepest;
}

std::string printable(std::string_view s, size_t max_len) {
    std::string out;
    out.reserve(std::min(s.size(), max_len) + 4);
    for (size_t i = 0; i < s.size(); ++i) {
        if (out.size() >= max_len) {
            out += "...";
            break;
        }
        unsigned char c = static_cast<unsigned char>(s[i]);
        if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else {
            out += static_cast<char>(c);
        }
    }
    return out;
}

Result<json> parse_json_strict(std::string_view text, std::string_view label) {
    std::string where(label);
    if (json_nesting_depth(text, kMaxJsonDepth) > kMaxJsonDepth) {
        return corrupt(where + ": JSON nests deeper than " + std::to_string(kMaxJsonDepth) +
                       " levels; this is not a safetensors header or index");
    }
    // JSON text never holds a raw NUL (inside strings it must be escaped), but nlohmann's lexer takes one as the
    // end of input, which would let "{}\0<anything>" through. Refuse it here.
    if (size_t nul = text.find('\0'); nul != std::string_view::npos) {
        return corrupt(where + ": not valid JSON: NUL byte at offset " + std::to_string(nul));
    }
    // One key set per open object; the parser reports keys through this callback in document order.
    std::vector<std::set<std::string>> open_objects;
    std::string duplicate_key;
    auto on_event = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
        switch (event) {
            case json::parse_event_t::object_start: open_objects.emplace_back(); break;
            case json::parse_event_t::object_end:
                if (!open_objects.empty()) open_objects.pop_back();
                break;
            case json::parse_event_t::key:
                if (!open_objects.empty() && parsed.is_string() &&
                    !open_objects.back().insert(parsed.get_ref<const std::string&>()).second && duplicate_key.empty()) {
                    duplicate_key = parsed.get_ref<const std::string&>();
                }
                break;
            default: break;
        }
        return true;
    };
    json doc;
    try {
        doc = json::parse(text.begin(), text.end(), on_event, /*allow_exceptions=*/true, /*ignore_comments=*/false);
    } catch (const json::exception& e) {
        return corrupt(where + ": not valid JSON: " + printable(e.what(), 240));
    }
    if (!duplicate_key.empty()) {
        return corrupt(where + ": key '" + printable(duplicate_key) + "' appears twice in one object");
    }
    return doc;
}

std::string shape_to_string(std::span<const int64_t> shape) {
    std::ostringstream s;
    s << '[';
    for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
    s << ']';
    return s.str();
}

bool checked_nbytes(std::span<const int64_t> shape, DType dtype, uint64_t* nbytes) {
    uint64_t numel = 1;
    for (int64_t d : shape) {
        if (d < 0 || __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel)) return false;
    }
    // numel must also fit TensorEntry::numel()'s int64.
    if (numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    return !__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(dtype)), nbytes);
}

}  // namespace dsv4::io::detail
