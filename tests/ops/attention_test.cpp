// sm90_sparse_attn (with the fused output de-rotation) and sm90_wo_a against the CPU ops (sparse_attn then rope
// with inverse; wo_a) at V4-Flash (64 heads, 8 groups) and V4-Pro (128 heads, 16 groups) shapes, the 4-head test
// models (tests/data/goldens/*/official/config.json: window 128 + top-k 16 / 8, HCA 128 + n entries) and edge
// shapes, both precisions; -1-padded capacity-wide candidate lists against the unpadded ones, and packed FP8 K=V
// pools (kv_packed) against unpacked rows, bit for bit; wo_a on both of its kernels (decode <= 32 tokens, staged
// above) and the decode kernel's run-to-run determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/kernels/attention/attention.h"
#include "backend/cuda/kernels/kv_store/kv_store.h"
#include "core/thread_pool.h"
#include "ops/gpu_testing.h"
#include "testing/testing.h"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using backend::WeightFormat;
using namespace dsv4::cuda::testing;

// Head sinks: one N(0, 1) logit per head.
std::vector<float> random_sink(std::mt19937_64& rng, int64_t heads) {
    std::normal_distribution<float> ds(0.0f, 1.0f);
    std::vector<float> sink(static_cast<size_t>(heads));
    for (auto& v : sink) v = ds(rng);
    return sink;
}

// The CPU's result of one call (512-d heads, scale 512^-½): sparse_attn, then with derotate the inverse RoPE of
// channels 448..511 at pos.
std::vector<float> cpu_attention(Precision prec, const std::vector<float>& q, const std::vector<float>& kv,
                                 const std::vector<int32_t>& idx, const std::vector<float>& sink,
                                 const std::vector<int64_t>& pos, int64_t T, int64_t H, int64_t n_kv, int64_t topk,
                                 bool derotate, const backend::RopeFreqs& freqs) {
    std::vector<float> want(size_t(T * H * 512));
    backend::WeightView sv{WeightFormat::kF32, 1, H, sink.data(), nullptr};
    const backend::Exec ex{prec, &pool()};
    Status st = backend::cpu::sparse_attn(ex, {q.data(), kv.data(), idx.data(), T, H, 512, n_kv, topk, sv,
                                               1.0f / std::sqrt(512.0f), want.data()});
    if (st.is_ok() && derotate) st = backend::cpu::rope(ex, {want.data(), T, H, 512, 448, pos.data(), &freqs, true});
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    return want;
}

class SparseAttnTest : public ::testing::TestWithParam<Precision> {};

