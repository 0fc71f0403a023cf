//! Timed discrete-event runs (issue 9): a strategy over the model's enabled steps that fires each step when its
//! cost has elapsed since it became enabled, in integer nanoseconds, so that a timed run is one execution the
//! explorer can also produce (its schedule replays with [`crate::run::replay`]). It records what ran where and
//! when (spans), the dependencies between lanes (flows) and the findings, from which [`summarize`] derives the
//! makespan, busy and idle time, bubbles and the critical path.
//!
//! The discrete-event rule: a step that becomes enabled at time `t` (the fire time of the step after which it first
//! appears in the enabled set) fires at `t + cost(step)` unless it is disabled first; the step with the least fire
//! time fires next (ties: the seeded generator). Costs come from a [`CostModel`]. The platform is as generous as
//! the profile allows: a step the profile lets the platform withhold (an eager send beyond the guaranteed window,
//! an item beside a spinning NCCL kernel; S1, N2) is taken like any other, and a nondeterministic host call takes
//! its first outcome (a fresh allocator block, P4; a pageable async copy that returns at once, S5). What
//! withholding or other outcomes can do is `check`'s and `explore`'s business.

use rustc_hash::FxHashMap as HashMap;

use serde::{Deserialize, Serialize};

use cuorder_model::op_info::NcclRole;
use cuorder_model::program::{MemSpace, OpKind, RankId, StreamRef};
use cuorder_model::semantics::{Accessor, CommOpKind, ItemKey, ItemKind, ItemStatus, OpLoc, P2pKey, Race, Semantics, State, Step};

use crate::cost::{transfer_ns, CostModel};
use crate::rng::Rng;
use crate::run::Outcome;

/// Where a span runs: a host thread or a stream (global indices into the program's threads and streams).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Lane {
    Thread(u32),
    Stream(StreamRef),
}

/// What a span is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum SpanKind {
    /// A kernel on a stream.
    Kernel,
    /// A memcpy or memset on a stream.
    Copy,
    /// A host function (`cudaLaunchHostFunc`, S8) running in stream order.
    HostFunc,
    /// An NCCL launch (one or more sends, recvs or a collective) on a stream, from its start to its end.
    Nccl,
    /// A host call that returned without blocking.
    HostCall,
    /// A host call that blocked, from the call to its return.
    HostBlocked,
}

/// One interval on a lane: `[start_ns, end_ns]`, for the op at `op` (for an NCCL launch of a group: the group end).
/// Its rank is [`Span::rank`] (not stored: a 1,024-rank pipeline records millions of spans; issue 9, scale).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Span {
    pub lane: Lane,
    pub op: OpLoc,
    pub kind: SpanKind,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The answer of an event or stream query (`true` = ready; S4).
    pub answer: Option<bool>,
    /// The work had not ended when the run stopped (a deadlock, the step limit, undefined behaviour): `end_ns` is
    /// the run's end. A hung call or NCCL kernel is drawn to the end of the run rather than left out.
    pub unfinished: bool,
}

impl Lane {
    /// The rank whose host thread or stream this is.
    pub fn rank(self, sem: &Semantics) -> RankId {
        match self {
            Lane::Stream(s) => s.rank,
            Lane::Thread(t) => sem.rank_of(t),
        }
    }
}

impl Span {
    /// The rank whose lane this is.
    pub fn rank(&self, sem: &Semantics) -> RankId {
        self.lane.rank(sem)
    }
}

/// Why a flow arrow is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FlowKind {
    /// Data of a send reaching its recv (rendezvous, or an eager delivery drained later; N2, N3).
    SendRecv,
    /// An event record ordering a stream wait (S3).
    RecordWait,
}

/// A dependency arrow from (`from`, `from_ns`) to (`to`, `to_ns`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flow {
    pub kind: FlowKind,
    pub from: Lane,
    pub from_rank: RankId,
    pub from_ns: u64,
    pub to: Lane,
    pub to_rank: RankId,
    pub to_ns: u64,
}

/// A finding placed in time: the race (index into [`TimedRun::races`]), placed where the later of its two accesses
/// (in time) started: at `at_ns` on `lane`, that access's lane. (A kernel's step fires at its end, so the access
/// the model applies second may have started first: in litmus L2 write_a is applied second but read_a starts
/// later; the mark was at write_a's start on read_a's lane.)
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaceMark {
    pub race: usize,
    pub at_ns: u64,
    pub lane: Lane,
}

/// A failed value assertion (V1) placed in time: when the step that found it fired.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StaleMark {
    pub read: cuorder_model::semantics::StaleRead,
    pub at_ns: u64,
}

/// An NCCL launch on a communicator with a watchdog (N9) that had not ended when ProcessGroupNCCL's watchdog would
/// abort it. ProcessGroupNCCL times a work item from the start of the host call that issues it (`WorkNCCL` sets
/// `workStartTime_` when the work is created, before the NCCL call), watches it once the call has returned (the
/// work is queued for the watchdog then; a host blocked inside the call is not watched), and aborts the
/// communicators of unfinished work older than the timeout (`checkTimeout`): at [`Overdue::fires_ns`]. The model
/// fires a watchdog only on a hang, when nothing else can happen (docs/semantics.md N9), so the timed run goes on.
/// It is a prediction of the cost model: `check` knows no time and does not report it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overdue {
    /// The launch: the op that enqueued it (a group's end for the ops of a group; a `Poll` for work a
    /// non-blocking communicator deferred, N12) and the sub-index of its communicator (N4).
    pub item: ItemKey,
    /// The call that issued it, whose start the watchdog times from: the group's end for the ops of a group, the
    /// first NCCL call of deferred work (N12).
    pub op: OpLoc,
    pub rank: RankId,
    /// The stream it ran on (its first, for a launch naming several).
    pub stream: StreamRef,
    pub comm: cuorder_model::program::CommId,
    /// When the host call that issued it began, ns.
    pub issued_ns: u64,
    /// When that call returned, ns.
    pub returned_ns: u64,
    /// When it ended, ns; the end of the run if it was still running then (`unfinished`).
    pub ended_ns: u64,
    /// It had not ended when the run stopped (the step limit, a deadlock).
    #[serde(default)]
    pub unfinished: bool,
    /// The watchdog's timeout, ns.
    pub timeout_ns: u64,
}

/// A timed execution: the schedule (replayable), the fire time of each step, and what ran when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimedRun {
    pub program: String,
    pub profile: String,
    /// The cost model's name.
    pub costs: String,
    pub seed: u64,
    /// The jitter bound the run drew from ([`TimedOptions::jitter_ns`]), ns; 0: none. With `seed` it is what
    /// reproduces the run.
    pub jitter_ns: u64,
    /// Whether the schedule was given ([`timed_replay`]: `cuorder run --timeline` times an explored execution, and
    /// `seed` is the exploration's seed) rather than chosen by time ([`timed_run`]: `seed` breaks ties).
    pub replayed: bool,
    /// Settings outside the program that changed it, as command-line flags (the PyTorch dialect's overrides,
    /// `--torch-init lazy`): with the seed and jitter, what reproduces the run. Empty unless the caller sets it.
    #[serde(default)]
    pub settings: Vec<String>,
    pub schedule: Vec<Step>,
    /// Fire time of each step of `schedule`, ns (non-decreasing).
    pub times_ns: Vec<u64>,
    /// For each step, what enabled it and which op it performed: [`TimedRun::enabled_by`], [`TimedRun::host_op`].
    pub meta: Vec<StepMeta>,
    pub spans: Vec<Span>,
    pub flows: Vec<Flow>,
    pub races: Vec<Race>,
    pub race_marks: Vec<RaceMark>,
    /// Failed value assertions (V1), in the order found.
    pub stale: Vec<StaleMark>,
    /// Watched NCCL launches still running when ProcessGroupNCCL's watchdog would abort them ([`Overdue`]), in
    /// the order of [`Overdue::fires_ns`] (then item).
    #[serde(default)]
    pub overdue: Vec<Overdue>,
    pub outcome: Outcome,
    /// When the last step fired (a deadlock: when the last thing happened before the stall), ns.
    pub makespan_ns: u64,
    /// The steps of `schedule` that the profile does not guarantee ([`Semantics::starvable`] when taken; the
    /// platform is as generous as the profile allows): how many, and the index of the first. A [`timed_replay`]
    /// does not count them (0, `None`).
    #[serde(default)]
    pub unguaranteed: (u64, Option<u32>),
    /// What the same run did when the platform withheld those steps ([`TimedOptions::withhold`]). Set by the
    /// caller (`cuorder time`); [`Withheld::NotRun`] from [`timed_run`].
    #[serde(default)]
    pub withheld: Withheld,
}

