// Sampler: distributions checked by chi-square against probabilities computed here independently, exact penalty
// arithmetic, determinism per seed, logprobs, and no allocation per token at the V4 vocabulary size.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <numeric>
#include <random>

#include "dsv4/sampling.h"

#pragma GCC diagnostic ignored "-Wmismatched-new-delete"  // the replaced new/delete pair is malloc/free

// Counts every allocation in this test binary, so a test can prove that sample() does not allocate.
static std::atomic<long> g_allocations{0};
void* operator new(std::size_t n) {
    ++g_allocations;
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace dsv4 {
namespace {

constexpr int kDraws = 200000;

std::vector<float> log_probs(const std::vector<double>& p) {
    std::vector<float> l;
    for (double v : p) l.push_back(static_cast<float>(std::log(v)));
    return l;
}

std::vector<int> histogram(const std::vector<float>& logits, SamplingParams params, int draws = kDraws) {
    Sampler sampler(static_cast<int32_t>(logits.size()), params);
    std::vector<int> counts(logits.size(), 0);
    SampleResult r;
    for (int i = 0; i < draws; ++i) {
        EXPECT_TRUE(sampler.sample(logits, {}, r).is_ok());
        counts[r.token]++;
    }
    return counts;
}

// Pearson chi-square of observed counts against expected probabilities. Tokens with expected probability 0 must
// never be drawn. The bound 30 is above the 0.9999 quantile for up to 6 degrees of freedom (27.9), so a correct
// sampler fails it with probability < 1e-4, while moving one token across a filter boundary adds thousands.
void expect_distribution(const std::vector<int>& counts, const std::vector<double>& expected, const char* what) {
    double total_p = std::accumulate(expected.begin(), expected.end(), 0.0);
    int n = std::accumulate(counts.begin(), counts.end(), 0);
    double chi2 = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
        double e = expected[i] / total_p * n;
        if (expected[i] == 0) {
            EXPECT_EQ(counts[i], 0) << what << ": token " << i << " must be filtered out";
            continue;
        }
        chi2 += (counts[i] - e) * (counts[i] - e) / e;
    }
    EXPECT_LT(chi2, 30.0) << what;
}

const std::vector<double> kP = {0.5, 0.3, 0.15, 0.05};

TEST(Sampler, PlainSamplingMatchesSoftmax) {
    SamplingParams p;
    p.seed = 11;
    expect_distribution(histogram(log_probs(kP), p), kP, "temperature 1");
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
    SamplingParams p;
    p.seed = 12;
    p.temperature = 0.5f;  // p^2
    expect_distribution(histogram(log_probs(kP), p), {0.25, 0.09, 0.0225, 0.0025}, "T=0.5");
    p.temperature = 2.0f;  // sqrt(p)
    expect_distribution(histogram(log_probs(kP), p),
                        {std::sqrt(0.5), std::sqrt(0.3), std::sqrt(0.15), std::sqrt(0.05)}, "T=2");
}

TEST(Sampler, TopKKeepsExactlyK) {
    SamplingParams p;
    p.seed = 13;
    p.top_k = 3;
    expect_distribution(histogram(log_probs(kP), p), {0.5, 0.3, 0.15, 0}, "top_k=3");
    p.top_k = 1;
    expect_distribution(histogram(log_probs(kP), p), {1, 0, 0, 0}, "top_k=1");
}

TEST(Sampler, TopPKeepsTheTokenThatCrosses) {
    SamplingParams p;
    p.seed = 14;
    p.top_p = 0.45f;  // 0.5 alone reaches it
    expect_distribution(histogram(log_probs(kP), p), {1, 0, 0, 0}, "top_p=0.45");
    p.top_p = 0.79f;  // 0.5 < 0.79 -> keep the 0.3 token; 0.8 >= 0.79 -> stop
    expect_distribution(histogram(log_probs(kP), p), {0.5, 0.3, 0, 0}, "top_p=0.79");
    p.top_p = 0.81f;
    expect_distribution(histogram(log_probs(kP), p), {0.5, 0.3, 0.15, 0}, "top_p=0.81");
}

TEST(Sampler, TopPAppliesToTheTemperatureScaledDistribution) {
    SamplingParams p;
    p.seed = 15;
    p.temperature = 0.5f;  // probabilities 0.25 : 0.09 : 0.0225 : 0.0025 -> 0.6906, 0.2486, 0.0622, 0.0069
    p.top_p = 0.93f;       // 0.6906 + 0.2486 = 0.9392 >= 0.93: two tokens
    expect_distribution(histogram(log_probs(kP), p), {0.25, 0.09, 0, 0}, "T=0.5 top_p=0.93");
}

TEST(Sampler, MinPThresholdIsRelativeToTheMaximum) {
    SamplingParams p;
    p.seed = 16;
    p.min_p = 0.29f;  // threshold 0.145: keeps 0.15
    expect_distribution(histogram(log_probs(kP), p), {0.5, 0.3, 0.15, 0}, "min_p=0.29");
    p.min_p = 0.31f;  // threshold 0.155: drops 0.15
    expect_distribution(histogram(log_probs(kP), p), {0.5, 0.3, 0, 0}, "min_p=0.31");
}

TEST(Sampler, FiltersCompose) {
    SamplingParams p;
    p.seed = 17;
    std::vector<double> probs = {0.3, 0.25, 0.2, 0.12, 0.08, 0.05};
    p.top_k = 5;    // drops 0.05; renormalised mass 0.95
    p.top_p = 0.8f;  // 0.8 * 0.95 = 0.76: 0.3 + 0.25 + 0.2 = 0.75 < 0.76 -> keep 0.12 too
    expect_distribution(histogram(log_probs(probs), p), {0.3, 0.25, 0.2, 0.12, 0, 0}, "top_k=5 top_p=0.8");
    p.min_p = 0.5f;  // threshold 0.15: drops 0.12
    expect_distribution(histogram(log_probs(probs), p), {0.3, 0.25, 0.2, 0, 0, 0}, "+min_p=0.5");
}

TEST(Sampler, GreedyTakesArgmaxWithLowestIdOnTies) {
    SamplingParams p;
    p.temperature = 0;
    Sampler s(5, p);
    SampleResult r;
    ASSERT_TRUE(s.sample(std::vector<float>{0.1f, 2.0f, -1.0f, 2.0f, 1.0f}, {}, r).is_ok());
    EXPECT_EQ(r.token, 1);
}

TEST(Sampler, PenaltiesHaveTheirExactEffect) {
    SamplingParams p;
    p.temperature = 0;
    p.repetition_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    Sampler s(5, p);
    SampleResult r;
    std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, 0.0f};
    std::vector<int32_t> history = {0, 0, 1, 3, 99, -5};  // out-of-vocabulary ids are ignored
    ASSERT_TRUE(s.sample(logits, history, r).is_ok());
    auto w = s.processed_logits();
    EXPECT_EQ(w[0], 2.0f / 2 - 0.5f * 2 - 0.25f);   // positive: divided, count 2
    EXPECT_EQ(w[1], -1.0f * 2 - 0.5f * 1 - 0.25f);  // negative: multiplied
    EXPECT_EQ(w[2], 0.5f);                          // unseen: unchanged
    EXPECT_EQ(w[3], 3.0f / 2 - 0.5f - 0.25f);
    EXPECT_EQ(w[4], 0.0f);
    EXPECT_EQ(r.token, 3);

    p.penalty_last_n = 2;  // only the last two history entries (99, -5) count: nothing changes
    Sampler windowed(5, p);
    ASSERT_TRUE(windowed.sample(logits, history, r).is_ok());
    EXPECT_EQ(windowed.processed_logits()[0], 2.0f);
    // A second call sees fresh counts (the count buffer is cleared between calls).
    ASSERT_TRUE(s.sample(logits, std::vector<int32_t>{2}, r).is_ok());
    EXPECT_EQ(s.processed_logits()[0], 2.0f);
    EXPECT_EQ(s.processed_logits()[2], 0.5f / 2 - 0.5f - 0.25f);
}

TEST(Sampler, SameSeedSameTokensAndResetRestarts) {
    std::mt19937 gen(5);
    std::normal_distribution<float> nd(0, 2);
    std::vector<float> logits(1000);
    for (float& l : logits) l = nd(gen);
    SamplingParams p;
    p.seed = 1234;
    p.top_p = 0.95f;
    auto run = [&](Sampler& s) {
        std::vector<int32_t> tokens;
        SampleResult r;
        for (int i = 0; i < 200; ++i) {
            EXPECT_TRUE(s.sample(logits, tokens, r).is_ok());
            tokens.push_back(r.token);
        }
        return tokens;
    };
    Sampler a(1000, p), b(1000, p);
    auto ta = run(a);
    EXPECT_EQ(ta, run(b));
    a.reset();
    EXPECT_EQ(ta, run(a));
    p.seed = 1235;
    Sampler c(1000, p);
    EXPECT_NE(ta, run(c));
}

TEST(Sampler, RngIsUniform) {
    Rng rng(42);
    std::vector<int> bins(10, 0);
    for (int i = 0; i < kDraws; ++i) {
        double u = rng.uniform();
        ASSERT_GE(u, 0.0);
        ASSERT_LT(u, 1.0);
        bins[static_cast<int>(u * 10)]++;
    }
    expect_distribution(bins, std::vector<double>(10, 0.1), "uniform deciles");
}

TEST(Sampler, LogprobsAreLogSoftmaxOfProcessedLogits) {
    SamplingParams p;
    p.seed = 3;
    p.temperature = 0.7f;
    p.top_k = 2;  // truncation does not change the reported distribution
    p.top_logprobs = 3;
    std::vector<float> logits = {1.0f, 3.0f, 3.0f, -2.0f, 0.5f};
    Sampler s(5, p);
    SampleResult r;
    ASSERT_TRUE(s.sample(logits, {}, r).is_ok());
    double z = 0;
    for (float l : logits) z += std::exp(l / 0.7);
    auto expected = [&](int id) { return logits[id] / 0.7 - std::log(z); };
    ASSERT_EQ(r.num_top, 3);
    EXPECT_EQ(r.top[0].token, 1);  // tie with 2: lower id first
    EXPECT_EQ(r.top[1].token, 2);
    EXPECT_EQ(r.top[2].token, 0);
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(r.top[i].logprob, expected(r.top[i].token), 1e-5);
    EXPECT_TRUE(r.token == 1 || r.token == 2);
    EXPECT_NEAR(r.logprob, expected(r.token), 1e-5);
}

TEST(Sampler, LogitBiasIsAddedBeforeThePenalties) {
    SamplingParams p;
    p.temperature = 0;
    p.repetition_penalty = 2.0f;
    p.logit_bias = {{4, 100.0f}, {3, -100.0f}, {1, 1.5f}, {7, 50.0f}, {-2, 50.0f}};  // ids 7 and -2: outside, ignored
    Sampler s(5, p);
    SampleResult r;
    const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, 0.0f};
    ASSERT_TRUE(s.sample(logits, std::vector<int32_t>{1}, r).is_ok());
    auto w = s.processed_logits();
    EXPECT_EQ(w[0], 2.0f);
    EXPECT_EQ(w[1], (-1.0f + 1.5f) / 2);  // biased to 0.5, then (positive) divided by the penalty
    EXPECT_EQ(w[2], 0.5f);
    EXPECT_EQ(w[3], 3.0f - 100.0f);
    EXPECT_EQ(w[4], 100.0f);
    EXPECT_EQ(r.token, 4);  // forced: the unbiased argmax was 3
    // logprobs describe the biased distribution
    double z = 0;
    for (float v : w) z += std::exp(double(v) - 100.0);
    EXPECT_NEAR(r.logprob, -std::log(z), 1e-6);

    // sampled, not greedy: the banned argmax is never drawn, the forced token nearly always
    p.temperature = 1;
    p.repetition_penalty = 1;
    p.logit_bias = {{0, -100.0f}};
    const auto counts = histogram(log_probs(kP), p, 20000);
    EXPECT_EQ(counts[0], 0);
    std::vector<double> without_0 = kP;
    without_0[0] = 0;
    expect_distribution(counts, without_0, "token 0 banned");
}

