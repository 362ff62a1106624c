// Replays the fuzzer's inputs through parse_header in the ordinary build: the committed seed corpus must parse
// (every seed is a valid header), and every regression input under tests/data/fuzz/ must come back as a Status
// without crashing, as the fuzz target calls it (whole file, then prefix of a huge file).
#include <gtest/gtest.h>

#include "io/safetensors.h"
#include "safetensors_test_util.h"
#include "testing/testing.h"

namespace dsv4::io {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> files_in(const fs::path& dir) {
    std::vector<fs::path> out;
    if (!fs::is_directory(dir)) return out;
    for (const auto& e : fs::directory_iterator(dir)) {
        if (e.is_regular_file() && e.path().filename() != "README.md") out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
}

TEST(FuzzReplay, SeedCorpusParses) {
    const auto seeds = files_in(testing::source_dir() / "fuzz" / "corpus" / "safetensors_header");
    ASSERT_GE(seeds.size(), 5u) << "the seed corpus is missing";
    for (const fs::path& p : seeds) {
        const std::vector<uint8_t> bytes = test::read_bytes(p);
        // Header-only prefixes of larger files are valid only against a large file size.
        auto whole = parse_header(bytes, bytes.size(), p.string());
        auto prefix = parse_header(bytes, uint64_t{1} << 50, p.string());
        EXPECT_TRUE(prefix.is_ok()) << prefix.status().to_string();
        if (p.filename().string().find("prefix") == std::string::npos) {
            EXPECT_TRUE(whole.is_ok()) << whole.status().to_string();
        }
    }
}

TEST(FuzzReplay, RegressionInputsDoNotCrash) {
    const auto inputs = files_in(testing::test_data_dir() / "fuzz");
    for (const fs::path& p : inputs) {
        const std::vector<uint8_t> bytes = test::read_bytes(p);
        for (uint64_t file_size : {static_cast<uint64_t>(bytes.size()), uint64_t{1} << 50}) {
            auto parsed = parse_header(bytes, file_size, p.string());
            // Every input here is hostile unless its name says otherwise (valid_*).
            if (p.filename().string().rfind("valid_", 0) != 0) {
                EXPECT_FALSE(parsed.is_ok()) << p;
            }
            if (!parsed.is_ok()) {
                EXPECT_NE(parsed.status().message().find(p.string()), std::string::npos)
                    << parsed.status().to_string();
            }
        }
    }
    std::cout << "replayed " << inputs.size() << " regression inputs\n";
}

}  // namespace
}  // namespace dsv4::io
