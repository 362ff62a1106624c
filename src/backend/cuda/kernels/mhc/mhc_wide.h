// The wide decode collapse with the sub-block's RMSNorm (mhc_wide.cuh), the path sm90_hc_pre takes for calls that set
// HcPreArgs::wide.
#pragma once

#include "backend/cuda/kernels/mhc/mhc.h"

namespace dsv4::cuda {

// Validates what only the wide path needs (the rest of `a` is validated by sm90_hc_pre) and launches it; `a` has at
// least one token; post_first: a.post_first is set.
Status launch_hc_collapse_wide(backend::Precision precision, const HcPreArgs& a, bool post_first, StreamHandle stream);

}  // namespace dsv4::cuda
