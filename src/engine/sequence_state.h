// Per-sequence decode state (MODEL_SPEC §8.1) and the per-layer KV pool the attention op reads.
//
// Every attention layer owns one contiguous KV pool of 512-d K=V rows:
//
//   rows [0, S)                 chunk rows: the window K=V of the tokens of the forward pass in flight
//   rows [S, S+128)             the window ring: position p lives in row S + p % 128
//   rows [S+128, S+128+n_max)   compressed entries (CSA ratio 4, HCA ratio 128), entry j in row S+128+j
//
// so one index list addresses every candidate of a query (window rows from the chunk or the ring, compressed rows)
// without copying the compressed entries each step. S is the engine's largest forward pass (longer feeds are
// split, which the incremental semantics make invisible). CSA layers also hold the indexer keys and two
// compressor running states (main and indexer); HCA one. All buffers are allocated when the session is created.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace dsv4::engine {

// Running state of one compressor (MODEL_SPEC §8.1/§8.2): the projections of the tokens of the open (incomplete)
// window, and for CSA the last complete window's projections, whose first channel half feeds the next entry.
struct CompressorState {
    int64_t ratio = 0;               // m
    int64_t width = 0;               // (1 + overlap)·c projection width
    bool overlap = false;            // CSA
    std::vector<float> open_kv;      // [m, width]: slots 0 .. open_count-1 valid
    std::vector<float> open_score;   // [m, width], ape included
    std::vector<float> prev_kv;      // [m, width] (CSA), valid once one entry exists
    std::vector<float> prev_score;   // [m, width]
};

struct LayerState {
    model::AttnKind kind = model::AttnKind::kSWA;
    int64_t ratio = 0;               // 0, 4 or 128
    int64_t max_entries = 0;         // max_context / ratio
    std::vector<float> pool;         // [S + 128 + max_entries, 512], see the file comment
    CompressorState compressor;      // CSA/HCA
    CompressorState index_compressor;  // CSA
    std::vector<float> index_keys;   // [max_entries, index_head_dim] (CSA)
};

struct SequenceState {
    int64_t position = 0;            // tokens absorbed so far; every layer holds exactly this many
    int64_t max_context = 0;
    int64_t chunk_rows = 0;          // S
    int64_t window = 128;
    std::vector<LayerState> layers;  // main layers, then the MTP layer when enabled

    // Row offsets inside a layer pool.
    int64_t ring_row(int64_t pos) const { return chunk_rows + pos % window; }
    int64_t entry_row(int64_t j) const { return chunk_rows + window + j; }
    // Entries a layer holds at the current position (complete windows).
    int64_t entries(const LayerState& l) const { return l.ratio ? position / l.ratio : 0; }
};

// Sizes every buffer for `max_context` tokens and forward passes of up to `chunk_rows` tokens, for the attention
// layers first_layer .. first_layer+num_layers-1, whose kinds come from the config (index L = the MTP layer).
SequenceState make_sequence_state(const model::ModelConfig& cfg, int64_t max_context, int64_t chunk_rows,
                                  int num_layers, int first_layer = 0);
// Back to position 0. Buffers are kept; nothing stale is ever read because reads are bounded by the position.
void reset_sequence_state(SequenceState& s);

}  // namespace dsv4::engine
