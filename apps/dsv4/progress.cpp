#include "progress.h"

#include <unistd.h>

#include <cstdio>

namespace dsv4::cli {

ProgressBar::ProgressBar(std::string label) : label_(std::move(label)), enabled_(isatty(fileno(stderr)) != 0) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(uint64_t done, uint64_t total) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    const bool last = done >= total;
    if (drawn_ && !last && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    constexpr int kWidth = 30;
    const double frac = total ? double(done) / double(total) : 1.0;
    const int filled = int(frac * kWidth + 0.5);
    char bar[kWidth + 1];
    for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '#' : '.';
    bar[kWidth] = '\0';
    std::fprintf(stderr, "\r%s [%s] %3d%%  %.1f / %.1f MB ", label_.c_str(), bar, int(frac * 100 + 0.5),
                 double(done) / 1e6, double(total) / 1e6);
    std::fflush(stderr);
    drawn_ = true;
}

void ProgressBar::finish() {
    if (!drawn_) return;
    std::fprintf(stderr, "\r\033[K");  // carriage return + erase to the end of the line
    std::fflush(stderr);
    drawn_ = false;
}

}  // namespace dsv4::cli
