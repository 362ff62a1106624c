// The integer-wgmma indexer scores (IndexerScoresArgs::q_int) against the bf16 tensor-core path on the same
// FP4-simulated query and packed keys, bit for bit, at V4 shapes: decode at 32K and 1M context (262,144 keys), a
// batch of mixed positions, a prefill pass with masked tails, the test models' 4 heads, a partial last tile, negative
// pages, contiguous keys. Keys and query heads whose 32-channel blocks span more than 3 binades take the general
// (per-block) fold instead of the folded one; both are exercised. The query finish's integer form equals its bf16
// simulation, and the scores on it equal the bf16 path's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/kernels/glue/glue.h"
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

// A simulated query's integer form (IndexerScoresArgs::q_int / q_exp), built independently of the query finish: per
// block the exponent E with the largest magnitude in [8, 16)·2^E; a head whose blocks span at most 3 binades folds
// the offsets into its integers under one exponent. Every value is checked to be exactly int · 2^exp.
struct QueryInts {
    std::vector<int8_t> ints, exps;
};
QueryInts encode_query(const std::vector<float>& q, int64_t rows) {
    QueryInts r{std::vector<int8_t>(q.size()), std::vector<int8_t>(size_t(rows * 4))};
    for (int64_t h = 0; h < rows; ++h) {
        int e[4], lo = 1 << 20, hi = -(1 << 20);
        for (int b = 0; b < 4; ++b) {
            float amax = 0;
            for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(q[size_t(h * kDim + b * 32 + i)]));
            e[b] = amax > 0 ? std::ilogb(amax) - 3 : 1 << 20;  // empty block: no exponent
            if (amax > 0) lo = std::min(lo, e[b]), hi = std::max(hi, e[b]);
        }
        if (lo > hi) lo = hi = 0;  // all zero
        const bool fold = hi - lo <= 3;
        for (int b = 0; b < 4; ++b) {
            const int exp = fold || e[b] == 1 << 20 ? lo : e[b];
            r.exps[size_t(h * 4 + b)] = int8_t(exp);
            for (int i = 0; i < 32; ++i) {
                const size_t at = size_t(h * kDim + b * 32 + i);
                const float v = std::ldexp(q[at], -exp);
                EXPECT_TRUE(v == std::nearbyint(v) && std::fabs(v) <= 127) << "query value " << q[at];
                r.ints[at] = int8_t(v);
            }
        }
    }
    return r;
}

