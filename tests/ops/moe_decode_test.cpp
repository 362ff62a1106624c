// sm90_mxfp4_moe_decode against the CPU composition it replaces: backend::cpu::routed_experts (W4A8 experts in
// reference numerics) then backend::cpu::moe_sum (f32 sum over the picks in ascending expert index, plus the shared
// expert, one bf16 rounding). Class C of tests/data/official_ops: FP8 x FP4 products are exact, only the f32
// summation order of the K blocks differs, so rel_l2 <= 2e-3 and nearly every element bit-exact.
//
// Shapes: V4-Flash (D 4096, I 2048, 256 experts, top-6) and V4-Pro (D 7168, I 3072, 384 experts, top-6); T in
// {1, 2, 7, 16, 64, 256}; uniform routing over all experts and skewed routing (every token on the same 6 experts).
// Weights are fresh random MXFP4 (mxfp4_encode of Gaussian rows whose 32-blocks span 9 binades, so the four
// sub-scales of a 128-block differ); a pool of distinct experts is aliased across the expert table (expert e uses
// pool entry e % P), which keeps the CPU reference affordable while a wrong expert index still shows.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/kernels/moe/moe.h"
#include "core/quant_formats.h"
#include "core/thread_pool.h"
#include "ops/gpu_testing.h"
#include "testing/testing.h"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using namespace dsv4::cuda::testing;

struct MoeShape {
    const char* name;
    int64_t dim, inter, n_experts, k;
};
constexpr MoeShape kFlash{"flash", 4096, 2048, 256, 6};
constexpr MoeShape kPro{"pro", 7168, 3072, 384, 6};

// Random MXFP4 weight [rows, cols] through the encoder; each 32-block scaled by 2^u, u in [-6, 2].
// Rows are drawn in parallel, each from its own generator seeded by `rng` (a Pro expert is 22M values; every gtest
// case runs in its own process and draws its pool again).
Mxfp4Tensor random_mxfp4(std::mt19937_64& rng, int64_t rows, int64_t cols) {
    std::vector<float> w(size_t(rows * cols));
    const uint64_t seed = rng();
    pool().parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            std::mt19937_64 row_rng(seed ^ (0x9e3779b97f4a7c15ull * uint64_t(r + 1)));
            std::normal_distribution<float> n(0.0f, 0.02f);
            std::uniform_int_distribution<int> binade(-6, 2);
            float* row = w.data() + r * cols;
            for (int64_t b = 0; b < cols; b += 32) {
                const float s = std::ldexp(1.0f, binade(row_rng));
                for (int64_t i = b; i < b + 32; ++i) row[i] = n(row_rng) * s;
            }
        }
    });
    auto t = mxfp4_encode(w, rows, cols);
    EXPECT_TRUE(t.is_ok()) << t.status().to_string();
    return std::move(*t);
}

// A pool of distinct random experts, on the host (for the CPU op) and on the device, plus the expert table.
struct ExpertPool {
    int64_t size = 0;
    std::vector<Mxfp4Tensor> w1, w3, w2;
    std::vector<DeviceBuffer> dev;  // per entry: w1, w1s, w3, w3s, w2, w2s
    std::vector<backend::ExpertWeights> views;  // [E]
    DeviceBuffer table;                         // Mxfp4ExpertPtrs [E]
};

