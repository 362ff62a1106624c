// libFuzzer target: io::parse_npy and io::NpzFile::parse on arbitrary bytes. Run through scripts/fuzz npy.
// The checks live in entry/npy_entry.h so that tests/unit/fuzz_replay/ replays committed inputs through the same code.
#include <cstddef>
#include <cstdint>
#include <span>

#include "entry/npy_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    dsv4::fuzz::npy_one_input(std::span<const uint8_t>(data, size));
    return 0;
}
