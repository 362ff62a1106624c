// sm90_topk_select against sm90_topk and backend::cpu::topk (std::partial_sort): the same scores in, bit-identical
// index lists out, both precisions. Rows of n in {1, 5, 511, 512, 513, 1024, S, S + 1, 16384, 65536, 262144, C + 1}
// (S = kTopkSelectShortMax: both sides of the switch between the one-block and the cluster path; C =
// kTopkSelectClusterMax: past the cluster path, the chunked one; the 64-row cases straddle the row-count switch up
// to kTopkSelectShortLimit; every path forced on the same rows in EveryPathGivesTheSamePicks), k in {8, 16, 512,
// 1024}, 1..64 rows, rows drawn continuous, from a few values (exact ties across the k-th place), with -inf / NaN /
// +inf entries, almost all -inf, masked tails; rows shorter than k; rows cut by positions / ratio; signed zeros
// (against sm90_topk only: the CPU treats -0 == +0, the GPU keys order -0 below +0). Outputs are poisoned with a byte
// pattern that is neither an index nor -1, with a guard past the last row; the workspace starts poisoned and is reused
// by a second call that must give the same picks. Unsorted picks (TopKArgs::sorted = false): the same picks, in index
// order where the path skips the sort.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/kernels/indexer/indexer.h"
#include "ops/gpu_testing.h"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using namespace dsv4::cuda::testing;

constexpr uint8_t kIdxPoison = 0x5a;  // 0x5a5a5a5a: above every tested n, not -1
constexpr int64_t kGuard = 64;        // int32 slots past rows·k that must stay poisoned

enum class RowKind { kContinuous, kFewValues, kSpecials, kMostlyMasked, kCount };

// One row of n scores (values the precision holds: bf16-rounded in kReference).
void fill_row(Precision prec, std::mt19937_64& rng, RowKind kind, float* s, int64_t n) {
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::uniform_real_distribution<float> u01(0.0f, 1.0f);
    std::uniform_int_distribution<int> level4(0, 3), level16(0, 15);
    const float few[4] = {-1.5f, 0.25f, 2.0f, 2.125f};
    for (int64_t i = 0; i < n; ++i) {
        float v = 0;
        switch (kind) {
            case RowKind::kContinuous:
                v = normal(rng);
                break;
            case RowKind::kFewValues:
                v = few[level4(rng)];
                break;
            case RowKind::kSpecials: {
                const float r = u01(rng);
                v = r < 0.10f ? -INFINITY : r < 0.15f ? NAN : r < 0.17f ? INFINITY : float(level16(rng)) * 0.5f - 4.0f;
                break;
            }
            default: {
                const float r = u01(rng);
                v = r < 0.01f ? normal(rng) : r < 0.03f ? NAN : -INFINITY;
                break;
            }
        }
        s[i] = prec == Precision::kReference ? round_bf16(v) : v;
    }
}

std::vector<float> random_rows(Precision prec, std::mt19937_64& rng, int64_t rows, int64_t n, int salt) {
    std::vector<float> s(size_t(rows * n));
    std::uniform_int_distribution<int64_t> tail(0, n);
    for (int64_t r = 0; r < rows; ++r) {
        const auto kind = RowKind(int((r + salt) % int(RowKind::kCount)));
        float* row = s.data() + r * n;
        fill_row(prec, rng, kind, row, n);
        if ((r + salt) % 3 == 1) std::fill(row + (n - tail(rng)), row + n, -INFINITY);  // a masked tail
    }
    return s;
}

// "first difference at i (row r, slot j): got a want b", or "" when equal.
std::string first_difference(const std::vector<int32_t>& got, const std::vector<int32_t>& want, int64_t k) {
    if (got.size() != want.size()) return "sizes differ";
    size_t diff = 0, first = got.size();
    for (size_t i = 0; i < got.size(); ++i)
        if (got[i] != want[i]) diff++, first = std::min(first, i);
    if (diff == 0) return "";
    return std::to_string(diff) + " differences, first at row " + std::to_string(int64_t(first) / k) + " slot " +
           std::to_string(int64_t(first) % k) + ": got " + std::to_string(got[first]) + " want " +
           std::to_string(want[first]);
}

