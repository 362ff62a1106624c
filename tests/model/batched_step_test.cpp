// Engine::step runs several sequences in one forward pass. Each sequence must get exactly the logits (and MTP
// logits) it gets alone through Session::feed with the same chunks: the batched ops are row-wise, and everything
// that carries state (window ring, compressors, indexer, index lists, sparse attention) runs per sequence. The
// schedules below mix a long prefill chunk with single-token decodes and make sequences cross the 128-token
// window, the CSA window (4) and the HCA window (128, 256) in the same step, with different contexts per sequence.
//
// Bit-identical is asserted (memcmp) in both precisions, and the f32 rel_l2 bound of 1e-5 is checked as well, so
// a failure says how far off it is. A pass split by a small max_batch_rows changes the chunking of a long item; f32
// is then held to rel_l2 <= 1e-5 (the chunking invariant), reference numerics to its own chunked feed.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>

#include "dsv4/sampling.h"
#include "model_test_util.h"
#include "testing/testing.h"

namespace dsv4::model_tests {
namespace {

struct BatchCase {
    std::string name;    // flash_like, pro_like
    std::string layout;  // official, transformers
    EnginePrecision precision;
};

void PrintTo(const BatchCase& c, std::ostream* os) {
    *os << c.name << "/" << c.layout << "/" << engine_precision_name(c.precision);
}

// Chunk sizes per step of each sequence (0 = not in that step). Positions after each step, e.g. B: 126 → 127
// (decode of position 126) → 128 (position 127 closes HCA window 0 and fills the ring) → 129 → ...
const std::vector<std::vector<int64_t>> kSchedules = {
    {200, 1, 1, 1, 1, 1},    // A: a long prefill chunk, then decodes
    {126, 1, 1, 1, 3, 1},    // B: decodes across the 128-token window and the first HCA window
    {60, 130, 1, 1, 0, 2},   // C: a chunk across 128 while others decode; sits out step 4
    {1, 2, 1, 1, 1, 4},      // D: from position 0, closes CSA windows one token at a time
    {250, 5, 2, 1, 1, 1},    // E: a chunk across 256 (HCA window 1) next to single tokens
    {0, 0, 3, 125, 1, 1},    // F: joins late
};

// Sequence k reads the fixture's tokens rotated by 41·k, so every sequence has its own context.
std::vector<int32_t> sequence_tokens(const std::vector<int32_t>& base, size_t k, int64_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) t[size_t(i)] = base[(size_t(i) + 41 * k) % base.size()];
    return t;
}

class BatchedStep : public ::testing::TestWithParam<BatchCase> {
protected:
    void SetUp() override {
        dir_ = testing::test_data_dir() / "goldens" / GetParam().name;
        ASSERT_TRUE(std::filesystem::exists(dir_ / GetParam().layout / "config.json"))
            << "missing committed fixture " << dir_ / GetParam().layout;
        base_ = read_token_file(dir_ / "tokens.txt");
        ASSERT_GE(base_.size(), 8u);  // shorter fixtures repeat (rotated), which is fine
    }
    std::unique_ptr<Engine> load(int64_t max_batch_rows) {
        EngineOptions o;
        o.precision = GetParam().precision;
        o.threads = kTestThreads;
        o.max_batch_rows = max_batch_rows;
        auto e = Engine::load(dir_ / GetParam().layout, o);
        EXPECT_TRUE(e.is_ok()) << e.status().to_string();
        return e.is_ok() ? std::move(e).value() : nullptr;
    }
    std::unique_ptr<Session> session(Engine& e) {
        SessionOptions so;
        so.max_context = 320;
        so.mtp = e.info().has_mtp;
        auto s = e.create_session(so);
        EXPECT_TRUE(s.is_ok()) << s.status().to_string();
        return s.is_ok() ? std::move(s).value() : nullptr;
    }

