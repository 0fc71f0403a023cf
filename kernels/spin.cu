//! `cuorder_spin`: occupies the GPU for a duration measured with %globaltimer, and traces its start and end.

// Spins for `ns` nanoseconds in every block; `ts`/`th` are the op's trace scratch and host-mapped trace slot.
extern "C" __global__ void cuorder_spin(u64 ns, TraceScratch* ts, TraceSlot* th) {
    cuorder_trace_begin(ts, th);
    if (threadIdx.x == 0) cuorder_spin_until(cuorder_now(), ns);
    if (cuorder_trace_end(ts) && threadIdx.x == 0) cuorder_trace_publish(ts, th);
}
