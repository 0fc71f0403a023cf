//! The enabled steps by rank, for engines that keep them between steps (issue 8, "steps/s"; issue 9, "scale"):
//! every enabled step is *owned* by one rank (a host step by its thread's rank, an item step by its stream's rank,
//! a P2P step by the rank of the launch it comes from, a collective step by the member that lists it, a connection
//! set-up by the first thread's rank), so [`Semantics::enabled_for_rank`] over all ranks is [`Semantics::enabled`]
//! (as a set). A step can only change what ranks *near* the ranks it writes ([`Semantics::step_ranks`]) have
//! enabled, where near means sharing an op's footprint ([`RankGroups`]): the rank a thread runs for and every rank
//! its op names (streams, events, buffers), a send's or recv's peer, a collective's or init's communicator members,
//! a barrier's participants. An engine recomputes only those ranks after each step. `tests/incremental.rs` checks,
//! at every step of random executions of the corpus and of generated pipelines, that the kept sets equal
//! [`Semantics::enabled`].

use std::collections::BTreeSet;

use crate::op_info::NcclRole;

use super::*;

/// A few ranks, sorted and without repeats: what [`Semantics::step_ranks`] returns. On the stack for up to 4 (a
/// step touches one or two ranks but for collectives and connection set-ups); it runs for every step of a timed run.
pub type RankSet = smallvec::SmallVec<[RankId; 4]>;

/// Groups of ranks whose enabled steps may depend on each other's state (module docs), deduplicated.
#[derive(Clone, Debug)]
pub struct RankGroups {
    groups: Vec<Vec<RankId>>,
    /// Per rank: the groups it belongs to (always at least its own singleton).
    of_rank: Vec<Vec<u32>>,
    /// Per rank `r`: `r` and every rank whose ops outside NCCL and barriers name `r` together with it, ascending:
    /// the ranks a rank-local step of `r` ([`Semantics::rank_local_step`]) may affect ([`Self::affected_by_step`]).
    local: Vec<Vec<RankId>>,
}

impl RankGroups {
    /// The ranks whose enabled steps may change when a step writes the state of `written` ranks, each once, in
    /// rank order. `mark` is scratch space of one flag per rank (all `false` on entry and on return).
    pub fn affected(&self, written: &[RankId], mark: &mut [bool], out: &mut Vec<RankId>) {
        out.clear();
        for &w in written {
            for &g in &self.of_rank[w as usize] {
                for &r in &self.groups[g as usize] {
                    if !mark[r as usize] {
                        mark[r as usize] = true;
                        out.push(r);
                    }
                }
            }
        }
        for &r in out.iter() {
            mark[r as usize] = false;
        }
        out.sort_unstable();
    }

    /// The ranks whose enabled steps may change when a step that wrote the state of `written` ranks
    /// ([`Semantics::step_ranks`]) is taken, ascending, into `out`: for a rank-local step (`local`,
    /// [`Semantics::rank_local_step`]) the ranks that name its rank outside NCCL and barriers, otherwise
    /// [`Self::affected`]. `mark` as there.
    pub fn affected_by_step(&self, written: &[RankId], local: bool, mark: &mut [bool], out: &mut Vec<RankId>) {
        if let (true, [r]) = (local, written) {
            out.clear();
            out.extend_from_slice(&self.local[*r as usize]);
        } else {
            self.affected(written, mark, out);
        }
    }
}