TEST_P(SparseAttnTest, MatchesCpu) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    struct Case {
        int64_t tokens, heads, n_kv, topk;
        bool derotate;
        int padding;  // every padding-th candidate is -1 (0: none)
        int64_t valid = -1;  // only the first `valid` candidates of a row are real, the rest -1 (-1: all)
    };
    // window 128 + top-k 512 (Flash CSA), 128 + 1024 (Pro CSA), an HCA-like 128 + 2100, odd counts, empty rows
    const Case cases[] = {{1, 64, 2000, 640, true, 0},  {3, 64, 2000, 640, false, 7}, {1, 128, 3000, 1152, true, 5},
                          {2, 128, 9000, 2228, true, 0}, {5, 16, 300, 77, false, 3},  {1, 16, 100, 1, true, 0},
                          // the 4-head test models: first token (window 1 + 0 compressed), window 128 + top-k 16
                          // (Flash-like) / 8 (Pro-like) with a partly filled window, HCA 128 + entries, a 300-token
                          // prefill; then head counts off the 16-row tile (20, 1) and an empty candidate list
                          {1, 4, 1, 1, true, 0},          {7, 4, 200, 144, true, 0, 37}, {3, 4, 150, 136, false, 2},
                          {5, 4, 140, 130, true, 0, 129}, {300, 4, 450, 144, true, 3},   {3, 20, 500, 100, true, 4},
                          {2, 1, 64, 65, false, 0, 3},    {2, 4, 10, 0, true, 0}};
    const auto freqs = backend::rope_freqs(160000, 16, 65536, 32, 1);
    for (const Case& c : cases) {
        SCOPED_TRACE("tokens " + std::to_string(c.tokens) + " heads " + std::to_string(c.heads) + " topk " +
                     std::to_string(c.topk));
        const int64_t T = c.tokens, H = c.heads, D = 512;
        auto q = random_act(prec, rng, size_t(T * H * D), 1.0f);
        auto kv = random_act(prec, rng, size_t(c.n_kv * D), 1.0f);
        const std::vector<float> sink = random_sink(rng, H);
        std::uniform_int_distribution<int32_t> pick(0, int32_t(c.n_kv - 1));
        // at least one element: the CPU op refuses a null index pointer even when topk is 0
        std::vector<int32_t> idx(size_t(std::max<int64_t>(T * c.topk, 1)), -1);
        for (size_t i = 0; i < size_t(T * c.topk); ++i)
            idx[i] = (c.padding && i % size_t(c.padding) == 1) || (c.valid >= 0 && int64_t(i) % c.topk >= c.valid)
                         ? -1
                         : pick(rng);
        if (T > 1)  // a token with no candidate at all: output 0
            std::fill(idx.begin() + c.topk, idx.begin() + 2 * c.topk, -1);
        std::vector<int64_t> pos(static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = 5000 + 131 * t;
        const std::vector<float> want =
            cpu_attention(prec, q, kv, idx, sink, pos, T, H, c.n_kv, c.topk, c.derotate, freqs);
        const float scale = 1.0f / std::sqrt(512.0f);
        auto dq = act_to_device(prec, q);
        auto dkv = act_to_device(prec, kv);
        auto didx = to_device(idx);
        auto dsink = to_device(sink);
        auto dpos = to_device(pos);
        auto dout = act_poisoned(prec, want.size());
        ASSERT_TRUE(dq.is_ok() && dkv.is_ok() && didx.is_ok() && dsink.is_ok() && dpos.is_ok() && dout.is_ok());
        SparseAttnArgs a{dq->data(), dkv->data(), didx->as<int32_t>(), T, H, c.n_kv, c.topk, dsink->as<float>(), scale,
                         c.derotate, dpos->as<int64_t>(), freqs, dout->data()};
        DSV4_ASSERT_OK(sm90_sparse_attn(prec, a, nullptr));
        auto got = act_to_host(prec, *dout, want.size());
        // reference: the same blocks, P rounding and f32 state; the tensor-core sums differ in order
        DSV4_EXPECT_CLOSE(got, want, prec == Precision::kReference ? 2e-3 : 1e-5);
        if (T > 1) {
            size_t nonzero = 0;
            for (int64_t i = H * D; i < 2 * H * D; ++i) nonzero += got[size_t(i)] != 0.0f;
            EXPECT_EQ(nonzero, 0u) << "a token without candidates must give 0";
        }
    }
}

class WoATest : public ::testing::TestWithParam<Precision> {};

// A random wo_a [rows, width]: FP8 codes (no NaN) with UE8M0 scales 2^-10..2^-6, or bf16; the host arrays back the
// returned view.
struct HostWoA {
    std::vector<uint8_t> data, scale;
    std::vector<uint16_t> bf16;
    backend::WeightView view;
};
HostWoA random_wo_a(std::mt19937_64& rng, int64_t rows, int64_t width, bool fp8) {
    HostWoA w;
    if (fp8) {
        w.data.resize(size_t(rows * width));
        std::uniform_int_distribution<int> byte(0, 255), sb(117, 121);
        for (auto& b : w.data) {
            int v = byte(rng);
            if ((v & 0x7f) == 0x7f) v &= 0xfe;
            b = uint8_t(v);
        }
        w.scale.resize(size_t(((rows + 127) / 128) * (width / 128)));
        for (auto& s : w.scale) s = uint8_t(sb(rng));
        w.view = {WeightFormat::kFP8Block, rows, width, w.data.data(), w.scale.data()};
    } else {
        w.bf16 = to_bf16_bits(random_bf16(rng, size_t(rows * width), 0.02f));
        w.view = {WeightFormat::kBF16, rows, width, w.bf16.data(), nullptr};
    }
    return w;
}

