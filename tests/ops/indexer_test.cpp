// sm90_indexer_scores and sm90_topk against the CPU ops (indexer_scores, topk) at V4 shapes (64 indexer heads x 128,
// keys up to 262,144 = 1M context / 4, top-k 512 Flash / 1024 Pro), the test models' 4 heads with top-k 16 / 8 over
// a few keys, and edge shapes, both precisions. Top-k is
// exact: the same scores in, the same index lists out (ties by lower index on both sides). The decode mode
// (capacity-wide scores with visible_only, top-k cut by positions) against per-row host-driven calls. Paged and
// packed (FP4) keys against the contiguous unpacked keys, bit for bit. The fused query finish (RoPE, Hadamard, FP4
// simulation) against the three kernels it replaces, bit for bit.
#include "backend/cuda/kernels/indexer/indexer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/kernels/act_quant/act_quant.h"
#include "backend/cuda/kernels/kv_store/kv_store.h"
#include "backend/cuda/kernels/linear/linear.h"
#include "backend/cuda/kernels/norm_rope/norm_rope.h"
#include "core/quant_formats.h"
#include "core/thread_pool.h"
#include "ops/gpu_testing.h"
#include "testing/testing.h"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using namespace dsv4::cuda::testing;

class IndexerScoresTest : public ::testing::TestWithParam<Precision> {};

TEST_P(IndexerScoresTest, MatchesCpu) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    struct Case {
        int64_t tokens, n, first_pos, heads = 64, step = 7;  // position of token t: first_pos + step·t
    };
    // decode at 32k context (n 8192 keys), a prefill chunk whose later tokens see more keys (masked tail), odd n;
    // the test models' 4 heads (first key, a 300-token prefill from position 0), head counts off the 16-row tile
    const Case cases[] = {{1, 8192, 32767},   {3, 2000, 7990}, {17, 130, 100},     {64, 1024, 4000},
                          {1, 1, 3},          {1, 1, 3, 4},    {300, 75, 0, 4, 1}, {9, 40, 120, 4},
                          {5, 300, 1000, 20}, {2, 70, 260, 1}, {3, 64, 250, 48}};
    for (const Case& c : cases) {
        SCOPED_TRACE("tokens " + std::to_string(c.tokens) + " n " + std::to_string(c.n) + " heads " +
                     std::to_string(c.heads));
        const int64_t T = c.tokens, H = c.heads, n = c.n;
        auto q = random_act(prec, rng, size_t(T * H * 128), 1.0f);
        auto keys = random_act(prec, rng, size_t(n * 128), 1.0f);
        auto w = random_act(prec, rng, size_t(T * H), 0.02f);
        std::vector<int64_t> pos(static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = c.first_pos + c.step * t;
        std::vector<float> want(size_t(T * n));
        backend::IndexerScoresParams cp{q.data(), keys.data(), w.data(), T, H, 128, n, 4, pos.data(), want.data()};
        DSV4_ASSERT_OK(backend::cpu::indexer_scores({prec, &pool()}, cp));
        auto dq = act_to_device(prec, q);
        auto dk = act_to_device(prec, keys);
        auto dw = act_to_device(prec, w);
        auto dpos = to_device(pos);
        auto ds = act_poisoned(prec, want.size());
        ASSERT_TRUE(dq.is_ok() && dk.is_ok() && dw.is_ok() && dpos.is_ok() && ds.is_ok());
        IndexerScoresArgs a{dq->data(), dk->data(), dw->data(), T, H, n, 4, dpos->as<int64_t>(), ds->data()};
        DSV4_ASSERT_OK(sm90_indexer_scores(prec, a, nullptr));
        auto got = act_to_host(prec, *ds, want.size());
        // the visibility mask exactly, then the visible values
        size_t mask_diff = 0;
        for (size_t i = 0; i < got.size(); ++i) {
            const bool gi = std::isinf(got[i]) && got[i] < 0, wi = std::isinf(want[i]) && want[i] < 0;
            mask_diff += gi != wi;
            if (gi && wi) got[i] = want[i] = 0;
        }
        EXPECT_EQ(mask_diff, 0u);
        // reference: tensor-core dot products sum in another order, so a rare bf16(dot) flips; f32: FMA chains
        DSV4_EXPECT_CLOSE(got, want, prec == Precision::kReference ? 2e-3 : 1e-5);
    }
}

