// Sampler: penalties -> temperature -> top-k -> top-p -> min-p -> one uniform draw over the kept tokens (inverse
// CDF in a deterministic candidate order). The order of the filters follows Hugging Face / vLLM (temperature
// first), not llama.cpp's default chain (temperature last); docs/chat.md explains the choice.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "dsv4/sampling.h"

namespace dsv4 {

namespace {

uint64_t splitmix64(uint64_t& x) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

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
    apply_penalties(history);

    const bool greedy = p.temperature <= 0.0f;
    if (!greedy && p.temperature != 1.0f) {
        const float inv_t = 1.0f / p.temperature;
        for (float& l : work_) l *= inv_t;
    }
    // Max (lowest id on ties) and the log partition function of the processed logits.
    int32_t best = 0;
    for (int32_t i = 1; i < vocab_; ++i) {
        if (work_[i] > work_[best]) best = i;
    }
    const float max_logit = work_[best];
    if (max_logit == kNegInf || std::isnan(max_logit)) {
        return invalid_argument("sampling: no token has a finite logit");
    }
    if (max_logit == std::numeric_limits<float>::infinity()) {
        return invalid_argument("sampling: a logit is +infinity");
    }
    double z = 0;
    for (int32_t i = 0; i < vocab_; ++i) {
        probs_[i] = std::exp(static_cast<double>(work_[i]) - max_logit);
        z += probs_[i];
    }
    const double log_z = max_logit + std::log(z);

    if (greedy) {
        result.token = best;
    } else {
        // Deterministic total order of candidates: higher logit first, then lower id.
        auto before = [this](int32_t a, int32_t b) { return work_[a] > work_[b] || (work_[a] == work_[b] && a < b); };
        std::iota(order_.begin(), order_.end(), 0);
        size_t n = static_cast<size_t>(vocab_);
        bool sorted = false;
        double mass = z;  // probability mass of the candidate set (unnormalised)
        if (p.top_k > 0 && p.top_k < vocab_) {
            n = static_cast<size_t>(p.top_k);
            std::nth_element(order_.begin(), order_.begin() + (n - 1), order_.end(), before);
            std::sort(order_.begin(), order_.begin() + n, before);
            sorted = true;
            mass = 0;
            for (size_t i = 0; i < n; ++i) mass += probs_[order_[i]];
        }
        if (p.top_p < 1.0f) {
            if (!sorted) {
                // Sort only as much as the nucleus needs: grow the sorted prefix until it holds top_p of the mass.
                size_t m = std::min<size_t>(n, 128);
                while (true) {
                    std::partial_sort(order_.begin(), order_.begin() + m, order_.end(), before);
                    double cum = 0;
                    for (size_t i = 0; i < m; ++i) cum += probs_[order_[i]];
                    if (cum >= p.top_p * mass || m == n) break;
                    m = std::min(n, m * 8);
                }
                n = m;
                sorted = true;
            }
            // Keep token i while the mass before it is below top_p (the token that crosses is kept).
            const double limit = static_cast<double>(p.top_p) * mass;
            double cum = 0;
            size_t keep = 0;
            while (keep < n && (keep == 0 || cum < limit)) cum += probs_[order_[keep++]];
            n = keep;
        }
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
        for (size_t i = 0; i < n; ++i) total += probs_[order_[i]];
        result.token = pick_from_candidates(n, total);
    }
    result.logprob = static_cast<float>(work_[result.token] - log_z);
    fill_top_logprobs(log_z, result);
    return Status::ok();
}

}  // namespace dsv4
