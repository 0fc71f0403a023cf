//! One exhaustive table of what every operation touches: its acting device, the stream it enqueues on, the memory
//! it reads and writes, its communicator and NCCL role, whether its outcome observes how far a device has got, and
//! the resources its host step reads and writes (for partial-order reduction). Every `match` here lists every
//! `OpKind` without a `_ =>` arm, so adding an operation fails to compile until this table answers for it.

use smallvec::SmallVec;

use crate::program::*;

/// An op's footprint while [`OpKind::info`] builds it.
type Fp = SmallVec<[(Resource, Use); 8]>;

/// A memory access an op makes (by its item, or by the host for host accesses): `range` in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemAccess {
    pub range: BufRange,
    pub write: bool,
}

/// The NCCL role of an op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NcclRole {
    /// `ncclSend` (N2, N3).
    Send { peer: RankId },
    /// `ncclRecv` (N2, N3).
    Recv { peer: RankId },
    /// A collective (C1).
    Collective { kind: CollectiveKind },
    /// `ncclCommInitRank` (N8).
    Init,
}

/// A piece of model state that a host step reads or writes; two steps of different threads are dependent when one
/// writes a resource the other reads or writes (`semantics/reduction.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resource {
    /// The tail of a stream's queue (what an enqueue appends to; what a record, synchronize or S2 dependency
    /// captures).
    Stream(StreamRef),
    /// Which record an event names (S3).
    Event(EventRef),
    /// A communicator's matching tables, serialization chain and connections (N3, N5, N7), on every member.
    Comm(CommId),
    /// Which thread issued NCCL work on a device last (N11).
    NcclIssuer(RankId),
    /// Whether a pooled buffer is allocated and which block it holds (P4).
    Alloc(BufRef),
    /// The caching allocator's free blocks of a device (P4).
    Pool(RankId),
    /// Which modules a device has loaded (S7: only the first lazy load of a module synchronizes).
    Module(RankId),
}

/// How a host step uses a resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Use {
    Read,
    Write,
}

/// What an op touches, from [`OpKind::info`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpInfo {
    /// The device the op acts on: its stream's rank for stream-ordered and NCCL ops (docs/program-format.md,
    /// "acting rank"), the event's or stream's rank for queries and synchronizes; `None` for pure host ops.
    pub acting_rank: Option<RankId>,
    /// The stream the op enqueues an item on, if any (synchronous copies and memsets: the legacy default stream of
    /// the device they act on; S5).
    pub stream: Option<StreamRef>,
    /// The memory its item (or, for host accesses, the host) reads and writes.
    pub accesses: Box<[MemAccess]>,
    /// The communicator of an NCCL op.
    pub comm: Option<CommId>,
    pub nccl: Option<NcclRole>,
    /// The device whose progress the op's *outcome* depends on (a query's answer, S4; the blocks an allocation may
    /// reuse, P4): such a step does not commute with that device's item steps.
    pub observes: Option<RankId>,
    /// What the op's host step reads and writes (partial-order reduction). For an NCCL op inside a group the use
    /// happens at the outermost group end.
    pub footprint: Box<[(Resource, Use)]>,
    /// Every rank whose streams, events or buffers the op names.
    pub ranks: Box<[RankId]>,
}

fn reads_writes(reads: &[BufRange], writes: &[BufRange]) -> Vec<MemAccess> {
    reads
        .iter()
        .map(|r| MemAccess { range: *r, write: false })
        .chain(writes.iter().map(|r| MemAccess { range: *r, write: true }))
        .collect()
}

/// The legacy default stream of a device (index 0; S2).
pub fn legacy(rank: RankId) -> StreamRef {
    StreamRef { rank, index: 0 }
}

