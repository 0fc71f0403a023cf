//! A communicator's life after init: non-blocking calls that return `ncclInProgress` and finish in the background
//! until a poll sees them succeed (N12), `ncclCommAbort`, `ncclCommFinalize` and `ncclCommDestroy` and the ban on
//! using a communicator after them (N13), and the host watchdog that turns a hang into an abort (N9).



use super::super::*;

impl<'p> Semantics<'p> {
    /// Whether `comm` is non-blocking (`ncclConfig_t.blocking = 0`; N12).
    pub(crate) fn is_nonblocking(&self, comm: CommId) -> bool {
        self.program.comms[comm.0 as usize].nonblocking
    }

    /// The communicators of a group's NCCL ops, ascending.
    fn group_comms(&self, t: ThreadId, ops: &[u32]) -> Vec<CommId> {
        let mut v: Vec<CommId> = ops.iter().filter_map(|&i| self.info(OpLoc { thread: t, op: i }).comm).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The number of outcomes of the outermost group end (or ungrouped call) of `ops` on non-blocking
    /// communicators (N12): 2 when it may return `ncclSuccess` having enqueued the work (choice 0) or
    /// `ncclInProgress` with the work deferred (choice 1); 1 when it needs new connections, which are set up in the
    /// background (in progress). `None` when the group's communicators are blocking.
    pub(crate) fn nonblocking_outcomes(&self, st: &State, t: ThreadId, ops: &[u32]) -> Option<u32> {
        self.nonblocking_outcomes_as(st, t, ops, self.coll_lazy(st).unwrap_or(true))
    }

    /// [`Self::nonblocking_outcomes`] with collectives connecting lazily (`coll_lazy`) or at init (N7).
    pub(crate) fn nonblocking_outcomes_as(&self, st: &State, t: ThreadId, ops: &[u32], coll_lazy: bool) -> Option<u32> {
        if !self.nonblocking {
            return None;
        }
        let comms = self.group_comms(t, ops);
        if comms.is_empty() || !comms.iter().all(|c| self.is_nonblocking(*c)) {
            return None;
        }
        let (need, _) = self.new_connections_as(st, t, ops, coll_lazy);
        if !need.is_empty() {
            return Some(1);
        }
        Some(2)
    }

    /// The outermost group end (or ungrouped call) of `ops`, of which some are on non-blocking communicators (N12).
    /// Returns `false` when the communicators are all blocking (the caller goes on as usual).
    pub(crate) fn nonblocking_group_end(&self, st: &mut State, t: ThreadId, ops: &[u32], choice: u32) -> bool {
        if !self.nonblocking {
            return false;
        }
        let comms = self.group_comms(t, ops);
        let nb: Vec<bool> = comms.iter().map(|c| self.is_nonblocking(*c)).collect();
        if !nb.iter().any(|x| *x) {
            return false;
        }
        let loc = OpLoc { thread: t, op: st.host.threads[t as usize].pc };
        if nb.iter().any(|x| !*x) {
            let names: Vec<String> = comms.iter().map(|c| self.comm_name(*c).to_string()).collect();
            let msg = format!(
                "{} ends a group with blocking and non-blocking communicators ({}): NCCL refuses it (\"Blocking and \
                 nonblocking communicators are not allowed in the same group\", ncclInvalidArgument)",
                self.op_label(loc),
                names.join(", ")
            );
            self.set_undefined(st, Rule::N12, msg, vec![loc]);
            return true;
        }
        let outcomes = self.nonblocking_outcomes(st, t, ops).unwrap_or(1);
        if outcomes == 2 && choice == 0 {
            // ncclSuccess: enqueued before the call returned.
            self.enqueue_launches(st, t, ops);
            self.advance(st, t);
            return true;
        }
        // ncclInProgress: connections are set up and the work enqueued in the background, once per communicator.
        let (need, immediate) = self.new_connections(st, t, ops);
        st.nccl.connected.extend(immediate);
        if !need.is_empty() {
            self.check_nonmirrored(st, t, &need);
        }
        for c in comms {
            let mine: Vec<u32> = ops.iter().copied().filter(|&i| self.info(OpLoc { thread: t, op: i }).comm == Some(c)).collect();
            let need_c = need.iter().filter(|((x, _, _), _)| *x == c).map(|(k, v)| (*k, v.clone())).collect();
            self.start_background(st, t, Pending { comm: c, op: loc.op, wait: Wait::Connect { need: need_c, ops: mine } });
        }
        self.advance(st, t);
        true
    }

    /// Records a call in progress on a non-blocking communicator (N12).
    pub(crate) fn start_background(&self, st: &mut State, t: ThreadId, p: Pending) {
        let bg = &mut st.host.threads[t as usize].background;
        let at = bg.partition_point(|q| q.comm < p.comm);
        bg.insert(at, p);
    }

    /// The call in progress of thread `t` on `comm`, if any.
    pub(crate) fn background_of<'s>(&self, st: &'s State, t: ThreadId, comm: CommId) -> Option<&'s Pending> {
        st.host.threads[t as usize].background.iter().find(|p| p.comm == comm)
    }

    /// N12 / N13: whether the op at `loc` may use `comm` on `rank` now. An op on a communicator that an abort or a
    /// destroy ended, or any op but `CommDestroy` after a finished `CommFinalize`, is undefined (N13); a call while a
    /// thread of the rank still has a call in progress on it (other than the poll of that thread, or an abort) is
    /// undefined (N12). Returns `false` after making the execution undefined.
    pub(crate) fn check_comm_usable(&self, st: &mut State, loc: OpLoc, comm: CommId, rank: RankId) -> bool {
        let kind = &self.op(loc).kind;
        if let Some(end) = st.nccl.ended.get(&(comm, rank)).copied() {
            let ok = matches!((end, kind), (CommEnd::Finalized(_), OpKind::CommDestroy { .. }));
            if !ok {
                let why = match end {
                    CommEnd::Aborted(a) => format!("after {} aborted it", self.op_label(a)),
                    CommEnd::Watchdog => "after the watchdog aborted it (N9)".to_string(),
                    CommEnd::Finalized(a) => format!("after {} finalized it (only CommDestroy may follow)", self.op_label(a)),
                    CommEnd::Destroyed(a) => format!("after {} destroyed it", self.op_label(a)),
                };
                let mut at = vec![loc];
                if let CommEnd::Aborted(a) | CommEnd::Finalized(a) | CommEnd::Destroyed(a) = end {
                    at.push(a);
                }
                let msg = format!(
                    "{} uses communicator {} on r{rank} {why}: the communicator is freed and may not be used again \
                     (NCCL: ncclCommAbort and ncclCommDestroy free the communicator object)",
                    self.op_label(loc),
                    self.comm_name(comm)
                );
                self.set_undefined(st, Rule::N13, msg, at);
                return false;
            }
        }
        if matches!(kind, OpKind::CommAbort { .. }) {
            return true;
        }
        for u in self.threads_of_rank(rank) {
            if matches!(kind, OpKind::CommPoll { .. }) && u == loc.thread {
                continue;
            }
            if let Some(p) = self.background_of(st, u, comm) {
                let first = OpLoc { thread: u, op: p.op };
                let msg = format!(
                    "{} calls NCCL on communicator {} while {} is still in progress (ncclInProgress): poll \
                     ncclCommGetAsyncError until it returns ncclSuccess before the next call on a non-blocking \
                     communicator",
                    self.op_label(loc),
                    self.comm_name(comm),
                    self.op_label(first)
                );
                self.set_undefined(st, Rule::N12, msg, vec![loc, first]);
                return false;
            }
        }
        true
    }

    /// The global threads of a rank.
    pub(crate) fn threads_of_rank(&self, rank: RankId) -> std::ops::Range<ThreadId> {
        let t0 = self.thread_base[rank as usize];
        let t1 = self.thread_base.get(rank as usize + 1).copied().unwrap_or(self.thread_of.len() as u32);
        t0..t1
    }

    /// `CommPoll(comm)` (N12): blocks until the call in progress on `comm` finishes, or returns at once.
    pub(crate) fn comm_poll(&self, st: &mut State, t: ThreadId, comm: CommId) {
        if self.background_of(st, t, comm).is_some() {
            self.block(st, t, Wait::Poll(comm));
        } else {
            self.advance(st, t);
        }
    }

    /// Whether the poll of `comm` by `t` may return: its call in progress has finished, or is gone (aborted).
    pub(crate) fn poll_satisfied(&self, st: &State, t: ThreadId, comm: CommId) -> bool {
        match self.background_of(st, t, comm) {
            None => true,
            Some(p) => match &p.wait {
                Wait::Init(c, n) => self.init_complete(st, *c, *n),
                Wait::Connect { need, .. } => need.is_empty(),
                Wait::Finalize(c) => self.finalize_complete(st, *c, self.rank_of(t)),
                _ => unreachable!("only init, set-up and finalize run in the background"),
            },
        }
    }

    /// The poll sees `ncclSuccess`: what the call in progress did in the background takes effect for the host (the
    /// init's rendezvous, the deferred launch, the finalize).
    pub(crate) fn poll_unblock(&self, st: &mut State, t: ThreadId, comm: CommId) {
        let bg = &mut st.host.threads[t as usize].background;
        let Some(i) = bg.iter().position(|p| p.comm == comm) else { return };
        let p = bg.remove(i);
        match p.wait {
            Wait::Init(c, n) => self.init_unblock(st, t, c, n),
            // N12, N10: the deferred work is enqueued now, after every stream op the thread made meanwhile.
            Wait::Connect { ops, .. } => self.enqueue_launches(st, t, &ops),
            Wait::Finalize(c) => self.finalize_unblock(st, t, c, OpLoc { thread: t, op: p.op }),
            _ => unreachable!("only init, set-up and finalize run in the background"),
        }
    }

    /// `CommInit` on a non-blocking communicator: the rendezvous runs in the background (N12).
    pub(crate) fn comm_init_nonblocking(&self, st: &mut State, t: ThreadId, comm: CommId) {
        let pc = st.host.threads[t as usize].pc;
        let rank = self.acting_rank(OpLoc { thread: t, op: pc });
        let c = st.host.threads[t as usize].clock.clone();
        st.nccl.init_arrived.entry((comm, 0)).or_default().insert(rank, c);
        self.start_background(st, t, Pending { comm, op: pc, wait: Wait::Init(comm, 0) });
        self.advance(st, t);
    }

    /// `CommFinalize(comm)`, or a `CommDestroy(comm)` without a finished finalize (N13): an arrival at the
    /// members' rendezvous; blocking, or in progress on a non-blocking communicator (`CommDestroy` always blocks).
    pub(crate) fn comm_finalize(&self, st: &mut State, t: ThreadId, comm: CommId) {
        let pc = st.host.threads[t as usize].pc;
        let loc = OpLoc { thread: t, op: pc };
        let rank = self.acting_rank(loc);
        if matches!(self.op(loc).kind, OpKind::CommDestroy { .. })
            && matches!(st.nccl.ended.get(&(comm, rank)), Some(CommEnd::Finalized(_)))
        {
            st.nccl.ended.insert((comm, rank), CommEnd::Destroyed(loc));
            return self.advance(st, t);
        }
        let c = st.host.threads[t as usize].clock.clone();
        st.nccl.finalize_arrived.entry(comm).or_default().insert(rank, c);
        if self.is_nonblocking(comm) && matches!(self.op(loc).kind, OpKind::CommFinalize { .. }) {
            self.start_background(st, t, Pending { comm, op: pc, wait: Wait::Finalize(comm) });
            self.advance(st, t);
        } else {
            self.block(st, t, Wait::Finalize(comm));
        }
    }

    /// The launches of `rank` on `comm` that have not ended.
    fn unfinished_launches<'s>(&self, st: &'s State, comm: CommId, rank: RankId) -> impl Iterator<Item = (&'s ItemKey, &'s Item)> + 's {
        st.streams
            .items
            .iter()
            .filter(move |(_, i)| i.status != ItemStatus::Done && i.rank() == rank && matches!(i.kind, ItemKind::Launch { comm: c, .. } if c == comm))
    }

    /// Whether the finalize of `comm` on `rank` may return: every member has called it and every launch of `rank`
    /// on it has ended (N13: "flushes all issued communications"; "globally quiescent").
    pub(crate) fn finalize_complete(&self, st: &State, comm: CommId, rank: RankId) -> bool {
        let members = &self.program.comms[comm.0 as usize].members;
        st.nccl.finalize_arrived.get(&comm).is_some_and(|m| members.iter().all(|r| m.contains_key(r)))
            && self.unfinished_launches(st, comm, rank).next().is_none()
    }

    /// The finalize returns: joins every member's arrival and the ends of this rank's launches on `comm`; the
    /// communicator is finalized (or destroyed, for `CommDestroy`).
    pub(crate) fn finalize_unblock(&self, st: &mut State, t: ThreadId, comm: CommId, by: OpLoc) {
        let rank = self.rank_of(t);
        let mut joins: Vec<VClock> = st.nccl.finalize_arrived[&comm].values().cloned().collect();
        joins.extend(
            st.streams
                .items
                .values()
                .filter(|i| i.rank() == rank && matches!(i.kind, ItemKind::Launch { comm: c, .. } if c == comm))
                .filter_map(|i| i.end().cloned()),
        );
        for c in joins {
            st.host.threads[t as usize].clock.join(&c);
        }
        // An abort while the finalize waited (another thread, the watchdog) stays what ended the communicator.
        if matches!(st.nccl.ended.get(&(comm, rank)), Some(CommEnd::Aborted(_) | CommEnd::Watchdog)) {
            return;
        }
        let end = if matches!(self.op(by).kind, OpKind::CommDestroy { .. }) { CommEnd::Destroyed(by) } else { CommEnd::Finalized(by) };
        st.nccl.ended.insert((comm, rank), end);
    }

    /// `ncclCommAbort(comm)` on `rank` (N13), by a host call (`clock`: the caller's) or the watchdog (`None`): every
    /// unfinished op of the rank's launches on `comm` is aborted and those launches end (a launch not started yet
    /// ends as soon as it starts); calls in progress on it are dropped; the communicator is ended.
    pub(crate) fn abort_comm(&self, st: &mut State, comm: CommId, rank: RankId, end: CommEnd, clock: Option<&VClock>, fx: &mut Effects) {
        st.nccl.ended.insert((comm, rank), end);
        for u in self.threads_of_rank(rank) {
            st.host.threads[u as usize].background.retain(|p| p.comm != comm);
        }
        let keys: Vec<ItemKey> = self.unfinished_launches(st, comm, rank).map(|(k, _)| *k).collect();
        for k in keys {
            let item = st.streams.items.get_mut(&k).expect("launch exists");
            let running = item.status == ItemStatus::Running;
            // A launch not started yet: its issue clock; a running one: its start (Item::clock).
            let mut base = item.clock.clone();
            if let Some(c) = clock {
                base.join(c);
            }
            let ItemKind::Launch { ops, clocks, .. } = &mut item.kind else { unreachable!("a launch") };
            let mut aborted = vec![];
            for o in ops.iter_mut().filter(|o| o.status == CommOpStatus::Pending) {
                o.status = CommOpStatus::Aborted;
                aborted.push(o.loc);
            }
            if !aborted.is_empty() {
                match &mut clocks.finished {
                    Some(f) => f.join(&base),
                    None => clocks.finished = Some(base),
                }
            }
            for loc in aborted {
                if self.expected_writers.contains(&loc) {
                    st.nccl.aborted_ops.insert(loc);
                }
            }
            if running {
                self.end_launch(st, k, fx);
            }
        }
    }

    /// A launch whose every op was aborted before it started ends as soon as it starts (N13).
    pub(crate) fn ends_at_start(item: &Item) -> bool {
        matches!(&item.kind, ItemKind::Launch { ops, .. } if ops.iter().all(|o| o.status != CommOpStatus::Pending))
    }

    /// N13: a value assertion that relies on what an aborted op wrote. Returns `true` (and makes the execution
    /// undefined) when `writer` was aborted.
    pub(crate) fn check_aborted_writer(&self, st: &mut State, check: OpLoc, writer: OpLoc) -> bool {
        if !st.nccl.aborted_ops.contains(&writer) {
            return false;
        }
        let msg = format!(
            "{} relies on data of {}, which was aborted: after ncclCommAbort the contents of its buffers are undefined",
            self.op_label(check),
            self.op_label(writer)
        );
        self.set_undefined(st, Rule::N13, msg, vec![check, writer]);
        true
    }

    // ----- the watchdog (N9) ---------------------------------------------------------------------------------------
    /// Whether some communicator has a host watchdog (N9).
    pub fn watched(&self) -> bool {
        self.watched
    }

    /// The communicators `rank` is a member of that have a host watchdog (N9), with its timeout in ns, in
    /// communicator order: what the rank's watchdog aborts when it fires (those not already ended).
    pub fn watched_comms(&self, rank: RankId) -> impl Iterator<Item = (CommId, u64)> + '_ {
        self.program.comms.iter().enumerate().filter_map(move |(i, c)| {
            c.watchdog_ns.filter(|_| c.position(rank).is_some()).map(|ns| (CommId(i as u32), ns))
        })
    }


    /// The watched communicators of `rank` with a launch that has not ended, and their smallest timeout (ns).
    pub fn watchdog_due(&self, st: &State, rank: RankId) -> Option<(u64, Vec<CommId>)> {
        let mut timeout: Option<u64> = None;
        let mut comms = vec![];
        for (comm, ns) in self.watched_comms(rank) {
            if st.nccl.ended.contains_key(&(comm, rank)) {
                continue;
            }
            comms.push(comm);
            if self.unfinished_launches(st, comm, rank).next().is_some() {
                timeout = Some(timeout.map_or(ns, |t| t.min(ns)));
            }
        }
        timeout.map(|t| (t, comms))
    }

    /// Watchdog steps (N9): when nothing can happen but what the platform may withhold forever, the watchdog of
    /// every rank with unfinished work on a watched communicator may fire.
    pub(crate) fn watchdog_steps(&self, st: &State, out: &mut Vec<Step>) {
        if !self.watched || st.undefined.is_some() || !out.iter().all(|s| self.starvable(st, s)) {
            return;
        }
        for r in 0..self.program.ranks.len() as RankId {
            if self.watchdog_due(st, r).is_some() {
                out.push(Step::Watchdog { rank: r });
            }
        }
    }

    /// The watchdog steps of a state in which an engine has nothing else to do (timed runs keep their enabled steps
    /// per rank and ask for these only when none is left; N9).
    pub fn watchdogs_if_stuck(&self, st: &State) -> Vec<Step> {
        let mut out = vec![];
        self.watchdog_steps(st, &mut out);
        out
    }

    /// The watchdog of `rank` fires: the hang is recorded with its wait-for graph, and the rank's watched
    /// communicators are aborted (N9, N13).
    pub(crate) fn watchdog(&self, st: &mut State, rank: RankId, fx: &mut Effects) {
        let Some((timeout_ns, comms)) = self.watchdog_due(st, rank) else { return };
        let mut others = vec![];
        let heads = self.queue_heads(st);
        for t in 0..st.host.threads.len() as u32 {
            if self.host_choices(st, t) > 0 {
                others.push(t);
            }
        }
        let mut steps = vec![];
        self.item_steps(st, &heads, &mut steps);
        self.comm_steps(st, &heads, &mut steps);
        let starved = !others.is_empty() || !steps.is_empty();
        let stuck = self.explain(st, starved);
        let at = (0..st.host.threads.len() as u32)
            .filter(|t| !self.thread_finished(st, *t))
            .map(|t| (t, st.host.threads[t as usize].pc))
            .collect();
        for c in &comms {
            self.abort_comm(st, *c, rank, CommEnd::Watchdog, None, fx);
        }
        st.nccl.timeouts.insert(Timeout { rank, timeout_ns, comms, at, stuck });
    }
}
