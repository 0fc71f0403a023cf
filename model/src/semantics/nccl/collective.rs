//! Collectives (C1): the n-th collective of a communicator is a part of a launch on every member; a part completes
//! once the parts it needs are running: every member's, except for the parts that are one point-to-point exchange
//! with the root under the hood (a gather's or scatter's non-root part needs only the root's). A part that only
//! sends (a broadcast or scatter root, a gather's non-root) may also finish on its own, like an eager send (N2),
//! within the profile's eager window.

use super::super::*;
use crate::op_info::NcclRole;

/// The parts of one collective by member rank (`NcclState::coll`).
type PartsOf = std::collections::BTreeMap<RankId, (ItemKey, u32)>;

impl<'p> Semantics<'p> {
    /// The kind of the collective at `part`.
    fn coll_kind(&self, st: &State, part: (ItemKey, u32)) -> CollectiveKind {
        match self.info(st.comm_op(part).1.loc).nccl {
            Some(NcclRole::Collective { kind }) => kind,
            _ => unreachable!("a collective part is a collective op"),
        }
    }

    /// Whether the part at `p` has started: it is running (and pending) or has already ended.
    fn part_started(st: &State, p: (ItemKey, u32)) -> bool {
        matches!(st.comm_op(p).1.status, CommOpStatus::Done | CommOpStatus::Buffered) || Self::op_eligible(st.item(p.0), p.1 as usize)
    }

    /// The members whose parts the part of `rank` needs running before it can end (C1).
    fn part_needs(&self, kind: CollectiveKind, comm: CommId, rank: RankId) -> Vec<RankId> {
        if kind.needs_all(rank) {
            self.program.comms[comm.0 as usize].members.clone()
        } else {
            let root = kind.root().expect("only rooted collectives need less than every member");
            if root == rank { vec![rank] } else { vec![rank, root] }
        }
    }

    /// The pending, running parts of the n-th collective of `comm` whose needed parts all run (or have ended).
    fn ready_parts(&self, st: &State, comm: CommId, seq: u32) -> Vec<(RankId, (ItemKey, u32))> {
        let Some(parts) = st.nccl.coll.get(&(comm, seq)) else { return vec![] };
        let mut all = None;
        parts.iter().filter(|(r, p)| self.part_ready(st, comm, parts, **r, **p, &mut all)).map(|(r, p)| (*r, *p)).collect()
    }

    /// Whether the part of `rank` at `p` is pending and running and the parts it needs run or have ended (C1).
    /// `all` keeps, once asked, whether every member's part has started (what most kinds need), so that a pass over
    /// the parts costs O(members), not O(members²): listing the steps of a 1,024-member all-reduce asked every
    /// member about every member (issue 9).
    fn part_ready(&self, st: &State, comm: CommId, parts: &PartsOf, rank: RankId, p: (ItemKey, u32), all: &mut Option<bool>) -> bool {
        if st.comm_op(p).1.status != CommOpStatus::Pending || !Self::op_eligible(st.item(p.0), p.1 as usize) {
            return false;
        }
        let kind = self.coll_kind(st, p);
        let started = |m: &RankId| parts.get(m).is_some_and(|q| Self::part_started(st, *q));
        if kind.needs_all(rank) {
            *all.get_or_insert_with(|| self.program.comms[comm.0 as usize].members.iter().all(started))
        } else {
            self.part_needs(kind, comm, rank).iter().all(started)
        }
    }

    /// The pending, running parts that may end on their own (C1, within the eager window of N2).
    fn alone_parts(&self, st: &State, comm: CommId, seq: u32) -> Vec<(RankId, (ItemKey, u32))> {
        let Some(parts) = st.nccl.coll.get(&(comm, seq)) else { return vec![] };
        parts.iter().filter(|(r, p)| self.part_alone(st, **r, **p)).map(|(r, p)| (*r, *p)).collect()
    }

    /// Whether the part of `rank` at `p` is pending and running and may end on its own (C1, within the eager window
    /// of N2).
    fn part_alone(&self, st: &State, rank: RankId, p: (ItemKey, u32)) -> bool {
        st.comm_op(p).1.status == CommOpStatus::Pending
            && Self::op_eligible(st.item(p.0), p.1 as usize)
            && self.coll_kind(st, p).may_end_alone(rank)
            && st.comm_op(p).1.bytes <= self.profile.eager_bytes_per_connection
    }

