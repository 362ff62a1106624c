// `dsv4 tokenize` and `dsv4 detokenize`: text ↔ token ids with a model's tokenizer.json.
//   dsv4 tokenize (-m DIR | --tokenizer FILE) TEXT            → ids, comma-separated, one line
//   dsv4 tokenize ... --pieces TEXT                             → one line per token: id, token, its text
//   dsv4 tokenize ... --jsonl IN.jsonl                          → per input line {"text": s}, one line {"ids": [...]}
//   dsv4 detokenize (-m DIR | --tokenizer FILE) IDS             → the text (IDS: "1,2,3", "1 2 3" or "[1, 2, 3]")
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "command_registry.h"
#include "dsv4/tokenizer.h"

namespace dsv4::cli {
namespace {

struct TokenizerSource {
    std::string model_dir;
    std::string tokenizer_file;
};

void add_source_options(CLI::App* cmd, TokenizerSource& src) {
    auto* m =
        with_env(cmd->add_option("-m,--model", src.model_dir, "Model directory holding tokenizer.json"), "DSV4_MODEL");
    auto* t = with_env(cmd->add_option("--tokenizer", src.tokenizer_file, "A tokenizer.json file (HF format)"),
                       "DSV4_TOKENIZER");
    m->excludes(t);
}

Result<std::unique_ptr<Tokenizer>> load(const TokenizerSource& src) {
    if (!src.tokenizer_file.empty()) return Tokenizer::from_file(src.tokenizer_file);
    if (!src.model_dir.empty()) return Tokenizer::from_model_dir(src.model_dir);
    return invalid_argument("no tokenizer given: pass -m MODEL_DIR or --tokenizer tokenizer.json");
}

std::string join_ids(const std::vector<int32_t>& ids) {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) s += ',';
        s += std::to_string(ids[i]);
    }
    return s;
}

int run_jsonl(const Tokenizer& tok, const std::string& path) {
    std::ifstream in;
    std::istream* input = &std::cin;
    if (path != "-") {
        in.open(path, std::ios::binary);
        if (!in) return report_error(not_found(path + ": cannot open the --jsonl input"));
        input = &in;
    }
    std::string line;
    size_t line_no = 0;
    std::vector<int32_t> ids;
    while (std::getline(*input, line)) {
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        nlohmann::json row;
        try {
            row = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception& e) {
            return report_error(invalid_argument(path + ": line " + std::to_string(line_no) +
                                                 ": not valid JSON (expected {\"text\": ...}): " + e.what()));
        }
        if (!row.is_object() || !row.contains("text") || !row["text"].is_string())
            return report_error(invalid_argument(path + ": line " + std::to_string(line_no) +
                                                 ": expected a JSON object with a string field \"text\""));
        ids.clear();
        tok.encode_append(row["text"].get_ref<const std::string&>(), ids);
        const std::string out = "{\"ids\":[" + join_ids(ids) + "]}\n";
        std::fwrite(out.data(), 1, out.size(), stdout);
    }
    std::fflush(stdout);
    return 0;
}

int run_tokenize(const TokenizerSource& src, const std::string& text, bool text_given, bool pieces,
                 const std::string& jsonl) {
    if (jsonl.empty() && !text_given)
        return report_error(invalid_argument("tokenize: give TEXT (or - for stdin) or --jsonl FILE"));
    if (!jsonl.empty() && text_given)
        return report_error(invalid_argument("tokenize: give either TEXT or --jsonl, not both"));
    auto tok = load(src);
    if (!tok.is_ok()) return report_error(tok.status());
    if (!jsonl.empty()) return run_jsonl(**tok, jsonl);

    std::string input = text;
    if (text == "-") input.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    const auto ids = (*tok)->encode(input);
    if (!pieces) {
        std::printf("%s\n", join_ids(ids).c_str());
        return 0;
    }
    for (int32_t id : ids) {
        const std::string token = *(*tok)->id_to_token(id);
        const std::string bytes = *(*tok)->token_bytes(id);
        // The bytes of one token may be part of a character: show them with U+FFFD there.
        const std::string shown = nlohmann::json(bytes).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        std::printf("%d\t%s\t%s\n", id, token.c_str(), shown.c_str());
    }
    return 0;
}

Result<std::vector<int32_t>> parse_ids(const std::string& spec) {
    std::vector<int32_t> ids;
    std::string cleaned = spec;
    for (char& c : cleaned)
        if (c == ',' || c == '[' || c == ']' || c == '\n' || c == '\t' || c == '\r') c = ' ';
    std::istringstream in(cleaned);
    std::string word;
    while (in >> word) {
        size_t used = 0;
        long long v = 0;
        try {
            v = std::stoll(word, &used);
        } catch (...) {
            used = 0;
        }
        if (used != word.size() || word.empty())
            return invalid_argument("IDS: '" + word + "' is not an integer token id (give e.g. 1,2,3)");
        if (v < INT32_MIN || v > INT32_MAX) return invalid_argument("IDS: " + word + " is out of range");
        ids.push_back(static_cast<int32_t>(v));
    }
    return ids;
}

int run_detokenize(const TokenizerSource& src, const std::string& ids_text, bool skip_special) {
    auto ids = parse_ids(ids_text);
    if (!ids.is_ok()) return report_error(ids.status());
    auto tok = load(src);
    if (!tok.is_ok()) return report_error(tok.status());
    auto text = (*tok)->decode(*ids, skip_special);
    if (!text.is_ok()) return report_error(text.status());
    std::fwrite(text->data(), 1, text->size(), stdout);
    std::fputc('\n', stdout);
    return 0;
}

const CommandRegistration kTokenize("tokenize", [](CLI::App& app, int& exit_code) {
    struct Options {
        TokenizerSource src;
        std::string text;
        bool pieces = false;
        std::string jsonl;
    };
    auto opts = std::make_shared<Options>();
    auto* cmd = app.add_subcommand("tokenize", "Encode text to token ids (no BOS is added)");
    add_source_options(cmd, opts->src);
    auto* text_opt = cmd->add_option("TEXT", opts->text, "Text to encode; - reads stdin");
    cmd->add_flag("--pieces", opts->pieces, "Print one line per token: id, token string, its bytes as JSON");
    cmd->add_option("--jsonl", opts->jsonl,
                    "Encode each line {\"text\": ...} of this file (- for stdin); print {\"ids\": [...]} per line");
    cmd->callback([opts, text_opt, &exit_code] {
        exit_code = run_tokenize(opts->src, opts->text, text_opt->count() > 0, opts->pieces, opts->jsonl);
    });
});

const CommandRegistration kDetokenize("detokenize", [](CLI::App& app, int& exit_code) {
    struct Options {
        TokenizerSource src;
        std::string ids;
        bool skip_special = false;
    };
    auto opts = std::make_shared<Options>();
    auto* cmd = app.add_subcommand("detokenize", "Decode token ids to text");
    add_source_options(cmd, opts->src);
    cmd->add_option("IDS", opts->ids, "Token ids: 1,2,3 or \"1 2 3\" or [1,2,3]")->required();
    cmd->add_flag("--skip-special", opts->skip_special, "Drop special tokens (BOS, EOS, ...)");
    cmd->callback([opts, &exit_code] { exit_code = run_detokenize(opts->src, opts->ids, opts->skip_special); });
});

}  // namespace
}  // namespace dsv4::cli
