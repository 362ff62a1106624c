// Times the CUDA kernels at V4-Flash decode (1, 8, 64 tokens) and prefill (4096 tokens) shapes: CUDA events around
// a batch of launches over rotated input copies (so the 60 MB L2 does not hold the working set), median of the
// batches after warm-up, on random data. Prints time, bytes moved (each input read once, each output written once),
// FLOPs and the percentage of the measured H200 ceilings (copy 4.27 TB/s, bf16 dense 793 TFLOP/s).
#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../bench_check.h"
#include "backend/cuda/common/buffer.h"
#include "backend/cuda/common/stream.h"
#include "backend/cuda/common/weights.h"
#include "backend/cuda/kernels/act_quant/act_quant.h"
#include "backend/cuda/kernels/attention/attention.h"
#include "backend/cuda/kernels/embed_head/embed_head.h"
#include "backend/cuda/kernels/gemm_fp8/gemm_fp8.h"
#include "backend/cuda/kernels/indexer/indexer.h"
#include "backend/cuda/kernels/kv_finish/kv_finish.h"
#include "backend/cuda/kernels/mhc/mhc.h"
#include "backend/cuda/kernels/norm_rope/norm_rope.h"
#include "backend/cuda/kernels/router/router.h"
#include "backend/cuda/kernels/sampling/sampling.h"
#include "core/formats.h"

