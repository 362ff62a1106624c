// sample_penalty_list (sampling.h): the tokens dsv4::Sampler::apply_penalties touches, with their counts.
#include <algorithm>

#include "backend/cuda/kernels/sampling/sampling.h"

namespace dsv4::cuda {

void sample_penalty_list(std::span<const int32_t> history, const SamplingParams& params, int32_t vocab,
                         std::vector<int32_t>& counts, std::vector<SamplePenalty>& out) {
    if (params.penalty_last_n == 0 ||
        (params.repetition_penalty == 1.0f && params.presence_penalty == 0.0f && params.frequency_penalty == 0.0f))
        return;
    size_t start = 0;
    if (params.penalty_last_n > 0 && history.size() > size_t(params.penalty_last_n))
        start = history.size() - size_t(params.penalty_last_n);
    const size_t first = out.size();
    for (size_t i = start; i < history.size(); ++i) {
        const int32_t id = history[i];
        if (id < 0 || id >= vocab) continue;
        if (counts[size_t(id)]++ == 0) out.push_back({id, 0});
    }
    std::sort(out.begin() + std::ptrdiff_t(first), out.end(),
              [](const SamplePenalty& a, const SamplePenalty& b) { return a.token < b.token; });
    for (size_t i = first; i < out.size(); ++i) {
        out[i].count = counts[size_t(out[i].token)];
        counts[size_t(out[i].token)] = 0;
    }
}

}  // namespace dsv4::cuda