impl<'p> Semantics<'p> {
    /// The rank groups of this program (module docs).
    pub fn rank_groups(&self) -> RankGroups {
        let n = self.program.ranks.len();
        let mut set: BTreeSet<Vec<RankId>> = BTreeSet::new();
        for r in 0..n as RankId {
            set.insert(vec![r]);
        }
        let mut g = RankSet::new();
        // Per rank `r`: `r` and the ranks that ops outside NCCL and barriers name together with it (`local`); made in
        // the same pass over the ops as the groups.
        let mut local: Vec<Vec<RankId>> = (0..n as RankId).map(|r| vec![r]).collect();
        for (t, &(home, _)) in self.thread_of.iter().enumerate() {
            for (i, op) in self.ops_of(t as ThreadId).iter().enumerate() {
                let loc = OpLoc { thread: t as ThreadId, op: i as u32 };
                self.op_ranks_into(loc, home, &mut g);
                // Most ops touch their own rank only: that group is already in.
                if g.len() > 1 {
                    if !set.contains(&g[..]) {
                        set.insert(g.to_vec());
                    }
                    if self.info(loc).comm.is_none() && !matches!(op.kind, OpKind::Barrier { .. }) {
                        for &r in &g {
                            local[r as usize].extend(g.iter().copied());
                        }
                    }
                }
            }
        }
        for b in &self.program.barriers {
            let mut g: Vec<RankId> = b.participants.iter().map(|(r, _)| *r).collect();
            g.sort_unstable();
            g.dedup();
            set.insert(g);
        }
        let groups: Vec<Vec<RankId>> = set.into_iter().collect();
        let mut of_rank = vec![vec![]; n];
        for (i, g) in groups.iter().enumerate() {
            for &r in g {
                of_rank[r as usize].push(i as u32);
            }
        }
        for l in &mut local {
            l.sort_unstable();
            l.dedup();
        }
        RankGroups { groups, of_rank, local }
    }

    /// Whether `step` (enabled in `st`, not yet taken) changes only state that the steps of other ranks read through
    /// ops outside NCCL and barriers ([`RankGroups::affected_by_step`]): the start of a kernel, copy, memset, event
    /// record or wait marker (not an NCCL launch: its ops become running, which the peers' delivery steps read), or a
    /// host call that is neither an NCCL call, a group bracket nor a barrier. Such a step writes its rank's streams,
    /// events, memory and thread; another rank reads those only through ops that name the rank (a synchronizing call
    /// that waits for every device, S7), never through NCCL matching, connection set-up or barriers. Its rank is
    /// `written[0]`. (With the full groups, a kernel of one pipeline stage recomputed both neighbours: issue 8.)
    pub fn rank_local_step(&self, st: &State, step: &Step) -> bool {
        match step {
            Step::Item(k) => !matches!(st.item(*k).kind, ItemKind::Launch { .. }),
            Step::Host { thread, .. } => {
                let loc = OpLoc { thread: *thread, op: st.host.threads[*thread as usize].pc };
                self.info(loc).comm.is_none()
                    && !matches!(self.op(loc).kind, OpKind::Barrier { .. } | OpKind::GroupStart | OpKind::GroupEnd)
            }
            _ => false,
        }
    }

    /// The ranks one op's steps may read or write, sorted: the thread's rank, every rank the op names, its acting
    /// rank, a P2P peer, a collective's or init's communicator members.
    fn op_ranks(&self, loc: OpLoc, home: RankId) -> RankSet {
        let mut g = RankSet::new();
        self.op_ranks_into(loc, home, &mut g);
        g
    }

    /// [`Self::op_ranks`] into `g` (cleared first), so that a pass over every op of a program reuses one buffer.
    fn op_ranks_into(&self, loc: OpLoc, home: RankId, g: &mut RankSet) {
        let info = self.info(loc);
        g.clear();
        g.push(home);
        // `info.ranks` holds the acting rank and the stream's rank too (`OpKind::info`). Most ops name their own
        // rank only: pushing only the others keeps the common case free of sorting.
        let mut add = |r: RankId| {
            if r != home {
                g.push(r);
            }
        };
        info.ranks.iter().for_each(|&r| add(r));
        info.observes.into_iter().for_each(&mut add);
        match info.nccl {
            Some(NcclRole::Send { peer } | NcclRole::Recv { peer }) => add(peer),
            Some(NcclRole::Collective { .. } | NcclRole::Init) => {
                if let Some(c) = info.comm {
                    self.program.comms[c.0 as usize].members.iter().for_each(|&r| add(r));
                }
            }
            None => {}
        }
        if g.len() > 1 {
            g.sort_unstable();
            g.dedup();
        }
    }

