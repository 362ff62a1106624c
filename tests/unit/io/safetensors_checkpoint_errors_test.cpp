// Checkpoint folders whose index and shards disagree, or that try to reach files outside the folder.
#include <gtest/gtest.h>

#include "io/safetensors.h"
#include "safetensors_test_util.h"
#include "testing/testing.h"

namespace dsv4::io {
namespace {

namespace fs = std::filesystem;
using test::fails_with;

constexpr const char* kShard1 = "model-00001-of-00002.safetensors";
constexpr const char* kShard2 = "model-00002-of-00002.safetensors";

class BadCheckpoint : public ::testing::Test {
protected:
    BadCheckpoint() {
        // Two good shards: shard 1 holds a and b, shard 2 holds c.
        EXPECT_TRUE(write_safetensors(dir() / kShard1, {{"a", DType::kU8, {4}, four_}, {"b", DType::kU8, {4}, four_}})
                        .is_ok());
        EXPECT_TRUE(write_safetensors(dir() / kShard2, {{"c", DType::kU8, {4}, four_}}).is_ok());
    }
    const fs::path& dir() const { return tmp_.path(); }
    std::string index() const { return (dir() / "model.safetensors.index.json").string(); }
    std::string shard(const char* name) const { return (dir() / name).string(); }
    Status open_with_index(const std::string& index_json) {
        test::write_text(dir() / "model.safetensors.index.json", index_json);
        return Checkpoint::open(dir()).status();
    }
    static std::string index_json(const std::string& weight_map_body) {
        return R"({"metadata": {"total_size": 12}, "weight_map": {)" + weight_map_body + "}}";
    }

