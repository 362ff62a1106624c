// The attention sub-block on the GPU (MODEL_SPEC §5.4, §6, §8): the CPU's attention_block.cpp step for step (its
// file comment describes the order), with the per-sequence state in device memory. Sizes that depend on the
// positions (windows closing, entries visible) are known on the host from the plan, so nothing is read back.
#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cuda/kernels/act_quant/act_quant.h"
#include "backend/cuda/kernels/attention/attention.h"
#include "backend/cuda/kernels/glue/glue.h"
#include "backend/cuda/kernels/indexer/indexer.h"
#include "backend/cuda/kernels/kv_finish/kv_finish.h"
#include "backend/cuda/kernels/linear/linear.h"
#include "backend/cuda/kernels/norm_rope/norm_rope.h"
#include "engine/cuda/gpu_internal.h"

namespace dsv4::engine {

using backend::CompressedKind;
using backend::LinearOut;
using backend::Precision;

namespace {

Status linear(GpuModel& m, const void* x, int64_t rows, const DeviceWeightView& w, LinearOut out, void* y) {
    cuda::LinearArgs a;
    a.x = x;
    a.tokens = rows;
    a.w = w;
    a.out = out;
    a.y = y;
    a.workspace = m.pass.workspace.data();
    a.workspace_bytes = m.pass.workspace.bytes();
    return cuda::sm90_linear(m.precision, a, m.stream.handle());
}

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

// Compressor projections of all rows: kv, score f32 [rows, width], ape added to the score.
Status project_rows(GpuModel& m, const GpuCompressor& w, int64_t ratio, int64_t rows, void* kv, void* score) {
    DSV4_RETURN_IF_ERROR(linear(m, m.pass.normed.data(), rows, w.wkv, LinearOut::kF32, kv));
    DSV4_RETURN_IF_ERROR(linear(m, m.pass.normed.data(), rows, w.wgate, LinearOut::kF32, score));
    cuda::AddApeArgs a;
    a.score = static_cast<float*>(score);
    a.rows = rows;
    a.width = w.wkv.rows;
    a.ratio = ratio;
    a.positions = m.pass.positions;
    a.ape = w.ape;
    return cuda::sm90_add_ape(a, m.stream.handle());
}

// The indexer's queries and head weights for all rows of the pass (backend::cpu::indexer_q / indexer_weights).
Status indexer_rows(GpuModel& m, const GpuLayer& layer, int64_t rows) {
    const model::ModelConfig& c = m.cfg;
    GpuPass& s = m.pass;
    const cuda::StreamHandle st = m.stream.handle();
    const int64_t ih = c.index_n_heads, ihd = c.index_head_dim;
    DSV4_RETURN_IF_ERROR(linear(m, s.qr.data(), rows, layer.attn.index_wq_b, LinearOut::kBF16, s.index_q.data()));
    DSV4_RETURN_IF_ERROR(
        rope(m, s.index_q.data(), rows, ih, ihd, ihd - c.rope_head_dim, s.positions, m.freqs_compress));
    if (m.precision == Precision::kReference) {
        DSV4_RETURN_IF_ERROR(cuda::sm90_hadamard128(
            m.precision, {.x = s.index_q.data(), .rows = rows * ih, .y = s.index_q.data()}, st));
        cuda::Fp4QuantArgs f;
        f.x = s.index_q.data();
        f.rows = rows * ih;
        f.cols = ihd;
        f.x_sim = s.index_q.data();
        DSV4_RETURN_IF_ERROR(cuda::sm90_fp4_quant_e2m1(f, st));
    }
    DSV4_RETURN_IF_ERROR(
        linear(m, s.normed.data(), rows, layer.attn.index_weights_proj, LinearOut::kBF16, s.index_w.data()));
    const float scale = float(1.0 / std::sqrt(double(ihd)) / std::sqrt(double(ih)));
    return cuda::sm90_scale(m.precision, {.x = s.index_w.data(), .n = rows * ih, .scale = scale}, st);
}

// Absorbs one sequence's n rows into one compressor (the CPU's absorb_compressor): the open window's buffered
// projections and the chunk's form a series in seq.series_*; every complete window becomes an entry written at
// entries[p0/m ...]; the last complete window becomes the previous window (CSA), the rest stays open.
Status absorb_compressor(GpuModel& m, GpuSequence& seq, const GpuCompressor& w, GpuCompressorState& cs,
                         CompressedKind kind, int64_t head_dim, const uint8_t* kv, const uint8_t* score, int64_t n,
                         int64_t p0, uint8_t* entries, int64_t* emitted) {
    const cuda::StreamHandle st = m.stream.handle();
    const int64_t mm = cs.ratio, width = cs.width, row = width * 4;
    const int64_t buffered = p0 % mm, entries_before = p0 / mm;
    uint8_t* skv = seq.series_kv.as<uint8_t>();
    uint8_t* ssc = seq.series_score.as<uint8_t>();
    DSV4_RETURN_IF_ERROR(cuda::copy_async(skv, cs.open_kv.data(), size_t(buffered * row), st));
    DSV4_RETURN_IF_ERROR(cuda::copy_async(ssc, cs.open_score.data(), size_t(buffered * row), st));
    DSV4_RETURN_IF_ERROR(cuda::copy_async(skv + buffered * row, kv, size_t(n * row), st));
    DSV4_RETURN_IF_ERROR(cuda::copy_async(ssc + buffered * row, score, size_t(n * row), st));
    const int64_t total = buffered + n, windows = total / mm;
    if (windows > 0) {
        const bool has_prev = cs.overlap && entries_before > 0;
        cuda::CompressorPoolArgs pl;
        pl.kv = reinterpret_cast<const float*>(skv);
        pl.score = reinterpret_cast<const float*>(ssc);
        pl.prev_kv = has_prev ? cs.prev_kv.as<float>() : nullptr;
        pl.prev_score = has_prev ? cs.prev_score.as<float>() : nullptr;
        pl.n_windows = windows;
        pl.ratio = mm;
        pl.head_dim = head_dim;
        pl.overlap = cs.overlap;
        pl.out = seq.pooled.data();
        DSV4_RETURN_IF_ERROR(cuda::sm90_compressor_pool(m.precision, pl, st));
        cuda::CompressorFinishArgs fp;
        fp.pooled = seq.pooled.data();
        fp.n = windows;
        fp.head_dim = head_dim;
        fp.ratio = mm;
        fp.first_window = entries_before;
        fp.kind = kind;
        fp.norm = w.norm;
        fp.freqs = m.freqs_compress;
        fp.eps = float(m.cfg.rms_norm_eps);
        fp.out = entries + entries_before * head_dim * int64_t(m.act_bytes);
        DSV4_RETURN_IF_ERROR(cuda::sm90_compressor_finish(m.precision, fp, st));
        if (cs.overlap) {
            DSV4_RETURN_IF_ERROR(cuda::copy_async(cs.prev_kv.data(), skv + (windows - 1) * mm * row,
                                                  size_t(mm * row), st));
            DSV4_RETURN_IF_ERROR(cuda::copy_async(cs.prev_score.data(), ssc + (windows - 1) * mm * row,
                                                  size_t(mm * row), st));
        }
    }
    const int64_t rest = total - windows * mm;
    DSV4_RETURN_IF_ERROR(cuda::copy_async(cs.open_kv.data(), skv + windows * mm * row, size_t(rest * row), st));
    DSV4_RETURN_IF_ERROR(cuda::copy_async(cs.open_score.data(), ssc + windows * mm * row, size_t(rest * row), st));
    *emitted = windows;
    return Status::ok();
}

// The indexer's top-k entry numbers of one sequence's n queries into seq.index_topk [n, index_topk].
Status run_indexer(GpuModel& m, GpuSequence& seq, const GpuLayerState& ls, int64_t r0, int64_t n,
                   int64_t n_entries) {
    const model::ModelConfig& c = m.cfg;
    GpuPass& s = m.pass;
    const cuda::StreamHandle st = m.stream.handle();
    const int64_t a = int64_t(m.act_bytes), k = c.index_topk;
    if (n_entries == 0) return cuda::fill_async(seq.index_topk.data(), 0xff, size_t(n * k) * 4, st);  // all -1
    cuda::IndexerScoresArgs sp;
    sp.q = at(s.index_q, r0 * c.index_n_heads * c.index_head_dim * a);
    sp.keys = ls.index_keys.data();
    sp.w = at(s.index_w, r0 * c.index_n_heads * a);
    sp.tokens = n;
    sp.heads = c.index_n_heads;
    sp.n = n_entries;
    sp.ratio = ls.ratio;
    sp.positions = s.positions + r0;
    sp.scores = seq.index_scores.data();
    DSV4_RETURN_IF_ERROR(cuda::sm90_indexer_scores(m.precision, sp, st));
    cuda::TopKArgs tp;
    tp.scores = seq.index_scores.data();
    tp.rows = n;
    tp.n = n_entries;
    tp.k = k;
    tp.idx = seq.index_topk.as<int32_t>();
    return cuda::sm90_topk(m.precision, tp, st);
}

// Steps 2-4 and the ring for one sequence's share.
Status sequence_attention(GpuModel& m, const GpuLayer& layer, GpuSequence& seq, GpuLayerState& ls, int64_t r0,
                          int64_t n) {
    const model::ModelConfig& c = m.cfg;
    GpuPass& s = m.pass;
    const cuda::StreamHandle st = m.stream.handle();
    const int64_t a = int64_t(m.act_bytes), hd = c.head_dim, heads = c.num_heads, p0 = seq.position;
    const int64_t window = seq.window, row = hd * a;
    const bool csa = layer.kind == model::AttnKind::kCSA, hca = layer.kind == model::AttnKind::kHCA;
    uint8_t* pool = ls.pool.as<uint8_t>();
    DSV4_RETURN_IF_ERROR(cuda::copy_async(pool, at(s.window_kv, r0 * row), size_t(n * row), st));

    int64_t n_entries = 0;
    if (layer.ratio) {
        const int64_t width = ls.compressor.width;
        int64_t emitted = 0;
        DSV4_RETURN_IF_ERROR(absorb_compressor(m, seq, layer.attn.compressor, ls.compressor, CompressedKind::kMain,
                                               hd, at(s.proj_kv, r0 * width * 4), at(s.proj_score, r0 * width * 4),
                                               n, p0, pool + seq.entry_row(0) * row, &emitted));
        n_entries = p0 / layer.ratio + emitted;
    }
    if (csa) {
        const int64_t width = ls.index_compressor.width;
        int64_t emitted = 0;
        DSV4_RETURN_IF_ERROR(absorb_compressor(m, seq, layer.attn.index_compressor, ls.index_compressor,
                                               CompressedKind::kIndexer, c.index_head_dim,
                                               at(s.index_proj_kv, r0 * width * 4),
                                               at(s.index_proj_score, r0 * width * 4), n, p0,
                                               ls.index_keys.as<uint8_t>(), &emitted));
        DSV4_RETURN_IF_ERROR(run_indexer(m, seq, ls, r0, n, n_entries));
    }

    // index lists [window | compressed] (DeepSeek's layouts; see attention_block.cpp step 4)
    const int64_t topk = c.index_topk;
    const int64_t win_cols = (p0 == 0 && n < window) ? n : window;
    const int64_t width = win_cols + (csa ? topk : hca ? n_entries : 0);
    cuda::AttnIndexArgs ia;
    ia.idx = seq.idx.as<int32_t>();
    ia.n = n;
    ia.p0 = p0;
    ia.win_cols = win_cols;
    ia.window = window;
    ia.chunk_rows = seq.chunk_rows;
    ia.picks = csa ? seq.index_topk.as<int32_t>() : nullptr;
    ia.topk = csa ? topk : 0;
    ia.hca_entries = hca ? n_entries : 0;
    ia.ratio = layer.ratio;
    DSV4_RETURN_IF_ERROR(cuda::sm90_attn_index(ia, st));

    cuda::SparseAttnArgs ap;
    ap.q = at(s.q, r0 * heads * row);
    ap.kv = pool;
    ap.idx = seq.idx.as<int32_t>();
    ap.tokens = n;
    ap.heads = heads;
    ap.n_kv = seq.entry_row(n_entries);
    ap.topk = width;
    ap.sink = layer.attn.sink;
    ap.scale = float(1.0 / std::sqrt(double(hd)));
    ap.derotate = true;  // the output's rope slice back to the query position (§5.4.8), fused
    ap.positions = s.positions + r0;
    ap.freqs = layer.ratio ? m.freqs_compress : m.freqs_window;
    ap.out = at(s.attn, r0 * heads * row);
    DSV4_RETURN_IF_ERROR(cuda::sm90_sparse_attn(m.precision, ap, st));

    // the ring keeps the last `window` positions, in runs of consecutive ring rows
    for (int64_t q = std::max(p0, p0 + n - window); q < p0 + n;) {
        const int64_t run = std::min(p0 + n - q, window - q % window);
        DSV4_RETURN_IF_ERROR(cuda::copy_async(pool + seq.ring_row(q) * row, pool + (q - p0) * row,
                                              size_t(run * row), st));
        q += run;
    }
    return Status::ok();
}

// Decode form of absorb_compressor (one token at the device position pos): the token joins the open window; when
// it closes the window (pos % m == m - 1) the entry pos / m is pooled and finished, and the window becomes the
// previous window (CSA). Every launch is the same at every position; the kernels decide from pos.
Status decode_compressor(GpuModel& m, GpuSequence& seq, const GpuCompressor& w, GpuCompressorState& cs,
                         CompressedKind kind, int64_t head_dim, const uint8_t* kv, const uint8_t* score,
                         const int64_t* pos, uint8_t* entries) {
    const cuda::StreamHandle st = m.stream.handle();
    cuda::CompressorAppendArgs ap;
    ap.position = pos;
    ap.kv = reinterpret_cast<const float*>(kv);
    ap.score = reinterpret_cast<const float*>(score);
    ap.ratio = cs.ratio;
    ap.width = cs.width;
    ap.open_kv = cs.open_kv.as<float>();
    ap.open_score = cs.open_score.as<float>();
    DSV4_RETURN_IF_ERROR(cuda::sm90_compressor_append(ap, st));
    cuda::CompressorPoolArgs pl;
    pl.kv = cs.open_kv.as<float>();
    pl.score = cs.open_score.as<float>();
    pl.prev_kv = cs.prev_kv.as<float>();
    pl.prev_score = cs.prev_score.as<float>();
    pl.n_windows = 1;
    pl.ratio = cs.ratio;
    pl.head_dim = head_dim;
    pl.overlap = cs.overlap;
    pl.out = seq.pooled.data();
    pl.decode_position = pos;
    DSV4_RETURN_IF_ERROR(cuda::sm90_compressor_pool(m.precision, pl, st));
    cuda::CompressorFinishArgs fp;
    fp.pooled = seq.pooled.data();
    fp.n = 1;
    fp.head_dim = head_dim;
    fp.ratio = cs.ratio;
    fp.kind = kind;
    fp.norm = w.norm;
    fp.freqs = m.freqs_compress;
    fp.eps = float(m.cfg.rms_norm_eps);
    fp.out = entries;
    fp.decode_position = pos;
    DSV4_RETURN_IF_ERROR(cuda::sm90_compressor_finish(m.precision, fp, st));
    if (!cs.overlap) return Status::ok();
    cuda::CompressorRollArgs rl;
    rl.position = pos;
    rl.ratio = cs.ratio;
    rl.width = cs.width;
    rl.open_kv = cs.open_kv.as<float>();
    rl.open_score = cs.open_score.as<float>();
    rl.prev_kv = cs.prev_kv.as<float>();
    rl.prev_score = cs.prev_score.as<float>();
    return cuda::sm90_compressor_roll(rl, st);
}

// Decode form of sequence_attention: one token at row r0, its position read from the plan. The indexer scans
// the cache's capacity but computes only the visible entries; HCA lists every entry slot, the invisible ones -1
// (whole blocks of -1 change nothing in the attention's sums or roundings).
Status sequence_attention_decode(GpuModel& m, const GpuLayer& layer, GpuSequence& seq, GpuLayerState& ls,
                                 int64_t r0) {
    const model::ModelConfig& c = m.cfg;
    GpuPass& s = m.pass;
    const cuda::StreamHandle st = m.stream.handle();
    const int64_t a = int64_t(m.act_bytes), hd = c.head_dim, heads = c.num_heads, row = hd * a;
    const int64_t* pos = s.positions + r0;
    const bool csa = layer.kind == model::AttnKind::kCSA, hca = layer.kind == model::AttnKind::kHCA;
    uint8_t* pool = ls.pool.as<uint8_t>();
    DSV4_RETURN_IF_ERROR(cuda::copy_async(pool, at(s.window_kv, r0 * row), size_t(row), st));
    if (layer.ratio) {
        const int64_t width = ls.compressor.width;
        DSV4_RETURN_IF_ERROR(decode_compressor(m, seq, layer.attn.compressor, ls.compressor, CompressedKind::kMain,
                                               hd, at(s.proj_kv, r0 * width * 4), at(s.proj_score, r0 * width * 4),
                                               pos, pool + seq.entry_row(0) * row));
    }
    const int64_t topk = c.index_topk;
    if (csa) {
        const int64_t width = ls.index_compressor.width;
        DSV4_RETURN_IF_ERROR(decode_compressor(m, seq, layer.attn.index_compressor, ls.index_compressor,
                                               CompressedKind::kIndexer, c.index_head_dim,
                                               at(s.index_proj_kv, r0 * width * 4),
                                               at(s.index_proj_score, r0 * width * 4), pos,
                                               ls.index_keys.as<uint8_t>()));
        if (ls.max_entries == 0) {
            DSV4_RETURN_IF_ERROR(cuda::fill_async(seq.index_topk.data(), 0xff, size_t(topk) * 4, st));
        } else {
            cuda::IndexerScoresArgs sp;
            sp.q = at(s.index_q, r0 * c.index_n_heads * c.index_head_dim * a);
            sp.keys = ls.index_keys.data();
            sp.w = at(s.index_w, r0 * c.index_n_heads * a);
            sp.tokens = 1;
            sp.heads = c.index_n_heads;
            sp.n = ls.max_entries;
            sp.ratio = ls.ratio;
            sp.positions = pos;
            sp.scores = seq.index_scores.data();
            sp.visible_only = true;
            DSV4_RETURN_IF_ERROR(cuda::sm90_indexer_scores(m.precision, sp, st));
            cuda::TopKArgs tp;
            tp.scores = seq.index_scores.data();
            tp.rows = 1;
            tp.n = ls.max_entries;
            tp.k = topk;
            tp.idx = seq.index_topk.as<int32_t>();
            tp.positions = pos;
            tp.ratio = ls.ratio;
            DSV4_RETURN_IF_ERROR(cuda::sm90_topk(m.precision, tp, st));
        }
    }
    const int64_t width = seq.window + (csa ? topk : hca ? ls.max_entries : 0);
    cuda::AttnIndexArgs ia;
    ia.idx = seq.idx.as<int32_t>();
    ia.n = 1;
    ia.p0_device = pos;
    ia.win_cols = seq.window;
    ia.window = seq.window;
    ia.chunk_rows = seq.chunk_rows;
    ia.picks = csa ? seq.index_topk.as<int32_t>() : nullptr;
    ia.topk = csa ? topk : 0;
    ia.hca_entries = hca ? ls.max_entries : 0;
    ia.ratio = layer.ratio;
    DSV4_RETURN_IF_ERROR(cuda::sm90_attn_index(ia, st));

    cuda::SparseAttnArgs ap;
    ap.q = at(s.q, r0 * heads * row);
    ap.kv = pool;
    ap.idx = seq.idx.as<int32_t>();
    ap.tokens = 1;
    ap.heads = heads;
    ap.n_kv = seq.entry_row(ls.max_entries);
    ap.topk = width;
    ap.sink = layer.attn.sink;
    ap.scale = float(1.0 / std::sqrt(double(hd)));
    ap.derotate = true;
    ap.positions = pos;
    ap.freqs = layer.ratio ? m.freqs_compress : m.freqs_window;
    ap.out = at(s.attn, r0 * heads * row);
    DSV4_RETURN_IF_ERROR(cuda::sm90_sparse_attn(m.precision, ap, st));
    cuda::RingStoreArgs rs;
    rs.position = pos;
    rs.pool = pool;
    rs.chunk_rows = seq.chunk_rows;
    rs.window = seq.window;
    rs.row_elems = hd;
    return cuda::sm90_ring_store(m.precision, rs, st);
}

}  // namespace

Status gpu_attention_block(GpuModel& m, const GpuLayer& layer, int layer_slot, std::span<GpuBatchSeq> seqs,
                           int64_t rows, bool decode) {
    const model::ModelConfig& c = m.cfg;
    GpuPass& s = m.pass;
    const GpuAttention& w = layer.attn;
    const cuda::StreamHandle st = m.stream.handle();
    const int64_t hd = c.head_dim, heads = c.num_heads;
    const float eps = float(c.rms_norm_eps);
    const backend::RopeFreqs& freqs = layer.ratio ? m.freqs_compress : m.freqs_window;

    // 1. row-wise: q path, window K=V, compressor projections, the indexer's queries and weights
    DSV4_RETURN_IF_ERROR(linear(m, s.normed.data(), rows, w.wq_a, LinearOut::kBF16, s.qr.data()));
    DSV4_RETURN_IF_ERROR(cuda::sm90_rmsnorm(
        m.precision, {.x = s.qr.data(), .rows = rows, .dim = c.q_lora_rank, .weight = w.q_norm, .eps = eps,
                      .y = s.qr.data()}, st));
    DSV4_RETURN_IF_ERROR(linear(m, s.qr.data(), rows, w.wq_b, LinearOut::kBF16, s.q.data()));
    cuda::QHeadNormRopeArgs qn;
    qn.q = s.q.data();
    qn.tokens = rows;
    qn.heads = heads;
    qn.head_dim = hd;
    qn.eps = eps;
    qn.rope = true;
    qn.positions = s.positions;
    qn.freqs = freqs;
    DSV4_RETURN_IF_ERROR(cuda::sm90_q_head_norm_rope(m.precision, qn, st));

    DSV4_RETURN_IF_ERROR(linear(m, s.normed.data(), rows, w.wkv, LinearOut::kBF16, s.window_kv.data()));
    cuda::WindowKvFinishArgs kf;
    kf.kv = s.window_kv.data();
    kf.tokens = rows;
    kf.kv_norm = w.kv_norm;
    kf.positions = s.positions;
    kf.freqs = freqs;
    kf.eps = eps;
    DSV4_RETURN_IF_ERROR(cuda::sm90_window_kv_finish(m.precision, kf, st));

    if (layer.ratio)
        DSV4_RETURN_IF_ERROR(project_rows(m, w.compressor, layer.ratio, rows, s.proj_kv.data(), s.proj_score.data()));
    if (layer.kind == model::AttnKind::kCSA) {
        DSV4_RETURN_IF_ERROR(project_rows(m, w.index_compressor, layer.ratio, rows, s.index_proj_kv.data(),
                                          s.index_proj_score.data()));
        bool any_entries = decode;  // a decode step's launches may not depend on the positions
        for (const GpuBatchSeq& q : seqs) any_entries |= (q.seq->position + q.n) / layer.ratio > 0;
        if (any_entries) DSV4_RETURN_IF_ERROR(indexer_rows(m, layer, rows));
    }

    // 2-4 per sequence
    for (GpuBatchSeq& q : seqs) {
        GpuLayerState& ls = q.seq->layers[size_t(layer_slot)];
        DSV4_RETURN_IF_ERROR(decode ? sequence_attention_decode(m, layer, *q.seq, ls, q.row0)
                                    : sequence_attention(m, layer, *q.seq, ls, q.row0, q.n));
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
    DSV4_RETURN_IF_ERROR(cuda::sm90_wo_a(m.precision, oa, st));
    return linear(m, s.z.data(), rows, w.wo_b, LinearOut::kBF16, s.block_out.data());
}

}  // namespace dsv4::engine
