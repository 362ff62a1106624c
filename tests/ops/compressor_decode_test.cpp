// sm90_compressor_decode_fused against the six-launch sequence it replaces (sm90_compressor_append →
// sm90_compressor_pool and sm90_compressor_finish in batched decode mode → sm90_entry_rows → sm90_kv_pack /
// sm90_key_pack → sm90_compressor_roll, as a decode step runs them), each of which kv_finish_test, kv_store_test
// and the glue tests hold to the CPU reference. Both start from the same state — random open and previous windows
// in a larger slot range, 0xff-poisoned pools with leading non-entry rows, shuffled slots and page tables — and must
// leave the open windows, the previous windows and the pools byte for byte the same: CSA main (ratio 4, 512-d,
// FP8 K=V rows), HCA (ratio 128, 512-d) and indexer keys (ratio 4, 128-d, FP4 rows), both precisions, B = 1, 3, 64
// with closing and open windows mixed, the first window (no previous one), page boundaries and padding rows. The
// fused result is also checked on the host without the sequence: the token rows in the open windows, previous =
// open for closing CSA rows, untouched slots, and exactly the expected pool rows written.
#include "backend/cuda/kernels/compressor_decode/compressor_decode.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

#include "backend/cuda/common/graph.h"
#include "backend/cuda/common/stream.h"
#include "backend/cuda/kernels/glue/glue.h"
#include "backend/cuda/kernels/kv_finish/kv_finish.h"
#include "backend/cuda/kernels/kv_store/kv_store.h"
#include "ops/gpu_testing.h"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using backend::WeightFormat;
using K = backend::CompressedKind;
using namespace dsv4::cuda::testing;

constexpr int64_t kPagesPerSession = 8;  // entries 0..511 per session

enum class Ape { kInScore, kF32, kBF16 };  // where the score's position bias comes from

struct Case {
    Precision precision;
    K kind;
    int64_t ratio, batch;
    Ape ape = Ape::kInScore;  // kF32 / kBF16: given as CompressorDecodeArgs::ape, added by sm90_add_ape in the sequence
};

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
    const Case& c = i.param;
    const std::string kind = c.kind == K::kIndexer ? "IndexerKeys" : c.ratio == 4 ? "CsaMain" : "HcaMain";
    const std::string ape = c.ape == Ape::kF32 ? "_ApeF32" : c.ape == Ape::kBF16 ? "_ApeBF16" : "";
    return std::string(backend::precision_name(c.precision)) + "_" + kind + "_B" + std::to_string(c.batch) + ape;
}

bool closes(int64_t pos, int64_t m) { return pos >= 0 && pos % m == m - 1; }

// B new-token positions (entries < 64·kPagesPerSession): fixed ones first, then random windows half of which close.
std::vector<int64_t> batch_positions(std::mt19937_64& rng, int64_t batch, int64_t m) {
    std::vector<int64_t> fixed;
    if (batch == 1)
        fixed = {2 * m - 1};  // closes the second window (CSA: with the previous one)
    else if (batch == 3)
        fixed = {m - 1, m + 1, 500 * m + m - 1};  // the first window closes (no previous one); open; deep
    else  // first window, open, second window, padding, last entry of page 0, first of page 1, the last entry
        fixed = {m - 1, 0, 2 * m - 1, m, -1, m - 2, 64 * m - 1, 65 * m - 1, 512 * m - 1, -1};
    std::vector<int64_t> pos(static_cast<size_t>(batch));
    std::uniform_int_distribution<int64_t> window(0, 64 * kPagesPerSession - 1), slot(0, m - 2);
    std::bernoulli_distribution close(0.5);
    for (int64_t w = 0; w < batch; ++w)
        pos[size_t(w)] = w < int64_t(fixed.size()) ? fixed[size_t(w)]
                                                   : window(rng) * m + (close(rng) ? m - 1 : slot(rng));
    return pos;
}

// Compares two byte images of `rows` rows; reports the count of differing rows and the first few.
void expect_same_bytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, size_t row_bytes,
                       const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    size_t bad = 0;
    std::string first;
    for (size_t r = 0; r * row_bytes < got.size(); ++r) {
        const size_t o = r * row_bytes;
        if (std::memcmp(got.data() + o, want.data() + o, row_bytes) == 0) continue;
        if (++bad <= 4) {
            size_t b = o;
            while (got[b] == want[b]) ++b;
            first += " row " + std::to_string(r) + " (byte " + std::to_string(b - o) + ": " +
                     std::to_string(got[b]) + " vs " + std::to_string(want[b]) + ")";
        }
    }
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " rows differ from the six-launch sequence's;" << first;
}

