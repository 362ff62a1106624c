// Status and Result<T>: how every library function reports failure. Library code never calls exit() or aborts;
// the CLI and the server turn a Status into a message (and an exit code or an HTTP error).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace dsv4 {

enum class StatusCode {
    kOk = 0,
    kInvalidArgument,  // bad user input: flags, request fields, token ids
    kNotFound,         // a file, tensor or key that should exist does not
    kCorrupt,          // a file exists but its contents break the format
    kUnsupported,      // valid input we do not handle (a dtype, a GPU, a config value)
    kOutOfRange,       // sizes or indices past a limit (context length, pool capacity)
    kResourceExhausted,
    kIo,               // the operating system refused (open, mmap, write)
    kInternal,
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
public:
    Status() = default;
    Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

    static Status ok() { return {}; }
    bool is_ok() const { return code_ == StatusCode::kOk; }
    explicit operator bool() const { return is_ok(); }
    StatusCode code() const { return code_; }
    const std::string& message() const { return message_; }
    // "corrupt: model.safetensors: tensor 'x': ..." — the one line a user sees.
    std::string to_string() const;

private:
    StatusCode code_ = StatusCode::kOk;
    std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status corrupt(std::string m) { return {StatusCode::kCorrupt, std::move(m)}; }
inline Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIo, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Result<T>: a value or a non-ok Status (std::expected is C++23).
template <typename T>
class [[nodiscard]] Result {
public:
    Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
    Result(Status status) : v_(std::move(status)) {}  // NOLINT
    bool is_ok() const { return v_.index() == 0; }
    explicit operator bool() const { return is_ok(); }
    T& value() & { return std::get<0>(v_); }
    const T& value() const& { return std::get<0>(v_); }
    T&& value() && { return std::get<0>(std::move(v_)); }
    T* operator->() { return &std::get<0>(v_); }
    const T* operator->() const { return &std::get<0>(v_); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }
    Status status() const { return is_ok() ? Status::ok() : std::get<1>(v_); }

private:
    std::variant<T, Status> v_;
};

}  // namespace dsv4

// Propagate a failed Status from an expression returning Status.
#define DSV4_RETURN_IF_ERROR(expr)                 \
    do {                                           \
        ::dsv4::Status dsv4_status_ = (expr);      \
        if (!dsv4_status_.is_ok()) return dsv4_status_; \
    } while (0)

#define DSV4_CONCAT_INNER_(a, b) a##b
#define DSV4_CONCAT_(a, b) DSV4_CONCAT_INNER_(a, b)
// DSV4_ASSIGN_OR_RETURN(auto x, f()); — unwrap a Result<T> or return its Status.
#define DSV4_ASSIGN_OR_RETURN(decl, expr) DSV4_ASSIGN_OR_RETURN_IMPL_(DSV4_CONCAT_(dsv4_result_, __LINE__), decl, expr)
#define DSV4_ASSIGN_OR_RETURN_IMPL_(tmp, decl, expr) \
    auto tmp = (expr);                               \
    if (!tmp.is_ok()) return tmp.status();           \
    decl = std::move(tmp).value()
