// Small random inputs and direct double-precision formulas for the CPU op tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/formats.h"
#include "core/thread_pool.h"
#include "testing/testing.h"

namespace dsv4::cpu_test {

using namespace backend;

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f, bool bf16 = true) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = bf16 ? round_bf16(d(rng)) : d(rng);
    return v;
}

inline Exec f32_exec() {
    static ThreadPool pool(3);
    return {Precision::kF32, &pool};
}
inline Exec ref_exec() {
    static ThreadPool pool(3);
    return {Precision::kReference, &pool};
}

inline WeightView f32_view(const std::vector<float>& w, int64_t rows, int64_t cols) {
    return {WeightFormat::kF32, rows, cols, w.data(), nullptr};
}

inline std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

}  // namespace dsv4::cpu_test
