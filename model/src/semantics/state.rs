//! The model state, split by rule family: each family (host, streams and events, memory, allocator, NCCL) owns one
//! sub-state and the code in its module changes it. Everything is named interleaving-independently (`ids.rs`), so
//! equal states reached by different schedules compare and hash equal.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::ids::*;
use crate::clock::{Epoch, VClock};
use crate::program::*;
use crate::rule::Rule;

/// One transition of the model. A *schedule* is a list of steps.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Step {
    /// The host thread performs its next op, or returns from the blocking op it is in. `choice` picks among the
    /// outcomes of a nondeterministic call: the block an `Alloc` takes (0 = a fresh block, i = the i-th reusable
    /// one; P4), or whether an asynchronous copy to or from pageable memory returns at once (0) or only once the
    /// copy has ended (1; S5).
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
    /// The root of the n-th collective (a broadcast) finishes its part before the other members run theirs (C1:
    /// the root's send may complete early, like an eager send).
    RootEarly { comm: CommId, seq: u32 },
    /// Two hosts blocked in lazy connection set-up with mirrored needs on one communicator connect (N7): thread `a`
    /// acting for rank `ra`, thread `b` for rank `rb`.
    Connect { a: ThreadId, b: ThreadId, comm: CommId, ra: RankId, rb: RankId },
    /// The host watchdog of `rank` fires (N9): nothing else can happen (or only what the platform may withhold
    /// forever) while work on a watched communicator of the rank is unfinished, so its timeout expires and it
    /// aborts the rank's watched communicators (N13). Timed runs fire it at its time.
    Watchdog { rank: RankId },
}

/// A connection direction of a communicator (N7): (communicator, source rank, destination rank, `true` for the
/// connections a collective sets up at its first use since NCCL 2.22, `false` for P2P connections).
pub type Dir = (CommId, RankId, RankId, bool);

/// Why a host thread is blocked.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Wait {
    /// Until every listed item has ended (stream/event/device synchronize, synchronous copies; S4, S5). With
    /// `orders == false` the return joins nothing (an asynchronous copy to or from pageable memory that happens to
    /// be host-synchronous: S5 says it *might* be, so nothing may rely on it).
    Items { items: Vec<ItemKey>, orders: bool },
    /// Until the item may start (the work before it has ended): a synchronous `cudaMemcpy` from pageable memory to
    /// the device syncs the stream, stages the source and returns before the DMA to the destination is done (S5).
    Staged(ItemKey),
    /// Until every member of the communicator has called `CommInit` (`Init(comm, 0)`), or every member of a parent
    /// communicator has made its n-th `CommSplit` of it (`Init(parent, n + 1)`) (N8).
    Init(CommId, u32),
    /// Until every participant has arrived at round `round` of the barrier.
    Barrier { barrier: u32, round: u32 },
    /// Until the queue of `stream` has room (S6): fewer than the profile's `launch_queue_depth` issued items that
    /// have not started. The host then makes the call again (the op is not performed by the blocked step).
    QueueSlot { stream: StreamRef },
    /// Until the mirrored connection set-up with each listed (communicator, peer rank) has happened (N7): the
    /// directions this launch needs set up, per (communicator, acting rank, peer).
    Connect {
        need: BTreeMap<(CommId, RankId, RankId), BTreeSet<Dir>>,
        /// The group's NCCL ops, launched once every set-up is done.
        ops: Vec<u32>,
    },
    /// In `CommPoll(comm)`: until the call in progress on the non-blocking `comm` ([`ThreadState::background`]) has
    /// finished, or the communicator was aborted (N12).
    Poll(CommId),
    /// In `CommFinalize(comm)` or a `CommDestroy(comm)` that finalizes: until every launch of this rank on `comm`
    /// has ended and every member has called it (N13).
    Finalize(CommId),
}

/// A call on a non-blocking communicator that returned `ncclInProgress` and runs in the background until a
/// `CommPoll` sees it finish (N12).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Pending {
    pub comm: CommId,
    /// The op that made the call.
    pub op: u32,
    /// What it waits for: `Init` (the rendezvous of `CommInit`), `Connect` (connection set-up, then the deferred
    /// launch of `ops`, which are only this communicator's), `Finalize`.
    pub wait: Wait,
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
    /// Calls of this thread in progress on non-blocking communicators, at most one per communicator, sorted by
    /// communicator (N12).
    pub background: Vec<Pending>,
}

