// SafetensorsFile: reads and validates the header with pread, then maps the whole file read-only.
//
// The header is read with pread (not through the mapping) so that a hostile length never touches pages past the
// end of the file; only a header that passed parse_header leads to the mmap. Tensor bytes are then served straight
// from the page cache, so opening a multi-hundred-GB checkpoint costs only its headers.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "io/safetensors.h"
#include "io/safetensors_internal.h"

namespace dsv4::io {

namespace {

struct FdCloser {
    int fd;
    ~FdCloser() {
        if (fd >= 0) ::close(fd);
    }
};

}  // namespace

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::filesystem::path& path) {
    const std::string label = path.string();
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        if (err == ENOENT || err == ENOTDIR) return not_found(label + ": no such file");
        return io_error(label + ": cannot open: " + detail::errno_text(err));
    }
    FdCloser closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) return io_error(label + ": cannot stat: " + detail::errno_text(errno));
    if (!S_ISREG(st.st_mode)) return io_error(label + ": not a regular file");
    const uint64_t file_size = static_cast<uint64_t>(st.st_size);
    if (file_size < 8) {
        return corrupt(label + ": file is " + std::to_string(file_size) +
                       " bytes, too short for the 8-byte header length; the file is truncated or not safetensors");
    }

    uint8_t length_bytes[8];
    DSV4_RETURN_IF_ERROR(detail::pread_full(fd, length_bytes, 0, label));
    const uint64_t header_len = detail::load_le64(length_bytes);
    DSV4_RETURN_IF_ERROR(detail::check_header_length(header_len, file_size, label));
    std::vector<uint8_t> prefix(8 + header_len);
    DSV4_RETURN_IF_ERROR(detail::pread_full(fd, prefix, 0, label));

    std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
    DSV4_ASSIGN_OR_RETURN(f->header_, parse_header(prefix, file_size, label));
    f->path_ = path;
    for (size_t i = 0; i < f->header_.tensors.size(); ++i) f->by_name_.emplace(f->header_.tensors[i].name, i);

    // MAP_SHARED + PROT_READ: pages come from the page cache and are shared by every process reading the model.
    void* map = ::mmap(nullptr, file_size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) return io_error(label + ": mmap of " + std::to_string(file_size) + " bytes failed: " +
                                           detail::errno_text(errno));
    f->map_ = static_cast<const uint8_t*>(map);
    f->map_size_ = file_size;
    return f;
}

SafetensorsFile::~SafetensorsFile() {
    if (map_) ::munmap(const_cast<uint8_t*>(map_), map_size_);
}

const TensorEntry* SafetensorsFile::find(std::string_view name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : &header_.tensors[it->second];
}

std::span<const uint8_t> SafetensorsFile::bytes(const TensorEntry& t) const {
    // parse_header guaranteed data_start + end <= file size = map_size_.
    return {map_ + header_.data_start + t.begin, t.nbytes()};
}

}  // namespace dsv4::io
