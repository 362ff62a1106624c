// sm90_topk_select writing the sparse attention's candidate lists itself (TopKArgs::list, a decode step's form)
// against the two launches it replaces: the select's picks into idx, then sm90_attn_index over them. Bit-identical
// lists on every path (one block, cluster, chunked), sorted and unsorted picks, both precisions: decode rows of
// mixed positions (windows not yet full, visible counts below k, rows cut past the capacity), sessions in shuffled
// slots, entry pages in a shuffled table behind an entry base. The lists start poisoned with a guard past the last
// row; scores hold ties and -inf so -1 picks occur.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>

#include "backend/cuda/kernels/glue/glue.h"
#include "backend/cuda/kernels/indexer/indexer.h"
#include "ops/gpu_testing.h"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using namespace dsv4::cuda::testing;

constexpr uint8_t kPoison = 0x5a;  // 0x5a5a5a5a: neither a pool row of these cases nor -1
constexpr int64_t kGuard = 64;     // int32 slots past the lists that must stay poisoned
constexpr int64_t kWindow = 128, kRatio = 4;

struct ListCase {
    int64_t rows = 0, n = 0, k = 0;
    std::vector<int64_t> positions;
    std::vector<int32_t> slots, table;
    int64_t pages_per_session = 0, pass_rows = 0, entry_base = 0;
};

ListCase make_case(std::mt19937_64& rng, int64_t rows, int64_t n, int64_t k) {
    ListCase c;
    c.rows = rows, c.n = n, c.k = k;
    c.pages_per_session = (n + 63) / 64;
    const int64_t sessions = rows + 3;
    c.slots.resize(size_t(sessions));
    std::iota(c.slots.begin(), c.slots.end(), 0);
    std::shuffle(c.slots.begin(), c.slots.end(), rng);
    c.slots.resize(size_t(rows));
    c.table.resize(size_t(sessions * c.pages_per_session));
    std::iota(c.table.begin(), c.table.end(), 0);
    std::shuffle(c.table.begin(), c.table.end(), rng);
    c.pass_rows = rows;
    c.entry_base = c.pass_rows + kWindow * sessions;
    // a window not yet full, a visible count below k, one past the capacity, the rest anywhere
    std::uniform_int_distribution<int64_t> any_pos(0, kRatio * n + 100);
    const int64_t fixed[] = {5, kRatio * (k / 2) + 1, kRatio * n + 40};
    for (int64_t t = 0; t < rows; ++t) c.positions.push_back(t < 3 ? fixed[t] : any_pos(rng));
    return c;
}

// Scores with ties (a few levels) and -inf entries, so the lists hold -1 picks and tie-broken ones.
std::vector<float> make_scores(Precision prec, std::mt19937_64& rng, int64_t rows, int64_t n) {
    std::vector<float> s(size_t(rows * n));
    std::uniform_int_distribution<int> level(0, 40);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    for (size_t i = 0; i < s.size(); ++i) {
        const int l = level(rng);
        const float v = l == 0 ? -INFINITY : l < 20 ? float(l) * 0.25f : normal(rng);
        s[i] = prec == Precision::kReference ? round_bf16(v) : v;
    }
    return s;
}

class TopKSelectListTest : public ::testing::TestWithParam<Precision> {};

