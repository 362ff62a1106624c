#include "core/thread_pool.h"

#include <algorithm>

#include <sched.h>

namespace dsv4 {

namespace {
thread_local bool t_inside_pool = false;  // set while a thread runs a chunk: nested calls run inline
}

int default_thread_count() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        const int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    return int(std::max(1u, std::thread::hardware_concurrency()));
}

ThreadPool::ThreadPool(int threads) {
    if (threads <= 0) threads = default_thread_count();
    workers_.reserve(size_t(threads - 1));
    for (int i = 0; i < threads - 1; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
}

void ThreadPool::worker_loop(int) {
    uint64_t seen = 0;
    for (;;) {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        lock.unlock();
        t_inside_pool = true;
        for (int64_t c; (c = next_chunk_.fetch_add(1)) < chunks_;)
            fn_(ctx_, c * chunk_, std::min(n_, (c + 1) * chunk_));
        t_inside_pool = false;
        lock.lock();
        if (--busy_workers_ == 0) done_.notify_one();
    }
}

void ThreadPool::run(int64_t n, int64_t grain, Trampoline fn, void* ctx) {
    if (n <= 0) return;
    grain = std::max<int64_t>(grain, 1);
    int64_t max_chunks = (n + grain - 1) / grain;
    if (workers_.empty() || max_chunks <= 1 || t_inside_pool) {
        fn(ctx, 0, n);
        return;
    }
    std::lock_guard<std::mutex> call_lock(call_mu_);
    int64_t chunks = std::min<int64_t>(max_chunks, int64_t(size()) * 4);
    {
        std::lock_guard<std::mutex> lock(mu_);
        fn_ = fn;
        ctx_ = ctx;
        n_ = n;
        chunk_ = (n + chunks - 1) / chunks;
        chunks_ = (n + chunk_ - 1) / chunk_;
        next_chunk_.store(0);
        busy_workers_ = int(workers_.size());
        ++generation_;
    }
    wake_.notify_all();
    t_inside_pool = true;
    for (int64_t c; (c = next_chunk_.fetch_add(1)) < chunks_;) fn(ctx, c * chunk_, std::min(n, (c + 1) * chunk_));
    t_inside_pool = false;
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return busy_workers_ == 0; });
}

}  // namespace dsv4
