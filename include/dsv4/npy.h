// Writing NumPy .npy files from outside the library (the logits dump, for comparison in Python). The reader and the
// full format description live with the implementation (io/npy.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>

#include "dsv4/status.h"

namespace dsv4 {

// Writes `data` as a float32 C-order .npy file of `shape` ('<f4', format version 1.0). Errors: the shape's element
// count differs from data.size(), the file cannot be created or written (both name the path).
Status write_npy_f32(const std::filesystem::path& path, std::span<const float> data, std::span<const int64_t> shape);

}  // namespace dsv4
