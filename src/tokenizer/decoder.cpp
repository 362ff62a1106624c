// Decoding: ids → bytes (ByteLevel decoder rule, precomputed per id) → text, invalid UTF-8 shown as U+FFFD per
// maximal ill-formed subpart (what HF's String::from_utf8_lossy does). StreamDecoder gives the same text in
// pieces that never end inside a character.
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode_classes.h"

namespace dsv4 {

using namespace tokenizer;

Result<std::string> Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
    std::string bytes;
    for (int32_t id : ids) {
        DSV4_RETURN_IF_ERROR(impl_->check_id(id));
        if (skip_special && (impl_->id_flags[id] & Impl::kSpecial)) continue;
        bytes += impl_->token_bytes[id];
    }
    if (is_valid_utf8(bytes)) return bytes;
    return sanitize_utf8(bytes);
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {}

Result<std::string> StreamDecoder::push(int32_t id) {
    const auto& impl = tokenizer_->impl();
    DSV4_RETURN_IF_ERROR(impl.check_id(id));
    if (skip_special_ && (impl.id_flags[id] & Tokenizer::Impl::kSpecial)) return std::string();
    std::string bytes = std::move(pending_);
    pending_.clear();
    bytes += impl.token_bytes[id];
    // Emit everything up to a trailing valid-but-incomplete sequence; ill-formed parts become U+FFFD now, since
    // no later byte can make them valid.
    std::string out;
    out.reserve(bytes.size());
    size_t i = 0;
    while (i < bytes.size()) {
        size_t bad;
        bool truncated;
        const size_t n = utf8_sequence_length(bytes, i, &bad, &truncated);
        if (n > 0) {
            out.append(bytes, i, n);
            i += n;
        } else if (truncated) {
            pending_.assign(bytes, i, std::string::npos);
            break;
        } else {
            out += "\xEF\xBF\xBD";
            i += bad;
        }
    }
    return out;
}

std::string StreamDecoder::finish() {
    std::string out = pending_.empty() ? std::string() : std::string("\xEF\xBF\xBD");
    pending_.clear();
    return out;
}

}  // namespace dsv4
