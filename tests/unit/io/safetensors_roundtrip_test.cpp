// Writer -> reader round trips: single files, every dtype, sparse files, sharded folders, and the writer's bytes
// against the format's reference writer.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <random>

#include "io/safetensors.h"
#include "safetensors_test_util.h"
#include "testing/testing.h"

namespace dsv4::io {
namespace {

namespace fs = std::filesystem;
using test::fails_with;
using test::read_bytes;

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> out(n);
    for (auto& b : out) b = static_cast<uint8_t>(rng());
    return out;
}

std::vector<uint8_t> hex_to_bytes(std::string_view hex) {
    std::vector<uint8_t> out;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) {
        out.push_back(static_cast<uint8_t>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
    }
    return out;
}

// The output of the format's reference writer (Python safetensors 0.8.0, safetensors.numpy.save) for:
//   {"w.f32": arange(6, f32).reshape(2,3) * 0.5, "ids": [7, -3] i64, "q": [1, -2, 3] i8, "empty": zeros((0,4), u8),
//    "h": [1.5, -2] f16, "flag": [True, False, True], "s": [300, -7] i16}, metadata {"format": "pt", "note": "ref"}
// It orders tensors by alignment then name; we hand our writer the same order.
constexpr std::string_view kReferenceFileHex =
    "c0010000000000007b225f5f6d657461646174615f5f223a7b22666f726d6174223a227074222c226e6f7465223a22726566227d2c2269"
    "6473223a7b226474797065223a22493634222c227368617065223a5b325d2c22646174615f6f666673657473223a5b302c31365d7d2c22"
    "772e663332223a7b226474797065223a22463332222c227368617065223a5b322c335d2c22646174615f6f666673657473223a5b31362c"
    "34305d7d2c2268223a7b226474797065223a22463136222c227368617065223a5b325d2c22646174615f6f666673657473223a5b34302c"
    "34345d7d2c2273223a7b226474797065223a22493136222c227368617065223a5b325d2c22646174615f6f666673657473223a5b34342c"
    "34385d7d2c2271223a7b226474797065223a224938222c227368617065223a5b335d2c22646174615f6f666673657473223a5b34382c35"
    "315d7d2c22656d707479223a7b226474797065223a225538222c227368617065223a5b302c345d2c22646174615f6f666673657473223a"
    "5b35312c35315d7d2c22666c6167223a7b226474797065223a22424f4f4c222c227368617065223a5b335d2c22646174615f6f66667365"
    "7473223a5b35312c35345d7d7d2020200700000000000000fdffffffffffffff000000000000003f0000803f0000c03f0000004000002040"
    "003e00c02c01f9ff01fe03010001";

TEST(SafetensorsWriter, MatchesTheReferenceWriterByteForByte) {
    testing::TempDir tmp;
    const std::vector<uint8_t> ref = hex_to_bytes(kReferenceFileHex);
    ASSERT_EQ(ref.size(), 510u);
    // Tensor bytes are sliced out of the reference file's data region (it starts at 8 + 0x1c0 = 456).
    auto data = [&](size_t begin, size_t end) {
        return std::span<const uint8_t>(ref.data() + 456 + begin, end - begin);
    };
    std::vector<TensorToWrite> tensors = {
        {"ids", DType::kI64, {2}, data(0, 16)},      {"w.f32", DType::kF32, {2, 3}, data(16, 40)},
        {"h", DType::kF16, {2}, data(40, 44)},       {"s", DType::kI16, {2}, data(44, 48)},
        {"q", DType::kI8, {3}, data(48, 51)},        {"empty", DType::kU8, {0, 4}, data(51, 51)},
        {"flag", DType::kBool, {3}, data(51, 54)},
    };
    const fs::path path = tmp.path() / "ref.safetensors";
    ASSERT_TRUE(write_safetensors(path, tensors, {{"format", "pt"}, {"note", "ref"}}).is_ok());
    EXPECT_EQ(read_bytes(path), ref);

    // And the reader sees in the reference file what numpy put there.
    auto file = SafetensorsFile::open(path);
    ASSERT_TRUE(file.is_ok()) << file.status().to_string();
    const TensorEntry* w = (*file)->find("w.f32");
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
    std::vector<float> values(6);
    std::memcpy(values.data(), (*file)->bytes(*w).data(), 24);
    EXPECT_EQ(values, (std::vector<float>{0, 0.5f, 1, 1.5f, 2, 2.5f}));
    const TensorEntry* ids = (*file)->find("ids");
    ASSERT_NE(ids, nullptr);
    int64_t id1 = 0;
    std::memcpy(&id1, (*file)->bytes(*ids).data() + 8, 8);
    EXPECT_EQ(id1, -3);
    EXPECT_EQ((*file)->header().metadata.at("note"), "ref");
    EXPECT_EQ((*file)->find("empty")->numel(), 0);
}

TEST(SafetensorsWriter, EveryDTypeRoundTripsBytesIdentical) {
    testing::TempDir tmp;
    std::vector<std::vector<uint8_t>> payloads;
    std::vector<TensorToWrite> tensors;
    uint32_t seed = 1;
    for (DType t : kAllDTypes) {
        std::vector<int64_t> shape = {3, static_cast<int64_t>(seed) + 1};
        payloads.push_back(random_bytes(3 * (seed + 1) * dtype_size(t), seed));
        tensors.push_back({"t." + std::string(dtype_name(t)), t, shape, {}});
        ++seed;
    }
    for (size_t i = 0; i < tensors.size(); ++i) tensors[i].data = payloads[i];
    tensors.push_back({"scalar", DType::kF32, {}, {}});  // rank 0: one element
    std::vector<uint8_t> scalar = {0, 0, 128, 63};
    tensors.back().data = scalar;

    const fs::path path = tmp.path() / "all.safetensors";
    ASSERT_TRUE(write_safetensors(path, tensors, {{"format", "pt"}}).is_ok());
    auto file = SafetensorsFile::open(path);
    ASSERT_TRUE(file.is_ok()) << file.status().to_string();
    const ParsedHeader& h = (*file)->header();
    EXPECT_EQ(h.data_start % 8, 0u) << "header must be padded to a multiple of 8";
    EXPECT_EQ(h.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
    ASSERT_EQ(h.tensors.size(), tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
        // Data-offset order is the writing order.
        EXPECT_EQ(h.tensors[i].name, tensors[i].name);
        const TensorEntry* e = (*file)->find(tensors[i].name);
        ASSERT_NE(e, nullptr) << tensors[i].name;
        EXPECT_EQ(e->dtype, tensors[i].dtype);
        EXPECT_EQ(e->shape, tensors[i].shape);
        auto got = (*file)->bytes(*e);
        EXPECT_TRUE(std::equal(got.begin(), got.end(), tensors[i].data.begin(), tensors[i].data.end()))
            << tensors[i].name;
    }
    EXPECT_EQ((*file)->find("scalar")->numel(), 1);
    EXPECT_EQ((*file)->find("missing"), nullptr);
    // The padding is spaces, and the whole file is header + the exact sum of the tensors.
    const std::vector<uint8_t> raw = read_bytes(path);
    const std::string header_text(raw.begin() + 8, raw.begin() + static_cast<std::ptrdiff_t>(h.data_start));
    const size_t close = header_text.find_last_of('}');
    EXPECT_LT(header_text.size() - 1 - close, 8u);
    EXPECT_EQ(header_text.find_first_not_of(' ', close + 1), std::string::npos) << "padding must be spaces";
    EXPECT_EQ(raw.size(), h.data_start + h.tensors.back().end);
    // No temporary file is left beside it.
    EXPECT_EQ(std::distance(fs::directory_iterator(tmp.path()), fs::directory_iterator()), 1);
}

TEST(SafetensorsWriter, EmptyFileHasAZeroLengthDataRegion) {
    testing::TempDir tmp;
    const fs::path path = tmp.path() / "empty.safetensors";
    ASSERT_TRUE(write_safetensors(path, {}).is_ok());
    EXPECT_EQ(read_bytes(path).size(), 16u);  // 8 + "{}" padded to 8
    auto file = SafetensorsFile::open(path);
    ASSERT_TRUE(file.is_ok()) << file.status().to_string();
    EXPECT_TRUE((*file)->header().tensors.empty());

    // Only zero-size tensors: the data region is empty too.
    ASSERT_TRUE(write_safetensors(path, {{"z", DType::kBF16, {0, 7}, {}}}).is_ok());
    auto z = SafetensorsFile::open(path);
    ASSERT_TRUE(z.is_ok()) << z.status().to_string();
    EXPECT_EQ((*z)->bytes(*(*z)->find("z")).size(), 0u);
    EXPECT_EQ(read_bytes(path).size(), (*z)->header().data_start);
}

TEST(SafetensorsWriter, SparseFileCostsNoDiskAndOpens) {
    testing::TempDir tmp;
    const fs::path path = tmp.path() / "sparse.safetensors";
    // 4 GiB of logical data: an embedding-sized BF16 tensor and an FP8 weight, with no bytes given.
    const std::vector<uint8_t> small = random_bytes(64, 7);
    std::vector<TensorToWrite> tensors = {{"embed.weight", DType::kBF16, {129280, 7168}, {}},
                                          {"small", DType::kU8, {64}, small},
                                          {"w", DType::kF8E4M3, {32768, 32768}, {}}};
    ASSERT_TRUE(write_safetensors(path, tensors, {}, /*sparse_data=*/true).is_ok());
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    const uint64_t logical = 129280ull * 7168 * 2 + 64 + 32768ull * 32768;
    auto file = SafetensorsFile::open(path);
    ASSERT_TRUE(file.is_ok()) << file.status().to_string();
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), (*file)->header().data_start + logical);
    EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, 1u << 20) << "the data region must be a hole";
    // The given tensor is really there; the hole reads as zeros.
    auto got = (*file)->bytes(*(*file)->find("small"));
    EXPECT_TRUE(std::equal(got.begin(), got.end(), small.begin(), small.end()));
    auto w = (*file)->bytes(*(*file)->find("w"));
    EXPECT_EQ(w.size(), 32768ull * 32768);
    EXPECT_EQ(w[0], 0);
    EXPECT_EQ(w[w.size() - 1], 0);
}

