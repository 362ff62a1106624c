// sm90_kv_pack / sm90_key_pack and their inverses (kv_store.h): the compact rows must be lossless for every value a
// FP8-simulated K=V row (act_quant block 64 on channels 0..447, MODEL_SPEC §7.2) or a FP4-simulated indexer key
// (e2m1 per 32) can hold. Rows come from the real finishing kernels (sm90_window_kv_finish, sm90_compressor_finish
// kMain / kIndexer), from the CPU simulations, and from synthetic q·s rows (all-zero blocks, ±0, subnormal codes at
// the smallest scale, maximal codes, the largest code at the quantiser's lower edge). The packed bytes are also
// decoded here with core/formats (not the kernels' decoder), the -1 / device-written scatter lists are checked, and
// the f32 mode is a plain scatter.
#include "backend/cuda/kernels/kv_store/kv_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/kernels/indexer/indexer.h"
#include "backend/cuda/kernels/kv_finish/kv_finish.h"
#include "core/formats.h"
#include "core/thread_pool.h"
#include "ops/gpu_testing.h"
#include "testing/testing.h"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using backend::WeightFormat;
using namespace dsv4::cuda::testing;

constexpr int64_t kKvDim = 512, kKeyDim = 128;

// The packed pool decoded on the host with core/formats: rows [n, dim] of bf16 bits. Also checks the zero byte.
std::vector<uint16_t> host_decode_kv(const std::vector<uint8_t>& pool, const std::vector<int32_t>& rows) {
    std::vector<uint16_t> out;
    for (const int32_t r : rows) {
        const uint8_t* p = pool.data() + size_t(r) * size_t(kKvFp8RowBytes);
        EXPECT_EQ(p[455], 0) << "byte 455 of pool row " << r;
        for (int c = 0; c < 448; ++c) out.push_back(f32_to_bf16(e4m3_to_f32(p[c]) * e8m0_to_f32(p[448 + c / 64])));
        for (int c = 0; c < 64; ++c) {
            uint16_t b;
            std::memcpy(&b, p + 456 + 2 * c, 2);
            out.push_back(b);
        }
    }
    return out;
}
std::vector<uint16_t> host_decode_key(const std::vector<uint8_t>& pool, const std::vector<int32_t>& rows) {
    std::vector<uint16_t> out;
    for (const int32_t r : rows) {
        const uint8_t* p = pool.data() + size_t(r) * size_t(kKeyFp4RowBytes);
        for (int c = 0; c < 128; ++c) {
            const uint8_t code = (p[c / 2] >> (4 * (c % 2))) & 15;
            out.push_back(f32_to_bf16(e2m1_to_f32(code) * e8m0_to_f32(p[64 + c / 32])));
        }
    }
    return out;
}

size_t bit_diffs(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
    size_t d = a.size() == b.size() ? 0 : std::max(a.size(), b.size());
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d += a[i] != b[i];
    return d;
}

