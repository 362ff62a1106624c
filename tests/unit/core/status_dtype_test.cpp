#include <gtest/gtest.h>

#include "core/dtype.h"
#include "dsv4/status.h"

namespace dsv4 {
namespace {

Result<int> parse_positive(int v) {
    if (v <= 0) return invalid_argument("need a positive value, got " + std::to_string(v));
    return v;
}

Status doubled(int v, int* out) {
    DSV4_ASSIGN_OR_RETURN(int x, parse_positive(v));
    *out = 2 * x;
    return Status::ok();
}

TEST(Status, PropagatesErrorsAndValues) {
    int out = 0;
    EXPECT_TRUE(doubled(21, &out).is_ok());
    EXPECT_EQ(out, 42);
    Status s = doubled(-1, &out);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.to_string(), "invalid argument: need a positive value, got -1");
}

TEST(DType, NamesAndSizesRoundTrip) {
    for (DType t : kAllDTypes) {
        auto parsed = dtype_from_name(dtype_name(t));
        ASSERT_TRUE(parsed.has_value()) << dtype_name(t);
        EXPECT_EQ(*parsed, t);
        EXPECT_GT(dtype_size(t), 0u);
    }
    EXPECT_EQ(dtype_size(DType::kBF16), 2u);
    EXPECT_EQ(dtype_size(DType::kF8E8M0), 1u);
    EXPECT_EQ(dtype_size(DType::kI64), 8u);
    EXPECT_FALSE(dtype_from_name("F4").has_value());
    EXPECT_FALSE(dtype_from_name("bf16").has_value());  // safetensors names are case-sensitive
}

}  // namespace
}  // namespace dsv4