/// State of one NCCL op inside a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum CommOpStatus {
    Pending,
    /// A send whose bytes sit in the connection's buffers (eager); the send is finished, the recv not yet.
    Buffered,
    Done,
    /// Ended by `ncclCommAbort` (or a watchdog) before it completed: what it wrote is undefined (N13).
    Aborted,
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
    /// Bytes the op moves.
    pub bytes: u64,
    pub status: CommOpStatus,
    /// N14: the kernel plan of its launch the op is in (0 unless the profile's budget cuts the group); an op makes
    /// progress only once every op of an earlier plan has finished.
    #[serde(default)]
    pub plan: u32,
}

/// What an item is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ItemKind {
    /// Kernel, memset or memcpy: finite work that always ends.
    Work,
    /// The DMA of a synchronous pageable-to-device `cudaMemcpy` after the host staged the source: writes only the
    /// destination (S5).
    StagedCopy,
    /// Event-record marker (S3).
    Record,
    /// Stream-wait marker; its dependency is the captured record, if any (S3).
    WaitMarker,
    /// One NCCL launch on one communicator for one acting rank (N4, N5): a part on every stream in `streams`.
    Launch {
        comm: CommId,
        ops: Vec<CommOp>,
        /// Its start clock and the join of its ops' completions, boxed: only launches have them, and a pipeline
        /// holds millions of items in flight (issue 9, scale).
        clocks: Box<LaunchClocks>,
    },
}

/// The clocks a launch keeps beside [`Item::clock`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LaunchClocks {
    /// The launch's start clock, once it has started. Its ops read it after the launch has ended too (a recv
    /// draining an eager send joins the send's start, N2), so it outlives [`Item::clock`]'s start value.
    pub start: Option<VClock>,
    /// The join of the completion clocks (the data flow, MODEL.md) of the ops finished so far; the launch's end
    /// joins it. Only the join is kept, not each op's clock: which op finished how is not observable after, and
    /// keeping it made a group of n sends 2^n states apart (eager or not, per send).
    pub finished: Option<VClock>,
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
    /// The streams it is queued on (one, except launches naming several streams). All on one device.
    pub streams: ItemStreams,
    /// Items that must end before it starts besides its stream predecessors, and whose end happens before its start
    /// (S2, S3).
    pub deps: ItemKeys,
    /// Items that must end before it starts but that order nothing (N5 serialization, which no document
    /// guarantees: it can hang a program but a program must not rely on it for memory order).
    pub waits: ItemKeys,
    /// The item's clock at its status (MODEL.md): the host clock at issue while [`ItemStatus::Pending`], its start
    /// while [`ItemStatus::Running`], its end once [`ItemStatus::Done`]. One field, not three: nothing reads an
    /// item's issue clock once it has started, nor a finite item's start once it has ended (a launch keeps its start
    /// in [`LaunchClocks`]), and a pipeline holds millions of items in flight (issue 9, scale: 432 bytes an item
    /// with three clocks).
    pub clock: VClock,
    pub status: ItemStatus,
    /// The block each buffer the item touches occupied when the item was issued (P4: a stream-ordered use keeps
    /// the memory it was issued on, even if the buffer is freed before the item runs).
    pub blocks: ItemBlocks,
}

/// An item's streams, inline up to one (a pipeline issues millions of items; each heap list cost an allocation at
/// issue and a free when the item is forgotten: issue 9, scale). Serialized as a list, as a `Vec` was.
pub type ItemStreams = smallvec::SmallVec<[StreamRef; 1]>;
/// An item's dependencies or waits, inline up to two.
pub type ItemKeys = smallvec::SmallVec<[ItemKey; 2]>;
/// The blocks an item's buffers occupied at issue, inline up to two.
pub type ItemBlocks = smallvec::SmallVec<[(BufRef, BlockId); 2]>;

