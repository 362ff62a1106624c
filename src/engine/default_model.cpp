#include "dsv4/default_model.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "model/make_model.h"

// The tokenizer file is assembled into this object with .incbin: the assembler copies the bytes in at build time,
// which costs nothing next to compiling a 6.4 MB array initialiser (minutes and gigabytes of compiler memory).
// src/engine/CMakeLists.txt passes the path and makes this object depend on the file.
#ifndef DSV4_EMBEDDED_TOKENIZER_PATH
#error "DSV4_EMBEDDED_TOKENIZER_PATH (the tokenizer.json to embed) must be defined by the build"
#endif

// clang-format off
__asm__(".pushsection .rodata.dsv4_tokenizer_json, \"a\", @progbits\n"
        ".balign 16\n"
        ".globl dsv4_embedded_tokenizer_json_begin\n"
        ".hidden dsv4_embedded_tokenizer_json_begin\n"
        "dsv4_embedded_tokenizer_json_begin:\n"
        ".incbin \"" DSV4_EMBEDDED_TOKENIZER_PATH "\"\n"
        ".globl dsv4_embedded_tokenizer_json_end\n"
        ".hidden dsv4_embedded_tokenizer_json_end\n"
        "dsv4_embedded_tokenizer_json_end:\n"
        ".popsection\n");
// clang-format on

extern "C" __attribute__((visibility("hidden"))) const char dsv4_embedded_tokenizer_json_begin[];
extern "C" __attribute__((visibility("hidden"))) const char dsv4_embedded_tokenizer_json_end[];

namespace dsv4::engine {

namespace {

// Bump the suffix whenever the recipe below or the embedded tokenizer changes: old cache folders are then ignored
// rather than reused with the wrong contents.
constexpr const char* kFolderName = "demo-tiny-v4-r1";
constexpr int64_t kTokenizerVocab = 129280;  // DeepSeek-V4's id space (MODEL_SPEC §10)
constexpr uint64_t kSeed = 1;

std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
}

Status write_file(const std::filesystem::path& path, std::string_view bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) return io_error(path.string() + ": cannot create the file");
    out.write(bytes.data(), std::streamsize(bytes.size()));
    out.close();
    if (!out) return io_error(path.string() + ": cannot write the file (disk full?)");
    return Status::ok();
}

// A name no other creator picks: pid, a per-process counter (threads) and a clock reading (a reused pid).
std::filesystem::path temp_folder(const std::filesystem::path& cache) {
    static std::atomic<uint64_t> counter{0};
    const auto ticks = std::chrono::steady_clock::now().time_since_epoch().count();
    return cache / (std::string(".tmp-") + kFolderName + "-" + std::to_string(::getpid()) + "-" +
                    std::to_string(counter.fetch_add(1)) + "-" + std::to_string(static_cast<long long>(ticks)));
}

Status create_model(const std::filesystem::path& dir, const DefaultModelProgressFn& progress) {
    model::MakeModelOptions o;
    o.preset = "tiny";
    o.vocab = kTokenizerVocab;
    o.seed = kSeed;
    o.out = dir;
    model::MakeModelProgressFn on_progress;
    if (progress) on_progress = [&](const model::MakeModelProgress& p) { progress({p.bytes_done, p.bytes_total}); };
    DSV4_ASSIGN_OR_RETURN(model::MakeModelResult made, model::make_model(o, on_progress));
    (void)made;
    return write_file(dir / "tokenizer.json", embedded_tokenizer_json());
}

}  // namespace

Result<std::filesystem::path> cache_dir() {
    if (std::string d = env("DSV4_CACHE_DIR"); !d.empty()) return std::filesystem::path(d);
    if (std::string d = env("XDG_CACHE_HOME"); !d.empty()) return std::filesystem::path(d) / "dsv4";
    if (std::string d = env("HOME"); !d.empty()) return std::filesystem::path(d) / ".cache" / "dsv4";
    return not_found("no cache folder for the embedded default model: set DSV4_CACHE_DIR (or HOME), or pass -m DIR");
}

std::string_view embedded_tokenizer_json() {
    return std::string_view(dsv4_embedded_tokenizer_json_begin,
                            size_t(dsv4_embedded_tokenizer_json_end - dsv4_embedded_tokenizer_json_begin));
}

Result<std::filesystem::path> ensure_default_model(const std::filesystem::path& cache,
                                                   const DefaultModelProgressFn& progress) {
    const std::filesystem::path dir = cache / kFolderName;
    std::error_code ec;
    // The folder only ever appears through the rename below, so if it exists it is complete.
    if (std::filesystem::is_directory(dir, ec)) return dir;
    std::filesystem::create_directories(cache, ec);
    if (ec)
        return io_error(cache.string() + ": cannot create the cache folder: " + ec.message() +
                        " (set DSV4_CACHE_DIR to a writable folder, or pass -m DIR)");
    const std::filesystem::path tmp = temp_folder(cache);
    Status made = create_model(tmp, progress);
    if (!made) {
        std::filesystem::remove_all(tmp, ec);
        return Status(made.code(), "creating the embedded default model in " + tmp.string() + ": " + made.message());
    }
    if (::rename(tmp.c_str(), dir.c_str()) != 0) {
        const int err = errno;
        std::filesystem::remove_all(tmp, ec);
        // Another process finished first: its folder is as good as ours.
        if ((err == EEXIST || err == ENOTEMPTY) && std::filesystem::is_directory(dir, ec)) return dir;
        return io_error("cannot move " + tmp.string() + " to " + dir.string() + ": " + std::strerror(err));
    }
    return dir;
}

}  // namespace dsv4::engine
