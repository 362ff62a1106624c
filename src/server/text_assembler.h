// Generated ids -> final text for one sequence: streaming detokenisation plus stop strings. Text that could be the
// start of a stop string is held back until it is decided, so a stop string never reaches the client, not even
// in part; the text before it does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dsv4/status.h"
#include "dsv4/tokenizer.h"

namespace dsv4::server {

class TextAssembler {
public:
    explicit TextAssembler(const Tokenizer& tokenizer) : decoder_(tokenizer) {}

    void start(std::vector<std::string> stop_strings);
    // Appends to `out` the text that `id` made final. Returns true when a stop string appeared: `out` then holds
    // the text up to it and the sequence must end.
    Result<bool> push(int32_t id, std::string& out);
    // End of sequence without a stop string: the held text.
    void finish(std::string& out);

private:
    StreamDecoder decoder_;
    std::vector<std::string> stops_;
    std::string held_;  // decoded, not yet released
};

}  // namespace dsv4::server