class TopKTest : public ::testing::TestWithParam<Precision> {};

TEST_P(TopKTest, ExactIncludingTies) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    struct Case {
        int64_t rows, n, k;
        int distinct;         // scores drawn from this many values (ties), 0 = continuous
        int64_t masked_tail;  // last entries -inf (not visible)
    };
    const Case cases[] = {{1, 262144, 1024, 0, 0},
                          {2, 262144, 512, 64, 1000},
                          {5, 4096, 512, 0, 100},
                          {3, 4096, 1024, 16, 3500},
                          {4, 300, 512, 0, 0},
                          {7, 1000, 1, 3, 0},
                          {2, 1500, 1024, 0, 1500},
                          {64, 1024, 512, 200, 200},
                          // the test models: top-k 16 / 8 over fewer keys than k, a 300-token prefill whose rows
                          // are mostly masked, one key
                          {300, 75, 16, 0, 40},
                          {300, 37, 8, 4, 30},
                          {1, 1, 16, 0, 0},
                          {3, 5, 8, 2, 3},
                          {2, 20, 16, 0, 20}};
    for (const Case& c : cases) {
        SCOPED_TRACE("rows " + std::to_string(c.rows) + " n " + std::to_string(c.n) + " k " + std::to_string(c.k) +
                     " distinct " + std::to_string(c.distinct));
        std::vector<float> s(size_t(c.rows * c.n));
        std::normal_distribution<float> d(0.0f, 3.0f);
        std::uniform_int_distribution<int> level(0, std::max(c.distinct - 1, 0));
        for (int64_t r = 0; r < c.rows; ++r)
            for (int64_t i = 0; i < c.n; ++i) {
                float v = c.distinct > 0 ? float(level(rng)) * 0.25f - 2.0f : d(rng);
                if (prec == Precision::kReference) v = round_bf16(v);
                if (i >= c.n - c.masked_tail) v = -INFINITY;
                s[size_t(r * c.n + i)] = v;
            }
        std::vector<int32_t> want(size_t(c.rows * c.k));
        DSV4_ASSERT_OK(backend::cpu::topk({prec, &pool()}, {s.data(), c.rows, c.n, c.k, want.data()}));
        auto ds = act_to_device(prec, s);
        auto didx = poisoned<int32_t>(want.size());
        ASSERT_TRUE(ds.is_ok() && didx.is_ok());
        DSV4_ASSERT_OK(sm90_topk(prec, {ds->data(), c.rows, c.n, c.k, didx->as<int32_t>()}, nullptr));
        auto got = to_host<int32_t>(*didx, want.size());
        size_t diff = 0, first = got.size();
        for (size_t i = 0; i < got.size(); ++i)
            if (got[i] != want[i]) diff++, first = std::min(first, i);
        EXPECT_EQ(diff, 0u) << "first difference at " << first << ": got " << (diff ? got[first] : 0) << " want "
                            << (diff ? want[first] : 0);
    }
}

TEST(IndexerValidation, BadShapesAreClearErrors) {
    DSV4_REQUIRE_GPU();
    auto buf = DeviceBuffer::allocate(1 << 16);
    ASSERT_TRUE(buf.is_ok());
    Status s = sm90_topk(Precision::kReference, {buf->data(), 1, 4096, 2048, buf->as<int32_t>()}, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("above the supported 1024"), std::string::npos) << s.message();
    IndexerScoresArgs a{buf->data(), buf->data(), buf->data(), 1, 65, 10, 4, buf->as<int64_t>(), buf->data()};
    s = sm90_indexer_scores(Precision::kReference, a, nullptr);
    EXPECT_NE(s.message().find("[1, 64]"), std::string::npos) << s.message();
}

