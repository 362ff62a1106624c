#include <gtest/gtest.h>

#include "core/utf8.h"

namespace dsv4 {
namespace {

TEST(Utf8, ValidatesAndRepairsLikePythonReplace) {
    EXPECT_TRUE(is_valid_utf8("plain ascii"));
    EXPECT_TRUE(is_valid_utf8("caf\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\x98\x80"));
    EXPECT_FALSE(is_valid_utf8("\xC0\x80"));          // overlong NUL
    EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));      // surrogate U+D800
    EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // past U+10FFFF
    // b"\xe4\xb8x".decode("utf-8", "replace") == "\ufffdx": one U+FFFD for the maximal subpart.
    EXPECT_EQ(sanitize_utf8("\xE4\xB8x"), "\xEF\xBF\xBDx");
    // b"\xff\xfe".decode(..., "replace") == "\ufffd\ufffd"
    EXPECT_EQ(sanitize_utf8("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(Utf8, IncompleteTailIsHeldBackOnlyWhenItCanComplete) {
    EXPECT_EQ(incomplete_utf8_tail("abc"), 0u);
    EXPECT_EQ(incomplete_utf8_tail("a\xE4"), 1u);
    EXPECT_EQ(incomplete_utf8_tail("a\xE4\xB8"), 2u);
    EXPECT_EQ(incomplete_utf8_tail("a\xE4\xB8\xAD"), 0u);
    EXPECT_EQ(incomplete_utf8_tail("\xF0\x9F\x98"), 3u);
    EXPECT_EQ(incomplete_utf8_tail("a\xFF"), 0u);      // can never complete: not held back
    EXPECT_EQ(incomplete_utf8_tail("a\xE4x"), 0u);
    EXPECT_EQ(incomplete_utf8_tail(""), 0u);
}

TEST(Utf8, EncodesEveryLength) {
    std::string out;
    for (char32_t cp : {char32_t(0x41), char32_t(0xE9), char32_t(0x4E2D), char32_t(0x1F600)}) append_utf8(cp, out);
    EXPECT_EQ(out, "A\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80");
    size_t len = 0;
    EXPECT_EQ(code_point_at(out, 6, &len), char32_t(0x1F600));
    EXPECT_EQ(len, 4u);
}

}  // namespace
}  // namespace dsv4
