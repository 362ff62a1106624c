// Tokenizer: the exact byte-level BPE tokenizer a model directory's tokenizer.json declares (HF tokenizers
// format), for DeepSeek-V4 and its V3-family siblings. Encoding gives the same ids as HF `tokenizers`
// (Tokenizer.encode(text, add_special_tokens=False)); decoding gives the same text as its decode().
//
// What is supported, and what is refused with a clear Status, is listed in docs/tokenizer.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dsv4/status.h"

namespace dsv4 {

class Tokenizer {
public:
    // Loads `tokenizer.json` (HF tokenizers format). Errors name the file and the key that is wrong.
    static Result<std::unique_ptr<Tokenizer>> from_file(const std::filesystem::path& tokenizer_json);
    // Loads <dir>/tokenizer.json.
    static Result<std::unique_ptr<Tokenizer>> from_model_dir(const std::filesystem::path& model_dir);

    ~Tokenizer();
    Tokenizer(const Tokenizer&) = delete;
    Tokenizer& operator=(const Tokenizer&) = delete;

    // Encodes UTF-8 text. Added/special tokens written in the text (e.g. "<｜User｜>") become their ids.
    // Invalid UTF-8 never fails: each maximal ill-formed byte sequence is first replaced by U+FFFD, exactly like
    // Python's bytes.decode("utf-8", errors="replace"). No BOS is added (the chat encoder writes it as text).
    // Thread-safe (the per-word BPE cache is shared and locked).
    std::vector<int32_t> encode(std::string_view text) const;
    // Same, appending to `ids`.
    void encode_append(std::string_view text, std::vector<int32_t>& ids) const;

    // The text of `ids`. Ids >= vocab_size() are an InvalidArgument error; ids inside the id space that name no
    // token decode to nothing (as HF does). Byte sequences that are not valid UTF-8 come out as U+FFFD.
    // skip_special drops tokens the file marks "special" (BOS/EOS/...; <think> is not special in V4).
    Result<std::string> decode(std::span<const int32_t> ids, bool skip_special = false) const;

    // Size of the id space: largest id in the file + 1 (129280 for DeepSeek-V4).
    int32_t vocab_size() const;
    // The id of a token written as in tokenizer.json (added tokens as their content, vocabulary entries in
    // byte-level form, e.g. "Ġthe"); nullopt if there is none.
    std::optional<int32_t> token_to_id(std::string_view token) const;
    // The token string of an id as tokenizer.json writes it; InvalidArgument for ids outside the id space or
    // naming no token.
    Result<std::string> id_to_token(int32_t id) const;
    // The raw bytes this id decodes to (not necessarily valid UTF-8 on its own).
    Result<std::string> token_bytes(int32_t id) const;
    bool is_special(int32_t id) const;
    // True for tokens from the file's added_tokens list (special or not).
    bool is_added(int32_t id) const;

    struct Impl;
    const Impl& impl() const { return *impl_; }

private:
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// Incremental detokenisation for streaming output: push ids one at a time and get back only text that is final.
// Never returns part of a UTF-8 character: an incomplete trailing sequence is held until it completes (or
// becomes invalid, then it is U+FFFD). The concatenation of all push() results and finish() equals
// Tokenizer::decode of the same ids.
class StreamDecoder {
public:
    explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);
    // Text completed by this id (often empty for a partial character). InvalidArgument for a bad id (the
    // decoder state is unchanged then).
    Result<std::string> push(int32_t id);
    // Flushes held bytes: an incomplete sequence at the very end becomes one U+FFFD. The decoder is then empty.
    std::string finish();
    // Bytes held back because they may be the start of a character.
    size_t pending_bytes() const { return pending_.size(); }
    void reset() { pending_.clear(); }

private:
    const Tokenizer* tokenizer_;
    bool skip_special_;
    std::string pending_;  // at most 3 bytes: a valid but incomplete UTF-8 prefix
};

}  // namespace dsv4
