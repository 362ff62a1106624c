// POSIX file helpers for the safetensors reader and writer: full reads/writes with error messages, atomic writes.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "io/safetensors_internal.h"

namespace dsv4::io::detail {

std::string errno_text(int err) { return std::strerror(err); }

std::string plain_file_name_problem(std::string_view name) {
    if (name.empty()) return "it is empty";
    if (name == "." || name == "..") return "it names a folder";
    if (name.find('/') != std::string_view::npos || name.find('\\') != std::string_view::npos) {
        return "it holds a path separator";
    }
    if (name.find('\0') != std::string_view::npos) return "it holds a NUL byte";
    // With no separator a ".." cannot leave the folder, but no real shard name has one: refuse it all the same.
    if (name.find("..") != std::string_view::npos) return "it holds '..'";
    return {};
}

Status pread_full(int fd, std::span<uint8_t> out, uint64_t offset, std::string_view label) {
    size_t done = 0;
    while (done < out.size()) {
        ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
        if (n < 0) {
            if (errno == EINTR) continue;
            return io_error(std::string(label) + ": read failed at byte " + std::to_string(offset + done) + ": " +
                            errno_text(errno));
        }
        if (n == 0) {
            return corrupt(std::string(label) + ": file ended at byte " + std::to_string(offset + done) +
                           " while reading " + std::to_string(out.size()) + " bytes at " + std::to_string(offset) +
                           "; it changed while being read or is truncated");
        }
        done += static_cast<size_t>(n);
    }
    return Status::ok();
}

Status write_full(int fd, std::span<const uint8_t> bytes, std::string_view label) {
    size_t done = 0;
    while (done < bytes.size()) {
        ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0) {
            if (errno == EINTR) continue;
            return io_error(std::string(label) + ": write failed: " + errno_text(errno));
        }
        done += static_cast<size_t>(n);
    }
    return Status::ok();
}

Result<std::string> read_small_file(const std::filesystem::path& path, uint64_t max_bytes) {
    const std::string label = path.string();
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        if (err == ENOENT || err == ENOTDIR) return not_found(label + ": no such file");
        return io_error(label + ": cannot open: " + errno_text(err));
    }
    struct stat st {};
    Status status;
    std::string text;
    if (::fstat(fd, &st) != 0) {
        status = io_error(label + ": cannot stat: " + errno_text(errno));
    } else if (!S_ISREG(st.st_mode)) {
        status = io_error(label + ": not a regular file");
    } else if (static_cast<uint64_t>(st.st_size) > max_bytes) {
        status = corrupt(label + ": " + std::to_string(st.st_size) + " bytes is over the " + std::to_string(max_bytes) +
                         "-byte limit for this file");
    } else {
        text.resize(static_cast<size_t>(st.st_size));
        status = pread_full(fd, {reinterpret_cast<uint8_t*>(text.data()), text.size()}, 0, label);
    }
    ::close(fd);
    if (!status.is_ok()) return status;
    return text;
}

Result<std::unique_ptr<AtomicFile>> AtomicFile::create(const std::filesystem::path& path) {
    static std::atomic<unsigned> counter{0};
    std::unique_ptr<AtomicFile> f(new AtomicFile());
    f->final_path_ = path;
    f->label_ = path.string();
    // Hidden, unique per process and call, in the destination's folder so that rename() is atomic.
    for (int attempt = 0; attempt < 100; ++attempt) {
        std::string temp_name = ".";
        temp_name += path.filename().string();
        temp_name += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
        const std::filesystem::path temp = path.parent_path() / temp_name;
        int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0) {
            f->fd_ = fd;
            f->temp_path_ = temp;
            return f;
        }
        if (errno != EEXIST) {
            int err = errno;
            if (err == ENOENT || err == ENOTDIR) {
                return not_found(f->label_ + ": cannot create: the folder " + path.parent_path().string() +
                                 " does not exist");
            }
            return io_error(f->label_ + ": cannot create " + temp.string() + ": " + errno_text(err));
        }
    }
    return io_error(f->label_ + ": cannot find a free temporary name beside it");
}

AtomicFile::~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
}

Status AtomicFile::commit() {
    if (::fsync(fd_) != 0) return io_error(label_ + ": fsync failed: " + errno_text(errno));
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return io_error(label_ + ": close failed: " + errno_text(errno));
    if (::rename(temp_path_.c_str(), final_path_.c_str()) != 0) {
        return io_error(label_ + ": cannot rename " + temp_path_.string() + " over it: " + errno_text(errno));
    }
    temp_path_.clear();
    return Status::ok();
}

Status write_file_atomic(const std::filesystem::path& path, std::string_view bytes) {
    DSV4_ASSIGN_OR_RETURN(auto file, AtomicFile::create(path));
    DSV4_RETURN_IF_ERROR(write_full(file->fd(), {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()},
                                    file->label()));
    return file->commit();
}

}  // namespace dsv4::io::detail
