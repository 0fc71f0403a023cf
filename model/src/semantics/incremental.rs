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

/// Groups of ranks whose enabled steps may depend on each other's state (module docs), deduplicated.
#[derive(Clone, Debug)]
pub struct RankGroups {
    groups: Vec<Vec<RankId>>,
    /// Per rank: the groups it belongs to (always at least its own singleton).
    of_rank: Vec<Vec<u32>>,
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
}

impl<'p> Semantics<'p> {
    /// The rank groups of this program (module docs).
    pub fn rank_groups(&self) -> RankGroups {
        let n = self.program.ranks.len();
        let mut set: BTreeSet<Vec<RankId>> = BTreeSet::new();
        for r in 0..n as RankId {
            set.insert(vec![r]);
        }
        for (t, &(home, _)) in self.thread_of.iter().enumerate() {
            for (i, _) in self.ops_of(t as ThreadId).iter().enumerate() {
                let g = self.op_ranks(OpLoc { thread: t as ThreadId, op: i as u32 }, home);
                set.insert(g);
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
        RankGroups { groups, of_rank }
    }

    /// The ranks one op's steps may read or write, sorted: the thread's rank, every rank the op names, its acting
    /// rank, a P2P peer, a collective's or init's communicator members.
    fn op_ranks(&self, loc: OpLoc, home: RankId) -> Vec<RankId> {
        let info = self.info(loc);
        let mut g = vec![home];
        g.extend(info.ranks.iter().copied());
        g.extend(info.acting_rank);
        g.extend(info.stream.map(|s| s.rank));
        g.extend(info.observes);
        match info.nccl {
            Some(NcclRole::Send { peer } | NcclRole::Recv { peer }) => g.push(peer),
            Some(NcclRole::Collective { .. } | NcclRole::Init) => {
                if let Some(c) = info.comm {
                    g.extend(self.program.comms[c.0 as usize].members.iter().copied());
                }
            }
            None => {}
        }
        g.sort_unstable();
        g.dedup();
        g
    }

    /// The ranks whose state `step` may write, computed before it is applied (module docs).
    pub fn step_ranks(&self, st: &State, step: &Step) -> Vec<RankId> {
        match step {
            Step::Host { thread, .. } => {
                let t = *thread;
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
                let mut v = vec![*rank];
                for c in self.program.comms.iter().filter(|c| c.watchdog_ns.is_some() && c.position(*rank).is_some()) {
                    v.extend(c.members.iter().copied());
                }
                v.sort_unstable();
                v.dedup();
                v
            }
            Step::Item(k) => vec![st.item(*k).rank()],
            Step::Transfer { send, recv } => {
                let mut v = vec![self.acting_rank(*send), self.acting_rank(*recv)];
                v.sort_unstable();
                v.dedup();
                v
            }
            Step::Eager { send } => vec![self.acting_rank(*send)],
            Step::Drain { recv } => vec![self.acting_rank(*recv)],
            Step::Collective { comm, .. } | Step::RootEarly { comm, .. } => {
                let mut v = self.program.comms[comm.0 as usize].members.clone();
                v.sort_unstable();
                v
            }
            Step::Connect { a, b, ra, rb, .. } => {
                let mut v = vec![self.rank_of(*a), self.rank_of(*b), *ra, *rb];
                v.sort_unstable();
                v.dedup();
                v
            }
        }
    }

    /// The enabled steps rank `r` owns (module docs), appended to `out`: host steps of its threads, item and
    /// communication steps of the items heading its streams, connection set-ups its threads start.
    pub fn enabled_for_rank(&self, st: &State, r: RankId, out: &mut Vec<Step>) {
        if st.undefined.is_some() {
            return;
        }
        let t0 = self.thread_base[r as usize];
        let t1 = self.thread_base.get(r as usize + 1).copied().unwrap_or(self.thread_of.len() as u32);
        for t in t0..t1 {
            for choice in 0..self.host_choices(st, t) {
                out.push(Step::Host { thread: t, choice });
            }
        }
        let s0 = self.stream_base[r as usize] as usize;
        let s1 = self.stream_base.get(r as usize + 1).map_or(self.agents - self.thread_of.len(), |x| *x as usize);
        let mut heads: Vec<ItemKey> =
            st.streams.queues[s0..s1].iter().filter_map(|(q, head)| q.get(*head as usize).copied()).collect();
        heads.sort_unstable();
        heads.dedup();
        self.item_steps(st, &heads, out);
        self.comm_steps(st, &heads, out);
        for t in t0..t1 {
            self.connect_steps_from(st, t as usize, out);
        }
    }
}
