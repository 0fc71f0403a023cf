//! The operational semantics: a state, the steps enabled in it, and what each step does (MODEL.md; ARCHITECTURE.md
//! "Semantics"). Every rule of SEMANTICS.md sections 1-3 is implemented here and cites its id where it acts.
//!
//! Agents: host threads run their ops in order (one *host step* each; a blocking op is an *issue* step followed by an
//! *unblock* step once its condition holds). Streams hold FIFO queues of *items* (kernels, copies, event markers,
//! wait markers, NCCL *launches*). Finite items run atomically in one step (their start and end differ only in the
//! vector clock); an NCCL launch *starts* in one step, spins while its send/recv/collective ops progress through
//! *transfer* steps, and ends when its last op completes.
//!
//! Identity is interleaving-independent: an item is named by the op that issued it ([`ItemKey`]), so two schedules
//! that differ only in the order of independent steps reach equal states (which the explorer merges).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::clock::{Epoch, VClock};
use crate::profile::{NonMirrored, Profile};
use crate::program::*;

/// Global index of a host thread (ranks' threads numbered in order).
pub type ThreadId = u32;

/// The op at index `op` of global thread `thread`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OpLoc {
    pub thread: ThreadId,
    pub op: u32,
}

/// Names an item by the op that issued it; `sub` tells apart the launches of one `GroupEnd` (one per communicator).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ItemKey {
    pub thread: ThreadId,
    pub op: u32,
    pub sub: u16,
}

impl ItemKey {
    fn of(loc: OpLoc, sub: u16) -> ItemKey {
        ItemKey { thread: loc.thread, op: loc.op, sub }
    }
    /// The op that issued the item.
    pub fn loc(self) -> OpLoc {
        OpLoc { thread: self.thread, op: self.op }
    }
}

/// One transition of the model. A *schedule* is a list of steps.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Step {
    /// The host thread performs its next op, or returns from the blocking op it is in. `choice` picks among the
    /// outcomes of a nondeterministic call (the block an `Alloc` takes: 0 = a fresh block, i = the i-th reusable one).
    Host { thread: ThreadId, choice: u32 },
    /// An item at the head of its stream(s) whose dependencies have ended runs (finite items and markers: start and
    /// end) or starts (NCCL launches).
    Item(ItemKey),
    /// A send and its matching recv, both running, move the data (rendezvous; N2, N3).
    Transfer { send: OpLoc, recv: OpLoc },
    /// A running send delivers into the connection's buffers with no recv running (eager; N2).
    Eager { send: OpLoc },
    /// A running recv takes the data its send left in the connection's buffers.
    Drain { recv: OpLoc },
    /// The n-th collective of a communicator completes: every member's part is running (C1).
    Collective { comm: CommId, seq: u32 },
    /// Two hosts blocked in lazy connection set-up with mirrored needs connect (N7).
    Connect { a: ThreadId, b: ThreadId },
}

/// Why a host thread is blocked.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Wait {
    /// Until every listed item has ended (stream/event/device synchronize, synchronous memcpy; S4, S5).
    Items(Vec<ItemKey>),
    /// Until the item has started (pageable host-to-device `cudaMemcpyAsync` returns once staged; S5).
    Started(ItemKey),
    /// Until every member of the communicator has called `CommInit` (N8).
    Init(CommId),
    /// Until every participant has arrived at round `round` of the barrier.
    Barrier { barrier: u32, round: u32 },
    /// Until the mirrored connection set-up with each listed peer rank has happened (N7): peer -> directions
    /// `(comm, src, dst)` this launch needs set up.
    Connect {
        need: BTreeMap<RankId, BTreeSet<(CommId, RankId, RankId)>>,
        /// The group's NCCL ops, launched once every set-up is done.
        ops: Vec<u32>,
    },
}

/// One host thread's state.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ThreadState {
    /// Index of the next op (== ops.len() when finished).
    pub pc: u32,
    pub wait: Option<Wait>,
    pub clock: VClock,
    /// Depth of nested `ncclGroupStart`.
    pub group_depth: u32,
    /// NCCL ops collected by the open group (N4), in call order.
    pub group_ops: Vec<u32>,
    /// Answers of event/stream queries so far (`true` = ready), in order.
    pub answers: Vec<bool>,
}

/// State of one NCCL op inside a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum CommOpStatus {
    Pending,
    /// A send whose bytes sit in the connection's buffers (eager); the send is finished, the recv not yet.
    Buffered,
    Done,
}

/// What an NCCL op inside a launch does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CommOpKind {
    Send { peer: RankId, seq: u32 },
    Recv { peer: RankId, seq: u32 },
    Collective { seq: u32 },
}

/// One NCCL op of a launch.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CommOp {
    pub loc: OpLoc,
    pub kind: CommOpKind,
    pub bytes: u64,
    pub status: CommOpStatus,
    /// Clock of the op's completion (joins the data flow; MODEL.md).
    pub done: Option<VClock>,
}

/// What an item is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ItemKind {
    /// Kernel, memset or memcpy: finite work that always ends.
    Work,
    /// Event-record marker (S3).
    Record,
    /// Stream-wait marker; its dependency is the captured record, if any (S3).
    WaitMarker,
    /// One NCCL launch on one communicator (N4, N5): a part on every stream in `streams`.
    Launch { comm: CommId, ops: Vec<CommOp> },
}

/// Progress of an item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ItemStatus {
    Pending,
    Running,
    Done,
}

/// An issued item.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Item {
    pub kind: ItemKind,
    /// The streams it is queued on (one, except launches naming several streams).
    pub streams: Vec<StreamRef>,
    /// Items that must end before it starts besides its stream predecessors (S2, S3, N5).
    pub deps: Vec<ItemKey>,
    /// Host clock at issue.
    pub issue: VClock,
    pub status: ItemStatus,
    pub start: Option<VClock>,
    pub end: Option<VClock>,
    /// The block each buffer the item touches occupied when the item was issued (P4: a stream-ordered use keeps
    /// the memory it was issued on, even if the buffer is freed before the item runs).
    pub blocks: Vec<(BufRef, BlockId)>,
}

/// A block of memory: the static buffer that owns it, or the pooled buffer whose allocation created it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BlockId {
    pub buf: BufRef,
    pub generation: u32,
}

/// A free block in the caching allocator's pool of `stream` (P4).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PoolBlock {
    pub block: BlockId,
    pub bytes: u64,
    pub stream: StreamRef,
    /// Items that must have ended before the block may be handed out again (`record_stream`).
    pub not_before: Vec<ItemKey>,
}

/// A pooled buffer's current allocation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Allocation {
    pub block: BlockId,
    pub block_bytes: u64,
    pub stream: StreamRef,
    pub recorded: BTreeSet<StreamRef>,
}

/// Who made a memory access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Accessor {
    /// An item (kernel, copy, or an op of an NCCL launch: `loc` says which op).
    Item { item: ItemKey, loc: OpLoc },
    /// The host thread itself (host read/write of host memory).
    Host { loc: OpLoc },
}

impl Accessor {
    /// The op responsible for the access.
    pub fn loc(self) -> OpLoc {
        match self {
            Accessor::Item { loc, .. } | Accessor::Host { loc } => loc,
        }
    }
}

/// One memory access, as recorded for race detection.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Access {
    pub who: Accessor,
    pub block: BlockId,
    /// The buffer range as the program named it.
    pub range: BufRange,
    pub write: bool,
    /// The accessor's start clock (what happens before the access).
    pub start: VClock,
    /// The accessor's end event once it has ended; `None` while running.
    pub end: Option<Epoch>,
}

/// Two conflicting accesses not ordered by happens-before.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Race {
    /// The two accesses in a canonical order (by op, then range), as recorded when the later one started: an
    /// access whose `end` is `None` was still running then.
    pub first: Access,
    pub second: Access,
}

impl Race {
    /// The key under which the explorer deduplicates races: the two ops and their buffers, in a canonical order
    /// (the same pair of accesses is one race whichever ran first).
    pub fn key(&self) -> (OpLoc, OpLoc, BufRef, BufRef) {
        let a = (self.first.who.loc(), self.first.range.buf);
        let b = (self.second.who.loc(), self.second.range.buf);
        let (x, y) = if a <= b { (a, b) } else { (b, a) };
        (x.0, y.0, x.1, y.1)
    }
}

