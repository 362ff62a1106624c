// BPE merge loop. Same order as HF tokenizers (tokenizers/src/models/bpe/word.rs, merge_all): repeatedly merge
// the adjacent pair with the lowest merge rank, the leftmost one on ties, using a min-heap of candidate pairs
// whose stale entries are skipped when popped. O(n log n) in the word length, so long whitespace runs are fine.
#include "tokenizer/bpe.h"

#include <algorithm>
#include <functional>

#include "tokenizer/byte_level.h"
#include "tokenizer/unicode_classes.h"

namespace dsv4::tokenizer {

Status BpeModel::init(const TokenizerSpec& spec) {
    std::unordered_map<std::string, int32_t, StringHash, StringEq> vocab;
    vocab.reserve(spec.vocab.size());
    for (const auto& [token, id] : spec.vocab) vocab.emplace(token, id);

    const auto& alphabet = byte_to_char();
    for (int b = 0; b < 256; ++b) {
        std::string ch;
        append_utf8(alphabet[b], ch);
        auto it = vocab.find(ch);
        byte_ids_[b] = it == vocab.end() ? -1 : it->second;
    }

    merges_.reserve(spec.merges.size() * 2);
    for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
        const auto& [left, right] = spec.merges[rank];
        auto l = vocab.find(left), r = vocab.find(right), m = vocab.find(left + right);
        if (l == vocab.end() || r == vocab.end() || m == vocab.end())
            return corrupt(spec.source + ": model.merges[" + std::to_string(rank) + "] '" + left + " " + right +
                           "' uses a token that is not in model.vocab");
        // A repeated pair keeps its last rank, as HF's map construction does.
        merges_[pair_key(l->second, r->second)] = Merge{static_cast<int32_t>(rank), m->second};
    }
    ignore_merges_ = spec.ignore_merges;
    if (ignore_merges_) vocab_ = std::move(vocab);
    return Status::ok();
}

size_t BpeModel::cache_size() const {
    std::lock_guard<std::mutex> lock(cache_mu_);
    return cache_.size();
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
    if (word.size() == 1) {  // one byte: no merge can apply
        const int32_t id = byte_ids_[static_cast<unsigned char>(word[0])];
        if (id >= 0) out.push_back(id);
        return;
    }
    const bool cacheable = word.size() <= kMaxCachedWordBytes;
    if (cacheable) {
        std::lock_guard<std::mutex> lock(cache_mu_);
        auto it = cache_.find(word);
        if (it != cache_.end()) {
            out.insert(out.end(), it->second.begin(), it->second.end());
            return;
        }
    }
    const size_t before = out.size();
    encode_word_uncached(word, out);
    if (cacheable) {
        std::lock_guard<std::mutex> lock(cache_mu_);
        if (cache_.size() >= kMaxCacheEntries) cache_.clear();  // crude, but bounded and rare
        cache_.emplace(std::string(word), std::vector<int32_t>(out.begin() + before, out.end()));
    }
}

void BpeModel::encode_word_uncached(std::string_view word, std::vector<int32_t>& out) const {
    if (ignore_merges_) {
        auto it = vocab_.find(bytes_to_byte_level(word));
        if (it != vocab_.end()) {
            out.push_back(it->second);
            return;
        }
    }
    // Symbols as a doubly linked list over the word's bytes; a merged-away symbol gets alive = false.
    struct Symbol {
        int32_t id;
        int32_t prev;
        int32_t next;
        bool alive;
    };
    struct Candidate {
        int32_t rank;
        int32_t pos;
        int32_t new_id;
        bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    thread_local std::vector<Symbol> symbols;
    thread_local std::vector<Candidate> heap;  // min-heap via std::push_heap/pop_heap with greater<>
    symbols.clear();
    for (unsigned char b : word) {
        const int32_t id = byte_ids_[b];
        if (id < 0) continue;  // no unk token and no byte fallback: HF drops the byte
        const int32_t n = static_cast<int32_t>(symbols.size());
        symbols.push_back({id, n - 1, n + 1, true});
    }
    if (symbols.empty()) return;
    symbols.back().next = -1;

    heap.clear();
    const auto later = std::greater<Candidate>{};
    auto push_pair = [&](int32_t pos) {
        const int32_t nx = symbols[pos].next;
        if (nx < 0) return;
        auto it = merges_.find(pair_key(symbols[pos].id, symbols[nx].id));
        if (it == merges_.end()) return;
        heap.push_back({it->second.rank, pos, it->second.new_id});
        std::push_heap(heap.begin(), heap.end(), later);
    };
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);

    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), later);
        const Candidate top = heap.back();
        heap.pop_back();
        Symbol& s = symbols[top.pos];
        if (!s.alive || s.next < 0) continue;
        Symbol& right = symbols[s.next];
        auto it = merges_.find(pair_key(s.id, right.id));
        if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale candidate
        s.id = top.new_id;
        right.alive = false;
        s.next = right.next;
        if (s.next >= 0) symbols[s.next].prev = top.pos;
        if (s.prev >= 0) push_pair(s.prev);
        push_pair(top.pos);
    }
    for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace dsv4::tokenizer
