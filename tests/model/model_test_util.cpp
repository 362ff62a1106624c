#include "model_test_util.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/npy.h"
#include "testing/testing.h"

namespace dsv4::model_tests {

std::vector<int32_t> read_token_file(const std::filesystem::path& path) {
    std::ifstream in(path);
    std::ostringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    for (char& c : text)
        if (c == ',') c = ' ';
    std::istringstream words(text);
    std::vector<int32_t> ids;
    int64_t v;
    while (words >> v) ids.push_back(int32_t(v));
    return ids;
}

std::unique_ptr<Engine> load_engine(const std::filesystem::path& dir, EnginePrecision precision) {
    EngineOptions o;
    o.precision = precision;
    o.threads = kTestThreads;
    auto e = Engine::load(dir, o);
    EXPECT_TRUE(e.is_ok()) << dir << ": " << e.status().to_string();
    if (!e.is_ok()) return nullptr;
    return std::move(e).value();
}

std::vector<float> run_logits(Engine& engine, const std::vector<int32_t>& tokens, int64_t chunk) {
    const int64_t n = int64_t(tokens.size()), vocab = engine.info().vocab_size;
    SessionOptions so;
    so.max_context = n;
    auto session = engine.create_session(so);
    EXPECT_TRUE(session.is_ok()) << session.status().to_string();
    if (!session.is_ok()) return {};
    if (chunk <= 0) chunk = n;
    std::vector<float> out(size_t(n * vocab));
    Logits part;
    for (int64_t off = 0; off < n; off += chunk) {
        const int64_t len = std::min(chunk, n - off);
        Status st = (*session)->feed(std::span<const int32_t>(tokens.data() + off, size_t(len)), &part);
        EXPECT_TRUE(st.is_ok()) << st.to_string();
        if (!st.is_ok()) return {};
        EXPECT_EQ(part.rows, len);
        std::copy(part.values.begin(), part.values.end(), out.begin() + off * vocab);
    }
    EXPECT_EQ((*session)->position(), n);
    return out;
}

double top1_agreement(const std::vector<float>& a, const std::vector<float>& b, int64_t vocab) {
    if (a.size() != b.size() || a.empty()) return 0.0;
    const int64_t rows = int64_t(a.size()) / vocab;
    int64_t same = 0;
    for (int64_t r = 0; r < rows; ++r) {
        const float* pa = a.data() + r * vocab;
        const float* pb = b.data() + r * vocab;
        same += std::max_element(pa, pa + vocab) - pa == std::max_element(pb, pb + vocab) - pb;
    }
    return double(same) / double(rows);
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) { return testing::compare(a, b).rel_l2; }

void PrintTo(const GoldenCase& c, std::ostream* os) { *os << c.name << "/" << c.layout; }

std::string golden_case_label(const ::testing::TestParamInfo<GoldenCase>& info) {
    return info.param.name + "_" + info.param.layout;
}

Result<GoldenFixture> load_golden(const std::string& name) {
    GoldenFixture g;
    g.dir = testing::test_data_dir() / "goldens" / name;
    // The fixtures are committed (tests/reference/make_goldens.py writes them): a missing one is a failure.
    if (!std::filesystem::exists(g.dir / "meta.json")) return not_found("missing committed fixture " + g.dir.string());
    g.tokens = read_token_file(g.dir / "tokens.txt");
    if (g.tokens.empty()) return invalid_argument((g.dir / "tokens.txt").string() + ": no token ids");
    DSV4_ASSIGN_OR_RETURN(io::NpyArray arr, io::read_npy(g.dir / "logits_f32.npy"));
    if (arr.shape.size() != 2 || arr.shape[0] != int64_t(g.tokens.size()))
        return invalid_argument((g.dir / "logits_f32.npy").string() + ": not [tokens, vocab]");
    g.vocab = arr.shape[1];
    g.logits = arr.to_f32();
    std::ifstream meta(g.dir / "meta.json");
    const auto j = nlohmann::json::parse(meta, nullptr, false);
    if (j.is_discarded() || !j.contains("rel_l2") || !j["rel_l2"].contains("transformers_bf16_vs_f32"))
        return invalid_argument((g.dir / "meta.json").string() + ": no rel_l2.transformers_bf16_vs_f32");
    g.bf16_rel = j["rel_l2"]["transformers_bf16_vs_f32"].get<double>();
    if (!(g.bf16_rel > 0)) return invalid_argument((g.dir / "meta.json").string() + ": bf16 rel_l2 must be > 0");
    return g;
}

}  // namespace dsv4::model_tests
