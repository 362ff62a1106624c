// Quantisation primitives against hand-computed values (MODEL_SPEC §7), and the thread pool.
#include <atomic>
#include <bit>
#include <cstring>

#include "backend/cpu/cpu_common.h"
#include "helpers.h"

namespace dsv4::cpu_test {
namespace {

TEST(ThreadPool, CoversEveryIndexOnceAndNests) {
    ThreadPool pool(4);
    for (int64_t n : {0, 1, 7, 1000}) {
        std::vector<std::atomic<int>> hits(size_t(n + 1));
        pool.parallel_for(n, 3, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
            pool.parallel_for(2, 1, [](int64_t, int64_t) {});  // nested: runs inline, no deadlock
        });
        for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[size_t(i)].load(), 1) << i;
    }
    int64_t total = 0;
    parallel_for(nullptr, 10, 1, [&](int64_t b, int64_t e) { total += e - b; });
    EXPECT_EQ(total, 10);
}

TEST(ActQuant, HandComputedBlock128) {
    std::vector<float> x(256, 0.0f);
    x[0] = 448.0f;      // block 0 amax exactly 448 -> s = 1
    x[1] = 1.0625f;     // halfway 1 and 1.125 -> even mantissa: 1.0
    x[2] = 1.1875f;     // halfway 1.125 and 1.25 -> 1.25
    x[3] = -3.0f;
    x[128] = 1e-5f;     // block 1 below the amax floor 1e-4 -> s = 2^ceil(log2(1e-4/448)) = 2^-22
    std::vector<uint8_t> codes(256), sb(2);
    std::vector<float> s(2), sim(256);
    ASSERT_TRUE(cpu::act_quant({.x = x.data(), .rows = 1, .cols = 256, .block = 128, .codes = codes.data(),
                                .scale = s.data(), .scale_e8m0 = sb.data(), .x_sim = sim.data()})
                    .is_ok());
    EXPECT_EQ(s[0], 1.0f);
    EXPECT_EQ(sb[0], 127);
    EXPECT_EQ(codes[0], 0x7e);  // 448 = 1.75 * 2^8: exponent 15, mantissa 6
    EXPECT_EQ(sim[1], 1.0f);
    EXPECT_EQ(sim[2], 1.25f);
    EXPECT_EQ(sim[3], -3.0f);
    EXPECT_EQ(codes[3], 0xc4);  // sign, exponent 8, mantissa 4
    EXPECT_EQ(s[1], std::ldexp(1.0f, -22));
    EXPECT_EQ(sb[1], 127 - 22);
    // 1e-5 / 2^-22 = 41.94 -> e4m3 grid step 4 in [32, 64): 40
    EXPECT_EQ(sim[128], 40.0f * std::ldexp(1.0f, -22));
}

TEST(ActQuant, Block64ScalesEachHalf) {
    std::vector<float> x(128, 0.5f);
    x[64] = 900.0f;  // second 64-block amax 900 -> s = 2^ceil(log2(900/448)) = 4
    std::vector<float> s(2), sim(128);
    ASSERT_TRUE(cpu::act_quant({.x = x.data(), .rows = 1, .cols = 128, .block = 64, .scale = s.data(),
                                .x_sim = sim.data()})
                    .is_ok());
    EXPECT_EQ(s[0], std::ldexp(1.0f, -9));  // 0.5/448 -> 2^-9.8 -> ceil -9
    EXPECT_EQ(s[1], 4.0f);
    EXPECT_EQ(sim[0], 0.5f);
    EXPECT_EQ(sim[64], 896.0f);  // 225 -> nearest e4m3 (step 16 in [128, 256)): 224 -> x4
    EXPECT_EQ(sim[65], 0.5f);
    EXPECT_FALSE(cpu::act_quant({.x = x.data(), .rows = 1, .cols = 100, .block = 64}).is_ok());
}

