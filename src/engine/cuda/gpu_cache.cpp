// The paged caches (gpu_internal.h GpuCache): sizing, session slots, page allocation and page tables.
#include <algorithm>
#include <atomic>
#include <string>

#include "backend/cuda/device.h"
#include "backend/cuda/kernels/kv_store/kv_store.h"
#include "engine/cuda/gpu_internal.h"

namespace dsv4::engine {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

Status alloc(DeviceBuffer& b, int64_t bytes, const char* what, uint64_t* total) {
    DSV4_ASSIGN_OR_RETURN(b, DeviceBuffer::allocate(size_t(std::max<int64_t>(bytes, 16)), what));
    *total += b.bytes();
    return Status::ok();
}

bool has_kind(const GpuModel& m, int64_t ratio) {
    for (const GpuLayer& l : m.layers)
        if (l.ratio == ratio) return true;
    return false;
}

// Pages of 64 entries in the pool of a kind: every session may hold one partly filled page beyond its share of
// `tokens`.
int64_t kind_pages(int64_t ratio, int64_t sessions, int64_t tokens) { return ceil_div(tokens / ratio, 64) + sessions; }

// One layer's cache buffers, in bytes (resize_gpu_cache allocates these; gpu_layer_cache_bytes adds them up).
struct LayerCacheBytes {
    int64_t kv = 0;           // K=V pool: pass rows, window rings, entry pages
    int64_t state = 0;        // each compressor state buffer (open / prev, kv / score)
    int64_t keys = 0;         // CSA: indexer key pool
    int64_t index_state = 0;  // CSA: each indexer compressor state buffer
    int64_t width = 0, index_width = 0;
};

LayerCacheBytes layer_cache_bytes(const model::ModelConfig& cfg, backend::Precision precision, int64_t ratio,
                                  int64_t pass_rows, int64_t sessions, int64_t tokens) {
    LayerCacheBytes b;
    const bool csa = ratio == 4;
    const int64_t entry_base = pass_rows + cfg.window * sessions;
    const int64_t entry_rows = ratio ? 64 * kind_pages(ratio, sessions, tokens) : 0;
    b.kv = (entry_base + entry_rows) * cuda::kv_row_bytes(precision);
    if (ratio) {
        b.width = (csa ? 2 : 1) * cfg.head_dim;
        b.state = sessions * ratio * b.width * 4;
    }
    if (csa) {
        b.keys = entry_rows * cuda::key_row_bytes(precision);
        b.index_width = 2 * cfg.index_head_dim;
        b.index_state = sessions * ratio * b.index_width * 4;
    }
    return b;
}

Status make_kind(GpuModel& m, GpuCacheKind& k, int64_t ratio, int64_t sessions, int64_t max_context, int64_t tokens) {
    GpuCache& c = m.cache;
    k.ratio = ratio;
    if (!has_kind(m, ratio)) return Status::ok();
    k.pages_per_session = std::max<int64_t>(1, ceil_div(max_context / ratio, 64));
    k.pages = kind_pages(ratio, sessions, tokens);
    k.free.resize(size_t(k.pages));
    for (int64_t p = 0; p < k.pages; ++p) k.free[size_t(p)] = int32_t(k.pages - 1 - p);  // page 0 is taken first
    const int64_t table_bytes = sessions * k.pages_per_session * 4;
    DSV4_RETURN_IF_ERROR(alloc(k.table, table_bytes, "cache page table", &c.bytes));
    DSV4_ASSIGN_OR_RETURN(k.table_host, cuda::PinnedBuffer::allocate(size_t(table_bytes), "cache page table"));
    std::fill_n(k.table_host.as<int32_t>(), sessions * k.pages_per_session, 0);  // unused entries name page 0
    return k.table.upload(k.table_host.data(), size_t(table_bytes));
}

}  // namespace

