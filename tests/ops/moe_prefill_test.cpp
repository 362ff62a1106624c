// sm90_mxfp4_moe_prefill (grouped FP8 wgmma GEMMs with the MXFP4 weights converted to e4m3 in the kernel) against the
// CPU composition it replaces: backend::cpu::routed_experts (W4A8 experts in reference numerics) then
// backend::cpu::moe_sum (f32 sum over the picks in ascending expert index, plus the shared expert, one bf16
// rounding), and at T = 256 against the decode kernel sm90_mxfp4_moe_decode (itself checked against the CPU in
// moe_decode_test.cpp).
//
// Tolerance: the FP4 -> FP8 conversion is exact for these weights (their 32-block scales span 9 binades, the
// conversion is exact up to 14) and the per-128-K promotion is the reference's, but Hopper's FP8 wgmma sums the 128
// products of a K block with a narrower accumulator than f32 (sm90_fp8_gemm_wgmma's test measures ~9 % of its bf16
// outputs one ulp off, rel_l2 9e-4). Here that error passes through a second quantisation: the hidden activation is
// rounded to e4m3 (3 stored mantissa bits) for the down GEMM, so a gate/up error of a few 2^-20 now and then moves
// a hidden value across an e4m3 rounding boundary, and that value is then off by a whole e4m3 step (1/16..1/8 of
// itself). Measured on the H200 (2026-11-30, all 12 cases): rel_l2 4.0-4.4e-3, max |error| 0.05-0.12 std, 44-49 %
// of bf16 outputs bit-exact, the same against the decode kernel (whose f32 MMA sums match the CPU to >= 99 % of
// bits). Bounds: rel_l2 <= 8e-3, max |error| <= 0.2 std, >= 30 % bit-exact — about twice the measured spread,
// while a real fault (a wrong scale, row, token or expert; a skipped tile) is an error of the outputs' own size.
// The repacked layout (mxfp4_repacked.h) must give the shipped layout's bits (the converter's e4m3 tile is the same),
// and so must the 256-row M tiles (forced here; the skewed cases give them full and ragged 256-row tiles).
// Also: no non-finite outputs (the output buffer and the workspace start poisoned with 0xff = NaN); a poisoned row
// after the output catches stores past token T-1; a second call on the same (dirty) workspace gives the same bits.
//
// Shapes: V4-Flash (D 4096, I 2048, 256 experts, top-6) and V4-Pro (D 7168, I 3072, 384 experts, top-6); T in
// {256, 1000, 2048}; uniform routing (every expert a partly filled 128-row tile: the second consumer warpgroup idle)
// and skewed routing (every token on the same 6 experts: one expert with T tokens, many full 128-row tiles and a
// ragged last one at T = 1000).
#include "backend/cuda/kernels/moe_prefill/moe_prefill.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

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

double bit_exact_percent(const std::vector<float>& a, const std::vector<float>& b) {
    return 100.0 * double(a.size() - count_bit_differences(a, b)) / double(a.size());
}

// Two FP8 wgmma GEMMs with an e4m3 re-quantisation between them (header comment).
void expect_within_qgmma_tolerance(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
    const auto cmp = ::dsv4::testing::compare(got, want);
    std::printf("    vs %-6s rel_l2 %.2e  max|err|/std %.4f  bit-exact %.3f%%\n", what, cmp.rel_l2, cmp.max_abs_norm,
                bit_exact_percent(got, want));
    EXPECT_EQ(cmp.nonfinite, 0u) << what << ": non-finite outputs (unwritten or NaN)";
    EXPECT_LE(cmp.rel_l2, 8e-3) << what;
    EXPECT_LE(cmp.max_abs_norm, 0.2) << what << ": worst element " << cmp.worst_index << ": "
                                     << got[cmp.worst_index] << " vs " << want[cmp.worst_index];
    EXPECT_GE(bit_exact_percent(got, want), 30.0) << what << ": fewer than 30% of outputs bit-exact";
}

