//! The differential campaign (issue 30): seeded programs over every operation family, small enough for the naive
//! [`crate::reference`] explorer to finish, each checked by the exhaustive search (`check`: reduction, forgetting,
//! withholding, eager dominance), by the reference, by DPOR and by random walks; the first three must report the
//! same findings (problem key and frequency), and every sampled finding must be one `check` reports.
//!
//! Programs are generated as the RON surface text users write (docs/program-format.md) and loaded with
//! [`cuorder_model::format::load`], so the loader, the SPMD expansion and the PyTorch dialect's lowering are on the
//! path too. Every choice derives from the seed ([`crate::rng::Rng`]): the program of a seed is the same text on
//! every machine. [`GEN_VERSION`] names the generator's behaviour.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use cuorder_model::profile::Profile;
use cuorder_model::semantics::Semantics;
use cuorder_model::verdict::{Frequency, ProblemKey};

use crate::explore::{explore, Exploration, Limits};
use crate::rng::Rng;
use crate::strategy::{sample, SampleOptions, Strategy};

/// The generator's behaviour version: a seed names a program only together with it.
pub const GEN_VERSION: u32 = 4;

/// The operation families a program is built around (each program also mixes in ops of other families).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// Kernels on the legacy, per-thread, blocking and non-blocking streams (S1, S2).
    Streams,
    /// Event record, wait, query, synchronize (S3, S4).
    Events,
    /// Stream, event and device synchronization, queries, host reads and writes, host barriers (S4).
    HostSync,
    /// Synchronous and asynchronous copies and memsets between device, pinned and pageable memory (S5).
    Copies,
    /// The caching allocator (Alloc, Free, RecordStream; P4), cudaFree and cudaMalloc (S7).
    Allocator,
    /// Ungrouped sends and receives (N2, N3, N7).
    P2p,
    /// Grouped sends and receives (N4, N14).
    Groups,
    /// Every collective kind (C1).
    Collectives,
    /// Explicit init, split, non-blocking communicators with polls, abort, finalize and destroy, watchdogs (N8,
    /// N9, N12, N13).
    Communicators,
    /// Host functions on streams (S8).
    HostFuncs,
    /// Value assertions (V1).
    Expect,
    /// The PyTorch dialect (P1-P5).
    Torch,
}

impl Family {
    /// Every family, in the order the campaign cycles through them.
    pub const ALL: [Family; 12] = [
        Family::Streams,
        Family::Events,
        Family::HostSync,
        Family::Copies,
        Family::Allocator,
        Family::P2p,
        Family::Groups,
        Family::Collectives,
        Family::Communicators,
        Family::HostFuncs,
        Family::Expect,
        Family::Torch,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Family::Streams => "streams",
            Family::Events => "events",
            Family::HostSync => "host-sync",
            Family::Copies => "copies",
            Family::Allocator => "allocator",
            Family::P2p => "p2p",
            Family::Groups => "groups",
            Family::Collectives => "collectives",
            Family::Communicators => "communicators",
            Family::HostFuncs => "host-funcs",
            Family::Expect => "expect",
            Family::Torch => "torch",
        }
    }
}

/// The family of program `seed`: seeds cycle through [`Family::ALL`], so any range of 12 seeds covers each once.
pub fn family_of(seed: u64) -> Family {
    Family::ALL[(seed % Family::ALL.len() as u64) as usize]
}

struct G {
    rng: Rng,
    ranks: u32,
    /// Per rank, per thread: the ops, as RON text.
    ops: Vec<Vec<Vec<String>>>,
    /// Extra communicator declarations.
    comms: Vec<String>,
    /// A counter for unique names.
    n: u32,
    /// The size unit of buffers: every device buffer is 4 units, so that collectives over 1 to 4 ranks fit.
    unit: &'static str,
    unit_kib: u64,
    /// Ranks whose allocator pattern was used (Alloc of `p` and `q` happens once per rank).
    pooled: Vec<bool>,
    /// Ranks that released `z` with cudaFree.
    freed: Vec<bool>,
    /// Communicators finalized or destroyed at the end (no op may follow).
    closing: bool,
}

const STREAMS: [&str; 4] = ["sL", "sPT", "a", "b"];

impl G {
    fn below(&mut self, n: u64) -> u64 {
        self.rng.below(n)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
    fn name(&mut self, base: &str) -> String {
        self.n += 1;
        format!("{base}{}", self.n)
    }
    fn stream(&mut self) -> &'static str {
        self.pick(&STREAMS)
    }
    fn thread(&mut self, rank: u32) -> usize {
        self.below(self.ops[rank as usize].len() as u64) as usize
    }
    fn push(&mut self, rank: u32, thread: usize, op: String) {
        self.ops[rank as usize][thread].push(op);
    }
    fn size(&self, units: u64) -> String {
        let kib = units * self.unit_kib;
        if kib % 1024 == 0 { format!("{} MiB", kib / 1024) } else { format!("{kib} KiB") }
    }
    fn slice(&self, buf: &str, units: u64) -> String {
        format!("Slice(\"{buf}\", 0, \"{}\")", self.size(units))
    }

    // ----- local snippets: one thread of one rank -----

