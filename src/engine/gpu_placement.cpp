#include "engine/gpu_placement.h"

#include <algorithm>
#include <cstdio>

namespace dsv4::engine {

namespace {

// Caps are fractions of a GPU's free memory in units of 1 / kParts.
constexpr uint64_t kParts = uint64_t(1) << 20;

std::string gib(uint64_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f GiB", double(bytes) / double(uint64_t(1) << 30));
    return buf;
}

// Each GPU in turn takes layers while its stage stays within parts / kParts of its free memory; a GPU that cannot
// take the next layer takes none. The stages when every layer found a place, else none.
std::vector<GpuStagePlan> fill(const GpuPlacementCosts& c, std::span<const GpuMemory> gpus, uint64_t parts) {
    const int64_t layers = int64_t(c.layer_bytes.size());
    std::vector<GpuStagePlan> stages;
    int64_t next = 0;
    for (const GpuMemory& g : gpus) {
        if (next == layers) break;
        const uint64_t cap = g.free_bytes / kParts * parts + g.free_bytes % kParts * parts / kParts;
        GpuStagePlan s{g.device, next, next, c.stage_bytes + (next == 0 ? c.first_bytes : 0)};
        while (next < layers) {
            const uint64_t add = c.layer_bytes[size_t(next)] + (next + 1 == layers ? c.last_bytes : 0);
            if (s.bytes + add > cap) break;
            s.bytes += add;
            ++next;
        }
        s.end_layer = next;
        if (s.end_layer > s.first_layer) stages.push_back(s);
    }
    if (next < layers) stages.clear();
    return stages;
}

// The placement over `gpus` with the smallest cap that fits (greedy filling only reaches further as caps grow, so
// the fitting caps are an interval); none when even whole free memories do not fit.
std::vector<GpuStagePlan> tightest(const GpuPlacementCosts& c, std::span<const GpuMemory> gpus) {
    std::vector<GpuStagePlan> best = fill(c, gpus, kParts);
    if (best.empty()) return best;
    uint64_t lo = 0, hi = kParts;  // fill(lo) fails (or lo = 0), fill(hi) fits
    while (hi - lo > 1) {
        const uint64_t mid = lo + (hi - lo) / 2;
        std::vector<GpuStagePlan> s = fill(c, gpus, mid);
        if (s.empty()) {
            lo = mid;
        } else {
            hi = mid;
            best = std::move(s);
        }
    }
    return best;
}

}  // namespace

Result<std::vector<GpuStagePlan>> place_gpu_stages(const GpuPlacementCosts& costs, std::span<const GpuMemory> gpus,
                                                   bool every_gpu) {
    if (costs.layer_bytes.empty()) return invalid_argument("GPU placement: the model has no layers");
    if (gpus.empty()) return invalid_argument("GPU placement: no GPU to place the model on");
    if (every_gpu) {
        std::vector<GpuStagePlan> s = tightest(costs, gpus);
        if (!s.empty()) return s;
    } else {
        for (size_t n = 1; n <= gpus.size(); ++n) {
            std::vector<GpuStagePlan> s = tightest(costs, gpus.first(n));
            if (!s.empty()) return s;
        }
    }
    uint64_t need = costs.first_bytes + costs.last_bytes + costs.stage_bytes, largest = 0, free = 0;
    for (uint64_t b : costs.layer_bytes) need += b, largest = std::max(largest, b);
    std::string names;
    for (const GpuMemory& g : gpus) {
        free += g.free_bytes;
        names += (names.empty() ? "" : ", ") + std::to_string(g.device) + " (" + gib(g.free_bytes) + ")";
    }
    return Status(StatusCode::kResourceExhausted,
                  "the model does not fit the GPUs' free memory: it needs at least " + gib(need) +
                      " (weights, caches and pass buffers; a layer up to " + gib(largest) + ", and " +
                      gib(costs.stage_bytes) + " of buffers on each GPU it uses) and GPU" +
                      (gpus.size() > 1 ? "s " : " ") + names + " have " + gib(free) +
                      " free; use more GPUs (--devices), a shorter context or fewer sessions (-c, -np), or fewer rows "
                      "per pass (--pass-rows)");
}

std::string describe_gpu_stages(std::span<const GpuStagePlan> stages) {
    std::string out;
    for (const GpuStagePlan& s : stages) {
        if (!out.empty()) out += "; ";
        out += "GPU " + std::to_string(s.device) + ": layers " + std::to_string(s.first_layer) + "-" +
               std::to_string(s.end_layer - 1) + " (" + gib(s.bytes) + ")";
    }
    return out;
}

}  // namespace dsv4::engine
