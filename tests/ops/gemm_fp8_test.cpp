// sm90_act_quant_e4m3 + sm90_fp8_gemm_block128 against the CPU linear op on an FP8 weight in reference numerics
// (act_quant(128) then the per-128-K-block scaled GEMM, bf16 out): class C of tests/data/official_ops — rel_l2 <= 1e-3
// and bit-exact in almost every element (tensor-core accumulation inside a K block may round differently).
#include <gtest/gtest.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/kernels/act_quant/act_quant.h"
#include "backend/cuda/kernels/gemm_fp8/gemm_fp8.h"
#include "core/thread_pool.h"
#include "ops/gpu_testing.h"
#include "testing/testing.h"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using namespace dsv4::cuda::testing;

// A random FP8 block weight as shipped: e4m3 bytes (no NaN codes) and UE8M0 block scales around 2^-5..2^7.
struct HostFp8Weight {
    std::vector<uint8_t> data, scale;
    backend::WeightView view(int64_t n, int64_t k) const {
        return {backend::WeightFormat::kFP8Block, n, k, data.data(), scale.data()};
    }
};
HostFp8Weight random_fp8_weight(std::mt19937_64& rng, int64_t n, int64_t k) {
    HostFp8Weight w;
    w.data.resize(size_t(n * k));
    std::uniform_int_distribution<int> byte(0, 255), sb(122, 134);
    for (auto& b : w.data) {
        int v = byte(rng);
        if ((v & 0x7f) == 0x7f) v &= 0xfe;  // 0x7f / 0xff are NaN in e4m3fn
        b = uint8_t(v);
    }
    w.scale.resize(size_t(((n + 127) / 128) * ((k + 127) / 128)));
    for (auto& s : w.scale) s = uint8_t(sb(rng));
    return w;
}

struct GemmCase {
    const char* name;
    int64_t tokens, n, k;
};

void run_case(std::mt19937_64& rng, const GemmCase& c) {
    SCOPED_TRACE(std::string(c.name) + " T " + std::to_string(c.tokens) + " N " + std::to_string(c.n) + " K " +
                 std::to_string(c.k));
    auto x = random_bf16(rng, size_t(c.tokens * c.k), 1.5f);
    auto w = random_fp8_weight(rng, c.n, c.k);
    std::vector<float> want(size_t(c.tokens * c.n));
    backend::LinearParams lp{x.data(), c.tokens, w.view(c.n, c.k), backend::LinearOut::kBF16, want.data()};
    DSV4_ASSERT_OK(backend::cpu::linear({Precision::kReference, &pool()}, lp));

    auto dw = upload_weight(w.view(c.n, c.k), c.name);
    ASSERT_TRUE(dw.is_ok()) << dw.status().to_string();
    auto dx = to_device(to_bf16_bits(x));
    auto dcodes = poisoned<uint8_t>(size_t(c.tokens * c.k));
    auto dscale = poisoned<float>(size_t(c.tokens * c.k / 128));
    auto dy = poisoned<uint16_t>(want.size());
    const size_t ws_bytes = sm90_fp8_gemm_workspace_bytes(c.tokens, c.n, c.k);
    auto dws = poisoned<uint8_t>(ws_bytes);
    ASSERT_TRUE(dx.is_ok() && dcodes.is_ok() && dscale.is_ok() && dy.is_ok() && dws.is_ok());
    DSV4_ASSERT_OK(sm90_act_quant_e4m3(
        {dx->data(), c.tokens, c.k, 128, dcodes->as<uint8_t>(), dscale->as<float>(), nullptr, nullptr}, nullptr));
    Fp8GemmArgs a{dcodes->as<uint8_t>(), dscale->as<float>(), c.tokens, dw->view(), dy->data(), dws->as<float>(),
                  ws_bytes};
    DSV4_ASSERT_OK(sm90_fp8_gemm_block128(a, nullptr));
    auto got = from_bf16_bits(to_host<uint16_t>(*dy, want.size()));
    DSV4_EXPECT_CLOSE(got, want, 1e-3);
    const size_t diff = count_bit_differences(got, want);
    std::printf("  %-14s T %5lld N %6lld K %6lld  split-K workspace %8zu B  bit-exact %.4f%%\n", c.name,
                (long long)c.tokens, (long long)c.n, (long long)c.k, ws_bytes,
                100.0 * double(got.size() - diff) / double(got.size()));
    EXPECT_LE(diff, got.size() / 100 + 1) << "more than 1% of outputs differ in their bits";
}

TEST(CudaFp8Gemm, MatchesCpuLinearAtFlashShapes) {
    DSV4_REQUIRE_GPU();
    std::mt19937_64 rng(fresh_seed());
    const GemmCase cases[] = {
        {"wq_a", 1, 1024, 4096},    {"wq_a", 64, 1024, 4096},   {"wq_b", 1, 32768, 1024},
        {"wq_b", 37, 32768, 1024},  {"wkv", 1, 512, 4096},      {"wkv", 130, 512, 4096},
        {"wo_b", 1, 4096, 8192},    {"wo_b", 9, 4096, 8192},    {"shared_w1", 16, 2048, 4096},
        {"shared_w2", 3, 4096, 2048}, {"indexer.wq_b", 5, 8192, 1024},
    };
    for (const GemmCase& c : cases) run_case(rng, c);
}

