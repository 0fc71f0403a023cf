//! The wait-for graph of a stuck state and its explanation: which host thread, item or NCCL op waits for which, why
//! (the rule), the cycle if there is one, and where every host thread is blocked (MODEL.md "Verdicts").

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::program::*;
use crate::semantics::*;

/// A node of the wait-for graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Node {
    Thread(ThreadId),
    Item(ItemKey),
    /// Something that will never happen (a peer that finished without issuing the matching op).
    Never(ThreadId),
}

/// One edge: `from` waits for `to`, with the reason written out.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WaitEdge {
    pub from: Node,
    pub to: Node,
    /// e.g. "r0 s0: #1 recv(from r1, ...) is queued behind #0 send(to r1, ...) (S1: stream order)".
    pub text: String,
}

/// The explanation of a stuck state.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Stuck {
    /// The cycle, edge by edge, or the chain that ends in something that never happens.
    pub cycle: Vec<WaitEdge>,
    /// `true` when `cycle` closes; `false` when it ends in a wait on something that never comes.
    pub is_cycle: bool,
    /// Where each unfinished host thread is: "r0 main is blocked in #2 stream_sync(s0)".
    pub blocked: Vec<String>,
    /// `true` when the state is stuck only because the device did not start items next to a spinning NCCL kernel (S1).
    pub starvation: bool,
}

impl<'p> Semantics<'p> {
    /// A label for an item: "r0 s0: #0 send(to r1, x, 2 GiB, s0, world)", or for a group launch the group's ops.
    pub fn item_label(&self, st: &State, k: ItemKey) -> String {
        let item = &st.items[&k];
        let rank = item.streams[0].rank;
        let streams: Vec<String> = item.streams.iter().map(|s| self.program.stream_label(*s, rank)).collect();
        let (r, _) = self.thread_of[k.thread as usize];
        let body = match &item.kind {
            ItemKind::Launch { ops, .. } if ops.len() > 1 || ops[0].loc.op != k.op => {
                let parts: Vec<String> = ops
                    .iter()
                    .map(|o| format!("#{} {}", o.loc.op, self.program.op_label(r, &self.op(o.loc).kind)))
                    .collect();
                format!("group ending at #{} [{}]", k.op, parts.join("; "))
            }
            _ => format!("#{} {}", k.op, self.program.op_label(r, &self.op(k.loc()).kind)),
        };
        format!("r{rank} {}: {body}", streams.join("+"))
    }

    /// A label for a wait-for node.
    pub fn node_label(&self, st: &State, n: Node) -> String {
        match n {
            Node::Thread(t) => self.thread_label(t),
            Node::Item(k) => self.item_label(st, k),
            Node::Never(t) => format!("{} (finished)", self.thread_label(t)),
        }
    }

    /// Where a thread is: "r0 main is blocked in #2 stream_sync(s0)" / "... has finished" / "... is at #3 ...".
    pub fn thread_position(&self, st: &State, t: ThreadId) -> String {
        let th = &st.threads[t as usize];
        if self.thread_finished(st, t) {
            return format!("{} has finished", self.thread_label(t));
        }
        let loc = OpLoc { thread: t, op: th.pc };
        let (r, ti) = self.thread_of[t as usize];
        let op = format!("#{} {}{}", th.pc, self.program.op_label(r, &self.op(loc).kind), self.program.op_where(r, ti, th.pc));
        match &th.wait {
            Some(Wait::Connect { need, .. }) => {
                let dirs: BTreeSet<_> = need.values().flatten().copied().collect();
                format!("{} is blocked in {op}, setting up connection {} (N7)", self.thread_label(t), dirs_label(&dirs))
            }
            Some(_) => format!("{} is blocked in {op}", self.thread_label(t)),
            None => format!("{} is about to call {op}", self.thread_label(t)),
        }
    }

    /// The thread of `rank` that will issue an op satisfying `pred` next (at or after its pc), if any.
    fn future_issuer(&self, st: &State, rank: RankId, pred: impl Fn(&OpKind) -> bool) -> Option<ThreadId> {
        let base = self.thread_base[rank as usize];
        let n = self.program.ranks[rank as usize].threads.len() as u32;
        (base..base + n).find(|&u| {
            let pc = st.threads[u as usize].pc as usize;
            let ops = &self.program.ranks[rank as usize].threads[(u - base) as usize].ops;
            pc < ops.len() && ops[pc..].iter().any(|o| pred(&o.kind))
        })
    }

