// Helpers shared by the mHC GPU op tests (mhc_test.cpp, mhc_wide_test.cpp): normal draws for fn / scale / base and
// post / comb, f32 weight views, and the tolerances of the mHC outputs.
#pragma once

#include <random>
#include <vector>

#include "backend/ops.h"

namespace dsv4::cuda::testing {

inline std::vector<float> normal(std::mt19937_64& rng, size_t n, float mean, float sigma) {
    std::normal_distribution<float> d(mean, sigma);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}
inline backend::WeightView f32_view(const std::vector<float>& v, int64_t rows, int64_t cols) {
    return {backend::WeightFormat::kF32, rows, cols, v.data(), nullptr};
}

// mix vectors, pre / post / comb: f32 math on f64 sums on both sides, only last-bit differences
constexpr double kHcF32Tol = 1e-5;
// the collapsed and normalised activations: bf16 in kReference, f32 in kF32
inline double hc_act_tol(backend::Precision p) { return p == backend::Precision::kReference ? 2e-3 : 1e-6; }

}  // namespace dsv4::cuda::testing
