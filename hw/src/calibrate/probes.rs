//! The calibration probes as programs: each one is an ordinary [`Program`] (built with the model's [`Builder`]), so
//! it runs through the same executor as any user program and can later be checked against the model
//! (`cuorder conform`). Every probe is 2 ranks, one host thread each, unless said otherwise; streams are non-blocking.
//! The layout structs say which op indices (of thread 0) the timing analysis reads.

use cuorder_model::build::Builder;
use cuorder_model::program::{
    BarrierDecl, BufRange, CommId, EventRef, MemSpace, OpKind, Program, RankId, StreamKind, StreamRef,
};

pub const KIB: u64 = 1 << 10;
pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;

/// Bytes of the warm-up exchange (creates the P2P connections in both directions, N7).
pub const WARMUP_BYTES: u64 = 4 * KIB;

/// A builder that also counts the ops it appends per rank (thread 0), so probes know their op indices.
struct P {
    b: Builder,
    n: Vec<u32>,
}

impl P {
    fn new(name: &str, ranks: u32) -> P {
        P { b: Builder::new(name, ranks), n: vec![0; ranks as usize] }
    }

    /// Appends an op to (rank, thread 0); returns its index.
    fn op(&mut self, r: RankId, kind: OpKind) -> u32 {
        self.b.op(r, 0, kind);
        self.n[r as usize] += 1;
        self.n[r as usize] - 1
    }

    fn st(&self, r: RankId, index: u32) -> StreamRef {
        StreamRef { rank: r, index }
    }

    fn range(&self, r: RankId, buf: u32, len: u64) -> BufRange {
        let mut w = self.b.whole(r, buf);
        w.len = len;
        w
    }

    /// One grouped exchange {send w, recv v} with the peer on `comm` and stream `s`, then a stream synchronize: after
    /// it the connections of both directions exist on every channel NCCL uses for this peer (N7).
    fn warm_up(&mut self, comm: CommId, s: u32, w: u32, v: u32) {
        for r in 0..2u32 {
            let peer = 1 - r;
            let st = self.st(r, s);
            let (bw, bv) = (self.b.whole(r, w), self.b.whole(r, v));
            self.op(r, OpKind::GroupStart);
            self.op(r, OpKind::Send { comm, peer, buf: bw, stream: st });
            self.op(r, OpKind::Recv { comm, peer, buf: bv, stream: st });
            self.op(r, OpKind::GroupEnd);
            self.op(r, OpKind::StreamSynchronize { stream: st });
        }
    }

    fn finish(self) -> Program {
        self.b.finish()
    }
}

/// Name of the eager probe with `sends` sends of `bytes` each.
pub fn eager_name(bytes: u64, sends: u32) -> String {
    format!("eager-{sends}x{bytes}")
}

/// N2 eager window. After a grouped warm-up, rank 0 sends `sends` messages of `bytes` bytes to rank 1 (ungrouped,
/// one stream) and synchronizes that stream, then passes a host barrier; rank 1 passes the barrier first and only
/// then posts its `sends` receives. Completes only if the sends finish with no receive running (eager); otherwise
/// rank 0 waits in the synchronize and rank 1 at the barrier for ever.
pub fn eager(bytes: u64, sends: u32) -> Program {
    let mut p = P::new(&eager_name(bytes, sends), 2);
    let s = p.b.stream("sA", StreamKind::NonBlocking);
    let w = p.b.buffer("w", WARMUP_BYTES, MemSpace::Device, false);
    let v = p.b.buffer("v", WARMUP_BYTES, MemSpace::Device, false);
    let x = p.b.buffer("x", bytes, MemSpace::Device, false);
    p.warm_up(CommId(0), s, w, v);
    let (s0, s1) = (p.st(0, s), p.st(1, s));
    let (x0, x1) = (p.b.whole(0, x), p.b.whole(1, x));
    for _ in 0..sends {
        p.op(0, OpKind::Send { comm: CommId(0), peer: 1, buf: x0, stream: s0 });
    }
    p.op(0, OpKind::StreamSynchronize { stream: s0 });
    p.op(0, OpKind::Barrier { barrier: 0 });
    p.op(1, OpKind::Barrier { barrier: 0 });
    for _ in 0..sends {
        p.op(1, OpKind::Recv { comm: CommId(0), peer: 0, buf: x1, stream: s1 });
    }
    p.op(1, OpKind::StreamSynchronize { stream: s1 });
    let mut prog = p.finish();
    // The Builder declares no barriers: barrier 0, used above, is declared here.
    prog.barriers.push(BarrierDecl { name: "after_sends".into(), participants: vec![(0, 0), (1, 0)] });
    prog
}

