// Prometheus text format: https://prometheus.io/docs/instrumenting/exposition_formats/ (the idea of the layout
// only; the writer below is ours).
#include "server/metrics.h"

#include <cmath>
#include <cstdio>

namespace dsv4::server {
namespace {

std::string number(double v) {
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
}

void header(std::string& out, const char* name, const char* help, const char* type) {
    out += "# HELP ";
    out += name;
    out += ' ';
    out += help;
    out += "\n# TYPE ";
    out += name;
    out += ' ';
    out += type;
    out += '\n';
}

template <typename T>
void scalar(std::string& out, const char* name, const char* help, const char* type, const T& value) {
    header(out, name, help, type);
    out += name;
    out += ' ';
    out += number(double(value.load(std::memory_order_relaxed)));
    out += '\n';
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
    size_t i = 0;
    while (i < bounds_.size() && value > bounds_[i]) ++i;
    std::lock_guard<std::mutex> lock(mu_);
    ++counts_[i];
    sum_ += value;
    ++count_;
}

void Histogram::render(std::string& out, const char* name, const char* help) const {
    header(out, name, help, "histogram");
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= bounds_.size(); ++i) {
        cumulative += counts_[i];
        const double le = i < bounds_.size() ? bounds_[i] : INFINITY;
        out += name;
        out += "_bucket{le=\"" + number(le) + "\"} " + std::to_string(cumulative) + '\n';
    }
    out += name;
    out += "_sum " + number(sum_) + '\n';
    out += name;
    out += "_count " + std::to_string(count_) + '\n';
}

std::string Metrics::render() const {
    std::string out;
    scalar(out, "dsv4_requests_total", "Requests admitted to the scheduler.", "counter", requests_total);
    scalar(out, "dsv4_requests_rejected_total", "Requests answered with an HTTP error.", "counter",
           requests_rejected_total);
    scalar(out, "dsv4_requests_cancelled_total", "Requests whose client disconnected before the end.", "counter",
           requests_cancelled_total);
    scalar(out, "dsv4_prompt_tokens_total", "Prompt tokens run through the model (prefix-cache hits excluded).",
           "counter", prompt_tokens_total);
    scalar(out, "dsv4_prompt_tokens_cached_total", "Prompt tokens reused from a slot's cache.", "counter",
           cached_prompt_tokens_total);
    scalar(out, "dsv4_generated_tokens_total", "Tokens generated.", "counter", generated_tokens_total);
    scalar(out, "dsv4_generated_tokens_drawn_by_engine_total",
           "Generated tokens drawn on the GPU beside the logits (the rest by the host sampler).", "counter",
           engine_drawn_tokens_total);
    header(out, "dsv4_prompt_seconds_total", "Scheduler time spent on prefill chunks.", "counter");
    out += "dsv4_prompt_seconds_total " + number(double(prompt_microseconds_total.load()) * 1e-6) + '\n';
    header(out, "dsv4_generation_seconds_total", "Scheduler time spent on decode steps.", "counter");
    out += "dsv4_generation_seconds_total " + number(double(generation_microseconds_total.load()) * 1e-6) + '\n';
    scalar(out, "dsv4_requests_running", "Requests holding a slot.", "gauge", requests_running);
    scalar(out, "dsv4_requests_waiting", "Requests queued for a slot.", "gauge", requests_waiting);
    scalar(out, "dsv4_slots_busy", "Slots serving a request.", "gauge", slots_busy);
    scalar(out, "dsv4_slots_total", "Slots (-np).", "gauge", slots_total);
    scalar(out, "dsv4_kv_cache_tokens_used", "Tokens held in the state of busy slots.", "gauge", kv_tokens_used);
    scalar(out, "dsv4_kv_cache_tokens_capacity", "Slots x context tokens.", "gauge", kv_tokens_capacity);
    const int64_t cap = kv_tokens_capacity.load();
    header(out, "dsv4_kv_cache_usage_ratio", "kv_cache_tokens_used / kv_cache_tokens_capacity.", "gauge");
    out += "dsv4_kv_cache_usage_ratio " + number(cap > 0 ? double(kv_tokens_used.load()) / double(cap) : 0.0) + '\n';
    time_to_first_token.render(out, "dsv4_time_to_first_token_seconds",
                               "From arrival to the first generated token.");
    inter_token_latency.render(out, "dsv4_inter_token_latency_seconds", "Between consecutive generated tokens.");
    request_duration.render(out, "dsv4_request_duration_seconds", "From arrival to the last token.");
    return out;
}

}  // namespace dsv4::server
