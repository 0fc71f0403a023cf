//! Partial-order reduction: which steps commute with every step that can ever be enabled alongside them, computed
//! from what steps touch ([`OpInfo::footprint`], [`OpInfo::observes`]) rather than argued per op kind. The explorer
//! may take such a step alone (a persistent set of one step).
//!
//! - A host step of thread `t` commutes with another thread's steps unless one of them writes a [`Resource`] the
//!   other reads or writes; every later op of every other thread is summarised by the index of its last read and
//!   last write of each resource (an NCCL op inside a group counts at the group's end, where it takes effect).
//! - A host step commutes with device steps (item starts and ends, transfers) unless its outcome observes how far a
//!   device has got (a query's answer, the blocks an allocation may reuse), or it may set up connections (N7), or it
//!   has several outcomes (a choice must be explored whole).
//! - A finite item (kernel, copy, marker) commutes with everything when no host thread has an op still to run that
//!   observes its device, and either streams progress independently or no NCCL launch of its device is unfinished
//!   (S1: the explorer must still see the states where a spinning launch keeps the item from starting). Its start
//!   clock is fixed once it is enabled, and race detection is symmetric in the order of two accesses.
//! - Returning from a blocking call only joins clocks that no longer change, so it commutes with everything, except
//!   a return from connection set-up, which launches the group (judged by the group's footprint).

use std::collections::BTreeMap;

use super::*;
use crate::op_info::{NcclRole, Resource, Use};

/// The last op index at which a thread reads and writes each resource, and observes each device.
pub(crate) struct Tables {
    /// Per global thread: resource -> (last read, last write).
    touch: Vec<BTreeMap<Resource, (Option<u32>, Option<u32>)>>,
    /// Per global thread: device -> index of the last op whose outcome observes its progress.
    observer: Vec<BTreeMap<RankId, u32>>,
    /// Devices on which some op issues an NCCL launch (the others never have a spinning kernel; S1).
    pub(crate) nccl_on: std::collections::BTreeSet<RankId>,
    /// Per global thread: device -> the effect point of the last op that issues an NCCL launch on it (S1: a launch
    /// still to be issued may spin before an item already issued starts).
    launcher: Vec<BTreeMap<RankId, u32>>,
    /// Per global thread: stream -> the effect point of the last op that issues an NCCL launch on it (a launch still
    /// to be issued on another stream of a device may start before one already issued, S1, N5).
    launcher_streams: Vec<BTreeMap<StreamRef, u32>>,
    /// Device -> the global threads that issue NCCL launches on it (from `launcher`).
    issuers: BTreeMap<RankId, Vec<ThreadId>>,
    /// Device -> (global thread, index of its last op observing the device), from `observer`: most devices have
    /// none, so that [`Semantics::device_quiet`] costs nothing for them.
    observers_of: BTreeMap<RankId, Vec<(ThreadId, u32)>>,
    /// Per device: the global indices of its streams on which some op issues an NCCL launch (a stream no op
    /// launches on never holds one), ascending. [`Semantics::device_may_spin`] and `launch_is_local` look for
    /// unfinished launches there only (they scanned every item of the state, for every enabled item: issue 8).
    launch_streams: Vec<Vec<usize>>,
    /// Resource (other than a communicator) -> every thread that uses it: (thread, last read, last write), from
    /// `touch`, so that [`Semantics::rank_isolated`] looks only at the users of what the rank touches.
    users: BTreeMap<Resource, Vec<(ThreadId, Option<u32>, Option<u32>)>>,
    /// The resources two or more threads use where one of them writes (a communicator only among threads of one
    /// rank: launches of two ranks on one communicator commute), each with its users (thread, last read, last
    /// write): what [`Semantics::threads_interfere`] looks at.
    shared: Vec<Vec<(ThreadId, Option<u32>, Option<u32>)>>,
    /// Communicator -> every thread that uses it: (thread, last use, last life-cycle call), from `comm_use`.
    comm_users: BTreeMap<CommId, Vec<(ThreadId, u32, Option<u32>)>>,
    /// Whether anything can abort a communicator (a `CommAbort` op or a watchdog; N9, N13).
    pub(crate) aborts: bool,
    /// Per global thread: communicator -> index of the last op that touches it at all (its effect point), and of
    /// the last op of its life cycle (init, split, poll, abort, finalize, destroy: `NcclRole::Init`).
    comm_use: Vec<BTreeMap<CommId, (u32, Option<u32>)>>,
    /// Whether the program has a non-blocking communicator (N12: work may run in the background of a poll).
    nonblocking: bool,
    /// Per global stream: whether an item on it may come before the start of an NCCL launch of a device that has
    /// launches on two or more streams ([`launch_feeders`]): such an item is never left for later
    /// ([`Semantics::postponable`]).
    feeds_launch: Vec<bool>,
}

