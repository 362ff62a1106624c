// Launchers and kernels of the glue family (glue.h): one thread per element, grid-stride loops.
#include <cstdint>
#include <string>

#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kernels/glue/attn_index.cuh"
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
    pdl_enter();
    const int64_t total = rows * hc * dim;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t c = i % dim, t = i / (hc * dim);
        streams[i] = x[t * dim + c];
    }
}

// The same for rows of whole 16-byte chunks (every model width): a thread reads one chunk of x and writes it to the
// hc streams. The element kernel's two 64-bit divisions per 2-byte value made an 8,192-row pass take 1 ms, ~15x
// its bytes' time (docs/perf.md).
__global__ void broadcast_streams_16b_kernel(const uint4* x, int64_t rows, int64_t row_chunks, int64_t hc,
                                             uint4* streams) {
    pdl_enter();
    const int64_t total = rows * row_chunks;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = i / row_chunks, c = i - t * row_chunks;
        const uint4 v = x[i];
        uint4* out = streams + t * hc * row_chunks + c;
        for (int64_t s = 0; s < hc; ++s) out[s * row_chunks] = v;
    }
}

__global__ void add_ape_kernel(float* score, int64_t rows, int64_t width, int64_t ratio, const int64_t* positions,
                               const void* ape, bool ape_bf16) {
    pdl_enter();
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
    pdl_enter();
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        x[i] = from_f32<T>(__fmul_rn(to_f32(x[i]), scale));
}

__global__ void attn_index_kernel(AttnIndexArgs a, int64_t width) {
    pdl_enter();
    const int64_t total = a.n * width;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t q = i / width, c = i % width;
        int32_t v = -1;
        if (c < a.win_cols) {
            v = attn_window_value(a, q, c);
        } else if (a.picks) {
            v = attn_entry_value(a, q, a.picks[q * a.topk + (c - a.win_cols)]);
        } else {
            const int64_t j = c - a.win_cols;
            if (j < (a.positions[q] + 1) / a.ratio) v = attn_entry_value(a, q, j);
        }
        a.idx[i] = v;
    }
}

__global__ void pass_rows_kernel(PassRowsArgs a, int64_t total) {
    pdl_enter();
    for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x)
        a.rows[k] = k < a.n              ? int32_t(a.row0 + k)
                    : k < a.n + a.window ? int32_t(a.pass_rows + a.window * a.slot + (k - a.n))
                                         : entry_row(a.entries, a.slot, k - a.n - a.window);
}

__global__ void entry_rows_kernel(EntryRowsArgs a) {
    pdl_enter();
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += int64_t(gridDim.x) * blockDim.x) {
        if (!a.decode) {
            a.rows[i] = entry_row(a.entries, a.slot, a.first + i);
        } else {
            const int64_t pos = a.positions[i];
            a.rows[i] = pos % a.ratio == a.ratio - 1 ? entry_row(a.entries, a.slots[i], pos / a.ratio) : -1;
        }
    }
}

__global__ void gather_pages_kernel(GatherPagesArgs a) {
    pdl_enter();
    const int64_t total = a.n * a.pages_per_session;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / a.pages_per_session, p = i % a.pages_per_session;
        a.token_pages[i] = a.table[int64_t(a.slots[r]) * a.pages_per_session + p];
    }
}

// One block per row.
__global__ void compressor_append_kernel(CompressorAppendArgs a) {
    pdl_enter();
    const int64_t r = blockIdx.x;
    const int64_t off = (int64_t(a.slots[r]) * a.ratio + a.positions[r] % a.ratio) * a.width;
    for (int64_t c = threadIdx.x; c < a.width; c += blockDim.x) {
        a.open_kv[off + c] = a.kv[r * a.width + c];
        a.open_score[off + c] = a.score[r * a.width + c];
    }
}

__global__ void compressor_roll_kernel(CompressorRollArgs a) {
    pdl_enter();
    const int64_t r = blockIdx.y;
    if (a.positions[r] % a.ratio != a.ratio - 1) return;
    const int64_t total = a.ratio * a.width, base = int64_t(a.slots[r]) * total;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        a.prev_kv[base + i] = a.open_kv[base + i];
        a.prev_score[base + i] = a.open_score[base + i];
    }
}

// One block per row; 8-byte words (every storage row is a multiple of 8 bytes).
__global__ void ring_store_kernel(RingStoreArgs a) {
    pdl_enter();
    const int64_t r = blockIdx.x;
    const int64_t dst = a.pass_rows + a.window * a.slots[r] + a.positions[r] % a.window;
    const uint64_t* from = reinterpret_cast<const uint64_t*>(static_cast<const uint8_t*>(a.pool) + (a.row0 + r) * a.row_bytes);
    uint64_t* to = reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(a.pool) + dst * a.row_bytes);
    for (int64_t w = threadIdx.x; w < a.row_bytes / 8; w += blockDim.x) to[w] = from[w];
}

}  // namespace

