// The MTP (next-n) head as a second output (MODEL_SPEC §5.7). For fed token t_p at position p >= 1 the MTP block
// combines the main model's final streams at p-1 with the embedding of t_p and predicts t_{p+1} — the same target
// as the main logits of row p, computed before the main model has seen t_p (what speculative decoding drafts
// with). The block runs at position p-1 (the position of the main hidden it reads, as the reference's
// MTPBlock.forward(x, start_pos, input_ids) is called with the main forward's start_pos); it is an SWA layer with
// its own 128-token ring, so it runs on every position. The position convention is UNVERIFIED in the spec
// (§5.7); nothing we did not write checks it, only the chunking invariant.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/forward.h"

namespace dsv4::engine {

struct MtpState {
    SequenceState seq;                // one layer (the MTP block); seq.position = main position - 1 once started
    std::vector<float> last_streams;  // [4, D] main final streams of the last fed position
    bool has_last = false;
    std::vector<float> main_streams;  // [S, 4, D] scratch: final streams of the chunk
    std::vector<float> inputs;        // [S, 4, D] scratch: the block's input streams
    std::vector<float> h;             // [S, 4, D] scratch
    std::vector<float> e;             // [S, D] scratch
};

MtpState make_mtp_state(const model::ModelConfig& cfg, int64_t max_context, int64_t chunk_rows);
void reset_mtp_state(MtpState& m);

// After forward_chunk ran tokens[0..n) at positions p0..p0+n-1 (main_streams = their final streams [n, 4, D]):
// fills mtp_logits [n - logits_from, vocab] with the rows logits_from..n-1 (the block runs on every row; its head
// on those only); rows without a previous position (p = 0) are NaN. s and own: the session's scratch (n <= their
// rows); ctx.exec's workspace serves every op of the block.
Status mtp_chunk(const ForwardContext& ctx, MtpState& m, ForwardScratch& s, SequenceScratch& own, const int32_t* tokens,
                 int64_t n, int64_t p0, float* mtp_logits, int64_t logits_from = 0);

}  // namespace dsv4::engine
