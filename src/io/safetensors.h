// safetensors reading: one file (mmap) or a sharded checkpoint folder (model.safetensors.index.json).
//
// Format: 8-byte little-endian header length N, then N bytes of JSON {name: {dtype, shape, data_offsets:[b,e]},
// "__metadata__": {str: str}}, then the data region; offsets are relative to the data region's start.
// Validation is strict (header length bound, well-formed JSON nested at most 64 deep with no duplicate keys,
// entries of exactly {dtype, shape, data_offsets}, known dtype, offsets inside the file, no overlapping ranges,
// byte size = product(shape) x dtype size, overflow-checked); every failure is one Status (corrupt, not_found or
// io_error) naming the file and the tensor. Gaps between tensors are allowed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "dsv4/status.h"

namespace dsv4::io {

// Largest JSON header accepted (the format's own reference reader uses 100 MB).
inline constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct TensorEntry {
    std::string name;
    DType dtype = DType::kU8;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;  // byte range within the data region
    uint64_t nbytes() const { return end - begin; }
    int64_t numel() const;
};

struct ParsedHeader {
    std::vector<TensorEntry> tensors;  // in data-offset order
    std::map<std::string, std::string> metadata;
    uint64_t data_start = 0;  // 8 + header length
};

// Parses and validates a header given the first bytes of a file. `prefix` holds at least the 8-byte length and
// the JSON (it may hold more); `file_size` is the whole file's size, used for the offset bounds; `file_label`
// names the file in errors. Never reads outside `prefix`. This is the fuzzed entry point.
Result<ParsedHeader> parse_header(std::span<const uint8_t> prefix, uint64_t file_size, std::string_view file_label);

// A read-only memory-mapped safetensors file.
class SafetensorsFile {
public:
    static Result<std::unique_ptr<SafetensorsFile>> open(const std::filesystem::path& path);
    ~SafetensorsFile();
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::filesystem::path& path() const { return path_; }
    const ParsedHeader& header() const { return header_; }
    const TensorEntry* find(std::string_view name) const;
    // The tensor's bytes (inside the mapping; valid while this object lives).
    std::span<const uint8_t> bytes(const TensorEntry& t) const;

private:
    SafetensorsFile() = default;
    std::filesystem::path path_;
    ParsedHeader header_;
    std::map<std::string, size_t, std::less<>> by_name_;
    const uint8_t* map_ = nullptr;
    uint64_t map_size_ = 0;
};

// A checkpoint folder: model.safetensors.index.json + shards, or a single model.safetensors, or (no index) every
// *.safetensors file in the folder (hidden files skipped); open() also takes the path of one .safetensors file.
// Tensor names are unique across shards. With an index, index and shards agree exactly: every entry names a plain
// file in the folder (no '/', no '..') that holds the tensor, and every tensor of a shard is listed under that
// shard. The index's total_size is not checked (published checkpoints do not always get it right).
class Checkpoint {
public:
    struct Tensor {
        const TensorEntry* entry;
        const SafetensorsFile* file;
        std::span<const uint8_t> bytes() const { return file->bytes(*entry); }
    };

    static Result<std::unique_ptr<Checkpoint>> open(const std::filesystem::path& dir);
    const std::filesystem::path& dir() const { return dir_; }
    // nullptr when absent.
    const Tensor* find(std::string_view name) const;
    // All tensors, sorted by name.
    const std::vector<std::string>& names() const { return names_; }
    const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
    uint64_t total_bytes() const;

private:
    std::filesystem::path dir_;
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::map<std::string, Tensor, std::less<>> tensors_;
    std::vector<std::string> names_;
};

// Writing (make-model, tests). Tensors are written in the order given, "__metadata__" first, header padded with
// spaces so the data starts at a multiple of 8 (as the format's reference writer does), data in one contiguous
// region. With `sparse_data` the data region is left as a hole (ftruncate): a full-size header-only file that
// costs no disk, for shape/parameter checks at real V4 sizes; tensors given with bytes are still written.
// The file is written under a temporary name beside `path`, fsynced and renamed: `path` only ever holds a whole
// file. Bad input (data size != shape x dtype, duplicate or non-UTF-8 names) is invalid_argument.
struct TensorToWrite {
    std::string name;
    DType dtype = DType::kU8;
    std::vector<int64_t> shape;
    std::span<const uint8_t> data;  // [numel x dtype_size] bytes; may be empty when writing sparse
};
Status write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {}, bool sparse_data = false);
// Writes model.safetensors.index.json: {"metadata": {"total_size": N}, "weight_map": {name: shard}} (atomically;
// shard names must be plain file names).
Status write_index(const std::filesystem::path& dir, const std::map<std::string, std::string>& weight_map,
                   uint64_t total_size);

}  // namespace dsv4::io