    fn edges_of(&self, st: &State, n: Node, starved: bool) -> Vec<WaitEdge> {
        let mut out = vec![];
        let mut edge = |to: Node, text: String| out.push(WaitEdge { from: n, to, text });
        match n {
            Node::Never(_) => {}
            Node::Thread(t) => {
                let th = &st.threads[t as usize];
                let me = self.thread_position(st, t);
                let rank = self.rank_of(t);
                match &th.wait {
                    None => {}
                    Some(Wait::Items(ks)) => {
                        if let Some(k) = ks.iter().find(|k| st.items[k].status != ItemStatus::Done) {
                            edge(Node::Item(*k), format!("{me}, which waits for {} to end (S4)", self.item_label(st, *k)));
                        }
                    }
                    Some(Wait::Started(k)) => {
                        edge(Node::Item(*k), format!("{me}, which waits for {} to start (S5)", self.item_label(st, *k)));
                    }
                    Some(Wait::Init(c)) => {
                        let comm = &self.program.comms[c.0 as usize];
                        for r in &comm.members {
                            if st.init_arrived.get(c).is_some_and(|m| m.contains_key(r)) {
                                continue;
                            }
                            let is_init = |k: &OpKind| matches!(k, OpKind::CommInit { comm: x } if x == c);
                            match self.future_issuer(st, *r, is_init) {
                                Some(u) => edge(Node::Thread(u), format!("{me}: comm_init({}) waits for r{r} to call it (N8)", comm.name)),
                                None => edge(Node::Never(self.thread_base[*r as usize]), format!("{me}: r{r} never calls comm_init({})", comm.name)),
                            }
                        }
                    }
                    Some(Wait::Barrier { barrier, round }) => {
                        for (r, ti) in &self.program.barriers[*barrier as usize].participants {
                            let u = self.thread_id(*r, *ti);
                            if !st.barrier_arrived[&(*barrier, *round)].contains_key(&u) {
                                edge(Node::Thread(u), format!("{me}: the barrier waits for {}", self.thread_label(u)));
                            }
                        }
                    }
                    Some(Wait::Connect { need, .. }) => {
                        for (peer, dirs) in need {
                            // The peer thread blocked in its own set-up with us, or the one that will need the link.
                            let base = self.thread_base[*peer as usize];
                            let n = self.program.ranks[*peer as usize].threads.len() as u32;
                            let blocked = (base..base + n).find(|u| {
                                matches!(&st.threads[*u as usize].wait, Some(Wait::Connect { need: p, .. }) if p.contains_key(&rank))
                            });
                            let comms: BTreeSet<CommId> = dirs.iter().map(|d| d.0).collect();
                            let uses = |k: &OpKind| match k {
                                OpKind::Send { comm, peer: p, .. } | OpKind::Recv { comm, peer: p, .. } => *p == rank && comms.contains(comm),
                                _ => false,
                            };
                            match blocked.or_else(|| self.future_issuer(st, *peer, uses)) {
                                Some(u) => {
                                    let theirs = match &st.threads[u as usize].wait {
                                        Some(Wait::Connect { need: p, .. }) => p.get(&rank).map(dirs_label),
                                        _ => None,
                                    };
                                    let why = match theirs {
                                        Some(x) if x != dirs_label(dirs) => format!(
                                            "; r{peer} is setting up {x} instead: first contact is not mirrored"
                                        ),
                                        _ => String::new(),
                                    };
                                    edge(Node::Thread(u), format!("{me}, which waits for r{peer} to set up {} too (N7){why}", dirs_label(dirs)));
                                }
                                None => edge(Node::Never(base), format!("{me}; r{peer} never uses that connection")),
                            }
                        }
                    }
                }
            }
            Node::Item(k) => {
                let item = &st.items[&k];
                let me = self.item_label(st, k);
                match item.status {
                    ItemStatus::Done => {}
                    ItemStatus::Pending => {
                        for s in &item.streams {
                            let (q, head) = &st.queues[self.stream_index(*s)];
                            let h = q[*head as usize];
                            if h != k {
                                edge(Node::Item(h), format!("{me} is queued behind {} (S1: one stream runs in issue order)", self.item_label(st, h)));
                            }
                        }
                        for d in &item.deps {
                            if st.items[d].status == ItemStatus::Done {
                                continue;
                            }
                            let why = match (&item.kind, &st.items[d].kind) {
                                (ItemKind::WaitMarker, _) => "S3: stream wait on the event's record",
                                (ItemKind::Launch { comm: a, .. }, ItemKind::Launch { comm: b, .. }) if a == b => {
                                    "N5: launches on one communicator are serialized"
                                }
                                _ => "S2: legacy default stream synchronization",
                            };
                            edge(Node::Item(*d), format!("{me} must wait for {} to end ({why})", self.item_label(st, *d)));
                        }
                        if starved {
                            for (rk, ri) in &st.items {
                                if ri.status == ItemStatus::Running
                                    && matches!(ri.kind, ItemKind::Launch { .. })
                                    && ri.streams[0].rank == item.streams[0].rank
                                {
                                    edge(Node::Item(*rk), format!(
                                        "{me} may not start while {} spins on the same device (S1: no guaranteed independent progress)",
                                        self.item_label(st, *rk)
                                    ));
                                }
                            }
                        }
                    }
                    ItemStatus::Running => self.launch_edges(st, k, &mut edge),
                }
            }
        }
        out
    }

