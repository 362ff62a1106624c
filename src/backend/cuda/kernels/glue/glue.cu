// Launchers and kernels of the glue family (glue.h): one thread per element, grid-stride loops.
#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/kernels/glue/glue.h"

namespace dsv4::cuda {

using backend::Precision;
using backend::WeightFormat;

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
    const int64_t b = (n + kThreads - 1) / kThreads;
    return unsigned(b < 1 ? 1 : b > 65535 * 16 ? 65535 * 16 : b);
}

template <typename T>
__global__ void broadcast_streams_kernel(const T* x, int64_t rows, int64_t dim, int64_t hc, T* streams) {
    const int64_t total = rows * hc * dim;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t c = i % dim, t = i / (hc * dim);
        streams[i] = x[t * dim + c];
    }
}

__global__ void add_ape_kernel(float* score, int64_t rows, int64_t width, int64_t ratio, const int64_t* positions,
                               const void* ape, bool ape_bf16) {
    const int64_t total = rows * width;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = i / width, c = i % width;
        const int64_t k = (positions[t] % ratio) * width + c;
        const float b = ape_bf16 ? to_f32(static_cast<const __nv_bfloat16*>(ape)[k]) : static_cast<const float*>(ape)[k];
        score[i] = __fadd_rn(score[i], b);
    }
}

template <typename T>
__global__ void scale_kernel(T* x, int64_t n, float scale) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        x[i] = from_f32<T>(__fmul_rn(to_f32(x[i]), scale));
}

__global__ void attn_index_kernel(AttnIndexArgs a, int64_t width) {
    const int64_t total = a.n * width;
    if (a.p0_device) a.p0 = *a.p0_device;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t q = i / width, c = i % width, pos = a.p0 + q;
        int32_t v = -1;
        if (c < a.win_cols) {
            const int64_t first = pos - (a.window - 1) > 0 ? pos - (a.window - 1) : 0;
            const int64_t p = first + c;
            if (p <= pos) v = int32_t(p >= a.p0 ? p - a.p0 : a.chunk_rows + p % a.window);
        } else if (a.picks) {
            const int32_t pick = a.picks[q * a.topk + (c - a.win_cols)];
            if (pick >= 0) v = int32_t(a.chunk_rows + a.window + pick);
        } else {
            const int64_t j = c - a.win_cols;
            if (j < (pos + 1) / a.ratio) v = int32_t(a.chunk_rows + a.window + j);
        }
        a.idx[i] = v;
    }
}

__global__ void compressor_append_kernel(CompressorAppendArgs a) {
    const int64_t slot = *a.position % a.ratio;
    for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < a.width; c += int64_t(gridDim.x) * blockDim.x) {
        a.open_kv[slot * a.width + c] = a.kv[c];
        a.open_score[slot * a.width + c] = a.score[c];
    }
}

__global__ void compressor_roll_kernel(CompressorRollArgs a) {
    if (*a.position % a.ratio != a.ratio - 1) return;
    const int64_t total = a.ratio * a.width;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        a.prev_kv[i] = a.open_kv[i];
        a.prev_score[i] = a.open_score[i];
    }
}

template <typename T>
__global__ void ring_store_kernel(RingStoreArgs a) {
    T* pool = static_cast<T*>(a.pool);
    T* dst = pool + (a.chunk_rows + *a.position % a.window) * a.row_elems;
    for (int64_t c = threadIdx.x; c < a.row_elems; c += blockDim.x) dst[c] = pool[c];
}

}  // namespace

Status sm90_compressor_append(const CompressorAppendArgs& a, StreamHandle stream) {
    const char* op = "sm90_compressor_append";
    if (!a.position || !a.kv || !a.score || !a.open_kv || !a.open_score || a.ratio <= 0 || a.width <= 0)
        return invalid_argument(std::string(op) + ": null pointer or bad shape");
    compressor_append_kernel<<<blocks_for(a.width), kThreads, 0, stream>>>(a);
    return launch_status(op);
}

Status sm90_compressor_roll(const CompressorRollArgs& a, StreamHandle stream) {
    const char* op = "sm90_compressor_roll";
    if (!a.position || !a.open_kv || !a.open_score || !a.prev_kv || !a.prev_score || a.ratio <= 0 || a.width <= 0)
        return invalid_argument(std::string(op) + ": null pointer or bad shape");
    compressor_roll_kernel<<<blocks_for(a.ratio * a.width), kThreads, 0, stream>>>(a);
    return launch_status(op);
}