impl OpKind {
    /// The op's name in the surface format ("Kernel", "HostRead", "Collective", ...).
    pub fn name(&self) -> &'static str {
        match self {
            OpKind::Kernel { .. } => "Kernel",
            OpKind::Memset { .. } => "Memset",
            OpKind::Memcpy { .. } => "Memcpy",
            OpKind::EventRecord { .. } => "EventRecord",
            OpKind::StreamWaitEvent { .. } => "StreamWaitEvent",
            OpKind::EventQuery { .. } => "EventQuery",
            OpKind::EventSynchronize { .. } => "EventSynchronize",
            OpKind::StreamSynchronize { .. } => "StreamSynchronize",
            OpKind::StreamQuery { .. } => "StreamQuery",
            OpKind::DeviceSynchronize { .. } => "DeviceSynchronize",
            OpKind::HostSleep { .. } => "HostSleep",
            OpKind::HostAccess { write: false, .. } => "HostRead",
            OpKind::HostAccess { write: true, .. } => "HostWrite",
            OpKind::Barrier { .. } => "Barrier",
            OpKind::CommInit { .. } => "CommInit",
            OpKind::CommSplit { .. } => "CommSplit",
            OpKind::CommPoll { .. } => "Poll",
            OpKind::CommAbort { .. } => "CommAbort",
            OpKind::CommFinalize { .. } => "CommFinalize",
            OpKind::CommDestroy { .. } => "CommDestroy",
            OpKind::Send { .. } => "Send",
            OpKind::Recv { .. } => "Recv",
            OpKind::GroupStart => "GroupStart",
            OpKind::GroupEnd => "GroupEnd",
            OpKind::Collective { .. } => "Collective",
            OpKind::Alloc { .. } => "Alloc",
            OpKind::Free { .. } => "Free",
            OpKind::RecordStream { .. } => "RecordStream",
            OpKind::Expect { .. } => "Expect",
            OpKind::CudaFree { .. } => "CudaFree",
            OpKind::CudaMalloc { .. } => "Malloc",
            OpKind::CudaMallocHost { .. } => "MallocHost",
            OpKind::LoadModule { .. } => "LoadModule",
            OpKind::EmptyCache { .. } => "EmptyCache",
            OpKind::HostFunc { .. } => "HostFunc",
        }
    }

    /// What this op touches, when called by a thread of `caller` in `program` (a validated program).
    pub fn info(&self, program: &Program, caller: RankId) -> OpInfo {
        // Built on the stack and boxed once at their final length: this runs for every op of every rank at load
        // (a 1,024-rank pipeline has 1.5 M), and growing heap vectors was a quarter of what it cost (issue 9).
        let mut fp: Fp = SmallVec::new();
        let pooled_uses = |ranges: &mut dyn Iterator<Item = &BufRange>, fp: &mut Fp| {
            for r in ranges {
                if program.buffer(r.buf).pooled {
                    fp.push((Resource::Alloc(r.buf), Use::Read));
                }
            }
        };
        // S2: an enqueue appends to its stream and captures the tails of the streams it implicitly waits for.
        let enqueue = |s: StreamRef, fp: &mut Fp| {
            fp.push((Resource::Stream(s), Use::Write));
            match program.stream(s).kind {
                StreamKind::LegacyDefault => {
                    for (i, o) in program.ranks[s.rank as usize].streams.iter().enumerate() {
                        if matches!(o.kind, StreamKind::Blocking | StreamKind::PerThreadDefault) {
                            fp.push((Resource::Stream(StreamRef { rank: s.rank, index: i as u32 }), Use::Read));
                        }
                    }
                }
                StreamKind::Blocking | StreamKind::PerThreadDefault => fp.push((Resource::Stream(legacy(s.rank)), Use::Read)),
                StreamKind::NonBlocking => {}
            }
        };
        let nccl = |comm: CommId, stream: StreamRef, ranges: &[BufRange], fp: &mut Fp| {
            fp.push((Resource::Comm(comm), Use::Write));
            fp.push((Resource::NcclIssuer(stream.rank), Use::Write));
            fp.push((Resource::Stream(stream), Use::Write));
            for r in ranges {
                if program.buffer(r.buf).pooled {
                    fp.push((Resource::Alloc(r.buf), Use::Read));
                }
            }
        };
        let device_of = |ranges: &[&BufRange]| {
            ranges.iter().find(|r| program.buffer(r.buf).space == MemSpace::Device).map(|r| r.buf.rank).unwrap_or(caller)
        };
        let implicit_sync = |fp: &mut Fp, ranks: &mut SmallVec<[RankId; 8]>| {
            for (r, rank) in program.ranks.iter().enumerate() {
                for i in 0..rank.streams.len() as u32 {
                    fp.push((Resource::Stream(StreamRef { rank: r as RankId, index: i }), Use::Read));
                }
                ranks.push(r as RankId);
            }
        };
        let mut ranks: SmallVec<[RankId; 8]> = SmallVec::new();
        let info = match self {
            OpKind::Kernel { stream, reads, writes, .. } => {
                enqueue(*stream, &mut fp);
                pooled_uses(&mut reads.iter().chain(writes), &mut fp);
                ranks.extend(reads.iter().chain(writes).map(|r| r.buf.rank));
                OpInfo::base(Some(stream.rank), Some(*stream), reads_writes(reads, writes))
            }
            OpKind::Memset { stream, dst } => {
                let s = stream.unwrap_or(legacy(dst.buf.rank));
                enqueue(s, &mut fp);
                pooled_uses(&mut [*dst].iter(), &mut fp);
                ranks.push(dst.buf.rank);
                OpInfo::base(Some(s.rank), Some(s), vec![MemAccess { range: *dst, write: true }])
            }
            OpKind::Memcpy { stream, dst, src } => {
                let s = stream.unwrap_or(legacy(device_of(&[dst, src])));
                enqueue(s, &mut fp);
                pooled_uses(&mut [*dst, *src].iter(), &mut fp);
                ranks.extend([dst.buf.rank, src.buf.rank]);
                let acc = vec![MemAccess { range: *src, write: false }, MemAccess { range: *dst, write: true }];
                OpInfo::base(Some(s.rank), Some(s), acc)
            }
            OpKind::EventRecord { event, stream } => {
                enqueue(*stream, &mut fp);
                fp.push((Resource::Event(*event), Use::Write));
                ranks.push(event.rank);
                OpInfo::base(Some(stream.rank), Some(*stream), vec![])
            }
            OpKind::StreamWaitEvent { stream, event } => {
                enqueue(*stream, &mut fp);
                fp.push((Resource::Event(*event), Use::Read));
                ranks.push(event.rank);
                OpInfo::base(Some(stream.rank), Some(*stream), vec![])
            }
            OpKind::EventQuery { event } => {
                fp.push((Resource::Event(*event), Use::Read));
                OpInfo { observes: Some(event.rank), ..OpInfo::base(Some(event.rank), None, vec![]) }
            }
            OpKind::EventSynchronize { event } => {
                fp.push((Resource::Event(*event), Use::Read));
                OpInfo::base(Some(event.rank), None, vec![])
            }
            OpKind::StreamSynchronize { stream } => {
                fp.push((Resource::Stream(*stream), Use::Read));
                OpInfo::base(Some(stream.rank), None, vec![])
            }
            OpKind::StreamQuery { stream } => {
                fp.push((Resource::Stream(*stream), Use::Read));
                OpInfo { observes: Some(stream.rank), ..OpInfo::base(Some(stream.rank), None, vec![]) }
            }
            OpKind::DeviceSynchronize { rank } => {
                for i in 0..program.ranks[*rank as usize].streams.len() as u32 {
                    fp.push((Resource::Stream(StreamRef { rank: *rank, index: i }), Use::Read));
                }
                OpInfo::base(Some(*rank), None, vec![])
            }
            OpKind::HostSleep { .. } => OpInfo::base(None, None, vec![]),
            OpKind::HostAccess { range, write } => {
                pooled_uses(&mut [*range].iter(), &mut fp);
                ranks.push(range.buf.rank);
                OpInfo::base(None, None, vec![MemAccess { range: *range, write: *write }])
            }
            // Arrivals at a barrier or at a communicator's init only add to monotone sets: they commute.
            OpKind::Barrier { .. } => OpInfo::base(None, None, vec![]),
            OpKind::CommInit { comm } => OpInfo {
                comm: Some(*comm),
                nccl: Some(NcclRole::Init),
                ..OpInfo::base(Some(caller), None, vec![])
            },
            // N8: a split is an arrival at a rendezvous of the parent's members, like an init; its communicator is
            // the parent (what the call synchronizes over).
            OpKind::CommSplit { parent, .. } => OpInfo {
                comm: Some(*parent),
                nccl: Some(NcclRole::Init),
                ..OpInfo::base(Some(caller), None, vec![])
            },
            // N12: a poll returns once its call in progress has finished in the background; its return enqueues the
            // deferred work (judged by that work's footprint in `reduction.rs`). It writes the communicator's state
            // (what is in progress), which an abort from another thread also writes.
            OpKind::CommPoll { comm } => {
                fp.push((Resource::Comm(*comm), Use::Write));
                OpInfo { comm: Some(*comm), nccl: Some(NcclRole::Init), ..OpInfo::base(Some(caller), None, vec![]) }
            }
            // N13: an abort ends the rank's unfinished launches on the communicator, so what it does depends on how
            // far the device has got: it observes the device.
            OpKind::CommAbort { comm } => {
                fp.push((Resource::Comm(*comm), Use::Write));
                fp.push((Resource::NcclIssuer(caller), Use::Write));
                OpInfo {
                    comm: Some(*comm),
                    nccl: Some(NcclRole::Init),
                    observes: Some(caller),
                    ..OpInfo::base(Some(caller), None, vec![])
                }
            }
            // N13: finalize and destroy are arrivals at a rendezvous of the members (like an init), and end the
            // communicator on this rank.
            OpKind::CommFinalize { comm } | OpKind::CommDestroy { comm } => {
                fp.push((Resource::Comm(*comm), Use::Write));
                OpInfo { comm: Some(*comm), nccl: Some(NcclRole::Init), ..OpInfo::base(Some(caller), None, vec![]) }
            }
            OpKind::Send { comm, peer, buf, stream } => {
                nccl(*comm, *stream, &[*buf], &mut fp);
                ranks.push(buf.buf.rank);
                OpInfo {
                    comm: Some(*comm),
                    nccl: Some(NcclRole::Send { peer: *peer }),
                    ..OpInfo::base(Some(stream.rank), Some(*stream), vec![MemAccess { range: *buf, write: false }])
                }
            }
            OpKind::Recv { comm, peer, buf, stream } => {
                nccl(*comm, *stream, &[*buf], &mut fp);
                ranks.push(buf.buf.rank);
                OpInfo {
                    comm: Some(*comm),
                    nccl: Some(NcclRole::Recv { peer: *peer }),
                    ..OpInfo::base(Some(stream.rank), Some(*stream), vec![MemAccess { range: *buf, write: true }])
                }
            }
            OpKind::GroupStart => OpInfo::base(None, None, vec![]),
            OpKind::GroupEnd => OpInfo::base(None, None, vec![]),
            OpKind::Collective { comm, kind, send, recv, stream } => {
                nccl(*comm, *stream, &[*send, *recv], &mut fp);
                ranks.extend([send.buf.rank, recv.buf.rank]);
                // C1: a broadcast's or scatter's send buffer is read by the root only, a reduce's or gather's recv
                // buffer written by the root only.
                let mut acc = vec![];
                if kind.reads_send(stream.rank) {
                    acc.push(MemAccess { range: *send, write: false });
                }
                if kind.writes_recv(stream.rank) {
                    acc.push(MemAccess { range: *recv, write: true });
                }
                OpInfo {
                    comm: Some(*comm),
                    nccl: Some(NcclRole::Collective { kind: *kind }),
                    ..OpInfo::base(Some(stream.rank), Some(*stream), acc)
                }
            }
            OpKind::Alloc { buf, stream } => {
                fp.push((Resource::Alloc(*buf), Use::Write));
                fp.push((Resource::Pool(buf.rank), Use::Write));
                ranks.push(buf.rank);
                OpInfo { observes: Some(buf.rank), ..OpInfo::base(Some(stream.rank), None, vec![]) }
            }
            OpKind::Free { buf } => {
                fp.push((Resource::Alloc(*buf), Use::Write));
                fp.push((Resource::Pool(buf.rank), Use::Write));
                // The recorded streams' tails are captured at free time.
                for i in 0..program.ranks[buf.rank as usize].streams.len() as u32 {
                    fp.push((Resource::Stream(StreamRef { rank: buf.rank, index: i }), Use::Read));
                }
                OpInfo::base(Some(buf.rank), None, vec![])
            }
            OpKind::RecordStream { buf, stream } => {
                fp.push((Resource::Alloc(*buf), Use::Write));
                ranks.push(buf.rank);
                OpInfo::base(Some(stream.rank), None, vec![])
            }
            // V1: a read like a kernel's (on a stream) or a host read (without one). Whether it sees its writer's
            // value depends only on happens-before, never on how far a device has got: it observes nothing.
            OpKind::Expect { range, stream, .. } => {
                pooled_uses(&mut [*range].iter(), &mut fp);
                ranks.push(range.buf.rank);
                let read = vec![MemAccess { range: *range, write: false }];
                match stream {
                    Some(s) => {
                        enqueue(*s, &mut fp);
                        OpInfo::base(Some(s.rank), Some(*s), read)
                    }
                    None => OpInfo::base(None, None, read),
                }
            }
            // S7: an implicit synchronization waits for the tails of the streams of the device, or of every device
            // (`SyncScope::AllDevices`): the op names every rank, so that the ranks a wait can depend on are its
            // neighbours (incremental.rs), whatever the profile.
            OpKind::CudaFree { buf } => {
                implicit_sync(&mut fp, &mut ranks);
                fp.push((Resource::Alloc(*buf), Use::Write));
                ranks.push(buf.rank);
                // Whether work issued before still uses the buffer when it is released depends on how far the
                // device has got (a use after free).
                OpInfo { observes: Some(buf.rank), ..OpInfo::base(Some(buf.rank), None, vec![]) }
            }
            OpKind::CudaMalloc { rank, .. } | OpKind::CudaMallocHost { rank, .. } | OpKind::LoadModule { rank, .. } => {
                implicit_sync(&mut fp, &mut ranks);
                if let OpKind::LoadModule { .. } = self {
                    fp.push((Resource::Module(*rank), Use::Write));
                }
                OpInfo::base(Some(*rank), None, vec![])
            }
            OpKind::EmptyCache { rank } => {
                implicit_sync(&mut fp, &mut ranks);
                fp.push((Resource::Pool(*rank), Use::Write));
                OpInfo::base(Some(*rank), None, vec![])
            }
            // S8: a host function is an item on its stream like a kernel; its accesses are host-memory accesses made
            // by the driver's thread when the item runs.
            OpKind::HostFunc { stream, reads, writes, .. } => {
                enqueue(*stream, &mut fp);
                pooled_uses(&mut reads.iter().chain(writes), &mut fp);
                ranks.extend(reads.iter().chain(writes).map(|r| r.buf.rank));
                OpInfo::base(Some(stream.rank), Some(*stream), reads_writes(reads, writes))
            }
        };
        ranks.extend(info.acting_rank);
        ranks.extend(info.stream.map(|s| s.rank));
        ranks.sort_unstable();
        ranks.dedup();
        fp.sort_unstable();
        fp.dedup();
        OpInfo { footprint: Box::from(&fp[..]), ranks: Box::from(&ranks[..]), ..info }
    }
}

