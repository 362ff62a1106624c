// The thread-block cluster barrier split into its two halves (PTX ISA, "barrier.cluster"), for kernels that can
// do useful work between announcing they have started and needing the other CTAs to have started too.
// cooperative_groups' cluster.sync() is both halves back to back, with release / acquire ordering.
#pragma once

namespace dsv4::cuda {

// This thread's arrival, without ordering its earlier memory operations for the cluster: for a first arrival
// that only says "this CTA exists" (its shared memory may be written), not "read what I wrote".
__device__ __forceinline__ void cluster_arrive_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}

// Waits until every non-exited thread of the cluster has arrived (acquire: what they released is visible).
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.aligned;" ::: "memory"); }

}  // namespace dsv4::cuda
