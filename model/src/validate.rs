//! One validation of a resolved [`Program`] for every way a program comes in (the surface format after lowering,
//! the resolved RON form that `cuorder gen` writes, programs built in code), and of an [`Observation`] against the
//! program it claims to observe: after either passes, the semantics and `conform` never index out of range.
//!
//! Errors list everything wrong at once, each with the rank, thread and op index (and the op's source line and
//! column when known).

use std::collections::BTreeSet;
use std::fmt;

use crate::format::{MAX_EXPANDED_OPS, MAX_RANKS, MAX_THREADS_PER_RANK};
use crate::observation::{Observation, OpId, Outcome, ThreadAt, Version};
use crate::program::{BufRange, BufRef, CommId, EventRef, MemSpace, OpKind, Origin, Program, Rank, RankId, StreamKind, StreamRef};

/// At most this many errors are collected by one validation (the rest are counted in
/// [`ValidationErrors::more`]), so that a huge bad input costs linear time and bounded memory.
pub const MAX_VALIDATION_ERRORS: usize = 1000;

/// One thing wrong with a program or an observation, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    /// The rank concerned, when the error is about one.
    pub rank: Option<RankId>,
    /// The host thread (index within its rank), when the error is about one.
    pub thread: Option<u32>,
    /// The op (index within its thread), when the error is about one.
    pub op: Option<u32>,
    /// Where the op was written, when known.
    pub origin: Origin,
    /// What is wrong, one sentence.
    pub message: String,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut place = Vec::new();
        if let Some(r) = self.rank {
            place.push(format!("rank {r}"));
        }
        if let Some(t) = self.thread {
            place.push(format!("thread {t}"));
        }
        if let Some(o) = self.op {
            place.push(format!("op {o}"));
        }
        if let (Some(l), Some(c)) = (self.origin.line, self.origin.column) {
            place.push(format!("line {l}, column {c}"));
        }
        if place.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", place.join(", "), self.message)
        }
    }
}

/// Every error one validation found (at most [`MAX_VALIDATION_ERRORS`]; `more` counts the others).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ValidationErrors {
    pub errors: Vec<Invalid>,
    /// Errors found beyond [`MAX_VALIDATION_ERRORS`], not listed.
    pub more: usize,
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        if self.more > 0 {
            write!(f, "\nand {}", crate::describe::count(self.more as u64, "more error"))?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationErrors {}

/// Collects errors under a cap.
#[derive(Default)]
struct Sink {
    out: ValidationErrors,
}

impl Sink {
    fn push(&mut self, e: Invalid) {
        if self.out.errors.len() < MAX_VALIDATION_ERRORS {
            self.out.errors.push(e);
        } else {
            self.out.more += 1;
        }
    }

    fn general(&mut self, message: String) {
        self.push(Invalid { rank: None, thread: None, op: None, origin: Origin::default(), message });
    }

    fn done(self) -> Result<(), ValidationErrors> {
        if self.out.errors.is_empty() {
            Ok(())
        } else {
            Err(self.out)
        }
    }
}

/// The op being checked, for messages.
struct At<'a> {
    rank: RankId,
    thread: u32,
    op: u32,
    origin: &'a Origin,
}

struct Checker<'p> {
    p: &'p Program,
    sink: Sink,
}

