#include "backend/cuda/common/cuda_status.cuh"
#include "backend/cuda/common/per_device.h"
#include "backend/cuda/common/stream.h"

namespace dsv4::cuda {

Result<Stream> Stream::create() {
    Stream s;
    cudaStream_t h = nullptr;
    DSV4_CUDA_TRY(cudaStreamCreateWithFlags(&h, cudaStreamNonBlocking), "cudaStreamCreate");
    s.s_ = h;
    return Result<Stream>(std::move(s));
}

Stream::~Stream() {
    if (s_) cudaStreamDestroy(s_);
}

Stream& Stream::operator=(Stream&& o) noexcept {
    if (this != &o) {
        if (s_) cudaStreamDestroy(s_);
        s_ = std::exchange(o.s_, nullptr);
    }
    return *this;
}

Status Stream::synchronize() const { return cuda_status(cudaStreamSynchronize(s_), "cudaStreamSynchronize"); }

Result<StreamFork> StreamFork::create() {
    StreamFork f;
    DSV4_ASSIGN_OR_RETURN(f.side_, Stream::create());
    DSV4_CUDA_TRY(cudaEventCreateWithFlags(&f.forked_, cudaEventDisableTiming), "cudaEventCreate");
    DSV4_CUDA_TRY(cudaEventCreateWithFlags(&f.done_, cudaEventDisableTiming), "cudaEventCreate");
    return Result<StreamFork>(std::move(f));
}

StreamFork::~StreamFork() {
    if (forked_) cudaEventDestroy(forked_);
    if (done_) cudaEventDestroy(done_);
}

StreamFork& StreamFork::operator=(StreamFork&& o) noexcept {
    if (this != &o) {
        if (forked_) cudaEventDestroy(forked_);
        if (done_) cudaEventDestroy(done_);
        side_ = std::move(o.side_);
        forked_ = std::exchange(o.forked_, nullptr);
        done_ = std::exchange(o.done_, nullptr);
    }
    return *this;
}

Status StreamFork::fork(StreamHandle main) {
    DSV4_CUDA_TRY(cudaEventRecord(forked_, main), "cudaEventRecord (fork)");
    return cuda_status(cudaStreamWaitEvent(side_.handle(), forked_, 0), "cudaStreamWaitEvent (fork)");
}

Status StreamFork::join(StreamHandle main) {
    DSV4_CUDA_TRY(cudaEventRecord(done_, side_.handle()), "cudaEventRecord (join)");
    return cuda_status(cudaStreamWaitEvent(main, done_, 0), "cudaStreamWaitEvent (join)");
}

Result<Event> Event::create() {
    Event ev;
    DSV4_CUDA_TRY(cudaEventCreateWithFlags(&ev.e_, cudaEventDisableTiming), "cudaEventCreate");
    return Result<Event>(std::move(ev));
}

Event::~Event() {
    if (e_) cudaEventDestroy(e_);
}

Event& Event::operator=(Event&& o) noexcept {
    if (this != &o) {
        if (e_) cudaEventDestroy(e_);
        e_ = std::exchange(o.e_, nullptr);
    }
    return *this;
}

Status Event::record(StreamHandle s) { return cuda_status(cudaEventRecord(e_, s), "cudaEventRecord"); }
Status Event::wait(StreamHandle waiter) const {
    return cuda_status(cudaStreamWaitEvent(waiter, e_, 0), "cudaStreamWaitEvent");
}
Status Event::synchronize() const { return cuda_status(cudaEventSynchronize(e_), "cudaEventSynchronize"); }

Result<EventTimer> EventTimer::create() {
    EventTimer t;
    DSV4_CUDA_TRY(cudaEventCreate(&t.start_), "cudaEventCreate");
    DSV4_CUDA_TRY(cudaEventCreate(&t.stop_), "cudaEventCreate");
    return Result<EventTimer>(std::move(t));
}

EventTimer::~EventTimer() {
    if (start_) cudaEventDestroy(start_);
    if (stop_) cudaEventDestroy(stop_);
}

Status EventTimer::start(StreamHandle s) { return cuda_status(cudaEventRecord(start_, s), "cudaEventRecord"); }
Status EventTimer::stop(StreamHandle s) { return cuda_status(cudaEventRecord(stop_, s), "cudaEventRecord"); }

Result<float> EventTimer::elapsed_ms() const {
    DSV4_CUDA_TRY(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float ms = 0;
    DSV4_CUDA_TRY(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return ms;
}

int current_device() {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return dev;
}

int current_sm_count() {
    static PerDevice<int> count;
    return count.get([] {
        int sms = 0;
        if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, current_device()) != cudaSuccess || sms <= 0) {
            (void)cudaGetLastError();  // no device: the H200's count, and no error left for a later launch check
            return 132;
        }
        return sms;
    });
}

}  // namespace dsv4::cuda