// sm90_topk_select twice on a workspace that starts poisoned (the second call reuses it as left by the first);
// both calls' outputs must be equal and leave the guard poisoned. Returns the picks [rows, k].
std::vector<int32_t> run_select(Precision prec, const DeviceBuffer& scores, TopKArgs a) {
    const size_t count = size_t(a.rows * a.k);
    auto idx = DeviceBuffer::allocate((count + kGuard) * sizeof(int32_t));
    const size_t ws_bytes = sm90_topk_select_workspace_bytes(a);
    auto ws = DeviceBuffer::allocate(std::max<size_t>(ws_bytes, 16));
    EXPECT_TRUE(idx.is_ok() && ws.is_ok());
    if (!idx.is_ok() || !ws.is_ok()) return {};
    EXPECT_TRUE(ws->fill_bytes(0xa5).is_ok());
    a.scores = scores.data();
    a.idx = idx->as<int32_t>();
    std::vector<int32_t> first;
    for (int call = 0; call < 2; ++call) {
        EXPECT_TRUE(idx->fill_bytes(kIdxPoison).is_ok());
        const Status s = sm90_topk_select(prec, a, ws->data(), ws_bytes, nullptr);
        EXPECT_TRUE(s.is_ok()) << s.to_string();
        auto all = to_host<int32_t>(*idx, count + kGuard);
        const int64_t guard_hit =
            std::count_if(all.begin() + int64_t(count), all.end(), [](int32_t v) { return v != 0x5a5a5a5a; });
        EXPECT_EQ(guard_hit, 0) << "slots past rows·k were written";
        all.resize(count);
        if (call == 0)
            first = std::move(all);
        else
            EXPECT_EQ(first_difference(all, first, a.k), "") << "a second call on the same workspace differs";
    }
    return first;
}

std::vector<int32_t> run_topk(Precision prec, const DeviceBuffer& scores, TopKArgs a) {
    auto idx = poisoned<int32_t>(size_t(a.rows * a.k));
    EXPECT_TRUE(idx.is_ok());
    if (!idx.is_ok()) return {};
    a.scores = scores.data();
    a.idx = idx->as<int32_t>();
    const Status s = sm90_topk(prec, a, nullptr);
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    return to_host<int32_t>(*idx, size_t(a.rows * a.k));
}

// CPU picks; with positions, row t alone over its first min(n, (pos + 1) / ratio) scores.
std::vector<int32_t> run_cpu(Precision prec, const std::vector<float>& s, int64_t rows, int64_t n, int64_t k,
                             const std::vector<int64_t>* positions = nullptr, int64_t ratio = 0) {
    std::vector<int32_t> want(size_t(rows * k), 0x5a5a5a5a);
    if (!positions) {
        const Status st = backend::cpu::topk({prec, &pool()}, {s.data(), rows, n, k, want.data()});
        EXPECT_TRUE(st.is_ok()) << st.to_string();
        return want;
    }
    for (int64_t t = 0; t < rows; ++t) {
        const int64_t visible = std::clamp<int64_t>(((*positions)[size_t(t)] + 1) / ratio, 0, n);
        const Status st = backend::cpu::topk({prec, &pool()}, {s.data() + t * n, 1, visible, k, want.data() + t * k});
        EXPECT_TRUE(st.is_ok()) << st.to_string();
    }
    return want;
}

// Real picks (>= 0) of a case; each test expects some over all its cases (a test that can fail; a single random
// row may hold nothing but -inf and NaN).
int64_t real_picks(const std::vector<int32_t>& picks) {
    return std::count_if(picks.begin(), picks.end(), [](int32_t v) { return v >= 0; });
}

class TopKSelectTest : public ::testing::TestWithParam<Precision> {};

TEST_P(TopKSelectTest, IdenticalToTopkAndCpu) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    constexpr int64_t S = kTopkSelectShortMax;
    const int64_t ns[] = {1, 5, 511, 512, 513, 1024, S, S + 1, 16384, 65536, 262144, kTopkSelectClusterMax + 1};
    const int64_t ks[] = {8, 16, 512, 1024};
    constexpr int64_t kElementBudget = int64_t(2) << 20;  // rows · n per case, 1..64 rows
    int salt = 0;
    int64_t picks = 0;
    for (int64_t n : ns)
        for (int64_t k : ks) {
            const int64_t max_rows = std::clamp<int64_t>(kElementBudget / n, 1, 64);
            const int64_t rows = std::uniform_int_distribution<int64_t>(1, max_rows)(rng);
            SCOPED_TRACE("rows " + std::to_string(rows) + " n " + std::to_string(n) + " k " + std::to_string(k));
            const auto s = random_rows(prec, rng, rows, n, salt++);
            auto ds = act_to_device(prec, s);
            ASSERT_TRUE(ds.is_ok());
            const TopKArgs a{nullptr, rows, n, k, nullptr};
            const auto got = run_select(prec, *ds, a);
            EXPECT_EQ(first_difference(got, run_topk(prec, *ds, a), k), "") << "against sm90_topk";
            EXPECT_EQ(first_difference(got, run_cpu(prec, s, rows, n, k), k), "") << "against cpu::topk";
            picks += real_picks(got);
        }
    EXPECT_GT(picks, 0) << "no case picked a real entry";
}

