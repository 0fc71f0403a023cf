//! NCCL on the host and on the device: groups (N4, N10), one launch per communicator and acting rank at the outermost
//! group end, per-communicator serialization (N5), thread safety (N11), matching checks (N3, C1), and the launch's
//! progress through its ops. P2P delivery, collectives, connections and init live in the submodules.

mod collective;
mod connect;
mod init;
mod lifecycle;
mod p2p;

pub use connect::{dirs_label, dirs_label_with};

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::*;
use crate::clock::Epoch;
use crate::op_info::NcclRole;
use crate::profile::{PlanBudget, PlanOrder, PlanOrderChoice};
use smallvec::SmallVec;

impl CommOpKind {
    /// The P2P lane of a launch's op: its direction (0 send, 1 recv) and peer (N4: one lane runs in call order);
    /// `None` for a collective.
    pub fn lane(&self) -> Option<(u8, RankId)> {
        match self {
            CommOpKind::Send { peer, .. } => Some((0, *peer)),
            CommOpKind::Recv { peer, .. } => Some((1, *peer)),
            CommOpKind::Collective { .. } => None,
        }
    }
}

/// N14: the earliest kernel plan of a launch that still has a pending call (`None` when none is pending); only
/// calls of that plan may make progress.
pub(crate) fn front_plan(ops: &[CommOp]) -> Option<u32> {
    ops.iter().filter(|o| o.status == CommOpStatus::Pending).map(|o| o.plan).min()
}

/// N14: NCCL's point-to-point schedule on one node (`init.cc`, flat case): the offsets `delta` of the rounds, in
/// order; round r sends to `rank + delta` and receives from `rank - delta` (modulo `n`). The offsets are the
/// triangular numbers modulo the next power of two of `n`, those below `n`, so every offset occurs exactly once.
pub fn p2p_schedule_deltas(n: usize) -> Vec<usize> {
    let pow2 = n.max(1).next_power_of_two();
    let (mut out, mut delta) = (Vec::with_capacity(n), 0usize);
    for round in 1..=pow2 {
        if delta < n {
            out.push(delta);
        }
        delta = (delta + round) & (pow2 - 1);
    }
    out
}

/// A point-to-point call of one launch, as [`cut_plans`] sees it: direction, the peer's position in the
/// communicator, and the bytes it moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct P2pCall {
    /// `true` for a send, `false` for a recv.
    pub send: bool,
    /// The peer's position in the communicator (0-based; not its global rank).
    pub peer: usize,
    /// Bytes the call moves.
    pub bytes: u64,
}

/// N14: the kernel plan (0, 1, ..) of each of one rank's point-to-point `calls` of a group (in call order), on a
/// communicator of `n` members where the rank is at position `me`, as NCCL cuts them with `budget` in `order`:
/// (send, recv) pairs in NCCL's schedule order (epoch by epoch; in each, the rounds of [`p2p_schedule_deltas`],
/// pairing the next send to `me + delta` with the next recv from `me - delta`), a new plan when the next pair does not
/// fit ([`PlanBudget::fits`]). The new plan takes that pair next ([`PlanOrderChoice::Continue`], NCCL >= 2.29.7) or
/// starts over at the first round, whose queues give their next epoch's pairs first ([`PlanOrderChoice::Restart`],
/// NCCL 2.22-2.29.3). Calls that fit one plan however they pair (the common case) cost O(calls), in either order.
pub fn cut_plans(budget: &PlanBudget, order: PlanOrderChoice, n: usize, me: usize, calls: &[P2pCall]) -> Vec<u32> {
    let mut plans = vec![0u32; calls.len()];
    let Some(largest) = calls.iter().map(|c| c.bytes).max() else { return plans };
    if calls.len() as u64 <= budget.pairs_per_plan(largest) as u64 || n == 0 {
        return plans;
    }
    let deltas = p2p_schedule_deltas(n);
    let mut round_of = vec![0usize; n];
    for (r, d) in deltas.iter().enumerate() {
        round_of[*d] = r;
    }
    // Per round, the queues of the sends and the recvs that the round pairs, in call order.
    let mut queues: BTreeMap<usize, (VecDeque<usize>, VecDeque<usize>)> = BTreeMap::new();
    for (i, c) in calls.iter().enumerate() {
        let p = c.peer % n;
        if c.send {
            queues.entry(round_of[(p + n - me % n) % n]).or_default().0.push_back(i);
        } else {
            queues.entry(round_of[(me % n + n - p) % n]).or_default().1.push_back(i);
        }
    }
    // The rounds that pair anything, in schedule order (NCCL skips a round whose two queues are empty).
    let mut rounds: Vec<(VecDeque<usize>, VecDeque<usize>)> = queues.into_values().collect();
    let (mut plan, mut used, mut left, mut r) = (0u32, 0u32, calls.len(), 0usize);
    while left > 0 {
        let (sends, recvs) = &mut rounds[r];
        if sends.is_empty() && recvs.is_empty() {
            r = (r + 1) % rounds.len();
            continue;
        }
        if !budget.fits(used) {
            plan += 1;
            used = 0;
            if order == PlanOrderChoice::Restart && r != 0 {
                r = 0;
                continue;
            }
        }
        let pair = [sends.pop_front(), recvs.pop_front()];
        let bytes = pair.iter().flatten().map(|&i| calls[i].bytes).max().unwrap_or(0);
        used = used.saturating_add(budget.pair_cost(bytes));
        for i in pair.into_iter().flatten() {
            plans[i] = plan;
            left -= 1;
        }
        r = (r + 1) % rounds.len();
    }
    plans
}