    /// The ranks whose state `step` may write, computed before it is applied (module docs).
    pub fn step_ranks(&self, st: &State, step: &Step) -> RankSet {
        match step {
            Step::Host { thread, .. } => {
                let t = *thread;
                // N7: the platform's choice of when collectives connect changes every rank's first collective
                // (its outcomes, whether it blocks); N14: its choice of the kernel-plan order, every rank's group
                // ends that the orders cut differently (their outcomes, their plans).
                if self.chooses_platform(st, t) {
                    return (0..self.program.ranks.len() as RankId).collect();
                }
                let home = self.rank_of(t);
                let th = &st.host.threads[t as usize];
                let mut out = self.op_ranks(OpLoc { thread: t, op: th.pc }, home);
                // The outermost group end launches what the group collected (N4).
                if th.wait.is_none() && matches!(self.op(OpLoc { thread: t, op: th.pc }).kind, OpKind::GroupEnd) {
                    for &o in &th.group_ops {
                        out.extend(self.op_ranks(OpLoc { thread: t, op: o }, home));
                    }
                    out.sort_unstable();
                    out.dedup();
                }
                // A poll's return launches the work its call in progress deferred (N12).
                if let Some(Wait::Poll(c)) = &th.wait {
                    if let Some(Pending { wait: Wait::Connect { ops, .. }, .. }) = self.background_of(st, t, *c) {
                        for &o in ops {
                            out.extend(self.op_ranks(OpLoc { thread: t, op: o }, home));
                        }
                        out.sort_unstable();
                        out.dedup();
                    }
                }
                out
            }
            // The watchdog aborts the rank's watched communicators, which their other members' steps depend on.
            Step::Watchdog { rank } => {
                let mut v = RankSet::from_elem(*rank, 1);
                for (c, _) in self.watched_comms(*rank) {
                    v.extend(self.program.comms[c.0 as usize].members.iter().copied());
                }
                v.sort_unstable();
                v.dedup();
                v
            }
            Step::Item(k) => RankSet::from_elem(st.item(*k).rank(), 1),
            Step::Transfer { send, recv } => {
                let mut v: RankSet = [self.acting_rank(*send), self.acting_rank(*recv)].into_iter().collect();
                v.sort_unstable();
                v.dedup();
                v
            }
            Step::Eager { send } => RankSet::from_elem(self.acting_rank(*send), 1),
            Step::Drain { recv } => RankSet::from_elem(self.acting_rank(*recv), 1),
            Step::Collective { comm, .. } | Step::RootEarly { comm, .. } => {
                let mut v = RankSet::from_slice(&self.program.comms[comm.0 as usize].members);
                v.sort_unstable();
                v
            }
            Step::Connect { a, b, ra, rb, .. } => {
                let mut v = RankSet::from_slice(&[self.rank_of(*a), self.rank_of(*b), *ra, *rb]);
                v.sort_unstable();
                v.dedup();
                v
            }
        }
    }

    /// The enabled steps rank `r` owns (module docs), appended to `out`: host steps of its threads, item and
    /// communication steps of the items heading its streams, connection set-ups its threads start.
    /// [`Self::host_steps_for_rank`] then [`Self::device_steps_for_rank`], in that order.
    pub fn enabled_for_rank(&self, st: &State, r: RankId, out: &mut Vec<Step>) {
        self.host_steps_for_rank(st, r, out);
        self.device_steps_for_rank(st, r, out);
    }

    /// The host steps rank `r` owns (every `Step::Host` of its threads, by thread and choice), appended to `out`.
    pub fn host_steps_for_rank(&self, st: &State, r: RankId, out: &mut Vec<Step>) {
        if st.undefined.is_some() {
            return;
        }
        for t in self.rank_threads(r) {
            for choice in 0..self.host_choices(st, t) {
                out.push(Step::Host { thread: t, choice });
            }
        }
    }

    /// The other steps rank `r` owns, appended to `out`: item and communication steps of the items heading its
    /// streams, then connection set-ups its threads start. None of them is a `Step::Host`.
    pub fn device_steps_for_rank(&self, st: &State, r: RankId, out: &mut Vec<Step>) {
        if st.undefined.is_some() {
            return;
        }
        let heads = self.rank_heads(st, r);
        self.item_steps(st, &heads, out);
        self.comm_steps(st, &heads, out);
        for t in self.rank_threads(r) {
            self.connect_steps_from(st, t as usize, out);
        }
    }