struct DeviceInputs {
    DeviceBuffer x, idx, rw, shared;
};

MoeDecodeArgs make_args(const MoeShape& s, int64_t T, const DeviceInputs& d, const ExpertPool& ep, bool with_shared,
                        void* y, void* ws, size_t ws_bytes) {
    MoeDecodeArgs a;
    a.x = d.x.data();
    a.idx = d.idx.as<int32_t>();
    a.route_w = d.rw.as<float>();
    a.experts = ep.table.as<Mxfp4ExpertPtrs>();
    a.shared = with_shared ? d.shared.data() : nullptr;
    a.y = y;
    a.tokens = T, a.k = s.k, a.n_experts = s.n_experts, a.dim = s.dim, a.inter = s.inter;
    a.workspace = ws;
    a.workspace_bytes = ws_bytes;
    return a;
}

void run_case(const MoeShape& s, int64_t T, Routing routing) {
    const char* rname = routing == Routing::kUniform ? "uniform" : "skewed";
    SCOPED_TRACE(std::string(s.name) + " T " + std::to_string(T) + " " + rname);
    ExpertPool* ep = expert_pool(s);
    ASSERT_NE(ep, nullptr) << "could not upload the expert pool";
    std::mt19937_64 rng(fresh_seed());
    const int64_t K = s.k, D = s.dim;
    const MoeInputs in = make_moe_inputs(s, T, routing, rng);
    const bool with_shared = routing == Routing::kUniform;

    // CPU: routed_experts + moe_sum in reference numerics
    const backend::Exec ex{Precision::kReference, &pool()};
    std::vector<float> per_pick(size_t(T * K * D)), want(size_t(T * D));
    DSV4_ASSERT_OK(backend::cpu::routed_experts(
        ex, {.x = in.x.data(), .tokens = T, .k = K, .n_experts = s.n_experts, .experts = ep->views.data(),
             .idx = in.idx.data(), .weights = in.rw.data(), .limit = 10.0f, .out = per_pick.data()}));
    DSV4_ASSERT_OK(backend::cpu::moe_sum(ex, {.expert_out = per_pick.data(), .idx = in.idx.data(),
                                              .shared = with_shared ? in.shared.data() : nullptr, .tokens = T, .k = K,
                                              .dim = D, .y = want.data()}));

    // GPU: output with one poisoned row past the end, poisoned workspace
    auto dx = to_device(to_bf16_bits(in.x));
    auto didx = to_device(in.idx);
    auto drw = to_device(in.rw);
    auto dsh = to_device(to_bf16_bits(in.shared));
    const size_t n_out = size_t(T * D);
    auto dy = poisoned<uint16_t>(n_out + size_t(D));
    const size_t ws_bytes = sm90_mxfp4_moe_prefill_workspace_bytes(T, K, s.n_experts, D, s.inter);
    auto dws = poisoned<uint8_t>(ws_bytes);
    ASSERT_TRUE(dx.is_ok() && didx.is_ok() && drw.is_ok() && dsh.is_ok() && dy.is_ok() && dws.is_ok());
    const DeviceInputs d{std::move(*dx), std::move(*didx), std::move(*drw), std::move(*dsh)};
    const MoeDecodeArgs a = make_args(s, T, d, *ep, with_shared, dy->data(), dws->data(), ws_bytes);
    auto st = Stream::create();
    ASSERT_TRUE(st.is_ok());
    DSV4_ASSERT_OK(sm90_mxfp4_moe_prefill(a, st->handle()));
    DSV4_ASSERT_OK(st->synchronize());
    const std::vector<uint16_t> bits = to_host<uint16_t>(*dy, n_out + size_t(D));
    size_t touched = 0;
    for (size_t i = n_out; i < bits.size(); ++i) touched += bits[i] != 0xffff;
    EXPECT_EQ(touched, 0u) << "stores past the last token row";
    const auto got = from_bf16_bits(std::vector<uint16_t>(bits.begin(), bits.begin() + ptrdiff_t(n_out)));
    std::printf("  %s T %4lld %-7s\n", s.name, (long long)T, rname);
    expect_within_qgmma_tolerance(got, want, "CPU");

    // a second call on the now dirty workspace (counters re-armed by the prepare launch) gives the same bits: a row's
    // result does not depend on its position inside its expert's group
    DSV4_ASSERT_OK(dy->fill_bytes(0xff));
    DSV4_ASSERT_OK(sm90_mxfp4_moe_prefill(a, st->handle()));
    DSV4_ASSERT_OK(st->synchronize());
    const auto again = from_bf16_bits(to_host<uint16_t>(*dy, n_out));
    EXPECT_EQ(count_bit_differences(got, again), 0u) << "the result changed between two identical calls";

    // the repacked layout (mxfp4_repacked.h, the engine's): the converter yields the same e4m3 tile, so the same bits
    {
        SCOPED_TRACE("repacked experts");
        MoeDecodeArgs ra = a;
        ra.format = MoeWeightFormat::kMXFP4Repacked;
        ra.experts = ep->table_repacked.as<Mxfp4ExpertPtrs>();
        DSV4_ASSERT_OK(dy->fill_bytes(0xff));
        DSV4_ASSERT_OK(sm90_mxfp4_moe_prefill(ra, st->handle()));
        DSV4_ASSERT_OK(st->synchronize());
        const auto repacked = from_bf16_bits(to_host<uint16_t>(*dy, n_out));
        EXPECT_EQ(count_bit_differences(got, repacked), 0u) << "the repacked layout changed the result";
    }

    // 256-row M tiles (what kAuto takes where experts average more than 128 picks: one converted weight tile for two
    // consumer blocks each): a row's result depends on its own activations only, so the same bits
    {
        SCOPED_TRACE("256-row M tiles");
        DSV4_ASSERT_OK(dy->fill_bytes(0xff));
        DSV4_ASSERT_OK(sm90_mxfp4_moe_prefill(a, st->handle(), MoePrefillTile::k256));
        DSV4_ASSERT_OK(st->synchronize());
        const auto big = from_bf16_bits(to_host<uint16_t>(*dy, n_out + size_t(D)));
        EXPECT_EQ(count_bit_differences(got, std::vector<float>(big.begin(), big.begin() + ptrdiff_t(n_out))), 0u)
            << "256-row M tiles changed the result";
        size_t past = 0;
        for (size_t i = n_out; i < big.size(); ++i) past += !std::isnan(big[i]);
        EXPECT_EQ(past, 0u) << "256-row M tiles: stores past the last token row";
    }

    // T = 256: the decode kernel (the prefill path of today, checked against the CPU in moe_decode_test.cpp)
    if (T <= 256) {
        const size_t dws_bytes = sm90_mxfp4_moe_decode_workspace_bytes(T, K, s.n_experts, D, s.inter);
        auto ddws = poisoned<uint8_t>(dws_bytes);
        auto ddy = poisoned<uint16_t>(n_out);
        ASSERT_TRUE(ddws.is_ok() && ddy.is_ok());
        const MoeDecodeArgs da = make_args(s, T, d, *ep, with_shared, ddy->data(), ddws->data(), dws_bytes);
        DSV4_ASSERT_OK(sm90_mxfp4_moe_decode(da, st->handle()));
        DSV4_ASSERT_OK(st->synchronize());
        const auto dec = from_bf16_bits(to_host<uint16_t>(*ddy, n_out));
        expect_within_qgmma_tolerance(got, dec, "decode");
    }
}

