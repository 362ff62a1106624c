// The op contract of DeepSeek-V4 (DESIGN §4): one Params struct per op, with shapes and the formula next to it.
// Every backend implements these ops with exactly this meaning; the CPU backend (backend/cpu/cpu_ops.h) is the
// oracle the others are tested against.
//
// Conventions
// * Ops are stateless functions over contiguous row-major arrays the caller owns. Nothing is allocated by the
//   caller's contract; outputs are fully written (tests poison them first).
// * Activations are f32 arrays. In Precision::kReference they hold bf16-rounded values wherever DeepSeek's
//   reference (inference/model.py + kernel.py) holds a bf16 tensor, and every op rounds where the reference rounds
//   (MODEL_SPEC §7). In Precision::kF32 nothing is rounded, nothing is quantised or QAT-simulated, and weights
//   are dequantised exactly (DESIGN §3).
// * Weights are described by WeightView (raw checkpoint bytes, possibly unaligned: read through the accessors).
// * T = tokens in the call, D = hidden size, H = attention heads, IH = indexer heads, E = routed experts,
//   K = experts per token, c = compressed head dim (512 main, 128 indexer), m = compress ratio (4 or 128).
// * Shapes are written [outer, ..., inner]; "bf16" in a shape comment means bf16 values in kReference mode.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "dsv4/status.h"

namespace dsv4 {
class ThreadPool;
}
namespace dsv4::model {
struct WeightRef;
}

namespace dsv4::backend {
namespace cpu {
class Workspace;  // backend/cpu/workspace.h
}

enum class Precision { kReference, kF32 };
const char* precision_name(Precision p);  // "reference", "f32"

// How an op runs: the numerics mode, the thread pool (nullptr = the calling thread only) and, for the CPU ops,
// the scratch memory they take their work arrays from (nullptr = a per-thread default that grows on first use;
// the engine gives each session one sized at creation, so a forward step allocates nothing).
struct Exec {
    Precision precision = Precision::kReference;
    ThreadPool* pool = nullptr;
    cpu::Workspace* workspace = nullptr;
};

// ------------------------------------------------------------------------------------------------ weights

enum class WeightFormat : uint8_t {
    kF32,        // data: f32 [rows, cols]
    kBF16,       // data: bf16 bits [rows, cols]
    kFP8Block,   // data: e4m3 bytes [rows, cols]; scale: UE8M0 bytes [ceil(rows/128), ceil(cols/128)]
    kMXFP4,      // data: bytes [rows, cols/2], low nibble = even column; scale: UE8M0 bytes [rows, cols/32]
};
const char* weight_format_name(WeightFormat f);

// A read-only view of one checkpoint tensor (the mapping outlives the op call). A 1-D tensor is rows = 1.
struct WeightView {
    WeightFormat format = WeightFormat::kF32;
    int64_t rows = 0, cols = 0;  // logical [out, in]
    const void* data = nullptr;
    const uint8_t* scale = nullptr;  // FP8 / MXFP4 only