Status sm90_ring_store(Precision precision, const RingStoreArgs& a, StreamHandle stream) {
    const char* op = "sm90_ring_store";
    if (!a.position || !a.pool || a.window <= 0 || a.row_elems <= 0 || a.chunk_rows < 1)
        return invalid_argument(std::string(op) + ": null pointer or bad shape");
    if (precision == Precision::kReference)
        ring_store_kernel<__nv_bfloat16><<<1, kThreads, 0, stream>>>(a);
    else
        ring_store_kernel<float><<<1, kThreads, 0, stream>>>(a);
    return launch_status(op);
}

Status sm90_broadcast_streams(Precision precision, const BroadcastStreamsArgs& a, StreamHandle stream) {
    const char* op = "sm90_broadcast_streams";
    if (!a.x || !a.streams || a.rows < 0 || a.dim <= 0 || a.hc <= 0)
        return invalid_argument(std::string(op) + ": null pointer or bad shape");
    if (a.rows == 0) return Status::ok();
    const unsigned g = blocks_for(a.rows * a.hc * a.dim);
    if (precision == Precision::kReference)
        broadcast_streams_kernel<<<g, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(a.x), a.rows, a.dim,
                                                             a.hc, static_cast<__nv_bfloat16*>(a.streams));
    else
        broadcast_streams_kernel<<<g, kThreads, 0, stream>>>(static_cast<const float*>(a.x), a.rows, a.dim, a.hc,
                                                             static_cast<float*>(a.streams));
    return launch_status(op);
}

Status sm90_add_ape(const AddApeArgs& a, StreamHandle stream) {
    const char* op = "sm90_add_ape";
    if (!a.score || !a.positions || a.ape.empty() || a.rows < 0 || a.width <= 0 || a.ratio <= 0)
        return invalid_argument(std::string(op) + ": null pointer or bad shape");
    if (a.ape.format != WeightFormat::kF32 && a.ape.format != WeightFormat::kBF16)
        return invalid_argument(std::string(op) + ": ape must be f32 or bf16, not " +
                                backend::weight_format_name(a.ape.format));
    if (a.ape.rows * a.ape.cols != a.ratio * a.width)
        return invalid_argument(std::string(op) + ": ape holds " + std::to_string(a.ape.rows * a.ape.cols) +
                                " values, expected ratio x width = " + std::to_string(a.ratio * a.width));
    if (a.rows == 0) return Status::ok();
    add_ape_kernel<<<blocks_for(a.rows * a.width), kThreads, 0, stream>>>(
        a.score, a.rows, a.width, a.ratio, a.positions, a.ape.data, a.ape.format == WeightFormat::kBF16);
    return launch_status(op);
}

Status sm90_scale(Precision precision, const ScaleArgs& a, StreamHandle stream) {
    const char* op = "sm90_scale";
    if (!a.x || a.n < 0) return invalid_argument(std::string(op) + ": null pointer or bad shape");
    if (a.n == 0) return Status::ok();
    if (precision == Precision::kReference)
        scale_kernel<<<blocks_for(a.n), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(a.x), a.n, a.scale);
    else
        scale_kernel<<<blocks_for(a.n), kThreads, 0, stream>>>(static_cast<float*>(a.x), a.n, a.scale);
    return launch_status(op);
}

Status sm90_attn_index(const AttnIndexArgs& a, StreamHandle stream) {
    const char* op = "sm90_attn_index";
    if (!a.idx || a.n < 0 || a.p0 < 0 || a.win_cols < 0 || a.window <= 0 || a.chunk_rows < 0 || a.topk < 0 ||
        a.hca_entries < 0)
        return invalid_argument(std::string(op) + ": null pointer or bad shape");
    if (!a.picks && a.hca_entries > 0 && a.ratio <= 0) return invalid_argument(std::string(op) + ": HCA needs ratio");
    const int64_t width = a.win_cols + (a.picks ? a.topk : a.hca_entries);
    if (a.n == 0 || width == 0) return Status::ok();
    attn_index_kernel<<<blocks_for(a.n * width), kThreads, 0, stream>>>(a, width);
    return launch_status(op);
}

}  // namespace dsv4::cuda