    fn kernel(&mut self, rank: u32, t: usize) {
        let bufs = ["x", "y"];
        let (r, w) = (self.pick(&bufs), self.pick(&bufs));
        let s = self.stream();
        let k = self.name("k");
        let reads = if self.chance(70) { format!("\"{r}\"") } else { String::new() };
        let writes = if self.chance(70) { format!("\"{w}\"") } else { String::new() };
        self.push(rank, t, format!("Kernel(\"{k}\", stream: \"{s}\", reads: [{reads}], writes: [{writes}])"));
    }

    fn events(&mut self, rank: u32, t: usize) {
        let (s1, s2) = (self.stream(), self.stream());
        let e = self.pick(&["e0", "e1"]);
        let k = self.name("w");
        let k2 = self.name("r");
        let record = format!("Record(\"{e}\", stream: \"{s1}\")");
        let write = format!("Kernel(\"{k}\", stream: \"{s1}\", writes: [\"x\"])");
        let wait = match self.below(4) {
            0 => format!("EventSync(\"{e}\")"),
            1 => format!("EventQuery(\"{e}\")"),
            _ => format!("Wait(\"{e}\", stream: \"{s2}\")"),
        };
        let read = format!("Kernel(\"{k2}\", stream: \"{s2}\", reads: [\"x\"])");
        // L3 (ordered), L4 (record before the write), L5 (wait before the record).
        let order: Vec<String> = match self.below(4) {
            0 => vec![record, write, wait, read],
            1 => vec![wait, write, record, read],
            _ => vec![write, record, wait, read],
        };
        for op in order {
            self.push(rank, t, op);
        }
    }

    fn host_sync(&mut self, rank: u32, t: usize) {
        let s = self.stream();
        if self.chance(50) {
            self.push(rank, t, format!("Memcpy(dst: \"h\", src: \"x\", stream: \"{s}\")"));
        }
        let op = match self.below(7) {
            0 => format!("StreamSync(\"{s}\")"),
            1 => "DeviceSync".to_string(),
            2 => format!("StreamQuery(\"{s}\")"),
            3 => format!("EventQuery(\"{}\")", self.pick(&["e0", "e1"])),
            4 => "Barrier(\"bar\")".to_string(),
            _ => format!("StreamSync(\"{s}\")"),
        };
        self.push(rank, t, op);
        let access = if self.chance(50) { "HostRead(\"h\")" } else { "HostWrite(\"h\")" };
        self.push(rank, t, access.to_string());
    }

    fn copies(&mut self, rank: u32, t: usize) {
        let s = self.stream();
        let op = match self.below(6) {
            0 => format!("Memcpy(dst: \"h\", src: \"x\", stream: \"{s}\")"),
            1 => "Memcpy(dst: \"y\", src: \"x\")".to_string(),
            2 => format!("Memset(\"x\", stream: \"{s}\")"),
            3 => "Memset(\"y\")".to_string(),
            4 => format!("Memcpy(dst: \"x\", src: \"k\", stream: \"{s}\")"),
            _ => "Memcpy(dst: \"k\", src: \"y\")".to_string(),
        };
        self.push(rank, t, op);
    }

    fn allocator(&mut self, rank: u32, t: usize) {
        if std::mem::replace(&mut self.pooled[rank as usize], true) {
            return self.kernel(rank, t);
        }
        let (s1, s2) = (self.stream(), self.stream());
        let fill = self.name("fill");
        let use_ = self.name("use");
        let next = self.name("next");
        self.push(rank, t, format!("Alloc(\"p\", stream: \"{s1}\")"));
        self.push(rank, t, format!("Kernel(\"{fill}\", stream: \"{s1}\", writes: [\"p\"])"));
        if self.chance(50) {
            self.push(rank, t, format!("Record(\"e1\", stream: \"{s1}\")"));
            self.push(rank, t, format!("Wait(\"e1\", stream: \"{s2}\")"));
        }
        self.push(rank, t, format!("Kernel(\"{use_}\", stream: \"{s2}\", reads: [\"p\"])"));
        if self.chance(50) {
            self.push(rank, t, format!("RecordStream(\"p\", stream: \"{s2}\")"));
        }
        self.push(rank, t, "Free(\"p\")".into());
        let s3 = if self.chance(70) { s1 } else { self.stream() };
        self.push(rank, t, format!("Alloc(\"q\", stream: \"{s3}\")"));
        self.push(rank, t, format!("Kernel(\"{next}\", stream: \"{s3}\", writes: [\"q\"])"));
        if self.chance(30) && !std::mem::replace(&mut self.freed[rank as usize], true) {
            let s = self.stream();
            let k = self.name("z");
            self.push(rank, t, format!("Kernel(\"{k}\", stream: \"{s}\", writes: [\"z\"])"));
            self.push(rank, t, "Free(\"z\")".into());
        } else if self.chance(30) {
            self.push(rank, t, "Malloc(\"1 MiB\")".into());
        }
    }