/// N5 per-communicator serialization. After a warm-up, both ranks send `bytes` to the peer on stream sA and then
/// receive `bytes` from it on stream sB of the same communicator (ungrouped), then synchronize both streams. If
/// NCCL chains launches of one communicator, each send waits for the peer's receive, which is queued behind the
/// peer's send: a hang. `grouped`: the same four calls inside one group (the control: completes).
pub fn same_comm_two_streams(bytes: u64, grouped: bool) -> Program {
    let name = format!("n5-{}-{bytes}", if grouped { "grouped" } else { "two-streams" });
    let mut p = P::new(&name, 2);
    let sa = p.b.stream("sA", StreamKind::NonBlocking);
    let sb = p.b.stream("sB", StreamKind::NonBlocking);
    let w = p.b.buffer("w", WARMUP_BYTES, MemSpace::Device, false);
    let v = p.b.buffer("v", WARMUP_BYTES, MemSpace::Device, false);
    let x = p.b.buffer("x", bytes, MemSpace::Device, false);
    let y = p.b.buffer("y", bytes, MemSpace::Device, false);
    p.warm_up(CommId(0), sa, w, v);
    for r in 0..2u32 {
        let peer = 1 - r;
        let (a, b) = (p.st(r, sa), p.st(r, sb));
        let (bx, by) = (p.b.whole(r, x), p.b.whole(r, y));
        if grouped {
            p.op(r, OpKind::GroupStart);
        }
        p.op(r, OpKind::Send { comm: CommId(0), peer, buf: bx, stream: a });
        p.op(r, OpKind::Recv { comm: CommId(0), peer, buf: by, stream: b });
        if grouped {
            p.op(r, OpKind::GroupEnd);
        }
        p.op(r, OpKind::StreamSynchronize { stream: a });
        p.op(r, OpKind::StreamSynchronize { stream: b });
    }
    p.finish()
}

/// S1 independent progress. Two communicators (world and c2), both warmed up. Rank 0: send on world (sA), then
/// receive on c2 (sB); rank 1: send on c2 (sB), then receive on world (sA); `bytes` each (larger than the eager
/// window), then both ranks synchronize both streams. Completes only if each device runs its send and its receive
/// kernels at the same time (each send waits for a receive that its peer issued second).
pub fn two_comms_crossed(bytes: u64) -> Program {
    let mut p = P::new(&format!("s1-crossed-{bytes}"), 2);
    let c2 = p.b.comm("c2", vec![0, 1], false);
    let sa = p.b.stream("sA", StreamKind::NonBlocking);
    let sb = p.b.stream("sB", StreamKind::NonBlocking);
    let w = p.b.buffer("w", WARMUP_BYTES, MemSpace::Device, false);
    let v = p.b.buffer("v", WARMUP_BYTES, MemSpace::Device, false);
    let x = p.b.buffer("x", bytes, MemSpace::Device, false);
    let y = p.b.buffer("y", bytes, MemSpace::Device, false);
    p.warm_up(CommId(0), sa, w, v);
    p.warm_up(c2, sb, w, v);
    let (a0, b0, a1, b1) = (p.st(0, sa), p.st(0, sb), p.st(1, sa), p.st(1, sb));
    let (x0, y0, x1, y1) = (p.b.whole(0, x), p.b.whole(0, y), p.b.whole(1, x), p.b.whole(1, y));
    p.op(0, OpKind::Send { comm: CommId(0), peer: 1, buf: x0, stream: a0 });
    p.op(0, OpKind::Recv { comm: c2, peer: 1, buf: y0, stream: b0 });
    p.op(1, OpKind::Send { comm: c2, peer: 0, buf: x1, stream: b1 });
    p.op(1, OpKind::Recv { comm: CommId(0), peer: 0, buf: y1, stream: a1 });
    for r in 0..2u32 {
        let (a, b) = (p.st(r, sa), p.st(r, sb));
        p.op(r, OpKind::StreamSynchronize { stream: a });
        p.op(r, OpKind::StreamSynchronize { stream: b });
    }
    p.finish()
}

