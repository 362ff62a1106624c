// Corrupt single files: each case must fail with one Status of the right code whose message names the file and,
// where there is one, the tensor.
#include <gtest/gtest.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "safetensors_test_util.h"
#include "testing/testing.h"

namespace dsv4::io {
namespace {

namespace fs = std::filesystem;
using test::fails_with;
using test::raw_safetensors;

class CorruptFile : public ::testing::Test {
protected:
    // Writes the hand-made file and opens it; returns the open's Status.
    Status open_raw(std::string_view header, uint64_t data_bytes, std::optional<uint64_t> length = std::nullopt) {
        test::write_bytes(path_, raw_safetensors(header, data_bytes, length));
        return SafetensorsFile::open(path_).status();
    }
    std::string file() const { return path_.string(); }

    testing::TempDir tmp_;
    fs::path path_ = tmp_.path() / "model-00001-of-00002.safetensors";
};

TEST_F(CorruptFile, ValidBaselineOpens) {
    // The shape of every corrupt case below, intact: proves the failures come from the one thing changed.
    EXPECT_TRUE(open_raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8).is_ok());
}

TEST_F(CorruptFile, TruncatedBeforeTheLength) {
    test::write_bytes(path_, {1, 2, 3, 4, 5});
    EXPECT_TRUE(fails_with(SafetensorsFile::open(path_).status(), StatusCode::kCorrupt, {file(), "5 bytes", "truncated"}));
    test::write_bytes(path_, {});
    EXPECT_TRUE(fails_with(SafetensorsFile::open(path_).status(), StatusCode::kCorrupt, {file(), "0 bytes"}));
}

TEST_F(CorruptFile, TruncatedDataRegion) {
    EXPECT_TRUE(fails_with(open_raw(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 10),
                           StatusCode::kCorrupt, {file(), "tensor 'a'", "data_offsets [0, 16]", "10 bytes"}));
}

TEST_F(CorruptFile, HeaderLengthPastEndOfFile) {
    EXPECT_TRUE(fails_with(open_raw(R"({})", 0, 1000), StatusCode::kCorrupt,
                           {file(), "header length 1000", "past the end of the file (10 bytes)"}));
}

TEST_F(CorruptFile, HeaderLengthOverTheBound) {
    // The file really is that long (a hole), so only the bound can reject it, before any of it is read.
    test::write_bytes(path_, raw_safetensors("{}", 0, kMaxHeaderBytes + 1));
    ASSERT_EQ(::truncate(path_.c_str(), static_cast<off_t>(kMaxHeaderBytes + 64)), 0);
    EXPECT_TRUE(fails_with(SafetensorsFile::open(path_).status(), StatusCode::kCorrupt,
                           {file(), "header length 104857601", "limit"}));
    EXPECT_TRUE(fails_with(open_raw("{}", 0, ~0ull), StatusCode::kCorrupt, {file(), "18446744073709551615"}));
}

TEST_F(CorruptFile, InvalidJson) {
    EXPECT_TRUE(fails_with(open_raw(R"({"a":{"dtype":"F32",)", 0), StatusCode::kCorrupt, {file(), "not valid JSON"}));
    EXPECT_TRUE(fails_with(open_raw("{\"a\xff\":{}}", 0), StatusCode::kCorrupt, {file(), "not valid JSON"}));
    EXPECT_TRUE(fails_with(open_raw("", 0), StatusCode::kCorrupt, {file(), "not valid JSON"}));
    // Trailing bytes that are not whitespace (NUL padding) are not JSON either.
    EXPECT_TRUE(fails_with(open_raw(std::string("{}\0\0", 4), 0), StatusCode::kCorrupt, {file(), "not valid JSON"}));
}

TEST_F(CorruptFile, TopLevelNotAnObject) {
    EXPECT_TRUE(fails_with(open_raw("[1, 2]", 0), StatusCode::kCorrupt, {file(), "must be a JSON object", "array"}));
    EXPECT_TRUE(fails_with(open_raw("\"x\"", 0), StatusCode::kCorrupt, {file(), "must be a JSON object", "string"}));
}

TEST_F(CorruptFile, EntryNotAnObjectOrWithWrongKeys) {
    EXPECT_TRUE(fails_with(open_raw(R"({"a":[1]})", 0), StatusCode::kCorrupt, {file(), "tensor 'a'", "array"}));
    EXPECT_TRUE(fails_with(open_raw(R"({"a":{"dtype":"F32","shape":[2]}})", 8), StatusCode::kCorrupt,
                           {file(), "tensor 'a'", "missing 'data_offsets'"}));
    EXPECT_TRUE(fails_with(open_raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"crc":1}})", 8),
                           StatusCode::kCorrupt, {file(), "tensor 'a'", "unexpected key 'crc'"}));
    EXPECT_TRUE(fails_with(open_raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"dtype":"U8"}})", 8),
                           StatusCode::kCorrupt, {file(), "'dtype' appears twice"}));
}