impl Tables {
    /// `stream_base`: the first global stream index of each rank (`Semantics::stream_base`); `points`: per global
    /// thread, [`effect_points`] of its ops.
    pub(crate) fn new(program: &Program, infos: &[Vec<OpInfo>], points: &[Vec<u32>], stream_base: &[u32]) -> Tables {
        let mut touch = vec![];
        let mut observer = vec![];
        let mut comm_use = vec![];
        let mut launcher = vec![];
        let mut launcher_streams = vec![];
        let nccl_on = infos.iter().flatten().filter(|i| i.comm.is_some()).filter_map(|i| i.acting_rank).collect();
        for (info, at) in infos.iter().zip(points) {
            let mut t: BTreeMap<Resource, (Option<u32>, Option<u32>)> = BTreeMap::new();
            let mut o: BTreeMap<RankId, u32> = BTreeMap::new();
            let mut cu: BTreeMap<CommId, (u32, Option<u32>)> = BTreeMap::new();
            let mut la: BTreeMap<RankId, u32> = BTreeMap::new();
            let mut ls: BTreeMap<StreamRef, u32> = BTreeMap::new();
            for (i, inf) in info.iter().enumerate() {
                if let (Some(_), Some(r)) = (inf.comm, inf.acting_rank) {
                    let e = la.entry(r).or_default();
                    *e = (*e).max(at[i]);
                }
                if let (Some(_), Some(s)) = (inf.comm, inf.stream) {
                    let e = ls.entry(s).or_default();
                    *e = (*e).max(at[i]);
                }
                if let Some(c) = inf.comm {
                    let e = cu.entry(c).or_insert((0, None));
                    e.0 = e.0.max(at[i]);
                    if inf.nccl == Some(NcclRole::Init) {
                        e.1 = Some(e.1.map_or(i as u32, |x| x.max(i as u32)));
                    }
                }
                for (res, u) in &inf.footprint {
                    let e = t.entry(*res).or_default();
                    let slot = if *u == Use::Write { &mut e.1 } else { &mut e.0 };
                    *slot = Some(slot.map_or(at[i], |x| x.max(at[i])));
                }
                if let Some(r) = inf.observes {
                    o.insert(r, i as u32);
                }
            }
            touch.push(t);
            observer.push(o);
            comm_use.push(cu);
            launcher.push(la);
            launcher_streams.push(ls);
        }
        let nonblocking = program.comms.iter().any(|c| c.nonblocking);
        let aborts = program.comms.iter().any(|c| c.watchdog_ns.is_some())
            || program.ranks.iter().flat_map(|r| r.threads.iter()).flat_map(|t| t.ops.iter()).any(|o| matches!(o.kind, OpKind::CommAbort { .. }));
        let mut issuers: BTreeMap<RankId, Vec<ThreadId>> = BTreeMap::new();
        for (u, la) in launcher.iter().enumerate() {
            for r in la.keys() {
                issuers.entry(*r).or_default().push(u as ThreadId);
            }
        }
        let mut observers_of: BTreeMap<RankId, Vec<(ThreadId, u32)>> = BTreeMap::new();
        for (u, o) in observer.iter().enumerate() {
            for (r, last) in o {
                observers_of.entry(*r).or_default().push((u as ThreadId, *last));
            }
        }
        let mut launch_streams = vec![vec![]; program.ranks.len()];
        for i in infos.iter().flatten().filter(|i| i.comm.is_some()) {
            if let Some(s) = i.stream {
                launch_streams[s.rank as usize].push((stream_base[s.rank as usize] + s.index) as usize);
            }
        }
        for v in &mut launch_streams {
            v.sort_unstable();
            v.dedup();
        }
        let mut users: BTreeMap<Resource, Vec<(ThreadId, Option<u32>, Option<u32>)>> = BTreeMap::new();
        for (u, t) in touch.iter().enumerate() {
            for (res, (rd, wr)) in t {
                if !matches!(res, Resource::Comm(_)) {
                    users.entry(*res).or_default().push((u as ThreadId, *rd, *wr));
                }
            }
        }
        let mut shared: Vec<Vec<(ThreadId, Option<u32>, Option<u32>)>> =
            users.values().filter(|v| v.len() > 1 && v.iter().any(|(_, _, w)| w.is_some())).cloned().collect();
        // Global threads are numbered rank by rank (`Semantics::thread_base`).
        let rank_of_thread: Vec<usize> =
            program.ranks.iter().enumerate().flat_map(|(r, rk)| std::iter::repeat_n(r, rk.threads.len())).collect();
        let mut comm_by_rank: BTreeMap<(Resource, usize), Vec<(ThreadId, Option<u32>, Option<u32>)>> = BTreeMap::new();
        for (u, t) in touch.iter().enumerate() {
            for (res, (rd, wr)) in t {
                if matches!(res, Resource::Comm(_)) {
                    comm_by_rank.entry((*res, rank_of_thread[u])).or_default().push((u as ThreadId, *rd, *wr));
                }
            }
        }
        shared.extend(comm_by_rank.into_values().filter(|v| v.len() > 1 && v.iter().any(|(_, _, w)| w.is_some())));
        let mut comm_users: BTreeMap<CommId, Vec<(ThreadId, u32, Option<u32>)>> = BTreeMap::new();
        for (u, cu) in comm_use.iter().enumerate() {
            for (c, (last, life)) in cu {
                comm_users.entry(*c).or_default().push((u as ThreadId, *last, *life));
            }
        }
        let feeds_launch = launch_feeders(program, infos, stream_base, &launch_streams);
        Tables {
            touch,
            observer,
            nccl_on,
            launcher,
            launcher_streams,
            issuers,
            observers_of,
            launch_streams,
            users,
            shared,
            comm_users,
            aborts,
            comm_use,
            nonblocking,
            feeds_launch,
        }
    }
}

