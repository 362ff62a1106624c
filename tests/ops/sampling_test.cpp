// sm90_sample_rows against dsv4::Sampler (the host sampler, src/sampling) on fresh random logits: for every row the
// kernel finishes, the same token, the same alternatives, log-probabilities within f64 rounding; rows it declines
// are exactly those its rule names (the candidates the draw needs past 4,096 tokens or 64 nats). Every row runs on
// clusters of 1, 2 and 8 CTAs (the row split across SMs), with and without penalties over a generated history.
#include "backend/cuda/kernels/sampling/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "dsv4/sampling.h"
#include "ops/gpu_testing.h"

namespace dsv4::cuda {
namespace {

using namespace dsv4::cuda::testing;

// Logits like a language model's: a N(0, 1) background and `planted` tokens 6-16 above it (a peaked head), or the
// background alone scaled by `sigma` (flat: most of the vocabulary within a few nats of the top).
std::vector<float> make_logits(std::mt19937_64& rng, int64_t vocab, int planted, float sigma) {
    std::normal_distribution<float> bg(0.0f, sigma);
    std::vector<float> l(static_cast<size_t>(vocab));
    for (float& x : l) x = bg(rng);
    std::uniform_int_distribution<int64_t> id(0, vocab - 1);
    std::uniform_real_distribution<float> head(6.0f, 16.0f);
    for (int i = 0; i < planted; ++i) l[size_t(id(rng))] = head(rng);
    return l;
}

struct Family {
    const char* name;
    int planted;
    float sigma;
};

struct Row {
    std::vector<float> logits;
    SamplingParams params;
    std::string what;
    std::vector<int32_t> history;  // the penalties' history
};

enum class Decline { kNo, kYes, kEither };

// Whether the kernel must decline the row, by its rule on the host's processed logits: the draw or the alternatives
// need the sorted candidates and the smallest gap (sample_gap) that holds them has more than kSampleMaxCandidates.
// kEither where the gap's mass is within rounding of top_p's limit (the sums' order decides).
Decline expected_decline(const Sampler& host, const SamplingParams& s, int64_t vocab) {
    const bool greedy = s.temperature <= 0.0f;
    const bool top_k_on = !greedy && s.top_k > 0 && s.top_k < vocab, top_p_on = !greedy && s.top_p < 1.0f;
    const int64_t n_top = std::min<int64_t>(s.top_logprobs, vocab);
    if (!top_k_on && !top_p_on && n_top == 0) return Decline::kNo;
    const auto w = host.processed_logits();
    float max_w = -std::numeric_limits<float>::infinity();
    for (float v : w) max_w = std::max(max_w, v);
    double z = 0;
    for (float v : w) z += std::exp(double(v) - double(max_w));
    const int64_t need = std::max<int64_t>(top_k_on ? s.top_k : 0, n_top);
    const bool need_mass = top_p_on && !top_k_on;
    for (int g = 0; g < kSampleGaps; ++g) {
        const float floor = max_w - sample_gap(g);
        int64_t count = 0;
        double mass = 0;
        for (float v : w)
            if (v >= floor) ++count, mass += std::exp(double(v) - double(max_w));
        if (count < need) continue;
        if (need_mass) {
            const double limit = double(s.top_p) * z;
            if (std::fabs(mass - limit) < 1e-6 * z) return Decline::kEither;  // the f32 exps: ~1e-7 each
            if (mass < limit) continue;
        }
        return count > kSampleMaxCandidates ? Decline::kYes : Decline::kNo;
    }
    return Decline::kYes;
}

void expect_matches_host(const std::vector<Row>& rows, int64_t vocab, int* declined) {
    std::vector<float> all;
    std::vector<SampleRowParams> params;
    std::vector<SamplePenalty> penalties;
    std::vector<int32_t> counts(static_cast<size_t>(vocab), 0);
    for (size_t r = 0; r < rows.size(); ++r) {
        all.insert(all.end(), rows[r].logits.begin(), rows[r].logits.end());
        const SamplingParams& s = rows[r].params;
        const size_t first = penalties.size();
        sample_penalty_list(rows[r].history, s, int32_t(vocab), counts, penalties);
        Rng rng(s.seed);
        params.push_back({.row = int64_t(r),
                          .uniform = rng.uniform(),
                          .temperature = s.temperature,
                          .top_k = s.top_k,
                          .top_p = s.top_p,
                          .min_p = s.min_p,
                          .top_logprobs = s.top_logprobs,
                          .repetition_penalty = s.repetition_penalty,
                          .presence_penalty = s.presence_penalty,
                          .frequency_penalty = s.frequency_penalty,
                          .penalty_first = int32_t(first),
                          .penalty_count = int32_t(penalties.size() - first)});
    }
    penalties.push_back({0, 0});  // never empty
    auto dl = to_device(all);
    auto dp = to_device(params);
    auto dpen = to_device(penalties);
    ASSERT_TRUE(dl.is_ok() && dp.is_ok() && dpen.is_ok());
    // clusters of 1, 2 and 8 CTAs with the lists, and of 8 without them (the kernel without the penalty cursor: rows
    // that have a list must come back declined)
    struct Launch {
        int cluster;
        bool lists;
    };
    const Launch launches[] = {{1, true}, {2, true}, {8, true}, {8, false}};
    std::vector<std::vector<SampleRowOut>> got_by_cluster;
    for (const Launch& l : launches) {
        auto dout = poisoned<SampleRowOut>(rows.size());
        ASSERT_TRUE(dout.is_ok());
        DSV4_ASSERT_OK(sm90_sample_rows({.logits = dl->as<float>(),
                                         .vocab = vocab,
                                         .params = dp->as<SampleRowParams>(),
                                         .penalties = l.lists ? dpen->as<SamplePenalty>() : nullptr,
                                         .out = dout->as<SampleRowOut>(),
                                         .n = int64_t(rows.size()),
                                         .cluster = l.cluster},
                                        nullptr));
        got_by_cluster.push_back(to_host<SampleRowOut>(*dout, rows.size()));
    }
    for (size_t r = 0; r < rows.size(); ++r) {
        SCOPED_TRACE(rows[r].what);
        Sampler host(int32_t(vocab), rows[r].params);
        SampleResult want;
        const Status st = host.sample(rows[r].logits, rows[r].history, want);
        const Decline rule = st.is_ok() ? expected_decline(host, rows[r].params, vocab) : Decline::kEither;
        for (size_t c = 0; c < got_by_cluster.size(); ++c) {
            SCOPED_TRACE("cluster of " + std::to_string(launches[c].cluster) + " CTAs" +
                         (launches[c].lists ? "" : ", no penalty lists"));
            const SampleRowOut& got = got_by_cluster[c][r];
            if (!launches[c].lists && params[r].penalty_count > 0) {
                EXPECT_EQ(got.status, kSampleDeclined) << "a penalty list the launch did not pass";
                continue;
            }
            if (!st.is_ok()) {
                EXPECT_TRUE(got.status == kSampleNoFiniteLogit || got.status == kSampleInfiniteLogit)
                    << st.to_string() << " vs status " << got.status;
                continue;
            }
            if (got.status == kSampleDeclined) {
                EXPECT_NE(rule, Decline::kNo) << "declined a row whose candidates fit";
                if (c == 0) ++*declined;
                continue;
            }
            ASSERT_EQ(got.status, kSampleOk);
            EXPECT_NE(rule, Decline::kYes) << "finished a row whose candidates do not fit";
            EXPECT_EQ(got.token, want.token);
            EXPECT_NEAR(got.logprob, want.logprob, 1e-6 * std::max(1.0f, std::fabs(want.logprob)));
            ASSERT_EQ(got.num_top, want.num_top);
            for (int i = 0; i < want.num_top; ++i) {
                EXPECT_EQ(got.top_token[i], want.top[size_t(i)].token) << "alternative " << i;
                EXPECT_NEAR(got.top_logprob[i], want.top[size_t(i)].logprob,
                            1e-6 * std::max(1.0f, std::fabs(want.top[size_t(i)].logprob)));
            }
        }
    }
}

// The parameter sets a chat or an API request uses, each with several seeds (different draws).
std::vector<SamplingParams> parameter_sets(std::mt19937_64& rng) {
    std::vector<SamplingParams> sets;
    auto add = [&](float t, int32_t k, float p, float min_p, int32_t logprobs) {
        SamplingParams s;
        s.temperature = t, s.top_k = k, s.top_p = p, s.min_p = min_p, s.top_logprobs = logprobs;
        s.seed = rng();
        sets.push_back(s);
    };
    add(0.0f, 0, 1.0f, 0.0f, 0);     // greedy
    add(0.0f, 0, 1.0f, 0.0f, 5);     // greedy with alternatives
    add(1.0f, 0, 1.0f, 0.0f, 0);     // the API default: every token in id order
    add(0.7f, 0, 1.0f, 0.05f, 0);    // min-p alone (id order)
    add(0.6f, 0, 0.95f, 0.0f, 0);    // top-p
    add(1.0f, 0, 0.9f, 0.0f, 3);     // top-p with alternatives
    add(0.8f, 40, 1.0f, 0.0f, 0);    // top-k
    add(0.7f, 50, 0.9f, 0.02f, 20);  // all of them
    add(1.3f, 0, 0.99f, 0.0f, 0);    // hot
    add(1.0f, 1, 1.0f, 0.0f, 1);     // top-k of 1
    add(0.8f, 0, 1.0f, 0.0f, 0);     // repetition penalty (below), id order
    sets.back().repetition_penalty = 1.3f;
    add(0.0f, 0, 1.0f, 0.0f, 3);  // greedy with presence and frequency penalties
    sets.back().presence_penalty = 0.7f, sets.back().frequency_penalty = 0.4f;
    add(0.7f, 40, 0.9f, 0.0f, 2);  // every penalty over the last 64 tokens, top-k and top-p
    sets.back().repetition_penalty = 1.1f, sets.back().presence_penalty = -0.5f, sets.back().frequency_penalty = 0.3f;
    sets.back().penalty_last_n = 64;
    return sets;
}

// A generated history for a row: its ten highest tokens several times each (so the penalties move the top), 200
// random tokens, and ids outside the vocabulary (skipped by the penalties).
std::vector<int32_t> make_history(std::mt19937_64& rng, const std::vector<float>& logits) {
    const int32_t vocab = int32_t(logits.size());
    std::vector<int32_t> ids(logits.size());
    for (int32_t i = 0; i < vocab; ++i) ids[size_t(i)] = i;
    const size_t top = std::min<size_t>(10, ids.size());
    std::partial_sort(ids.begin(), ids.begin() + std::ptrdiff_t(top), ids.end(),
                      [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
    std::uniform_int_distribution<int32_t> any(0, vocab - 1);
    std::vector<int32_t> h = {-1, vocab + 5};
    for (size_t i = 0; i < top; ++i)
        for (size_t k = 0; k <= i % 3; ++k) h.push_back(ids[i]);
    for (int i = 0; i < 200; ++i) h.push_back(any(rng));
    std::shuffle(h.begin(), h.end(), rng);
    return h;
}

TEST(CudaSampleRows, MatchesTheHostSampler) {
    DSV4_REQUIRE_GPU();
    std::mt19937_64 rng(fresh_seed());
    const Family families[] = {{"peaked", 40, 1.0f},
                               {"one planted token", 1, 1.0f},
                               {"peaked, wide background", 200, 2.0f},
                               {"flat", 0, 1.0f},
                               {"flat, wide", 0, 4.0f}};
    for (const int64_t vocab : {int64_t(129280), int64_t(1000), int64_t(3001)}) {
        int declined = 0, rows_total = 0;
        for (const Family& f : families) {
            std::vector<Row> rows;
            for (const SamplingParams& base : parameter_sets(rng)) {
                for (int draw = 0; draw < 4; ++draw) {
                    SamplingParams s = base;
                    s.seed = rng();
                    rows.push_back({make_logits(rng, vocab, f.planted, f.sigma), s,
                                    std::string(f.name) + " vocab " + std::to_string(vocab) + " t " +
                                        std::to_string(s.temperature) + " k " + std::to_string(s.top_k) + " p " +
                                        std::to_string(s.top_p) + " min_p " + std::to_string(s.min_p) + " n " +
                                        std::to_string(s.top_logprobs) + " rep " +
                                        std::to_string(s.repetition_penalty)});
                    rows.back().history = make_history(rng, rows.back().logits);
                }
            }
            rows_total += int(rows.size());
            expect_matches_host(rows, vocab, &declined);
        }
        std::printf("vocab %lld: %d of %d rows declined (candidate sets past the limits), the rest as the host\n",
                    static_cast<long long>(vocab), declined, rows_total);
        EXPECT_LT(declined * 2, rows_total) << "the kernel must finish most rows";
    }
}

// Ties at the top (lowest id wins), NaN logits (never chosen), -inf logits, and the two errors.
TEST(CudaSampleRows, TiesNansAndErrors) {
    DSV4_REQUIRE_GPU();
    std::mt19937_64 rng(fresh_seed());
    const int64_t vocab = 129280;
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<Row> rows;
    for (const SamplingParams& s : parameter_sets(rng)) {
        auto tied = make_logits(rng, vocab, 20, 1.0f);
        tied[777] = tied[90000] = tied[5] = 20.0f;  // three tokens share the top
        rows.push_back({tied, s, "tied top"});
        rows.push_back({tied, s, "tied top, two of them penalised", {777, 5, 5}});
        auto holes = make_logits(rng, vocab, 20, 1.0f);
        for (int64_t i = 0; i < vocab; i += 7) holes[size_t(i)] = nan;
        for (int64_t i = 3; i < vocab; i += 11) holes[size_t(i)] = -inf;
        rows.push_back({holes, s, "NaN and -inf logits"});
    }
    SamplingParams greedy;
    greedy.temperature = 0;
    rows.push_back({std::vector<float>(size_t(vocab), -inf), greedy, "no finite logit"});
    rows.push_back({std::vector<float>(size_t(vocab), nan), greedy, "only NaN"});
    auto plus_inf = make_logits(rng, vocab, 3, 1.0f);
    plus_inf[4242] = inf;
    rows.push_back({plus_inf, greedy, "+inf logit"});
    int declined = 0;
    expect_matches_host(rows, vocab, &declined);
}

TEST(CudaSampleRows, RefusesAClusterSizeItDoesNotRun) {
    DSV4_REQUIRE_GPU();
    auto dl = to_device(std::vector<float>(64, 0.0f));
    auto dp = to_device(std::vector<SampleRowParams>(1));
    auto dout = poisoned<SampleRowOut>(1);
    ASSERT_TRUE(dl.is_ok() && dp.is_ok() && dout.is_ok());
    for (const int cluster : {-1, 3, 16}) {
        const Status s = sm90_sample_rows({.logits = dl->as<float>(),
                                           .vocab = 64,
                                           .params = dp->as<SampleRowParams>(),
                                           .out = dout->as<SampleRowOut>(),
                                           .n = 1,
                                           .cluster = cluster},
                                          nullptr);
        EXPECT_FALSE(s.is_ok()) << cluster;
        EXPECT_NE(s.to_string().find("cluster"), std::string::npos) << s.to_string();
    }
}

// A row whose penalty list is longer than the kernel stages is declined (the engine sends such rows to the host).
TEST(CudaSampleRows, DeclinesAPenaltyListLongerThanItStages) {
    DSV4_REQUIRE_GPU();
    const int64_t vocab = 2 * kSampleMaxPenalties;
    std::vector<SamplePenalty> list;
    for (int32_t i = 0; i <= kSampleMaxPenalties; ++i) list.push_back({2 * i, 1});
    std::vector<SampleRowParams> params(2);
    params[0].temperature = params[1].temperature = 0.0f;
    params[0].repetition_penalty = params[1].repetition_penalty = 1.5f;
    params[0].penalty_count = kSampleMaxPenalties + 1;  // declined
    params[1].row = 1, params[1].penalty_count = kSampleMaxPenalties;
    auto dl = to_device(std::vector<float>(size_t(2 * vocab), 1.0f));
    auto dp = to_device(params);
    auto dpen = to_device(list);
    auto dout = poisoned<SampleRowOut>(2);
    ASSERT_TRUE(dl.is_ok() && dp.is_ok() && dpen.is_ok() && dout.is_ok());
    DSV4_ASSERT_OK(sm90_sample_rows({.logits = dl->as<float>(),
                                     .vocab = vocab,
                                     .params = dp->as<SampleRowParams>(),
                                     .penalties = dpen->as<SamplePenalty>(),
                                     .out = dout->as<SampleRowOut>(),
                                     .n = 2},
                                    nullptr));
    const auto got = to_host<SampleRowOut>(*dout, 2);
    EXPECT_EQ(got[0].status, kSampleDeclined);
    ASSERT_EQ(got[1].status, kSampleOk);
    EXPECT_EQ(got[1].token, 1);  // every even token up to 8,190 penalised (1 -> 1/1.5): the first odd one wins
}

// The penalty list (host code, no GPU needed) against the host sampler: applying it to the logits as the kernel does
// gives the sampler's processed logits bit for bit, for every window; ids outside the vocabulary are skipped, the
// list is ascending and appended, the scratch left zero, and nothing is listed when the penalties are off.
TEST(SamplePenaltyList, IsWhatTheHostSamplerPenalises) {
    std::mt19937_64 rng(fresh_seed());
    const int32_t vocab = 3001;
    const std::vector<float> logits = make_logits(rng, vocab, 20, 2.0f);
    std::vector<int32_t> history = make_history(rng, logits);
    history.insert(history.begin() + 3, {vocab, -7, 42, 42, 42});
    std::vector<int32_t> counts(static_cast<size_t>(vocab), 0);
    for (const int32_t last_n : {-1, 0, 1, 17, 100000}) {
        SamplingParams p;
        p.temperature = 0;
        p.repetition_penalty = 1.25f, p.presence_penalty = 0.3f, p.frequency_penalty = -0.7f;
        p.penalty_last_n = last_n;
        SCOPED_TRACE("penalty_last_n " + std::to_string(last_n));
        std::vector<SamplePenalty> list = {{-1, -1}};  // appended after what is there
        sample_penalty_list(history, p, vocab, counts, list);
        ASSERT_GE(list.size(), 1u);
        EXPECT_EQ(list[0].token, -1);
        EXPECT_TRUE(std::all_of(counts.begin(), counts.end(), [](int32_t c) { return c == 0; }));
        if (last_n == 0) {
            EXPECT_EQ(list.size(), 1u);
        }
        std::vector<float> mine = logits;
        for (size_t i = 1; i < list.size(); ++i) {
            if (i > 1) {
                EXPECT_LT(list[i - 1].token, list[i].token) << "ascending, distinct";
            }
            ASSERT_TRUE(list[i].token >= 0 && list[i].token < vocab);
            ASSERT_GT(list[i].count, 0);
            float& l = mine[size_t(list[i].token)];
            l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
            l -= p.frequency_penalty * float(list[i].count) + p.presence_penalty;
        }
        Sampler host(vocab, p);
        SampleResult r;
        ASSERT_TRUE(host.sample(logits, history, r).is_ok());
        const auto want = host.processed_logits();
        ASSERT_EQ(want.size(), mine.size());
        EXPECT_EQ(std::memcmp(want.data(), mine.data(), mine.size() * sizeof(float)), 0);
    }
    SamplingParams off;
    std::vector<SamplePenalty> none;
    sample_penalty_list(history, off, vocab, counts, none);
    EXPECT_TRUE(none.empty()) << "no penalty, no list";
}

}  // namespace
}  // namespace dsv4::cuda
