// The MoE decode path routing in its first launch (MoeDecodeArgs::route, moe_route.cu) against the launches it
// replaces: sm90_router_gate_select (tested against the CPU router in embed_head_test.cpp) followed by
// sm90_mxfp4_moe_decode on its picks (tested against the CPU MoE in moe_decode_test.cpp). The route computes the same
// logits in the same order and selects with the same device code, so every output must match bit for bit: the
// logits, the picks, the weights and the MoE output — on poisoned outputs and workspace, twice through the same
// workspace and counter (the counter must come back to zero), at V4-Flash and V4-Pro shapes, 1 to 8 tokens, score and
// hash routing and a case where every pick is a tie break.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "backend/cuda/common/weights.h"
#include "backend/cuda/kernels/moe/moe.h"
#include "backend/cuda/kernels/moe_prefill/moe_prefill.h"
#include "backend/cuda/kernels/router/router.h"
#include "ops/gpu_testing.h"
#include "ops/moe_test_inputs.h"

namespace dsv4::cuda {
namespace {

using backend::WeightFormat;
using namespace dsv4::cuda::testing;
using namespace dsv4::cuda::moe_testing;

struct RouteCase {
    const MoeShape* shape;
    int64_t tokens;
    bool hash = false;
    bool ties = false;  // zero gate and biases in five exact levels: every pick is a tie break
};

std::string label(const RouteCase& c) {
    return std::string(c.shape->name) + " T " + std::to_string(c.tokens) + (c.hash ? " hash" : " scores") +
           (c.ties ? " ties" : "");
}

void run_route_case(const RouteCase& c) {
    SCOPED_TRACE(label(c));
    const MoeShape& s = *c.shape;
    const int64_t T = c.tokens, E = s.n_experts, D = s.dim, K = s.k, vocab = 1000;
    ExpertPool* ep = expert_pool(s);
    ASSERT_NE(ep, nullptr) << "could not upload the expert pool";
    std::mt19937_64 rng(fresh_seed());
    std::normal_distribution<float> nd(0.0f, 0.1f);
    std::vector<float> gate = random_bf16(rng, size_t(E * D), 0.03f);
    if (c.ties) std::fill(gate.begin(), gate.end(), 0.0f);
    const std::vector<uint16_t> gate_bits = to_bf16_bits(gate);
    std::vector<float> bias(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) bias[size_t(e)] = c.ties ? 0.25f * float((e * 37) % 5) : nd(rng);
    std::vector<int64_t> tid2eid(size_t(vocab * K));
    for (int64_t v = 0; v < vocab; ++v)
        for (int64_t j = 0; j < K; ++j) tid2eid[size_t(v * K + j)] = (v * 7 + j * 13) % E;
    std::vector<int32_t> ids(static_cast<size_t>(T));
    for (auto& i : ids) i = int32_t(rng() % vocab);
    const std::vector<float> x = random_bf16(rng, size_t(T * D), 1.0f);

    auto dg = upload_weight({WeightFormat::kBF16, E, D, gate_bits.data(), nullptr}, "gate.weight");
    auto db = upload_weight({WeightFormat::kF32, 1, E, bias.data(), nullptr}, "gate.bias");
    auto dx = to_device(to_bf16_bits(x));
    auto dt2e = to_device(tid2eid);
    auto dids = to_device(ids);
    ASSERT_TRUE(dg.is_ok() && db.is_ok() && dx.is_ok() && dt2e.is_ok() && dids.is_ok());
    const size_t ws_bytes = sm90_mxfp4_moe_decode_workspace_bytes(T, K, E, D, s.inter);

    // One path's outputs: logits [T, E], picks, weights [T, K], y [T, D] (bf16 bits).
    struct Outputs {
        std::vector<float> logits, weights;
        std::vector<int32_t> idx;
        std::vector<uint16_t> y;
    };
    auto run = [&](bool route_in_moe, Outputs& out, int calls) {
        auto dlog = poisoned<float>(size_t(T * E));
        auto didx = poisoned<int32_t>(size_t(T * K));
        auto dw = poisoned<float>(size_t(T * K));
        auto dy = poisoned<uint16_t>(size_t(T * D));
        auto dws = poisoned<uint8_t>(ws_bytes);
        auto dcount = to_device(std::vector<int32_t>{0});
        ASSERT_TRUE(dlog.is_ok() && didx.is_ok() && dw.is_ok() && dy.is_ok() && dws.is_ok() && dcount.is_ok());
        RouterSelectArgs sel{dlog->as<float>(),
                             T,
                             E,
                             K,
                             c.hash ? DeviceWeightView{} : db->view(),
                             dt2e->as<int64_t>(),
                             vocab,
                             dids->as<int32_t>(),
                             2.5f,
                             nullptr,
                             didx->as<int32_t>(),
                             dw->as<float>()};
        MoeRoute route;
        route.gate = dg->view();
        route.select = sel;
        route.logits = dlog->as<float>();
        route.arrivals = dcount->as<int32_t>();
        MoeDecodeArgs a;
        a.format = MoeWeightFormat::kMXFP4Repacked;
        a.experts = ep->table_repacked.as<Mxfp4ExpertPtrs>();
        a.x = dx->data();
        a.idx = didx->as<int32_t>();
        a.route_w = dw->as<float>();
        a.route = route_in_moe ? &route : nullptr;
        a.y = dy->data();
        a.tokens = T, a.k = K, a.n_experts = E, a.dim = D, a.inter = s.inter;
        a.workspace = dws->data();
        a.workspace_bytes = ws_bytes;
        for (int call = 0; call < calls; ++call) {
            DSV4_ASSERT_OK(dy->fill_bytes(0xff));
            if (!route_in_moe) {
                DSV4_ASSERT_OK(sm90_router_gate_select({dx->data(), D, dg->view(), dlog->as<float>()}, sel, nullptr));
            }
            DSV4_ASSERT_OK(sm90_mxfp4_moe_decode(a, nullptr));
            const auto y = to_host<uint16_t>(*dy, size_t(T * D));
            if (call > 0) {
                EXPECT_EQ(y, out.y) << "call " << call << " differs from the first";
            }
            out.y = y;
            EXPECT_EQ(to_host<int32_t>(*dcount, 1)[0], 0) << "the arrival counter was not left zero";
        }
        out.logits = to_host<float>(*dlog, size_t(T * E));
        out.idx = to_host<int32_t>(*didx, size_t(T * K));
        out.weights = to_host<float>(*dw, size_t(T * K));
    };
    Outputs want, got;
    run(false, want, 1);
    run(true, got, 2);
    EXPECT_EQ(got.logits, want.logits);
    EXPECT_EQ(got.idx, want.idx);
    EXPECT_EQ(got.weights, want.weights);
    EXPECT_EQ(got.y, want.y);
    for (int32_t e : got.idx) ASSERT_TRUE(e >= 0 && e < E) << "a pick out of range";
}

TEST(CudaMoeRoute, MatchesRouterThenMoeBitForBit) {
    DSV4_REQUIRE_GPU();
    // one token takes the router's cluster form with the prepare's work after its barrier: every routing kind there
    const RouteCase cases[] = {{&kFlash, 1},
                               {&kFlash, 1, true},
                               {&kFlash, 1, false, true},
                               {&kFlash, 2},
                               {&kFlash, 5, true},
                               {&kFlash, 8},
                               {&kFlash, 3, false, true},
                               {&kPro, 1},
                               {&kPro, 1, true},
                               {&kPro, 8, true},
                               {&kPro, 4},
                               {&kPro, 2, false, true}};
    for (const RouteCase& c : cases) run_route_case(c);
}

// The argument checks run before any CUDA call (no GPU needed).
TEST(CudaMoeRouteArgs, RejectsMismatchedRoutesWithClearMessages) {
    int dummy[64] = {};
    float bias[256] = {};
    MoeRoute r;
    r.gate = {WeightFormat::kBF16, 256, 4096, dummy};
    r.select.tokens = 1, r.select.n_experts = 256, r.select.k = 6;
    r.select.bias = {WeightFormat::kF32, 1, 256, bias};
    r.select.idx = dummy;
    r.select.weights = reinterpret_cast<float*>(dummy);
    r.logits = reinterpret_cast<float*>(dummy);
    r.arrivals = dummy;
    MoeDecodeArgs a;
    a.x = a.y = dummy;
    a.idx = dummy;
    a.route_w = reinterpret_cast<const float*>(dummy);
    a.experts = reinterpret_cast<const Mxfp4ExpertPtrs*>(dummy);
    a.route = &r;
    a.tokens = 1, a.k = 6, a.n_experts = 256, a.dim = 4096, a.inter = 2048;
    const size_t ws = sm90_mxfp4_moe_decode_workspace_bytes(16, 6, 256, 4096, 2048);
    auto buf = std::vector<uint8_t>(ws + 256);
    a.workspace = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(buf.data()) + 255) & ~uintptr_t(255));
    a.workspace_bytes = ws;
    auto expect_message = [&](const char* part) {
        const Status st = sm90_mxfp4_moe_decode(a, nullptr);
        EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
        EXPECT_NE(st.message().find(part), std::string::npos) << st.to_string();
    };
    r.select.idx = dummy + 8;
    expect_message("route.select must write this call's idx");
    r.select.idx = dummy;
    r.arrivals = nullptr;
    expect_message("arrival counter");
    r.arrivals = dummy;
    r.gate.cols = 2048;
    expect_message("route.gate must be bf16 [256, 4096]");
    r.gate.cols = 4096;
    a.tokens = r.select.tokens = 9;
    expect_message("at most 8 tokens");
    a.tokens = r.select.tokens = 1;
    const Status pre = sm90_mxfp4_moe_prefill(a, nullptr);
    EXPECT_NE(pre.message().find("decode path's"), std::string::npos) << pre.to_string();
}

}  // namespace
}  // namespace dsv4::cuda
