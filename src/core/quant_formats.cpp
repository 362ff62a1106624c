// Packed weight layouts: MXFP4, NVFP4, FP8 128x128 blocks (see quant_formats.h).
#include "core/quant_formats.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/formats.h"

namespace dsv4 {
namespace {

std::string dims(int64_t rows, int64_t cols) {
    std::string s = "[";
    s += std::to_string(rows);
    s += ", ";
    s += std::to_string(cols);
    s += "]";
    return s;
}

Status check_sizes(const char* what, size_t got, int64_t want) {
    if (static_cast<int64_t>(got) != want) {
        return invalid_argument(std::string(what) + " holds " + std::to_string(got) + " elements, expected " +
                                std::to_string(want));
    }
    return Status::ok();
}

Status check_weight(const char* format, std::span<const float> w, int64_t rows, int64_t cols, int64_t col_multiple) {
    if (rows < 0 || cols < 0 || cols % col_multiple != 0) {
        return invalid_argument(std::string(format) + ": weight " + dims(rows, cols) + " needs a column count that is a multiple of " +
                                std::to_string(col_multiple));
    }
    DSV4_RETURN_IF_ERROR(check_sizes(format, w.size(), rows * cols));
    for (size_t i = 0; i < w.size(); ++i) {
        if (!std::isfinite(w[i])) {
            return invalid_argument(std::string(format) + ": weight element " + std::to_string(i) + " is not finite");
        }
    }
    return Status::ok();
}

float group_amax(const float* x, int64_t n) {
    float m = 0;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
    return m;
}

}  // namespace

void fp4_pack(std::span<const uint8_t> codes, std::span<uint8_t> packed) {
    for (size_t k = 0; k < packed.size(); ++k) {
        packed[k] = static_cast<uint8_t>((codes[2 * k] & 0x0f) | ((codes[2 * k + 1] & 0x0f) << 4));
    }
}

void fp4_unpack(std::span<const uint8_t> packed, std::span<uint8_t> codes) {
    for (size_t i = 0; i < codes.size(); ++i) codes[i] = fp4_code_at(packed.data(), static_cast<int64_t>(i));
}

int ceil_log2(float x) {
    int e = 0;
    const float m = std::frexp(x, &e);  // x = m * 2^e, m in [0.5, 1)
    return m == 0.5f ? e - 1 : e;
}

int ue8m0_exponent_for(float amax, float amax_floor, float max_code) {
    return ceil_log2(std::max(amax, amax_floor) / max_code);
}

// ---- MXFP4 ----

void mxfp4_dequant_row(const uint8_t* packed, const uint8_t* scales, int64_t cols, float* out) {
    for (int64_t g = 0; g < cols / kMxfp4GroupSize; ++g) {
        const float s = e8m0_to_f32(scales[g]);
        for (int64_t i = g * kMxfp4GroupSize; i < (g + 1) * kMxfp4GroupSize; ++i) {
            out[i] = e2m1_to_f32(fp4_code_at(packed, i)) * s;
        }
    }
}

Result<Mxfp4Tensor> mxfp4_encode(std::span<const float> w, int64_t rows, int64_t cols) {
    DSV4_RETURN_IF_ERROR(check_weight("MXFP4", w, rows, cols, kMxfp4GroupSize));
    Mxfp4Tensor t;
    t.rows = rows;
    t.cols = cols;
    t.packed.assign(static_cast<size_t>(rows * cols / 2), 0);
    t.scales.assign(static_cast<size_t>(rows * cols / kMxfp4GroupSize), 0);
    const float amax_floor = 6.0f * std::ldexp(1.0f, -126);
    for (int64_t r = 0; r < rows; ++r) {
        uint8_t* prow = t.packed.data() + r * cols / 2;
        for (int64_t g = 0; g < cols / kMxfp4GroupSize; ++g) {
            const float* x = w.data() + r * cols + g * kMxfp4GroupSize;
            const int e = ue8m0_exponent_for(group_amax(x, kMxfp4GroupSize), amax_floor, kE2m1Max);
            t.scales[r * (cols / kMxfp4GroupSize) + g] = e8m0_from_exponent(e);
            for (int64_t i = 0; i < kMxfp4GroupSize; ++i) {
                const int64_t c = g * kMxfp4GroupSize + i;
                const uint8_t code = f32_to_e2m1(std::ldexp(x[i], -e));
                prow[c >> 1] |= static_cast<uint8_t>((c & 1) ? code << 4 : code);
            }
        }
    }
    return t;
}

Status mxfp4_decode(std::span<const uint8_t> packed, std::span<const uint8_t> scales, int64_t rows, int64_t cols,
                    std::span<float> out) {
    if (cols % kMxfp4GroupSize != 0) return invalid_argument("MXFP4: column count " + std::to_string(cols) + " is not a multiple of 32");
    DSV4_RETURN_IF_ERROR(check_sizes("MXFP4 packed weight", packed.size(), rows * cols / 2));
    DSV4_RETURN_IF_ERROR(check_sizes("MXFP4 scales", scales.size(), rows * cols / kMxfp4GroupSize));
    DSV4_RETURN_IF_ERROR(check_sizes("MXFP4 output", out.size(), rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
        mxfp4_dequant_row(packed.data() + r * cols / 2, scales.data() + r * cols / kMxfp4GroupSize, cols,
                          out.data() + r * cols);
    }
    return Status::ok();
}

// ---- NVFP4 ----

void nvfp4_dequant_row(const uint8_t* packed, const uint8_t* scales, float global_scale, int64_t cols, float* out) {
    for (int64_t g = 0; g < cols / kNvfp4GroupSize; ++g) {
        const float s = e4m3_to_f32(scales[g]);
        for (int64_t i = g * kNvfp4GroupSize; i < (g + 1) * kNvfp4GroupSize; ++i) {
            out[i] = (e2m1_to_f32(fp4_code_at(packed, i)) * s) * global_scale;
        }
    }
}

Result<Nvfp4Tensor> nvfp4_encode(std::span<const float> w, int64_t rows, int64_t cols) {
    DSV4_RETURN_IF_ERROR(check_weight("NVFP4", w, rows, cols, kNvfp4GroupSize));
    Nvfp4Tensor t;
    t.rows = rows;
    t.cols = cols;
    t.packed.assign(static_cast<size_t>(rows * cols / 2), 0);
    t.scales.assign(static_cast<size_t>(rows * cols / kNvfp4GroupSize), 0);
    const float amax = group_amax(w.data(), static_cast<int64_t>(w.size()));
    t.global_scale = amax > 0 ? amax / (kE2m1Max * kE4m3Max) : 1.0f;
    for (int64_t r = 0; r < rows; ++r) {
        uint8_t* prow = t.packed.data() + r * cols / 2;
        for (int64_t g = 0; g < cols / kNvfp4GroupSize; ++g) {
            const float* x = w.data() + r * cols + g * kNvfp4GroupSize;
            const uint8_t scale = f32_to_e4m3(group_amax(x, kNvfp4GroupSize) / kE2m1Max / t.global_scale);
            t.scales[r * (cols / kNvfp4GroupSize) + g] = scale;
            const float step = e4m3_to_f32(scale) * t.global_scale;
            if (step == 0) continue;  // the whole group rounds to zero
            for (int64_t i = 0; i < kNvfp4GroupSize; ++i) {
                const int64_t c = g * kNvfp4GroupSize + i;
                const uint8_t code = f32_to_e2m1(x[i] / step);
                prow[c >> 1] |= static_cast<uint8_t>((c & 1) ? code << 4 : code);
            }
        }
    }
    return t;
}

Status nvfp4_decode(std::span<const uint8_t> packed, std::span<const uint8_t> scales, float global_scale,
                    int64_t rows, int64_t cols, std::span<float> out) {
    if (cols % kNvfp4GroupSize != 0) return invalid_argument("NVFP4: column count " + std::to_string(cols) + " is not a multiple of 16");
    DSV4_RETURN_IF_ERROR(check_sizes("NVFP4 packed weight", packed.size(), rows * cols / 2));
    DSV4_RETURN_IF_ERROR(check_sizes("NVFP4 scales", scales.size(), rows * cols / kNvfp4GroupSize));
    DSV4_RETURN_IF_ERROR(check_sizes("NVFP4 output", out.size(), rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
        nvfp4_dequant_row(packed.data() + r * cols / 2, scales.data() + r * cols / kNvfp4GroupSize, global_scale,
                          cols, out.data() + r * cols);
    }
    return Status::ok();
}

// ---- FP8 blocks ----

void fp8_block_dequant_row(const uint8_t* data, const uint8_t* block_scales, int64_t cols, float* out) {
    for (int64_t c = 0; c < cols; ++c) out[c] = e4m3_to_f32(data[c]) * e8m0_to_f32(block_scales[c / kFp8BlockSize]);
}

Result<Fp8BlockTensor> fp8_block_encode(std::span<const float> w, int64_t rows, int64_t cols) {
    DSV4_RETURN_IF_ERROR(check_weight("FP8 block", w, rows, cols, 1));
    Fp8BlockTensor t;
    t.rows = rows;
    t.cols = cols;
    t.data.assign(static_cast<size_t>(rows * cols), 0);
    const int64_t brows = fp8_block_count(rows), bcols = fp8_block_count(cols);
    t.scales.assign(static_cast<size_t>(brows * bcols), 0);
    for (int64_t br = 0; br < brows; ++br) {
        const int64_t r0 = br * kFp8BlockSize, r1 = std::min(rows, r0 + kFp8BlockSize);
        for (int64_t bc = 0; bc < bcols; ++bc) {
            const int64_t c0 = bc * kFp8BlockSize, c1 = std::min(cols, c0 + kFp8BlockSize);
            float amax = 0;
            for (int64_t r = r0; r < r1; ++r) amax = std::max(amax, group_amax(w.data() + r * cols + c0, c1 - c0));
            const int e = ue8m0_exponent_for(amax, 1e-4f, kE4m3Max);
            t.scales[br * bcols + bc] = e8m0_from_exponent(e);
            for (int64_t r = r0; r < r1; ++r) {
                for (int64_t c = c0; c < c1; ++c) t.data[r * cols + c] = f32_to_e4m3(std::ldexp(w[r * cols + c], -e));
            }
        }
    }
    return t;
}

Status fp8_block_decode(std::span<const uint8_t> data, std::span<const uint8_t> scales, int64_t rows, int64_t cols,
                        std::span<float> out) {
    const int64_t bcols = fp8_block_count(cols);
    DSV4_RETURN_IF_ERROR(check_sizes("FP8 weight", data.size(), rows * cols));
    DSV4_RETURN_IF_ERROR(check_sizes("FP8 block scales", scales.size(), fp8_block_count(rows) * bcols));
    DSV4_RETURN_IF_ERROR(check_sizes("FP8 output", out.size(), rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
        fp8_block_dequant_row(data.data() + r * cols, scales.data() + (r / kFp8BlockSize) * bcols, cols,
                              out.data() + r * cols);
    }
    return Status::ok();
}

// ---- MXFP4 -> FP8 blocks ----

Result<Fp8BlockTensor> mxfp4_to_fp8_blocks(std::span<const uint8_t> packed, std::span<const uint8_t> scales,
                                           int64_t rows, int64_t cols, int64_t* inexact) {
    if (cols % kMxfp4GroupSize != 0) return invalid_argument("MXFP4: column count " + std::to_string(cols) + " is not a multiple of 32");
    DSV4_RETURN_IF_ERROR(check_sizes("MXFP4 packed weight", packed.size(), rows * cols / 2));
    DSV4_RETURN_IF_ERROR(check_sizes("MXFP4 scales", scales.size(), rows * cols / kMxfp4GroupSize));
    const int64_t groups = cols / kMxfp4GroupSize;
    for (size_t i = 0; i < scales.size(); ++i) {
        if (scales[i] == 0xff) {
            return corrupt("MXFP4 scale [" + std::to_string(static_cast<int64_t>(i) / groups) + ", " +
                           std::to_string(static_cast<int64_t>(i) % groups) + "] is NaN (0xff)");
        }
    }
    Fp8BlockTensor t;
    t.rows = rows;
    t.cols = cols;
    t.data.assign(static_cast<size_t>(rows * cols), 0);
    const int64_t brows = fp8_block_count(rows), bcols = fp8_block_count(cols);
    t.scales.assign(static_cast<size_t>(brows * bcols), 0);
    int64_t rounded = 0;
    for (int64_t br = 0; br < brows; ++br) {
        const int64_t r0 = br * kFp8BlockSize, r1 = std::min(rows, r0 + kFp8BlockSize);
        for (int64_t bc = 0; bc < bcols; ++bc) {
            const int64_t g0 = bc * kFp8BlockSize / kMxfp4GroupSize;
            const int64_t g1 = std::min(groups, g0 + kFp8BlockSize / kMxfp4GroupSize);
            int max_sub = 0;
            for (int64_t r = r0; r < r1; ++r) {
                for (int64_t g = g0; g < g1; ++g) max_sub = std::max<int>(max_sub, scales[r * groups + g]);
            }
            const int block = std::max(max_sub - 6, 0);  // UE8M0 byte of the new block scale
            t.scales[br * bcols + bc] = static_cast<uint8_t>(block);
            for (int64_t r = r0; r < r1; ++r) {
                for (int64_t g = g0; g < g1; ++g) {
                    const int offset = scales[r * groups + g] - block;  // <= 6
                    for (int64_t c = g * kMxfp4GroupSize; c < (g + 1) * kMxfp4GroupSize; ++c) {
                        const float v = e2m1_to_f32(fp4_code_at(packed.data() + r * cols / 2, c));
                        const double exact = std::ldexp(static_cast<double>(v), offset);
                        const uint8_t code = f32_to_e4m3(static_cast<float>(exact));
                        if (static_cast<double>(e4m3_to_f32(code)) != exact) ++rounded;
                        t.data[r * cols + c] = code;
                    }
                }
            }
        }
    }
    if (inexact) *inexact = rounded;
    return t;
}

}  // namespace dsv4
