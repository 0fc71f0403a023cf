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
            crate::lower::lower(&p).unwrap_or_else(|e| panic!("{}: {e:?}", p.name));
            let back: Program = ron::from_str(&to_ron(&p)).unwrap();
            assert_eq!(back, p);
        }
    }
}
