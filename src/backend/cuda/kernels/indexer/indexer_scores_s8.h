// The integer-wgmma indexer scores (indexer_scores_s8.cuh), the path sm90_indexer_scores takes for kReference calls
// with packed keys and an FP4-simulated query (IndexerScoresArgs::q_fp4_simulated).
#pragma once

#include "backend/cuda/kernels/indexer/indexer.h"

namespace dsv4::cuda {

// Whether a validated kReference call can take the integer path (packed keys, simulated q, 16-byte aligned keys).
bool indexer_scores_s8_applies(const IndexerScoresArgs& a);
// Launches it; `a` is validated by sm90_indexer_scores and non-empty.
Status launch_indexer_scores_s8(const IndexerScoresArgs& a, StreamHandle stream);

}  // namespace dsv4::cuda
