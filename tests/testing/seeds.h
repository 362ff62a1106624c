// Random seeds for tests that draw fresh inputs on every run, replayable from one number.
//
// Each test draws one base seed (std::random_device, or DSV4_TEST_SEED when set); its i-th fresh_seed() call returns
// seed_for_draw(base, i). The base is recorded as the test's "seed" property, and a failing test prints it with the
// command that replays its inputs:
//   [     SEED ] Suite.Name: DSV4_TEST_SEED=1234 <test binary> --gtest_filter=Suite.Name
// Inputs cached across tests take shared_seed() instead, so that replaying one test alone rebuilds them the same;
// once the shared base is drawn, the line starts with it (DSV4_TEST_SHARED_SEED=5678 DSV4_TEST_SEED=1234 ...).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace dsv4::testing {

// The seed of the current test's next random draw (see above). Call it from a test body.
uint64_t fresh_seed();

// The seed of inputs built once per process and shared by several tests (e.g. a cached pool of expert weights),
// named by `what`: seed_for_draw(shared base, hash of what). The shared base is drawn once per process
// (DSV4_TEST_SHARED_SEED replays it) and printed in each failed test's line and at the end of such a run.
uint64_t shared_seed(const std::string& what);

// The i-th draw of a test whose base seed is `base` (splitmix64 of base + i·golden ratio: nearby bases and draws give
// unrelated generators).
uint64_t seed_for_draw(uint64_t base, uint64_t i);

// The variable `name` (DSV4_TEST_SEED, DSV4_TEST_SHARED_SEED) parsed: nullopt when unset or empty; a decimal
// unsigned 64-bit integer, else an error message naming the variable and its value in `error` (and nullopt).
std::optional<uint64_t> seed_from_environment(const char* name, std::string* error);

}  // namespace dsv4::testing
