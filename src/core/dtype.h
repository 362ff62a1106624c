// Storage dtypes as safetensors names them. Packed FP4 (MXFP4 / NVFP4) is stored as I8 or U8 bytes holding two
// e2m1 codes each; the logical format of a tensor is decided by the weight map, not by its storage dtype.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace dsv4 {

enum class DType : uint8_t {
    kBool,
    kU8,
    kI8,
    kI16,
    kI32,
    kI64,
    kF16,
    kBF16,
    kF32,
    kF64,
    kF8E4M3,  // float8_e4m3fn: max 448, no inf, 0x7f/0xff = NaN
    kF8E8M0,  // float8_e8m0fnu (UE8M0): 2^(byte-127), 0xff = NaN
};

inline constexpr DType kAllDTypes[] = {DType::kBool, DType::kU8,   DType::kI8,  DType::kI16,
                                       DType::kI32,  DType::kI64,  DType::kF16, DType::kBF16,
                                       DType::kF32,  DType::kF64,  DType::kF8E4M3, DType::kF8E8M0};

// Bytes per element.
size_t dtype_size(DType t);
// The safetensors spelling: "BF16", "F8_E4M3", "F8_E8M0", ...
std::string_view dtype_name(DType t);
// Parses a safetensors dtype string; nullopt when unknown.
std::optional<DType> dtype_from_name(std::string_view name);

}  // namespace dsv4