impl<'p> Semantics<'p> {
    /// A send, recv or collective call: collected by an open group (N4: nothing is enqueued before the outermost
    /// group end), or a group of one.
    pub(crate) fn nccl_call(&self, st: &mut State, t: ThreadId, pc: u32, choice: u32) {
        if st.host.threads[t as usize].group_depth > 0 {
            st.host.threads[t as usize].group_ops.push(pc);
            self.advance(st, t);
        } else {
            self.group_end(st, t, vec![pc], choice);
        }
    }

    /// `ncclGroupEnd`: the outermost one launches what the group collected (N4).
    pub(crate) fn group_end_call(&self, st: &mut State, t: ThreadId, choice: u32) {
        let th = &mut st.host.threads[t as usize];
        th.group_depth = th.group_depth.saturating_sub(1);
        if th.group_depth > 0 {
            return self.advance(st, t);
        }
        let ops = std::mem::take(&mut th.group_ops);
        if ops.is_empty() {
            self.advance(st, t);
        } else {
            self.group_end(st, t, ops, choice);
        }
    }

    /// The outermost group end (or an ungrouped call): set up connections if needed (N7), then enqueue one launch
    /// per communicator and acting rank.
    fn group_end(&self, st: &mut State, t: ThreadId, ops: Vec<u32>, choice: u32) {
        // N14: the first group that the two kernel-plan orders cut differently is where the platform shows its order;
        // N7: the first collective that needs connections is where it shows when it makes them.
        let choice = self.take_plan_choice(st, t, &ops, choice);
        let choice = self.take_connect_choice(st, t, &ops, choice);
        // N12: on non-blocking communicators the call may return ncclInProgress and defer the work.
        if self.nonblocking_group_end(st, t, &ops, choice) {
            return;
        }
        let (need, immediate) = self.new_connections(st, t, &ops);
        st.nccl.connected.extend(immediate);
        if !need.is_empty() {
            // N7: the host blocks in the group end until each peer's host sets up the mirrored directions.
            self.check_nonmirrored(st, t, &need);
            self.block(st, t, Wait::Connect { need, ops });
            return;
        }
        self.enqueue_launches(st, t, &ops);
        self.advance(st, t);
    }

