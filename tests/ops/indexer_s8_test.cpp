// The integer-wgmma indexer scores (IndexerScoresArgs::q_fp4_simulated) against the bf16 tensor-core path on the same
// FP4-simulated query and packed keys, bit for bit, at V4 shapes: decode at 32K and 1M context (262,144 keys), a
// batch of mixed positions, a prefill pass with masked tails, the test models' 4 heads, a partial last tile, negative
// pages, contiguous keys. Keys and query heads whose 32-channel blocks span more than 3 binades take the general
// (per-block) fold instead of the folded one; both are exercised. A query that is not an FP4 simulation gives NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/kernels/indexer/indexer.h"
#include "backend/cuda/kernels/kv_store/kv_store.h"
#include "ops/gpu_testing.h"
#include "testing/testing.h"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using namespace dsv4::cuda::testing;

constexpr int64_t kDim = 128, kPage = 64, kRatio = 4;

// Scales 32-channel blocks of rows by 2^-spread with probability `share` (wide block spans), then simulates FP4.
void spread_and_simulate(std::vector<float>& x, int64_t rows, double share, int spread, std::mt19937_64& rng) {
    std::bernoulli_distribution pick(share);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < kDim / 32; ++b)
            if (pick(rng))
                for (int64_t i = 0; i < 32; ++i) x[size_t(r * kDim + b * 32 + i)] *= std::ldexp(1.0f, -spread);
    DSV4_ASSERT_OK(backend::cpu::fp4_act_quant({x.data(), rows, kDim, nullptr, nullptr, nullptr, x.data()}));
}

struct Case {
    int64_t heads, n;
    std::vector<int64_t> pos;
    bool visible_only, paged;
    double wide_keys = 0, wide_q = 0;  // share of blocks scaled by 2^-6
    int64_t negative_pages = 0;
};

