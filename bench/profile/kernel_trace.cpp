// In-graph kernel timeline through CUPTI: a library the CUDA driver loads into any process named by
// CUDA_INJECTION64_PATH (its InitializeInjection is called at cuInit). It records every kernel's start and end on the
// GPU clock — kernels replayed from CUDA graphs included, each tagged with its graph and node — and writes them as CSV
// to $DSV4_KERNEL_TRACE_OUT when the process exits. Nsight Compute replays kernels one at a time, so its times miss
// what a decode graph overlaps (programmatic launch, branches); these are the times the graph actually ran. Every
// graph instantiated meanwhile also has its edges written, to $DSV4_KERNEL_TRACE_OUT.edges, so that a reader can
// follow a launch's critical path through them. bench/profile/graph_trace.py reads both; scripts/trace-decode runs it.
//
// Kernel CSV columns: correlation (one per API call: every kernel of one graph launch shares the launch's), graph,
// node, stream, start_ns, end_ns, grid, block, cluster, registers, name (demangled, quoted).
// Edges CSV columns: kind, a, b, type — "edge" rows: node a → node b, type 1 for a programmatic edge, 0 otherwise
// (the graph as instantiated); "clone" rows: node a of an instantiated graph is a copy of node b.
#include <cuda.h>
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

constexpr size_t kBufferBytes = 8u << 20;
constexpr size_t kAlign = 8;

struct Trace {
    std::mutex mu;
    std::vector<std::string> lines;
    std::vector<std::string> edges;
    size_t dropped = 0;
    const char* out = nullptr;
};

Trace& trace() {
    static Trace* t = new Trace;  // never destroyed: CUPTI may deliver buffers while statics are torn down
    return *t;
}

std::string demangled(const char* name) {
    if (!name) return "?";
    int status = 0;
    char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    std::string s = status == 0 && d ? d : name;
    std::free(d);
    return s;
}

// CSV field: quoted, inner quotes doubled.
std::string quoted(const std::string& s) {
    std::string q = "\"";
    for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    void* p = std::aligned_alloc(kAlign, kBufferBytes);
    *buffer = static_cast<uint8_t*>(p);
    *size = p ? kBufferBytes : 0;
    *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    Trace& t = trace();
    CUpti_Activity* record = nullptr;
    std::vector<std::string> lines;
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL)
            continue;
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        char head[256];
        std::snprintf(head, sizeof head, "%u,%u,%llu,%u,%llu,%llu,%dx%dx%d,%dx%dx%d,%ux%ux%u,%u,", k->correlationId,
                      k->graphId, (unsigned long long)k->graphNodeId, k->streamId, (unsigned long long)k->start,
                      (unsigned long long)k->end, k->gridX, k->gridY, k->gridZ, k->blockX, k->blockY, k->blockZ,
                      k->clusterX, k->clusterY, k->clusterZ, unsigned(k->registersPerThread));
        lines.push_back(head + quoted(demangled(k->name)));
    }
    size_t dropped = 0;
    cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped);
    {
        std::lock_guard<std::mutex> lock(t.mu);
        for (std::string& l : lines) t.lines.push_back(std::move(l));
        t.dropped += dropped;
    }
    std::free(buffer);
}

uint64_t node_id(CUgraphNode n) {
    uint64_t id = 0;
    return cuptiGetGraphNodeId(n, &id) == CUPTI_SUCCESS ? id : 0;
}

// The edges of a graph about to be instantiated, and each instantiated node's original.
void CUPTIAPI on_resource(void*, CUpti_CallbackDomain domain, CUpti_CallbackId id, const void* data) {
    if (domain != CUPTI_CB_DOMAIN_RESOURCE || !data) return;
    const auto* g =
        static_cast<const CUpti_GraphData*>(static_cast<const CUpti_ResourceData*>(data)->resourceDescriptor);
    if (!g) return;
    std::vector<std::string> lines;
    if (id == CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED && g->node && g->originalNode) {
        lines.push_back("clone," + std::to_string(node_id(g->node)) + "," + std::to_string(node_id(g->originalNode)) +
                        ",0");
    } else if (id == CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATE_STARTING && g->graph) {
        size_t n = 0;
        if (cuGraphGetEdges(g->graph, nullptr, nullptr, nullptr, &n) != CUDA_SUCCESS) return;
        std::vector<CUgraphNode> from(n), to(n);
        std::vector<CUgraphEdgeData> type(n);
        if (cuGraphGetEdges(g->graph, from.data(), to.data(), type.data(), &n) != CUDA_SUCCESS) return;
        for (size_t i = 0; i < n; ++i)
            lines.push_back("edge," + std::to_string(node_id(from[i])) + "," + std::to_string(node_id(to[i])) + "," +
                            std::to_string(int(type[i].type)));
    }
    Trace& t = trace();
    std::lock_guard<std::mutex> lock(t.mu);
    for (std::string& l : lines) t.edges.push_back(std::move(l));
}

void write_trace() {
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    Trace& t = trace();
    std::lock_guard<std::mutex> lock(t.mu);
    FILE* f = std::fopen(t.out, "w");
    if (!f) {
        std::fprintf(stderr, "dsv4 kernel trace: cannot write %s\n", t.out);
        return;
    }
    std::fprintf(f, "correlation,graph,node,stream,start_ns,end_ns,grid,block,cluster,registers,name\n");
    for (const std::string& l : t.lines) std::fprintf(f, "%s\n", l.c_str());
    std::fclose(f);
    const std::string edges_path = std::string(t.out) + ".edges";
    FILE* e = std::fopen(edges_path.c_str(), "w");
    if (e) {
        std::fprintf(e, "kind,a,b,type\n");
        for (const std::string& l : t.edges) std::fprintf(e, "%s\n", l.c_str());
        std::fclose(e);
    }
    std::fprintf(stderr, "dsv4 kernel trace: %zu kernels%s written to %s, %zu graph records to %s\n", t.lines.size(),
                 t.dropped ? (" (" + std::to_string(t.dropped) + " records dropped)").c_str() : "", t.out,
                 t.edges.size(), e ? edges_path.c_str() : "(could not be written)");
}

bool ok(CUptiResult r, const char* what) {
    if (r == CUPTI_SUCCESS) return true;
    const char* msg = nullptr;
    cuptiGetResultString(r, &msg);
    std::fprintf(stderr, "dsv4 kernel trace: %s failed: %s\n", what, msg ? msg : "?");
    return false;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
    Trace& t = trace();
    t.out = std::getenv("DSV4_KERNEL_TRACE_OUT");
    if (!t.out || !*t.out) {
        std::fprintf(stderr, "dsv4 kernel trace: set DSV4_KERNEL_TRACE_OUT to the CSV file to write\n");
        return 0;
    }
    if (!ok(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks") ||
        !ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enabling kernel records"))
        return 0;
    CUpti_SubscriberHandle subscriber;
    if (ok(cuptiSubscribe(&subscriber, on_resource, nullptr), "cuptiSubscribe")) {
        ok(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED),
           "graph node clone callbacks");
        ok(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATE_STARTING),
           "graph instantiation callbacks");
    }
    std::atexit(write_trace);
    return 1;
}