/// What a run that withholds the steps the profile does not guarantee ([`TimedOptions::withhold`]) did, beside a
/// run that took some ([`TimedRun::withheld`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Withheld {
    /// Not run: the run took no unguaranteed step, or did not complete.
    #[default]
    NotRun,
    /// Not run on request (`--no-withheld-run`), though the run took unguaranteed steps.
    Skipped,
    /// It completed too.
    Completed,
    /// It deadlocked: when its last step happened, ns, and the wait-for graph.
    Deadlock(u64, cuorder_model::semantics::Stuck),
    /// It stopped at a limit (`--max-steps`, `--max-time-s`) before its end: whether it hangs is not known.
    Cut,
}

/// A step's provenance in a timed run, packed into 8 bytes (a 1,024 x 64 pipeline records 3.6 M steps; issue 9,
/// scale): the step after which it became enabled, and for a host step the op index and whether it returned from a
/// blocking call. `u32::MAX` stands for "none" in both.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepMeta {
    by: u32,
    host: u32,
}

impl StepMeta {
    const NONE: u32 = u32::MAX;

    /// Packs `by` and `host` (an op index below 2^31 - 1: a thread's ops are far fewer, each takes a hundred bytes).
    fn new(by: Option<u32>, host: Option<(u32, bool)>) -> StepMeta {
        StepMeta {
            by: by.unwrap_or(Self::NONE),
            host: host.map_or(Self::NONE, |(pc, ret)| {
                assert!(pc < (u32::MAX >> 1), "op index {pc} does not fit a step record");
                pc << 1 | u32::from(ret)
            }),
        }
    }

    /// The step after which this one became enabled (`None`: enabled from the start).
    pub fn enabled_by(self) -> Option<u32> {
        (self.by != Self::NONE).then_some(self.by)
    }

    /// For a host step, the index of the op the thread was at and whether the step returned from a blocking call.
    pub fn host_op(self) -> Option<(u32, bool)> {
        (self.host != Self::NONE).then_some((self.host >> 1, self.host & 1 == 1))
    }
}

impl Overdue {
    /// When ProcessGroupNCCL's watchdog would abort it: its timeout after the call began, or the call's return if
    /// that is later, ns.
    pub fn fires_ns(&self) -> u64 {
        watchdog_due_ns(self.issued_ns, self.returned_ns, self.timeout_ns)
    }
}

/// When ProcessGroupNCCL's watchdog aborts work whose host call began at `issued_ns` and returned at `returned_ns`
/// (N9, [`Overdue`]): `timeout_ns` after the call began, or at its return if that is later, ns.
pub fn watchdog_due_ns(issued_ns: u64, returned_ns: u64, timeout_ns: u64) -> u64 {
    issued_ns.saturating_add(timeout_ns).max(returned_ns)
}

impl TimedRun {
    /// The step after which step `i` became enabled (`None`: enabled from the start). Panics if `i` is past the
    /// schedule.
    pub fn enabled_by(&self, i: usize) -> Option<u32> {
        self.meta[i].enabled_by()
    }

    /// For host step `i`, the index of the op its thread was at and whether the step returned from a blocking call
    /// (`None` for other steps). Panics if `i` is past the schedule.
    pub fn host_op(&self, i: usize) -> Option<(u32, bool)> {
        self.meta[i].host_op()
    }
}

/// Options of a timed run.
#[derive(Clone, Debug)]
pub struct TimedOptions {
    /// Seed of the tie-breaking (and jitter) generator.
    pub seed: u64,
    /// Each step's cost is increased by a uniform draw from `0..=jitter_ns` (0: none; `u64::MAX` draws from
    /// `0..u64::MAX`), ns. Times saturate at `u64::MAX` ns.
    pub jitter_ns: u64,
    /// Stop after this many steps ([`Outcome::StepLimit`]).
    pub max_steps: usize,
    /// Stop once this much wall-clock time has passed ([`Outcome::TimeLimit`]; checked every
    /// [`TIME_CHECK_EVERY`] steps), counted from [`TimedOptions::clock_start`]. Where such a run stops depends
    /// on the machine; `None`: no limit.
    pub max_time: Option<std::time::Duration>,
    /// The instant [`TimedOptions::max_time`] counts from; `None`: the start of [`timed_run`]. `cuorder time` passes
    /// the instant it started, so that loading the program counts against `--max-time-s` too.
    pub clock_start: Option<std::time::Instant>,
    /// Take only the steps the profile guarantees: a step the platform may withhold ([`Semantics::starvable`]: an
    /// eager send beyond the guaranteed window, N2; an item beside a spinning NCCL kernel without independent
    /// progress, S1; a broadcast root finishing early) is never taken, as a platform that withholds it forever would
    /// have it. Such a run can deadlock where the generous one completed ([`TimedRun::unguaranteed`]). Its
    /// [`TimedRun::spans`] and [`TimedRun::flows`] hold only what was unfinished at its end (it is run for its
    /// outcome).
    pub withhold: bool,
    /// The stop flag and counters of whoever watches the run (`cuorder time`'s Ctrl-C handler and progress bar): the
    /// run stops when the flag is set ([`Outcome::Interrupted`]; read before every step) and publishes its steps
    /// taken every [`crate::run::PUBLISH_EVERY`] steps. `None`: nobody watches.
    pub stop: Option<std::sync::Arc<crate::progress::Progress>>,
}

/// How many steps a timed run takes between two looks at the clock for [`TimedOptions::max_time`].
pub const TIME_CHECK_EVERY: usize = 4096;

impl Default for TimedOptions {
    fn default() -> Self {
        TimedOptions { seed: 0, jitter_ns: 0, max_steps: 100_000_000, max_time: None, clock_start: None, withhold: false, stop: None }
    }
}

/// Bytes a memcpy moves per second between these two memory kinds.
fn copy_bandwidth(costs: &CostModel, dst: MemSpace, src: MemSpace) -> u64 {
    use MemSpace::*;
    match (dst, src) {
        (Device, Device) => costs.copy_device_bytes_per_s,
        (Device, PinnedHost) | (PinnedHost, Device) => costs.copy_pinned_bytes_per_s,
        (Device, PageableHost) | (PageableHost, Device) => costs.copy_pageable_bytes_per_s,
        _ => costs.copy_host_bytes_per_s,
    }
}

