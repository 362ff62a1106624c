// The GPU forward's entry points in a build without CUDA: loading says so; nothing else can be reached, since no
// GpuModel or GpuSequence can exist.
#include "dsv4/bench.h"
#include "engine/cuda/gpu_model.h"

#if !DSV4_HAVE_CUDA
namespace dsv4::engine {

struct GpuModel {};
struct GpuSequence {};

Result<std::shared_ptr<GpuModel>> load_gpu_model(const model::ModelConfig&, const ModelViews&, backend::Precision,
                                                 int64_t, const GpuCacheOptions&, std::span<const int>) {
    return unsupported("this dsv4 was built without CUDA (no nvcc was found at build time); use --backend cpu");
}
std::string gpu_placement(const GpuModel&) { return {}; }
bool gpu_available(std::string* why) {
    if (why) *why = "this dsv4 was built without CUDA";
    return false;
}
int64_t gpu_max_rows(const GpuModel&) { return 0; }
uint64_t gpu_weight_bytes(const GpuModel&) { return 0; }
void GpuSequenceDeleter::operator()(GpuSequence* s) const { delete s; }
Result<GpuSequencePtr> make_gpu_sequence(GpuModel&, int64_t, int64_t) {
    return unsupported("this dsv4 was built without CUDA");
}
int64_t gpu_position(const GpuSequence&) { return 0; }
int64_t gpu_chunk_rows(const GpuSequence&) { return 0; }
void reset_gpu_sequence(GpuSequence&) {}
Status gpu_forward_batch(GpuModel&, std::span<GpuBatchSeq>) { return unsupported("this dsv4 was built without CUDA"); }
void set_gpu_graphs(GpuModel&, bool) {}
void set_gpu_host_pool(GpuModel&, ThreadPool*) {}
GpuGraphStats gpu_graph_stats(const GpuModel&) { return {}; }

}  // namespace dsv4::engine

namespace dsv4 {
Status run_gpu_bench(const GpuBenchOptions&, std::FILE*) {
    return unsupported("dsv4 bench runs on the GPU, and this dsv4 was built without CUDA");
}
}  // namespace dsv4
#endif
