// Fuzz entry point: loading a tokenizer.json (Tokenizer::from_file, through a temporary file) from arbitrary bytes.
// A file that loads is then used: text and the input's own bytes are encoded, every id is inside the id space and
// decodes, and every id of the space converts back to a token or a clear error.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "dsv4/tokenizer.h"

namespace dsv4::fuzz {

inline const std::filesystem::path& tokenizer_json_temp_path() {
    static const std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("dsv4_fuzz_tokenizer_" + std::to_string(::getpid()) + ".json");
    return path;
}

inline void tokenizer_json_one_input(std::span<const uint8_t> input) {
    const std::filesystem::path& path = tokenizer_json_temp_path();
    {
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(input.data()), static_cast<std::streamsize>(input.size()));
        check(static_cast<bool>(out), "cannot write the temporary tokenizer.json");
    }
    auto loaded = Tokenizer::from_file(path);
    if (!loaded.is_ok()) {
        check(loaded.status().message().find(path.string()) != std::string::npos, "error does not name the file");
        return;
    }
    const Tokenizer& tok = *loaded.value();
    const std::string_view own(reinterpret_cast<const char*>(input.data()), std::min<size_t>(input.size(), 256));
    for (std::string_view text : {std::string_view("Hello, world! 123 東京 <｜User｜>\n\n  x"), own}) {
        const std::vector<int32_t> ids = tok.encode(text);
        for (int32_t id : ids) check(id >= 0 && id < tok.vocab_size(), "id outside the vocabulary");
        auto decoded = tok.decode(ids);
        check(decoded.is_ok(), "decode of encode output failed");
        check(is_valid_utf8(decoded.value()), "decode output is not valid UTF-8");
    }
    const int32_t probe = std::min<int32_t>(tok.vocab_size(), 512);
    for (int32_t id = -1; id <= probe; ++id) {
        (void)tok.id_to_token(id);
        (void)tok.token_bytes(id);
        (void)tok.is_special(id);
    }
}

}  // namespace dsv4::fuzz