/// Per global stream: whether the end of an item on it may enable (or release a host thread that issues) the
/// start of an NCCL launch on a device whose launches are on two or more streams. The starts of two such launches
/// do not commute (S1: whichever starts first may spin and the platform may withhold the other), so an item that
/// feeds one must not be left for later while the other starts (issue 30, seed 25880 of the differential
/// campaign: a copy on the per-thread default stream was left for later, the all-reduce on another stream started
/// first, and the hang in which the copy ends, the recv behind it on the legacy stream starts and spins, and the
/// platform withholds the all-reduce was never reached).
///
/// Computed from the program alone, over-approximating what can happen (order within a thread and which record a
/// wait names are ignored):
/// - an enqueue on stream `s` comes after the tails of the streams and the records of the events it reads (stream
///   order, S2's implicit waits, `cudaStreamWaitEvent`; S1, S3), and a record on `s` comes after `s`'s tail;
/// - a host thread that may block on a stream or an event (a synchronize, a synchronous or pageable copy or
///   memset, an implicit synchronization; S4, S5, S7) and later issues such a launch, or later arrives at a
///   rendezvous (a barrier, an NCCL life-cycle call) that may release a thread that does, makes what it blocks on
///   feed a launch.
fn launch_feeders(program: &Program, infos: &[Vec<OpInfo>], stream_base: &[u32], launch_streams: &[Vec<usize>]) -> Vec<bool> {
    let streams = stream_base.last().map_or(0, |b| *b as usize + program.ranks.last().map_or(0, |r| r.streams.len()));
    let multi: Vec<bool> = launch_streams.iter().map(|v| v.len() >= 2).collect();
    if !multi.iter().any(|m| *m) {
        return vec![false; streams];
    }
    let mut event_base = vec![];
    let mut events = 0usize;
    for r in &program.ranks {
        event_base.push(streams + events);
        events += r.events.len();
    }
    let node = |res: &Resource| match res {
        Resource::Stream(s) => Some((stream_base[s.rank as usize] + s.index) as usize),
        Resource::Event(e) => Some(event_base[e.rank as usize] + e.index as usize),
        _ => None,
    };
    let mut sink = vec![false; streams + events];
    for s in launch_streams.iter().filter(|v| v.len() >= 2).flatten() {
        sink[*s] = true;
    }
    // Reversed edges: `rev[b]` holds every `a` whose progress may come before `b`'s.
    let mut rev: Vec<Vec<usize>> = vec![vec![]; streams + events];
    let ops = program.ranks.iter().flat_map(|r| r.threads.iter()).map(|t| &t.ops);
    for (info, ops) in infos.iter().zip(ops) {
        // Whether the thread, after op `i`, issues a launch on a device with several launch streams, or arrives at
        // a rendezvous that may release another thread (scanned from the end).
        let mut launches_later = false;
        for (inf, op) in info.iter().zip(ops).rev() {
            if let Some(s) = inf.stream {
                let b = (stream_base[s.rank as usize] + s.index) as usize;
                for (res, u) in inf.footprint.iter() {
                    match (node(res), u) {
                        (Some(a), Use::Read) if a != b => rev[b].push(a),
                        (Some(e), Use::Write) if matches!(res, Resource::Event(_)) => rev[e].push(b),
                        _ => {}
                    }
                }
                // A synchronous copy or memset, or one from or to pageable host memory, may hold the host until it
                // has ended (S5).
                if launches_later && matches!(op.kind, OpKind::Memcpy { .. } | OpKind::Memset { .. }) {
                    sink[b] = true;
                }
            } else if launches_later {
                for (res, _) in inf.footprint.iter() {
                    if let Some(a) = node(res) {
                        sink[a] = true;
                    }
                }
            }
            let launch = inf.comm.is_some() && inf.stream.is_some_and(|s| multi[s.rank as usize]);
            let rendezvous = matches!(op.kind, OpKind::Barrier { .. }) || (inf.comm.is_some() && inf.stream.is_none());
            launches_later |= launch || rendezvous;
        }
    }
    let mut todo: Vec<usize> = (0..sink.len()).filter(|n| sink[*n]).collect();
    while let Some(b) = todo.pop() {
        for a in std::mem::take(&mut rev[b]) {
            if !sink[a] {
                sink[a] = true;
                todo.push(a);
            }
        }
    }
    sink.truncate(streams);
    sink
}

/// Whether two uses of one resource, each (reads, writes) still to come, conflict: one writes what the other reads
/// or writes.
fn conflict((ur, uw): (bool, bool), (vr, vw): (bool, bool)) -> bool {
    (uw && (vr || vw)) || (ur && vw)
}

/// Where each op of a thread takes effect: its own index, except an NCCL op inside a group, which takes effect at
/// the outermost group end (N4), or at the thread's last op if the group never ends; and an NCCL op on a
/// non-blocking communicator, whose work may be deferred to a later poll (N12): at the thread's last op.
pub(crate) fn effect_points(ops: &[Op], infos: &[OpInfo], program: &Program) -> Vec<u32> {
    let mut at: Vec<u32> = (0..ops.len() as u32).collect();
    let mut depth = 0u32;
    let mut open: Vec<usize> = vec![];
    for (i, op) in ops.iter().enumerate() {
        match op.kind {
            OpKind::GroupStart => depth += 1,
            OpKind::GroupEnd => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    for j in open.drain(..) {
                        at[j] = i as u32;
                    }
                }
            }
            _ if depth > 0 && infos[i].comm.is_some() => open.push(i),
            _ => {}
        }
    }
    for j in open {
        at[j] = ops.len().saturating_sub(1) as u32;
    }
    let last = ops.len().saturating_sub(1) as u32;
    for (i, info) in infos.iter().enumerate() {
        if info.stream.is_some() && info.comm.is_some_and(|c| program.comms[c.0 as usize].nonblocking) {
            at[i] = last;
        }
    }
    at
}

/// Answers about devices that the reduction's checks ask once per enabled step, kept for one state: whether an
/// NCCL launch spins on the device (S1, [`Semantics::starvable`]) and whether one may spin before an item starts.
/// An explorer keeps one, sized by [`DeviceMemo::new`], and [`DeviceMemo::clear`]s it for each state (on a 64-stage
/// pipeline the same device was asked about for each of its enabled items and in each check); [`DeviceMemo::NONE`]
/// keeps nothing.
#[derive(Debug, Default)]
pub struct DeviceMemo {
    /// Per rank: 0 not asked yet, 1 no, 2 yes.
    spinning: Vec<std::cell::Cell<u8>>,
    may_spin: Vec<std::cell::Cell<u8>>,
    /// [`Semantics::threads_interfere`] for the state: 0 not asked yet, 1 no, 2 yes.
    interfere: std::cell::Cell<u8>,
}

impl DeviceMemo {
    /// Remembers nothing (every question is computed).
    pub const NONE: DeviceMemo = DeviceMemo { spinning: Vec::new(), may_spin: Vec::new(), interfere: std::cell::Cell::new(0) };

    /// A memo for the ranks of `sem`'s program.
    pub fn new(sem: &Semantics) -> DeviceMemo {
        let n = sem.program.ranks.len();
        DeviceMemo { spinning: vec![std::cell::Cell::new(0); n], may_spin: vec![std::cell::Cell::new(0); n], interfere: std::cell::Cell::new(0) }
    }

