// Server metrics in the Prometheus text exposition format (version 0.0.4): counters, gauges and fixed-bucket
// histograms, written by hand (a few dozen lines; no client library is packaged for C++ here). Every update is a
// relaxed atomic or a short mutex section, so the scheduler loop and the HTTP threads can both record.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace dsv4::server {

class Histogram {
public:
    explicit Histogram(std::vector<double> upper_bounds);  // ascending; +Inf is implicit
    void observe(double value);
    // Appends "# HELP", "# TYPE" and the _bucket / _sum / _count lines.
    void render(std::string& out, const char* name, const char* help) const;

private:
    std::vector<double> bounds_;
    mutable std::mutex mu_;
    std::vector<uint64_t> counts_;  // [bounds_.size() + 1], not cumulative
    double sum_ = 0;
    uint64_t count_ = 0;
};

struct Metrics {
    // Counters.
    std::atomic<uint64_t> requests_total{0};           // requests that reached the scheduler
    std::atomic<uint64_t> requests_rejected_total{0};  // 4xx/5xx answered by the HTTP layer
    std::atomic<uint64_t> requests_cancelled_total{0}; // client went away before the end
    std::atomic<uint64_t> prompt_tokens_total{0};      // prompt tokens run through the model (cache hits excluded)
    std::atomic<uint64_t> cached_prompt_tokens_total{0};
    std::atomic<uint64_t> generated_tokens_total{0};
    // of those, drawn by the model beside its logits (the CUDA backend's decode steps); the rest by the host sampler
    std::atomic<uint64_t> engine_drawn_tokens_total{0};
    std::atomic<uint64_t> prompt_microseconds_total{0};    // loop time spent on prefill chunks
    std::atomic<uint64_t> generation_microseconds_total{0};  // loop time spent on decode steps
    // Gauges.
    std::atomic<int64_t> requests_running{0};
    std::atomic<int64_t> requests_waiting{0};
    std::atomic<int64_t> slots_busy{0};
    std::atomic<int64_t> slots_total{0};
    std::atomic<int64_t> kv_tokens_used{0};      // tokens held by busy slots
    std::atomic<int64_t> kv_tokens_capacity{0};  // slots x context
    // Histograms (seconds).
    Histogram time_to_first_token{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
    Histogram inter_token_latency{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
    Histogram request_duration{{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}};

    // The whole exposition, every metric prefixed "dsv4_".
    std::string render() const;
};

}  // namespace dsv4::server
