// dsv4/npy.h: the public entry point forwards to the io module's writer.
#include "dsv4/npy.h"

#include "io/npy.h"

namespace dsv4 {

Status write_npy_f32(const std::filesystem::path& path, std::span<const float> data, std::span<const int64_t> shape) {
    return io::write_npy_f32(path, data, shape);
}

}  // namespace dsv4