using PrefillParam = std::tuple<int, int64_t, Routing>;  // shape (0 Flash, 1 Pro), T, routing
class CudaMoePrefill : public ::testing::TestWithParam<PrefillParam> {};

TEST_P(CudaMoePrefill, MatchesCpuRoutedExpertsAndSum) {
    DSV4_REQUIRE_GPU();
    const auto [shape, T, routing] = GetParam();
    run_case(shape == 0 ? kFlash : kPro, T, routing);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaMoePrefill,
                         ::testing::Combine(::testing::Values(0, 1),
                                            ::testing::Values(int64_t(256), int64_t(1000), int64_t(2048)),
                                            ::testing::Values(Routing::kUniform, Routing::kSkewed)),
                         moe_case_name);

// K blocks per tile (D / 128 for gate/up, I / 128 for down) that are not a multiple of kScaleSteps (8; 4 in the
// 256-row tile): the converter copies each step's scale word on its own instead of a chunk at a time. One shape per
// GEMM on that path, the other GEMM on the chunked copies.
constexpr MoeShape kOddUp{"odd_up", 640, 2048, 256, 6};      // gate/up 5 K blocks, down 16
constexpr MoeShape kOddDown{"odd_down", 1024, 1408, 256, 6};  // gate/up 8, down 11