impl Checker<'_> {
    fn err(&mut self, at: &At, message: String) {
        self.sink.push(Invalid {
            rank: Some(at.rank),
            thread: Some(at.thread),
            op: Some(at.op),
            origin: at.origin.clone(),
            message,
        });
    }

    fn rank_ok(&mut self, at: &At, r: RankId, what: &str) -> bool {
        if (r as usize) < self.p.ranks.len() {
            return true;
        }
        self.err(at, format!("{what} names rank {r}, but the program has {} ranks", self.p.ranks.len()));
        false
    }

    /// Whether `index` names one of rank `rank`'s `kind`s (counted by `count`); reports it otherwise (`what`: the
    /// kind with its article, for the rank message).
    fn per_rank(&mut self, at: &At, rank: RankId, index: u32, (what, kind): (&str, &str), count: fn(&Rank) -> usize) -> bool {
        if !self.rank_ok(at, rank, what) {
            return false;
        }
        let n = count(&self.p.ranks[rank as usize]);
        if (index as usize) < n {
            return true;
        }
        self.err(at, format!("{kind} {index} of rank {rank} does not exist (rank {rank} has {n} {kind}s)"));
        false
    }

    fn stream(&mut self, at: &At, s: StreamRef) -> bool {
        self.per_rank(at, s.rank, s.index, ("a stream", "stream"), |r| r.streams.len())
    }

    fn event(&mut self, at: &At, e: EventRef) -> bool {
        self.per_rank(at, e.rank, e.index, ("an event", "event"), |r| r.events.len())
    }

    fn buf(&mut self, at: &At, b: BufRef) -> bool {
        self.per_rank(at, b.rank, b.index, ("a buffer", "buffer"), |r| r.buffers.len())
    }

    fn range(&mut self, at: &At, r: &BufRange) -> bool {
        if !self.buf(at, r.buf) {
            return false;
        }
        let bytes = self.p.buffer(r.buf).bytes;
        if r.offset.checked_add(r.len).is_some_and(|end| end <= bytes) {
            return true;
        }
        let name = &self.p.buffer(r.buf).name;
        self.err(at, format!("bytes {}+{} are outside buffer `{name}` of rank {} ({bytes} bytes)", r.offset, r.len, r.buf.rank));
        false
    }

    fn pooled(&mut self, at: &At, b: BufRef, stream: Option<StreamRef>, op: &str) {
        if !self.buf(at, b) {
            return;
        }
        if !self.p.buffer(b).pooled {
            self.err(at, format!("{op} of `{}`, which is not a pooled buffer", self.p.buffer(b).name));
        }
        if let Some(s) = stream {
            if self.stream(at, s) && s.rank != b.rank {
                self.err(at, format!("{op} of a buffer of rank {} on a stream of rank {}", b.rank, s.rank));
            }
        }
    }

    /// The communicator exists and the acting rank and `peers` are members; returns whether it exists.
    fn comm(&mut self, at: &At, c: CommId, acting: RankId, peers: &[(RankId, &str)]) -> bool {
        let Some(comm) = self.p.comms.get(c.0 as usize) else {
            self.err(at, format!("communicator {} does not exist (the program has {})", c.0, self.p.comms.len()));
            return false;
        };
        if comm.position(acting).is_none() {
            self.err(at, format!("rank {acting} is not a member of communicator `{}`", comm.name));
        }
        for &(r, what) in peers {
            if comm.position(r).is_none() {
                self.err(at, format!("{what} rank {r} is not a member of communicator `{}`", comm.name));
            }
        }
        true
    }

    fn program(&mut self) {
        let p = self.p;
        let ranks = p.ranks.len();
        if ranks == 0 || ranks > MAX_RANKS as usize {
            self.sink.general(format!("a program has 1 to {MAX_RANKS} ranks (MAX_RANKS), not {ranks}"));
            if ranks == 0 {
                return;
            }
        }
        let ops: usize = p.ranks.iter().flat_map(|r| &r.threads).map(|t| t.ops.len()).sum();
        if ops > MAX_EXPANDED_OPS {
            self.sink.general(format!("the program has {ops} operations; the limit is MAX_EXPANDED_OPS = {MAX_EXPANDED_OPS}"));
        }
        for (ri, rank) in p.ranks.iter().enumerate() {
            let at_rank = |message: String| Invalid { rank: Some(ri as u32), thread: None, op: None, origin: Origin::default(), message };
            if rank.threads.len() > MAX_THREADS_PER_RANK {
                self.sink.push(at_rank(format!(
                    "{} host threads; the limit is MAX_THREADS_PER_RANK = {MAX_THREADS_PER_RANK}",
                    rank.threads.len()
                )));
            }
            match rank.streams.first() {
                Some(s) if s.kind == StreamKind::LegacyDefault => {}
                _ => self.sink.push(at_rank("stream 0 must be the legacy default stream".to_string())),
            }
            if rank.streams.iter().skip(1).any(|s| s.kind == StreamKind::LegacyDefault) {
                self.sink.push(at_rank("only stream 0 may be the legacy default stream".to_string()));
            }
            if rank.streams.len() > u32::MAX as usize || rank.buffers.len() > u32::MAX as usize {
                self.sink.push(at_rank("too many streams or buffers".to_string()));
            }
            for b in &rank.buffers {
                if b.bytes == 0 {
                    self.sink.push(at_rank(format!("buffer `{}` has size 0", b.name)));
                }
                if b.pooled && b.space != MemSpace::Device {
                    self.sink.push(at_rank(format!("pooled buffer `{}` must be device memory", b.name)));
                }
            }
        }
        for c in &p.comms {
            if c.members.is_empty() {
                self.sink.general(format!("communicator `{}` has no members", c.name));
            }
            let mut seen = BTreeSet::new();
            for &m in &c.members {
                if m as usize >= ranks {
                    self.sink.general(format!("communicator `{}` lists rank {m}, which does not exist", c.name));
                } else if !seen.insert(m) {
                    self.sink.general(format!("communicator `{}` lists rank {m} twice", c.name));
                }
            }
        }
        for b in &p.barriers {
            if b.participants.is_empty() {
                self.sink.general(format!("barrier `{}` has no participants", b.name));
            }
            if b.participants.windows(2).any(|w| w[0] >= w[1]) {
                self.sink.general(format!("the participants of barrier `{}` are not sorted and unique", b.name));
            }
            for &(r, t) in &b.participants {
                if p.ranks.get(r as usize).is_none_or(|rk| t as usize >= rk.threads.len()) {
                    self.sink.general(format!("barrier `{}` names thread {t} of rank {r}, which does not exist", b.name));
                }
            }
        }
        for (ri, rank) in p.ranks.iter().enumerate() {
            for (ti, thread) in rank.threads.iter().enumerate() {
                self.thread(ri as RankId, ti as u32, thread);
            }
        }
    }

    fn thread(&mut self, rank: RankId, ti: u32, thread: &crate::program::Thread) {
        let p = self.p;
        let mut depth: u32 = 0;
        let mut inited: BTreeSet<CommId> = BTreeSet::new();
        let mut splits: std::collections::BTreeMap<CommId, u32> = Default::default();
        for (oi, op) in thread.ops.iter().enumerate() {
            let at = At { rank, thread: ti, op: oi as u32, origin: &op.origin };
            // An explicitly initialized communicator is usable only after this thread's CommInit (N8).
            let uses = match &op.kind {
                OpKind::Send { comm, .. } | OpKind::Recv { comm, .. } | OpKind::Collective { comm, .. } => Some(*comm),
                OpKind::CommSplit { parent, .. } => Some(*parent),
                // N12, N13: poll, finalize and destroy are calls on this thread's communicator; an abort may come
                // from any thread of the rank (a watchdog thread), so it needs no CommInit of its own.
                OpKind::CommPoll { comm } | OpKind::CommFinalize { comm } | OpKind::CommDestroy { comm } => Some(*comm),
                _ => None,
            };
            if let Some(c) = uses.and_then(|c| p.comms.get(c.0 as usize).map(|x| (c, x))) {
                if c.1.explicit_init && !inited.contains(&c.0) {
                    self.err(&at, format!("communicator `{}` is used before this thread's CommInit", c.1.name));
                }
            }
            match &op.kind {
                OpKind::Kernel { stream, reads, writes, .. } => {
                    self.stream(&at, *stream);
                    for r in reads.iter().chain(writes) {
                        self.range(&at, r);
                    }
                }
                OpKind::Memset { stream, dst } => {
                    if let Some(s) = stream {
                        self.stream(&at, *s);
                    }
                    self.range(&at, dst);
                }
                OpKind::Memcpy { stream, dst, src } => {
                    if let Some(s) = stream {
                        self.stream(&at, *s);
                    }
                    self.range(&at, dst);
                    self.range(&at, src);
                    if dst.len != src.len {
                        self.err(&at, format!("a copy of {} bytes into {} bytes", src.len, dst.len));
                    }
                }
                OpKind::EventRecord { event, stream } | OpKind::StreamWaitEvent { stream, event } => {
                    let ok = self.event(&at, *event) & self.stream(&at, *stream);
                    if ok && matches!(op.kind, OpKind::EventRecord { .. }) && event.rank != stream.rank {
                        self.err(&at, format!("an event of rank {} recorded on a stream of rank {} (S3)", event.rank, stream.rank));
                    }
                }
                OpKind::EventQuery { event } | OpKind::EventSynchronize { event } => {
                    self.event(&at, *event);
                }
                OpKind::StreamSynchronize { stream } | OpKind::StreamQuery { stream } => {
                    self.stream(&at, *stream);
                }
                OpKind::DeviceSynchronize { rank: r } => {
                    self.rank_ok(&at, *r, "a device synchronization");
                }
                OpKind::HostSleep { .. } | OpKind::GroupStart => {}
                OpKind::HostAccess { range, .. } => {
                    if self.range(&at, range) && p.buffer(range.buf).space == MemSpace::Device {
                        self.err(&at, format!("host access to device memory `{}`", p.buffer(range.buf).name));
                    }
                }
                OpKind::Barrier { barrier } => match p.barriers.get(*barrier as usize) {
                    None => self.err(&at, format!("barrier {barrier} does not exist (the program has {})", p.barriers.len())),
                    Some(b) => {
                        if b.participants.binary_search(&(rank, ti)).is_err() {
                            self.err(&at, format!("this thread is not a participant of barrier `{}`", b.name));
                        }
                    }
                },
                OpKind::CommPoll { comm } | OpKind::CommAbort { comm } | OpKind::CommFinalize { comm } | OpKind::CommDestroy { comm } => {
                    match p.comms.get(comm.0 as usize) {
                        None => self.err(&at, format!("communicator {} does not exist (the program has {})", comm.0, p.comms.len())),
                        Some(c) if c.position(rank).is_none() => {
                            self.err(&at, format!("rank {rank} is not a member of communicator `{}`", c.name))
                        }
                        Some(_) => {}
                    }
                }
                OpKind::CommInit { comm } => match p.comms.get(comm.0 as usize) {
                    None => self.err(&at, format!("communicator {} does not exist (the program has {})", comm.0, p.comms.len())),
                    Some(c) => {
                        if !c.explicit_init {
                            self.err(&at, format!("CommInit of `{}`, which exists before the program starts", c.name));
                        } else if c.position(rank).is_none() {
                            self.err(&at, format!("rank {rank} is not a member of communicator `{}`", c.name));
                        } else if !inited.insert(*comm) {
                            self.err(&at, format!("`{}` is initialized twice by this thread", c.name));
                        }
                    }
                },
                // N8: a split is a call over its parent (this rank a member, the parent usable here); the `seq`-th
                // split of the parent by this thread; the communicator joined is created by it, holds this rank and
                // only members of the parent.
                OpKind::CommSplit { parent, seq, comm } => match p.comms.get(parent.0 as usize) {
                    None => self.err(&at, format!("communicator {} does not exist (the program has {})", parent.0, p.comms.len())),
                    Some(pc) => {
                        let n = splits.entry(*parent).or_default();
                        if *seq != *n {
                            self.err(&at, format!("split #{seq} of `{}`, but this thread's split #{n} of it", pc.name));
                        }
                        *n += 1;
                        if !pc.members.contains(&rank) {
                            self.err(&at, format!("rank {rank} is not a member of communicator `{}`", pc.name));
                        }
                        match comm.map(|c| (c, p.comms.get(c.0 as usize))) {
                            None => {}
                            Some((c, None)) => {
                                self.err(&at, format!("communicator {} does not exist (the program has {})", c.0, p.comms.len()))
                            }
                            Some((c, Some(nc))) => {
                                if !nc.explicit_init {
                                    self.err(&at, format!("CommSplit into `{}`, which exists before the program starts", nc.name));
                                } else if !nc.members.contains(&rank) {
                                    self.err(&at, format!("rank {rank} is not a member of communicator `{}`", nc.name));
                                } else if let Some(m) = nc.members.iter().find(|m| !pc.members.contains(m)) {
                                    self.err(&at, format!("`{}` has rank {m}, which is not a member of its parent `{}`", nc.name, pc.name));
                                } else if !inited.insert(c) {
                                    self.err(&at, format!("`{}` is created twice by this thread", nc.name));
                                }
                            }
                        }
                    }
                },
                OpKind::Send { comm, peer, buf, stream } | OpKind::Recv { comm, peer, buf, stream } => {
                    if self.stream(&at, *stream) {
                        self.comm(&at, *comm, stream.rank, &[(*peer, "peer")]);
                        if *peer == stream.rank {
                            self.err(&at, format!("the peer is the acting rank itself (rank {peer})"));
                        }
                    }
                    self.range(&at, buf);
                }
                OpKind::GroupEnd => {
                    if depth == 0 {
                        self.err(&at, "GroupEnd without a matching GroupStart".to_string());
                    }
                }
                OpKind::Collective { comm, kind, send, recv, stream } => {
                    let ok = self.stream(&at, *stream);
                    if ok && self.comm(&at, *comm, stream.rank, &kind.root().map(|r| (r, "root")).into_iter().collect::<Vec<_>>()) {
                        let members = p.comms[comm.0 as usize].members.len() as u64;
                        let (fits, rule) = kind.sizes_fit(send.len, recv.len, members);
                        if !fits {
                            self.err(&at, format!("{} sizes do not fit ({rule}): send {} bytes, recv {} bytes", kind.name(), send.len, recv.len));
                        }
                    }
                    self.range(&at, send);
                    self.range(&at, recv);
                }
                OpKind::Alloc { buf, stream } | OpKind::RecordStream { buf, stream } => {
                    let what = if matches!(op.kind, OpKind::Alloc { .. }) { "Alloc" } else { "RecordStream" };
                    self.pooled(&at, *buf, Some(*stream), what);
                }
                OpKind::Free { buf } => self.pooled(&at, *buf, None, "Free"),
                OpKind::CudaFree { buf } => {
                    if self.buf(&at, *buf) {
                        let b = p.buffer(*buf);
                        if b.pooled {
                            self.err(&at, format!("cudaFree of `{}`, a pooled buffer: release it with Free (P4)", b.name));
                        } else if b.space != MemSpace::Device {
                            self.err(&at, format!("cudaFree of `{}`, which is not device memory", b.name));
                        }
                    }
                }
                OpKind::CudaMalloc { rank: r, .. }
                | OpKind::CudaMallocHost { rank: r, .. }
                | OpKind::LoadModule { rank: r, .. }
                | OpKind::EmptyCache { rank: r } => {
                    self.rank_ok(&at, *r, "an allocation or module load");
                }
                OpKind::HostFunc { stream, reads, writes, .. } => {
                    self.stream(&at, *stream);
                    for r in reads.iter().chain(writes) {
                        if self.range(&at, r) && p.buffer(r.buf).space == MemSpace::Device {
                            self.err(&at, format!("a host function accesses device memory `{}` (S8: it runs on the host)", p.buffer(r.buf).name));
                        }
                    }
                }
                OpKind::Expect { range, stream, writer, sent_from } => {
                    match stream {
                        Some(s) => {
                            self.stream(&at, *s);
                        }
                        None => {
                            if self.range(&at, range) && p.buffer(range.buf).space == MemSpace::Device {
                                self.err(&at, "an Expect without a stream reads on the host: it needs host memory".to_string());
                            }
                        }
                    }
                    if stream.is_some() {
                        self.range(&at, range);
                    }
                    let overlaps = |w: &BufRange| {
                        w.buf == range.buf && w.offset < range.offset + range.len && range.offset < w.offset + w.len
                    };
                    match thread.ops.get(*writer as usize) {
                        Some(w) if *writer < oi as u32 && w.kind.written_ranges().iter().any(overlaps) => {}
                        _ => self.err(&at, format!("the writer #{writer} of an Expect is not an earlier op of this thread that writes its range (V1)")),
                    }
                    if let Some(from) = sent_from {
                        match thread.ops.get(*writer as usize).map(|w| &w.kind) {
                            Some(OpKind::Recv { peer, .. }) => {
                                if self.range(&at, from) {
                                    let b = p.buffer(from.buf);
                                    if b.space == MemSpace::PageableHost {
                                        self.err(&at, format!("an Expect names `{}`, pageable host memory, as what a send read: NCCL cannot send it", b.name));
                                    } else if b.space == MemSpace::Device && from.buf.rank != *peer {
                                        self.err(&at, format!("an Expect names `{}` of rank {} as what a send read, but its recv receives from rank {peer} (N3)", b.name, from.buf.rank));
                                    }
                                }
                            }
                            _ => self.err(&at, format!("an Expect that names a sending buffer needs a Recv as its writer, and #{writer} is not one (V1, N3)")),
                        }
                    }
                }
            }
            match op.kind {
                OpKind::GroupStart => depth += 1,
                OpKind::GroupEnd => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        if depth > 0 {
            self.sink.push(Invalid {
                rank: Some(rank),
                thread: Some(ti),
                op: None,
                origin: Origin::default(),
                message: format!("thread `{}` ends with {depth} group(s) open", thread.name),
            });
        }
    }
}

impl Program {
    /// Checks every index and limit the semantics relies on: rank, thread and op counts (`MAX_RANKS`,
    /// `MAX_THREADS_PER_RANK`, `MAX_EXPANDED_OPS`), every stream, event, buffer, communicator and barrier an op
    /// names, byte ranges inside their buffers, communicator membership, balanced groups and pooled-buffer ops.
    ///
    /// Errors: everything wrong (up to [`MAX_VALIDATION_ERRORS`]), each with rank, thread and op index.
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        let mut c = Checker { p: self, sink: Sink::default() };
        c.program();
        c.sink.done()
    }
}

