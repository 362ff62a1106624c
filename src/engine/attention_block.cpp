// The attention sub-block with its per-sequence state (MODEL_SPEC §5.4, §6, §8), over a batched pass.
//
// Order inside one sequence's share of n tokens at positions p0 .. p0+n-1 (the reference's prefill order, §6,
// generalised to any p0 the way transformers' dynamic cache does, §8.2):
//   1. q path, window K=V and the compressors' projections for all rows of the pass at once (row-wise ops, each
//      weight read once per pass); each sequence's K=V rows go into the chunk rows of its layer pool.
//   2. compressors (main, and for CSA the indexer's) absorb the n tokens: the open window's buffered projections
//      plus the chunk's form a series; every window it completes becomes an entry (rope at the window's first
//      position); the last complete window is kept as the next entry's "previous window" (CSA), the rest stays
//      open. The very first window of a sequence has no previous window: its first-half candidates get weight 0
//      (the reference's -inf score state and transformers' -inf gate; MODEL_SPEC §11 row 16).
//   3. CSA: indexer scores over every entry that exists after step 2, masked to j < (t+1)/4, top-k.
//   4. one sparse attention over [window candidates | compressed candidates] per query; entries that complete
//      inside the chunk are visible to exactly the queries at or after their window's last token.
//   5. de-rotation, wo_a, wo_b over all rows; then each ring takes its sequence's last (up to) 128 K=V rows.
// Steps 2-4 and the ring run per sequence on its own state; they never mix rows of different sequences.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "engine/forward.h"

