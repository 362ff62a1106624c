#include "backend/cuda/common/graph.h"

#include <cstring>
#include <vector>

#include "backend/cuda/common/cuda_status.cuh"

namespace dsv4::cuda {
namespace {

// True for a kernel node running one of this backend's kernels (namespace dsv4::cuda), all of which begin with
// pdl_enter() (common/pdl.cuh). Library kernels (cuBLASLt) and anything that cannot be identified are false.
bool is_backend_kernel(cudaGraphNode_t node) {
    cudaGraphNodeType type;
    if (cudaGraphNodeGetType(node, &type) != cudaSuccess || type != cudaGraphNodeTypeKernel) return false;
    cudaKernelNodeParams params{};
    const char* name = nullptr;
    if (cudaGraphKernelNodeGetParams(node, &params) != cudaSuccess || !params.func ||
        cudaFuncGetName(&name, params.func) != cudaSuccess || !name) {
        (void)cudaGetLastError();  // a driver-launched library kernel: leave its edges as they are
        return false;
    }
    return std::strstr(name, "4dsv44cuda") != nullptr;  // the mangled namespace dsv4::cuda
}

// Turns every full-completion edge from a kernel node into one of this backend's kernels into a programmatic edge:
// the dependent's blocks may launch once the upstream kernel's blocks have all started (they trigger in
// pdl_enter) and wait there for its completion. Returns the number of edges changed.
Result<size_t> make_edges_programmatic(cudaGraph_t graph) {
    size_t n = 0;
    DSV4_CUDA_TRY(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &n), "cudaGraphGetEdges");
    std::vector<cudaGraphNode_t> from(n), to(n);
    std::vector<cudaGraphEdgeData> data(n);
    DSV4_CUDA_TRY(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &n), "cudaGraphGetEdges");
    size_t changed = 0;
    for (size_t i = 0; i < n; ++i) {
        if (data[i].type != cudaGraphDependencyTypeDefault || data[i].from_port != cudaGraphKernelNodePortDefault)
            continue;
        cudaGraphNodeType from_type;
        if (cudaGraphNodeGetType(from[i], &from_type) != cudaSuccess || from_type != cudaGraphNodeTypeKernel ||
            !is_backend_kernel(to[i]))
            continue;
        cudaGraphEdgeData e{};
        e.from_port = cudaGraphKernelNodePortProgrammatic;
        e.type = cudaGraphDependencyTypeProgrammatic;
        DSV4_CUDA_TRY(cudaGraphRemoveDependencies(graph, &from[i], &to[i], &data[i], 1), "cudaGraphRemoveDependencies");
        DSV4_CUDA_TRY(cudaGraphAddDependencies(graph, &from[i], &to[i], &e, 1), "cudaGraphAddDependencies");
        ++changed;
    }
    return changed;
}

}  // namespace

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
    Result<size_t> programmatic = make_edges_programmatic(graph);
    if (!programmatic.is_ok()) {
        cudaGraphDestroy(graph);
        return programmatic.status();
    }
    g.programmatic_edges_ = *programmatic;
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
        programmatic_edges_ = o.programmatic_edges_;
    }
    return *this;
}

Status CapturedGraph::launch(StreamHandle stream) const {
    if (!exec_) return internal_error("launch of an empty CUDA graph");
    return cuda_status(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch");
}

}  // namespace dsv4::cuda
