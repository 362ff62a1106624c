// .npy / .npz reading and writing: round trips, the committed fixtures, and malformed inputs (a Status, no crash).
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <fstream>
#include <random>

#include "io/npy.h"
#include "testing/testing.h"

namespace dsv4::io {
namespace {

std::vector<uint8_t> npy_bytes(const std::string& descr, const std::string& shape, const std::vector<uint8_t>& data) {
    std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + shape + "), }";
    h.append((64 - (10 + h.size() + 1) % 64) % 64, ' ');
    h += '\n';
    std::string head = std::string("\x93NUMPY\x01\x00", 8) + char(h.size() & 0xff) + char(h.size() >> 8) + h;
    std::vector<uint8_t> out(head.size() + data.size());
    std::copy(head.begin(), head.end(), out.begin());
    std::copy(data.begin(), data.end(), out.begin() + int64_t(head.size()));
    return out;
}

void put16(std::vector<uint8_t>& v, uint16_t x) { v.push_back(uint8_t(x)); v.push_back(uint8_t(x >> 8)); }
void put32(std::vector<uint8_t>& v, uint32_t x) { put16(v, uint16_t(x)); put16(v, uint16_t(x >> 16)); }

// A minimal zip writer (stored or deflate) for building .npz images in tests.
std::vector<uint8_t> make_zip(const std::vector<std::pair<std::string, std::vector<uint8_t>>>& members, bool compress) {
    std::vector<uint8_t> out, cd;
    for (const auto& [name, data] : members) {
        std::vector<uint8_t> payload = data;
        if (compress) {
            z_stream zs{};
            deflateInit2(&zs, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
            payload.resize(deflateBound(&zs, uLong(data.size())));
            zs.next_in = const_cast<Bytef*>(data.data());
            zs.avail_in = uInt(data.size());
            zs.next_out = payload.data();
            zs.avail_out = uInt(payload.size());
            EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
            payload.resize(zs.total_out);
            deflateEnd(&zs);
        }
        uint32_t crc = uint32_t(crc32(0, data.data(), uInt(data.size())));
        uint32_t off = uint32_t(out.size());
        put32(out, 0x04034b50); put16(out, 20); put16(out, 0); put16(out, compress ? 8 : 0); put32(out, 0);
        put32(out, crc); put32(out, uint32_t(payload.size())); put32(out, uint32_t(data.size()));
        put16(out, uint16_t(name.size())); put16(out, 0);
        out.insert(out.end(), name.begin(), name.end());
        out.insert(out.end(), payload.begin(), payload.end());
        put32(cd, 0x02014b50); put16(cd, 20); put16(cd, 20); put16(cd, 0); put16(cd, compress ? 8 : 0); put32(cd, 0);
        put32(cd, crc); put32(cd, uint32_t(payload.size())); put32(cd, uint32_t(data.size()));
        put16(cd, uint16_t(name.size())); put16(cd, 0); put16(cd, 0); put16(cd, 0); put16(cd, 0); put32(cd, 0);
        put32(cd, off);
        cd.insert(cd.end(), name.begin(), name.end());
    }
    uint32_t cd_off = uint32_t(out.size());
    out.insert(out.end(), cd.begin(), cd.end());
    put32(out, 0x06054b50); put16(out, 0); put16(out, 0); put16(out, uint16_t(members.size()));
    put16(out, uint16_t(members.size())); put32(out, uint32_t(cd.size())); put32(out, cd_off); put16(out, 0);
    return out;
}

TEST(Npy, ParsesEachDtype) {
    std::vector<uint8_t> i64(16);
    int64_t v[2] = {-5, 1ll << 40};
    std::memcpy(i64.data(), v, 16);
    auto a = parse_npy(npy_bytes("<i8", "2,", i64), "t");
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    EXPECT_EQ(a->shape, (std::vector<int64_t>{2}));
    EXPECT_EQ(a->i64()[1], 1ll << 40);
    EXPECT_EQ(a->to_f32()[0], -5.0f);

    auto b = parse_npy(npy_bytes("|i1", "1, 3", {0xff, 1, 0x80}), "t");
    ASSERT_TRUE(b.is_ok());
    EXPECT_EQ(b->to_i32(), (std::vector<int32_t>{-1, 1, -128}));
    auto c = parse_npy(npy_bytes("|u1", "3", {0xff, 1, 0x80}), "t");
    ASSERT_TRUE(c.is_ok());
    EXPECT_EQ(c->u8()[0], 0xff);
    auto s = parse_npy(npy_bytes("<f4", "", {0, 0, 0x80, 0x3f}), "t");  // scalar 1.0f
    ASSERT_TRUE(s.is_ok());
    EXPECT_TRUE(s->shape.empty());
    EXPECT_EQ(s->f32()[0], 1.0f);
}

TEST(Npy, WriteReadRoundTrip) {
    testing::TempDir dir;
    std::vector<float> data(2 * 3 * 5);
    for (size_t i = 0; i < data.size(); ++i) data[i] = float(i) * 0.25f - 3.0f;
    std::vector<int64_t> shape = {2, 3, 5};
    ASSERT_TRUE(write_npy_f32(dir.path() / "x.npy", data, shape).is_ok());
    auto a = read_npy(dir.path() / "x.npy");
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    EXPECT_EQ(a->shape, shape);
    EXPECT_EQ(std::vector<float>(a->f32().begin(), a->f32().end()), data);
    // the header length keeps the data 64-byte aligned, as numpy writes it
    auto bytes = encode_npy_f32(data, shape);
    EXPECT_EQ((bytes.size() - data.size() * 4) % 64, 0u);
    EXPECT_FALSE(write_npy_f32(dir.path() / "y.npy", data, std::vector<int64_t>{7}).is_ok());
}

TEST(Npy, RejectsMalformed) {
    std::vector<uint8_t> f4(8, 0);
    EXPECT_EQ(parse_npy(npy_bytes(">f4", "2", f4), "t").status().code(), StatusCode::kUnsupported);
    EXPECT_EQ(parse_npy(npy_bytes("<c8", "1", f4), "t").status().code(), StatusCode::kUnsupported);
    EXPECT_EQ(parse_npy(npy_bytes("<f4", "3", f4), "t").status().code(), StatusCode::kCorrupt);  // short data
    EXPECT_EQ(parse_npy(npy_bytes("<f4", "x", f4), "t").status().code(), StatusCode::kCorrupt);
    auto fortran = npy_bytes("<f4", "2", f4);
    std::string h(fortran.begin(), fortran.end());
    h.replace(h.find("False"), 5, "True ");
    EXPECT_EQ(parse_npy(std::vector<uint8_t>(h.begin(), h.end()), "t").status().code(), StatusCode::kUnsupported);
    std::vector<uint8_t> junk = {1, 2, 3};
    EXPECT_FALSE(parse_npy(junk, "t").is_ok());
    auto huge = npy_bytes("<f4", "100000000000, 100000000000", f4);
    EXPECT_FALSE(parse_npy(huge, "t").is_ok());
    // every truncation of a valid file is an error, never a crash
    auto good = npy_bytes("<f4", "2", f4);
    for (size_t n = 0; n < good.size(); ++n)
        EXPECT_FALSE(parse_npy(std::span<const uint8_t>(good.data(), n), "t").is_ok()) << n;
}

TEST(Npz, StoredAndDeflate) {
    std::vector<uint8_t> f4(4 * 100);
    for (size_t i = 0; i < f4.size(); ++i) f4[i] = uint8_t(i % 7);
    for (bool compress : {false, true}) {
        auto zip = make_zip({{"a.npy", npy_bytes("<f4", "10, 10", f4)}, {"b.npy", npy_bytes("|u1", "2", {7, 9})}},
                            compress);
        auto z = NpzFile::parse(zip, "t.npz");
        ASSERT_TRUE(z.is_ok()) << z.status().to_string();
        EXPECT_EQ(z->names(), (std::vector<std::string>{"a", "b"}));
        EXPECT_EQ(z->find("a")->shape, (std::vector<int64_t>{10, 10}));
        EXPECT_EQ(z->find("a")->bytes, f4);
        EXPECT_EQ(z->find("b")->u8()[1], 9);
        EXPECT_EQ(z->get("c").status().code(), StatusCode::kNotFound);
        // every truncation and many single-byte corruptions give a Status, never a crash
        for (size_t n = 0; n < zip.size(); n += 3) (void)NpzFile::parse(std::span<const uint8_t>(zip.data(), n), "t");
        std::mt19937 rng(1);
        for (int trial = 0; trial < 300; ++trial) {
            auto bad = zip;
            bad[rng() % bad.size()] ^= uint8_t(1 + rng() % 255);
            (void)NpzFile::parse(bad, "t");
        }
        auto bad = zip;
        bad[40] ^= 0x55;  // inside member a's data: CRC or deflate error
        EXPECT_FALSE(NpzFile::parse(bad, "t").is_ok());
    }
}

TEST(Npz, ReadsRecordedFixture) {
    auto z = NpzFile::read(testing::test_data_dir() / "official_ops" / "layer1.npz");
    ASSERT_TRUE(z.is_ok()) << z.status().to_string();
    auto* h = z->find("h_in");
    ASSERT_NE(h, nullptr);
    EXPECT_EQ(h->shape, (std::vector<int64_t>{260, 4, 128}));
    EXPECT_EQ(h->dtype, NpyDType::kF32);
    auto* topk = z->find("idx_topk");
    ASSERT_NE(topk, nullptr);
    EXPECT_EQ(topk->dtype, NpyDType::kI32);
    // tokens.txt and head.npz:tokens agree
    auto head = NpzFile::read(testing::test_data_dir() / "official_ops" / "head.npz");
    ASSERT_TRUE(head.is_ok());
    std::ifstream f(testing::test_data_dir() / "official_ops" / "tokens.txt");
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_EQ(std::to_string(head->find("tokens")->i32()[0]), text.substr(0, text.find(',')));
    auto gemm = NpzFile::read(testing::test_data_dir() / "official_ops" / "prim_fp8_gemm.npz");
    ASSERT_TRUE(gemm.is_ok());
    EXPECT_EQ(gemm->find("c_exact_f64")->dtype, NpyDType::kF64);
    EXPECT_EQ(NpzFile::read("/nonexistent.npz").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace dsv4::io
