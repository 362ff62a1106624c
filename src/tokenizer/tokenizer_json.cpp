// tokenizer.json → TokenizerSpec. Only this file knows the JSON layout of HF tokenizers.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/tokenizer_spec.h"

namespace dsv4::tokenizer {
namespace {

using nlohmann::json;

std::string where(const TokenizerSpec& spec, const std::string& key) { return spec.source + ": " + key; }

bool is_null_or_empty_string(const json& j, const char* key) {
    auto it = j.find(key);
    return it == j.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty());
}

Status parse_normalizer(const json& root, TokenizerSpec& spec) {
    auto it = root.find("normalizer");
    if (it == root.end() || it->is_null()) return Status::ok();
    const json& n = *it;
    if (n.value("type", "") == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array() &&
        n["normalizers"].empty())
        return Status::ok();
    return unsupported(where(spec, "normalizer") + ": only no normalizer (or an empty Sequence) is implemented, got " +
                       n.dump().substr(0, 200));
}

Result<SplitBehavior> parse_behavior(const TokenizerSpec& spec, const std::string& b) {
    if (b == "Isolated") return SplitBehavior::kIsolated;
    if (b == "Removed") return SplitBehavior::kRemoved;
    if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
    if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
    if (b == "Contiguous") return SplitBehavior::kContiguous;
    return corrupt(where(spec, "pre_tokenizer Split behavior") + ": unknown value '" + b + "'");
}

Status parse_one_pre_tokenizer(const json& p, TokenizerSpec& spec, bool& saw_byte_level) {
    const std::string type = p.value("type", "");
    if (saw_byte_level)
        return unsupported(where(spec, "pre_tokenizer") + ": a '" + type +
                           "' after ByteLevel is not implemented (ByteLevel must come last)");
    if (type == "Split") {
        SplitSpec s;
        const json& pat = p.at("pattern");
        if (pat.contains("Regex")) {
            s.pattern = pat["Regex"].get<std::string>();
            s.is_regex = true;
        } else if (pat.contains("String")) {
            s.pattern = pat["String"].get<std::string>();
            s.is_regex = false;
        } else {
            return corrupt(where(spec, "pre_tokenizer Split pattern") + ": neither Regex nor String");
        }
        DSV4_ASSIGN_OR_RETURN(s.behavior, parse_behavior(spec, p.value("behavior", "")));
        s.invert = p.value("invert", false);
        spec.splits.push_back(std::move(s));
        return Status::ok();
    }
    if (type == "ByteLevel") {
        saw_byte_level = true;
        if (p.value("use_regex", true))
            return unsupported(where(spec, "pre_tokenizer ByteLevel use_regex") +
                               ": true (GPT-2 regex) is not implemented; only use_regex=false");
        spec.byte_level_add_prefix_space = p.value("add_prefix_space", false);
        if (spec.byte_level_add_prefix_space)
            return unsupported(where(spec, "pre_tokenizer ByteLevel add_prefix_space") + ": true is not implemented");
        return Status::ok();
    }
    return unsupported(where(spec, "pre_tokenizer") + ": type '" + type + "' is not implemented");
}

Status parse_pre_tokenizer(const json& root, TokenizerSpec& spec) {
    const json& p = root.at("pre_tokenizer");
    bool saw_byte_level = false;
    if (p.value("type", "") == "Sequence") {
        const json& list = p.at("pretokenizers");
        for (size_t i = 0; i < list.size(); ++i)
            DSV4_RETURN_IF_ERROR(parse_one_pre_tokenizer(list[i], spec, saw_byte_level));
    } else {
        DSV4_RETURN_IF_ERROR(parse_one_pre_tokenizer(p, spec, saw_byte_level));
    }
    if (!saw_byte_level)
        return unsupported(where(spec, "pre_tokenizer") + ": no ByteLevel step; only byte-level BPE is implemented");
    return Status::ok();
}

Status parse_model(const json& root, TokenizerSpec& spec) {
    const json& m = root.at("model");
    if (m.value("type", "BPE") != "BPE")
        return unsupported(where(spec, "model.type") + ": '" + m.value("type", "") + "', only BPE is implemented");
    if (m.contains("dropout") && !m["dropout"].is_null())
        return unsupported(where(spec, "model.dropout") + ": BPE dropout is not implemented");
    if (m.value("byte_fallback", false))
        return unsupported(where(spec, "model.byte_fallback") + ": true is not implemented");
    if (!is_null_or_empty_string(m, "continuing_subword_prefix") || !is_null_or_empty_string(m, "end_of_word_suffix"))
        return unsupported(where(spec, "model") + ": continuing_subword_prefix/end_of_word_suffix are not implemented");
    if (m.contains("ignore_merges") && m["ignore_merges"].is_boolean()) spec.ignore_merges = m["ignore_merges"];
    const json& vocab = m.at("vocab");
    if (!vocab.is_object()) return corrupt(where(spec, "model.vocab") + ": not an object");
    spec.vocab.reserve(vocab.size());
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
        // Only integers: a float id (2e36) would be converted with undefined behaviour.
        if (!it.value().is_number_integer())
            return corrupt(where(spec, "model.vocab") + ": id is not an integer for " + it.key());
        const int64_t id = it.value().get<int64_t>();
        if (id < 0 || id > INT32_MAX) return corrupt(where(spec, "model.vocab") + ": id out of range for " + it.key());
        spec.vocab.emplace_back(it.key(), static_cast<int32_t>(id));
    }
    const json& merges = m.at("merges");
    spec.merges.reserve(merges.size());
    for (const json& e : merges) {
        if (e.is_string()) {  // "left right" (older format)
            const std::string s = e.get<std::string>();
            const size_t sp = s.find(' ');
            if (sp == std::string::npos || sp == 0 || sp + 1 >= s.size())
                return corrupt(where(spec, "model.merges") + ": entry '" + s + "' is not 'left right'");
            spec.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
        } else if (e.is_array() && e.size() == 2) {  // ["left", "right"] (newer format)
            spec.merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
        } else {
            return corrupt(where(spec, "model.merges") + ": entry " + e.dump() + " is neither 'a b' nor [a, b]");
        }
    }
    return Status::ok();
}

