// Added-token flags (lstrip/rstrip/single_word/normalized) and every Split behaviour, inverted or not, on
// patched copies of the V4 tokenizer.json, against the ids HF tokenizers gives (goldens_v4_variants.json).
#include <fstream>

#include "tokenizer_test_util.h"

namespace dsv4::testing {
namespace {

TEST(TokenizerVariants, MatchHfTokenizers) {
    std::ifstream base_in(v4_tokenizer_path());
    const nlohmann::json base = nlohmann::json::parse(base_in);
    std::ifstream variants_in(test_data_dir() / "tokenizer/goldens_v4_variants.json");
    const nlohmann::json variants = nlohmann::json::parse(variants_in);
    ASSERT_GE(variants.size(), 11u);
    TempDir dir("dsv4-tokenizer-variants");
    for (const auto& v : variants) {
        nlohmann::json patched = base;
        const auto& patch = v["patch"];
        if (patch.contains("append_added_tokens"))
            for (const auto& t : patch["append_added_tokens"]) patched["added_tokens"].push_back(t);
        if (patch.contains("pre_tokenizer")) patched["pre_tokenizer"] = patch["pre_tokenizer"];
        const auto path = dir.path() / (v["name"].get<std::string>() + ".json");
        std::ofstream(path) << patched.dump();
        auto tok = Tokenizer::from_file(path);
        ASSERT_TRUE(tok.is_ok()) << v["name"] << ": " << tok.status().to_string();
        for (const auto& c : v["cases"]) {
            const std::string text = c["text"];
            EXPECT_EQ((*tok)->encode(text), c["ids"].get<std::vector<int32_t>>())
                << v["name"].get<std::string>() << " on " << nlohmann::json(text).dump();
        }
    }
}

}  // namespace
}  // namespace dsv4::testing
