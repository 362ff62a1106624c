// A model spread over GPUs (EngineOptions::cuda_devices; label gpu): each stage holds a contiguous range of layers
// and hands its streams to the next. The stages run the same kernels on the same rows as one GPU does, and the
// handoff runs the last layer's hc_post on its own (as the fused collapse would store it), so every result is the
// single GPU's bit for bit, in reference numerics: prompts in one pass and in chunks, a long pass whose head runs
// in chunks on the wanted rows, decode steps replayed as graphs on every stage, batched steps of sessions of
// different lengths, and a long prompt whose passes are left running so that the stages overlap. On one GPU the
// stages share it (the GPU named several times); with two GPUs, across them.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>

#include "backend/cuda/device.h"
#include "dsv4/engine.h"
#include "dsv4/session.h"
#include "model/model_test_util.h"
#include "ops/gpu_testing.h"
#include "testing/testing.h"

namespace dsv4::model_tests {
namespace {

const std::filesystem::path& flash_like() {
    static const std::filesystem::path dir = testing::test_data_dir() / "goldens" / "flash_like" / "official";
    return dir;
}

// max_rows: EngineOptions::max_batch_rows (0: the backend's 8,192).
Result<std::unique_ptr<Engine>> load_on(const std::vector<int>& devices, int64_t max_rows = 0) {
    EngineOptions o;
    o.max_batch_rows = max_rows;
    o.precision = EnginePrecision::kReference;
    o.backend = EngineBackend::kCuda;
    o.threads = kTestThreads;
    o.cuda_devices = devices;
    o.cuda_sessions = 4;
    o.cuda_max_context = 1024;
    return Engine::load(flash_like(), o);
}

// Every result the test compares, in one vector: a prompt in one pass, the same fed one token at a time (decode
// steps after the first), a 300-token prompt wanting its last row only (the head on the gathered rows), and two
// sessions of 37 and 130 tokens prefilled in one batched step, then 10 decode steps together.
std::vector<float> results(Engine& e, EngineStats* stats) {
    std::vector<int32_t> tokens(300);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7919 + 13) % 500);
    const std::vector<int32_t> short_prompt(tokens.begin(), tokens.begin() + 40);
    std::vector<float> out = run_logits(e, short_prompt, 0);
    const std::vector<float> steps = run_logits(e, short_prompt, 1);
    out.insert(out.end(), steps.begin(), steps.end());

    auto s = e.create_session({.max_context = 512});
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    if (!s.is_ok()) return {};
    Logits last;
    Status st = (*s)->feed(tokens, &last, LogitRows::kLast);
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    out.insert(out.end(), last.values.begin(), last.values.end());

    std::vector<std::unique_ptr<Session>> sessions;
    for (int i = 0; i < 2; ++i) {
        auto q = e.create_session({.max_context = 512});
        EXPECT_TRUE(q.is_ok()) << q.status().to_string();
        if (!q.is_ok()) return {};
        sessions.push_back(std::move(q).value());
    }
    const int64_t prompts[2] = {37, 130};
    std::vector<Logits> outs(2);
    std::vector<StepItem> items(2);
    for (size_t i = 0; i < 2; ++i)
        items[i] = {sessions[i].get(), {tokens.data() + 5 * i, size_t(prompts[i])}, &outs[i]};
    st = e.step(items);
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    for (int64_t d = 0; st.is_ok() && d < 10; ++d) {
        for (size_t i = 0; i < 2; ++i) {
            out.insert(out.end(), outs[i].values.begin(), outs[i].values.end());
            items[i] = {sessions[i].get(), {tokens.data() + 5 * i + prompts[i] + d, 1}, &outs[i]};
        }
        st = e.step(items);
        EXPECT_TRUE(st.is_ok()) << "decode step " << d << ": " << st.to_string();
    }
    *stats = e.stats();
    return out;
}

// Stages on `devices` give the one-GPU engine's bits, with as many graph captures and replays (counted once per step).
void expect_same_bits_as_one_gpu(const std::vector<int>& devices, size_t min_stages, int64_t max_rows = 0) {
    auto one = load_on({0}, max_rows);
    ASSERT_TRUE(one.is_ok()) << one.status().to_string();
    EngineStats one_stats, spread_stats;
    const std::vector<float> a = results(**one, &one_stats);
    auto spread = load_on(devices, max_rows);
    ASSERT_TRUE(spread.is_ok()) << spread.status().to_string();
    const std::string& placement = (*spread)->info().gpus;
    std::printf("stages: %s\n", placement.c_str());
    size_t stages = 1;
    for (size_t at = placement.find("; "); at != std::string::npos; at = placement.find("; ", at + 1)) ++stages;
    EXPECT_GE(stages, min_stages) << placement;
    EXPECT_EQ((*one)->info().gpus.find(';'), std::string::npos);
    const std::vector<float> b = results(**spread, &spread_stats);
    ASSERT_FALSE(a.empty());
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "rel_l2 " << rel_l2(a, b);
    // one capture per decode shape (1 and 2 rows; the warm-up's), on every stage: nodes over all stages
    EXPECT_EQ(spread_stats.graph_captures, one_stats.graph_captures);
    EXPECT_EQ(spread_stats.graph_replays, one_stats.graph_replays);
    EXPECT_GT(spread_stats.graph_nodes, one_stats.graph_nodes);
}

TEST(GpuPipeline, TwoStagesOnOneGpuGiveItsBits) {
    DSV4_REQUIRE_GPU();
    expect_same_bits_as_one_gpu({0, 0}, 2);
}

// Four stages over four layers: stages of one layer each where the split gives them, some without a compressed
// layer (no entry pages of their own).
TEST(GpuPipeline, FourStagesOnOneGpuGiveItsBits) {
    DSV4_REQUIRE_GPU();
    expect_same_bits_as_one_gpu({0, 0, 0, 0}, 2);
}

// Passes of 64 rows: a prompt's passes before its last return nothing to the host and are left running, the first
// stage starting the next pass while the second finishes this one (the handoff through the second stage's inbox).
TEST(GpuPipeline, PromptPassesLeftRunningGiveTheSameBits) {
    DSV4_REQUIRE_GPU();
    expect_same_bits_as_one_gpu({0, 0}, 2, 64);
    expect_same_bits_as_one_gpu({0, 0, 0}, 2, 64);
}

TEST(GpuPipeline, TwoGpusGiveOneGpusBits) {
    DSV4_REQUIRE_GPU();
    auto n = cuda::device_count();
    if (!n.is_ok() || *n < 2) GTEST_SKIP() << "one GPU on this machine; the two-GPU pipeline needs two";
    expect_same_bits_as_one_gpu({0, 1}, 2);
    expect_same_bits_as_one_gpu({1, 0}, 2);
    expect_same_bits_as_one_gpu({0, 1}, 2, 64);
}

TEST(GpuPipeline, BadDeviceListsAreClearErrors) {
    DSV4_REQUIRE_GPU();
    auto missing = load_on({0, 99});
    ASSERT_FALSE(missing.is_ok());
    EXPECT_NE(missing.status().message().find("GPU 99 does not exist"), std::string::npos)
        << missing.status().to_string();
}

}  // namespace
}  // namespace dsv4::model_tests
