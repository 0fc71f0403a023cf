//! `cuorder_probe`: reads a range and records which version(s) it holds into an observation slot; traces start/end.

// Probes `r` into observation scratch `os` (published to host-mapped `oh` by the last block).
extern "C" __global__ void cuorder_probe(Range r, ObsScratch* os, ObsSlot* oh, TraceScratch* ts, TraceSlot* th) {
    cuorder_trace_begin(ts, th);
    cuorder_probe_range(r, os);
    if (cuorder_trace_end(ts) && threadIdx.x == 0) {
        cuorder_obs_publish(os, oh);
        cuorder_trace_publish(ts, th);
    }
}
