// sm90_stream_probe (the TMA-ring load pipeline without arithmetic) against the bytes it was given: copy mode must
// reproduce every tile exactly (dst poisoned first), checksum mode the XOR of every 32-bit word, for tile sizes from
// one 16-byte chunk to the 64 KB stage limit, 2 to 8 stages, fewer tiles than SMs (idle blocks), many tiles per
// block (every slot reused many times: the parity handshakes), tiles read in random order and read twice.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "backend/cuda/kernels/stream_probe/stream_probe.h"
#include "ops/gpu_testing.h"

namespace dsv4::cuda {
namespace {

using namespace dsv4::cuda::testing;

struct ProbeCase {
    int64_t tile_bytes, n_tiles;
    int stages;
};

void run_case(const ProbeCase& c, std::mt19937_64& rng) {
    SCOPED_TRACE("tile " + std::to_string(c.tile_bytes) + " B, " + std::to_string(c.n_tiles) + " tiles, " +
                 std::to_string(c.stages) + " stages");
    // source: room for n_tiles / 2 + 3 distinct tiles, so that some tiles are read twice
    const int64_t slots = c.n_tiles / 2 + 3, src_bytes = slots * c.tile_bytes;
    std::vector<uint8_t> src(static_cast<size_t>(src_bytes));
    for (auto& b : src) b = uint8_t(rng());
    std::vector<int64_t> offset(size_t(c.n_tiles));
    std::uniform_int_distribution<int64_t> pick(0, slots - 1);
    for (auto& o : offset) o = pick(rng) * c.tile_bytes;
    auto dsrc = to_device(src);
    auto doff = to_device(offset);
    auto ddst = poisoned<uint8_t>(size_t(std::max<int64_t>(c.n_tiles * c.tile_bytes, 16)));
    auto dsum = poisoned<uint32_t>(1);
    ASSERT_TRUE(dsrc.is_ok() && doff.is_ok() && ddst.is_ok() && dsum.is_ok());
    auto st = Stream::create();
    ASSERT_TRUE(st.is_ok());

    StreamProbeArgs a;
    a.src = dsrc->as<uint8_t>();
    a.tile_offset = doff->as<int64_t>();
    a.n_tiles = c.n_tiles;
    a.tile_bytes = c.tile_bytes;
    a.stages = c.stages;
    a.dst = ddst->as<uint8_t>();
    DSV4_ASSERT_OK(sm90_stream_probe(a, st->handle()));
    DSV4_ASSERT_OK(st->synchronize());
    const auto got = to_host<uint8_t>(*ddst, size_t(c.n_tiles * c.tile_bytes));
    int64_t bad_tiles = 0;
    uint32_t want_xor = 0;
    for (int64_t i = 0; i < c.n_tiles; ++i) {
        const uint8_t* want = src.data() + offset[size_t(i)];
        bad_tiles += std::memcmp(got.data() + i * c.tile_bytes, want, size_t(c.tile_bytes)) != 0;
        for (int64_t w = 0; w < c.tile_bytes / 4; ++w) {
            uint32_t v;
            std::memcpy(&v, want + 4 * w, 4);
            want_xor ^= v;
        }
    }
    EXPECT_EQ(bad_tiles, 0) << "tiles whose copy differs from the source";

    a.dst = nullptr;
    a.checksum = dsum->as<uint32_t>();
    DSV4_ASSERT_OK(sm90_stream_probe(a, st->handle()));
    DSV4_ASSERT_OK(st->synchronize());
    EXPECT_EQ(to_host<uint32_t>(*dsum, 1)[0], want_xor) << "XOR of every word read";
}

TEST(StreamProbe, CopiesAndChecksumsEveryTileExactly) {
    DSV4_REQUIRE_GPU();
    std::mt19937_64 rng(fresh_seed());
    const ProbeCase cases[] = {
        {16, 1, 2},        {16, 1000, 8},      {4096, 7, 4},       {32768, 131, 4},  {32768, 5000, 4},
        {49152, 600, 4},   {65536, 300, 3},    {25600, 2048, 8},   {1040, 999, 2},   {65536, 1, 2},
    };
    for (const ProbeCase& c : cases) run_case(c, rng);
}

TEST(StreamProbe, BadArgumentsAreClearErrors) {
    StreamProbeArgs a;
    a.src = reinterpret_cast<const uint8_t*>(uintptr_t(4096));
    static const int64_t off = 0;
    a.tile_offset = &off;
    a.n_tiles = 1;
    a.dst = reinterpret_cast<uint8_t*>(uintptr_t(8192));
    auto expect_bad = [&](const StreamProbeArgs& b, const char* what) {
        const Status s = sm90_stream_probe(b, nullptr);
        EXPECT_FALSE(s.is_ok()) << what;
        EXPECT_NE(s.message().find("sm90_stream_probe"), std::string::npos) << s.to_string();
    };
    StreamProbeArgs b = a;
    b.tile_bytes = 24;
    expect_bad(b, "tile not a multiple of 16");
    b.tile_bytes = 2 * kStreamProbeMaxStageBytes;
    expect_bad(b, "tile above the stage limit");
    b = a;
    b.tile_bytes = 65536;
    b.stages = 4;
    expect_bad(b, "ring above its limit");
    b.tile_bytes = 4096;
    b.stages = 1;
    expect_bad(b, "one stage");
    b = a;
    b.tile_bytes = 4096;
    b.dst = nullptr;
    expect_bad(b, "neither dst nor checksum");
    b = a;
    b.tile_bytes = 4096;
    b.src = reinterpret_cast<const uint8_t*>(uintptr_t(4100));
    expect_bad(b, "misaligned src");
}

}  // namespace
}  // namespace dsv4::cuda