/// N7 first contact on a fresh pair (no warm-up): both ranks send `bytes` to the peer then receive `bytes` from it
/// on one stream, ungrouped (each rank first sets up a *different* direction: not mirrored) or inside one group
/// (mirrored), then synchronize. Ops: 0 send (or group start), ...
pub fn first_contact(bytes: u64, grouped: bool) -> Program {
    let name = format!("n7-first-contact-{}-{bytes}", if grouped { "grouped" } else { "ungrouped" });
    let mut p = P::new(&name, 2);
    let s = p.b.stream("sA", StreamKind::NonBlocking);
    let x = p.b.buffer("x", bytes, MemSpace::Device, false);
    let y = p.b.buffer("y", bytes, MemSpace::Device, false);
    for r in 0..2u32 {
        let peer = 1 - r;
        let st = p.st(r, s);
        let (bx, by) = (p.b.whole(r, x), p.b.whole(r, y));
        if grouped {
            p.op(r, OpKind::GroupStart);
        }
        p.op(r, OpKind::Send { comm: CommId(0), peer, buf: bx, stream: st });
        p.op(r, OpKind::Recv { comm: CommId(0), peer, buf: by, stream: st });
        if grouped {
            p.op(r, OpKind::GroupEnd);
        }
        p.op(r, OpKind::StreamSynchronize { stream: st });
    }
    p.finish()
}

/// Op index (rank 0) of the group end in [`first_contact`] with `grouped`: its host time is the connection set-up.
pub const FIRST_CONTACT_GROUP_END: u32 = 3;
/// Op index (rank 0) of the send in [`first_contact_late_peer`].
pub const LATE_PEER_SEND: u32 = 0;

/// N7 host-blocking set-up: on a fresh pair, rank 0 sends `bytes` (ungrouped) and synchronizes; rank 1 sleeps
/// `sleep_ns` on the host, then receives and synchronizes (mirrored: only the direction 0 -> 1 is needed). If
/// connection set-up is lazy and blocks the host, rank 0's `ncclSend` call returns only after rank 1 woke up.
pub fn first_contact_late_peer(bytes: u64, sleep_ns: u64) -> Program {
    let mut p = P::new(&format!("n7-late-peer-{bytes}"), 2);
    let s = p.b.stream("sA", StreamKind::NonBlocking);
    let x = p.b.buffer("x", bytes, MemSpace::Device, false);
    let (s0, s1) = (p.st(0, s), p.st(1, s));
    let (x0, x1) = (p.b.whole(0, x), p.b.whole(1, x));
    p.op(0, OpKind::Send { comm: CommId(0), peer: 1, buf: x0, stream: s0 });
    p.op(0, OpKind::StreamSynchronize { stream: s0 });
    p.op(1, OpKind::HostSleep { ns: sleep_ns });
    p.op(1, OpKind::Recv { comm: CommId(0), peer: 0, buf: x1, stream: s1 });
    p.op(1, OpKind::StreamSynchronize { stream: s1 });
    p.finish()
}

/// Op indices (rank 0, thread 0) of the empty kernels around one ping-pong (rank 0 sends `bytes`, then receives
/// `bytes` back) or one grouped exchange ({send, recv} of `bytes` each way): the round trip or exchange time is
/// `after.start - before.end` on rank 0's GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timed {
    pub bytes: u64,
    pub rep: u32,
    pub before: u32,
    pub after: u32,
}