TEST_P(WoATest, MatchesCpu) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    struct Case {
        int64_t tokens, heads, groups, rank;
        bool fp8;
    };
    // Up to 32 tokens run the decode kernel (8-token tiles: 1, 5, 7, 8 one tile; 9 a full and a 1-token tile; 16,
    // 32 several), above it the staged one (33, 64, 70, 256), from kWoAGemmMinTokens (257) in kReference the batched
    // cuBLASLt GEMM on the dequantised weight (257, 300; FP8 and bf16 weights; the kF32 cases stay on the kernel)
    const Case cases[] = {{1, 64, 8, 1024, true},  {5, 64, 8, 1024, true},   {33, 128, 16, 1024, true},
                          {1, 128, 16, 1024, true}, {70, 16, 2, 128, false}, {3, 32, 4, 64, true},
                          // the test models: 4 heads, 2 groups, rank 128 (FP8 as shipped), 1 and 300 tokens
                          {1, 4, 2, 128, true},     {300, 4, 2, 128, true},  {7, 4, 2, 128, false},
                          // V4-Flash around the tile and path boundaries
                          {8, 64, 8, 1024, true},   {9, 64, 8, 1024, true},  {32, 64, 8, 1024, true},
                          {64, 64, 8, 1024, true},  {8, 128, 16, 1024, true},
                          // bf16 weights at decode; one head per group (width 512: fewer K-steps than warps)
                          {16, 16, 2, 128, false},  {2, 8, 8, 64, true},     {3, 8, 8, 64, false},
                          // around the prefill GEMM's boundary, V4-Flash and V4-Pro groups
                          {256, 64, 8, 1024, true}, {257, 64, 8, 1024, true}, {300, 128, 16, 1024, true},
                          {300, 16, 2, 128, false}};
    for (const Case& c : cases) {
        SCOPED_TRACE("tokens " + std::to_string(c.tokens) + " heads " + std::to_string(c.heads) + " groups " +
                     std::to_string(c.groups) + (c.fp8 ? " fp8" : " bf16"));
        const int64_t T = c.tokens, rows = c.groups * c.rank, width = c.heads / c.groups * 512;
        const HostWoA w = random_wo_a(rng, rows, width, c.fp8);
        auto o = random_act(prec, rng, size_t(T * c.heads * 512), 1.0f);
        std::vector<float> want(size_t(T * rows));
        DSV4_ASSERT_OK(backend::cpu::wo_a({prec, &pool()}, {o.data(), T, c.heads, 512, c.groups, c.rank, w.view,
                                                            want.data()}));
        auto dw = upload_weight(w.view, "wo_a");
        auto dox = act_to_device(prec, o);
        auto dz = act_poisoned(prec, want.size());
        ASSERT_TRUE(dw.is_ok() && dox.is_ok() && dz.is_ok());
        WoAArgs args{dox->data(), T, c.heads, c.groups, c.rank, dw->view(), dz->data()};
        const size_t ws_bytes = sm90_wo_a_workspace_bytes(prec, args);
        EXPECT_EQ(ws_bytes > 0, prec == Precision::kReference && T >= kWoAGemmMinTokens);
        auto ws = DeviceBuffer::allocate(std::max<size_t>(ws_bytes, 256), "wo_a workspace");
        ASSERT_TRUE(ws.is_ok());
        if (ws_bytes > 0) {  // the GEMM path refuses a missing workspace with a clear error
            const Status missing = sm90_wo_a(prec, args, nullptr);
            EXPECT_EQ(missing.code(), StatusCode::kInvalidArgument) << missing.to_string();
        }
        args.workspace = ws->data(), args.workspace_bytes = ws_bytes;
        DSV4_ASSERT_OK(sm90_wo_a(prec, args, nullptr));
        auto got = act_to_host(prec, *dz, want.size());
        // f32: the bf16 x three-term products are exact, but tensor-core f32 accumulation aligns addends without
        // round-to-nearest (measured 1.2e-5 over 4096-term sums, against the CPU's sequential f32 sum)
        DSV4_EXPECT_CLOSE(got, want, prec == Precision::kReference ? 2e-3 : 5e-5);
    }
}

