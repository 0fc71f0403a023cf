//! `cuorder_op` (one program Kernel op: probe reads, spin, stamp writes) and `cuorder_mark` (a one-thread timestamp).

// One Kernel op of a program: probes every read range (into its observation slot), spins `spin_ns` nanoseconds,
// stamps every write range with `version`, and traces the whole op in slot `th`. `os`/`oh` are the rank's whole
// observation scratch/slot arrays, indexed by each read range's `slot`.
extern "C" __global__ void cuorder_op(const Range* reads, u32 n_reads, const Range* writes, u32 n_writes, u64 spin_ns,
                                      u32 version, TraceScratch* ts, TraceSlot* th, ObsScratch* os, ObsSlot* oh) {
    cuorder_trace_begin(ts, th);
    for (u32 k = 0; k < n_reads; ++k) cuorder_probe_range(reads[k], &os[reads[k].slot]);
    __syncthreads();
    if (spin_ns != 0 && threadIdx.x == 0) cuorder_spin_until(cuorder_now(), spin_ns);
    __syncthreads();
    for (u32 k = 0; k < n_writes; ++k) cuorder_stamp_range(writes[k], version);
    if (cuorder_trace_end(ts) && threadIdx.x == 0) {
        for (u32 k = 0; k < n_reads; ++k) cuorder_obs_publish(&os[reads[k].slot], &oh[reads[k].slot]);
        cuorder_trace_publish(ts, th);
    }
}

// Writes this GPU's time into `th->start_ns` (which == 0) or `th->end_ns` (which == 1): a marker enqueued before or
// after a non-kernel stream operation (memset, memcpy, NCCL call, event record or wait) to time it.
extern "C" __global__ void cuorder_mark(TraceSlot* th, u32 which) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        u64 t = cuorder_now();
        if (which == 0u) th->start_ns = t; else th->end_ns = t;
        __threadfence_system();
    }
}
