//! Built-in smoke programs for the hardware executor (built in code until the surface format's parser lands): what
//! each one should show on real GPUs is said in its doc comment. `cuorder-hw smoke-programs --dir D` writes them.

use cuorder_model::build::Builder;
use cuorder_model::program::{BufRange, CommId, EventRef, MemSpace, OpKind, Program, StreamKind, StreamRef};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Every smoke program, with its file stem.
pub fn programs() -> Vec<Program> {
    vec![
        kernel_write_read(),
        sendrecv_grouped(MIB, "sendrecv_grouped_1mib"),
        send_first_then_recv(2 * GIB, false, "send_first_2gib"),
        send_first_then_recv(2 * GIB, true, "send_first_2gib_grouped"),
        send_first_then_recv(2 * GIB - MIB, false, "send_first_2047mib"),
        send_first_then_recv(256 * MIB, false, "send_first_256mib"),
        send_first_then_recv(MIB, false, "send_first_1mib"),
        host_calls(),
        cudafree_during_recv(),
    ]
}

/// One rank, one thread. Expected: op 3 (sB, after waiting on the event recorded after op 0) sees op 0's version;
/// op 4 (sC, unordered with op 0, which spins 200 µs before stamping) may see the initial contents or op 0's
/// (a race, L2); the host read (op 7, after copying `a` to pinned `p` on sB and synchronizing sB) sees op 0;
/// op 9 on the legacy stream after the synchronous memset (op 8) sees op 8. Completes.
pub fn kernel_write_read() -> Program {
    let mut b = Builder::new("kernel_write_read", 1);
    let sa = b.stream("sA", StreamKind::NonBlocking);
    let sb = b.stream("sB", StreamKind::NonBlocking);
    let sc = b.stream("sC", StreamKind::NonBlocking);
    let e = b.event("e");
    let a = b.buffer("a", 64 * 1024, MemSpace::Device, false);
    let p = b.buffer("p", 64 * 1024, MemSpace::PinnedHost, false);
    let s = |i| StreamRef { rank: 0, index: i };
    let ra = b.whole(0, a);
    let rp = b.whole(0, p);
    let ev = EventRef { rank: 0, index: e };
    let k = |stream, reads: Vec<BufRange>, writes: Vec<BufRange>, ns| OpKind::Kernel {
        stream,
        name: "k".into(),
        reads,
        writes,
        duration_ns: ns,
    };
    b.op(0, 0, k(s(sa), vec![], vec![ra], 200_000))
        .op(0, 0, OpKind::EventRecord { event: ev, stream: s(sa) })
        .op(0, 0, OpKind::StreamWaitEvent { stream: s(sb), event: ev })
        .op(0, 0, k(s(sb), vec![ra], vec![], 0))
        .op(0, 0, k(s(sc), vec![ra], vec![], 0))
        .op(0, 0, OpKind::Memcpy { stream: Some(s(sb)), dst: rp, src: ra })
        .op(0, 0, OpKind::StreamSynchronize { stream: s(sb) })
        .op(0, 0, OpKind::HostAccess { range: rp, write: false })
        .op(0, 0, OpKind::Memset { stream: None, dst: ra })
        .op(0, 0, k(s(0), vec![ra], vec![], 0))
        .op(0, 0, OpKind::DeviceSynchronize { rank: 0 });
    b.finish()
}

/// Two ranks: each stamps `x` on sA, then one group {send x to the peer, recv y from the peer} on sA, then a
/// kernel on sA reads `y`, then the host synchronizes sA. Expected: completes; each rank's read of `y` sees the
/// peer's stamping kernel (op 0 of the other rank).
pub fn sendrecv_grouped(bytes: u64, name: &str) -> Program {
    p2p(bytes, true, name)
}

/// Two ranks: each stamps `x`, then sends `x` to the peer and receives `y` from it on one stream (grouped or not),
/// reads `y` in a kernel and synchronizes. Ungrouped with 2 GiB: expected to hang (N5/N7: the send waits for a recv
/// that is queued behind it on the same communicator); grouped: completes (N4).
pub fn send_first_then_recv(bytes: u64, grouped: bool, name: &str) -> Program {
    p2p(bytes, grouped, name)
}

fn p2p(bytes: u64, grouped: bool, name: &str) -> Program {
    let mut b = Builder::new(name, 2);
    let sa = b.stream("sA", StreamKind::NonBlocking);
    let x = b.buffer("x", bytes, MemSpace::Device, false);
    let y = b.buffer("y", bytes, MemSpace::Device, false);
    for r in 0..2u32 {
        let peer = 1 - r;
        let st = StreamRef { rank: r, index: sa };
        let (bx, by) = (b.whole(r, x), b.whole(r, y));
        b.op(r, 0, OpKind::Kernel { stream: st, name: "fill".into(), reads: vec![], writes: vec![bx], duration_ns: 0 });
        if grouped {
            b.op(r, 0, OpKind::GroupStart);
        }
        b.op(r, 0, OpKind::Send { comm: CommId(0), peer, buf: bx, stream: st });
        b.op(r, 0, OpKind::Recv { comm: CommId(0), peer, buf: by, stream: st });
        if grouped {
            b.op(r, 0, OpKind::GroupEnd);
        }
        b.op(r, 0, OpKind::Kernel { stream: st, name: "use".into(), reads: vec![by], writes: vec![], duration_ns: 0 });
        b.op(r, 0, OpKind::StreamSynchronize { stream: st });
    }
    b.finish()
}

