// Fuzz entry point: io::parse_npy and io::NpzFile::parse on the same bytes. Whatever parses must be
// self-consistent: bytes = numel x dtype size, and every typed conversion yields numel values.
#pragma once

#include <cstdint>
#include <span>

#include "fuzz_check.h"
#include "io/npy.h"

namespace dsv4::fuzz {

inline void check_npy_array(const io::NpyArray& a) {
    int64_t numel = 1;
    for (int64_t d : a.shape) {
        check(d >= 0, "negative dimension accepted");
        numel *= d;
    }
    check(a.numel() == numel, "numel() disagrees with the shape");
    check(a.bytes.size() == static_cast<size_t>(numel) * io::npy_dtype_size(a.dtype), "byte count != numel x size");
    check(a.to_f32().size() == static_cast<size_t>(numel), "to_f32 size");
    check(a.to_i32().size() == static_cast<size_t>(numel), "to_i32 size");
    check(a.to_i64().size() == static_cast<size_t>(numel), "to_i64 size");
    (void)a.shape_string();
}

inline void npy_one_input(std::span<const uint8_t> input) {
    auto npy = io::parse_npy(input, "fuzz.npy");
    if (npy.is_ok()) {
        check_npy_array(npy.value());
    } else {
        check(npy.status().message().find("fuzz.npy") != std::string::npos, "npy error does not name the file");
    }
    auto npz = io::NpzFile::parse(input, "fuzz.npz");
    if (!npz.is_ok()) {
        check(npz.status().message().find("fuzz.npz") != std::string::npos, "npz error does not name the file");
        return;
    }
    for (const std::string& name : npz.value().names()) {
        const io::NpyArray* a = npz.value().find(name);
        check(a != nullptr, "a listed member is missing");
        check_npy_array(*a);
    }
}

}  // namespace dsv4::fuzz