Status sm90_broadcast_streams(Precision precision, const BroadcastStreamsArgs& a, StreamHandle stream) {
    const char* op = "sm90_broadcast_streams";
    if (!a.x || !a.streams || a.rows < 0 || a.dim <= 0 || a.hc <= 0)
        return invalid_argument(std::string(op) + ": null pointer or bad shape");
    if (a.rows == 0) return Status::ok();
    const int64_t row_bytes = a.dim * (precision == Precision::kReference ? 2 : 4);
    if (row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0 &&
        reinterpret_cast<uintptr_t>(a.streams) % 16 == 0) {
        const int64_t chunks = row_bytes / 16;
        broadcast_streams_16b_kernel<<<blocks_for(a.rows * chunks), kThreads, 0, stream>>>(
            static_cast<const uint4*>(a.x), a.rows, chunks, a.hc, static_cast<uint4*>(a.streams));
        return launch_status(op);
    }
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
    if (!a.idx || !a.positions || a.n < 0 || a.win_cols < 0 || a.window <= 0 || a.topk < 0 || a.hca_entries < 0 ||
        (a.decode && !a.slots))
        return invalid_argument(std::string(op) + ": null pointer or bad shape");
    const bool entries = a.picks || a.hca_entries > 0;
    if (entries && (!a.entries.table || a.entries.pages_per_session <= 0))
        return invalid_argument(std::string(op) + ": compressed candidates need the entry page table");
    if (!a.picks && a.hca_entries > 0 && a.ratio <= 0) return invalid_argument(std::string(op) + ": HCA needs ratio");
    if (a.pass_local && a.decode) return invalid_argument(std::string(op) + ": pass-local rows are for prefill passes");
    const int64_t width = a.win_cols + (a.picks ? a.topk : a.hca_entries);
    if (a.n == 0 || width == 0) return Status::ok();
    attn_index_kernel<<<blocks_for(a.n * width), kThreads, 0, stream>>>(a, width);
    return launch_status(op);
}

Status sm90_pass_rows(const PassRowsArgs& a, StreamHandle stream) {
    const char* op = "sm90_pass_rows";
    if (!a.rows || a.n < 0 || a.window <= 0 || a.row0 < 0 || a.pass_rows < a.row0 + a.n || a.n_entries < 0 ||
        a.slot < 0 || (a.n_entries > 0 && (!a.entries.table || a.n_entries > 64 * a.entries.pages_per_session)))
        return invalid_argument(std::string(op) + ": null pointer or bad shape");
    const int64_t total = pass_local_rows(a.n, a.window, a.n_entries);
    if (total > 0x7fffffff || a.pass_rows + a.window * (int64_t(a.slot) + 1) > 0x7fffffff)
        return invalid_argument(std::string(op) + ": row numbers past int32");
    pass_rows_kernel<<<blocks_for(total), kThreads, 0, stream>>>(a, total);
    return launch_status(op);
}

Status sm90_entry_rows(const EntryRowsArgs& a, StreamHandle stream) {
    const char* op = "sm90_entry_rows";
    if (!a.rows || a.n < 0 || !a.entries.table || a.entries.pages_per_session <= 0 ||
        (a.decode && (!a.positions || !a.slots || a.ratio <= 0)))
        return invalid_argument(std::string(op) + ": null pointer or bad shape");
    if (a.n == 0) return Status::ok();
    entry_rows_kernel<<<blocks_for(a.n), kThreads, 0, stream>>>(a);
    return launch_status(op);
}

Status sm90_gather_pages(const GatherPagesArgs& a, StreamHandle stream) {
    const char* op = "sm90_gather_pages";
    if (!a.token_pages || !a.slots || !a.table || a.n < 0 || a.pages_per_session <= 0)
        return invalid_argument(std::string(op) + ": null pointer or bad shape");
    if (a.n == 0) return Status::ok();
    gather_pages_kernel<<<blocks_for(a.n * a.pages_per_session), kThreads, 0, stream>>>(a);
    return launch_status(op);
}

Status sm90_compressor_append(const CompressorAppendArgs& a, StreamHandle stream) {
    const char* op = "sm90_compressor_append";
    if (!a.positions || !a.slots || !a.kv || !a.score || !a.open_kv || !a.open_score || a.n < 0 || a.ratio <= 0 ||
        a.width <= 0)
        return invalid_argument(std::string(op) + ": null pointer or bad shape");
    if (a.n == 0) return Status::ok();
    compressor_append_kernel<<<unsigned(a.n), kThreads, 0, stream>>>(a);
    return launch_status(op);
}

Status sm90_compressor_roll(const CompressorRollArgs& a, StreamHandle stream) {
    const char* op = "sm90_compressor_roll";
    if (!a.positions || !a.slots || !a.open_kv || !a.open_score || !a.prev_kv || !a.prev_score || a.n < 0 ||
        a.ratio <= 0 || a.width <= 0)
        return invalid_argument(std::string(op) + ": null pointer or bad shape");
    if (a.n == 0) return Status::ok();
    const int64_t per_row = (a.ratio * a.width + kThreads - 1) / kThreads;
    compressor_roll_kernel<<<dim3(unsigned(per_row < 64 ? per_row : 64), unsigned(a.n)), kThreads, 0, stream>>>(a);
    return launch_status(op);
}

Status sm90_ring_store(const RingStoreArgs& a, StreamHandle stream) {
    const char* op = "sm90_ring_store";
    if (!a.positions || !a.slots || !a.pool || a.n < 0 || a.window <= 0 || a.row_bytes <= 0 || a.row_bytes % 8 != 0)
        return invalid_argument(std::string(op) + ": null pointer or bad shape (rows must be multiples of 8 bytes)");
    if (a.n == 0) return Status::ok();
    ring_store_kernel<<<unsigned(a.n), 128, 0, stream>>>(a);
    return launch_status(op);
}

}  // namespace dsv4::cuda
