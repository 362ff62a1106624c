// The committed inputs of one fuzz target: its seed corpus (fuzz/corpus/<target>/) and the inputs that once broke it
// (tests/data/fuzz/<target>/). The replay tests run each through the target's entry point (fuzz/entry/), whose
// broken invariants abort, so a regression fails here in the ordinary build as it did under the fuzzer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "testing/testing.h"

namespace dsv4::fuzz_replay {

struct FuzzInput {
    std::filesystem::path path;
    std::vector<uint8_t> bytes;
    bool regression = false;  // from tests/data/fuzz/<target>/ (else a seed)
};

inline std::vector<FuzzInput> fuzz_inputs(const std::string& target) {
    std::vector<FuzzInput> out;
    const std::filesystem::path dirs[] = {testing::source_dir() / "fuzz" / "corpus" / target,
                                          testing::test_data_dir() / "fuzz" / target};
    for (int d = 0; d < 2; ++d) {
        if (!std::filesystem::is_directory(dirs[d])) continue;
        for (const auto& e : std::filesystem::directory_iterator(dirs[d])) {
            if (!e.is_regular_file() || e.path().filename() == "README.md") continue;
            std::ifstream in(e.path(), std::ios::binary);
            FuzzInput input{e.path(), {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()}, d == 1};
            out.push_back(std::move(input));
        }
    }
    std::sort(out.begin(), out.end(), [](const FuzzInput& a, const FuzzInput& b) { return a.path < b.path; });
    return out;
}

inline size_t count_seeds(const std::vector<FuzzInput>& inputs) {
    return static_cast<size_t>(std::count_if(inputs.begin(), inputs.end(), [](const FuzzInput& i) {
        return !i.regression;
    }));
}

}  // namespace dsv4::fuzz_replay
