// The embedded default model (created atomically in a cache folder, tokenizer carried in the binary) and
// run_generation over a real Session: chunking does not change what is generated, and the session must hold the
// generation's cached prefix.
#include "dsv4/default_model.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "dsv4/engine.h"
#include "dsv4/session.h"
#include "dsv4/tokenizer.h"
#include "dsv4/generation.h"
#include "testing/testing.h"

namespace dsv4::engine {
namespace {

std::string read_file(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// One default model for the whole executable (creating it writes ~80 MB).
class DefaultModel : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        cache_ = new testing::TempDir("dsv4-default-model");
        // Two racing creators: both must succeed and agree on the folder.
        Result<std::filesystem::path> a = internal_error("not run"), b = internal_error("not run");
        std::thread other([&] { b = ensure_default_model(cache_->path()); });
        a = ensure_default_model(cache_->path());
        other.join();
        ASSERT_TRUE(a.is_ok()) << a.status().to_string();
        ASSERT_TRUE(b.is_ok()) << b.status().to_string();
        ASSERT_EQ(*a, *b);
        dir_ = new std::filesystem::path(*a);
    }
    static void TearDownTestSuite() {
        delete dir_;
        delete cache_;
    }
    static testing::TempDir* cache_;
    static std::filesystem::path* dir_;
};
testing::TempDir* DefaultModel::cache_ = nullptr;
std::filesystem::path* DefaultModel::dir_ = nullptr;

TEST_F(DefaultModel, EmbeddedTokenizerIsTheRepositoryFile) {
    const std::string repo = read_file(testing::test_data_dir() / "tokenizer" / "deepseek_v4_tokenizer.json");
    ASSERT_FALSE(repo.empty());
    EXPECT_EQ(embedded_tokenizer_json(), repo);
    EXPECT_EQ(read_file(*dir_ / "tokenizer.json"), repo);
}

TEST_F(DefaultModel, FolderIsCompleteReusedAndLeavesNoTemporaries) {
    auto again = ensure_default_model(cache_->path());
    ASSERT_TRUE(again.is_ok());
    EXPECT_EQ(*again, *dir_);
    int entries = 0;
    for (const auto& e : std::filesystem::directory_iterator(cache_->path())) {
        ++entries;
        EXPECT_EQ(e.path(), *dir_) << "left over: " << e.path();
    }
    EXPECT_EQ(entries, 1);
    auto engine = Engine::load(*dir_, {});
    ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
    auto tok = Tokenizer::from_model_dir(*dir_);
    ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
    EXPECT_EQ((*engine)->info().vocab_size, (*tok)->vocab_size());  // every tokenizer id is a valid token
}

TEST_F(DefaultModel, CacheDirFollowsTheEnvironment) {
    // Saved and restored: other tests in this process may read them.
    const std::string saved_cache = std::getenv("DSV4_CACHE_DIR") ? std::getenv("DSV4_CACHE_DIR") : "";
    const std::string saved_xdg = std::getenv("XDG_CACHE_HOME") ? std::getenv("XDG_CACHE_HOME") : "";
    setenv("DSV4_CACHE_DIR", "/some/where", 1);
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    auto c = cache_dir();
    ASSERT_TRUE(c.is_ok());
    EXPECT_EQ(*c, std::filesystem::path("/some/where"));
    unsetenv("DSV4_CACHE_DIR");
    c = cache_dir();
    ASSERT_TRUE(c.is_ok());
    EXPECT_EQ(*c, std::filesystem::path("/xdg/dsv4"));
    unsetenv("XDG_CACHE_HOME");
    if (std::getenv("HOME")) {
        c = cache_dir();
        ASSERT_TRUE(c.is_ok());
        EXPECT_EQ(*c, std::filesystem::path(std::getenv("HOME")) / ".cache" / "dsv4");
    }
    if (!saved_cache.empty()) setenv("DSV4_CACHE_DIR", saved_cache.c_str(), 1);
    if (!saved_xdg.empty()) setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
}

std::vector<int32_t> generate(Session& session, const Tokenizer& tok, int32_t vocab, const std::vector<int32_t>& prompt,
                              int64_t chunk) {
    session.reset();
    GenerationOptions o;
    o.sampling.temperature = 0.8f;
    o.sampling.seed = 5;
    o.max_tokens = 6;
    o.max_context = session.max_context();
    o.ignore_eos = true;
    auto g = Generation::create(tok, vocab, prompt, o);
    EXPECT_TRUE(g.is_ok()) << g.status().to_string();
    Logits logits;
    int steps = 0;
    const Status st = run_generation(
        session, **g, [&](const GenerationStep&) { return ++steps < 100; }, logits, chunk);
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(steps, 6);
    EXPECT_EQ((*g)->reason(), StopReason::kMaxTokens);
    EXPECT_EQ(session.position(), (*g)->state_tokens());
    EXPECT_EQ(session.position(), int64_t(prompt.size()) + 5);  // the last token is sampled, not fed
    return (*g)->generated();
}

TEST_F(DefaultModel, RunGenerationIsIndependentOfPromptChunking) {
    auto engine = Engine::load(*dir_, {.precision = EnginePrecision::kF32});
    ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
    auto tok = Tokenizer::from_model_dir(*dir_);
    ASSERT_TRUE(tok.is_ok());
    auto session = (*engine)->create_session({.max_context = 64});
    ASSERT_TRUE(session.is_ok());
    const auto prompt = (*tok)->encode("<｜begin▁of▁sentence｜><｜User｜>Tell me a story<｜Assistant｜></think>");
    const int32_t vocab = int32_t((*engine)->info().vocab_size);
    const auto whole = generate(**session, **tok, vocab, prompt, 0);
    EXPECT_EQ(generate(**session, **tok, vocab, prompt, 1), whole);
    EXPECT_EQ(generate(**session, **tok, vocab, prompt, 3), whole);
}

TEST_F(DefaultModel, RunGenerationCancelsAndChecksTheSessionPosition) {
    auto engine = Engine::load(*dir_, {});
    ASSERT_TRUE(engine.is_ok());
    auto tok = Tokenizer::from_model_dir(*dir_);
    ASSERT_TRUE(tok.is_ok());
    auto session = (*engine)->create_session({.max_context = 64});
    ASSERT_TRUE(session.is_ok());
    const auto prompt = (*tok)->encode("Hello there");
    GenerationOptions o;
    o.max_tokens = 20;
    o.max_context = 64;
    o.ignore_eos = true;
    auto g = Generation::create(**tok, int32_t((*engine)->info().vocab_size), prompt, o);
    ASSERT_TRUE(g.is_ok());
    Logits logits;
    int steps = 0;
    StopReason last = StopReason::kNone;
    ASSERT_TRUE(run_generation(
                    **session, **g,
                    [&](const GenerationStep& s) {
                        last = s.reason;
                        return ++steps < 3;
                    },
                    logits)
                    .is_ok());
    EXPECT_EQ((*g)->reason(), StopReason::kCancelled);
    EXPECT_EQ(last, StopReason::kCancelled);
    EXPECT_EQ((*g)->generated().size(), 3u);

    // A generation that expects a cached prefix the session does not hold is refused.
    o.cached_tokens = 1;
    auto g2 = Generation::create(**tok, int32_t((*engine)->info().vocab_size), prompt, o);
    ASSERT_TRUE(g2.is_ok());
    (*session)->reset();
    EXPECT_FALSE(run_generation(
                     **session, **g2, [](const GenerationStep&) { return true; }, logits)
                     .is_ok());
}

}  // namespace
}  // namespace dsv4::engine