    /// The (communicator, acting rank) pairs of a group's ops, in first-call order: one launch each (N4).
    pub(crate) fn launch_keys(&self, t: ThreadId, ops: &[u32]) -> smallvec::SmallVec<[(CommId, RankId); 2]> {
        let mut keys: smallvec::SmallVec<[(CommId, RankId); 2]> = smallvec::SmallVec::new();
        for &i in ops {
            let loc = OpLoc { thread: t, op: i };
            let k = (self.info(loc).comm.expect("an NCCL op has a communicator"), self.acting_rank(loc));
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        keys
    }

    /// The stream of launch `k` of a group end (N4: one launch per communicator and acting rank, numbered by `sub`
    /// in the order the group named them), read from the program: the group's ops are the sends, recvs and
    /// collectives since its outermost group start. `None` when `k` is not issued by a group end. For labels (a
    /// timed run's critical path), not for the semantics, which takes the ops from the thread's state.
    pub fn group_launch_stream(&self, k: ItemKey) -> Option<StreamRef> {
        let ops = &self.program.ranks[self.thread_of[k.thread as usize].0 as usize].threads[self.thread_of[k.thread as usize].1 as usize].ops;
        if !matches!(ops.get(k.op as usize)?.kind, OpKind::GroupEnd) {
            return None;
        }
        let mut depth = 1u32;
        let mut group = vec![];
        for i in (0..k.op).rev() {
            match ops[i as usize].kind {
                OpKind::GroupEnd => depth += 1,
                OpKind::GroupStart => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {
                    let loc = OpLoc { thread: k.thread, op: i };
                    if matches!(self.info(loc).nccl, Some(NcclRole::Send { .. } | NcclRole::Recv { .. } | NcclRole::Collective { .. })) {
                        group.push(i);
                    }
                }
            }
        }
        group.reverse();
        let (comm, rank) = *self.launch_keys(k.thread, &group).get(k.sub as usize)?;
        group
            .iter()
            .map(|&i| OpLoc { thread: k.thread, op: i })
            .find(|&loc| self.info(loc).comm == Some(comm) && self.acting_rank(loc) == rank)
            .and_then(|loc| self.info(loc).stream)
    }

    pub(crate) fn enqueue_launches(&self, st: &mut State, t: ThreadId, ops: &[u32]) {
        let pc = st.host.threads[t as usize].pc;
        let at = OpLoc { thread: t, op: pc };
        // S7 with CUDA_LAUNCH_BLOCKING=1: NCCL launches a group's kernels one communicator after another, in the
        // order the group first names them, and each launch call returns only once its kernel has ended (NVIDIA/nccl
        // PR 774: "we now loop through the devices owned by a thread and launch the kernels in turn. Since the first
        // launch will block on its kernel which is blocked waiting for all the launches which communicate
        // together, we deadlock"). So each launch is issued after the previous one's end: an ordering dependency.
        let mut previous: Option<ItemKey> = None;
        for (sub, (comm, rank)) in self.launch_keys(t, ops).into_iter().enumerate() {
            if !self.check_thread_safety(st, t, at, comm, rank) {
                return;
            }
            let key = ItemKey { thread: t, op: pc, sub: sub as u16 };
            let mut streams = ItemStreams::new();
            let mut cops = vec![];
            for &i in ops {
                let loc = OpLoc { thread: t, op: i };
                let info = self.info(loc);
                if info.comm != Some(comm) || self.acting_rank(loc) != rank {
                    continue;
                }
                let stream = info.stream.expect("an NCCL op has a stream");
                let idx = cops.len() as u32;
                let (ck, bytes) = match (&self.op(loc).kind, info.nccl) {
                    (OpKind::Send { buf, .. }, Some(NcclRole::Send { peer })) => {
                        let n = st.nccl.p2p_next.entry((comm, rank, peer, false)).or_default();
                        let seq = *n;
                        *n += 1;
                        st.nccl.p2p.insert(P2pKey { comm, src: rank, dst: peer, seq, recv: false }, (key, idx));
                        (CommOpKind::Send { peer, seq }, buf.len)
                    }
                    (OpKind::Recv { buf, .. }, Some(NcclRole::Recv { peer })) => {
                        let n = st.nccl.p2p_next.entry((comm, peer, rank, true)).or_default();
                        let seq = *n;
                        *n += 1;
                        st.nccl.p2p.insert(P2pKey { comm, src: peer, dst: rank, seq, recv: true }, (key, idx));
                        (CommOpKind::Recv { peer, seq }, buf.len)
                    }
                    (OpKind::Collective { recv, .. }, Some(NcclRole::Collective { .. })) => {
                        let n = st.nccl.coll_next.entry((comm, rank)).or_default();
                        let seq = *n;
                        *n += 1;
                        st.nccl.coll.entry((comm, seq)).or_default().insert(rank, (key, idx));
                        (CommOpKind::Collective { seq }, recv.len)
                    }
                    _ => unreachable!("only sends, recvs and collectives are launched"),
                };
                if !streams.contains(&stream) {
                    streams.push(stream);
                }
                cops.push(CommOp { loc, kind: ck, bytes, status: CommOpStatus::Pending, plan: 0 });
            }
            self.assign_plans(st, comm, rank, &mut cops);
            self.check_matching(st, comm, rank, &cops);
            let all: smallvec::SmallVec<[BufRange; 4]> =
                cops.iter().flat_map(|o| self.info(o.loc).accesses.iter().map(|a| a.range)).collect();
            if !self.check_allocated(st, at, &all) {
                return;
            }
            // N5: a launch starts only after the previous launch on the same communicator has ended. No document
            // guarantees the resulting order, so unless the profile does, the edge delays the start (it can hang a
            // program) but orders no memory access.
            let mut deps = ItemKeys::new();
            let mut waits = ItemKeys::new();
            if self.profile.serialize_per_comm {
                let prev = st.nccl.comm_tail.get(&(comm, rank)).copied();
                if self.profile.serialization_orders {
                    deps.extend(prev);
                } else {
                    waits.extend(prev);
                }
            }
            if self.profile.launch_blocking {
                deps.extend(previous);
            }
            previous = Some(key);
            st.nccl.comm_tail.insert((comm, rank), key);
            self.enqueue(st, t, key, ItemKind::Launch { comm, ops: cops, clocks: Box::default() }, streams, deps, waits);
        }
    }

    /// N11 (NCCL "Thread safety"): NCCL calls must not be issued to a device from several threads in parallel,
    /// whether to one communicator or to independent communicators of that device. Returns `false` (and makes the
    /// execution undefined) when the previous issue on the device came from another thread with nothing ordering
    /// it before this one.
    fn check_thread_safety(&self, st: &mut State, t: ThreadId, at: OpLoc, comm: CommId, rank: RankId) -> bool {
        let now = &st.host.threads[t as usize].clock;
        if let Some(&(first, e, prev)) = st.nccl.issuer.get(&rank) {
            if first.thread != t && !e.happens_before(now) {
                let what = if prev == comm {
                    format!("communicator {} on r{rank}", self.comm_name(comm))
                } else {
                    format!("communicators {} and {} of the same device r{rank}", self.comm_name(prev), self.comm_name(comm))
                };
                let msg = format!(
                    "{} and {} issue NCCL calls to {what} from two host threads with nothing ordering the calls \
                     (NCCL: operations must not be issued in parallel to one communicator, or to independent \
                     communicators of one device, from several threads)",
                    self.op_label(first),
                    self.op_label(at)
                );
                // Both calls: the same unordered pair found in either order is one problem (it was reported twice).
                self.set_undefined(st, Rule::N11, msg, vec![first, at]);
                return false;
            }
        }
        let e = Epoch { agent: t, time: now.get(t as usize) };
        st.nccl.issuer.insert(rank, (at, e, comm));
        true
    }

    /// N3 / C1: a P2P op whose counterpart is already issued must agree in bytes; the n-th collective must agree in
    /// kind and bytes on every member.
    fn check_matching(&self, st: &mut State, comm: CommId, rank: RankId, cops: &[CommOp]) {
        for o in cops {
            let other = match o.kind {
                CommOpKind::Send { peer, seq } => st.nccl.p2p.get(&P2pKey { comm, src: rank, dst: peer, seq, recv: true }).copied(),
                CommOpKind::Recv { peer, seq } => st.nccl.p2p.get(&P2pKey { comm, src: peer, dst: rank, seq, recv: false }).copied(),
                CommOpKind::Collective { seq } => {
                    st.nccl.coll[&(comm, seq)].iter().find(|(r, _)| **r != rank).map(|(_, v)| *v)
                }
            };
            let Some(at) = other else { continue };
            let theirs = st.comm_op(at).1;
            let (tl, tb) = (theirs.loc, theirs.bytes);
            let same_kind = match (self.info(o.loc).nccl, self.info(tl).nccl) {
                (Some(NcclRole::Collective { kind: a }), Some(NcclRole::Collective { kind: b })) => a == b,
                _ => true,
            };
            if tb != o.bytes || !same_kind {
                let rule = if matches!(o.kind, CommOpKind::Collective { .. }) { Rule::C1 } else { Rule::N3 };
                let msg = format!("{} is matched with {}, which differs in size or kind", self.op_label(o.loc), self.op_label(tl));
                self.set_undefined(st, rule, msg, vec![o.loc, tl]);
            }
        }
    }

    /// Whether the op at `idx` of a running launch may make progress: the launch runs, every earlier P2P op of the
    /// same launch to the same peer in the same direction has finished (N4), and so has every op of an earlier
    /// kernel plan (N14). Collectives of one group run concurrently (NCCL issue 900).
    pub(crate) fn op_eligible(item: &Item, idx: usize) -> bool {
        if item.status != ItemStatus::Running {
            return false;
        }
        let ItemKind::Launch { ops, .. } = &item.kind else { return false };
        let me = &ops[idx];
        if me.status != CommOpStatus::Pending {
            return false;
        }
        if front_plan(ops).is_some_and(|f| f < me.plan) {
            return false;
        }
        let Some(mine) = me.kind.lane() else { return true };
        ops[..idx].iter().all(|o| o.kind.lane() != Some(mine) || o.status != CommOpStatus::Pending)
    }

    /// The indices of a running launch's ops that may make progress ([`Self::op_eligible`] for each, in one pass:
    /// a launch of hundreds of ops costs O(ops log ops) per step, not O(ops²)).
    pub(crate) fn eligible_ops(item: &Item) -> SmallVec<[usize; 4]> {
        let mut out = SmallVec::new();
        let ItemKind::Launch { ops, .. } = &item.kind else { return out };
        if item.status != ItemStatus::Running {
            return out;
        }
        let Some(front) = front_plan(ops) else {
            return out;
        };
        // The lanes seen so far: up to 8 on the stack (this runs for every delivery, and a launch has a few), in an
        // ordered set beyond (a grouped all-to-all has one per peer).
        let mut few: SmallVec<[(u8, RankId); 8]> = SmallVec::new();
        let mut many: BTreeSet<(u8, RankId)> = BTreeSet::new();
        let mut first_seen = |l: (u8, RankId)| {
            if many.is_empty() {
                if few.contains(&l) {
                    return false;
                }
                if few.len() < few.inline_size() {
                    few.push(l);
                    return true;
                }
                many.extend(few.drain(..));
            }
            many.insert(l)
        };
        for (i, o) in ops.iter().enumerate() {
            if o.status != CommOpStatus::Pending {
                continue;
            }
            let first_of_lane = o.kind.lane().is_none_or(&mut first_seen);
            if first_of_lane && o.plan == front {
                out.push(i);
            }
        }
        out
    }

    /// N14: numbers the kernel plans of a launch's point-to-point calls (`cops`, in call order) with the profile's
    /// budget ([`cut_plans`]), in the plan order of `st` ([`Self::plan_order`]; while the platform has not chosen,
    /// both orders cut these calls alike: [`Self::plan_choice_pending`]). Collectives stay in the first plan.
    pub(crate) fn assign_plans(&self, st: &State, comm: CommId, rank: RankId, cops: &mut [CommOp]) {
        let Some(budget) = self.profile.p2p_plan else { return };
        let members = &self.program.comms[comm.0 as usize].members;
        let Some(me) = member_position(members, rank) else { return };
        let pos = |peer: RankId| member_position(members, peer).expect("a peer is a member");
        let calls: Vec<Option<P2pCall>> = cops
            .iter()
            .map(|o| match o.kind {
                CommOpKind::Send { peer, .. } => Some(P2pCall { send: true, peer: pos(peer), bytes: o.bytes }),
                CommOpKind::Recv { peer, .. } => Some(P2pCall { send: false, peer: pos(peer), bytes: o.bytes }),
                CommOpKind::Collective { .. } => None,
            })
            .collect();
        let p2p: Vec<P2pCall> = calls.iter().flatten().copied().collect();
        let order = self.plan_order(st).unwrap_or(PlanOrderChoice::Continue);
        let plans = cut_plans(&budget, order, members.len(), me, &p2p);
        let mut next = plans.into_iter();
        for (o, c) in cops.iter_mut().zip(&calls) {
            if c.is_some() {
                o.plan = next.next().expect("one plan per call");
            }
        }
    }

    /// N14: the kernel-plan order in `st`: `Some` when the profile fixes it or the platform has chosen
    /// ([`NcclState::plan_order`]), `None` while the profile leaves it to the platform (`PlanOrder::Either`) and no
    /// group has been cut differently by the two orders yet.
    pub fn plan_order(&self, st: &State) -> Option<PlanOrderChoice> {
        match self.profile.p2p_plan_order {
            PlanOrder::Restart => Some(PlanOrderChoice::Restart),
            PlanOrder::Continue => Some(PlanOrderChoice::Continue),
            PlanOrder::Either => st.nccl.plan_order,
        }
    }

    /// N14: whether launching `ops` of thread `t` (an ungrouped call or the outermost group end, at the thread's
    /// current op) is where the platform chooses its kernel-plan order: the profile cuts groups and leaves the order
    /// open, nothing has chosen yet, and the two orders put some call of these launches in different plans
    /// ([`Self::cuts_differ`], found for every group end once: [`Self::plan_choice_sites`]). Such a step has the
    /// outcomes of both orders ([`Self::launch_outcomes`]).
    pub fn plan_choice_pending(&self, st: &State, t: ThreadId, ops: &[u32]) -> bool {
        if self.plan_sites.is_empty() || ops.len() < 2 || self.plan_order(st).is_some() {
            return false;
        }
        let pending = self.plan_sites.contains(&(t, st.host.threads[t as usize].pc));
        debug_assert_eq!(pending, self.cuts_differ(t, ops), "the group end of thread {t} is a plan choice site");
        pending
    }

    /// N14: the outermost group ends of the program whose calls the two kernel-plan orders cut differently, as
    /// (thread, op), when the profile cuts groups and leaves the order to the platform; empty otherwise. A group's
    /// calls are the sends, recvs and collectives between its outermost group start and end (what the thread
    /// collects at run time, N4); an ungrouped call is one call, which no order cuts.
    pub(crate) fn plan_choice_sites(&self) -> std::collections::BTreeSet<(ThreadId, u32)> {
        let mut out = std::collections::BTreeSet::new();
        if self.profile.p2p_plan.is_none() || self.profile.p2p_plan_order != PlanOrder::Either {
            return out;
        }
        for t in 0..self.thread_of.len() as ThreadId {
            let (mut depth, mut group) = (0u32, vec![]);
            for (pc, op) in self.ops_of(t).iter().enumerate() {
                match op.kind {
                    OpKind::GroupStart => depth += 1,
                    OpKind::GroupEnd => {
                        if depth == 1 && self.cuts_differ(t, &group) {
                            out.insert((t, pc as u32));
                        }
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            group.clear();
                        }
                    }
                    OpKind::Send { .. } | OpKind::Recv { .. } | OpKind::Collective { .. } if depth > 0 => group.push(pc as u32),
                    _ => {}
                }
            }
        }
        out
    }