    testing::TempDir tmp_;
    std::vector<uint8_t> four_ = {1, 2, 3, 4};
};

TEST_F(BadCheckpoint, ValidBaselineOpens) {
    Status s = open_with_index(index_json(R"("a": ")" + std::string(kShard1) + R"(", "b": ")" + kShard1 +
                                          R"(", "c": ")" + kShard2 + R"(")"));
    EXPECT_TRUE(s.is_ok()) << s.to_string();
}

TEST_F(BadCheckpoint, MissingShard) {
    EXPECT_TRUE(fails_with(open_with_index(index_json(R"("a": ")" + std::string(kShard1) + R"(", "b": ")" + kShard1 +
                                                      R"(", "c": ")" + kShard2 + R"(", "d": "model-00003.safetensors")")),
                           StatusCode::kNotFound, {index(), "tensor 'd'", "model-00003.safetensors", "does not exist"}));
}

TEST_F(BadCheckpoint, IndexEntryTheShardDoesNotHold) {
    // 'e' is mapped to shard 2, which exists but holds only 'c'.
    EXPECT_TRUE(fails_with(open_with_index(index_json(R"("a": ")" + std::string(kShard1) + R"(", "b": ")" + kShard1 +
                                                      R"(", "c": ")" + kShard2 + R"(", "e": ")" + kShard2 + R"(")")),
                           StatusCode::kCorrupt, {index(), "tensor 'e'", kShard2, "does not hold it"}));
}

TEST_F(BadCheckpoint, TensorMappedToTheWrongShard) {
    EXPECT_TRUE(fails_with(open_with_index(index_json(R"("a": ")" + std::string(kShard1) + R"(", "b": ")" + kShard2 +
                                                      R"(", "c": ")" + kShard2 + R"(")")),
                           StatusCode::kCorrupt, {shard(kShard1), "tensor 'b'", index(), kShard2}));
}

TEST_F(BadCheckpoint, TensorInAShardButNotInTheIndex) {
    EXPECT_TRUE(fails_with(open_with_index(index_json(R"("a": ")" + std::string(kShard1) + R"(", "c": ")" + kShard2 +
                                                      R"(")")),
                           StatusCode::kCorrupt, {shard(kShard1), "tensor 'b'", "not listed in", index()}));
}

TEST_F(BadCheckpoint, ShardNameOutsideTheFolder) {
    // The file really exists one level up: only the name rule keeps us from opening it.
    ASSERT_TRUE(write_safetensors(dir() / "sub.safetensors", {{"x", DType::kU8, {4}, four_}}).is_ok());
    fs::create_directory(dir() / "inner");
    for (const char* name : {"../sub.safetensors", "/etc/passwd", "inner/../sub.safetensors", "..", "", "a\\\\b"}) {
        const std::string json = index_json(R"("x": ")" + std::string(name) + R"(")");
        test::write_text(dir() / "inner" / "model.safetensors.index.json", json);
        EXPECT_TRUE(fails_with(Checkpoint::open(dir() / "inner").status(), StatusCode::kCorrupt,
                               {(dir() / "inner" / "model.safetensors.index.json").string(), "tensor 'x'",
                                "not a plain file name"}))
            << name;
    }
}

TEST_F(BadCheckpoint, DuplicateTensorAcrossShards) {
    ASSERT_TRUE(write_safetensors(dir() / kShard2, {{"a", DType::kU8, {4}, four_}, {"c", DType::kU8, {4}, four_}})
                    .is_ok());
    EXPECT_TRUE(fails_with(open_with_index(index_json(R"("a": ")" + std::string(kShard1) + R"(", "b": ")" + kShard1 +
                                                      R"(", "c": ")" + kShard2 + R"(")")),
                           StatusCode::kCorrupt, {shard(kShard2), "tensor 'a'", shard(kShard1), "only one shard"}));
    // Without an index the same two files are just as ambiguous.
    fs::remove(dir() / "model.safetensors.index.json");
    EXPECT_TRUE(fails_with(Checkpoint::open(dir()).status(), StatusCode::kCorrupt,
                           {shard(kShard2), "tensor 'a'", shard(kShard1), "only one shard"}));
}

TEST_F(BadCheckpoint, MalformedIndex) {
    EXPECT_TRUE(fails_with(open_with_index("{"), StatusCode::kCorrupt, {index(), "not valid JSON"}));
    EXPECT_TRUE(fails_with(open_with_index("[]"), StatusCode::kCorrupt, {index(), "must be a JSON object"}));
    EXPECT_TRUE(fails_with(open_with_index(R"({"metadata": {}})"), StatusCode::kCorrupt, {index(), "weight_map"}));
    EXPECT_TRUE(fails_with(open_with_index(R"({"weight_map": []})"), StatusCode::kCorrupt, {index(), "weight_map"}));
    EXPECT_TRUE(fails_with(open_with_index(R"({"weight_map": {}})"), StatusCode::kCorrupt, {index(), "empty"}));
    EXPECT_TRUE(fails_with(open_with_index(R"({"weight_map": {"a": 1}})"), StatusCode::kCorrupt,
                           {index(), "tensor 'a'", "file name string"}));
    EXPECT_TRUE(fails_with(open_with_index(R"({"metadata": {"total_size": -1}, "weight_map": {"a": "x"}})"),
                           StatusCode::kCorrupt, {index(), "total_size"}));
    EXPECT_TRUE(fails_with(open_with_index(std::string(100000, '{')), StatusCode::kCorrupt,
                           {index(), "nests deeper"}));
    EXPECT_TRUE(fails_with(open_with_index(index_json(R"("a": ")" + std::string(kShard1) + R"(", "a": ")" + kShard2 +
                                                      R"(")")),
                           StatusCode::kCorrupt, {index(), "'a' appears twice"}));
}

TEST_F(BadCheckpoint, CorruptShardIsReportedByItsPath) {
    test::write_bytes(dir() / kShard2, {1, 2, 3});
    EXPECT_TRUE(fails_with(open_with_index(index_json(R"("a": ")" + std::string(kShard1) + R"(", "b": ")" + kShard1 +
                                                      R"(", "c": ")" + kShard2 + R"(")")),
                           StatusCode::kCorrupt, {shard(kShard2), "3 bytes"}));
}

TEST(CheckpointOpen, MissingOrEmptyFolder) {
    testing::TempDir tmp;
    EXPECT_TRUE(fails_with(Checkpoint::open(tmp.path() / "absent").status(), StatusCode::kNotFound,
                           {(tmp.path() / "absent").string()}));
    EXPECT_TRUE(fails_with(Checkpoint::open(tmp.path()).status(), StatusCode::kNotFound,
                           {tmp.path().string(), "model.safetensors"}));
}

}  // namespace
}  // namespace dsv4::io