namespace {

using namespace dsv4;
using namespace dsv4::cuda;

constexpr double kCopyBytesPerS = 4.27e12, kBf16FlopPerS = 793e12;
constexpr size_t kRotateBytes = size_t(256) << 20;  // working set across the rotated copies: > 4x L2


DeviceBuffer random_buffer(std::mt19937_64& rng, size_t bytes, bool bf16) {
    auto r = DeviceBuffer::allocate(bytes + 16, "bench");
    CHECK(r.status());
    std::vector<uint8_t> host(bytes);
    if (bf16) {
        std::normal_distribution<float> d(0, 1);
        for (size_t i = 0; i + 1 < bytes; i += 2) {
            const uint16_t b = f32_to_bf16(d(rng));
            host[i] = uint8_t(b), host[i + 1] = uint8_t(b >> 8);
        }
    } else {
        std::uniform_int_distribution<int> d(0, 255);
        for (auto& b : host) {
            int v = d(rng);
            if ((v & 0x7f) == 0x7f) v &= 0xfe;  // no e4m3 NaN codes
            b = uint8_t(v);
        }
    }
    CHECK(r->upload(host.data(), bytes));
    return std::move(*r);
}

// Median microseconds of one launch: batches of `copies` launches (launch(i) uses copy i), 15 batches after 3.
double time_us(StreamHandle s, int copies, const std::function<Status(int)>& launch) {
    auto timer = EventTimer::create();
    CHECK(timer.status());
    for (int w = 0; w < 3; ++w)
        for (int i = 0; i < copies; ++i) CHECK(launch(i));
    std::vector<double> per;
    for (int b = 0; b < 15; ++b) {
        CHECK(timer->start(s));
        for (int i = 0; i < copies; ++i) CHECK(launch(i));
        CHECK(timer->stop(s));
        auto ms = timer->elapsed_ms();
        CHECK(ms.status());
        per.push_back(double(*ms) * 1e3 / copies);
    }
    std::sort(per.begin(), per.end());
    return per[per.size() / 2];
}

void row(const char* kernel, const char* shape, long long tokens, double us, double bytes, double flops) {
    const double bw = bytes / (us * 1e-6), fl = flops / (us * 1e-6);
    std::printf("| %-24s | %-22s | %5lld | %9.2f | %9.2f | %5.1f%% | %8.1f | %5.1f%% |\n", kernel, shape, tokens, us,
                bytes / 1e6, 100 * bw / kCopyBytesPerS, fl / 1e12, 100 * fl / kBf16FlopPerS);
}

int copies_for(size_t bytes_per_call) {
    return int(std::clamp<size_t>(kRotateBytes / std::max<size_t>(bytes_per_call, 1), 2, 64));
}

// A device copy of host data (weights, indices, small f32 parameters).
template <typename T>
DeviceBuffer device_copy(const std::vector<T>& v) {
    auto b = DeviceBuffer::allocate(v.size() * sizeof(T) + 16, "bench");
    CHECK(b.status());
    CHECK(b->upload(v.data(), v.size() * sizeof(T)));
    return std::move(*b);
}
DeviceBuffer zeros(size_t bytes) {
    auto b = DeviceBuffer::allocate(bytes + 16, "bench");
    CHECK(b.status());
    CHECK(b->fill_bytes(0));
    return std::move(*b);
}

// mHC at hidden size D: hc_pre (24 mixes + Sinkhorn), hc_post, hc_head; reference numerics. fn stays in L2 across
// launches as in the forward (one layer's fn is read by every token); the streams are rotated.
void bench_mhc(StreamHandle s, std::mt19937_64& rng, int64_t T, int64_t D) {
    using backend::Precision;
    using backend::WeightFormat;
    const Precision ref = Precision::kReference;
    auto f32w = [&](int64_t rows, int64_t cols, float v) {
        return device_copy(std::vector<float>(size_t(rows * cols), v));
    };
    const std::string shape_s = "[T,4," + std::to_string(D) + "] bf16";
    const char* shape = shape_s.c_str();
    DeviceBuffer fn = f32w(24, 4 * D, 0.001f), sc = f32w(1, 3, 1.0f), base = f32w(1, 24, 0.0f);
    DeviceBuffer fnh = f32w(4, 4 * D, 0.001f), sch = f32w(1, 1, 1.0f), baseh = f32w(1, 4, 0.0f);
    const size_t xbytes = size_t(T * 4 * D) * 2;
    const int n = copies_for(xbytes);
    std::vector<DeviceBuffer> x;
    for (int i = 0; i < n; ++i) x.push_back(random_buffer(rng, xbytes, true));
    DeviceBuffer pre = zeros(size_t(T) * 16), post = zeros(size_t(T) * 16), comb = zeros(size_t(T) * 64);
    DeviceBuffer y = zeros(size_t(T * D) * 2), out = zeros(xbytes);
    auto fv = [&](const DeviceBuffer& b, int64_t r, int64_t c) {
        return DeviceWeightView{WeightFormat::kF32, r, c, b.data(), nullptr};
    };
    double us = time_us(s, n, [&](int i) {
        return sm90_hc_pre(ref,
                           {x[size_t(i)].data(), T, D, fv(fn, 24, 4 * D), fv(sc, 1, 3), fv(base, 1, 24), 20, 1e-6f,
                            1e-6f, nullptr, pre.as<float>(), post.as<float>(), comb.as<float>(), y.data()},
                           s);
    });
    row("sm90_hc_pre", shape, T, us, double(xbytes + T * D * 2 + 24 * 4 * D * 4), 0);
    const int64_t wide_blocks = hc_wide_blocks(D);
    if (T <= kHcWideMaxTokens && wide_blocks > 0) {
        // a decode sub-block's entry as the engine runs it: the collapse with the Sinkhorn apart, then the RMSNorm
        // writing normed's e4m3 codes — as two launches, and as the wide collapse that applies the norm itself
        DeviceBuffer mixes = zeros(size_t(T) * 24 * 4), normed = zeros(size_t(T * D) * 2), codes = zeros(size_t(T * D));
        DeviceBuffer scales = zeros(size_t(T * D / 128) * 4), nw = device_copy(std::vector<uint16_t>(size_t(D), 0x3f80));
        DeviceBuffer tickets = zeros(size_t(T) * 4), partials = zeros(size_t(T * wide_blocks * 25) * 8);
        const DeviceWeightView nwv{WeightFormat::kBF16, 1, D, nw.data(), nullptr};
        auto apart = [&](int i) {
            HcPreArgs a{x[size_t(i)].data(), T, D, fv(fn, 24, 4 * D), fv(sc, 1, 3), fv(base, 1, 24), 20, 1e-6f, 1e-6f,
                        mixes.as<float>(), pre.as<float>(), nullptr, nullptr, y.data()};
            a.sinkhorn_apart = true;
            return a;
        };
        const double bytes = double(xbytes + 2 * T * D * 2 + T * D + 24 * 4 * D * 4);
        us = time_us(s, n, [&](int i) {
            if (Status st = sm90_hc_pre(ref, apart(i), s); !st.is_ok()) return st;
            return sm90_rmsnorm(ref,
                                {y.data(), T, D, nwv, 1e-6f, normed.data(), codes.as<uint8_t>(), scales.as<float>()}, s);
        });
        row("hc_pre + rmsnorm", shape, T, us, bytes, 0);
        us = time_us(s, n, [&](int i) {
            HcPreArgs a = apart(i);
            a.wide = {tickets.as<int32_t>(), partials.as<double>(), nwv, 1e-6f, normed.data(), codes.as<uint8_t>(),
                      scales.as<float>()};
            return sm90_hc_pre(ref, a, s);
        });
        row("hc_pre wide, its norm", shape, T, us, bytes, 0);
    }
    us = time_us(s, n, [&](int i) {
        return sm90_hc_post(
            ref, {y.data(), x[size_t(i)].data(), post.as<float>(), comb.as<float>(), T, D, out.data()}, s);
    });
    row("sm90_hc_post", shape, T, us, double(2 * xbytes + T * D * 2), 0);
    us = time_us(s, n, [&](int i) {
        return sm90_hc_head(ref,
                            {x[size_t(i)].data(), T, D, fv(fnh, 4, 4 * D), fv(sch, 1, 1), fv(baseh, 1, 4), 1e-6f,
                             1e-6f, nullptr, y.data()},
                            s);
    });
    row("sm90_hc_head", shape, T, us, double(xbytes + T * D * 2 + 4 * 4 * D * 4), 0);
}

// The forward ops past the GEMMs at V4-Flash shapes (D 4096, 64 heads, 8 groups, vocab 129280), reference
// numerics. Inputs that the kernel reads once are rotated over copies like the kernels above.
void bench_forward_ops(StreamHandle s, std::mt19937_64& rng, int64_t T) {
    using backend::Precision;
    using backend::WeightFormat;
    const Precision ref = Precision::kReference;
    const int64_t D = 4096, H = 64, V = 129280;
    const auto freqs = backend::rope_freqs(160000, 16, 65536, 32, 1);
    std::vector<int64_t> pos_h(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) pos_h[size_t(t)] = 32767 - T + 1 + t;
    DeviceBuffer pos = device_copy(pos_h);
    auto f32w = [&](int64_t rows, int64_t cols, float v) {
        return device_copy(std::vector<float>(size_t(rows * cols), v));
    };
    bench_mhc(s, rng, T, D);
    // embedding gather and the f32 lm head [129280, 4096] (cuBLASLt)
    {
        // constant bf16 bytes (0x3c3c = 0.0115): GEMM and gather speed do not depend on the values, and 1 GB of
        // random numbers would take longer than all the timing
        DeviceBuffer table = zeros(size_t(V * D) * 2);
        CHECK(table.fill_bytes(0x3c));
        const DeviceWeightView tv{WeightFormat::kBF16, V, D, table.data(), nullptr};
        std::vector<int32_t> ids(static_cast<size_t>(T));
        for (auto& id : ids) id = int32_t(rng() % uint64_t(V));
        DeviceBuffer dids = device_copy(ids), bad = zeros(4), out = zeros(size_t(T * D) * 2);
        double us = time_us(s, 8, [&](int) {
            return sm90_embedding(ref, {dids.as<int32_t>(), T, tv, out.data(), bad.as<int32_t>()}, s);
        });
        row("sm90_embedding", "[T,4096] of 129280", T, us, double(T * D * 2 * 2), 0);
        const size_t wsb = sm90_bf16_gemm_f32_workspace_bytes(ref, T, D);
        DeviceBuffer ws = zeros(wsb), logits = zeros(size_t(T * V) * 4);
        us = time_us(s, 2, [&](int) {
            return sm90_bf16_gemm_f32(ref, {out.data(), T, tv, logits.as<float>(), ws.data(), wsb}, s);
        });
        row("sm90_bf16_gemm_f32", "head 129280x4096", T, us, double(V * D * 2 + T * D * 2 + T * V * 4),
            2.0 * double(T) * double(V) * double(D));
        // router: gate [256, 4096] f32 logits, then the selection (top-6 of 256, score routing)
        DeviceBuffer gate = zeros(size_t(256 * D) * 2), lg = zeros(size_t(T * 256) * 4);
        CHECK(gate.fill_bytes(0x3c));
        const DeviceWeightView gv{WeightFormat::kBF16, 256, D, gate.data(), nullptr};
        us = time_us(s, 8, [&](int) {
            return sm90_bf16_gemm_f32(ref, {out.data(), T, gv, lg.as<float>(), ws.data(), wsb}, s);
        });
        row("sm90_bf16_gemm_f32", "gate 256x4096", T, us, double(256 * D * 2 + T * D * 2 + T * 256 * 4),
            2.0 * double(T) * 256 * double(D));
        DeviceBuffer bias = f32w(1, 256, 0.0f), idx = zeros(size_t(T) * 6 * 4), w = zeros(size_t(T) * 6 * 4);
        us = time_us(s, 8, [&](int) {
            return sm90_router_select({lg.as<float>(),
                                       T,
                                       256,
                                       6,
                                       {WeightFormat::kF32, 1, 256, bias.data(), nullptr},
                                       nullptr,
                                       0,
                                       nullptr,
                                       1.5f,
                                       nullptr,
                                       idx.as<int32_t>(),
                                       w.as<float>()},
                                      s);
        });
        row("sm90_router_select", "E 256, top 6", T, us, double(T * 256 * 4 + T * 6 * 8), 0);
    }
    // window K=V glue [T, 512]; compressor pool (CSA, T/4 windows of 4 x 1024) and finish (main 512, indexer 128)
    {
        const size_t kvbytes = size_t(T * 512) * 2;
        const int n = copies_for(kvbytes * 2);
        std::vector<DeviceBuffer> kv;
        for (int i = 0; i < n; ++i) kv.push_back(random_buffer(rng, kvbytes, true));
        std::vector<uint16_t> ones(512, f32_to_bf16(1.0f));
        DeviceBuffer nw = device_copy(ones);
        const DeviceWeightView nv{WeightFormat::kBF16, 1, 512, nw.data(), nullptr};
        const DeviceWeightView nv128{WeightFormat::kBF16, 1, 128, nw.data(), nullptr};
        double us = time_us(s, n, [&](int i) {
            return sm90_window_kv_finish(ref, {kv[size_t(i)].data(), T, nv, pos.as<int64_t>(), freqs, 1e-6f}, s);
        });
        row("sm90_window_kv_finish", "[T,512] bf16", T, us, double(2 * kvbytes), 0);
        const int64_t windows = std::max<int64_t>(1, T / 4);
        const size_t pbytes = size_t(windows * 4 * 1024) * 4;
        const int np = copies_for(2 * pbytes);
        std::vector<DeviceBuffer> pk, ps;
        for (int i = 0; i < np; ++i)
            pk.push_back(random_buffer(rng, pbytes, true)), ps.push_back(random_buffer(rng, pbytes, true));
        DeviceBuffer pooled = zeros(size_t(windows * 512) * 2), fin = zeros(size_t(windows * 512) * 2);
        us = time_us(s, np, [&](int i) {
            return sm90_compressor_pool(ref,
                                        {pk[size_t(i)].as<float>(), ps[size_t(i)].as<float>(), nullptr, nullptr,
                                         windows, 4, 512, true, pooled.data()},
                                        s);
        });
        row("sm90_compressor_pool", "CSA m4 2x512 f32", windows * 4, us, double(2 * pbytes + windows * 512 * 2), 0);
        us = time_us(s, 8, [&](int) {
            return sm90_compressor_finish(ref,
                                          {pooled.data(), windows, 512, 4, 0, backend::CompressedKind::kMain, nv, freqs,
                                           1e-6f, nullptr, fin.data()},
                                          s);
        });
        row("sm90_compressor_finish", "main [n,512]", windows * 4, us, double(windows * 512 * 4), 0);
        us = time_us(s, 8, [&](int) {
            return sm90_compressor_finish(ref,
                                          {pooled.data(), windows, 128, 4, 0, backend::CompressedKind::kIndexer, nv128,
                                           freqs, 1e-6f, nullptr, fin.data()},
                                          s);
        });
        row("sm90_compressor_finish", "indexer [n,128]", windows * 4, us, double(windows * 128 * 4), 0);
    }
    // indexer scores (64 heads x 128, 8192 keys = 32k context) and top-512 of them
    {
        const int64_t nk = 8192;
        DeviceBuffer q = random_buffer(rng, size_t(T * 64 * 128) * 2, true);
        DeviceBuffer keys = random_buffer(rng, size_t(nk * 128) * 2, true);
        DeviceBuffer w = random_buffer(rng, size_t(T * 64) * 2, true);
        std::vector<int64_t> far(size_t(T), 4 * nk + 100);
        DeviceBuffer fpos = device_copy(far), scores = zeros(size_t(T * nk) * 2), idx = zeros(size_t(T * 512) * 4);
        double us = time_us(s, 4, [&](int) {
            return sm90_indexer_scores(
                ref, {q.data(), keys.data(), w.data(), T, 64, nk, 4, fpos.as<int64_t>(), scores.data()}, s);
        });
        row("sm90_indexer_scores", "64x128, 8192 keys", T, us, double(T * 64 * 128 * 2 + nk * 256 + T * nk * 2),
            2.0 * double(T) * 64 * double(nk) * 128);
        us = time_us(s, 4, [&](int) { return sm90_topk(ref, {scores.data(), T, nk, 512, idx.as<int32_t>()}, s); });
        row("sm90_topk", "k 512 of 8192", T, us, double(T * nk * 2 + T * 512 * 4), 0);
    }
    // sparse attention, 64 heads, 640 candidates (window 128 + top-512) of 10000 rows, fused de-rotation; wo_a
    {
        const int64_t topk = 640, nkv = 10000;
        DeviceBuffer q = random_buffer(rng, size_t(T * H * 512) * 2, true);
        DeviceBuffer kv = random_buffer(rng, size_t(nkv * 512) * 2, true);
        std::vector<int32_t> ih(size_t(T * topk));
        for (auto& i : ih) i = int32_t(rng() % uint64_t(nkv));
        DeviceBuffer idx = device_copy(ih), sink = f32w(1, H, 0.0f), o = zeros(size_t(T * H * 512) * 2);
        double us = time_us(s, 2, [&](int) {
            return sm90_sparse_attn(ref,
                                    {q.data(), kv.data(), idx.as<int32_t>(), T, H, nkv, topk, sink.as<float>(),
                                     0.0441941738f, true, pos.as<int64_t>(), freqs, o.data()},
                                    s);
        });
        row("sm90_sparse_attn", "H64, 640 of 10000", T, us, double(T * H * 512 * 4 + T * topk * 1024),
            4.0 * double(T) * double(H) * double(topk) * 512);
        const int n = T >= 1024 ? 2 : copies_for(size_t(8192) * 4096);
        std::vector<DeviceBuffer> wd;
        for (int i = 0; i < n; ++i) {
            wd.push_back(zeros(size_t(8192) * 4096));
            CHECK(wd.back().fill_bytes(0x3c));  // e4m3 1.5
        }
        DeviceBuffer wsc = device_copy(std::vector<uint8_t>(size_t(64 * 32), 120)), z = zeros(size_t(T * 8192) * 2);
        us = time_us(s, n, [&](int i) {
            const DeviceWeightView wv{WeightFormat::kFP8Block, 8192, 4096, wd[size_t(i)].data(), wsc.as<uint8_t>()};
            return sm90_wo_a(ref, {o.data(), T, H, 8, 1024, wv, z.data()}, s);
        });
        row("sm90_wo_a", "fp8 8x1024x4096", T, us, double(8192 * 4096 + T * H * 1024 + T * 8192 * 2),
            2.0 * double(T) * 8192 * 4096);
    }
}

// The decode and prefill FP8 GEMMs (activations pre-quantised): the attention projections of V4-Flash.
void bench_fp8_gemms(StreamHandle s, std::mt19937_64& rng, int64_t T) {
    struct G {
        const char* name;
        int64_t n, k;
    };
    for (const G g :
         {G{"wq_b 32768x1024", 32768, 1024}, G{"wo_b 4096x8192", 4096, 8192}, G{"wq_a 1024x4096", 1024, 4096},
          G{"wkv 512x4096", 512, 4096}, G{"index wq_b 8192x1024", 8192, 1024}}) {
        const size_t wbytes = size_t(g.n * g.k), abytes = size_t(T * g.k);
        const size_t bytes = wbytes + abytes + size_t(T * g.k / 128) * 4 + size_t(T * g.n) * 2;
        const int n = T >= 1024 ? 2 : copies_for(bytes);
        std::vector<DeviceBuffer> wd, wsc;
        for (int i = 0; i < n; ++i) {
            wd.push_back(random_buffer(rng, wbytes, false));
            std::vector<uint8_t> sc(size_t(((g.n + 127) / 128) * (g.k / 128)), 127);
            auto b = DeviceBuffer::allocate(sc.size());
            CHECK(b.status());
            CHECK(b->upload(sc.data(), sc.size()));
            wsc.push_back(std::move(*b));
        }
        DeviceBuffer a = random_buffer(rng, abytes, false);
        std::vector<float> ones(size_t(T * g.k / 128), 1.0f);
        auto as = DeviceBuffer::allocate(ones.size() * 4);
        CHECK(as.status());
        CHECK(as->upload(ones.data(), ones.size() * 4));
        auto y = DeviceBuffer::allocate(size_t(T * g.n) * 2);
        const size_t wsb = sm90_fp8_gemm_workspace_bytes(T, g.n, g.k);
        auto ws = DeviceBuffer::allocate(wsb);
        CHECK(y.status());
        CHECK(ws.status());
        const double us = time_us(s, n, [&](int i) {
            DeviceWeightView w{backend::WeightFormat::kFP8Block, g.n, g.k, wd[size_t(i)].data(),
                               wsc[size_t(i)].as<uint8_t>()};
            return sm90_fp8_gemm_block128({a.as<uint8_t>(), as->as<float>(), T, w, y->data(), ws->as<float>(), wsb}, s);
        });
        row("sm90_fp8_gemm_block128", g.name, T, us, double(bytes), 2.0 * double(T) * double(g.n) * double(g.k));
    }
}

// The bf16-weight GEMMs with f32 output at decode (sm90_bf16_gemm_f32: the register-streaming GEMV up to
// kBf16GemvMaxTokens and kBf16GemvMaxWeightBytes, cuBLASLt otherwise): the V4-Flash lm head, the router gate, the
// compressors' and the indexer's projections.
void bench_bf16_gemms(StreamHandle s, int64_t T) {
    struct G {
        const char* name;
        int64_t n, k;
    };
    const backend::Precision ref = backend::Precision::kReference;
    for (const G g : {G{"head 129280x4096", 129280, 4096}, G{"compressor wkv 1024x4096", 1024, 4096},
                      G{"index compressor 256x4096", 256, 4096}, G{"gate 256x4096", 256, 4096},
                      G{"weights_proj 64x4096", 64, 4096}}) {
        const size_t wbytes = size_t(g.n * g.k) * 2, xbytes = size_t(T * g.k) * 2;
        const size_t bytes = wbytes + xbytes + size_t(T * g.n) * 4;
        const int n = copies_for(bytes);
        std::vector<DeviceBuffer> wd;
        for (int i = 0; i < n; ++i) {
            wd.push_back(zeros(wbytes));
            CHECK(wd.back().fill_bytes(0x3c));  // constant bf16 values: the speed does not depend on them
        }
        DeviceBuffer x = zeros(xbytes), y = zeros(size_t(T * g.n) * 4);
        const size_t wsb = sm90_bf16_gemm_f32_workspace_bytes(ref, T, g.k);
        DeviceBuffer ws = zeros(wsb);
        CHECK(x.fill_bytes(0x3c));
        const double us = time_us(s, n, [&](int i) {
            const DeviceWeightView w{backend::WeightFormat::kBF16, g.n, g.k, wd[size_t(i)].data(), nullptr};
            return sm90_bf16_gemm_f32(ref, {x.data(), T, w, y.as<float>(), ws.data(), wsb}, s);
        });
        row("sm90_bf16_gemm_f32", g.name, T, us, double(bytes), 2.0 * double(T) * double(g.n) * double(g.k));
    }
}

// The next-token draw on the GPU (sm90_sample_rows) over V4's 129,280-token vocabulary for `rows` rows: logits like a
// language model's (N(0, 1) background, 40 tokens 6-16 above it), the request kinds a chat or an API sends, each on
// the row-count default cluster and on one CTA per row. Bytes: the logits read once.
void bench_sampling(StreamHandle s, std::mt19937_64& rng, int64_t rows) {
    constexpr int64_t kVocab = 129280;
    std::vector<float> logits(size_t(rows * kVocab));
    std::normal_distribution<float> bg(0.0f, 1.0f);
    std::uniform_int_distribution<int64_t> id(0, kVocab - 1);
    std::uniform_real_distribution<float> head(6.0f, 16.0f);
    for (float& x : logits) x = bg(rng);
    for (int64_t r = 0; r < rows; ++r)
        for (int i = 0; i < 40; ++i) logits[size_t(r * kVocab + id(rng))] = head(rng);
    DeviceBuffer dl = device_copy(logits);
    DeviceBuffer out = zeros(size_t(rows) * sizeof(SampleRowOut));
    struct Kind {
        const char* name;
        float temperature, top_p;
        int32_t top_k, logprobs;
        float repetition_penalty;  // over 1,000 generated tokens (random ids) when not 1
    };
    for (const Kind k : {Kind{"greedy", 0.0f, 1.0f, 0, 0, 1.0f}, Kind{"t 1 (id order)", 1.0f, 1.0f, 0, 0, 1.0f},
                         Kind{"t 0.6 top_p 0.95", 0.6f, 0.95f, 0, 0, 1.0f},
                         Kind{"t 0.7 top_k 50 5 lp", 0.7f, 1.0f, 50, 5, 1.0f},
                         Kind{"t 1, repetition 1.1", 1.0f, 1.0f, 0, 0, 1.1f}}) {
        std::vector<SampleRowParams> params(static_cast<size_t>(rows));
        std::vector<SamplePenalty> penalties;
        std::vector<int32_t> counts(size_t(kVocab), 0), history(1000);
        SamplingParams sp;
        sp.repetition_penalty = k.repetition_penalty;
        for (int64_t r = 0; r < rows; ++r) {
            for (int32_t& t : history) t = int32_t(id(rng));
            const size_t first = penalties.size();
            sample_penalty_list(history, sp, int32_t(kVocab), counts, penalties);
            params[size_t(r)] = {.row = r,
                                 .uniform = double(r + 1) / double(rows + 2),
                                 .temperature = k.temperature,
                                 .top_k = k.top_k,
                                 .top_p = k.top_p,
                                 .min_p = 0.0f,
                                 .top_logprobs = k.logprobs,
                                 .repetition_penalty = k.repetition_penalty,
                                 .penalty_first = int32_t(first),
                                 .penalty_count = int32_t(penalties.size() - first)};
        }
        penalties.push_back({0, 0});  // never empty
        DeviceBuffer dp = device_copy(params), dpen = device_copy(penalties);
        for (const int cluster : {0, 1}) {
            const int ctas = cluster == 0 ? sample_cluster_ctas(rows) : 1;
            const double us = time_us(s, 8, [&](int) {
                return sm90_sample_rows({.logits = dl.as<float>(),
                                         .vocab = kVocab,
                                         .params = dp.as<SampleRowParams>(),
                                         .penalties = k.repetition_penalty != 1.0f ? dpen.as<SamplePenalty>() : nullptr,
                                         .out = out.as<SampleRowOut>(),
                                         .n = rows,
                                         .cluster = cluster},
                                        s);
            });
            const std::string shape = std::string(k.name) + ", " + std::to_string(ctas) + " CTA/row";
            row("sm90_sample_rows", shape.c_str(), rows, us, double(rows * kVocab) * 4, 0);
        }
    }
}

}  // namespace

