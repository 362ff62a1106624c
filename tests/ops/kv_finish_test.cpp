// sm90_window_kv_finish, sm90_compressor_pool and sm90_compressor_finish against the CPU ops (rmsnorm + rope +
// kv_fp8_sim as window_kv runs them after its linear; compressor_pool; compressor_finish) at V4 shapes (512-d
// main entries, 128-d indexer keys, CSA ratio 4 with overlap, HCA ratio 128) and edge shapes, both precisions; the
// decode-position mode and the batched decode mode (B sequences in one launch) against the host-driven calls.
#include "backend/cuda/kernels/kv_finish/kv_finish.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/kernels/kv_store/kv_store.h"
#include "core/thread_pool.h"
#include "ops/gpu_testing.h"
#include "testing/testing.h"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using backend::WeightFormat;
using namespace dsv4::cuda::testing;

double act_tol(Precision p) { return p == Precision::kReference ? 2e-3 : 1e-6; }
// Rows through the FP8 / FP4 simulations: a rare bf16 flip before the quantiser can move a whole value to the
// neighbouring code, so the bit-difference bar is looser than for plain bf16 outputs.
size_t sim_bit_budget(size_t n) { return n / 100 + 1; }

std::vector<int64_t> random_positions(std::mt19937_64& rng, int64_t n) {
    std::uniform_int_distribution<int64_t> d(0, (1 << 20) - 1);
    std::vector<int64_t> pos(static_cast<size_t>(n));
    for (auto& p : pos) p = d(rng);
    if (n > 0) pos[0] = 0;
    return pos;
}

class WindowKvFinishTest : public ::testing::TestWithParam<Precision> {};

TEST_P(WindowKvFinishTest, MatchesCpuNormRopeFp8Sim) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    for (const int64_t T : {int64_t(1), int64_t(5), int64_t(130), int64_t(1023)}) {
        for (const bool yarn : {false, true}) {
            SCOPED_TRACE("tokens " + std::to_string(T) + (yarn ? " yarn" : " plain"));
            const auto freqs =
                yarn ? backend::rope_freqs(160000, 16, 65536, 32, 1) : backend::rope_freqs(10000, 1, 0, 32, 1);
            auto kv = random_act(prec, rng, size_t(T * 512), 1.5f);
            auto w = random_bf16(rng, 512, 0.5f);
            auto wbits = to_bf16_bits(w);
            backend::WeightView wv{WeightFormat::kBF16, 1, 512, wbits.data(), nullptr};
            auto pos = random_positions(rng, T);
            std::vector<float> want = kv;
            const backend::Exec ex{prec, &pool()};
            DSV4_ASSERT_OK(backend::cpu::rmsnorm(ex, {want.data(), T, 512, wv, 1e-6f, want.data()}));
            DSV4_ASSERT_OK(backend::cpu::rope(ex, {want.data(), T, 1, 512, 448, pos.data(), &freqs, false}));
            DSV4_ASSERT_OK(backend::cpu::kv_fp8_sim(ex, {want.data(), T, 512, 64}));
            auto dkv = act_to_device(prec, kv);
            auto dw = upload_weight(wv, "kv_norm");
            auto dpos = to_device(pos);
            ASSERT_TRUE(dkv.is_ok() && dw.is_ok() && dpos.is_ok());
            DSV4_ASSERT_OK(
                sm90_window_kv_finish(prec, {dkv->data(), T, dw->view(), dpos->as<int64_t>(), freqs, 1e-6f}, nullptr));
            auto got = act_to_host(prec, *dkv, want.size());
            DSV4_EXPECT_CLOSE(got, want, act_tol(prec));
            if (prec == Precision::kReference) {
                EXPECT_LE(count_bit_differences(got, want), sim_bit_budget(got.size()));
            }
        }
    }
}

