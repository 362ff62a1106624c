// Sampler: logit bias -> penalties -> temperature -> top-k -> top-p -> min-p -> one uniform draw over the kept tokens
// (inverse CDF in a deterministic candidate order). The order of the filters follows Hugging Face / vLLM (temperature
// first), not llama.cpp's default chain (temperature last); docs/chat.md explains the choice.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>

#include "dsv4/sampling.h"

namespace dsv4 {

namespace {

// probs[i] = e^(logits[i] - max_logit) in f32 for the whole vocabulary, logits[i] <= max_logit (-inf allowed: 0).
// One full-vocabulary pass per token, so it is written as straight-line arithmetic that vectorises (this file is
// compiled with -fno-trapping-math so that the selects stay branch-free): range reduction by ln 2 in two parts and
// Cephes' degree-6 polynomial for e^r on |r| <= ln2 / 2, then 2^n through the exponent bits. Checked over every f32
// in [-87, 0] against e^x in double (2026-12-03): relative error <= 8.3e-8, monotone. Arguments below -87
// (e^-87 = 1.6e-38, the bottom of f32's normal range) give 0, which no 53-bit draw can tell from their true value.
// On x86-64 an AVX2 clone sits beside the baseline one (chosen at load by the CPU); other targets (Grace's aarch64)
// build the plain loop, which their compilers vectorise for their own SIMD.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DSV4_SAMPLER_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define DSV4_SAMPLER_CLONES
#endif
DSV4_SAMPLER_CLONES void exp_below_max(const float* __restrict logits, float* __restrict probs, int32_t n,
                                       float max_logit) {
    for (int32_t i = 0; i < n; ++i) {
        const float x = logits[i] - max_logit;
        const float xc = x > -87.0f ? x : -87.0f;
        const float t = xc * 1.44269504088896341f + 12582912.0f;  // + 1.5 * 2^23: rounds to the nearest integer
        const float k = t - 12582912.0f;
        float r = xc - k * 0.693359375f;  // ln 2 = 0.693359375 - 2.12194440e-4 (the first part exact in f32)
        r = r - k * -2.12194440e-4f;
        float p = 1.9875691500e-4f;
        p = p * r + 1.3981999507e-3f;
        p = p * r + 8.3334519073e-3f;
        p = p * r + 4.1665795894e-2f;
        p = p * r + 1.6666665459e-1f;
        p = p * r + 5.0000001201e-1f;
        p = p * r * r + r + 1.0f;
        const float scale = std::bit_cast<float>((static_cast<int32_t>(k) + 127) << 23);  // k in [-126, 0]
        probs[i] = x >= -87.0f ? p * scale : 0.0f;
    }
}

// Σ values in double, eight independent partial sums (a fixed order: the same inputs give the same bits).
double sum_f64(const float* values, size_t n) {
    double z[8] = {};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; ++k) z[k] += static_cast<double>(values[i + k]);
    for (; i < n; ++i) z[0] += static_cast<double>(values[i]);
    return ((z[0] + z[1]) + (z[2] + z[3])) + ((z[4] + z[5]) + (z[6] + z[7]));
}

// The largest of n values (-inf for none above it; NaNs are skipped), eight independent maxima so that the compare
// chain does not serialise.
float max_of(const float* values, int32_t n) {
    float m[8];
    for (float& v : m) v = -std::numeric_limits<float>::infinity();
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; ++k) m[k] = values[i + k] > m[k] ? values[i + k] : m[k];
    for (; i < n; ++i) m[0] = values[i] > m[0] ? values[i] : m[0];
    return std::max({m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7]});
}

uint64_t splitmix64(uint64_t& x) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// Logit gaps below the largest for collect_within, widened until the prefix suffices (e^-8 ≈ 3e-4 of the top
// token's probability: at usual temperatures the whole nucleus is in the first).
constexpr float kPrefixGaps[] = {8.0f, 16.0f, 32.0f, 64.0f, std::numeric_limits<float>::infinity()};

bool finite(float v) { return std::isfinite(v); }

}  // namespace

void Rng::reseed(uint64_t seed) {
    uint64_t x = seed;
    for (auto& word : s_) word = splitmix64(x);
}