TEST_F(CorruptFile, DuplicateTensorName) {
    EXPECT_TRUE(fails_with(open_raw(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                                    R"("a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})",
                                    4),
                           StatusCode::kCorrupt, {file(), "'a' appears twice"}));
}

TEST_F(CorruptFile, OverlappingOffsets) {
    EXPECT_TRUE(fails_with(open_raw(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                                    R"("b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})",
                                    12),
                           StatusCode::kCorrupt, {file(), "tensor 'b'", "[4, 12] overlap tensor 'a' at [0, 8]"}));
    // A range inside an earlier, longer one, found through the furthest end rather than the previous range.
    EXPECT_TRUE(fails_with(open_raw(R"({"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]},)"
                                    R"("b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]},)"
                                    R"("c":{"dtype":"U8","shape":[2],"data_offsets":[8,10]}})",
                                    16),
                           StatusCode::kCorrupt, {file(), "tensor 'b'", "overlap tensor 'a'"}));
    // Empty ranges hold nothing and overlap nothing; gaps are allowed.
    EXPECT_TRUE(open_raw(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                         R"("z":{"dtype":"U8","shape":[0],"data_offsets":[4,4]},)"
                         R"("b":{"dtype":"U8","shape":[2],"data_offsets":[10,12]}})",
                         12)
                    .is_ok());
}

TEST_F(CorruptFile, WrongByteSize) {
    const std::string path = file();
    EXPECT_EQ(open_raw(R"({"layers.0.attn.wq_a.weight":{"dtype":"F8_E4M3","shape":[8,32],"data_offsets":[0,100]}})",
                       100)
                  .to_string(),
              "corrupt: " + path +
                  ": tensor 'layers.0.attn.wq_a.weight': data_offsets [0, 100] hold 100 bytes but shape [8, 32] x "
                  "F8_E4M3 needs 256 bytes");
}

TEST_F(CorruptFile, UnknownDType) {
    EXPECT_TRUE(fails_with(open_raw(R"({"w":{"dtype":"F8_E5M2","shape":[2],"data_offsets":[0,2]}})", 2),
                           StatusCode::kCorrupt, {file(), "tensor 'w'", "unknown dtype 'F8_E5M2'", "F8_E4M3"}));
    EXPECT_TRUE(fails_with(open_raw(R"({"w":{"dtype":7,"shape":[2],"data_offsets":[0,2]}})", 2),
                           StatusCode::kCorrupt, {file(), "tensor 'w'", "dtype must be a string"}));
}

TEST_F(CorruptFile, BadShapes) {
    for (const char* shape : {"[-1,4]", "[2.0]", "[\"2\"]", "\"2\"", "[[2]]", "[9223372036854775808]", "[1e3]"}) {
        const std::string header =
            std::string(R"({"w":{"dtype":"U8","shape":)") + shape + R"(,"data_offsets":[0,0]}})";
        EXPECT_TRUE(fails_with(open_raw(header, 0), StatusCode::kCorrupt, {file(), "tensor 'w'", "shape"})) << shape;
    }
}

TEST_F(CorruptFile, BadDataOffsets) {
    for (const char* offsets : {"[0]", "[0,1,2]", "[-1,1]", "[0,1.5]", "{}", "[\"0\",\"1\"]"}) {
        const std::string header =
            std::string(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":)") + offsets + R"(}})";
        EXPECT_TRUE(fails_with(open_raw(header, 1), StatusCode::kCorrupt, {file(), "tensor 'w'", "data_offsets"}))
            << offsets;
    }
    EXPECT_TRUE(fails_with(open_raw(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}})", 4),
                           StatusCode::kCorrupt, {file(), "tensor 'w'", "begin is past end"}));
}

TEST_F(CorruptFile, OffsetsPastEndOfFile) {
    EXPECT_TRUE(fails_with(open_raw(R"({"w":{"dtype":"U8","shape":[1000],"data_offsets":[0,1000]}})", 16),
                           StatusCode::kCorrupt, {file(), "tensor 'w'", "[0, 1000]", "16 bytes"}));
    // An empty range placed past the end is still outside the file.
    EXPECT_TRUE(fails_with(open_raw(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[17,17]}})", 16),
                           StatusCode::kCorrupt, {file(), "tensor 'w'", "[17, 17]"}));
}

