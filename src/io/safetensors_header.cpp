// Safetensors header parsing and validation: the one place that decides whether a header is acceptable.
//
// The checks follow the format's reference reader (huggingface/safetensors, safetensors/src/tensor.rs: header
// length bound, UTF-8 JSON object, dtype names, byte size = numel x dtype size, offsets inside the buffer), with two
// differences: gaps between tensors are allowed (only overlaps are errors), and entries must hold exactly the three
// keys dtype/shape/data_offsets.
#include <algorithm>
#include <string>

#include "io/safetensors.h"
#include "io/safetensors_internal.h"

namespace dsv4::io {

using nlohmann::json;

int64_t TensorEntry::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;  // fits: parse_header and the writer check product(shape) <= INT64_MAX
    return n;
}

namespace detail {

uint64_t load_le64(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

Status check_header_length(uint64_t header_len, uint64_t file_size, std::string_view file_label) {
    std::string label(file_label);
    if (header_len > kMaxHeaderBytes) {
        return corrupt(label + ": header length " + std::to_string(header_len) + " exceeds the " +
                       std::to_string(kMaxHeaderBytes) + "-byte limit; this is not a safetensors file");
    }
    if (header_len > file_size - 8) {  // the caller guarantees file_size >= 8
        return corrupt(label + ": header length " + std::to_string(header_len) + " runs past the end of the file (" +
                       std::to_string(file_size) + " bytes); the file is truncated or not safetensors");
    }
    return Status::ok();
}

}  // namespace detail

namespace {

const char* json_type(const json& j) { return j.type_name(); }

std::string known_dtypes() {
    std::string s;
    for (DType t : kAllDTypes) s += (s.empty() ? "" : ", ") + std::string(dtype_name(t));
    return s;
}

// One tensor entry {dtype, shape, data_offsets}; `data_size` is the byte count of the data region.
Result<TensorEntry> parse_entry(const std::string& name, const json& value, uint64_t data_size,
                                const std::string& label) {
    const std::string where = label + ": tensor '" + detail::printable(name) + "': ";
    if (!value.is_object()) {
        return corrupt(where + "entry must be an object {dtype, shape, data_offsets}, got " + json_type(value));
    }
    for (const auto& item : value.items()) {
        const std::string& key = item.key();
        if (key != "dtype" && key != "shape" && key != "data_offsets") {
            return corrupt(where + "unexpected key '" + detail::printable(key) +
                           "' (an entry holds exactly dtype, shape, data_offsets)");
        }
    }
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
        if (!value.contains(key)) return corrupt(where + "missing '" + key + "'");
    }

    TensorEntry e;
    e.name = name;
    const json& dtype = value["dtype"];
    if (!dtype.is_string()) return corrupt(where + "dtype must be a string, got " + json_type(dtype));
    auto parsed = dtype_from_name(dtype.get_ref<const std::string&>());
    if (!parsed) {
        return corrupt(where + "unknown dtype '" + detail::printable(dtype.get_ref<const std::string&>()) +
                       "' (known: " + known_dtypes() + ")");
    }
    e.dtype = *parsed;

    const json& shape = value["shape"];
    if (!shape.is_array()) return corrupt(where + "shape must be an array, got " + json_type(shape));
    for (const json& d : shape) {
        // nlohmann stores non-negative integer literals as unsigned and negative ones as signed.
        if (d.is_number_unsigned() && d.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)) {
            e.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
        } else {
            return corrupt(where + "shape must hold non-negative integers, got " +
                           detail::printable(shape.dump(), 120));
        }
    }

    const json& offsets = value["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
        return corrupt(where + "data_offsets must be [begin, end] with non-negative integers, got " +
                       detail::printable(offsets.dump(), 120));
    }
    e.begin = offsets[0].get<uint64_t>();
    e.end = offsets[1].get<uint64_t>();
    const std::string range = "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
    if (e.begin > e.end) return corrupt(where + range + ": begin is past end");
    if (e.end > data_size) {
        return corrupt(where + range + " run past the end of the data region (" + std::to_string(data_size) +
                       " bytes); the file is truncated or its header is wrong");
    }