TEST(IndexerScoresS8, MatchesTheBf16PathBitForBit) {
    DSV4_REQUIRE_GPU();
    const Precision prec = Precision::kReference;
    std::mt19937_64 rng(fresh_seed());
    std::vector<int64_t> prefill(300);
    std::iota(prefill.begin(), prefill.end(), 7900);
    const Case cases[] = {
        {64, 8192, {32767}, true, true},                               // decode, 32K context
        {64, 262144, {1048575}, true, true},                           // decode, 1M context
        {64, 4096, {0, 3, 257, 1001, 2050, 16383, 5000}, true, true},  // batch of mixed lengths
        {64, 2000, prefill, false, true, 0.002, 0.0},                  // prefill pass, masked tails
        {64, 4096, {16383, 9000}, true, true, 0.01, 0.0},              // some tiles take the general fold
        {64, 4096, {16383, 9000}, true, true, 0.0, 0.05},              // some tokens take the general fold
        {4, 200, {3, 63, 200, 799, 0}, true, true, 0.0, 0.0, 1},       // test models' heads, a negative page
        {64, 1000, {3999, 2000, 64}, false, false},                    // contiguous keys, partial last tile
        {20, 75, {299, 30, 1}, false, true, 0.05, 0.05, 0}};
    for (const Case& c : cases) {
        const int64_t T = int64_t(c.pos.size()), H = c.heads, n = c.n, ppt = (n + kPage - 1) / kPage;
        SCOPED_TRACE("heads " + std::to_string(H) + " n " + std::to_string(n) + " tokens " + std::to_string(T) +
                     " wide keys " + std::to_string(c.wide_keys) + " wide q " + std::to_string(c.wide_q));
        auto q = random_act(prec, rng, size_t(T * H * kDim), 1.0f);
        spread_and_simulate(q, T * H, c.wide_q, 6, rng);
        auto keys = random_act(prec, rng, size_t(n * kDim), 1.0f);
        spread_and_simulate(keys, n, c.wide_keys, 6, rng);
        auto w = random_act(prec, rng, size_t(T * H), 0.02f);
        // one page table for all tokens (paged) or contiguous rows; pages shuffled, the first `negative_pages`
        // logical pages unmapped (their keys read as zero on both paths)
        const int64_t phys_pages = ppt + 2;
        std::vector<int32_t> phys(static_cast<size_t>(phys_pages));
        std::iota(phys.begin(), phys.end(), 0);
        if (c.paged) std::shuffle(phys.begin(), phys.end(), rng);
        std::vector<float> pool_rows(size_t(phys_pages * kPage * kDim), 0.0f);
        std::vector<int32_t> table(size_t(T * ppt));
        for (int64_t p = 0; p < ppt; ++p) {
            const int32_t at = p < c.negative_pages ? -1 : phys[size_t(p)];
            for (int64_t t = 0; t < T; ++t) table[size_t(t * ppt + p)] = at;
            if (at >= 0)
                for (int64_t r = 0; r < kPage && p * kPage + r < n; ++r)
                    std::memcpy(&pool_rows[size_t(((c.paged ? at : p) * kPage + r) * kDim)],
                                &keys[size_t((p * kPage + r) * kDim)], kDim * sizeof(float));
        }
        auto dq = act_to_device(prec, q);
        auto dw = act_to_device(prec, w);
        auto dpos = to_device(c.pos);
        auto dtable = to_device(table);
        auto drows = act_to_device(prec, pool_rows);
        auto dpool = poisoned<uint8_t>(size_t(phys_pages * kPage * key_row_bytes(prec)));
        auto ds_bf16 = act_poisoned(prec, size_t(T * n));
        auto ds_s8 = act_poisoned(prec, size_t(T * n));
        ASSERT_TRUE(dq.is_ok() && dw.is_ok() && dpos.is_ok() && dtable.is_ok() && drows.is_ok() && dpool.is_ok() &&
                    ds_bf16.is_ok() && ds_s8.is_ok());
        DSV4_ASSERT_OK(sm90_key_pack(prec, {drows->data(), phys_pages * kPage, nullptr, 0, dpool->data()}, nullptr));
        IndexerScoresArgs a{dq->data(), dpool->data(),       dw->data(),     T, H, n,
                            kRatio,     dpos->as<int64_t>(), ds_bf16->data()};
        a.visible_only = c.visible_only;
        a.keys_packed = true;
        if (c.paged) a.key_pages = dtable->as<int32_t>(), a.pages_per_token = ppt;
        DSV4_ASSERT_OK(sm90_indexer_scores(prec, a, nullptr));
        a.q_fp4_simulated = true;
        a.path = IndexerScoresArgs::Path::kInteger;
        a.scores = ds_s8->data();
        DSV4_ASSERT_OK(sm90_indexer_scores(prec, a, nullptr));
        const auto want = to_host<uint16_t>(*ds_bf16, size_t(T * n));
        const auto got = to_host<uint16_t>(*ds_s8, size_t(T * n));
        size_t diff = 0, first = got.size(), written = 0;
        for (size_t i = 0; i < got.size(); ++i) {
            if (got[i] != want[i]) diff++, first = std::min(first, i);
            written += want[i] != 0xffff && (want[i] & 0x7f80) != 0x7f80;  // finite scores (poison is NaN)
        }
        EXPECT_EQ(diff, 0u) << "first difference at token " << (diff ? first / size_t(n) : 0) << " key "
                            << (diff ? first % size_t(n) : 0) << ": got 0x" << std::hex << (diff ? got[first] : 0)
                            << " want 0x" << (diff ? want[first] : 0);
        EXPECT_GT(written, 0u);
    }
}

// One call's inputs on the device: q, w, positions, and simulated key rows packed into a contiguous pool.
struct ContiguousCall {
    DeviceBuffer q, w, pos, pool;
    int64_t tokens = 0, heads = 0, n = 0;
    // the integer path's arguments (packed keys, simulated query) writing into `scores`
    IndexerScoresArgs args(void* scores) const {
        IndexerScoresArgs a{q.data(), pool.data(), w.data(), tokens, heads, n, kRatio, pos.as<int64_t>(), scores};
        a.keys_packed = a.q_fp4_simulated = true;
        a.path = IndexerScoresArgs::Path::kInteger;
        return a;
    }
};
void upload(ContiguousCall& c, const std::vector<float>& q, const std::vector<float>& keys, const std::vector<float>& w,
            const std::vector<int64_t>& pos, int64_t heads) {
    const Precision prec = Precision::kReference;
    c.tokens = int64_t(pos.size()), c.heads = heads, c.n = int64_t(keys.size()) / kDim;
    auto dq = act_to_device(prec, q);
    auto dw = act_to_device(prec, w);
    auto dpos = to_device(pos);
    auto drows = act_to_device(prec, keys);
    auto dpool = poisoned<uint8_t>(size_t(c.n * key_row_bytes(prec)));
    ASSERT_TRUE(dq.is_ok() && dw.is_ok() && dpos.is_ok() && drows.is_ok() && dpool.is_ok());
    DSV4_ASSERT_OK(sm90_key_pack(prec, {drows->data(), c.n, nullptr, 0, dpool->data()}, nullptr));
    c.q = std::move(*dq), c.w = std::move(*dw), c.pos = std::move(*dpos), c.pool = std::move(*dpool);
}