TEST(SafetensorsWriter, RejectsBadInputWithoutLeavingFiles) {
    testing::TempDir tmp;
    const fs::path path = tmp.path() / "bad.safetensors";
    std::vector<uint8_t> three(3);
    EXPECT_TRUE(fails_with(write_safetensors(path, {{"x", DType::kF32, {1}, three}}), StatusCode::kInvalidArgument,
                           {path.string(), "tensor 'x'", "3 bytes", "needs 4"}));
    EXPECT_TRUE(fails_with(write_safetensors(path, {{"x", DType::kU8, {3}, three}, {"x", DType::kU8, {3}, three}}),
                           StatusCode::kInvalidArgument, {"tensor 'x'", "twice"}));
    EXPECT_TRUE(fails_with(write_safetensors(path, {{"x", DType::kU8, {-3}, {}}}, {}, true),
                           StatusCode::kInvalidArgument, {"tensor 'x'", "negative"}));
    EXPECT_TRUE(fails_with(write_safetensors(path, {{"x", DType::kI64, {1ll << 40, 1ll << 40}, {}}}, {}, true),
                           StatusCode::kInvalidArgument, {"tensor 'x'", "overflows"}));
    EXPECT_TRUE(fails_with(write_safetensors(path, {{"__metadata__", DType::kU8, {3}, three}}),
                           StatusCode::kInvalidArgument, {"__metadata__"}));
    EXPECT_TRUE(fails_with(write_safetensors(path, {{"bad\xff", DType::kU8, {3}, three}}),
                           StatusCode::kInvalidArgument, {"UTF-8"}));
    EXPECT_TRUE(fails_with(write_safetensors(tmp.path() / "no" / "such.safetensors", {}), StatusCode::kNotFound,
                           {"no/such.safetensors"}));
    EXPECT_TRUE(fails_with(write_index(tmp.path(), {{"x", "../x.safetensors"}}, 0), StatusCode::kInvalidArgument,
                           {"tensor 'x'", "../x.safetensors"}));
    EXPECT_TRUE(fs::is_empty(tmp.path()));
}