/// A broken rule that makes the program's behaviour undefined.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Undefined {
    /// SEMANTICS.md rule id (`N3`, `N7`, `C1`, `P4`, ...).
    pub rule: String,
    pub message: String,
    /// The ops involved.
    pub at: Vec<OpLoc>,
}

/// Per-rank, interleaving-independent bookkeeping of the model state.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct State {
    pub threads: Vec<ThreadState>,
    /// Per global stream: the items queued on it in order, and the index of the first one that has not ended.
    pub queues: Vec<(Vec<ItemKey>, u32)>,
    /// Per global stream: clock of its last ended item.
    pub stream_clock: Vec<VClock>,
    pub items: BTreeMap<ItemKey, Item>,
    /// The record each event currently names (S3).
    pub event_binding: BTreeMap<EventRef, ItemKey>,
    /// The last launch issued on (communicator, rank) (N5).
    pub comm_tail: BTreeMap<(CommId, RankId), ItemKey>,
    /// Issued P2P ops by (comm, src, dst, seq, is_recv) -> (launch, index of the op in it) (N3).
    pub p2p: BTreeMap<(CommId, RankId, RankId, u32, bool), (ItemKey, u32)>,
    /// Next P2P sequence number per (comm, src, dst, is_recv).
    pub p2p_next: BTreeMap<(CommId, RankId, RankId, bool), u32>,
    /// Issued collective parts by (comm, seq) -> rank -> (launch, index) (C1).
    pub coll: BTreeMap<(CommId, u32), BTreeMap<RankId, (ItemKey, u32)>>,
    pub coll_next: BTreeMap<(CommId, RankId), u32>,
    /// Bytes buffered in each connection (comm, src, dst) by eager sends (N2).
    pub eager_used: BTreeMap<(CommId, RankId, RankId), u64>,
    /// Connections set up so far (N7).
    pub connected: BTreeSet<(CommId, RankId, RankId)>,
    /// CommInit arrivals: comm -> rank -> host clock at arrival (N8).
    pub init_arrived: BTreeMap<CommId, BTreeMap<RankId, VClock>>,
    /// Barrier arrivals: (barrier, round) -> thread -> clock.
    pub barrier_arrived: BTreeMap<(u32, u32), BTreeMap<ThreadId, VClock>>,
    pub barrier_rounds: BTreeMap<(u32, ThreadId), u32>,
    /// Pooled buffers currently allocated (P4).
    pub allocated: BTreeMap<BufRef, Allocation>,
    pub pool: Vec<PoolBlock>,
    pub alloc_count: BTreeMap<BufRef, u32>,
    /// The thread that last issued NCCL work on (communicator, rank), and when (NCCL docs, "Thread safety").
    pub comm_issuer: BTreeMap<(CommId, RankId), (ThreadId, Epoch)>,
    /// Every access made so far (race detection).
    pub accesses: Vec<Access>,
    /// Races found on the way here.
    pub races: BTreeSet<Race>,
    /// Set when the execution reached undefined behaviour; nothing is enabled afterwards.
    pub undefined: Option<Undefined>,
}

/// The program and profile, with the tables the steps need. Immutable while exploring.
pub struct Semantics<'p> {
    pub program: &'p Program,
    pub profile: &'p Profile,
    /// Global thread id -> (rank, thread index in rank).
    pub thread_of: Vec<(RankId, u32)>,
    /// First global thread id of each rank.
    pub thread_base: Vec<u32>,
    /// First global stream index of each rank.
    pub stream_base: Vec<u32>,
    pub agents: usize,
    /// Per global thread: it is the only host thread of its rank, and no op of the program touches a stream, event
    /// or buffer of another rank than the issuing thread's (see [`Semantics::is_local`]).
    isolated: Vec<bool>,
    /// Per global thread: index of its last op whose outcome depends on device progress (event/stream query,
    /// allocation), if any (see [`Semantics::is_local`]).
    last_observer: Vec<Option<u32>>,
}

/// What an op does to memory.
struct MemAccess {
    range: BufRange,
    write: bool,
}