// Packs bf16 rows [n, dim] (bits) into pool rows first.. of a 0xff-poisoned pool, unpacks them, and expects the same
// bits back from the kernels and from the host decoder.
void expect_round_trip(bool kv, const std::vector<uint16_t>& rows, int64_t first = 3) {
    const int64_t dim = kv ? kKvDim : kKeyDim, n = int64_t(rows.size()) / dim;
    const int64_t row_bytes = kv ? kKvFp8RowBytes : kKeyFp4RowBytes;
    EXPECT_EQ(kv ? kv_row_bytes(Precision::kReference) : key_row_bytes(Precision::kReference), row_bytes);
    auto drows = to_device(rows);
    auto dpool = poisoned<uint8_t>(size_t((first + n) * row_bytes));
    auto dout = poisoned<uint16_t>(rows.size());
    std::vector<int32_t> src(static_cast<size_t>(n));
    std::iota(src.begin(), src.end(), int32_t(first));
    auto dsrc = to_device(src);
    ASSERT_TRUE(drows.is_ok() && dpool.is_ok() && dout.is_ok() && dsrc.is_ok());
    if (kv) {
        DSV4_ASSERT_OK(sm90_kv_pack(Precision::kReference, {drows->data(), n, nullptr, first, dpool->data()}, nullptr));
        DSV4_ASSERT_OK(sm90_kv_unpack(Precision::kReference, dpool->data(), dsrc->as<int32_t>(), n, dout->data(),
                                      nullptr));
    } else {
        DSV4_ASSERT_OK(sm90_key_pack(Precision::kReference, {drows->data(), n, nullptr, first, dpool->data()}, nullptr));
        DSV4_ASSERT_OK(sm90_key_unpack(Precision::kReference, dpool->data(), dsrc->as<int32_t>(), n, dout->data(),
                                       nullptr));
    }
    const auto got = to_host<uint16_t>(*dout, rows.size());
    EXPECT_EQ(bit_diffs(got, rows), 0u) << "unpack(pack(rows)) is not bit-exact";
    const auto pool_bytes = to_host<uint8_t>(*dpool, size_t((first + n) * row_bytes));
    EXPECT_EQ(bit_diffs(kv ? host_decode_kv(pool_bytes, src) : host_decode_key(pool_bytes, src), rows), 0u)
        << "the packed bytes do not decode (core/formats) to the rows";
    EXPECT_TRUE(std::all_of(pool_bytes.begin(), pool_bytes.begin() + first * row_bytes, [](uint8_t b) {
        return b == 0xff;
    })) << "pool rows before dst_first were written";
}

TEST(KvStoreTest, KvRoundTripOnFinishedRows) {
    DSV4_REQUIRE_GPU();
    std::mt19937_64 rng(fresh_seed());
    const auto freqs = backend::rope_freqs(160000, 16, 65536, 32, 1);
    const Precision prec = Precision::kReference;
    // window K=V rows through the real finishing kernel (norm, rope, FP8 simulation), 300 tokens
    {
        const int64_t T = 300;
        auto kv = random_act(prec, rng, size_t(T * kKvDim), 1.5f);
        auto wbits = to_bf16_bits(random_bf16(rng, kKvDim, 0.5f));
        backend::WeightView wv{WeightFormat::kBF16, 1, kKvDim, wbits.data(), nullptr};
        std::vector<int64_t> pos(static_cast<size_t>(T));
        std::iota(pos.begin(), pos.end(), int64_t(17));
        auto dkv = act_to_device(prec, kv);
        auto dw = upload_weight(wv, "kv_norm");
        auto dpos = to_device(pos);
        ASSERT_TRUE(dkv.is_ok() && dw.is_ok() && dpos.is_ok());
        DSV4_ASSERT_OK(sm90_window_kv_finish(prec, {dkv->data(), T, dw->view(), dpos->as<int64_t>(), freqs, 1e-6f},
                                             nullptr));
        SCOPED_TRACE("window K=V rows");
        expect_round_trip(true, to_host<uint16_t>(*dkv, size_t(T * kKvDim)));
    }
    // compressed entries (kMain: 512-d FP8) and indexer keys (kIndexer: Hadamard + FP4) through compressor_finish
    for (const auto kind : {backend::CompressedKind::kMain, backend::CompressedKind::kIndexer}) {
        const bool main = kind == backend::CompressedKind::kMain;
        const int64_t n = 130, dim = main ? kKvDim : kKeyDim;
        SCOPED_TRACE(main ? "compressed main entries" : "indexer keys");
        auto pooled = random_act(prec, rng, size_t(n * dim), 1.0f);
        auto wbits = to_bf16_bits(random_bf16(rng, size_t(dim), 0.5f));
        backend::WeightView wv{WeightFormat::kBF16, 1, dim, wbits.data(), nullptr};
        auto dp = act_to_device(prec, pooled);
        auto dw = upload_weight(wv, "compressor.norm");
        ASSERT_TRUE(dp.is_ok() && dw.is_ok());
        CompressorFinishArgs a{dp->data(), n, dim, 4, 11, kind, dw->view(), freqs, 1e-6f, nullptr, dp->data()};
        DSV4_ASSERT_OK(sm90_compressor_finish(prec, a, nullptr));
        expect_round_trip(main, to_host<uint16_t>(*dp, size_t(n * dim)));
    }
}