/// The cost of `step` in `st`, ns (before jitter): see [`CostModel`]'s fields for what each figure covers.
pub fn step_cost(sem: &Semantics, costs: &CostModel, st: &State, step: &Step) -> u64 {
    if costs.logical {
        return 1;
    }
    let bytes_of = |loc: OpLoc| match &sem.op(loc).kind {
        OpKind::Send { buf, .. } | OpKind::Recv { buf, .. } => buf.len,
        _ => 0,
    };
    match step {
        Step::Host { thread, .. } => {
            let t = &st.host.threads[*thread as usize];
            if t.wait.is_some() {
                return costs.wakeup_ns;
            }
            match &sem.op(OpLoc { thread: *thread, op: t.pc }).kind {
                OpKind::Kernel { .. } | OpKind::Memset { .. } | OpKind::Memcpy { .. } | OpKind::HostFunc { .. } => costs.launch_ns,
                OpKind::EventRecord { .. } => costs.event_record_ns,
                OpKind::StreamWaitEvent { .. } => costs.event_wait_ns,
                OpKind::HostSleep { ns } => *ns,
                OpKind::HostAccess { range, .. } => transfer_ns(range.len, costs.copy_host_bytes_per_s),
                // V1: a value assertion costs the read it makes: a kernel launch, or a host read.
                OpKind::Expect { stream: Some(_), .. } => costs.launch_ns,
                OpKind::Expect { range, stream: None, .. } => transfer_ns(range.len, costs.copy_host_bytes_per_s),
                OpKind::EventQuery { .. }
                | OpKind::EventSynchronize { .. }
                | OpKind::StreamSynchronize { .. }
                | OpKind::StreamQuery { .. }
                | OpKind::DeviceSynchronize { .. }
                | OpKind::Barrier { .. }
                | OpKind::CommInit { .. }
                | OpKind::CommSplit { .. }
                | OpKind::CommPoll { .. }
                | OpKind::CommAbort { .. }
                | OpKind::CommFinalize { .. }
                | OpKind::CommDestroy { .. }
                | OpKind::Send { .. }
                | OpKind::Recv { .. }
                | OpKind::GroupStart
                | OpKind::GroupEnd
                | OpKind::Collective { .. }
                | OpKind::Alloc { .. }
                | OpKind::Free { .. }
                | OpKind::RecordStream { .. }
                | OpKind::CudaFree { .. }
                | OpKind::CudaMalloc { .. }
                | OpKind::CudaMallocHost { .. }
                | OpKind::LoadModule { .. }
                | OpKind::EmptyCache { .. } => costs.host_call_ns,
            }
        }
        Step::Item(k) => {
            let item = st.item(*k);
            let op = &sem.op(k.loc()).kind;
            match (&item.kind, op) {
                (ItemKind::Work, OpKind::Kernel { duration_ns, reads, writes, .. }) => {
                    // A kernel takes its duration, but never less than touching its ranges takes at the cost model's
                    // kernel bandwidths (the format's default duration, 10 us, is far too short for GiB buffers).
                    let r: u64 = reads.iter().map(|x| x.len).sum();
                    let w: u64 = writes.iter().map(|x| x.len).sum();
                    let d = (*duration_ns)
                        .max(transfer_ns(r, costs.kernel_read_bytes_per_s).saturating_add(transfer_ns(w, costs.kernel_write_bytes_per_s)));
                    costs.item_overhead_ns.saturating_add(d)
                }
                (ItemKind::Work, OpKind::Memset { dst, .. }) => {
                    costs.item_overhead_ns.saturating_add(transfer_ns(dst.len, costs.copy_device_bytes_per_s))
                }
                (ItemKind::Work | ItemKind::StagedCopy, OpKind::Memcpy { dst, src, .. }) => {
                    let space = |b| sem.program.buffer(b).space;
                    let bw = copy_bandwidth(costs, space(dst.buf), space(src.buf));
                    costs.item_overhead_ns.saturating_add(transfer_ns(dst.len, bw))
                }
                // A host function runs on the driver's callback thread for its duration (S8).
                (ItemKind::Work, OpKind::HostFunc { duration_ns, .. }) => costs.item_overhead_ns.saturating_add(*duration_ns),
                (ItemKind::Work, OpKind::Expect { range, .. }) => {
                    costs.item_overhead_ns.saturating_add(transfer_ns(range.len, costs.kernel_read_bytes_per_s))
                }
                (ItemKind::Launch { .. }, _) => costs.nccl_launch_ns,
                _ => 0,
            }
        }
        Step::Transfer { send, recv } => {
            costs.link(sem.acting_rank(*send), sem.acting_rank(*recv)).time_ns(bytes_of(*send))
        }
        Step::Eager { send } => {
            let peer = match &sem.op(*send).kind {
                OpKind::Send { peer, .. } => *peer,
                _ => sem.acting_rank(*send),
            };
            costs.link(sem.acting_rank(*send), peer).time_ns(bytes_of(*send))
        }
        Step::Drain { .. } => 0,
        Step::Collective { comm, seq } | Step::RootEarly { comm, seq } => {
            let Some(parts) = st.nccl.coll.get(&(*comm, *seq)) else { return 0 };
            let Some(at) = parts.values().next() else { return 0 };
            let loc = st.comm_op(*at).1.loc;
            let OpKind::Collective { kind, send, recv, .. } = &sem.op(loc).kind else { return 0 };
            let bytes = kind.agreed_bytes(send.len, recv.len);
            if matches!(step, Step::RootEarly { .. }) {
                let members = &sem.program.comms[comm.0 as usize].members;
                let root = kind.root().unwrap_or(0);
                let far = members.iter().copied().max_by_key(|m| costs.link(root, *m).latency_ns).unwrap_or(root);
                return costs.link(root, far).time_ns(bytes);
            }
            let mut members = sem.program.comms[comm.0 as usize].members.clone();
            members.sort_unstable();
            costs.collective_ns(*kind, &members, bytes)
        }
        Step::Connect { a, comm, ra, rb, .. } => {
            // Per direction set up (a grouped send/recv pair sets up two at once).
            let dirs = match &st.host.threads[*a as usize].wait {
                Some(cuorder_model::semantics::Wait::Connect { need, .. }) => need.get(&(*comm, *ra, *rb)).map_or(1, |d| d.len()),
                _ => 1,
            };
            costs.connect_ns.saturating_mul(dirs.max(1) as u64)
        }
        // N9: the watchdog fires its timeout after the hang (timed runs measure it from the oldest unfinished work:
        // `timed_run`).
        Step::Watchdog { rank } => sem.watchdog_due(st, *rank).map_or(0, |(ns, _)| ns),
    }
}

/// How an item is drawn: `None` for event records and wait markers (they take no time on their stream).
fn span_kind(sem: &Semantics, kind: &ItemKind, k: ItemKey) -> Option<SpanKind> {
    match (kind, &sem.op(k.loc()).kind) {
        (ItemKind::Launch { .. }, _) => Some(SpanKind::Nccl),
        (ItemKind::Work, OpKind::Kernel { .. }) => Some(SpanKind::Kernel),
        (ItemKind::Work, OpKind::HostFunc { .. }) => Some(SpanKind::HostFunc),
        (ItemKind::Work | ItemKind::StagedCopy, _) => Some(SpanKind::Copy),
        (ItemKind::Record | ItemKind::WaitMarker, _) => None,
    }
}

/// Builds spans, flows and race marks from applied steps and their fire times.
struct Recorder {
    spans: Vec<Span>,
    flows: Vec<Flow>,
    race_marks: Vec<RaceMark>,
    /// Races in the order they were found.
    races: Vec<Race>,
    /// Keys of the races recorded ([`Race::key`]: one per pair of ops and buffers, as `check` counts them).
    races_seen: std::collections::BTreeSet<(OpLoc, OpLoc, cuorder_model::program::BufRef, cuorder_model::program::BufRef)>,
    stale: Vec<StaleMark>,
    /// Start time of items that started and have not ended.
    item_start: HashMap<ItemKey, u64>,
    /// End time and stream of ended event records (for record→wait flows).
    record_end: HashMap<ItemKey, (u64, StreamRef)>,
    /// Per host thread: the start of a blocking call in progress and its op index.
    blocked_since: Vec<Option<(u64, u32)>>,
    /// Eager deliveries not yet drained: send op → (lane, rank, time).
    eager: HashMap<OpLoc, (Lane, RankId, u64)>,
    /// Whether some communicator has a watchdog (N9); if so, `issued` holds, for each unended launch on such a
    /// communicator, the call that issued it and when that call began and returned, and `overdue` the launches
    /// found unfinished when due.
    watched: bool,
    issued: HashMap<ItemKey, (OpLoc, u64, u64)>,
    /// For NCCL calls on watched communicators: when each began and returned (work a non-blocking communicator
    /// deferred is enqueued by a later `Poll`, but timed from its call; N12).
    calls: HashMap<OpLoc, (u64, u64)>,
    /// When a rank's communicator was aborted (its watchdog, N9, or `CommAbort`, N13): its launches end there as far
    /// as ProcessGroupNCCL's watchdog is concerned, whenever the model ends them.
    aborted_at: HashMap<(cuorder_model::program::CommId, RankId), u64>,
    overdue: Vec<Overdue>,
}

impl Recorder {
    fn new(sem: &Semantics) -> Recorder {
        Recorder {
            spans: vec![],
            flows: vec![],
            race_marks: vec![],
            races: vec![],
            races_seen: Default::default(),
            stale: vec![],
            item_start: HashMap::default(),
            record_end: HashMap::default(),
            blocked_since: vec![None; sem.thread_of.len()],
            watched: sem.watched(),
            issued: HashMap::default(),
            calls: HashMap::default(),
            aborted_at: HashMap::default(),
            overdue: vec![],
            eager: HashMap::default(),
        }
    }

    /// Drops the ends of event records the state has forgotten: a record is kept while a wait that may still start
    /// binds to it (an event's binding or an unended wait marker's dependency names it; `forget.rs`), and a flow is
    /// drawn when the wait starts, so a forgotten record draws none. (They were kept to the end: 35 MB of a 1,024 x
    /// 64 pipeline's run.)
    fn forget(&mut self, st: &State) {
        self.record_end.retain(|k, _| st.streams.items.contains_key(k));
    }

    /// The lane (first stream) and rank of an item.
    fn item_lane(st: &State, k: ItemKey) -> (Lane, RankId) {
        let s = st.item(k).streams[0];
        (Lane::Stream(s), s.rank)
    }

