#include "dsv4/status.h"

namespace dsv4 {

const char* status_code_name(StatusCode code) {
    switch (code) {
        case StatusCode::kOk: return "ok";
        case StatusCode::kInvalidArgument: return "invalid argument";
        case StatusCode::kNotFound: return "not found";
        case StatusCode::kCorrupt: return "corrupt";
        case StatusCode::kUnsupported: return "unsupported";
        case StatusCode::kOutOfRange: return "out of range";
        case StatusCode::kResourceExhausted: return "resource exhausted";
        case StatusCode::kIo: return "i/o error";
        case StatusCode::kInternal: return "internal error";
    }
    return "unknown";
}

std::string Status::to_string() const {
    if (is_ok()) return "ok";
    return std::string(status_code_name(code_)) + ": " + message_;
}

}  // namespace dsv4
