// Fuzz entry point: encoding arbitrary bytes with a loaded tokenizer (the real V4 tokenizer.json in the fuzzer).
// Every id is inside the id space; decode(encode(text)) gives the text back when it is valid UTF-8 (V4 has no
// normalizer and no stripping added tokens) and valid UTF-8 otherwise; streaming decode equals decode.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "dsv4/tokenizer.h"

namespace dsv4::fuzz {

inline void tokenizer_encode_one_input(const Tokenizer& tokenizer, std::span<const uint8_t> input) {
    const std::string_view text(reinterpret_cast<const char*>(input.data()), input.size());
    const std::vector<int32_t> ids = tokenizer.encode(text);
    check(text.empty() == ids.empty(), "empty ids for non-empty text (or ids for empty text)");
    for (int32_t id : ids) check(id >= 0 && id < tokenizer.vocab_size(), "id outside the vocabulary");
    auto decoded = tokenizer.decode(ids);
    check(decoded.is_ok(), "decode of encode output failed");
    check(is_valid_utf8(decoded.value()), "decode output is not valid UTF-8");
    if (is_valid_utf8(text)) check(decoded.value() == text, "decode(encode(text)) != text");

    StreamDecoder stream(tokenizer);
    std::string streamed;
    for (int32_t id : ids) {
        auto piece = stream.push(id);
        check(piece.is_ok(), "stream decoder refused an encoded id");
        streamed += piece.value();
    }
    streamed += stream.finish();
    check(streamed == decoded.value(), "streamed decode differs from decode");
}

}  // namespace dsv4::fuzz