    const std::string layout = "shape " + detail::shape_to_string(e.shape) + " x " + std::string(dtype_name(e.dtype));
    uint64_t needed = 0;
    if (!detail::checked_nbytes(e.shape, e.dtype, &needed)) {
        return corrupt(where + layout + " overflows a 64-bit byte count");
    }
    if (needed != e.nbytes()) {
        return corrupt(where + range + " hold " + std::to_string(e.nbytes()) + " bytes but " + layout + " needs " +
                       std::to_string(needed) + " bytes");
    }
    return e;
}

Status parse_metadata(const json& value, const std::string& label, std::map<std::string, std::string>* out) {
    if (!value.is_object()) {
        return corrupt(label + ": __metadata__ must be an object of strings, got " + json_type(value));
    }
    for (const auto& item : value.items()) {
        if (!item.value().is_string()) {
            return corrupt(label + ": __metadata__ key '" + detail::printable(item.key()) + "' must map to a string, got " +
                           json_type(item.value()));
        }
        (*out)[item.key()] = item.value().get<std::string>();
    }
    return Status::ok();
}

}  // namespace

Result<ParsedHeader> parse_header(std::span<const uint8_t> prefix, uint64_t file_size, std::string_view file_label) {
    const std::string label(file_label);
    const uint64_t available = std::min<uint64_t>(prefix.size(), file_size);
    if (available < 8) {
        return corrupt(label + ": file is " + std::to_string(available) +
                       " bytes, too short for the 8-byte header length; the file is truncated or not safetensors");
    }
    const uint64_t header_len = detail::load_le64(prefix.data());
    DSV4_RETURN_IF_ERROR(detail::check_header_length(header_len, file_size, label));
    if (header_len > available - 8) {
        return corrupt(label + ": header length " + std::to_string(header_len) + " runs past the " +
                       std::to_string(available) + " bytes read; the file is truncated");
    }

    std::string_view text(reinterpret_cast<const char*>(prefix.data()) + 8, header_len);
    DSV4_ASSIGN_OR_RETURN(json doc, detail::parse_json_strict(text, label + ": header"));
    if (!doc.is_object()) {
        return corrupt(label + ": header must be a JSON object {tensor name: {dtype, shape, data_offsets}}, got " +
                       json_type(doc));
    }

    ParsedHeader h;
    h.data_start = 8 + header_len;
    const uint64_t data_size = file_size - h.data_start;
    for (const auto& item : doc.items()) {
        if (item.key() == "__metadata__") {
            DSV4_RETURN_IF_ERROR(parse_metadata(item.value(), label, &h.metadata));
            continue;
        }
        DSV4_ASSIGN_OR_RETURN(TensorEntry e, parse_entry(item.key(), item.value(), data_size, label));
        h.tensors.push_back(std::move(e));
    }

    std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
        if (a.begin != b.begin) return a.begin < b.begin;
        if (a.end != b.end) return a.end < b.end;
        return a.name < b.name;
    });
    // Sorted by begin, a range overlaps an earlier one exactly when it starts before the furthest end seen so far.
    // Empty ranges hold no bytes and cannot overlap anything.
    const TensorEntry* furthest = nullptr;
    for (const TensorEntry& t : h.tensors) {
        if (t.nbytes() == 0) continue;
        if (furthest && t.begin < furthest->end) {
            return corrupt(label + ": tensor '" + detail::printable(t.name) + "': data_offsets [" +
                           std::to_string(t.begin) + ", " + std::to_string(t.end) + "] overlap tensor '" +
                           detail::printable(furthest->name) + "' at [" + std::to_string(furthest->begin) + ", " +
                           std::to_string(furthest->end) + "]");
        }
        if (!furthest || t.end > furthest->end) furthest = &t;
    }
    return h;
}

}  // namespace dsv4::io