namespace {

// One stage's caches (resize_gpu_cache).
Status resize_stage_cache(GpuModel& m, int64_t sessions, int64_t max_context, int64_t tokens) {
    std::lock_guard<std::mutex> lock(m.cache_lock);
    if (int64_t(m.cache.free_slots.size()) != m.cache.sessions)
        return internal_error("the GPU caches cannot be resized while sessions exist");
    if (sessions < 1 || max_context < 1 || tokens < 1)
        return invalid_argument("GPU cache: sessions, context and tokens must be >= 1");
    DSV4_RETURN_IF_ERROR(cuda::set_device(m.device));
    DSV4_RETURN_IF_ERROR(m.stream.synchronize());
    m.graphs.entries.clear();  // captured steps point into the old pools
    m.cache = GpuCache{};
    GpuCache& c = m.cache;
    const model::ModelConfig& cfg = m.cfg;
    c.sessions = sessions;
    c.window = cfg.window;
    c.pass_rows = m.pass.rows;
    c.entry_base = c.pass_rows + c.window * sessions;
    c.max_context = max_context;
    c.kv_row_bytes = cuda::kv_row_bytes(m.precision);
    c.key_row_bytes = cuda::key_row_bytes(m.precision);
    tokens = std::max(tokens, max_context);
    DSV4_RETURN_IF_ERROR(make_kind(m, c.csa, 4, sessions, max_context, tokens));
    DSV4_RETURN_IF_ERROR(make_kind(m, c.hca, 128, sessions, max_context, tokens));
    for (const GpuLayer& l : m.layers) {
        GpuLayerCache lc;
        const bool csa = l.kind == model::AttnKind::kCSA;
        if (csa != (l.ratio == 4))
            return internal_error("resize_gpu_cache: layer " + std::to_string(l.index) + " is " +
                                  (csa ? "CSA" : "not CSA") + " with ratio " + std::to_string(l.ratio));
        const LayerCacheBytes b = layer_cache_bytes(cfg, m.precision, l.ratio, c.pass_rows, sessions, tokens);
        DSV4_RETURN_IF_ERROR(alloc(lc.kv, b.kv, "K=V pool", &c.bytes));
        if (l.ratio) {
            lc.width = b.width;
            DSV4_RETURN_IF_ERROR(alloc(lc.open_kv, b.state, "compressor state", &c.bytes));
            DSV4_RETURN_IF_ERROR(alloc(lc.open_score, b.state, "compressor state", &c.bytes));
            if (csa) {
                DSV4_RETURN_IF_ERROR(alloc(lc.prev_kv, b.state, "compressor state", &c.bytes));
                DSV4_RETURN_IF_ERROR(alloc(lc.prev_score, b.state, "compressor state", &c.bytes));
            }
        }
        if (csa) {
            DSV4_RETURN_IF_ERROR(alloc(lc.keys, b.keys, "indexer key pool", &c.bytes));
            lc.index_width = b.index_width;
            for (DeviceBuffer* buf : {&lc.iopen_kv, &lc.iopen_score, &lc.iprev_kv, &lc.iprev_score})
                DSV4_RETURN_IF_ERROR(alloc(*buf, b.index_state, "indexer compressor state", &c.bytes));
        }
        c.layers.push_back(std::move(lc));
    }
    c.free_slots.resize(size_t(sessions));
    for (int64_t s = 0; s < sessions; ++s) c.free_slots[size_t(s)] = int32_t(sessions - 1 - s);
    return size_gpu_pass_for_cache(m);
}

}  // namespace

Status resize_gpu_cache(GpuModel& m, int64_t sessions, int64_t max_context, int64_t tokens) {
    for (GpuModel* s = &m; s; s = s->next.get())
        DSV4_RETURN_IF_ERROR(resize_stage_cache(*s, sessions, max_context, tokens));
    return Status::ok();
}

uint64_t gpu_layer_cache_bytes(const model::ModelConfig& cfg, backend::Precision precision, int64_t ratio,
                               int64_t pass_rows, int64_t sessions, int64_t max_context, int64_t tokens) {
    const LayerCacheBytes b =
        layer_cache_bytes(cfg, precision, ratio, pass_rows, sessions, std::max(tokens, max_context));
    return uint64_t(b.kv + (ratio == 4 ? 4 : ratio ? 2 : 0) * b.state + b.keys + 4 * b.index_state);
}

