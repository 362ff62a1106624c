// sm90_mxfp4_moe_decode_v2 against (a) sm90_mxfp4_moe_decode (v1) on the same inputs: v2 performs the same f32
// operations on the same values (moe_v2.cuh), so every output is expected to be byte-identical — the fraction is
// printed and anything short of 100 % fails; and (b) the CPU composition v1 is tested against
// (backend::cpu::routed_experts + backend::cpu::moe_sum, kReference) with v1's bar: rel_l2 <= 2e-3 and >= 95 % of
// outputs bit-exact. Outputs and both workspaces are NaN-poisoned first; a second v2 call on the same workspace must
// give the same bits (counters re-armed by launch 1).
//
// Shapes: V4-Flash and V4-Pro; T in {1, 2, 7, 16, 64, 256}; uniform routing and skewed routing (every token on the
// same 6 experts: 7..256 tokens per expert, i.e. several 8-token tiles per work item). Weights as in
// moe_decode_test.cpp: a pool of 5 distinct random MXFP4 experts drawn in parallel, aliased across the table.
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
#include "ops/moe_test_inputs.h"
#include "testing/testing.h"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using namespace dsv4::cuda::testing;
using namespace dsv4::cuda::moe_testing;

void run_case(const MoeShape& s, int64_t T, Routing routing) {
    const char* rname = routing == Routing::kUniform ? "uniform" : "skewed";
    SCOPED_TRACE(std::string(s.name) + " T " + std::to_string(T) + " " + rname);
    ExpertPool* ep = expert_pool(s);
    ASSERT_NE(ep, nullptr) << "could not upload the expert pool";
    std::mt19937_64 rng(fresh_seed());
    const int64_t K = s.k, D = s.dim;
    const MoeInputs in = make_moe_inputs(s, T, routing, rng);
    const std::vector<int32_t>& idx = in.idx;
    const std::vector<float>& rw = in.rw;
    const std::vector<float>& x = in.x;
    const std::vector<float>& shared = in.shared;
    const bool with_shared = routing == Routing::kUniform;

    const backend::Exec ex{Precision::kReference, &pool()};
    std::vector<float> per_pick(size_t(T * K * D)), want(size_t(T * D));
    DSV4_ASSERT_OK(backend::cpu::routed_experts(
        ex, {.x = x.data(), .tokens = T, .k = K, .n_experts = s.n_experts, .experts = ep->views.data(),
             .idx = idx.data(), .weights = rw.data(), .limit = 10.0f, .out = per_pick.data()}));
    DSV4_ASSERT_OK(backend::cpu::moe_sum(ex, {.expert_out = per_pick.data(), .idx = idx.data(),
                                              .shared = with_shared ? shared.data() : nullptr, .tokens = T, .k = K,
                                              .dim = D, .y = want.data()}));

    auto dx = to_device(to_bf16_bits(x));
    auto didx = to_device(idx);
    auto drw = to_device(rw);
    auto dsh = to_device(to_bf16_bits(shared));
    auto dy1 = poisoned<uint16_t>(size_t(T * D));
    auto dy2 = poisoned<uint16_t>(size_t(T * D));
    const size_t ws1_bytes = sm90_mxfp4_moe_decode_workspace_bytes(T, K, s.n_experts, D, s.inter);
    const size_t ws2_bytes = sm90_mxfp4_moe_decode_v2_workspace_bytes(T, K, s.n_experts, D, s.inter);
    auto dws1 = poisoned<uint8_t>(ws1_bytes);
    auto dws2 = poisoned<uint8_t>(ws2_bytes);
    ASSERT_TRUE(dx.is_ok() && didx.is_ok() && drw.is_ok() && dsh.is_ok() && dy1.is_ok() && dy2.is_ok() &&
                dws1.is_ok() && dws2.is_ok());
    MoeDecodeArgs a;
    a.x = dx->data();
    a.idx = didx->as<int32_t>();
    a.route_w = drw->as<float>();
    a.experts = ep->table.as<Mxfp4ExpertPtrs>();
    a.shared = with_shared ? dsh->data() : nullptr;
    a.tokens = T, a.k = K, a.n_experts = s.n_experts, a.dim = D, a.inter = s.inter;
    MoeDecodeArgs a1 = a, a2 = a;
    a1.y = dy1->data(), a1.workspace = dws1->data(), a1.workspace_bytes = ws1_bytes;
    a2.y = dy2->data(), a2.workspace = dws2->data(), a2.workspace_bytes = ws2_bytes;
    auto st = Stream::create();
    ASSERT_TRUE(st.is_ok());
    DSV4_ASSERT_OK(sm90_mxfp4_moe_decode(a1, st->handle()));
    DSV4_ASSERT_OK(sm90_mxfp4_moe_decode_v2(a2, st->handle()));
    DSV4_ASSERT_OK(st->synchronize());
    const auto v1 = to_host<uint16_t>(*dy1, size_t(T * D));
    const auto v2 = to_host<uint16_t>(*dy2, size_t(T * D));
    const auto got = from_bf16_bits(v2);
    size_t exact = 0, same_v1 = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        exact += f32_to_bf16(got[i]) == f32_to_bf16(want[i]);
        same_v1 += v1[i] == v2[i];
    }
    const double share = double(exact) / double(got.size()), share_v1 = double(same_v1) / double(got.size());
    std::printf("  v2 %s T %3lld %-7s bytes identical to v1 %.4f%%, bit-exact vs CPU %.4f%%\n", s.name,
                (long long)T, rname, 100.0 * share_v1, 100.0 * share);
    DSV4_EXPECT_CLOSE(got, want, 2e-3);
    EXPECT_GE(share, 0.95) << "class C: nearly every output should be bit-exact against the CPU";
    EXPECT_EQ(same_v1, got.size()) << "v2 performs v1's f32 operations on the same values: every output should "
                                      "be byte-identical to v1's";

    DSV4_ASSERT_OK(dy2->fill_bytes(0xff));
    DSV4_ASSERT_OK(sm90_mxfp4_moe_decode_v2(a2, st->handle()));
    DSV4_ASSERT_OK(st->synchronize());
    const auto again = to_host<uint16_t>(*dy2, size_t(T * D));
    size_t same = 0;
    for (size_t i = 0; i < v2.size(); ++i) same += v2[i] == again[i];
    EXPECT_EQ(same, v2.size()) << "the v2 result changed between two identical calls";
}

class CudaMoeDecodeV2 : public ::testing::TestWithParam<MoeParam> {};

TEST_P(CudaMoeDecodeV2, MatchesV1AndCpuRoutedExpertsAndSum) {
    DSV4_REQUIRE_GPU();
    const auto [shape, T, routing] = GetParam();
    run_case(shape == 0 ? kFlash : kPro, T, routing);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaMoeDecodeV2, kMoeParams, moe_case_name);

// Argument checks happen before any CUDA call (no GPU needed).
TEST(CudaMoeDecodeV2Args, RejectsBadShapesWithClearMessages) {
    expect_bad_moe_args_rejected(sm90_mxfp4_moe_decode_v2);
    // the v2 workspace is at least v1's (its down counters are per 16 rows of D, v1's per 32)
    EXPECT_GE(sm90_mxfp4_moe_decode_v2_workspace_bytes(64, 6, 256, 4096, 2048),
              sm90_mxfp4_moe_decode_workspace_bytes(64, 6, 256, 4096, 2048));
    EXPECT_EQ(sm90_mxfp4_moe_decode_v2_workspace_bytes(0, 6, 256, 4096, 2048), 0u);
}

}  // namespace
}  // namespace dsv4::cuda