TEST(Fp4Quant, HandComputed) {
    std::vector<float> x(32, 0.0f);
    x[0] = 6.0f;    // amax 6 -> s = 1
    x[1] = 2.5f;    // halfway 2 (code 4) and 3 (code 5) -> even code: 2
    x[2] = 0.25f;   // halfway 0 and 0.5 -> 0
    x[3] = -0.1f;   // -> -0 (code 8)
    x[4] = 5.0f;    // halfway 4 (code 6) and 6 (code 7) -> 4
    x[5] = -1.75f;  // halfway 1.5 (code 3) and 2 (code 4) -> 2, negative: code 12
    std::vector<uint8_t> packed(16), sb(1);
    std::vector<float> s(1), sim(32);
    ASSERT_TRUE(cpu::fp4_act_quant({.x = x.data(), .rows = 1, .cols = 32, .codes_packed = packed.data(),
                                    .scale = s.data(), .scale_e8m0 = sb.data(), .x_sim = sim.data()})
                    .is_ok());
    EXPECT_EQ(s[0], 1.0f);
    EXPECT_EQ(sb[0], 127);
    EXPECT_EQ(packed[0], 0x7 | (0x4 << 4));  // low nibble = element 0
    EXPECT_EQ(packed[1], 0x0 | (0x8 << 4));
    EXPECT_EQ(packed[2], 0x6 | (0xc << 4));
    EXPECT_EQ(sim[1], 2.0f);
    EXPECT_EQ(sim[4], 4.0f);
    EXPECT_EQ(sim[5], -2.0f);
    EXPECT_TRUE(std::signbit(sim[3]) && sim[3] == 0.0f);
    // amax 7 -> s = 2^ceil(log2(7/6)) = 2
    x[0] = 7.0f;
    ASSERT_TRUE(cpu::fp4_act_quant({.x = x.data(), .rows = 1, .cols = 32, .scale = s.data(), .x_sim = sim.data()}).is_ok());
    EXPECT_EQ(s[0], 2.0f);
    EXPECT_EQ(sim[0], 8.0f);  // 3.5 -> halfway 3 (code 5) and 4 (code 6) -> 4, x2
}

TEST(Hadamard, MatchesSylvesterMatrix) {
    auto x = randn(3 * 128, 1);
    std::vector<float> y(x.size()), yr(x.size());
    ASSERT_TRUE(cpu::hadamard128(f32_exec(), {.x = x.data(), .rows = 3, .y = y.data()}).is_ok());
    ASSERT_TRUE(cpu::hadamard128(ref_exec(), {.x = x.data(), .rows = 3, .y = yr.data()}).is_ok());
    std::vector<float> expect(x.size());
    for (int r = 0; r < 3; ++r)
        for (int j = 0; j < 128; ++j) {
            double acc = 0;
            for (int i = 0; i < 128; ++i) acc += (std::popcount(unsigned(i & j)) % 2 ? -1.0 : 1.0) * x[r * 128 + i];
            expect[r * 128 + j] = float(acc / std::sqrt(128.0));
        }
    DSV4_EXPECT_CLOSE(y, expect, 1e-6);
    DSV4_EXPECT_CLOSE(yr, expect, 4e-3);  // bf16 output
    for (float v : yr) EXPECT_EQ(v, round_bf16(v));
    // a unit vector maps to a constant row of 128^-1/2
    std::vector<float> e(128, 0.0f), h(128);
    e[0] = 1.0f;
    ASSERT_TRUE(cpu::hadamard128(f32_exec(), {.x = e.data(), .rows = 1, .y = h.data()}).is_ok());
    for (float v : h) EXPECT_NEAR(v, 1.0 / std::sqrt(128.0), 1e-7);
}

// FP8 / MXFP4 GEMM dequantisation: per-block weight scales and per-128 activation scales multiply the right terms.
TEST(QuantizedGemm, HandComputedScales) {
    // FP8: 1 x 256 weight, block scales 2^1 and 2^-2; activation blocks with amax 448 and 896 (scales 1 and 2)
    std::vector<uint8_t> w(256, 0), ws = {128, 125};
    w[0] = f32_to_e4m3(1.5f);
    w[128] = f32_to_e4m3(-3.0f);
    std::vector<float> x(256, 0.0f);
    x[0] = 448.0f;   // q 448 · s 1
    x[128] = 896.0f; // q 448 · s 2
    std::vector<float> y(1);
    WeightView wv{WeightFormat::kFP8Block, 1, 256, w.data(), ws.data()};
    ASSERT_TRUE(cpu::linear(ref_exec(), {.x = x.data(), .tokens = 1, .w = wv, .y = y.data()}).is_ok());
    EXPECT_EQ(y[0], round_bf16(448.0f * 1.5f * 2.0f + 896.0f * -3.0f * 0.25f));  // 1344 - 672
    // MXFP4: 1 x 64 weight, per-32 scales 2^0 and 2^3
    std::vector<uint8_t> p(32, 0), ps = {127, 130};
    p[0] = 0x2;        // element 0 = 1.0
    p[16] = 0x7 << 4;  // element 33 = 6.0
    std::vector<float> x4(128, 0.0f);
    x4[0] = 2.0f;
    x4[33] = -1.0f;
    WeightView w4{WeightFormat::kMXFP4, 1, 128, p.data(), nullptr};
    std::vector<uint8_t> p128(64, 0), ps128 = {127, 130, 127, 127};
    p128[0] = 0x2;
    p128[16] = 0x7 << 4;
    w4.data = p128.data();
    w4.scale = ps128.data();
    ASSERT_TRUE(cpu::linear(ref_exec(), {.x = x4.data(), .tokens = 1, .w = w4, .y = y.data()}).is_ok());
    EXPECT_EQ(y[0], 2.0f * 1.0f + (-1.0f) * 6.0f * 8.0f);
    (void)p;
    (void)ps;
}