// The pack fused into the finish (WindowKvFinishArgs::pool) against the finish followed by sm90_kv_pack: the same
// finished rows and the same pool bytes, the rows outside [pool_first, pool_first + T) untouched.
TEST_P(WindowKvFinishTest, FusedPackStoresWhatKvPackStores) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    const auto freqs = backend::rope_freqs(160000, 16, 65536, 32, 1);
    const int64_t row_bytes = kv_row_bytes(prec);
    for (const int64_t T : {int64_t(1), int64_t(8), int64_t(300)}) {
        for (const int64_t first : {int64_t(0), int64_t(3)}) {
            SCOPED_TRACE("tokens " + std::to_string(T) + " pool_first " + std::to_string(first));
            auto kv = random_act(prec, rng, size_t(T * 512), 1.5f);
            auto w = random_bf16(rng, 512, 0.5f);
            auto wbits = to_bf16_bits(w);
            backend::WeightView wv{WeightFormat::kBF16, 1, 512, wbits.data(), nullptr};
            auto pos = random_positions(rng, T);
            const size_t pool_bytes = size_t((first + T + 2) * row_bytes);
            auto dkv_a = act_to_device(prec, kv), dkv_b = act_to_device(prec, kv);
            auto dw = upload_weight(wv, "kv_norm");
            auto dpos = to_device(pos);
            auto pool_a = poisoned<uint8_t>(pool_bytes), pool_b = poisoned<uint8_t>(pool_bytes);
            ASSERT_TRUE(dkv_a.is_ok() && dkv_b.is_ok() && dw.is_ok() && dpos.is_ok() && pool_a.is_ok() &&
                        pool_b.is_ok());
            WindowKvFinishArgs a{dkv_a->data(), T, dw->view(), dpos->as<int64_t>(), freqs, 1e-6f};
            DSV4_ASSERT_OK(sm90_window_kv_finish(prec, a, nullptr));
            KvPackArgs p;
            p.rows = dkv_a->data();
            p.n = T;
            p.dst_first = first;
            p.pool = pool_a->data();
            DSV4_ASSERT_OK(sm90_kv_pack(prec, p, nullptr));
            a.kv = dkv_b->data();
            a.pool = pool_b->data();
            a.pool_first = first;
            DSV4_ASSERT_OK(sm90_window_kv_finish(prec, a, nullptr));
            const size_t act_bytes = size_t(T * 512) * (prec == Precision::kReference ? 2 : 4);
            EXPECT_TRUE(
                dsv4::testing::bytes_equal(to_host<uint8_t>(*dkv_b, act_bytes), to_host<uint8_t>(*dkv_a, act_bytes)))
                << "finished rows differ";
            EXPECT_TRUE(dsv4::testing::bytes_equal(to_host<uint8_t>(*pool_b, pool_bytes),
                                                   to_host<uint8_t>(*pool_a, pool_bytes)))
                << "pool bytes differ";
        }
    }
}

class CompressorPoolTest : public ::testing::TestWithParam<Precision> {};

TEST_P(CompressorPoolTest, MatchesCpu) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    struct Case {
        int64_t windows, ratio, head_dim;
        bool overlap, prev;
    };
    // CSA main (m 4, 2x512) and indexer (m 4, 2x128) with and without a previous window; HCA (m 128, 512)
    const Case cases[] = {{1, 4, 512, true, false},   {1, 4, 512, true, true},     {33, 4, 512, true, true},
                          {7, 4, 128, true, false},   {1, 128, 512, false, false}, {5, 128, 512, false, true},
                          {1024, 4, 512, true, false},
                          // a 300-token prefill of the test models: 75 CSA windows (main and indexer), 2 HCA windows
                          {75, 4, 512, true, true},   {75, 4, 128, true, false},   {2, 128, 512, false, false}};
    for (const Case& c : cases) {
        SCOPED_TRACE("windows " + std::to_string(c.windows) + " m " + std::to_string(c.ratio) + " c " +
                     std::to_string(c.head_dim) + (c.prev ? " prev" : ""));
        const int64_t width = c.overlap ? 2 * c.head_dim : c.head_dim, rows = c.windows * c.ratio;
        std::normal_distribution<float> dkv(0.0f, 1.0f), dsc(0.0f, 2.0f);
        std::vector<float> kv(size_t(rows * width)), sc(size_t(rows * width)), pkv(size_t(c.ratio * width)),
            psc(size_t(c.ratio * width));
        for (auto& v : kv) v = dkv(rng);
        for (auto& v : sc) v = dsc(rng);
        for (auto& v : pkv) v = dkv(rng);
        for (auto& v : psc) v = dsc(rng);
        std::vector<float> want(size_t(c.windows * c.head_dim));
        backend::CompressorPoolParams cp{kv.data(),
                                         sc.data(),
                                         c.prev ? pkv.data() : nullptr,
                                         c.prev ? psc.data() : nullptr,
                                         c.windows,
                                         c.ratio,
                                         c.head_dim,
                                         c.overlap,
                                         want.data()};
        DSV4_ASSERT_OK(backend::cpu::compressor_pool({prec, &pool()}, cp));
        auto d_kv = to_device(kv);
        auto d_sc = to_device(sc);
        auto d_pkv = to_device(pkv);
        auto d_psc = to_device(psc);
        auto dout = act_poisoned(prec, want.size());
        ASSERT_TRUE(d_kv.is_ok() && d_sc.is_ok() && d_pkv.is_ok() && d_psc.is_ok() && dout.is_ok());
        CompressorPoolArgs a{d_kv->as<float>(),
                             d_sc->as<float>(),
                             c.prev ? d_pkv->as<float>() : nullptr,
                             c.prev ? d_psc->as<float>() : nullptr,
                             c.windows,
                             c.ratio,
                             c.head_dim,
                             c.overlap,
                             dout->data()};
        DSV4_ASSERT_OK(sm90_compressor_pool(prec, a, nullptr));
        auto got = act_to_host(prec, *dout, want.size());
        DSV4_EXPECT_CLOSE(got, want, act_tol(prec));
        // the CPU's operations in its order (exp rounded from f64): bf16 outputs identical but for rare flips; f32
        // outputs show the rare last-bit exp differences (m = 128 sums 128 of them), so there only rel_l2 applies
        if (prec == Precision::kReference) {
            EXPECT_LE(count_bit_differences(got, want), got.size() / 1000 + 1);
        }
    }
}