TEST(CudaFp8Gemm, MatchesCpuLinearAtProShapes) {
    DSV4_REQUIRE_GPU();
    std::mt19937_64 rng(fresh_seed());
    const GemmCase cases[] = {
        {"wq_a", 1, 1536, 7168},   {"wq_b", 1, 65536, 1536}, {"wq_b", 20, 65536, 1536},
        {"wo_b", 1, 7168, 16384},  {"wo_b", 33, 7168, 16384}, {"shared_w1", 64, 3072, 7168},
        {"shared_w2", 1, 7168, 3072},
    };
    for (const GemmCase& c : cases) run_case(rng, c);
}

TEST(CudaFp8Gemm, EdgeShapes) {
    DSV4_REQUIRE_GPU();
    std::mt19937_64 rng(fresh_seed());
    // N not a multiple of the 64-row tile or of the 128-row scale block; token counts off every tile size; K = 128.
    const GemmCase cases[] = {{"edge", 1, 200, 256}, {"edge", 3, 72, 128}, {"edge", 17, 328, 384},
                              {"edge", 65, 136, 640}, {"edge", 200, 1000, 1024}, {"prefill", 512, 1024, 4096}};
    for (const GemmCase& c : cases) run_case(rng, c);
}

TEST(CudaFp8Gemm, MatchesCpuLinearAtTestModelShapes) {
    DSV4_REQUIRE_GPU();
    std::mt19937_64 rng(fresh_seed());
    // tests/data/goldens/*/official: hidden 128, q_lora 128, 4 heads x 512, o_groups 2 x o_lora 128, indexer 4 x 128,
    // shared expert 128; 1 token, a few, and a 300-token prefill
    const GemmCase cases[] = {{"wq_a", 1, 128, 128},        {"wq_a", 300, 128, 128},   {"wq_b", 1, 2048, 128},
                              {"wq_b", 300, 2048, 128},     {"wkv", 3, 512, 128},      {"wo_b", 1, 128, 256},
                              {"wo_b", 300, 128, 256},      {"shared_w1", 7, 128, 128}, {"indexer.wq_b", 300, 512, 128}};
    for (const GemmCase& c : cases) run_case(rng, c);
}

TEST(CudaFp8Gemm, DecodePathAtEveryTokenCountAndSplit) {
    DSV4_REQUIRE_GPU();
    std::mt19937_64 rng(fresh_seed());
    // 1-16 tokens run the register-streaming kernel (gemv_fp8.cu); its K splits inside a block are 1 (q_b), 2 (N 16000,
    // K 512), 4 (indexer q_b) or 8 (o_b, q_a, wkv, N 1000) by shape; N off the 16-row tile and the 128-row scale block
    for (int64_t t = 1; t <= 8; ++t) run_case(rng, {"decode", t, 1000, 2048});
    // two token tiles (9-16), then the ring GEMM's decode shapes with K split across blocks (17-64)
    for (const int64_t t : {9, 16, 23, 32, 33, 50, 64}) run_case(rng, {"decode", t, 1000, 2048});
    const GemmCase cases[] = {
        {"wq_b", 8, 32768, 1024},        {"wo_b", 8, 4096, 8192},  {"wkv", 2, 512, 4096},
        {"indexer.wq_b", 1, 8192, 1024}, {"edge", 1, 24, 512},     {"edge", 6, 3000, 640},
        {"two splits", 3, 16000, 512},   {"wo_b", 64, 4096, 8192}, {"two splits", 40, 16000, 512}};
    for (const GemmCase& c : cases) run_case(rng, c);
}

TEST(CudaFp8Gemm, RejectsWrongFormatAndMissingWorkspace) {
    DSV4_REQUIRE_GPU();
    auto buf = DeviceBuffer::allocate(1 << 20);
    ASSERT_TRUE(buf.is_ok());
    DeviceWeightView w{backend::WeightFormat::kBF16, 128, 128, buf->data(), buf->as<uint8_t>()};
    Fp8GemmArgs a{buf->as<uint8_t>(), buf->as<float>(), 1, w, buf->data(), nullptr, 0};
    Status s = sm90_fp8_gemm_block128(a, nullptr);
    EXPECT_NE(s.message().find("expected fp8"), std::string::npos) << s.message();
    a.w.format = backend::WeightFormat::kFP8Block;
    a.w.rows = 512;
    a.w.cols = 4096;  // 100 tokens, 16 tiles: needs split-K (up to 16 tokens the decode path needs no workspace)
    a.tokens = 100;
    s = sm90_fp8_gemm_block128(a, nullptr);
    EXPECT_NE(s.message().find("workspace"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace dsv4::cuda