    /// Records `step`, fired at `t` after costing `cost` ns, given the stepping thread's pc and wait before it.
    #[allow(clippy::too_many_arguments)]
    fn record(
        &mut self,
        sem: &Semantics,
        before: Option<(u32, bool)>,
        step: &Step,
        fx: &cuorder_model::semantics::Effects,
        st: &State,
        t: u64,
        cost: u64,
        overhead: u64,
    ) {
        if let (Step::Host { thread, .. }, Some((pc, waiting))) = (step, before) {
            let th = *thread as usize;
            let lane = Lane::Thread(*thread);
            let op = OpLoc { thread: *thread, op: pc };
            // When the call began (a blocking call: its first step).
            let mut call_ns = t - cost;
            if waiting {
                if let Some((since, pc0)) = self.blocked_since[th].take() {
                    call_ns = since;
                    let op = OpLoc { thread: *thread, op: pc0 };
                    self.spans.push(Span { lane, op, kind: SpanKind::HostBlocked, start_ns: since, end_ns: t, answer: None, unfinished: false });
                }
            } else if st.host.threads[th].wait.is_some() {
                self.blocked_since[th] = Some((t - cost, pc));
            } else {
                self.spans.push(Span { lane, op, kind: SpanKind::HostCall, start_ns: t - cost, end_ns: t, answer: fx.answer, unfinished: false });
            }
            // N9: the launches this call issued on watched communicators, once it has returned (`Overdue`).
            if self.watched && st.host.threads[th].wait.is_none() {
                let watched = |c: cuorder_model::program::CommId| sem.program.comms[c.0 as usize].watchdog_ns.is_some();
                let info = sem.info(op);
                let nccl_call = matches!(info.nccl, Some(NcclRole::Send { .. } | NcclRole::Recv { .. } | NcclRole::Collective { .. }));
                if nccl_call && info.comm.is_some_and(watched) {
                    self.calls.insert(op, (call_ns, t));
                }
                // An NCCL call or a group's end issues its launches itself; a `Poll` enqueues deferred work (N12),
                // which is timed from the first of its NCCL calls.
                let issuer = nccl_call || matches!(sem.op(op).kind, OpKind::GroupEnd);
                for (k, item) in st.streams.items.subs(*thread, pc) {
                    if let ItemKind::Launch { comm, ops, .. } = &item.kind {
                        if watched(*comm) && item.status != ItemStatus::Done && !self.issued.contains_key(k) {
                            let deferred = if issuer { None } else { ops.iter().filter_map(|o| self.calls.get(&o.loc).map(|c| (c.0, c.1, o.loc))).min() };
                            let at = deferred.map_or((op, call_ns, t), |(start, ret, loc)| (loc, start, ret));
                            self.issued.insert(*k, at);
                        }
                    }
                }
            }
        }
        // When an item this step starts begins: a finite item's step fires at its end, after the launch overhead and
        // its duration; an NCCL launch's step is its start.
        let start_of = |k: ItemKey| {
            let finite = !matches!(st.item(k).kind, ItemKind::Launch { .. });
            if finite {
                (t - cost + overhead.min(cost)).min(t)
            } else {
                t
            }
        };
        for k in &fx.started {
            let item = st.item(*k);
            let start = start_of(*k);
            self.item_start.insert(*k, start);
            if item.kind == ItemKind::WaitMarker {
                let (to, to_rank) = Self::item_lane(st, *k);
                for d in &item.deps {
                    if let Some(&(from_ns, s)) = self.record_end.get(d) {
                        let (from, from_rank) = (Lane::Stream(s), s.rank);
                        self.flows.push(Flow { kind: FlowKind::RecordWait, from, from_rank, from_ns, to, to_rank, to_ns: start });
                    }
                }
            }
        }
        if self.watched {
            let aborted: Vec<(cuorder_model::program::CommId, RankId)> = match (step, before) {
                (Step::Watchdog { rank }, _) => sem.watched_comms(*rank).map(|(c, _)| (c, *rank)).collect(),
                (Step::Host { thread, .. }, Some((pc, _))) => match sem.op(OpLoc { thread: *thread, op: pc }).kind {
                    OpKind::CommAbort { comm } => vec![(comm, sem.rank_of(*thread))],
                    _ => vec![],
                },
                _ => vec![],
            };
            for a in aborted {
                self.aborted_at.entry(a).or_insert(t);
            }
        }
        for k in &fx.ended {
            let item = st.item(*k);
            let start = self.item_start.remove(k).unwrap_or(t);
            if let Some(o) = self.overdue_if_late(sem, st, *k, t, false) {
                // A launch the model's watchdog aborts later is overdue too if it was due before the abort (a hang
                // that began after it was due; N9).
                self.overdue.push(o);
            }
            if item.kind == ItemKind::Record {
                self.record_end.insert(*k, (t, item.streams[0]));
            }
            let kind = span_kind(sem, &item.kind, *k);
            if let Some(kind) = kind {
                for s in &item.streams {
                    self.spans.push(Span { lane: Lane::Stream(*s), op: k.loc(), kind, start_ns: start, end_ns: t, answer: None, unfinished: false });
                }
            }
        }
        let lane_of_op = |loc: OpLoc| -> (Lane, RankId) {
            let info = sem.info(loc);
            match info.stream {
                Some(s) => (Lane::Stream(s), s.rank),
                None => (Lane::Thread(loc.thread), sem.rank_of(loc.thread)),
            }
        };
        match step {
            Step::Transfer { send, recv } => {
                let (from, from_rank) = lane_of_op(*send);
                let (to, to_rank) = lane_of_op(*recv);
                self.flows.push(Flow { kind: FlowKind::SendRecv, from, from_rank, from_ns: t - cost, to, to_rank, to_ns: t });
            }
            Step::Eager { send } => {
                let (from, from_rank) = lane_of_op(*send);
                self.eager.insert(*send, (from, from_rank, t - cost));
            }
            Step::Drain { recv } => {
                // The send this recv drained: the P2P table entry with the recv's key, sender's side (N3).
                let (launch, idx) = sem.find_comm_op(st, *recv);
                let peer_send = match (&st.item(launch).kind, st.comm_op((launch, idx)).1.kind) {
                    (ItemKind::Launch { comm, .. }, CommOpKind::Recv { peer, seq }) => {
                        st.nccl.p2p.get(&P2pKey { comm: *comm, src: peer, dst: sem.acting_rank(*recv), seq, recv: false })
                    }
                    _ => None,
                };
                let (to, to_rank) = lane_of_op(*recv);
                let from = peer_send.map(|at| st.comm_op(*at).1.loc).and_then(|s| self.eager.remove(&s));
                if let Some((from, from_rank, from_ns)) = from {
                    self.flows.push(Flow { kind: FlowKind::SendRecv, from, from_rank, from_ns, to, to_rank, to_ns: t });
                }
            }
            _ => {}
        }
        // V1: failed value assertions stay in the state; a new one is found by this step.
        if st.memory.stale.len() > self.stale.len() {
            for r in &st.memory.stale {
                if !self.stale.iter().any(|m| m.read == *r) {
                    self.stale.push(StaleMark { read: r.clone(), at_ns: t });
                }
            }
        }
        if fx.races > 0 {
            let host_op = match (step, before) {
                (Step::Host { thread, .. }, Some((pc, _))) => Some(OpLoc { thread: *thread, op: pc }),
                _ => None,
            };
            for r in &st.memory.races {
                if self.races_seen.insert(r.key()) {
                    let here = |a: &cuorder_model::semantics::Access| match a.who {
                        Accessor::Item { item, .. } => fx.started.contains(&item).then(|| (start_of(item), Self::item_lane(st, item).0)),
                        Accessor::Host { loc } => (Some(loc) == host_op).then_some((t - cost, Lane::Thread(loc.thread))),
                    };
                    // One of the two accesses is this step's (the race is found when the later one in the model's
                    // order starts); the other started earlier in the model's order, not necessarily in time.
                    let (now, other) = match (here(&r.first), here(&r.second)) {
                        (_, Some(x)) => (x, &r.first),
                        (Some(x), None) => (x, &r.second),
                        (None, None) => ((t - cost, Self::access_lane(sem, st, &r.second)), &r.first),
                    };
                    let (at_ns, lane) = match self.later_start(st, other, now.0) {
                        Some(x) => x,
                        None => now,
                    };
                    self.race_marks.push(RaceMark { race: self.races.len(), at_ns, lane });
                    self.races.push(r.clone());
                }
            }
        }
    }