TEST(KvStoreTest, RoundTripOnCpuSimulatedRows) {
    DSV4_REQUIRE_GPU();
    std::mt19937_64 rng(fresh_seed());
    // the CPU reference's kv_fp8_sim (wide value ranges: blocks scaled by 2^-20 .. 2^20) and fp4_act_quant x_sim
    const int64_t n = 257;
    std::vector<float> kv = random_bf16(rng, size_t(n * kKvDim), 1.0f);
    std::uniform_int_distribution<int> ex(-20, 20);
    for (size_t b = 0; b < kv.size() / 64; ++b) {
        const float s = std::ldexp(1.0f, ex(rng));
        for (size_t i = 0; i < 64; ++i) kv[b * 64 + i] = round_bf16(kv[b * 64 + i] * s);
    }
    const backend::Exec ex_ref{Precision::kReference, &pool()};
    DSV4_ASSERT_OK(backend::cpu::kv_fp8_sim(ex_ref, {kv.data(), n, kKvDim, 64}));
    {
        SCOPED_TRACE("CPU kv_fp8_sim rows");
        expect_round_trip(true, to_bf16_bits(kv), 0);
    }
    std::vector<float> keys = random_bf16(rng, size_t(n * kKeyDim), 1.0f), sim(keys.size());
    for (size_t b = 0; b < keys.size() / 32; ++b) {
        const float s = std::ldexp(1.0f, ex(rng));
        for (size_t i = 0; i < 32; ++i) keys[b * 32 + i] = round_bf16(keys[b * 32 + i] * s);
    }
    DSV4_ASSERT_OK(backend::cpu::fp4_act_quant({keys.data(), n, kKeyDim, nullptr, nullptr, nullptr, sim.data()}));
    SCOPED_TRACE("CPU fp4_act_quant rows");
    expect_round_trip(false, to_bf16_bits(sim), 5);
}