struct Case {
    int64_t heads, n;
    std::vector<int64_t> pos;
    bool visible_only, paged;
    double wide_keys = 0, wide_q = 0;  // share of blocks scaled by 2^-6
    int64_t negative_pages = 0;
    float w_scale = 0.02f;  // head weights' scale
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
        {20, 75, {299, 30, 1}, false, true, 0.05, 0.05, 0},
        // head weights near the edge of the range the folded form keeps normal (its products and sums scaled by
        // 2^-100), and at it (2^-112: the tokens or tiles past it fall back to the general fold)
        {64, 4096, {16383, 9000}, true, true, 0.0, 0.0, 0, std::ldexp(1.0f, -100)},
        {64, 4096, {16383, 9000}, true, true, 0.0, 0.0, 0, std::ldexp(1.0f, -112)}};
    for (const Case& c : cases) {
        const int64_t T = int64_t(c.pos.size()), H = c.heads, n = c.n, ppt = (n + kPage - 1) / kPage;
        SCOPED_TRACE("heads " + std::to_string(H) + " n " + std::to_string(n) + " tokens " + std::to_string(T) +
                     " wide keys " + std::to_string(c.wide_keys) + " wide q " + std::to_string(c.wide_q) +
                     " w scale 2^" + std::to_string(std::ilogb(c.w_scale)));
        auto q = random_act(prec, rng, size_t(T * H * kDim), 1.0f);
        spread_and_simulate(q, T * H, c.wide_q, 6, rng);
        auto keys = random_act(prec, rng, size_t(n * kDim), 1.0f);
        spread_and_simulate(keys, n, c.wide_keys, 6, rng);
        auto w = random_act(prec, rng, size_t(T * H), c.w_scale);
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
        const QueryInts qi = encode_query(q, T * H);
        auto dq = act_to_device(prec, q);
        auto dq_int = to_device(qi.ints);
        auto dq_exp = to_device(qi.exps);
        auto dw = act_to_device(prec, w);
        auto dpos = to_device(c.pos);
        auto dtable = to_device(table);
        auto drows = act_to_device(prec, pool_rows);
        auto dpool = poisoned<uint8_t>(size_t(phys_pages * kPage * key_row_bytes(prec)));
        auto ds_bf16 = act_poisoned(prec, size_t(T * n));
        auto ds_s8 = act_poisoned(prec, size_t(T * n));
        ASSERT_TRUE(dq.is_ok() && dq_int.is_ok() && dq_exp.is_ok() && dw.is_ok() && dpos.is_ok() && dtable.is_ok() &&
                    drows.is_ok() && dpool.is_ok() && ds_bf16.is_ok() && ds_s8.is_ok());
        DSV4_ASSERT_OK(sm90_key_pack(prec, {drows->data(), phys_pages * kPage, nullptr, 0, dpool->data()}, nullptr));
        IndexerScoresArgs a{dq->data(), dpool->data(),       dw->data(),     T, H, n,
                            kRatio,     dpos->as<int64_t>(), ds_bf16->data()};
        a.visible_only = c.visible_only;
        a.keys_packed = true;
        if (c.paged) a.key_pages = dtable->as<int32_t>(), a.pages_per_token = ppt;
        DSV4_ASSERT_OK(sm90_indexer_scores(prec, a, nullptr));
        a.q_int = dq_int->as<int8_t>(), a.q_exp = dq_exp->as<int8_t>();
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

// The engine's query path: sm90_indexer_q_finish (RoPE, Hadamard, FP4 simulation) also writes the simulation's
// integer form, exactly q_int · 2^q_exp for every value (one exponent per head where it folds), and the integer scores
// on it equal the bf16 path's on the simulated bf16 query, bit for bit, at V4's 64 heads.
TEST(IndexerScoresS8, TakesTheQueryFinishOutput) {
    DSV4_REQUIRE_GPU();
    const Precision prec = Precision::kReference;
    std::mt19937_64 rng(fresh_seed());
    const auto freqs = backend::rope_freqs(160000, 16, 65536, 32, 1);
    const int64_t T = 40, H = 64, n = 2048;
    auto q = random_act(prec, rng, size_t(T * H * kDim), 4.0f);
    auto keys = random_act(prec, rng, size_t(n * kDim), 1.0f);
    spread_and_simulate(keys, n, 0.0, 0, rng);
    const auto w = random_act(prec, rng, size_t(T * H), 0.02f);
    std::vector<int64_t> pos(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = 8191 - 97 * t;
    auto dq = act_to_device(prec, q);
    auto dq_int = poisoned<int8_t>(q.size());
    auto dq_exp = poisoned<int8_t>(size_t(T * H * 4));
    auto dw = act_to_device(prec, w);
    auto dpos = to_device(pos);
    auto drows = act_to_device(prec, keys);
    auto dpool = poisoned<uint8_t>(size_t(n * key_row_bytes(prec)));
    auto ds_bf16 = act_poisoned(prec, size_t(T * n));
    auto ds_s8 = act_poisoned(prec, size_t(T * n));
    ASSERT_TRUE(dq.is_ok() && dq_int.is_ok() && dq_exp.is_ok() && dw.is_ok() && dpos.is_ok() && drows.is_ok() &&
                dpool.is_ok() && ds_bf16.is_ok() && ds_s8.is_ok());
    DSV4_ASSERT_OK(sm90_key_pack(prec, {drows->data(), n, nullptr, 0, dpool->data()}, nullptr));
    // the head weights' scale rides along (IndexerQFinishArgs::w): the same bits as sm90_scale on a copy
    const float w_scale = float(1.0 / std::sqrt(128.0) / std::sqrt(64.0));
    auto dw_scaled = act_to_device(prec, w);
    ASSERT_TRUE(dw_scaled.is_ok());
    DSV4_ASSERT_OK(sm90_scale(prec, {dw_scaled->data(), T * H, w_scale}, nullptr));
    IndexerQFinishArgs qf{dq->data(), T, H, dpos->as<int64_t>(), freqs, dq_int->as<int8_t>(), dq_exp->as<int8_t>()};
    qf.w = dw->data();
    qf.w_scale = w_scale;
    DSV4_ASSERT_OK(sm90_indexer_q_finish(qf, nullptr));
    EXPECT_TRUE(
        dsv4::testing::bytes_equal(to_host<uint16_t>(*dw, size_t(T * H)), to_host<uint16_t>(*dw_scaled, size_t(T * H))))
        << "head weights scaled by the finish differ from sm90_scale's";
    // the integer form is the simulation
    const auto sim = act_to_host(prec, *dq, q.size());
    const auto ints = to_host<int8_t>(*dq_int, q.size());
    const auto exps = to_host<int8_t>(*dq_exp, size_t(T * H * 4));
    size_t wrong = 0, folded = 0;
    for (int64_t h = 0; h < T * H; ++h) {
        const int8_t* e = &exps[size_t(h * 4)];
        folded += e[0] == e[1] && e[1] == e[2] && e[2] == e[3];
        for (int64_t c = 0; c < kDim; ++c)
            wrong += std::ldexp(float(ints[size_t(h * kDim + c)]), e[c / 32]) != sim[size_t(h * kDim + c)];
    }
    EXPECT_EQ(wrong, 0u) << "query values whose integer form differs from the simulation";
    EXPECT_GT(folded, size_t(T * H / 2)) << "Hadamard-rotated heads should mostly fold";
    IndexerScoresArgs a{dq->data(), dpool->data(), dw->data(), T, H, n, kRatio, dpos->as<int64_t>(), ds_bf16->data()};
    a.keys_packed = true;
    a.q_int = dq_int->as<int8_t>(), a.q_exp = dq_exp->as<int8_t>();
    a.path = IndexerScoresArgs::Path::kBf16;
    DSV4_ASSERT_OK(sm90_indexer_scores(prec, a, nullptr));
    a.path = IndexerScoresArgs::Path::kInteger;
    a.scores = ds_s8->data();
    DSV4_ASSERT_OK(sm90_indexer_scores(prec, a, nullptr));
    const auto want = to_host<uint16_t>(*ds_bf16, size_t(T * n));
    const auto got = to_host<uint16_t>(*ds_s8, size_t(T * n));
    size_t diff = 0;
    for (size_t i = 0; i < got.size(); ++i) diff += got[i] != want[i];
    EXPECT_EQ(diff, 0u);
}

// Asking for the integer path where it cannot run is a clear error, not a silent bf16 call.
TEST(IndexerScoresS8, ForcedIntegerPathWithoutItsInputsIsAnError) {
    DSV4_REQUIRE_GPU();
    auto buf = DeviceBuffer::allocate(1 << 16);
    ASSERT_TRUE(buf.is_ok());
    IndexerScoresArgs a{buf->data(), buf->data(), buf->data(), 1, 64, 64, kRatio, buf->as<int64_t>(), buf->data()};
    a.keys_packed = true;
    a.path = IndexerScoresArgs::Path::kInteger;  // no q_int
    Status s = sm90_indexer_scores(Precision::kReference, a, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("integer path needs"), std::string::npos) << s.message();
    a.q_int = buf->as<int8_t>() + 4, a.q_exp = buf->as<int8_t>();  // misaligned
    EXPECT_EQ(sm90_indexer_scores(Precision::kReference, a, nullptr).code(), StatusCode::kInvalidArgument);
    a.q_int = buf->as<int8_t>();
    EXPECT_EQ(sm90_indexer_scores(Precision::kF32, a, nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dsv4::cuda
