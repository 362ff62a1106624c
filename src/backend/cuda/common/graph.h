// CUDA graphs behind a plain C++ interface: capture the work a function queues on a stream, instantiate it once,
// replay it. Capture runs in the global mode, in which any call that would synchronise the host with the GPU (a
// blocking copy, a stream or device synchronisation, a cudaMalloc) fails the capture: a captured step is proof that
// it contains no host synchronisation. Kernel-to-kernel edges into this backend's kernels are made programmatic
// (common/pdl.cuh), so each kernel's launch overlaps the one before it.
#pragma once

#include <functional>
#include <utility>

#include "backend/cuda/common/stream.h"
#include "dsv4/status.h"

struct CUgraphExec_st;

namespace dsv4::cuda {

class CapturedGraph {
public:
    // Runs `enqueue` under capture on `stream` and instantiates what it queued. `enqueue` must only queue work.
    static Result<CapturedGraph> capture(StreamHandle stream, const std::function<Status()>& enqueue);
    CapturedGraph() = default;
    ~CapturedGraph();
    CapturedGraph(CapturedGraph&& o) noexcept
        : exec_(std::exchange(o.exec_, nullptr)), nodes_(o.nodes_), programmatic_edges_(o.programmatic_edges_) {}
    CapturedGraph& operator=(CapturedGraph&& o) noexcept;
    CapturedGraph(const CapturedGraph&) = delete;
    CapturedGraph& operator=(const CapturedGraph&) = delete;

    bool empty() const { return exec_ == nullptr; }
    size_t nodes() const { return nodes_; }  // kernels and copies in the graph
    size_t programmatic_edges() const { return programmatic_edges_; }  // kernel edges with overlapped launch
    Status launch(StreamHandle stream) const;

private:
    CUgraphExec_st* exec_ = nullptr;
    size_t nodes_ = 0;
    size_t programmatic_edges_ = 0;
};

}  // namespace dsv4::cuda
