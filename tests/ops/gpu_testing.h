// Helpers shared by the GPU op tests (label gpu): the skip-without-GPU guard, random inputs, bf16 packing,
// device round trips. Every test draws fresh random inputs (a new seed per run, printed on failure).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "backend/cuda/common/buffer.h"
#include "backend/cuda/device.h"
#include "backend/ops.h"
#include "core/formats.h"
#include "core/thread_pool.h"
#include "testing/seeds.h"

namespace dsv4::cuda::testing {

// Skips the test, with the reason in the output, when no usable CUDA GPU is present (CPU-only CI).
#define DSV4_REQUIRE_GPU()                                                                              \
    do {                                                                                                \
        auto dsv4_n_ = ::dsv4::cuda::device_count();                                                   \
        if (!dsv4_n_.is_ok()) GTEST_SKIP() << "no usable CUDA driver: " << dsv4_n_.status().to_string(); \
        if (*dsv4_n_ == 0) GTEST_SKIP() << "no CUDA GPU on this machine";                               \
    } while (0)

// Fails the current test with the Status message.
#define DSV4_ASSERT_OK(expr)                                       \
    do {                                                           \
        ::dsv4::Status dsv4_s_ = (expr);                           \
        ASSERT_TRUE(dsv4_s_.is_ok()) << dsv4_s_.to_string();       \
    } while (0)

// The CPU reference runs on this pool (all cores), shared by every test of the executable.
inline ThreadPool& pool() {
    static ThreadPool p;
    return p;
}

// A fresh seed per draw: one random base per test, printed when the test fails, replayed with DSV4_TEST_SEED
// (testing/seeds.h).
using ::dsv4::testing::fresh_seed;

// n values ~ N(0, sigma) rounded to bf16 (the reference's activations are bf16 tensors).
inline std::vector<float> random_bf16(std::mt19937_64& rng, size_t n, float sigma = 1.0f) {
    std::normal_distribution<float> d(0.0f, sigma);
    std::vector<float> v(n);
    for (auto& x : v) x = round_bf16(d(rng));
    return v;
}

inline std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = f32_to_bf16(v[i]);
    return b;
}
inline std::vector<float> from_bf16_bits(const std::vector<uint16_t>& b) {
    std::vector<float> v(b.size());
    for (size_t i = 0; i < b.size(); ++i) v[i] = bf16_to_f32(b[i]);
    return v;
}

// Device copy of a host vector.
template <typename T>
inline Result<DeviceBuffer> to_device(const std::vector<T>& v) {
    DSV4_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::allocate(v.size() * sizeof(T) + 16));
    DSV4_RETURN_IF_ERROR(b.upload(v.data(), v.size() * sizeof(T)));
    return Result<DeviceBuffer>(std::move(b));
}
// A device buffer of n elements of T filled with 0xff bytes (NaN in f32, bf16 and e4m3; 0xff scale bytes).
template <typename T>
inline Result<DeviceBuffer> poisoned(size_t n) {
    DSV4_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::allocate(n * sizeof(T) + 16));
    DSV4_RETURN_IF_ERROR(b.fill_bytes(0xff));
    return Result<DeviceBuffer>(std::move(b));
}
template <typename T>
inline std::vector<T> to_host(const DeviceBuffer& b, size_t n) {
    std::vector<T> v(n);
    Status s = b.download(v.data(), n * sizeof(T));
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    return v;
}

// Bytes that differ between the first `bytes` bytes of two device buffers.
inline size_t differing_bytes(const DeviceBuffer& a, const DeviceBuffer& b, size_t bytes) {
    const auto ha = to_host<uint8_t>(a, bytes), hb = to_host<uint8_t>(b, bytes);
    size_t diff = 0;
    for (size_t i = 0; i < bytes; ++i) diff += ha[i] != hb[i];
    return diff;
}

// Activations in the precision's device type: bf16 bits in kReference, f32 in kF32; back as f32 values.
inline Result<DeviceBuffer> act_to_device(backend::Precision p, const std::vector<float>& v) {
    return p == backend::Precision::kReference ? to_device(to_bf16_bits(v)) : to_device(v);
}
inline Result<DeviceBuffer> act_poisoned(backend::Precision p, size_t n) {
    return p == backend::Precision::kReference ? poisoned<uint16_t>(n) : poisoned<float>(n);
}
inline std::vector<float> act_to_host(backend::Precision p, const DeviceBuffer& b, size_t n) {
    return p == backend::Precision::kReference ? from_bf16_bits(to_host<uint16_t>(b, n)) : to_host<float>(b, n);
}
// Values the precision's activations can hold: bf16-rounded in kReference, as drawn in kF32.
inline std::vector<float> random_act(backend::Precision p, std::mt19937_64& rng, size_t n, float sigma = 1.0f) {
    std::normal_distribution<float> d(0.0f, sigma);
    std::vector<float> v(n);
    for (auto& x : v) x = p == backend::Precision::kReference ? round_bf16(d(rng)) : d(rng);
    return v;
}

// Count of elements whose bits differ (bf16 outputs compared as f32 values; NaN never equals).
inline size_t count_bit_differences(const std::vector<float>& a, const std::vector<float>& b) {
    size_t n = 0;
    for (size_t i = 0; i < a.size(); ++i) n += !(a[i] == b[i] || (a[i] == 0 && b[i] == 0));
    return n;
}

}  // namespace dsv4::cuda::testing
