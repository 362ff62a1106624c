// A forward step allocates nothing (DESIGN §5): every buffer of the CPU forward — sequence state, forward
// scratch, and the ops' workspace — is sized when the session is created. The global operator new of this
// executable counts calls while `g_counting` is set; a prefill and the decode steps after it must make none
// (so the workspace's reservation at session creation covered every op, with no warm-up needed).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <new>
#include <vector>

#include "model_test_util.h"
#include "testing/testing.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_news{0};

void* counted_alloc(std::size_t n, std::size_t align) {
    if (g_counting.load(std::memory_order_relaxed)) g_news.fetch_add(1, std::memory_order_relaxed);
    void* p = nullptr;
    if (align <= alignof(std::max_align_t)) {
        p = std::malloc(n ? n : 1);
    } else if (posix_memalign(&p, align, n ? n : align) != 0) {
        p = nullptr;
    }
    if (!p) throw std::bad_alloc();
    return p;
}
}  // namespace

void* operator new(std::size_t n) { return counted_alloc(n, 0); }
void* operator new[](std::size_t n) { return counted_alloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return counted_alloc(n, std::size_t(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_alloc(n, std::size_t(a)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace dsv4::model_tests {
namespace {

class NoAlloc : public ::testing::TestWithParam<EnginePrecision> {};

TEST_P(NoAlloc, PrefillAndDecodeStepsAllocateNothing) {
    const auto dir = testing::test_data_dir() / "goldens" / "flash_like";
    auto engine = load_engine(dir / "official", GetParam());
    ASSERT_NE(engine, nullptr);
    const auto tokens = read_token_file(dir / "tokens.txt");
    const int64_t prefill = 200, decode = 24, vocab = engine->info().vocab_size;
    ASSERT_GE(int64_t(tokens.size()), prefill + decode);
    SessionOptions so;
    so.max_context = prefill + decode;
    so.mtp = engine->info().has_mtp;  // the MTP block runs too
    auto s = engine->create_session(so);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    Logits out;  // the caller's buffers, sized for the largest feed
    out.values.reserve(size_t(prefill * vocab));
    out.mtp.reserve(size_t(prefill * vocab));

    g_news = 0;
    g_counting = true;
    Status st = (*s)->feed(std::span<const int32_t>(tokens.data(), size_t(prefill)), &out);
    g_counting = false;
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(g_news.load(), 0) << "allocations during a " << prefill << "-token prefill";

    int64_t decode_news = 0;
    for (int64_t i = 0; i < decode && st.is_ok(); ++i) {
        g_news = 0;
        g_counting = true;
        st = (*s)->feed(std::span<const int32_t>(tokens.data() + prefill + i, 1), &out);
        g_counting = false;
        decode_news += g_news.load();
    }
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(decode_news, 0) << "allocations during " << decode << " decode steps";
    EXPECT_TRUE(std::isfinite(out.values[0]));

    // The same as generation feeds it: the last row's logits only (LogitRows::kLast), MTP included.
    auto last = engine->create_session(so);
    ASSERT_TRUE(last.is_ok()) << last.status().to_string();
    Logits one;
    one.values.reserve(size_t(vocab));
    one.mtp.reserve(size_t(vocab));
    int64_t last_news = 0;
    for (int64_t i = 0; i <= decode && st.is_ok(); ++i) {
        const std::span<const int32_t> in = i == 0 ? std::span<const int32_t>(tokens.data(), size_t(prefill))
                                                   : std::span<const int32_t>(tokens.data() + prefill + i - 1, 1);
        g_news = 0;
        g_counting = true;
        st = (*last)->feed(in, &one, LogitRows::kLast);
        g_counting = false;
        last_news += g_news.load();
    }
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(last_news, 0) << "allocations during a last-row prefill and " << decode << " decode steps";
    EXPECT_EQ(one.rows, 1);

    // The counter works: a vector allocation while counting is seen.
    g_news = 0;
    g_counting = true;
    auto* probe = new std::vector<float>(16);
    g_counting = false;
    delete probe;
    EXPECT_GE(g_news.load(), 1);
}

// Engine::step: a prefill chunk next to decoding sequences, then batched decode steps, all on buffers sized at
// load (the engine's batch rows) and session creation; the first step already allocates nothing.
TEST_P(NoAlloc, BatchedStepsAllocateNothing) {
    const auto dir = testing::test_data_dir() / "goldens" / "flash_like";
    auto engine = load_engine(dir / "official", GetParam());
    ASSERT_NE(engine, nullptr);
    const auto tokens = read_token_file(dir / "tokens.txt");
    const int64_t prefill = 200, decode = 24, vocab = engine->info().vocab_size;
    ASSERT_GE(int64_t(tokens.size()), prefill + decode);
    constexpr int kSeqs = 4;
    SessionOptions so;
    so.max_context = prefill + decode;
    so.mtp = engine->info().has_mtp;
    std::vector<std::unique_ptr<Session>> ss;
    std::vector<Logits> outs(kSeqs);
    for (int k = 0; k < kSeqs; ++k) {
        auto s = engine->create_session(so);
        ASSERT_TRUE(s.is_ok()) << s.status().to_string();
        ss.push_back(std::move(s).value());
        outs[size_t(k)].values.reserve(size_t(prefill * vocab));
        outs[size_t(k)].mtp.reserve(size_t(prefill * vocab));
    }
    for (int k = 1; k < kSeqs; ++k)  // sequences 1.. are already decoding
        ASSERT_TRUE(ss[size_t(k)]->feed(std::span<const int32_t>(tokens.data() + k, size_t(20 * k)),
                                        &outs[size_t(k)]).is_ok());
    std::vector<StepItem> items(kSeqs);
    for (int k = 0; k < kSeqs; ++k) items[size_t(k)] = {ss[size_t(k)].get(), {}, &outs[size_t(k)]};
    items[0].tokens = std::span<const int32_t>(tokens.data(), size_t(prefill));
    for (int k = 1; k < kSeqs; ++k) items[size_t(k)].tokens = std::span<const int32_t>(tokens.data() + 20 * k, 1);

    g_news = 0;
    g_counting = true;
    Status st = engine->step(items);
    g_counting = false;
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(g_news.load(), 0) << "allocations during a step of a " << prefill << "-token chunk and "
                                << kSeqs - 1 << " decodes";

    int64_t step_news = 0;
    for (int64_t i = 0; i < decode && st.is_ok(); ++i) {
        for (int k = 0; k < kSeqs; ++k)
            items[size_t(k)].tokens = std::span<const int32_t>(tokens.data() + prefill + i, 1);
        g_news = 0;
        g_counting = true;
        st = engine->step(items);
        g_counting = false;
        step_news += g_news.load();
    }
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(step_news, 0) << "allocations during " << decode << " batched decode steps";
    EXPECT_TRUE(std::isfinite(outs[0].values[0]));
}

INSTANTIATE_TEST_SUITE_P(Precisions, NoAlloc, ::testing::Values(EnginePrecision::kReference, EnginePrecision::kF32),
                         [](const auto& info) { return std::string(engine_precision_name(info.param)); });

}  // namespace
}  // namespace dsv4::model_tests
