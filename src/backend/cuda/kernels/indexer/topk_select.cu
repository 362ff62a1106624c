// Launchers of sm90_topk_select (indexer.h): validate, choose the one-block, cluster or chunked path, lay out the
// chunked path's workspace, launch on the stream.
#include <algorithm>
#include <string>

#include "backend/cuda/common/cluster_launch.h"
#include "backend/cuda/common/cluster_occupancy.h"
#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/workspace.h"
#include "backend/cuda/kernels/indexer/indexer.h"
#include "backend/cuda/kernels/indexer/topk_select.cuh"
#include "backend/cuda/kernels/indexer/topk_select_cluster.cuh"

namespace dsv4::cuda {

using backend::Precision;

namespace {

using Cfg = TopKSelectConfig;

// Long-row workspace: picks, then the zeroed-per-call histograms and tickets, then the per-chunk counts. Every
// region starts on a 256-byte boundary. Sized for 4 passes, so one size serves both precisions.
struct SelectLayout {
    int64_t chunk = 0, chunks = 0;  // scores per chunk, chunks per row
    size_t picks = 0, hist = 0, tickets = 0, above = 0, equal = 0;
    size_t zero_bytes = 0;  // hist .. end of tickets
    size_t total = 0;
};

// The chunk halves from kChunkMax down to kChunkMin while rows · chunks stays below ≈ 2 CTAs per SM, so few long
// rows still spread over the GPU (the result never depends on the chunk size).
SelectLayout select_layout(int64_t rows, int64_t n) {
    SelectLayout l;
    l.chunk = Cfg::kChunkMax;
    while (l.chunk > Cfg::kChunkMin && rows * ((n + l.chunk - 1) / l.chunk) < Cfg::kTargetCtas) l.chunk /= 2;
    l.chunks = (n + l.chunk - 1) / l.chunk;
    const size_t r = size_t(rows), per_chunk = size_t(rows * l.chunks) * Cfg::kBins * sizeof(unsigned);
    WorkspaceLayout w;
    l.picks = w.take(r * Cfg::kMaxK * sizeof(unsigned long long));
    l.hist = w.take(r * Cfg::kMaxPasses * Cfg::kBins * sizeof(unsigned));
    l.tickets = w.take(r * sizeof(unsigned));
    l.zero_bytes = w.bytes - l.hist;
    l.above = w.take(per_chunk);
    l.equal = w.take(per_chunk);
    l.total = w.bytes;
    return l;
}

using ClusterCfg = TopKClusterConfig;
static_assert(int64_t(ClusterCfg::kMaxCtas) * ClusterCfg::kCtaKeysMax == kTopkSelectClusterMax);

bool long_rows(const TopKArgs& a) {
    return a.n > Cfg::kShortLimit || (a.n > Cfg::kShortMax && a.rows < Cfg::kShortRows);
}

// Cluster path: CTAs per row (2, 4 or 8, doubling while a share would pass kCtaKeysTarget) and the largest share.
struct ClusterShape {
    int ctas = 2;
    int64_t share = 0;
};
ClusterShape cluster_shape(int64_t n) {
    ClusterShape c;
    while (c.ctas < ClusterCfg::kMaxCtas && (n + c.ctas - 1) / c.ctas > ClusterCfg::kCtaKeysTarget) c.ctas *= 2;
    c.share = ((n + c.ctas - 1) / c.ctas + 31) / 32 * 32;
    return c;
}

template <typename ScoreT>
constexpr size_t cluster_smem(int64_t share) {
    return ClusterCfg::kPickBytes + size_t(share) * sizeof(typename SelectKey<ScoreT>::T);
}

// The row's cluster shape, or ctas = 0 when one such cluster cannot be resident on this device.
template <typename ScoreT>
ClusterShape cluster_for(int64_t n) {
    const ClusterShape c = cluster_shape(n);
    // the sorted and unsorted instances: the same shared memory and launch bounds
    auto* sorted = sm90_topk_select_cluster_kernel<ScoreT, true>;
    auto* unsorted = sm90_topk_select_cluster_kernel<ScoreT, false>;
    constexpr size_t kMaxSmem = cluster_smem<ScoreT>(ClusterCfg::kCtaKeysMax);
    if (c.share > ClusterCfg::kCtaKeysMax ||
        cudaFuncSetAttribute(sorted, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxSmem)) != cudaSuccess ||
        cudaFuncSetAttribute(unsorted, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxSmem)) != cudaSuccess) {
        (void)cudaGetLastError();
        return {0, 0};
    }
    const bool fits = max_active_clusters(reinterpret_cast<const void*>(sorted), Cfg::kThreads,
                                          cluster_smem<ScoreT>(c.share), c.ctas) > 0;
    return fits ? c : ClusterShape{0, 0};
}