// Decode mode against the host-driven calls on the same inputs: one scores call over the cache's capacity with
// visible_only, then top-k cut per row by positions, must give every row exactly the picks of a host call with
// n = that row's visible count; visible scores are bit-identical, key blocks past the visible count stay untouched.
class IndexerDecodeTest : public ::testing::TestWithParam<Precision> {};

TEST_P(IndexerDecodeTest, CapacityWideCallMatchesPerRowHostCalls) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    const size_t act_bytes = prec == Precision::kReference ? 2 : 4;
    struct Case {
        int64_t heads, k, capacity;
        std::vector<int64_t> pos;  // one row per sequence
    };
    // Flash (64 heads, top-k 512) and Pro (64 heads, top-k 1024) at capacity 4096 (16k context): rows with no
    // visible entry, one, fewer than k, a partial last key block, and the full cache; the test models (4 heads,
    // top-k 16 / 8) over a small cache
    const Case cases[] = {{64, 512, 4096, {0, 3, 257, 1001, 2050, 16383, 5000}},
                          {64, 1024, 4096, {16383, 7, 4099, 2, 8191, 700}},
                          {4, 16, 128, {3, 63, 200, 511, 0}},
                          {4, 8, 128, {299, 30, 1, 511}}};
    constexpr int64_t kRatio = 4, kKeyBlock = 64;
    for (const Case& c : cases) {
        const int64_t T = int64_t(c.pos.size()), H = c.heads, n = c.capacity;
        SCOPED_TRACE("heads " + std::to_string(H) + " k " + std::to_string(c.k) + " capacity " + std::to_string(n));
        auto q = random_act(prec, rng, size_t(T * H * 128), 1.0f);
        auto keys = random_act(prec, rng, size_t(n * 128), 1.0f);
        auto w = random_act(prec, rng, size_t(T * H), 0.02f);
        auto dq = act_to_device(prec, q);
        auto dk = act_to_device(prec, keys);
        auto dw = act_to_device(prec, w);
        auto dpos = to_device(c.pos);
        auto ds = act_poisoned(prec, size_t(T * n));
        auto didx = poisoned<int32_t>(size_t(T * c.k));
        ASSERT_TRUE(dq.is_ok() && dk.is_ok() && dw.is_ok() && dpos.is_ok() && ds.is_ok() && didx.is_ok());
        IndexerScoresArgs a{dq->data(), dk->data(), dw->data(), T, H, n, kRatio, dpos->as<int64_t>(), ds->data()};
        a.visible_only = true;
        DSV4_ASSERT_OK(sm90_indexer_scores(prec, a, nullptr));
        TopKArgs tk{ds->data(), T, n, c.k, didx->as<int32_t>()};
        tk.positions = dpos->as<int64_t>();
        tk.ratio = kRatio;
        DSV4_ASSERT_OK(sm90_topk(prec, tk, nullptr));
        const auto scores = to_host<uint8_t>(*ds, size_t(T * n) * act_bytes);
        const auto picks = to_host<int32_t>(*didx, size_t(T * c.k));
        for (int64_t t = 0; t < T; ++t) {
            const int64_t visible = std::min(n, (c.pos[size_t(t)] + 1) / kRatio);
            SCOPED_TRACE("row " + std::to_string(t) + " pos " + std::to_string(c.pos[size_t(t)]) + " visible " +
                         std::to_string(visible));
            // the host-driven pair for this row alone, n = visible
            auto hs = act_poisoned(prec, size_t(std::max<int64_t>(visible, 1)));
            auto hidx = poisoned<int32_t>(size_t(c.k));
            ASSERT_TRUE(hs.is_ok() && hidx.is_ok());
            const auto* qb = static_cast<const uint8_t*>(dq->data()) + size_t(t * H * 128) * act_bytes;
            const auto* wb = static_cast<const uint8_t*>(dw->data()) + size_t(t * H) * act_bytes;
            IndexerScoresArgs ha{qb, dk->data(), wb, 1, H, visible, kRatio, dpos->as<int64_t>() + t, hs->data()};
            DSV4_ASSERT_OK(sm90_indexer_scores(prec, ha, nullptr));
            DSV4_ASSERT_OK(sm90_topk(prec, {hs->data(), 1, visible, c.k, hidx->as<int32_t>()}, nullptr));
            const auto want_idx = to_host<int32_t>(*hidx, size_t(c.k));
            const std::vector<int32_t> got_idx(picks.begin() + t * c.k, picks.begin() + (t + 1) * c.k);
            EXPECT_EQ(got_idx, want_idx) << "top-k picks differ from the host-driven call";
            const size_t row0 = size_t(t * n) * act_bytes;
            if (visible > 0) {
                const auto want_scores = to_host<uint8_t>(*hs, size_t(visible) * act_bytes);
                EXPECT_TRUE(std::equal(want_scores.begin(), want_scores.end(), scores.begin() + row0))
                    << "visible scores differ from the host-driven call";
            }
            // whole key blocks at or past the visible count are never written
            const int64_t untouched = (visible + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
            const auto first_written =
                std::find_if(scores.begin() + row0 + size_t(std::min(untouched, n)) * act_bytes,
                             scores.begin() + row0 + size_t(n) * act_bytes, [](uint8_t b) { return b != 0xff; });
            EXPECT_EQ(first_written, scores.begin() + row0 + size_t(n) * act_bytes)
                << "a score written in an invisible key block";
        }
        // a test that can fail: the full rows must pick something
        EXPECT_GT(std::count_if(picks.begin(), picks.end(), [](int32_t v) { return v >= 0; }), 0);
    }
}

