//! `cuorder_stamp`: writes a version id into every 4-byte word of a range, and traces its start and end.

// Stamps `r` with `version`.
extern "C" __global__ void cuorder_stamp(Range r, u32 version, TraceScratch* ts, TraceSlot* th) {
    cuorder_trace_begin(ts, th);
    cuorder_stamp_range(r, version);
    if (cuorder_trace_end(ts) && threadIdx.x == 0) cuorder_trace_publish(ts, th);
}