    /// N14: whether the two kernel-plan orders put some point-to-point call of the launches of `ops` (thread `t`) in
    /// different plans under the profile's budget. O(calls) when a launch fits one plan.
    pub fn cuts_differ(&self, t: ThreadId, ops: &[u32]) -> bool {
        let Some(budget) = self.profile.p2p_plan else { return false };
        if ops.len() < 2 {
            return false;
        }
        self.launch_keys(t, ops).into_iter().any(|(comm, rank)| {
            let members = &self.program.comms[comm.0 as usize].members;
            let Some(me) = member_position(members, rank) else { return false };
            let calls: Vec<P2pCall> = ops
                .iter()
                .map(|&i| OpLoc { thread: t, op: i })
                .filter(|&loc| self.info(loc).comm == Some(comm) && self.acting_rank(loc) == rank)
                .filter_map(|loc| {
                    let (send, peer, bytes) = match (&self.op(loc).kind, self.info(loc).nccl) {
                        (OpKind::Send { buf, .. }, Some(NcclRole::Send { peer })) => (true, peer, buf.len),
                        (OpKind::Recv { buf, .. }, Some(NcclRole::Recv { peer })) => (false, peer, buf.len),
                        _ => return None,
                    };
                    Some(P2pCall { send, peer: member_position(members, peer)?, bytes })
                })
                .collect();
            let n = members.len();
            cut_plans(&budget, PlanOrderChoice::Restart, n, me, &calls) != cut_plans(&budget, PlanOrderChoice::Continue, n, me, &calls)
        })
    }