TEST(IndexerDecodeValidation, PositionsNeedTheRatio) {
    DSV4_REQUIRE_GPU();
    auto buf = DeviceBuffer::allocate(1 << 16);
    ASSERT_TRUE(buf.is_ok());
    TopKArgs tk{buf->data(), 1, 100, 16, buf->as<int32_t>()};
    tk.positions = buf->as<int64_t>();
    Status s = sm90_topk(Precision::kReference, tk, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("compression ratio"), std::string::npos) << s.message();
}

// Keys in pages of 64 behind a per-token shuffled page table and (kReference) packed as FP4 rows (kv_store.h):
// scores and top-k picks must be bit-identical to the contiguous unpacked call on the same key values. Each token
// has its own copy of the logical pages at its own physical pages (so the table row t·pages_per_token is what is
// read). Flash / Pro (64 heads, top-k 512 / 1024) and the test models (4 heads); visible_only + positions top-k
// (decode) and the plain masked mode; packed keys without pages.
class IndexerPagedTest : public ::testing::TestWithParam<Precision> {};

TEST_P(IndexerPagedTest, PagedPackedKeysAreBitIdenticalToContiguous) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    const size_t act_bytes = prec == Precision::kReference ? 2 : 4;
    constexpr int64_t kRatio = 4, kPage = 64, kDim = 128;
    struct Case {
        int64_t heads, k, n;
        std::vector<int64_t> pos;
        bool visible_only, paged;
    };
    const Case cases[] = {{64, 512, 4096, {0, 3, 257, 1001, 2050, 16383, 5000}, true, true},
                          {64, 1024, 4000, {16383, 7, 4099, 8191, 700}, true, true},
                          {4, 16, 200, {3, 63, 200, 799, 0}, true, true},
                          {4, 8, 75, {299, 30, 1}, false, true},
                          {64, 512, 1000, {3999, 2000, 64}, false, true},
                          {64, 512, 1000, {3999, 2000, 64}, true, false}};
    for (const Case& c : cases) {
        const int64_t T = int64_t(c.pos.size()), H = c.heads, n = c.n, ppt = (n + kPage - 1) / kPage;
        SCOPED_TRACE("heads " + std::to_string(H) + " k " + std::to_string(c.k) + " n " + std::to_string(n) +
                     (c.paged ? " paged" : " contiguous") + (c.visible_only ? " visible_only" : ""));
        auto q = random_act(prec, rng, size_t(T * H * kDim), 1.0f);
        auto keys = random_act(prec, rng, size_t(n * kDim), 1.0f);
        if (prec == Precision::kReference)  // the values a cached indexer key holds
            DSV4_ASSERT_OK(backend::cpu::fp4_act_quant({keys.data(), n, kDim, nullptr, nullptr, nullptr, keys.data()}));
        auto w = random_act(prec, rng, size_t(T * H), 0.02f);
        // physical pages: token t's logical page p is at phys[t·ppt + p]; 3 spare pages never named
        const int64_t phys_pages = c.paged ? T * ppt + 3 : ppt;
        std::vector<int32_t> phys(static_cast<size_t>(phys_pages));
        std::iota(phys.begin(), phys.end(), 0);
        if (c.paged) std::shuffle(phys.begin(), phys.end(), rng);
        std::vector<float> pool_rows(size_t(phys_pages * kPage * kDim), 0.0f);
        const int64_t tables = c.paged ? T : 1;
        std::vector<int32_t> table(size_t(tables * ppt));
        for (int64_t t = 0; t < tables; ++t)
            for (int64_t p = 0; p < ppt; ++p) {
                const int32_t at = phys[size_t(t * ppt + p)];
                table[size_t(t * ppt + p)] = at;
                for (int64_t r = 0; r < kPage && p * kPage + r < n; ++r)
                    std::memcpy(&pool_rows[size_t((at * kPage + r) * kDim)], &keys[size_t((p * kPage + r) * kDim)],
                                kDim * sizeof(float));
            }
        auto dq = act_to_device(prec, q);
        auto dk = act_to_device(prec, keys);
        auto dw = act_to_device(prec, w);
        auto dpos = to_device(c.pos);
        auto dtable = to_device(table);
        auto drows = act_to_device(prec, pool_rows);
        auto dpool = poisoned<uint8_t>(size_t(phys_pages * kPage * key_row_bytes(prec)));
        auto ds_c = act_poisoned(prec, size_t(T * n));
        auto ds_p = act_poisoned(prec, size_t(T * n));
        auto di_c = poisoned<int32_t>(size_t(T * c.k));
        auto di_p = poisoned<int32_t>(size_t(T * c.k));
        ASSERT_TRUE(dq.is_ok() && dk.is_ok() && dw.is_ok() && dpos.is_ok() && dtable.is_ok() && drows.is_ok() &&
                    dpool.is_ok() && ds_c.is_ok() && ds_p.is_ok() && di_c.is_ok() && di_p.is_ok());
        DSV4_ASSERT_OK(sm90_key_pack(prec, {drows->data(), phys_pages * kPage, nullptr, 0, dpool->data()}, nullptr));
        IndexerScoresArgs a{dq->data(), dk->data(), dw->data(), T, H, n, kRatio, dpos->as<int64_t>(), ds_c->data()};
        a.visible_only = c.visible_only;
        DSV4_ASSERT_OK(sm90_indexer_scores(prec, a, nullptr));
        a.keys = dpool->data();
        a.keys_packed = true;
        if (c.paged) a.key_pages = dtable->as<int32_t>(), a.pages_per_token = ppt;
        a.scores = ds_p->data();
        DSV4_ASSERT_OK(sm90_indexer_scores(prec, a, nullptr));
        TopKArgs tk{ds_c->data(), T, n, c.k, di_c->as<int32_t>()};
        if (c.visible_only) tk.positions = dpos->as<int64_t>(), tk.ratio = kRatio;
        DSV4_ASSERT_OK(sm90_topk(prec, tk, nullptr));
        tk.scores = ds_p->data();
        tk.idx = di_p->as<int32_t>();
        DSV4_ASSERT_OK(sm90_topk(prec, tk, nullptr));
        const auto sc = to_host<uint8_t>(*ds_c, size_t(T * n) * act_bytes);
        const auto sp = to_host<uint8_t>(*ds_p, size_t(T * n) * act_bytes);
        size_t diff = 0;
        for (size_t i = 0; i < sc.size(); ++i) diff += sc[i] != sp[i];
        EXPECT_EQ(diff, 0u) << "paged/packed keys changed " << diff << " score bytes";
        const auto ic = to_host<int32_t>(*di_c, size_t(T * c.k));
        EXPECT_EQ(ic, to_host<int32_t>(*di_p, size_t(T * c.k))) << "top-k picks differ";
        EXPECT_GT(std::count_if(ic.begin(), ic.end(), [](int32_t v) { return v >= 0; }), 0);
    }
}