Status reserve_gpu_pages(GpuModel& m, GpuSequence& s, int64_t position) {
    std::lock_guard<std::mutex> lock(m.cache_lock);
    GpuCache& c = m.cache;
    struct Need {
        GpuCacheKind* kind;
        std::vector<int32_t>* held;
        int64_t pages;
    };
    Need needs[2] = {{&c.csa, &s.csa_pages, 0}, {&c.hca, &s.hca_pages, 0}};
    for (Need& n : needs) {
        if (!n.kind->pages) continue;
        n.pages = ceil_div(position / n.kind->ratio, 64);
        if (n.pages > n.kind->pages_per_session)
            return out_of_range("position " + std::to_string(position) + " is beyond the GPU cache's context of " +
                                std::to_string(c.max_context) + " tokens per session");
        const int64_t missing = n.pages - int64_t(n.held->size());
        if (missing > int64_t(n.kind->free.size()))
            return {StatusCode::kResourceExhausted,
                    "the GPU cache is full (" + std::to_string(n.kind->pages) + " pages of ratio-" +
                        std::to_string(n.kind->ratio) + " entries in use); end other sessions or load the engine "
                        "with a larger cache"};
    }
    for (Need& n : needs) {
        const int64_t first = int64_t(n.held->size());
        if (n.pages <= first) continue;
        int32_t* row = n.kind->table_host.as<int32_t>() + int64_t(s.slot) * n.kind->pages_per_session;
        for (int64_t j = first; j < n.pages; ++j) {
            row[j] = n.kind->free.back();
            n.kind->free.pop_back();
            n.held->push_back(row[j]);
        }
        DSV4_RETURN_IF_ERROR(cuda::copy_async(
            n.kind->table.as<int32_t>() + int64_t(s.slot) * n.kind->pages_per_session + first, row + first,
            size_t(n.pages - first) * 4, m.stream.handle()));
    }
    return Status::ok();
}

namespace {

void release_pages(GpuModel& m, GpuSequence& s) {
    for (int32_t p : s.csa_pages) m.cache.csa.free.push_back(p);
    for (int32_t p : s.hca_pages) m.cache.hca.free.push_back(p);
    s.csa_pages.clear();
    s.hca_pages.clear();
}

}  // namespace

void GpuSequenceDeleter::operator()(GpuSequence* s) const {
    if (s->model) {
        std::lock_guard<std::mutex> lock(s->model->cache_lock);
        release_pages(*s->model, *s);
        s->model->cache.free_slots.push_back(s->slot);
    }
    delete s;
}

namespace {

// One stage's sequence: a session slot of its caches.
Result<GpuSequencePtr> make_stage_sequence(GpuModel& m, int64_t max_context, int64_t chunk_rows) {
    std::lock_guard<std::mutex> lock(m.cache_lock);
    GpuCache& c = m.cache;
    if (max_context > c.max_context)
        return out_of_range("a context of " + std::to_string(max_context) + " tokens exceeds the GPU cache's " +
                            std::to_string(c.max_context) + " tokens per session (EngineOptions::cuda_max_context)");
    if (c.free_slots.empty())
        return Status(StatusCode::kResourceExhausted, "all " + std::to_string(c.sessions) +
                                                          " GPU session slots are in use (EngineOptions::cuda_sessions)");
    static std::atomic<uint64_t> next_id{1};
    GpuSequencePtr s(new GpuSequence);
    s->id = next_id++;
    s->model = &m;
    s->slot = c.free_slots.back();
    c.free_slots.pop_back();
    s->max_context = max_context;
    s->chunk_rows = std::min(chunk_rows, m.pass.rows);
    return s;
}

}  // namespace

Result<GpuSequencePtr> make_gpu_sequence(GpuModel& m, int64_t max_context, int64_t chunk_rows) {
    DSV4_ASSIGN_OR_RETURN(GpuSequencePtr s, make_stage_sequence(m, max_context, chunk_rows));
    if (m.next) {
        DSV4_ASSIGN_OR_RETURN(s->next, make_gpu_sequence(*m.next, max_context, chunk_rows));
    }
    return s;
}

int64_t gpu_position(const GpuSequence& s) { return s.position; }
int64_t gpu_chunk_rows(const GpuSequence& s) { return s.chunk_rows; }

void reset_gpu_sequence(GpuSequence& s) {
    for (GpuSequence* q = &s; q; q = q->next.get()) {
        if (q->model) {
            std::lock_guard<std::mutex> lock(q->model->cache_lock);
            release_pages(*q->model, *q);
        }
        q->position = 0;
    }
}

}  // namespace dsv4::engine
