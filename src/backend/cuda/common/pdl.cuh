// Programmatic dependent launch (sm_90, CUDA programming guide "Programmatic Dependent Launch and
// Synchronization"). A decode step is ~60 short kernels per layer; in the captured graph each kernel-to-kernel edge
// is made programmatic (graph.cu), so a kernel's blocks are launched while the previous kernel is still running and
// its launch latency is hidden. That is only correct because every kernel of the backend begins with pdl_enter():
// the wait returns once the previous grid has completed and its memory operations are visible (exactly the
// ordering of a plain stream), and nothing before it touches global memory. Outside a programmatic launch both
// instructions are no-ops. tests/lint/pdl_enter.sh checks that every __global__ function starts with it.
#pragma once

namespace dsv4::cuda {

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// wait = false defers the wait to an explicit pdl_wait(), which every thread must still reach before it ends (the
// launches after this one rely on its completion implying its predecessor's). Before the wait the kernel may read
// only memory its immediate predecessor does not write, and write only memory the predecessor neither reads nor
// writes: that predecessor (a backend kernel that waited before triggering) launches this one only after its own
// wait returned, i.e. after everything earlier completed. A kernel that defers triggers before it waits, so the
// kernel after it cannot use that argument: after a deferring kernel only immutable data (weights) may be touched
// early. Users: the split attention's prefix pass, whose predecessor is always its block-maxima pass
// (attention_split.cu); the decode compressor when told that the launch before it is independent
// (CompressorDecodeArgs::independent_of_previous: the indexer-key compressor after the layer's main one, which does
// not defer); the FP8 GEMM, the FP8 and bf16 decode GEMVs and the wo_a decode kernel, which request their first weight
// tiles before the wait (weights are written only at model load); the mHC collapse at decode, which requests its fn
// slices into L2. Such requests must be coherent loads (ld_early16), cp.async, TMA or bulk prefetches: ptxas moves
// the wait above ld.global.nc loads of its basic block (ld_stream.cuh), and the requests then issue after it.
// The next kernel may be launched once every block of this grid has triggered or exited: its blocks wait in their own
// pdl_enter until this grid completes.
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// trigger = false leaves the trigger to a later pdl_trigger() or to the block's exit: for a small grid whose blocks
// fill their SMs (the one-token MoE route: 16 CTAs of 64 K registers), a wide grid launched early would be placed on
// the other SMs only and run its whole length on fewer of them (docs/kernels/moe.md, "One token routed and prepared
// in one launch").
__device__ __forceinline__ void pdl_enter(bool wait = true, bool trigger = true) {
    if (wait) pdl_wait();
    if (trigger) pdl_trigger();
}

// Waits when it goes out of scope, on every path out of a kernel that began with pdl_enter(false).
struct PdlWaitAtExit {
    bool deferred;
    __device__ __forceinline__ ~PdlWaitAtExit() {
        if (deferred) pdl_wait();
    }
};

}  // namespace dsv4::cuda