ExpertPool* expert_pool(const MoeShape& s) {
    static std::map<std::string, std::unique_ptr<ExpertPool>> cache;
    auto& slot = cache[s.name];
    if (slot) return slot.get();
    auto p = std::make_unique<ExpertPool>();
    std::mt19937_64 rng(fresh_seed());
    p->size = 5;
    const auto mx = backend::WeightFormat::kMXFP4;
    for (int64_t i = 0; i < p->size; ++i) {
        p->w1.push_back(random_mxfp4(rng, s.inter, s.dim));
        p->w3.push_back(random_mxfp4(rng, s.inter, s.dim));
        p->w2.push_back(random_mxfp4(rng, s.dim, s.inter));
        for (const Mxfp4Tensor* t : {&p->w1.back(), &p->w3.back(), &p->w2.back()}) {
            auto d = to_device(t->packed);
            auto sc = to_device(t->scales);
            if (!d.is_ok() || !sc.is_ok()) return nullptr;
            p->dev.push_back(std::move(*d));
            p->dev.push_back(std::move(*sc));
        }
    }
    std::vector<Mxfp4ExpertPtrs> table(size_t(s.n_experts));
    for (int64_t e = 0; e < s.n_experts; ++e) {
        const int64_t i = e % p->size;
        const DeviceBuffer* d = &p->dev[size_t(6 * i)];
        table[size_t(e)] = {d[0].as<uint8_t>(), d[1].as<uint8_t>(), d[2].as<uint8_t>(),
                            d[3].as<uint8_t>(), d[4].as<uint8_t>(), d[5].as<uint8_t>()};
        const Mxfp4Tensor &w1 = p->w1[size_t(i)], &w2 = p->w2[size_t(i)], &w3 = p->w3[size_t(i)];
        p->views.push_back({.w1 = {mx, s.inter, s.dim, w1.packed.data(), w1.scales.data()},
                            .w2 = {mx, s.dim, s.inter, w2.packed.data(), w2.scales.data()},
                            .w3 = {mx, s.inter, s.dim, w3.packed.data(), w3.scales.data()}});
    }
    auto tb = to_device(table);
    if (!tb.is_ok()) return nullptr;
    p->table = std::move(*tb);
    slot = std::move(p);
    return slot.get();
}

enum class Routing { kUniform, kSkewed };

void run_case(const MoeShape& s, int64_t T, Routing routing) {
    SCOPED_TRACE(std::string(s.name) + " T " + std::to_string(T) +
                 (routing == Routing::kUniform ? " uniform" : " skewed"));
    ExpertPool* ep = expert_pool(s);
    ASSERT_NE(ep, nullptr) << "could not upload the expert pool";
    std::mt19937_64 rng(fresh_seed());
    const int64_t K = s.k, D = s.dim;
    // routing: K distinct experts per token; weights positive, summing to the routed scale 1.5
    std::vector<int32_t> idx(size_t(T * K));
    std::vector<float> rw(size_t(T * K));
    std::vector<int32_t> all(size_t(s.n_experts));
    std::iota(all.begin(), all.end(), 0);
    std::vector<int32_t> hot = {int32_t(s.n_experts - 1), 3, 200, 17, 42, 101};
    std::uniform_real_distribution<float> u(0.5f, 2.0f);
    for (int64_t t = 0; t < T; ++t) {
        if (routing == Routing::kUniform) {
            std::shuffle(all.begin(), all.end(), rng);
            std::copy(all.begin(), all.begin() + K, idx.begin() + t * K);
        } else {
            std::shuffle(hot.begin(), hot.end(), rng);  // same experts, any order in the router's output
            std::copy(hot.begin(), hot.begin() + K, idx.begin() + t * K);
        }
        float sum = 0;
        for (int64_t j = 0; j < K; ++j) sum += (rw[size_t(t * K + j)] = u(rng));
        for (int64_t j = 0; j < K; ++j) rw[size_t(t * K + j)] = rw[size_t(t * K + j)] / sum * 1.5f;
    }
    const auto x = random_bf16(rng, size_t(T * D), 1.0f);
    const bool with_shared = routing == Routing::kUniform;
    const auto shared = random_bf16(rng, size_t(T * D), 0.05f);

    // CPU: routed_experts + moe_sum in reference numerics
    const backend::Exec ex{Precision::kReference, &pool()};
    std::vector<float> per_pick(size_t(T * K * D)), want(size_t(T * D));
    DSV4_ASSERT_OK(backend::cpu::routed_experts(
        ex, {.x = x.data(), .tokens = T, .k = K, .n_experts = s.n_experts, .experts = ep->views.data(),
             .idx = idx.data(), .weights = rw.data(), .limit = 10.0f, .out = per_pick.data()}));
    DSV4_ASSERT_OK(backend::cpu::moe_sum(ex, {.expert_out = per_pick.data(), .idx = idx.data(),
                                              .shared = with_shared ? shared.data() : nullptr, .tokens = T, .k = K,
                                              .dim = D, .y = want.data()}));

    // GPU
    auto dx = to_device(to_bf16_bits(x));
    auto didx = to_device(idx);
    auto drw = to_device(rw);
    auto dsh = to_device(to_bf16_bits(shared));
    auto dy = poisoned<uint16_t>(size_t(T * D));
    const size_t ws_bytes = sm90_mxfp4_moe_decode_workspace_bytes(T, K, s.n_experts, D, s.inter);
    auto dws = poisoned<uint8_t>(ws_bytes);
    ASSERT_TRUE(dx.is_ok() && didx.is_ok() && drw.is_ok() && dsh.is_ok() && dy.is_ok() && dws.is_ok());
    MoeDecodeArgs a;
    a.x = dx->data();
    a.idx = didx->as<int32_t>();
    a.route_w = drw->as<float>();
    a.experts = ep->table.as<Mxfp4ExpertPtrs>();
    a.shared = with_shared ? dsh->data() : nullptr;
    a.y = dy->data();
    a.tokens = T, a.k = K, a.n_experts = s.n_experts, a.dim = D, a.inter = s.inter;
    a.workspace = dws->data();
    a.workspace_bytes = ws_bytes;
    auto st = Stream::create();
    ASSERT_TRUE(st.is_ok());
    DSV4_ASSERT_OK(sm90_mxfp4_moe_decode(a, st->handle()));
    DSV4_ASSERT_OK(st->synchronize());
    const auto got = from_bf16_bits(to_host<uint16_t>(*dy, size_t(T * D)));
    size_t exact = 0;
    for (size_t i = 0; i < got.size(); ++i) exact += f32_to_bf16(got[i]) == f32_to_bf16(want[i]);
    const double share = double(exact) / double(got.size());
    std::printf("  %s T %3lld %-7s bit-exact %.4f%%\n", s.name, (long long)T,
                routing == Routing::kUniform ? "uniform" : "skewed", 100.0 * share);
    DSV4_EXPECT_CLOSE(got, want, 2e-3);
    EXPECT_GE(share, 0.95) << "class C: nearly every output should be bit-exact";

    // a second call on the same workspace (counters re-armed by launch 1) gives the same bits
    DSV4_ASSERT_OK(dy->fill_bytes(0xff));
    DSV4_ASSERT_OK(sm90_mxfp4_moe_decode(a, st->handle()));
    DSV4_ASSERT_OK(st->synchronize());
    const auto again = from_bf16_bits(to_host<uint16_t>(*dy, size_t(T * D)));
    size_t same = 0;
    for (size_t i = 0; i < got.size(); ++i) same += f32_to_bf16(got[i]) == f32_to_bf16(again[i]);
    EXPECT_EQ(same, got.size()) << "the result changed between two identical calls";
}

