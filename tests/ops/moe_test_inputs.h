// Inputs of the MoE decode kernel tests (moe_decode_test.cpp): the V4-Flash and V4-Pro shapes, a pool of distinct
// random MXFP4 experts aliased across the expert table (on the host for the CPU op and on the device), the same for
// NVFP4 and FP8-block experts (format_expert_pool), and a case's routing, activations and shared-expert output.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/kernels/moe/moe.h"
#include "backend/cuda/kernels/moe/mxfp4_repacked.h"
#include "core/quant_formats.h"
#include "ops/gpu_testing.h"

namespace dsv4::cuda::moe_testing {

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
inline Mxfp4Tensor random_mxfp4(std::mt19937_64& rng, int64_t rows, int64_t cols) {
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
    // the same experts in the decode kernel's repacked layout (mxfp4_repacked.h), for kMXFP4Repacked
    std::vector<DeviceBuffer> dev_repacked;
    DeviceBuffer table_repacked;
};

// Device copies of MXFP4 matrices, shipped or repacked, and the expert table over them (entry e = pool entry e % n).
inline bool upload_mxfp4_pool(const std::vector<Mxfp4Tensor>& w1, const std::vector<Mxfp4Tensor>& w3,
                              const std::vector<Mxfp4Tensor>& w2, int64_t n_experts, bool repacked,
                              std::vector<DeviceBuffer>& dev, DeviceBuffer& table) {
    for (size_t i = 0; i < w1.size(); ++i) {
        for (const Mxfp4Tensor* t : {&w1[i], &w3[i], &w2[i]}) {
            std::vector<uint8_t> packed = t->packed, scales = t->scales;
            if (repacked && !mxfp4_repack_matrix(packed.data(), scales.data(), t->rows, t->cols).is_ok()) return false;
            auto d = to_device(packed);
            auto sc = to_device(scales);
            if (!d.is_ok() || !sc.is_ok()) return false;
            dev.push_back(std::move(*d));
            dev.push_back(std::move(*sc));
        }
    }
    std::vector<Mxfp4ExpertPtrs> host(static_cast<size_t>(n_experts));
    for (int64_t e = 0; e < n_experts; ++e) {
        const DeviceBuffer* d = &dev[size_t(6 * (e % int64_t(w1.size())))];
        host[size_t(e)] = {d[0].as<uint8_t>(), d[1].as<uint8_t>(), d[2].as<uint8_t>(),
                           d[3].as<uint8_t>(), d[4].as<uint8_t>(), d[5].as<uint8_t>()};
    }
    auto tb = to_device(host);
    if (!tb.is_ok()) return false;
    table = std::move(*tb);
    return true;
}

inline ExpertPool* expert_pool(const MoeShape& s) {
    static std::map<std::string, std::unique_ptr<ExpertPool>> cache;
    auto& slot = cache[s.name];
    if (slot) return slot.get();
    auto p = std::make_unique<ExpertPool>();
    std::mt19937_64 rng(::dsv4::testing::shared_seed(std::string("expert pool ") + s.name));
    p->size = 5;
    const auto mx = backend::WeightFormat::kMXFP4;
    for (int64_t i = 0; i < p->size; ++i) {
        p->w1.push_back(random_mxfp4(rng, s.inter, s.dim));
        p->w3.push_back(random_mxfp4(rng, s.inter, s.dim));
        p->w2.push_back(random_mxfp4(rng, s.dim, s.inter));
    }
    if (!upload_mxfp4_pool(p->w1, p->w3, p->w2, s.n_experts, false, p->dev, p->table) ||
        !upload_mxfp4_pool(p->w1, p->w3, p->w2, s.n_experts, true, p->dev_repacked, p->table_repacked))
        return nullptr;
    for (int64_t e = 0; e < s.n_experts; ++e) {
        const int64_t i = e % p->size;
        const Mxfp4Tensor &w1 = p->w1[size_t(i)], &w2 = p->w2[size_t(i)], &w3 = p->w3[size_t(i)];
        p->views.push_back({.w1 = {mx, s.inter, s.dim, w1.packed.data(), w1.scales.data()},
                            .w2 = {mx, s.dim, s.inter, w2.packed.data(), w2.scales.data()},
                            .w3 = {mx, s.inter, s.dim, w3.packed.data(), w3.scales.data()}});
    }
    slot = std::move(p);
    return slot.get();
}

enum class Routing { kUniform, kSkewed };

// One case's inputs. Routing: K distinct experts per token (uniform: any of E; skewed: every token on the same 6,
// in any order as a router would output them), weights positive summing to the routed scale 1.5.
struct MoeInputs {
    std::vector<int32_t> idx;   // [T, K]
    std::vector<float> rw;      // [T, K]
    std::vector<float> x;       // bf16 values [T, D]
    std::vector<float> shared;  // bf16 values [T, D]
};

inline MoeInputs make_moe_inputs(const MoeShape& s, int64_t T, Routing routing, std::mt19937_64& rng) {
    const int64_t K = s.k, D = s.dim;
    MoeInputs in;
    in.idx.resize(size_t(T * K));
    in.rw.resize(size_t(T * K));
    std::vector<int32_t> all(size_t(s.n_experts));
    std::iota(all.begin(), all.end(), 0);
    std::vector<int32_t> hot = {int32_t(s.n_experts - 1), 3, 200, 17, 42, 101};
    std::uniform_real_distribution<float> u(0.5f, 2.0f);
    for (int64_t t = 0; t < T; ++t) {
        if (routing == Routing::kUniform) {
            std::shuffle(all.begin(), all.end(), rng);
            std::copy(all.begin(), all.begin() + K, in.idx.begin() + t * K);
        } else {
            std::shuffle(hot.begin(), hot.end(), rng);
            std::copy(hot.begin(), hot.begin() + K, in.idx.begin() + t * K);
        }
        float sum = 0;
        for (int64_t j = 0; j < K; ++j) sum += (in.rw[size_t(t * K + j)] = u(rng));
        for (int64_t j = 0; j < K; ++j) in.rw[size_t(t * K + j)] = in.rw[size_t(t * K + j)] / sum * 1.5f;
    }
    in.x = random_bf16(rng, size_t(T * D), 1.0f);
    in.shared = random_bf16(rng, size_t(T * D), 0.05f);
    return in;
}

using MoeParam = std::tuple<int, int64_t, Routing>;  // shape (0 Flash, 1 Pro), T, routing
inline const auto kMoeParams =
    ::testing::Combine(::testing::Values(0, 1), ::testing::Values(int64_t(1), int64_t(2), int64_t(7), int64_t(16),
                                                                  int64_t(64), int64_t(256)),
                       ::testing::Values(Routing::kUniform, Routing::kSkewed));
inline std::string moe_case_name(const ::testing::TestParamInfo<MoeParam>& info) {
    return std::string(std::get<0>(info.param) == 0 ? "Flash" : "Pro") + "_T" +
           std::to_string(std::get<1>(info.param)) +
           (std::get<2>(info.param) == Routing::kUniform ? "_uniform" : "_skewed");
}

// A decode launcher's argument checks, which run before any CUDA call (no GPU needed).
inline void expect_bad_moe_args_rejected(Status (*launch)(const MoeDecodeArgs&, StreamHandle)) {
    int dummy[64] = {};
    MoeDecodeArgs a;
    a.x = a.shared = a.y = a.workspace = dummy;
    a.idx = dummy;
    a.route_w = reinterpret_cast<const float*>(dummy);
    a.experts = reinterpret_cast<const Mxfp4ExpertPtrs*>(dummy);
    a.tokens = 1, a.k = 6, a.n_experts = 256, a.dim = 4096, a.inter = 2048, a.workspace_bytes = 1;
    Status s = launch(a, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("workspace"), std::string::npos) << s.to_string();
    a.tokens = 300;
    s = launch(a, nullptr);
    EXPECT_NE(s.message().find("tokens 300"), std::string::npos) << s.to_string();
    a.tokens = 4, a.dim = 4000;
    s = launch(a, nullptr);
    EXPECT_NE(s.message().find("multiples of 512"), std::string::npos) << s.to_string();
    a.dim = 4096, a.k = 0;
    s = launch(a, nullptr);
    EXPECT_NE(s.message().find("K 0"), std::string::npos) << s.to_string();
}

// ---- NVFP4 and FP8-block experts ----

// Gaussian [rows, cols] (sd) whose tiles of tile_rows x tile_cols are each scaled by 2^u, u uniform in [lo, hi], so
// the format's scales span several binades. Rows are drawn in parallel from per-row generators seeded by `rng`.
inline std::vector<float> random_binade_tiles(std::mt19937_64& rng, int64_t rows, int64_t cols, int64_t tile_rows,
                                              int64_t tile_cols, int lo, int hi, float sd) {
    const int64_t trows = (rows + tile_rows - 1) / tile_rows, tcols = cols / tile_cols;
    std::vector<int> binade(size_t(trows * tcols));
    std::uniform_int_distribution<int> u(lo, hi);
    for (auto& b : binade) b = u(rng);
    const uint64_t seed = rng();
    std::vector<float> w(size_t(rows * cols));
    pool().parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            std::mt19937_64 row_rng(seed ^ (0x9e3779b97f4a7c15ull * uint64_t(r + 1)));
            std::normal_distribution<float> n(0.0f, sd);
            for (int64_t c = 0; c < cols; ++c)
                w[size_t(r * cols + c)] =
                    n(row_rng) * std::ldexp(1.0f, binade[size_t((r / tile_rows) * tcols + c / tile_cols)]);
        }
    });
    return w;
}

