#include "testing/testing.h"

#include <cmath>
#include <cstdlib>
#include <random>
#include <sstream>

namespace dsv4::testing {

std::filesystem::path source_dir() {
    if (const char* env = std::getenv("DSV4_SOURCE_DIR"); env && *env) return env;
    return DSV4_SOURCE_DIR_DEFAULT;
}

std::filesystem::path test_data_dir() { return source_dir() / "tests" / "data"; }

TempDir::TempDir(const std::string& prefix) {
    std::random_device rd;
    for (int attempt = 0; attempt < 100; ++attempt) {
        auto candidate = std::filesystem::temp_directory_path() / (prefix + "-" + std::to_string(rd()));
        if (std::filesystem::create_directory(candidate)) {
            path_ = candidate;
            return;
        }
    }
    throw std::runtime_error("cannot create a temporary folder");
}

TempDir::~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
}

Comparison compare(std::span<const float> actual, std::span<const float> expected, double tolerance_abs) {
    Comparison c;
    std::ostringstream report;
    if (actual.size() != expected.size()) {
        c.rel_l2 = INFINITY;
        report << "size mismatch: " << actual.size() << " vs " << expected.size() << "\n";
        c.report = report.str();
        return c;
    }
    double diff2 = 0, ref2 = 0, sum = 0, sum2 = 0;
    int shown = 0;
    for (size_t i = 0; i < actual.size(); ++i) {
        double a = actual[i], b = expected[i];
        if (!std::isfinite(b)) continue;
        sum += b;
        sum2 += b * b;
        if (!std::isfinite(a)) {
            ++c.nonfinite;
            if (shown++ < 8) report << "  [" << i << "] got " << a << ", want " << b << "\n";
            continue;
        }
        double d = a - b;
        diff2 += d * d;
        ref2 += b * b;
        if (std::fabs(d) > c.max_abs) {
            c.max_abs = std::fabs(d);
            c.worst_index = i;
        }
        if (std::fabs(d) > tolerance_abs + 1e-2 * std::fabs(b) + 1e-6 && shown++ < 8)
            report << "  [" << i << "] got " << a << ", want " << b << "\n";
    }
    double n = double(expected.size() ? expected.size() : 1);
    double var = sum2 / n - (sum / n) * (sum / n);
    double sd = var > 0 ? std::sqrt(var) : 1.0;
    c.rel_l2 = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
    c.max_abs_norm = c.max_abs / sd;
    report << "  worst [" << c.worst_index << "] |diff| " << c.max_abs << " (" << c.max_abs_norm << " std)\n";
    c.report = report.str();
    return c;
}

}  // namespace dsv4::testing
