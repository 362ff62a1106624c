// The CPU thread count used when none is given (a thread pool of size 0; the CLI prints it in its header).
#pragma once

namespace dsv4 {

// CPUs this process may run on (its affinity mask, so `taskset` and container CPU sets are respected; falls
// back to std::thread::hardware_concurrency()). The default thread count everywhere.
int default_thread_count();

}  // namespace dsv4