/// One rank, one thread: the host calls of rule S7 and a host function (S8). `Malloc`, `MallocHost` and the first
/// load of module `m` (ops 0-2); a kernel stamps `a` on sA (op 3), a copy brings it to pinned `p` (op 4), a host
/// function on sA reads `p` and stamps pinned `q` (op 5); after synchronizing sA (op 6) the host read of `q` (op 7)
/// sees op 5's version; the second load of `m` (op 8) does nothing; `cudaFree` of the idle device buffer `d` (op 9).
/// Expected: completes. Run it also with `CUDA_LAUNCH_BLOCKING=1` in the environment (the rank processes inherit it;
/// `CUDA_MODULE_LOADING` is always `EAGER` for them, and `LoadModule` makes its load explicitly): it completes the
/// same way.
pub fn host_calls() -> Program {
    let mut b = Builder::new("host_calls", 1);
    let sa = b.stream("sA", StreamKind::NonBlocking);
    let a = b.buffer("a", 64 * 1024, MemSpace::Device, false);
    let d = b.buffer("d", MIB, MemSpace::Device, false);
    let p = b.buffer("p", 64 * 1024, MemSpace::PinnedHost, false);
    let q = b.buffer("q", 4096, MemSpace::PinnedHost, false);
    let st = StreamRef { rank: 0, index: sa };
    let (ra, rp, rq) = (b.whole(0, a), b.whole(0, p), b.whole(0, q));
    b.op(0, 0, OpKind::CudaMalloc { rank: 0, bytes: MIB })
        .op(0, 0, OpKind::CudaMallocHost { rank: 0, bytes: 4096 })
        .op(0, 0, OpKind::LoadModule { rank: 0, module: "m".into() })
        .op(0, 0, OpKind::Kernel { stream: st, name: "fill".into(), reads: vec![], writes: vec![ra], duration_ns: 100_000 })
        .op(0, 0, OpKind::Memcpy { stream: Some(st), dst: rp, src: ra })
        .op(0, 0, OpKind::HostFunc { stream: st, name: "cb".into(), reads: vec![rp], writes: vec![rq], calls_cuda: false, duration_ns: 0 })
        .op(0, 0, OpKind::StreamSynchronize { stream: st })
        .op(0, 0, OpKind::HostAccess { range: rq, write: false })
        .op(0, 0, OpKind::LoadModule { rank: 0, module: "m".into() })
        .op(0, 0, OpKind::CudaFree { buf: cuorder_model::program::BufRef { rank: 0, index: d } });
    b.finish()
}

/// `examples/cudafree-during-recv.ron` built in code: rank 0 posts a recv from rank 1, calls `cudaFree`, then meets
/// rank 1 at a host barrier, after which rank 1 sends. Expected: hangs where the driver's `cudaFree` synchronizes the
/// device (rank 0 blocked in op 6, `cuda_free`), completes where it does not (S7; NVIDIA/nccl issue 345 says recent
/// drivers no longer synchronize). Either way an observation `cuorder conform` accepts under `portable`.
pub fn cudafree_during_recv() -> Program {
    let mut b = Builder::new("cudafree_during_recv", 2);
    let s0 = b.stream("s0", StreamKind::NonBlocking);
    let msg = b.buffer("msg", 4 * MIB, MemSpace::Device, false);
    let warm = b.buffer("warm", 4 * MIB, MemSpace::Device, false);
    let scratch = b.buffer("scratch", 64 * MIB, MemSpace::Device, false);
    let bar = 0;
    for r in 0..2u32 {
        let st = StreamRef { rank: r, index: s0 };
        let (bm, bw) = (b.whole(r, msg), b.whole(r, warm));
        b.op(r, 0, OpKind::GroupStart)
            .op(r, 0, OpKind::Send { comm: CommId(0), peer: 1 - r, buf: bm, stream: st })
            .op(r, 0, OpKind::Recv { comm: CommId(0), peer: 1 - r, buf: bw, stream: st })
            .op(r, 0, OpKind::GroupEnd)
            .op(r, 0, OpKind::StreamSynchronize { stream: st });
        if r == 0 {
            b.op(r, 0, OpKind::Recv { comm: CommId(0), peer: 1, buf: bm, stream: st })
                .op(r, 0, OpKind::CudaFree { buf: cuorder_model::program::BufRef { rank: 0, index: scratch } })
                .op(r, 0, OpKind::Barrier { barrier: bar });
        } else {
            b.op(r, 0, OpKind::Barrier { barrier: bar }).op(r, 0, OpKind::Send { comm: CommId(0), peer: 0, buf: bm, stream: st });
        }
        b.op(r, 0, OpKind::StreamSynchronize { stream: st });
    }
    let mut p = b.finish();
    p.barriers.push(cuorder_model::program::BarrierDecl { name: "step".into(), participants: vec![(0, 0), (1, 0)] });
    p
}

/// The program as the RON file the `run` command reads (the resolved program).
pub fn to_ron(p: &Program) -> String {
    ron::ser::to_string_pretty(p, ron::ser::PrettyConfig::new().struct_names(true))
        .unwrap_or_else(|e| format!("/* serialization failed: {e} */"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smoke_programs_lower_and_round_trip() {
        for p in programs() {
            p.validate().unwrap_or_else(|e| panic!("{}: {e:?}", p.name));
            crate::lower::lower(&p).unwrap_or_else(|e| panic!("{}: {e:?}", p.name));
            let back: Program = ron::from_str(&to_ron(&p)).unwrap();
            assert_eq!(back, p);
        }
    }
}