// Synthetic rows bf16(q·s): per block a scale and codes, with the edge blocks listed below.
TEST(KvStoreTest, RoundTripOnSyntheticCodeRows) {
    DSV4_REQUIRE_GPU();
    std::mt19937_64 rng(fresh_seed());
    std::uniform_int_distribution<int> byte(0, 255), nib(0, 15), kv_exp(-22, 20), key_exp(-126, 20);
    auto e4m3_code = [&] {
        int c = byte(rng);
        return (c & 0x7f) == 0x7f ? c & 0xfe : c;  // 0x7f / 0xff are NaN
    };
    const int64_t n = 64;
    std::vector<uint16_t> kv(size_t(n * kKvDim));
    for (int64_t r = 0; r < n; ++r) {
        for (int b = 0; b < 7; ++b) {
            const int kind = int((r * 7 + b) % 9);
            const int e = kind == 1 ? -22 : kind == 2 ? 20 : kv_exp(rng);
            for (int i = 0; i < 64; ++i) {
                int code = e4m3_code();
                if (kind == 0) code = (i % 3 == 0) ? 0x80 : 0;              // all-zero block, ±0
                else if (kind == 1) code = (byte(rng) & 0x87);               // subnormal codes at the smallest scale
                else if (kind == 2) code = i % 2 ? 0x7e : 0xfe;              // ±448 at a large scale
                else if (kind == 3) code = i == 5 ? 0x76 : (code & 0xe7);    // largest code 224 (recovered at s/2)
                else if (kind == 4 && i == 9) code = 0x80;                   // a -0 among ordinary codes
                kv[size_t(r * kKvDim + b * 64 + i)] = f32_to_bf16(std::ldexp(e4m3_to_f32(uint8_t(code)), e));
            }
        }
        for (int i = 448; i < 512; ++i) {  // rope channels: arbitrary bf16 bits, specials included
            uint16_t bits = uint16_t(byte(rng) | (byte(rng) << 8));
            if (i == 448) bits = 0x8000;
            if (i == 449) bits = 0x0001;
            kv[size_t(r * kKvDim + i)] = bits;
        }
    }
    {
        SCOPED_TRACE("synthetic e4m3 rows");
        expect_round_trip(true, kv);
    }
    std::vector<uint16_t> keys(size_t(n * kKeyDim));
    for (int64_t r = 0; r < n; ++r)
        for (int b = 0; b < 4; ++b) {
            const int kind = int((r * 4 + b) % 7);
            const int e = kind == 1 ? -126 : kind == 2 ? 20 : key_exp(rng);
            for (int i = 0; i < 32; ++i) {
                int code = nib(rng);
                if (kind == 0) code = i % 2 ? 8 : 0;          // all-zero block, ±0
                else if (kind == 2) code = i % 2 ? 7 : 15;    // ±6
                else if (kind == 3) code = i == 7 ? 5 : code & 0xd;  // largest value 3 (recovered at s/2)
                else if (kind == 4 && i == 3) code = 8;       // -0
                keys[size_t(r * kKeyDim + b * 32 + i)] = f32_to_bf16(std::ldexp(e2m1_to_f32(uint8_t(code)), e));
            }
        }
    SCOPED_TRACE("synthetic e2m1 rows");
    expect_round_trip(false, keys);
}

// Scatter through a row list with -1 entries, in both precisions; rows not listed stay untouched.
class KvStoreScatterTest : public ::testing::TestWithParam<Precision> {};