TEST(IndexerPagedValidation, PagesMustCoverTheKeys) {
    DSV4_REQUIRE_GPU();
    auto buf = DeviceBuffer::allocate(1 << 16);
    ASSERT_TRUE(buf.is_ok());
    IndexerScoresArgs a{buf->data(), buf->data(), buf->data(), 1, 4, 200, 4, buf->as<int64_t>(), buf->data()};
    a.key_pages = buf->as<int32_t>();
    a.pages_per_token = 3;  // 192 < 200 keys
    Status s = sm90_indexer_scores(Precision::kReference, a, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("pages_per_token >= 4"), std::string::npos) << s.message();
}

const auto kPrecisions = ::testing::Values(Precision::kReference, Precision::kF32);
std::string precision_label(const ::testing::TestParamInfo<Precision>& i) { return backend::precision_name(i.param); }
// sm90_indexer_q_finish must give the bytes of sm90_rope (channels 64..127), sm90_hadamard128 and
// sm90_fp4_quant_e2m1 (x_sim in place) run in that order — the indexer query path it replaces — at V4's 64 heads
// (decode, a batch, a 300-token prefill pass) and the test models' 4 heads, positions up to 1M, values spanning many
// binades (so that e2m1 blocks take different scales).
TEST(IndexerQFinish, MatchesTheThreeKernelsBitForBit) {
    DSV4_REQUIRE_GPU();
    std::mt19937_64 rng(fresh_seed());
    const Precision prec = Precision::kReference;
    const auto freqs = backend::rope_freqs(160000, 16, 65536, 32, 1);
    struct Case {
        int64_t tokens, heads;
    };
    for (const Case c : {Case{1, 64}, Case{7, 64}, Case{300, 64}, Case{5, 4}, Case{3, 1}}) {
        SCOPED_TRACE("tokens " + std::to_string(c.tokens) + " heads " + std::to_string(c.heads));
        const int64_t n = c.tokens * c.heads * 128;
        std::vector<float> q = random_act(prec, rng, size_t(n), 1.0f);
        std::uniform_int_distribution<int> binade(-12, 6);
        for (size_t i = 0; i < q.size(); i += 32) {  // one scale per 32-block, so blocks differ by up to 2^18
            const float f = std::ldexp(1.0f, binade(rng));
            for (size_t j = i; j < i + 32; ++j) q[j] *= f;  // a power of two: still a bf16 value
        }
        std::uniform_int_distribution<int64_t> pos_dist(0, 1 << 20);
        std::vector<int64_t> pos(static_cast<size_t>(c.tokens));
        for (auto& p : pos) p = pos_dist(rng);
        auto fused = act_to_device(prec, q);
        auto three = act_to_device(prec, q);
        auto dpos = to_device(pos);
        ASSERT_TRUE(fused.is_ok() && three.is_ok() && dpos.is_ok());
        RopeArgs r;
        r.x = three->data(), r.tokens = c.tokens, r.vecs = c.heads, r.vec_stride = 128, r.offset = 64;
        r.positions = dpos->as<int64_t>(), r.freqs = freqs;
        DSV4_ASSERT_OK(sm90_rope(prec, r, nullptr));
        DSV4_ASSERT_OK(sm90_hadamard128(prec, {three->data(), c.tokens * c.heads, three->data()}, nullptr));
        Fp4QuantArgs f;
        f.x = three->data(), f.rows = c.tokens * c.heads, f.cols = 128, f.x_sim = three->data();
        DSV4_ASSERT_OK(sm90_fp4_quant_e2m1(f, nullptr));
        DSV4_ASSERT_OK(sm90_indexer_q_finish({fused->data(), c.tokens, c.heads, dpos->as<int64_t>(), freqs}, nullptr));
        const auto a = to_host<uint16_t>(*fused, size_t(n)), b = to_host<uint16_t>(*three, size_t(n));
        size_t diff = 0;
        for (size_t i = 0; i < a.size(); ++i) diff += a[i] != b[i];
        EXPECT_EQ(diff, 0u) << "the fused finish changed " << diff << " of " << n << " values";
        const std::vector<uint16_t> before = to_bf16_bits(q);
        size_t changed = 0;  // and the finish did something (rotation + Hadamard + FP4 change almost every value)
        for (size_t i = 0; i < a.size(); ++i) changed += a[i] != before[i];
        EXPECT_GT(changed, a.size() / 2);
    }
}