uint64_t Rng::next() {
    // xoshiro256** (Blackman & Vigna, prng.di.unimi.it).
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

Status validate(const SamplingParams& p) {
    auto bad = [](const char* field, const char* rule, double v) {
        return invalid_argument(std::string("sampling: ") + field + " must be " + rule + ", got " + std::to_string(v));
    };
    if (!finite(p.temperature) || p.temperature < 0) return bad("temperature", ">= 0", p.temperature);
    if (!finite(p.top_p) || p.top_p <= 0 || p.top_p > 1) return bad("top_p", "in (0, 1]", p.top_p);
    if (!finite(p.min_p) || p.min_p < 0 || p.min_p > 1) return bad("min_p", "in [0, 1]", p.min_p);
    if (!finite(p.repetition_penalty) || p.repetition_penalty <= 0) {
        return bad("repetition_penalty", "> 0", p.repetition_penalty);
    }
    if (!finite(p.presence_penalty)) return bad("presence_penalty", "finite", p.presence_penalty);
    if (!finite(p.frequency_penalty)) return bad("frequency_penalty", "finite", p.frequency_penalty);
    if (p.penalty_last_n < -1) return bad("penalty_last_n", ">= -1", p.penalty_last_n);
    if (p.top_logprobs < 0 || p.top_logprobs > kMaxTopLogprobs) {
        return bad("top_logprobs", "in 0..20", p.top_logprobs);
    }
    if (p.logit_bias.size() > kMaxLogitBias)
        return bad("logit_bias", "at most 1024 entries", double(p.logit_bias.size()));
    for (const TokenBias& b : p.logit_bias) {
        if (b.token < 0) return bad("logit_bias token", ">= 0", b.token);
        if (!finite(b.bias) || b.bias < -100 || b.bias > 100) return bad("logit_bias value", "in [-100, 100]", b.bias);
    }
    return Status::ok();
}

Sampler::Sampler(int32_t vocab_size, const SamplingParams& params)
    : vocab_(vocab_size), params_(params), rng_(params.seed) {
    work_.resize(static_cast<size_t>(vocab_));
    order_.resize(static_cast<size_t>(vocab_));
    probs_.resize(static_cast<size_t>(vocab_));
    counts_.assign(static_cast<size_t>(vocab_), 0);
    touched_.reserve(static_cast<size_t>(vocab_));
}

void Sampler::reset() { rng_.reseed(params_.seed); }

void Sampler::configure(const SamplingParams& params) {
    params_ = params;
    reset();
}

void Sampler::apply_penalties(std::span<const int32_t> history) {
    const SamplingParams& p = params_;
    if (p.penalty_last_n == 0 ||
        (p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f)) {
        return;
    }
    size_t start = 0;
    if (p.penalty_last_n > 0 && history.size() > static_cast<size_t>(p.penalty_last_n)) {
        start = history.size() - static_cast<size_t>(p.penalty_last_n);
    }
    touched_.clear();  // keeps its reserved capacity
    for (size_t i = start; i < history.size(); ++i) {
        int32_t id = history[i];
        if (id < 0 || id >= vocab_) continue;
        if (counts_[id]++ == 0) touched_.push_back(id);
    }
    for (int32_t id : touched_) {
        float l = work_[id];
        if (p.repetition_penalty != 1.0f) l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
        l -= p.frequency_penalty * static_cast<float>(counts_[id]) + p.presence_penalty;
        work_[id] = l;
        counts_[id] = 0;
    }
}

// The tokens whose processed logit is within `gap` of the largest (every token for gap = inf), in id order, into
// order_[0..m); returns m. They are a prefix of the candidate order (logit first), and a short one for the first
// gaps: sorting them instead of the vocabulary is what keeps top-k and top-p cheap.
size_t Sampler::collect_within(float gap, float max_logit) {
    const float floor = max_logit - gap;
    size_t m = 0;
    for (int32_t i = 0; i < vocab_; ++i) {
        order_[m] = i;
        m += work_[i] >= floor ? 1 : 0;
    }
    return m;
}

// Top-n alternatives by processed logit (ties: lower id first), by insertion into a short sorted array.
void Sampler::fill_top_logprobs(double log_z, SampleResult& result) {
    const int n = std::min(params_.top_logprobs, vocab_);
    result.num_top = n;
    if (n == 0) return;
    int filled = 0;
    for (int32_t id = 0; id < vocab_; ++id) {
        float l = work_[id];
        if (filled == n && !(l > result.top[n - 1].logprob)) continue;
        int pos = filled < n ? filled++ : n - 1;
        while (pos > 0 && l > result.top[pos - 1].logprob) {
            result.top[pos] = result.top[pos - 1];
            --pos;
        }
        result.top[pos] = {id, l};
    }
    for (int i = 0; i < n; ++i) result.top[i].logprob = static_cast<float>(result.top[i].logprob - log_z);
}

int32_t Sampler::pick_from_candidates(size_t count, double total) {
    double target = rng_.uniform() * total;
    double cum = 0;
    for (size_t i = 0; i < count; ++i) {
        cum += probs_[order_[i]];
        if (target < cum) return order_[i];
    }
    return order_[count - 1];  // rounding: the draw landed on the upper edge
}

Status Sampler::sample(std::span<const float> logits, std::span<const int32_t> history, SampleResult& result) {
    if (logits.size() != static_cast<size_t>(vocab_)) {
        return invalid_argument("sampling: expected " + std::to_string(vocab_) + " logits, got " +
                                std::to_string(logits.size()));
    }
    const SamplingParams& p = params_;
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    for (int32_t i = 0; i < vocab_; ++i) work_[i] = std::isnan(logits[i]) ? kNegInf : logits[i];
    for (const TokenBias& b : p.logit_bias)
        if (b.token >= 0 && b.token < vocab_) work_[size_t(b.token)] += b.bias;  // ids outside: ignored
    apply_penalties(history);

    const bool greedy = p.temperature <= 0.0f;
    if (!greedy && p.temperature != 1.0f) {
        const float inv_t = 1.0f / p.temperature;
        for (float& l : work_) l *= inv_t;
    }
    // Max (lowest id on ties) and the log partition function of the processed logits.
    const float max_logit = max_of(work_.data(), vocab_);  // never NaN: max_of skips NaNs
    if (max_logit == kNegInf) {
        return invalid_argument("sampling: no token has a finite logit");
    }
    if (max_logit == std::numeric_limits<float>::infinity()) {
        return invalid_argument("sampling: a logit is +infinity");
    }
    const int32_t best = static_cast<int32_t>(std::find(work_.begin(), work_.end(), max_logit) - work_.begin());
    exp_below_max(work_.data(), probs_.data(), vocab_, max_logit);
    const double z = sum_f64(probs_.data(), probs_.size());
    const double log_z = max_logit + std::log(z);

    if (greedy) {
        result.token = best;
    } else {
        // Deterministic total order of candidates: higher logit first, then lower id.
        auto before = [this](int32_t a, int32_t b) { return work_[a] > work_[b] || (work_[a] == work_[b] && a < b); };
        size_t n = static_cast<size_t>(vocab_);
        bool sorted = false;  // order_[0..n) holds the candidates in that order (else: every token, unordered)
        double mass = z;      // probability mass of the candidate set (unnormalised)
        if (p.top_k > 0 && p.top_k < vocab_) {
            // the k best lie in any prefix of the candidate order that holds k tokens
            n = static_cast<size_t>(p.top_k);
            size_t m = 0;
            for (const float gap : kPrefixGaps)
                if ((m = collect_within(gap, max_logit)) >= n) break;
            std::nth_element(order_.begin(), order_.begin() + (n - 1), order_.begin() + m, before);
            std::sort(order_.begin(), order_.begin() + n, before);
            sorted = true;
            mass = 0;
            for (size_t i = 0; i < n; ++i) mass += probs_[order_[i]];
        }
        if (p.top_p < 1.0f) {
            const double limit = static_cast<double>(p.top_p) * mass;
            if (!sorted) {
                // Sort only a prefix of the candidate order that holds top_p of the mass: the nucleus ends in it.
                size_t m = 0;
                for (const float gap : kPrefixGaps) {
                    m = collect_within(gap, max_logit);
                    double cum = 0;
                    for (size_t i = 0; i < m; ++i) cum += probs_[order_[i]];
                    if (cum >= limit) break;
                }
                std::sort(order_.begin(), order_.begin() + m, before);
                n = m;
                sorted = true;
            }
            // Keep token i while the mass before it is below top_p (the token that crosses is kept).
            double cum = 0;
            size_t keep = 0;
            while (keep < n && (keep == 0 || cum < limit)) cum += probs_[order_[keep++]];
            n = keep;
        }
        if (!sorted) std::iota(order_.begin(), order_.end(), 0);
        if (p.min_p > 0.0f) {
            const double threshold = static_cast<double>(p.min_p) * probs_[best];  // probs_[best] == 1
            if (sorted) {
                while (n > 1 && probs_[order_[n - 1]] < threshold) --n;
            } else {
                size_t kept = 0;
                for (size_t i = 0; i < n; ++i) {
                    if (probs_[order_[i]] >= threshold) order_[kept++] = order_[i];
                }
                n = kept;
            }
        }
        double total = 0;
        if (sorted || p.min_p > 0.0f) {
            for (size_t i = 0; i < n; ++i) total += probs_[order_[i]];
        } else {
            total = z;  // every token
        }
        result.token = pick_from_candidates(n, total);
    }
    result.logprob = static_cast<float>(work_[result.token] - log_z);
    fill_top_logprobs(log_z, result);
    return Status::ok();
}

}  // namespace dsv4