impl OpKind {
    /// What an executor runs for this op: an `Expect` without its assertion is a read (V1), a zero-length kernel that
    /// reads its range on its stream or a host read; every other op is itself. The hardware executor runs this and
    /// records what the read saw, which `conform` then checks like any other read.
    pub fn without_assertion(&self) -> std::borrow::Cow<'_, OpKind> {
        match self {
            OpKind::Expect { range, stream: Some(stream), .. } => std::borrow::Cow::Owned(OpKind::Kernel {
                stream: *stream,
                name: "expect".to_string(),
                reads: vec![*range],
                writes: vec![],
                duration_ns: 0,
            }),
            OpKind::Expect { range, stream: None, .. } => std::borrow::Cow::Owned(OpKind::HostAccess { range: *range, write: false }),
            other => std::borrow::Cow::Borrowed(other),
        }
    }

    /// The byte ranges the op writes (its item's writes, or the host's), as in [`OpKind::info`]'s accesses; what a
    /// value assertion's writer must overlap (V1).
    pub fn written_ranges(&self) -> Vec<BufRange> {
        match self {
            OpKind::Kernel { writes, .. } => writes.clone(),
            OpKind::Memset { dst, .. } | OpKind::Memcpy { dst, .. } => vec![*dst],
            OpKind::HostAccess { range, write: true } => vec![*range],
            OpKind::Recv { buf, .. } => vec![*buf],
            OpKind::Collective { recv, kind, stream, .. } => {
                if kind.writes_recv(stream.rank) {
                    vec![*recv]
                } else {
                    vec![]
                }
            }
            OpKind::HostFunc { writes, .. } => writes.clone(),
            OpKind::CudaFree { .. }
            | OpKind::CudaMalloc { .. }
            | OpKind::CudaMallocHost { .. }
            | OpKind::LoadModule { .. }
            | OpKind::EmptyCache { .. }
            | OpKind::HostAccess { write: false, .. }
            | OpKind::EventRecord { .. }
            | OpKind::StreamWaitEvent { .. }
            | OpKind::EventQuery { .. }
            | OpKind::EventSynchronize { .. }
            | OpKind::StreamSynchronize { .. }
            | OpKind::StreamQuery { .. }
            | OpKind::DeviceSynchronize { .. }
            | OpKind::HostSleep { .. }
            | OpKind::Barrier { .. }
            | OpKind::CommInit { .. }
            | OpKind::CommSplit { .. }
            | OpKind::CommPoll { .. }
            | OpKind::CommAbort { .. }
            | OpKind::CommFinalize { .. }
            | OpKind::CommDestroy { .. }
            | OpKind::Send { .. }
            | OpKind::GroupStart
            | OpKind::GroupEnd
            | OpKind::Alloc { .. }
            | OpKind::Free { .. }
            | OpKind::RecordStream { .. }
            | OpKind::Expect { .. } => vec![],
        }
    }
}

impl OpInfo {
    fn base(acting_rank: Option<RankId>, stream: Option<StreamRef>, accesses: Vec<MemAccess>) -> OpInfo {
        OpInfo {
            acting_rank,
            stream,
            accesses: accesses.into_boxed_slice(),
            comm: None,
            nccl: None,
            observes: None,
            footprint: Box::default(),
            ranks: Box::default(),
        }
    }
}