bool all_bytes(const uint8_t* p, size_t n, uint8_t v) {
    return std::all_of(p, p + n, [v](uint8_t b) { return b == v; });
}

// One compressor's device state: windows [sessions, m, width] f32 and the pool.
struct DeviceState {
    DeviceBuffer open_kv, open_score, prev_kv, prev_score, pool;
};

struct HostState {
    std::vector<float> open_kv, open_score, prev_kv, prev_score;
    size_t pool_bytes = 0;
};

Result<DeviceState> upload(const HostState& h, bool overlap) {
    DeviceState d;
    DSV4_ASSIGN_OR_RETURN(d.open_kv, to_device(h.open_kv));
    DSV4_ASSIGN_OR_RETURN(d.open_score, to_device(h.open_score));
    if (overlap) {
        DSV4_ASSIGN_OR_RETURN(d.prev_kv, to_device(h.prev_kv));
        DSV4_ASSIGN_OR_RETURN(d.prev_score, to_device(h.prev_score));
    }
    DSV4_ASSIGN_OR_RETURN(d.pool, poisoned<uint8_t>(h.pool_bytes));
    return Result<DeviceState>(std::move(d));
}

template <typename T>
std::vector<T> download(const DeviceBuffer& b, size_t n) {
    return to_host<T>(b, n);
}

class CompressorDecodeFusedTest : public ::testing::TestWithParam<Case> {};