    /// Forgets every answer (before asking about another state).
    pub fn clear(&self) {
        for c in self.spinning.iter().chain(&self.may_spin) {
            c.set(0);
        }
        self.interfere.set(0);
    }

    fn ask(slots: &[std::cell::Cell<u8>], rank: RankId, f: impl FnOnce() -> bool) -> bool {
        let Some(c) = slots.get(rank as usize) else { return f() };
        match c.get() {
            1 => false,
            2 => true,
            _ => {
                let x = f();
                c.set(1 + u8::from(x));
                x
            }
        }
    }
}

impl<'p> Semantics<'p> {
    /// Whether `step` commutes with every other step that can ever be enabled alongside it (module doc), so that
    /// an explorer may take it alone.
    pub fn is_local(&self, st: &State, step: &Step) -> bool {
        self.is_local_in(st, step, &DeviceMemo::NONE)
    }

    /// [`Self::is_local`], with answers about devices kept in `m` (for `st` only).
    pub fn is_local_in(&self, st: &State, step: &Step, m: &DeviceMemo) -> bool {
        match step {
            Step::Item(k) => self.item_is_local(st, *k, m),
            Step::Host { thread, .. } => self.host_is_local(st, *thread),
            // A transfer is the send's only way to finish when it cannot go eager (N2); otherwise delivering
            // eagerly is an alternative with fewer happens-before edges, explored too.
            Step::Transfer { send, recv } => !self.eager_possible(st, *send) && self.p2p_is_local(st, &[*send, *recv]),
            Step::Drain { recv } => self.p2p_is_local(st, &[*recv]),
            // N7: set-ups commute with each other (each removes one need of its two blocked threads and ticks their
            // clocks) and nothing else reads what they change while their threads are blocked, unless another
            // thread acts for one of the two ranks (its group end reads the connections) or a thread has calls in
            // the background (N12).
            Step::Connect { .. } => self.connect_only(st, step).is_some(),
            Step::Eager { .. } | Step::Collective { .. } | Step::RootEarly { .. } | Step::Watchdog { .. } => false,
        }
    }

    /// The connection (communicator, sender, receiver) a P2P delivery step acts on (N2, N3); `None` for other steps.
    pub(crate) fn p2p_connection(&self, step: &Step) -> Option<(CommId, RankId, RankId)> {
        let (loc, send) = match step {
            Step::Eager { send } | Step::Transfer { send, .. } => (*send, true),
            Step::Drain { recv } => (*recv, false),
            _ => return None,
        };
        let info = self.info(loc);
        let me = self.acting_rank(loc);
        match (info.comm, info.nccl) {
            (Some(c), Some(NcclRole::Send { peer })) if send => Some((c, me, peer)),
            (Some(c), Some(NcclRole::Recv { peer })) if !send => Some((c, peer, me)),
            _ => None,
        }
    }

    /// A persistent set bigger than one step: the enabled delivery steps of one connection (indices into
    /// `enabled`), when one of them cannot be withheld (not [`Self::starvable`]). Steps of different connections
    /// touch different ops, lanes and eager credit, and with launches serialized per communicator (N5) no other
    /// launch can add steps on the connection while these ops are unfinished; a step outside the set never disables
    /// one inside it, so every final state, and every state stuck but for what the platform may withhold, is still
    /// reached (the non-starvable step stays enabled on any path that avoids the set). Both alternatives of each send
    /// (eager or wait for the recv) stay in the set, so "in every execution" keeps its meaning. Conditions as
    /// [`Self::p2p_is_local`]: no abort, no thread left that observes the devices. Without it, an exchange in both
    /// directions explored every interleaving of the two directions (a 2-rank group of 200 pairs: no verdict).
    pub fn connection_set(&self, st: &State, enabled: &[Step]) -> Option<Vec<usize>> {
        self.connection_set_in(st, enabled, &DeviceMemo::NONE)
    }

    /// [`Self::connection_set`], with answers about devices kept in `m` (for `st` only).
    pub fn connection_set_in(&self, st: &State, enabled: &[Step], m: &DeviceMemo) -> Option<Vec<usize>> {
        if !self.profile.serialize_per_comm || self.reduction.aborts {
            return None;
        }
        let mut groups: BTreeMap<(CommId, RankId, RankId), Vec<usize>> = BTreeMap::new();
        for (i, s) in enabled.iter().enumerate() {
            if let Some(c) = self.p2p_connection(s) {
                groups.entry(c).or_default().push(i);
            }
        }
        groups.into_iter().find_map(|((_, a, b), idx)| {
            let anchored = idx.iter().any(|i| !self.starvable_in(st, &enabled[*i], m));
            (anchored && idx.len() < enabled.len() && self.device_quiet(st, a) && self.device_quiet(st, b)).then_some(idx)
        })
    }

    /// A persistent set of one rank's steps (indices into `enabled`): the enabled host steps of the rank's threads
    /// and the enabled steps of items on its streams, for the rank with the fewest such steps among those that
    /// qualify. Ranks share no state but through NCCL: a step of another rank, or a delivery or collective step
    /// (which only finishes ops inside launches and joins clocks fixed when they started), commutes with every step
    /// of the rank, and none disables one of them, unless
    /// - a host call on one side observes a device of the other (a query, an allocation; [`OpInfo::observes`]), or
    ///   uses a resource the other writes (a synchronizing call that captures the tails of every device's streams,
    ///   S7; [`OpInfo::footprint`]);
    /// - a communicator the rank still uses is initialised, split, polled, aborted, finalized or destroyed by
    ///   another rank later, or the reverse (what those calls do depends on the members' ops);
    /// - connections are being set up (N7: the rendezvous of two hosts changes the connection tables the rank's
    ///   launches read), or a communicator is non-blocking (N12: work deferred to a poll), or anything can abort
    ///   (N9, N13).
    ///
    /// Launches of two ranks on one communicator commute: each appends to its own per-rank sequence (N3) and
    /// serialization chain (N5). The set must hold a step the platform cannot withhold (not [`Self::starvable`]), so
    /// that, as for [`Self::connection_set`], every final state and every state stuck but for what the platform may
    /// withhold is still reached. Without it, a pipeline of S stages explored the product of the stages' progress
    /// (issue 8: 1F1B 4x4 did not finish in 2 M states).
    pub fn rank_set(&self, st: &State, enabled: &[Step]) -> Option<Vec<usize>> {
        self.rank_set_in(st, enabled, &DeviceMemo::NONE)
    }