// The decode query path without the projection's reduction launch: sm90_linear with LinearArgs::partials leaves the
// FP8 GEMM's K-split sums and sm90_indexer_q_finish reduces them — the bytes of q, q_int and q_exp must be those of
// the linear's bf16 output finished as before, at V4-Flash's and V4-Pro's q_lora widths and decode batches; from
// kFp8LinearGemmMinTokens rows (cuBLASLt, no K split) the linear writes y and reports no partials.
TEST(IndexerQFinish, ReducesTheProjectionsKSplitsBitForBit) {
    DSV4_REQUIRE_GPU();
    std::mt19937_64 rng(fresh_seed());
    const Precision prec = Precision::kReference;
    const auto freqs = backend::rope_freqs(160000, 16, 65536, 32, 1);
    constexpr int64_t kHeads = 64, N = kHeads * 128;
    for (const int64_t K : {int64_t(1024), int64_t(1536)}) {
        std::normal_distribution<float> wd(0.0f, 0.02f);
        std::vector<float> wf(size_t(N * K));
        for (auto& v : wf) v = wd(rng);
        auto enc = fp8_block_encode(wf, N, K);
        ASSERT_TRUE(enc.is_ok()) << enc.status().to_string();
        const backend::WeightView hv{backend::WeightFormat::kFP8Block, N, K, enc->data.data(), enc->scales.data()};
        auto w = upload_weight(hv, "index wq_b");
        ASSERT_TRUE(w.is_ok());
        for (const int64_t T : {int64_t(1), int64_t(5), int64_t(64), kFp8LinearGemmMinTokens}) {
            SCOPED_TRACE("K " + std::to_string(K) + " tokens " + std::to_string(T));
            const auto x = random_act(prec, rng, size_t(T * K), 1.0f);
            std::vector<int64_t> pos(static_cast<size_t>(T));
            for (auto& p : pos) p = std::uniform_int_distribution<int64_t>(0, 1 << 20)(rng);
            auto dx = act_to_device(prec, x);
            auto dpos = to_device(pos);
            const size_t ws_bytes = sm90_linear_workspace_bytes(prec, T, w->view(), backend::LinearOut::kBF16);
            auto ws = DeviceBuffer::allocate(std::max<size_t>(ws_bytes, 256));
            auto qa = DeviceBuffer::allocate(size_t(T * N) * 2), qb = DeviceBuffer::allocate(size_t(T * N) * 2);
            auto ia = DeviceBuffer::allocate(size_t(T * N)), ib = DeviceBuffer::allocate(size_t(T * N));
            auto ea = DeviceBuffer::allocate(size_t(T * kHeads * 4)),
                 eb = DeviceBuffer::allocate(size_t(T * kHeads * 4));
            ASSERT_TRUE(dx.is_ok() && dpos.is_ok() && ws.is_ok() && qa.is_ok() && qb.is_ok() && ia.is_ok() &&
                        ib.is_ok() && ea.is_ok() && eb.is_ok());
            LinearArgs l;
            l.x = dx->data(), l.tokens = T, l.w = w->view(), l.out = backend::LinearOut::kBF16;
            l.workspace = ws->data(), l.workspace_bytes = ws->bytes();
            // the path as it was: the linear's bf16 output, then the finish
            l.y = qa->data();
            DSV4_ASSERT_OK(sm90_linear(prec, l, nullptr));
            DSV4_ASSERT_OK(sm90_indexer_q_finish(
                {qa->data(), T, kHeads, dpos->as<int64_t>(), freqs, ia->as<int8_t>(), ea->as<int8_t>()}, nullptr));
            // the partials, reduced by the finish
            Fp8GemmPartials parts;
            l.y = qb->data(), l.partials = &parts;
            DSV4_ASSERT_OK(sm90_linear(prec, l, nullptr));
            if (T >= kFp8LinearGemmMinTokens) {
                EXPECT_EQ(parts.splits, 0) << "a prefill-sized projection has no K split to leave";
            } else if (T <= kFp8GemvMaxTokens) {
                EXPECT_EQ(parts.splits, 0) << "the decode kernel reduces its K splits inside its blocks";
            } else {
                EXPECT_GT(parts.splits, 1) << "decode projections split K";
            }
            DSV4_ASSERT_OK(sm90_indexer_q_finish({qb->data(), T, kHeads, dpos->as<int64_t>(), freqs, ib->as<int8_t>(),
                                                  eb->as<int8_t>(), parts.partial, parts.splits},
                                                 nullptr));
            EXPECT_TRUE(to_host<uint16_t>(*qa, size_t(T * N)) == to_host<uint16_t>(*qb, size_t(T * N))) << "q";
            EXPECT_TRUE(to_host<int8_t>(*ia, size_t(T * N)) == to_host<int8_t>(*ib, size_t(T * N))) << "q_int";
            EXPECT_TRUE(to_host<int8_t>(*ea, size_t(T * kHeads * 4)) == to_host<int8_t>(*eb, size_t(T * kHeads * 4)))
                << "q_exp";
        }
    }
}