    fn host_func(&mut self, rank: u32, t: usize) {
        let s = self.stream();
        let f = self.name("f");
        let body = match self.below(4) {
            0 => "reads: [\"h\"]",
            1 => "writes: [\"h\"]",
            2 => "calls_cuda: true",
            _ => "reads: [\"k\"], writes: [\"h\"]",
        };
        self.push(rank, t, format!("HostFunc(\"{f}\", stream: \"{s}\", {body})"));
        if self.chance(50) {
            self.push(rank, t, "HostRead(\"h\")".into());
        }
    }

    fn expect(&mut self, rank: u32, t: usize) {
        let (s1, s2) = (self.stream(), self.stream());
        // A received message asserted to come from the peer's send (V1 across ranks).
        if self.ranks >= 2 && t == 0 && self.chance(35) {
            let from = (rank + 1 + self.below(self.ranks as u64 - 1) as u32) % self.ranks;
            let k = self.name("w");
            self.push(from, 0, format!("Kernel(\"{k}\", stream: \"{s1}\", writes: [\"x\"])"));
            self.push(from, 0, format!("Send(to: Rank({rank}), buf: \"x\", stream: \"{s1}\", comm: \"world\")"));
            self.push(rank, 0, format!("Recv(from: Rank({from}), buf: \"y\", stream: \"{s2}\", comm: \"world\")"));
            let s3 = if self.chance(60) { s2 } else { self.stream() };
            let named = if self.chance(80) { "x" } else { "z" };
            self.push(rank, 0, format!("Expect(\"y\", written_by: Send(\"{named}@{from}\"), stream: \"{s3}\")"));
            return;
        }
        if self.chance(50) {
            let k = self.name("w");
            self.push(rank, t, format!("Kernel(\"{k}\", stream: \"{s1}\", writes: [\"x\"])"));
            if self.chance(60) {
                self.push(rank, t, format!("Record(\"e0\", stream: \"{s1}\")"));
                self.push(rank, t, format!("Wait(\"e0\", stream: \"{s2}\")"));
            }
            self.push(rank, t, format!("Expect(\"x\", written_by: Kernel(\"{k}\"), stream: \"{s2}\")"));
        } else {
            self.push(rank, t, format!("Memcpy(dst: \"h\", src: \"y\", stream: \"{s1}\")"));
            if self.chance(60) {
                self.push(rank, t, format!("StreamSync(\"{s1}\")"));
            }
            self.push(rank, t, "Expect(\"h\", written_by: Memcpy)".into());
        }
    }

    fn local(&mut self, family: Family) {
        let rank = self.below(self.ranks as u64) as u32;
        let t = self.thread(rank);
        match family {
            Family::Streams => self.kernel(rank, t),
            Family::Events => self.events(rank, t),
            Family::HostSync => self.host_sync(rank, t),
            Family::Copies => self.copies(rank, t),
            Family::Allocator => self.allocator(rank, t),
            Family::HostFuncs => self.host_func(rank, t),
            Family::Expect => self.expect(rank, t),
            _ => self.kernel(rank, t),
        }
    }

    // ----- snippets over ranks: the main thread of each rank involved -----

    fn p2p(&mut self, grouped: bool) {
        if self.ranks < 2 {
            return self.kernel(0, 0);
        }
        let a = self.below(self.ranks as u64) as u32;
        let b = (a + 1 + self.below(self.ranks as u64 - 1) as u32) % self.ranks;
        let (sa, sb) = (self.stream(), self.stream());
        let send = |to: u32, s: &str| format!("Send(to: Rank({to}), buf: \"x\", stream: \"{s}\", comm: \"world\")");
        let recv = |from: u32, s: &str| format!("Recv(from: Rank({from}), buf: \"y\", stream: \"{s}\", comm: \"world\")");
        let variant = if grouped { 4 } else { self.below(4) };
        match variant {
            // One way.
            0 => {
                self.push(a, 0, send(b, sa));
                self.push(b, 0, recv(a, sb));
            }
            // Both send first: a cycle under rendezvous (N2).
            1 => {
                self.push(a, 0, send(b, sa));
                self.push(a, 0, recv(b, sa));
                self.push(b, 0, send(a, sb));
                self.push(b, 0, recv(a, sb));
            }
            // Ordered by rank parity.
            2 => {
                self.push(a, 0, send(b, sa));
                self.push(a, 0, recv(b, sa));
                self.push(b, 0, recv(a, sb));
                self.push(b, 0, send(a, sb));
            }
            // Send and recv on two streams of one communicator (N5).
            3 => {
                let sa2 = self.stream();
                self.push(a, 0, send(b, sa));
                self.push(b, 0, recv(a, sb));
                self.push(b, 0, send(a, sb));
                self.push(a, 0, recv(b, sa2));
            }
            // Grouped exchange (N4), sometimes one-sided.
            _ => {
                self.push(a, 0, format!("Group([{}, {}])", send(b, sa), recv(b, sa)));
                if self.chance(85) {
                    self.push(b, 0, format!("Group([{}, {}])", send(a, sb), recv(a, sb)));
                } else {
                    self.push(b, 0, send(a, sb));
                    self.push(b, 0, recv(a, sb));
                }
            }
        }
        if self.chance(60) {
            for r in [a, b] {
                let s = self.stream();
                let k = self.name("c");
                self.push(r, 0, format!("Kernel(\"{k}\", stream: \"{s}\", reads: [\"y\"], writes: [\"x\"])"));
            }
        }
    }

