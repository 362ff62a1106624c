// Shared setup of the per-op checks against DeepSeek's recorded outputs (tests/data/official_ops, README there):
// the checkpoint in official layout, the recorded arrays, and the two comparison measures of the README
// (rel_l2 over finite entries, and the fraction of elements that differ from the recorded bits).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/thread_pool.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/weights.h"
#include "testing/testing.h"

namespace dsv4::official {

inline constexpr int64_t kT = 260;

// The tolerance classes of the README (rel_l2 bar, max fraction of differing elements or < 0 for none).
struct Tol {
    double rel_l2;
    double frac;
};
inline constexpr Tol kClassA{2e-6, -1}, kClassB{2e-4, 0.002}, kClassC{1e-3, 0.05}, kClassD{2e-3, 0.005},
    kClassDIdx{5e-3, 0.005}, kClassE{2e-3, 0.05}, kClassF{3e-3, -1}, kExact{0, 0};

struct Model {
    std::unique_ptr<io::Checkpoint> ckpt;
    model::ModelConfig config;
    model::ModelWeights weights;
};
// Loaded once per process; a failure is reported by the calling test.
const Model& model_or_fail(std::string* error);

// An npz of the fixture folder, loaded once per process.
const io::NpzFile* fixture(const std::string& file, std::string* error);

std::filesystem::path fixture_dir();
backend::Exec exec_ref();

// Records and checks one comparison; prints "op file array rel_l2 frac" for docs/kernels/cpu-reference.md.
void expect_close(const std::string& where, const std::string& array, std::span<const float> mine,
                  std::span<const float> ref, Tol tol);

// Array as f32 / i32 (fails the test when absent).
std::vector<float> f32_of(const io::NpzFile& z, const std::string& name);
std::vector<int32_t> i32_of(const io::NpzFile& z, const std::string& name);
backend::WeightView view(const model::WeightRef& w);

}  // namespace dsv4::official