class CompressorFinishTest : public ::testing::TestWithParam<Precision> {};

TEST_P(CompressorFinishTest, MatchesCpu) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    struct Case {
        int64_t n, ratio, first_window;
        backend::CompressedKind kind;
    };
    const Case cases[] = {
        {1, 4, 0, backend::CompressedKind::kMain},       {65, 4, 3, backend::CompressedKind::kMain},
        {7, 128, 1000, backend::CompressedKind::kMain},  {1, 4, 0, backend::CompressedKind::kIndexer},
        {130, 4, 77, backend::CompressedKind::kIndexer}, {1024, 4, 0, backend::CompressedKind::kIndexer},
        // the test models' 300-token prefill: 75 CSA windows, 2 HCA windows
        {75, 4, 0, backend::CompressedKind::kMain},      {75, 4, 0, backend::CompressedKind::kIndexer},
        {2, 128, 0, backend::CompressedKind::kMain}};
    const auto freqs = backend::rope_freqs(160000, 16, 65536, 32, 1);
    for (const Case& c : cases) {
        const bool main = c.kind == backend::CompressedKind::kMain;
        const int64_t dim = main ? 512 : 128;
        SCOPED_TRACE(std::string(main ? "main" : "indexer") + " n " + std::to_string(c.n) + " first " +
                     std::to_string(c.first_window));
        auto pooled = random_act(prec, rng, size_t(c.n * dim), 1.0f);
        auto w = random_bf16(rng, size_t(dim), 0.5f);
        auto wbits = to_bf16_bits(w);
        backend::WeightView wv{WeightFormat::kBF16, 1, dim, wbits.data(), nullptr};
        std::vector<float> want(pooled.size()), want_normed(pooled.size());
        backend::CompressorFinishParams cp{pooled.data(),      c.n,        dim, 64,     c.ratio,
                                           c.first_window,     c.kind,     wv,  &freqs, 1e-6f,
                                           want_normed.data(), want.data()};
        DSV4_ASSERT_OK(backend::cpu::compressor_finish({prec, &pool()}, cp));
        auto dp = act_to_device(prec, pooled);
        auto dw = upload_weight(wv, "compressor.norm");
        auto dnormed = act_poisoned(prec, want.size());
        auto dout = act_poisoned(prec, want.size());
        ASSERT_TRUE(dp.is_ok() && dw.is_ok() && dnormed.is_ok() && dout.is_ok());
        CompressorFinishArgs a{dp->data(), c.n,   dim,   c.ratio,         c.first_window, c.kind,
                               dw->view(), freqs, 1e-6f, dnormed->data(), dout->data()};
        DSV4_ASSERT_OK(sm90_compressor_finish(prec, a, nullptr));
        auto normed = act_to_host(prec, *dnormed, want.size());
        auto got = act_to_host(prec, *dout, want.size());
        DSV4_EXPECT_CLOSE(normed, want_normed, act_tol(prec));
        // FP4 simulation: 8 codes per binade, so one flipped input can move a value by a quarter of its block scale
        DSV4_EXPECT_CLOSE(got, want, prec == Precision::kReference && !main ? 1e-2 : act_tol(prec));
        if (prec == Precision::kReference) {
            EXPECT_LE(count_bit_differences(normed, want_normed), normed.size() / 1000 + 1);
            EXPECT_LE(count_bit_differences(got, want), sim_bit_budget(got.size()));
        }
    }
}

