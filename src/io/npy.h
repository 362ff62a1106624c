// NumPy .npy / .npz files: reading (test fixtures, recorded goldens) and writing float32 .npy (dumps for Python).
//
// .npy: magic "\x93NUMPY", version 1/2/3, a little Python-dict header {'descr', 'fortran_order', 'shape'}, then the
// raw C-order data. Supported dtypes: '<f4', '<f8', '<i4', '<i8', '|u1', '|i1' (little-endian only).
// .npz: a zip archive (stored or deflate, zip64 extras accepted) of NAME.npy members; CRC-32 checked.
// Every read is bounds-checked: a malformed or truncated file is a Status naming the file and member, never a crash.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dsv4/status.h"

namespace dsv4::io {

enum class NpyDType : uint8_t { kF32, kF64, kI32, kI64, kU8, kI8 };
const char* npy_dtype_name(NpyDType t);  // "<f4", ...
size_t npy_dtype_size(NpyDType t);

struct NpyArray {
    NpyDType dtype = NpyDType::kF32;
    std::vector<int64_t> shape;  // empty = scalar
    std::vector<uint8_t> bytes;  // numel · dtype size, C order, little-endian

    int64_t numel() const;
    std::string shape_string() const;  // "[260, 4, 128]"
    // Typed views; empty when the dtype differs.
    std::span<const float> f32() const;
    std::span<const int32_t> i32() const;
    std::span<const int64_t> i64() const;
    std::span<const uint8_t> u8() const;
    // Conversions of any numeric dtype (values cast like numpy's astype).
    std::vector<float> to_f32() const;
    std::vector<int32_t> to_i32() const;
    std::vector<int64_t> to_i64() const;
};

// Parses one .npy image; `label` names it in errors.
Result<NpyArray> parse_npy(std::span<const uint8_t> bytes, std::string_view label);
Result<NpyArray> read_npy(const std::filesystem::path& path);

class NpzFile {
public:
    // Parses a whole .npz image; `label` names it in errors.
    static Result<NpzFile> parse(std::span<const uint8_t> bytes, std::string_view label);
    static Result<NpzFile> read(const std::filesystem::path& path);

    const std::string& label() const { return label_; }
    // Member names without the ".npy" suffix, sorted.
    std::vector<std::string> names() const;
    bool contains(std::string_view name) const { return arrays_.find(std::string(name)) != arrays_.end(); }
    // nullptr when absent.
    const NpyArray* find(std::string_view name) const;
    // The array, or a kNotFound Status naming the file and the member.
    Result<const NpyArray*> get(std::string_view name) const;

private:
    std::string label_;
    std::map<std::string, NpyArray, std::less<>> arrays_;
};

// Writes a float32 C-order .npy ('<f4', format version 1.0).
Status write_npy_f32(const std::filesystem::path& path, std::span<const float> data, std::span<const int64_t> shape);
// The same, as bytes (for tests and for writers that bundle files).
std::vector<uint8_t> encode_npy_f32(std::span<const float> data, std::span<const int64_t> shape);

}  // namespace dsv4::io