    /// Whether the host step of thread `t` is where the platform chooses its kernel-plan order (N14,
    /// [`Self::plan_choice_pending`]).
    pub fn chooses_plan_order(&self, st: &State, t: ThreadId) -> bool {
        !self.plan_sites.is_empty()
            && self.plan_order(st).is_none()
            && self.plan_choice_pending(st, t, &self.launch_ops(st, t))
    }

    /// Whether the host step of thread `t` makes a choice of the platform that every rank reads afterwards: when
    /// collectives connect (N7, [`Self::chooses_connect`]) or the kernel-plan order (N14,
    /// [`Self::chooses_plan_order`]). Such a step writes every rank ([`Self::step_ranks`]).
    pub fn chooses_platform(&self, st: &State, t: ThreadId) -> bool {
        self.chooses_connect(st, t) || self.chooses_plan_order(st, t)
    }

    /// The number of outcomes of launching `ops` of thread `t`: where the platform still chooses its kernel-plan
    /// order (N14), the outcomes with NCCL >= 2.29.7's order (choices 0..n, [`Self::connect_outcomes`]) followed by
    /// those with NCCL 2.22-2.29.3's; else those of [`Self::connect_outcomes`].
    pub(crate) fn launch_outcomes(&self, st: &State, t: ThreadId, ops: &[u32]) -> u32 {
        let inner = self.connect_outcomes(st, t, ops);
        if self.plan_choice_pending(st, t, ops) {
            2 * inner
        } else {
            inner
        }
    }