    /// The items heading rank `r`'s stream queues, each once, in item order.
    fn rank_heads(&self, st: &State, r: RankId) -> Heads {
        let s0 = self.stream_base[r as usize] as usize;
        let s1 = self.stream_base.get(r as usize + 1).map_or(self.agents - self.thread_of.len(), |x| *x as usize);
        // On the stack for up to 8 streams: this runs for every rank a step affects.
        // Pushed one by one: SmallVec's `collect` of a filtered iterator cost more than the rest of this function.
        let mut heads = Heads::new();
        for (q, head) in &st.streams.queues[s0..s1] {
            if let Some(k) = q.get(*head as usize) {
                if !heads.contains(k) {
                    heads.push(*k);
                }
            }
        }
        heads.sort_unstable();
        heads
    }

    /// Asked before a connection set-up `step` (N7, `Step::Connect`) is applied to `st`: `Some` with the ranks of
    /// its two threads when, once it is applied, the enabled steps change only in the host steps of those ranks
    /// and in the set-up itself no longer being enabled; `None` for every other step, and for a set-up that may do
    /// more. The step removes one need from each thread (`connect`); another set-up is enabled by the two
    /// threads' needs for its own pair of ranks, so only those of other threads acting for the same two ranks could
    /// change, and a thread's second need for the same pair (a call in progress in the background, N12) could
    /// keep this one enabled: both are excluded (each of the two acting ranks has one NCCL thread, and neither
    /// thread has background calls). Nothing else reads the needs or the connections when steps are enabled (the
    /// connections are read when a group ends). A collective's first use sets up a connection with every other
    /// member, and the engines' recomputing every member after each of those N (N - 1) / 2 set-ups made a timed
    /// all-reduce over 128 ranks take 10 s (issue 9). `tests/incremental.rs` checks the kept sets against
    /// [`Self::enabled`] at every step with this shortcut.
    pub fn connect_only(&self, st: &State, step: &Step) -> Option<[RankId; 2]> {
        let Step::Connect { a, b, ra, rb, .. } = *step else { return None };
        let alone = |t: ThreadId, r: RankId| self.nccl_threads_of[r as usize] == [t] && st.host.threads[t as usize].background.is_empty();
        (alone(a, ra) && alone(b, rb)).then(|| [self.rank_of(a), self.rank_of(b)])
    }

    /// Asked before a host `step` is applied to `st`: `Some` with its thread's rank when the step is a collective
    /// call (outside a group, or the end of a group of collectives only) on blocking communicators, or the return
    /// from the connection set-up such a call blocked in (N7), by a thread that is its rank's only NCCL thread, has
    /// no background calls (N12) and acts on its own rank. Such a step changes other ranks' enabled steps only by
    /// the set-ups with its thread that they list ([`Self::connect_steps_with`]): it blocks in a set-up (the other
    /// members already blocked in theirs gain a pair with it), or it enqueues its launches, which registers
    /// collective parts that have not started (C1: a part completes once the parts it needs run, so a part that does
    /// not run yet enables and disables nothing elsewhere). Its own rank may change in every way. `None` for every
    /// other step. A collective's first use made each of the N calls and returns recompute every member, each
    /// listing its set-ups with every other member (issue 9). `tests/incremental.rs` checks the kept sets against
    /// [`Self::enabled`] at every step with this shortcut.
    pub fn collective_call_only(&self, st: &State, step: &Step) -> Option<RankId> {
        let Step::Host { thread, .. } = *step else { return None };
        if !self.collectives || self.chooses_platform(st, thread) {
            return None;
        }
        let th = &st.host.threads[thread as usize];
        let home = self.rank_of(thread);
        let collective_here = |op: u32| {
            let loc = OpLoc { thread, op };
            let info = self.info(loc);
            matches!(info.nccl, Some(NcclRole::Collective { .. }))
                && info.comm.is_some_and(|c| !self.is_nonblocking(c))
                && self.acting_rank(loc) == home
                && info.ranks.iter().all(|&r| r == home)
        };
        // The op first (a finished thread has none): most host steps are something else, and this is asked for
        // every step of a timed run.
        let quiet = match &th.wait {
            None => match &self.ops_of(thread).get(th.pc as usize)?.kind {
                OpKind::Collective { .. } => th.group_depth == 0 && collective_here(th.pc),
                OpKind::GroupEnd => th.group_depth == 1 && !th.group_ops.is_empty() && th.group_ops.iter().all(|&o| collective_here(o)),
                _ => false,
            },
            Some(Wait::Connect { need, ops }) => need.is_empty() && !ops.is_empty() && ops.iter().all(|&o| collective_here(o)),
            Some(_) => false,
        };
        (quiet && self.nccl_threads_of[home as usize] == [thread] && th.background.is_empty()).then_some(home)
    }

