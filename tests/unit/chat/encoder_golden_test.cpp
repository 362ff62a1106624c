// Every case in tests/data/chat_golden (rendered by DeepSeek's official encoding_dsv4.py) must render byte for byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "dsv4/chat.h"
#include "testing/testing.h"

namespace dsv4::chat {
namespace {

std::string read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Index of the first differing byte, with some context, for a readable failure.
std::string first_difference(const std::string& got, const std::string& want) {
    size_t i = 0;
    while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
    size_t from = i > 40 ? i - 40 : 0;
    return "first difference at byte " + std::to_string(i) + "\n  got:  ..." + got.substr(from, 120) +
           "\n  want: ..." + want.substr(from, 120);
}

std::vector<std::filesystem::path> golden_cases() {
    std::vector<std::filesystem::path> cases;
    auto dir = testing::test_data_dir() / "chat_golden";
    for (const auto& sub : {dir, dir / "official"}) {
        for (const auto& entry : std::filesystem::directory_iterator(sub)) {
            auto p = entry.path();
            if (p.extension() != ".json" || p.stem().string().rfind("test_input", 0) == 0) continue;
            cases.push_back(p);
        }
    }
    std::sort(cases.begin(), cases.end());
    return cases;
}

TEST(ChatGolden, EveryCaseRendersByteIdentically) {
    auto cases = golden_cases();
    ASSERT_GE(cases.size(), 49u) << "expected 45 cases + 4 official vectors";
    int passed = 0;
    for (const auto& json_path : cases) {
        auto txt_path = json_path;
        txt_path.replace_extension(".txt");
        auto request = parse_template_request(read_file(json_path), json_path.filename().string());
        ASSERT_TRUE(request.is_ok()) << request.status().to_string();
        auto prompt = encode_messages(request->messages, request->options);
        ASSERT_TRUE(prompt.is_ok()) << json_path.filename() << ": " << prompt.status().to_string();
        std::string want = read_file(txt_path);
        EXPECT_EQ(*prompt, want) << json_path.filename() << ": " << first_difference(*prompt, want);
        if (*prompt == want) ++passed;
    }
    EXPECT_EQ(passed, static_cast<int>(cases.size()));
}

}  // namespace
}  // namespace dsv4::chat
