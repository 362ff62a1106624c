// The embedded default model: what `dsv4 generate` / `dsv4 chat` use without -m. A tiny DeepSeek-V4 checkpoint
// with random weights (make-model's tiny preset with the full 129,280-row vocabulary, so every tokenizer id is a
// valid token) plus the DeepSeek-V4 tokenizer.json, which is assembled into the binary so no network and no
// source tree is needed. The folder is created on first use in the cache directory and reused afterwards.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string_view>

#include "dsv4/status.h"

namespace dsv4::engine {

// Shown wherever the default model is used: its output is gibberish by construction.
inline constexpr std::string_view kDefaultModelNotice = "embedded demo model: random weights";

// $DSV4_CACHE_DIR, else $XDG_CACHE_HOME/dsv4, else $HOME/.cache/dsv4. Errors when none of them is set.
Result<std::filesystem::path> cache_dir();

// The V4 tokenizer.json carried inside the binary (tests/data/tokenizer/deepseek_v4_tokenizer.json at build time).
std::string_view embedded_tokenizer_json();

struct DefaultModelProgress {
    uint64_t bytes_done = 0, bytes_total = 0;  // checkpoint bytes written
};
using DefaultModelProgressFn = std::function<void(const DefaultModelProgress&)>;

// The default model's folder inside `cache`, created if it is not there yet. Creation writes into a private
// temporary folder and renames it into place, so processes racing to create it never see a half-written model:
// the first rename wins and the others use its folder. `progress` is called only while creating.
Result<std::filesystem::path> ensure_default_model(const std::filesystem::path& cache,
                                                   const DefaultModelProgressFn& progress = {});

}  // namespace dsv4::engine