// The full batch at the largest rows, Flash / Pro top-k, and the test models' k over many rows.
TEST_P(TopKSelectTest, SixtyFourLongRows) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    struct Case {
        int64_t rows, n, k;
    };
    constexpr int64_t S = kTopkSelectShortMax, L = kTopkSelectShortLimit, R = kTopkSelectShortRows;
    // both sides of the row-count switch: S + 1 and L scores at R rows (one-block path) and R - 1 rows (cluster),
    // L + 1 at R rows (cluster)
    const Case cases[] = {{64, 262144, 512}, {64, 65536, 1024}, {64, S, 1024},  {64, S + 1, 8},     {64, 1024, 16},
                          {R, L, 512},       {R - 1, L, 512},   {R, S + 1, 16}, {R - 1, S + 1, 16}, {R, L + 1, 512}};
    int salt = 0;
    int64_t picks = 0;
    for (const Case& c : cases) {
        SCOPED_TRACE("rows " + std::to_string(c.rows) + " n " + std::to_string(c.n) + " k " + std::to_string(c.k));
        const auto s = random_rows(prec, rng, c.rows, c.n, salt++);
        auto ds = act_to_device(prec, s);
        ASSERT_TRUE(ds.is_ok());
        const TopKArgs a{nullptr, c.rows, c.n, c.k, nullptr};
        const auto got = run_select(prec, *ds, a);
        EXPECT_EQ(first_difference(got, run_topk(prec, *ds, a), c.k), "") << "against sm90_topk";
        EXPECT_EQ(first_difference(got, run_cpu(prec, s, c.rows, c.n, c.k), c.k), "") << "against cpu::topk";
        picks += real_picks(got);
    }
    EXPECT_GT(picks, 0) << "no case picked a real entry";
}

// Decode mode: row t reads only its first min(n, (positions[t] + 1) / ratio) scores; the rest of the row is +inf,
// the largest key, so any read past the cut shows up as a pick at or past the visible count.
TEST_P(TopKSelectTest, PositionsCutEachRow) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    constexpr int64_t kRatio = 4;
    const int64_t ns[] = {700, kTopkSelectShortMax, kTopkSelectShortMax + 1, 100000, 262144, kTopkSelectClusterMax + 1};
    const int64_t ks[] = {16, 512, 1024};
    int salt = 0;
    int64_t picks = 0;
    for (int64_t n : ns)
        for (int64_t k : ks) {
            const int64_t rows =
                std::uniform_int_distribution<int64_t>(1, std::clamp<int64_t>((int64_t(2) << 20) / n, 1, 64))(rng);
            SCOPED_TRACE("rows " + std::to_string(rows) + " n " + std::to_string(n) + " k " + std::to_string(k));
            // visible counts: none, one, fewer than k, a partial chunk, all, past the capacity
            std::vector<int64_t> pos(static_cast<size_t>(rows));
            std::uniform_int_distribution<int64_t> any_pos(0, kRatio * n + 100);
            const int64_t fixed[] = {0, 3, 4 * k - 5, 4 * (n / 2) + 1, 4 * n - 1, 4 * n + 77};
            for (int64_t t = 0; t < rows; ++t) pos[size_t(t)] = t < 6 ? fixed[t] : any_pos(rng);
            auto s = random_rows(prec, rng, rows, n, salt++);
            for (int64_t t = 0; t < rows; ++t) {
                const int64_t visible = std::clamp<int64_t>((pos[size_t(t)] + 1) / kRatio, 0, n);
                std::fill(s.begin() + t * n + visible, s.begin() + (t + 1) * n, INFINITY);
            }
            auto ds = act_to_device(prec, s);
            auto dpos = to_device(pos);
            ASSERT_TRUE(ds.is_ok() && dpos.is_ok());
            TopKArgs a{nullptr, rows, n, k, nullptr};
            a.positions = dpos->as<int64_t>();
            a.ratio = kRatio;
            const auto got = run_select(prec, *ds, a);
            EXPECT_EQ(first_difference(got, run_topk(prec, *ds, a), k), "") << "against sm90_topk";
            EXPECT_EQ(first_difference(got, run_cpu(prec, s, rows, n, k, &pos, kRatio), k), "") << "against cpu::topk";
            picks += real_picks(got);
        }
    EXPECT_GT(picks, 0) << "no case picked a real entry";
}

