// Tokenizer throughput on one core: MB of UTF-8 text encoded per second, on a mixed corpus (the golden strings:
// prose, code, CJK, emoji, digits, whitespace, random Unicode; plus the engine's own source files and docs).
// Prints the first pass (empty BPE cache) and the median of later passes (warm cache), and decode speed.
//   dsv4_bench_tokenizer [--tokenizer FILE] [--passes N] [extra corpus files...]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "dsv4/tokenizer.h"

namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
    const char* env_src = std::getenv("DSV4_SOURCE_DIR");
    const fs::path source = env_src ? env_src : DSV4_SOURCE_DIR_DEFAULT;
    fs::path tokenizer_path = source / "tests/data/tokenizer/deepseek_v4_tokenizer.json";
    int passes = 5;
    std::vector<fs::path> extra;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--tokenizer" && i + 1 < argc)
            tokenizer_path = argv[++i];
        else if (a == "--passes" && i + 1 < argc)
            passes = std::max(2, std::atoi(argv[++i]));
        else
            extra.emplace_back(a);
    }

    // Corpus: one document per golden string, per source/doc file, per extra file.
    std::vector<std::string> docs;
    std::ifstream goldens(source / "tests/data/tokenizer/goldens_v4.jsonl");
    std::string line;
    while (std::getline(goldens, line)) {
        auto row = nlohmann::json::parse(line);
        if (row.contains("text") && row.contains("ids")) docs.push_back(row["text"].get<std::string>());
    }
    for (const char* dir : {"src", "docs", "include", "tests/unit"}) {
        if (!fs::is_directory(source / dir)) continue;
        for (const auto& e : fs::recursive_directory_iterator(source / dir)) {
            const auto ext = e.path().extension().string();
            if (e.is_regular_file() && (ext == ".cpp" || ext == ".h" || ext == ".md" || ext == ".cu"))
                docs.push_back(read_file(e.path()));
        }
    }
    for (const auto& p : extra) docs.push_back(read_file(p));
    size_t bytes = 0;
    for (const auto& d : docs) bytes += d.size();

    auto t0 = std::chrono::steady_clock::now();
    auto tok = dsv4::Tokenizer::from_file(tokenizer_path);
    if (!tok.is_ok()) {
        std::fprintf(stderr, "%s\n", tok.status().to_string().c_str());
        return 1;
    }
    const double load_s = seconds_since(t0);

    std::vector<double> times;
    size_t n_ids = 0;
    std::vector<std::vector<int32_t>> all_ids(docs.size());
    for (int pass = 0; pass < passes; ++pass) {
        n_ids = 0;
        t0 = std::chrono::steady_clock::now();
        for (size_t i = 0; i < docs.size(); ++i) {
            all_ids[i].clear();
            (*tok)->encode_append(docs[i], all_ids[i]);
            n_ids += all_ids[i].size();
        }
        times.push_back(seconds_since(t0));
    }
    std::vector<double> warm(times.begin() + 1, times.end());
    std::sort(warm.begin(), warm.end());
    const double warm_s = warm[warm.size() / 2];

    t0 = std::chrono::steady_clock::now();
    size_t decoded = 0;
    for (const auto& ids : all_ids) decoded += (*tok)->decode(ids)->size();
    const double decode_s = seconds_since(t0);

    const double mb = bytes / 1e6;
    std::printf("tokenizer: %s (load %.2f s)\n", tokenizer_path.filename().string().c_str(), load_s);
    std::printf("corpus: %zu documents, %.2f MB, %zu tokens (%.2f bytes/token)\n", docs.size(), mb, n_ids,
                double(bytes) / double(std::max<size_t>(n_ids, 1)));
    std::printf("encode, first pass (cold BPE cache): %.2f MB/s\n", mb / times[0]);
    std::printf("encode, median of %d warm passes:    %.2f MB/s  (%.2f M tokens/s)\n", passes - 1, mb / warm_s,
                n_ids / warm_s / 1e6);
    std::printf("decode: %.2f MB/s of text\n", decoded / 1e6 / decode_s);
    return 0;
}