TEST_P(CompressorDecodeFusedTest, SameBytesAsTheSixLaunchSequence) {
    DSV4_REQUIRE_GPU();
    const Case c = GetParam();
    std::mt19937_64 rng(fresh_seed());
    const Precision prec = c.precision;
    const bool main = c.kind == K::kMain, overlap = c.ratio == 4, ref = prec == Precision::kReference;
    const int64_t dim = main ? 512 : 128, width = overlap ? 2 * dim : dim, m = c.ratio, B = c.batch;
    const int64_t sessions = B + 3, window_elems = m * width;
    const int64_t row_bytes = main ? kv_row_bytes(prec) : key_row_bytes(prec);
    // ---- the step: positions, slots (a shuffled part of a larger range), page tables (shuffled physical pages)
    const auto pos = batch_positions(rng, B, m);
    std::vector<int32_t> perm(static_cast<size_t>(sessions));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    const std::vector<int32_t> slots(perm.begin(), perm.begin() + B);
    const int64_t n_close = std::count_if(pos.begin(), pos.end(), [&](int64_t p) { return closes(p, m); });
    ASSERT_GT(n_close, 0);
    if (B > 1) {
        ASSERT_LT(n_close, std::count_if(pos.begin(), pos.end(), [](int64_t p) { return p >= 0; }))
            << "the batch must mix closing and open windows";
    }
    const int64_t phys_pages = sessions * kPagesPerSession + 2;  // two pages nobody owns
    std::vector<int32_t> pages(static_cast<size_t>(phys_pages));
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    const std::vector<int32_t> table(pages.begin(), pages.begin() + sessions * kPagesPerSession);
    const int64_t entry_base = main ? 37 : 0;  // main pools start with pass and ring rows the step must not touch
    const int64_t pool_rows = entry_base + 64 * phys_pages;
    // ---- inputs and the starting state
    std::uniform_real_distribution<float> dkv(-2.0f, 2.0f), dsc(-4.0f, 4.0f);
    auto fill = [&](std::vector<float>& v, size_t n, std::uniform_real_distribution<float>& d) {
        v.resize(n);
        for (auto& x : v) x = d(rng);
    };
    HostState h;
    fill(h.open_kv, size_t(sessions * window_elems), dkv);
    fill(h.open_score, size_t(sessions * window_elems), dsc);
    if (overlap) {
        fill(h.prev_kv, size_t(sessions * window_elems), dkv);
        fill(h.prev_score, size_t(sessions * window_elems), dsc);
    }
    h.pool_bytes = size_t(pool_rows * row_bytes);
    std::vector<float> kv, score;
    fill(kv, size_t(B * width), dkv);
    fill(score, size_t(B * width), dsc);
    // the position bias [m, width]: bf16 values for the bf16 weight, so that both paths read the same numbers
    std::vector<float> ape;
    std::vector<uint16_t> ape_bits;
    if (c.ape != Ape::kInScore) {
        fill(ape, size_t(m * width), dsc);
        if (c.ape == Ape::kBF16) {
            for (auto& v : ape) v = round_bf16(v);
            ape_bits = to_bf16_bits(ape);
        }
    }
    const backend::WeightView ape_view =
        c.ape == Ape::kF32    ? backend::WeightView{WeightFormat::kF32, m, width, ape.data(), nullptr}
        : c.ape == Ape::kBF16 ? backend::WeightView{WeightFormat::kBF16, m, width, ape_bits.data(), nullptr}
                              : backend::WeightView{};
    auto d_ape = c.ape == Ape::kInScore ? Result<DeviceWeight>(DeviceWeight{}) : upload_weight(ape_view, "ape");
    ASSERT_TRUE(d_ape.is_ok()) << d_ape.status().to_string();
    auto w = random_bf16(rng, size_t(dim), 0.5f);
    auto wbits = to_bf16_bits(w);
    backend::WeightView wv{WeightFormat::kBF16, 1, dim, wbits.data(), nullptr};
    auto dw = upload_weight(wv, "compressor.norm");
    auto d_table = to_device(table);
    ASSERT_TRUE(dw.is_ok() && d_table.is_ok());
    const auto freqs = backend::rope_freqs(160000, 16, 65536, 32, 1);
    const PagedEntries entries{entry_base, d_table->as<int32_t>(), kPagesPerSession};

    // ---- the six-launch sequence, on the non-padding rows (append would write outside the window for pos < 0)
    std::vector<int64_t> pos_c;
    std::vector<int32_t> slots_c;
    std::vector<float> kv_c, score_c;
    for (int64_t r = 0; r < B; ++r) {
        if (pos[size_t(r)] < 0) continue;
        pos_c.push_back(pos[size_t(r)]);
        slots_c.push_back(slots[size_t(r)]);
        kv_c.insert(kv_c.end(), kv.begin() + r * width, kv.begin() + (r + 1) * width);
        score_c.insert(score_c.end(), score.begin() + r * width, score.begin() + (r + 1) * width);
    }
    const int64_t n_c = int64_t(pos_c.size());
    auto seq = upload(h, overlap);
    auto d_pos_c = to_device(pos_c);
    auto d_slots_c = to_device(slots_c);
    auto d_kv_c = to_device(kv_c);
    auto d_score_c = to_device(score_c);
    auto d_pooled = act_poisoned(prec, size_t(n_c * dim));
    auto d_entry_rows = poisoned<int32_t>(size_t(n_c));
    ASSERT_TRUE(seq.is_ok() && d_pos_c.is_ok() && d_slots_c.is_ok() && d_kv_c.is_ok() && d_score_c.is_ok() &&
                d_pooled.is_ok() && d_entry_rows.is_ok());
    if (c.ape != Ape::kInScore && n_c > 0)
        DSV4_ASSERT_OK(
            sm90_add_ape({d_score_c->as<float>(), n_c, width, m, d_pos_c->as<int64_t>(), d_ape->view()}, nullptr));
    DSV4_ASSERT_OK(sm90_compressor_append({n_c, d_pos_c->as<int64_t>(), d_slots_c->as<int32_t>(),
                                           d_kv_c->as<float>(), d_score_c->as<float>(), m, width,
                                           seq->open_kv.as<float>(), seq->open_score.as<float>()},
                                          nullptr));
    CompressorPoolArgs pl{seq->open_kv.as<float>(),
                          seq->open_score.as<float>(),
                          overlap ? seq->prev_kv.as<float>() : nullptr,
                          overlap ? seq->prev_score.as<float>() : nullptr,
                          n_c,
                          m,
                          dim,
                          overlap,
                          d_pooled->data()};
    pl.decode_positions = d_pos_c->as<int64_t>();
    pl.slots = d_slots_c->as<int32_t>();
    pl.slot_stride = window_elems;
    DSV4_ASSERT_OK(sm90_compressor_pool(prec, pl, nullptr));
    CompressorFinishArgs fp{d_pooled->data(), n_c, dim, m, 0, c.kind, dw->view(), freqs, 1e-6f, nullptr,
                            d_pooled->data()};
    fp.decode_positions = d_pos_c->as<int64_t>();
    DSV4_ASSERT_OK(sm90_compressor_finish(prec, fp, nullptr));
    EntryRowsArgs er;
    er.rows = d_entry_rows->as<int32_t>();
    er.n = n_c;
    er.decode = true;
    er.positions = d_pos_c->as<int64_t>();
    er.slots = d_slots_c->as<int32_t>();
    er.ratio = m;
    er.entries = entries;
    DSV4_ASSERT_OK(sm90_entry_rows(er, nullptr));
    if (main)
        DSV4_ASSERT_OK(sm90_kv_pack(prec, {d_pooled->data(), n_c, d_entry_rows->as<int32_t>(), 0, seq->pool.data()},
                                    nullptr));
    else
        DSV4_ASSERT_OK(sm90_key_pack(prec, {d_pooled->data(), n_c, d_entry_rows->as<int32_t>(), 0, seq->pool.data()},
                                     nullptr));
    if (overlap)
        DSV4_ASSERT_OK(sm90_compressor_roll({n_c, d_pos_c->as<int64_t>(), d_slots_c->as<int32_t>(), m, width,
                                             seq->open_kv.as<float>(), seq->open_score.as<float>(),
                                             seq->prev_kv.as<float>(), seq->prev_score.as<float>()},
                                            nullptr));

    // ---- the fused kernel on every row, padding included
    auto fused = upload(h, overlap);
    auto d_pos = to_device(pos);
    auto d_slots = to_device(slots);
    auto d_kv = to_device(kv);
    auto d_score = to_device(score);
    ASSERT_TRUE(fused.is_ok() && d_pos.is_ok() && d_slots.is_ok() && d_kv.is_ok() && d_score.is_ok());
    CompressorDecodeArgs a;
    a.n = B;
    a.positions = d_pos->as<int64_t>();
    a.slots = d_slots->as<int32_t>();
    a.kv = d_kv->as<float>();
    a.score = d_score->as<float>();
    if (c.ape != Ape::kInScore) a.ape = d_ape->view();
    a.ratio = m;
    a.head_dim = dim;
    a.overlap = overlap;
    a.kind = c.kind;
    a.open_kv = fused->open_kv.as<float>();
    a.open_score = fused->open_score.as<float>();
    a.prev_kv = overlap ? fused->prev_kv.as<float>() : nullptr;
    a.prev_score = overlap ? fused->prev_score.as<float>() : nullptr;
    a.norm = dw->view();
    a.freqs = freqs;
    a.eps = 1e-6f;
    a.entries = entries;
    a.pool = fused->pool.data();
    DSV4_ASSERT_OK(sm90_compressor_decode_fused(prec, a, nullptr));

    // ---- byte for byte the sequence's state
    const size_t win = size_t(sessions * window_elems), win_row = size_t(window_elems) * sizeof(float);
    const auto f_open_kv = download<uint8_t>(fused->open_kv, win * 4);
    const auto f_open_sc = download<uint8_t>(fused->open_score, win * 4);
    const auto f_pool = download<uint8_t>(fused->pool, h.pool_bytes);
    expect_same_bytes(f_open_kv, download<uint8_t>(seq->open_kv, win * 4), win_row, "open kv windows (per slot)");
    expect_same_bytes(f_open_sc, download<uint8_t>(seq->open_score, win * 4), win_row, "open score windows");
    expect_same_bytes(f_pool, download<uint8_t>(seq->pool, h.pool_bytes), size_t(row_bytes), "pool rows");
    std::vector<uint8_t> f_prev_kv, f_prev_sc;
    if (overlap) {
        f_prev_kv = download<uint8_t>(fused->prev_kv, win * 4);
        f_prev_sc = download<uint8_t>(fused->prev_score, win * 4);
        expect_same_bytes(f_prev_kv, download<uint8_t>(seq->prev_kv, win * 4), win_row, "previous kv windows");
        expect_same_bytes(f_prev_sc, download<uint8_t>(seq->prev_score, win * 4), win_row, "previous score windows");
    }

    // ---- and on the host, without the sequence
    std::vector<bool> slot_used(size_t(sessions), false);
    std::vector<int64_t> want_rows;
    const size_t token_row = size_t(width) * sizeof(float);
    for (int64_t r = 0; r < B; ++r) {
        const int64_t p = pos[size_t(r)];
        if (p < 0) continue;
        const int32_t s = slots[size_t(r)];
        slot_used[size_t(s)] = true;
        const size_t at = (size_t(s) * size_t(m) + size_t(p % m)) * token_row;
        EXPECT_EQ(std::memcmp(f_open_kv.data() + at, kv.data() + r * width, token_row), 0)
            << "row " << r << " (position " << p << "): the token's kv is not in its open window";
        std::vector<float> token_score(score.begin() + r * width, score.begin() + (r + 1) * width);
        if (c.ape != Ape::kInScore)
            for (int64_t ch = 0; ch < width; ++ch) token_score[size_t(ch)] += ape[size_t((p % m) * width + ch)];
        EXPECT_EQ(std::memcmp(f_open_sc.data() + at, token_score.data(), token_row), 0)
            << "row " << r << ": the token's score (+ its ape row) is not in its open window";
        if (!closes(p, m)) continue;
        const int64_t j = p / m;
        want_rows.push_back(entry_base + 64 * int64_t(table[size_t(s * kPagesPerSession + j / 64)]) + j % 64);
        if (overlap) {
            const size_t o = size_t(s) * win_row;
            EXPECT_EQ(std::memcmp(f_prev_kv.data() + o, f_open_kv.data() + o, win_row), 0)
                << "row " << r << " closed its window but the previous kv window is not the closed one";
            EXPECT_EQ(std::memcmp(f_prev_sc.data() + o, f_open_sc.data() + o, win_row), 0)
                << "row " << r << ": previous score window";
        }
    }
    auto as_bytes = [](const std::vector<float>& v) { return reinterpret_cast<const uint8_t*>(v.data()); };
    for (int64_t s = 0; s < sessions; ++s) {
        if (slot_used[size_t(s)]) continue;
        const size_t o = size_t(s) * win_row;
        EXPECT_EQ(std::memcmp(f_open_kv.data() + o, as_bytes(h.open_kv) + o, win_row), 0) << "slot " << s;
        if (overlap) {
            EXPECT_EQ(std::memcmp(f_prev_kv.data() + o, as_bytes(h.prev_kv) + o, win_row), 0) << "slot " << s;
        }
    }
    ASSERT_EQ(int64_t(want_rows.size()), n_close);
    std::sort(want_rows.begin(), want_rows.end());
    ASSERT_TRUE(std::adjacent_find(want_rows.begin(), want_rows.end()) == want_rows.end());
    size_t written = 0, stray = 0;
    for (int64_t row = 0; row < pool_rows; ++row) {
        const bool poison = all_bytes(f_pool.data() + row * row_bytes, size_t(row_bytes), 0xff);
        const bool want = std::binary_search(want_rows.begin(), want_rows.end(), row);
        written += want && !poison;
        stray += !want && !poison;
    }
    EXPECT_EQ(written, want_rows.size()) << "closing rows whose pool row was not written";
    EXPECT_EQ(stray, 0u) << "pool rows written that no closing window owns";
    if (ref && main) {
        for (const int64_t row : want_rows) EXPECT_EQ(f_pool[size_t(row * row_bytes + 455)], 0) << "row " << row;
    }
}