    bool empty() const { return data == nullptr; }
    int64_t numel() const { return rows * cols; }
    // Element i of an F32 or BF16 tensor as f32 (unaligned-safe). Other formats: use dequantize_weight_row.
    float at(int64_t i) const {
        if (format == WeightFormat::kF32) {
            float v;
            std::memcpy(&v, static_cast<const uint8_t*>(data) + 4 * i, 4);
            return v;
        }
        uint16_t b;
        std::memcpy(&b, static_cast<const uint8_t*>(data) + 2 * i, 2);
        uint32_t u = uint32_t(b) << 16;
        float v;
        std::memcpy(&v, &u, 4);
        return v;
    }
};

// Row r of any weight, dequantised exactly to f32: out[cols]. (FP8: e4m3 · 2^(s-127); MXFP4: e2m1 · 2^(s-127).)
void dequantize_weight_row(const WeightView& w, int64_t r, float* out);
// Checks a view's shape against what an op expects; the message names `what`.
Status check_weight(const WeightView& w, int64_t rows, int64_t cols, const char* what);

// Exact f32 copies of checkpoint weights whose stored encoding no WeightFormat describes (see weight_view). Owned
// by whoever holds the views (the engine, for the lifetime of its weights). CPU reference only.
class WeightCopies {
public:
    const float* add(std::vector<float> values);
    size_t count() const { return owned_.size(); }

private:
    std::vector<std::unique_ptr<std::vector<float>>> owned_;
};

// THE bridge from a mapped checkpoint weight (model/weights.h) to a WeightView, for every format the weight map
// accepts. F32, BF16, FP8 blocks with UE8M0 scales on a 128-row boundary, and MXFP4 with UE8M0 scales point into
// the mapping. The others (F16, NVFP4, FP8 with F32 block scales, an FP8 slice not starting on a 128-row block)
// are dequantised exactly (model::dequantize_rows) into an F32 copy held by `copies` — so they then run as f32
// GEMMs, also in reference numerics. Without `copies` (the GPU path, which never copies) they are kUnsupported.
// Integer tables and absent tensors are errors naming the tensor.
Result<WeightView> weight_view(const model::WeightRef& w, WeightCopies* copies = nullptr);

// ------------------------------------------------------------------------------------------------ quant primitives

// act_quant (MODEL_SPEC §7.1, §7.2): per row, per `block` contiguous channels:
//   amax = max(max|x|, 1e-4); s = 2^ceil(log2(amax/448)); q = e4m3_rne(clamp(x/s, -448, 448)).
// Precision-independent (it is the quantiser itself). Every output pointer may be null.
struct ActQuantParams {
    const float* x = nullptr;       // [rows, cols]
    int64_t rows = 0, cols = 0;     // cols % block == 0
    int block = 128;                // 128 (GEMM activations) or 64 (KV simulation)
    uint8_t* codes = nullptr;       // [rows, cols] e4m3 bytes
    float* scale = nullptr;         // [rows, cols/block] s
    uint8_t* scale_e8m0 = nullptr;  // [rows, cols/block] log2(s) + 127
    float* x_sim = nullptr;         // [rows, cols] bf16(q·s) (may alias x: the in-place simulation)
};

// fp4_act_quant (MODEL_SPEC §7.2): per row, per 32 channels:
//   amax = max(max|x|, 6·2^-126); s = 2^ceil(log2(amax/6)); q = e2m1_rne(clamp(x/s, -6, 6)).
struct Fp4QuantParams {
    const float* x = nullptr;       // [rows, cols]
    int64_t rows = 0, cols = 0;     // cols % 32 == 0
    uint8_t* codes_packed = nullptr;  // [rows, cols/2], low nibble = even element, bit 3 = sign
    float* scale = nullptr;         // [rows, cols/32]
    uint8_t* scale_e8m0 = nullptr;  // [rows, cols/32]
    float* x_sim = nullptr;         // [rows, cols] bf16(q·s) (may alias x)
};

// Hadamard-128 (MODEL_SPEC §7.3): y = (x · H128) · 128^-½, Sylvester (natural order) H; kReference: bf16(y).
struct HadamardParams {
    const float* x = nullptr;  // [rows, 128]
    int64_t rows = 0;
    float* y = nullptr;        // [rows, 128] (may alias x)
};

// ------------------------------------------------------------------------------------------------ dense ops

enum class LinearOut : uint8_t {
    kBF16,  // output rounded to bf16 in kReference (FP8 / MXFP4 GEMMs always are; bf16 F.linear)
    kF32,   // output stays f32 (compressor projections, router logits, lm head: "up-cast to f32, f32 GEMM")
};

// y[t, o] = Σ_i W[o, i] · x[t, i]   (MODEL_SPEC §7.1)
// kReference:
//   FP8 weight   W8A8: x → act_quant(128); per 128-K block acc_b = Σ qa·qw (f32); y = Σ_b acc_b·(sa·sw); bf16(y).
//   MXFP4 weight W4A8: x → act_quant(128); per 32-K block acc_b = Σ qa·e2m1 (f32); y = Σ_b acc_b·(sa·sw); bf16(y).
//   BF16 weight: f32 accumulation of bf16 x and bf16 W; out kBF16 → bf16(y), kF32 → y (f32 x, f32 GEMM).
//   F32 weight: f32 GEMM, output per `out`.
// kF32: W dequantised exactly, x as given, f32 accumulation, no rounding.
struct LinearParams {
    const float* x = nullptr;  // [T, in]
    int64_t tokens = 0;
    WeightView w;              // [out, in]
    LinearOut out = LinearOut::kBF16;
    float* y = nullptr;        // [T, out]
};

// Weighted RMSNorm (MODEL_SPEC §4): y = bf16( w · (x · rsqrt(mean(x²) + eps)) ), f32 inside.
// weight empty → unweighted.
struct RmsNormParams {
    const float* x = nullptr;  // [rows, dim]
    int64_t rows = 0, dim = 0;
    WeightView weight;         // [dim] bf16 or f32, or empty
    float eps = 1e-6f;
    float* y = nullptr;        // [rows, dim] (may alias x)
};

// Per-position RoPE frequencies f_i, i = 0..31 (MODEL_SPEC §5.4.1). Built once per layer kind.
struct RopeFreqs {
    float f[32] = {};
};
// base = rope_theta (SWA, MTP) or compress_rope_theta with YaRN (CSA/HCA): yarn_factor <= 1 disables YaRN.
RopeFreqs rope_freqs(double base, double yarn_factor, int64_t original_max_position, double beta_fast,
                     double beta_slow, int rope_dim = 64);

// Interleaved RoPE on 64 channels of each vector: pair (x[2i], x[2i+1]) ·= e^{±i·θ}, θ = f32(pos)·f_i (f32),
// cos/sin in f32, complex product in f32, kReference: result bf16. inverse = conjugate (de-rotation, §5.4.8).
struct RopeParams {
    float* x = nullptr;            // [tokens, vecs, vec_stride], rotated in place
    int64_t tokens = 0;
    int64_t vecs = 1;              // vectors per token sharing the token's position (heads)
    int64_t vec_stride = 0;        // elements between consecutive vectors (and tokens: vecs·vec_stride)
    int64_t offset = 0;            // first rope channel inside a vector (448 for 512-d, 64 for 128-d)
    const int64_t* positions = nullptr;  // [tokens]
    const RopeFreqs* freqs = nullptr;
    bool inverse = false;
};

// ------------------------------------------------------------------------------------------------ mHC (§5.3, §5.6)

// Split + Sinkhorn of mix vectors (hc_mult 4): pre = σ(m[0:4]·s0 + b) + eps; post = 2σ(m[4:8]·s1 + b);
// C = softmax_rows(m[8:24]·s2 + b) + eps; column-normalise; (iters-1)× (row, column); all f32, both modes.
struct HcSinkhornParams {
    const float* mixes = nullptr;  // [n, 24]
    int64_t n = 0;
    WeightView scale;              // [3] f32
    WeightView base;               // [24] f32
    int iters = 20;
    float eps = 1e-6f;             // hc_eps
    float* pre = nullptr;          // [n, 4]
    float* post = nullptr;         // [n, 4]
    float* comb = nullptr;         // [n, 4, 4], comb[j][k]
};

// hc_pre: m = (fn @ flat(X)) · rsqrt(mean(flat(X)²) + norm_eps) (f32); split+Sinkhorn as above;
// x_out = bf16( Σ_j pre[j] · X[j] ).
struct HcPreParams {
    const float* x = nullptr;  // [T, 4, D] bf16 streams
    int64_t tokens = 0, dim = 0;
    WeightView fn;             // [24, 4D] f32
    WeightView scale;          // [3] f32
    WeightView base;           // [24] f32
    int iters = 20;
    float hc_eps = 1e-6f, norm_eps = 1e-6f;
    float* mixes = nullptr;    // [T, 24] (may be null)
    float* pre = nullptr;      // [T, 4]
    float* post = nullptr;     // [T, 4]
    float* comb = nullptr;     // [T, 4, 4]
    float* x_out = nullptr;    // [T, D]
};

// hc_post: out[k] = bf16( post[k]·a + Σ_j comb[j][k]·R[j] ), f32 math.
struct HcPostParams {
    const float* a = nullptr;         // [T, D] sub-block output
    const float* residual = nullptr;  // [T, 4, D] streams entering the sub-block
    const float* post = nullptr;      // [T, 4]
    const float* comb = nullptr;      // [T, 4, 4]
    int64_t tokens = 0, dim = 0;
    float* out = nullptr;             // [T, 4, D] (must not alias residual)
};

// hc_head: m = (fn @ flat(X)) · rsqrt(mean(flat(X)²) + norm_eps); pre = σ(m·scale[0] + base) + hc_eps;
// y = bf16( Σ_j pre[j]·X[j] ).
struct HcHeadParams {
    const float* x = nullptr;  // [T, 4, D]
    int64_t tokens = 0, dim = 0;
    WeightView fn;             // [4, 4D] f32
    WeightView scale;          // [1] f32
    WeightView base;           // [4] f32
    float hc_eps = 1e-6f, norm_eps = 1e-6f;
    float* pre = nullptr;      // [T, 4] (may be null)
    float* y = nullptr;        // [T, D]
};

// Embedding gather: out[t] = table[tokens[t]] (bf16 rows are exact in f32). Token ids are range-checked.
struct EmbeddingParams {
    const int32_t* tokens = nullptr;  // [T]
    int64_t n = 0;
    WeightView table;                 // [V, D] bf16
    float* out = nullptr;             // [T, D]
};

// ------------------------------------------------------------------------------------------------ attention (§5.4)

// Query path: qr = RMSNorm_{q_norm}(wq_a(x)); q = wq_b(qr).reshape(H, 512);
// q = q · rsqrt(mean(q², per head) + eps) — kReference on bf16 tensors: bf16(q²), bf16(mean), bf16(+eps),
// bf16(rsqrt), bf16(product); then RoPE on channels 448..511 at the token's position.
struct QPathParams {
    const float* x = nullptr;  // [T, D] attn_norm output
    int64_t tokens = 0;
    int64_t heads = 0, head_dim = 512, rope_dim = 64;
    WeightView wq_a;           // [q_lora, D] FP8
    WeightView q_norm;         // [q_lora] bf16
    WeightView wq_b;           // [H·512, q_lora] FP8
    const int64_t* positions = nullptr;  // [T]
    const RopeFreqs* freqs = nullptr;
    float eps = 1e-6f;
    float* qr = nullptr;       // [T, q_lora] (feeds the indexer)
    float* q = nullptr;        // [T, H, 512]
};

// Per-head unweighted RMSNorm of q (the middle step of QPathParams), exposed for testing and for backends.
struct QHeadNormParams {
    float* q = nullptr;  // [T, H, head_dim], in place
    int64_t tokens = 0, heads = 0, head_dim = 512;
    float eps = 1e-6f;
};

// Window K=V (§5.4.3): kv = RMSNorm_{kv_norm}(wkv(x)); RoPE on 448..511; kReference: fp8_sim (act_quant block 64,
// written back bf16) on channels 0..447. One row per token; the ring is the caller's.
struct WindowKvParams {
    const float* x = nullptr;  // [T, D]
    int64_t tokens = 0;
    int64_t head_dim = 512, rope_dim = 64;
    WeightView wkv;            // [512, D] FP8
    WeightView kv_norm;        // [512] bf16
    const int64_t* positions = nullptr;  // [T]
    const RopeFreqs* freqs = nullptr;
    float eps = 1e-6f;
    float* kv = nullptr;       // [T, 512]
};

// FP8 simulation of the nope channels of 512-d K=V vectors: channels [0, dim - rope_dim) → act_quant(64) → bf16(q·s)
// in place; kF32: no-op. Shared by window KV and compressed entries.
struct KvFp8SimParams {
    float* x = nullptr;  // [rows, dim]
    int64_t rows = 0, dim = 512, rope_dim = 64;
};

// Compressor projections (§5.4.4), f32 in both modes ("x.float() @ f32 copy of bf16 weights"):
//   kv[t] = wkv · x_t;  score[t] = wgate · x_t + ape[pos_t mod m]      width = (1+overlap)·c
struct CompressorProjectParams {
    const float* x = nullptr;  // [T, D]
    int64_t tokens = 0;
    WeightView wkv;            // [width, D] bf16
    WeightView wgate;          // [width, D] bf16
    WeightView ape;            // [m, width] f32
    int64_t ratio = 4;         // m
    const int64_t* positions = nullptr;  // [T]
    float* kv = nullptr;       // [T, width] f32
    float* score = nullptr;    // [T, width] f32 (ape included)
};

// Compressor window pooling: entry i of window slots [m, width] (score already holds ape):
//   HCA (overlap false, width c): E[ch] = Σ_t softmax_t(S[t][ch]) · K[t][ch] over the m slots.
//   CSA (overlap true, width 2c): candidates = previous window's slots channel ch (first half) ∪ this window's slots
//   channel c+ch (second half); softmax over the 2m candidates; previous window missing → weight 0.
//   kReference: E = bf16(E). f32 math.
// Windows are consecutive in `kv`/`score`; window w > 0 uses window w-1 of the same arrays as its previous window,
// window 0 uses prev_kv/prev_score (null: no previous window, the first window of the sequence).
struct CompressorPoolParams {
    const float* kv = nullptr;          // [n_windows·m, width]
    const float* score = nullptr;       // [n_windows·m, width]
    const float* prev_kv = nullptr;     // [m, width] or null
    const float* prev_score = nullptr;  // [m, width] or null
    int64_t n_windows = 0;
    int64_t ratio = 4;                  // m
    int64_t head_dim = 512;             // c
    bool overlap = true;                // CSA (ratio 4)
    float* out = nullptr;               // [n_windows, c]
};

enum class CompressedKind : uint8_t {
    kMain,     // RMSNorm → RoPE at window start → fp8_sim(0..c-64)  (c = 512)
    kIndexer,  // RMSNorm → RoPE at window start → Hadamard-128 → fp4_sim(32)  (c = 128)
};
// Finishes pooled entries into what the cache stores: RMSNorm_{norm}, RoPE on the last 64 channels at position
// first_window·m + i·m (the first token of window i), then the QAT simulation of `kind` (kReference only; kF32
// skips Hadamard and the simulation, which leave q·k unchanged in exact arithmetic).
struct CompressorFinishParams {
    const float* pooled = nullptr;  // [n, c]
    int64_t n = 0, head_dim = 512, rope_dim = 64;
    int64_t ratio = 4;
    int64_t first_window = 0;       // absolute window number of row 0
    CompressedKind kind = CompressedKind::kMain;
    WeightView norm;                // [c] bf16
    const RopeFreqs* freqs = nullptr;
    float eps = 1e-6f;
    float* normed = nullptr;        // [n, c] after the norm (may be null)
    float* out = nullptr;           // [n, c] entries as stored
};

// Indexer queries (§5.4.5): qI = indexer.wq_b(qr).reshape(IH, 128) (W8A8); RoPE on 64..127 at the token position;
// kReference: Hadamard-128 then fp4_sim(32).
struct IndexerQParams {
    const float* qr = nullptr;  // [T, q_lora]
    int64_t tokens = 0, heads = 0, head_dim = 128, rope_dim = 64;
    WeightView wq_b;            // [IH·128, q_lora] FP8
    const int64_t* positions = nullptr;  // [T]
    const RopeFreqs* freqs = nullptr;
    float* q = nullptr;         // [T, IH, 128]
};

// Indexer head weights: w_raw = weights_proj(x) (bf16 linear, bf16 out); w = bf16(w_raw · scale),
// scale = 128^-½ · IH^-½.
struct IndexerWeightsParams {
    const float* x = nullptr;  // [T, D]
    int64_t tokens = 0;
    WeightView weights_proj;   // [IH, D] bf16
    float scale = 0;           // head_dim^-½ · IH^-½
    float* w_raw = nullptr;    // [T, IH] (may be null)
    float* w = nullptr;        // [T, IH]
};

// Index scores: I[t, s] = Σ_h w[t,h] · ReLU(q[t,h] · key[s]); s visible iff s < (pos_t + 1) / ratio, else -inf.
// kReference on bf16 tensors: bf16(dot), relu, bf16(w·relu), f32 head sum then bf16.
struct IndexerScoresParams {
    const float* q = nullptr;     // [T, IH, 128]
    const float* keys = nullptr;  // [n, 128]
    const float* w = nullptr;     // [T, IH]
    int64_t tokens = 0, heads = 0, head_dim = 128, n = 0;
    int64_t ratio = 4;
    const int64_t* positions = nullptr;  // [T]
    float* scores = nullptr;      // [T, n]
};

// Top-k per row, descending score; equal scores in ascending index order (deterministic). A pick whose score is
// -inf (not visible) or a row with fewer than k entries gives -1.
struct TopKParams {
    const float* scores = nullptr;  // [rows, n]
    int64_t rows = 0, n = 0, k = 0;
    int32_t* idx = nullptr;         // [rows, k]
};

// Sparse attention with sink (§5.4.7): for each token t, head h, over the valid entries s of idx[t] (-1 = skip):
//   l_s = (q·kv_s)·scale; o = Σ_s e^{l_s-M} kv_s / (Σ_s e^{l_s-M} + e^{sink_h - M}).
// kReference: DeepSeek's kernel — index blocks of 64, online softmax with f32 running max/sum, P = exp(l - M_run)
// rounded to bf16 before P·V, f32 accumulators, bf16 output. kF32: exact softmax in f32 (one pass over max).
struct SparseAttnParams {
    const float* q = nullptr;      // [T, H, dim]
    const float* kv = nullptr;     // [N, dim] K = V rows
    const int32_t* idx = nullptr;  // [T, topk] rows of kv, -1 = nothing
    int64_t tokens = 0, heads = 0, dim = 512, n_kv = 0, topk = 0;
    WeightView sink;               // [H] f32
    float scale = 0;               // dim^-½
    float* out = nullptr;          // [T, H, dim]
};

// Grouped low-rank output projection wo_a (§5.4.8): group g = heads [g·H/G, (g+1)·H/G) flattened;
// z[t, g·R + r] = Σ_i wo_a[g·R + r, i] · o_g[t, i].  kReference: wo_a dequantised to bf16 (exact), bf16 einsum
// (f32 accumulation), bf16 out. o already de-rotated.
struct WoAParams {
    const float* o = nullptr;  // [T, H, 512]
    int64_t tokens = 0, heads = 0, head_dim = 512, groups = 0, rank = 0;
    WeightView wo_a;           // [G·R, (H/G)·512] FP8 (or bf16)
    float* z = nullptr;        // [T, G·R]
};

// ------------------------------------------------------------------------------------------------ MoE (§5.5)

// Router: logits = gate(f32) @ x(f32); scores = sqrt(softplus(logits)) (softplus(x) = x > 20 ? x : log1p(e^x));
// hash (bias empty): idx = tid2eid[token]; score routing: idx = top-K of (scores + bias), descending, ties to the
// lower expert; w = scores[idx] / Σ scores[idx] · routed_scale. f32 in both modes.
struct RouterParams {
    const float* x = nullptr;         // [T, D]
    int64_t tokens = 0, n_experts = 0, k = 0;
    WeightView gate;                  // [E, D] bf16
    WeightView bias;                  // [E] f32; empty for hash routing
    const int64_t* tid2eid = nullptr; // [vocab, k] (hash layers)
    int64_t vocab = 0;
    const int32_t* token_ids = nullptr;  // [T] (hash layers)
    float routed_scale = 1.5f;
    float* logits = nullptr;          // [T, E] (may be null)
    float* scores = nullptr;          // [T, E] (may be null)
    int32_t* idx = nullptr;           // [T, K]
    float* weights = nullptr;         // [T, K]
};

// One SwiGLU expert with clamp: u1 = w1(x), u3 = w3(x) (bf16 outputs in kReference); u1 = min(u1, limit);
// u3 = clamp(u3, -limit, limit); a = silu(u1)·u3 (f32); routed: a = route_w · a; y = w2(bf16(a)).
// Weights FP8 (shared expert, W8A8) or MXFP4 (routed, W4A8).
struct ExpertWeights {
    WeightView w1, w2, w3;  // w1, w3: [inter, D]; w2: [D, inter]
};
struct ExpertParams {
    const float* x = nullptr;        // [T, D]
    int64_t tokens = 0;
    ExpertWeights w;
    const float* route_w = nullptr;  // [T] or null (shared expert)
    float limit = 10.0f;             // swiglu_limit; <= 0 disables the clamp
    float* y = nullptr;              // [T, D]
};

// All routed experts of a layer: out[t, k] = expert idx[t,k] applied to x[t] with weight w[t,k].
struct RoutedExpertsParams {
    const float* x = nullptr;          // [T, D]
    int64_t tokens = 0, k = 0, n_experts = 0;
    const ExpertWeights* experts = nullptr;  // [E]
    const int32_t* idx = nullptr;      // [T, K]
    const float* weights = nullptr;    // [T, K]
    float limit = 10.0f;
    float* out = nullptr;              // [T, K, D]
};

// MoE sum: y = bf16( Σ over picks in ascending expert index of expert_out (f32) + shared ).
struct MoeSumParams {
    const float* expert_out = nullptr;  // [T, K, D]
    const int32_t* idx = nullptr;       // [T, K]
    const float* shared = nullptr;      // [T, D]
    int64_t tokens = 0, k = 0, dim = 0;
    float* y = nullptr;                 // [T, D]
};

}  // namespace dsv4::backend