    /// Applies the kernel-plan order that launching `ops` chooses, if it chooses one ([`Self::launch_outcomes`]),
    /// and returns what is left of `choice` for the rest of the launch.
    fn take_plan_choice(&self, st: &mut State, t: ThreadId, ops: &[u32], choice: u32) -> u32 {
        if !self.plan_choice_pending(st, t, ops) {
            return choice;
        }
        let inner = self.connect_outcomes(st, t, ops);
        let (c, rest) = if choice < inner {
            (PlanOrderChoice::Continue, choice)
        } else {
            (PlanOrderChoice::Restart, choice - inner)
        };
        st.nccl.plan_order = Some(c);
        rest
    }

    /// Device steps of running launches: P2P delivery (N2) and collective completion (C1).
    pub(crate) fn comm_steps(&self, st: &State, heads: &[ItemKey], out: &mut Vec<Step>) {
        // A running launch heads every queue it is on.
        for &k in heads {
            let (k, item) = (&k, st.item(k));
            let ItemKind::Launch { comm, ops, .. } = &item.kind else { continue };
            if item.status != ItemStatus::Running {
                continue;
            }
            let rank = item.rank();
            for i in Self::eligible_ops(item) {
                let op = &ops[i];
                match op.kind {
                    CommOpKind::Send { peer, seq } => self.send_steps(st, *comm, rank, peer, seq, op, out),
                    CommOpKind::Recv { peer, seq } => self.recv_steps(st, *comm, rank, peer, seq, op, out),
                    CommOpKind::Collective { seq } => self.collective_steps(st, *k, *comm, rank, seq, out),
                }
            }
        }
    }

