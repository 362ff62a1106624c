// The seeds of the randomized tests: one base per test, replayable through DSV4_TEST_SEED (testing/seeds.h).
#include "testing/seeds.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>

namespace dsv4::testing {
namespace {

// The "seed" property the current test recorded, or "" if none.
std::string recorded_seed() {
    const ::testing::TestResult* r = ::testing::UnitTest::GetInstance()->current_test_info()->result();
    for (int i = 0; i < r->test_property_count(); ++i)
        if (std::string(r->GetTestProperty(i).key()) == "seed") return r->GetTestProperty(i).value();
    return "";
}

// Sets DSV4_TEST_SEED for one scope and restores what was there.
class SeedEnv {
public:
    explicit SeedEnv(const char* value) {
        if (const char* old = std::getenv("DSV4_TEST_SEED")) old_ = old, had_ = true;
        if (value)
            setenv("DSV4_TEST_SEED", value, 1);
        else
            unsetenv("DSV4_TEST_SEED");
    }
    ~SeedEnv() {
        if (had_)
            setenv("DSV4_TEST_SEED", old_.c_str(), 1);
        else
            unsetenv("DSV4_TEST_SEED");
    }

private:
    std::string old_;
    bool had_ = false;
};

TEST(TestSeeds, DrawsOfOneBaseAreDistinctAndFixed) {
    std::set<uint64_t> seen;
    for (uint64_t base = 0; base < 64; ++base)
        for (uint64_t i = 0; i < 64; ++i) seen.insert(seed_for_draw(base, i));
    EXPECT_EQ(seen.size(), 64u * 64u) << "nearby bases or draws must not collide";
    EXPECT_EQ(seed_for_draw(12345, 3), seed_for_draw(12345, 3));
    EXPECT_NE(seed_for_draw(12345, 3), seed_for_draw(12346, 3));
}

TEST(TestSeeds, EnvironmentReplaysEveryDrawOfATest) {
    SeedEnv env("12345");
    const uint64_t a = fresh_seed(), b = fresh_seed();
    EXPECT_EQ(a, seed_for_draw(12345, 0));
    EXPECT_EQ(b, seed_for_draw(12345, 1));
    EXPECT_EQ(recorded_seed(), "12345");
}

TEST(TestSeeds, WithoutEnvironmentTheRecordedBaseReplaysTheDraws) {
    SeedEnv env(nullptr);
    const uint64_t a = fresh_seed(), b = fresh_seed();
    const std::string base = recorded_seed();
    ASSERT_FALSE(base.empty()) << "the base seed must be recorded for the failure report";
    EXPECT_EQ(a, seed_for_draw(std::stoull(base), 0));
    EXPECT_EQ(b, seed_for_draw(std::stoull(base), 1));
}

TEST(TestSeeds, SharedSeedsAreFixedPerNameAndProcess) {
    const uint64_t a = shared_seed("pool a"), b = shared_seed("pool b");
    EXPECT_NE(a, b);
    EXPECT_EQ(shared_seed("pool a"), a) << "a shared input must be rebuilt the same in every test of the process";
}

TEST(TestSeeds, EnvironmentValueIsParsedStrictly) {
    struct Case {
        const char* value;
        bool ok;
        uint64_t want;
    };
    for (const Case& c :
         {Case{"0", true, 0}, Case{"18446744073709551615", true, ~uint64_t(0)}, Case{"18446744073709551616", false, 0},
          Case{"12x", false, 0}, Case{"-5", false, 0}, Case{" 7", false, 0}, Case{"0x10", false, 0}}) {
        SeedEnv env(c.value);
        std::string error;
        const std::optional<uint64_t> v = seed_from_environment("DSV4_TEST_SEED", &error);
        EXPECT_EQ(v.has_value(), c.ok) << c.value;
        if (c.ok) {
            EXPECT_EQ(*v, c.want) << c.value;
        } else {
            EXPECT_NE(error.find(std::string("DSV4_TEST_SEED must be a decimal unsigned 64-bit integer, got '") +
                                 c.value + "'"),
                      std::string::npos)
                << error;
        }
    }
    SeedEnv unset(nullptr);
    std::string error;
    EXPECT_FALSE(seed_from_environment("DSV4_TEST_SEED", &error).has_value());
    EXPECT_TRUE(error.empty());
}

}  // namespace
}  // namespace dsv4::testing