std::vector<Case> all_cases() {
    std::vector<Case> cases;
    for (const Precision p : {Precision::kReference, Precision::kF32})
        for (const int64_t b : {1, 3, 64})
            for (const auto& [kind, ratio] : {std::pair{K::kMain, int64_t(4)}, std::pair{K::kMain, int64_t(128)},
                                              std::pair{K::kIndexer, int64_t(4)}})
                for (const Ape ape : {Ape::kInScore, Ape::kF32, Ape::kBF16})
                    if (ape == Ape::kInScore || (b == 3) == (ape == Ape::kBF16))  // bf16 at B = 3, f32 at 1 and 64
                        cases.push_back({p, kind, ratio, b, ape});
    return cases;
}
INSTANTIATE_TEST_SUITE_P(Cuda, CompressorDecodeFusedTest, ::testing::ValuesIn(all_cases()), case_name);

// The decode step runs the indexer-key compressor right after the main one with independent_of_previous set: in a
// graph with programmatic edges it starts alongside the main compressor and waits for it only at exit
// (common/pdl.cuh). Both compressors of a CSA layer, B = 3 and 64, replayed in such a graph from the same starting
// state as a plain stream run, must leave every window and pool byte for byte as that run.
TEST(CompressorDecodeFusedGraph, IndependentPairInAProgrammaticGraphMatchesTheStream) {
    DSV4_REQUIRE_GPU();
    std::mt19937_64 rng(fresh_seed());
    auto stream = Stream::create();
    DSV4_ASSERT_OK(stream.status());
    const StreamHandle sh = stream->handle();
    const Precision prec = Precision::kReference;
    const auto freqs = backend::rope_freqs(160000, 16, 65536, 32, 1);
    for (const int64_t B : {3, 64}) {
        SCOPED_TRACE("B " + std::to_string(B));
        const int64_t sessions = B + 3, m = 4;
        const auto pos = batch_positions(rng, B, m);
        std::vector<int32_t> slots(static_cast<size_t>(sessions));
        std::iota(slots.begin(), slots.end(), 0);
        std::shuffle(slots.begin(), slots.end(), rng);
        slots.resize(size_t(B));
        std::vector<int32_t> table(size_t(sessions * kPagesPerSession));
        std::iota(table.begin(), table.end(), 0);
        std::shuffle(table.begin(), table.end(), rng);
        auto d_pos = to_device(pos);
        auto d_slots = to_device(slots);
        auto d_table = to_device(table);
        ASSERT_TRUE(d_pos.is_ok() && d_slots.is_ok() && d_table.is_ok());
        std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
        auto random = [&](size_t n) {
            std::vector<float> v(n);
            for (auto& x : v) x = dist(rng);
            return v;
        };
        struct Side {  // one compressor: its shape, inputs, norm weight and starting state
            int64_t dim;
            K kind;
            std::vector<float> kv, score;
            HostState h;
            std::vector<uint16_t> norm_bits;
        };
        Side sides[2] = {{512, K::kMain, {}, {}, {}, {}}, {128, K::kIndexer, {}, {}, {}, {}}};
        std::vector<DeviceBuffer> d_kv, d_score;
        std::vector<DeviceWeight> norms;
        for (Side& sd : sides) {
            const size_t width = size_t(2 * sd.dim), win = size_t(sessions * m) * width;
            sd.kv = random(size_t(B) * width);
            sd.score = random(size_t(B) * width);
            sd.h.open_kv = random(win), sd.h.open_score = random(win);
            sd.h.prev_kv = random(win), sd.h.prev_score = random(win);
            const int64_t row_bytes = sd.kind == K::kMain ? kv_row_bytes(prec) : key_row_bytes(prec);
            sd.h.pool_bytes = size_t(64 * sessions * kPagesPerSession * row_bytes);
            sd.norm_bits = to_bf16_bits(random_bf16(rng, size_t(sd.dim), 0.5f));
            auto kv = to_device(sd.kv);
            auto score = to_device(sd.score);
            auto norm = upload_weight({WeightFormat::kBF16, 1, sd.dim, sd.norm_bits.data(), nullptr}, "norm");
            ASSERT_TRUE(kv.is_ok() && score.is_ok() && norm.is_ok());
            d_kv.push_back(std::move(*kv));
            d_score.push_back(std::move(*score));
            norms.push_back(std::move(*norm));
        }
        auto args = [&](int i, DeviceState& st, bool independent) {
            const Side& sd = sides[i];
            CompressorDecodeArgs a;
            a.n = B;
            a.positions = d_pos->as<int64_t>();
            a.slots = d_slots->as<int32_t>();
            a.kv = d_kv[size_t(i)].as<float>();
            a.score = d_score[size_t(i)].as<float>();
            a.ratio = m;
            a.head_dim = sd.dim;
            a.overlap = true;
            a.kind = sd.kind;
            a.open_kv = st.open_kv.as<float>();
            a.open_score = st.open_score.as<float>();
            a.prev_kv = st.prev_kv.as<float>();
            a.prev_score = st.prev_score.as<float>();
            a.norm = norms[size_t(i)].view();
            a.freqs = freqs;
            a.entries = PagedEntries{0, d_table->as<int32_t>(), kPagesPerSession};
            a.pool = st.pool.data();
            a.independent_of_previous = independent;
            return a;
        };
        auto plain_main = upload(sides[0].h, true), plain_keys = upload(sides[1].h, true);
        auto graph_main = upload(sides[0].h, true), graph_keys = upload(sides[1].h, true);
        ASSERT_TRUE(plain_main.is_ok() && plain_keys.is_ok() && graph_main.is_ok() && graph_keys.is_ok());
        DSV4_ASSERT_OK(sm90_compressor_decode_fused(prec, args(0, *plain_main, false), sh));
        DSV4_ASSERT_OK(sm90_compressor_decode_fused(prec, args(1, *plain_keys, false), sh));
        auto graph = CapturedGraph::capture(sh, [&]() -> Status {
            DSV4_RETURN_IF_ERROR(sm90_compressor_decode_fused(prec, args(0, *graph_main, false), sh));
            return sm90_compressor_decode_fused(prec, args(1, *graph_keys, true), sh);
        });
        DSV4_ASSERT_OK(graph.status());
        EXPECT_EQ(graph->programmatic_edges(), 1u);
        DSV4_ASSERT_OK(graph->launch(sh));
        DSV4_ASSERT_OK(stream->synchronize());
        const std::pair<DeviceState*, DeviceState*> runs[2] = {{&*plain_main, &*graph_main},
                                                               {&*plain_keys, &*graph_keys}};
        for (int i = 0; i < 2; ++i) {
            SCOPED_TRACE(i == 0 ? "main" : "indexer keys");
            const size_t win_bytes = sides[i].h.open_kv.size() * 4, pool = sides[i].h.pool_bytes;
            const DeviceState& want = *runs[i].first;
            const DeviceState& got = *runs[i].second;
            EXPECT_TRUE(download<uint8_t>(got.open_kv, win_bytes) == download<uint8_t>(want.open_kv, win_bytes));
            EXPECT_TRUE(download<uint8_t>(got.open_score, win_bytes) ==
                        download<uint8_t>(want.open_score, win_bytes));
            EXPECT_TRUE(download<uint8_t>(got.prev_kv, win_bytes) == download<uint8_t>(want.prev_kv, win_bytes));
            EXPECT_TRUE(download<uint8_t>(got.pool, pool) == download<uint8_t>(want.pool, pool)) << "pool rows";
        }
    }
}

