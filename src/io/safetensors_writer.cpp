// Safetensors writing: one file (optionally with its data region left as a hole) and the shard index.
//
// Layout as the format's reference writer makes it (huggingface/safetensors, safetensors/src/tensor.rs): "__metadata__"
// first, header JSON padded with spaces so the data region starts at a multiple of 8, tensors packed back to back.
// Unlike the reference, tensors keep the caller's order. Every file goes through AtomicFile: the real name only
// ever holds a complete file.
#include <unistd.h>

#include <cerrno>
#include <set>

#include "io/safetensors.h"
#include "io/safetensors_internal.h"

namespace dsv4::io {

using nlohmann::json;

namespace {

// A JSON string literal for `s`; invalid_argument when `s` is not UTF-8 (readers would reject the file).
Result<std::string> json_string(const std::string& s, const std::string& what) {
    try {
        return json(s).dump(-1, ' ', false, json::error_handler_t::strict);
    } catch (const json::exception&) {
        return invalid_argument(what + " '" + detail::printable(s) + "' is not valid UTF-8");
    }
}

// The header JSON for `tensors`, built by hand so that tensors keep their order (nlohmann objects sort keys, and
// its ordered_json inserts in O(n), quadratic for the tens of thousands of tensors of a real shard).
Result<std::string> build_header(const std::string& label, const std::vector<TensorToWrite>& tensors,
                                 const std::map<std::string, std::string>& metadata, bool sparse_data,
                                 uint64_t* data_bytes) {
    std::string out = "{";
    if (!metadata.empty()) {
        out += "\"__metadata__\":{";
        bool first = true;
        for (const auto& [key, value] : metadata) {
            DSV4_ASSIGN_OR_RETURN(std::string k, json_string(key, label + ": metadata key"));
            DSV4_ASSIGN_OR_RETURN(std::string v, json_string(value, label + ": metadata value"));
            out += (first ? "" : ",") + k + ":" + v;
            first = false;
        }
        out += "}";
    }
    std::set<std::string_view> seen;
    uint64_t offset = 0;
    for (const TensorToWrite& t : tensors) {
        const std::string where = label + ": tensor '" + detail::printable(t.name) + "': ";
        if (t.name.empty() || t.name == "__metadata__") {
            return invalid_argument(where + "reserved or empty tensor name");
        }
        if (!seen.insert(t.name).second) return invalid_argument(where + "given twice");
        uint64_t nbytes = 0;
        if (!detail::checked_nbytes(t.shape, t.dtype, &nbytes)) {
            return invalid_argument(where + "shape " + detail::shape_to_string(t.shape) +
                                    " has a negative dimension or overflows a 64-bit byte count");
        }
        if ((!sparse_data || !t.data.empty()) && t.data.size() != nbytes) {
            return invalid_argument(where + "data holds " + std::to_string(t.data.size()) + " bytes but shape " +
                                    detail::shape_to_string(t.shape) + " x " + std::string(dtype_name(t.dtype)) +
                                    " needs " + std::to_string(nbytes));
        }
        uint64_t end = 0;
        if (__builtin_add_overflow(offset, nbytes, &end)) return invalid_argument(where + "data region overflows");
        DSV4_ASSIGN_OR_RETURN(std::string name, json_string(t.name, label + ": tensor name"));
        out += (out.size() > 1 ? "," : "") + name + ":{\"dtype\":\"" + std::string(dtype_name(t.dtype)) +
               "\",\"shape\":[";
        for (size_t i = 0; i < t.shape.size(); ++i) {
            if (i) out += ',';
            out += std::to_string(t.shape[i]);
        }
        out += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
        offset = end;
    }
    out += "}";
    out.append((8 - out.size() % 8) % 8, ' ');  // 8 + header length is then a multiple of 8
    if (out.size() > kMaxHeaderBytes) {
        return invalid_argument(label + ": header of " + std::to_string(out.size()) + " bytes is over the " +
                                std::to_string(kMaxHeaderBytes) + "-byte limit readers accept; split the shard");
    }
    *data_bytes = offset;
    return out;
}

}  // namespace

Status write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata, bool sparse_data) {
    const std::string label = path.string();
    uint64_t data_bytes = 0;
    DSV4_ASSIGN_OR_RETURN(std::string header, build_header(label, tensors, metadata, sparse_data, &data_bytes));
    const uint64_t data_start = 8 + header.size();

    DSV4_ASSIGN_OR_RETURN(auto file, detail::AtomicFile::create(path));
    uint8_t length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
    DSV4_RETURN_IF_ERROR(detail::write_full(file->fd(), length, label));
    DSV4_RETURN_IF_ERROR(detail::write_full(
        file->fd(), {reinterpret_cast<const uint8_t*>(header.data()), header.size()}, label));
    if (!sparse_data) {
        for (const TensorToWrite& t : tensors) DSV4_RETURN_IF_ERROR(detail::write_full(file->fd(), t.data, label));
    } else {
        // Size the file first so the data region is a hole, then fill in only the tensors that came with bytes.
        if (::ftruncate(file->fd(), static_cast<off_t>(data_start + data_bytes)) != 0) {
            return io_error(label + ": cannot extend to " + std::to_string(data_start + data_bytes) +
                            " bytes: " + detail::errno_text(errno));
        }
        uint64_t offset = data_start;
        for (const TensorToWrite& t : tensors) {
            uint64_t nbytes = 0;
            detail::checked_nbytes(t.shape, t.dtype, &nbytes);  // checked in build_header
            if (!t.data.empty()) {
                if (::lseek(file->fd(), static_cast<off_t>(offset), SEEK_SET) < 0) {
                    return io_error(label + ": seek failed: " + detail::errno_text(errno));
                }
                DSV4_RETURN_IF_ERROR(detail::write_full(file->fd(), t.data, label));
            }
            offset += nbytes;
        }
    }
    return file->commit();
}

Status write_index(const std::filesystem::path& dir, const std::map<std::string, std::string>& weight_map,
                   uint64_t total_size) {
    const std::filesystem::path path = dir / "model.safetensors.index.json";
    json wm = json::object();
    for (const auto& [tensor, shard] : weight_map) {
        if (std::string why = detail::plain_file_name_problem(shard); !why.empty()) {
            return invalid_argument(path.string() + ": tensor '" + detail::printable(tensor) + "': shard '" +
                                    detail::printable(shard) + "' is not a plain file name (" + why + ")");
        }
        wm[tensor] = shard;
    }
    json doc = {{"metadata", {{"total_size", total_size}}}, {"weight_map", std::move(wm)}};
    std::string text;
    try {
        text = doc.dump(2, ' ', false, json::error_handler_t::strict) + "\n";
    } catch (const json::exception&) {
        return invalid_argument(path.string() + ": a tensor or shard name is not valid UTF-8");
    }
    return detail::write_file_atomic(path, text);
}

}  // namespace dsv4::io