impl Item {
    /// The device the item runs on.
    pub fn rank(&self) -> RankId {
        self.streams[0].rank
    }

    /// The item's end clock, once it has ended.
    pub fn end(&self) -> Option<&VClock> {
        (self.status == ItemStatus::Done).then_some(&self.clock)
    }

    /// A launch's start clock, once it has started (also after it has ended); `None` for other items.
    pub fn launch_start(&self) -> Option<&VClock> {
        match &self.kind {
            ItemKind::Launch { clocks, .. } => clocks.start.as_ref(),
            _ => None,
        }
    }

    /// Whether the item is an NCCL launch that has started and not ended (a spinning kernel; S1).
    pub fn is_spinning(&self) -> bool {
        self.status == ItemStatus::Running && matches!(self.kind, ItemKind::Launch { .. })
    }
}

/// A free block in the caching allocator's pool of `stream` (P4).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PoolBlock {
    pub block: BlockId,
    /// Size in bytes.
    pub bytes: u64,
    pub stream: StreamRef,
    /// Items that must have ended before the block may be handed out again (`record_stream`).
    pub not_before: Vec<ItemKey>,
}

/// A pooled buffer's current allocation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Allocation {
    pub block: BlockId,
    /// Size of the block in bytes.
    pub block_bytes: u64,
    pub stream: StreamRef,
    pub recorded: BTreeSet<StreamRef>,
}

/// Who made a memory access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Accessor {
    /// An item (kernel, copy, or an op of an NCCL launch: `loc` says which op).
    Item { item: ItemKey, loc: OpLoc },
    /// The host thread itself (host read/write of host memory, staging of a pageable copy).
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
    /// First, so that the sorted access list groups each block's accesses (a race check looks at one block only).
    pub block: BlockId,
    pub who: Accessor,
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
    /// The rule broken (`docs/semantics.md`).
    pub rule: Rule,
    /// What happened, in words, naming the ops.
    pub message: String,
    /// The ops involved.
    pub at: Vec<OpLoc>,
}

/// What an allocation did (P4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AllocOutcome {
    /// A fresh block.
    Fresh,
    /// The pool handed out the block of this earlier allocation.
    Reused(BlockId),
}

/// What one step did, for traces and timelines (rendered at the edge).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Effects {
    /// Items that started (finite items start and end in one step). Inline up to 4: every step makes one.
    pub started: smallvec::SmallVec<[ItemKey; 4]>,
    /// Items that ended. Inline up to 4.
    pub ended: smallvec::SmallVec<[ItemKey; 4]>,
    /// The answer of an event or stream query (`true` = ready; S4).
    pub answer: Option<bool>,
    /// The block an allocation took (P4).
    pub alloc: Option<AllocOutcome>,
    /// Whether a pageable asynchronous copy returned at once (`Some(false)`) or blocked the host (`Some(true)`; S5).
    pub host_synchronous: Option<bool>,
    /// Races found by this step.
    pub races: usize,
    /// The rule broken, if the step made the execution undefined.
    pub undefined: Option<Rule>,
}

/// Host threads and host barriers.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HostState {
    pub threads: Vec<ThreadState>,
    /// Barrier arrivals: (barrier, round) -> thread -> clock.
    pub barrier_arrived: BTreeMap<(u32, u32), BTreeMap<ThreadId, VClock>>,
    pub barrier_rounds: BTreeMap<(u32, ThreadId), u32>,
    /// (device, module) pairs whose lazy load has happened (S7: only the first load of a module synchronizes).
    #[serde(default)]
    pub loaded_modules: BTreeSet<(RankId, String)>,
}

/// Streams, their items and events (S1-S5).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StreamState {
    /// Per global stream: the items queued on it in order, and the index of the first one that has not ended.
    pub queues: Vec<(Vec<ItemKey>, u32)>,
    /// Per global stream: clock of its last ended item.
    pub stream_clock: Vec<VClock>,
    pub items: super::item_map::ItemMap,
    /// The record each event currently names (S3).
    pub event_binding: BTreeMap<EventRef, ItemKey>,
}