    /// The [`Overdue`] record of launch `k`, ending (or still running, `unfinished`) at `t`, if it was issued on a
    /// watched communicator and ProcessGroupNCCL's watchdog would have fired before `t`; forgets its issue.
    fn overdue_if_late(&mut self, sem: &Semantics, st: &State, k: ItemKey, t: u64, unfinished: bool) -> Option<Overdue> {
        let (op, issued_ns, returned_ns) = self.issued.remove(&k)?;
        let item = st.streams.items.get(&k)?;
        let ItemKind::Launch { comm, .. } = &item.kind else { return None };
        let timeout_ns = sem.program.comms[comm.0 as usize].watchdog_ns?;
        let o = Overdue { item: k, op, rank: item.rank(), stream: item.streams[0], comm: *comm, issued_ns, returned_ns, ended_ns: t, unfinished, timeout_ns };
        // Overdue if ProcessGroupNCCL's check finds it unfinished: before it ended (or before an abort of its
        // communicator ended it first), or at the moment the run stopped with it still running.
        let until = self.aborted_at.get(&(*comm, item.rank())).map_or(t, |&a| a.min(t));
        let late = if unfinished { until >= o.fires_ns() } else { until > o.fires_ns() };
        late.then_some(o)
    }

    /// Draws the work still in progress at `end` ns (the run stopped): every started item that has not ended, and every
    /// host call still blocked, as an unfinished span to `end`, so a hang shows where it is (items by key, threads by
    /// id: the same bytes every time); and records the watched launches still running then that were due by then.
    fn close_unfinished(&mut self, sem: &Semantics, st: &State, end: u64) {
        let mut waiting: Vec<ItemKey> = self.issued.keys().copied().collect();
        waiting.sort_unstable();
        for k in waiting {
            if let Some(o) = self.overdue_if_late(sem, st, k, end, true) {
                self.overdue.push(o);
            }
        }
        let mut items: Vec<(ItemKey, u64)> = self.item_start.iter().map(|(k, t)| (*k, *t)).collect();
        items.sort_unstable();
        for (k, start) in items {
            let Some(item) = st.streams.items.get(&k) else { continue };
            let Some(kind) = span_kind(sem, &item.kind, k) else { continue };
            for s in &item.streams {
                self.spans.push(Span { lane: Lane::Stream(*s), op: k.loc(), kind, start_ns: start, end_ns: end, answer: None, unfinished: true });
            }
        }
        for (th, b) in self.blocked_since.iter().enumerate() {
            if let Some((since, pc)) = *b {
                let thread = th as u32;
                let op = OpLoc { thread, op: pc };
                self.spans.push(Span { lane: Lane::Thread(thread), op, kind: SpanKind::HostBlocked, start_ns: since, end_ns: end, answer: None, unfinished: true });
            }
        }
    }

    /// The lane of an access: its item's first stream, or its host thread.
    fn access_lane(sem: &Semantics, st: &State, a: &cuorder_model::semantics::Access) -> Lane {
        match a.who {
            Accessor::Item { item, loc } => {
                if st.streams.items.contains_key(&item) {
                    Self::item_lane(st, item).0
                } else {
                    sem.info(loc).stream.map_or(Lane::Thread(loc.thread), Lane::Stream)
                }
            }
            Accessor::Host { loc } => Lane::Thread(loc.thread),
        }
    }

    /// When and where access `a` started, if that was after `after` ns (it still runs, or its span ended at or after
    /// `after`): spans are recorded in the order they end, so only those that ended at or after `after` are read.
    fn later_start(&self, st: &State, a: &cuorder_model::semantics::Access, after: u64) -> Option<(u64, Lane)> {
        if let Accessor::Item { item, .. } = a.who {
            if let Some(&ns) = self.item_start.get(&item) {
                return (ns > after).then(|| (ns, Self::item_lane(st, item).0));
            }
        }
        let loc = a.who.loc();
        self.spans
            .iter()
            .rev()
            .take_while(|sp| sp.end_ns >= after)
            .find(|sp| sp.op == loc)
            .filter(|sp| sp.start_ns > after)
            .map(|sp| (sp.start_ns, sp.lane))
    }
}

/// What a timed execution has done so far: the steps, when each fired, what enabled it, and the recorder.
struct Log {
    rec: Recorder,
    schedule: Vec<Step>,
    times: Vec<u64>,
    meta: Vec<StepMeta>,
    /// [`TimedRun::unguaranteed`].
    unguaranteed: (u64, Option<u32>),
}

impl Log {
    fn new(sem: &Semantics) -> Log {
        Log { rec: Recorder::new(sem), schedule: vec![], times: vec![], meta: vec![], unguaranteed: (0, None) }
    }

    /// Applies `step` to `st` at time `t` (it cost `cost` ns and became enabled after step `by`) and records it.
    #[allow(clippy::too_many_arguments)]
    fn fire(&mut self, sem: &Semantics, costs: &CostModel, st: &mut State, step: Step, t: u64, cost: u64, by: Option<u32>) {
        let before = match &step {
            Step::Host { thread, .. } => {
                let th = &st.host.threads[*thread as usize];
                Some((th.pc, th.wait.is_some()))
            }
            _ => None,
        };
        let overhead = if matches!(step, Step::Item(_)) { costs.item_overhead_ns } else { 0 };
        let fx = sem.apply(st, &step);
        self.rec.record(sem, before, &step, &fx, st, t, cost, overhead);
        self.schedule.push(step);
        self.times.push(t);
        self.meta.push(StepMeta::new(by, before));
    }

    fn finish(self, sem: &Semantics, costs: &CostModel, (seed, jitter_ns): (u64, u64), makespan_ns: u64, outcome: Outcome) -> TimedRun {
        TimedRun {
            replayed: false,
            settings: vec![],
            program: sem.program.name.clone(),
            profile: sem.profile.name.clone(),
            costs: costs.name.clone(),
            seed,
            jitter_ns,
            schedule: self.schedule,
            makespan_ns,
            times_ns: self.times,
            meta: self.meta,
            spans: self.rec.spans,
            flows: self.rec.flows,
            races: self.rec.races,
            race_marks: self.rec.race_marks,
            stale: self.rec.stale,
            overdue: {
                let mut o = self.rec.overdue;
                o.sort_by_key(|o| (o.fires_ns(), o.item));
                o
            },
            outcome,
            unguaranteed: self.unguaranteed,
            withheld: Withheld::NotRun,
        }
    }
}