Status parse_added_tokens(const json& root, TokenizerSpec& spec) {
    auto it = root.find("added_tokens");
    if (it == root.end() || it->is_null()) return Status::ok();
    for (const json& t : *it) {
        AddedTokenSpec a;
        const json& id = t.at("id");
        // Floats, and integers beyond int32 (2^32 + n), must not be narrowed into an id.
        const bool in_range = id.is_number_unsigned() ? id.get<uint64_t>() <= INT32_MAX
                                                      : id.is_number_integer() && id.get<int64_t>() >= 0;
        if (!in_range)
            return corrupt(where(spec, "added_tokens") + ": id " + id.dump() + " is not an integer in [0, 2^31)");
        a.id = static_cast<int32_t>(id.get<int64_t>());
        a.content = t.at("content").get<std::string>();
        a.single_word = t.value("single_word", false);
        a.lstrip = t.value("lstrip", false);
        a.rstrip = t.value("rstrip", false);
        a.normalized = t.value("normalized", true);
        a.special = t.value("special", false);
        if (a.id < 0) return corrupt(where(spec, "added_tokens") + ": negative id for '" + a.content + "'");
        spec.added.push_back(std::move(a));
    }
    return Status::ok();
}

Status check_decoder_and_post_processor(const json& root, TokenizerSpec& spec) {
    auto d = root.find("decoder");
    if (d == root.end() || d->is_null() || d->value("type", "") != "ByteLevel")
        return unsupported(where(spec, "decoder") + ": only the ByteLevel decoder is implemented");
    auto p = root.find("post_processor");
    // A ByteLevel post-processor only trims offsets; anything else (TemplateProcessing...) would add ids.
    if (p != root.end() && !p->is_null() && p->value("type", "") != "ByteLevel")
        return unsupported(where(spec, "post_processor") + ": type '" + p->value("type", "") +
                           "' is not implemented (only ByteLevel or none)");
    return Status::ok();
}

}  // namespace

Result<TokenizerSpec> load_tokenizer_spec(const std::filesystem::path& path) {
    TokenizerSpec spec;
    spec.source = path.string();
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        std::error_code ec;
        if (!std::filesystem::exists(path, ec))
            return not_found(spec.source + ": no such file (expected an HF tokenizer.json)");
        return io_error(spec.source + ": cannot open for reading");
    }
    std::stringstream buf;
    buf << in.rdbuf();
    json root;
    try {
        root = json::parse(buf.str());
    } catch (const json::exception& e) {
        return corrupt(spec.source + ": not valid JSON: " + e.what());
    }
    try {
        DSV4_RETURN_IF_ERROR(parse_normalizer(root, spec));
        DSV4_RETURN_IF_ERROR(parse_pre_tokenizer(root, spec));
        DSV4_RETURN_IF_ERROR(parse_model(root, spec));
        DSV4_RETURN_IF_ERROR(parse_added_tokens(root, spec));
        DSV4_RETURN_IF_ERROR(check_decoder_and_post_processor(root, spec));
    } catch (const json::exception& e) {
        return corrupt(spec.source + ": unexpected tokenizer.json layout: " + e.what());
    }
    return spec;
}

}  // namespace dsv4::tokenizer
