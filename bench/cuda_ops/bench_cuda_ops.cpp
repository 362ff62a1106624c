// Times the CUDA kernels at V4-Flash decode (1, 8, 64 tokens) and prefill (4096 tokens) shapes: CUDA events around
// a batch of launches over rotated input copies (so the 60 MB L2 does not hold the working set), median of the
// batches after warm-up, on random data. Prints time, bytes moved (each input read once, each output written once),
// FLOPs and the percentage of the measured H200 ceilings (copy 4.27 TB/s, bf16 dense 793 TFLOP/s).
#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "backend/cuda/common/buffer.h"
#include "backend/cuda/common/stream.h"
#include "backend/cuda/common/weights.h"
#include "backend/cuda/kernels/act_quant/act_quant.h"
#include "backend/cuda/kernels/gemm_fp8/gemm_fp8.h"
#include "backend/cuda/kernels/norm_rope/norm_rope.h"
#include "core/formats.h"

namespace {

using namespace dsv4;
using namespace dsv4::cuda;

constexpr double kCopyBytesPerS = 4.27e12, kBf16FlopPerS = 793e12;
constexpr size_t kRotateBytes = size_t(256) << 20;  // working set across the rotated copies: > 4x L2

#define CHECK(expr)                                                                   \
    do {                                                                              \
        ::dsv4::Status s_ = (expr);                                                   \
        if (!s_.is_ok()) {                                                            \
            std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, s_.to_string().c_str()); \
            std::exit(1);                                                             \
        }                                                                             \
    } while (0)

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

}  // namespace

int main() {
    auto stream_r = Stream::create();
    CHECK(stream_r.status());
    const StreamHandle s = stream_r->handle();
    std::mt19937_64 rng(20261130);
    const int64_t D = 4096, H = 64;
    std::printf("| kernel                   | shape                  |     T |      us   |   MB      "
                "| %%copy  | TFLOP/s  | %%bf16  |\n");
    std::printf("|---|---|---|---|---|---|---|---|\n");

    std::vector<uint16_t> wbits(size_t(D), f32_to_bf16(1.0f));
    backend::WeightView nw{backend::WeightFormat::kBF16, 1, D, wbits.data(), nullptr};
    auto norm_w = upload_weight(nw, "attn_norm");
    CHECK(norm_w.status());
    const auto freqs = backend::rope_freqs(160000, 16, 65536, 32, 1);

    for (const int64_t T : {int64_t(1), int64_t(8), int64_t(64), int64_t(4096)}) {
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
        // FP8 GEMMs (activations pre-quantised): wq_b [32768, 1024], wo_b [4096, 8192], wq_a [1024, 4096]
        struct G {
            const char* name;
            int64_t n, k;
        };
        for (const G g : {G{"wq_b 32768x1024", 32768, 1024}, G{"wo_b 4096x8192", 4096, 8192},
                          G{"wq_a 1024x4096", 1024, 4096}}) {
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
                return sm90_fp8_gemm_block128({a.as<uint8_t>(), as->as<float>(), T, w, y->data(), ws->as<float>(), wsb},
                                              s);
            });
            row("sm90_fp8_gemm_block128", g.name, T, us, double(bytes), 2.0 * double(T) * double(g.n) * double(g.k));
        }
    }
    CHECK(stream_r->synchronize());
    return 0;
}