// The three paths forced on the same rows (the automatic choice covers each only on its side of the switches): the
// cluster and chunked paths at row lengths where the other or the one-block path is the default, with and without
// positions, k from 16 to 1024, the cluster shapes from 2 to 8 CTAs.
TEST_P(TopKSelectTest, EveryPathGivesTheSamePicks) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    constexpr int64_t kRatio = 4;
    const int64_t ns[] = {700, kTopkSelectShortMax + 1, 40000, 65536, kTopkSelectClusterMax};
    const int64_t ks[] = {16, 512, 1024};
    const TopKSelectPath paths[] = {TopKSelectPath::kAuto, TopKSelectPath::kCluster, TopKSelectPath::kChunked};
    int salt = 0;
    int64_t picks = 0;
    for (int64_t n : ns)
        for (int64_t k : ks) {
            const int64_t rows =
                std::uniform_int_distribution<int64_t>(1, std::clamp<int64_t>((int64_t(2) << 20) / n, 1, 40))(rng);
            const bool cut = (salt % 2) == 1;
            SCOPED_TRACE("rows " + std::to_string(rows) + " n " + std::to_string(n) + " k " + std::to_string(k) +
                         (cut ? " positions" : ""));
            std::vector<int64_t> pos(static_cast<size_t>(rows));
            std::uniform_int_distribution<int64_t> any_pos(0, kRatio * n + 100);
            for (auto& p : pos) p = any_pos(rng);
            const auto s = random_rows(prec, rng, rows, n, salt++);
            auto ds = act_to_device(prec, s);
            auto dpos = to_device(pos);
            ASSERT_TRUE(ds.is_ok() && dpos.is_ok());
            TopKArgs a{nullptr, rows, n, k, nullptr};
            if (cut) a.positions = dpos->as<int64_t>(), a.ratio = kRatio;
            const auto want = run_topk(prec, *ds, a);
            for (const TopKSelectPath path : paths) {
                a.select_path = path;
                const auto got = run_select(prec, *ds, a);
                EXPECT_EQ(first_difference(got, want, k), "") << "path " << int(path) << " against sm90_topk";
                picks += real_picks(got);
            }
        }
    EXPECT_GT(picks, 0) << "no case picked a real entry";
}

// Zeroed counters (TopKArgs::counters): the chunked path takes its histograms and tickets from them instead of
// clearing its workspace, and leaves them zero, so the next call needs no memset; with them one row past
// kTopkSelectChunkedSingleRowMin takes the chunked path (without them the cluster path). The same picks as sm90_topk
// on two calls in a row (run_select), the counters zero after them.
TEST_P(TopKSelectTest, CountersLeftZeroGiveTheSamePicks) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    struct Case {
        int64_t rows, n;
        TopKSelectPath path;
    };
    const Case cases[] = {{1, kTopkSelectClusterMax, TopKSelectPath::kAuto},
                          {1, kTopkSelectChunkedSingleRowMin + 1000, TopKSelectPath::kAuto},
                          {5, 40000, TopKSelectPath::kChunked}};
    constexpr int64_t k = 512;
    int salt = 0;
    int64_t picks = 0;
    for (const Case& c : cases) {
        SCOPED_TRACE("rows " + std::to_string(c.rows) + " n " + std::to_string(c.n));
        const auto s = random_rows(prec, rng, c.rows, c.n, salt++);
        auto ds = act_to_device(prec, s);
        auto counters = DeviceBuffer::allocate(size_t(c.rows * kTopkSelectCounterWords) * sizeof(unsigned));
        ASSERT_TRUE(ds.is_ok() && counters.is_ok());
        ASSERT_TRUE(counters->fill_bytes(0).is_ok());
        TopKArgs a{nullptr, c.rows, c.n, k, nullptr};
        const auto want = run_topk(prec, *ds, a);
        a.select_path = c.path;
        a.counters = counters->as<unsigned>();
        EXPECT_GT(sm90_topk_select_workspace_bytes(a), 0u) << "not the chunked path";
        const auto got = run_select(prec, *ds, a);
        EXPECT_EQ(first_difference(got, want, k), "");
        const auto left = to_host<uint32_t>(*counters, size_t(c.rows * kTopkSelectCounterWords));
        EXPECT_EQ(std::count_if(left.begin(), left.end(), [](uint32_t v) { return v != 0; }), 0)
            << "counters left non-zero";
        picks += real_picks(got);
    }
    EXPECT_GT(picks, 0);
}