// `dsv4_bench_cuda_ops sample` times only the GPU draw (sm90_sample_rows) at 1, 8, 32 and 64 rows;
// `dsv4_bench_cuda_ops forward` times only the forward ops past the GEMMs; `dsv4_bench_cuda_ops mhc` only the mHC
// kernels at V4-Flash (D 4096) and V4-Pro (D 7168) hidden sizes; `dsv4_bench_cuda_ops gemm` only the FP8 GEMMs, at
// the decode token counts on both sides of the register-streaming kernel's limit (kFp8GemvMaxTokens, 16) and a
// prefill pass; `dsv4_bench_cuda_ops bf16` only the bf16-weight GEMMs with f32 output, on both sides of the bf16
// GEMV's limit (kBf16GemvMaxTokens, 8).
int main(int argc, char** argv) {
    const bool forward_only = argc > 1 && std::string(argv[1]) == "forward";
    const bool mhc_only = argc > 1 && std::string(argv[1]) == "mhc";
    const bool gemm_only = argc > 1 && std::string(argv[1]) == "gemm";
    const bool bf16_only = argc > 1 && std::string(argv[1]) == "bf16";
    const bool sample_only = argc > 1 && std::string(argv[1]) == "sample";
    auto stream_r = Stream::create();
    CHECK(stream_r.status());
    const StreamHandle s = stream_r->handle();
    std::mt19937_64 rng(20261130);
    const int64_t D = 4096, H = 64;
    std::printf(
        "| kernel                   | shape                  |     T |      us   |   MB      "
        "| %%copy  | TFLOP/s  | %%bf16  |\n");
    std::printf("|---|---|---|---|---|---|---|---|\n");

    std::vector<uint16_t> wbits(size_t(D), f32_to_bf16(1.0f));
    backend::WeightView nw{backend::WeightFormat::kBF16, 1, D, wbits.data(), nullptr};
    auto norm_w = upload_weight(nw, "attn_norm");
    CHECK(norm_w.status());
    const auto freqs = backend::rope_freqs(160000, 16, 65536, 32, 1);

    if (sample_only) {
        for (const int64_t rows : {1, 8, 32, 64}) bench_sampling(s, rng, rows);
        return 0;
    }
    if (bf16_only) {
        for (const int64_t T : {1, 2, 4, 8, 9}) bench_bf16_gemms(s, T);
        return 0;
    }
    if (mhc_only) {  // decode sizes, then prefill passes on both sides of the 32-token-tile kernel's threshold
        for (const int64_t T : {1, 8, 64, 1023, 1024, 4096, 8192}) {
            bench_mhc(s, rng, T, 4096);
            bench_mhc(s, rng, T, 7168);
        }
        return 0;
    }
    if (gemm_only) {
        for (const int64_t T : {1, 2, 4, 8, 9, 16, 17, 64, 4096}) bench_fp8_gemms(s, rng, T);
        return 0;
    }
    for (const int64_t T : {int64_t(1), int64_t(8), int64_t(64), int64_t(4096)}) {
        if (forward_only) {
            bench_forward_ops(s, rng, T);
            continue;
        }
        // RMSNorm [T, 4096] bf16
        {
            const size_t bytes = size_t(T * D) * 2 * 2;
            const int n = copies_for(bytes);
            std::vector<DeviceBuffer> x;
            for (int i = 0; i < n; ++i) x.push_back(random_buffer(rng, size_t(T * D) * 2, true));
            auto y = DeviceBuffer::allocate(size_t(T * D) * 2 * n);
            CHECK(y.status());
            const double us = time_us(s, n, [&](int i) {
                return sm90_rmsnorm(backend::Precision::kReference,
                                    {x[size_t(i)].data(), T, D, norm_w->view(), 1e-6f,
                                     y->as<uint8_t>() + size_t(i) * size_t(T * D) * 2},
                                    s);
            });
            row("sm90_rmsnorm", "[T,4096] bf16", T, us, double(bytes), 0);
        }
        // q head norm + RoPE [T, 64, 512] bf16 in place
        {
            const size_t bytes = size_t(T * H * 512) * 2 * 2;
            const int n = copies_for(bytes);
            std::vector<DeviceBuffer> q;
            for (int i = 0; i < n; ++i) q.push_back(random_buffer(rng, size_t(T * H * 512) * 2, true));
            std::vector<int64_t> pos(static_cast<size_t>(T));
            for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = 1000 + t;
            auto dpos = DeviceBuffer::allocate(size_t(T) * 8);
            CHECK(dpos.status());
            CHECK(dpos->upload(pos.data(), size_t(T) * 8));
            const double us = time_us(s, n, [&](int i) {
                return sm90_q_head_norm_rope(backend::Precision::kReference,
                                             {q[size_t(i)].data(), T, H, 512, 1e-6f, true, dpos->as<int64_t>(), freqs},
                                             s);
            });
            row("sm90_q_head_norm_rope", "[T,64,512] bf16", T, us, double(bytes), 0);
        }
        // act_quant e4m3 block 128 [T, 4096]
        {
            const size_t bytes = size_t(T * D) * (2 + 1) + size_t(T * D / 128) * 4;
            const int n = copies_for(bytes);
            std::vector<DeviceBuffer> x;
            for (int i = 0; i < n; ++i) x.push_back(random_buffer(rng, size_t(T * D) * 2, true));
            auto codes = DeviceBuffer::allocate(size_t(T * D) * n);
            auto sc = DeviceBuffer::allocate(size_t(T * D / 128) * 4 * n);
            CHECK(codes.status());
            CHECK(sc.status());
            const double us = time_us(s, n, [&](int i) {
                return sm90_act_quant_e4m3({x[size_t(i)].data(), T, D, 128, codes->as<uint8_t>() + size_t(i * T * D),
                                            sc->as<float>() + size_t(i * T * D / 128), nullptr, nullptr},
                                           s);
            });
            row("sm90_act_quant_e4m3", "[T,4096] blk128", T, us, double(bytes), 0);
        }
        // Hadamard + FP4 simulation of indexer q [T, 64, 128] (two kernels, timed separately)
        {
            const int64_t rows = T * 64;
            const size_t bytes = size_t(rows * 128) * 2 * 2;
            const int n = copies_for(bytes);
            std::vector<DeviceBuffer> x;
            for (int i = 0; i < n; ++i) x.push_back(random_buffer(rng, size_t(rows * 128) * 2, true));
            double us = time_us(s, n, [&](int i) {
                void* xi = x[size_t(i)].data();
                return sm90_hadamard128(backend::Precision::kReference, {xi, rows, xi}, s);
            });
            row("sm90_hadamard128", "[T,64,128] bf16", T, us, double(bytes), 0);
            us = time_us(s, n, [&](int i) {
                void* xi = x[size_t(i)].data();
                return sm90_fp4_quant_e2m1({xi, rows, 128, nullptr, nullptr, nullptr, xi}, s);
            });
            row("sm90_fp4_quant_e2m1", "[T,64,128] sim", T, us, double(bytes), 0);
        }
        bench_fp8_gemms(s, rng, T);
        bench_forward_ops(s, rng, T);
    }
    CHECK(stream_r->synchronize());
    return 0;
}
