#include "core/dtype.h"

namespace dsv4 {

size_t dtype_size(DType t) {
    switch (t) {
        case DType::kBool:
        case DType::kU8:
        case DType::kI8:
        case DType::kF8E4M3:
        case DType::kF8E8M0: return 1;
        case DType::kI16:
        case DType::kF16:
        case DType::kBF16: return 2;
        case DType::kI32:
        case DType::kF32: return 4;
        case DType::kI64:
        case DType::kF64: return 8;
    }
    return 0;
}

std::string_view dtype_name(DType t) {
    switch (t) {
        case DType::kBool: return "BOOL";
        case DType::kU8: return "U8";
        case DType::kI8: return "I8";
        case DType::kI16: return "I16";
        case DType::kI32: return "I32";
        case DType::kI64: return "I64";
        case DType::kF16: return "F16";
        case DType::kBF16: return "BF16";
        case DType::kF32: return "F32";
        case DType::kF64: return "F64";
        case DType::kF8E4M3: return "F8_E4M3";
        case DType::kF8E8M0: return "F8_E8M0";
    }
    return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
    for (DType t : kAllDTypes) {
        if (dtype_name(t) == name) return t;
    }
    return std::nullopt;
}

}  // namespace dsv4