/// Runs `sem`'s program once, timed by `costs` (module docs).
///
/// The engine keeps the enabled steps by rank ([`Semantics::enabled_for_rank`]) and recomputes, after each step,
/// only the ranks near the ones it wrote ([`Semantics::step_ranks`], [`cuorder_model::semantics::incremental`]);
/// pending steps wait in a heap ordered by (fire time, a tie-breaking draw made from the seed when the step became
/// enabled). A step costs O(work of the ranks it touches), not O(ranks).
pub fn timed_run(sem: &Semantics, costs: &CostModel, opt: &TimedOptions) -> TimedRun {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let started = opt.clock_start.unwrap_or_else(std::time::Instant::now);
    let mut rng = Rng::new(opt.seed);
    let mut st = sem.initial();
    let mut log = Log::new(sem);
    let groups = sem.rank_groups();
    let nranks = sem.program.ranks.len();
    let mut mark = vec![false; nranks];
    let mut affected: Vec<RankId> = vec![];
    // Per rank: the enabled steps it owns (first outcome of every nondeterministic host call; module docs), or only
    // its host steps (`host_only`), into `v` (cleared first).
    let owned_of = |st: &State, r: RankId, host_only: bool, v: &mut Vec<Step>| {
        v.clear();
        if host_only {
            sem.host_steps_for_rank(st, r, v);
        } else {
            sem.enabled_for_rank(st, r, v);
        }
        v.retain(|s| !matches!(s, Step::Host { choice, .. } if *choice != 0));
        if opt.withhold {
            v.retain(|s| !sem.starvable(st, s));
        }
    };
    let owned = |st: &State, r: RankId, v: &mut Vec<Step>| owned_of(st, r, false, v);
    // Per rank: its pending steps (the enabled steps it owns, less the one just fired), each with its fire time and
    // tie-breaking draw, in two lists: host steps ([`part`] 0) and the others (1), so that a recompute of the host
    // steps alone reads only the first (a collective's first use lists a set-up with every other member in the
    // second). A heap entry is current while its rank still holds the step with the same time and draw.
    let mut cache: Vec<[Vec<Slot>; 2]> = vec![[vec![], vec![]]; nranks];
    // The steps of the rank being recomputed, and the buffers its new slots go to (they swap with the old lists).
    let mut new: Vec<Step> = vec![];
    let mut next: [Vec<Slot>; 2] = [vec![], vec![]];
    let mut index: HashMap<Step, usize> = HashMap::default();
    // Which of a quiet recompute's host steps its rank already held.
    let mut kept: Vec<bool> = vec![];
    let mut with: Vec<(RankId, Step)> = vec![];
    let mut plan: Vec<(RankId, Option<Step>)> = vec![];
    // (fire time, tie draw, step, rank, where the slot was put in its rank's list: a hint that saves the search when
    // the slot has not moved since, as most have not; the hint never decides the order, the draws are distinct).
    let mut heap: BinaryHeap<Reverse<(u64, u64, Step, RankId, u32)>> = BinaryHeap::new();
    let mut now = 0u64;
    let mut forget = crate::strategy::ForgetClock::new(sem);
    #[allow(clippy::too_many_arguments)]
    let add = |st: &State, s: Step, r: RankId, at: usize, now: u64, last: Option<u32>, rng: &mut Rng, heap: &mut BinaryHeap<Reverse<(u64, u64, Step, RankId, u32)>>| {
        let mut c = step_cost(sem, costs, st, &s);
        if opt.jitter_ns > 0 {
            c = c.saturating_add(rng.below(opt.jitter_ns.saturating_add(1).max(1)));
        }
        let tie = rng.below(u64::MAX);
        let p = Pending { fire: now.saturating_add(c), cost: c, by: last };
        heap.push(Reverse((p.fire, tie, s.clone(), r, at as u32)));
        Slot { step: s, p, tie }
    };
    for r in 0..nranks as RankId {
        owned(&st, r, &mut new);
        for s in new.drain(..) {
            let list = &mut cache[r as usize][part(&s)];
            list.push(add(&st, s, r, list.len(), 0, None, &mut rng, &mut heap));
        }
    }
    let outcome = loop {
        if let Some(u) = &st.undefined {
            break Outcome::Undefined(u.clone());
        }
        // The earliest pending step (heap entries of steps disabled or re-enabled since are stale). It leaves its
        // rank's list: if it is enabled again after it fires, it is a new pending step.
        let next_step = loop {
            match heap.pop() {
                None => break None,
                Some(Reverse((fire, tie, s, r, at))) => {
                    let list = &mut cache[r as usize][part(&s)];
                    // Where the slot was put, else a search with the draw compared first: it tells slots apart at
                    // the cost of one comparison (a collective's first use lists a set-up with every other member).
                    let current = |x: &Slot| x.tie == tie && x.p.fire == fire && x.step == s;
                    let hint = list.get(at as usize).is_some_and(current).then_some(at as usize);
                    if let Some(i) = hint.or_else(|| list.iter().position(current)) {
                        break Some(list.swap_remove(i));
                    }
                }
            }
        };
        let (step, p) = match next_step {
            Some(slot) => (slot.step, slot.p),
            // N9: nothing left to do; a watchdog fires its timeout after the oldest unfinished work it watches began.
            None => match watchdog_at(sem, &st, &log, now) {
                Some(x) => x,
                // Withholding, the state can be stuck only because the platform withholds what it may (`explain`'s
                // `starved`).
                None => break if sem.is_complete(&st) { Outcome::Completed } else { Outcome::Deadlock(sem.explain(&st, opt.withhold)) },
            },
        };
        if log.schedule.len() >= opt.max_steps {
            break Outcome::StepLimit(opt.max_steps);
        }
        if let Some(limit) = opt.max_time {
            let steps = log.schedule.len();
            if steps % TIME_CHECK_EVERY == 0 && started.elapsed() > limit {
                break Outcome::TimeLimit { steps, limit_ms: limit.as_millis().try_into().unwrap_or(u64::MAX) };
            }
        }
        if let Some(p) = &opt.stop {
            let steps = log.schedule.len();
            if p.stop_requested() {
                break Outcome::Interrupted { steps };
            }
            if steps.is_multiple_of(crate::run::PUBLISH_EVERY) {
                p.set_steps(steps as u64);
            }
        }
        let t = p.fire.max(now);
        let written = sem.step_ranks(&st, &step);
        let local = sem.rank_local_step(&st, &step);
        let host_only = sem.host_only(&st, &step);
        let connect_only = sem.connect_only(&st, &step);
        let call_only = sem.collective_call_only(&st, &step);
        let listers = sem.collective_listers(&st, &step);
        let (caller, started_item) = match step {
            Step::Host { thread, .. } => (Some(thread), None),
            Step::Item(k) => (None, Some(k)),
            _ => (None, None),
        };
        if sem.starvable(&st, &step) {
            log.unguaranteed.0 += 1;
            log.unguaranteed.1.get_or_insert(log.schedule.len() as u32);
        }
        log.fire(sem, costs, &mut st, step, t, p.cost.min(t), p.by);
        if opt.withhold {
            // What a withholding run is for is its outcome (`cuorder time` runs it beside the generous run, whose
            // spans the report draws): its spans and flows are not kept, which saves their memory.
            log.rec.spans.clear();
            log.rec.flows.clear();
        }
        now = t;
        let last = Some(log.schedule.len() as u32 - 1);
        // What to do, rank by rank in ascending order (as a full recomputation would add new steps): recompute the
        // rank (`None`), or add one step to it.
        plan.clear();
        match (call_only, caller) {
            // A collective call (or its return from set-up) changes its own rank, and other ranks only by the
            // set-ups they list with its thread (`Semantics::collective_call_only`).
            (Some(home), Some(thread)) => {
                with.clear();
                sem.connect_steps_with(&st, thread, &mut with);
                let at = with.partition_point(|(r, _)| *r < home);
                plan.extend(with.drain(..at).map(|(r, s)| (r, Some(s))));
                plan.push((home, None));
                plan.extend(with.drain(..).map(|(r, s)| (r, Some(s))));
            }
            _ => {
                match connect_only {
                    // A connection set-up changes only its two threads' host steps (and is itself no longer enabled:
                    // it left its rank's list when it was popped; `Semantics::connect_only`).
                    Some(pair) => {
                        affected.clear();
                        affected.extend_from_slice(&pair);
                        affected.sort_unstable();
                        affected.dedup();
                    }
                    None => match &listers {
                        // A collective launch's start changes its rank, and the ranks that list its collectives'
                        // completions before or after it (`Semantics::collective_listers`).
                        Some(before) => {
                            affected.clear();
                            affected.extend_from_slice(before);
                            affected.extend(started_item.and_then(|k| sem.collective_listers(&st, &Step::Item(k))).into_iter().flatten());
                            affected.sort_unstable();
                            affected.dedup();
                        }
                        None => groups.affected_by_step(&written, local, &mut mark, &mut affected),
                    },
                }
                plan.extend(affected.iter().map(|&r| (r, None)));
            }
        }
        for (r, step) in plan.drain(..) {
            if let Some(s) = step {
                let list = &mut cache[r as usize][part(&s)];
                list.push(add(&st, s, r, list.len(), now, last, &mut rng, &mut heap));
                continue;
            }
            // The step's own rank keeps its item, communication and connection steps when the step could change
            // only its host steps (`Semantics::host_only`).
            let quiet = call_only.is_none() && (host_only == Some(r) || connect_only.is_some());
            owned_of(&st, r, quiet, &mut new);
            if quiet {
                // Only the host steps change: their list is updated in place, the other list is not read. The order
                // of a list does not matter (the heap orders the steps); new steps draw in the order they are listed.
                let list = &mut cache[r as usize][0];
                kept.clear();
                kept.resize(new.len(), false);
                let mut i = 0;
                while i < list.len() {
                    match new.iter().position(|s| *s == list[i].step) {
                        Some(j) => {
                            kept[j] = true;
                            i += 1;
                        }
                        None => {
                            list.swap_remove(i);
                        }
                    }
                }
                for (s, _) in new.drain(..).zip(&kept).filter(|(_, k)| !**k) {
                    list.push(add(&st, s, r, list.len(), now, last, &mut rng, &mut heap));
                }
                continue;
            }
            let old = &cache[r as usize];
            next[0].clear();
            next[1].clear();
            // A long list (a collective's first use lists a set-up with every other member) is looked up by hash.
            let long = old[1].len() > 16;
            if long {
                index.clear();
                index.extend(old[1].iter().enumerate().map(|(i, x)| (x.step.clone(), i)));
            }
            for s in new.drain(..) {
                let k = part(&s);
                let found = if k == 1 && long { index.get(&s).map(|&i| &old[1][i]) } else { old[k].iter().find(|x| x.step == s) };
                match found {
                    Some(x) => next[k].push(x.clone()),
                    None => {
                        let at = next[k].len();
                        next[k].push(add(&st, s, r, at, now, last, &mut rng, &mut heap));
                    }
                }
            }
            std::mem::swap(&mut cache[r as usize], &mut next);
        }
        if forget.step(sem, &mut st) {
            log.rec.forget(&st);
        }
    };
    // A run stopped at a limit leaves kernels and copies running: their step (their end) is still pending. They
    // began when their step was enabled, after the launch overhead (as `Log::fire` draws them), and are drawn to
    // the end of the run, unfinished (a trial's `--max-steps 500` report showed r0's running 1 ms kernel nowhere).
    let mut running: Vec<(ItemKey, u64)> = cache
        .iter()
        .flat_map(|lists| lists[1].iter())
        .filter_map(|slot| match slot.step {
            Step::Item(k) if !matches!(st.item(k).kind, ItemKind::Launch { .. }) => {
                Some((k, (slot.p.fire - slot.p.cost).saturating_add(costs.item_overhead_ns.min(slot.p.cost))))
            }
            _ => None,
        })
        .filter(|&(_, start)| start < now)
        .collect();
    running.sort_unstable();
    log.rec.item_start.extend(running);
    log.rec.close_unfinished(sem, &st, now);
    log.finish(sem, costs, (opt.seed, opt.jitter_ns), now, outcome)
}

