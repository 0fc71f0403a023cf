//! Point-to-point delivery (N2, N3): the n-th send from A to B on a communicator matches the n-th recv on B from A;
//! a running send either meets its running recv (rendezvous) or delivers into the connection's buffers with no recv
//! running (eager), which a profile allows up to a window split into *guaranteed* and *possible* bytes.

use super::super::*;

impl<'p> Semantics<'p> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_steps(&self, st: &State, comm: CommId, rank: RankId, peer: RankId, seq: u32, op: &CommOp, out: &mut Vec<Step>) {
        let key = P2pKey { comm, src: rank, dst: peer, seq, recv: false };
        if let Some(at) = st.matching(key) {
            if Self::op_eligible(st.item(at.0), at.1 as usize) {
                out.push(Step::Transfer { send: op.loc, recv: st.comm_op(at).1.loc });
            }
        }
        let used = st.nccl.eager_used.get(&(comm, rank, peer)).copied().unwrap_or(0);
        if self.fits_eager(used, op.bytes) {
            out.push(Step::Eager { send: op.loc });
        }
    }

    /// Whether a send of `bytes` fits what is left of the eager window the profile allows at all, on a connection
    /// that already holds `used` buffered bytes (N2); a zero-byte send never delivers eagerly.
    fn fits_eager(&self, used: u64, bytes: u64) -> bool {
        bytes > 0 && used.saturating_add(bytes) <= self.profile.eager_bytes_per_connection
    }

    /// The bytes buffered on the connection of the running send at `send`, and the send's own bytes; `None` when
    /// `send` is not a send.
    fn eager_load(&self, st: &State, send: OpLoc) -> Option<(u64, u64)> {
        let (item, op) = st.comm_op(self.find_comm_op(st, send));
        let (ItemKind::Launch { comm, .. }, CommOpKind::Send { peer, .. }) = (&item.kind, op.kind) else {
            return None;
        };
        Some((st.nccl.eager_used.get(&(*comm, item.rank(), peer)).copied().unwrap_or(0), op.bytes))
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn recv_steps(&self, st: &State, comm: CommId, rank: RankId, peer: RankId, seq: u32, op: &CommOp, out: &mut Vec<Step>) {
        let key = P2pKey { comm, src: peer, dst: rank, seq, recv: true };
        if let Some(at) = st.matching(key) {
            if st.comm_op(at).1.status == CommOpStatus::Buffered {
                out.push(Step::Drain { recv: op.loc });
            }
        }
    }

    /// Whether the running send at `send` could deliver eagerly now instead (N2: a non-empty message within what is
    /// left of the window the profile allows at all).
    pub(crate) fn eager_possible(&self, st: &State, send: OpLoc) -> bool {
        self.eager_load(st, send).is_some_and(|(used, bytes)| self.fits_eager(used, bytes))
    }

    /// Whether an eager delivery goes beyond the profile's *guaranteed* window (N2): the platform may refuse it.
    pub fn eager_beyond_guarantee(&self, st: &State, send: OpLoc) -> bool {
        self.eager_load(st, send).is_some_and(|(used, bytes)| used.saturating_add(bytes) > self.profile.eager_guaranteed())
    }

    /// Rendezvous: both running; the recv's end joins the send's start, and the send's end joins the recv's start
    /// (MODEL.md).
    pub(crate) fn transfer(&self, st: &mut State, send: OpLoc, recv: OpLoc, fx: &mut Effects) {
        let s = self.find_comm_op(st, send);
        let r = self.find_comm_op(st, recv);
        self.note_recv_source(st, recv, send);
        let mut c = st.item(s.0).launch_start().cloned().expect("a running send has started");
        c.join(st.item(r.0).launch_start().expect("a running recv has started"));
        self.finish_comm_op(st, s, CommOpStatus::Done, c.clone(), fx);
        self.finish_comm_op(st, r, CommOpStatus::Done, c, fx);
    }

    /// Eager: the send's bytes go into the connection's buffers; the send is finished, the recv not yet.
    pub(crate) fn eager(&self, st: &mut State, send: OpLoc, fx: &mut Effects) {
        let s = self.find_comm_op(st, send);
        let (item, op) = st.comm_op(s);
        let CommOpKind::Send { peer, .. } = op.kind else { unreachable!("eager step of a non-send") };
        let ItemKind::Launch { comm, .. } = item.kind else { unreachable!("comm op outside a launch") };
        let (bytes, rank) = (op.bytes, item.rank());
        let c = item.launch_start().cloned().expect("a running send has started");
        let used = st.nccl.eager_used.entry((comm, rank, peer)).or_default();
        *used = used.saturating_add(bytes);
        self.finish_comm_op(st, s, CommOpStatus::Buffered, c, fx);
    }

    /// A running recv takes the bytes its send left in the connection's buffers; its end joins the send's start.
    pub(crate) fn drain(&self, st: &mut State, recv: OpLoc, fx: &mut Effects) {
        let r = self.find_comm_op(st, recv);
        let (item, op) = st.comm_op(r);
        let CommOpKind::Recv { peer, seq } = op.kind else { unreachable!("drain step of a non-recv") };
        let ItemKind::Launch { comm, .. } = item.kind else { unreachable!("comm op outside a launch") };
        let me = item.rank();
        let s = st.nccl.p2p[&P2pKey { comm, src: peer, dst: me, seq, recv: false }];
        let mut c = st.item(r.0).launch_start().cloned().expect("a running recv has started");
        c.join(st.item(s.0).launch_start().expect("a buffered send has started"));
        let (bytes, send) = (st.comm_op(s).1.bytes, st.comm_op(s).1.loc);
        self.note_recv_source(st, recv, send);
        // Canonical states: a connection with no bytes buffered has no entry, and a drained send is `Done` like a
        // transferred one (its clock is already in its launch's end or will be), so executions that differ only in
        // whether a send went eager meet again once its recv has drained it.
        if let Some(used) = st.nccl.eager_used.get_mut(&(comm, peer, me)) {
            *used = used.saturating_sub(bytes);
            if *used == 0 {
                st.nccl.eager_used.remove(&(comm, peer, me));
            }
        }
        if let Some(item) = st.streams.items.get_mut(&s.0) {
            if let ItemKind::Launch { ops, .. } = &mut item.kind {
                ops[s.1 as usize].status = CommOpStatus::Done;
            }
        }
        self.finish_comm_op(st, r, CommOpStatus::Done, c, fx);
    }
}
