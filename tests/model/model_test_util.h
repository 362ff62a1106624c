// Helpers shared by the whole-model tests: load a checkpoint folder, run a token list through a session in a
// given chunking, compare logits (rel_l2 through testing::compare, DESIGN §3; top-1 agreement per position).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <ostream>

#include "dsv4/engine.h"
#include "dsv4/session.h"

namespace dsv4::model_tests {

// CPU threads for the model tests (CI machines have 2 cores).
inline constexpr int kTestThreads = 2;

// Comma/whitespace-separated ids of a tokens.txt fixture; empty on a read error (the test then fails loudly).
std::vector<int32_t> read_token_file(const std::filesystem::path& path);

// Engine::load with the given precision, asserting success.
std::unique_ptr<Engine> load_engine(const std::filesystem::path& dir, EnginePrecision precision);

// Logits [T, vocab] of `tokens` fed `chunk` tokens at a time (chunk <= 0: all at once) through one new session.
std::vector<float> run_logits(Engine& engine, const std::vector<int32_t>& tokens, int64_t chunk);

// Fraction of rows whose argmax agrees.
double top1_agreement(const std::vector<float>& a, const std::vector<float>& b, int64_t vocab);
// ||a-b|| / ||b|| in double.
double rel_l2(const std::vector<float>& a, const std::vector<float>& b);

// A case of tests/data/goldens (made by tests/reference/make_goldens.py) in one checkpoint layout.
struct GoldenCase {
    std::string name;    // flash_like, pro_like
    std::string layout;  // official, transformers
};
void PrintTo(const GoldenCase& c, std::ostream* os);
std::string golden_case_label(const ::testing::TestParamInfo<GoldenCase>& info);

// What a golden case holds: the prompt, transformers' f32 logits of one prefill, and transformers' own
// bf16-vs-f32 rel_l2 (meta.json), the scale of the reference-numerics band.
struct GoldenFixture {
    std::filesystem::path dir;  // tests/data/goldens/<name>
    std::vector<int32_t> tokens;
    std::vector<float> logits;  // [T, vocab]
    int64_t vocab = 0;
    double bf16_rel = 0;
};
// Loads a committed case; a missing or malformed fixture is an error naming the file.
Result<GoldenFixture> load_golden(const std::string& name);

}  // namespace dsv4::model_tests