/// The first watchdog to fire in a state where nothing else is pending (N9), and when: its timeout after the
/// earliest start (or issue, if none started) of the unfinished launches of its rank, never before `now`.
fn watchdog_at(sem: &Semantics, st: &State, log: &Log, now: u64) -> Option<(Step, Pending)> {
    let by = log.schedule.len().checked_sub(1).map(|i| i as u32);
    sem.watchdogs_if_stuck(st)
        .into_iter()
        .filter_map(|s| {
            let Step::Watchdog { rank } = s else { return None };
            let (timeout, comms) = sem.watchdog_due(st, rank)?;
            // As ProcessGroupNCCL times work (`Overdue`): each unfinished watched launch is due its communicator's
            // timeout after the call that issued it began, or when that call returned if later; the earliest due
            // fires (now at the soonest). A launch whose call was not seen is due its timeout after it started.
            let due = st
                .streams
                .items
                .iter()
                .filter(|(_, i)| i.status != ItemStatus::Done && i.rank() == rank)
                .filter_map(|(k, i)| match &i.kind {
                    ItemKind::Launch { comm, .. } if comms.contains(comm) => {
                        let t = sem.program.comms[comm.0 as usize].watchdog_ns.unwrap_or(timeout);
                        Some(match log.rec.issued.get(k) {
                            Some(&(_, issued, returned)) => watchdog_due_ns(issued, returned, t),
                            None => log.rec.item_start.get(k).copied().unwrap_or(now).saturating_add(t),
                        })
                    }
                    _ => None,
                })
                .min()
                .unwrap_or(now.saturating_add(timeout));
            let fire = due.max(now);
            Some((s, Pending { fire, cost: fire - now, by }))
        })
        .min_by_key(|(s, p)| (p.fire, s.clone()))
}

/// Times a given schedule (an explored execution, a witness): each step fires at the later of its discrete-event
/// time and the previous step's time, so the order is the schedule's. With [`CostModel::logical`] (every step
/// 1 ns) the times are logical.
///
/// Errors: [`crate::run::Diverged`] when a step of the schedule is not enabled where it is replayed.
pub fn timed_replay(sem: &Semantics, costs: &CostModel, schedule: &[Step]) -> Result<TimedRun, crate::run::Diverged> {
    let r = drive_fixed(sem, costs, schedule);
    if let Some(at) = r.schedule.iter().zip(schedule).position(|(a, b)| a != b) {
        return Err(crate::run::Diverged { at, step: schedule[at].clone() });
    }
    if r.schedule.len() < schedule.len() {
        let at = r.schedule.len();
        return Err(crate::run::Diverged { at, step: schedule[at].clone() });
    }
    Ok(r)
}

/// Which of a rank's two pending lists holds `step` (`timed_run`): 0 for host steps, 1 for the others.
fn part(step: &Step) -> usize {
    usize::from(!matches!(step, Step::Host { .. }))
}

/// A pending step of a rank: the step, when it fires and its tie-breaking draw.
#[derive(Clone)]
struct Slot {
    step: Step,
    p: Pending,
    tie: u64,
}

/// Pending enabled step: when it became enabled, after which step, and when it fires.
#[derive(Clone, Copy)]
struct Pending {
    fire: u64,
    cost: u64,
    by: Option<u32>,
}

/// Times a fixed schedule by full enabled sets (one per step): [`timed_replay`].
fn drive_fixed(sem: &Semantics, costs: &CostModel, sched: &[Step]) -> TimedRun {
    let mut st = sem.initial();
    let mut log = Log::new(sem);
    let mut pending: HashMap<Step, Pending> = HashMap::default();
    let mut now = 0u64;
    let mut forget = crate::strategy::ForgetClock::new(sem);
    let outcome = loop {
        let mut enabled = sem.enabled(&st);
        if let Some(u) = &st.undefined {
            break Outcome::Undefined(u.clone());
        }
        if enabled.is_empty() {
            break if sem.is_complete(&st) { Outcome::Completed } else { Outcome::Deadlock(sem.explain(&st, false)) };
        }
        if log.schedule.len() >= sched.len() {
            break Outcome::StepLimit(sched.len());
        }
        let last = log.schedule.len().checked_sub(1).map(|i| i as u32);
        let mut next: HashMap<Step, Pending> = HashMap::with_capacity_and_hasher(enabled.len(), Default::default());
        for s in &enabled {
            let p = match pending.remove(s) {
                Some(p) => p,
                None => {
                    let c = step_cost(sem, costs, &st, s);
                    Pending { fire: now.saturating_add(c), cost: c, by: last }
                }
            };
            next.insert(s.clone(), p);
        }
        pending = next;
        let Some(i) = enabled.iter().position(|s| *s == sched[log.schedule.len()]) else {
            break Outcome::StepLimit(log.schedule.len());
        };
        let step = enabled.swap_remove(i);
        let p = pending.remove(&step).expect("the step is pending");
        // Logical time counts steps: the i-th step happens at time i + 1, whenever it became enabled.
        let t = if costs.logical { now + 1 } else { p.fire.max(now) };
        log.fire(sem, costs, &mut st, step, t, p.cost.min(t), p.by);
        now = t;
        if forget.step(sem, &mut st) {
            log.rec.forget(&st);
        }
    };
    log.rec.close_unfinished(sem, &st, now);
    TimedRun { replayed: true, ..log.finish(sem, costs, (0, 0), now, outcome) }
}

/// Busy and idle time of one stream over `[0, makespan]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamStats {
    pub stream: StreamRef,
    /// Time some item (kernel, copy, NCCL launch) runs on it, ns (union of its spans).
    pub busy_ns: u64,
    /// `makespan − busy`, ns.
    pub idle_ns: u64,
    /// Maximal idle intervals between its first start and last end.
    pub gaps: u32,
    pub longest_gap_ns: u64,
}

/// One rank's compute: the time some kernel runs on any of its streams (union), and the bubble fraction
/// `1 − compute / makespan` (the pipeline bubble: the share of the run in which the rank computes nothing).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RankStats {
    pub rank: RankId,
    pub compute_ns: u64,
    pub bubble_fraction: f64,
}

/// One step of the critical path: the step, when it became enabled and when it fired.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CriticalStep {
    pub step: u32,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// What a step of the critical path spends its time on ([`Summary::critical_parts`]), by the kind of step
/// ([`step_cost`] gives each its cost).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PathPart {
    /// A kernel running on its stream (and an `Expect` value check, timed as a kernel reading its range).
    Kernel,
    /// A memcpy or memset on a stream.
    Copy,
    /// A host function running in stream order (S8).
    HostFunc,
    /// An NCCL launch from reaching the head of its stream to its kernel running (`nccl_launch_ns`), and its end.
    NcclLaunch,
    /// Data moving between ranks: a P2P rendezvous or eager delivery (N2), a collective (C1), a broadcast root
    /// finishing early.
    Transfer,
    /// The lazy set-up of a connection on a communicator's first use between two ranks (N7; `connect_ns` per
    /// direction).
    ConnectionSetup,
    /// A host call (launch, event record or wait, NCCL call, sleep, ...) or a blocked call's return after what it
    /// waited for (`wakeup_ns`).
    Host,
    /// A watchdog's timeout (N9).
    Watchdog,
    /// An event-record or stream-wait marker reaching the head of its stream (costs nothing).
    Marker,
}