TEST(SafetensorsWriter, OverwritesAnExistingFileWhole) {
    testing::TempDir tmp;
    const fs::path path = tmp.path() / "m.safetensors";
    const std::vector<uint8_t> big = random_bytes(4096, 3), small = random_bytes(8, 4);
    ASSERT_TRUE(write_safetensors(path, {{"a", DType::kU8, {4096}, big}}).is_ok());
    ASSERT_TRUE(write_safetensors(path, {{"b", DType::kU8, {8}, small}}).is_ok());
    auto file = SafetensorsFile::open(path);
    ASSERT_TRUE(file.is_ok()) << file.status().to_string();
    EXPECT_EQ((*file)->find("a"), nullptr);
    EXPECT_EQ(fs::file_size(path), (*file)->header().data_start + 8);
}

// Two shards + index, written by us, read back as one checkpoint.
struct ShardedFixture {
    testing::TempDir tmp;
    std::vector<uint8_t> a = random_bytes(256, 11), b = random_bytes(2 * 4 * 2, 12), c = random_bytes(24, 13);
    ShardedFixture() {
        EXPECT_TRUE(write_safetensors(tmp.path() / "model-00001-of-00002.safetensors",
                                      {{"layers.0.attn.wq_a.weight", DType::kF8E4M3, {8, 32}, a},
                                       {"norm.weight", DType::kBF16, {2, 4}, b}},
                                      {{"format", "pt"}})
                        .is_ok());
        EXPECT_TRUE(write_safetensors(tmp.path() / "model-00002-of-00002.safetensors",
                                      {{"head.weight", DType::kF32, {2, 3}, c}})
                        .is_ok());
    }
    std::map<std::string, std::string> weight_map() const {
        return {{"layers.0.attn.wq_a.weight", "model-00001-of-00002.safetensors"},
                {"norm.weight", "model-00001-of-00002.safetensors"},
                {"head.weight", "model-00002-of-00002.safetensors"}};
    }
};