// The decode kernel sums its warps' partial sums in a fixed order: two calls on the same inputs give the same bits.
TEST_P(WoATest, DecodeIsRunToRunIdentical) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    const int64_t heads = 64, groups = 8, rank = 1024, rows = groups * rank, width = heads / groups * 512;
    const HostWoA w = random_wo_a(rng, rows, width, true);
    auto dw = upload_weight(w.view, "wo_a");
    ASSERT_TRUE(dw.is_ok());
    for (const int64_t T : {int64_t(1), int64_t(9)}) {
        SCOPED_TRACE("tokens " + std::to_string(T));
        auto dox = act_to_device(prec, random_act(prec, rng, size_t(T * heads * 512), 1.0f));
        auto dz1 = act_poisoned(prec, size_t(T * rows));
        auto dz2 = act_poisoned(prec, size_t(T * rows));
        ASSERT_TRUE(dox.is_ok() && dz1.is_ok() && dz2.is_ok());
        DSV4_ASSERT_OK(sm90_wo_a(prec, {dox->data(), T, heads, groups, rank, dw->view(), dz1->data()}, nullptr));
        DSV4_ASSERT_OK(sm90_wo_a(prec, {dox->data(), T, heads, groups, rank, dw->view(), dz2->data()}, nullptr));
        const auto a = act_to_host(prec, *dz1, size_t(T * rows)), b = act_to_host(prec, *dz2, size_t(T * rows));
        size_t differ = 0, nonfinite = 0;
        for (size_t i = 0; i < a.size(); ++i) {
            differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
            nonfinite += !std::isfinite(a[i]);
        }
        EXPECT_EQ(differ, 0u) << "of " << a.size() << " outputs";
        EXPECT_EQ(nonfinite, 0u) << "poisoned outputs left";
    }
}

// The decode step's capacity-wide candidate lists: the window's 128 slots then the compressed picks, padded with -1
// to a fixed width (128 + 8192) whose tail is whole 64-blocks of -1, over a kv array larger than the rows referenced.
// The output must be bit-identical to the unpadded list (128 + 3 columns) over exactly the referenced rows, in both
// precisions: a fully masked block may not move the running max, the sum or the rounding of P.
class SparseAttnPaddingTest : public ::testing::TestWithParam<Precision> {};