// The engine's query path: sm90_indexer_q_finish (RoPE, Hadamard, FP4 simulation) leaves a query the integer path
// takes without NaN, at V4's 64 heads, and its scores equal the bf16 path's bit for bit.
TEST(IndexerScoresS8, TakesTheQueryFinishOutput) {
    DSV4_REQUIRE_GPU();
    const Precision prec = Precision::kReference;
    std::mt19937_64 rng(fresh_seed());
    const auto freqs = backend::rope_freqs(160000, 16, 65536, 32, 1);
    const int64_t T = 40, H = 64, n = 2048;
    auto keys = random_act(prec, rng, size_t(n * kDim), 1.0f);
    spread_and_simulate(keys, n, 0.0, 0, rng);
    std::vector<int64_t> pos(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = 8191 - 97 * t;
    ContiguousCall c;
    ASSERT_NO_FATAL_FAILURE(upload(c, random_act(prec, rng, size_t(T * H * kDim), 4.0f), keys,
                                   random_act(prec, rng, size_t(T * H), 0.02f), pos, H));
    auto ds_bf16 = act_poisoned(prec, size_t(T * n));
    auto ds_s8 = act_poisoned(prec, size_t(T * n));
    ASSERT_TRUE(ds_bf16.is_ok() && ds_s8.is_ok());
    DSV4_ASSERT_OK(sm90_indexer_q_finish({c.q.data(), T, H, c.pos.as<int64_t>(), freqs}, nullptr));
    IndexerScoresArgs a = c.args(ds_bf16->data());
    a.path = IndexerScoresArgs::Path::kBf16;
    DSV4_ASSERT_OK(sm90_indexer_scores(prec, a, nullptr));
    DSV4_ASSERT_OK(sm90_indexer_scores(prec, c.args(ds_s8->data()), nullptr));
    const auto want = to_host<uint16_t>(*ds_bf16, size_t(T * n));
    const auto got = to_host<uint16_t>(*ds_s8, size_t(T * n));
    size_t diff = 0, nan = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        diff += got[i] != want[i];
        nan += (got[i] & 0x7f80) == 0x7f80 && (got[i] & 0x7f) != 0;
    }
    EXPECT_EQ(nan, 0u);
    EXPECT_EQ(diff, 0u);
}

// A query that is not an FP4 simulation (plain bf16 values) must not score silently wrong: NaN for every visible key.
TEST(IndexerScoresS8, UnsimulatedQueryGivesNaN) {
    DSV4_REQUIRE_GPU();
    const Precision prec = Precision::kReference;
    std::mt19937_64 rng(fresh_seed());
    const int64_t T = 2, H = 64, n = 640;
    auto keys = random_act(prec, rng, size_t(n * kDim), 1.0f);
    spread_and_simulate(keys, n, 0.0, 0, rng);
    const std::vector<int64_t> pos = {4 * 300 - 1, 4 * 640 - 1};  // 300 and 640 visible keys
    ContiguousCall c;
    ASSERT_NO_FATAL_FAILURE(upload(c, random_act(prec, rng, size_t(T * H * kDim), 1.0f), keys,
                                   random_act(prec, rng, size_t(T * H), 0.02f), pos, H));
    auto ds = act_poisoned(prec, size_t(T * n));
    ASSERT_TRUE(ds.is_ok());
    DSV4_ASSERT_OK(sm90_indexer_scores(prec, c.args(ds->data()), nullptr));
    const auto got = act_to_host(prec, *ds, size_t(T * n));
    for (int64_t t = 0; t < T; ++t)
        for (int64_t s = 0; s < n; ++s) {
            const float v = got[size_t(t * n + s)];
            if (s < (pos[size_t(t)] + 1) / kRatio)
                ASSERT_TRUE(std::isnan(v)) << "token " << t << " key " << s << ": " << v;
            else
                ASSERT_TRUE(std::isinf(v) && v < 0) << "token " << t << " key " << s << ": " << v;
        }
}

}  // namespace
}  // namespace dsv4::cuda