TEST(Sampler, RejectsBadInputs) {
    SamplingParams p;
    EXPECT_TRUE(validate(p).is_ok());
    p.top_p = 0;
    EXPECT_FALSE(validate(p).is_ok());
    p = {};
    p.temperature = -1;
    EXPECT_FALSE(validate(p).is_ok());
    p = {};
    p.top_logprobs = 21;
    EXPECT_FALSE(validate(p).is_ok());
    p = {};
    p.logit_bias = {{5, 100.0f}, {6, -100.0f}};
    EXPECT_TRUE(validate(p).is_ok());
    p.logit_bias = {{5, 100.5f}};
    EXPECT_FALSE(validate(p).is_ok());
    p.logit_bias = {{5, NAN}};
    EXPECT_FALSE(validate(p).is_ok());
    p.logit_bias = {{-1, 1.0f}};
    EXPECT_FALSE(validate(p).is_ok());
    p.logit_bias.assign(kMaxLogitBias + 1, TokenBias{1, 1.0f});
    EXPECT_FALSE(validate(p).is_ok());
    p = {};
    Sampler s(4, p);
    SampleResult r;
    EXPECT_FALSE(s.sample(std::vector<float>(3, 0.f), {}, r).is_ok());
    EXPECT_FALSE(s.sample(std::vector<float>(4, -INFINITY), {}, r).is_ok());
}