// Decode-position mode (one token per step, the position only on the device) against the host-driven mode on the
// same inputs: the open window's ratio rows are pooled and finished into entry pos / ratio exactly when pos closes
// the window (bit for bit what the host-driven calls give), and nothing at all is written when it does not.
class CompressorDecodeTest : public ::testing::TestWithParam<Precision> {};

TEST_P(CompressorDecodeTest, MatchesHostDrivenAndWritesNothingUntilTheWindowCloses) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    const size_t act_bytes = prec == Precision::kReference ? 2 : 4;
    struct Case {
        int64_t ratio, pos;
        backend::CompressedKind kind;
    };
    using K = backend::CompressedKind;
    // CSA (ratio 4, overlap): first window (pos 3, no previous window), with a previous window (7), deep in the
    // sequence (4099), open windows (5, 4, 0); CSA indexer keys (128-d) alike; HCA (ratio 128): 127, 255, 300, 0
    const Case cases[] = {{4, 3, K::kMain},      {4, 7, K::kMain},      {4, 4099, K::kMain},   {4, 5, K::kMain},
                          {4, 4, K::kMain},      {4, 0, K::kMain},      {4, 3, K::kIndexer},   {4, 7, K::kIndexer},
                          {4, 1023, K::kIndexer}, {4, 6, K::kIndexer},  {128, 127, K::kMain},  {128, 255, K::kMain},
                          {128, 300, K::kMain},  {128, 0, K::kMain}};
    const auto freqs = backend::rope_freqs(160000, 16, 65536, 32, 1);
    for (const Case& c : cases) {
        const bool main = c.kind == K::kMain, overlap = c.ratio == 4;
        const int64_t dim = main ? 512 : 128, width = overlap ? 2 * dim : dim, m = c.ratio;
        const bool closes = c.pos % m == m - 1;
        const int64_t entry = c.pos / m, capacity = entry + 3;
        SCOPED_TRACE(std::string(main ? "main" : "indexer") + " ratio " + std::to_string(m) + " pos " +
                     std::to_string(c.pos));
        std::normal_distribution<float> dkv(0.0f, 1.0f), dsc(0.0f, 2.0f);
        std::vector<float> kv(size_t(m * width)), sc(kv.size()), pkv(kv.size()), psc(kv.size());
        for (auto& v : kv) v = dkv(rng);
        for (auto& v : sc) v = dsc(rng);
        for (auto& v : pkv) v = dkv(rng);
        for (auto& v : psc) v = dsc(rng);
        auto w = random_bf16(rng, size_t(dim), 0.5f);
        auto wbits = to_bf16_bits(w);
        backend::WeightView wv{WeightFormat::kBF16, 1, dim, wbits.data(), nullptr};
        auto d_kv = to_device(kv);
        auto d_sc = to_device(sc);
        auto d_pkv = to_device(pkv);
        auto d_psc = to_device(psc);
        auto dw = upload_weight(wv, "compressor.norm");
        auto dpos = to_device(std::vector<int64_t>{c.pos});
        auto host_pooled = act_poisoned(prec, size_t(dim));
        auto host_normed = act_poisoned(prec, size_t(dim));
        auto host_entry = act_poisoned(prec, size_t(dim));
        auto dec_pooled = act_poisoned(prec, size_t(dim));
        auto dec_normed = act_poisoned(prec, size_t(dim));
        auto dec_entries = act_poisoned(prec, size_t(capacity * dim));
        ASSERT_TRUE(d_kv.is_ok() && d_sc.is_ok() && d_pkv.is_ok() && d_psc.is_ok() && dw.is_ok() && dpos.is_ok() &&
                    host_pooled.is_ok() && host_normed.is_ok() && host_entry.is_ok() && dec_pooled.is_ok() &&
                    dec_normed.is_ok() && dec_entries.is_ok());
        // host-driven: the host knows the window closed and whether a previous one exists
        const bool with_prev = overlap && entry > 0;
        CompressorPoolArgs hp{d_kv->as<float>(), d_sc->as<float>(), with_prev ? d_pkv->as<float>() : nullptr,
                              with_prev ? d_psc->as<float>() : nullptr, 1, m, dim, overlap, host_pooled->data()};
        DSV4_ASSERT_OK(sm90_compressor_pool(prec, hp, nullptr));
        CompressorFinishArgs hf{host_pooled->data(), 1,     dim,   m,  entry, c.kind, dw->view(), freqs, 1e-6f,
                                host_normed->data(), host_entry->data()};
        DSV4_ASSERT_OK(sm90_compressor_finish(prec, hf, nullptr));
        // decode: the same calls for every position, the previous window always passed, first_window ignored
        CompressorPoolArgs dp{d_kv->as<float>(), d_sc->as<float>(), d_pkv->as<float>(), d_psc->as<float>(), 1, m, dim,
                              overlap,           dec_pooled->data()};
        dp.decode_position = dpos->as<int64_t>();
        DSV4_ASSERT_OK(sm90_compressor_pool(prec, dp, nullptr));
        CompressorFinishArgs df{dec_pooled->data(), 1,     dim,   m,  12345, c.kind, dw->view(), freqs, 1e-6f,
                                dec_normed->data(), dec_entries->data()};
        df.decode_position = dpos->as<int64_t>();
        DSV4_ASSERT_OK(sm90_compressor_finish(prec, df, nullptr));
        const size_t row = size_t(dim) * act_bytes;
        const auto pooled = to_host<uint8_t>(*dec_pooled, row);
        const auto normed = to_host<uint8_t>(*dec_normed, row);
        const auto entries = to_host<uint8_t>(*dec_entries, size_t(capacity) * row);
        const std::vector<uint8_t> poison(row, 0xff);
        if (!closes) {
            EXPECT_EQ(pooled, poison) << "pooled written although the window is still open";
            EXPECT_EQ(normed, poison) << "normed written although the window is still open";
            EXPECT_EQ(entries, std::vector<uint8_t>(entries.size(), 0xff)) << "an entry written for an open window";
            continue;
        }
        EXPECT_EQ(pooled, to_host<uint8_t>(*host_pooled, row)) << "pooled differs from the host-driven pool";
        EXPECT_EQ(normed, to_host<uint8_t>(*host_normed, row)) << "normed differs from the host-driven finish";
        const auto want_entry = to_host<uint8_t>(*host_entry, row);
        for (int64_t e = 0; e < capacity; ++e) {
            const std::vector<uint8_t> got(entries.begin() + e * int64_t(row), entries.begin() + (e + 1) * int64_t(row));
            if (e == entry)
                EXPECT_EQ(got, want_entry) << "entry " << e << " differs from the host-driven finish";
            else
                EXPECT_EQ(got, poison) << "entry " << e << " written (only " << entry << " may be)";
        }
        // the host-driven result is itself the CPU's (MatchesCpu covers it); here one sanity check that it is finite
        const auto vals = act_to_host(prec, *host_entry, size_t(dim));
        EXPECT_TRUE(std::all_of(vals.begin(), vals.end(), [](float v) { return std::isfinite(v); }));
    }
}