/// A P2P op's place in the matching tables (N3): the `seq`-th send (or recv) from `src` to `dst` on `comm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct P2pKey {
    pub comm: CommId,
    pub src: RankId,
    pub dst: RankId,
    pub seq: u32,
    /// `true` for the recv side.
    pub recv: bool,
}

impl P2pKey {
    /// The key of the matching op on the other side.
    pub fn other(self) -> P2pKey {
        P2pKey { recv: !self.recv, ..self }
    }
}

/// NCCL: launches, matching, connections, initialization, thread safety (N2-N11, C1).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NcclState {
    /// The last launch issued on (communicator, acting rank) (N5).
    pub comm_tail: BTreeMap<(CommId, RankId), ItemKey>,
    /// Issued P2P ops -> (launch, index of the op in it) (N3).
    pub p2p: BTreeMap<P2pKey, (ItemKey, u32)>,
    /// Next P2P sequence number per (comm, src, dst, is_recv).
    pub p2p_next: BTreeMap<(CommId, RankId, RankId, bool), u32>,
    /// Issued collective parts by (comm, seq) -> member rank -> (launch, index) (C1).
    pub coll: BTreeMap<(CommId, u32), BTreeMap<RankId, (ItemKey, u32)>>,
    pub coll_next: BTreeMap<(CommId, RankId), u32>,
    /// Bytes buffered in each connection (comm, src, dst) by eager sends (N2).
    pub eager_used: BTreeMap<(CommId, RankId, RankId), u64>,
    /// Connection directions set up so far (N7).
    pub connected: BTreeSet<Dir>,
    /// CommInit arrivals: (comm, 0) -> rank -> host clock at arrival; the n-th CommSplit of a parent: (parent,
    /// n + 1) -> rank -> clock (N8).
    pub init_arrived: BTreeMap<(CommId, u32), BTreeMap<RankId, VClock>>,
    /// The call that last issued NCCL work on each device (acting rank), when, and on which communicator (N11).
    pub issuer: BTreeMap<RankId, (OpLoc, Epoch, CommId)>,
    /// `CommFinalize` (or finalizing `CommDestroy`) arrivals: comm -> rank -> host clock at arrival (N13).
    pub finalize_arrived: BTreeMap<CommId, BTreeMap<RankId, VClock>>,
    /// What ended a communicator on a rank (N13): using it afterwards is undefined.
    pub ended: BTreeMap<(CommId, RankId), CommEnd>,
    /// Watchdog firings so far, with the hang each one turned into an abort (N9).
    pub timeouts: BTreeSet<Timeout>,
    /// Aborted ops that a value assertion names as its writer (N13: relying on their data is undefined).
    pub aborted_ops: BTreeSet<OpLoc>,
    /// N7: when collectives connect their peers, as the platform chose it at the first collective that needed
    /// connections (profile `collective_connect: Some(Either)` only; `None` until then, and always under a profile
    /// that fixes it). Part of the state, so that executions of the two platforms never merge.
    #[serde(default)]
    pub coll_connect: Option<crate::profile::ConnectChoice>,
    /// N14: the order in which cut groups fill their kernel plans, as the platform chose it at the first group end
    /// whose calls the two orders cut differently (profile `p2p_plan_order: Either` only; `None` until then, and
    /// always under a profile that fixes it). Part of the state, so that executions of the two platforms never merge.
    #[serde(default)]
    pub plan_order: Option<crate::profile::PlanOrderChoice>,
}

/// How a communicator's life ended on a rank (N13).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum CommEnd {
    /// `ncclCommAbort` by the op at this location.
    Aborted(OpLoc),
    /// Aborted by the rank's watchdog (N9).
    Watchdog,
    /// `ncclCommFinalize` returned (or its poll saw success): only `CommDestroy` may follow.
    Finalized(OpLoc),
    /// `ncclCommDestroy` by the op at this location.
    Destroyed(OpLoc),
}

/// A watchdog firing (N9): the rank whose watchdog fired, its timeout, the communicators it aborted, and the hang
/// it turned into an abort (the wait-for graph when it fired).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Timeout {
    pub rank: RankId,
    /// The timeout in nanoseconds (the smallest of the aborted communicators').
    pub timeout_ns: u64,
    pub comms: Vec<CommId>,
    /// Where every unfinished thread was when it fired: (thread, pc); the key of the finding.
    pub at: Vec<(ThreadId, u32)>,
    pub stuck: super::explain::Stuck,
}