    /// The connection set-ups (N7) that other threads list with thread `partner`, which acts on its own rank only
    /// ([`Self::collective_call_only`]), each with the rank that lists it, appended to `out` ordered by that rank
    /// and then as [`Self::enabled_for_rank`] lists the rank's steps ([`Self::connect_steps_from`] thread by thread:
    /// need map by need map, key by key). Only the keys mirroring `partner`'s needs are looked up, so this costs
    /// O(its needs), not O(members²) as listing every member's set-ups did (issue 9).
    pub fn connect_steps_with(&self, st: &State, partner: ThreadId, out: &mut Vec<(RankId, Step)>) {
        let home = self.rank_of(partner);
        // Partner's needs (communicator, peer rank), ascending as a need map orders its keys (comm, peer, home).
        let mut keys: Vec<(CommId, RankId)> = vec![];
        for pp in self.connect_needs(st, partner as usize) {
            keys.extend(pp.keys().filter(|(_, r, _)| *r == home).map(|(c, _, y)| (*c, *y)));
        }
        keys.sort_unstable();
        keys.dedup();
        let mut threads: Vec<ThreadId> = keys.iter().flat_map(|(_, y)| self.nccl_threads_of[*y as usize].iter().copied()).filter(|&x| x != partner).collect();
        threads.sort_unstable();
        threads.dedup();
        let start = out.len();
        for x in threads {
            let from = out.len();
            for px in self.connect_needs(st, x as usize) {
                for &(comm, y) in &keys {
                    // Listed by x when (partner, home) comes after (x, y), and the needs mirror (`connect_steps_from`).
                    if (partner, home) < (x, y) || !self.nccl_threads_of[y as usize].contains(&x) {
                        continue;
                    }
                    let Some(need_x) = px.get(&(comm, y, home)) else { continue };
                    if self.connect_needs(st, partner as usize).any(|pp| pp.get(&(comm, home, y)) == Some(need_x)) {
                        let step = Step::Connect { a: x, b: partner, comm, ra: y, rb: home };
                        if !out[from..].iter().any(|(_, s)| *s == step) {
                            out.push((self.rank_of(x), step));
                        }
                    }
                }
            }
        }
        // By listing rank; within a rank, threads ascending as pushed (a stable sort).
        out[start..].sort_by_key(|(r, _)| *r);
    }

