// The whole model on the GPU (label gpu): the CUDA backend against transformers' goldens (tests/data/goldens, as
// tests/model does for the CPU) and against itself across chunkings and batch compositions.
//
// * f32 mode vs transformers' f32 forward: rel_l2 <= 1e-4 and the same top-1 at every position, both layouts.
// * f32 mode chunked prefill (any chunk size, down to pure decode) equals one pass: rel_l2 <= 1e-5.
// * reference numerics: within the CPU reference's band of transformers' bf16-vs-f32 distance.
// * batched steps: sequences of different lengths advancing together get the logits each gets alone (<= 1e-5).
// Without a GPU every test skips with the reason, except the one that checks the error a CUDA load gives there.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>

#include "backend/cuda/device.h"
#include "dsv4/engine.h"
#include "dsv4/sampling.h"
#include "dsv4/session.h"
#include "model/model_test_util.h"
#include "ops/gpu_testing.h"
#include "testing/testing.h"

namespace dsv4::model_tests {
namespace {

bool gpu_present() {
    auto n = cuda::device_count();
    return n.is_ok() && *n > 0;
}

// `adjust` sets the options a test is about.
std::unique_ptr<Engine> load_gpu_engine(const std::filesystem::path& dir, EnginePrecision precision,
                                        const std::function<void(EngineOptions&)>& adjust = {}) {
    EngineOptions o;
    o.precision = precision;
    o.backend = EngineBackend::kCuda;
    o.threads = kTestThreads;
    if (adjust) adjust(o);
    auto e = Engine::load(dir, o);
    EXPECT_TRUE(e.is_ok()) << dir << ": " << e.status().to_string();
    if (!e.is_ok()) return nullptr;
    return std::move(e).value();
}

class GpuGoldens : public ::testing::TestWithParam<GoldenCase> {
protected:
    void SetUp() override {
        DSV4_REQUIRE_GPU();
        auto g = load_golden(GetParam().name);
        ASSERT_TRUE(g.is_ok()) << g.status().to_string();
        dir_ = g->dir;
        tokens_ = std::move(g->tokens);
        golden_ = std::move(g->logits);
        vocab_ = g->vocab;
        bf16_rel_ = g->bf16_rel;
    }
    std::filesystem::path model_dir() const { return dir_ / GetParam().layout; }