    // Runs kSchedules alone (feed) and batched (step); returns the worst f32-style rel_l2 over all outputs and
    // whether every output was bit-identical. last_rows: the batched items of sequences A, C, E ask for their last
    // row only (LogitRows::kLast), which must be the last row of what their own feed gives.
    void run(int64_t max_batch_rows, bool require_identical, bool* identical, double* worst, bool last_rows = false) {
        auto engine = load(max_batch_rows);
        ASSERT_NE(engine, nullptr);
        const size_t nseq = kSchedules.size(), steps = kSchedules[0].size();
        std::vector<std::vector<int32_t>> toks;
        std::vector<std::unique_ptr<Session>> alone, batched;
        for (size_t k = 0; k < nseq; ++k) {
            int64_t total = 0;
            for (int64_t c : kSchedules[k]) total += c;
            toks.push_back(sequence_tokens(base_, k, total));
            alone.push_back(session(*engine));
            batched.push_back(session(*engine));
            ASSERT_TRUE(alone.back() && batched.back());
        }
        *identical = true;
        *worst = 0;
        std::vector<int64_t> off(nseq, 0);
        std::vector<Logits> want(nseq), got(nseq);
        for (size_t step = 0; step < steps; ++step) {
            std::vector<StepItem> items;
            std::vector<size_t> who;
            for (size_t k = 0; k < nseq; ++k) {
                const int64_t c = kSchedules[k][step];
                if (c == 0) continue;
                const std::span<const int32_t> t(toks[k].data() + off[k], size_t(c));
                Status st = alone[k]->feed(t, &want[k]);
                ASSERT_TRUE(st.is_ok()) << st.to_string();
                const bool last = last_rows && k % 2 == 0;
                items.push_back({batched[k].get(), t, &got[k], last ? LogitRows::kLast : LogitRows::kAll});
                who.push_back(k);
            }
            Status st = engine->step(items);
            ASSERT_TRUE(st.is_ok()) << "step " << step << ": " << st.to_string();
            for (size_t k : who) {
                const int64_t c = kSchedules[k][step];
                const bool last = last_rows && k % 2 == 0;
                ASSERT_EQ(got[k].rows, last ? 1 : c);
                ASSERT_EQ(batched[k]->position(), alone[k]->position());
                if (last) keep_last_row(&want[k]);
                ASSERT_EQ(got[k].values.size(), want[k].values.size());
                const bool same = testing::bytes_equal(got[k].values, want[k].values) &&
                                  testing::bytes_equal(got[k].mtp, want[k].mtp);
                *identical &= same;
                const double r = rel_l2(got[k].values, want[k].values);
                *worst = std::max(*worst, std::isnan(r) ? 1.0 : r);
                if (!same && require_identical)
                    ADD_FAILURE() << "sequence " << char('A' + k) << ", step " << step << " (position "
                                  << off[k] << ", " << c << " tokens): logits differ from its own feed, rel_l2 "
                                  << r;
                off[k] += c;
            }
        }
    }

    // Logits of all rows -> the last row only (values and mtp), as LogitRows::kLast returns them.
    static void keep_last_row(Logits* l) {
        const size_t v = size_t(l->vocab), rows = size_t(l->rows);
        l->values.erase(l->values.begin(), l->values.begin() + ptrdiff_t((rows - 1) * v));
        if (!l->mtp.empty()) l->mtp.erase(l->mtp.begin(), l->mtp.begin() + ptrdiff_t((rows - 1) * v));
        l->rows = 1;
    }