    fn collective_op(&mut self, kind: u64, root: u64, s: &str, comm: &str, members: u64) -> String {
        let u = |g: &G, n: u64| g.slice("x", n);
        let v = |g: &G, n: u64| g.slice("y", n);
        match kind {
            0 => format!("AllReduce(buf: \"x\", stream: \"{s}\", comm: \"{comm}\")"),
            1 => format!("Broadcast(root: Rank({root}), buf: \"x\", stream: \"{s}\", comm: \"{comm}\")"),
            2 => format!("AllGather(send: {}, recv: {}, stream: \"{s}\", comm: \"{comm}\")", u(self, 1), v(self, members)),
            3 => format!("ReduceScatter(send: {}, recv: {}, stream: \"{s}\", comm: \"{comm}\")", u(self, members), v(self, 1)),
            4 => format!("AllToAll(send: {}, recv: {}, stream: \"{s}\", comm: \"{comm}\")", u(self, members), v(self, members)),
            5 => format!("Reduce(root: Rank({root}), buf: \"x\", stream: \"{s}\", comm: \"{comm}\")"),
            6 => format!("Gather(root: Rank({root}), send: {}, recv: {}, stream: \"{s}\", comm: \"{comm}\")", u(self, 1), v(self, members)),
            _ => format!("Scatter(root: Rank({root}), send: {}, recv: {}, stream: \"{s}\", comm: \"{comm}\")", u(self, members), v(self, 1)),
        }
    }

    fn collectives(&mut self) {
        let kind = self.below(8);
        let root = self.below(self.ranks as u64);
        // Each rank's part on a stream of its own choosing (a rank that skips one, or calls another kind, is a load
        // error: the loader matches collectives statically, C1).
        for r in 0..self.ranks {
            let s = self.stream();
            let op = self.collective_op(kind, root, s, "world", self.ranks as u64);
            self.push(r, 0, op);
        }
        if self.chance(50) {
            for r in 0..self.ranks {
                let s = self.stream();
                let k = self.name("c");
                self.push(r, 0, format!("Kernel(\"{k}\", stream: \"{s}\", reads: [\"y\"])"));
            }
        }
    }

    fn communicators(&mut self) {
        match self.below(5) {
            // An explicitly created communicator of two ranks (N8).
            0 if self.ranks >= 2 => {
                let c = self.name("c");
                self.comms.push(format!("Comm(\"{c}\", members: [0, 1], init: Explicit)"));
                for r in 0..2 {
                    let s = self.stream();
                    self.push(r, 0, format!("CommInit(\"{c}\")"));
                    self.push(r, 0, format!("AllReduce(buf: \"x\", stream: \"{s}\", comm: \"{c}\")"));
                }
            }
            // A split of world into halves (N8).
            1 => {
                let c = self.name("half");
                for r in 0..self.ranks {
                    let s = self.stream();
                    if self.chance(80) {
                        self.push(r, 0, format!("CommSplit(\"world\", new: \"{c}.{{rank % 2}}\", color: rank % 2)"));
                        self.push(r, 0, format!("AllReduce(buf: \"x\", stream: \"{s}\", comm: \"{c}.{}\")", r % 2));
                    } else {
                        self.push(r, 0, "CommSplit(\"world\")".into());
                    }
                }
            }
            // A non-blocking communicator (N12).
            2 => {
                let c = self.name("nb");
                self.comms.push(format!("Comm(\"{c}\", init: Explicit, config: NonBlocking)"));
                let s = self.stream();
                for r in 0..self.ranks {
                    self.push(r, 0, format!("CommInit(\"{c}\")"));
                    self.push(r, 0, format!("Poll(\"{c}\")"));
                    self.push(r, 0, format!("AllReduce(buf: \"x\", stream: \"{s}\", comm: \"{c}\")"));
                    if self.chance(80) {
                        self.push(r, 0, format!("Poll(\"{c}\")"));
                    }
                    self.push(r, 0, format!("StreamSync(\"{s}\")"));
                }
            }
            // A guard thread aborts world on rank 0 while the main thread waits in a recv no send may meet (N13).
            3 if self.ranks >= 2 && self.ops[0].len() > 1 && self.chance(50) => {
                let s = self.stream();
                self.push(0, 0, format!("Recv(from: Rank(1), buf: \"y\", stream: \"{s}\", comm: \"world\")"));
                if self.chance(50) {
                    self.push(1, 0, format!("Send(to: Rank(0), buf: \"x\", stream: \"{s}\", comm: \"world\")"));
                }
                self.push(0, 0, "Barrier(\"guard\")".into());
                self.push(0, 0, format!("StreamSync(\"{s}\")"));
                self.push(0, 1, "Barrier(\"guard\")".into());
                self.push(0, 1, "CommAbort(\"world\")".into());
            }
            // A watchdog watches a hang (N9).
            3 if self.ranks >= 2 => {
                let c = self.name("wd");
                self.comms.push(format!("Comm(\"{c}\", watchdog: \"1 s\")"));
                let s = self.stream();
                self.push(0, 0, format!("Recv(from: Rank(1), buf: \"y\", stream: \"{s}\", comm: \"{c}\")"));
                if self.chance(50) {
                    self.push(1, 0, format!("Send(to: Rank(0), buf: \"x\", stream: \"{s}\", comm: \"{c}\")"));
                }
                self.push(0, 0, format!("StreamSync(\"{s}\")"));
            }
            _ => {
                // Finalize and destroy world at the end of every rank's main thread (N13).
                self.closing = true;
            }
        }
    }

