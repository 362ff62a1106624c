// The integer-wgmma indexer scores (indexer_scores_s8.cuh), the path sm90_indexer_scores takes for kReference calls
// with packed keys and the query's integer form (IndexerScoresArgs::q_int).
#pragma once

#include "backend/cuda/kernels/indexer/indexer.h"

namespace dsv4::cuda {

// Whether a validated kReference call takes the integer path (packed keys, q_int, 16-byte aligned, not forced off).
bool indexer_scores_s8_applies(const IndexerScoresArgs& a);
// Launches it; `a` is validated by sm90_indexer_scores and non-empty.
Status launch_indexer_scores_s8(const IndexerScoresArgs& a, StreamHandle stream);

}  // namespace dsv4::cuda
