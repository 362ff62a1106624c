// The output head and the standalone kernel cases (prim_*.npz) against the recorded outputs.
#include <cmath>
#include <cstring>

#include "core/formats.h"
#include "official_fixture.h"

namespace dsv4::official {
namespace {

using namespace backend;

std::vector<float> bytes_as_f32(const std::vector<uint8_t>& b) { return std::vector<float>(b.begin(), b.end()); }

const io::NpzFile& need(const std::string& file) {
    std::string err;
    const io::NpzFile* z = fixture(file, &err);
    if (!z) ADD_FAILURE() << err;
    static io::NpzFile empty;
    return z ? *z : empty;
}

TEST(HeadOps, EmbeddingHcHeadNormLogits) {
    std::string err;
    const Model& m = model_or_fail(&err);
    ASSERT_TRUE(err.empty()) << err;
    const auto& z = need("head.npz");
    const int64_t D = m.config.hidden_size, V = m.config.vocab_size;
    auto tokens = i32_of(z, "tokens");
    std::vector<float> emb(kT * D);
    ASSERT_TRUE(cpu::embedding(exec_ref(), {.tokens = tokens.data(), .n = kT, .table = view(m.weights.embed),
                                            .out = emb.data()})
                    .is_ok());
    expect_close("head", "embed", emb, f32_of(z, "embed"), kExact);
    // layer 0's input is the embedding repeated on 4 streams
    auto h0 = f32_of(need("layer0.npz"), "h_in");
    for (int64_t t = 0; t < kT; ++t)
        for (int j = 0; j < 4; ++j)
            ASSERT_EQ(0, std::memcmp(&h0[(t * 4 + j) * D], &emb[t * D], D * 4)) << "t=" << t;

    auto hf = f32_of(z, "h_final");
    std::vector<float> pre(kT * 4), y(kT * D), nrm(kT * D), logits(kT * V);
    const auto& hc = m.weights.hc_head;
    ASSERT_TRUE(cpu::hc_head(exec_ref(), {.x = hf.data(), .tokens = kT, .dim = D, .fn = view(hc.fn),
                                          .scale = view(hc.scale), .base = view(hc.base), .pre = pre.data(),
                                          .y = y.data()})
                    .is_ok());
    expect_close("head", "head_hc_pre", pre, f32_of(z, "head_hc_pre"), kClassA);
    expect_close("head", "head_hc_x", y, f32_of(z, "head_hc_x"), kClassB);
    auto hx = f32_of(z, "head_hc_x");
    ASSERT_TRUE(cpu::rmsnorm(exec_ref(), {.x = hx.data(), .rows = kT, .dim = D, .weight = view(m.weights.norm),
                                          .y = nrm.data()})
                    .is_ok());
    expect_close("head", "head_norm", nrm, f32_of(z, "head_norm"), kClassB);
    auto hn = f32_of(z, "head_norm");
    ASSERT_TRUE(cpu::linear(exec_ref(), {.x = hn.data(), .tokens = kT, .w = view(m.weights.head),
                                         .out = LinearOut::kF32, .y = logits.data()})
                    .is_ok());
    expect_close("head", "logits", logits, f32_of(z, "logits"), kClassA);
}

TEST(Primitives, ActQuantBitExact) {
    const auto& z = need("prim_act_quant.npz");
    auto x = f32_of(z, "x");
    const int64_t rows = 16, cols = 512;
    for (int block : {128, 64}) {
        const std::string b = std::to_string(block);
        std::vector<uint8_t> codes(rows * cols), sbytes(rows * cols / block);
        std::vector<float> scale(rows * cols / block), sim(rows * cols);
        ASSERT_TRUE(cpu::act_quant({.x = x.data(), .rows = rows, .cols = cols, .block = block, .codes = codes.data(),
                                    .scale = scale.data(), .scale_e8m0 = sbytes.data(), .x_sim = sim.data()})
                        .is_ok());
        EXPECT_EQ(codes, std::vector<uint8_t>(z.find("q" + b + "_bits")->u8().begin(), z.find("q" + b + "_bits")->u8().end()));
        EXPECT_EQ(sbytes, std::vector<uint8_t>(z.find("s" + b + "_e8m0")->u8().begin(), z.find("s" + b + "_e8m0")->u8().end()));
        expect_close("prim", "act_quant/q" + b + "_bits", bytes_as_f32(codes), bytes_as_f32(std::vector<uint8_t>(
            z.find("q" + b + "_bits")->u8().begin(), z.find("q" + b + "_bits")->u8().end())), kExact);
        expect_close("prim", "act_quant/s" + b, scale, f32_of(z, "s" + b), kExact);
        expect_close("prim", "act_quant/x_sim" + b, sim, f32_of(z, "x_sim" + b), kExact);
        std::vector<float> qv(rows * cols);
        for (size_t i = 0; i < qv.size(); ++i) qv[i] = e4m3_to_f32(codes[i]);
        expect_close("prim", "act_quant/q" + b, qv, f32_of(z, "q" + b), kExact);
    }
}

TEST(Primitives, Fp4ActQuantBitExact) {
    const auto& z = need("prim_fp4_act_quant.npz");
    auto x = f32_of(z, "x");
    const int64_t rows = 16, cols = 256;
    std::vector<uint8_t> packed(rows * cols / 2), sbytes(rows * cols / 32);
    std::vector<float> scale(rows * cols / 32), sim(rows * cols);
    ASSERT_TRUE(cpu::fp4_act_quant({.x = x.data(), .rows = rows, .cols = cols, .codes_packed = packed.data(),
                                    .scale = scale.data(), .scale_e8m0 = sbytes.data(), .x_sim = sim.data()})
                    .is_ok());
    auto rec_codes = z.find("codes_packed")->u8();
    auto rec_s = z.find("scale_e8m0")->u8();
    EXPECT_EQ(packed, std::vector<uint8_t>(rec_codes.begin(), rec_codes.end()));
    EXPECT_EQ(sbytes, std::vector<uint8_t>(rec_s.begin(), rec_s.end()));
    expect_close("prim", "fp4/codes_packed", bytes_as_f32(packed),
                 bytes_as_f32(std::vector<uint8_t>(rec_codes.begin(), rec_codes.end())), kExact);
    expect_close("prim", "fp4/scale", scale, f32_of(z, "scale"), kExact);
    // -0 must stay -0: compare bits, not values
    auto rec_sim = f32_of(z, "x_sim");
    EXPECT_EQ(0, std::memcmp(sim.data(), rec_sim.data(), sim.size() * 4)) << "x_sim bits";
    expect_close("prim", "fp4/x_sim", sim, rec_sim, kExact);
}

TEST(Primitives, HadamardBitExact) {
    const auto& z = need("prim_hadamard.npz");
    auto x = f32_of(z, "x");
    std::vector<float> y(x.size());
    ASSERT_TRUE(cpu::hadamard128(exec_ref(), {.x = x.data(), .rows = int64_t(x.size() / 128), .y = y.data()}).is_ok());
    expect_close("prim", "hadamard/y", y, f32_of(z, "y"), kExact);
}

TEST(Primitives, SplitSinkhorn) {
    const auto& z = need("prim_hc_split_sinkhorn.npz");
    auto mixes = f32_of(z, "mixes"), scale = f32_of(z, "hc_scale"), base = f32_of(z, "hc_base");
    const int64_t n = int64_t(mixes.size() / 24);
    std::vector<float> pre(n * 4), post(n * 4), comb(n * 16);
    ASSERT_TRUE(cpu::hc_split_sinkhorn(exec_ref(), {.mixes = mixes.data(), .n = n,
                                                    .scale = {WeightFormat::kF32, 1, 3, scale.data()},
                                                    .base = {WeightFormat::kF32, 1, 24, base.data()},
                                                    .pre = pre.data(), .post = post.data(), .comb = comb.data()})
                    .is_ok());
    expect_close("prim", "sinkhorn/pre", pre, f32_of(z, "pre"), kClassA);
    expect_close("prim", "sinkhorn/post", post, f32_of(z, "post"), kClassA);
    expect_close("prim", "sinkhorn/comb", comb, f32_of(z, "comb"), kClassA);
}

void gemm_case(const std::string& file, bool fp4) {
    const auto& z = need(file);
    auto a = f32_of(z, "a");
    const auto* c_rec = z.find("c");
    ASSERT_NE(c_rec, nullptr);
    const int64_t M = c_rec->shape[0], N = c_rec->shape[1], K = int64_t(a.size()) / M;
    WeightView w;
    w.rows = N;
    w.cols = K;
    if (fp4) {
        w.format = WeightFormat::kMXFP4;
        w.data = z.find("w_packed")->bytes.data();
    } else {
        w.format = WeightFormat::kFP8Block;
        w.data = z.find("w_bits")->bytes.data();
    }
    w.scale = z.find("w_scale_e8m0")->bytes.data();
    std::vector<float> c(M * N);
    ASSERT_TRUE(cpu::linear(exec_ref(), {.x = a.data(), .tokens = M, .w = w, .y = c.data()}).is_ok());
    const std::string tag = fp4 ? "fp4_gemm" : "fp8_gemm";
    expect_close("prim", tag + "/c", c, f32_of(z, "c"), kClassC);
    // the activation quantisation inside it is bit-exact
    std::vector<uint8_t> codes(M * K);
    std::vector<float> scale(M * K / 128);
    ASSERT_TRUE(cpu::act_quant({.x = a.data(), .rows = M, .cols = K, .block = 128, .codes = codes.data(),
                                .scale = scale.data()})
                    .is_ok());
    auto rec_bits = z.find("a_q_bits")->u8();
    EXPECT_EQ(codes, std::vector<uint8_t>(rec_bits.begin(), rec_bits.end()));
    expect_close("prim", tag + "/a_scale", scale, f32_of(z, "a_scale"), kExact);
}

TEST(Primitives, Fp8Gemm) { gemm_case("prim_fp8_gemm.npz", false); }
TEST(Primitives, Fp4Gemm) { gemm_case("prim_fp4_gemm.npz", true); }

TEST(Primitives, SparseAttention) {
    const auto& z = need("prim_sparse_attn.npz");
    auto q = f32_of(z, "q"), kv = f32_of(z, "kv"), sink = f32_of(z, "attn_sink");
    auto idx = i32_of(z, "topk_idxs");
    const float scale = f32_of(z, "softmax_scale")[0];
    const int64_t T = 24, H = 4, K = int64_t(idx.size()) / T;
    std::vector<float> o(T * H * 512);
    ASSERT_TRUE(cpu::sparse_attn(exec_ref(), {.q = q.data(), .kv = kv.data(), .idx = idx.data(), .tokens = T,
                                              .heads = H, .n_kv = int64_t(kv.size() / 512), .topk = K,
                                              .sink = {WeightFormat::kF32, 1, H, sink.data()}, .scale = scale,
                                              .out = o.data()})
                    .is_ok());
    expect_close("prim", "sparse_attn/o", o, f32_of(z, "o"), kClassF);
}

}  // namespace
}  // namespace dsv4::official
