// Test helpers shared by every test executable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace dsv4::testing {

// The source tree (DSV4_SOURCE_DIR from ctest, else the configure-time path).
std::filesystem::path source_dir();
// tests/data inside the source tree: committed fixtures.
std::filesystem::path test_data_dir();
// A fresh empty folder under the system temp dir, removed when the object dies.
class TempDir {
public:
    explicit TempDir(const std::string& prefix = "dsv4-test");
    ~TempDir();
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
};

// Same size and the same bytes (bit-identical values; -0 vs +0 and NaN payloads count). Empty vectors are equal
// without a memcmp: their data() may be null, which memcmp must not be given even for 0 bytes.
template <typename T>
bool bytes_equal(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// The tolerance policy of DESIGN §3, one helper for every numeric comparison.
struct Comparison {
    double rel_l2 = 0;       // ||a-b|| / ||b||, in double
    double max_abs = 0;      // max |a-b|
    double max_abs_norm = 0; // max |a-b| / std(b)
    size_t worst_index = 0;
    size_t nonfinite = 0;    // elements of a that are NaN/inf where b is finite (unwritten outputs show up here)
    std::string report;      // first mismatches with indices, for failure messages
};
Comparison compare(std::span<const float> actual, std::span<const float> expected, double tolerance_abs = 0);

// gtest assertion: rel_l2 <= tol and no non-finite values; prints the first mismatches otherwise.
#define DSV4_EXPECT_CLOSE(actual, expected, tol)                                                   \
    do {                                                                                           \
        auto dsv4_cmp_ = ::dsv4::testing::compare((actual), (expected));                           \
        EXPECT_TRUE(dsv4_cmp_.nonfinite == 0 && dsv4_cmp_.rel_l2 <= (tol))                         \
            << "rel_l2 " << dsv4_cmp_.rel_l2 << " (tol " << (tol) << "), non-finite "              \
            << dsv4_cmp_.nonfinite << "\n" << dsv4_cmp_.report;                                    \
    } while (0)

}  // namespace dsv4::testing
