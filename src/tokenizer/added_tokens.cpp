#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/unicode_classes.h"

namespace dsv4::tokenizer {
namespace {

// Start of the code point that ends right before byte i (i > lo).
size_t prev_cp_start(std::string_view s, size_t lo, size_t i) {
    do {
        --i;
    } while (i > lo && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80);
    return i;
}

bool is_space_cp(char32_t cp) { return char_flags(cp) & kSpace; }
bool is_word_cp(char32_t cp) { return char_flags(cp) & kWord; }

}  // namespace

void AddedTokenMatcher::Trie::insert(std::string_view s, int32_t token_index) {
    if (s.empty()) return;  // HF ignores empty added tokens
    empty = false;
    int32_t node = 0;
    for (size_t i = 0; i < s.size(); ++i) {
        const auto b = static_cast<unsigned char>(s[i]);
        int32_t* child;
        if (node == 0) {
            child = &root_children[b];
        } else {
            auto [it, inserted] = edges.try_emplace((uint64_t(node) << 8) | b, -1);
            child = &it->second;
        }
        if (*child < 0) {
            *child = static_cast<int32_t>(terminal.size());
            terminal.push_back(-1);
        }
        node = *child;
    }
    terminal[node] = token_index;
}

size_t AddedTokenMatcher::Trie::longest_at(std::string_view text, size_t pos, int32_t* token_index) const {
    int32_t node = root_children[static_cast<unsigned char>(text[pos])];
    size_t best = 0;
    size_t i = pos + 1;
    while (node >= 0) {
        if (terminal[node] >= 0) {
            best = i - pos;
            *token_index = terminal[node];
        }
        if (i >= text.size()) break;
        auto it = edges.find((uint64_t(node) << 8) | static_cast<unsigned char>(text[i]));
        node = it == edges.end() ? -1 : it->second;
        ++i;
    }
    return best;
}

void AddedTokenMatcher::init(const std::vector<AddedTokenSpec>& added) {
    // HF builds its automata from the special tokens first, then the others; with leftmost-longest matching
    // the order only matters for duplicate contents, where the later declaration wins here as in HF's map.
    tokens_ = added;
    for (size_t i = 0; i < tokens_.size(); ++i) {
        Trie& trie = tokens_[i].normalized ? normalized_ : non_normalized_;
        trie.insert(tokens_[i].content, static_cast<int32_t>(i));
    }
}

void AddedTokenMatcher::find_matches(const Trie& trie, std::string_view text, uint32_t begin, uint32_t end,
                                     std::vector<Segment>& out) const {
    const std::string_view sentence = text.substr(0, end);  // a match may not run past the sentence
    uint32_t start_offset = begin;
    size_t pos = begin;
    while (pos < end) {
        int32_t index = -1;
        const size_t len = trie.longest_at(sentence, pos, &index);
        if (len == 0) {
            ++pos;
            continue;
        }
        const AddedTokenSpec& tok = tokens_[index];
        size_t start = pos, stop = pos + len;
        pos = stop;  // the automaton resumes after this match even when it is discarded below
        if (tok.single_word) {
            size_t l;
            const bool start_ok =
                start == begin || !is_word_cp(code_point_at(sentence, prev_cp_start(sentence, begin, start), &l));
            const bool stop_ok = stop == end || !is_word_cp(code_point_at(sentence, stop, &l));
            if (!start_ok || !stop_ok) continue;
        }
        if (tok.lstrip) {
            size_t s = start;
            while (s > begin) {
                const size_t prev = prev_cp_start(sentence, begin, s);
                size_t l;
                if (!is_space_cp(code_point_at(sentence, prev, &l))) break;
                s = prev;
            }
            start = std::max<size_t>(s, start_offset);  // whitespace an earlier match took stays with it
        }
        if (tok.rstrip) {
            size_t l;
            while (stop < end && is_space_cp(code_point_at(sentence, stop, &l))) stop += l;
            pos = stop;  // HF resumes at the token's own end; they differ only if a token starts with whitespace
        }
        if (start_offset < start) out.push_back({start_offset, static_cast<uint32_t>(start), -1});
        out.push_back({static_cast<uint32_t>(start), static_cast<uint32_t>(stop), tok.id});
        start_offset = static_cast<uint32_t>(stop);
    }
    if (start_offset < end) out.push_back({start_offset, end, -1});
}

void AddedTokenMatcher::split(std::string_view text, std::vector<Segment>& out, std::vector<Segment>& scratch) const {
    out.clear();
    if (text.empty()) return;
    const auto n = static_cast<uint32_t>(text.size());
    if (non_normalized_.empty) {
        out.push_back({0, n, -1});
    } else {
        find_matches(non_normalized_, text, 0, n, out);
    }
    if (normalized_.empty) return;
    scratch.clear();
    for (const Segment& s : out) {
        if (s.id >= 0)
            scratch.push_back(s);
        else
            find_matches(normalized_, text, s.begin, s.end, scratch);
    }
    out.swap(scratch);
}

}  // namespace dsv4::tokenizer
