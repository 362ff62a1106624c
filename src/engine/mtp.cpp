#include "engine/mtp.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "backend/cpu/cpu_ops.h"
#include "core/formats.h"

namespace dsv4::engine {

namespace cpu = backend::cpu;

MtpState make_mtp_state(const model::ModelConfig& cfg, int64_t max_context, int64_t chunk_rows) {
    MtpState m;
    const int64_t L = cfg.num_layers, D = cfg.hidden_size, hc = cfg.hc_mult;
    m.seq = make_sequence_state(cfg, max_context, chunk_rows, 1, int(L));
    m.last_streams.assign(size_t(hc * D), 0.0f);
    m.main_streams.assign(size_t(chunk_rows * hc * D), 0.0f);
    m.inputs.assign(size_t(chunk_rows * hc * D), 0.0f);
    m.h.assign(size_t(chunk_rows * hc * D), 0.0f);
    m.e.assign(size_t(chunk_rows * D), 0.0f);
    return m;
}

void reset_mtp_state(MtpState& m) {
    reset_sequence_state(m.seq);
    m.has_last = false;
}

Status mtp_chunk(const ForwardContext& ctx, MtpState& m, ForwardScratch& s, SequenceScratch& own, const int32_t* tokens,
                 int64_t n, int64_t p0, float* mtp_logits, int64_t logits_from) {
    const model::ModelConfig& cfg = *ctx.cfg;
    const MtpViews& w = *ctx.weights->mtp;
    const int64_t D = cfg.hidden_size, hc = cfg.hc_mult, vocab = cfg.vocab_size;
    const float eps = float(cfg.rms_norm_eps);
    const int64_t first = p0 == 0 ? 1 : 0;  // position 0 has no previous main hidden
    if (logits_from < 0 || logits_from > n)
        return internal_error("mtp_chunk: logits from row " + std::to_string(logits_from) + " of " + std::to_string(n));
    if (first && logits_from == 0) std::fill(mtp_logits, mtp_logits + vocab, std::numeric_limits<float>::quiet_NaN());
    const int64_t rows = n - first;
    if (rows > 0) {
        if (m.seq.position != p0 + first - 1 || (!first && !m.has_last))
            return internal_error("MTP state is out of step with the main model");
        // h = h_proj(RMSNorm_hnorm(main streams at p-1)), per stream
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t i = r + first;
            const float* src = i == 0 ? m.last_streams.data() : m.main_streams.data() + (i - 1) * hc * D;
            std::memcpy(m.h.data() + r * hc * D, src, size_t(hc * D) * sizeof(float));
        }
        backend::RmsNormParams hn;
        hn.x = m.h.data();
        hn.rows = rows * hc;
        hn.dim = D;
        hn.weight = w.hnorm;
        hn.eps = eps;
        hn.y = m.h.data();
        DSV4_RETURN_IF_ERROR(cpu::rmsnorm(ctx.exec, hn));
        backend::LinearParams hp;
        hp.x = m.h.data();
        hp.tokens = rows * hc;
        hp.w = w.h_proj;
        hp.y = m.inputs.data();
        DSV4_RETURN_IF_ERROR(cpu::linear(ctx.exec, hp));

        // e = e_proj(RMSNorm_enorm(embed[t_p])), broadcast to the streams
        backend::EmbeddingParams ep;
        ep.tokens = tokens + first;
        ep.n = rows;
        ep.table = ctx.weights->embed;
        ep.out = m.e.data();
        DSV4_RETURN_IF_ERROR(cpu::embedding(ctx.exec, ep));
        backend::RmsNormParams en;
        en.x = m.e.data();
        en.rows = rows;
        en.dim = D;
        en.weight = w.enorm;
        en.eps = eps;
        en.y = m.e.data();
        DSV4_RETURN_IF_ERROR(cpu::rmsnorm(ctx.exec, en));
        backend::LinearParams lp;
        lp.x = m.e.data();
        lp.tokens = rows;
        lp.w = w.e_proj;
        lp.y = s.block_out.data();
        DSV4_RETURN_IF_ERROR(cpu::linear(ctx.exec, lp));
        const bool round = ctx.exec.precision == backend::Precision::kReference;  // bf16 + bf16 → bf16
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t k = 0; k < hc; ++k) {
                float* x = m.inputs.data() + (r * hc + k) * D;
                const float* e = s.block_out.data() + r * D;
                for (int64_t d = 0; d < D; ++d) x[d] = round ? round_bf16(x[d] + e[d]) : x[d] + e[d];
            }

        for (int64_t r = 0; r < rows; ++r) {
            s.positions[size_t(r)] = m.seq.position + r;
            s.tokens[size_t(r)] = tokens[first + r];
        }
        BatchSeq one;  // the block as a pass of this one sequence
        one.state = &m.seq;
        one.scratch = &own;
        one.exec = ctx.exec;
        one.tokens = tokens + first;
        one.n = rows;
        DSV4_RETURN_IF_ERROR(block_forward(ctx, w.block, 0, std::span<BatchSeq>(&one, 1), s, rows, m.inputs.data(),
                                           s.streams_b.data()));
        const int64_t h0 = std::max(first, logits_from);  // the first row whose head runs
        if (h0 < n)
            DSV4_RETURN_IF_ERROR(head_forward(ctx, w.hc_head, w.norm, s, m.inputs.data() + (h0 - first) * hc * D,
                                              n - h0, mtp_logits + (h0 - logits_from) * vocab));
        m.seq.position += rows;
    }
    std::memcpy(m.last_streams.data(), m.main_streams.data() + (n - 1) * hc * D, size_t(hc * D) * sizeof(float));
    m.has_last = true;
    return Status::ok();
}

}  // namespace dsv4::engine