TEST(CudaMoePrefillScaleCopies, KBlocksNotAMultipleOfEight) {
    DSV4_REQUIRE_GPU();
    for (const MoeShape* s : {&kOddUp, &kOddDown})
        for (const Routing r : {Routing::kUniform, Routing::kSkewed}) run_case(*s, 300, r);
}

// Argument checks happen before any CUDA call (no GPU needed).
TEST(CudaMoePrefillArgs, RejectsBadShapesWithClearMessages) {
    int dummy[64] = {};
    MoeDecodeArgs a;
    a.x = a.shared = a.y = a.workspace = dummy;
    a.idx = dummy;
    a.route_w = reinterpret_cast<const float*>(dummy);
    a.experts = reinterpret_cast<const Mxfp4ExpertPtrs*>(dummy);
    a.tokens = 1000, a.k = 6, a.n_experts = 256, a.dim = 4096, a.inter = 2048, a.workspace_bytes = 1;
    auto expect_message = [&](const char* needle) {
        const Status s = sm90_mxfp4_moe_prefill(a, nullptr);
        EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
        EXPECT_NE(s.message().find(needle), std::string::npos) << "expected '" << needle << "' in " << s.to_string();
        EXPECT_NE(s.message().find("sm90_mxfp4_moe_prefill"), std::string::npos) << s.to_string();
    };
    expect_message("workspace");
    a.tokens = 0;
    expect_message("tokens 0");
    a.tokens = int64_t(1) << 24;
    expect_message("tokens 16777216");
    a.tokens = 1000, a.dim = 4000;
    expect_message("multiples of 128");
    a.dim = 4096, a.inter = 0;
    expect_message("multiples of 128");
    a.inter = 2048, a.k = 0;
    expect_message("K 0");
    a.k = 17;
    expect_message("K 17");
    a.k = 6, a.n_experts = 2000;
    expect_message("E 2000");
    a.n_experts = 256, a.idx = nullptr;
    expect_message("null pointer");
    a.idx = dummy, a.experts = nullptr;
    expect_message("null pointer");
    a.experts = reinterpret_cast<const Mxfp4ExpertPtrs*>(dummy), a.workspace = nullptr;
    expect_message("null pointer");
    a.workspace = dummy, a.format = MoeWeightFormat::kFP8Block;
    expect_message("MXFP4 experts only");
    a.format = MoeWeightFormat::kMXFP4, a.nvfp4_experts = reinterpret_cast<const Nvfp4ExpertPtrs*>(dummy);
    expect_message("MXFP4 experts only");
    a.nvfp4_experts = nullptr, a.shared_expert = reinterpret_cast<const Fp8BlockExpertPtrs*>(dummy);
    expect_message("inside sm90_mxfp4_moe_decode only");
    a.shared_expert = nullptr;
    // the workspace size query agrees with the check
    EXPECT_EQ(sm90_mxfp4_moe_prefill_workspace_bytes(0, 6, 256, 4096, 2048), 0u);
    EXPECT_GT(sm90_mxfp4_moe_prefill_workspace_bytes(8192, 6, 256, 4096, 2048), size_t(8192) * 6 * 4096 * 3);
}

}  // namespace
}  // namespace dsv4::cuda