    /// Asked before `step` is applied to `st`: `Some(rank)` when the step can change only the host steps of its
    /// rank, so that an engine that keeps enabled steps by rank recomputes only [`Self::host_steps_for_rank`] for
    /// it and keeps its item, communication and connection steps ([`Self::device_steps_for_rank`]). Such a step is
    /// a host call, not a return from a wait, whose op names only its own rank ([`OpInfo::ranks`]) and that either
    /// enqueues one item behind work already heading its stream — a kernel launch, an event record (S3: the binding
    /// is read by later calls, not by queued items), a stream wait for an event — or enqueues nothing: a host
    /// sleep, a group start, a send, recv or collective inside a group (N4: collected until the group ends). No
    /// queue head moves, no item changes status, no NCCL table, connection or wait changes, and those are all the
    /// device steps read (S6: a call that finds its queue full blocks, a host-side change). Every other step:
    /// `None`. `tests/incremental.rs` checks the kept sets against [`Self::enabled`] at every step with this
    /// shortcut (issue 9: a third of a pipeline's steps are such calls, and recomputing their ranks whole was a
    /// fifth of a timed run).
    pub fn host_only(&self, st: &State, step: &Step) -> Option<RankId> {
        let Step::Host { thread, .. } = step else { return None };
        let th = &st.host.threads[*thread as usize];
        if th.wait.is_some() || self.thread_finished(st, *thread) {
            return None;
        }
        let loc = OpLoc { thread: *thread, op: th.pc };
        let info = self.info(loc);
        let rank = self.rank_of(*thread);
        if !info.ranks.iter().all(|&r| r == rank) {
            return None;
        }
        let behind_work = || {
            info.stream.is_some_and(|s| {
                let (q, head) = &st.streams.queues[self.stream_index(s)];
                (*head as usize) < q.len()
            })
        };
        let quiet = match self.op(loc).kind {
            OpKind::Kernel { .. } | OpKind::EventRecord { .. } | OpKind::StreamWaitEvent { .. } => behind_work(),
            OpKind::HostSleep { .. } | OpKind::GroupStart => true,
            OpKind::Send { .. } | OpKind::Recv { .. } | OpKind::Collective { .. } => th.group_depth > 0,
            _ => false,
        };
        quiet.then_some(rank)
    }
}

/// The items heading one rank's stream queues (on the stack for up to 8 streams).
type Heads = smallvec::SmallVec<[ItemKey; 8]>;

/// Counts per rank with O(log n) prefix sums and "which rank holds the i-th element" (a Fenwick tree).
#[derive(Clone, Debug)]
struct Counts {
    tree: Vec<usize>,
    of_rank: Vec<usize>,
    total: usize,
}

impl Counts {
    fn new(n: usize) -> Counts {
        Counts { tree: vec![0; n + 1], of_rank: vec![0; n], total: 0 }
    }

    fn set(&mut self, r: usize, count: usize) {
        let old = self.of_rank[r];
        if old == count {
            return;
        }
        self.of_rank[r] = count;
        self.total = self.total + count - old;
        let mut i = r + 1;
        while i < self.tree.len() {
            self.tree[i] = self.tree[i] + count - old;
            i += i & i.wrapping_neg();
        }
    }

    /// The rank holding element `i` (< total) and `i`'s offset within it.
    fn find(&self, mut i: usize) -> (usize, usize) {
        let n = self.tree.len() - 1;
        let mut pos = 0;
        let mut bit = if n == 0 { 0 } else { 1 << (usize::BITS - 1 - n.leading_zeros()) };
        while bit > 0 {
            let next = pos + bit;
            if next <= n && self.tree[next] <= i {
                pos = next;
                i -= self.tree[next];
            }
            bit >>= 1;
        }
        (pos, i)
    }
}

/// The enabled steps of a state, kept between steps by owning rank (module docs) for engines that take one step at
/// a time (random and PCT walks, `run`): after a step only the ranks it affects are recomputed, so a step costs the
/// work of the ranks it touches plus O(log ranks), not O(ranks) as [`Semantics::enabled`] does (issue 8, "random
/// walk at least 1 M model steps/s"). Each step carries whether the platform may withhold it
/// ([`Semantics::starvable`]), which reads only the state of the ranks near its owner.
///
/// Order: rank by rank, each rank's steps in [`Semantics::enabled_for_rank`]'s order, then the watchdog steps (N9),
/// which are enabled exactly when every other step may be withheld. As a set it equals [`Semantics::enabled`]
/// (`tests/incremental.rs` checks it at every step of random executions, with the starvable flags).
#[derive(Clone, Debug)]
pub struct Frontier {
    /// Shared by the clones an explorer makes at its branching points.
    groups: std::sync::Arc<RankGroups>,
    /// Per rank: its enabled steps, each with whether the platform may withhold it.
    steps: Vec<Vec<(Step, bool)>>,
    all: Counts,
    allowed: Counts,
    /// N9: the watchdog steps, present only when every other step may be withheld.
    watchdogs: Vec<Step>,
    mark: Vec<bool>,
    affected: Vec<RankId>,
}