    fn torch(&mut self) -> String {
        // Two ranks: the dialect's lowering makes every call several ops, and three ranks were mostly beyond the
        // reference's budget.
        let ranks = 2;
        let mut body: Vec<Vec<String>> = vec![vec!["InitProcessGroup".into()]; ranks as usize];
        let mut works = 0;
        let version = if self.chance(30) { "Before82450" } else { "Since82450" };
        let init = if self.chance(50) { "Lazy" } else { "Eager" };
        let avoid = self.chance(20);
        let mut deleted = vec![false; ranks as usize];
        let mut made = vec![false; ranks as usize];
        for _ in 0..1 + self.below(2) {
            match self.below(8) {
                0 => {
                    let r = self.below(ranks as u64) as usize;
                    let k = self.name("fwd");
                    let s = if self.chance(50) { "side" } else { "sL" };
                    body[r].push(format!("WithStream(\"{s}\", [Compute(\"{k}\", reads: [\"act\"], writes: [\"grad\"])])"));
                }
                1 => {
                    let a = self.below(ranks as u64) as usize;
                    let b = (a + 1) % ranks as usize;
                    body[a].push(format!("DistSend(\"act\", dst: Rank({b}))"));
                    body[b].push(format!("DistRecv(\"grad\", src: Rank({a}))"));
                }
                2 => {
                    let a = self.below(ranks as u64) as usize;
                    let b = (a + 1) % ranks as usize;
                    works += 1;
                    let k = self.name("bwd");
                    body[a].push(format!("Isend(\"act\", dst: Rank({b}), work: \"w{works}\")"));
                    body[b].push(format!("Irecv(\"grad\", src: Rank({a}), work: \"w{works}\")"));
                    if self.chance(70) {
                        body[b].push(format!("WorkWait(\"w{works}\")"));
                    }
                    if self.chance(70) {
                        body[a].push(format!("WorkWait(\"w{works}\")"));
                    }
                    body[b].push(format!("Compute(\"{k}\", reads: [\"grad\"])"));
                }
                3 => {
                    works += 1;
                    let asy = self.chance(50);
                    for (r, b) in body.iter_mut().enumerate() {
                        if asy {
                            b.push(format!("DistAllReduce(\"grad\", async_op: \"w{works}\")"));
                            if r % 2 == 0 || works % 2 == 0 {
                                b.push(format!("WorkWait(\"w{works}\")"));
                            }
                            // The optimizer step reads the reduced gradient (a race where it was not waited for).
                            b.push(format!("Compute(\"opt{works}\", reads: [\"grad\"])"));
                        } else {
                            b.push("DistAllReduce(\"grad\")".into());
                        }
                    }
                }
                4 => {
                    works += 1;
                    for b in body.iter_mut() {
                        b.push(format!(
                            "BatchIsendIrecv([P2POp(Isend, \"act\", Next), P2POp(Irecv, \"grad\", Prev)], works: \"w{works}\")"
                        ));
                        b.push(format!("WorkWait(\"w{works}\")"));
                    }
                    let k = self.name("use");
                    for b in body.iter_mut() {
                        b.push(format!("Compute(\"{k}\", reads: [\"grad\"], writes: [\"act\"])"));
                    }
                }
                5 => {
                    let r = self.below(ranks as u64) as usize;
                    if !made[r] {
                        made[r] = true;
                        let k = self.name("fill");
                        let b = (r + 1) % ranks as usize;
                        body[r].push("WithStream(\"side\", [Empty(\"t\")])".to_string());
                        body[r].push(format!("WithStream(\"side\", [Compute(\"{k}\", writes: [\"t\"])])"));
                        if self.chance(50) {
                            body[r].push("WithStream(\"side\", [RecordEvent(\"ev\")])".into());
                            body[r].push("WaitEvent(\"ev\")".into());
                        }
                        works += 1;
                        body[r].push(format!("Isend(\"t\", dst: Rank({b}), work: \"w{works}\")"));
                        body[b].push("DistRecv(\"grad\", src: Rank(".to_string() + &r.to_string() + "))");
                        if self.chance(60) {
                            body[r].push(format!("WorkWait(\"w{works}\")"));
                        }
                        if self.chance(70) {
                            deleted[r] = true;
                            // t.untyped_storage().resize_(0) frees the block whatever holds the tensor.
                            body[r].push(if self.chance(30) { "FreeStorage(\"t\")" } else { "Del(\"t\")" }.into());
                            let k2 = self.name("next");
                            body[r].push("WithStream(\"side\", [Empty(\"u\")])".to_string());
                            body[r].push(format!("WithStream(\"side\", [Compute(\"{k2}\", writes: [\"u\"])])"));
                        }
                    }
                }
                6 => {
                    // A new group of ranks 0 and 1 on its own NCCL stream beside the default group (P1).
                    works += 1;
                    for (r, b) in body.iter_mut().enumerate() {
                        b.push(format!("NewGroup(\"g{works}\", [0, 1])"));
                        if r < 2 {
                            b.push(format!("DistAllReduce(\"act\", group: \"g{works}\", async_op: \"w{works}\")"));
                        }
                    }
                    let wait = self.chance(50);
                    let k = self.name("use");
                    for (r, b) in body.iter_mut().enumerate() {
                        b.push("DistAllReduce(\"grad\")".into());
                        if r < 2 && wait {
                            b.push(format!("WorkWait(\"w{works}\")"));
                        }
                        b.push(format!("Compute(\"{k}\", reads: [\"act\"])"));
                    }
                }
                _ => {
                    for b in body.iter_mut() {
                        b.push("DistBarrier".into());
                    }
                }
            }
        }
        for b in body.iter_mut() {
            if self.chance(80) {
                b.push("CudaSynchronize".into());
            }
        }
        let _ = deleted;
        let mut t = String::new();
        let _ = write!(
            t,
            "Program(ranks: {ranks}, torch: Torch(version: {version}, init: {init}, avoid_record_streams: {avoid}),\n  \
             streams: [Stream(\"side\", NonBlocking)], events: [\"ev\"],\n  \
             buffers: [Buffer(\"act\", \"{}\"), Buffer(\"grad\", \"{}\"), Pooled(\"t\", \"{}\"), Pooled(\"u\", \"{}\")],\n  threads: [",
            self.size(4),
            self.size(4),
            self.size(4),
            self.size(4)
        );
        for (r, b) in body.iter().enumerate() {
            let _ = write!(t, "\n    Thread(\"main\", ranks: [{r}], ops: [{}]),", b.join(", "));
        }
        t.push_str("\n  ])\n");
        t
    }

