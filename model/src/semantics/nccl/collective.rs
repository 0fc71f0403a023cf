//! Collectives (C1): the n-th collective of a communicator is a part of a launch on every member; it completes only
//! when every member's part is running, except that a broadcast root may finish its part early (its send may
//! complete before the others start, like an eager send; N2), within the profile's eager window.

use super::super::*;
use crate::op_info::NcclRole;

impl<'p> Semantics<'p> {
    /// The root of the collective at `part`, when it is a broadcast.
    fn broadcast_root(&self, st: &State, part: (ItemKey, u32)) -> Option<RankId> {
        match self.info(st.comm_op(part).1.loc).nccl {
            Some(NcclRole::Collective { kind: CollectiveKind::Broadcast { root } }) => Some(root),
            _ => None,
        }
    }

    pub(crate) fn collective_steps(&self, st: &State, k: ItemKey, comm: CommId, rank: RankId, seq: u32, out: &mut Vec<Step>) {
        let Some(parts) = st.nccl.coll.get(&(comm, seq)) else { return };
        let members = &self.program.comms[comm.0 as usize].members;
        let idx = parts[&rank];
        debug_assert_eq!(idx.0, k);
        let root = self.broadcast_root(st, idx);
        // C1: the root's part may end before the other members run theirs.
        if root == Some(rank) {
            let bytes = st.comm_op(idx).1.bytes;
            if bytes <= self.profile.eager_bytes_per_connection {
                out.push(Step::RootEarly { comm, seq });
            }
        }
        // Enumerate the completion once: from the lowest-ranked member whose part is still pending.
        if parts.len() != members.len() {
            return;
        }
        let pending: Vec<&RankId> =
            parts.iter().filter(|(_, p)| st.comm_op(**p).1.status == CommOpStatus::Pending).map(|(r, _)| r).collect();
        if pending.first() != Some(&&rank) {
            return;
        }
        if parts.iter().all(|(_, p)| st.comm_op(*p).1.status != CommOpStatus::Pending || Self::op_eligible(st.item(p.0), p.1 as usize)) {
            out.push(Step::Collective { comm, seq });
        }
    }

    /// Whether an early root completion goes beyond the profile's guaranteed eager window: the platform may refuse.
    pub fn root_early_beyond_guarantee(&self, st: &State, comm: CommId, seq: u32) -> bool {
        let parts = &st.nccl.coll[&(comm, seq)];
        parts.values().any(|p| Some(self.acting_rank(st.comm_op(*p).1.loc)) == self.broadcast_root(st, *p) && st.comm_op(*p).1.bytes > self.profile.eager_guaranteed())
    }

    /// C1: every pending part completes; each joins every member's start.
    pub(crate) fn collective(&self, st: &mut State, comm: CommId, seq: u32, fx: &mut Effects) {
        let parts: Vec<(ItemKey, u32)> = st.nccl.coll[&(comm, seq)].values().copied().collect();
        let mut c = VClock::new(self.agents);
        for (k, _) in &parts {
            c.join(st.item(*k).start.as_ref().expect("a collective part has started"));
        }
        for p in parts {
            if st.comm_op(p).1.status == CommOpStatus::Pending {
                self.finish_comm_op(st, p, CommOpStatus::Done, c.clone(), fx);
            }
        }
    }

    /// C1: the broadcast root's part ends on its own; its clock is its start (nothing of the others is known).
    pub(crate) fn root_early(&self, st: &mut State, comm: CommId, seq: u32, fx: &mut Effects) {
        let parts = &st.nccl.coll[&(comm, seq)];
        let root = parts
            .iter()
            .find(|(r, p)| self.broadcast_root(st, **p) == Some(**r))
            .map(|(_, p)| *p)
            .expect("a root-early step has a root part");
        let c = st.item(root.0).start.clone().expect("the root's part has started");
        self.finish_comm_op(st, root, CommOpStatus::Buffered, c, fx);
    }
}
