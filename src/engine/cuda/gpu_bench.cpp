// `dsv4 bench` on the GPU (include/dsv4/bench.h): decode steps and prefill of a synthetic V4-shaped model.
#include <nvtx3/nvToolsExt.h>  // header-only: a no-op unless a profiler is attached

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/common/buffer.h"
#include "backend/cuda/common/copy.h"
#include "backend/cuda/common/stream.h"
#include "backend/cuda/device.h"
#include "backend/cuda/kernels/kv_store/kv_store.h"
#include "core/thread_pool.h"
#include "dsv4/bench.h"
#include "dsv4/sampling.h"
#include "engine/cuda/gpu_internal.h"
#include "engine/cuda/gpu_synthetic.h"
#include "model/config.h"

namespace dsv4 {

namespace {

using engine::GpuModel;

// Every layer of every stage, in order.
template <class F>
void for_each_layer(const GpuModel& m, F&& f) {
    for (const GpuModel* s = &m; s; s = s->next.get())
        for (const engine::GpuLayer& l : s->layers) f(l);
}

// Free memory of the GPUs given (each counted once; GPU 0 when none is given).
Result<uint64_t> free_bytes_of(std::vector<int> devices) {
    if (devices.empty()) devices.push_back(0);
    std::sort(devices.begin(), devices.end());
    devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
    uint64_t free = 0;
    for (int d : devices) {
        DSV4_ASSIGN_OR_RETURN(const cuda::DeviceInfo info, cuda::describe_device(d));
        free += info.free_bytes;
    }
    return free;
}

// The GPUs a model's stages are on.
std::vector<int> devices_of(const GpuModel& m) {
    std::vector<int> d;
    for (const GpuModel* s = &m; s; s = s->next.get()) d.push_back(s->device);
    return d;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

// Device-to-device copy bandwidth (bytes read + written per second) on a 2 GiB buffer: the ceiling decode is
// compared against (ANCHORS: 4.27 TB/s on the H200).
Result<double> measure_copy_bandwidth(cuda::StreamHandle st) {
    const size_t bytes = size_t(1) << 30;
    DSV4_ASSIGN_OR_RETURN(cuda::DeviceBuffer a, cuda::DeviceBuffer::allocate(bytes, "copy probe"));
    DSV4_ASSIGN_OR_RETURN(cuda::DeviceBuffer b, cuda::DeviceBuffer::allocate(bytes, "copy probe"));
    DSV4_RETURN_IF_ERROR(a.fill_bytes(1));
    DSV4_ASSIGN_OR_RETURN(cuda::EventTimer t, cuda::EventTimer::create());
    std::vector<double> ms;
    for (int i = 0; i < 12; ++i) {
        DSV4_RETURN_IF_ERROR(t.start(st));
        DSV4_RETURN_IF_ERROR(cuda::copy_async(i % 2 ? a.data() : b.data(), i % 2 ? b.data() : a.data(), bytes, st));
        DSV4_RETURN_IF_ERROR(t.stop(st));
        DSV4_ASSIGN_OR_RETURN(float e, t.elapsed_ms());
        if (i >= 2) ms.push_back(e);
    }
    return 2.0 * double(bytes) / (median(ms) * 1e-3);
}

// Approximate GPU bytes of one full layer (FP8 linears with their block scales, MXFP4 experts, bf16 compressor and
// router weights) and of the globals (embedding, head): enough to choose how many layers fit.
double layer_bytes(const model::ModelConfig& c) {
    const double D = double(c.hidden_size), hd = double(c.head_dim), H = double(c.num_heads);
    const double fp8 = 1.0 + 1.0 / 16384.0, fp4 = 0.5 + 1.0 / 32.0;
    const double attn = (double(c.q_lora_rank) * D + H * hd * double(c.q_lora_rank) + hd * D +
                         double(c.o_groups * c.o_lora_rank) * (H / double(c.o_groups)) * hd +
                         D * double(c.o_groups * c.o_lora_rank)) * fp8 +
                        4.0 * hd * D * 2.0;  // compressor wkv / wgate (CSA width), bf16
    const double experts = 3.0 * double(c.moe_inter_dim) * D * (double(c.n_routed_experts) * fp4 + fp8);
    return attn + experts + double(c.n_routed_experts) * D * 2.0;
}

Result<model::ModelConfig> bench_config(const GpuBenchOptions& o, uint64_t free_bytes) {
    DSV4_ASSIGN_OR_RETURN(model::ModelConfig c, model::preset_config(o.preset));
    if (o.experts > 0) {
        if (o.experts < c.n_experts_per_token)
            return invalid_argument("--experts " + std::to_string(o.experts) + " is below the " +
                                    std::to_string(c.n_experts_per_token) + " experts each token picks");
        c.n_routed_experts = o.experts;
    }
    int64_t layers = o.layers;
    if (layers <= 0) {  // all layers if they fit in 80 % of the free memory (the rest for caches), else as many as do
        const double globals = 2.0 * double(c.vocab_size) * double(c.hidden_size) * 2.0;
        layers = std::clamp<int64_t>(int64_t((0.8 * double(free_bytes) - globals) / layer_bytes(c)), 1, c.num_layers);
    }
    if (layers < c.num_layers) {
        const int mtp_ratio = c.compress_ratios.back();
        c.compress_ratios.resize(size_t(layers));
        c.compress_ratios.push_back(mtp_ratio);
        c.num_layers = layers;
        c.num_hash_layers = std::min<int64_t>(c.num_hash_layers, layers);
    }
    c.num_mtp_layers = 0;
    return c;
}

// Bytes one decode step must read: every non-expert weight once (the embedding only its B rows), the routed experts
// the step's tokens touch (uniform routing: E·(1 - (1 - K/E)^B) distinct experts per layer), and per sequence and
// layer the window, the
// compressed entries attention gathers (CSA top-k, HCA all) and the indexer keys it scans, in their stored formats.
double decode_bytes(const GpuModel& m, int64_t batch, int64_t ctx, double expert_layer_bytes) {
    const model::ModelConfig& c = m.cfg;
    const double E = double(c.n_routed_experts), K = double(c.n_experts_per_token);
    const double touched = E * (1.0 - std::pow(1.0 - K / E, double(batch)));
    const double expert_bytes_one = expert_layer_bytes / E;
    // the embedding is gathered (B rows), not read whole
    const double embed_bytes = double(c.vocab_size) * double(c.hidden_size) * 2.0;
    double bytes = double(engine::gpu_weight_bytes(m)) - expert_layer_bytes * double(c.num_layers) - embed_bytes +
                   double(batch) * double(c.hidden_size) * 2.0;
    bytes += touched * expert_bytes_one * double(c.num_layers);
    const double row = double(cuda::kv_row_bytes(m.precision)), key = double(cuda::key_row_bytes(m.precision));
    for_each_layer(m, [&](const engine::GpuLayer& l) {
        double kv = double(c.window) * row;
        if (l.kind == model::AttnKind::kCSA)
            kv += double(std::min<int64_t>(c.index_topk, ctx / 4)) * row + double(ctx / 4) * key;
        else if (l.kind == model::AttnKind::kHCA)
            kv += double(ctx / 128) * row;
        bytes += kv * double(batch);
    });
    return bytes;
}

// Matmul FLOPs of one prefill token: 2 per weight parameter it multiplies (non-expert linears, K routed experts and
// the shared expert; the LM head when every row gets logits), plus attention's q·k and p·v over the window and the
// selected entries (4·H·512 per entry).
double prefill_flops_per_token(const GpuModel& m, double expert_layer_params, int64_t ctx, bool head) {
    const model::ModelConfig& c = m.cfg;
    double dense = 0;
    for_each_layer(m, [&](const engine::GpuLayer& l) {
        const engine::GpuAttention& a = l.attn;
        for (const cuda::DeviceWeightView* w : {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_a, &a.wo_b, &a.index_wq_b,
                                                &a.index_weights_proj, &a.compressor.wkv, &a.compressor.wgate,
                                                &a.index_compressor.wkv, &a.index_compressor.wgate, &l.ffn.gate,
                                                &l.ffn.shared_w1, &l.ffn.shared_w2, &l.ffn.shared_w3})
            dense += double(w->rows) * double(w->cols);
        dense += expert_layer_params * double(c.n_experts_per_token) / double(c.n_routed_experts);
        double entries = double(c.window);
        if (l.kind == model::AttnKind::kCSA) entries += double(std::min<int64_t>(c.index_topk, ctx / 8));
        if (l.kind == model::AttnKind::kHCA) entries += double(ctx / 2 / 128);
        dense += 2.0 * double(c.num_heads) * double(c.head_dim) * entries;
    });
    if (head) dense += double(c.vocab_size) * double(c.hidden_size);
    return 2.0 * dense;
}

struct Point {
    int64_t batch = 0, ctx = 0;
    bool ran = false;
    std::string why;  // when skipped
    double step_ms = 0, bytes = 0;
};

// Cache bytes of `sessions` sessions of `ctx` tokens (the paged pools' rows, keys and compressor states).
double cache_bytes(const GpuModel& m, int64_t sessions, int64_t ctx) {
    const model::ModelConfig& c = m.cfg;
    const double kv_row = double(cuda::kv_row_bytes(m.precision)), key_row = double(cuda::key_row_bytes(m.precision));
    double bytes = 0;
    for_each_layer(m, [&](const engine::GpuLayer& l) {
        const double s = double(sessions);
        bytes += (double(m.pass.rows) + 128.0 * s) * kv_row;
        if (l.ratio) bytes += (s * double(ctx / l.ratio) + 64.0 * s) * kv_row;
        if (l.ratio) bytes += s * double(l.ratio) * double(c.head_dim) * 4.0 * (l.ratio == 4 ? 8.0 : 2.0);
        if (l.kind == model::AttnKind::kCSA) bytes += (s * double(ctx / 4) + 64.0 * s) * key_row;
    });
    return bytes;
}

// Runs one (batch, context) point; a point whose caches do not fit the free memory is skipped with the reason.
Status run_point(GpuModel& m, Point& p, const GpuBenchOptions& o, uint64_t free_bytes) {
    const int64_t ctx_max = p.ctx + o.warmup + o.steps + 1;
    // sessions of up to `capacity` tokens (their page tables, and what a decode step scans); the pool holds at least
    // that many tokens (resize_gpu_cache)
    const int64_t capacity = std::max(ctx_max, o.capacity);
    const double need = std::max(cache_bytes(m, p.batch, ctx_max), cache_bytes(m, 1, capacity));
    if (need > double(free_bytes)) {
        p.why = "caches need " + std::to_string(int64_t(need / double(1 << 30))) + " GiB, " +
                std::to_string(free_bytes >> 30) + " GiB free";
        return Status::ok();
    }
    Status sized = engine::resize_gpu_cache(m, p.batch, capacity, p.batch * ctx_max);
    if (!sized) {
        if (sized.code() != StatusCode::kResourceExhausted) return sized;
        p.why = "out of GPU memory for the caches";
        return engine::resize_gpu_cache(m, 1, 4096, 4096);
    }
    DSV4_RETURN_IF_ERROR(engine::fill_gpu_cache_synthetic(m));
    std::vector<engine::GpuSequencePtr> seqs;
    for (int64_t b = 0; b < p.batch; ++b) {
        DSV4_ASSIGN_OR_RETURN(engine::GpuSequencePtr s, engine::make_gpu_sequence(m, ctx_max, 1));
        DSV4_RETURN_IF_ERROR(engine::set_gpu_sequence_position(m, *s, p.ctx));
        seqs.push_back(std::move(s));
    }
    const int64_t vocab = m.cfg.vocab_size;
    std::vector<float> logits(size_t(p.batch * vocab));
    std::vector<int32_t> tokens(size_t(p.batch));
    std::vector<engine::GpuBatchSeq> pass(size_t(p.batch));
    // each row's draw (o.sampling; the penalties count the tokens the row was fed), on the GPU or by a host sampler
    // per row; rows the GPU declines are drawn on the host too, as generation does
    const SamplingParams& draw = o.sampling;
    std::vector<SampleResult> drawn(size_t(p.batch));
    std::vector<EngineSample> requests(size_t(p.batch));
    std::vector<std::vector<int32_t>> history(size_t(p.batch));
    std::vector<std::unique_ptr<Sampler>> samplers;
    for (int64_t b = 0; b < p.batch; ++b) {
        history[size_t(b)].reserve(size_t(o.warmup + o.steps));
        requests[size_t(b)] = {&draw, 0.5, &drawn[size_t(b)]};
        samplers.push_back(std::make_unique<Sampler>(int32_t(vocab), draw));
    }
    // the timer's events on the first stage's device, whose stream they are recorded on (the caches' filling left
    // the last stage's current)
    DSV4_RETURN_IF_ERROR(cuda::set_device(m.device));
    DSV4_ASSIGN_OR_RETURN(cuda::EventTimer timer, cuda::EventTimer::create());
    std::vector<double> ms;
    for (int it = 0; it < o.warmup + o.steps; ++it) {
        for (int64_t b = 0; b < p.batch; ++b) {
            tokens[size_t(b)] = int32_t((b * 7919 + it * 104729) % vocab);
            history[size_t(b)].push_back(tokens[size_t(b)]);
            requests[size_t(b)].history = history[size_t(b)];
            pass[size_t(b)] = {.seq = seqs[size_t(b)].get(),
                               .tokens = &tokens[size_t(b)],
                               .n = 1,
                               .logits = logits.data() + b * vocab,
                               .sample = o.draw_on_host ? nullptr : &requests[size_t(b)]};
        }
        // one named range per decode step: a profiler selects the step's kernels by it (scripts/profile-decode)
        // and skips the model's load, whose in-place expert repack Nsight Compute's kernel replay fails on
        nvtxRangePushA("dsv4_decode_step");
        // the step's start and end on the first stage's stream (events of one device): the pass ends with the host
        // waiting for every stage, so the end mark is taken after the last stage's work
        DSV4_RETURN_IF_ERROR(cuda::set_device(m.device));
        DSV4_RETURN_IF_ERROR(timer.start(m.stream.handle()));
        Status step = engine::gpu_forward_batch(m, pass);
        if (step)  // the host's draws, in parallel as the server makes them
            parallel_for(m.host_pool, p.batch, 1, [&](int64_t b0, int64_t b1) {
                for (int64_t b = b0; b < b1; ++b)
                    if (o.draw_on_host || drawn[size_t(b)].token < 0)
                        (void)samplers[size_t(b)]->sample({logits.data() + b * vocab, size_t(vocab)},
                                                          history[size_t(b)], drawn[size_t(b)]);
            });
        nvtxRangePop();
        DSV4_RETURN_IF_ERROR(step);
        DSV4_RETURN_IF_ERROR(cuda::set_device(m.device));
        DSV4_RETURN_IF_ERROR(timer.stop(m.stream.handle()));
        DSV4_ASSIGN_OR_RETURN(float e, timer.elapsed_ms());
        if (it >= o.warmup) ms.push_back(e);
    }
    p.step_ms = median(ms);
    p.ran = true;
    return Status::ok();
}

// What the load took on each GPU (its free memory before and after: weights, pass buffers, caches for one session of
// 4,096 tokens, the CUDA context where it was new) against what the placement planned for its stages there
// (GpuStagePlan::bytes): the plan must not be short, or a load it accepts can run out of memory.
Status report_load_memory(const GpuModel& m, const std::vector<std::pair<int, uint64_t>>& free_before, std::FILE* out) {
    std::vector<std::pair<int, uint64_t>> seen;
    for (const auto& [device, before] : free_before) {
        if (std::any_of(seen.begin(), seen.end(), [&](const auto& s) { return s.first == device; })) continue;
        seen.emplace_back(device, before);
        uint64_t planned = 0;
        for (const GpuModel* s = &m; s; s = s->next.get())
            if (s->device == device) planned += s->planned_bytes;
        if (planned == 0) continue;  // a GPU named that holds no stage
        DSV4_ASSIGN_OR_RETURN(const cuda::DeviceInfo now, cuda::describe_device(device));
        const double used = double(int64_t(before) - int64_t(now.free_bytes));
        std::fprintf(out, "GPU %d: the load took %.2f GiB, the placement planned %.2f GiB (%+.1f%%)\n", device,
                     used / double(uint64_t(1) << 30), double(planned) / double(uint64_t(1) << 30),
                     100.0 * (double(planned) - used) / used);
    }
    return Status::ok();
}

// The model's largest pass: the decode batches (up to 256 sequences) and the prefill's passes (the engine's).
int64_t bench_pass_rows(const GpuBenchOptions& o, int64_t max_batch) {
    const int64_t decode = std::min<int64_t>(max_batch, 256);
    return o.prefill_tokens > 0 ? std::max(decode, std::min(o.prefill_tokens, engine::kGpuMaxPassRows)) : decode;
}

}  // namespace

Status run_gpu_bench(const GpuBenchOptions& o, std::FILE* out) {
    DSV4_ASSIGN_OR_RETURN(cuda::DeviceInfo dev, cuda::describe_device(o.devices.empty() ? 0 : o.devices[0]));
    DSV4_ASSIGN_OR_RETURN(const uint64_t free_at_start, free_bytes_of(o.devices));
    DSV4_ASSIGN_OR_RETURN(model::ModelConfig cfg, bench_config(o, free_at_start));
    const int64_t max_batch = *std::max_element(o.batches.begin(), o.batches.end());
    const backend::Precision precision =
        o.precision == EnginePrecision::kF32 ? backend::Precision::kF32 : backend::Precision::kReference;
    std::fprintf(out, "dsv4 bench: %s shapes, %lld layers, %lld experts/layer, %s numerics, GPU %s (driver %s)\n",
                 o.preset.c_str(), static_cast<long long>(cfg.num_layers),
                 static_cast<long long>(cfg.n_routed_experts), engine_precision_name(o.precision), dev.name.c_str(),
                 dev.driver_version.c_str());
    // each named GPU's free memory before the load, to set what the load took beside what the placement planned
    std::vector<std::pair<int, uint64_t>> free_before;
    for (int d : o.devices.empty() ? std::vector<int>{0} : o.devices) {
        DSV4_ASSIGN_OR_RETURN(const cuda::DeviceInfo info, cuda::describe_device(d));
        free_before.emplace_back(d, info.free_bytes);
    }
    const auto t0 = std::chrono::steady_clock::now();
    ThreadPool host_pool;  // copies the logits on from the landing buffer, as the engine's pool does
    DSV4_ASSIGN_OR_RETURN(std::shared_ptr<GpuModel> m,
                          engine::make_synthetic_gpu_model(cfg, precision, bench_pass_rows(o, max_batch), o.devices));
    engine::set_gpu_graphs(*m, o.graphs);
    engine::set_gpu_host_pool(*m, &host_pool);
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::vector<int> devices = devices_of(*m);
    if (m->next) std::fprintf(out, "a pipeline of %zu stages: %s\n", devices.size(), engine::gpu_placement(*m).c_str());
    DSV4_RETURN_IF_ERROR(report_load_memory(*m, free_before, out));
    DSV4_RETURN_IF_ERROR(cuda::set_device(m->device));
    DSV4_ASSIGN_OR_RETURN(double copy_bw, measure_copy_bandwidth(m->stream.handle()));
    const double expert_layer_params = 3.0 * double(cfg.moe_inter_dim) * double(cfg.hidden_size) * double(cfg.n_routed_experts);
    const double expert_layer_bytes = expert_layer_params * (0.5 + 1.0 / 32.0);
    int64_t repacked = 0, shared_fused = 0;
    for_each_layer(*m, [&](const engine::GpuLayer& l) {
        repacked += l.ffn.mxfp4_repacked;
        shared_fused += l.ffn.shared_fp8 != nullptr;
    });
    std::fprintf(out,
                 "weights on the GPU%s: %.2f GB (generated in %.1f s); measured copy bandwidth %.2f TB/s (GPU %d)\n",
                 m->next ? "s" : "", double(engine::gpu_weight_bytes(*m)) * 1e-9, load_s, copy_bw * 1e-12, m->device);
    std::fprintf(out, "routed experts in the decode kernel's repacked MXFP4 layout: %lld of %lld layers\n",
                 static_cast<long long>(repacked), static_cast<long long>(cfg.num_layers));
    std::fprintf(out,
                 "shared expert inside the decode kernel's launches (passes of up to %lld rows): %lld of %lld layers\n",
                 static_cast<long long>(engine::kFusedSharedExpertMaxRows), static_cast<long long>(shared_fused),
                 static_cast<long long>(cfg.num_layers));

    const SamplingParams& sp = o.sampling;
    std::fprintf(out,
                 "each decode row's next token drawn %s: temperature %g, top-k %d, top-p %g, min-p %g, penalties "
                 "repetition %g presence %g frequency %g\n\n",
                 o.draw_on_host ? "on the host from its logits (--draw-on-host)" : "on the GPU", double(sp.temperature),
                 sp.top_k, double(sp.top_p), double(sp.min_p), double(sp.repetition_penalty),
                 double(sp.presence_penalty), double(sp.frequency_penalty));
    if (o.capacity > 0)
        std::fprintf(out, "caches sized for sessions of %lld tokens (--capacity), filled to each context\n\n",
                     static_cast<long long>(o.capacity));
    std::fprintf(out, "| batch | context | step ms | per layer us | tok/s | GB moved | TB/s | %% of copy |\n");
    std::fprintf(out, "|---|---|---|---|---|---|---|---|\n");
    for (int64_t ctx : o.contexts) {
        for (int64_t batch : o.batches) {
            Point p;
            p.batch = std::min<int64_t>(batch, 256);
            p.ctx = ctx;
            DSV4_RETURN_IF_ERROR(engine::resize_gpu_cache(*m, 1, 4096, 4096));  // free the last point's caches
            DSV4_ASSIGN_OR_RETURN(const uint64_t now, free_bytes_of(devices));
            const uint64_t reserve = uint64_t(2) << 30;
            DSV4_RETURN_IF_ERROR(run_point(*m, p, o, now > reserve ? now - reserve : 0));
            if (!p.ran) {
                std::fprintf(out, "| %lld | %lld | skipped: %s | | | | | |\n", static_cast<long long>(p.batch),
                             static_cast<long long>(ctx), p.why.c_str());
                continue;
            }
            p.bytes = decode_bytes(*m, p.batch, ctx, expert_layer_bytes);
            const double tbs = p.bytes / (p.step_ms * 1e-3) * 1e-12;
            std::fprintf(out, "| %lld | %lld | %.3f | %.1f | %.0f | %.2f | %.2f | %.0f%% |\n",
                         static_cast<long long>(p.batch), static_cast<long long>(ctx), p.step_ms,
                         p.step_ms * 1e3 / double(cfg.num_layers), double(p.batch) / (p.step_ms * 1e-3),
                         p.bytes * 1e-9, tbs, 100.0 * tbs * 1e12 / copy_bw);
            std::fflush(out);
        }
    }
    if (o.prefill_tokens > 0) {
        const int64_t chunk = engine::gpu_max_rows(*m);
        DSV4_RETURN_IF_ERROR(engine::resize_gpu_cache(*m, 1, 4096, 4096));  // free the decode points' caches
        DSV4_ASSIGN_OR_RETURN(const uint64_t before, free_bytes_of(devices));
        const int64_t capacity = std::max(o.prefill_tokens, o.capacity);
        DSV4_RETURN_IF_ERROR(engine::resize_gpu_cache(*m, 1, capacity, o.prefill_tokens));
        DSV4_ASSIGN_OR_RETURN(const uint64_t after, free_bytes_of(devices));
        std::fprintf(out,
                     "\nprefill in a session of %lld tokens' capacity: caches and pass buffers take %.2f GB more than "
                     "for 4,096 tokens\n",
                     static_cast<long long>(capacity), double(int64_t(before) - int64_t(after)) * 1e-9);
        DSV4_ASSIGN_OR_RETURN(engine::GpuSequencePtr s, engine::make_gpu_sequence(*m, o.prefill_tokens, chunk));
        const int64_t vocab = cfg.vocab_size;
        std::vector<float> logits(size_t((o.prefill_all_logits ? chunk : 1) * vocab));
        std::vector<int32_t> tokens(size_t(o.prefill_tokens));
        for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7919) % size_t(vocab));
        DSV4_RETURN_IF_ERROR(cuda::set_device(m->device));  // the timer's events with the first stage's stream
        DSV4_ASSIGN_OR_RETURN(cuda::EventTimer timer, cuda::EventTimer::create());
        // The prompt twice on the same sequence, reset in between: the first time includes what a process pays once
        // (first launches of every kernel, cuBLASLt's first calls per shape), the second is what every later prompt
        // of a running server or chat takes; tok/s and TFLOP/s are the second's.
        // the whole prompt between two marks on the first stage's stream: the last pass ends with the host waiting
        // for every stage, while a pipeline leaves the passes before it running (the next starts on the first stage
        // while the others finish), so a pass's own time is not what the prompt takes
        double first_ms = 0, total_ms = 0;
        for (int rep = 0; rep < 2; ++rep) {
            engine::reset_gpu_sequence(*s);
            DSV4_RETURN_IF_ERROR(cuda::set_device(m->device));
            DSV4_RETURN_IF_ERROR(timer.start(m->stream.handle()));
            for (int64_t off = 0; off < o.prefill_tokens; off += chunk) {
                const int64_t n = std::min(chunk, o.prefill_tokens - off);
                const bool last_pass = off + n == o.prefill_tokens;
                engine::GpuBatchSeq q{.seq = s.get(),
                                      .tokens = tokens.data() + off,
                                      .n = n,
                                      .logits = logits.data(),
                                      .logits_from = o.prefill_all_logits ? 0 : (last_pass ? n - 1 : n)};
                nvtxRangePushA("dsv4_prefill_pass");  // selects the pass's kernels (scripts/profile-decode --prefill)
                const Status pass = engine::gpu_forward_batch(*m, std::span<engine::GpuBatchSeq>(&q, 1));
                nvtxRangePop();
                DSV4_RETURN_IF_ERROR(pass);
            }
            DSV4_RETURN_IF_ERROR(cuda::set_device(m->device));
            DSV4_RETURN_IF_ERROR(timer.stop(m->stream.handle()));
            DSV4_ASSIGN_OR_RETURN(float e, timer.elapsed_ms());
            total_ms = e;
            if (rep == 0) first_ms = total_ms;
        }
        const double tok_s = double(o.prefill_tokens) / (total_ms * 1e-3);
        const double tflops =
            prefill_flops_per_token(*m, expert_layer_params, o.prefill_tokens, o.prefill_all_logits) * tok_s * 1e-12;
        std::fprintf(out,
                     "\nprefill %lld tokens in passes of %lld (%s): %.1f ms, %.0f tok/s, %.1f TFLOP/s = %.1f%% of the "
                     "bf16 ceiling (793 measured) and %.1f%% of the fp8 peak (1979 datasheet); the process's first "
                     "prompt took %.1f ms\n",
                     static_cast<long long>(o.prefill_tokens), static_cast<long long>(chunk),
                     o.prefill_all_logits ? "every row's logits to the host" : "the last row's logits", total_ms, tok_s,
                     tflops, 100.0 * tflops / 793.0, 100.0 * tflops / 1979.0, first_ms);
    }
    const engine::GpuGraphStats g = engine::gpu_graph_stats(*m);
    std::fprintf(out,
                 "decode graphs: %lld captured, %lld replayed, %lld nodes in the largest (%lld kernel edges with "
                 "programmatic launch)\n",
                 static_cast<long long>(g.captures), static_cast<long long>(g.replays),
                 static_cast<long long>(g.nodes), static_cast<long long>(g.programmatic_edges));
    return Status::ok();
}

}  // namespace dsv4