TEST(CompressorDecodeValidation, DecodeModeShapesAreClearErrors) {
    DSV4_REQUIRE_GPU();
    auto buf = DeviceBuffer::allocate(1 << 16);
    ASSERT_TRUE(buf.is_ok());
    CompressorPoolArgs p{buf->as<float>(), buf->as<float>(), nullptr, nullptr, 2, 4, 128, true, buf->data()};
    p.decode_position = buf->as<int64_t>();
    Status s = sm90_compressor_pool(Precision::kReference, p, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("n_windows must be 1"), std::string::npos) << s.message();
    p.n_windows = 1;
    s = sm90_compressor_pool(Precision::kReference, p, nullptr);
    EXPECT_NE(s.message().find("needs prev_kv"), std::string::npos) << s.message();
}

// Batched decode mode (the B sequences of a decode step in one launch each) against the per-sequence host-driven
// calls on the same inputs. Each batch mixes closing and open windows (first window, with a previous window, deep
// in the sequence, a padding row at -1), the windows' state slots are a permutation of a larger slot range (slot
// order != window order, some slots unused, the rows between slots random too), and every output starts poisoned:
// closing rows must equal the host-driven rows byte for byte, every other row must be left as it was.
using K = backend::CompressedKind;

struct BatchedDecodeCase {
    int64_t ratio, batch;
    K kind;
};

std::string batched_case_name(const BatchedDecodeCase& c) {
    return std::string(c.kind == K::kMain ? "main" : "indexer") + " ratio " + std::to_string(c.ratio) + " B " +
           std::to_string(c.batch);
}