// The kernels' output: the picks into idx, or the candidate lists (TopKArgs::list).
PickOut pick_out(const TopKArgs& a) {
    PickOut o;
    o.idx = a.idx, o.k = int(a.k), o.list = a.list;
    return o;
}

enum class Route { kShort, kCluster, kChunked };

// counters: whether the call brings zeroed counters (TopKArgs::counters), which make the chunked path pay for one
// long row.
template <typename ScoreT>
Route route(const TopKArgs& a, bool counters) {
    switch (a.select_path) {
        case TopKSelectPath::kChunked:
            return Route::kChunked;
        case TopKSelectPath::kCluster:
            return Route::kCluster;
        case TopKSelectPath::kAuto:
            break;
    }
    if (!long_rows(a)) return Route::kShort;
    if (counters && a.rows == 1 && a.n > kTopkSelectChunkedSingleRowMin) return Route::kChunked;
    return a.n <= kTopkSelectClusterMax && cluster_for<ScoreT>(a.n).ctas > 0 ? Route::kCluster : Route::kChunked;
}

template <typename ScoreT>
Status launch_short(const TopKArgs& a, StreamHandle stream, const std::string& op) {
    using KeyT = typename SelectKey<ScoreT>::T;
    constexpr size_t kPicks = 2 * Cfg::kThreads * sizeof(unsigned long long);
    const size_t smem = kPicks + size_t((a.n + 7) / 8 * 8) * sizeof(KeyT);
    auto* kernel = sm90_topk_select_short_kernel<ScoreT>;
    // the opt-in is always the largest row's, so calls with other n on other threads never lower it under a launch
    constexpr size_t kMaxSmem = kPicks + size_t(Cfg::kShortLimit) * sizeof(KeyT);
    DSV4_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxSmem)),
                  op + ": shared memory opt-in");
    kernel<<<unsigned(a.rows), Cfg::kThreads, smem, stream>>>(static_cast<const ScoreT*>(a.scores), a.n, a.positions,
                                                              a.ratio, a.sorted, pick_out(a));
    return launch_status(op.c_str());
}

template <typename ScoreT>
Status launch_cluster(const TopKArgs& a, StreamHandle stream, const std::string& op) {
    if (a.n > kTopkSelectClusterMax)
        return invalid_argument(op + ": the cluster path takes rows of up to " + std::to_string(kTopkSelectClusterMax) +
                                " scores, got " + std::to_string(a.n));
    const ClusterShape c = cluster_for<ScoreT>(a.n);
    if (c.ctas == 0) return invalid_argument(op + ": this device cannot hold the cluster path's thread-block cluster");
    if (a.rows * c.ctas > 0x7fffffff) return invalid_argument(op + ": too many rows for one launch");
    const ClusterLaunch launch(dim3(unsigned(a.rows * c.ctas)), dim3(Cfg::kThreads), cluster_smem<ScoreT>(c.share),
                               stream, dim3(unsigned(c.ctas)));
    auto* kernel =
        a.sorted ? sm90_topk_select_cluster_kernel<ScoreT, true> : sm90_topk_select_cluster_kernel<ScoreT, false>;
    DSV4_CUDA_TRY(cudaLaunchKernelEx(&launch.cfg, kernel, static_cast<const ScoreT*>(a.scores), a.n, a.positions,
                                     a.ratio, int(std::min<int64_t>(c.share, Cfg::kShortMax)), pick_out(a)),
                  op + ": cluster launch");
    return launch_status((op + " (cluster)").c_str());
}

template <typename ScoreT>
Status launch_long(const TopKArgs& a, const SelectLayout& l, void* workspace, StreamHandle stream,
                   const std::string& op) {
    auto* base = static_cast<unsigned char*>(workspace);
    TopKSelectWorkspace ws;
    ws.picks = reinterpret_cast<unsigned long long*>(base + l.picks);
    ws.above = reinterpret_cast<unsigned*>(base + l.above);
    ws.equal = reinterpret_cast<unsigned*>(base + l.equal);
    if (a.counters) {  // zero already, and left zero by the collect (TopKArgs::counters)
        static_assert(kTopkSelectCounterWords == Cfg::kMaxPasses * Cfg::kBins + 1);
        ws.hist = a.counters;
        ws.tickets = a.counters + a.rows * Cfg::kMaxPasses * Cfg::kBins;
    } else {
        ws.hist = reinterpret_cast<unsigned*>(base + l.hist);
        ws.tickets = reinterpret_cast<unsigned*>(base + l.tickets);
        DSV4_CUDA_TRY(cudaMemsetAsync(base + l.hist, 0, l.zero_bytes, stream), op + ": clearing the workspace");
    }
    const unsigned grid = unsigned(a.rows * l.chunks);
    const auto* scores = static_cast<const ScoreT*>(a.scores);
    for (int pass = 0; pass < SelectKey<ScoreT>::kPasses; ++pass) {
        sm90_topk_select_hist_kernel<ScoreT><<<grid, Cfg::kThreads, 0, stream>>>(
            scores, a.n, int(a.k), a.positions, a.ratio, int(l.chunk), int(l.chunks), pass, ws);
        DSV4_RETURN_IF_ERROR(launch_status((op + " histogram pass").c_str()));
    }
    sm90_topk_select_collect_kernel<ScoreT><<<grid, Cfg::kThreads, 0, stream>>>(
        scores, a.n, a.positions, a.ratio, int(l.chunk), int(l.chunks), a.sorted, ws, pick_out(a));
    return launch_status((op + " collect").c_str());
}