TEST_P(KvStoreScatterTest, RowListWithSkips) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    const size_t act_bytes = prec == Precision::kReference ? 2 : 4;
    const int64_t n = 100, pool_rows = 300;
    for (const bool kv : {true, false}) {
        SCOPED_TRACE(kv ? "K=V rows" : "indexer keys");
        const int64_t dim = kv ? kKvDim : kKeyDim, rb = kv ? kv_row_bytes(prec) : key_row_bytes(prec);
        EXPECT_EQ(rb, prec == Precision::kReference ? (kv ? 584 : 68) : dim * 4);
        std::vector<float> rows = random_act(prec, rng, size_t(n * dim), 1.0f);
        if (prec == Precision::kReference) {  // make them simulated rows
            if (kv) {
                DSV4_ASSERT_OK(backend::cpu::kv_fp8_sim({prec, &pool()}, {rows.data(), n, kKvDim, 64}));
            } else {
                DSV4_ASSERT_OK(backend::cpu::fp4_act_quant({rows.data(), n, kKeyDim, nullptr, nullptr, nullptr,
                                                            rows.data()}));
            }
        }
        std::vector<int32_t> perm(static_cast<size_t>(pool_rows));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        std::vector<int32_t> dst(perm.begin(), perm.begin() + n);
        for (int64_t i = 0; i < n; i += 7) dst[size_t(i)] = -1;
        auto drows = act_to_device(prec, rows);
        auto ddst = to_device(dst);
        auto dpool = poisoned<uint8_t>(size_t(pool_rows * rb));
        auto dout = act_poisoned(prec, size_t(n * dim));
        ASSERT_TRUE(drows.is_ok() && ddst.is_ok() && dpool.is_ok() && dout.is_ok());
        if (kv) {
            DSV4_ASSERT_OK(sm90_kv_pack(prec, {drows->data(), n, ddst->as<int32_t>(), 0, dpool->data()}, nullptr));
            DSV4_ASSERT_OK(sm90_kv_unpack(prec, dpool->data(), ddst->as<int32_t>(), n, dout->data(), nullptr));
        } else {
            DSV4_ASSERT_OK(sm90_key_pack(prec, {drows->data(), n, ddst->as<int32_t>(), 0, dpool->data()}, nullptr));
            DSV4_ASSERT_OK(sm90_key_unpack(prec, dpool->data(), ddst->as<int32_t>(), n, dout->data(), nullptr));
        }
        const auto got = to_host<uint8_t>(*dout, size_t(n * dim) * act_bytes);
        const auto want_bits = prec == Precision::kReference ? [&] {
            auto b = to_bf16_bits(rows);
            std::vector<uint8_t> v(b.size() * 2);
            std::memcpy(v.data(), b.data(), v.size());
            return v;
        }() : [&] {
            std::vector<uint8_t> v(rows.size() * 4);
            std::memcpy(v.data(), rows.data(), v.size());
            return v;
        }();
        const size_t row_bytes_act = size_t(dim) * act_bytes;
        size_t bad_rows = 0, nonzero_skipped = 0;
        for (int64_t i = 0; i < n; ++i) {
            const auto* g = got.data() + size_t(i) * row_bytes_act;
            if (dst[size_t(i)] < 0)  // unpacking a -1 row gives zeros
                nonzero_skipped += !std::all_of(g, g + row_bytes_act, [](uint8_t b) { return b == 0; });
            else
                bad_rows += std::memcmp(g, want_bits.data() + size_t(i) * row_bytes_act, row_bytes_act) != 0;
        }
        EXPECT_EQ(bad_rows, 0u) << "scattered rows do not round-trip";
        EXPECT_EQ(nonzero_skipped, 0u) << "unpacking a -1 row must give zeros";
        // pool rows that no entry names stay 0xff
        std::vector<bool> named(static_cast<size_t>(pool_rows), false);
        for (const int32_t d : dst)
            if (d >= 0) named[size_t(d)] = true;
        const auto pb = to_host<uint8_t>(*dpool, size_t(pool_rows * rb));
        size_t touched = 0;
        for (int64_t r = 0; r < pool_rows; ++r)
            if (!named[size_t(r)])
                touched += !std::all_of(pb.begin() + r * rb, pb.begin() + (r + 1) * rb, [](uint8_t b) {
                    return b == 0xff;
                });
        EXPECT_EQ(touched, 0u) << "pool rows outside the list were written";
    }
}

