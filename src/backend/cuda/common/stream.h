// Streams and event timing behind a plain C++ interface: the rest of the engine (and benchmarks) hold an opaque
// StreamHandle and never include a CUDA header. CUstream_st is the runtime's own (incomplete) stream type, so a
// StreamHandle is a cudaStream_t inside backend/cuda without any cast.
#pragma once

#include <utility>

#include "dsv4/status.h"

struct CUstream_st;
struct CUevent_st;

namespace dsv4::cuda {

using StreamHandle = CUstream_st*;  // nullptr = the legacy default stream

// An owned non-blocking stream. Movable, not copyable.
class Stream {
public:
    static Result<Stream> create();
    Stream() = default;
    ~Stream();
    Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
    Stream& operator=(Stream&& o) noexcept;
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;

    StreamHandle handle() const { return s_; }
    // Waits for all work queued on the stream; returns the first asynchronous error (a kernel fault) if any.
    Status synchronize() const;

private:
    StreamHandle s_ = nullptr;
};

// A stream beside another for work off its chain: fork(main) makes side() wait for everything queued on main so far,
// join(main) makes main wait for everything queued on side() so far. Both are stream-ordered and capturable: a
// captured fork ... join is a parallel branch of the graph (every fork must be joined before the capture ends).
class StreamFork {
public:
    static Result<StreamFork> create();
    StreamFork() = default;
    ~StreamFork();
    StreamFork(StreamFork&& o) noexcept
        : side_(std::move(o.side_)),
          forked_(std::exchange(o.forked_, nullptr)),
          done_(std::exchange(o.done_, nullptr)) {}
    StreamFork& operator=(StreamFork&& o) noexcept;
    StreamFork(const StreamFork&) = delete;
    StreamFork& operator=(const StreamFork&) = delete;

    StreamHandle side() const { return side_.handle(); }
    Status fork(StreamHandle main);
    Status join(StreamHandle main);

private:
    Stream side_;
    CUevent_st* forked_ = nullptr;  // recorded on main by fork
    CUevent_st* done_ = nullptr;    // recorded on side by join
};

// A point of one stream that another waits for (cudaEvent without timing), also between streams of different
// devices: record(s) marks what is queued on s so far, wait(t) makes t wait for it.
class Event {
public:
    static Result<Event> create();
    Event() = default;
    ~Event();
    Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
    Event& operator=(Event&& o) noexcept;
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;

    Status record(StreamHandle s);
    Status wait(StreamHandle waiter) const;
    // Blocks the host until the work recorded last has run (at once when the event was never recorded).
    Status synchronize() const;

private:
    CUevent_st* e_ = nullptr;
};

// Elapsed GPU time between two points of a stream (CUDA events): record start, queue work, record stop, read.
class EventTimer {
public:
    static Result<EventTimer> create();
    EventTimer() = default;
    ~EventTimer();
    EventTimer(EventTimer&& o) noexcept
        : start_(std::exchange(o.start_, nullptr)), stop_(std::exchange(o.stop_, nullptr)) {}
    EventTimer& operator=(EventTimer&&) = delete;
    EventTimer(const EventTimer&) = delete;
    EventTimer& operator=(const EventTimer&) = delete;

    Status start(StreamHandle s);
    Status stop(StreamHandle s);
    // Milliseconds between start and stop; waits for the stop event.
    Result<float> elapsed_ms() const;

private:
    CUevent_st* start_ = nullptr;
    CUevent_st* stop_ = nullptr;
};

// Multiprocessor count of the current device (asked once per device; split-K and grid sizing read it), 132 (an
// H200's) when no device can be asked, so that sizing works on machines without a GPU.
int current_sm_count();

}  // namespace dsv4::cuda