/// Checks that an observation can be compared with `program`: the same program name, and every rank, thread and
/// op number it contains (versions, reads, ops, thread positions, the failing rank) names something of the program.
/// `program` must be valid ([`Program::validate`]).
///
/// Errors: everything wrong (up to [`MAX_VALIDATION_ERRORS`]), each with the rank, thread and op it names.
pub fn validate_observation(program: &Program, obs: &Observation) -> Result<(), ValidationErrors> {
    let mut sink = Sink::default();
    if obs.program != program.name {
        sink.general(format!("the observation is of program `{}`, not `{}`", obs.program, program.name));
    }
    let ops_of = |r: u32, t: u32| program.ranks.get(r as usize).and_then(|rk| rk.threads.get(t as usize)).map(|th| th.ops.len());
    let op_ok = |sink: &mut Sink, id: OpId, what: &str| {
        let bad = match ops_of(id.rank, id.thread) {
            None => Some(format!("{what} names thread {} of rank {}, which does not exist", id.thread, id.rank)),
            Some(n) if id.index as usize >= n => Some(format!("{what} names op {} of a thread with {n} ops", id.index)),
            Some(_) => None,
        };
        if let Some(message) = bad {
            sink.push(Invalid { rank: Some(id.rank), thread: Some(id.thread), op: Some(id.index), origin: Origin::default(), message });
        }
    };
    for (v, id) in &obs.versions {
        op_ok(&mut sink, *id, &format!("version {v}"));
    }
    for r in &obs.reads {
        op_ok(&mut sink, r.op, "a read");
        let b = r.range.buf;
        let buf = program.ranks.get(b.rank as usize).and_then(|rk| rk.buffers.get(b.index as usize));
        match buf {
            None => sink.push(Invalid {
                rank: Some(r.op.rank),
                thread: Some(r.op.thread),
                op: Some(r.op.index),
                origin: Origin::default(),
                message: format!("a read names buffer {} of rank {}, which does not exist", b.index, b.rank),
            }),
            Some(buf) if r.range.offset.checked_add(r.range.len).is_none_or(|e| e > buf.bytes) => sink.push(Invalid {
                rank: Some(r.op.rank),
                thread: Some(r.op.thread),
                op: Some(r.op.index),
                origin: Origin::default(),
                message: format!("a read of bytes {}+{} outside buffer `{}` ({} bytes)", r.range.offset, r.range.len, buf.name, buf.bytes),
            }),
            Some(_) => {}
        }
        if let crate::observation::Seen::Uniform(v) = r.seen {
            if let Version::Op(id) = v {
                op_ok(&mut sink, id, "a version seen");
            }
        }
        if let crate::observation::Seen::Mixed { first, last, min, max } = r.seen {
            for v in [first, last, min, max] {
                if let Version::Op(id) = v {
                    op_ok(&mut sink, id, "a version seen");
                }
            }
        }
    }
    for o in &obs.ops {
        op_ok(&mut sink, o.op, "an op observation");
    }
    match &obs.outcome {
        Outcome::Completed => {}
        Outcome::Failed { rank, .. } => {
            if let Some(r) = rank {
                if *r as usize >= program.ranks.len() {
                    sink.general(format!("the failing rank {r} does not exist (the program has {} ranks)", program.ranks.len()));
                }
            }
        }
        Outcome::Hung { never_finished, threads } => {
            for id in never_finished {
                op_ok(&mut sink, *id, "an unfinished op");
            }
            for t in threads {
                let at = |message: String| Invalid { rank: Some(t.rank), thread: Some(t.thread), op: None, origin: Origin::default(), message };
                match ops_of(t.rank, t.thread) {
                    None => sink.push(at(format!("a thread position names thread {} of rank {}, which does not exist", t.thread, t.rank))),
                    Some(n) => {
                        let i = match t.at {
                            ThreadAt::InOp(i) => i as usize + 1,
                            ThreadAt::Before(i) => i as usize,
                            ThreadAt::Finished | ThreadAt::NotStarted => 0,
                        };
                        if i > n {
                            sink.push(at(format!("a thread position {:?} past the thread's {n} ops", t.at)));
                        }
                    }
                }
            }
        }
    }
    sink.done()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::*;

    fn one_thread(ops: Vec<OpKind>) -> Program {
        Program {
            name: "p".into(),
            ranks: vec![Rank {
                streams: vec![Stream { name: "sL".into(), kind: StreamKind::LegacyDefault }],
                events: vec![],
                buffers: vec![Buffer { name: "x".into(), bytes: 16, space: MemSpace::Device, pooled: false }],
                threads: vec![Thread { name: "main".into(), ops: ops.into_iter().map(|kind| Op { kind, origin: Origin::default() }).collect() }],
            }],
            comms: vec![],
            barriers: vec![],
            uses_torch: false,
        }
    }

    #[test]
    fn out_of_range_indices_are_all_reported_with_their_op() {
        let s9 = StreamRef { rank: 0, index: 9 };
        let p = one_thread(vec![
            OpKind::StreamSynchronize { stream: s9 },
            OpKind::Barrier { barrier: 3 },
            OpKind::CommInit { comm: CommId(2) },
            OpKind::Free { buf: BufRef { rank: 5, index: 0 } },
            OpKind::GroupEnd,
        ]);
        let e = p.validate().unwrap_err();
        let text = e.to_string();
        assert_eq!(e.errors.len(), 5, "{text}");
        assert!(text.contains("rank 0, thread 0, op 0: stream 9 of rank 0 does not exist"), "{text}");
        assert!(text.contains("op 1: barrier 3 does not exist"), "{text}");
        assert!(text.contains("op 2: communicator 2 does not exist"), "{text}");
        assert!(text.contains("op 3: a buffer names rank 5"), "{text}");
        assert!(text.contains("op 4: GroupEnd without"), "{text}");
    }

    #[test]
    fn a_valid_program_passes() {
        let p = one_thread(vec![OpKind::Memset { stream: None, dst: BufRange { buf: BufRef { rank: 0, index: 0 }, offset: 0, len: 16 } }]);
        p.validate().unwrap();
    }

    #[test]
    fn error_count_is_capped() {
        let s9 = StreamRef { rank: 0, index: 9 };
        let p = one_thread(vec![OpKind::StreamSynchronize { stream: s9 }; MAX_VALIDATION_ERRORS + 7]);
        let e = p.validate().unwrap_err();
        assert_eq!((e.errors.len(), e.more), (MAX_VALIDATION_ERRORS, 7));
        assert!(e.to_string().ends_with("and 7 more errors"));
    }
}
