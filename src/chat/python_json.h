// Python-compatible JSON: what `json.dumps(value, ensure_ascii=False)` writes and what `json.loads` accepts.
// The V4 prompt embeds JSON written by Python (tool schemas, response formats, non-string tool-call arguments), so
// byte-identical prompts need Python's separators (", " and ": "), its escaping rules and its float repr.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dsv4/status.h"

namespace dsv4::chat {

using Json = nlohmann::ordered_json;

// repr(float) in Python 3: shortest round-trip digits; fixed notation for 1e-4 <= |v| < 1e16 (always with a
// fractional part: "1.0", "1000.0"), otherwise "1e-05" / "1.5e+16". NaN and infinities are written as json.dumps
// writes them ("NaN", "Infinity", "-Infinity").
std::string python_float_repr(double value);

// A JSON string literal as json.dumps(ensure_ascii=False) writes it: `"` `\` and control characters escaped
// (\n \r \t \b \f, others as lowercase \u00xx); DEL, U+2028 and all other non-ASCII bytes are copied raw.
void append_python_json_string(std::string& out, std::string_view text);

// json.dumps(value, ensure_ascii=False) of a parsed nlohmann value; object key order is kept (ordered_json).
// Integers beyond 64 bits cannot be represented by nlohmann and arrive here as floats.
void append_python_json(std::string& out, const Json& value);
std::string python_json_dumps(const Json& value);

// A JSON value as Python's json.loads produces it, with numbers kept exact: an integer keeps its digits (any size),
// a float is the correctly rounded double of its literal. Objects keep the first position of a key and the last
// value (Python dict semantics for duplicate keys).
struct PyJson {
    enum class Kind { kNull, kBool, kInt, kFloat, kString, kArray, kObject };
    Kind kind = Kind::kNull;
    bool boolean = false;
    double number = 0;   // kFloat
    std::string text;    // kInt: canonical decimal digits with sign; kString: UTF-8 text
    std::vector<PyJson> items;                              // kArray
    std::vector<std::pair<std::string, PyJson>> members;    // kObject

    PyJson() = default;
    PyJson(const PyJson&) = default;
    PyJson(PyJson&&) noexcept = default;
    PyJson& operator=(const PyJson&) = default;
    PyJson& operator=(PyJson&&) noexcept = default;
    ~PyJson();  // out of line: clang < 16 cannot instantiate the vector destructors while PyJson is incomplete
};

// json.loads acceptance: RFC 8259 plus NaN / Infinity / -Infinity; surrounding " \t\n\r" allowed; raw control
// characters inside strings rejected (strict mode). A lone surrogate escape becomes U+FFFD (Python would keep a
// lone surrogate that cannot be written as UTF-8 later). Returns an error describing the first problem.
Result<PyJson> python_json_loads(std::string_view text);

void append_python_json(std::string& out, const PyJson& value);

}  // namespace dsv4::chat
