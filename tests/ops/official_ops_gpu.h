// Helpers of the CUDA kernels' checks against DeepSeek's recorded per-op outputs (official_ops_gpu_layer_test.cpp,
// official_ops_gpu_head_test.cpp): bit-for-bit uploads of recorded bf16 arrays, weights as shipped, workspaces.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "backend/cuda/kernels/act_quant/act_quant.h"
#include "backend/cuda/kernels/attention/attention.h"
#include "backend/cuda/kernels/embed_head/embed_head.h"
#include "backend/cuda/kernels/experts/experts.h"
#include "backend/cuda/kernels/gemm_fp8/gemm_fp8.h"
#include "backend/cuda/kernels/glue/glue.h"
#include "backend/cuda/kernels/indexer/indexer.h"
#include "backend/cuda/kernels/kv_finish/kv_finish.h"
#include "backend/cuda/kernels/linear/linear.h"
#include "backend/cuda/kernels/mhc/mhc.h"
#include "backend/cuda/kernels/norm_rope/norm_rope.h"
#include "backend/cuda/kernels/router/router.h"
#include "ops/gpu_testing.h"
#include "unit/official_ops/official_fixture.h"

namespace dsv4::official {

// Shared by the two official-ops GPU test files (official_ops_gpu_*_test.cpp).
using backend::CompressedKind;
using backend::LinearOut;
using backend::Precision;
using backend::WeightFormat;
using cuda::DeviceBuffer;
using cuda::DeviceWeight;
using cuda::DeviceWeightView;
namespace ct = ::dsv4::cuda::testing;

constexpr Precision kRef = Precision::kReference;

// `auto var = value of expr` for an expression giving a Result; a failed Result fails the test with its message.
#define OFFICIAL_GPU_ASSIGN(var, expr)                                                             \
    auto var##_result_ = (expr);                                                                   \
    ASSERT_TRUE(var##_result_.is_ok()) << #expr << ": " << var##_result_.status().to_string(); \
    auto var = std::move(var##_result_).value()

// A recorded array must have the shape the op expects before anything is uploaded (manifest.json has the shapes).
template <typename T>
inline ::testing::AssertionResult has_size(const std::vector<T>& v, int64_t n, const std::string& what) {
    if (int64_t(v.size()) == n) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << what << " holds " << v.size() << " elements, the op needs " << n
                                         << " (tests/data/official_ops/manifest.json gives the recorded shape)";
}

// Recorded bf16 values as a bf16 device array. A value that is not a bf16 would be rounded by the upload, so the
// kernel would not see the recorded input: that is an error, not a silent rounding.
inline Result<DeviceBuffer> bf16_up(const std::vector<float>& v, const std::string& what) {
    for (size_t i = 0; i < v.size(); ++i)
        if (!std::isnan(v[i]) && round_bf16(v[i]) != v[i])
            return invalid_argument(what + "[" + std::to_string(i) + "] = " + std::to_string(v[i]) +
                                    " is not a bf16 value; the kernel takes bf16 activations");
    return ct::to_device(ct::to_bf16_bits(v));
}

// bf16 / f32 outputs back as f32 values.
inline std::vector<float> bf16_down(const DeviceBuffer& b, int64_t n) { return ct::act_to_host(kRef, b, size_t(n)); }
inline std::vector<float> f32_down(const DeviceBuffer& b, int64_t n) { return ct::to_host<float>(b, size_t(n)); }

// What a test uploaded or allocated for its launches; everything stays alive until the test has downloaded.
class Gpu {
public:
    // Uploads a checkpoint weight as shipped (cuda::upload_weight of backend::weight_view).
    ::testing::AssertionResult put(const model::WeightRef& ref, DeviceWeightView* out) {
        if (!ref.present()) return ::testing::AssertionFailure() << "weight " << ref.name << " is absent";
        auto v = backend::weight_view(ref);
        if (!v.is_ok()) return ::testing::AssertionFailure() << ref.name << ": " << v.status().to_string();
        return put(v.value(), ref.name, out);
    }
    ::testing::AssertionResult put(const backend::WeightView& v, const std::string& name, DeviceWeightView* out) {
        auto w = cuda::upload_weight(v, name.c_str());
        if (!w.is_ok()) return ::testing::AssertionFailure() << name << ": " << w.status().to_string();
        weights_.push_back(std::move(w).value());
        *out = weights_.back().view();
        return ::testing::AssertionSuccess();
    }
    // A workspace of `bytes` (null for 0), kept until the test ends.
    Result<void*> workspace(size_t bytes) {
        if (bytes == 0) return static_cast<void*>(nullptr);
        DSV4_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::allocate(bytes, "workspace"));
        scratch_.push_back(std::move(b));
        return scratch_.back().data();
    }
    // sm90_linear in kReference with its workspace (gpu_forward.cpp gpu_linear).
    Status linear(const void* x, int64_t tokens, const DeviceWeightView& w, LinearOut out, void* y) {
        const size_t bytes = cuda::sm90_linear_workspace_bytes(kRef, tokens, w, out);
        DSV4_ASSIGN_OR_RETURN(void* ws, workspace(bytes));
        cuda::LinearArgs a{.x = x, .tokens = tokens, .w = w, .out = out, .y = y, .workspace = ws,
                           .workspace_bytes = bytes};
        return cuda::sm90_linear(kRef, a, nullptr);
    }

private:
    std::vector<DeviceWeight> weights_;
    std::vector<DeviceBuffer> scratch_;
};

inline const io::NpzFile& need(const std::string& file) {
    std::string err;
    const io::NpzFile* z = fixture(file, &err);
    if (!z) ADD_FAILURE() << err;
    static io::NpzFile empty;
    return z ? *z : empty;
}

inline std::vector<uint8_t> u8_of(const io::NpzFile& z, const std::string& name) {
    const io::NpyArray* a = z.find(name);
    EXPECT_NE(a, nullptr) << z.label() << ": " << name;
    if (!a) return {};
    return std::vector<uint8_t>(a->bytes.begin(), a->bytes.end());
}
inline std::vector<float> bytes_as_f32(const std::vector<uint8_t>& b) { return std::vector<float>(b.begin(), b.end()); }

}  // namespace dsv4::official