// dst_rows written on the device by an earlier kernel of the same stream (here sm90_topk: the order of descending
// scores, -1 where the score is -inf), read by the pack without the host ever seeing it.
TEST_P(KvStoreScatterTest, DeviceWrittenRowList) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    const int64_t n = 77;
    auto stream = Stream::create();
    ASSERT_TRUE(stream.is_ok());
    for (const bool kv : {true, false}) {
        SCOPED_TRACE(kv ? "K=V rows" : "indexer keys");
        const int64_t dim = kv ? kKvDim : kKeyDim, rb = kv ? kv_row_bytes(prec) : key_row_bytes(prec);
        std::vector<float> rows = random_act(prec, rng, size_t(n * dim), 1.0f);
        if (prec == Precision::kReference) {
            if (kv) {
                DSV4_ASSERT_OK(backend::cpu::kv_fp8_sim({prec, &pool()}, {rows.data(), n, kKvDim, 64}));
            } else {
                DSV4_ASSERT_OK(backend::cpu::fp4_act_quant({rows.data(), n, kKeyDim, nullptr, nullptr, nullptr,
                                                            rows.data()}));
            }
        }
        // distinct scores; every 5th -inf; topk(k = n) lists indices by descending score, then -1
        std::vector<float> scores(static_cast<size_t>(n));
        std::vector<int32_t> order(static_cast<size_t>(n));
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng);
        for (int64_t i = 0; i < n; ++i) scores[size_t(order[size_t(i)])] = i % 5 == 4 ? -INFINITY : float(n - i);
        std::vector<int32_t> dst_want(static_cast<size_t>(n), -1);
        {
            std::vector<int32_t> idx(static_cast<size_t>(n));
            std::iota(idx.begin(), idx.end(), 0);
            std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
            for (int64_t i = 0; i < n; ++i)
                if (scores[size_t(idx[size_t(i)])] != -INFINITY) dst_want[size_t(i)] = idx[size_t(i)];
        }
        auto dscores = to_device(scores);
        auto ddst = poisoned<int32_t>(size_t(n));
        auto drows = act_to_device(prec, rows);
        auto dpool = poisoned<uint8_t>(size_t(n * rb));
        auto dout = act_poisoned(prec, size_t(n * dim));
        ASSERT_TRUE(dscores.is_ok() && ddst.is_ok() && drows.is_ok() && dpool.is_ok() && dout.is_ok());
        const StreamHandle s = stream->handle();
        DSV4_ASSERT_OK(sm90_topk(Precision::kF32, {dscores->data(), 1, n, n, ddst->as<int32_t>()}, s));
        if (kv) {
            DSV4_ASSERT_OK(sm90_kv_pack(prec, {drows->data(), n, ddst->as<int32_t>(), 0, dpool->data()}, s));
            DSV4_ASSERT_OK(sm90_kv_unpack(prec, dpool->data(), ddst->as<int32_t>(), n, dout->data(), s));
        } else {
            DSV4_ASSERT_OK(sm90_key_pack(prec, {drows->data(), n, ddst->as<int32_t>(), 0, dpool->data()}, s));
            DSV4_ASSERT_OK(sm90_key_unpack(prec, dpool->data(), ddst->as<int32_t>(), n, dout->data(), s));
        }
        DSV4_ASSERT_OK(stream->synchronize());
        ASSERT_EQ(to_host<int32_t>(*ddst, size_t(n)), dst_want) << "the device-written list is not the expected one";
        const auto got = act_to_host(prec, *dout, size_t(n * dim));
        size_t bad = 0, listed = 0;
        for (int64_t i = 0; i < n; ++i)
            for (int64_t c = 0; c < dim; ++c) {
                const float g = got[size_t(i * dim + c)];
                const float w = dst_want[size_t(i)] < 0 ? 0.0f : rows[size_t(i * dim + c)];
                bad += std::memcmp(&g, &w, 4) != 0 && !(g == 0 && w == 0 && dst_want[size_t(i)] < 0);
                listed += dst_want[size_t(i)] >= 0;
            }
        EXPECT_EQ(bad, 0u) << "rows scattered through the device-written list do not round-trip";
        EXPECT_GT(listed, 0u);
    }
}

TEST(KvStoreValidation, BadArgumentsAreClearErrors) {
    DSV4_REQUIRE_GPU();
    auto buf = DeviceBuffer::allocate(1 << 16);
    ASSERT_TRUE(buf.is_ok());
    auto* base = static_cast<uint8_t*>(buf->data());
    Status s = sm90_kv_pack(Precision::kReference, {base, 4, nullptr, 0, base + 4}, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("8-byte"), std::string::npos) << s.message();
    s = sm90_key_pack(Precision::kReference, {base + 8, 4, nullptr, 0, base}, nullptr);
    EXPECT_NE(s.message().find("16-byte"), std::string::npos) << s.message();
    s = sm90_kv_unpack(Precision::kReference, nullptr, nullptr, 4, base, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

const auto kPrecisions = ::testing::Values(Precision::kReference, Precision::kF32);
std::string precision_label(const ::testing::TestParamInfo<Precision>& i) { return backend::precision_name(i.param); }
INSTANTIATE_TEST_SUITE_P(Cuda, KvStoreScatterTest, kPrecisions, precision_label);

}  // namespace
}  // namespace dsv4::cuda
