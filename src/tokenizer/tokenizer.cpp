// Tokenizer: loading and encoding. Pipeline per call (HF tokenizers order): added tokens are cut out of the raw
// text; each remaining segment is decoded to code points, split by the pre-tokenizer, and each piece's bytes go
// through byte-level BPE (cached per piece).
#include <algorithm>

#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode_classes.h"

namespace dsv4 {

using namespace tokenizer;

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_model_dir(const std::filesystem::path& model_dir) {
    const auto path = model_dir / "tokenizer.json";
    std::error_code ec;
    if (!std::filesystem::is_directory(model_dir, ec))
        return not_found(model_dir.string() + ": not a directory (expected a model directory with tokenizer.json)");
    return from_file(path);
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_file(const std::filesystem::path& tokenizer_json) {
    DSV4_ASSIGN_OR_RETURN(TokenizerSpec spec, load_tokenizer_spec(tokenizer_json));
    auto impl = std::make_unique<Impl>();
    impl->source = spec.source;
    DSV4_RETURN_IF_ERROR(impl->bpe.init(spec));
    DSV4_RETURN_IF_ERROR(impl->pre_tokenizer.init(spec));
    impl->added.init(spec.added);

    int32_t max_id = -1;
    for (const auto& [tok, id] : spec.vocab) max_id = std::max(max_id, id);
    for (const auto& a : spec.added) max_id = std::max(max_id, a.id);
    // The id space is allocated densely (several tables of max_id + 1 entries): one stray huge id would make a
    // small file allocate gigabytes (and INT32_MAX + 1 overflows). Real vocabularies stay far below 2^24.
    constexpr int32_t kMaxTokenId = (1 << 24) - 1;
    if (max_id > kMaxTokenId)
        return corrupt(spec.source + ": token id " + std::to_string(max_id) + " is beyond the supported id space [0, " +
                       std::to_string(kMaxTokenId) + "]");
    const size_t n = static_cast<size_t>(max_id + 1);
    impl->token_strings.assign(n, {});
    impl->token_bytes.assign(n, {});
    impl->id_flags.assign(n, 0);
    impl->token_to_id.reserve(spec.vocab.size() + spec.added.size());
    for (const auto& [tok, id] : spec.vocab) {
        impl->token_strings[id] = tok;
        impl->id_flags[id] |= Impl::kKnown;
        impl->token_to_id[tok] = id;
    }
    // Added tokens take precedence over the model vocabulary for the same id (HF's id_to_token order).
    for (const auto& a : spec.added) {
        impl->token_strings[a.id] = a.content;
        impl->id_flags[a.id] = static_cast<uint8_t>(Impl::kKnown | Impl::kAdded | (a.special ? Impl::kSpecial : 0));
        impl->token_to_id[a.content] = a.id;
    }
    for (size_t id = 0; id < n; ++id)
        if (impl->id_flags[id] & Impl::kKnown) impl->token_bytes[id] = byte_level_token_bytes(impl->token_strings[id]);
    return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

Status Tokenizer::Impl::check_id(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= token_strings.size())
        return invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                std::to_string(token_strings.size()) + ") of " + source);
    return Status::ok();
}

void Tokenizer::Impl::encode_valid(std::string_view text, std::vector<int32_t>& ids) const {
    // Reused per thread so that steady-state encoding does not allocate per call or per character.
    thread_local std::vector<Segment> segments, segment_scratch;
    thread_local std::vector<char32_t> cps;
    thread_local std::vector<uint16_t> flags;
    thread_local std::vector<uint32_t> byte_offsets;
    thread_local std::vector<Piece> pieces, piece_scratch;

    added.split(text, segments, segment_scratch);
    for (const Segment& seg : segments) {
        if (seg.id >= 0) {
            ids.push_back(seg.id);
            continue;
        }
        const std::string_view part = text.substr(seg.begin, seg.end - seg.begin);
        decode_utf8(part, cps, flags, byte_offsets);
        const CodepointText view{cps.data(), flags.data()};
        pre_tokenizer.split(view, static_cast<uint32_t>(cps.size()), pieces, piece_scratch);
        for (const Piece& p : pieces) {
            const uint32_t b = byte_offsets[p.first], e = byte_offsets[p.second];
            bpe.encode_word(part.substr(b, e - b), ids);
        }
    }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
    std::vector<int32_t> ids;
    encode_append(text, ids);
    return ids;
}

void Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& ids) const {
    if (is_valid_utf8(text)) {
        impl_->encode_valid(text, ids);
    } else {
        const std::string clean = sanitize_utf8(text);
        impl_->encode_valid(clean, ids);
    }
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->token_strings.size()); }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
    auto it = impl_->token_to_id.find(std::string(token));
    if (it == impl_->token_to_id.end()) return std::nullopt;
    return it->second;
}

Result<std::string> Tokenizer::id_to_token(int32_t id) const {
    DSV4_RETURN_IF_ERROR(impl_->check_id(id));
    if (!(impl_->id_flags[id] & Impl::kKnown))
        return invalid_argument("token id " + std::to_string(id) + " names no token in " + impl_->source);
    return impl_->token_strings[id];
}

Result<std::string> Tokenizer::token_bytes(int32_t id) const {
    DSV4_RETURN_IF_ERROR(impl_->check_id(id));
    return impl_->token_bytes[id];
}

bool Tokenizer::is_special(int32_t id) const {
    return id >= 0 && id < vocab_size() && (impl_->id_flags[id] & Impl::kSpecial);
}

bool Tokenizer::is_added(int32_t id) const {
    return id >= 0 && id < vocab_size() && (impl_->id_flags[id] & Impl::kAdded);
}

}  // namespace dsv4
