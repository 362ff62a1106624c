// A progress bar on stderr for long CLI work (weight loading, creating the default model). It draws only when
// stderr is a terminal, redrawn in place at most ten times a second; in logs and pipes it prints nothing, so
// captured output stays short and stable.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace dsv4::cli {

class ProgressBar {
public:
    explicit ProgressBar(std::string label);
    ~ProgressBar();  // clears the line if finish() was not called
    ProgressBar(const ProgressBar&) = delete;
    ProgressBar& operator=(const ProgressBar&) = delete;

    bool enabled() const { return enabled_; }
    // `done` of `total` units (bytes); the last update (done == total) always draws.
    void update(uint64_t done, uint64_t total);
    // Erases the bar, leaving the cursor at the start of an empty line.
    void finish();

private:
    std::string label_;
    bool enabled_ = false;
    bool drawn_ = false;
    std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace dsv4::cli