// The unsorted order (TopKArgs::sorted = false) of one row's picks, from its sorted picks: the picks scored above
// the last pick in ascending index, then the last pick's ties in ascending index.
std::vector<int32_t> index_order(const int32_t* sorted, int64_t k, const float* row) {
    int64_t kk = 0;
    while (kk < k && sorted[kk] >= 0) ++kk;
    std::vector<int32_t> out(sorted, sorted + k);
    if (kk == 0) return out;
    const float last = row[sorted[kk - 1]];
    int64_t ties = kk;
    while (ties > 0 && row[sorted[ties - 1]] == last) --ties;
    std::sort(out.begin(), out.begin() + ties);
    std::sort(out.begin() + ties, out.begin() + kk);
    return out;
}

// sorted = false: the same picks, on every path (the one-block path, the cluster path's short rows and the rows it
// splits over its CTAs, the chunked path) in index order without the sort. Rows of continuous scores and of four values
// (ties across the k-th place), no specials: the order's rule is stated on scores. run_select checks that a second call
// gives the same order.
TEST_P(TopKSelectTest, UnsortedPicksComeInIndexOrder) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    constexpr int64_t kRatio = 4;
    const int64_t ns[] = {300, 2048, kTopkSelectShortMax + 1, 65536, kTopkSelectClusterMax};
    const TopKSelectPath paths[] = {TopKSelectPath::kAuto, TopKSelectPath::kCluster, TopKSelectPath::kChunked};
    int64_t in_index_order = 0, split_in_index_order = 0, case_no = 0;
    for (int64_t n : ns)
        for (int64_t k : {int64_t(16), int64_t(512)}) {
            const int64_t rows = std::clamp<int64_t>((int64_t(1) << 20) / n, 2, 12);
            const bool cut = (case_no++ % 2) == 1;
            SCOPED_TRACE("rows " + std::to_string(rows) + " n " + std::to_string(n) + " k " + std::to_string(k) +
                         (cut ? " positions" : ""));
            std::vector<float> s(size_t(rows * n));
            for (int64_t r = 0; r < rows; ++r)
                fill_row(prec, rng, r % 2 ? RowKind::kFewValues : RowKind::kContinuous, s.data() + r * n, n);
            std::vector<int64_t> pos(static_cast<size_t>(rows));
            std::uniform_int_distribution<int64_t> any_pos(0, kRatio * n + 100);
            for (auto& p : pos) p = any_pos(rng);
            auto ds = act_to_device(prec, s);
            auto dpos = to_device(pos);
            ASSERT_TRUE(ds.is_ok() && dpos.is_ok());
            TopKArgs a{nullptr, rows, n, k, nullptr};
            if (cut) a.positions = dpos->as<int64_t>(), a.ratio = kRatio;
            for (const TopKSelectPath path : paths) {
                a.select_path = path;
                a.sorted = true;
                const auto want = run_select(prec, *ds, a);
                a.sorted = false;
                const auto got = run_select(prec, *ds, a);
                ASSERT_EQ(got.size(), want.size());
                for (int64_t r = 0; r < rows; ++r) {
                    const std::vector<int32_t> g(got.begin() + r * k, got.begin() + (r + 1) * k);
                    const std::vector<int32_t> w(want.begin() + r * k, want.begin() + (r + 1) * k);
                    const auto ordered = index_order(w.data(), k, s.data() + r * n);
                    EXPECT_EQ(g, ordered)
                        << "row " << r << ", path " << int(path) << ": not the sorted call's picks in index order";
                    // (rows whose picks are already ascending count as neither)
                    const bool counts = g == ordered && ordered != w;
                    in_index_order += counts;
                    // rows of more visible scores than one CTA takes alone: the cluster path splits them
                    const int64_t visible = cut ? std::clamp<int64_t>((pos[size_t(r)] + 1) / kRatio, 0, n) : n;
                    const bool split = path != TopKSelectPath::kChunked && visible > kTopkSelectShortMax;
                    split_in_index_order += counts && split;
                }
            }
        }
    EXPECT_GT(in_index_order, 0) << "no row came in index order: the unsorted output is not taken";
    EXPECT_GT(split_in_index_order, 0) << "no row the cluster path splits over its CTAs came in index order";
}