/// Where [`p2p_timing`] put its ops.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct P2pLayout {
    pub pingpongs: Vec<Timed>,
    pub exchanges: Vec<Timed>,
}

/// P2P timing. After a warm-up, for each size and repetition a ping-pong (rank 0 sends, rank 1 receives and sends
/// back, rank 0 receives; ungrouped, one stream) and then, for each size and repetition, a grouped exchange (both
/// directions at once). On rank 0 an empty kernel before and after each: one-way time = round trip / 2, on rank 0's
/// GPU clock. Meant to run without marker kernels (`CUORDER_HW_NO_MARKERS=1`), so that nothing else sits on the
/// path.
pub fn p2p_timing(sizes: &[u64], reps: u32) -> (Program, P2pLayout) {
    let max = sizes.iter().copied().max().unwrap_or(WARMUP_BYTES).max(WARMUP_BYTES);
    let mut p = P::new("timing-p2p", 2);
    let s = p.b.stream("sA", StreamKind::NonBlocking);
    let w = p.b.buffer("w", WARMUP_BYTES, MemSpace::Device, false);
    let v = p.b.buffer("v", WARMUP_BYTES, MemSpace::Device, false);
    let x = p.b.buffer("x", max, MemSpace::Device, false);
    let y = p.b.buffer("y", max, MemSpace::Device, false);
    p.warm_up(CommId(0), s, w, v);
    let (s0, s1) = (p.st(0, s), p.st(1, s));
    let k = || OpKind::Kernel { stream: s0, name: "t".into(), reads: vec![], writes: vec![], duration_ns: 0 };
    let mut layout = P2pLayout::default();
    for &bytes in sizes {
        for rep in 0..reps {
            let (x0, y0, x1, y1) = (p.range(0, x, bytes), p.range(0, y, bytes), p.range(1, x, bytes), p.range(1, y, bytes));
            let before = p.op(0, k());
            p.op(0, OpKind::Send { comm: CommId(0), peer: 1, buf: x0, stream: s0 });
            p.op(0, OpKind::Recv { comm: CommId(0), peer: 1, buf: y0, stream: s0 });
            let after = p.op(0, k());
            p.op(1, OpKind::Recv { comm: CommId(0), peer: 0, buf: y1, stream: s1 });
            p.op(1, OpKind::Send { comm: CommId(0), peer: 0, buf: x1, stream: s1 });
            layout.pingpongs.push(Timed { bytes, rep, before, after });
        }
    }
    for &bytes in sizes {
        for rep in 0..reps {
            let before = p.op(0, k());
            for r in 0..2u32 {
                let peer = 1 - r;
                let st = p.st(r, s);
                let (bx, by) = (p.range(r, x, bytes), p.range(r, y, bytes));
                p.op(r, OpKind::GroupStart);
                p.op(r, OpKind::Send { comm: CommId(0), peer, buf: bx, stream: st });
                p.op(r, OpKind::Recv { comm: CommId(0), peer, buf: by, stream: st });
                p.op(r, OpKind::GroupEnd);
            }
            let after = p.op(0, k());
            layout.exchanges.push(Timed { bytes, rep, before, after });
        }
    }
    p.op(0, OpKind::StreamSynchronize { stream: s0 });
    p.op(1, OpKind::StreamSynchronize { stream: s1 });
    (p.finish(), layout)
}

/// Where [`launch_timing`] put its ops: the tiny kernels are ops `first .. first + count` (rank 0, thread 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchLayout {
    /// The free-running series (the host launches, the device runs each as it comes).
    pub first: u32,
    pub count: u32,
    /// The queued series: the same number of tiny kernels launched behind a long kernel, so that the device runs
    /// them back to back.
    pub queued_first: u32,
}