    /// [`Self::rank_set`], with answers about devices kept in `m` (for `st` only).
    pub fn rank_set_in(&self, st: &State, enabled: &[Step], m: &DeviceMemo) -> Option<Vec<usize>> {
        if self.reduction.aborts || self.reduction.nonblocking {
            return None;
        }
        // A rank with a thread waiting for connection set-up (N7) is left out: the set-up step, a rendezvous with
        // the peer's host, wakes the thread and fills the connection tables its other threads' launches read. A
        // set-up needs both hosts waiting, so no set-up with a rank that is not waiting can happen without it (once
        // every set-up of the wait is done, only the thread's own return is left).
        let connecting: std::collections::BTreeSet<RankId> = st
            .host
            .threads
            .iter()
            .enumerate()
            .filter(|(_, th)| match &th.wait {
                Some(Wait::Connect { need, .. }) => !need.is_empty(),
                Some(Wait::Poll(_)) => true,
                _ => false,
            })
            .map(|(u, _)| self.rank_of(u as ThreadId))
            .collect();
        let mut by_rank: BTreeMap<RankId, Vec<usize>> = BTreeMap::new();
        for (i, s) in enabled.iter().enumerate() {
            let r = match s {
                Step::Host { thread, .. } => self.rank_of(*thread),
                Step::Item(k) => st.item(*k).rank(),
                _ => continue,
            };
            by_rank.entry(r).or_default().push(i);
        }
        let mut best: Option<Vec<usize>> = None;
        for (r, idx) in by_rank {
            if idx.len() >= enabled.len() || best.as_ref().is_some_and(|b| b.len() <= idx.len()) {
                continue;
            }
            if connecting.contains(&r) || idx.iter().all(|i| self.starvable_in(st, &enabled[*i], m)) || !self.rank_isolated(st, r) {
                continue;
            }
            // A call where the platform chooses when collectives connect (N7) may be in the set: the set holds both
            // choices, and another rank's first collective choosing first reaches the state this rank's choosing
            // the same reaches, the other's call then reading the choice (the state records the choice, not who
            // made it).
            //
            // The steps outside the set include the deliveries and collective completions that end the rank's own
            // running launches, and ending a launch changes what the rank's own queries and allocations observe
            // (S4, P4: a block recorded on the launch's stream becomes reusable). Such a rank is not isolated from
            // them (issue 30: an allocation after an all-reduce on a recorded stream lost the P4 race in which the
            // all-reduce ends first).
            if !self.device_quiet(st, r) && self.spinning_launches(st, r).next().is_some() {
                continue;
            }
            // A blocked thread of the rank can be released by a step outside the set (a delivery ending the launch
            // its synchronize waits for, another rank's barrier arrival), and its later ops are steps of the rank
            // that the set does not hold: when they use what another thread of the rank uses (two threads
            // enqueueing on one stream), taking the set first loses the executions in which the released thread
            // goes first (issue 30: a kernel issued behind an event synchronize on another thread's stream was
            // ordered after that thread's kernel in every execution explored; "data race in every execution").
            if self.blocked_thread_conflicts(st, r) {
                continue;
            }
            best = Some(idx);
        }
        best
    }

    /// Whether two host threads still have ops that use one resource, one of them writing it (two threads enqueueing
    /// on one stream, a record and a wait of one event): the order of their steps then matters, and a thread's
    /// steps may wait for device work (a synchronize). Leaving an item start or a delivery for later
    /// ([`Self::postponable`]) then delays the threads it would release, and loses the executions in which they go
    /// before the other thread (issue 30: a kernel enqueued by a thread after an event synchronize, on a stream
    /// another thread enqueues on, was always enqueued second).
    pub(crate) fn threads_interfere(&self, st: &State, m: &DeviceMemo) -> bool {
        let ask = || {
            let later = |u: ThreadId, i: Option<u32>| i.is_some_and(|i| i >= st.host.threads[u as usize].pc);
            self.reduction.shared.iter().any(|users| {
                users.iter().enumerate().any(|(i, (u, urd, uwr))| {
                    let (ur, uw) = (later(*u, *urd), later(*u, *uwr));
                    (ur || uw)
                        && users[i + 1..].iter().any(|(v, vrd, vwr)| {
                            v != u && conflict((ur, uw), (later(*v, *vrd), later(*v, *vwr)))
                        })
                })
            })
        };
        match m.interfere.get() {
            1 => false,
            2 => true,
            _ => {
                let x = ask();
                m.interfere.set(1 + u8::from(x));
                x
            }
        }
    }

    /// Whether a blocked thread of rank `r` has an op at or after its current one that uses a resource another
    /// thread of the rank still uses in a conflicting way (one of them writes it): its later steps, once a step
    /// outside the rank's set releases it, do not commute with the other thread's ([`Self::rank_set`]).
    fn blocked_thread_conflicts(&self, st: &State, r: RankId) -> bool {
        let own = self.rank_threads(r);
        if own.len() < 2 {
            return false;
        }
        let later = |u: ThreadId, i: Option<u32>| i.is_some_and(|i| i >= st.host.threads[u as usize].pc);
        own.clone().filter(|u| st.host.threads[*u as usize].wait.is_some()).any(|u| {
            self.reduction.touch[u as usize].iter().any(|(res, (rd, wr))| {
                let (ur, uw) = (later(u, *rd), later(u, *wr));
                (ur || uw)
                    && own.clone().filter(|v| *v != u).any(|v| {
                        self.reduction.touch[v as usize].get(res).is_some_and(|(vrd, vwr)| conflict((ur, uw), (later(v, *vrd), later(v, *vwr))))
                    })
            })
        })
    }