TEST(IndexerQFinish, BadArgumentsAreClearErrors) {
    DSV4_REQUIRE_GPU();
    auto buf = DeviceBuffer::allocate(1 << 12);
    ASSERT_TRUE(buf.is_ok());
    Status s = sm90_indexer_q_finish({buf->data(), 1, 64, nullptr, {}}, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    s = sm90_indexer_q_finish({static_cast<uint8_t*>(buf->data()) + 2, 1, 1, buf->as<int64_t>(), {}}, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    for (const int splits : {0, 33}) {  // partials need 1..32 splits
        s = sm90_indexer_q_finish(
            {buf->data(), 1, 1, buf->as<int64_t>(), {}, nullptr, nullptr, buf->as<float>(), splits}, nullptr);
        EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
        EXPECT_NE(s.message().find("splits"), std::string::npos) << s.message();
    }
}

INSTANTIATE_TEST_SUITE_P(Cuda, IndexerScoresTest, kPrecisions, precision_label);
INSTANTIATE_TEST_SUITE_P(Cuda, TopKTest, kPrecisions, precision_label);
INSTANTIATE_TEST_SUITE_P(Cuda, IndexerDecodeTest, kPrecisions, precision_label);
INSTANTIATE_TEST_SUITE_P(Cuda, IndexerPagedTest, kPrecisions, precision_label);

}  // namespace
}  // namespace dsv4::cuda
