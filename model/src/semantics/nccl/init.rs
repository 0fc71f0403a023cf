//! Communicator creation (N8): `ncclCommInitRank` on a blocking communicator blocks until every member has called
//! it, and `ncclCommSplit` blocks until every member of the parent communicator has made the same split; returning
//! joins every member's clock at its call.

use super::super::*;

impl<'p> Semantics<'p> {
    /// The calling thread arrives at `CommInit(comm)` (`n == 0`) or at its `n - 1`-th `CommSplit` of `comm` and
    /// blocks until every member of `comm` has arrived there.
    pub(crate) fn comm_init(&self, st: &mut State, t: ThreadId, comm: CommId, n: u32) {
        let loc = OpLoc { thread: t, op: st.host.threads[t as usize].pc };
        let rank = self.acting_rank(loc);
        let c = st.host.threads[t as usize].clock.clone();
        st.nccl.init_arrived.entry((comm, n)).or_default().insert(rank, c);
        self.block(st, t, Wait::Init(comm, n));
    }

    /// Whether every member of `c` has arrived at its init (`n == 0`) or its `n - 1`-th split.
    pub(crate) fn init_complete(&self, st: &State, c: CommId, n: u32) -> bool {
        let members = &self.program.comms[c.0 as usize].members;
        st.nccl.init_arrived.get(&(c, n)).is_some_and(|m| members.iter().all(|r| m.contains_key(r)))
    }

    pub(crate) fn init_unblock(&self, st: &mut State, t: ThreadId, c: CommId, n: u32) {
        let all: Vec<VClock> = st.nccl.init_arrived[&(c, n)].values().cloned().collect();
        for c in all {
            st.host.threads[t as usize].clock.join(&c);
        }
    }
}