    std::filesystem::path dir_;
    std::vector<int32_t> base_;
};

TEST_P(BatchedStep, EverySequenceGetsItsOwnLogitsBitForBit) {
    bool identical = false;
    double worst = 1;
    run(512, true, &identical, &worst);
    EXPECT_TRUE(identical);
    EXPECT_LE(worst, 1e-5);
}

// Half the sequences of each step ask for their last row only: the head skips their other rows (gathered input in
// the pass), and what they get is exactly the last row of their own feed.
TEST_P(BatchedStep, LastRowOnlyIsTheLastRowOfEveryRow) {
    bool identical = false;
    double worst = 1;
    run(512, true, &identical, &worst, true);
    EXPECT_TRUE(identical);
}

// A feed longer than one pass (256 rows) asking for its last row: only the last pass runs the head, on one row; the
// result (and the MTP head's) is the last row of the same feed with every row.
TEST_P(BatchedStep, FeedOfSeveralPassesGivesItsLastRowOnly) {
    auto engine = load(512);
    ASSERT_NE(engine, nullptr);
    auto all = session(*engine), last = session(*engine);
    ASSERT_TRUE(all && last);
    const std::vector<int32_t> t = sequence_tokens(base_, 3, 300);
    Logits want, got;
    ASSERT_TRUE(all->feed(t, &want).is_ok());
    Status st = last->feed(t, &got, LogitRows::kLast);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    ASSERT_EQ(want.rows, 300);
    ASSERT_EQ(got.rows, 1);
    keep_last_row(&want);
    EXPECT_TRUE(testing::bytes_equal(got.values, want.values)) << "rel_l2 " << rel_l2(got.values, want.values);
    EXPECT_TRUE(testing::bytes_equal(got.mtp, want.mtp));
    EXPECT_EQ(got.mtp.size(), engine->info().has_mtp ? got.values.size() : 0u);
    // and the sessions go on identically
    const std::vector<int32_t> next = {t[5]};
    ASSERT_TRUE(all->feed(next, &want).is_ok());
    ASSERT_TRUE(last->feed(next, &got, LogitRows::kLast).is_ok());
    EXPECT_TRUE(testing::bytes_equal(got.values, want.values));
}

// max_batch_rows 64: E's 250-token chunk runs as 64-row pieces while the others wait or join; still exactly what a
// feed of those pieces would give, and in f32 the function of the whole chunk within 1e-5.
// f32 only: in reference numerics a different chunking is a different (equally valid) computation.
class BatchedStepF32 : public BatchedStep {};

TEST_P(BatchedStepF32, PassesSplitByMaxBatchRowsKeepEachSequence) {
    bool identical = false;
    double worst = 1;
    run(64, false, &identical, &worst);
    std::printf("max_batch_rows 64: bit-identical %s, worst rel_l2 %.3g\n", identical ? "yes" : "no", worst);
    EXPECT_LE(worst, 1e-5);
}

TEST_P(BatchedStep, BadItemsChangeNoSession) {
    auto engine = load(512);
    auto other = load(16);
    ASSERT_TRUE(engine && other);
    auto a = session(*engine), b = session(*engine), foreign = session(*other);
    ASSERT_TRUE(a && b && foreign);
    const std::vector<int32_t> t = sequence_tokens(base_, 0, 8);
    const int32_t bad_id = int32_t(engine->info().vocab_size);
    Logits la, lb;
    ASSERT_TRUE(a->feed(std::span<const int32_t>(t.data(), 3), &la).is_ok());
    const std::span<const int32_t> ok(t.data(), 4), empty;
    SamplingParams params, wide;
    wide.top_logprobs = kMaxTopLogprobs + 1;
    SampleResult drawn;
    EngineSample all_rows_draw{&params, 0.5, &drawn}, wide_draw{&wide, 0.5, &drawn}, uniform_one{&params, 1.0, &drawn},
        no_result{&params, 0.5, nullptr};
    const std::vector<std::vector<StepItem>> bad = {
        {{a.get(), ok, &la}, {a.get(), ok, &lb}},                                    // twice
        {{a.get(), ok, &la}, {foreign.get(), ok, &lb}},                              // another engine's
        {{a.get(), ok, &la}, {b.get(), empty, &lb}},                                 // no tokens
        {{a.get(), ok, &la}, {b.get(), std::span<const int32_t>(&bad_id, 1), &lb}},  // id out of range
        {{a.get(), ok, &la}, {nullptr, ok, &lb}},                                    // no session
        {{a.get(), ok, nullptr}},                                                    // no output
        {{a.get(), std::span<const int32_t>(base_.data(), 318), &la}},               // past max_context 320
        {{a.get(), ok, &la, LogitRows::kAll, &all_rows_draw}},                       // a draw without kLast
        {{a.get(), ok, &la, LogitRows::kLast, &wide_draw}},                          // 21 alternatives
        {{a.get(), ok, &la, LogitRows::kLast, &uniform_one}},                        // uniform outside [0, 1)
        {{a.get(), ok, &la, LogitRows::kLast, &no_result}},                          // nowhere to put the draw
    };
    for (size_t i = 0; i < bad.size(); ++i) {
        Status st = engine->step(bad[i]);
        EXPECT_FALSE(st.is_ok()) << "case " << i;
        EXPECT_EQ(a->position(), 3) << "case " << i << ": " << st.to_string();
        EXPECT_EQ(b->position(), 0) << "case " << i;
        EXPECT_EQ(foreign->position(), 0) << "case " << i;
    }
    // and the sessions still work
    const std::vector<StepItem> good = {{a.get(), ok, &la}, {b.get(), ok, &lb}};
    Status st = engine->step(good);
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(a->position(), 7);
    EXPECT_EQ(b->position(), 4);
}

// A draw asked of the CPU backend is declined (token -1) and the feed's last row is filled as without it.
TEST_P(BatchedStep, CpuBackendLeavesTheDrawToTheCaller) {
    auto engine = load(512);
    ASSERT_NE(engine, nullptr);
    auto a = session(*engine), b = session(*engine);
    ASSERT_TRUE(a && b);
    const std::vector<int32_t> t = sequence_tokens(base_, 1, 9);
    SamplingParams params;
    params.top_logprobs = 3;
    SampleResult drawn;
    drawn.token = 12345;
    EngineSample request{&params, 0.25, &drawn};
    Logits with, without;
    const std::vector<StepItem> items = {{a.get(), t, &with, LogitRows::kLast, &request}};
    ASSERT_TRUE(engine->step(items).is_ok());
    ASSERT_TRUE(b->feed(t, &without, LogitRows::kLast).is_ok());
    EXPECT_EQ(drawn.token, -1);
    EXPECT_TRUE(testing::bytes_equal(with.values, without.values));
    drawn.token = 7;
    ASSERT_TRUE(a->feed(std::span<const int32_t>(t.data(), 1), &with, LogitRows::kLast, &request).is_ok());
    EXPECT_EQ(drawn.token, -1);
}

// Eight sequences decoding: one step of eight rows against eight feeds of one row (informational; the weights are
// read once per step instead of eight times).
class BatchedStepTiming : public BatchedStep {};

TEST_P(BatchedStepTiming, DecodeStepTiming) {
    auto engine = load(512);
    ASSERT_NE(engine, nullptr);
    constexpr int kSeqs = 8, kSteps = 16;
    std::vector<std::unique_ptr<Session>> ss;
    std::vector<std::vector<int32_t>> toks;
    std::vector<Logits> outs(kSeqs);
    for (int k = 0; k < kSeqs; ++k) {
        ss.push_back(session(*engine));
        toks.push_back(sequence_tokens(base_, size_t(k), 40 + 2 * kSteps));
        ASSERT_TRUE(ss.back()->feed(std::span<const int32_t>(toks.back().data(), 40), &outs[size_t(k)]).is_ok());
    }
    using clock = std::chrono::steady_clock;
    double feed_s = 0, step_s = 0;
    for (int i = 0; i < kSteps; ++i) {
        auto t0 = clock::now();
        for (int k = 0; k < kSeqs; ++k)
            ASSERT_TRUE(ss[size_t(k)]->feed(std::span<const int32_t>(toks[size_t(k)].data() + 40 + 2 * i, 1),
                                            &outs[size_t(k)]).is_ok());
        auto t1 = clock::now();
        std::vector<StepItem> items;
        for (int k = 0; k < kSeqs; ++k)
            items.push_back({ss[size_t(k)].get(),
                             std::span<const int32_t>(toks[size_t(k)].data() + 41 + 2 * i, 1), &outs[size_t(k)]});
        ASSERT_TRUE(engine->step(items).is_ok());
        auto t2 = clock::now();
        feed_s += std::chrono::duration<double>(t1 - t0).count();
        step_s += std::chrono::duration<double>(t2 - t1).count();
    }
    std::printf("%d sequences decoding: 8 feeds %.2f ms, one step %.2f ms per token each\n", kSeqs,
                1e3 * feed_s / kSteps, 1e3 * step_s / kSteps);
}

// max_batch_rows: 0 takes the backend's default (a 300-token feed runs on it); a negative
// count is refused with a message naming the option.
TEST_P(BatchedStep, ZeroBatchRowsTakesTheDefaultAndNegativeIsRefused) {
    auto engine = load(0);
    ASSERT_NE(engine, nullptr);
    auto s = session(*engine);
    ASSERT_NE(s, nullptr);
    std::vector<int32_t> tokens(300);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = base_[i % base_.size()];
    Logits out;
    const Status fed = s->feed(tokens, &out);
    ASSERT_TRUE(fed.is_ok()) << fed.to_string();
    EXPECT_EQ(out.rows, 300);
    EngineOptions o;
    o.max_batch_rows = -1;
    auto bad = Engine::load(dir_ / GetParam().layout, o);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find("max_batch_rows"), std::string::npos) << bad.status().message();
}

std::string case_name(const ::testing::TestParamInfo<BatchCase>& info) {
    return info.param.name + "_" + info.param.layout + "_" + engine_precision_name(info.param.precision);
}

INSTANTIATE_TEST_SUITE_P(Cases, BatchedStep,
                         ::testing::Values(BatchCase{"flash_like", "official", EnginePrecision::kF32},
                                           BatchCase{"flash_like", "official", EnginePrecision::kReference},
                                           BatchCase{"flash_like", "transformers", EnginePrecision::kReference},
                                           BatchCase{"pro_like", "official", EnginePrecision::kF32},
                                           BatchCase{"pro_like", "official", EnginePrecision::kReference}),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Cases, BatchedStepF32,
                         ::testing::Values(BatchCase{"flash_like", "official", EnginePrecision::kF32},
                                           BatchCase{"pro_like", "official", EnginePrecision::kF32}),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Once, BatchedStepTiming,
                         ::testing::Values(BatchCase{"flash_like", "official", EnginePrecision::kF32}), case_name);

}  // namespace
}  // namespace dsv4::model_tests
