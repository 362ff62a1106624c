#include "io/npy.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>
#include <fstream>
#include <sstream>

namespace dsv4::io {

namespace {

// Largest array accepted (a sanity bound against hostile headers; the fixtures are a few MB).
constexpr uint64_t kMaxArrayBytes = uint64_t(1) << 34;

std::string msg(std::string_view label, const std::string& what) {
    return std::string(label) + ": " + what;
}

bool read_u16(std::span<const uint8_t> b, uint64_t off, uint16_t* v) {
    if (off > b.size() || b.size() - off < 2) return false;
    *v = uint16_t(b[off] | (b[off + 1] << 8));
    return true;
}
bool read_u32(std::span<const uint8_t> b, uint64_t off, uint32_t* v) {
    if (off > b.size() || b.size() - off < 4) return false;
    *v = uint32_t(b[off]) | (uint32_t(b[off + 1]) << 8) | (uint32_t(b[off + 2]) << 16) | (uint32_t(b[off + 3]) << 24);
    return true;
}
bool read_u64(std::span<const uint8_t> b, uint64_t off, uint64_t* v) {
    uint32_t lo, hi;
    if (!read_u32(b, off, &lo) || !read_u32(b, off + 4, &hi)) return false;
    *v = uint64_t(lo) | (uint64_t(hi) << 32);
    return true;
}

Result<std::vector<uint8_t>> read_file(const std::filesystem::path& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return not_found(path.string() + ": cannot open (check the path)");
    std::vector<uint8_t> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (f.bad()) return io_error(path.string() + ": read failed");
    return data;
}

// Value of `key` in the npy header dict: the text after "'key':" up to the matching delimiter.
bool header_value(const std::string& h, const std::string& key, std::string* out) {
    size_t k = h.find("'" + key + "'");
    if (k == std::string::npos) return false;
    size_t colon = h.find(':', k);
    if (colon == std::string::npos) return false;
    size_t i = colon + 1;
    while (i < h.size() && h[i] == ' ') ++i;
    if (i >= h.size()) return false;
    size_t end;
    if (h[i] == '\'') {
        end = h.find('\'', i + 1);
        if (end == std::string::npos) return false;
        *out = h.substr(i + 1, end - i - 1);
    } else if (h[i] == '(') {
        end = h.find(')', i);
        if (end == std::string::npos) return false;
        *out = h.substr(i + 1, end - i - 1);
    } else {
        end = h.find_first_of(",}", i);
        if (end == std::string::npos) return false;
        *out = h.substr(i, end - i);
    }
    return true;
}

}  // namespace

const char* npy_dtype_name(NpyDType t) {
    switch (t) {
        case NpyDType::kF32: return "<f4";
        case NpyDType::kF64: return "<f8";
        case NpyDType::kI32: return "<i4";
        case NpyDType::kI64: return "<i8";
        case NpyDType::kU8: return "|u1";
        case NpyDType::kI8: return "|i1";
    }
    return "?";
}

size_t npy_dtype_size(NpyDType t) {
    switch (t) {
        case NpyDType::kF64:
        case NpyDType::kI64: return 8;
        case NpyDType::kF32:
        case NpyDType::kI32: return 4;
        case NpyDType::kU8:
        case NpyDType::kI8: return 1;
    }
    return 0;
}

int64_t NpyArray::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

std::string NpyArray::shape_string() const {
    std::ostringstream s;
    s << "[";
    for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
    s << "]";
    return s.str();
}

std::span<const float> NpyArray::f32() const {
    if (dtype != NpyDType::kF32) return {};
    return {reinterpret_cast<const float*>(bytes.data()), size_t(numel())};
}
std::span<const int32_t> NpyArray::i32() const {
    if (dtype != NpyDType::kI32) return {};
    return {reinterpret_cast<const int32_t*>(bytes.data()), size_t(numel())};
}
std::span<const int64_t> NpyArray::i64() const {
    if (dtype != NpyDType::kI64) return {};
    return {reinterpret_cast<const int64_t*>(bytes.data()), size_t(numel())};
}
std::span<const uint8_t> NpyArray::u8() const {
    if (dtype != NpyDType::kU8) return {};
    return {bytes.data(), bytes.size()};
}

namespace {
// A float outside the integer type's range (or NaN) converted to it is undefined behaviour in C++; numpy's astype on
// x86 gives the type's minimum there (the truncating convert's "integer indefinite"), so that is what we give.
template <typename To, typename From>
To cast_value(From v) {
    if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
        const From lo = From(std::numeric_limits<To>::min());  // -2^31 / -2^63: exact in float and double
        if (!(v >= lo && v < -lo)) return std::numeric_limits<To>::min();
    }
    return To(v);
}

template <typename To>
std::vector<To> convert(const NpyArray& a) {
    size_t n = size_t(a.numel());
    std::vector<To> out(n);
    const uint8_t* p = a.bytes.data();
    for (size_t i = 0; i < n; ++i) {
        switch (a.dtype) {
            case NpyDType::kF32: { float v; std::memcpy(&v, p + 4 * i, 4); out[i] = cast_value<To>(v); break; }
            case NpyDType::kF64: { double v; std::memcpy(&v, p + 8 * i, 8); out[i] = cast_value<To>(v); break; }
            case NpyDType::kI32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); out[i] = To(v); break; }
            case NpyDType::kI64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); out[i] = To(v); break; }
            case NpyDType::kU8: out[i] = To(p[i]); break;
            case NpyDType::kI8: out[i] = To(int8_t(p[i])); break;
        }
    }
    return out;
}
}  // namespace