    fn launch_edges(&self, st: &State, k: ItemKey, edge: &mut impl FnMut(Node, String)) {
        let item = &st.items[&k];
        let ItemKind::Launch { comm, ops } = &item.kind else { return };
        let rank = item.streams[0].rank;
        let me = self.item_label(st, k);
        let (possible, guaranteed) = (self.profile.eager_bytes_per_connection, self.profile.eager_guaranteed());
        let rendezvous = if possible == 0 {
            "rendezvous".to_string()
        } else if guaranteed < possible {
            format!(
                "no recv running, and the send is not guaranteed to fit the eager window left: {} guaranteed, up to {} seen",
                crate::describe::bytes(guaranteed),
                crate::describe::bytes(possible)
            )
        } else {
            format!("larger than the {} eager window left", crate::describe::bytes(possible))
        };
        for op in ops.iter().filter(|o| o.status == CommOpStatus::Pending) {
            let rendezvous = if possible > 0 && op.bytes > possible {
                format!("larger than the whole {} eager window: rendezvous", crate::describe::bytes(possible))
            } else {
                rendezvous.clone()
            };
            let (r, _) = self.thread_of[op.loc.thread as usize];
            let what = format!("#{} {}", op.loc.op, self.program.op_label(r, &self.op(op.loc).kind));
            // "r0 s0: #0 send(...)" for a launch of one op; "r0 s0: group ... [..]: #3 send(...)" inside a group.
            let lead = if ops.len() == 1 { me.clone() } else { format!("{me}: {what}") };
            let (peer, other_key, verb) = match op.kind {
                CommOpKind::Send { peer, seq } => (peer, (*comm, rank, peer, seq, true), "recv"),
                CommOpKind::Recv { peer, seq } => (peer, (*comm, peer, rank, seq, false), "send"),
                CommOpKind::Collective { seq } => {
                    let parts = st.coll.get(&(*comm, seq));
                    for m in &self.program.comms[comm.0 as usize].members {
                        match parts.and_then(|p| p.get(m)) {
                            Some((pk, _)) if *pk == k => {}
                            Some((pk, _)) => {
                                if st.items[pk].status != ItemStatus::Running {
                                    edge(Node::Item(*pk), format!("{me}: {what} waits for r{m}'s part {} to run (C1)", self.item_label(st, *pk)));
                                }
                            }
                            None => {
                                let is_coll = |x: &OpKind| matches!(x, OpKind::Collective { comm: c, .. } if c == comm);
                                match self.future_issuer(st, *m, is_coll) {
                                    Some(u) => edge(Node::Thread(u), format!("{me}: {what} waits for r{m} to issue its part (C1)")),
                                    None => edge(Node::Never(self.thread_base[*m as usize]), format!("{me}: {what}: r{m} never issues its part")),
                                }
                            }
                        }
                    }
                    continue;
                }
            };
            match st.p2p.get(&other_key) {
                Some(&(ok, oi)) => {
                    let oitem = &st.items[&ok];
                    let ItemKind::Launch { ops: oops, .. } = &oitem.kind else { continue };
                    let oop = &oops[oi as usize];
                    let (or, _) = self.thread_of[oop.loc.thread as usize];
                    let owhat = if oops.len() == 1 {
                        self.item_label(st, ok)
                    } else {
                        format!("r{or} #{} {} (in {})", oop.loc.op, self.program.op_label(or, &self.op(oop.loc).kind), self.item_label(st, ok))
                    };
                    let reason = if verb == "recv" { format!("({rendezvous}; N2)") } else { "(N2)".to_string() };
                    if oitem.status != ItemStatus::Running {
                        edge(Node::Item(ok), format!("{lead} waits for {owhat} to run {reason}"));
                    } else {
                        // Running but held back by an earlier op to the same peer in its launch (N4).
                        edge(Node::Item(ok), format!("{lead} waits for {owhat}, which is behind an earlier op to the same peer (N4)"));
                    }
                }
                None => {
                    let want_recv = verb == "recv";
                    let matches = |x: &OpKind| match x {
                        OpKind::Recv { comm: c, peer: p, .. } if want_recv => c == comm && *p == rank,
                        OpKind::Send { comm: c, peer: p, .. } if !want_recv => c == comm && *p == rank,
                        _ => false,
                    };
                    match self.future_issuer(st, peer, matches) {
                        Some(u) => edge(Node::Thread(u), format!("{lead} waits for r{peer} to issue the matching {verb} (N3)")),
                        None => edge(
                            Node::Never(self.thread_base[peer as usize]),
                            format!("{lead} has no matching {verb}: r{peer} never issues one (N3)"),
                        ),
                    }
                }
            }
        }
    }