/// Memory accesses and the races found (race detection).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MemoryState {
    /// Every access made so far (and not forgotten), per block, each block's list sorted (so that commuting steps
    /// give equal states); no block has an empty list. Per block, so that recording an access costs what that
    /// block holds, not what the whole program touched (issue 9, "scale").
    pub accesses: BTreeMap<BlockId, Vec<Access>>,
    /// Races found on the way here.
    pub races: BTreeSet<Race>,
    /// The end of the write of every op that a value assertion names as its writer, once that write has ended (V1).
    pub write_ends: BTreeMap<OpLoc, Epoch>,
    /// The send each recv matched (N3), recorded when its data arrived (rendezvous or drain), for the recvs that a
    /// value assertion with a sending buffer (`Expect { sent_from: Some(..) }`, V1) names as its writer. Keyed by
    /// op locations, which do not depend on the interleaving; never forgotten (like `write_ends`): an assertion
    /// checked later reads it.
    #[serde(default)]
    pub recv_sources: BTreeMap<OpLoc, OpLoc>,
    /// Value assertions that failed on the way here (V1).
    pub stale: BTreeSet<StaleRead>,
}

impl MemoryState {
    /// Every access kept, sorted (by block first).
    pub fn all_accesses(&self) -> impl Iterator<Item = &Access> + '_ {
        self.accesses.values().flatten()
    }
}

/// A failed value assertion (V1): the read `check` (an `Expect`) does not see the value op `writer` wrote to
/// `range`, because that write does not happen before the read (it comes later, or nothing orders the two).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct StaleRead {
    pub check: OpLoc,
    pub writer: OpLoc,
    pub range: BufRange,
    /// For an assertion that names the sending buffer (`sent_from`): the send the recv `writer` matched (N3), when
    /// its write does happen before the read but that send read elsewhere (the value is another message's).
    /// `None` when the write itself does not happen before the read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_send: Option<OpLoc>,
}

/// The caching allocator (P4).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PoolState {
    /// Pooled buffers currently allocated.
    pub allocated: BTreeMap<BufRef, Allocation>,
    /// Free blocks, in the order they were freed.
    pub free: Vec<PoolBlock>,
    pub alloc_count: BTreeMap<BufRef, u32>,
    /// Non-pooled buffers released with `cudaFree` (S7): every later use is undefined.
    #[serde(default)]
    pub device_freed: BTreeSet<BufRef>,
}

/// The whole model state.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct State {
    pub host: HostState,
    pub streams: StreamState,
    pub nccl: NcclState,
    pub memory: MemoryState,
    pub pool: PoolState,
    /// Set when the execution reached undefined behaviour; nothing is enabled afterwards.
    pub undefined: Option<Undefined>,
}

impl State {
    /// The item issued under `k`. Panics if no such item was issued (a caller bug: keys come from this state).
    pub fn item(&self, k: ItemKey) -> &Item {
        &self.streams.items[&k]
    }

    /// Whether the item has ended.
    pub fn item_done(&self, k: ItemKey) -> bool {
        self.streams.items.get(&k).is_some_and(|i| i.status == ItemStatus::Done)
    }

    /// The launch and the NCCL op at `at` = (launch, index of the op in it), as the P2P and collective tables name
    /// them.
    pub fn comm_op(&self, at: (ItemKey, u32)) -> (&Item, &CommOp) {
        let item = &self.streams.items[&at.0];
        let ItemKind::Launch { ops, .. } = &item.kind else { unreachable!("comm op outside a launch") };
        (item, &ops[at.1 as usize])
    }

    /// The send matching a recv, if issued (N3).
    pub fn matching(&self, key: P2pKey) -> Option<(ItemKey, u32)> {
        self.nccl.p2p.get(&key.other()).copied()
    }

    /// The races found so far.
    pub fn races(&self) -> &BTreeSet<Race> {
        &self.memory.races
    }
}
