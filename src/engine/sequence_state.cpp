#include "engine/sequence_state.h"

namespace dsv4::engine {

namespace {

CompressorState make_compressor(int64_t ratio, int64_t head_dim) {
    CompressorState c;
    c.ratio = ratio;
    c.overlap = ratio == 4;
    c.width = (c.overlap ? 2 : 1) * head_dim;
    c.open_kv.assign(size_t(ratio * c.width), 0.0f);
    c.open_score.assign(size_t(ratio * c.width), 0.0f);
    if (c.overlap) {
        c.prev_kv.assign(size_t(ratio * c.width), 0.0f);
        c.prev_score.assign(size_t(ratio * c.width), 0.0f);
    }
    return c;
}

}  // namespace

SequenceState make_sequence_state(const model::ModelConfig& cfg, int64_t max_context, int64_t chunk_rows,
                                  int num_layers, int first_layer) {
    SequenceState s;
    s.max_context = max_context;
    s.chunk_rows = chunk_rows;
    s.window = cfg.window;
    s.layers.resize(size_t(num_layers));
    for (int i = 0; i < num_layers; ++i) {
        LayerState& l = s.layers[size_t(i)];
        l.kind = cfg.attn_kind(first_layer + i);
        l.ratio = cfg.compress_ratio(first_layer + i);
        l.max_entries = l.ratio ? max_context / l.ratio : 0;
        l.pool.assign(size_t((chunk_rows + cfg.window + l.max_entries) * cfg.head_dim), 0.0f);
        if (l.ratio) l.compressor = make_compressor(l.ratio, cfg.head_dim);
        if (l.kind == model::AttnKind::kCSA) {
            l.index_compressor = make_compressor(l.ratio, cfg.index_head_dim);
            l.index_keys.assign(size_t(l.max_entries * cfg.index_head_dim), 0.0f);
        }
    }
    return s;
}

void reset_sequence_state(SequenceState& s) { s.position = 0; }

}  // namespace dsv4::engine
