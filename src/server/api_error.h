// An HTTP error in the OpenAI shape: {"error": {"message", "type", "param", "code"}}.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace dsv4::server {

struct ApiError {
    int status = 400;
    std::string message;
    std::string type = "invalid_request_error";
    std::string param;  // the offending request field, or empty (null in JSON)
    std::string code;   // a machine-readable reason, or empty (null in JSON)
};

inline ApiError bad_request(std::string message, std::string param = {}, std::string code = {}) {
    return {400, std::move(message), "invalid_request_error", std::move(param), std::move(code)};
}

inline nlohmann::ordered_json error_json(const ApiError& e) {
    nlohmann::ordered_json inner;
    inner["message"] = e.message;
    inner["type"] = e.type;
    inner["param"] = e.param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(e.param);
    inner["code"] = e.code.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(e.code);
    nlohmann::ordered_json out;
    out["error"] = std::move(inner);
    return out;
}

// JSON text for the wire: never throws on invalid UTF-8 (replaced by U+FFFD).
inline std::string dump_json(const nlohmann::ordered_json& j) {
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace dsv4::server