// B new-token positions for windows of m: fixed ones first, then random windows half of which close.
std::vector<int64_t> batch_positions(std::mt19937_64& rng, int64_t batch, int64_t m) {
    std::vector<int64_t> fixed;
    if (batch == 1)
        fixed = {2 * m - 1};  // closes the second window (CSA: with the previous one)
    else if (batch == 3)
        fixed = {m - 1, m + 1, 1024 * m + m - 1};  // first window closes; open; deep window closes
    else
        fixed = {m - 1, 0, 2 * m - 1, m, 4096 * m - 1, -1, m - 2};
    std::vector<int64_t> pos(static_cast<size_t>(batch));
    std::uniform_int_distribution<int64_t> window(0, 5000), slot(0, m - 2);
    std::bernoulli_distribution close(0.5);
    for (int64_t w = 0; w < batch; ++w)
        pos[size_t(w)] = w < int64_t(fixed.size()) ? fixed[size_t(w)]
                                                   : window(rng) * m + (close(rng) ? m - 1 : slot(rng));
    return pos;
}

bool closes(int64_t pos, int64_t m) { return pos >= 0 && pos % m == m - 1; }

// Row by row: rows whose window closes must equal `want`'s, the others `untouched`'s (byte for byte).
void expect_rows(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                 const std::vector<uint8_t>& untouched, const std::vector<int64_t>& pos, int64_t m, size_t row,
                 const char* what) {
    ASSERT_EQ(got.size(), pos.size() * row);
    for (size_t w = 0; w < pos.size(); ++w) {
        const auto first = got.begin() + ptrdiff_t(w * row), last = first + ptrdiff_t(row);
        const std::vector<uint8_t> g(first, last);
        if (closes(pos[w], m))
            EXPECT_EQ(g, std::vector<uint8_t>(want.begin() + ptrdiff_t(w * row),
                                              want.begin() + ptrdiff_t((w + 1) * row)))
                << what << " row " << w << " (position " << pos[w] << ", closes) differs from the host-driven call";
        else
            EXPECT_EQ(g, std::vector<uint8_t>(untouched.begin() + ptrdiff_t(w * row),
                                              untouched.begin() + ptrdiff_t((w + 1) * row)))
                << what << " row " << w << " (position " << pos[w] << ", window open) was written";
    }
}

uint8_t* at_byte(const DeviceBuffer& b, size_t offset) { return b.as<uint8_t>() + offset; }

class CompressorBatchedDecodeTest : public ::testing::TestWithParam<Precision> {};

TEST_P(CompressorBatchedDecodeTest, PoolMatchesPerSequenceCalls) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    const size_t act_bytes = prec == Precision::kReference ? 2 : 4;
    std::vector<BatchedDecodeCase> cases;
    for (const int64_t b : {1, 3, 64})
        for (const BatchedDecodeCase c : {BatchedDecodeCase{4, b, K::kMain}, BatchedDecodeCase{4, b, K::kIndexer},
                                          BatchedDecodeCase{128, b, K::kMain}})
            cases.push_back(c);
    for (const BatchedDecodeCase& c : cases) {
        SCOPED_TRACE(batched_case_name(c));
        const bool main = c.kind == K::kMain, overlap = c.ratio == 4;
        const int64_t dim = main ? 512 : 128, width = overlap ? 2 * dim : dim, m = c.ratio, B = c.batch;
        const int64_t n_slots = B + 3, stride = m * width + 32;  // 32 f32 between windows: a wrong stride shows
        const auto pos = batch_positions(rng, B, m);
        std::vector<int32_t> perm(static_cast<size_t>(n_slots));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        const std::vector<int32_t> slots(perm.begin(), perm.begin() + B);
        const int64_t n_close = std::count_if(pos.begin(), pos.end(), [&](int64_t p) { return closes(p, m); });
        if (B > 1) {
            ASSERT_TRUE(n_close > 0 && n_close < B) << "the batch must mix closing and open windows";
        }
        std::uniform_real_distribution<float> dkv(-2.0f, 2.0f), dsc(-4.0f, 4.0f);
        std::vector<float> kv(size_t(n_slots * stride)), sc(kv.size()), pkv(kv.size()), psc(kv.size());
        for (auto& v : kv) v = dkv(rng);
        for (auto& v : sc) v = dsc(rng);
        for (auto& v : pkv) v = dkv(rng);
        for (auto& v : psc) v = dsc(rng);
        auto d_kv = to_device(kv);
        auto d_sc = to_device(sc);
        auto d_pkv = to_device(pkv);
        auto d_psc = to_device(psc);
        auto d_pos = to_device(pos);
        auto d_slots = to_device(slots);
        const size_t row = size_t(dim) * act_bytes;
        auto host_out = act_poisoned(prec, size_t(B * dim));
        auto dec_out = act_poisoned(prec, size_t(B * dim));
        ASSERT_TRUE(d_kv.is_ok() && d_sc.is_ok() && d_pkv.is_ok() && d_psc.is_ok() && d_pos.is_ok() &&
                    d_slots.is_ok() && host_out.is_ok() && dec_out.is_ok());
        // per sequence, host-driven: the host knows which windows close and which have a previous window
        for (int64_t w = 0; w < B; ++w) {
            if (!closes(pos[size_t(w)], m)) continue;
            const int64_t off = int64_t(slots[size_t(w)]) * stride;
            const bool with_prev = overlap && pos[size_t(w)] / m > 0;
            CompressorPoolArgs hp{d_kv->as<float>() + off,
                                  d_sc->as<float>() + off,
                                  with_prev ? d_pkv->as<float>() + off : nullptr,
                                  with_prev ? d_psc->as<float>() + off : nullptr,
                                  1,
                                  m,
                                  dim,
                                  overlap,
                                  at_byte(*host_out, size_t(w) * row)};
            DSV4_ASSERT_OK(sm90_compressor_pool(prec, hp, nullptr));
        }
        // batched: one launch, the previous windows always passed where the kind has them
        CompressorPoolArgs bp{d_kv->as<float>(),
                              d_sc->as<float>(),
                              overlap ? d_pkv->as<float>() : nullptr,
                              overlap ? d_psc->as<float>() : nullptr,
                              B,
                              m,
                              dim,
                              overlap,
                              dec_out->data()};
        bp.decode_positions = d_pos->as<int64_t>();
        bp.slots = d_slots->as<int32_t>();
        bp.slot_stride = stride;
        DSV4_ASSERT_OK(sm90_compressor_pool(prec, bp, nullptr));
        const auto got = to_host<uint8_t>(*dec_out, size_t(B) * row);
        const auto want = to_host<uint8_t>(*host_out, size_t(B) * row);
        expect_rows(got, want, std::vector<uint8_t>(got.size(), 0xff), pos, m, row, "pooled");
        // the host-driven rows themselves are the CPU's (MatchesCpu); here only that the closing ones are finite
        const auto vals = act_to_host(prec, *host_out, size_t(B * dim));
        for (int64_t w = 0; w < B; ++w)
            if (closes(pos[size_t(w)], m)) {
                EXPECT_TRUE(std::all_of(vals.begin() + w * dim, vals.begin() + (w + 1) * dim,
                                        [](float v) { return std::isfinite(v); }))
                    << "row " << w;
            }
    }
}