namespace dsv4::engine {

namespace cpu = backend::cpu;
using backend::CompressedKind;

namespace {

// Absorbs one sequence's rows into one compressor, given their projections kv/score [n, width] (ape included);
// writes completed entries to entries[first_new .. first_new+emitted).
Status absorb_compressor(const ForwardContext& ctx, const backend::Exec& ex, const CompressorViews& w,
                         CompressorState& cs, CompressedKind kind, int64_t head_dim, const float* kv,
                         const float* score, int64_t n, int64_t p0, SequenceScratch& s, float* entries,
                         int64_t* emitted) {
    const int64_t m = cs.ratio, width = cs.width;
    const int64_t buffered = p0 % m;   // open-window tokens already projected
    const int64_t entries_before = p0 / m;
    float* skv = s.series_kv.data();
    float* ssc = s.series_score.data();
    std::memcpy(skv, cs.open_kv.data(), size_t(buffered * width) * sizeof(float));
    std::memcpy(ssc, cs.open_score.data(), size_t(buffered * width) * sizeof(float));
    std::memcpy(skv + buffered * width, kv, size_t(n * width) * sizeof(float));
    std::memcpy(ssc + buffered * width, score, size_t(n * width) * sizeof(float));

    const int64_t total = buffered + n;
    const int64_t windows = total / m;
    if (windows > 0) {
        const bool has_prev = cs.overlap && entries_before > 0;
        backend::CompressorPoolParams pl;
        pl.kv = skv;
        pl.score = ssc;
        pl.prev_kv = has_prev ? cs.prev_kv.data() : nullptr;
        pl.prev_score = has_prev ? cs.prev_score.data() : nullptr;
        pl.n_windows = windows;
        pl.ratio = m;
        pl.head_dim = head_dim;
        pl.overlap = cs.overlap;
        pl.out = s.pooled.data();
        DSV4_RETURN_IF_ERROR(cpu::compressor_pool(ex, pl));

        backend::CompressorFinishParams fp;
        fp.pooled = s.pooled.data();
        fp.n = windows;
        fp.head_dim = head_dim;
        fp.rope_dim = ctx.cfg->rope_head_dim;
        fp.ratio = m;
        fp.first_window = entries_before;
        fp.kind = kind;
        fp.norm = w.norm;
        fp.freqs = &ctx.freqs_compress;
        fp.eps = float(ctx.cfg->rms_norm_eps);
        fp.out = entries + entries_before * head_dim;
        DSV4_RETURN_IF_ERROR(cpu::compressor_finish(ex, fp));

        if (cs.overlap) {  // the last complete window feeds the next entry's first half
            std::memcpy(cs.prev_kv.data(), skv + (windows - 1) * m * width, size_t(m * width) * sizeof(float));
            std::memcpy(cs.prev_score.data(), ssc + (windows - 1) * m * width, size_t(m * width) * sizeof(float));
        }
    }
    const int64_t rest = total - windows * m;
    std::memcpy(cs.open_kv.data(), skv + windows * m * width, size_t(rest * width) * sizeof(float));
    std::memcpy(cs.open_score.data(), ssc + windows * m * width, size_t(rest * width) * sizeof(float));
    *emitted = windows;
    return Status::ok();
}

// Indexer (MODEL_SPEC §5.4.5) for one sequence, its queries q [n, IH, 128] and weights w [n, IH] computed for the
// pass: top-k entry numbers per query into s.index_topk [n, index_topk] (-1 = none).
Status run_indexer(const ForwardContext& ctx, const backend::Exec& ex, const LayerState& ls, SequenceScratch& s,
                   const float* q, const float* w, const int64_t* positions, int64_t n, int64_t n_entries) {
    const model::ModelConfig& cfg = *ctx.cfg;
    const int64_t k = cfg.index_topk;
    if (n_entries == 0) {
        std::fill(s.index_topk.begin(), s.index_topk.begin() + n * k, -1);
        return Status::ok();
    }
    backend::IndexerScoresParams sp;
    sp.q = q;
    sp.keys = ls.index_keys.data();
    sp.w = w;
    sp.tokens = n;
    sp.heads = cfg.index_n_heads;
    sp.head_dim = cfg.index_head_dim;
    sp.n = n_entries;
    sp.ratio = ls.ratio;
    sp.positions = positions;
    sp.scores = s.index_scores.data();
    DSV4_RETURN_IF_ERROR(cpu::indexer_scores(ex, sp));

    backend::TopKParams tp;
    tp.scores = s.index_scores.data();
    tp.rows = n;
    tp.n = n_entries;
    tp.k = k;
    tp.idx = s.index_topk.data();
    return cpu::topk(ex, tp);
}

// The indexer's queries and weights for all rows of the pass (row-wise: one read of index_wq_b / weights_proj).
Status indexer_rows(const ForwardContext& ctx, const LayerViews& layer, ForwardScratch& s, const float* x,
                    int64_t rows) {
    const model::ModelConfig& cfg = *ctx.cfg;
    backend::IndexerQParams qp;
    qp.qr = s.qr.data();
    qp.tokens = rows;
    qp.heads = cfg.index_n_heads;
    qp.head_dim = cfg.index_head_dim;
    qp.rope_dim = cfg.rope_head_dim;
    qp.wq_b = layer.attn.index_wq_b;
    qp.positions = s.positions.data();
    qp.freqs = &ctx.freqs_compress;
    qp.q = s.index_q.data();
    DSV4_RETURN_IF_ERROR(cpu::indexer_q(ctx.exec, qp));

    backend::IndexerWeightsParams wp;
    wp.x = x;
    wp.tokens = rows;
    wp.weights_proj = layer.attn.index_weights_proj;
    wp.scale = float(1.0 / std::sqrt(double(cfg.index_head_dim)) / std::sqrt(double(cfg.index_n_heads)));
    wp.w = s.index_w.data();
    return cpu::indexer_weights(ctx.exec, wp);
}

// Compressor projections for all rows of the pass: kv, score [rows, width].
Status project_rows(const ForwardContext& ctx, const CompressorViews& w, int64_t ratio, ForwardScratch& s,
                    const float* x, int64_t rows, float* kv, float* score) {
    backend::CompressorProjectParams pp;
    pp.x = x;
    pp.tokens = rows;
    pp.wkv = w.wkv;
    pp.wgate = w.wgate;
    pp.ape = w.ape;
    pp.ratio = ratio;
    pp.positions = s.positions.data();
    pp.kv = kv;
    pp.score = score;
    return cpu::compressor_project(ctx.exec, pp);
}

}  // namespace

Status attention_block(const ForwardContext& ctx, const LayerViews& layer, int layer_slot, std::span<BatchSeq> seqs,
                       ForwardScratch& s, const float* x, int64_t rows, float* out) {
    const model::ModelConfig& cfg = *ctx.cfg;
    const AttentionViews& w = layer.attn;
    const int64_t hd = cfg.head_dim, heads = cfg.num_heads;
    const float eps = float(cfg.rms_norm_eps);
    const backend::RopeFreqs* freqs = layer.ratio ? &ctx.freqs_compress : &ctx.freqs_window;
    const bool csa = layer.attn_kind == model::AttnKind::kCSA, hca = layer.attn_kind == model::AttnKind::kHCA;

    // 1. row-wise: queries, window K=V, compressor projections (and the indexer's queries and weights)
    backend::QPathParams qp;
    qp.x = x;
    qp.tokens = rows;
    qp.heads = heads;
    qp.head_dim = hd;
    qp.rope_dim = cfg.rope_head_dim;
    qp.wq_a = w.wq_a;
    qp.q_norm = w.q_norm;
    qp.wq_b = w.wq_b;
    qp.positions = s.positions.data();
    qp.freqs = freqs;
    qp.eps = eps;
    qp.qr = s.qr.data();
    qp.q = s.q.data();
    DSV4_RETURN_IF_ERROR(cpu::q_path(ctx.exec, qp));

    backend::WindowKvParams kp;
    kp.x = x;
    kp.tokens = rows;
    kp.head_dim = hd;
    kp.rope_dim = cfg.rope_head_dim;
    kp.wkv = w.wkv;
    kp.kv_norm = w.kv_norm;
    kp.positions = s.positions.data();
    kp.freqs = freqs;
    kp.eps = eps;
    kp.kv = s.window_kv.data();
    DSV4_RETURN_IF_ERROR(cpu::window_kv(ctx.exec, kp));

    if (layer.ratio)
        DSV4_RETURN_IF_ERROR(project_rows(ctx, w.compressor, layer.ratio, s, x, rows, s.proj_kv.data(),
                                          s.proj_score.data()));
    if (csa) {
        DSV4_RETURN_IF_ERROR(project_rows(ctx, w.index_compressor, layer.ratio, s, x, rows, s.index_proj_kv.data(),
                                          s.index_proj_score.data()));
        bool any_entries = false;  // queries are needed only once some sequence has an entry
        for (const BatchSeq& q : seqs) any_entries |= (q.state->position + q.n) / layer.ratio > 0;
        if (any_entries) DSV4_RETURN_IF_ERROR(indexer_rows(ctx, layer, s, x, rows));
    }

    // 2-4, per sequence
    for (BatchSeq& seq : seqs) {
        const SequenceState& state = *seq.state;
        LayerState& ls = seq.state->layers[size_t(layer_slot)];
        SequenceScratch& own = *seq.scratch;
        const int64_t p0 = state.position, n = seq.n, r0 = seq.row0, window = state.window;
        const int64_t* positions = s.positions.data() + r0;
        float* pool = ls.pool.data();  // [S + 128 + max_entries, 512]
        std::memcpy(pool, s.window_kv.data() + r0 * hd, size_t(n * hd) * sizeof(float));  // chunk rows 0..n-1

        // 2. compressors
        int64_t n_entries = 0;
        if (layer.ratio) {
            const int64_t width = ls.compressor.width;
            int64_t emitted = 0;
            DSV4_RETURN_IF_ERROR(absorb_compressor(ctx, seq.exec, w.compressor, ls.compressor,
                                                   CompressedKind::kMain, hd, s.proj_kv.data() + r0 * width,
                                                   s.proj_score.data() + r0 * width, n, p0, own,
                                                   pool + state.entry_row(0) * hd, &emitted));
            n_entries = p0 / layer.ratio + emitted;
        }
        // 3. indexer
        if (csa) {
            const int64_t width = ls.index_compressor.width;
            int64_t emitted = 0;
            DSV4_RETURN_IF_ERROR(absorb_compressor(
                ctx, seq.exec, w.index_compressor, ls.index_compressor, CompressedKind::kIndexer,
                cfg.index_head_dim, s.index_proj_kv.data() + r0 * width, s.index_proj_score.data() + r0 * width, n,
                p0, own, ls.index_keys.data(), &emitted));
            DSV4_RETURN_IF_ERROR(run_indexer(ctx, seq.exec, ls, own,
                                             s.index_q.data() + r0 * cfg.index_n_heads * cfg.index_head_dim,
                                             s.index_w.data() + r0 * cfg.index_n_heads, positions, n, n_entries));
        }

        // 4. index lists: [window | compressed], rows of the pool, -1 = nothing. DeepSeek's layouts: the window
        //    part lists positions ascending from max(0, pos-127), then -1 padding; it is 128 wide, except in a
        //    prefill from position 0 shorter than the window, where it is T wide (get_window_topk_idxs). Only the
        //    place of the padding differs between layouts, so f32 sums (which skip -1) run in the same order in
        //    every chunking; reference numerics round P per 64-index block, so they follow DeepSeek's layout
        //    exactly.
        const int64_t topk = cfg.index_topk;
        const int64_t win_cols = (p0 == 0 && n < window) ? n : window;
        const int64_t width = win_cols + (csa ? topk : hca ? n_entries : 0);
        for (int64_t i = 0; i < n; ++i) {
            const int64_t pos = p0 + i;
            int32_t* row = own.idx.data() + i * width;
            const int64_t first = std::max<int64_t>(0, pos - (window - 1));
            for (int64_t c = 0; c < win_cols; ++c) {
                const int64_t q = first + c;
                row[c] = q > pos ? -1 : int32_t(q >= p0 ? q - p0 : state.ring_row(q));
            }
            if (csa) {
                const int32_t* picks = own.index_topk.data() + i * topk;
                for (int64_t c = 0; c < topk; ++c)
                    row[win_cols + c] = picks[c] < 0 ? -1 : int32_t(state.entry_row(picks[c]));
            } else if (hca) {
                const int64_t visible = (pos + 1) / layer.ratio;
                for (int64_t j = 0; j < n_entries; ++j)
                    row[win_cols + j] = j < visible ? int32_t(state.entry_row(j)) : -1;
            }
        }

        backend::SparseAttnParams ap;
        ap.q = s.q.data() + r0 * heads * hd;
        ap.kv = pool;
        ap.idx = own.idx.data();
        ap.tokens = n;
        ap.heads = heads;
        ap.dim = hd;
        ap.n_kv = state.entry_row(n_entries);
        ap.topk = width;
        ap.sink = w.sink;
        ap.scale = float(1.0 / std::sqrt(double(hd)));
        ap.out = s.attn.data() + r0 * heads * hd;
        DSV4_RETURN_IF_ERROR(cpu::sparse_attn(seq.exec, ap));

        // the ring keeps the last `window` positions for the next chunk
        for (int64_t q = std::max(p0, p0 + n - window); q < p0 + n; ++q)
            std::memcpy(pool + state.ring_row(q) * hd, pool + (q - p0) * hd, size_t(hd) * sizeof(float));
    }

    // 5. row-wise: de-rotate the output's rope slice at the query position, grouped low-rank projection
    backend::RopeParams rp;
    rp.x = s.attn.data();
    rp.tokens = rows;
    rp.vecs = heads;
    rp.vec_stride = hd;
    rp.offset = hd - cfg.rope_head_dim;
    rp.positions = s.positions.data();
    rp.freqs = freqs;
    rp.inverse = true;
    DSV4_RETURN_IF_ERROR(cpu::rope(ctx.exec, rp));

    backend::WoAParams op;
    op.o = s.attn.data();
    op.tokens = rows;
    op.heads = heads;
    op.head_dim = hd;
    op.groups = cfg.o_groups;
    op.rank = cfg.o_lora_rank;
    op.wo_a = w.wo_a;
    op.z = s.z.data();
    DSV4_RETURN_IF_ERROR(cpu::wo_a(ctx.exec, op));

    backend::LinearParams lp;
    lp.x = s.z.data();
    lp.tokens = rows;
    lp.w = w.wo_b;
    lp.out = backend::LinearOut::kBF16;
    lp.y = out;
    return cpu::linear(ctx.exec, lp);
}

}  // namespace dsv4::engine