impl<'p> Semantics<'p> {
    /// Prepares the tables for a validated program.
    pub fn new(program: &'p Program, profile: &'p Profile) -> Semantics<'p> {
        let mut thread_of = vec![];
        let mut thread_base = vec![];
        let mut stream_base = vec![];
        let mut streams = 0u32;
        for (r, rank) in program.ranks.iter().enumerate() {
            thread_base.push(thread_of.len() as u32);
            stream_base.push(streams);
            streams += rank.streams.len() as u32;
            for t in 0..rank.threads.len() {
                thread_of.push((r as RankId, t as u32));
            }
        }
        let agents = thread_of.len() + streams as usize;
        let crosses = program.ranks.iter().enumerate().any(|(r, rank)| {
            rank.threads.iter().any(|t| t.ops.iter().any(|o| op_ranks(&o.kind).iter().any(|x| *x != r as RankId)))
        });
        let isolated = thread_of
            .iter()
            .map(|(r, _)| !crosses && program.ranks[*r as usize].threads.len() == 1)
            .collect();
        let last_observer = thread_of
            .iter()
            .map(|(r, t)| {
                let ops = &program.ranks[*r as usize].threads[*t as usize].ops;
                ops.iter().rposition(|o| {
                    matches!(o.kind, OpKind::EventQuery { .. } | OpKind::StreamQuery { .. } | OpKind::Alloc { .. })
                })
                .map(|i| i as u32)
            })
            .collect();
        Semantics { program, profile, thread_of, thread_base, stream_base, agents, isolated, last_observer }
    }

    /// The initial state: every thread at its first op, every queue empty, every clock zero.
    pub fn initial(&self) -> State {
        let nstreams = self.agents - self.thread_of.len();
        State {
            threads: (0..self.thread_of.len())
                .map(|_| ThreadState {
                    pc: 0,
                    wait: None,
                    clock: VClock::new(self.agents),
                    group_depth: 0,
                    group_ops: vec![],
                    answers: vec![],
                })
                .collect(),
            queues: vec![(vec![], 0); nstreams],
            stream_clock: vec![VClock::new(self.agents); nstreams],
            items: BTreeMap::new(),
            event_binding: BTreeMap::new(),
            comm_tail: BTreeMap::new(),
            p2p: BTreeMap::new(),
            p2p_next: BTreeMap::new(),
            coll: BTreeMap::new(),
            coll_next: BTreeMap::new(),
            eager_used: BTreeMap::new(),
            connected: BTreeSet::new(),
            init_arrived: BTreeMap::new(),
            barrier_arrived: BTreeMap::new(),
            barrier_rounds: BTreeMap::new(),
            allocated: BTreeMap::new(),
            pool: vec![],
            alloc_count: BTreeMap::new(),
            comm_issuer: BTreeMap::new(),
            accesses: vec![],
            races: BTreeSet::new(),
            undefined: None,
        }
    }

    // ----- small lookups -------------------------------------------------------------------------------------------

    /// Global index of a stream (its vector-clock agent is `threads + index`).
    pub fn stream_index(&self, s: StreamRef) -> usize {
        (self.stream_base[s.rank as usize] + s.index) as usize
    }

    fn stream_agent(&self, s: StreamRef) -> usize {
        self.thread_of.len() + self.stream_index(s)
    }

    /// Global thread id of (rank, thread index).
    pub fn thread_id(&self, rank: RankId, thread: u32) -> ThreadId {
        self.thread_base[rank as usize] + thread
    }

    /// Rank of a global thread.
    pub fn rank_of(&self, t: ThreadId) -> RankId {
        self.thread_of[t as usize].0
    }

    /// The op at a location.
    pub fn op(&self, loc: OpLoc) -> &'p Op {
        let (r, t) = self.thread_of[loc.thread as usize];
        &self.program.ranks[r as usize].threads[t as usize].ops[loc.op as usize]
    }

    fn ops_of(&self, t: ThreadId) -> &'p [Op] {
        let (r, ti) = self.thread_of[t as usize];
        &self.program.ranks[r as usize].threads[ti as usize].ops
    }

    /// "r0 main #3 send(...)" for an op location.
    pub fn op_label(&self, loc: OpLoc) -> String {
        let (r, t) = self.thread_of[loc.thread as usize];
        self.program.op_full_label(r, t, loc.op)
    }

    /// "r0 main" for a thread.
    pub fn thread_label(&self, t: ThreadId) -> String {
        let (r, ti) = self.thread_of[t as usize];
        self.program.thread_label(r, ti)
    }

    /// All streams of a rank.
    fn rank_streams(&self, rank: RankId) -> impl Iterator<Item = StreamRef> + '_ {
        (0..self.program.ranks[rank as usize].streams.len() as u32).map(move |index| StreamRef { rank, index })
    }

    fn tail(&self, st: &State, s: StreamRef) -> Option<ItemKey> {
        st.queues[self.stream_index(s)].0.last().copied()
    }

    fn item_done(st: &State, k: ItemKey) -> bool {
        st.items.get(&k).is_some_and(|i| i.status == ItemStatus::Done)
    }

    /// Whether the thread has run all its ops.
    pub fn thread_finished(&self, st: &State, t: ThreadId) -> bool {
        st.threads[t as usize].pc as usize >= self.ops_of(t).len()
    }

    /// Whether every thread has finished and every item has ended.
    pub fn is_complete(&self, st: &State) -> bool {
        (0..st.threads.len() as u32).all(|t| self.thread_finished(st, t))
            && st.items.values().all(|i| i.status == ItemStatus::Done)
    }

    // ----- enabled steps -------------------------------------------------------------------------------------------

    /// Every step enabled in `st`, in a fixed order. Empty when the execution has ended (complete, deadlocked or
    /// undefined).
    pub fn enabled(&self, st: &State) -> Vec<Step> {
        let mut out = vec![];
        if st.undefined.is_some() {
            return out;
        }
        for t in 0..st.threads.len() as u32 {
            let n = self.host_choices(st, t);
            for choice in 0..n {
                out.push(Step::Host { thread: t, choice });
            }
        }
        for (k, item) in &st.items {
            if item.status == ItemStatus::Pending && self.item_ready(st, *k, item) {
                out.push(Step::Item(*k));
            }
        }
        self.comm_steps(st, &mut out);
        self.connect_steps(st, &mut out);
        out
    }

    /// Enabled steps an adversarial device may withhold when streams have no guaranteed independent progress (S1):
    /// starting any item on a device where an NCCL launch is running (spinning).
    /// Also an eager delivery beyond the profile's guaranteed eager window (N2): the platform may refuse it.
    pub fn starvable(&self, st: &State, step: &Step) -> bool {
        if let Step::Eager { send } = step {
            let (item, op) = Self::comm_op(st, self.find_comm_op(st, *send));
            let (ItemKind::Launch { comm, .. }, CommOpKind::Send { peer, .. }) = (&item.kind, op.kind) else {
                return false;
            };
            let used = st.eager_used.get(&(*comm, self.rank_of(send.thread), peer)).copied().unwrap_or(0);
            return used + op.bytes > self.profile.eager_guaranteed();
        }
        if self.profile.independent_progress {
            return false;
        }
        let Step::Item(k) = step else { return false };
        let rank = st.items[k].streams[0].rank;
        st.items.values().any(|i| {
            i.status == ItemStatus::Running && matches!(i.kind, ItemKind::Launch { .. }) && i.streams[0].rank == rank
        })
    }

    /// Whether `step` commutes with every other step that can ever be enabled alongside it, so that an explorer may
    /// take it alone (a persistent set of one step; partial-order reduction). True for host steps of a thread that is
    /// alone on its rank and whose rank no other thread touches, except for steps whose effect depends on how far
    /// the device has got: event/stream queries (S4 answers), allocations (P4 reuse depends on recorded work), and
    /// group ends that may set up connections (N7 synchronizes with the peer's host). Such a step only reads and
    /// writes its own thread, its own rank's queues and event bindings (nobody else issues there), monotone
    /// arrival sets (CommInit, barriers), or matching tables whose checks are symmetric; item and transfer steps
    /// never disable it, and it never disables them.
    ///
    /// A finite item (kernel, copy, event marker) is local too when nothing can observe how far its device has got:
    /// no host thread of its rank has a query or an allocation still to run (their outcome depends on whether the
    /// item has ended), and either streams progress independently or no NCCL launch of its rank is unfinished (S1:
    /// the explorer must still see the states where a spinning launch keeps the item from starting). Its start
    /// clock is fixed once it is enabled, and race detection is symmetric in the order of the two accesses.
    pub fn is_local(&self, st: &State, step: &Step) -> bool {
        if let Step::Item(k) = step {
            let item = &st.items[k];
            if matches!(item.kind, ItemKind::Launch { .. }) {
                return false;
            }
            let rank = item.streams[0].rank;
            let quiet = (0..st.threads.len() as u32)
                .filter(|t| self.rank_of(*t) == rank)
                .all(|t| self.last_observer[t as usize].is_none_or(|last| st.threads[t as usize].pc > last));
            let no_spinner = self.profile.independent_progress
                || !st.items.values().any(|i| {
                    i.status != ItemStatus::Done
                        && matches!(i.kind, ItemKind::Launch { .. })
                        && i.streams[0].rank == rank
                });
            return quiet && no_spinner;
        }
        let Step::Host { thread, .. } = step else { return false };
        if !self.isolated[*thread as usize] {
            return false;
        }
        let th = &st.threads[*thread as usize];
        if th.wait.is_some() {
            return true; // returning from a blocking call: enabled until taken, joins clocks that no longer change
        }
        match &self.ops_of(*thread)[th.pc as usize].kind {
            OpKind::EventQuery { .. } | OpKind::StreamQuery { .. } | OpKind::Alloc { .. } => false,
            OpKind::GroupEnd | OpKind::Send { .. } | OpKind::Recv { .. } | OpKind::Collective { .. } => {
                // With lazy connections, only when the launch needs no new connection (N7: set-up synchronizes
                // with the peer's host).
                !self.profile.lazy_connect || {
                    let pc = th.pc;
                    let ops: Vec<u32> = match &self.ops_of(*thread)[pc as usize].kind {
                        OpKind::GroupEnd if th.group_depth == 1 => th.group_ops.clone(),
                        OpKind::GroupEnd => vec![],
                        _ if th.group_depth > 0 => vec![],
                        _ => vec![pc],
                    };
                    self.new_connections(st, *thread, &ops).is_empty()
                }
            }
            _ => true,
        }
    }

    /// Number of outcomes of the thread's next host step (0 = it cannot move).
    fn host_choices(&self, st: &State, t: ThreadId) -> u32 {
        let th = &st.threads[t as usize];
        if self.thread_finished(st, t) {
            return 0;
        }
        match &th.wait {
            Some(w) => u32::from(self.wait_satisfied(st, t, w)),
            None => {
                let op = &self.ops_of(t)[th.pc as usize];
                match &op.kind {
                    OpKind::Alloc { buf, stream } => 1 + self.reusable(st, *buf, *stream).len() as u32,
                    _ => 1,
                }
            }
        }
    }

    fn wait_satisfied(&self, st: &State, t: ThreadId, w: &Wait) -> bool {
        match w {
            Wait::Items(ks) => ks.iter().all(|k| Self::item_done(st, *k)),
            Wait::Started(k) => st.items.get(k).is_some_and(|i| i.status != ItemStatus::Pending),
            Wait::Init(c) => {
                let members = &self.program.comms[c.0 as usize].members;
                st.init_arrived.get(c).is_some_and(|m| members.iter().all(|r| m.contains_key(r)))
            }
            Wait::Barrier { barrier, round } => {
                let parts = &self.program.barriers[*barrier as usize].participants;
                st.barrier_arrived.get(&(*barrier, *round)).is_some_and(|m| {
                    parts.iter().all(|(r, ti)| m.contains_key(&self.thread_id(*r, *ti)))
                })
            }
            Wait::Connect { need, .. } => {
                let _ = t;
                need.is_empty()
            }
        }
    }

    /// Pool blocks an `Alloc(buf)` on `stream` may take (P4): same stream, large enough, and every item recorded
    /// with `record_stream` at free time has ended.
    pub fn reusable(&self, st: &State, buf: BufRef, stream: StreamRef) -> Vec<usize> {
        let need = self.program.buffer(buf).bytes;
        st.pool
            .iter()
            .enumerate()
            .filter(|(_, b)| {
                b.stream == stream
                    && b.bytes >= need
                    && b.block.buf.rank == buf.rank
                    && b.not_before.iter().all(|k| Self::item_done(st, *k))
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// Whether a pending item may start: it heads every stream it is queued on and its dependencies have ended.
    fn item_ready(&self, st: &State, k: ItemKey, item: &Item) -> bool {
        item.streams.iter().all(|s| {
            let (q, head) = &st.queues[self.stream_index(*s)];
            q.get(*head as usize) == Some(&k)
        }) && item.deps.iter().all(|d| Self::item_done(st, *d))
    }

    /// The launch and the NCCL op at `at` = (launch, index of the op in it), as the P2P and collective tables name
    /// them.
    pub fn comm_op<'s>(st: &'s State, at: (ItemKey, u32)) -> (&'s Item, &'s CommOp) {
        let item = &st.items[&at.0];
        let ItemKind::Launch { ops, .. } = &item.kind else { unreachable!("comm op outside a launch") };
        (item, &ops[at.1 as usize])
    }

    /// Whether the op at `idx` of a running launch may make progress: the launch runs and every earlier op of the
    /// same launch to the same peer in the same direction (or earlier collective) has finished (N4).
    fn op_eligible(item: &Item, idx: usize) -> bool {
        if item.status != ItemStatus::Running {
            return false;
        }
        let ItemKind::Launch { ops, .. } = &item.kind else { return false };
        let me = &ops[idx];
        if me.status != CommOpStatus::Pending {
            return false;
        }
        let lane = |k: &CommOpKind| match k {
            CommOpKind::Send { peer, .. } => (0, *peer),
            CommOpKind::Recv { peer, .. } => (1, *peer),
            CommOpKind::Collective { .. } => (2, 0),
        };
        ops[..idx].iter().all(|o| lane(&o.kind) != lane(&me.kind) || o.status != CommOpStatus::Pending)
    }

    fn comm_steps(&self, st: &State, out: &mut Vec<Step>) {
        for (k, item) in &st.items {
            let ItemKind::Launch { comm, ops } = &item.kind else { continue };
            if item.status != ItemStatus::Running {
                continue;
            }
            let me = k.thread;
            let my_rank = self.rank_of(me);
            for (i, op) in ops.iter().enumerate() {
                match op.kind {
                    CommOpKind::Send { peer, seq } => {
                        if !Self::op_eligible(item, i) {
                            continue;
                        }
                        if let Some(&(rk, ri)) = st.p2p.get(&(*comm, my_rank, peer, seq, true)) {
                            let ritem = &st.items[&rk];
                            if Self::op_eligible(ritem, ri as usize) {
                                let (_, rop) = Self::comm_op(st, (rk, ri));
                                out.push(Step::Transfer { send: op.loc, recv: rop.loc });
                            }
                        }
                        let used = st.eager_used.get(&(*comm, my_rank, peer)).copied().unwrap_or(0);
                        if op.bytes > 0 && used + op.bytes <= self.profile.eager_bytes_per_connection {
                            out.push(Step::Eager { send: op.loc });
                        }
                    }
                    CommOpKind::Recv { peer, seq } => {
                        if !Self::op_eligible(item, i) {
                            continue;
                        }
                        if let Some(&at) = st.p2p.get(&(*comm, peer, my_rank, seq, false)) {
                            if Self::comm_op(st, at).1.status == CommOpStatus::Buffered {
                                out.push(Step::Drain { recv: op.loc });
                            }
                        }
                    }
                    CommOpKind::Collective { seq } => {
                        // Enumerate each collective once: from its lowest-ranked member's part.
                        let Some(parts) = st.coll.get(&(*comm, seq)) else { continue };
                        let members = &self.program.comms[comm.0 as usize].members;
                        if parts.keys().next() != Some(&my_rank) || parts.len() != members.len() {
                            continue;
                        }
                        if parts.values().all(|&(pk, pi)| Self::op_eligible(&st.items[&pk], pi as usize)) {
                            out.push(Step::Collective { comm: *comm, seq });
                        }
                    }
                }
            }
        }
    }

    fn connect_steps(&self, st: &State, out: &mut Vec<Step>) {
        for (a, ta) in st.threads.iter().enumerate() {
            let Some(Wait::Connect { need: pa, .. }) = &ta.wait else { continue };
            let ra = self.rank_of(a as u32);
            for (rb, need_a) in pa {
                for (b, tb) in st.threads.iter().enumerate().skip(a + 1) {
                    if self.rank_of(b as u32) != *rb {
                        continue;
                    }
                    let Some(Wait::Connect { need: pb, .. }) = &tb.wait else { continue };
                    if pb.get(&ra) == Some(need_a) {
                        out.push(Step::Connect { a: a as u32, b: b as u32 });
                    }
                }
            }
        }
    }

    // ----- applying steps ------------------------------------------------------------------------------------------

    /// Applies an enabled step. Returns a short note for the trace (the answer of a query, the block an allocation
    /// took), if any. The step must come from [`Semantics::enabled`] on the same state.
    pub fn apply(&self, st: &mut State, step: &Step) -> Option<String> {
        match step {
            Step::Host { thread, choice } => self.host_step(st, *thread, *choice),
            Step::Item(k) => {
                self.start_item(st, *k);
                None
            }
            Step::Transfer { send, recv } => {
                let s = self.find_comm_op(st, *send);
                let r = self.find_comm_op(st, *recv);
                // MODEL.md: the recv's end joins the send's start; under rendezvous the send's end joins the recv's.
                let mut c = st.items[&s.0].start.clone().unwrap();
                c.join(st.items[&r.0].start.as_ref().unwrap());
                self.finish_comm_op(st, s, CommOpStatus::Done, c.clone());
                self.finish_comm_op(st, r, CommOpStatus::Done, c);
                None
            }
            Step::Eager { send } => {
                let s = self.find_comm_op(st, *send);
                let (item, op) = Self::comm_op(st, s);
                let CommOpKind::Send { peer, .. } = op.kind else { unreachable!() };
                let ItemKind::Launch { comm, .. } = item.kind else { unreachable!() };
                let bytes = op.bytes;
                let c = item.start.clone().unwrap();
                *st.eager_used.entry((comm, self.rank_of(send.thread), peer)).or_default() += bytes;
                self.finish_comm_op(st, s, CommOpStatus::Buffered, c);
                None
            }
            Step::Drain { recv } => {
                let r = self.find_comm_op(st, *recv);
                let (item, op) = Self::comm_op(st, r);
                let CommOpKind::Recv { peer, seq } = op.kind else { unreachable!() };
                let ItemKind::Launch { comm, .. } = item.kind else { unreachable!() };
                let me = self.rank_of(recv.thread);
                let s = st.p2p[&(comm, peer, me, seq, false)];
                let mut c = st.items[&r.0].start.clone().unwrap();
                c.join(st.items[&s.0].start.as_ref().unwrap());
                let bytes = Self::comm_op(st, s).1.bytes;
                *st.eager_used.get_mut(&(comm, peer, me)).unwrap() -= bytes;
                self.finish_comm_op(st, r, CommOpStatus::Done, c);
                None
            }
            Step::Collective { comm, seq } => {
                // C1: completes only when every member's part is running; every part joins every member's start.
                let parts: Vec<(ItemKey, u32)> = st.coll[&(*comm, *seq)].values().copied().collect();
                let mut c = VClock::new(self.agents);
                for (k, _) in &parts {
                    c.join(st.items[k].start.as_ref().unwrap());
                }
                for p in parts {
                    self.finish_comm_op(st, p, CommOpStatus::Done, c.clone());
                }
                None
            }
            Step::Connect { a, b } => {
                let (ra, rb) = (self.rank_of(*a), self.rank_of(*b));
                let mut c = st.threads[*a as usize].clock.clone();
                c.join(&st.threads[*b as usize].clock);
                for (t, peer) in [(*a, rb), (*b, ra)] {
                    let th = &mut st.threads[t as usize];
                    if let Some(Wait::Connect { need: p, .. }) = &mut th.wait {
                        if let Some(dirs) = p.remove(&peer) {
                            st.connected.extend(dirs);
                        }
                    }
                    th.clock.join(&c);
                    th.clock.tick(t as usize);
                }
                None
            }
        }
    }

    fn find_comm_op(&self, st: &State, loc: OpLoc) -> (ItemKey, u32) {
        for (k, item) in st.items.range(ItemKey { thread: loc.thread, op: 0, sub: 0 }..) {
            if k.thread != loc.thread {
                break;
            }
            if let ItemKind::Launch { ops, .. } = &item.kind {
                if let Some(i) = ops.iter().position(|o| o.loc == loc) {
                    return (*k, i as u32);
                }
            }
        }
        unreachable!("no launch holds {loc:?}")
    }

    fn finish_comm_op(&self, st: &mut State, at: (ItemKey, u32), status: CommOpStatus, clock: VClock) {
        let item = st.items.get_mut(&at.0).unwrap();
        let ItemKind::Launch { ops, .. } = &mut item.kind else { unreachable!() };
        let op = &mut ops[at.1 as usize];
        op.status = status;
        op.done = Some(clock);
        let all_done = ops.iter().all(|o| o.status != CommOpStatus::Pending);
        if all_done {
            self.end_launch(st, at.0);
        }
    }

    /// Ends a launch whose ops have all finished: its end joins every op's completion (MODEL.md).
    fn end_launch(&self, st: &mut State, k: ItemKey) {
        let item = st.items.get_mut(&k).unwrap();
        let ItemKind::Launch { ops, .. } = &item.kind else { unreachable!() };
        let mut c = item.start.clone().unwrap();
        for o in ops {
            c.join(o.done.as_ref().unwrap());
        }
        let streams = item.streams.clone();
        for s in &streams {
            c.tick(self.stream_agent(*s));
        }
        self.finish_item(st, k, c);
    }

    /// Marks an item ended with end clock `end`, advances its streams, and fills the end of its accesses.
    fn finish_item(&self, st: &mut State, k: ItemKey, end: VClock) {
        let item = st.items.get_mut(&k).unwrap();
        item.status = ItemStatus::Done;
        let streams = item.streams.clone();
        let epoch = Epoch { agent: self.stream_agent(streams[0]) as u32, time: end.get(self.stream_agent(streams[0])) };
        item.end = Some(end.clone());
        for s in streams {
            let i = self.stream_index(s);
            st.queues[i].1 += 1;
            st.stream_clock[i] = end.clone();
        }
        for a in st.accesses.iter_mut() {
            if matches!(a.who, Accessor::Item { item, .. } if item == k) {
                a.end = Some(epoch);
            }
        }
        st.accesses.sort();
        // Races recorded while the item ran carry its end as unknown; they stay as found.

    }

    /// Starts an item: joins its stream predecessors, dependencies and issue clock (MODEL.md); checks its accesses
    /// for races; finite items and markers also end in the same step.
    fn start_item(&self, st: &mut State, k: ItemKey) {
        let item = &st.items[&k];
        let mut c = item.issue.clone();
        for s in &item.streams {
            c.join(&st.stream_clock[self.stream_index(*s)]);
        }
        for d in &item.deps {
            c.join(st.items[d].end.as_ref().unwrap());
        }
        for s in item.streams.clone() {
            c.tick(self.stream_agent(s));
        }
        let accesses: Vec<(OpLoc, MemAccess)> = match &item.kind {
            ItemKind::Work => self.op_accesses(k.loc()).into_iter().map(|a| (k.loc(), a)).collect(),
            ItemKind::Launch { ops, .. } => {
                ops.iter().flat_map(|o| self.op_accesses(o.loc).into_iter().map(move |a| (o.loc, a))).collect()
            }
            _ => vec![],
        };
        let finite = !matches!(item.kind, ItemKind::Launch { .. });
        let epoch = Epoch {
            agent: self.stream_agent(item.streams[0]) as u32,
            time: c.get(self.stream_agent(item.streams[0])),
        };
        let blocks = item.blocks.clone();
        for (loc, a) in accesses {
            let who = Accessor::Item { item: k, loc };
            let Some(&(_, block)) = blocks.iter().find(|(b, _)| *b == a.range.buf) else { continue };
            self.access(st, who, a, block, &c, if finite { Some(epoch) } else { None });
        }
        let item = st.items.get_mut(&k).unwrap();
        item.start = Some(c.clone());
        if finite {
            self.finish_item(st, k, c);
        } else {
            item.status = ItemStatus::Running;
        }
    }

    /// The memory an op touches.
    fn op_accesses(&self, loc: OpLoc) -> Vec<MemAccess> {
        let rank = self.rank_of(loc.thread);
        match &self.op(loc).kind {
            OpKind::Kernel { reads, writes, .. } => reads
                .iter()
                .map(|r| MemAccess { range: *r, write: false })
                .chain(writes.iter().map(|r| MemAccess { range: *r, write: true }))
                .collect(),
            OpKind::Memset { dst, .. } => vec![MemAccess { range: *dst, write: true }],
            OpKind::Memcpy { dst, src, .. } => {
                vec![MemAccess { range: *src, write: false }, MemAccess { range: *dst, write: true }]
            }
            OpKind::Send { buf, .. } => vec![MemAccess { range: *buf, write: false }],
            OpKind::Recv { buf, .. } => vec![MemAccess { range: *buf, write: true }],
            OpKind::Collective { kind, send, recv, .. } => {
                let reads_send = match kind {
                    CollectiveKind::Broadcast { root } => *root == rank,
                    _ => true,
                };
                let mut v = vec![];
                if reads_send {
                    v.push(MemAccess { range: *send, write: false });
                }
                v.push(MemAccess { range: *recv, write: true });
                v
            }
            OpKind::HostAccess { range, write } => vec![MemAccess { range: *range, write: *write }],
            _ => vec![],
        }
    }

    /// The block a buffer occupies now (static buffers: their own; pooled: the current allocation, if any).
    fn block_of(&self, st: &State, b: BufRef) -> Option<(BlockId, u64)> {
        if self.program.buffer(b).pooled {
            st.allocated.get(&b).map(|a| (a.block, 0))
        } else {
            Some((BlockId { buf: b, generation: 0 }, 0))
        }
    }

    /// Records an access made at clock `at` and reports every earlier conflicting access it is not ordered after.
    /// Two accesses conflict when they overlap in bytes of one block and at least one writes.
    fn access(&self, st: &mut State, who: Accessor, a: MemAccess, block: BlockId, at: &VClock, end: Option<Epoch>) {
        let new = Access { who, block, range: a.range, write: a.write, start: at.clone(), end };
        let (lo, hi) = (a.range.offset, a.range.offset + a.range.len);
        let mut races = vec![];
        for old in &st.accesses {
            if old.block != block || !(old.write || a.write) {
                continue;
            }
            let (olo, ohi) = (old.range.offset, old.range.offset + old.range.len);
            if ohi <= lo || hi <= olo {
                continue;
            }
            if let (Accessor::Item { item: x, loc: lx }, Accessor::Item { item: y, loc: ly }) = (old.who, who) {
                // One op's own accesses (a copy, an in-place collective) do not race; nor do two ops of one launch
                // to the same peer in the same direction, which run in order (N4). Other ops of one NCCL group
                // progress independently (N4), so their conflicting accesses race.
                if x == y && (lx == ly || self.same_lane(lx, ly)) {
                    continue;
                }
            }
            let ordered = old.end.is_some_and(|e| e.happens_before(at));
            if !ordered {
                // Canonical order of the pair, so that the state does not depend on which access ran first.
                let (first, second) = if (old.who.loc(), old.range) <= (new.who.loc(), new.range) {
                    (old.clone(), new.clone())
                } else {
                    (new.clone(), old.clone())
                };
                races.push(Race { first, second });
            }
        }
        st.races.extend(races);
        // Sorted, so that commuting steps give equal states (the explorer merges them).
        let pos = st.accesses.partition_point(|a| a < &new);
        st.accesses.insert(pos, new);
    }

    /// Two NCCL ops of one thread to the same peer in the same direction (or two collectives): ordered in a launch.
    fn same_lane(&self, a: OpLoc, b: OpLoc) -> bool {
        match (&self.op(a).kind, &self.op(b).kind) {
            (OpKind::Send { peer: p, .. }, OpKind::Send { peer: q, .. }) | (OpKind::Recv { peer: p, .. }, OpKind::Recv { peer: q, .. }) => p == q,
            (OpKind::Collective { .. }, OpKind::Collective { .. }) => true,
            _ => false,
        }
    }

    fn tick_host(&self, st: &mut State, t: ThreadId) {
        st.threads[t as usize].clock.tick(t as usize);
    }

    fn advance(&self, st: &mut State, t: ThreadId) {
        let th = &mut st.threads[t as usize];
        th.pc += 1;
        th.wait = None;
    }

    fn set_undefined(&self, st: &mut State, rule: &str, message: String, at: Vec<OpLoc>) {
        if st.undefined.is_none() {
            st.undefined = Some(Undefined { rule: rule.into(), message, at });
        }
    }

    /// Enqueues an item on `streams`, adding the legacy-default-stream dependencies (S2) and the caller's `deps`.
    fn enqueue(&self, st: &mut State, t: ThreadId, key: ItemKey, kind: ItemKind, streams: Vec<StreamRef>, mut deps: Vec<ItemKey>) {
        for s in &streams {
            // S2: the legacy stream waits for every blocking stream of its device, and they wait for it.
            // S2, refined by CUDA's "Stream synchronization behavior": the per-thread default stream "is not a
            // non-blocking stream and will synchronize with the legacy default stream", like a blocking stream.
            match self.program.stream(*s).kind {
                StreamKind::LegacyDefault => {
                    for o in self.rank_streams(s.rank) {
                        if matches!(self.program.stream(o).kind, StreamKind::Blocking | StreamKind::PerThreadDefault) {
                            deps.extend(self.tail(st, o));
                        }
                    }
                }
                StreamKind::Blocking | StreamKind::PerThreadDefault => {
                    deps.extend(self.tail(st, StreamRef { rank: s.rank, index: 0 }));
                }
                StreamKind::NonBlocking => {}
            }
        }
        deps.retain(|d| *d != key);
        deps.sort();
        deps.dedup();
        for s in &streams {
            let i = self.stream_index(*s);
            st.queues[i].0.push(key);
        }
        let issue = st.threads[t as usize].clock.clone();
        let locs: Vec<OpLoc> = match &kind {
            ItemKind::Work => vec![key.loc()],
            ItemKind::Launch { ops, .. } => ops.iter().map(|o| o.loc).collect(),
            _ => vec![],
        };
        let mut blocks: Vec<(BufRef, BlockId)> = locs
            .into_iter()
            .flat_map(|l| self.op_accesses(l))
            .filter_map(|a| self.block_of(st, a.range.buf).map(|(b, _)| (a.range.buf, b)))
            .collect();
        blocks.sort();
        blocks.dedup();
        st.items.insert(key, Item { kind, streams, deps, issue, status: ItemStatus::Pending, start: None, end: None, blocks });
    }

    /// Checks that every pooled buffer an op names is allocated (P4: using a freed tensor is undefined).
    fn check_allocated(&self, st: &mut State, loc: OpLoc, ranges: &[BufRange]) -> bool {
        for r in ranges {
            if self.program.buffer(r.buf).pooled && !st.allocated.contains_key(&r.buf) {
                let name = &self.program.buffer(r.buf).name;
                self.set_undefined(
                    st,
                    "P4",
                    format!("{} uses pooled buffer {name}, which is not allocated (never allocated, or freed)", self.op_label(loc)),
                    vec![loc],
                );
                return false;
            }
        }
        true
    }

    fn host_step(&self, st: &mut State, t: ThreadId, choice: u32) -> Option<String> {
        let th = &st.threads[t as usize];
        let pc = th.pc;
        let loc = OpLoc { thread: t, op: pc };
        if let Some(w) = th.wait.clone() {
            return self.unblock(st, t, w);
        }
        self.tick_host(st, t);
        let rank = self.rank_of(t);
        let op = &self.ops_of(t)[pc as usize];
        let key = ItemKey::of(loc, 0);
        match &op.kind {
            OpKind::Kernel { stream, reads, writes, .. } => {
                let all: Vec<BufRange> = reads.iter().chain(writes).copied().collect();
                if self.check_allocated(st, loc, &all) {
                    self.enqueue(st, t, key, ItemKind::Work, vec![*stream], vec![]);
                }
                self.advance(st, t);
            }
            OpKind::Memset { stream, dst } => {
                if !self.check_allocated(st, loc, &[*dst]) {
                    self.advance(st, t);
                    return None;
                }
                // A synchronous cudaMemset goes to the legacy stream. CUDA "API synchronization behavior": it is
                // fully synchronous when the target is pinned host memory, and may return early otherwise.
                let s = stream.unwrap_or(StreamRef { rank: dst.buf.rank, index: 0 });
                self.enqueue(st, t, key, ItemKind::Work, vec![s], vec![]);
                if stream.is_none() && self.program.buffer(dst.buf).space != MemSpace::Device {
                    st.threads[t as usize].wait = Some(Wait::Items(vec![key]));
                } else {
                    self.advance(st, t);
                }
            }
            OpKind::Memcpy { stream, dst, src } => {
                if !self.check_allocated(st, loc, &[*dst, *src]) {
                    self.advance(st, t);
                    return None;
                }
                let dev_rank = [dst, src]
                    .iter()
                    .find(|r| self.program.buffer(r.buf).space == MemSpace::Device)
                    .map(|r| r.buf.rank)
                    .unwrap_or(rank);
                let s = stream.unwrap_or(StreamRef { rank: dev_rank, index: 0 });
                self.enqueue(st, t, key, ItemKind::Work, vec![s], vec![]);
                let space = |r: &BufRange| self.program.buffer(r.buf).space;
                let (dst_dev, src_dev) = (space(dst) == MemSpace::Device, space(src) == MemSpace::Device);
                let wait = if stream.is_none() {
                    // S5, per CUDA "API synchronization behavior" for cudaMemcpy: device to device does not
                    // synchronize the host; from pageable memory it returns once staged; otherwise (to host
                    // memory, from pinned memory) it returns once the copy is done.
                    if dst_dev && src_dev {
                        None
                    } else if dst_dev && space(src) == MemSpace::PageableHost {
                        Some(Wait::Started(key))
                    } else {
                        Some(Wait::Items(vec![key]))
                    }
                } else if space(dst) == MemSpace::PageableHost {
                    // S5: async copies to pageable memory return once the copy is done.
                    Some(Wait::Items(vec![key]))
                } else if space(src) == MemSpace::PageableHost {
                    // S5: async copies from pageable memory return once staged (after the stream's earlier work).
                    Some(Wait::Started(key))
                } else {
                    None
                };
                match wait {
                    Some(w) => st.threads[t as usize].wait = Some(w),
                    None => self.advance(st, t),
                }
            }
            OpKind::EventRecord { event, stream } => {
                // S3: the record captures the stream's work at the moment of the call; later waits bind to it.
                self.enqueue(st, t, key, ItemKind::Record, vec![*stream], vec![]);
                st.event_binding.insert(*event, key);
                self.advance(st, t);
            }
            OpKind::StreamWaitEvent { stream, event } => {
                // S3: binds to the most recent record as of this call; a never-recorded event orders nothing.
                let deps: Vec<ItemKey> = st.event_binding.get(event).copied().into_iter().collect();
                self.enqueue(st, t, key, ItemKind::WaitMarker, vec![*stream], deps);
                self.advance(st, t);
            }
            OpKind::EventQuery { event } => {
                // S4: never blocks; ready iff the bound record has ended (or the event was never recorded).
                let bound = st.event_binding.get(event).copied();
                let note = self.query(st, t, bound.into_iter().collect());
                self.advance(st, t);
                return Some(note);
            }
            OpKind::StreamQuery { stream } => {
                let tail = self.tail(st, *stream);
                let note = self.query(st, t, tail.into_iter().collect());
                self.advance(st, t);
                return Some(note);
            }
            OpKind::EventSynchronize { event } => {
                let ks: Vec<ItemKey> = st.event_binding.get(event).copied().into_iter().collect();
                st.threads[t as usize].wait = Some(Wait::Items(ks));
            }
            OpKind::StreamSynchronize { stream } => {
                let ks: Vec<ItemKey> = self.tail(st, *stream).into_iter().collect();
                st.threads[t as usize].wait = Some(Wait::Items(ks));
            }
            OpKind::DeviceSynchronize { rank: r } => {
                // S4, P5: every stream of the device, NCCL's included (here NCCL runs on the named streams).
                let ks: Vec<ItemKey> = self.rank_streams(*r).filter_map(|s| self.tail(st, s)).collect();
                st.threads[t as usize].wait = Some(Wait::Items(ks));
            }
            OpKind::HostSleep { .. } => self.advance(st, t),
            OpKind::HostAccess { range, write } => {
                if self.check_allocated(st, loc, &[*range]) {
                    let c = st.threads[t as usize].clock.clone();
                    let e = Epoch { agent: t, time: c.get(t as usize) };
                    if let Some((block, _)) = self.block_of(st, range.buf) {
                        let a = MemAccess { range: *range, write: *write };
                        self.access(st, Accessor::Host { loc }, a, block, &c, Some(e));
                    }
                }
                self.advance(st, t);
            }
            OpKind::Barrier { barrier } => {
                let round = st.barrier_rounds.entry((*barrier, t)).or_default();
                let r = *round;
                *round += 1;
                let c = st.threads[t as usize].clock.clone();
                st.barrier_arrived.entry((*barrier, r)).or_default().insert(t, c);
                st.threads[t as usize].wait = Some(Wait::Barrier { barrier: *barrier, round: r });
            }
            OpKind::CommInit { comm } => {
                // N8: blocks until every member has called it.
                let c = st.threads[t as usize].clock.clone();
                st.init_arrived.entry(*comm).or_default().insert(rank, c);
                st.threads[t as usize].wait = Some(Wait::Init(*comm));
            }
            OpKind::Send { .. } | OpKind::Recv { .. } | OpKind::Collective { .. } => {
                if st.threads[t as usize].group_depth > 0 {
                    // N4: inside a group nothing is enqueued until the outermost group end.
                    st.threads[t as usize].group_ops.push(pc);
                    self.advance(st, t);
                } else {
                    // N4: an ungrouped call is a group of one.
                    self.group_end(st, t, vec![pc]);
                }
            }
            OpKind::GroupStart => {
                st.threads[t as usize].group_depth += 1;
                self.advance(st, t);
            }
            OpKind::GroupEnd => {
                let th = &mut st.threads[t as usize];
                th.group_depth = th.group_depth.saturating_sub(1);
                if th.group_depth == 0 {
                    let ops = std::mem::take(&mut th.group_ops);
                    if ops.is_empty() {
                        self.advance(st, t);
                    } else {
                        self.group_end(st, t, ops);
                    }
                } else {
                    self.advance(st, t);
                }
            }
            OpKind::Alloc { buf, stream } => {
                if st.allocated.contains_key(buf) {
                    self.set_undefined(st, "P4", format!("{} allocates a buffer that is already allocated", self.op_label(loc)), vec![loc]);
                    return None;
                }
                let bytes = self.program.buffer(*buf).bytes;
                let note;
                let (block, block_bytes) = if choice == 0 {
                    let n = st.alloc_count.entry(*buf).or_default();
                    *n += 1;
                    note = "fresh block".to_string();
                    (BlockId { buf: *buf, generation: *n }, bytes)
                } else {
                    let idx = self.reusable(st, *buf, *stream)[(choice - 1) as usize];
                    let b = st.pool.remove(idx);
                    // P4: the allocator saw the recorded streams' events complete (cudaEventQuery), which orders
                    // their work before this allocation.
                    for k in &b.not_before {
                        let end = st.items[k].end.clone().unwrap();
                        st.threads[t as usize].clock.join(&end);
                    }
                    note = format!("reuses the block of {}", self.program.buffer(b.block.buf).name);
                    (b.block, b.bytes)
                };
                st.allocated.insert(*buf, Allocation { block, block_bytes, stream: *stream, recorded: BTreeSet::new() });
                self.advance(st, t);
                return Some(note);
            }
            OpKind::Free { buf } => {
                match st.allocated.remove(buf) {
                    None => self.set_undefined(st, "P4", format!("{} frees a buffer that is not allocated", self.op_label(loc)), vec![loc]),
                    Some(a) => {
                        // P4: the block returns to its allocation stream's pool at once; `record_stream` holds it
                        // until the recorded streams' work as of now has ended.
                        let not_before = a.recorded.iter().filter_map(|s| self.tail(st, *s)).collect();
                        st.pool.push(PoolBlock { block: a.block, bytes: a.block_bytes, stream: a.stream, not_before });
                        self.advance(st, t);
                    }
                }
            }
            OpKind::RecordStream { buf, stream } => {
                match st.allocated.get_mut(buf) {
                    None => self.set_undefined(st, "P4", format!("{} names a buffer that is not allocated", self.op_label(loc)), vec![loc]),
                    Some(a) => {
                        if *stream != a.stream {
                            a.recorded.insert(*stream);
                        }
                        self.advance(st, t);
                    }
                }
            }
        }
        None
    }

    fn query(&self, st: &mut State, t: ThreadId, on: Vec<ItemKey>) -> String {
        let ready = on.iter().all(|k| Self::item_done(st, *k));
        if ready {
            for k in &on {
                let end = st.items[k].end.clone().unwrap();
                st.threads[t as usize].clock.join(&end);
            }
        }
        st.threads[t as usize].answers.push(ready);
        if ready { "ready".into() } else { "not ready".into() }
    }

    fn unblock(&self, st: &mut State, t: ThreadId, w: Wait) -> Option<String> {
        match w {
            Wait::Items(ks) => {
                for k in ks {
                    let end = st.items[&k].end.clone().unwrap();
                    st.threads[t as usize].clock.join(&end);
                }
            }
            Wait::Started(k) => {
                let start = st.items[&k].start.clone().unwrap();
                st.threads[t as usize].clock.join(&start);
            }
            Wait::Init(c) => {
                let all: Vec<VClock> = st.init_arrived[&c].values().cloned().collect();
                for c in all {
                    st.threads[t as usize].clock.join(&c);
                }
            }
            Wait::Barrier { barrier, round } => {
                let all: Vec<VClock> = st.barrier_arrived[&(barrier, round)].values().cloned().collect();
                for c in all {
                    st.threads[t as usize].clock.join(&c);
                }
            }
            Wait::Connect { ops, .. } => {
                // N7: set-up done; now the group's launches are enqueued.
                self.enqueue_launches(st, t, &ops);
            }
        }
        self.tick_host(st, t);
        self.advance(st, t);
        None
    }

    /// The outermost group end (or an ungrouped call): set up connections if needed (N7), then enqueue one launch
    /// per communicator.
    fn group_end(&self, st: &mut State, t: ThreadId, ops: Vec<u32>) {
        if self.profile.lazy_connect {
            let need = self.new_connections(st, t, &ops);
            if !need.is_empty() {
                // N7: the host blocks in the group end until each peer's host sets up the mirrored directions.
                self.check_nonmirrored(st, t, &need);
                st.threads[t as usize].wait = Some(Wait::Connect { need, ops });
                return;
            }
        }
        self.enqueue_launches(st, t, &ops);
        self.advance(st, t);
    }

    /// The connection directions (per peer) that the launch of `ops` of thread `t` needs and that are not set up
    /// yet (N7).
    fn new_connections(&self, st: &State, t: ThreadId, ops: &[u32]) -> BTreeMap<RankId, BTreeSet<(CommId, RankId, RankId)>> {
        let rank = self.rank_of(t);
        let mut need: BTreeMap<RankId, BTreeSet<(CommId, RankId, RankId)>> = BTreeMap::new();
        for &i in ops {
            let dir = match &self.ops_of(t)[i as usize].kind {
                OpKind::Send { comm, peer, .. } => Some((*peer, (*comm, rank, *peer))),
                OpKind::Recv { comm, peer, .. } => Some((*peer, (*comm, *peer, rank))),
                _ => None,
            };
            if let Some((peer, d)) = dir {
                if !st.connected.contains(&d) {
                    need.entry(peer).or_default().insert(d);
                }
            }
        }
        need
    }

    /// N7 (INFER): when the peer is already blocked setting up different directions with us, the first contact is
    /// not mirrored. Under `NonMirrored::Undefined` that is undefined; under `Hang` both hosts keep waiting.
    fn check_nonmirrored(&self, st: &mut State, t: ThreadId, need: &BTreeMap<RankId, BTreeSet<(CommId, RankId, RankId)>>) {
        if self.profile.nonmirrored_first_contact != NonMirrored::Undefined {
            return;
        }
        let rank = self.rank_of(t);
        for (peer, dirs) in need {
            for (u, th) in st.threads.iter().enumerate() {
                if self.rank_of(u as u32) != *peer {
                    continue;
                }
                if let Some(Wait::Connect { need: p, .. }) = &th.wait {
                    if let Some(theirs) = p.get(&rank) {
                        if theirs != dirs {
                            let at = vec![OpLoc { thread: t, op: st.threads[t as usize].pc }, OpLoc { thread: u as u32, op: th.pc }];
                            let msg = format!(
                                "first contact between r{rank} and r{peer} is not mirrored: {} sets up {}, while {} sets up {}",
                                self.op_label(at[0]),
                                dirs_label(dirs),
                                self.op_label(at[1]),
                                dirs_label(theirs)
                            );
                            self.set_undefined(st, "N7", msg, at);
                            return;
                        }
                    }
                }
            }
        }
    }

    fn enqueue_launches(&self, st: &mut State, t: ThreadId, ops: &[u32]) {
        let rank = self.rank_of(t);
        let pc = st.threads[t as usize].pc;
        let mut comms: Vec<CommId> = vec![];
        for &i in ops {
            let c = comm_of(&self.ops_of(t)[i as usize].kind).unwrap();
            if !comms.contains(&c) {
                comms.push(c);
            }
        }
        for (sub, comm) in comms.into_iter().enumerate() {
            // NCCL docs, "Thread safety": one communicator must not be used by several threads in parallel.
            let now = &st.threads[t as usize].clock;
            if let Some(&(u, e)) = st.comm_issuer.get(&(comm, rank)) {
                if u != t && !e.happens_before(now) {
                    let name = &self.program.comms[comm.0 as usize].name;
                    let msg = format!(
                        "{} and {} use communicator {name} from two host threads with nothing ordering the calls \
                         (NCCL: a communicator must not be used by several threads in parallel)",
                        self.thread_label(u),
                        self.op_label(OpLoc { thread: t, op: pc })
                    );
                    self.set_undefined(st, "NCCL thread safety", msg, vec![OpLoc { thread: t, op: pc }]);
                    return;
                }
            }
            st.comm_issuer.insert((comm, rank), (t, Epoch { agent: t, time: now.get(t as usize) }));
            let key = ItemKey { thread: t, op: pc, sub: sub as u16 };
            let mut streams = vec![];
            let mut cops = vec![];
            for &i in ops {
                let loc = OpLoc { thread: t, op: i };
                let kind = &self.ops_of(t)[i as usize].kind;
                if comm_of(kind) != Some(comm) {
                    continue;
                }
                let (stream, ck, bytes) = match kind {
                    OpKind::Send { peer, buf, stream, .. } => {
                        let n = st.p2p_next.entry((comm, rank, *peer, false)).or_default();
                        let seq = *n;
                        *n += 1;
                        st.p2p.insert((comm, rank, *peer, seq, false), (key, cops.len() as u32));
                        (*stream, CommOpKind::Send { peer: *peer, seq }, buf.len)
                    }
                    OpKind::Recv { peer, buf, stream, .. } => {
                        let n = st.p2p_next.entry((comm, *peer, rank, true)).or_default();
                        let seq = *n;
                        *n += 1;
                        st.p2p.insert((comm, *peer, rank, seq, true), (key, cops.len() as u32));
                        (*stream, CommOpKind::Recv { peer: *peer, seq }, buf.len)
                    }
                    OpKind::Collective { stream, recv, .. } => {
                        let n = st.coll_next.entry((comm, rank)).or_default();
                        let seq = *n;
                        *n += 1;
                        st.coll.entry((comm, seq)).or_default().insert(rank, (key, cops.len() as u32));
                        (*stream, CommOpKind::Collective { seq }, recv.len)
                    }
                    _ => unreachable!(),
                };
                if !streams.contains(&stream) {
                    streams.push(stream);
                }
                cops.push(CommOp { loc, kind: ck, bytes, status: CommOpStatus::Pending, done: None });
            }
            self.check_matching(st, &cops);
            let all: Vec<BufRange> = cops
                .iter()
                .flat_map(|o| self.op_accesses(o.loc).into_iter().map(|a| a.range))
                .collect();
            if !self.check_allocated(st, OpLoc { thread: t, op: pc }, &all) {
                return;
            }
            // N5: a launch starts only after the previous launch on the same communicator has ended.
            let mut deps = vec![];
            if self.profile.serialize_per_comm {
                deps.extend(st.comm_tail.get(&(comm, rank)).copied());
            }
            st.comm_tail.insert((comm, rank), key);
            self.enqueue(st, t, key, ItemKind::Launch { comm, ops: cops }, streams, deps);
        }
    }

    /// N3 / C1: a P2P op whose counterpart is already issued must agree in bytes; the n-th collective must agree in
    /// kind and bytes on every member.
    fn check_matching(&self, st: &mut State, cops: &[CommOp]) {
        for o in cops {
            let rank = self.rank_of(o.loc.thread);
            let other = match o.kind {
                CommOpKind::Send { peer, seq } => {
                    let comm = comm_of(&self.op(o.loc).kind).unwrap();
                    st.p2p.get(&(comm, rank, peer, seq, true)).copied()
                }
                CommOpKind::Recv { peer, seq } => {
                    let comm = comm_of(&self.op(o.loc).kind).unwrap();
                    st.p2p.get(&(comm, peer, rank, seq, false)).copied()
                }
                CommOpKind::Collective { seq } => {
                    let comm = comm_of(&self.op(o.loc).kind).unwrap();
                    st.coll[&(comm, seq)].iter().find(|(r, _)| **r != rank).map(|(_, v)| *v)
                }
            };
            let Some(at) = other else { continue };
            let theirs = Self::comm_op(st, at).1;
            let (tl, tb) = (theirs.loc, theirs.bytes);
            let same_kind = match (&self.op(o.loc).kind, &self.op(tl).kind) {
                (OpKind::Collective { kind: a, .. }, OpKind::Collective { kind: b, .. }) => a == b,
                _ => true,
            };
            if tb != o.bytes || !same_kind {
                let rule = if matches!(o.kind, CommOpKind::Collective { .. }) { "C1" } else { "N3" };
                let msg = format!("{} is matched with {}, which differs in size or kind", self.op_label(o.loc), self.op_label(tl));
                self.set_undefined(st, rule, msg, vec![o.loc, tl]);
            }
        }
    }
}

/// The ranks whose streams, events or buffers an op names.
fn op_ranks(k: &OpKind) -> Vec<RankId> {
    let mut v = vec![];
    let mut range = |r: &BufRange| v.push(r.buf.rank);
    match k {
        OpKind::Kernel { reads, writes, .. } => reads.iter().chain(writes).for_each(&mut range),
        OpKind::Memset { dst, .. } => range(dst),
        OpKind::Memcpy { dst, src, .. } => {
            range(dst);
            range(src)
        }
        OpKind::Send { buf, .. } | OpKind::Recv { buf, .. } => range(buf),
        OpKind::Collective { send, recv, .. } => {
            range(send);
            range(recv)
        }
        OpKind::HostAccess { range: r, .. } => range(r),
        _ => {}
    }
    match k {
        OpKind::Kernel { stream, .. }
        | OpKind::StreamSynchronize { stream }
        | OpKind::StreamQuery { stream }
        | OpKind::Send { stream, .. }
        | OpKind::Recv { stream, .. }
        | OpKind::Collective { stream, .. }
        | OpKind::Alloc { stream, .. }
        | OpKind::RecordStream { stream, .. } => v.push(stream.rank),
        OpKind::Memset { stream, .. } | OpKind::Memcpy { stream, .. } => v.extend(stream.map(|s| s.rank)),
        OpKind::EventRecord { event, stream } | OpKind::StreamWaitEvent { stream, event } => {
            v.push(stream.rank);
            v.push(event.rank)
        }
        OpKind::EventQuery { event } | OpKind::EventSynchronize { event } => v.push(event.rank),
        OpKind::DeviceSynchronize { rank } => v.push(*rank),
        OpKind::Free { buf } => v.push(buf.rank),
        _ => {}
    }
    v
}

/// The communicator an NCCL op uses.
pub fn comm_of(k: &OpKind) -> Option<CommId> {
    match k {
        OpKind::Send { comm, .. } | OpKind::Recv { comm, .. } | OpKind::Collective { comm, .. } => Some(*comm),
        _ => None,
    }
}

/// "r0->r1, r1->r0" for a set of connection directions.
pub fn dirs_label(d: &BTreeSet<(CommId, RankId, RankId)>) -> String {
    d.iter().map(|(_, a, b)| format!("r{a}->r{b}")).collect::<Vec<_>>().join(", ")
}