    /// Whether, from `st` on, no host call of another rank can interfere with rank `r` nor the reverse
    /// ([`Self::rank_set`]).
    fn rank_isolated(&self, st: &State, r: RankId) -> bool {
        // Only what the rank's own threads will still use can conflict; the other users of each such thing are
        // looked up (`Tables::users`, `comm_users`, `observers_of`), not every thread's tables.
        let later = |u: ThreadId, i: u32| i >= st.host.threads[u as usize].pc;
        let own = self.rank_threads(r);
        let mine = |u: ThreadId| own.contains(&u);
        // A host call of one side observes a device of the other (a query, an allocation).
        if self.reduction.observers_of.get(&r).is_some_and(|obs| obs.iter().any(|(u, last)| !mine(*u) && later(*u, *last))) {
            return false;
        }
        for u in own.clone() {
            if self.reduction.observer[u as usize].iter().any(|(dev, last)| *dev != r && later(u, *last)) {
                return false;
            }
            // A communicator the rank still uses is initialised, split, polled, aborted, finalized or destroyed by
            // another rank later, or the reverse.
            for (c, (last, life)) in &self.reduction.comm_use[u as usize] {
                let (uses, lives) = (later(u, *last), life.is_some_and(|l| later(u, l)));
                if !uses && !lives {
                    continue;
                }
                let conflict = self.reduction.comm_users[c].iter().any(|(v, vlast, vlife)| {
                    !mine(*v) && ((uses && vlife.is_some_and(|l| later(*v, l))) || (lives && later(*v, *vlast)))
                });
                if conflict {
                    return false;
                }
            }
            // Other resources (a stream's tail that a synchronizing call of another rank captures, S7): the rank
            // writes what another reads or writes later, or reads what another writes later. (Launches of two ranks
            // on one communicator commute; life-cycle calls are judged above.)
            for (res, (rd, wr)) in &self.reduction.touch[u as usize] {
                if matches!(res, Resource::Comm(_)) {
                    continue;
                }
                let (reads, writes) = (rd.is_some_and(|i| later(u, i)), wr.is_some_and(|i| later(u, i)));
                if !reads && !writes {
                    continue;
                }
                let clash = self.reduction.users[res].iter().any(|(v, vrd, vwr)| {
                    !mine(*v) && conflict((reads, writes), (vrd.is_some_and(|i| later(*v, i)), vwr.is_some_and(|i| later(*v, i))))
                });
                if clash {
                    return false;
                }
            }
        }
        true
    }

    /// A transfer with no eager alternative (or a drain) finishes two running ops (one) with clocks fixed when their
    /// launches started, and touches no eager credit that any other step needs (a drain only gives credit back), so
    /// it commutes with every other step and stays enabled until taken; and since it stays enabled, no state reached
    /// without it is stuck.
    /// Except: an abort (a `CommAbort` or a watchdog, N13) could end the ops first, and ending the launch changes
    /// what a query or an allocation of the device may answer; so it is local only when the program has no abort
    /// and no host thread has an op still to run that observes the devices of the ops.
    fn p2p_is_local(&self, st: &State, ops: &[OpLoc]) -> bool {
        if self.reduction.aborts {
            return false;
        }
        ops.iter().all(|loc| self.device_quiet(st, self.acting_rank(*loc)))
    }

    /// Whether no host thread has an op still to run whose outcome observes how far device `rank` has got (a query,
    /// an allocation; [`OpInfo::observes`]).
    fn device_quiet(&self, st: &State, rank: RankId) -> bool {
        self.reduction.observers_of.get(&rank).is_none_or(|obs| obs.iter().all(|(u, last)| st.host.threads[*u as usize].pc > *last))
    }

    fn item_is_local(&self, st: &State, k: ItemKey, m: &DeviceMemo) -> bool {
        let item = st.item(k);
        if matches!(item.kind, ItemKind::Launch { .. }) {
            return self.launch_is_local(st, k, m);
        }
        let rank = item.rank();
        self.device_quiet(st, rank) && !self.device_may_spin(st, rank, m)
    }

    /// Whether the start of NCCL launch `k` commutes with every step that can be enabled alongside it and stays
    /// enabled, so that it may be taken alone (issue 8). Starting it changes no other step's outcome: it only makes
    /// its ops running (their clocks are fixed at the start), and launches of other ranks on the communicator append to
    /// their own sequences (N3, N5). What it does change is which item starts the platform may withhold on its device
    /// (S1: every item start, once a launch spins); the withheld executions are reached after it (the explorer
    /// leaves such starts for later, [`Self::postponable`]), and the executions that start an item first reach the same
    /// states in the other order. So it is local when
    /// - it cannot itself be withheld, and no other unfinished launch of the device is on another stream (that
    ///   one could start first and make this one withholdable, S1, or take the communicator first, N5);
    /// - no thread still observes the device (queries, allocations), nothing can abort and no communicator is
    ///   non-blocking; no thread of the rank waits for connection set-up (N7: the set-up fills the tables that
    ///   launches read).
    fn launch_is_local(&self, st: &State, k: ItemKey, m: &DeviceMemo) -> bool {
        let item = st.item(k);
        let rank = item.rank();
        if self.reduction.aborts
            || self.reduction.nonblocking
            || (!self.profile.independent_progress && self.device_spinning(st, rank, m))
            || !self.device_quiet(st, rank)
        {
            return false;
        }
        // A rival shares no stream with this launch, so it is queued (unfinished: at or after the head) on a launch
        // stream of the device that is not one of this launch's.
        let mine: Vec<usize> = item.streams.iter().map(|s| self.stream_index(*s)).collect();
        let rival = self.queued_launches(st, rank, |s| !mine.contains(&s)).any(|i| !i.streams.iter().any(|s| item.streams.contains(s)));
        let connecting = st.host.threads.iter().enumerate().any(|(u, th)| {
            self.rank_of(u as ThreadId) == rank && matches!(&th.wait, Some(Wait::Connect { need, .. }) if !need.is_empty())
        });
        // A rival still to be issued: a thread that will launch on another stream of the device (issue 30: an
        // all-reduce issued later on another stream started first and spun, and the platform withheld this one,
        // S1; taking this start alone lost that hang, "no problem in any execution").
        let future_rival = self.reduction.issuers.get(&rank).is_some_and(|threads| {
            threads.iter().any(|u| {
                let pc = st.host.threads[*u as usize].pc;
                self.reduction.launcher_streams[*u as usize].iter().any(|(s, last)| s.rank == rank && !item.streams.contains(s) && pc <= *last)
            })
        });
        !rival && !connecting && !future_rival
    }