// The launcher's checks come before any device work, so they run on machines without a GPU too (the pointers are
// never dereferenced): each bad argument is a kInvalidArgument naming what is wrong.
TEST(CompressorDecodeFusedValidation, BadArgumentsAreClearErrors) {
    alignas(16) static float fake[64];
    alignas(16) static int32_t fake_table[4];
    static const uint16_t norm_bits[512] = {};
    CompressorDecodeArgs a;
    a.n = 2;
    a.positions = reinterpret_cast<const int64_t*>(fake);
    a.slots = fake_table;
    a.kv = a.score = fake;
    a.open_kv = a.open_score = a.prev_kv = a.prev_score = fake;
    a.norm = DeviceWeightView{WeightFormat::kBF16, 1, 512, norm_bits, nullptr};
    a.entries = PagedEntries{0, fake_table, 1};
    a.pool = fake;
    auto expect_error = [&](const CompressorDecodeArgs& b, const std::string& words) {
        const Status s = sm90_compressor_decode_fused(Precision::kReference, b, nullptr);
        EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << words;
        EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
    };
    CompressorDecodeArgs b = a;
    b.kind = K::kIndexer;
    expect_error(b, "head_dim must be 512 for main entries and 128 for indexer keys");
    b = a;
    b.prev_kv = nullptr;
    expect_error(b, "overlap (CSA) needs prev_kv/prev_score");
    b = a;
    b.overlap = false;
    expect_error(b, "only for overlap");
    b = a;
    b.norm.cols = 128;
    expect_error(b, "norm weight must be bf16 of length 512");
    b = a;
    b.entries.table = nullptr;
    expect_error(b, "page table");
    b = a;
    b.kv = fake + 1;
    expect_error(b, "16-byte aligned");
    b = a;
    b.pool = reinterpret_cast<uint8_t*>(fake) + 4;
    expect_error(b, "pool must be 8-byte aligned");
    b = a;
    b.ratio = 0;
    expect_error(b, "bad ratio");
    b = a;
    b.slots = nullptr;
    expect_error(b, "null positions");
    b = a;
    b.n = 0;  // nothing to do: no launch, no error
    EXPECT_TRUE(sm90_compressor_decode_fused(Precision::kReference, b, nullptr).is_ok());
}

}  // namespace
}  // namespace dsv4::cuda