// A pool of distinct random NVFP4 or FP8-block experts (quantised by core/quant_formats' encoders) on the device,
// their expert table, and the CPU views: FP8 blocks natively (backend::WeightFormat::kFP8Block); NVFP4 as the f32
// values the CPU backend loads them as (nvfp4_decode: (e2m1 · e4m3 scale) · global, backend/cpu/weights.cpp).
// w3 is drawn 2.5x wider than w1 so that the NVFP4 global scales of the two differ (a swapped global shows).
struct FormatExpertPool {
    MoeWeightFormat format = MoeWeightFormat::kNVFP4;
    int64_t size = 0;
    std::vector<std::vector<float>> deq;     // NVFP4: per entry w1, w3, w2 dequantised (f32)
    std::vector<Fp8BlockTensor> fp8;         // FP8: per entry w1, w3, w2
    std::vector<float> global;               // NVFP4: per entry w1, w3, w2 global scale
    std::vector<DeviceBuffer> dev;           // per entry and matrix: weights, scales (+ NVFP4 global)
    std::vector<backend::ExpertWeights> views;  // [E]
    DeviceBuffer table;                         // Nvfp4ExpertPtrs or Fp8BlockExpertPtrs [E]
};

inline FormatExpertPool* format_expert_pool(const MoeShape& s, MoeWeightFormat f) {
    static std::map<std::string, std::unique_ptr<FormatExpertPool>> cache;
    auto& slot = cache[std::string(s.name) + moe_weight_format_name(f)];
    if (slot) return slot.get();
    auto p = std::make_unique<FormatExpertPool>();
    p->format = f;
    std::mt19937_64 rng(
        ::dsv4::testing::shared_seed(std::string("format expert pool ") + s.name + " " + std::to_string(int(f))));
    p->size = 5;
    const bool nv = f == MoeWeightFormat::kNVFP4;
    // per entry: the device pointers of w1, w3, w2 (weights, scales, global)
    std::vector<std::array<const void*, 9>> ptrs;
    bool uploaded = true;
    auto upload = [&](const auto& host) -> const void* {
        auto d = to_device(host);
        if (!d.is_ok()) {
            uploaded = false;
            return nullptr;
        }
        p->dev.push_back(std::move(*d));
        return p->dev.back().data();
    };
    for (int64_t i = 0; i < p->size; ++i) {
        std::array<const void*, 9> e{};
        const int64_t shape[3][2] = {{s.inter, s.dim}, {s.inter, s.dim}, {s.dim, s.inter}};
        const float sd[3] = {0.02f, 0.05f, 0.02f};
        for (int m = 0; m < 3; ++m) {
            const int64_t rows = shape[m][0], cols = shape[m][1];
            if (nv) {
                const auto w = random_binade_tiles(rng, rows, cols, 1, kNvfp4GroupSize, -10, 2, sd[m]);
                auto t = nvfp4_encode(w, rows, cols);
                EXPECT_TRUE(t.is_ok()) << t.status().to_string();
                if (!t.is_ok()) return nullptr;
                std::vector<float> d(size_t(rows * cols));
                EXPECT_TRUE(nvfp4_decode(t->packed, t->scales, t->global_scale, rows, cols, d).is_ok());
                p->deq.push_back(std::move(d));
                p->global.push_back(t->global_scale);
                e[size_t(3 * m)] = upload(t->packed);
                e[size_t(3 * m + 1)] = upload(t->scales);
                e[size_t(3 * m + 2)] = upload(std::vector<float>{t->global_scale});
            } else {
                const auto w = random_binade_tiles(rng, rows, cols, kFp8BlockSize, kFp8BlockSize, -6, 2, sd[m]);
                auto t = fp8_block_encode(w, rows, cols);
                EXPECT_TRUE(t.is_ok()) << t.status().to_string();
                if (!t.is_ok()) return nullptr;
                e[size_t(3 * m)] = upload(t->data);
                e[size_t(3 * m + 1)] = upload(t->scales);
                p->fp8.push_back(std::move(*t));
            }
            if (!uploaded) return nullptr;
        }
        ptrs.push_back(e);
    }
    auto u8 = [](const void* v) { return static_cast<const uint8_t*>(v); };
    auto f32 = [](const void* v) { return static_cast<const float*>(v); };
    std::vector<Nvfp4ExpertPtrs> nv_table;
    std::vector<Fp8BlockExpertPtrs> fp8_table;
    for (int64_t ex = 0; ex < s.n_experts; ++ex) {
        const int64_t i = ex % p->size;
        const auto& e = ptrs[size_t(i)];
        if (nv) {
            nv_table.push_back({u8(e[0]), u8(e[1]), f32(e[2]), u8(e[3]), u8(e[4]), f32(e[5]), u8(e[6]), u8(e[7]),
                                f32(e[8])});
            const float* d = nullptr;
            const auto fv = backend::WeightFormat::kF32;
            d = p->deq[size_t(3 * i)].data();
            const backend::WeightView w1{fv, s.inter, s.dim, d, nullptr};
            d = p->deq[size_t(3 * i + 1)].data();
            const backend::WeightView w3{fv, s.inter, s.dim, d, nullptr};
            d = p->deq[size_t(3 * i + 2)].data();
            const backend::WeightView w2{fv, s.dim, s.inter, d, nullptr};
            p->views.push_back({.w1 = w1, .w2 = w2, .w3 = w3});
        } else {
            fp8_table.push_back({u8(e[0]), u8(e[1]), u8(e[3]), u8(e[4]), u8(e[6]), u8(e[7])});
            const auto fb = backend::WeightFormat::kFP8Block;
            const Fp8BlockTensor &w1 = p->fp8[size_t(3 * i)], &w3 = p->fp8[size_t(3 * i + 1)],
                                 &w2 = p->fp8[size_t(3 * i + 2)];
            p->views.push_back({.w1 = {fb, s.inter, s.dim, w1.data.data(), w1.scales.data()},
                                .w2 = {fb, s.dim, s.inter, w2.data.data(), w2.scales.data()},
                                .w3 = {fb, s.inter, s.dim, w3.data.data(), w3.scales.data()}});
        }
    }
    const Status checked = nv ? check_moe_expert_table(nv_table.data(), s.n_experts, "test NVFP4 experts")
                              : check_moe_expert_table(fp8_table.data(), s.n_experts, "test FP8 experts");
    EXPECT_TRUE(checked.is_ok()) << checked.to_string();
    auto tb = nv ? to_device(nv_table) : to_device(fp8_table);
    if (!tb.is_ok() || !checked.is_ok()) return nullptr;
    p->table = std::move(*tb);
    slot = std::move(p);
    return slot.get();
}

}  // namespace dsv4::cuda::moe_testing
