// Head and primitives: the CUDA kernels against DeepSeek's recorded per-op outputs (tests/data/official_ops, README there): every op the
// CPU reference is checked on in tests/unit/official_ops runs here as the kernel sequence the GPU forward uses
// (src/engine/cuda/gpu_forward.cpp, gpu_attention.cpp) in Precision::kReference, on exactly the recorded inputs
// (bf16 arrays uploaded bit for bit, outputs poisoned with 0xff first), and is compared with the recorded output by
// the same measure and tolerance class as the CPU test (official_fixture.h).
#include "ops/official_ops_gpu.h"

namespace dsv4::official {
namespace {

// ------------------------------------------------------------------------------------------- head, primitives

// The embedding (sm90_embedding) and its copy into the 4 streams (sm90_broadcast_streams), the head mix
// (sm90_hc_head), the final norm, and the f32 logits (linear as the forward runs it, and sm90_bf16_gemm_f32).
TEST(GpuHeadOps, EmbeddingHcHeadNormLogits) {
    DSV4_REQUIRE_GPU();
    std::string err;
    const Model& m = model_or_fail(&err);
    ASSERT_TRUE(err.empty()) << err;
    const auto& z = need("head.npz");
    const int64_t D = m.config.hidden_size, V = m.config.vocab_size;
    Gpu gpu;
    auto tokens = i32_of(z, "tokens");
    ASSERT_TRUE(has_size(tokens, kT, "head.npz tokens"));
    DeviceWeightView table, fn, scale, base, norm, head;
    ASSERT_TRUE(gpu.put(m.weights.embed, &table));
    ASSERT_TRUE(gpu.put(m.weights.hc_head.fn, &fn));
    ASSERT_TRUE(gpu.put(m.weights.hc_head.scale, &scale));
    ASSERT_TRUE(gpu.put(m.weights.hc_head.base, &base));
    ASSERT_TRUE(gpu.put(m.weights.norm, &norm));
    ASSERT_TRUE(gpu.put(m.weights.head, &head));
    ASSERT_EQ(head.rows, V) << m.weights.head.name;

    OFFICIAL_GPU_ASSIGN(dtok, ct::to_device(tokens));
    OFFICIAL_GPU_ASSIGN(emb, ct::poisoned<uint16_t>(kT * D));
    OFFICIAL_GPU_ASSIGN(bad, ct::poisoned<int32_t>(1));
    DSV4_ASSERT_OK(cuda::sm90_embedding(
        kRef,
        {.tokens = dtok.as<int32_t>(), .n = kT, .table = table, .out = emb.data(), .bad_position = bad.as<int32_t>()},
        nullptr));
    expect_close("gpu:head", "embed", bf16_down(emb, kT * D), f32_of(z, "embed"), kExact);
    EXPECT_EQ(ct::to_host<int32_t>(bad, 1)[0], cuda::kNoBadToken) << "a recorded token id was reported out of range";
    // layer 0's input is the embedding repeated on 4 streams
    OFFICIAL_GPU_ASSIGN(streams, ct::poisoned<uint16_t>(kT * 4 * D));
    DSV4_ASSERT_OK(cuda::sm90_broadcast_streams(
        kRef, {.x = emb.data(), .rows = kT, .dim = D, .hc = 4, .streams = streams.data()}, nullptr));
    expect_close("gpu:head", "h_in(embed)", bf16_down(streams, kT * 4 * D), f32_of(need("layer0.npz"), "h_in"),
                 kExact);

    auto hf = f32_of(z, "h_final");
    ASSERT_TRUE(has_size(hf, kT * 4 * D, "head.npz h_final"));
    OFFICIAL_GPU_ASSIGN(x, bf16_up(hf, "head.npz h_final"));
    OFFICIAL_GPU_ASSIGN(pre, ct::poisoned<float>(kT * 4));
    OFFICIAL_GPU_ASSIGN(y, ct::poisoned<uint16_t>(kT * D));
    cuda::HcHeadArgs hp{.x = x.data(), .tokens = kT, .dim = D, .fn = fn, .scale = scale, .base = base,
                        .hc_eps = float(m.config.hc_eps), .norm_eps = float(m.config.rms_norm_eps),
                        .pre = pre.as<float>(), .y = y.data()};
    DSV4_ASSERT_OK(cuda::sm90_hc_head(kRef, hp, nullptr));
    expect_close("gpu:head", "head_hc_pre", f32_down(pre, kT * 4), f32_of(z, "head_hc_pre"), kClassA);
    expect_close("gpu:head", "head_hc_x", bf16_down(y, kT * D), f32_of(z, "head_hc_x"), kClassB);

    auto hx = f32_of(z, "head_hc_x");
    ASSERT_TRUE(has_size(hx, kT * D, "head.npz head_hc_x"));
    OFFICIAL_GPU_ASSIGN(dhx, bf16_up(hx, "head.npz head_hc_x"));
    OFFICIAL_GPU_ASSIGN(nrm, ct::poisoned<uint16_t>(kT * D));
    DSV4_ASSERT_OK(cuda::sm90_rmsnorm(kRef, {.x = dhx.data(), .rows = kT, .dim = D, .weight = norm,
                                             .eps = float(m.config.rms_norm_eps), .y = nrm.data()},
                                      nullptr));
    expect_close("gpu:head", "head_norm", bf16_down(nrm, kT * D), f32_of(z, "head_norm"), kClassB);

    auto hn = f32_of(z, "head_norm");
    ASSERT_TRUE(has_size(hn, kT * D, "head.npz head_norm"));
    OFFICIAL_GPU_ASSIGN(dhn, bf16_up(hn, "head.npz head_norm"));
    OFFICIAL_GPU_ASSIGN(logits, ct::poisoned<float>(kT * V));
    DSV4_ASSERT_OK(gpu.linear(dhn.data(), kT, head, LinearOut::kF32, logits.data()));
    expect_close("gpu:head", "logits", f32_down(logits, kT * V), f32_of(z, "logits"), kClassA);
    OFFICIAL_GPU_ASSIGN(logits2, ct::poisoned<float>(kT * V));
    const size_t ws_bytes = cuda::sm90_bf16_gemm_f32_workspace_bytes(kRef, kT, D);
    OFFICIAL_GPU_ASSIGN(ws, gpu.workspace(ws_bytes));
    DSV4_ASSERT_OK(cuda::sm90_bf16_gemm_f32(kRef, {.x = dhn.data(), .tokens = kT, .w = head,
                                                   .y = logits2.as<float>(), .workspace = ws,
                                                   .workspace_bytes = ws_bytes},
                                            nullptr));
    expect_close("gpu:head", "logits(gemm)", f32_down(logits2, kT * V), f32_of(z, "logits"), kClassA);
}

// Shape of a recorded array, or an empty vector (the test then fails on the size check).
std::vector<int64_t> shape_of(const io::NpzFile& z, const std::string& name) {
    const io::NpyArray* a = z.find(name);
    EXPECT_NE(a, nullptr) << z.label() << ": " << name;
    return a ? a->shape : std::vector<int64_t>{};
}

TEST(GpuPrimitives, ActQuantBitExact) {
    DSV4_REQUIRE_GPU();
    const auto& z = need("prim_act_quant.npz");
    auto x = f32_of(z, "x");
    const int64_t rows = 16, cols = 512;
    ASSERT_TRUE(has_size(x, rows * cols, "prim_act_quant x"));
    OFFICIAL_GPU_ASSIGN(dx, bf16_up(x, "prim_act_quant x"));
    for (int block : {128, 64}) {
        const std::string b = std::to_string(block);
        SCOPED_TRACE("block " + b);
        const int64_t nb = rows * cols / block;
        OFFICIAL_GPU_ASSIGN(codes, ct::poisoned<uint8_t>(rows * cols));
        OFFICIAL_GPU_ASSIGN(scale, ct::poisoned<float>(nb));
        OFFICIAL_GPU_ASSIGN(sbytes, ct::poisoned<uint8_t>(nb));
        OFFICIAL_GPU_ASSIGN(sim, ct::poisoned<uint16_t>(rows * cols));
        cuda::ActQuantArgs a{.x = dx.data(), .rows = rows, .cols = cols, .block = block, .codes = codes.as<uint8_t>(),
                             .scale = scale.as<float>(), .scale_e8m0 = sbytes.as<uint8_t>(), .x_sim = sim.data()};
        DSV4_ASSERT_OK(cuda::sm90_act_quant_e4m3(a, nullptr));
        auto got_codes = ct::to_host<uint8_t>(codes, size_t(rows * cols));
        auto got_sbytes = ct::to_host<uint8_t>(sbytes, size_t(nb));
        EXPECT_EQ(got_codes, u8_of(z, "q" + b + "_bits"));
        EXPECT_EQ(got_sbytes, u8_of(z, "s" + b + "_e8m0"));
        expect_close("gpu:prim", "act_quant/q" + b + "_bits", bytes_as_f32(got_codes),
                     bytes_as_f32(u8_of(z, "q" + b + "_bits")), kExact);
        expect_close("gpu:prim", "act_quant/s" + b, f32_down(scale, nb), f32_of(z, "s" + b), kExact);
        expect_close("gpu:prim", "act_quant/x_sim" + b, bf16_down(sim, rows * cols), f32_of(z, "x_sim" + b), kExact);
        std::vector<float> qv(got_codes.size());
        for (size_t i = 0; i < qv.size(); ++i) qv[i] = e4m3_to_f32(got_codes[i]);
        expect_close("gpu:prim", "act_quant/q" + b, qv, f32_of(z, "q" + b), kExact);
    }
}

TEST(GpuPrimitives, Fp4ActQuantBitExact) {
    DSV4_REQUIRE_GPU();
    const auto& z = need("prim_fp4_act_quant.npz");
    auto x = f32_of(z, "x");
    const int64_t rows = 16, cols = 256;
    ASSERT_TRUE(has_size(x, rows * cols, "prim_fp4_act_quant x"));
    OFFICIAL_GPU_ASSIGN(dx, bf16_up(x, "prim_fp4_act_quant x"));
    OFFICIAL_GPU_ASSIGN(packed, ct::poisoned<uint8_t>(rows * cols / 2));
    OFFICIAL_GPU_ASSIGN(scale, ct::poisoned<float>(rows * cols / 32));
    OFFICIAL_GPU_ASSIGN(sbytes, ct::poisoned<uint8_t>(rows * cols / 32));
    OFFICIAL_GPU_ASSIGN(sim, ct::poisoned<uint16_t>(rows * cols));
    cuda::Fp4QuantArgs a{.x = dx.data(), .rows = rows, .cols = cols, .codes_packed = packed.as<uint8_t>(),
                         .scale = scale.as<float>(), .scale_e8m0 = sbytes.as<uint8_t>(), .x_sim = sim.data()};
    DSV4_ASSERT_OK(cuda::sm90_fp4_quant_e2m1(a, nullptr));
    auto got_packed = ct::to_host<uint8_t>(packed, size_t(rows * cols / 2));
    EXPECT_EQ(got_packed, u8_of(z, "codes_packed"));
    EXPECT_EQ(ct::to_host<uint8_t>(sbytes, size_t(rows * cols / 32)), u8_of(z, "scale_e8m0"));
    expect_close("gpu:prim", "fp4/codes_packed", bytes_as_f32(got_packed), bytes_as_f32(u8_of(z, "codes_packed")),
                 kExact);
    expect_close("gpu:prim", "fp4/scale", f32_down(scale, rows * cols / 32), f32_of(z, "scale"), kExact);
    // -0 must stay -0: compare bits, not values
    auto got_sim = bf16_down(sim, rows * cols);
    auto rec_sim = f32_of(z, "x_sim");
    ASSERT_TRUE(has_size(rec_sim, rows * cols, "prim_fp4_act_quant x_sim"));
    EXPECT_EQ(0, std::memcmp(got_sim.data(), rec_sim.data(), got_sim.size() * 4)) << "x_sim bits";
    expect_close("gpu:prim", "fp4/x_sim", got_sim, rec_sim, kExact);
}

TEST(GpuPrimitives, HadamardBitExact) {
    DSV4_REQUIRE_GPU();
    const auto& z = need("prim_hadamard.npz");
    auto x = f32_of(z, "x");
    ASSERT_TRUE(!x.empty() && x.size() % 128 == 0) << "prim_hadamard x: " << x.size();
    const int64_t rows = int64_t(x.size() / 128);
    OFFICIAL_GPU_ASSIGN(dx, bf16_up(x, "prim_hadamard x"));
    OFFICIAL_GPU_ASSIGN(y, ct::poisoned<uint16_t>(rows * 128));
    DSV4_ASSERT_OK(cuda::sm90_hadamard128(kRef, {.x = dx.data(), .rows = rows, .y = y.data()}, nullptr));
    expect_close("gpu:prim", "hadamard/y", bf16_down(y, rows * 128), f32_of(z, "y"), kExact);
}

// W8A8 / W4A8 GEMMs on the checkpoint-format weights of the case: the activation quantisation (bit-exact), the
// FP8 GEMM on its own (sm90_fp8_gemm_block128, FP8 case) and sm90_linear as the forward calls it.
void gemm_case(const std::string& file, bool fp4) {
    const auto& z = need(file);
    const std::string tag = fp4 ? "fp4_gemm" : "fp8_gemm";
    auto a = f32_of(z, "a");
    auto cs = shape_of(z, "c");
    ASSERT_EQ(cs.size(), 2u) << file << " c";
    const int64_t M = cs[0], N = cs[1];
    ASSERT_TRUE(M > 0 && a.size() % size_t(M) == 0) << file << " a: " << a.size();
    const int64_t K = int64_t(a.size()) / M;
    ASSERT_EQ(K % 128, 0) << file;
    backend::WeightView w;
    w.rows = N;
    w.cols = K;
    const io::NpyArray* data = z.find(fp4 ? "w_packed" : "w_bits");
    const io::NpyArray* scales = z.find("w_scale_e8m0");
    ASSERT_TRUE(data && scales) << file << ": weight arrays missing";
    w.format = fp4 ? WeightFormat::kMXFP4 : WeightFormat::kFP8Block;
    ASSERT_EQ(int64_t(data->bytes.size()), fp4 ? N * K / 2 : N * K) << file << " weight bytes";
    ASSERT_EQ(int64_t(scales->bytes.size()), fp4 ? N * (K / 32) : ((N + 127) / 128) * (K / 128))
        << file << " scale bytes";
    w.data = data->bytes.data();
    w.scale = scales->bytes.data();
    Gpu gpu;
    DeviceWeightView dw;
    ASSERT_TRUE(gpu.put(w, tag + ".w", &dw));
    OFFICIAL_GPU_ASSIGN(da, bf16_up(a, file + " a"));

    OFFICIAL_GPU_ASSIGN(codes, ct::poisoned<uint8_t>(M * K));
    OFFICIAL_GPU_ASSIGN(scale, ct::poisoned<float>(M * K / 128));
    cuda::ActQuantArgs q{.x = da.data(), .rows = M, .cols = K, .block = 128, .codes = codes.as<uint8_t>(),
                         .scale = scale.as<float>()};
    DSV4_ASSERT_OK(cuda::sm90_act_quant_e4m3(q, nullptr));
    EXPECT_EQ(ct::to_host<uint8_t>(codes, size_t(M * K)), u8_of(z, "a_q_bits")) << file << " a_q_bits";
    expect_close("gpu:prim", tag + "/a_scale", f32_down(scale, M * K / 128), f32_of(z, "a_scale"), kExact);

    if (!fp4) {
        OFFICIAL_GPU_ASSIGN(c, ct::poisoned<uint16_t>(M * N));
        const size_t bytes = cuda::sm90_fp8_gemm_workspace_bytes(M, N, K);
        OFFICIAL_GPU_ASSIGN(ws, gpu.workspace(bytes));
        cuda::Fp8GemmArgs g{.a_codes = codes.as<uint8_t>(), .a_scale = scale.as<float>(), .tokens = M, .w = dw,
                            .y = c.data(), .workspace = static_cast<float*>(ws), .workspace_bytes = bytes};
        DSV4_ASSERT_OK(cuda::sm90_fp8_gemm_block128(g, nullptr));
        expect_close("gpu:prim", tag + "/c(gemm)", bf16_down(c, M * N), f32_of(z, "c"), kClassC);
    }
    OFFICIAL_GPU_ASSIGN(c, ct::poisoned<uint16_t>(M * N));
    DSV4_ASSERT_OK(gpu.linear(da.data(), M, dw, LinearOut::kBF16, c.data()));
    expect_close("gpu:prim", tag + "/c", bf16_down(c, M * N), f32_of(z, "c"), kClassC);
}

TEST(GpuPrimitives, Fp8Gemm) {
    DSV4_REQUIRE_GPU();
    gemm_case("prim_fp8_gemm.npz", false);
}
TEST(GpuPrimitives, Fp4Gemm) {
    DSV4_REQUIRE_GPU();
    gemm_case("prim_fp4_gemm.npz", true);
}

TEST(GpuPrimitives, SparseAttention) {
    DSV4_REQUIRE_GPU();
    const auto& z = need("prim_sparse_attn.npz");
    auto q = f32_of(z, "q"), kv = f32_of(z, "kv"), sink = f32_of(z, "attn_sink"), sc = f32_of(z, "softmax_scale");
    auto idx = i32_of(z, "topk_idxs");
    auto qs = shape_of(z, "q");
    ASSERT_TRUE(qs.size() == 3 && qs[2] == 512) << "prim_sparse_attn q";
    const int64_t T = qs[0], H = qs[1];
    ASSERT_TRUE(has_size(q, T * H * 512, "prim_sparse_attn q"));
    ASSERT_TRUE(has_size(sink, H, "prim_sparse_attn attn_sink"));
    ASSERT_TRUE(has_size(sc, 1, "prim_sparse_attn softmax_scale"));
    ASSERT_TRUE(!kv.empty() && kv.size() % 512 == 0) << "prim_sparse_attn kv: " << kv.size();
    ASSERT_TRUE(!idx.empty() && idx.size() % size_t(T) == 0) << "prim_sparse_attn topk_idxs: " << idx.size();
    const int64_t K = int64_t(idx.size()) / T, n_kv = int64_t(kv.size() / 512);
    OFFICIAL_GPU_ASSIGN(dq, bf16_up(q, "prim_sparse_attn q"));
    OFFICIAL_GPU_ASSIGN(dkv, bf16_up(kv, "prim_sparse_attn kv"));
    OFFICIAL_GPU_ASSIGN(didx, ct::to_device(idx));
    OFFICIAL_GPU_ASSIGN(dsink, ct::to_device(sink));
    OFFICIAL_GPU_ASSIGN(o, ct::poisoned<uint16_t>(T * H * 512));
    cuda::SparseAttnArgs ap{.q = dq.data(), .kv = dkv.data(), .idx = didx.as<int32_t>(), .tokens = T, .heads = H,
                            .n_kv = n_kv, .topk = K, .sink = dsink.as<float>(), .scale = sc[0], .out = o.data()};
    DSV4_ASSERT_OK(cuda::sm90_sparse_attn(kRef, ap, nullptr));
    expect_close("gpu:prim", "sparse_attn/o", bf16_down(o, T * H * 512), f32_of(z, "o"), kClassF);
}

// prim_hc_split_sinkhorn.npz has no GPU counterpart of its own: the split and Sinkhorn run inside sm90_hc_pre and
// sm90_hc_head (mhc.cuh), which take streams, not mix vectors; they are checked through attn/ffn_hc_pre, _post, _comb
// and head_hc_pre above.

}  // namespace
}  // namespace dsv4::official