    fn text(&self) -> String {
        let mut t = String::new();
        let comms: Vec<String> = std::iter::once("Comm(\"world\")".to_string()).chain(self.comms.iter().cloned()).collect();
        let _ = write!(
            t,
            "Program(ranks: {}, streams: [Stream(\"a\", NonBlocking), Stream(\"b\", Blocking)], events: [\"e0\", \"e1\"],\n  \
             buffers: [Buffer(\"x\", \"{s}\"), Buffer(\"y\", \"{s}\"), Buffer(\"z\", \"{s}\"), Buffer(\"h\", \"{s}\", space: PinnedHost), \
             Buffer(\"k\", \"{s}\", space: PageableHost), Pooled(\"p\", \"{s}\"), Pooled(\"q\", \"{s}\")],\n  \
             comms: [{}],\n  threads: [",
            self.ranks,
            comms.join(", "),
            s = self.size(4),
        );
        for (r, threads) in self.ops.iter().enumerate() {
            for (i, ops) in threads.iter().enumerate() {
                let mut ops = ops.clone();
                if i == 0 && self.closing {
                    ops.push("CommFinalize(\"world\")".into());
                    ops.push("CommDestroy(\"world\")".into());
                }
                if ops.is_empty() {
                    continue;
                }
                let name = if i == 0 { "main".to_string() } else { format!("t{i}") };
                let _ = write!(t, "\n    Thread(\"{name}\", ranks: [{r}], ops: [{}]),", ops.join(", "));
            }
        }
        t.push_str("\n  ])\n");
        t
    }
}

/// The program text of `seed` ([`GEN_VERSION`]): built around [`family_of`]`(seed)`, with one to three ranks (two
/// ranks for the PyTorch dialect), one or two host threads per rank, 1 KiB or 16 MiB units (within and beyond
/// any eager window), and a few ops of other families mixed in.
pub fn program_text(seed: u64) -> String {
    let family = family_of(seed);
    let mut rng = Rng::new(seed ^ 0xd1ff_e4e7);
    let ranks = 1 + rng.below(3) as u32;
    let big = rng.below(3) == 0;
    let threads: Vec<usize> = (0..ranks).map(|_| 1 + rng.below(2) as usize).collect();
    let mut g = G {
        rng,
        ranks,
        ops: threads.iter().map(|n| vec![vec![]; *n]).collect(),
        comms: vec![],
        n: 0,
        unit: if big { "16 MiB" } else { "1 KiB" },
        unit_kib: if big { 16 << 10 } else { 1 },
        pooled: vec![false; ranks as usize],
        freed: vec![false; ranks as usize],
        closing: false,
    };
    let _ = g.unit;
    if family == Family::Torch {
        return g.torch();
    }
    let main = 1 + g.below(2);
    for _ in 0..main {
        match family {
            Family::P2p => g.p2p(false),
            Family::Groups => g.p2p(true),
            Family::Collectives => g.collectives(),
            Family::Communicators => g.communicators(),
            f => g.local(f),
        }
    }
    for _ in 0..g.below(3) {
        let other = Family::ALL[g.below(11) as usize];
        match other {
            Family::P2p | Family::Groups if g.chance(50) => g.p2p(other == Family::Groups),
            Family::Collectives if g.chance(50) => g.collectives(),
            f => g.local(f),
        }
    }
    // Make every rank's work finish observably: a device synchronize at the end of some main threads.
    for r in 0..ranks {
        if g.chance(60) {
            g.push(r, 0, "DeviceSync".into());
        }
        if g.ops[r as usize].iter().all(|t| t.is_empty()) {
            g.kernel(r, 0);
        }
    }
    g.text()
}

