// The range guard of the indexer scores kernel's folded tiles (src/backend/cuda/kernels/indexer/indexer_fold_range.h),
// on the host with the kernel's own function: for every token and key it admits, the short form (bf16(I), ReLU,
// bf16(· w_h·2^q), f32 head sum, times 2^k) gives the long form's bits (bf16(I·2^q·2^k), ReLU, bf16(· w_h), f32 head
// sum), both emulated here in IEEE f32 with core/formats.h's bf16 rounding. Inputs: realistic ones (which it must
// admit), arbitrary weight bits (subnormal, infinite, NaN), and exponents at the edges of the admitted range.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cuda/kernels/indexer/indexer_fold_range.h"
#include "core/formats.h"

namespace dsv4::cuda {
namespace {

constexpr int kHeads = 64;

// The kernel's exp2_int (common/numerics.cuh): 2^e for e >= -126, else 2^-127.
float exp2_int(int e) { return e >= -126 ? std::ldexp(1.0f, e) : std::ldexp(1.0f, -127); }

// __hmax2(d, 0): ReLU, a NaN dot gives 0.
float relu(float d) { return std::isnan(d) ? 0.0f : (d > 0.0f ? d : 0.0f); }

struct Token {
    std::vector<int> q;       // per head
    std::vector<uint16_t> w;  // per head, bf16 bits
};

struct Guard {
    bool token_ok;
    int k_lo, k_hi;
};

// The kernel's prologue and vote: every head's folded_head_range, the token's AND and the keys' common range.
Guard guard_of(const Token& tok) {
    Guard g{true, -1 << 20, 1 << 20};
    for (int h = 0; h < kHeads; ++h) {
        const FoldedHeadRange r = folded_head_range(tok.q[size_t(h)], tok.w[size_t(h)]);
        g.token_ok = g.token_ok && r.ok;
        g.k_lo = std::max(g.k_lo, r.k_lo);
        g.k_hi = std::min(g.k_hi, r.k_hi);
    }
    return g;
}

// One key's bf16 score (bits) by the long form (the kernel before the fold was shortened: dot = (I·2^q)·2^k).
uint16_t long_form(const Token& tok, const std::vector<int32_t>& acc, int k) {
    const float sk = std::ldexp(1.0f, k);
    float total = 0.0f;
    for (int h = 0; h < kHeads; ++h) {
        const float dot = (float(acc[size_t(h)]) * exp2_int(tok.q[size_t(h)])) * sk;
        const float p = round_bf16(relu(round_bf16(dot)) * bf16_to_f32(tok.w[size_t(h)]));
        total = total + p;
    }
    return f32_to_bf16(total);
}

// The same key by the short form.
uint16_t short_form(const Token& tok, const std::vector<int32_t>& acc, int k) {
    float total = 0.0f;
    for (int h = 0; h < kHeads; ++h) {
        const float wq = round_bf16(bf16_to_f32(tok.w[size_t(h)]) * exp2_int(tok.q[size_t(h)]));
        const float p = round_bf16(relu(round_bf16(float(acc[size_t(h)]))) * wq);
        total = total + p;
    }
    return f32_to_bf16(total * std::ldexp(1.0f, k));
}

struct Counts {
    int admitted = 0, refused = 0, differ = 0;
};

// Keys of exponent k and integer sums acc against a token: compare where the guard admits.
void check(const Token& tok, const std::vector<std::vector<int32_t>>& accs, const std::vector<int>& ks, Counts& c) {
    const Guard g = guard_of(tok);
    for (size_t i = 0; i < ks.size(); ++i) {
        if (!(g.token_ok && ks[i] >= g.k_lo && ks[i] <= g.k_hi)) {
            c.refused++;
            continue;
        }
        c.admitted++;
        const uint16_t a = long_form(tok, accs[i], ks[i]), b = short_form(tok, accs[i], ks[i]);
        if (a != b) {
            c.differ++;
            ADD_FAILURE() << "key exponent " << ks[i] << ": long form 0x" << std::hex << a << ", short form 0x" << b;
        }
    }
}

std::vector<std::vector<int32_t>> random_sums(std::mt19937_64& rng, int keys, int32_t bound) {
    std::uniform_int_distribution<int32_t> d(-bound, bound);
    std::vector<std::vector<int32_t>> r(static_cast<size_t>(keys), std::vector<int32_t>(kHeads));
    for (auto& v : r)
        for (auto& x : v) x = d(rng);
    return r;
}

TEST(IndexerFoldRange, AdmitsRealisticTokensAndKeys) {
    // query exponents -6..0 (the finish's FP4 simulation of unit-scale heads), head weights ~ N(0, 0.02), keys'
    // s_min around 2^-3: every one must take the short form, with the long form's bits
    std::mt19937_64 rng(1);
    std::normal_distribution<float> nw(0.0f, 0.02f);
    std::uniform_int_distribution<int> dq(-6, 0), dk(-18, 2);
    Counts c;
    for (int t = 0; t < 200; ++t) {
        Token tok{std::vector<int>(kHeads), std::vector<uint16_t>(kHeads)};
        for (int h = 0; h < kHeads; ++h) tok.q[size_t(h)] = dq(rng), tok.w[size_t(h)] = f32_to_bf16(nw(rng));
        std::vector<int> ks(8);
        for (auto& k : ks) k = dk(rng);
        check(tok, random_sums(rng, 8, (1 << 21) - 1), ks, c);
    }
    EXPECT_EQ(c.refused, 0);
    EXPECT_EQ(c.differ, 0);
    EXPECT_EQ(c.admitted, 1600);
}

TEST(IndexerFoldRange, AdmittedKeysGiveTheLongFormsBitsAtTheEdges) {
    // exponents placed around every bound of the guard, weights of every kind of bit pattern
    std::mt19937_64 rng(2);
    std::uniform_int_distribution<int> pick(0, 1 << 30);
    const int q_edges[] = {-128, -127, -126, -125, -60, 0, 60, 104, 105, 106, 107, 115, 124, 127};
    const int e_edges[] = {-122, -121, -120, -119, -118, -100, 0, 93, 94, 95, 96, 97};
    const int32_t sums[] = {0, 1, -1, 2, 3, 255, 257, -4097, 12345, (1 << 21) - 1, -(1 << 21) + 1};
    Counts c;
    for (int t = 0; t < 20000; ++t) {
        Token tok{std::vector<int>(kHeads), std::vector<uint16_t>(kHeads)};
        const int q = q_edges[pick(rng) % std::size(q_edges)], e = e_edges[pick(rng) % std::size(e_edges)];
        for (int h = 0; h < kHeads; ++h) {
            tok.q[size_t(h)] = t % 3 == 0 ? q + pick(rng) % 3 - 1 : q;
            const int kind = pick(rng) % (t % 4 == 0 ? 20 : 1000);  // junk weights in a quarter of the tokens
            if (kind == 0) {
                tok.w[size_t(h)] = uint16_t(pick(rng));  // any bits: subnormal, infinite, NaN
            } else if (kind == 1) {
                tok.w[size_t(h)] = uint16_t(pick(rng) % 2 ? 0x0000 : 0x8000);  // ±0
            } else {  // |w_h| in [2^(e - q + d), 2^(e - q + d + 1)), d in -2..2: w' near exponent e
                const int ew = std::clamp(e - tok.q[size_t(h)] + pick(rng) % 5 - 2, -133, 127);
                const float m = 1.0f + float(pick(rng) % 128) / 128.0f;
                tok.w[size_t(h)] = f32_to_bf16((pick(rng) % 2 ? -1.0f : 1.0f) * std::ldexp(m, ew));
            }
        }
        std::vector<std::vector<int32_t>> accs(8, std::vector<int32_t>(kHeads));
        for (auto& v : accs)
            for (auto& x : v) x = sums[pick(rng) % std::size(sums)];
        // keys at and next to the token's admitted range's ends, and anywhere (s_min 0..254)
        const Guard g = guard_of(tok);
        std::vector<int> ks = {g.k_lo - 1, g.k_lo, g.k_lo + 1, g.k_hi - 1, g.k_hi, g.k_hi + 1, 0, 0};
        ks[6] = pick(rng) % 255 - 128, ks[7] = pick(rng) % 255 - 128;
        for (auto& k : ks) k = std::clamp(k, -128, 126);
        check(tok, accs, ks, c);
    }
    EXPECT_EQ(c.differ, 0);
    EXPECT_GT(c.admitted, 5000) << c.refused << " refused";  // the edges are exercised on both sides
    EXPECT_GT(c.refused, 5000) << c.admitted << " admitted";
}

TEST(IndexerFoldRange, RefusesWhatTheShortFormWouldGetWrong) {
    // q = 124: I·2^q overflows in the long form (inf, then inf · 0 = NaN for a zero weight) while the short form
    // would give a finite score; the guard refuses the head
    EXPECT_FALSE(folded_head_range(124, 0x0000).ok);
    EXPECT_TRUE(folded_head_range(105, 0x0000).ok);
    // subnormal, infinite and NaN weights
    EXPECT_FALSE(folded_head_range(0, 0x0001).ok);
    EXPECT_FALSE(folded_head_range(0, 0x7f80).ok);
    EXPECT_FALSE(folded_head_range(0, 0x7fc0).ok);
    // w' = 2^-120: its partial sums' grid 2^-127 would be subnormal
    EXPECT_FALSE(folded_head_range(0, f32_to_bf16(std::ldexp(1.0f, -120))).ok);
    const FoldedHeadRange r = folded_head_range(-3, f32_to_bf16(0.02f));  // e(w') = -6 - 3 = -9
    EXPECT_TRUE(r.ok);
    EXPECT_EQ(r.k_lo, -110);
    EXPECT_EQ(r.k_hi, 104);
}

}  // namespace
}  // namespace dsv4::cuda