    pub(crate) fn collective_steps(&self, st: &State, k: ItemKey, comm: CommId, rank: RankId, seq: u32, out: &mut Vec<Step>) {
        let Some(parts) = st.nccl.coll.get(&(comm, seq)) else { return };
        debug_assert_eq!(parts[&rank].0, k);
        // Each step is enumerated once: from the lowest-ranked part it would end.
        let (alone, ready) = self.completion_listers(st, comm, parts);
        if alone == Some(rank) {
            out.push(Step::RootEarly { comm, seq });
        }
        if ready == Some(rank) {
            out.push(Step::Collective { comm, seq });
        }
    }

    /// The ranks that list a collective's completion steps (its `parts`): `Step::RootEarly` by the first part in
    /// rank order that may end alone, `Step::Collective` by the first ready part. The first found, not every part:
    /// this runs for each member whose part runs.
    fn completion_listers(&self, st: &State, comm: CommId, parts: &PartsOf) -> (Option<RankId>, Option<RankId>) {
        let alone = parts.iter().find(|(r, p)| self.part_alone(st, **r, **p)).map(|(r, _)| *r);
        let mut all = None;
        let ready = parts.iter().find(|(r, p)| self.part_ready(st, comm, parts, **r, **p, &mut all)).map(|(r, _)| *r);
        (alone, ready)
    }

    /// For the start of an NCCL launch (`Step::Item` of a launch) whose ops are all collective parts: the ranks
    /// that list the completion steps of its collectives in `st` (`Step::Collective` and `Step::RootEarly`, each
    /// listed by the first part in rank order that it would end; `completion_listers`), the launch's own
    /// rank first. Asked before and after the start, these are the only ranks whose enabled steps the start can
    /// change (C1: a part that starts can make its collective's parts ready or alone, nothing else of another
    /// rank). `None` for any other step. A launch start made every member recompute, each asking about every member
    /// (issue 9: O(N³) for one all-reduce over N ranks). `tests/incremental.rs` checks the kept sets against
    /// [`Self::enabled`] at every step with this shortcut.
    pub fn collective_listers(&self, st: &State, step: &Step) -> Option<crate::semantics::incremental::RankSet> {
        let Step::Item(k) = step else { return None };
        if !self.collectives {
            return None;
        }
        let item = st.item(*k);
        let ItemKind::Launch { comm, ops, .. } = &item.kind else { return None };
        if ops.is_empty() || !ops.iter().all(|o| matches!(o.kind, CommOpKind::Collective { .. })) {
            return None;
        }
        let mut out = crate::semantics::incremental::RankSet::new();
        out.push(item.rank());
        for o in ops {
            let CommOpKind::Collective { seq } = o.kind else { continue };
            let Some(parts) = st.nccl.coll.get(&(*comm, seq)) else { continue };
            let (alone, ready) = self.completion_listers(st, *comm, parts);
            out.extend(alone.into_iter().chain(ready));
        }
        Some(out)
    }

    /// Whether an early end of a part goes beyond the profile's guaranteed eager window: the platform may refuse.
    pub fn root_early_beyond_guarantee(&self, st: &State, comm: CommId, seq: u32) -> bool {
        self.alone_parts(st, comm, seq).iter().any(|(_, p)| st.comm_op(*p).1.bytes > self.profile.eager_guaranteed())
    }

    /// C1: every ready part completes; each joins the starts of the members' parts it needs.
    pub(crate) fn collective(&self, st: &mut State, comm: CommId, seq: u32, fx: &mut Effects) {
        let ready = self.ready_parts(st, comm, seq);
        let parts = st.nccl.coll[&(comm, seq)].clone();
        for (rank, p) in ready {
            let mut c = VClock::new(self.components);
            for m in self.part_needs(self.coll_kind(st, p), comm, rank) {
                c.join(st.item(parts[&m].0).launch_start().expect("a needed part has started"));
            }
            self.finish_comm_op(st, p, CommOpStatus::Done, c, fx);
        }
    }

    /// C1: the parts that only send (a broadcast or scatter root, a gather's non-root parts) end on their own; each
    /// one's clock is its start (nothing of the others is known).
    pub(crate) fn root_early(&self, st: &mut State, comm: CommId, seq: u32, fx: &mut Effects) {
        let alone = self.alone_parts(st, comm, seq);
        debug_assert!(!alone.is_empty(), "a root-early step has a part to end");
        for (_, p) in alone {
            let c = st.item(p.0).launch_start().cloned().expect("the part has started");
            self.finish_comm_op(st, p, CommOpStatus::Buffered, c, fx);
        }
    }
}
