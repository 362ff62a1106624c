// Helpers shared by the safetensors reader, checkpoint and writer sources; not part of the public interface.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "dsv4/status.h"

namespace dsv4::io::detail {

// Deepest JSON nesting we accept. A safetensors header is 3 levels deep ({name: {shape: [..]}}) and an index 2;
// the bound keeps hostile input ("[[[[...") from reaching the parser at all.
inline constexpr int kMaxJsonDepth = 64;

// Parses `text` as one JSON document with exceptions off, after a cheap nesting pre-scan. Rejects duplicate object
// keys (nlohmann would silently keep the last, so a header could say one thing to us and another to a different
// reader). Errors are corrupt("<label>: ...").
Result<nlohmann::json> parse_json_strict(std::string_view text, std::string_view label);

// Deepest bracket nesting of `text`, counting only brackets outside strings; stops counting once past `limit`.
int json_nesting_depth(std::string_view text, int limit);

// "[8, 32]"
std::string shape_to_string(std::span<const int64_t> shape);

// product(shape) x dtype_size(dtype) without overflow; false when it overflows uint64 or a dim is negative.
bool checked_nbytes(std::span<const int64_t> shape, DType dtype, uint64_t* nbytes);

// Checks the 8-byte length prefix against the bound and the file size: one place for the reader and parse_header.
Status check_header_length(uint64_t header_len, uint64_t file_size, std::string_view file_label);

// Little-endian u64 from 8 bytes.
uint64_t load_le64(const uint8_t* p);

// The whole of a small file (an index), bounded by `max_bytes`. not_found when absent, io_error when unreadable.
Result<std::string> read_small_file(const std::filesystem::path& path, uint64_t max_bytes);

// pread until `out` is full (EINTR and short reads retried); io_error naming `label` on failure, corrupt when the
// file ends first.
Status pread_full(int fd, std::span<uint8_t> out, uint64_t offset, std::string_view label);

// "No such file or directory" for errno values.
std::string errno_text(int err);

// A shard name from an index must be a plain file name in the checkpoint folder: no separators, not "." or "..",
// no NUL, not empty. Returns an empty string when fine, else why not.
std::string plain_file_name_problem(std::string_view name);

// `s` made safe for a one-line message: control bytes become \xNN, and it is cut to `max_len` bytes with "...".
// Tensor names come from the file, so they go through this before they reach a message.
std::string printable(std::string_view s, size_t max_len = 160);

// write() until all of `bytes` is written (EINTR and short writes retried); io_error naming `label` on failure.
Status write_full(int fd, std::span<const uint8_t> bytes, std::string_view label);

// A file being written under a temporary name beside its destination, renamed over it by commit(); removed when
// dropped uncommitted, so a failed or interrupted write never leaves a half-written file under the real name.
class AtomicFile {
public:
    static Result<std::unique_ptr<AtomicFile>> create(const std::filesystem::path& path);
    ~AtomicFile();
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;
    int fd() const { return fd_; }
    const std::string& label() const { return label_; }  // the destination path, for messages
    // fsync, close, rename over the destination.
    Status commit();

private:
    AtomicFile() = default;
    int fd_ = -1;
    std::filesystem::path temp_path_, final_path_;
    std::string label_;
};

// Writes `bytes` to `path` atomically through AtomicFile.
Status write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

}  // namespace dsv4::io::detail