TEST_P(CompressorBatchedDecodeTest, FinishMatchesPerSequenceCalls) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    const size_t act_bytes = prec == Precision::kReference ? 2 : 4;
    const auto freqs = backend::rope_freqs(160000, 16, 65536, 32, 1);
    std::vector<BatchedDecodeCase> cases;
    for (const int64_t b : {1, 3, 64})
        for (const BatchedDecodeCase c : {BatchedDecodeCase{4, b, K::kMain}, BatchedDecodeCase{4, b, K::kIndexer},
                                          BatchedDecodeCase{128, b, K::kMain}})
            cases.push_back(c);
    for (const BatchedDecodeCase& c : cases) {
        SCOPED_TRACE(batched_case_name(c));
        const bool main = c.kind == K::kMain;
        const int64_t dim = main ? 512 : 128, m = c.ratio, B = c.batch;
        const auto pos = batch_positions(rng, B, m);
        const size_t row = size_t(dim) * act_bytes;
        // every row holds a real pooled value, so a row finished by mistake cannot look untouched
        const auto pooled = random_act(prec, rng, size_t(B * dim), 1.0f);
        auto w = random_bf16(rng, size_t(dim), 0.5f);
        auto wbits = to_bf16_bits(w);
        backend::WeightView wv{WeightFormat::kBF16, 1, dim, wbits.data(), nullptr};
        auto dw = upload_weight(wv, "compressor.norm");
        auto d_pooled = act_to_device(prec, pooled);
        auto d_inplace = act_to_device(prec, pooled);
        auto d_pos = to_device(pos);
        auto host_normed = act_poisoned(prec, size_t(B * dim));
        auto host_out = act_poisoned(prec, size_t(B * dim));
        auto dec_normed = act_poisoned(prec, size_t(B * dim));
        auto dec_out = act_poisoned(prec, size_t(B * dim));
        ASSERT_TRUE(dw.is_ok() && d_pooled.is_ok() && d_inplace.is_ok() && d_pos.is_ok() && host_normed.is_ok() &&
                    host_out.is_ok() && dec_normed.is_ok() && dec_out.is_ok());
        for (int64_t i = 0; i < B; ++i) {
            if (!closes(pos[size_t(i)], m)) continue;
            CompressorFinishArgs hf{at_byte(*d_pooled, size_t(i) * row),
                                    1,
                                    dim,
                                    m,
                                    pos[size_t(i)] / m,
                                    c.kind,
                                    dw->view(),
                                    freqs,
                                    1e-6f,
                                    at_byte(*host_normed, size_t(i) * row),
                                    at_byte(*host_out, size_t(i) * row)};
            DSV4_ASSERT_OK(sm90_compressor_finish(prec, hf, nullptr));
        }
        // batched into separate rows (first_window must be ignored), then in place without normed
        CompressorFinishArgs bf{d_pooled->data(), B,     dim,   m,  777, c.kind, dw->view(), freqs, 1e-6f,
                                dec_normed->data(), dec_out->data()};
        bf.decode_positions = d_pos->as<int64_t>();
        DSV4_ASSERT_OK(sm90_compressor_finish(prec, bf, nullptr));
        CompressorFinishArgs bi{d_inplace->data(), B,     dim,   m,  0,  c.kind, dw->view(), freqs, 1e-6f,
                                nullptr,           d_inplace->data()};
        bi.decode_positions = d_pos->as<int64_t>();
        DSV4_ASSERT_OK(sm90_compressor_finish(prec, bi, nullptr));
        const size_t bytes = size_t(B) * row;
        const std::vector<uint8_t> poison(bytes, 0xff);
        const auto want_out = to_host<uint8_t>(*host_out, bytes);
        expect_rows(to_host<uint8_t>(*dec_out, bytes), want_out, poison, pos, m, row, "out");
        expect_rows(to_host<uint8_t>(*dec_normed, bytes), to_host<uint8_t>(*host_normed, bytes), poison, pos, m, row,
                    "normed");
        expect_rows(to_host<uint8_t>(*d_inplace, bytes), want_out, to_host<uint8_t>(*d_pooled, bytes), pos, m, row,
                    "in-place out");
    }
}