/// Budgets of one comparison.
#[derive(Clone, Debug)]
pub struct Budgets {
    /// Distinct states the reference may visit before the program is skipped (nothing compared).
    pub reference_states: usize,
    /// States the exhaustive search may visit (it must finish wherever the reference did).
    pub search_states: usize,
    /// States DPOR may visit along its executions (stateless: it revisits what the others merge); DPOR is compared
    /// only where it finishes within them.
    pub dpor_states: usize,
    /// Random walks per program, and as many PCT walks (depth 3).
    pub walks: u64,
}

impl Default for Budgets {
    fn default() -> Self {
        Budgets { reference_states: 10_000, search_states: 200_000, dpor_states: 20_000, walks: 16 }
    }
}

/// What comparing one (program, profile) pair showed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every engine agreed: the number of findings, and whether DPOR finished within its budget (and so was
    /// compared too).
    Agree { findings: usize, dpor: bool },
    /// The program does not load (a generator defect, counted).
    Rejected(String),
    /// The reference (or another engine) ran out of budget: nothing compared.
    TooBig,
    /// A disagreement, described.
    Disagree(String),
}

/// The findings of an exploration as (problem key, frequency), sorted.
fn findings(ex: &Exploration) -> BTreeSet<(ProblemKey, bool)> {
    ex.keys.iter().zip(&ex.findings).map(|(k, f)| (k.clone(), f.frequency == Frequency::Always)).collect()
}

fn describe(set: &BTreeSet<(ProblemKey, bool)>) -> String {
    set.iter().map(|(k, always)| format!("{k:?}{}", if *always { " always" } else { "" })).collect::<Vec<_>>().join("; ")
}

/// Compares the engines on one program under one profile (module docs): `check`'s search against the reference
/// (findings and frequencies), DPOR against the reference, and random and PCT walks (a subset of the reference's
/// keys).
pub fn compare(sem: &Semantics, budgets: &Budgets, seed: u64) -> Outcome {
    let Some(reference) = crate::reference::explore_reference(sem, budgets.reference_states) else {
        return Outcome::TooBig;
    };
    let want = findings(&reference);
    let limits = Limits { max_states: budgets.search_states, ..Limits::default() };
    let check = explore(sem, &limits);
    if check.limit_hit.is_some() {
        return Outcome::Disagree(format!("check stopped at a limit where the reference finished ({} states)", reference.states));
    }
    let got = findings(&check);
    if got != want {
        return Outcome::Disagree(format!(
            "check and the reference differ:\n    check only: {}\n    reference only: {}",
            describe(&got.difference(&want).cloned().collect()),
            describe(&want.difference(&got).cloned().collect())
        ));
    }
    let dpor = crate::dpor::explore_dpor(sem, &Limits { max_states: budgets.dpor_states, ..Limits::default() });
    let dpor_finished = dpor.exploration.limit_hit.is_none();
    if dpor_finished {
        let got = findings(&dpor.exploration);
        if got != want {
            return Outcome::Disagree(format!(
                "DPOR and the reference differ:\n    DPOR only: {}\n    reference only: {}",
                describe(&got.difference(&want).cloned().collect()),
                describe(&want.difference(&got).cloned().collect())
            ));
        }
    }
    let keys: BTreeSet<ProblemKey> = want.iter().map(|(k, _)| k.clone()).collect();
    let opt = SampleOptions { strategy: Strategy::Random, seed, executions: budgets.walks, max_steps: 100_000, ..SampleOptions::default() };
    let walks = sample(sem, &opt);
    let pct = sample(sem, &SampleOptions { strategy: Strategy::Pct { depth: 3 }, ..opt });
    let extra: Vec<&ProblemKey> =
        walks.exploration.keys.iter().chain(&pct.exploration.keys).filter(|k| !keys.contains(*k)).collect();
    if !extra.is_empty() {
        return Outcome::Disagree(format!("random or PCT walks found what the reference did not: {extra:?}"));
    }
    Outcome::Agree { findings: want.len(), dpor: dpor_finished }
}

/// The profiles every program is compared under: the built-in `portable` and `eager`.
pub fn profiles() -> Vec<Profile> {
    vec![Profile::portable(), Profile::eager()]
}

/// Loads the program of `seed` and compares the engines on it under every profile of [`profiles`].
pub fn compare_seed(seed: u64, budgets: &Budgets) -> Vec<(String, Outcome)> {
    let text = program_text(seed);
    let name = format!("diff-{seed}");
    let program = match cuorder_model::format::load(&name, &text) {
        Ok(p) => p,
        Err(d) => return vec![("load".into(), Outcome::Rejected(format!("{d:?}")))],
    };
    profiles()
        .into_iter()
        .map(|prof| {
            let sem = Semantics::new(&program, &prof);
            (prof.name.clone(), compare(&sem, budgets, seed))
        })
        .collect()
}

