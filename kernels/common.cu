//! Shared definitions of cuorder's instrumentation kernels: the GPU clock, trace slots and observation slots.
//
// The sources in this folder are concatenated in the order common.cu, spin.cu, stamp.cu, probe.cu, op.cu and compiled
// at run time with NVRTC (hw/src/kernels.rs). The struct layouts below are mirrored by #[repr(C)] structs in
// hw/src/kernels.rs: change both together.
//
// Conventions: a "version" is a u32 stamped into every 4-byte word a writer writes (0 = the initial contents);
// times are %globaltimer nanoseconds of this GPU (0 = not yet).

typedef unsigned int u32;
typedef unsigned long long u64;

// This GPU's global timer in ns.
__device__ __forceinline__ u64 cuorder_now() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Start and end of one traced device operation, in host-mapped pinned memory so that the host can read it at any time
// (even while the GPU hangs). 16 bytes.
struct TraceSlot {
    volatile u64 start_ns;
    volatile u64 end_ns;
};

// Device-memory scratch of one traced operation: combined over all blocks with atomics. Initialised by the host to
// start_min = ~0, everything else 0. 24 bytes.
struct TraceScratch {
    u64 start_min;
    u64 end_max;
    u32 started;
    u32 done;
};

// What one probe saw, in host-mapped memory: first and last word of the range, the smallest and largest word in it
// (uniform iff min == max), and done = 1 once the other fields are final. 32 bytes.
struct ObsSlot {
    volatile u32 first;
    volatile u32 last;
    volatile u32 min;
    volatile u32 max;
    volatile u32 done;
    u32 pad[3];
};

// Device-memory scratch of one probe, combined over all threads with atomics (order-independent, so a kernel that
// reads and writes one range still reports what it read). Initialised by the host to min = ~0, everything else 0.
// 16 bytes.
struct ObsScratch {
    u32 first;
    u32 last;
    u32 min;
    u32 max;
};

// A range of 4-byte words at a device-accessible address; `slot` is the observation slot of a probe. 24 bytes.
struct Range {
    u64 ptr;
    u64 words;
    u32 slot;
    u32 pad;
};

// Called by every block at its start: the first block to start publishes a provisional start time.
__device__ __forceinline__ void cuorder_trace_begin(TraceScratch* s, TraceSlot* h) {
    if (threadIdx.x == 0) {
        u64 t = cuorder_now();
        atomicMin(&s->start_min, t);
        if (atomicAdd(&s->started, 1u) == 0u) {
            h->start_ns = t;
            __threadfence_system();
        }
    }
}

// Called by every block at its end; true (in every thread of the block) for the last block to finish, which then
// publishes the final results.
__device__ __forceinline__ bool cuorder_trace_end(TraceScratch* s) {
    __shared__ bool last;
    __syncthreads();
    if (threadIdx.x == 0) {
        u64 t = cuorder_now();
        atomicMax(&s->end_max, t);
        __threadfence();
        last = atomicAdd(&s->done, 1u) == gridDim.x - 1u;
    }
    __syncthreads();
    return last;
}

// Publishes the final start/end of an op (thread 0 of the last block only).
__device__ __forceinline__ void cuorder_trace_publish(TraceScratch* s, TraceSlot* h) {
    __threadfence();
    u64 start = atomicMin(&s->start_min, ~0ull);
    u64 end = atomicMax(&s->end_max, 0ull);
    h->start_ns = start;
    __threadfence_system();
    h->end_ns = end;
    __threadfence_system();
}

// Every thread spins until `ns` nanoseconds have passed since `t0` (a block-wide spin when called by all threads).
__device__ __forceinline__ void cuorder_spin_until(u64 t0, u64 ns) {
    while (cuorder_now() - t0 < ns) {
        __nanosleep(200);
    }
}

// Records in `os` what this thread sees of its share of `r` (grid-stride).
__device__ __forceinline__ void cuorder_probe_range(const Range& r, ObsScratch* os) {
    if (r.words == 0) return;
    const volatile u32* p = (const volatile u32*)r.ptr;
    u32 lo = ~0u, hi = 0u;
    bool any = false;
    u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < r.words; i += stride) {
        u32 v = p[i];
        if (i == 0) os->first = v;
        if (i == r.words - 1) os->last = v;
        lo = min(lo, v);
        hi = max(hi, v);
        any = true;
    }
    if (any) {
        atomicMin(&os->min, lo);
        atomicMax(&os->max, hi);
    }
}

// Stamps this thread's share of `r` with `version` (grid-stride).
__device__ __forceinline__ void cuorder_stamp_range(const Range& r, u32 version) {
    volatile u32* p = (volatile u32*)r.ptr;
    u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < r.words; i += stride) {
        p[i] = version;
    }
}

// Copies a finished probe's scratch to its host-mapped slot (thread 0 of the last block only).
__device__ __forceinline__ void cuorder_obs_publish(ObsScratch* os, ObsSlot* oh) {
    oh->first = atomicOr(&os->first, 0u);
    oh->last = atomicOr(&os->last, 0u);
    oh->min = atomicOr(&os->min, 0u);
    oh->max = atomicOr(&os->max, 0u);
    __threadfence_system();
    oh->done = 1u;
    __threadfence_system();
}