    std::filesystem::path dir_;
    std::vector<int32_t> tokens_;
    std::vector<float> golden_;
    int64_t vocab_ = 0;
    double bf16_rel_ = 0;
};

TEST_P(GpuGoldens, F32MatchesTransformersAndEveryChunkingMatchesOnePass) {
    auto engine = load_gpu_engine(model_dir(), EnginePrecision::kF32);
    ASSERT_NE(engine, nullptr);
    const int64_t n = int64_t(tokens_.size());
    const auto whole = run_logits(*engine, tokens_, n);
    auto cmp = testing::compare(whole, golden_);
    const double top1 = top1_agreement(whole, golden_, vocab_);
    std::printf("gpu %s/%s f32: rel_l2 %.3g vs transformers, top-1 %.4f\n", GetParam().name.c_str(),
                GetParam().layout.c_str(), cmp.rel_l2, top1);
    EXPECT_TRUE(cmp.nonfinite == 0 && cmp.rel_l2 <= 1e-4) << cmp.report;
    EXPECT_EQ(top1, 1.0);
    for (int64_t chunk : {int64_t(1), int64_t(3), int64_t(4), int64_t(5), int64_t(64), int64_t(127), int64_t(128),
                          int64_t(129)}) {
        const auto logits = run_logits(*engine, tokens_, chunk);
        const double rel = rel_l2(logits, whole);
        std::printf("gpu %s/%s f32 chunk %lld: rel_l2 %.3g vs one pass\n", GetParam().name.c_str(),
                    GetParam().layout.c_str(), static_cast<long long>(chunk), rel);
        EXPECT_LE(rel, 1e-5) << "chunk " << chunk;
    }
}

TEST_P(GpuGoldens, ReferenceWithinTheCpuReferenceBand) {
    auto engine = load_gpu_engine(model_dir(), EnginePrecision::kReference);
    ASSERT_NE(engine, nullptr);
    // the CPU reference's band (tests/model/goldens_model_test.cpp)
    const double low = GetParam().layout == "official" ? 2.0 : 0.5, high = 12.0;
    const int64_t n = int64_t(tokens_.size());
    for (int64_t chunk : {n, int64_t(1), int64_t(129)}) {
        const auto logits = run_logits(*engine, tokens_, chunk);
        const double rel = rel_l2(logits, golden_), top1 = top1_agreement(logits, golden_, vocab_);
        std::printf("gpu %s/%s reference chunk %lld: rel_l2 %.4f = %.3fx transformers bf16, top-1 %.3f\n",
                    GetParam().name.c_str(), GetParam().layout.c_str(), static_cast<long long>(chunk), rel,
                    rel / bf16_rel_, top1);
        EXPECT_GE(rel, low * bf16_rel_) << "chunk " << chunk;
        EXPECT_LE(rel, high * bf16_rel_) << "chunk " << chunk;
        EXPECT_GE(top1, 0.80) << "chunk " << chunk;
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuGoldens,
                         ::testing::Values(GoldenCase{"flash_like", "official"},
                                           GoldenCase{"flash_like", "transformers"},
                                           GoldenCase{"pro_like", "official"}),
                         golden_case_label);

// Sequences of different lengths in one batched step, then decoding together: each gets the logits it gets alone.
TEST(GpuBatchedSteps, EachSequenceGetsItsSoloLogits) {
    DSV4_REQUIRE_GPU();
    const auto dir = testing::test_data_dir() / "goldens" / "flash_like";
    auto engine = load_gpu_engine(dir / "official", EnginePrecision::kF32);
    ASSERT_NE(engine, nullptr);
    const auto tokens = read_token_file(dir / "tokens.txt");
    const int64_t vocab = engine->info().vocab_size;
    struct Seq {
        int64_t offset, prompt, decode;
    };
    const std::vector<Seq> seqs = {{0, 37, 20}, {11, 130, 20}, {50, 3, 20}, {7, 200, 20}};
    std::vector<std::vector<float>> solo;
    for (const Seq& q : seqs) {
        const std::vector<int32_t> t(tokens.begin() + q.offset, tokens.begin() + q.offset + q.prompt + q.decode);
        solo.push_back(run_logits(*engine, t, q.prompt));
    }
    std::vector<std::unique_ptr<Session>> sessions;
    for (size_t i = 0; i < seqs.size(); ++i) {
        auto s = engine->create_session({.max_context = 512});
        ASSERT_TRUE(s.is_ok()) << s.status().to_string();
        sessions.push_back(std::move(s).value());
    }
    std::vector<std::vector<float>> got(seqs.size());
    std::vector<Logits> outs(seqs.size());
    std::vector<StepItem> items(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i)
        items[i] = {sessions[i].get(), {tokens.data() + seqs[i].offset, size_t(seqs[i].prompt)}, &outs[i]};
    ASSERT_TRUE(engine->step(items).is_ok());
    for (size_t i = 0; i < seqs.size(); ++i) got[i] = outs[i].values;
    for (int64_t d = 0; d < 20; ++d) {
        for (size_t i = 0; i < seqs.size(); ++i)
            items[i] = {sessions[i].get(), {tokens.data() + seqs[i].offset + seqs[i].prompt + d, 1}, &outs[i]};
        Status st = engine->step(items);
        ASSERT_TRUE(st.is_ok()) << st.to_string();
        for (size_t i = 0; i < seqs.size(); ++i)
            got[i].insert(got[i].end(), outs[i].values.begin(), outs[i].values.end());
    }
    for (size_t i = 0; i < seqs.size(); ++i) {
        ASSERT_EQ(got[i].size(), solo[i].size());
        const double rel = rel_l2(got[i], solo[i]);
        std::printf("gpu batched sequence %zu (%lld + %lld tokens): rel_l2 %.3g vs alone\n", i,
                    static_cast<long long>(seqs[i].prompt), static_cast<long long>(seqs[i].decode), rel);
        EXPECT_LE(rel, 1e-5) << "sequence " << i;
        EXPECT_EQ(top1_agreement(got[i], solo[i], vocab), 1.0) << "sequence " << i;
    }
}

// LogitRows::kLast on the GPU: a pass runs the head on the wanted rows only (gathered after the final norm), in
// short passes (<= 256 rows, where every-row passes run the head inside) and long ones (chunks of 256), alone and in
// a batched step beside shares that want every row. The head GEMM then has other row counts, so the check is the
// f32 one (rel_l2 <= 1e-5, same top-1) against the last row of an every-row feed, and the same for a share that wants
// every row against its solo feed.
TEST(GpuLastRowLogits, LastRowMatchesTheEveryRowFeed) {
    DSV4_REQUIRE_GPU();
    const auto dir = testing::test_data_dir() / "goldens" / "flash_like";
    const auto base = read_token_file(dir / "tokens.txt");
    ASSERT_FALSE(base.empty());
    for (const EnginePrecision precision : {EnginePrecision::kF32, EnginePrecision::kReference}) {
        auto engine = load_gpu_engine(dir / "official", precision);
        ASSERT_NE(engine, nullptr);
        const int64_t vocab = engine->info().vocab_size;
        auto fresh = [&] {
            auto s = engine->create_session({.max_context = 512});
            EXPECT_TRUE(s.is_ok()) << s.status().to_string();
            return s.is_ok() ? std::move(s).value() : nullptr;
        };
        auto last_row = [&](const Logits& l) { return std::vector<float>(l.values.end() - vocab, l.values.end()); };
        for (const int64_t n : {int64_t(37), int64_t(300)}) {
            std::vector<int32_t> t(static_cast<size_t>(n));
            for (int64_t i = 0; i < n; ++i) t[size_t(i)] = base[size_t(i * 7 + n) % base.size()];
            auto all = fresh(), last = fresh();
            ASSERT_TRUE(all && last);
            Logits want, got;
            ASSERT_TRUE(all->feed(t, &want).is_ok());
            Status st = last->feed(t, &got, LogitRows::kLast);
            ASSERT_TRUE(st.is_ok()) << st.to_string();
            ASSERT_EQ(got.rows, 1);
            ASSERT_EQ(got.values.size(), size_t(vocab));
            const std::vector<float> w = last_row(want);
            const double rel = rel_l2(got.values, w);
            std::printf("%s, %lld tokens: last row alone vs every row rel_l2 %.3g, bit-identical %s\n",
                        engine_precision_name(precision), static_cast<long long>(n), rel,
                        std::memcmp(got.values.data(), w.data(), w.size() * 4) == 0 ? "yes" : "no");
            EXPECT_LE(rel, 1e-5);
            EXPECT_EQ(top1_agreement(got.values, w, vocab), 1.0);
            // a batched step: this prompt's last row beside a 37-token share that wants every row
            auto a = fresh(), b = fresh(), solo = fresh();
            ASSERT_TRUE(a && b && solo);
            const std::vector<int32_t> u(t.begin(), t.begin() + 37);
            Logits solo_out, out_a, out_b;
            ASSERT_TRUE(solo->feed(u, &solo_out).is_ok());
            const std::vector<StepItem> items = {{a.get(), t, &out_a, LogitRows::kLast}, {b.get(), u, &out_b}};
            st = engine->step(items);
            ASSERT_TRUE(st.is_ok()) << st.to_string();
            ASSERT_EQ(out_a.rows, 1);
            EXPECT_LE(rel_l2(out_a.values, w), 1e-5);
            ASSERT_EQ(out_b.rows, 37);
            EXPECT_LE(rel_l2(out_b.values, solo_out.values), 1e-5);
            EXPECT_EQ(top1_agreement(out_b.values, solo_out.values, vocab), 1.0);
        }
    }
}

// Where no GPU is present, asking for the CUDA backend is a clear error, not a crash.
TEST(GpuBackendAvailability, NoGpuGivesAClearError) {
    if (gpu_present()) GTEST_SKIP() << "a GPU is present: the no-GPU message cannot be observed here";
    EngineOptions o;
    o.backend = EngineBackend::kCuda;
    auto e = Engine::load(testing::test_data_dir() / "goldens" / "pro_like" / "official", o);
    ASSERT_FALSE(e.is_ok());
    EXPECT_NE(e.status().message().find("--backend cpu"), std::string::npos) << e.status().to_string();
}

}  // namespace
}  // namespace dsv4::model_tests

namespace dsv4::model_tests {
namespace {

// Decode steps replay CUDA graphs (captured once per set of sequences; a capture fails on any host
// synchronisation, so each captured step is proof that it has none) and give bit for bit what the same steps give
// queued op by op, in reference numerics, where any difference would be amplified.
TEST(GpuDecodeGraphs, ReplayedStepsEqualQueuedStepsBitForBit) {
    DSV4_REQUIRE_GPU();
    const auto dir = testing::test_data_dir() / "goldens" / "flash_like";
    const auto tokens = read_token_file(dir / "tokens.txt");
    auto run = [&](bool graphs, EngineStats* stats) {
        auto e = load_gpu_engine(dir / "official", EnginePrecision::kReference, [&](EngineOptions& o) {
            o.cuda_graphs = graphs;
            o.cuda_warmup = false;  // the counts below are the steps' own
        });
        if (!e) return std::vector<float>{};
        auto logits = run_logits(*e, tokens, 1);  // a first token, then single-token decode steps
        *stats = e->stats();
        return logits;
    };
    EngineStats with, without;
    const auto a = run(true, &with), b = run(false, &without);
    ASSERT_FALSE(a.empty());
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "rel_l2 " << rel_l2(a, b);
    const int64_t steps = int64_t(tokens.size()) - 1;
    std::printf("decode graphs: %lld captures, %lld replays, %lld nodes per step, %lld programmatic edges\n",
                static_cast<long long>(with.graph_captures), static_cast<long long>(with.graph_replays),
                static_cast<long long>(with.graph_nodes), static_cast<long long>(with.graph_programmatic_edges));
    EXPECT_EQ(with.graph_captures, 1);
    EXPECT_EQ(with.graph_replays, steps);
    EXPECT_GT(with.graph_nodes, 0);
    // most edges join two kernels of the backend (the rest touch copies or cuBLASLt): they launch programmatically
    EXPECT_GT(with.graph_programmatic_edges * 2, with.graph_nodes) << with.graph_programmatic_edges << " of "
                                                                   << with.graph_nodes;
    EXPECT_EQ(without.graph_replays, 0);
}

// Draws by the engine (EngineSample) in decode steps, alone and batched: every draw the GPU makes is the host
// sampler's over the same step's logits with the same uniform (token and alternatives; log-probabilities within
// 1e-6), for greedy, unfiltered, top-p, top-k and min-p sampling and penalties over the generated history; a
// prefill pass and a request with a logit bias leave the draw to the host.
TEST(GpuEngineDraws, AreTheHostSamplersDraws) {
    DSV4_REQUIRE_GPU();
    const auto dir = testing::test_data_dir() / "goldens" / "flash_like";
    const auto prompt = read_token_file(dir / "tokens.txt");
    auto engine = load_gpu_engine(dir / "official", EnginePrecision::kReference);
    ASSERT_NE(engine, nullptr);
    const int32_t vocab = int32_t(engine->info().vocab_size);
    std::vector<SamplingParams> sets(8);
    sets[0].temperature = 0, sets[0].top_logprobs = 3;
    sets[1].temperature = 1;
    sets[2].temperature = 0.8f, sets[2].top_p = 0.9f, sets[2].top_logprobs = 2;
    sets[3].temperature = 0.7f, sets[3].top_k = 20, sets[3].min_p = 0.05f;
    sets[4].temperature = 1.2f, sets[4].min_p = 0.1f;
    sets[5].temperature = 0, sets[5].repetition_penalty = 1.5f, sets[5].presence_penalty = 0.5f;
    sets[6].temperature = 0.9f, sets[6].frequency_penalty = 0.8f, sets[6].penalty_last_n = 4, sets[6].top_p = 0.95f;
    sets[7].temperature = 0, sets[7].logit_bias = {{5, 3.0f}, {17, -100.0f}};
    int drawn_on_gpu = 0, steps = 0;
    for (size_t k = 0; k < sets.size(); ++k) {
        SamplingParams& p = sets[k];
        p.seed = 100 + k;
        SCOPED_TRACE("parameter set " + std::to_string(k));
        // a and b step together with draws; c is the host's copy of a (same tokens, plain logits)
        auto a = engine->create_session({.max_context = 64}), b = engine->create_session({.max_context = 64}),
             c = engine->create_session({.max_context = 64});
        ASSERT_TRUE(a.is_ok() && b.is_ok() && c.is_ok());
        Sampler host(vocab, p);
        Rng stream(p.seed);
        Logits la, lb, lc;
        SampleResult ra, rb, want;
        const std::span<const int32_t> first(prompt.data(), std::min<size_t>(prompt.size(), 8));
        EngineSample request{&p, p.temperature > 0 ? stream.uniform() : 0.0, &ra};
        ASSERT_TRUE((*a)->feed(first, &la, LogitRows::kLast, &request).is_ok());
        EXPECT_EQ(ra.token, -1) << "a prefill pass leaves the draw to the host";
        ASSERT_TRUE((*b)->feed(first, &lb, LogitRows::kLast).is_ok());
        ASSERT_TRUE((*c)->feed(first, &lc, LogitRows::kLast).is_ok());
        ASSERT_TRUE(host.sample(lc.values, {}, want).is_ok());
        int32_t next = want.token;
        std::vector<int32_t> history = {next};  // the generated tokens: the penalties' history
        for (int step = 0; step < 12; ++step) {
            const double u = p.temperature > 0 ? stream.uniform() : 0.0;
            EngineSample qa{&p, u, &ra, history}, qb{&p, u, &rb, history};
            const std::vector<StepItem> items = {{a->get(), {&next, 1}, &la, LogitRows::kLast, &qa},
                                                 {b->get(), {&next, 1}, &lb, LogitRows::kLast, &qb}};
            const Status st = engine->step(items);
            ASSERT_TRUE(st.is_ok()) << st.to_string();
            ASSERT_TRUE((*c)->feed({&next, 1}, &lc, LogitRows::kLast).is_ok());
            ASSERT_TRUE(host.sample(lc.values, history, want).is_ok());
            const bool biased = !p.logit_bias.empty();
            if (!biased) ++steps;
            for (const SampleResult* r : {&ra, &rb}) {
                if (biased) EXPECT_LT(r->token, 0) << "a logit bias leaves the draw to the host";
                if (r->token < 0) continue;  // declined: its logits row was filled instead
                ++drawn_on_gpu;
                EXPECT_EQ(r->token, want.token) << "step " << step;
                EXPECT_NEAR(r->logprob, want.logprob, 1e-6 * std::max(1.0f, std::fabs(want.logprob)));
                ASSERT_EQ(r->num_top, want.num_top);
                for (int i = 0; i < want.num_top; ++i) EXPECT_EQ(r->top[size_t(i)].token, want.top[size_t(i)].token);
            }
            if (ra.token < 0) EXPECT_TRUE(testing::bytes_equal(la.values, lc.values));
            next = want.token;
            history.push_back(next);
        }
    }
    std::printf("%d of %d unbiased draws made on the GPU, the rest declined to the host\n", drawn_on_gpu, 2 * steps);
    EXPECT_GT(drawn_on_gpu, steps);  // greedy and the unfiltered draws never decline
}

// The load's warm-up (EngineOptions::cuda_warmup) runs its passes on a scratch session and changes no later result:
// a prompt in one pass and then single-token decode steps give the same bits with and without it, in reference
// numerics (where a stale cache page or state left behind would show), and the warm-up did run (a decode graph
// captured before any session stepped).
TEST(GpuWarmup, LeavesEveryLaterResultBitIdentical) {
    DSV4_REQUIRE_GPU();
    const auto dir = testing::test_data_dir() / "goldens" / "flash_like";
    const auto tokens = read_token_file(dir / "tokens.txt");
    auto run = [&](bool warmup, EngineStats* at_load) {
        auto e = load_gpu_engine(dir / "official", EnginePrecision::kReference,
                                 [&](EngineOptions& o) { o.cuda_warmup = warmup; });
        if (!e) return std::vector<float>{};
        *at_load = e->stats();
        auto prompt = run_logits(*e, tokens, int64_t(tokens.size()));
        const auto steps = run_logits(*e, tokens, 1);
        prompt.insert(prompt.end(), steps.begin(), steps.end());
        return prompt;
    };
    EngineStats warm, cold;
    const auto a = run(true, &warm), b = run(false, &cold);
    ASSERT_FALSE(a.empty());
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "rel_l2 " << rel_l2(a, b);
    std::printf("warm-up: %.1f ms, %lld decode graphs captured at load\n", warm.warmup_ms,
                static_cast<long long>(warm.graph_captures));
    EXPECT_GT(warm.warmup_ms, 0.0);
    EXPECT_EQ(warm.graph_captures, 1);
    EXPECT_EQ(warm.graph_replays, 2);
    EXPECT_EQ(cold.warmup_ms, 0.0);
    EXPECT_EQ(cold.graph_captures, 0);
}

// A decode step scans its rows' span of entries (a power of two from 4,096 tokens), not the whole session capacity
// the cache is sized for (the model's 1M tokens unless told otherwise): the same session decodes the same bits in a
// cache of the default capacity as in one sized to it, across the span's doubling at position 4,096 — which the
// wide engine meets with one more graph capture. (Sized by the capacity, its HCA lists were 8,192 entries wide and
// the split attention rounded differently.)
TEST(GpuDecodeSpan, SessionsDecodeTheSameBitsInAnyCacheCapacity) {
    DSV4_REQUIRE_GPU();
    const auto dir = testing::test_data_dir() / "goldens" / "flash_like" / "official";
    constexpr int64_t kPrompt = 4090, kSteps = 12;  // decode positions 4,090 .. 4,101
    std::vector<int32_t> tokens(size_t(kPrompt + kSteps));
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7919 + 13) % 500);
    auto run = [&](int64_t capacity, int64_t* step_captures) {
        std::vector<float> out;
        auto e =
            load_gpu_engine(dir, EnginePrecision::kReference, [&](EngineOptions& o) { o.cuda_max_context = capacity; });
        if (!e) return out;
        auto s = e->create_session({.max_context = kPrompt + kSteps});
        EXPECT_TRUE(s.is_ok()) << s.status().to_string();
        if (!s.is_ok()) return out;
        Logits part;
        Status st = (*s)->feed(std::span<const int32_t>(tokens.data(), size_t(kPrompt)), &part, LogitRows::kLast);
        EXPECT_TRUE(st.is_ok()) << st.to_string();
        const int64_t captures = e->stats().graph_captures;
        for (int64_t i = kPrompt; st.is_ok() && i < kPrompt + kSteps; ++i) {
            st = (*s)->feed(std::span<const int32_t>(tokens.data() + i, 1), &part);
            EXPECT_TRUE(st.is_ok()) << "position " << i << ": " << st.to_string();
            out.insert(out.end(), part.values.begin(), part.values.end());
        }
        *step_captures = e->stats().graph_captures - captures;
        return out;
    };
    int64_t wide_captures = 0, tight_captures = 0;
    const auto wide = run(0, &wide_captures), tight = run(kPrompt + kSteps, &tight_captures);
    ASSERT_FALSE(wide.empty());
    ASSERT_EQ(wide.size(), tight.size());
    EXPECT_EQ(std::memcmp(wide.data(), tight.data(), wide.size() * sizeof(float)), 0)
        << "rel_l2 " << rel_l2(wide, tight);
    EXPECT_EQ(wide_captures, 1) << "the doubling at 4,096 is one capture (the warm-up captured the first span)";
    std::printf("decode across position 4,096: captures during the steps %lld (1M capacity), %lld (sized)\n",
                static_cast<long long>(wide_captures), static_cast<long long>(tight_captures));
}

}  // namespace
}  // namespace dsv4::model_tests
