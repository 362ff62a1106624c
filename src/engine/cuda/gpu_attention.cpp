// The attention sub-block on the GPU (MODEL_SPEC §5.4, §6, §8): the CPU's attention_block.cpp step for step (its
// file comment describes the order), over the paged caches of gpu_internal.h. A pass runs each sequence's share in
// turn, with sizes that depend on the positions (windows closing, entries visible) known on the host; a decode
// step (one token per sequence) runs every sequence at once with kernels that read positions, slots and page
// tables on the device, so its launches never change and it replays as a CUDA graph.
#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cuda/kernels/attention/attention.h"
#include "backend/cuda/kernels/compressor_decode/compressor_decode.h"
#include "backend/cuda/kernels/glue/glue.h"
#include "backend/cuda/kernels/indexer/indexer.h"
#include "backend/cuda/kernels/kv_finish/kv_finish.h"
#include "backend/cuda/kernels/kv_store/kv_store.h"
#include "backend/cuda/kernels/linear/linear.h"
#include "backend/cuda/kernels/norm_rope/norm_rope.h"
#include "engine/cuda/gpu_internal.h"

namespace dsv4::engine {

using backend::CompressedKind;
using backend::LinearOut;
using backend::Precision;

namespace {

Status rope(GpuModel& m, void* x, int64_t rows, int64_t vecs, int64_t stride, int64_t offset,
            const int64_t* positions, const backend::RopeFreqs& freqs) {
    cuda::RopeArgs r;
    r.x = x;
    r.tokens = rows;
    r.vecs = vecs;
    r.vec_stride = stride;
    r.offset = offset;
    r.positions = positions;
    r.freqs = freqs;
    return cuda::sm90_rope(m.precision, r, m.stream.handle());
}

// Compressor projections of all rows: kv, score f32 [rows, width], ape added to the score unless `decode` (the
// decode compressor adds it in its own launch: CompressorDecodeArgs::ape). On stream `st` with workspace `ws`.
Status project_rows(GpuModel& m, const GpuCompressor& w, int64_t ratio, int64_t rows, void* kv, void* score,
                    const QuantizedRows& normed_q, bool decode, cuda::StreamHandle st, const DeviceBuffer& ws) {
    const void* x = m.pass.normed.data();
    DSV4_RETURN_IF_ERROR(gpu_linear_pair_on(m, st, ws, x, rows, w.wkv, kv, w.wgate, score, LinearOut::kF32, normed_q));
    if (decode) return Status::ok();
    cuda::AddApeArgs a;
    a.score = static_cast<float*>(score);
    a.rows = rows;
    a.width = w.wkv.rows;
    a.ratio = ratio;
    a.positions = m.pass.positions;
    a.ape = w.ape;
    return cuda::sm90_add_ape(a, st);
}

// The indexer's queries and head weights for all rows of the pass (backend::cpu::indexer_q / indexer_weights).
// beside: the head weights were projected on m.weights_branch, joined here before they are scaled.
Status indexer_rows(GpuModel& m, const GpuLayer& layer, int64_t rows, const QuantizedRows& normed_q,
                    const QuantizedRows& qr_q, bool beside) {
    const model::ModelConfig& c = m.cfg;
    GpuPass& s = m.pass;
    const cuda::StreamHandle st = m.stream.handle();
    const int64_t ih = c.index_n_heads, ihd = c.index_head_dim;
    const bool ref = m.precision == Precision::kReference;
    const float w_scale = float(1.0 / std::sqrt(double(ihd)) / std::sqrt(double(ih)));
    if (!beside)
        DSV4_RETURN_IF_ERROR(gpu_linear(m, s.normed.data(), rows, layer.attn.index_weights_proj, LinearOut::kBF16,
                                        s.index_w.data(), normed_q));
    if (!ref) {
        DSV4_RETURN_IF_ERROR(
            gpu_linear(m, s.qr.data(), rows, layer.attn.index_wq_b, LinearOut::kBF16, s.index_q.data(), qr_q));
        DSV4_RETURN_IF_ERROR(
            rope(m, s.index_q.data(), rows, ih, ihd, ihd - c.rope_head_dim, s.positions, m.freqs_compress));
        if (beside) DSV4_RETURN_IF_ERROR(m.weights_branch.join(st));
        return cuda::sm90_scale(m.precision, {.x = s.index_w.data(), .n = rows * ih, .scale = w_scale}, st);
    }
    // reference: where the projection splits K (decode) the finish reduces its partial sums itself; the finish also
    // scales the head weights (projected first, so that the query projection's partials stay in the workspace)
    cuda::Fp8GemmPartials parts;
    DSV4_RETURN_IF_ERROR(
        gpu_linear(m, s.qr.data(), rows, layer.attn.index_wq_b, LinearOut::kBF16, s.index_q.data(), qr_q, &parts));
    // RoPE, Hadamard and the FP4 simulation in one launch (the config validation fixes the 128-wide head and its 64
    // rotated channels)
    cuda::IndexerQFinishArgs qf;
    qf.q = s.index_q.data();
    qf.tokens = rows;
    qf.heads = ih;
    qf.positions = s.positions;
    qf.freqs = m.freqs_compress;
    qf.q_int = s.index_q_int.as<int8_t>();
    qf.q_exp = s.index_q_exp.as<int8_t>();
    qf.partials = parts.partial;
    qf.splits = parts.splits;
    qf.w = s.index_w.data();
    qf.w_scale = w_scale;
    if (beside) DSV4_RETURN_IF_ERROR(m.weights_branch.join(st));
    return cuda::sm90_indexer_q_finish(qf, st);
}

bool packed(const GpuModel& m) { return m.precision == Precision::kReference; }

// The entries of a compressed layer's kind in its K=V pool, and the CSA indexer keys in their pool.
cuda::PagedEntries kv_entries(GpuModel& m, const GpuLayer& layer) {
    const GpuCacheKind& k = m.cache.kind(layer.ratio);
    return {m.cache.entry_base, k.table.as<int32_t>(), k.pages_per_session};
}
cuda::PagedEntries key_entries(GpuModel& m) {
    return {0, m.cache.csa.table.as<int32_t>(), m.cache.csa.pages_per_session};
}

// Scatters finished rows (pass.pooled [n, c]) to the pool rows in pass.entry_rows.
Status pack_entries(GpuModel& m, bool keys, void* pool, int64_t n) {
    if (keys) {
        cuda::KeyPackArgs k;
        k.rows = m.pass.pooled.data();
        k.n = n;
        k.dst_rows = m.pass.entry_rows.as<int32_t>();
        k.pool = pool;
        return cuda::sm90_key_pack(m.precision, k, m.stream.handle());
    }
    cuda::KvPackArgs k;
    k.rows = m.pass.pooled.data();
    k.n = n;
    k.dst_rows = m.pass.entry_rows.as<int32_t>();
    k.pool = pool;
    return cuda::sm90_kv_pack(m.precision, k, m.stream.handle());
}

// One compressor's running state of one session slot (f32 [m, width] each; prev null for HCA).
struct SlotState {
    float *open_kv, *open_score, *prev_kv, *prev_score;
};

// Absorbs one sequence's n rows into one compressor (the CPU's absorb_compressor): the open window's buffered
// projections and the chunk's form a series in pass.series_*; every complete window becomes an entry, packed into
// its page of `pool`; the last complete window becomes the previous window (CSA), the rest stays open.
Status absorb_compressor(GpuModel& m, const GpuSequence& seq, const GpuCompressor& w, SlotState st_, int64_t ratio,
                         int64_t width, bool overlap, CompressedKind kind, int64_t head_dim, const uint8_t* kv,
                         const uint8_t* score, int64_t n, int64_t p0, const cuda::PagedEntries& entries, void* pool,
                         int64_t* emitted) {
    const cuda::StreamHandle st = m.stream.handle();
    const int64_t mm = ratio, row = width * 4;
    const int64_t buffered = p0 % mm, entries_before = p0 / mm;
    uint8_t* skv = m.pass.series_kv.as<uint8_t>();
    uint8_t* ssc = m.pass.series_score.as<uint8_t>();
    DSV4_RETURN_IF_ERROR(cuda::copy_async(skv, st_.open_kv, size_t(buffered * row), st));
    DSV4_RETURN_IF_ERROR(cuda::copy_async(ssc, st_.open_score, size_t(buffered * row), st));
    DSV4_RETURN_IF_ERROR(cuda::copy_async(skv + buffered * row, kv, size_t(n * row), st));
    DSV4_RETURN_IF_ERROR(cuda::copy_async(ssc + buffered * row, score, size_t(n * row), st));
    const int64_t total = buffered + n, windows = total / mm;
    if (windows > 0) {
        const bool has_prev = overlap && entries_before > 0;
        cuda::CompressorPoolArgs pl;
        pl.kv = reinterpret_cast<const float*>(skv);
        pl.score = reinterpret_cast<const float*>(ssc);
        pl.prev_kv = has_prev ? st_.prev_kv : nullptr;
        pl.prev_score = has_prev ? st_.prev_score : nullptr;
        pl.n_windows = windows;
        pl.ratio = mm;
        pl.head_dim = head_dim;
        pl.overlap = overlap;
        pl.out = m.pass.pooled.data();
        DSV4_RETURN_IF_ERROR(cuda::sm90_compressor_pool(m.precision, pl, st));
        cuda::CompressorFinishArgs fp;
        fp.pooled = m.pass.pooled.data();
        fp.n = windows;
        fp.head_dim = head_dim;
        fp.ratio = mm;
        fp.first_window = entries_before;
        fp.kind = kind;
        fp.norm = w.norm;
        fp.freqs = m.freqs_compress;
        fp.eps = float(m.cfg.rms_norm_eps);
        fp.out = m.pass.pooled.data();
        DSV4_RETURN_IF_ERROR(cuda::sm90_compressor_finish(m.precision, fp, st));
        cuda::EntryRowsArgs er;
        er.rows = m.pass.entry_rows.as<int32_t>();
        er.n = windows;
        er.first = entries_before;
        er.slot = seq.slot;
        er.entries = entries;
        DSV4_RETURN_IF_ERROR(cuda::sm90_entry_rows(er, st));
        DSV4_RETURN_IF_ERROR(pack_entries(m, kind == CompressedKind::kIndexer, pool, windows));
        if (overlap) {
            DSV4_RETURN_IF_ERROR(cuda::copy_async(st_.prev_kv, skv + (windows - 1) * mm * row, size_t(mm * row), st));
            DSV4_RETURN_IF_ERROR(
                cuda::copy_async(st_.prev_score, ssc + (windows - 1) * mm * row, size_t(mm * row), st));
        }
    }
    const int64_t rest = total - windows * mm;
    DSV4_RETURN_IF_ERROR(cuda::copy_async(st_.open_kv, skv + windows * mm * row, size_t(rest * row), st));
    DSV4_RETURN_IF_ERROR(cuda::copy_async(st_.open_score, ssc + windows * mm * row, size_t(rest * row), st));
    *emitted = windows;
    return Status::ok();
}

SlotState slot_state(const DeviceBuffer& ok, const DeviceBuffer& os, const DeviceBuffer& pk, const DeviceBuffer& ps,
                     int64_t slot, int64_t ratio, int64_t width) {
    const int64_t off = slot * ratio * width;
    return {ok.as<float>() + off, os.as<float>() + off, pk.data() ? pk.as<float>() + off : nullptr,
            ps.data() ? ps.as<float>() + off : nullptr};
}

// Indexer scores over the sequence's paged keys and top-k for n rows from r0 into pass.index_topk [n, topk]; or,
// given a decode step's candidate lists `list`, into those lists (the select writes them: TopKArgs::list). A pass
// whose scores outgrow the scores buffer (GpuModel::index_scores_budget) runs in row chunks that fit it.
Status run_indexer(GpuModel& m, const GpuLayerCache& lc, int64_t r0, int64_t n, int64_t n_entries, bool decode,
                   const cuda::AttnIndexArgs* list = nullptr) {
    const model::ModelConfig& c = m.cfg;
    GpuPass& s = m.pass;
    const cuda::StreamHandle st = m.stream.handle();
    const int64_t a = int64_t(m.act_bytes), k = c.index_topk, pages = m.cache.csa.pages_per_session;
    if (n_entries == 0) {
        DSV4_RETURN_IF_ERROR(cuda::fill_async(s.index_topk.data(), 0xff, size_t(n * k) * 4, st));  // all -1
        if (!list) return Status::ok();
        cuda::AttnIndexArgs ia = *list;
        ia.picks = s.index_topk.as<int32_t>();
        return cuda::sm90_attn_index(ia, st);
    }
    int64_t fit = int64_t(s.index_scores.bytes()) / (n_entries * a);
    const int64_t wave = cuda::indexer_scores_wave_tokens();
    if (fit < n && fit > wave) fit -= fit % wave;  // each chunk whole waves of the scores kernel
    if (fit < (decode ? n : 1))
        return internal_error("run_indexer: the scores buffer holds " + std::to_string(fit) + " rows of " +
                              std::to_string(n_entries) + " entries, a decode step needs " + std::to_string(n));
    for (int64_t i = 0; i < n; i += fit) {
        const int64_t rows = std::min(fit, n - i), row = r0 + i;
        cuda::IndexerScoresArgs sp;
        sp.q = at(s.index_q, row * c.index_n_heads * c.index_head_dim * a);
        sp.keys = lc.keys.data();
        sp.keys_packed = packed(m);
        if (m.precision == Precision::kReference) {  // sm90_indexer_q_finish wrote the query's integer form
            sp.q_int = s.index_q_int.as<int8_t>() + row * c.index_n_heads * c.index_head_dim;
            sp.q_exp = s.index_q_exp.as<int8_t>() + row * c.index_n_heads * 4;
        }
        sp.key_pages = s.token_pages.as<int32_t>() + row * pages;
        sp.pages_per_token = pages;
        sp.w = at(s.index_w, row * c.index_n_heads * a);
        sp.tokens = rows;
        sp.heads = c.index_n_heads;
        sp.n = n_entries;
        sp.ratio = 4;
        sp.positions = s.positions + row;
        sp.scores = s.index_scores.data();
        sp.visible_only = decode;
        DSV4_RETURN_IF_ERROR(cuda::sm90_indexer_scores(m.precision, sp, st));
        cuda::TopKArgs tp;
        tp.scores = s.index_scores.data();
        tp.rows = rows;
        tp.n = n_entries;
        tp.k = k;
        tp.idx = s.index_topk.as<int32_t>() + i * k;
        if (decode) {
            tp.positions = s.positions + r0;
            tp.ratio = 4;
            // the split attention reads the picks as a set (class F, like its per-chunk maxima:
            // decode_split_options); the sort was ~1/3 of a one-block select (docs/kernels/attention.md, "Unsorted
            // picks at decode")
            tp.sorted = false;
            // the lists straight from the select: sm90_attn_index's launch off the chain
            if (list) tp.list = *list, tp.idx = nullptr;
            // counters kept zero: the chunked path (one long row) needs no memset node in the decode graph
            tp.counters = s.select_counters.as<unsigned>();
        }
        DSV4_RETURN_IF_ERROR(
            cuda::sm90_topk_select(m.precision, tp, s.attn_workspace.data(), s.attn_workspace.bytes(), st));
    }
    return Status::ok();
}

// Decode (one query per sequence) splits the candidates over CTAs when the split kernel would cut the lists into
// more than one chunk; with one chunk it would only add passes (docs/kernels/attention.md, dispatch rule). The lists
// index the layer's pool, or (local_rows > 0) the pass's local rows decoded to bf16 once (decode_pass_rows).
Status attend(GpuModel& m, const GpuLayer& layer, const GpuLayerCache& lc, int64_t r0, int64_t n, int64_t width,
              bool decode, int64_t local_rows = 0) {
    const model::ModelConfig& c = m.cfg;
    GpuPass& s = m.pass;
    const int64_t a = int64_t(m.act_bytes), hd = c.head_dim, heads = c.num_heads;
    cuda::SparseAttnArgs ap;
    ap.q = at(s.q, r0 * heads * hd * a);
    ap.kv = local_rows > 0 ? s.pass_kv.data() : lc.kv.data();
    ap.kv_packed = packed(m) && local_rows == 0;
    ap.idx = s.idx.as<int32_t>();
    ap.tokens = n;
    ap.heads = heads;
    ap.n_kv = local_rows > 0 ? local_rows : int64_t(lc.kv.bytes()) / m.cache.kv_row_bytes;
    ap.topk = width;
    ap.sink = layer.attn.sink;
    ap.scale = float(1.0 / std::sqrt(double(hd)));
    ap.derotate = true;  // the output's rope slice back to the query position (§5.4.8), fused
    ap.positions = s.positions + r0;
    ap.freqs = layer.ratio ? m.freqs_compress : m.freqs_window;
    ap.out = at(s.attn, r0 * heads * hd * a);
    const cuda::SparseAttnSplitOptions split = decode_split_options();
    const int64_t chunk = decode ? cuda::sm90_sparse_attn_split_chunk(ap, split) : 0;
    if (chunk > 0 && chunk < width)
        return cuda::sm90_sparse_attn_split(m.precision, ap, s.attn_workspace.data(), s.attn_workspace.bytes(),
                                            m.stream.handle(), split);
    return cuda::sm90_sparse_attn(m.precision, ap, m.stream.handle());
}

// A prefill pass on the wgmma kernel gathers each of its sequence's K=V rows for ~100s of queries; decoded from the
// packed pool each time, that decode was the kernel's limit. When the pass buffers hold them (size_gpu_pass_for_cache)
// the rows its lists can name — its own window rows, the slot's ring, the sequence's n_entries entries — are decoded
// to bf16 once and the lists index those (AttnIndexArgs::pass_local); the kernel then copies rows, and the output
// is the same bits (the same bf16 values in the same tiles). Returns the local row count, 0 where this does not apply
// or does not pay: decoding a row once costs about what decoding it in the kernel saves for ~0.7 of its uses
// (≈ 1.6 KB moved against ≈ 0.6 ns of kernel time per gathered row, docs/kernels/attention.md), so the lists must
// gather at least twice as many rows as there are local rows — a short pass of a long CSA context does not.
Result<int64_t> decode_pass_rows(GpuModel& m, const GpuLayerCache& lc, const GpuSequence& seq, int64_t r0, int64_t n,
                                 int64_t width, int64_t n_entries, const cuda::PagedEntries& entries) {
    const GpuPass& s = m.pass;
    const GpuCache& cache = m.cache;
    cuda::SparseAttnArgs probe;
    probe.tokens = n, probe.heads = m.cfg.num_heads, probe.kv_packed = false;
    const int64_t local = cuda::pass_local_rows(n, cache.window, n_entries);
    if (!packed(m) || !cuda::sparse_attn_takes_prefill_kernel(m.precision, probe) || n * width < 2 * local ||
        int64_t(s.pass_kv.bytes()) < local * m.cfg.head_dim * int64_t(m.act_bytes) ||
        int64_t(s.pass_row_src.bytes()) < local * 4)
        return int64_t(0);
    cuda::PassRowsArgs pr;
    pr.rows = s.pass_row_src.as<int32_t>();
    pr.n = n, pr.window = cache.window, pr.row0 = r0, pr.pass_rows = cache.pass_rows, pr.n_entries = n_entries;
    pr.slot = int32_t(seq.slot);
    pr.entries = entries;
    const cuda::StreamHandle st = m.stream.handle();
    DSV4_RETURN_IF_ERROR(cuda::sm90_pass_rows(pr, st));
    DSV4_RETURN_IF_ERROR(
        cuda::sm90_kv_unpack(m.precision, lc.kv.data(), s.pass_row_src.as<int32_t>(), local, s.pass_kv.data(), st));
    return local;
}

// Steps 2-4 and the ring for one sequence's share of n rows from r0 (its window K=V is in pass rows r0..).
Status sequence_attention(GpuModel& m, const GpuLayer& layer, int layer_slot, GpuSequence& seq, int64_t r0,
                          int64_t n) {
    const model::ModelConfig& c = m.cfg;
    GpuPass& s = m.pass;
    GpuCache& cache = m.cache;
    GpuLayerCache& lc = cache.layers[size_t(layer_slot)];
    const cuda::StreamHandle st = m.stream.handle();
    const int64_t hd = c.head_dim, p0 = seq.position, window = cache.window, slot = seq.slot;
    const bool csa = layer.kind == model::AttnKind::kCSA, hca = layer.kind == model::AttnKind::kHCA;

    int64_t n_entries = 0;
    if (layer.ratio) {
        int64_t emitted = 0;
        const SlotState ss = slot_state(lc.open_kv, lc.open_score, lc.prev_kv, lc.prev_score, slot, layer.ratio, lc.width);
        DSV4_RETURN_IF_ERROR(absorb_compressor(m, seq, layer.attn.compressor, ss, layer.ratio, lc.width, csa,
                                               CompressedKind::kMain, hd, at(s.proj_kv, r0 * lc.width * 4),
                                               at(s.proj_score, r0 * lc.width * 4), n, p0, kv_entries(m, layer),
                                               lc.kv.data(), &emitted));
        n_entries = p0 / layer.ratio + emitted;
    }
    if (csa) {
        int64_t emitted = 0;
        const SlotState ss = slot_state(lc.iopen_kv, lc.iopen_score, lc.iprev_kv, lc.iprev_score, slot, 4, lc.index_width);
        DSV4_RETURN_IF_ERROR(absorb_compressor(m, seq, layer.attn.index_compressor, ss, 4, lc.index_width, true,
                                               CompressedKind::kIndexer, c.index_head_dim,
                                               at(s.index_proj_kv, r0 * lc.index_width * 4),
                                               at(s.index_proj_score, r0 * lc.index_width * 4), n, p0,
                                               key_entries(m), lc.keys.data(), &emitted));
        DSV4_RETURN_IF_ERROR(run_indexer(m, lc, r0, n, n_entries, false));
    }

    // index lists [window | compressed] as pool rows (DeepSeek's layouts; see attention_block.cpp step 4)
    const int64_t topk = c.index_topk;
    const int64_t win_cols = (p0 == 0 && n < window) ? n : window;
    const int64_t width = win_cols + (csa ? topk : hca ? n_entries : 0);
    cuda::AttnIndexArgs ia;
    ia.idx = s.idx.as<int32_t>();
    ia.n = n;
    ia.win_cols = win_cols;
    ia.window = window;
    ia.positions = s.positions + r0;
    ia.p0 = p0;
    ia.row0 = r0;
    ia.slot = int32_t(slot);
    ia.pass_rows = cache.pass_rows;
    if (layer.ratio) ia.entries = kv_entries(m, layer);
    ia.picks = csa ? s.index_topk.as<int32_t>() : nullptr;
    ia.topk = csa ? topk : 0;
    ia.hca_entries = hca ? n_entries : 0;
    ia.ratio = layer.ratio;
    DSV4_ASSIGN_OR_RETURN(const int64_t local_rows, decode_pass_rows(m, lc, seq, r0, n, width, n_entries, ia.entries));
    ia.pass_local = local_rows > 0;
    DSV4_RETURN_IF_ERROR(cuda::sm90_attn_index(ia, st));
    DSV4_RETURN_IF_ERROR(attend(m, layer, lc, r0, n, width, false, local_rows));

    // the ring keeps the last `window` positions: runs of consecutive ring rows
    const int64_t rb = cache.kv_row_bytes;
    uint8_t* pool = lc.kv.as<uint8_t>();
    for (int64_t q = std::max(p0, p0 + n - window); q < p0 + n;) {
        const int64_t run = std::min(p0 + n - q, window - q % window);
        DSV4_RETURN_IF_ERROR(cuda::copy_async(pool + (cache.pass_rows + window * slot + q % window) * rb,
                                              pool + (r0 + q - p0) * rb, size_t(run * rb), st));
        q += run;
    }
    return Status::ok();
}

// Decode form of one compressor for every row at once (each row its session's single new token): the tokens join
// their open windows; the windows they close are pooled, finished and packed into their pages; CSA keeps each
// closed window as the previous one. One launch (sm90_compressor_decode_fused) decides from the positions on the
// device.
Status decode_compressor(GpuModel& m, const GpuCompressor& w, const DeviceBuffer& ok, const DeviceBuffer& os,
                         const DeviceBuffer& pk, const DeviceBuffer& ps, int64_t ratio, bool overlap,
                         CompressedKind kind, int64_t head_dim, const void* kv, const void* score, int64_t rows,
                         const cuda::PagedEntries& entries, void* pool, bool independent_of_previous,
                         cuda::StreamHandle st) {
    cuda::CompressorDecodeArgs d;
    d.n = rows;
    d.positions = m.pass.positions;
    d.slots = m.pass.slots;
    d.kv = static_cast<const float*>(kv);
    d.score = static_cast<const float*>(score);
    d.ape = w.ape;  // project_rows leaves it to this launch at decode
    d.ratio = ratio;
    d.head_dim = head_dim;
    d.overlap = overlap;
    d.kind = kind;
    d.open_kv = ok.as<float>();
    d.open_score = os.as<float>();
    d.prev_kv = overlap ? pk.as<float>() : nullptr;
    d.prev_score = overlap ? ps.as<float>() : nullptr;
    d.norm = w.norm;
    d.freqs = m.freqs_compress;
    d.eps = float(m.cfg.rms_norm_eps);
    d.entries = entries;
    d.pool = pool;
    d.independent_of_previous = independent_of_previous;
    return cuda::sm90_compressor_decode_fused(m.precision, d, st);
}

// The main compressor's decode launch: the step's closing windows into the layer's K=V pool.
Status decode_main_compressor(GpuModel& m, const GpuLayer& layer, int layer_slot, int64_t rows, cuda::StreamHandle st) {
    GpuLayerCache& lc = m.cache.layers[size_t(layer_slot)];
    return decode_compressor(m, layer.attn.compressor, lc.open_kv, lc.open_score, lc.prev_kv, lc.prev_score,
                             layer.ratio, layer.kind == model::AttnKind::kCSA, CompressedKind::kMain, m.cfg.head_dim,
                             m.pass.proj_kv.data(), m.pass.proj_score.data(), rows, kv_entries(m, layer), lc.kv.data(),
                             false, st);
}

// The indexer compressor's decode launch: the step's closing windows into the layer's key pool. independent: it
// directly follows the main compressor's launch, whose windows and pool rows it does not touch, so it may run
// alongside it (CompressorDecodeArgs::independent_of_previous).
Status decode_index_compressor(GpuModel& m, const GpuLayer& layer, int layer_slot, int64_t rows, bool independent,
                               cuda::StreamHandle st) {
    GpuLayerCache& lc = m.cache.layers[size_t(layer_slot)];
    return decode_compressor(m, layer.attn.index_compressor, lc.iopen_kv, lc.iopen_score, lc.iprev_kv, lc.iprev_score,
                             4, true, CompressedKind::kIndexer, m.cfg.index_head_dim, m.pass.index_proj_kv.data(),
                             m.pass.index_proj_score.data(), rows, key_entries(m), lc.keys.data(), independent, st);
}

// Entries of a cache kind that a decode step's indexer scan or HCA list covers: its span's (GpuPass::decode_span) in
// whole pages, at most a session's capacity; every row's visible entries, (position + 1) / ratio, lie below.
// Sized by the capacity (1M tokens by default), a batch-1 step at 8K context scanned 262,144 CSA entries' tiles and
// listed 8,192 HCA entries per row (docs/perf.md).
int64_t decode_entries(const GpuModel& m, const GpuCacheKind& k) {
    const int64_t capacity = 64 * k.pages_per_session;
    if (m.pass.decode_span <= 0) return capacity;
    const int64_t pages = (m.pass.decode_span / k.ratio + 63) / 64;
    return std::min(capacity, 64 * std::max<int64_t>(pages, 1));
}

// Steps 2-4 and the rings for a decode step: every row at once. The indexer scans the step's span of key entries
// but computes only the visible keys; HCA lists the span's entry slots, invisible ones -1 (whole blocks of -1 change
// nothing).
// beside: the window K=V, the main compressor and (CSA) the query heads ran on branches (m.attn_branch,
// m.compress_branch, m.heads_branch), joined here before the attention reads them; CSA: the indexer compressor on
// m.index_branch, joined before the indexer scores read its keys.
Status decode_attention(GpuModel& m, const GpuLayer& layer, int layer_slot, int64_t rows, bool beside) {
    const model::ModelConfig& c = m.cfg;
    GpuPass& s = m.pass;
    GpuCache& cache = m.cache;
    GpuLayerCache& lc = cache.layers[size_t(layer_slot)];
    const cuda::StreamHandle st = m.stream.handle();
    const bool csa = layer.kind == model::AttnKind::kCSA, hca = layer.kind == model::AttnKind::kHCA;
    if (layer.ratio && !beside) DSV4_RETURN_IF_ERROR(decode_main_compressor(m, layer, layer_slot, rows, st));
    const int64_t topk = c.index_topk;
    const int64_t hca_cap = hca ? decode_entries(m, cache.hca) : 0;
    const int64_t width = cache.window + (csa ? topk : hca_cap);
    cuda::AttnIndexArgs ia;
    ia.idx = s.idx.as<int32_t>();
    ia.n = rows;
    ia.win_cols = cache.window;
    ia.window = cache.window;
    ia.positions = s.positions;
    ia.decode = true;
    ia.slots = s.slots;
    ia.pass_rows = cache.pass_rows;
    if (layer.ratio) ia.entries = kv_entries(m, layer);
    ia.topk = csa ? topk : 0;
    ia.hca_entries = hca_cap;
    ia.ratio = layer.ratio;
    if (csa) {  // the select writes the lists (the window part too): no sm90_attn_index launch
        if (beside) {
            DSV4_RETURN_IF_ERROR(m.index_branch.join(st));
        } else {  // right after the main compressor (CSA layers always have one)
            DSV4_RETURN_IF_ERROR(decode_index_compressor(m, layer, layer_slot, rows, true, st));
        }
        DSV4_RETURN_IF_ERROR(run_indexer(m, lc, 0, rows, decode_entries(m, cache.csa), true, &ia));
    } else {
        DSV4_RETURN_IF_ERROR(cuda::sm90_attn_index(ia, st));
    }
    if (beside) {
        DSV4_RETURN_IF_ERROR(m.attn_branch.join(st));
        if (layer.ratio) DSV4_RETURN_IF_ERROR(m.compress_branch.join(st));
        if (csa) DSV4_RETURN_IF_ERROR(m.heads_branch.join(st));
    }
    DSV4_RETURN_IF_ERROR(attend(m, layer, lc, 0, rows, width, true));
    cuda::RingStoreArgs rs;
    rs.n = rows;
    rs.positions = s.positions;
    rs.slots = s.slots;
    rs.pool = lc.kv.data();
    rs.row_bytes = cache.kv_row_bytes;
    rs.pass_rows = cache.pass_rows;
    rs.window = cache.window;
    return cuda::sm90_ring_store(rs, st);
}

// The window K=V of the pass's rows: wkv, then norm + RoPE + packing into the pass rows of the layer's pool.
Status window_kv(GpuModel& m, const GpuLayer& layer, int layer_slot, int64_t rows, const QuantizedRows& normed_q,
                 cuda::StreamHandle st, const DeviceBuffer& ws) {
    const GpuAttention& w = layer.attn;
    DSV4_RETURN_IF_ERROR(gpu_linear_on(m, st, ws, m.pass.normed.data(), rows, w.wkv, LinearOut::kBF16,
                                       m.pass.window_kv.data(), normed_q));
    cuda::WindowKvFinishArgs kf;
    kf.kv = m.pass.window_kv.data();
    kf.tokens = rows;
    kf.kv_norm = w.kv_norm;
    kf.positions = m.pass.positions;
    kf.freqs = layer.ratio ? m.freqs_compress : m.freqs_window;
    kf.eps = float(m.cfg.rms_norm_eps);
    kf.pool = m.cache.layers[size_t(layer_slot)].kv.data();  // packed into the pass rows of the layer's pool
    kf.pool_first = 0;
    return cuda::sm90_window_kv_finish(m.precision, kf, st);
}

}  // namespace

Status gpu_attention_block(GpuModel& m, const GpuLayer& layer, int layer_slot, std::span<GpuBatchSeq> seqs,
                           int64_t rows, bool decode, const QuantizedRows& normed_q) {
    const model::ModelConfig& c = m.cfg;
    GpuPass& s = m.pass;
    const GpuAttention& w = layer.attn;
    const cuda::StreamHandle st = m.stream.handle();
    const int64_t hd = c.head_dim, heads = c.num_heads;
    const float eps = float(c.rms_norm_eps);
    const backend::RopeFreqs& freqs = layer.ratio ? m.freqs_compress : m.freqs_window;

    // 1. row-wise: q path, window K=V (packed into the pass rows of the layer's pool), compressor projections, the
    //    indexer's queries and weights
    //    normed (and qr after its norm) are quantised once, by the norms' launches, for the W8A8 linears that read
    //    them (up to 7 and 2)
    //    A decode step runs on graph branches beside the query path what only later steps read, each joined where
    //    it is first read: the window K=V (m.attn_branch) and the main compressor (projections and window close,
    //    m.compress_branch), joined before the attention; CSA: the indexer's compressor (m.index_branch), joined
    //    before the indexer scores read its keys, its head weights (m.weights_branch), joined before the query finish
    //    scales them, and the query heads (wq_b, head norm and RoPE, m.heads_branch) beside the indexer's queries,
    //    joined before the attention. One branch per chain: two chains on one branch were the step's critical path
    //    (docs/perf.md, "The decode step's critical path").
    const bool csa = layer.kind == model::AttnKind::kCSA;
    const bool beside = decode && rows <= kAttnBranchMaxRows;
    if (beside && csa) {
        DSV4_RETURN_IF_ERROR(m.weights_branch.fork(st));
        DSV4_RETURN_IF_ERROR(gpu_linear_on(m, m.weights_branch.side(), s.weights_branch_workspace, s.normed.data(),
                                           rows, w.index_weights_proj, LinearOut::kBF16, s.index_w.data(), normed_q));
        const cuda::StreamHandle side = m.index_branch.side();
        DSV4_RETURN_IF_ERROR(m.index_branch.fork(st));
        DSV4_RETURN_IF_ERROR(project_rows(m, w.index_compressor, layer.ratio, rows, s.index_proj_kv.data(),
                                          s.index_proj_score.data(), normed_q, decode, side, s.index_branch_workspace));
        DSV4_RETURN_IF_ERROR(decode_index_compressor(m, layer, layer_slot, rows, false, side));
    }
    if (beside) {
        DSV4_RETURN_IF_ERROR(m.attn_branch.fork(st));
        DSV4_RETURN_IF_ERROR(
            window_kv(m, layer, layer_slot, rows, normed_q, m.attn_branch.side(), s.attn_branch_workspace));
        if (layer.ratio) {
            const cuda::StreamHandle side = m.compress_branch.side();
            DSV4_RETURN_IF_ERROR(m.compress_branch.fork(st));
            DSV4_RETURN_IF_ERROR(project_rows(m, w.compressor, layer.ratio, rows, s.proj_kv.data(), s.proj_score.data(),
                                              normed_q, decode, side, s.compress_branch_workspace));
            DSV4_RETURN_IF_ERROR(decode_main_compressor(m, layer, layer_slot, rows, side));
        }
    }
    DSV4_RETURN_IF_ERROR(gpu_linear(m, s.normed.data(), rows, w.wq_a, LinearOut::kBF16, s.qr.data(), normed_q));
    // qr's codes from its norm, for wq_b and (CSA) the indexer's wq_b: no quantisation launch on the query path
    DSV4_ASSIGN_OR_RETURN(const QuantizedRows qr_q,
                          quantized_rows_in(m, s.qr.data(), rows, c.q_lora_rank, s.qr_codes, s.qr_scales));
    DSV4_RETURN_IF_ERROR(cuda::sm90_rmsnorm(m.precision,
                                            {.x = s.qr.data(),
                                             .rows = rows,
                                             .dim = c.q_lora_rank,
                                             .weight = w.q_norm,
                                             .eps = eps,
                                             .y = s.qr.data(),
                                             .codes = qr_q.codes,
                                             .scales = qr_q.scales},
                                            st));
    const bool heads_beside = beside && csa;
    if (heads_beside) DSV4_RETURN_IF_ERROR(m.heads_branch.fork(st));
    const cuda::StreamHandle hs = heads_beside ? m.heads_branch.side() : st;
    DSV4_RETURN_IF_ERROR(gpu_linear_on(m, hs, heads_beside ? s.heads_branch_workspace : s.workspace, s.qr.data(), rows,
                                       w.wq_b, LinearOut::kBF16, s.q.data(), qr_q));
    cuda::QHeadNormRopeArgs qn;
    qn.q = s.q.data();
    qn.tokens = rows;
    qn.heads = heads;
    qn.head_dim = hd;
    qn.eps = eps;
    qn.rope = true;
    qn.positions = s.positions;
    qn.freqs = freqs;
    DSV4_RETURN_IF_ERROR(cuda::sm90_q_head_norm_rope(m.precision, qn, hs));

    if (!beside) {
        DSV4_RETURN_IF_ERROR(window_kv(m, layer, layer_slot, rows, normed_q, st, s.workspace));
        if (layer.ratio)
            DSV4_RETURN_IF_ERROR(project_rows(m, w.compressor, layer.ratio, rows, s.proj_kv.data(), s.proj_score.data(),
                                              normed_q, decode, st, s.workspace));
    }
    if (csa) {
        if (!beside)
            DSV4_RETURN_IF_ERROR(project_rows(m, w.index_compressor, layer.ratio, rows, s.index_proj_kv.data(),
                                              s.index_proj_score.data(), normed_q, decode, st, s.workspace));
        bool any_entries = decode;  // a decode step's launches may not depend on the positions
        for (const GpuBatchSeq& q : seqs) any_entries |= (q.seq->position + q.n) / layer.ratio > 0;
        if (any_entries) DSV4_RETURN_IF_ERROR(indexer_rows(m, layer, rows, normed_q, qr_q, beside));
    }

    // 2-4: every row at once in a decode step, else sequence by sequence
    if (decode) {
        DSV4_RETURN_IF_ERROR(decode_attention(m, layer, layer_slot, rows, beside));
    } else {
        for (GpuBatchSeq& q : seqs)
            DSV4_RETURN_IF_ERROR(sequence_attention(m, layer, layer_slot, *q.seq, q.row0, q.n));
    }

    // 5. wo_a (the de-rotation ran in the attention epilogue), wo_b
    cuda::WoAArgs oa;
    oa.o = s.attn.data();
    oa.tokens = rows;
    oa.heads = heads;
    oa.groups = c.o_groups;
    oa.rank = c.o_lora_rank;
    oa.wo_a = w.wo_a;
    oa.z = s.z.data();
    oa.workspace = m.pass.workspace.data();
    oa.workspace_bytes = m.pass.workspace.bytes();
    DSV4_RETURN_IF_ERROR(cuda::sm90_wo_a(m.precision, oa, st));
    return gpu_linear(m, s.z.data(), rows, w.wo_b, LinearOut::kBF16, s.block_out.data());
}

}  // namespace dsv4::engine