/// What a campaign over a range of seeds found, per family ([`campaign`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Programs generated.
    pub programs: u64,
    /// Programs that did not load (generator defects).
    pub rejected: u64,
    /// (program, profile) pairs beyond the reference's budget: not compared.
    pub too_big: u64,
    /// (program, profile) pairs compared.
    pub compared: u64,
    /// Compared pairs with at least one finding.
    pub with_findings: u64,
    /// Compared pairs on which DPOR finished within its budget, and so was compared too.
    pub dpor: u64,
    /// Pairs where the engines disagreed.
    pub disagreements: u64,
}

/// One disagreement or rejection of a campaign: the seed, the profile (or "load"), and what differed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Defect {
    /// The program's seed (`cuorder-differential --show SEED` prints it).
    pub seed: u64,
    /// Its family ([`family_of`]).
    pub family: Family,
    /// The profile it was compared under, or `load` for a program that did not load.
    pub profile: String,
    /// What differed (the findings only one side reported), or the load error.
    pub what: String,
}

/// The result of [`campaign`]: a tally per family (in [`Family::ALL`] order) and every defect, by seed.
#[derive(Clone, Debug, Default)]
pub struct Campaign {
    /// One tally per family, in [`Family::ALL`] order.
    pub families: Vec<(Family, Tally)>,
    /// Every disagreement and rejection, by seed.
    pub defects: Vec<Defect>,
}

/// Runs [`compare_seed`] on every seed of `seeds` with `jobs` worker threads (at least 1). The result depends only
/// on the seeds and budgets (no time limit is involved), not on `jobs`: results are gathered by seed. `done` is
/// called with the number of seeds finished so far, from the worker threads (a progress display).
pub fn campaign(seeds: std::ops::Range<u64>, jobs: usize, budgets: &Budgets, done: &(dyn Fn(u64) + Sync)) -> Campaign {
    use std::sync::atomic::{AtomicU64, Ordering};
    // Seeds are counted from 0 (not taken from `seeds.start` up): a range ending at u64::MAX must not wrap.
    let next = AtomicU64::new(0);
    let n = seeds.end.saturating_sub(seeds.start);
    let finished = AtomicU64::new(0);
    let results: std::sync::Mutex<Vec<(u64, Vec<(String, Outcome)>)>> = std::sync::Mutex::new(vec![]);
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let seed = seeds.start + i;
                let r = compare_seed(seed, budgets);
                results.lock().unwrap_or_else(|e| e.into_inner()).push((seed, r));
                done(finished.fetch_add(1, Ordering::Relaxed) + 1);
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.sort_by_key(|(seed, _)| *seed);
    let mut out = Campaign { families: Family::ALL.iter().map(|f| (*f, Tally::default())).collect(), defects: vec![] };
    for (seed, outcomes) in results {
        let family = family_of(seed);
        let tally = &mut out.families.iter_mut().find(|(f, _)| *f == family).expect("every family has a tally").1;
        tally.programs += 1;
        for (profile, o) in outcomes {
            match o {
                Outcome::Agree { findings, dpor } => {
                    tally.compared += 1;
                    tally.with_findings += u64::from(findings > 0);
                    tally.dpor += u64::from(dpor);
                }
                Outcome::TooBig => tally.too_big += 1,
                Outcome::Rejected(what) => {
                    tally.rejected += 1;
                    out.defects.push(Defect { seed, family, profile, what });
                }
                Outcome::Disagree(what) => {
                    tally.compared += 1;
                    tally.disagreements += 1;
                    out.defects.push(Defect { seed, family, profile, what });
                }
            }
        }
    }
    out
}

impl Campaign {
    /// The sum of every family's tally.
    pub fn total(&self) -> Tally {
        self.families.iter().fold(Tally::default(), |mut t, (_, f)| {
            t.programs += f.programs;
            t.rejected += f.rejected;
            t.too_big += f.too_big;
            t.compared += f.compared;
            t.with_findings += f.with_findings;
            t.dpor += f.dpor;
            t.disagreements += f.disagreements;
            t
        })
    }

    /// The table of counts per family and the defects, as text (the same bytes for the same seeds and budgets).
    pub fn render(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "{:<14} {:>9} {:>9} {:>9} {:>9} {:>14} {:>9} {:>14}",
            "family", "programs", "rejected", "too big", "compared", "with findings", "by DPOR", "disagreements"
        );
        let total = self.total();
        for (name, f) in self.families.iter().map(|(f, t)| (f.name(), t)).chain(std::iter::once(("total", &total))) {
            let _ = writeln!(
                t,
                "{:<14} {:>9} {:>9} {:>9} {:>9} {:>14} {:>9} {:>14}",
                name, f.programs, f.rejected, f.too_big, f.compared, f.with_findings, f.dpor, f.disagreements
            );
        }
        let _ = writeln!(
            t,
            "(programs: generated programs; the other columns count (program, profile) pairs, two per program)"
        );
        for d in &self.defects {
            let _ = writeln!(t, "\nseed {} ({}) under {}: {}", d.seed, d.family.name(), d.profile, d.what);
        }
        t
    }
}