// Whether a call of this shape may take the chunked path (either precision, with or without counters): its
// workspace is needed then.
bool may_chunk(const TopKArgs& a) {
    for (const bool counters : {false, true})
        if (route<__nv_bfloat16>(a, counters) == Route::kChunked || route<float>(a, counters) == Route::kChunked)
            return true;
    return false;
}

template <typename ScoreT>
Status run(const TopKArgs& a, void* workspace, size_t workspace_bytes, StreamHandle stream, const std::string& op) {
    switch (route<ScoreT>(a, a.counters != nullptr)) {
        case Route::kShort:
            return launch_short<ScoreT>(a, stream, op);
        case Route::kCluster:
            return launch_cluster<ScoreT>(a, stream, op);
        case Route::kChunked:
            break;
    }
    const SelectLayout l = select_layout(a.rows, a.n);
    if (!workspace || workspace_bytes < l.total)
        return invalid_argument(op + ": rows of " + std::to_string(a.n) + " scores need a workspace of " +
                                std::to_string(l.total) + " bytes (sm90_topk_select_workspace_bytes), got " +
                                std::to_string(workspace ? workspace_bytes : 0));
    if (reinterpret_cast<uintptr_t>(workspace) & 15)
        return invalid_argument(op + ": workspace must be 16-byte aligned");
    if (a.rows * l.chunks > 0x7fffffff)
        return invalid_argument(op + ": " + std::to_string(a.rows) + " rows of " + std::to_string(a.n) +
                                " scores are too many blocks for one launch");
    return launch_long<ScoreT>(a, l, workspace, stream, op);
}

}  // namespace

size_t sm90_topk_select_workspace_bytes(const TopKArgs& a) {
    if (a.rows <= 0 || a.k <= 0 || !may_chunk(a)) return 0;
    return select_layout(a.rows, a.n).total;
}

Status sm90_topk_select(Precision precision, const TopKArgs& a, void* workspace, size_t workspace_bytes,
                        StreamHandle stream) {
    const std::string op = "sm90_topk_select";
    const bool list = a.list.idx != nullptr;
    if (!a.scores || (!a.idx && !list) || a.rows < 0 || a.n < 0 || a.k < 0)
        return invalid_argument(op + ": null pointer or bad shape");
    if (list && (a.k <= 0 || !a.list.decode || a.list.pass_local || a.list.n != a.rows || a.list.topk != a.k ||
                 a.list.win_cols < 0 || a.list.window <= 0 || !a.list.positions || !a.list.slots ||
                 !a.list.entries.table || a.list.entries.pages_per_session <= 0 || a.list.hca_entries != 0))
        return invalid_argument(op +
                                ": candidate lists (TopKArgs::list) need a decode list of k picks per row: "
                                "decode, rows and topk matching the call, positions, slots and the entry table");
    if (a.k > Cfg::kMaxK) return invalid_argument(op + ": k " + std::to_string(a.k) + " above the supported 1024");
    if (a.positions && a.ratio <= 0)
        return invalid_argument(op + ": positions need the compression ratio (got " + std::to_string(a.ratio) + ")");
    if (a.n > 0x7fffffff)
        return invalid_argument(op + ": n " + std::to_string(a.n) + " scores per row do not fit an int32 index");
    if (a.rows == 0 || a.k == 0) return Status::ok();
    if (a.rows > 0x7fffffff) return invalid_argument(op + ": too many rows");
    return precision == Precision::kReference ? run<__nv_bfloat16>(a, workspace, workspace_bytes, stream, op)
                                              : run<float>(a, workspace, workspace_bytes, stream, op);
}

}  // namespace dsv4::cuda
