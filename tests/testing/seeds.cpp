#include "testing/seeds.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <random>

namespace dsv4::testing {
namespace {

// The base of shared_seed(), drawn on its first call.
struct SharedBase {
    bool drawn = false;
    uint64_t base = 0;
};
SharedBase& shared_base() {
    static SharedBase b;
    return b;
}

uint64_t random_base() {
    static std::random_device rd;
    return (uint64_t(rd()) << 32) ^ rd();
}

// Prints the recorded base seed of every failed test, and the shared base at the end of a run with a failure
// (registered with gtest on the first fresh_seed or shared_seed call).
class SeedReporter : public ::testing::EmptyTestEventListener {
    void OnTestProgramEnd(const ::testing::UnitTest& unit) override {
        if (unit.failed_test_count() == 0 || !shared_base().drawn) return;
        std::printf("[     SEED ] inputs shared between tests came from DSV4_TEST_SHARED_SEED=%llu\n",
                    (unsigned long long)shared_base().base);
        std::fflush(stdout);
    }
    void OnTestEnd(const ::testing::TestInfo& info) override {
        const ::testing::TestResult* result = info.result();
        if (!result->Failed()) return;
        for (int i = 0; i < result->test_property_count(); ++i) {
            const ::testing::TestProperty& p = result->GetTestProperty(i);
            if (std::string(p.key()) != "seed") continue;
            // the shared base too once drawn: a test's inputs may come from both, and the line should replay it alone
            const std::string shared = shared_base().drawn
                                           ? "DSV4_TEST_SHARED_SEED=" + std::to_string(shared_base().base) + " "
                                           : std::string();
            std::printf("[     SEED ] %s.%s: %sDSV4_TEST_SEED=%s <test binary> --gtest_filter=%s.%s\n",
                        info.test_suite_name(), info.name(), shared.c_str(), p.value(), info.test_suite_name(),
                        info.name());
            std::fflush(stdout);
        }
    }
};

struct DrawState {
    const ::testing::TestInfo* test = nullptr;  // the test the base belongs to
    uint64_t base = 0;
    uint64_t draws = 0;
};

}  // namespace

uint64_t seed_for_draw(uint64_t base, uint64_t i) {
    uint64_t z = base + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

std::optional<uint64_t> seed_from_environment(const char* name, std::string* error) {
    const char* env = std::getenv(name);
    if (!env || !*env) return std::nullopt;
    errno = 0;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(env, &end, 10);
    if (errno != 0 || *end != '\0' || *env == '-' || *env == '+' || *env == ' ') {
        if (error) *error = std::string(name) + " must be a decimal unsigned 64-bit integer, got '" + env + "'";
        return std::nullopt;
    }
    return uint64_t(v);
}

namespace {
void add_reporter_once() {
    static const bool added = [] {
        ::testing::UnitTest::GetInstance()->listeners().Append(new SeedReporter);
        return true;
    }();
    (void)added;
}

// The base from the environment variable `name`, else a random one (an unparsable value fails the calling test).
uint64_t base_from(const char* name) {
    std::string error;
    if (const std::optional<uint64_t> env = seed_from_environment(name, &error)) return *env;
    if (!error.empty()) ADD_FAILURE() << error;
    return random_base();
}
}  // namespace

uint64_t shared_seed(const std::string& what) {
    add_reporter_once();
    SharedBase& b = shared_base();
    if (!b.drawn) b.base = base_from("DSV4_TEST_SHARED_SEED"), b.drawn = true;
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the name
    for (const unsigned char c : what) h = (h ^ c) * 0x100000001b3ull;
    return seed_for_draw(b.base, h);
}

uint64_t fresh_seed() {
    static DrawState state;
    add_reporter_once();
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    if (test != state.test || test == nullptr) {
        state.test = test;
        state.draws = 0;
        state.base = base_from("DSV4_TEST_SEED");
        if (test) ::testing::Test::RecordProperty("seed", std::to_string(state.base));
    }
    return seed_for_draw(state.base, state.draws++);
}

}  // namespace dsv4::testing
