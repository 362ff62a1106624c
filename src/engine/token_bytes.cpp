#include "engine/token_bytes.h"

namespace dsv4::engine {

TokenBytes::TokenBytes(const Tokenizer& tokenizer, int32_t vocab_size)
    : offset_(size_t(vocab_size) + 1, 0), added_(size_t(vocab_size), false) {
    for (int32_t id = 0; id < vocab_size; ++id) {
        if (id < tokenizer.vocab_size()) {
            added_[size_t(id)] = tokenizer.is_added(id);
            if (Result<std::string> b = tokenizer.token_bytes(id); b.is_ok()) flat_ += *b;
        }
        offset_[size_t(id) + 1] = uint32_t(flat_.size());
    }
}

}  // namespace dsv4::engine
