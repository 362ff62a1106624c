// A small fixed thread pool with one operation: parallel_for over an index range. The calling thread takes part;
// a call allocates nothing (the body is passed by reference through a type-erased pointer, not a std::function).
// Calls from several threads at once are serialised; a parallel_for inside a parallel_for body runs inline.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "dsv4/threads.h"  // default_thread_count(): the pool's default size, public for callers that print it

namespace dsv4 {

class ThreadPool {
public:
    // threads <= 0: default_thread_count(). A pool of 1 runs everything on the caller.
    explicit ThreadPool(int threads = 0);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return int(workers_.size()) + 1; }

    // Calls body(begin, end) on disjoint chunks covering [0, n) (about 4 chunks per thread, each at least `grain`
    // indices long); returns when all chunks are done. Chunks are claimed dynamically, so uneven work balances.
    template <typename F>
    void parallel_for(int64_t n, int64_t grain, F&& body) {
        using Fn = std::remove_reference_t<F>;
        run(n, grain, [](void* ctx, int64_t b, int64_t e) { (*static_cast<Fn*>(ctx))(b, e); },
            const_cast<void*>(static_cast<const void*>(&body)));
    }

private:
    using Trampoline = void (*)(void*, int64_t, int64_t);
    void run(int64_t n, int64_t grain, Trampoline fn, void* ctx);
    void worker_loop(int index);

    std::vector<std::thread> workers_;
    std::mutex call_mu_;  // one parallel_for at a time
    std::mutex mu_;
    std::condition_variable wake_, done_;
    uint64_t generation_ = 0;
    bool stop_ = false;
    // the current job
    Trampoline fn_ = nullptr;
    void* ctx_ = nullptr;
    int64_t n_ = 0, chunk_ = 0;
    int64_t chunks_ = 0;
    std::atomic<int64_t> next_chunk_{0};
    int busy_workers_ = 0;
};

// parallel_for on `pool`, or inline on the caller when pool is null.
template <typename F>
void parallel_for(ThreadPool* pool, int64_t n, int64_t grain, F&& body) {
    if (n <= 0) return;
    if (!pool) {
        body(int64_t(0), n);
        return;
    }
    pool->parallel_for(n, grain, body);
}

}  // namespace dsv4