    /// Whether an NCCL launch is running (spinning) on the device ([`Self::spinning_launches`]).
    pub(crate) fn device_spinning(&self, st: &State, rank: RankId, m: &DeviceMemo) -> bool {
        DeviceMemo::ask(&m.spinning, rank, || self.reduction.nccl_on.contains(&rank) && self.spinning_launches(st, rank).next().is_some())
    }

    /// The NCCL launches running (spinning) on the device, one per stream they head (a launch on several streams
    /// comes once per stream): a running launch heads its queues (a queue's head moves on only when its item ends),
    /// so only the heads of the device's streams are looked at, not every item.
    pub(crate) fn spinning_launches<'s>(&'s self, st: &'s State, rank: RankId) -> impl Iterator<Item = ItemKey> + 's {
        self.rank_streams(rank).filter_map(move |s| {
            let (q, head) = &st.streams.queues[self.stream_index(s)];
            q.get(*head as usize).copied().filter(|k| st.item(*k).is_spinning())
        })
    }

    fn host_is_local(&self, st: &State, t: ThreadId) -> bool {
        let th = &st.host.threads[t as usize];
        let group: Vec<u32> = match &th.wait {
            Some(Wait::Connect { ops, .. }) => ops.clone(),
            // N12: a poll's return launches the deferred work.
            Some(Wait::Poll(c)) => match self.background_of(st, t, *c) {
                Some(Pending { wait: Wait::Connect { ops, .. }, .. }) => ops.clone(),
                _ => return self.independent_of_others(st, t, &self.info(OpLoc { thread: t, op: th.pc }).footprint),
            },
            // N13: the return of a finalize ends the communicator on the rank, which other threads' calls observe.
            Some(Wait::Finalize(_)) => return self.independent_of_others(st, t, &self.info(OpLoc { thread: t, op: th.pc }).footprint),
            Some(_) => return true,
            None => {
                let loc = OpLoc { thread: t, op: th.pc };
                let info = self.info(loc);
                if info.observes.is_some() || self.host_choices(st, t) > 1 {
                    return false;
                }
                match &self.op(loc).kind {
                    OpKind::GroupEnd if th.group_depth == 1 => th.group_ops.clone(),
                    OpKind::GroupEnd => vec![],
                    // A call inside a group acts at the group end, but it uses the communicator now: after another
                    // thread's abort, finalize or destroy of it the call itself is undefined (N13), so it does not
                    // commute with those (issue 30, `cuorder-differential --show 296`: an abort between the send
                    // and the recv of one group was never explored).
                    OpKind::Send { .. } | OpKind::Recv { .. } | OpKind::Collective { .. } if th.group_depth > 0 => {
                        return info.comm.is_none_or(|c| !self.life_cycle_elsewhere(st, t, c));
                    }
                    OpKind::Send { .. } | OpKind::Recv { .. } | OpKind::Collective { .. } => vec![th.pc],
                    _ => return self.independent_of_others(st, t, &info.footprint),
                }
            }
        };
        // An NCCL launch: not local while it needs new connections (N7: set-up synchronizes with the peer's host).
        if th.wait.is_none() {
            let (need, immediate) = self.new_connections(st, t, &group);
            if !need.is_empty() || !immediate.is_empty() {
                return false;
            }
        }
        let mut fp: Vec<(Resource, Use)> = group.iter().flat_map(|i| self.info(OpLoc { thread: t, op: *i }).footprint.iter().copied()).collect();
        fp.sort_unstable();
        fp.dedup();
        self.independent_of_others(st, t, &fp)
    }

    /// Whether a thread other than `t` still has a life-cycle call (init, split, poll, abort, finalize, destroy) on
    /// communicator `c` at or after its current op.
    fn life_cycle_elsewhere(&self, st: &State, t: ThreadId, c: CommId) -> bool {
        self.reduction.comm_users.get(&c).is_some_and(|users| {
            users.iter().any(|(v, _, life)| *v != t && life.is_some_and(|l| l >= st.host.threads[*v as usize].pc))
        })
    }

    /// Whether no other thread, at or after its current op, uses a resource of `fp` in a conflicting way.
    fn independent_of_others(&self, st: &State, t: ThreadId, fp: &[(Resource, Use)]) -> bool {
        st.host.threads.iter().enumerate().all(|(u, th)| {
            if u == t as usize {
                return true;
            }
            let later = |x: Option<u32>| x.is_some_and(|i| i >= th.pc);
            let touch = &self.reduction.touch[u];
            fp.iter().all(|(res, usage)| match touch.get(res) {
                None => true,
                Some((r, w)) => match usage {
                    Use::Write => !later(*r) && !later(*w),
                    Use::Read => !later(*w),
                },
            })
        })
    }