std::vector<float> NpyArray::to_f32() const { return convert<float>(*this); }
std::vector<int32_t> NpyArray::to_i32() const { return convert<int32_t>(*this); }
std::vector<int64_t> NpyArray::to_i64() const { return convert<int64_t>(*this); }

Result<NpyArray> parse_npy(std::span<const uint8_t> b, std::string_view label) {
    static const uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
    if (b.size() < 10 || std::memcmp(b.data(), kMagic, 6) != 0)
        return corrupt(msg(label, "not a .npy file (bad magic)"));
    uint8_t major = b[6];
    uint64_t header_len, header_start;
    if (major == 1) {
        uint16_t v;
        read_u16(b, 8, &v);
        header_len = v;
        header_start = 10;
    } else if (major == 2 || major == 3) {
        uint32_t v;
        if (!read_u32(b, 8, &v)) return corrupt(msg(label, "truncated .npy header"));
        header_len = v;
        header_start = 12;
    } else {
        return unsupported(msg(label, ".npy format version " + std::to_string(major) + " (supported: 1, 2, 3)"));
    }
    if (header_len > b.size() - header_start) return corrupt(msg(label, "truncated .npy header"));
    std::string h(reinterpret_cast<const char*>(b.data() + header_start), size_t(header_len));

    std::string descr, fortran, shape_text;
    if (!header_value(h, "descr", &descr) || !header_value(h, "fortran_order", &fortran) ||
        !header_value(h, "shape", &shape_text))
        return corrupt(msg(label, "malformed .npy header: " + h));
    NpyArray a;
    if (descr == "<f4") a.dtype = NpyDType::kF32;
    else if (descr == "<f8") a.dtype = NpyDType::kF64;
    else if (descr == "<i4") a.dtype = NpyDType::kI32;
    else if (descr == "<i8") a.dtype = NpyDType::kI64;
    else if (descr == "|u1" || descr == "<u1") a.dtype = NpyDType::kU8;
    else if (descr == "|i1" || descr == "<i1") a.dtype = NpyDType::kI8;
    else
        return unsupported(msg(label, "dtype '" + descr + "' (supported: <f4 <f8 <i4 <i8 |u1 |i1, little-endian)"));
    if (fortran.find("False") == std::string::npos)
        return unsupported(msg(label, "Fortran-order array (save it C-ordered: np.ascontiguousarray)"));

    uint64_t numel = 1;
    std::stringstream ss(shape_text);
    std::string tok;
    while (std::getline(ss, tok, ',')) {
        size_t s = tok.find_first_not_of(" ");
        if (s == std::string::npos) continue;  // "(5,)" leaves an empty tail
        tok = tok.substr(s);
        size_t e = tok.find_last_not_of(" ");
        tok = tok.substr(0, e + 1);
        if (tok.empty() || tok.size() > 15 || tok.find_first_not_of("0123456789") != std::string::npos)
            return corrupt(msg(label, "bad shape '(" + shape_text + ")'"));
        int64_t d = std::stoll(tok);
        a.shape.push_back(d);
        if (d > 0 && numel > kMaxArrayBytes / uint64_t(d)) return corrupt(msg(label, "shape too large"));
        numel *= uint64_t(d);
    }
    uint64_t nbytes = numel * npy_dtype_size(a.dtype);
    if (nbytes > kMaxArrayBytes) return corrupt(msg(label, "array too large"));
    uint64_t data_start = header_start + header_len;
    if (b.size() - data_start != nbytes)
        return corrupt(msg(label, "data is " + std::to_string(b.size() - data_start) + " bytes, shape " +
                                      a.shape_string() + " " + descr + " needs " + std::to_string(nbytes)));
    a.bytes.assign(b.begin() + int64_t(data_start), b.end());
    return a;
}

Result<NpyArray> read_npy(const std::filesystem::path& path) {
    DSV4_ASSIGN_OR_RETURN(auto data, read_file(path));
    return parse_npy(data, path.string());
}