// V4 vocabulary: the chosen token lies in the nucleus computed here by a full sort; no allocation per token.
TEST(Sampler, FullVocabularyNoAllocationAndNucleusMembership) {
    constexpr int32_t kVocab = 129280;
    std::mt19937 gen(9);
    std::normal_distribution<float> nd(0, 3);
    std::vector<float> logits(kVocab);
    for (float& l : logits) l = nd(gen);
    SamplingParams p;
    p.seed = 77;
    p.temperature = 0.8f;
    p.top_p = 0.9f;
    p.min_p = 0.01f;
    p.repetition_penalty = 1.1f;
    p.frequency_penalty = 0.2f;
    p.presence_penalty = 0.1f;
    p.top_logprobs = 5;
    std::vector<int32_t> history(4096);
    for (auto& h : history) h = static_cast<int32_t>(gen() % kVocab);
    Sampler s(kVocab, p);
    SampleResult r;

    // Nucleus by full sort of the processed logits.
    ASSERT_TRUE(s.sample(logits, history, r).is_ok());
    std::vector<float> w(s.processed_logits().begin(), s.processed_logits().end());
    std::vector<int32_t> ids(kVocab);
    std::iota(ids.begin(), ids.end(), 0);
    std::sort(ids.begin(), ids.end(), [&](int a, int b) { return w[a] > w[b] || (w[a] == w[b] && a < b); });
    double z = 0;
    for (float l : w) z += std::exp(static_cast<double>(l) - w[ids[0]]);
    std::vector<bool> in_nucleus(kVocab, false);
    double cum = 0;
    for (size_t i = 0; i < ids.size() && (i == 0 || cum < 0.9 * z); ++i) {
        double pr = std::exp(static_cast<double>(w[ids[i]]) - w[ids[0]]);
        if (pr >= 0.01) in_nucleus[ids[i]] = true;
        cum += pr;
    }
    EXPECT_TRUE(in_nucleus[r.token]);

    const long before = g_allocations.load();
    const auto t0 = std::chrono::steady_clock::now();
    constexpr int kCalls = 50;
    for (int i = 0; i < kCalls; ++i) {
        ASSERT_TRUE(s.sample(logits, history, r).is_ok());
        EXPECT_TRUE(in_nucleus[r.token]);
    }
    const auto t1 = std::chrono::steady_clock::now();
    EXPECT_EQ(g_allocations.load() - before, 0) << "sample() allocated";
    std::printf("sample() at vocab %d (penalties over 4096, top_p 0.9, min_p, 5 logprobs): %.3f ms per token\n",
                kVocab, std::chrono::duration<double, std::milli>(t1 - t0).count() / kCalls);
}

// top-p and top-k sort only the tokens within a logit gap of the largest (8 nats, then 16, 32, 64, any): here the
// first gap holds the top token alone (the other six sit 9 nats down, e^-9 = 1.2e-4 of it each), so both filters
// must widen it. top_p 0.99999 needs all six (the mass before the sixth is still below the bar), so each must be
// drawn at its rate; top_k 4 keeps the top token and the three lowest ids of the tied tail, never the others.
TEST(Sampler, CandidatePrefixWidensBeyondTheFirstGap) {
    std::vector<float> logits(7, -9.0f);
    logits[0] = 0.0f;
    std::vector<double> want(7, std::exp(-9.0));
    want[0] = 1.0;
    SamplingParams p;
    p.top_p = 0.99999f;
    expect_distribution(histogram(logits, p, 2000000), want, "top_p past the first gap");

    SamplingParams k;
    k.top_k = 4;
    std::vector<double> want_k = want;
    want_k[4] = want_k[5] = want_k[6] = 0.0;
    expect_distribution(histogram(logits, k, 2000000), want_k, "top_k past the first gap");
}

}  // namespace
}  // namespace dsv4
