// The benchmarks' one error rule: a failed Status prints where and why, and the benchmark exits 1 (a benchmark has
// no partial result worth keeping).
#pragma once

#include <cstdio>
#include <cstdlib>

#include "dsv4/status.h"

#define CHECK(expr)                                                                              \
    do {                                                                                         \
        const ::dsv4::Status s_ = (expr);                                                        \
        if (!s_.is_ok()) {                                                                       \
            std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, s_.to_string().c_str());     \
            std::exit(1);                                                                        \
        }                                                                                        \
    } while (0)
