// Python-compatible JSON: values below are what CPython 3.11 prints for repr(float), json.dumps(...,
// ensure_ascii=False) and json.loads acceptance.
#include <gtest/gtest.h>

#include "chat/python_json.h"

namespace dsv4::chat {
namespace {

TEST(PythonJson, FloatRepr) {
    const std::pair<double, const char*> cases[] = {
        {0.1, "0.1"},
        {1.0, "1.0"},
        {100.0, "100.0"},
        {2.5, "2.5"},
        {-0.0, "-0.0"},
        {0.0, "0.0"},
        {1e16, "1e+16"},
        {1e15, "1000000000000000.0"},
        {9999999999999998.0, "9999999999999998.0"},
        {123456789012345678.0, "1.2345678901234568e+17"},
        {1e-5, "1e-05"},
        {0.0001, "0.0001"},
        {0.00012, "0.00012"},
        {1.5e-7, "1.5e-07"},
        {1.0 / 3.0, "0.3333333333333333"},
        {0.1 + 0.2, "0.30000000000000004"},
        {5e-324, "5e-324"},
        {1.7976931348623157e308, "1.7976931348623157e+308"},
        {1e100, "1e+100"},
        {-2.0e-7, "-2e-07"},
    };
    for (const auto& [v, want] : cases) EXPECT_EQ(python_float_repr(v), want) << v;
    EXPECT_EQ(python_float_repr(INFINITY), "Infinity");
    EXPECT_EQ(python_float_repr(-INFINITY), "-Infinity");
    EXPECT_EQ(python_float_repr(NAN), "NaN");
}

TEST(PythonJson, DumpsSeparatorsEscapesAndKeyOrder) {
    Json v = Json::parse(R"({"z": 1, "a": [1.0, 2, true, null, "x"], "s": "q\"\\\n\r\t\b\f\u0001\u007f/é\u2028"})");
    EXPECT_EQ(python_json_dumps(v), "{\"z\": 1, \"a\": [1.0, 2, true, null, \"x\"], "
                                    "\"s\": \"q\\\"\\\\\\n\\r\\t\\b\\f\\u0001\x7f/é\u2028\"}");
    EXPECT_EQ(python_json_dumps(Json::parse("{}")), "{}");
    EXPECT_EQ(python_json_dumps(Json::parse("[]")), "[]");
    EXPECT_EQ(python_json_dumps(Json::parse("18446744073709551615")), "18446744073709551615");
    EXPECT_EQ(python_json_dumps(Json::parse("-9223372036854775808")), "-9223372036854775808");
}

std::string roundtrip(std::string_view text) {
    auto v = python_json_loads(text);
    if (!v.is_ok()) return "ERROR";
    std::string out;
    append_python_json(out, *v);
    return out;
}

TEST(PythonJson, LoadsKeepsNumbersExact) {
    EXPECT_EQ(roundtrip("123456789012345678901234567890"), "123456789012345678901234567890");
    EXPECT_EQ(roundtrip("-0"), "0");
    EXPECT_EQ(roundtrip("-0.0"), "-0.0");
    EXPECT_EQ(roundtrip("1e3"), "1000.0");
    EXPECT_EQ(roundtrip("2E-7"), "2e-07");
    EXPECT_EQ(roundtrip("1.5e+2"), "150.0");
    EXPECT_EQ(roundtrip("1e400"), "Infinity");
    EXPECT_EQ(roundtrip("[NaN, Infinity, -Infinity]"), "[NaN, Infinity, -Infinity]");
    EXPECT_EQ(roundtrip(" \t\n{\"a\" :1 ,\"b\":[ ]}\r\n"), "{\"a\": 1, \"b\": []}");
}

TEST(PythonJson, LoadsDictSemanticsAndEscapes) {
    EXPECT_EQ(roundtrip(R"({"a": 1, "b": 2, "a": 3})"), R"({"a": 3, "b": 2})");
    EXPECT_EQ(roundtrip(R"("\ud83d\ude00 \u00e9 \/")"), "\"😀 é /\"");
    EXPECT_EQ(roundtrip(R"("\ud800x")"), "\"\xEF\xBF\xBDx\"");  // lone surrogate
}

TEST(PythonJson, LoadsRejectsWhatPythonRejects) {
    for (const char* bad : {"", " ", "01", "1.", ".5", "-", "+1", "{\"a\":1,}", "[1,]", "{'a':1}", "\"a\tb\"",
                            "\"\\x\"", "[1] 2", "nul", "-NaN", "{\"a\"}", "\"abc", "[1 2]"}) {
        EXPECT_FALSE(python_json_loads(bad).is_ok()) << "'" << bad << "'";
    }
}

}  // namespace
}  // namespace dsv4::chat