/// Kernel launch overhead, one rank: `count` empty kernels on one stream, a synchronize, then a kernel spinning
/// `block_ns` followed by `count` empty kernels (queued behind it), and a synchronize.
pub fn launch_timing(count: u32, block_ns: u64) -> (Program, LaunchLayout) {
    let mut p = P::new("timing-launch", 1);
    let s = p.b.stream("sA", StreamKind::NonBlocking);
    let st = p.st(0, s);
    let k = |ns| OpKind::Kernel { stream: st, name: "k".into(), reads: vec![], writes: vec![], duration_ns: ns };
    let first = p.n[0];
    for _ in 0..count {
        p.op(0, k(0));
    }
    p.op(0, OpKind::StreamSynchronize { stream: st });
    p.op(0, k(block_ns));
    let queued_first = p.n[0];
    for _ in 0..count {
        p.op(0, k(0));
    }
    p.op(0, OpKind::StreamSynchronize { stream: st });
    (p.finish(), LaunchLayout { first, count, queued_first })
}

/// Op indices (rank 0, thread 0) of one repetition of [`event_timing`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventRep {
    /// Kernel on sA spinning `spin_ns` (so that the host has enqueued what follows before it ends).
    pub a: u32,
    /// `EventRecord(e, sA)`.
    pub record: u32,
    /// `StreamWaitEvent(sB, e)`.
    pub wait: u32,
    /// Empty kernel on sB, after the wait: starts when `a` has ended (cross-stream dependency through the event).
    pub b: u32,
    /// Empty kernel on sA after the record (same stream, with an event record between).
    pub c: u32,
    /// Kernel on sA spinning `spin_ns`, then `e2`, an empty kernel on sA right behind it (same stream, no event).
    pub d: u32,
    pub e2: u32,
    /// `StreamSynchronize(sA)` on an idle stream.
    pub idle_sync: u32,
}

/// Event record / wait overhead, one rank, streams sA and sB, event e; `reps` repetitions of the ops of
/// [`EventRep`], each ending with synchronizes of both streams.
pub fn event_timing(reps: u32, spin_ns: u64) -> (Program, Vec<EventRep>) {
    let mut p = P::new("timing-events", 1);
    let sa = p.b.stream("sA", StreamKind::NonBlocking);
    let sb = p.b.stream("sB", StreamKind::NonBlocking);
    let e = p.b.event("e");
    let (a_, b_) = (p.st(0, sa), p.st(0, sb));
    let ev = EventRef { rank: 0, index: e };
    let k = |st, ns| OpKind::Kernel { stream: st, name: "k".into(), reads: vec![], writes: vec![], duration_ns: ns };
    let mut out = Vec::new();
    for _ in 0..reps {
        let a = p.op(0, k(a_, spin_ns));
        let record = p.op(0, OpKind::EventRecord { event: ev, stream: a_ });
        let wait = p.op(0, OpKind::StreamWaitEvent { stream: b_, event: ev });
        let b = p.op(0, k(b_, 0));
        let c = p.op(0, k(a_, 0));
        p.op(0, OpKind::StreamSynchronize { stream: b_ });
        p.op(0, OpKind::StreamSynchronize { stream: a_ });
        let d = p.op(0, k(a_, spin_ns));
        let e2 = p.op(0, k(a_, 0));
        p.op(0, OpKind::StreamSynchronize { stream: a_ });
        let idle_sync = p.op(0, OpKind::StreamSynchronize { stream: a_ });
        out.push(EventRep { a, record, wait, b, c, d, e2, idle_sync });
    }
    (p.finish(), out)
}

/// The semantic probes at their default sizes, for `cuorder-hw calibration-programs` (to run one by hand, e.g. with
/// another NCCL, or to check it with the model).
pub fn semantic_programs(large: u64) -> Vec<Program> {
    vec![
        eager(MIB, 1),
        eager(MIB, 2),
        same_comm_two_streams(large, false),
        same_comm_two_streams(large, true),
        two_comms_crossed(large),
        first_contact(KIB, false),
        first_contact(KIB, true),
        first_contact_late_peer(KIB, 500_000_000),
    ]
}