TEST_P(SparseAttnPaddingTest, TrailingMinusOneBlocksChangeNoBit) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    const size_t act_bytes = prec == Precision::kReference ? 2 : 4;
    constexpr int64_t kWindow = 128, kValidCompressed = 3, kPaddedWidth = 128 + 8192, kUsedRows = 300;
    constexpr int64_t kUnpadded = kWindow + kValidCompressed;
    struct Case {
        int64_t tokens, heads, n_kv_padded;
        bool derotate;
    };
    // Flash (64 heads), Pro (128 heads), the test models (4 heads); the padded call sees a kv array of 4096 + 128
    // rows, the unpadded one exactly the 300 rows referenced
    const Case cases[] = {{3, 64, 4096 + 128, true}, {2, 128, 4096 + 128, false}, {4, 4, 4096 + 128, true},
                          {1, 4, kUsedRows, false}};
    const auto freqs = backend::rope_freqs(160000, 16, 65536, 32, 1);
    for (const Case& c : cases) {
        SCOPED_TRACE("tokens " + std::to_string(c.tokens) + " heads " + std::to_string(c.heads));
        const int64_t T = c.tokens, H = c.heads, D = 512;
        auto q = random_act(prec, rng, size_t(T * H * D), 1.0f);
        auto kv = random_act(prec, rng, size_t(c.n_kv_padded * D), 1.0f);
        const std::vector<float> sink = random_sink(rng, H);
        std::uniform_int_distribution<int32_t> pick(0, int32_t(kUsedRows - 1));
        std::vector<int32_t> unpadded(size_t(T * kUnpadded)), padded(size_t(T * kPaddedWidth), -1);
        for (int64_t t = 0; t < T; ++t)
            for (int64_t j = 0; j < kUnpadded; ++j) {
                // token 1: a partly filled window (slots 37..127 empty, so block 64..127 is all -1 mid-list)
                const bool empty_slot = t == 1 && j >= 37 && j < kWindow;
                const int32_t v = empty_slot ? -1 : pick(rng);
                unpadded[size_t(t * kUnpadded + j)] = v;
                padded[size_t(t * kPaddedWidth + j)] = v;
            }
        std::vector<int64_t> pos(static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = 5000 + 131 * t;
        auto dq = act_to_device(prec, q);
        auto dkv = act_to_device(prec, kv);
        auto du = to_device(unpadded);
        auto dp = to_device(padded);
        auto dsink = to_device(sink);
        auto dpos = to_device(pos);
        auto out_u = act_poisoned(prec, size_t(T * H * D));
        auto out_p = act_poisoned(prec, size_t(T * H * D));
        ASSERT_TRUE(dq.is_ok() && dkv.is_ok() && du.is_ok() && dp.is_ok() && dsink.is_ok() && dpos.is_ok() &&
                    out_u.is_ok() && out_p.is_ok());
        const float scale = 1.0f / std::sqrt(512.0f);
        SparseAttnArgs a{dq->data(), dkv->data(), du->as<int32_t>(), T, H, kUsedRows, kUnpadded, dsink->as<float>(),
                         scale, c.derotate, dpos->as<int64_t>(), freqs, out_u->data()};
        DSV4_ASSERT_OK(sm90_sparse_attn(prec, a, nullptr));
        a.idx = dp->as<int32_t>();
        a.n_kv = c.n_kv_padded;
        a.topk = kPaddedWidth;
        a.out = out_p->data();
        DSV4_ASSERT_OK(sm90_sparse_attn(prec, a, nullptr));
        const size_t diff = differing_bytes(*out_u, *out_p, size_t(T * H * D) * act_bytes);
        EXPECT_EQ(diff, 0u) << "padding the list with -1 blocks changed " << diff << " output bytes";
        // and the unpadded result is the CPU's (so equal outputs cannot both be wrong)
        const std::vector<float> want =
            cpu_attention(prec, q, kv, unpadded, sink, pos, T, H, kUsedRows, kUnpadded, c.derotate, freqs);
        DSV4_EXPECT_CLOSE(act_to_host(prec, *out_p, want.size()), want, prec == Precision::kReference ? 2e-3 : 1e-5);
    }
}

// kv_packed: the same FP8-simulated rows stored as 584-byte rows (kv_store.h) at shuffled pool rows, the candidate
// lists mapped to those rows; the output must be bit-identical to the unpacked call (kReference; kF32 ignores the
// flag and must not change either). Flash (64 heads, 128 + 512), Pro (128 heads, 128 + 1024), the 4-head models;
// -1 candidates and de-rotation.
class SparseAttnPackedTest : public ::testing::TestWithParam<Precision> {};