Result<NpzFile> NpzFile::parse(std::span<const uint8_t> b, std::string_view label) {
    NpzFile z;
    z.label_ = std::string(label);
    // End of central directory: 22 bytes + comment (<= 65535), searched backwards.
    if (b.size() < 22) return corrupt(msg(label, "not a zip/.npz file (too short)"));
    int64_t eocd = -1;
    for (int64_t i = int64_t(b.size()) - 22; i >= 0 && i >= int64_t(b.size()) - 22 - 65535; --i) {
        uint32_t sig = 0;
        read_u32(b, uint64_t(i), &sig);
        if (sig == 0x06054b50) {
            eocd = i;
            break;
        }
    }
    if (eocd < 0) return corrupt(msg(label, "not a zip/.npz file (no end-of-central-directory record)"));
    uint16_t n16 = 0;
    uint32_t cd_size32 = 0, cd_off32 = 0;
    read_u16(b, uint64_t(eocd) + 10, &n16);
    read_u32(b, uint64_t(eocd) + 12, &cd_size32);
    read_u32(b, uint64_t(eocd) + 16, &cd_off32);
    uint64_t entries = n16, cd_off = cd_off32;
    if ((n16 == 0xffff || cd_off32 == 0xffffffffu) && eocd >= 20) {
        // zip64 end-of-central-directory locator precedes the EOCD
        uint32_t sig;
        uint64_t z64;
        if (read_u32(b, uint64_t(eocd) - 20, &sig) && sig == 0x07064b50 && read_u64(b, uint64_t(eocd) - 12, &z64)) {
            uint32_t sig2;
            if (!read_u32(b, z64, &sig2) || sig2 != 0x06064b50 || !read_u64(b, z64 + 32, &entries) ||
                !read_u64(b, z64 + 48, &cd_off))
                return corrupt(msg(label, "bad zip64 end-of-central-directory record"));
        }
    }
    uint64_t p = cd_off;
    for (uint64_t e = 0; e < entries; ++e) {
        uint32_t sig, crc, csize32, usize32, loff32;
        uint16_t method, name_len, extra_len, comment_len, flags;
        if (!read_u32(b, p, &sig) || sig != 0x02014b50 || !read_u16(b, p + 8, &flags) || !read_u16(b, p + 10, &method) ||
            !read_u32(b, p + 16, &crc) || !read_u32(b, p + 20, &csize32) || !read_u32(b, p + 24, &usize32) ||
            !read_u16(b, p + 28, &name_len) || !read_u16(b, p + 30, &extra_len) ||
            !read_u16(b, p + 32, &comment_len) || !read_u32(b, p + 42, &loff32) ||
            b.size() - (p + 46) < uint64_t(name_len) + extra_len)
            return corrupt(msg(label, "bad zip central directory entry " + std::to_string(e)));
        std::string name(reinterpret_cast<const char*>(b.data() + p + 46), name_len);
        std::string member = std::string(label) + ":" + name;
        uint64_t csize = csize32, usize = usize32, loff = loff32;
        // zip64 extended information: the fields that are 0xffffffff, in order usize, csize, offset
        for (uint64_t x = p + 46 + name_len; x + 4 <= p + 46 + name_len + extra_len;) {
            uint16_t id = 0, len = 0;
            read_u16(b, x, &id);
            read_u16(b, x + 2, &len);
            uint64_t q = x + 4;
            if (q + len > p + 46 + name_len + extra_len) return corrupt(msg(member, "bad zip extra field"));
            if (id == 0x0001) {
                if (usize32 == 0xffffffffu && q + 8 <= x + 4 + len) { read_u64(b, q, &usize); q += 8; }
                if (csize32 == 0xffffffffu && q + 8 <= x + 4 + len) { read_u64(b, q, &csize); q += 8; }
                if (loff32 == 0xffffffffu && q + 8 <= x + 4 + len) { read_u64(b, q, &loff); q += 8; }
            }
            x += 4 + len;
        }
        p += 46 + uint64_t(name_len) + extra_len + comment_len;
        if (flags & 1) return unsupported(msg(member, "encrypted zip member"));
        uint32_t lsig;
        uint16_t lname, lextra;
        if (!read_u32(b, loff, &lsig) || lsig != 0x04034b50 || !read_u16(b, loff + 26, &lname) ||
            !read_u16(b, loff + 28, &lextra))
            return corrupt(msg(member, "bad zip local header"));
        uint64_t data_off = loff + 30 + lname + lextra;
        if (data_off > b.size() || csize > b.size() - data_off) return corrupt(msg(member, "member data past the end"));
        if (usize > kMaxArrayBytes + 4096) return corrupt(msg(member, "member too large"));
        // The declared size must be one the data can produce (stored: equal; deflate: at most 1032x, zlib's bound)
        // before it is allocated: a few hundred bytes must not claim gigabytes.
        if (method != 0 && method != 8)
            return unsupported(msg(member, "zip compression method " + std::to_string(method) +
                                               " (supported: stored, deflate)"));
        if (method == 0 && csize != usize) return corrupt(msg(member, "stored member with differing sizes"));
        if (method == 8 && usize > csize * 1032 + 1032)
            return corrupt(msg(member, "uncompressed size " + std::to_string(usize) +
                                           " is more than deflate can make of " + std::to_string(csize) + " bytes"));
        std::vector<uint8_t> raw(static_cast<size_t>(usize));
        if (method == 0) {
            if (usize) std::memcpy(raw.data(), b.data() + data_off, size_t(usize));
        } else if (method == 8) {
            z_stream zs{};
            if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) return internal_error(msg(member, "zlib init failed"));
            uint64_t in_left = csize, out_done = 0;
            const uint8_t* in = b.data() + data_off;
            int rc = Z_OK;
            while (rc == Z_OK) {
                uInt in_chunk = uInt(std::min<uint64_t>(in_left, 1u << 30));
                uInt out_chunk = uInt(std::min<uint64_t>(usize - out_done, 1u << 30));
                zs.next_in = const_cast<Bytef*>(in);
                zs.avail_in = in_chunk;
                zs.next_out = raw.data() + out_done;
                zs.avail_out = out_chunk;
                rc = inflate(&zs, Z_FINISH);
                uint64_t used = in_chunk - zs.avail_in, made = out_chunk - zs.avail_out;
                in += used;
                in_left -= used;
                out_done += made;
                if (rc == Z_BUF_ERROR && (used || made)) rc = Z_OK;  // more chunks to go
                if (rc == Z_OK && used == 0 && made == 0) rc = Z_DATA_ERROR;
            }
            inflateEnd(&zs);
            if (rc != Z_STREAM_END || out_done != usize) return corrupt(msg(member, "deflate data is corrupt"));
        }
        uLong c = crc32(0L, Z_NULL, 0);
        for (uint64_t off = 0; off < usize; off += (1u << 30))
            c = crc32(c, raw.data() + off, uInt(std::min<uint64_t>(usize - off, 1u << 30)));
        if (c != crc) return corrupt(msg(member, "CRC-32 mismatch"));
        std::string key = name;
        if (key.size() > 4 && key.compare(key.size() - 4, 4, ".npy") == 0) key.resize(key.size() - 4);
        DSV4_ASSIGN_OR_RETURN(auto arr, parse_npy(raw, member));
        z.arrays_[key] = std::move(arr);
    }
    return z;
}