    /// Explains a stuck state: builds the wait-for graph from the blocked threads and unfinished items and returns
    /// the first cycle found (in a fixed order), or the longest chain ending in something that never happens.
    /// `starved` says the state is stuck only because starvable item starts were withheld (S1).
    pub fn explain(&self, st: &State, starved: bool) -> Stuck {
        let blocked: Vec<String> = (0..st.threads.len() as u32).map(|t| self.thread_position(st, t)).collect();
        let mut roots: Vec<Node> = (0..st.threads.len() as u32)
            .filter(|t| !self.thread_finished(st, *t))
            .map(Node::Thread)
            .collect();
        roots.extend(st.items.iter().filter(|(_, i)| i.status != ItemStatus::Done).map(|(k, _)| Node::Item(*k)));
        let mut best_chain: Vec<WaitEdge> = vec![];
        let mut dead: BTreeSet<Node> = BTreeSet::new();
        for root in roots {
            let mut path: Vec<WaitEdge> = vec![];
            let mut seen: Vec<Node> = vec![root];
            if let Some(cycle) = self.dfs(st, root, starved, &mut path, &mut seen, &mut best_chain, &mut dead) {
                return Stuck { cycle, is_cycle: true, blocked, starvation: starved };
            }
        }
        Stuck { cycle: best_chain, is_cycle: false, blocked, starvation: starved }
    }

    #[allow(clippy::too_many_arguments)]
    fn dfs(
        &self,
        st: &State,
        n: Node,
        starved: bool,
        path: &mut Vec<WaitEdge>,
        seen: &mut Vec<Node>,
        best: &mut Vec<WaitEdge>,
        dead: &mut BTreeSet<Node>,
    ) -> Option<Vec<WaitEdge>> {
        if seen.len() > 256 || dead.contains(&n) {
            return None;
        }
        for e in self.edges_of(st, n, starved) {
            if let Some(pos) = seen.iter().position(|x| *x == e.to) {
                let mut cycle: Vec<WaitEdge> = path[pos..].to_vec();
                cycle.push(e);
                return Some(cycle);
            }
            path.push(e.clone());
            seen.push(e.to);
            if matches!(e.to, Node::Never(_)) && (best.is_empty() || path.len() > best.len()) {
                *best = path.clone();
            }
            if let Some(c) = self.dfs(st, e.to, starved, path, seen, best, dead) {
                return Some(c);
            }
            path.pop();
            seen.pop();
        }
        dead.insert(n);
        None
    }
}