TEST_P(SparseAttnPackedTest, PackedRowsAreBitIdenticalToUnpacked) {
    DSV4_REQUIRE_GPU();
    const Precision prec = GetParam();
    std::mt19937_64 rng(fresh_seed());
    const size_t act_bytes = prec == Precision::kReference ? 2 : 4;
    struct Case {
        int64_t tokens, heads, n_kv, topk;
        bool derotate;
        int padding;  // every padding-th candidate is -1
    };
    // the last case is a prefill pass (>= kSparseAttnPrefillMinTokens tokens): both calls take the wgmma prefill
    // kernel, with its packed and its bf16-row producer
    const Case cases[] = {{3, 64, 2000, 640, true, 7}, {2, 128, 3000, 1152, false, 5}, {2, 128, 700, 1152, true, 0},
                          {5, 4, 300, 144, true, 3},   {1, 4, 20, 16, false, 0},      {3, 20, 500, 100, true, 4},
                          {300, 64, 2000, 640, true, 7}};
    const auto freqs = backend::rope_freqs(160000, 16, 65536, 32, 1);
    for (const Case& c : cases) {
        SCOPED_TRACE("tokens " + std::to_string(c.tokens) + " heads " + std::to_string(c.heads) + " topk " +
                     std::to_string(c.topk));
        const int64_t T = c.tokens, H = c.heads, D = 512, pool_rows = c.n_kv + 37;
        auto q = random_act(prec, rng, size_t(T * H * D), 1.0f);
        auto kv = random_act(prec, rng, size_t(c.n_kv * D), 1.0f);
        if (prec == Precision::kReference)  // the values a cached K=V row holds
            DSV4_ASSERT_OK(backend::cpu::kv_fp8_sim({prec, &pool()}, {kv.data(), c.n_kv, D, 64}));
        const std::vector<float> sink = random_sink(rng, H);
        std::vector<int32_t> where(static_cast<size_t>(pool_rows));  // kv row i lives at pool row where[i]
        std::iota(where.begin(), where.end(), 0);
        std::shuffle(where.begin(), where.end(), rng);
        where.resize(size_t(c.n_kv));
        std::uniform_int_distribution<int32_t> pick(0, int32_t(c.n_kv - 1));
        std::vector<int32_t> idx(size_t(T * c.topk)), idx_pool(idx.size());
        for (size_t i = 0; i < idx.size(); ++i) {
            idx[i] = c.padding && i % size_t(c.padding) == 1 ? -1 : pick(rng);
            idx_pool[i] = idx[i] < 0 ? -1 : where[size_t(idx[i])];
        }
        std::vector<int64_t> pos(static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = 7000 + 97 * t;
        auto dq = act_to_device(prec, q);
        auto dkv = act_to_device(prec, kv);
        auto dwhere = to_device(where);
        auto dpool = poisoned<uint8_t>(size_t(pool_rows * kv_row_bytes(prec)));
        auto didx = to_device(idx);
        auto didx_pool = to_device(idx_pool);
        auto dsink = to_device(sink);
        auto dpos = to_device(pos);
        auto out_u = act_poisoned(prec, size_t(T * H * D));
        auto out_p = act_poisoned(prec, size_t(T * H * D));
        ASSERT_TRUE(dq.is_ok() && dkv.is_ok() && dwhere.is_ok() && dpool.is_ok() && didx.is_ok() &&
                    didx_pool.is_ok() && dsink.is_ok() && dpos.is_ok() && out_u.is_ok() && out_p.is_ok());
        DSV4_ASSERT_OK(sm90_kv_pack(prec, {dkv->data(), c.n_kv, dwhere->as<int32_t>(), 0, dpool->data()}, nullptr));
        const float scale = 1.0f / std::sqrt(512.0f);
        SparseAttnArgs a{dq->data(), dkv->data(), didx->as<int32_t>(), T, H, c.n_kv, c.topk, dsink->as<float>(),
                         scale, c.derotate, dpos->as<int64_t>(), freqs, out_u->data()};
        DSV4_ASSERT_OK(sm90_sparse_attn(prec, a, nullptr));
        a.kv = dpool->data();
        a.kv_packed = true;
        a.idx = didx_pool->as<int32_t>();
        a.n_kv = pool_rows;
        a.out = out_p->data();
        DSV4_ASSERT_OK(sm90_sparse_attn(prec, a, nullptr));
        const size_t diff = differing_bytes(*out_u, *out_p, size_t(T * H * D) * act_bytes);
        EXPECT_EQ(diff, 0u) << "packed rows changed " << diff << " output bytes";
        // and the unpacked result is the CPU's (so equal outputs cannot both be wrong)
        const std::vector<float> want =
            cpu_attention(prec, q, kv, idx, sink, pos, T, H, c.n_kv, c.topk, c.derotate, freqs);
        DSV4_EXPECT_CLOSE(act_to_host(prec, *out_p, want.size()), want, prec == Precision::kReference ? 2e-3 : 1e-5);
    }
}

// Calls of at least kSparseAttnPrefillMinTokens tokens (heads a multiple of 64) run the wgmma prefill kernel; each
// head's arithmetic is the one-pass kernel's, so one such call — on the packed pool and on the same rows as bf16 —
// must give the bits of the same tokens in calls of at most 256 (the one-pass mma.sync kernel). Reference numerics (the
// f32 mode has its own kernel); Flash (64 heads, 128 + 512) and Pro (128 heads, 128 + 1024) widths and a list that ends
// inside a block (200), -1 candidates, a token without any, a token whose first block is all -1 (skipped whole),
// de-rotation.
TEST(SparseAttnPrefill, ManyTokenCallsMatchSmallCallsBitForBit) {
    DSV4_REQUIRE_GPU();
    const Precision prec = Precision::kReference;
    std::mt19937_64 rng(fresh_seed());
    struct Case {
        int64_t tokens, heads, n_kv, topk;
    };
    const auto freqs = backend::rope_freqs(160000, 16, 65536, 32, 1);
    for (const Case c : {Case{300, 64, 2000, 640}, Case{260, 128, 3000, 1152}, Case{270, 64, 500, 200}}) {
        SCOPED_TRACE("tokens " + std::to_string(c.tokens) + " heads " + std::to_string(c.heads));
        ASSERT_GE(c.tokens, kSparseAttnPrefillMinTokens);
        const int64_t T = c.tokens, H = c.heads, D = 512, first = 200;  // the small calls: first, then T − first
        auto q = random_act(prec, rng, size_t(T * H * D), 1.0f);
        auto kv = random_act(prec, rng, size_t(c.n_kv * D), 1.0f);
        DSV4_ASSERT_OK(backend::cpu::kv_fp8_sim({prec, &pool()}, {kv.data(), c.n_kv, D, 64}));  // cached values
        const std::vector<float> sink = random_sink(rng, H);
        std::uniform_int_distribution<int32_t> pick(0, int32_t(c.n_kv - 1));
        std::vector<int32_t> idx(size_t(T * c.topk));
        for (size_t i = 0; i < idx.size(); ++i) idx[i] = i % 9 == 4 ? -1 : pick(rng);
        std::fill(idx.begin() + 5 * c.topk, idx.begin() + 6 * c.topk, -1);   // token 5: no candidate
        std::fill(idx.begin() + 7 * c.topk, idx.begin() + 7 * c.topk + 64, -1);  // token 7: first block empty
        std::vector<int64_t> pos(static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = 3000 + 61 * t;
        std::vector<int32_t> rows(static_cast<size_t>(c.n_kv));  // pool row i holds kv row i
        std::iota(rows.begin(), rows.end(), 0);
        auto dq = act_to_device(prec, q);
        auto dkv = act_to_device(prec, kv);
        auto drows = to_device(rows);
        auto dpool = poisoned<uint8_t>(size_t(c.n_kv * kv_row_bytes(prec)));
        auto didx = to_device(idx);
        auto dsink = to_device(sink);
        auto dpos = to_device(pos);
        auto one = poisoned<uint16_t>(size_t(T * H * D));
        auto parts = poisoned<uint16_t>(size_t(T * H * D));
        ASSERT_TRUE(dq.is_ok() && dkv.is_ok() && drows.is_ok() && dpool.is_ok() && didx.is_ok() && dsink.is_ok() &&
                    dpos.is_ok() && one.is_ok() && parts.is_ok());
        DSV4_ASSERT_OK(sm90_kv_pack(prec, {dkv->data(), c.n_kv, drows->as<int32_t>(), 0, dpool->data()}, nullptr));
        const float scale = 1.0f / std::sqrt(512.0f);
        SparseAttnArgs a{dq->data(), dpool->data(), didx->as<int32_t>(), T, H, c.n_kv, c.topk, dsink->as<float>(),
                         scale, true, dpos->as<int64_t>(), freqs, one->data()};
        a.kv_packed = true;
        ASSERT_TRUE(sparse_attn_takes_prefill_kernel(prec, a));
        DSV4_ASSERT_OK(sm90_sparse_attn(prec, a, nullptr));
        for (const int64_t t0 : {int64_t(0), first}) {
            SparseAttnArgs b = a;
            b.tokens = t0 == 0 ? first : T - first;
            b.q = dq->as<uint16_t>() + t0 * H * D;
            b.idx = didx->as<int32_t>() + t0 * c.topk;
            b.positions = dpos->as<int64_t>() + t0;
            b.out = parts->as<uint16_t>() + t0 * H * D;
            ASSERT_FALSE(sparse_attn_takes_prefill_kernel(prec, b));
            DSV4_ASSERT_OK(sm90_sparse_attn(prec, b, nullptr));
        }
        const size_t diff = differing_bytes(*one, *parts, size_t(T * H * D) * 2);
        EXPECT_EQ(diff, 0u) << "the prefill kernel changed " << diff << " output bytes";
        SparseAttnArgs u = a;  // the same rows as bf16: row i of kv is pool row i
        auto one_bf16 = poisoned<uint16_t>(size_t(T * H * D));
        ASSERT_TRUE(one_bf16.is_ok());
        u.kv = dkv->data(), u.kv_packed = false, u.out = one_bf16->data();
        ASSERT_TRUE(sparse_attn_takes_prefill_kernel(prec, u));
        DSV4_ASSERT_OK(sm90_sparse_attn(prec, u, nullptr));
        const size_t diff_bf16 = differing_bytes(*one_bf16, *parts, size_t(T * H * D) * 2);
        EXPECT_EQ(diff_bf16, 0u) << "the prefill kernel on bf16 rows changed " << diff_bf16 << " output bytes";
        // and the prefill kernel's result is the CPU's (so equal outputs cannot both be wrong)
        const std::vector<float> want = cpu_attention(prec, q, kv, idx, sink, pos, T, H, c.n_kv, c.topk, true, freqs);
        DSV4_EXPECT_CLOSE(act_to_host(prec, *one, want.size()), want, 2e-3);
    }
}

TEST(AttentionValidation, BadShapesAreClearErrors) {
    DSV4_REQUIRE_GPU();
    auto buf = DeviceBuffer::allocate(1 << 16);
    ASSERT_TRUE(buf.is_ok());
    SparseAttnArgs a{buf->data(), buf->data(), buf->as<int32_t>(), 1, 0, 10, 10, buf->as<float>(), 0.04f};
    a.out = buf->data();
    Status s = sm90_sparse_attn(Precision::kReference, a, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("heads 0"), std::string::npos) << s.message();
    WoAArgs w{buf->data(), 1, 64, 8, 1000, {}, buf->data()};
    s = sm90_wo_a(Precision::kReference, w, nullptr);
    EXPECT_NE(s.message().find("multiple of 64"), std::string::npos) << s.message();
}

const auto kPrecisions = ::testing::Values(Precision::kReference, Precision::kF32);
std::string precision_label(const ::testing::TestParamInfo<Precision>& i) { return backend::precision_name(i.param); }
INSTANTIATE_TEST_SUITE_P(Cuda, SparseAttnTest, kPrecisions, precision_label);
INSTANTIATE_TEST_SUITE_P(Cuda, SparseAttnPaddingTest, kPrecisions, precision_label);
INSTANTIATE_TEST_SUITE_P(Cuda, SparseAttnPackedTest, kPrecisions, precision_label);
INSTANTIATE_TEST_SUITE_P(Cuda, WoATest, kPrecisions, precision_label);

}  // namespace
}  // namespace dsv4::cuda