class CudaMoeDecode : public ::testing::TestWithParam<std::tuple<int, int64_t, Routing>> {};

TEST_P(CudaMoeDecode, MatchesCpuRoutedExpertsAndSum) {
    DSV4_REQUIRE_GPU();
    const auto [shape, T, routing] = GetParam();
    run_case(shape == 0 ? kFlash : kPro, T, routing);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaMoeDecode,
                         ::testing::Combine(::testing::Values(0, 1), ::testing::Values(1, 2, 7, 16, 64, 256),
                                            ::testing::Values(Routing::kUniform, Routing::kSkewed)),
                         [](const auto& info) {
                             return std::string(std::get<0>(info.param) == 0 ? "Flash" : "Pro") + "_T" +
                                    std::to_string(std::get<1>(info.param)) +
                                    (std::get<2>(info.param) == Routing::kUniform ? "_uniform" : "_skewed");
                         });

// Argument checks happen before any CUDA call (no GPU needed).
TEST(CudaMoeDecodeArgs, RejectsBadShapesWithClearMessages) {
    int dummy[64] = {};
    MoeDecodeArgs a;
    a.x = a.shared = a.y = a.workspace = dummy;
    a.idx = dummy;
    a.route_w = reinterpret_cast<const float*>(dummy);
    a.experts = reinterpret_cast<const Mxfp4ExpertPtrs*>(dummy);
    a.tokens = 1, a.k = 6, a.n_experts = 256, a.dim = 4096, a.inter = 2048, a.workspace_bytes = 1;
    Status s = sm90_mxfp4_moe_decode(a, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("workspace"), std::string::npos) << s.to_string();
    a.tokens = 300;
    s = sm90_mxfp4_moe_decode(a, nullptr);
    EXPECT_NE(s.message().find("tokens 300"), std::string::npos) << s.to_string();
    a.tokens = 4, a.dim = 4000;
    s = sm90_mxfp4_moe_decode(a, nullptr);
    EXPECT_NE(s.message().find("multiples of 512"), std::string::npos) << s.to_string();
    a.dim = 4096, a.k = 0;
    s = sm90_mxfp4_moe_decode(a, nullptr);
    EXPECT_NE(s.message().find("K 0"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace dsv4::cuda