impl PathPart {
    /// The part in words, as the text report prints it.
    pub fn label(self) -> &'static str {
        match self {
            PathPart::Kernel => "kernels",
            PathPart::Copy => "copies and memsets",
            PathPart::HostFunc => "host functions (S8)",
            PathPart::NcclLaunch => "NCCL launches",
            PathPart::Transfer => "NCCL transfers and collectives",
            PathPart::ConnectionSetup => "connection set-up (N7)",
            PathPart::Host => "host calls and wake-ups",
            PathPart::Watchdog => "watchdog timeout (N9)",
            PathPart::Marker => "event markers",
        }
    }

    /// The part of `step` (a step of a run of `sem`).
    pub fn of(sem: &Semantics, step: &Step) -> PathPart {
        match step {
            Step::Host { .. } => PathPart::Host,
            Step::Item(k) => match &sem.op(k.loc()).kind {
                OpKind::Kernel { .. } | OpKind::Expect { .. } => PathPart::Kernel,
                OpKind::Memcpy { .. } | OpKind::Memset { .. } => PathPart::Copy,
                OpKind::HostFunc { .. } => PathPart::HostFunc,
                OpKind::EventRecord { .. } | OpKind::StreamWaitEvent { .. } => PathPart::Marker,
                // An NCCL launch's item is named by its op, or by the group end of a group.
                _ => PathPart::NcclLaunch,
            },
            Step::Transfer { .. } | Step::Eager { .. } | Step::Drain { .. } | Step::Collective { .. } | Step::RootEarly { .. } => {
                PathPart::Transfer
            }
            Step::Connect { .. } => PathPart::ConnectionSetup,
            Step::Watchdog { .. } => PathPart::Watchdog,
        }
    }
}

/// The time the critical path spends on one [`PathPart`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartShare {
    pub part: PathPart,
    /// The sum of its steps' times on the path (each from its enabler's fire time to its own), ns.
    pub ns: u64,
    /// How many steps of the path, taking time, are of this part.
    pub steps: u32,
}

/// What a timed run says about time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub makespan_ns: u64,
    pub streams: Vec<StreamStats>,
    pub ranks: Vec<RankStats>,
    /// The chain of steps, each made enabled by the one before, that ends in the last step: shortening any step
    /// not on it does not shorten the run. In execution order.
    pub critical_path: Vec<CriticalStep>,
    /// Where the critical path's time goes, by [`PathPart`]: the parts that take time, most time first (ties in
    /// [`PathPart`] order). The path runs from 0 to the last step's time, one step after the other, so the parts
    /// add up to the makespan.
    pub critical_parts: Vec<PartShare>,
}

/// The union of intervals (sorted by start in place) as disjoint sorted intervals.
fn union(iv: &mut [(u64, u64)]) -> Vec<(u64, u64)> {
    iv.sort_unstable();
    let mut out: Vec<(u64, u64)> = vec![];
    for &(a, b) in iv.iter() {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// Makespan, per-stream busy/idle time, per-rank bubbles and the critical path of a timed run.
pub fn summarize(sem: &Semantics, run: &TimedRun) -> Summary {
    let mk = run.makespan_ns;
    let mut per_stream: std::collections::BTreeMap<StreamRef, Vec<(u64, u64)>> = Default::default();
    let mut per_rank: Vec<Vec<(u64, u64)>> = vec![vec![]; sem.program.ranks.len()];
    for sp in &run.spans {
        if let Lane::Stream(s) = sp.lane {
            per_stream.entry(s).or_default().push((sp.start_ns, sp.end_ns));
            if sp.kind == SpanKind::Kernel {
                per_rank[sp.rank(sem) as usize].push((sp.start_ns, sp.end_ns));
            }
        }
    }
    let streams = per_stream
        .into_iter()
        .map(|(stream, mut iv)| {
            let u = union(&mut iv);
            let busy: u64 = u.iter().map(|(a, b)| b - a).sum();
            let gaps: Vec<u64> = u.windows(2).map(|w| w[1].0 - w[0].1).filter(|g| *g > 0).collect();
            StreamStats {
                stream,
                busy_ns: busy,
                idle_ns: mk.saturating_sub(busy),
                gaps: gaps.len() as u32,
                longest_gap_ns: gaps.iter().copied().max().unwrap_or(0),
            }
        })
        .collect();
    let ranks = per_rank
        .iter_mut()
        .enumerate()
        .map(|(r, iv)| {
            let compute: u64 = union(iv).iter().map(|(a, b)| b - a).sum();
            let bubble_fraction = if mk == 0 { 0.0 } else { 1.0 - compute as f64 / mk as f64 };
            RankStats { rank: r as RankId, compute_ns: compute, bubble_fraction }
        })
        .collect();
    let mut critical_path = vec![];
    let mut at = run.schedule.len().checked_sub(1);
    while let Some(i) = at {
        let by = run.enabled_by(i);
        let start = by.map_or(0, |b| run.times_ns[b as usize]);
        critical_path.push(CriticalStep { step: i as u32, start_ns: start, end_ns: run.times_ns[i] });
        at = by.map(|b| b as usize);
    }
    critical_path.reverse();
    let critical_parts = critical_parts(sem, run, &critical_path);
    Summary { makespan_ns: mk, streams, ranks, critical_path, critical_parts }
}

/// [`Summary::critical_parts`] of `path`, a critical path of `run`.
fn critical_parts(sem: &Semantics, run: &TimedRun, path: &[CriticalStep]) -> Vec<PartShare> {
    let mut parts: std::collections::BTreeMap<PathPart, (u64, u32)> = Default::default();
    for c in path.iter().filter(|c| c.end_ns > c.start_ns) {
        let e = parts.entry(PathPart::of(sem, &run.schedule[c.step as usize])).or_default();
        e.0 = e.0.saturating_add(c.end_ns - c.start_ns);
        e.1 += 1;
    }
    let mut out: Vec<PartShare> = parts.into_iter().map(|(part, (ns, steps))| PartShare { part, ns, steps }).collect();
    // Stable: equal times keep PathPart order.
    out.sort_by_key(|p| std::cmp::Reverse(p.ns));
    out
}

/// The lane a step of a schedule acts on, and what it does, in words ("r0 main", "launch fwd m0 on compute").
pub fn describe(sem: &Semantics, step: &Step, host: Option<(u32, bool)>) -> (String, String) {
    let op_label = |loc: OpLoc| {
        let rank = sem.rank_of(loc.thread);
        format!("#{} {}", loc.op, sem.program.op_label(rank, &sem.op(loc).kind))
    };
    let stream_name = |s: StreamRef| format!("r{} {}", s.rank, sem.program.stream(s).name);
    let stream_lane = |loc: OpLoc| match sem.info(loc).stream {
        Some(s) => stream_name(s),
        None => sem.thread_label(loc.thread),
    };
    match step {
        Step::Host { thread, .. } => {
            let what = match host {
                Some((pc, false)) => op_label(OpLoc { thread: *thread, op: pc }),
                Some((pc, true)) => format!("returns from {}", op_label(OpLoc { thread: *thread, op: pc })),
                None => "host step".into(),
            };
            (sem.thread_label(*thread), what)
        }
        // A group end's launch runs on the streams of the group's ops, not on the host thread that ended the group.
        Step::Item(k) => match sem.group_launch_stream(*k) {
            Some(s) => (stream_name(s), format!("NCCL launch of {}", op_label(k.loc()))),
            None => (stream_lane(k.loc()), op_label(k.loc())),
        },
        Step::Transfer { send, recv } => {
            (stream_lane(*send), format!("{} → {} {} (rendezvous)", op_label(*send), sem.thread_label(recv.thread), op_label(*recv)))
        }
        Step::Eager { send } => (stream_lane(*send), format!("{} delivers eagerly", op_label(*send))),
        Step::Drain { recv } => (stream_lane(*recv), format!("{} takes its data", op_label(*recv))),
        Step::Collective { comm, seq } => (sem.comm_name(*comm).to_string(), format!("collective #{seq} completes")),
        Step::RootEarly { comm, seq } => (sem.comm_name(*comm).to_string(), format!("the sending parts of collective #{seq} finish early")),
        Step::Connect { a, b, comm, .. } => {
            (sem.thread_label(*a), format!("connection set-up on {} with {}", sem.comm_name(*comm), sem.thread_label(*b)))
        }
        Step::Watchdog { rank } => (format!("r{rank} watchdog"), "times out and aborts its communicators (N9)".to_string()),
    }
}
