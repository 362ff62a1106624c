#include "server/text_assembler.h"

#include <algorithm>

namespace dsv4::server {

void TextAssembler::start(std::vector<std::string> stop_strings) {
    decoder_.reset();
    stops_ = std::move(stop_strings);
    held_.clear();
}

Result<bool> TextAssembler::push(int32_t id, std::string& out) {
    DSV4_ASSIGN_OR_RETURN(std::string piece, decoder_.push(id));
    held_ += piece;
    if (stops_.empty()) {
        out += held_;
        held_.clear();
        return false;
    }
    // Earliest stop string occurrence wins.
    size_t hit = std::string::npos;
    for (const std::string& s : stops_) hit = std::min(hit, held_.find(s));
    if (hit != std::string::npos) {
        out.append(held_, 0, hit);
        held_.clear();
        return true;
    }
    // Keep the longest suffix that is a proper prefix of some stop string. Stop strings are valid UTF-8, so the
    // cut never falls inside a character.
    size_t keep = 0;
    for (const std::string& s : stops_) {
        for (size_t len = std::min(s.size() - 1, held_.size()); len > keep; --len) {
            if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
                keep = len;
                break;
            }
        }
    }
    out.append(held_, 0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return false;
}

void TextAssembler::finish(std::string& out) {
    held_ += decoder_.finish();
    out += held_;
    held_.clear();
}

}  // namespace dsv4::server