TEST_F(CorruptFile, OffsetArithmeticOverflow) {
    // 2^62 x 2^62 elements: the element count wraps uint64 (and 2^32 x 2^32 x 2 B would wrap the byte count).
    EXPECT_TRUE(fails_with(open_raw(R"({"w":{"dtype":"U8","shape":[4611686018427387904,4611686018427387904],)"
                                    R"("data_offsets":[0,0]}})",
                                    0),
                           StatusCode::kCorrupt, {file(), "tensor 'w'", "overflows"}));
    EXPECT_TRUE(fails_with(open_raw(R"({"w":{"dtype":"BF16","shape":[4294967296,4294967296],)"
                                    R"("data_offsets":[0,0]}})",
                                    0),
                           StatusCode::kCorrupt, {file(), "tensor 'w'", "overflows"}));
    // A wrapped product that lands on the range size must not pass: 2^63 x 2 B wraps to 0.
    EXPECT_TRUE(fails_with(open_raw(R"({"w":{"dtype":"BF16","shape":[4611686018427387904,2],)"
                                    R"("data_offsets":[0,0]}})",
                                    0),
                           StatusCode::kCorrupt, {file(), "tensor 'w'", "overflows"}));
    // data_start + end would wrap uint64 if added naively.
    EXPECT_TRUE(fails_with(open_raw(R"({"w":{"dtype":"U8","shape":[1],)"
                                    R"("data_offsets":[18446744073709551614,18446744073709551615]}})",
                                    1),
                           StatusCode::kCorrupt, {file(), "tensor 'w'", "past the end"}));
}

TEST_F(CorruptFile, BadMetadata) {
    EXPECT_TRUE(fails_with(open_raw(R"({"__metadata__":{"format":1}})", 0), StatusCode::kCorrupt,
                           {file(), "__metadata__ key 'format'", "string"}));
    EXPECT_TRUE(fails_with(open_raw(R"({"__metadata__":["pt"]})", 0), StatusCode::kCorrupt,
                           {file(), "__metadata__ must be an object"}));
}

TEST_F(CorruptFile, DeepNestingBomb) {
    // A million '[' would exhaust the stack of a recursive parser; the pre-scan refuses it first.
    const std::string bomb = std::string(1000000, '[') + std::string(1000000, ']');
    EXPECT_TRUE(fails_with(open_raw(bomb, 0), StatusCode::kCorrupt, {file(), "nests deeper than 64"}));
    const std::string in_entry = R"({"w":{"dtype":"U8","shape":)" + std::string(100000, '[');
    EXPECT_TRUE(fails_with(open_raw(in_entry, 0), StatusCode::kCorrupt, {file(), "nests deeper than 64"}));
    // Brackets inside strings are text, not nesting.
    const std::string in_string = R"({"__metadata__":{"k":")" + std::string(1000, '[') + R"("}})";
    EXPECT_TRUE(open_raw(in_string, 0).is_ok());
}

TEST_F(CorruptFile, ControlBytesInNamesStayOnOneLine) {
    Status s = open_raw("{\"a\\nb\":{\"dtype\":\"X\",\"shape\":[],\"data_offsets\":[0,0]}}", 0);
    EXPECT_TRUE(fails_with(s, StatusCode::kCorrupt, {file(), "tensor 'a\\x0ab'"}));
    EXPECT_EQ(s.message().find('\n'), std::string::npos);
}

TEST_F(CorruptFile, MissingFileAndFolder) {
    EXPECT_TRUE(fails_with(SafetensorsFile::open(tmp_.path() / "nope.safetensors").status(), StatusCode::kNotFound,
                           {"nope.safetensors"}));
    EXPECT_TRUE(fails_with(SafetensorsFile::open(tmp_.path()).status(), StatusCode::kIo,
                           {tmp_.path().string(), "not a regular file"}));
}

TEST(ParseHeader, NeverReadsPastThePrefix) {
    // The file is said to be large, but only 20 bytes were read: the header length (100) must not be trusted.
    const std::vector<uint8_t> bytes = raw_safetensors("{}      ", 4, 100);
    EXPECT_TRUE(fails_with(parse_header(bytes, 1ull << 40, "f.safetensors").status(), StatusCode::kCorrupt,
                           {"f.safetensors", "20 bytes read"}));
    EXPECT_TRUE(fails_with(parse_header({}, 1ull << 40, "f.safetensors").status(), StatusCode::kCorrupt,
                           {"f.safetensors", "0 bytes"}));
    // The prefix may hold more than the header: the data region is not looked at.
    const std::vector<uint8_t> good = raw_safetensors(R"({"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}})", 3);
    auto h = parse_header(good, good.size(), "g");
    ASSERT_TRUE(h.is_ok()) << h.status().to_string();
    EXPECT_EQ(h->data_start, good.size() - 3);
    EXPECT_EQ(h->tensors.at(0).nbytes(), 3u);
}

}  // namespace
}  // namespace dsv4::io
