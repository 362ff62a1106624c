// The scheduler options `dsv4 serve` derives from its flags: an explicit --chunk / -b wins; 0 takes the backend's
// prefill chunk (the CPU's 256 through the ModelBackend default, 2,048 where a backend says so, as the CUDA engine
// does) and a step budget of max(512, chunk + slots), so one step always fits every decode token and a whole chunk.
#include <gtest/gtest.h>

#include "server/server.h"

namespace dsv4::server {
namespace {

class FixedBackend : public ModelBackend {
public:
    explicit FixedBackend(int64_t chunk) : chunk_(chunk) {}
    int32_t vocab_size() const override { return 8; }
    int64_t max_context() const override { return 4096; }
    int64_t default_prefill_chunk() const override { return chunk_ > 0 ? chunk_ : ModelBackend::default_prefill_chunk(); }
    Result<std::unique_ptr<SequenceRunner>> create_runner(int64_t) override {
        return unsupported("no runners in this test");
    }

private:
    int64_t chunk_;
};

TEST(SchedulerOptions, ZeroTakesTheBackendsChunkAndABudgetThatFitsIt) {
    ServerOptions o;
    EXPECT_EQ(o.chunk, 0);
    EXPECT_EQ(o.step_tokens, 0);
    o.slots = 4;
    o.context = 2048;
    o.max_queue = 7;
    const SchedulerOptions cpu = scheduler_options(o, FixedBackend(0));
    EXPECT_EQ(cpu.chunk, kCpuPrefillChunk);
    EXPECT_EQ(cpu.step_tokens, 512);
    EXPECT_EQ(cpu.slots, 4);
    EXPECT_EQ(cpu.context, 2048);
    EXPECT_EQ(cpu.max_queue, 7);
    const SchedulerOptions gpu = scheduler_options(o, FixedBackend(kCudaPrefillChunk));
    EXPECT_EQ(gpu.chunk, 2048);
    EXPECT_EQ(gpu.step_tokens, 2048 + 4);
}

TEST(SchedulerOptions, ExplicitFlagsWin) {
    ServerOptions o;
    o.chunk = 64;
    o.step_tokens = 100;
    const SchedulerOptions s = scheduler_options(o, FixedBackend(kCudaPrefillChunk));
    EXPECT_EQ(s.chunk, 64);
    EXPECT_EQ(s.step_tokens, 100);
    o.step_tokens = 0;
    EXPECT_EQ(scheduler_options(o, FixedBackend(kCudaPrefillChunk)).step_tokens, 512);
}

}  // namespace
}  // namespace dsv4::server