TEST_P(TopKSelectListTest, ListsEqualPicksThenAttnIndex) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    const TopKSelectPath paths[] = {TopKSelectPath::kAuto, TopKSelectPath::kCluster, TopKSelectPath::kChunked};
    int64_t entry_values = 0, none_values = 0;
    for (const int64_t n : {int64_t(2048), int64_t(40000)})
        for (const int64_t k : {int64_t(16), int64_t(512)}) {
            const int64_t rows = n > 8192 ? 5 : 9, width = kWindow + k;
            SCOPED_TRACE("rows " + std::to_string(rows) + " n " + std::to_string(n) + " k " + std::to_string(k));
            const ListCase c = make_case(rng, rows, n, k);
            const auto s = make_scores(prec, rng, rows, n);
            auto ds = act_to_device(prec, s);
            auto dpos = to_device(c.positions);
            auto dslots = to_device(c.slots);
            auto dtable = to_device(c.table);
            auto picks = DeviceBuffer::allocate(size_t(rows * k) * 4);
            auto want = DeviceBuffer::allocate(size_t(rows * width + kGuard) * 4);
            auto got = DeviceBuffer::allocate(size_t(rows * width + kGuard) * 4);
            ASSERT_TRUE(ds.is_ok() && dpos.is_ok() && dslots.is_ok() && dtable.is_ok() && picks.is_ok() &&
                        want.is_ok() && got.is_ok());
            AttnIndexArgs ia;
            ia.n = rows, ia.win_cols = kWindow, ia.window = kWindow;
            ia.positions = dpos->as<int64_t>(), ia.decode = true, ia.slots = dslots->as<int32_t>();
            ia.pass_rows = c.pass_rows;
            ia.entries = PagedEntries{c.entry_base, dtable->as<int32_t>(), c.pages_per_session};
            ia.topk = k;
            for (const TopKSelectPath path : paths)
                for (const bool sorted : {true, false}) {
                    SCOPED_TRACE("path " + std::to_string(int(path)) + (sorted ? " sorted" : " unsorted"));
                    TopKArgs a{ds->data(), rows, n, k, picks->as<int32_t>()};
                    a.positions = dpos->as<int64_t>(), a.ratio = kRatio;
                    a.select_path = path, a.sorted = sorted;
                    const size_t ws_bytes = sm90_topk_select_workspace_bytes(a);
                    auto ws = DeviceBuffer::allocate(std::max<size_t>(ws_bytes, 16));
                    ASSERT_TRUE(ws.is_ok());
                    // the two launches
                    ASSERT_TRUE(want->fill_bytes(kPoison).is_ok());
                    Status st = sm90_topk_select(prec, a, ws->data(), ws_bytes, nullptr);
                    ASSERT_TRUE(st.is_ok()) << st.to_string();
                    AttnIndexArgs two = ia;
                    two.idx = want->as<int32_t>(), two.picks = picks->as<int32_t>();
                    st = sm90_attn_index(two, nullptr);
                    ASSERT_TRUE(st.is_ok()) << st.to_string();
                    // the one
                    ASSERT_TRUE(got->fill_bytes(kPoison).is_ok());
                    TopKArgs one = a;
                    one.idx = nullptr;
                    one.list = ia;
                    one.list.idx = got->as<int32_t>();
                    st = sm90_topk_select(prec, one, ws->data(), ws_bytes, nullptr);
                    ASSERT_TRUE(st.is_ok()) << st.to_string();
                    const auto w = to_host<int32_t>(*want, size_t(rows * width + kGuard));
                    const auto g = to_host<int32_t>(*got, size_t(rows * width + kGuard));
                    for (int64_t i = rows * width; i < rows * width + kGuard; ++i)
                        ASSERT_EQ(g[size_t(i)], 0x5a5a5a5a) << "written past the lists at " << i;
                    for (int64_t i = 0; i < rows * width; ++i) {
                        ASSERT_NE(w[size_t(i)], 0x5a5a5a5a) << "sm90_attn_index left " << i << " unwritten";
                        ASSERT_EQ(g[size_t(i)], w[size_t(i)]) << "row " << i / width << " column " << i % width;
                        if (i % width >= kWindow) (w[size_t(i)] >= c.entry_base ? entry_values : none_values)++;
                    }
                }
        }
    EXPECT_GT(entry_values, 0) << "no case listed a compressed entry";
    EXPECT_GT(none_values, 0) << "no case listed a -1 pick";
}

TEST(TopKSelectListValidation, ClearErrors) {
    DSV4_REQUIRE_GPU();
    auto buf = DeviceBuffer::allocate(1 << 16);
    ASSERT_TRUE(buf.is_ok());
    TopKArgs a{buf->data(), 2, 100, 16, nullptr};
    a.positions = buf->as<int64_t>(), a.ratio = kRatio;
    a.list.idx = buf->as<int32_t>(), a.list.n = 2, a.list.topk = 16, a.list.win_cols = kWindow;
    a.list.positions = buf->as<int64_t>(), a.list.slots = buf->as<int32_t>();
    a.list.entries = PagedEntries{0, buf->as<int32_t>(), 2};
    a.list.decode = false;  // a prefill pass's lists: not this launch's
    Status s = sm90_topk_select(Precision::kReference, a, nullptr, 0, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("candidate lists"), std::string::npos) << s.message();
    a.list.decode = true, a.list.topk = 8;  // not the call's k
    s = sm90_topk_select(Precision::kReference, a, nullptr, 0, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    a.list.topk = 16, a.list.idx = nullptr;  // neither output
    s = sm90_topk_select(Precision::kReference, a, nullptr, 0, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("null pointer"), std::string::npos) << s.message();
}

const auto kPrecisions = ::testing::Values(Precision::kReference, Precision::kF32);
std::string precision_label(const ::testing::TestParamInfo<Precision>& i) { return backend::precision_name(i.param); }
INSTANTIATE_TEST_SUITE_P(Cuda, TopKSelectListTest, kPrecisions, precision_label);

}  // namespace
}  // namespace dsv4::cuda
