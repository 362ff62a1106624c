// The next token drawn from a row of logits on the GPU, as dsv4::Sampler draws it on the host (src/sampling,
// docs/chat.md "Sampling"): NaN -> -inf, the repetition / presence / frequency penalties of the tokens in the row's
// penalty list (sample_penalty_list: the host's window of the history), temperature, max (lowest id on ties), e^(l -
// max) by the same f32 arithmetic as the host's exp_below_max, the partition function in f64, then greedy, top-k,
// top-p, min-p and one uniform draw (the caller's) by inverse CDF in the host's candidate order; the chosen token's
// log-probability and the top alternatives. Only the few bytes of SampleRowOut come back instead of the vocabulary's
// f32 logits.
//
// The sums run in another order than the host's sequential ones, so a draw that lands within f64 rounding of a
// boundary between two tokens may pick the neighbour (probability ~1e-16 per draw), and log-probabilities may differ
// in the last bit. Rows the kernel cannot finish exactly decline (kSampleDeclined) and the caller samples on the
// host: rows with more than kSampleMaxPenalties penalised tokens, and top-k / top-p / top-n log-probabilities whose
// candidates are not all
// within 64 nats of the top or are more than kSampleMaxCandidates within the smallest gap (sample_gap) that holds
// them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cuda/common/stream.h"
#include "dsv4/sampling.h"
#include "dsv4/status.h"

namespace dsv4::cuda {

inline constexpr int kSampleMaxCandidates = 4096;  // tokens a row's sorted candidate set may hold

// The candidate sets the kernel can sort: the tokens within sample_gap(g) nats of the top (2, 4, ..., 64). The draw
// and the alternatives take the smallest that holds what they need (top-k's k tokens, top-n's n, top-p's mass); the
// result does not depend on which, only whether one holds at most kSampleMaxCandidates.
inline constexpr int kSampleGaps = 6;
constexpr float sample_gap(int g) { return float(2 << g); }
inline constexpr int kSampleMaxTopLogprobs = 20;   // dsv4::kMaxTopLogprobs
inline constexpr int kSampleMaxPenalties = 4096;   // distinct penalised tokens a row may have (staged in shared memory)

// A token the penalties apply to and its occurrences in the penalty window.
struct SamplePenalty {
    int32_t token;
    int32_t count;
};

// The penalty list dsv4::Sampler applies for `history` under `params` (the last penalty_last_n tokens, ids outside
// [0, vocab) skipped), ascending by token, appended to `out`; nothing when the penalties are off. `counts` is
// scratch of `vocab` zeros, left zero.
void sample_penalty_list(std::span<const int32_t> history, const SamplingParams& params, int32_t vocab,
                         std::vector<int32_t>& counts, std::vector<SamplePenalty>& out);

enum SampleRowStatus : int32_t {
    kSampleOk = 0,
    kSampleDeclined = 1,  // sample this row on the host
    kSampleNoFiniteLogit = 2,
    kSampleInfiniteLogit = 3,  // a +infinity logit
};

struct SampleRowParams {
    int64_t row = 0;           // the logits row (of SampleRowsArgs::logits)
    double uniform = 0;        // the draw in [0, 1) (unused when greedy)
    float temperature = 1;     // <= 0: greedy
    int32_t top_k = 0;         // <= 0 or >= vocab: off
    float top_p = 1;           // 1: off
    float min_p = 0;           // 0: off
    int32_t top_logprobs = 0;  // 0..kSampleMaxTopLogprobs
    float repetition_penalty = 1;  // dsv4::SamplingParams' penalties, applied to the row's penalty list
    float presence_penalty = 0;
    float frequency_penalty = 0;
    int32_t penalty_first = 0;  // the row's list: SampleRowsArgs::penalties[first .. first + count), ascending tokens
    int32_t penalty_count = 0;  // more than kSampleMaxPenalties: declined
};

struct SampleRowOut {
    int32_t status = kSampleDeclined;
    int32_t token = -1;
    float logprob = 0;
    int32_t num_top = 0;
    int32_t top_token[kSampleMaxTopLogprobs];
    float top_logprob[kSampleMaxTopLogprobs];
};

struct SampleRowsArgs {
    const float* logits = nullptr;  // f32 [*, vocab]
    int64_t vocab = 0;
    const SampleRowParams* params = nullptr;  // [n], device memory
    // the rows' penalty lists, device memory; null where no row has one (a row with penalty_count > 0 is then
    // declined)
    const SamplePenalty* penalties = nullptr;
    SampleRowOut* out = nullptr;              // [n], device memory
    int64_t n = 0;
    int cluster = 0;  // CTAs per row: 0 = by the row count (sample_cluster_ctas); 1, 2, 4 or 8 (tests)
};

// CTAs per row when SampleRowsArgs::cluster is 0: 8, halved while rows x CTAs would pass the GPU's SM count (one
// row's passes are latency chains over 129 K logits; few rows spread over more SMs).
int sample_cluster_ctas(int64_t rows);

// A cluster of 1-8 blocks of 1,024 threads per row.
Status sm90_sample_rows(const SampleRowsArgs& a, StreamHandle stream);

}  // namespace dsv4::cuda