TEST(QuantizedGemm, MatchesDequantisedProduct) {
    // random FP8 weight 256 x 384 with varied block scales; the reference GEMM equals the exact product of the
    // dequantised operands up to f32 summation and the final bf16 rounding
    const int64_t N = 256, K = 384, M = 5;
    std::mt19937 rng(7);
    std::vector<uint8_t> w(N * K), ws(2 * 3);
    for (auto& b : w) { b = uint8_t(rng() & 0xff); if ((b & 0x7f) == 0x7f) b = 0; }
    for (auto& s : ws) s = uint8_t(120 + rng() % 10);
    WeightView wv{WeightFormat::kFP8Block, N, K, w.data(), ws.data()};
    auto x = randn(M * K, 3);
    std::vector<float> y(M * N), xq(M * K), yf(M * N);
    ASSERT_TRUE(cpu::linear(ref_exec(), {.x = x.data(), .tokens = M, .w = wv, .y = y.data()}).is_ok());
    ASSERT_TRUE(cpu::act_quant({.x = x.data(), .rows = M, .cols = K, .block = 128, .x_sim = xq.data()}).is_ok());
    std::vector<float> expect(M * N);
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            double acc = 0;
            for (int64_t k = 0; k < K; ++k)
                acc += double(xq[m * K + k]) * e4m3_to_f32(w[n * K + k]) * std::ldexp(1.0, ws[(n / 128) * 3 + k / 128] - 127);
            expect[m * N + n] = float(acc);
        }
    DSV4_EXPECT_CLOSE(y, expect, 4e-3);
    // f32 mode: no activation quantisation, weights dequantised exactly
    ASSERT_TRUE(cpu::linear(f32_exec(), {.x = x.data(), .tokens = M, .w = wv, .y = yf.data()}).is_ok());
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            double acc = 0;
            for (int64_t k = 0; k < K; ++k)
                acc += double(x[m * K + k]) * e4m3_to_f32(w[n * K + k]) * std::ldexp(1.0, ws[(n / 128) * 3 + k / 128] - 127);
            expect[m * N + n] = float(acc);
        }
    DSV4_EXPECT_CLOSE(yf, expect, 1e-5);
}

}  // namespace
}  // namespace dsv4::cpu_test

namespace dsv4::cpu_test {
namespace {

// The inlined bf16 rounding of the hot loops is core's round_bf16, bit for bit: a sweep of 2^32 / 65521 patterns
// and every boundary class (ties both ways, carries into the exponent, inf, NaN payloads, subnormals, -0).
TEST(Bf16Rounding, InlineMatchesCoreBitForBit) {
    auto bits = [](float x) {
        uint32_t u;
        std::memcpy(&u, &x, 4);
        return u;
    };
    auto check = [&](uint32_t u) {
        float x;
        std::memcpy(&x, &u, 4);
        ASSERT_EQ(bits(cpu::round_bf16_inline(x)), bits(round_bf16(x))) << std::hex << u;
    };
    for (uint64_t u = 0; u <= 0xffffffffull; u += 65521) check(uint32_t(u));
    for (uint32_t hi : {0x00000000u, 0x3f800000u, 0x7f7f0000u, 0x7f800000u, 0x7fc00000u, 0x80000000u, 0xff800000u})
        for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, 0x18000u})
            check(hi + lo);
}

}  // namespace
}  // namespace dsv4::cpu_test