// Signed zeros, infinities and NaN only: exactly sm90_topk's order (+0 above -0).
TEST_P(TopKSelectTest, SignedZerosAndInfinitiesLikeTopk) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    const float values[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.0f, -1.0f};
    std::uniform_int_distribution<int> pick(0, 6);
    int64_t picks = 0;
    for (int64_t n : {int64_t(513), kTopkSelectShortMax + 1})
        for (int64_t k : {int64_t(16), int64_t(1024)}) {
            const int64_t rows = 5;
            SCOPED_TRACE("n " + std::to_string(n) + " k " + std::to_string(k));
            std::vector<float> s(size_t(rows * n));
            for (auto& v : s) v = values[pick(rng)];
            auto ds = act_to_device(prec, s);
            ASSERT_TRUE(ds.is_ok());
            const TopKArgs a{nullptr, rows, n, k, nullptr};
            const auto got = run_select(prec, *ds, a);
            EXPECT_EQ(first_difference(got, run_topk(prec, *ds, a), k), "") << "against sm90_topk";
            picks += real_picks(got);
        }
    EXPECT_GT(picks, 0) << "no case picked a real entry";
}

TEST(TopKSelectValidation, ClearErrors) {
    DSV4_REQUIRE_GPU();
    auto buf = DeviceBuffer::allocate(1 << 16);
    ASSERT_TRUE(buf.is_ok());
    const TopKArgs too_many{buf->data(), 1, 4096, 2048, buf->as<int32_t>()};
    Status s = sm90_topk_select(Precision::kReference, too_many, nullptr, 0, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("above the supported 1024"), std::string::npos) << s.message();
    TopKArgs no_ratio{buf->data(), 1, 100, 16, buf->as<int32_t>()};
    no_ratio.positions = buf->as<int64_t>();
    s = sm90_topk_select(Precision::kReference, no_ratio, nullptr, 0, nullptr);
    EXPECT_NE(s.message().find("compression ratio"), std::string::npos) << s.message();
    // the one-block and cluster paths need no workspace; the chunked path (rows past the cluster bound, or forced)
    // names the size it needs
    EXPECT_EQ(sm90_topk_select_workspace_bytes({buf->data(), 8, kTopkSelectShortMax, 512, buf->as<int32_t>()}), 0u);
    EXPECT_EQ(sm90_topk_select_workspace_bytes(
                  {buf->data(), kTopkSelectShortRows - 1, kTopkSelectClusterMax, 512, buf->as<int32_t>()}),
              0u);
    TopKArgs chunked{buf->data(), 3, kTopkSelectShortMax, 512, buf->as<int32_t>()};
    chunked.select_path = TopKSelectPath::kChunked;
    EXPECT_GT(sm90_topk_select_workspace_bytes(chunked), 0u);
    TopKArgs too_long{buf->data(), 1, kTopkSelectClusterMax + 1, 512, buf->as<int32_t>()};
    too_long.select_path = TopKSelectPath::kCluster;
    s = sm90_topk_select(Precision::kReference, too_long, nullptr, 0, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("cluster path takes rows of up to"), std::string::npos) << s.message();
    const TopKArgs long_rows{buf->data(), 2, kTopkSelectClusterMax + 1, 512, buf->as<int32_t>()};
    const size_t need = sm90_topk_select_workspace_bytes(long_rows);
    EXPECT_GT(need, 0u);
    s = sm90_topk_select(Precision::kReference, long_rows, buf->data(), need - 1, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("workspace of " + std::to_string(need) + " bytes"), std::string::npos) << s.message();
}

const auto kPrecisions = ::testing::Values(Precision::kReference, Precision::kF32);
std::string precision_label(const ::testing::TestParamInfo<Precision>& i) { return backend::precision_name(i.param); }
INSTANTIATE_TEST_SUITE_P(Cuda, TopKSelectTest, kPrecisions, precision_label);

}  // namespace
}  // namespace dsv4::cuda
