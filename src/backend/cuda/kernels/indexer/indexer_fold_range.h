// The range guard of the indexer scores kernel's folded tiles (indexer_scores_s8.cuh), shared with its host test
// (tests/unit/indexer_fold). A folded tile's long form computes, per key and head, dot = I·2^q·2^k (I the integer
// sum, |I| < 2^21; q the head's query exponent; k = s_min - 128 the key's), bf16(dot), ReLU, bf16(· w_h), then the
// f32 sum over the heads in head order. The short form computes bf16(I), ReLU, bf16(· w'_h) with w'_h = w_h·2^q,
// the same sum, and multiplies it by 2^k. Power-of-two factors commute with every rounding of that chain while each
// value stays a normal float, so both give the same bits when, for every head:
//  - I·2^q (the long form's first product) and I·2^(q+k) are normal for |I| in [1, 2^21]: q in [-126, 105],
//    k in [-126 - q, 102 - q];
//  - for w_h != 0 with exponent e of w'_h: w_h and w'_h are normal, the short form's products (|bf16(I)| >= 1) and
//    partial sums (multiples of 2^(e - 7), at most 64·2^(e + 22)) are normal — e in [-119, 95] — and so are the long
//    form's (2^k times them): k in [-119 - e, 95 - e].
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DSV4_FOLD_HD __host__ __device__ __forceinline__
#else
#define DSV4_FOLD_HD inline
#endif

namespace dsv4::cuda {

// One head's share of the guard: whether the head allows the short form at all, and the key exponents it allows.
struct FoldedHeadRange {
    bool ok;
    int k_lo, k_hi;  // inclusive
};

// Head with query exponent q and bf16 weight bits w_bits.
DSV4_FOLD_HD FoldedHeadRange folded_head_range(int q, uint16_t w_bits) {
    FoldedHeadRange r{q >= -126 && q <= 105, -126 - q, 102 - q};
    if ((w_bits & 0x7fffu) != 0) {  // w != ±0
        const int biased = int((w_bits >> 7) & 0xffu), e = biased - 127 + q;
        r.ok = r.ok && biased != 0 && biased != 0xff && e >= -119 && e <= 95;
        r.k_lo = r.k_lo > -119 - e ? r.k_lo : -119 - e;
        r.k_hi = r.k_hi < 95 - e ? r.k_hi : 95 - e;
    }
    return r;
}

}  // namespace dsv4::cuda