    /// The launch holding the NCCL op at `loc`, and the op's index in it.
    pub fn find_comm_op(&self, st: &State, loc: OpLoc) -> (ItemKey, u32) {
        // A launch is keyed by the host op that enqueued it (the op itself, or the group end after it; N4), never by
        // an earlier one: start there, not at the thread's first item, which made every delivery cost as many steps
        // as the thread had items queued (issue 9, "scale").
        for (k, item) in st.streams.items.range_from(ItemKey { thread: loc.thread, op: loc.op, sub: 0 }) {
            if let ItemKind::Launch { ops, .. } = &item.kind {
                if let Some(i) = ops.iter().position(|o| o.loc == loc) {
                    return (*k, i as u32);
                }
            }
        }
        unreachable!("no launch holds {loc:?}")
    }

    pub(crate) fn finish_comm_op(&self, st: &mut State, at: (ItemKey, u32), status: CommOpStatus, clock: VClock, fx: &mut Effects) {
        let item = st.streams.items.get_mut(&at.0).expect("launch exists");
        let ItemKind::Launch { ops, clocks, .. } = &mut item.kind else { unreachable!("comm op outside a launch") };
        ops[at.1 as usize].status = status;
        match &mut clocks.finished {
            Some(f) => f.join(&clock),
            None => clocks.finished = Some(clock),
        }
        if ops.iter().all(|o| o.status != CommOpStatus::Pending) {
            self.end_launch(st, at.0, fx);
        }
    }

    /// Ends a launch whose ops have all finished: its end joins every op's completion (MODEL.md).
    pub(crate) fn end_launch(&self, st: &mut State, k: ItemKey, fx: &mut Effects) {
        let item = st.item(k);
        let ItemKind::Launch { clocks, .. } = &item.kind else { unreachable!("not a launch") };
        let mut c = clocks.start.clone().expect("a running launch has started");
        if let Some(f) = &clocks.finished {
            c.join(f);
        }
        for s in &item.streams {
            c.tick(self.stream_component(*s));
        }
        self.finish_item(st, k, c, fx);
    }
}