void expect_fixture_tensors(const Checkpoint& ckpt, const ShardedFixture& fx) {
    EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"head.weight", "layers.0.attn.wq_a.weight", "norm.weight"}));
    EXPECT_EQ(ckpt.files().size(), 2u);
    EXPECT_EQ(ckpt.total_bytes(), 256u + 16 + 24);
    const Checkpoint::Tensor* wq = ckpt.find("layers.0.attn.wq_a.weight");
    ASSERT_NE(wq, nullptr);
    EXPECT_EQ(wq->entry->dtype, DType::kF8E4M3);
    EXPECT_EQ(wq->file->path().filename(), "model-00001-of-00002.safetensors");
    auto got = wq->bytes();
    EXPECT_TRUE(std::equal(got.begin(), got.end(), fx.a.begin(), fx.a.end()));
    const Checkpoint::Tensor* head = ckpt.find("head.weight");
    ASSERT_NE(head, nullptr);
    EXPECT_EQ(head->file->path().filename(), "model-00002-of-00002.safetensors");
    auto h = head->bytes();
    EXPECT_TRUE(std::equal(h.begin(), h.end(), fx.c.begin(), fx.c.end()));
    EXPECT_EQ(ckpt.find("nope"), nullptr);
}

TEST(Checkpoint, ShardedWithIndexRoundTrips) {
    ShardedFixture fx;
    ASSERT_TRUE(write_index(fx.tmp.path(), fx.weight_map(), 296).is_ok());
    // The index is the layout Hugging Face tools write.
    auto index_text = read_bytes(fx.tmp.path() / "model.safetensors.index.json");
    const std::string text(index_text.begin(), index_text.end());
    EXPECT_NE(text.find("\"total_size\": 296"), std::string::npos) << text;
    EXPECT_NE(text.find("\"head.weight\": \"model-00002-of-00002.safetensors\""), std::string::npos) << text;

    auto ckpt = Checkpoint::open(fx.tmp.path());
    ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
    EXPECT_EQ((*ckpt)->dir(), fx.tmp.path());
    expect_fixture_tensors(**ckpt, fx);
}

TEST(Checkpoint, WithoutIndexOpensEverySafetensorsFile) {
    ShardedFixture fx;
    test::write_text(fx.tmp.path() / "README.md", "not a shard");
    test::write_text(fx.tmp.path() / ".hidden.safetensors", "skipped: hidden");
    auto ckpt = Checkpoint::open(fx.tmp.path());
    ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
    expect_fixture_tensors(**ckpt, fx);
}

TEST(Checkpoint, SingleModelSafetensorsAndAFilePath) {
    testing::TempDir tmp;
    const std::vector<uint8_t> a = random_bytes(12, 5);
    ASSERT_TRUE(write_safetensors(tmp.path() / "model.safetensors", {{"a", DType::kI32, {3}, a}}).is_ok());
    // With model.safetensors present, other *.safetensors files are not part of the checkpoint.
    ASSERT_TRUE(write_safetensors(tmp.path() / "other.safetensors", {{"a", DType::kI32, {3}, a}}).is_ok());
    for (const fs::path& p : {tmp.path(), tmp.path() / "model.safetensors"}) {
        auto ckpt = Checkpoint::open(p);
        ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
        EXPECT_EQ((*ckpt)->names(), std::vector<std::string>{"a"});
        EXPECT_EQ((*ckpt)->dir(), tmp.path());
        EXPECT_EQ((*ckpt)->total_bytes(), 12u);
    }
}

TEST(Checkpoint, ShardsMayBeSymlinks) {
    // Hugging Face's cache keeps shards as links into a blobs folder.
    ShardedFixture fx;
    const fs::path blobs = fx.tmp.path() / "blobs", snap = fx.tmp.path() / "snapshot";
    fs::create_directory(blobs);
    fs::create_directory(snap);
    for (const char* name : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}) {
        fs::rename(fx.tmp.path() / name, blobs / name);
        fs::create_symlink(blobs / name, snap / name);
    }
    ASSERT_TRUE(write_index(snap, fx.weight_map(), 296).is_ok());
    auto ckpt = Checkpoint::open(snap);
    ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
    expect_fixture_tensors(**ckpt, fx);
}

}  // namespace
}  // namespace dsv4::io
