//! Communicator initialization (N8): `ncclCommInitRank` on a blocking communicator blocks until every member has
//! called it; returning joins every member's clock at its call.

use super::super::*;

impl<'p> Semantics<'p> {
    pub(crate) fn comm_init(&self, st: &mut State, t: ThreadId, comm: CommId) {
        let loc = OpLoc { thread: t, op: st.host.threads[t as usize].pc };
        let rank = self.acting_rank(loc);
        let c = st.host.threads[t as usize].clock.clone();
        st.nccl.init_arrived.entry(comm).or_default().insert(rank, c);
        self.block(st, t, Wait::Init(comm));
    }

    /// Whether every member has called `CommInit`.
    pub(crate) fn init_complete(&self, st: &State, c: CommId) -> bool {
        let members = &self.program.comms[c.0 as usize].members;
        st.nccl.init_arrived.get(&c).is_some_and(|m| members.iter().all(|r| m.contains_key(r)))
    }

    pub(crate) fn init_unblock(&self, st: &mut State, t: ThreadId, c: CommId) {
        let all: Vec<VClock> = st.nccl.init_arrived[&c].values().cloned().collect();
        for c in all {
            st.host.threads[t as usize].clock.join(&c);
        }
    }
}