impl Frontier {
    /// The enabled steps of `st`.
    pub fn new(sem: &Semantics, st: &State) -> Frontier {
        let n = sem.program.ranks.len();
        let mut f = Frontier {
            groups: std::sync::Arc::new(sem.rank_groups()),
            steps: vec![vec![]; n],
            all: Counts::new(n),
            allowed: Counts::new(n),
            watchdogs: vec![],
            mark: vec![false; n],
            affected: vec![],
        };
        for r in 0..n as RankId {
            f.recompute(sem, st, r);
        }
        f.refresh_watchdogs(sem, st);
        f
    }

    fn recompute(&mut self, sem: &Semantics, st: &State, r: RankId) {
        let mut v = vec![];
        sem.enabled_for_rank(st, r, &mut v);
        let kept: Vec<(Step, bool)> = v.into_iter().map(|s| {
            let w = sem.starvable(st, &s);
            (s, w)
        }).collect();
        self.all.set(r as usize, kept.len());
        self.allowed.set(r as usize, kept.iter().filter(|(_, w)| !w).count());
        self.steps[r as usize] = kept;
    }

    fn refresh_watchdogs(&mut self, sem: &Semantics, st: &State) {
        self.watchdogs.clear();
        if sem.watched && self.allowed.total == 0 && st.undefined.is_none() {
            self.watchdogs = sem.watchdogs_if_stuck(st);
        }
    }

    /// Applies `step` (one of these steps) to `st` as [`Semantics::apply`] does, and brings the set up to date.
    pub fn apply(&mut self, sem: &Semantics, st: &mut State, step: &Step) -> Effects {
        let written = sem.step_ranks(st, step);
        let local = sem.rank_local_step(st, step);
        let fx = sem.apply(st, step);
        if st.undefined.is_some() {
            // An undefined state ends the execution: nothing is enabled ([`Semantics::enabled`]).
            for r in 0..self.steps.len() {
                self.steps[r].clear();
                self.all.set(r, 0);
                self.allowed.set(r, 0);
            }
        } else {
            let mut affected = std::mem::take(&mut self.affected);
            self.groups.affected_by_step(&written, local, &mut self.mark, &mut affected);
            for &r in &affected {
                self.recompute(sem, st, r);
            }
            self.affected = affected;
        }
        self.refresh_watchdogs(sem, st);
        fx
    }

    /// Number of enabled steps.
    pub fn len(&self) -> usize {
        self.all.total + self.watchdogs.len()
    }

    /// Whether no step is enabled (the state is final: complete, deadlocked or undefined).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of enabled steps the platform may not withhold.
    pub fn allowed_len(&self) -> usize {
        self.allowed.total + self.watchdogs.len()
    }

    /// Whether steps are enabled and the platform may withhold every one (a stuck state if it does).
    pub fn all_starvable(&self) -> bool {
        !self.is_empty() && self.allowed_len() == 0
    }

    /// The `i`-th enabled step (`i < len()`), in the order of the type's docs.
    pub fn get(&self, i: usize) -> &Step {
        if i >= self.all.total {
            return &self.watchdogs[i - self.all.total];
        }
        let (r, k) = self.all.find(i);
        &self.steps[r][k].0
    }

    /// The `i`-th step the platform may not withhold (`i < allowed_len()`), in the same order.
    pub fn get_allowed(&self, i: usize) -> &Step {
        if i >= self.allowed.total {
            return &self.watchdogs[i - self.allowed.total];
        }
        let (r, k) = self.allowed.find(i);
        self.steps[r].iter().filter(|(_, w)| !w).nth(k).map(|(s, _)| s).expect("the rank holds k allowed steps")
    }

    /// Every enabled step with whether the platform may withhold it, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&Step, bool)> + '_ {
        self.steps.iter().flatten().map(|(s, w)| (s, *w)).chain(self.watchdogs.iter().map(|s| (s, false)))
    }

    /// The index of `step` among the enabled steps, if it is enabled.
    pub fn position(&self, step: &Step) -> Option<usize> {
        self.iter().position(|(s, _)| s == step)
    }

    /// The enabled steps as one vector, in order.
    pub fn to_vec(&self) -> Vec<Step> {
        self.iter().map(|(s, _)| s.clone()).collect()
    }
}
