// libFuzzer target: io::parse_header on arbitrary bytes. Run through scripts/fuzz.
//
// Each input is parsed twice: as a whole file (file_size = input size, so offsets are bounded by the input) and as
// the prefix of a much larger file (so offsets far past the input are accepted, exercising the arithmetic checks and
// the "never read outside the prefix" promise). A valid parse must satisfy the invariants checked below.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "io/safetensors.h"

namespace {

void check(std::span<const uint8_t> input, uint64_t file_size) {
    auto parsed = dsv4::io::parse_header(input, file_size, "fuzz.safetensors");
    if (!parsed.is_ok()) {
        if (parsed.status().message().empty()) std::abort();  // every failure says what is wrong
        return;
    }
    const dsv4::io::ParsedHeader& h = parsed.value();
    uint64_t previous_end = 0;
    for (const dsv4::io::TensorEntry& t : h.tensors) {
        // Inside the file, sorted, non-overlapping, and sized exactly by shape x dtype.
        if (t.begin > t.end || h.data_start + t.end > file_size || h.data_start + t.end < t.end) std::abort();
        if (t.nbytes() != 0 && t.begin < previous_end) std::abort();
        if (t.nbytes() != 0) previous_end = t.end;
        if (static_cast<uint64_t>(t.numel()) * dsv4::dtype_size(t.dtype) != t.nbytes()) std::abort();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::span<const uint8_t> input(data, size);
    check(input, size);
    check(input, uint64_t{1} << 50);
    return 0;
}