TEST(CompressorBatchedDecodeValidation, BatchedShapesAreClearErrors) {
    DSV4_REQUIRE_GPU();
    auto buf = DeviceBuffer::allocate(1 << 16);
    ASSERT_TRUE(buf.is_ok());
    CompressorPoolArgs p{buf->as<float>(), buf->as<float>(), buf->as<float>(), buf->as<float>(), 3, 4, 128, true,
                         buf->data()};
    p.decode_positions = buf->as<int64_t>();
    Status s = sm90_compressor_pool(Precision::kReference, p, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("needs slots"), std::string::npos) << s.message();
    p.slots = buf->as<int32_t>();
    p.slot_stride = 4 * 256 - 1;
    s = sm90_compressor_pool(Precision::kReference, p, nullptr);
    EXPECT_NE(s.message().find("slot_stride 1023"), std::string::npos) << s.message();
    p.slot_stride = 4 * 256;
    p.prev_kv = p.prev_score = nullptr;
    s = sm90_compressor_pool(Precision::kReference, p, nullptr);
    EXPECT_NE(s.message().find("needs prev_kv"), std::string::npos) << s.message();
    p.prev_kv = p.prev_score = buf->as<float>();
    p.decode_position = buf->as<int64_t>();
    s = sm90_compressor_pool(Precision::kReference, p, nullptr);
    EXPECT_NE(s.message().find("exclusive"), std::string::npos) << s.message();
    CompressorFinishArgs f;
    f.pooled = f.out = buf->data();
    f.n = 3;
    f.decode_positions = f.decode_position = buf->as<int64_t>();
    s = sm90_compressor_finish(Precision::kReference, f, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("exclusive"), std::string::npos) << s.message();
}

const auto kPrecisions = ::testing::Values(Precision::kReference, Precision::kF32);
std::string precision_label(const ::testing::TestParamInfo<Precision>& i) { return backend::precision_name(i.param); }
INSTANTIATE_TEST_SUITE_P(Cuda, WindowKvFinishTest, kPrecisions, precision_label);
INSTANTIATE_TEST_SUITE_P(Cuda, CompressorPoolTest, kPrecisions, precision_label);
INSTANTIATE_TEST_SUITE_P(Cuda, CompressorFinishTest, kPrecisions, precision_label);
INSTANTIATE_TEST_SUITE_P(Cuda, CompressorDecodeTest, kPrecisions, precision_label);
INSTANTIATE_TEST_SUITE_P(Cuda, CompressorBatchedDecodeTest, kPrecisions, precision_label);

}  // namespace
}  // namespace dsv4::cuda
