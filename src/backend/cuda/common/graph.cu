#include "backend/cuda/common/graph.h"

#include "backend/cuda/common/cuda_status.cuh"

namespace dsv4::cuda {

Result<CapturedGraph> CapturedGraph::capture(StreamHandle stream, const std::function<Status()>& enqueue) {
    DSV4_CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
    const Status queued = enqueue();
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    if (!queued) {
        if (graph) cudaGraphDestroy(graph);
        return queued;
    }
    DSV4_CUDA_TRY(ended, "cudaStreamEndCapture (the captured work called something that synchronises)");
    CapturedGraph g;
    size_t n = 0;
    cudaGraphGetNodes(graph, nullptr, &n);
    g.nodes_ = n;
    const cudaError_t inst = cudaGraphInstantiate(&g.exec_, graph, 0);
    cudaGraphDestroy(graph);
    DSV4_CUDA_TRY(inst, "cudaGraphInstantiate");
    return Result<CapturedGraph>(std::move(g));
}

CapturedGraph::~CapturedGraph() {
    if (exec_) cudaGraphExecDestroy(exec_);
}

CapturedGraph& CapturedGraph::operator=(CapturedGraph&& o) noexcept {
    if (this != &o) {
        if (exec_) cudaGraphExecDestroy(exec_);
        exec_ = std::exchange(o.exec_, nullptr);
        nodes_ = o.nodes_;
    }
    return *this;
}

Status CapturedGraph::launch(StreamHandle stream) const {
    if (!exec_) return internal_error("launch of an empty CUDA graph");
    return cuda_status(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch");
}

}  // namespace dsv4::cuda
