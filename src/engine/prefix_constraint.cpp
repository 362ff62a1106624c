#include "engine/prefix_constraint.h"

#include <algorithm>
#include <limits>
#include <string_view>

namespace dsv4::engine {

void PrefixConstraint::mask(std::span<const float> logits, std::span<float> out) const {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    const std::string_view rest = std::string_view(text_).substr(std::min(written_, text_.size()));
    for (size_t id = 0; id < logits.size(); ++id) {
        const std::string_view b = id < tokens_.size() ? tokens_.bytes(id) : std::string_view();
        const size_t n = std::min(b.size(), rest.size());
        const bool ok = !b.empty() && b.substr(0, n) == rest.substr(0, n);
        out[id] = ok ? logits[id] : kNegInf;
    }
}

void PrefixConstraint::accept(int32_t token) {
    if (token < 0 || size_t(token) >= tokens_.size()) return;
    written_ = std::min(text_.size(), written_ + tokens_.bytes(size_t(token)).size());
}

}  // namespace dsv4::engine