Result<NpzFile> NpzFile::read(const std::filesystem::path& path) {
    DSV4_ASSIGN_OR_RETURN(auto data, read_file(path));
    return parse(data, path.string());
}

std::vector<std::string> NpzFile::names() const {
    std::vector<std::string> out;
    for (const auto& [k, v] : arrays_) out.push_back(k);
    return out;
}

const NpyArray* NpzFile::find(std::string_view name) const {
    auto it = arrays_.find(name);
    return it == arrays_.end() ? nullptr : &it->second;
}

Result<const NpyArray*> NpzFile::get(std::string_view name) const {
    const NpyArray* a = find(name);
    if (!a) return not_found(label_ + ": no array '" + std::string(name) + "'");
    return a;
}

std::vector<uint8_t> encode_npy_f32(std::span<const float> data, std::span<const int64_t> shape) {
    std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
    for (size_t i = 0; i < shape.size(); ++i) h += std::to_string(shape[i]) + (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
    h += "), }";
    size_t total = 10 + h.size() + 1;
    h.append((64 - total % 64) % 64, ' ');
    h += '\n';
    std::vector<uint8_t> out(10 + h.size() + data.size() * 4);
    const uint8_t prefix[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, uint8_t(h.size() & 0xff), uint8_t(h.size() >> 8)};
    std::memcpy(out.data(), prefix, 10);
    std::memcpy(out.data() + 10, h.data(), h.size());
    size_t off = 10 + h.size();
    if (!data.empty()) std::memcpy(out.data() + off, data.data(), data.size() * 4);
    return out;
}

Status write_npy_f32(const std::filesystem::path& path, std::span<const float> data, std::span<const int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    if (n != int64_t(data.size()))
        return invalid_argument(path.string() + ": shape holds " + std::to_string(n) + " values, data has " +
                                std::to_string(data.size()));
    auto bytes = encode_npy_f32(data, shape);
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    if (!f) return io_error(path.string() + ": cannot create");
    f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    if (!f) return io_error(path.string() + ": write failed");
    return Status::ok();
}

}  // namespace dsv4::io
