// Split steps and their behaviours, following HF tokenizers' NormalizedString::split
// (tokenizers/src/tokenizer/normalizer.rs): the pattern's matches and the gaps between them cover the piece;
// invert swaps which is which; the behaviour then decides what becomes a piece; empty pieces are dropped.
#include "tokenizer/pre_tokenizer.h"

#include <algorithm>

#include "tokenizer/unicode_classes.h"

namespace dsv4::tokenizer {
namespace {

std::u32string to_u32(const std::string& s) {
    std::vector<char32_t> cps;
    std::vector<uint16_t> flags;
    std::vector<uint32_t> offsets;
    decode_utf8(sanitize_utf8(s), cps, flags, offsets);
    return std::u32string(cps.begin(), cps.end());
}

struct Part {
    uint32_t begin, end;
    bool is_match;
};

}  // namespace

Status PreTokenizer::init(const TokenizerSpec& spec) {
    rules_.clear();
    for (const SplitSpec& s : spec.splits) {
        SplitRule rule{MatcherKind::kLiteral, {}, s.behavior, s.invert};
        if (s.is_regex) {
            DSV4_ASSIGN_OR_RETURN(rule.kind, matcher_for_regex(spec.source, s.pattern));
        } else {
            rule.literal = to_u32(s.pattern);
        }
        rules_.push_back(std::move(rule));
    }
    return Status::ok();
}

void PreTokenizer::split(const CodepointText& text, uint32_t n, std::vector<Piece>& pieces,
                         std::vector<Piece>& scratch) const {
    pieces.clear();
    if (n == 0) return;
    pieces.emplace_back(0, n);
    for (const SplitRule& rule : rules_) {
        scratch.clear();
        for (const Piece& p : pieces) split_piece(rule, text, p, scratch);
        pieces.swap(scratch);
    }
}

void PreTokenizer::split_piece(const SplitRule& rule, const CodepointText& text, Piece piece,
                               std::vector<Piece>& out) const {
    const auto [begin, end] = piece;
    // Common case (every step of DeepSeek's file): Isolated, not inverted → gaps and matches in order.
    if (rule.behavior == SplitBehavior::kIsolated) {
        uint32_t gap = begin;
        uint32_t p = begin;
        while (p < end) {
            const uint32_t m = match_at(rule.kind, rule.literal, text, p, end);
            if (m == p) {
                ++p;
                continue;
            }
            if (gap < p) out.emplace_back(gap, p);
            out.emplace_back(p, m);
            gap = p = m;
        }
        if (gap < end) out.emplace_back(gap, end);
        return;  // invert only swaps the match flags, which Isolated ignores
    }

    thread_local std::vector<Part> parts;
    parts.clear();
    uint32_t gap = begin;
    uint32_t p = begin;
    while (p < end) {
        const uint32_t m = match_at(rule.kind, rule.literal, text, p, end);
        if (m == p) {
            ++p;
            continue;
        }
        if (gap < p) parts.push_back({gap, p, false});
        parts.push_back({p, m, true});
        gap = p = m;
    }
    if (gap < end) parts.push_back({gap, end, false});
    if (rule.invert)
        for (Part& part : parts) part.is_match = !part.is_match;

    const size_t first_out = out.size();
    bool previous_match = false;
    switch (rule.behavior) {
        case SplitBehavior::kIsolated:
            break;
        case SplitBehavior::kRemoved:
            for (const Part& part : parts)
                if (!part.is_match) out.emplace_back(part.begin, part.end);
            break;
        case SplitBehavior::kMergedWithPrevious:
            for (const Part& part : parts) {
                if (part.is_match && !previous_match && out.size() > first_out)
                    out.back().second = part.end;
                else
                    out.emplace_back(part.begin, part.end);
                previous_match = part.is_match;
            }
            break;
        case SplitBehavior::kContiguous:
            for (const Part& part : parts) {
                if (part.is_match == previous_match && out.size() > first_out)
                    out.back().second = part.end;
                else
                    out.emplace_back(part.begin, part.end);
                previous_match = part.is_match;
            }
            break;
        case SplitBehavior::kMergedWithNext: {
            // Walk backwards, merging each match into the piece after it, then restore the order.
            for (size_t i = parts.size(); i-- > 0;) {
                const Part& part = parts[i];
                if (part.is_match && !previous_match && out.size() > first_out)
                    out.back().first = part.begin;
                else
                    out.emplace_back(part.begin, part.end);
                previous_match = part.is_match;
            }
            std::reverse(out.begin() + static_cast<std::ptrdiff_t>(first_out), out.end());
            break;
        }
    }
}

}  // namespace dsv4::tokenizer