    /// Whether the explorer may leave a step the platform may withhold ([`Self::starvable`]) for later while a step
    /// it cannot withhold is enabled (issue 8: "withhold as long as possible"). The step must commute with every
    /// step that can run meanwhile, so that each execution that takes it early is the same partial order as one
    /// that takes it once nothing else can run, or once it can no longer be withheld:
    /// - an eager delivery beyond the guarantee (N2), when the eager window is unbounded (no other delivery's credit
    ///   depends on it) and no thread still observes the sender's device (a query could tell the send has
    ///   finished); its end joins only its own start, whenever it happens. (Not checked here: once its recv runs,
    ///   the explorer keeps it, as it then stands for the rendezvous; `Search::withholding` in the explorer);
    /// - the start of an item on a device where an NCCL launch spins (S1), or of a kernel, copy or marker on a
    ///   device with an unfinished launch that may spin before it starts (not local, [`Self::is_local`]), when no
    ///   thread still observes the device (an allocation or query could tell the item has run): starting it later
    ///   covers both the executions that start it early and those in which the launch spins first and the platform
    ///   withholds it.
    ///
    /// Never with an abort or a non-blocking communicator (a watchdog fires, a poll answers, by what is
    /// finished). A state where only withholdable steps are enabled is visited (the stuck-state check), and there
    /// every step is explored.
    pub fn postponable(&self, st: &State, step: &Step) -> bool {
        self.postponable_in(st, step, &DeviceMemo::NONE)
    }

    /// [`Self::postponable`], with answers about devices kept in `m` (for `st` only).
    pub fn postponable_in(&self, st: &State, step: &Step, m: &DeviceMemo) -> bool {
        if self.reduction.aborts || self.reduction.nonblocking || self.threads_interfere(st, m) {
            return false;
        }
        match step {
            Step::Eager { send } => {
                self.starvable_in(st, step, m)
                    && self.profile.eager_bytes_per_connection == u64::MAX
                    && self.device_quiet(st, self.acting_rank(*send))
            }
            Step::Item(k) => {
                let item = st.item(*k);
                let rank = item.rank();
                // An item whose start frees a slot in a full launch queue releases the thread blocked on it (S6),
                // and one that may come before a launch's start enables a step that does not commute with other
                // launch starts ([`launch_feeders`]).
                let launch = matches!(item.kind, ItemKind::Launch { .. });
                if self.profile.launch_queue_depth.is_some()
                    || (!launch && item.streams.iter().any(|s| self.reduction.feeds_launch[self.stream_index(*s)]))
                {
                    return false;
                }
                let withholdable = self.starvable_in(st, step, m)
                    || (!launch && self.device_may_spin(st, rank, m));
                withholdable && self.device_quiet(st, rank)
            }
            _ => false,
        }
    }

    /// Whether an NCCL launch of device `rank` is unfinished or still to be issued by a host thread, so that it may
    /// spin before an item of the device starts (S1); never with independent progress. (Looking only at launches
    /// already issued took an item alone that a launch issued later could keep from starting: the search missed
    /// the hang in which the platform withholds it; `tests/reduction.rs`
    /// `an_item_issued_before_the_launch_that_spins_can_still_be_withheld`.)
    fn device_may_spin(&self, st: &State, rank: RankId, m: &DeviceMemo) -> bool {
        if self.profile.independent_progress || !self.reduction.nccl_on.contains(&rank) {
            return false;
        }
        DeviceMemo::ask(&m.may_spin, rank, || self.device_may_spin_now(st, rank))
    }

    fn device_may_spin_now(&self, st: &State, rank: RankId) -> bool {
        // Only the threads that issue launches on the device, and the streams launches are queued on, are looked at:
        // this runs for every enabled item of every state.
        let to_issue = self.reduction.issuers.get(&rank).is_some_and(|threads| {
            threads.iter().any(|u| self.reduction.launcher[*u as usize].get(&rank).is_some_and(|last| st.host.threads[*u as usize].pc <= *last))
        });
        to_issue || self.queued_launches(st, rank, |_| true).next().is_some()
    }

    /// The unfinished NCCL launches of device `rank` queued on its launch streams that `on` accepts (global stream
    /// indices), each once per stream it is queued on. An unfinished item is queued on each of its streams at or after
    /// the stream's head (the first item that has not ended).
    fn queued_launches<'s>(&'s self, st: &'s State, rank: RankId, on: impl Fn(usize) -> bool + 's) -> impl Iterator<Item = &'s Item> + 's {
        self.reduction.launch_streams[rank as usize]
            .iter()
            .filter(move |s| on(**s))
            .flat_map(move |&s| {
                let (q, head) = &st.streams.queues[s];
                q.get(*head as usize..).unwrap_or(&[]).iter()
            })
            .map(move |k| st.item(*k))
            .filter(move |i| i.status != ItemStatus::Done && i.rank() == rank && matches!(i.kind, ItemKind::Launch { .. }))
    }

    /// Enabled steps the platform may withhold:
    /// - with no guaranteed independent progress (S1), starting any item on a device where an NCCL launch is
    ///   running (spinning);
    /// - an eager delivery beyond the profile's guaranteed eager window (N2), or an early broadcast-root completion
    ///   beyond it (C1).
    pub fn starvable(&self, st: &State, step: &Step) -> bool {
        self.starvable_in(st, step, &DeviceMemo::NONE)
    }

    /// [`Self::starvable`], with answers about devices kept in `m` (for `st` only).
    pub fn starvable_in(&self, st: &State, step: &Step, m: &DeviceMemo) -> bool {
        match step {
            Step::Eager { send } => self.eager_beyond_guarantee(st, *send),
            Step::RootEarly { comm, seq } => self.root_early_beyond_guarantee(st, *comm, *seq),
            Step::Item(k) => {
                if self.profile.independent_progress {
                    return false;
                }
                self.device_spinning(st, st.item(*k).rank(), m)
            }
            Step::Host { .. }
            | Step::Transfer { .. }
            | Step::Drain { .. }
            | Step::Collective { .. }
            | Step::Connect { .. }
            | Step::Watchdog { .. } => false,
        }
    }
}
