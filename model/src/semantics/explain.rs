//! The wait-for graph of a stuck state and its explanation: which host thread, item or NCCL op waits for which, why
//! (a typed [`Reason`] carrying its rule), the cycle if there is one, and where every host thread is blocked
//! (MODEL.md "Verdicts"). Each family's waits appear here as edges; the text of an edge is for people, the reason is
//! for programs (fix hints match on it).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::*;

/// A node of the wait-for graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Node {
    Thread(ThreadId),
    Item(ItemKey),
    /// Something rank `r` will never do (a peer that finished, or runs no thread at all, without issuing the
    /// matching op). A rank, not a thread: a rank may run no thread of its own (another rank's thread may act for
    /// it), and its first thread's id was then another rank's thread, or past the last thread (a panic in `shrink`).
    Never(RankId),
}

/// Why one node of the wait-for graph waits for another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Reason {
    /// An item is queued behind another on its stream (S1).
    StreamOrder,
    /// An item waits for the legacy default stream or a blocking stream (S2).
    LegacyStream,
    /// A stream-wait marker waits for the record its event named (S3).
    EventWait,
    /// A launch waits for the previous launch on its communicator (N5).
    CommSerialized,
    /// The device may refuse to start an item next to a spinning NCCL kernel (S1).
    Starved,
    /// A host thread waits for an item to end (S4, S5 synchronous copies).
    HostSync,
    /// A host thread waits for the work before a synchronous pageable copy, to stage its source (S5).
    Staging,
    /// A host thread waits for the members of a communicator to call `CommInit` (N8).
    Init,
    /// A host thread waits for the members of a parent communicator to make their next `CommSplit` of it (N8:
    /// `ncclCommSplit` is collective over the parent, a rank that passes no color included).
    Split,
    /// A host thread waits at a barrier for another participant.
    Barrier,
    /// A host thread waits for a peer to set up the mirrored connection (N7); `nonmirrored` when the peer sets up
    /// different directions; `collective` when the connections are a collective's (its first use on the
    /// communicator), not point-to-point ones.
    Connect {
        nonmirrored: bool,
        #[serde(default)]
        collective: bool,
    },
    /// A send waits for its recv to run (N2): it is not guaranteed to fit the eager window left.
    /// `guaranteed_bytes` / `possible_bytes`: the profile's eager window (0 possible = always rendezvous).
    Rendezvous { bytes: u64, guaranteed_bytes: u64, possible_bytes: u64 },
    /// A recv waits for its send to run (N2).
    RecvWaitsSend,
    /// The matching op runs but is behind an earlier op to the same peer in its launch (N4).
    SamePeerOrder,
    /// The matching op's launch runs but the op is in a later kernel plan than calls still unfinished (N14).
    EarlierPlan,
    /// An op waits for the peer to issue the matching op, or the peer never does (N3).
    Unmatched,
    /// A collective part waits for a member's part (C1).
    CollectiveMember,
    /// A host thread's enqueue waits for room in a full launch queue: for the first item that has not started (S6).
    QueueFull,
    /// A host thread waits in a call that synchronizes implicitly (cudaFree, cudaMalloc, cudaMallocHost, a lazy
    /// module load; S7).
    ImplicitSync,
    /// A host thread's launch returns only once its work has ended (`CUDA_LAUNCH_BLOCKING=1`; S7).
    LaunchBlocking,
    /// A host thread in `CommFinalize`/`CommDestroy` waits for a member to call it, or for its own launches on the
    /// communicator to end (N13).
    Finalize,
}

impl Reason {
    /// The rule the wait follows from.
    pub fn rule(self) -> Rule {
        match self {
            Reason::StreamOrder | Reason::Starved => Rule::S1,
            Reason::LegacyStream => Rule::S2,
            Reason::EventWait => Rule::S3,
            Reason::CommSerialized => Rule::N5,
            Reason::HostSync => Rule::S4,
            Reason::Staging => Rule::S5,
            Reason::Init | Reason::Split => Rule::N8,
            Reason::Barrier => Rule::S4,
            Reason::Connect { .. } => Rule::N7,
            Reason::Rendezvous { .. } | Reason::RecvWaitsSend => Rule::N2,
            Reason::SamePeerOrder => Rule::N4,
            Reason::EarlierPlan => Rule::N14,
            Reason::Unmatched => Rule::N3,
            Reason::CollectiveMember => Rule::C1,
            Reason::QueueFull => Rule::S6,
            Reason::ImplicitSync | Reason::LaunchBlocking => Rule::S7,
            Reason::Finalize => Rule::N13,
        }
    }
}

/// One edge: `from` waits for `to`, why, and the reason written out.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WaitEdge {
    pub from: Node,
    pub to: Node,
    pub reason: Reason,
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
        let item = st.item(k);
        let rank = item.rank();
        let (r, _) = self.thread_of[k.thread as usize];
        let streams: Vec<String> = item.streams.iter().map(|s| self.program.stream_label(*s, r)).collect();
        let body = match &item.kind {
            ItemKind::Launch { ops, .. } if ops.len() > 1 || ops[0].loc.op != k.op => {
                // A group of hundreds of calls is named by its first calls and its size (issue 10 review: a
                // 201-call group made one line of a report 22 KB long).
                const SHOWN: usize = 4;
                let parts: Vec<String> = ops
                    .iter()
                    .take(SHOWN)
                    .map(|o| format!("#{} {}", o.loc.op, self.program.op_label(r, &self.op(o.loc).kind)))
                    .collect();
                let more = if ops.len() > SHOWN { format!("; … {} calls in all", ops.len()) } else { String::new() };
                format!("group ending at #{} [{}{more}]", k.op, parts.join("; "))
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
            Node::Never(r) => format!("r{r} (never does it)"),
        }
    }

    /// Where a thread is: "r0 main is blocked in #2 stream_sync(s0)" / "... has finished" / "... is at #3 ...".
    pub fn thread_position(&self, st: &State, t: ThreadId) -> String {
        let th = &st.host.threads[t as usize];
        if self.thread_finished(st, t) {
            return format!("{} has finished", self.thread_label(t));
        }
        let loc = OpLoc { thread: t, op: th.pc };
        let (r, ti) = self.thread_of[t as usize];
        let op = format!("#{} {}{}", th.pc, self.program.op_label(r, &self.op(loc).kind), self.program.op_where(r, ti, th.pc));
        match &th.wait {
            Some(Wait::Connect { need, .. }) => {
                let dirs: BTreeSet<Dir> = need.values().flatten().copied().collect();
                format!("{} is blocked in {op}, setting up connection {} (N7)", self.thread_label(t), self.dirs_text(&dirs))
            }
            Some(Wait::QueueSlot { stream }) => format!(
                "{} is blocked in {op}, waiting for room in the launch queue of {} (S6)",
                self.thread_label(t),
                self.program.stream_label(*stream, r)
            ),
            Some(Wait::Poll(c)) => match self.background_of(st, t, *c) {
                Some(p) => {
                    let call = format!("#{} {}", p.op, self.program.op_label(r, &self.op(OpLoc { thread: t, op: p.op }).kind));
                    format!("{} is blocked in {op}, waiting for {call} to leave ncclInProgress (N12)", self.thread_label(t))
                }
                None => format!("{} is blocked in {op}", self.thread_label(t)),
            },
            Some(_) => format!("{} is blocked in {op}", self.thread_label(t)),
            None => format!("{} is about to call {op}", self.thread_label(t)),
        }
    }

    /// The thread that will next issue an op acting on `rank` that satisfies `pred` (at or after its pc), if any.
    fn future_issuer(&self, st: &State, rank: RankId, pred: impl Fn(&OpKind) -> bool) -> Option<ThreadId> {
        (0..st.host.threads.len() as u32).find(|&u| {
            let pc = st.host.threads[u as usize].pc;
            let ops = self.ops_of(u);
            (pc as usize..ops.len()).any(|i| pred(&ops[i].kind) && self.acting_rank(OpLoc { thread: u, op: i as u32 }) == rank)
        })
    }

    /// A node standing for "rank never does it".
    fn never(&self, rank: RankId) -> Node {
        Node::Never(rank)
    }

    fn edges_of(&self, st: &State, n: Node, starved: bool) -> Vec<WaitEdge> {
        let mut out = vec![];
        let mut edge = |to: Node, reason: Reason, text: String| out.push(WaitEdge { from: n, to, reason, text });
        match n {
            Node::Never(_) => {}
            Node::Thread(t) => {
                let th = &st.host.threads[t as usize];
                let me = self.thread_position(st, t);
                // A poll waits for what its call in progress waits for (N12).
                let wait: Option<Wait> = match &th.wait {
                    Some(Wait::Poll(c)) => self.background_of(st, t, *c).map(|p| p.wait.clone()),
                    w => w.clone(),
                };
                match &wait {
                    None | Some(Wait::Poll(_)) => {}
                    Some(Wait::Finalize(c)) => {
                        let comm = &self.program.comms[c.0 as usize];
                        let rank = self.rank_of(t);
                        for (k, i) in &st.streams.items {
                            if i.status != ItemStatus::Done && i.rank() == rank && matches!(i.kind, ItemKind::Launch { comm: x, .. } if x == *c) {
                                let text = format!("{me}, which flushes {} first (N13)", self.item_label(st, *k));
                                edge(Node::Item(*k), Reason::Finalize, text);
                            }
                        }
                        for r in &comm.members {
                            if st.nccl.finalize_arrived.get(c).is_some_and(|m| m.contains_key(r)) {
                                continue;
                            }
                            let ends = |k: &OpKind| matches!(k, OpKind::CommFinalize { comm: x } | OpKind::CommDestroy { comm: x } if x == c);
                            match self.future_issuer(st, *r, ends) {
                                Some(u) => edge(Node::Thread(u), Reason::Finalize, format!("{me}: comm_finalize({}) waits for r{r} to call it (N13)", comm.name)),
                                None => edge(self.never(*r), Reason::Finalize, format!("{me}: r{r} never finalizes {} (N13)", comm.name)),
                            }
                        }
                    }
                    Some(Wait::Items { items, .. }) => {
                        if let Some(k) = items.iter().find(|k| !st.item_done(**k)) {
                            let op = &self.op(OpLoc { thread: t, op: th.pc }).kind;
                            let own_launch = k.thread == t
                                && k.op == th.pc
                                && !matches!(op, OpKind::Memcpy { stream: None, .. } | OpKind::Memset { stream: None, .. });
                            let (reason, why) = match op {
                                OpKind::CudaFree { .. }
                                | OpKind::CudaMalloc { .. }
                                | OpKind::CudaMallocHost { .. }
                                | OpKind::LoadModule { .. } => (Reason::ImplicitSync, "S7: the call synchronizes the device implicitly"),
                                OpKind::EmptyCache { .. } => (
                                    Reason::ImplicitSync,
                                    "P4, S7: empty_cache waits for the work record_stream holds its cached blocks for, then \
                                     releases them with cudaFree, which may synchronize the device",
                                ),
                                _ if self.profile.launch_blocking && own_launch => {
                                    (Reason::LaunchBlocking, "S7: with CUDA_LAUNCH_BLOCKING=1 a launch returns once its work has ended")
                                }
                                _ => (Reason::HostSync, "S4"),
                            };
                            let text = format!("{me}, which waits for {} to end ({why})", self.item_label(st, *k));
                            edge(Node::Item(*k), reason, text);
                        }
                    }
                    Some(Wait::QueueSlot { stream }) => {
                        let pending = self.pending_on(st, *stream);
                        if let Some(k) = pending.first() {
                            let (r, _) = self.thread_of[t as usize];
                            let text = format!(
                                "{me}: {} items of {} have not started (depth {}), the first {} (S6: a full launch queue \
                                 blocks the call)",
                                pending.len(),
                                self.program.stream_label(*stream, r),
                                self.profile.launch_queue_depth.unwrap_or(0),
                                self.item_label(st, *k)
                            );
                            edge(Node::Item(*k), Reason::QueueFull, text);
                        }
                    }
                    Some(Wait::Staged(k)) => {
                        // The work before the copy: its stream predecessor or an unfinished dependency.
                        let item = st.item(*k);
                        let (q, head) = &st.streams.queues[self.stream_index(item.streams[0])];
                        let before = q.get(*head as usize).filter(|h| **h != *k).copied();
                        let dep = item.deps.iter().find(|d| !st.item_done(**d)).copied();
                        if let Some(w) = before.or(dep) {
                            let text = format!("{me}, which waits for {} to end before staging the copy (S5)", self.item_label(st, w));
                            edge(Node::Item(w), Reason::Staging, text);
                        }
                    }
                    Some(Wait::Init(c, n)) => {
                        let comm = &self.program.comms[c.0 as usize];
                        let (call, reason) = if *n == 0 { ("comm_init", Reason::Init) } else { ("comm_split", Reason::Split) };
                        for r in &comm.members {
                            if st.nccl.init_arrived.get(&(*c, *n)).is_some_and(|m| m.contains_key(r)) {
                                continue;
                            }
                            let is_init = |k: &OpKind| match k {
                                OpKind::CommInit { comm: x } => *n == 0 && x == c,
                                OpKind::CommSplit { parent, seq, .. } => parent == c && seq + 1 == *n,
                                _ => false,
                            };
                            match self.future_issuer(st, *r, is_init) {
                                Some(u) => edge(Node::Thread(u), reason, format!("{me}: {call}({}) waits for r{r} to call it (N8)", comm.name)),
                                None => edge(self.never(*r), reason, format!("{me}: r{r} never calls {call}({})", comm.name)),
                            }
                        }
                    }
                    Some(Wait::Barrier { barrier, round }) => {
                        for (r, ti) in &self.program.barriers[*barrier as usize].participants {
                            let u = self.thread_id(*r, *ti);
                            if !st.host.barrier_arrived[&(*barrier, *round)].contains_key(&u) {
                                edge(Node::Thread(u), Reason::Barrier, format!("{me}: the barrier waits for {}", self.thread_label(u)));
                            }
                        }
                    }
                    Some(Wait::Connect { need, .. }) => {
                        for ((comm, mine, peer), dirs) in need {
                            let collective = dirs.iter().all(|d| d.3);
                            // The thread blocked in its own set-up with us on this communicator, or the one that will
                            // need the connection.
                            let blocked = (0..st.host.threads.len() as u32)
                                .find(|u| self.connect_needs(st, *u as usize).any(|p| p.contains_key(&(*comm, *peer, *mine))));
                            let uses = |k: &OpKind| match k {
                                OpKind::Send { comm: c, peer: p, .. } | OpKind::Recv { comm: c, peer: p, .. } => p == mine && c == comm,
                                OpKind::Collective { comm: c, .. } => c == comm,
                                _ => false,
                            };
                            match blocked.or_else(|| self.future_issuer(st, *peer, uses)) {
                                Some(u) => {
                                    let theirs = self.connect_needs(st, u as usize).find_map(|p| p.get(&(*comm, *peer, *mine)).cloned());
                                    let nonmirrored = theirs.as_ref().is_some_and(|x| x != dirs);
                                    let why = match &theirs {
                                        Some(x) if nonmirrored => {
                                            format!("; r{peer} is setting up {} instead: first contact is not mirrored", self.dirs_text(x))
                                        }
                                        _ => String::new(),
                                    };
                                    let text = format!("{me}, which waits for r{peer} to set up {} too (N7){why}", self.dirs_text(dirs));
                                    edge(Node::Thread(u), Reason::Connect { nonmirrored, collective }, text);
                                }
                                None => edge(
                                    self.never(*peer),
                                    Reason::Connect { nonmirrored: false, collective },
                                    format!("{me}; r{peer} never uses that connection on {}", self.comm_name(*comm)),
                                ),
                            }
                        }
                    }
                }
            }
            Node::Item(k) => {
                let item = st.item(k);
                let me = self.item_label(st, k);
                match item.status {
                    ItemStatus::Done => {}
                    ItemStatus::Pending => {
                        for s in &item.streams {
                            let (q, head) = &st.streams.queues[self.stream_index(*s)];
                            let h = q[*head as usize];
                            if h != k {
                                let text = format!("{me} is queued behind {} (S1: one stream runs in issue order)", self.item_label(st, h));
                                edge(Node::Item(h), Reason::StreamOrder, text);
                            }
                        }
                        for (d, ordering) in item.deps.iter().map(|d| (d, true)).chain(item.waits.iter().map(|d| (d, false))) {
                            if st.item_done(*d) {
                                continue;
                            }
                            let (reason, why) = match (&item.kind, &st.item(*d).kind) {
                                (ItemKind::WaitMarker, _) => (Reason::EventWait, "S3: stream wait on the event's record"),
                                (ItemKind::Launch { .. }, ItemKind::Launch { .. })
                                    if ordering && self.profile.launch_blocking && d.thread == k.thread && d.op == k.op =>
                                {
                                    (
                                        Reason::LaunchBlocking,
                                        "S7: with CUDA_LAUNCH_BLOCKING=1 NCCL launches a group's kernels one after another, \
                                         each launch returning once its kernel has ended (NVIDIA/nccl PR 774)",
                                    )
                                }
                                (ItemKind::Launch { comm: a, .. }, ItemKind::Launch { comm: b, .. }) if a == b && (!ordering || self.profile.serialize_per_comm) => {
                                    (Reason::CommSerialized, "N5: launches on one communicator are serialized")
                                }
                                _ => (Reason::LegacyStream, "S2: legacy default stream synchronization"),
                            };
                            edge(Node::Item(*d), reason, format!("{me} must wait for {} to end ({why})", self.item_label(st, *d)));
                        }
                        if starved {
                            // From the heads of the device's streams, not every item: O(streams) per pending item (a
                            // stuck 256 x 64 pipeline, every item issued, took 9 s in a scan of all items). In key
                            // order, as the scan was.
                            let mut spinning: Vec<ItemKey> = self.spinning_launches(st, item.rank()).collect();
                            spinning.sort_unstable();
                            spinning.dedup();
                            for rk in spinning {
                                let text = format!(
                                    "{me} may not start while {} spins on the same device (S1: no guaranteed independent progress)",
                                    self.item_label(st, rk)
                                );
                                edge(Node::Item(rk), Reason::Starved, text);
                            }
                        }
                    }
                    ItemStatus::Running => self.launch_edges(st, k, &mut edge),
                }
            }
        }
        out
    }

    fn launch_edges(&self, st: &State, k: ItemKey, edge: &mut impl FnMut(Node, Reason, String)) {
        let item = st.item(k);
        let ItemKind::Launch { comm, ops, .. } = &item.kind else { return };
        let rank = item.rank();
        let me = self.item_label(st, k);
        let (possible, guaranteed) = (self.profile.eager_bytes_per_connection, self.profile.eager_guaranteed());
        // An op of a later kernel plan waits for its own launch's earlier plan (N14): the ops of that plan say why.
        let front = nccl::front_plan(ops).unwrap_or(0);
        for op in ops.iter().filter(|o| o.status == CommOpStatus::Pending && o.plan == front) {
            let used = match op.kind {
                CommOpKind::Send { peer, .. } => st.nccl.eager_used.get(&(*comm, rank, peer)).copied().unwrap_or(0),
                _ => 0,
            };
            let rendezvous = if possible == 0 {
                "rendezvous".to_string()
            } else if op.bytes > possible {
                format!("larger than the whole {} eager window: rendezvous", crate::describe::bytes(possible))
            } else if used.saturating_add(op.bytes) > possible {
                format!("larger than the {} eager window left", crate::describe::bytes(possible.saturating_sub(used)))
            } else if guaranteed == 0 {
                "no recv running, and no eager buffering is guaranteed: the send may wait for its recv".to_string()
            } else {
                format!(
                    "no recv running, and the send is not guaranteed to fit the eager window left: {} guaranteed, up to {} possible",
                    crate::describe::bytes(guaranteed),
                    crate::describe::bytes(possible)
                )
            };
            let (r, _) = self.thread_of[op.loc.thread as usize];
            let what = format!("#{} {}", op.loc.op, self.program.op_label(r, &self.op(op.loc).kind));
            // "r0 s0: #0 send(...)" for a launch of one op; "r0 s0: group ... [..]: #3 send(...)" inside a group.
            let lead = if ops.len() == 1 { me.clone() } else { format!("{me}: {what}") };
            let (peer, other_key, is_send) = match op.kind {
                CommOpKind::Send { peer, seq } => (peer, P2pKey { comm: *comm, src: rank, dst: peer, seq, recv: true }, true),
                CommOpKind::Recv { peer, seq } => (peer, P2pKey { comm: *comm, src: peer, dst: rank, seq, recv: false }, false),
                CommOpKind::Collective { seq } => {
                    let parts = st.nccl.coll.get(&(*comm, seq));
                    // A gather's or scatter's non-root part waits only for the root's (C1).
                    let kind = match self.info(op.loc).nccl {
                        Some(crate::op_info::NcclRole::Collective { kind }) => Some(kind),
                        _ => None,
                    };
                    let needs = |m: RankId| kind.is_none_or(|k| k.needs_all(rank) || k.root() == Some(m));
                    for m in self.program.comms[comm.0 as usize].members.iter().filter(|m| needs(**m)) {
                        match parts.and_then(|p| p.get(m)) {
                            Some((pk, _)) if *pk == k => {}
                            Some((pk, _)) => {
                                if st.item(*pk).status != ItemStatus::Running {
                                    let text = format!("{lead} waits for r{m}'s part {} to run (C1)", self.item_label(st, *pk));
                                    edge(Node::Item(*pk), Reason::CollectiveMember, text);
                                }
                            }
                            None => {
                                let is_coll = |x: &OpKind| matches!(x, OpKind::Collective { comm: c, .. } if c == comm);
                                match self.future_issuer(st, *m, is_coll) {
                                    Some(u) => edge(Node::Thread(u), Reason::CollectiveMember, format!("{lead} waits for r{m} to issue its part (C1)")),
                                    None => edge(self.never(*m), Reason::CollectiveMember, format!("{lead}: r{m} never issues its part (C1)")),
                                }
                            }
                        }
                    }
                    continue;
                }
            };
            let verb = if is_send { "recv" } else { "send" };
            match st.nccl.p2p.get(&other_key) {
                Some(&(ok, oi)) => {
                    let oitem = st.item(ok);
                    let ItemKind::Launch { ops: oops, .. } = &oitem.kind else { continue };
                    let oop = &oops[oi as usize];
                    let (or, _) = self.thread_of[oop.loc.thread as usize];
                    let owhat = if oops.len() == 1 {
                        self.item_label(st, ok)
                    } else {
                        format!("r{} #{} {} (in {})", oitem.rank(), oop.loc.op, self.program.op_label(or, &self.op(oop.loc).kind), self.item_label(st, ok))
                    };
                    let (reason, why) = if is_send {
                        (Reason::Rendezvous { bytes: op.bytes, guaranteed_bytes: guaranteed, possible_bytes: possible }, format!("({rendezvous}; N2)"))
                    } else {
                        (Reason::RecvWaitsSend, "(N2)".to_string())
                    };
                    if oitem.status != ItemStatus::Running {
                        edge(Node::Item(ok), reason, format!("{lead} waits for {owhat} to run {why}"));
                    } else if let Some(front) = nccl::front_plan(oops).filter(|f| *f < oop.plan) {
                        // Running but held back by an unfinished earlier kernel plan of its group (N14): name the
                        // calls that keep the earlier plan open.
                        let (or2, _) = self.thread_of[oop.loc.thread as usize];
                        let holders: Vec<String> = oops
                            .iter()
                            .filter(|o| o.plan == front && o.status == CommOpStatus::Pending)
                            .take(3)
                            .map(|o| format!("#{} {}", o.loc.op, self.program.op_label(or2, &self.op(o.loc).kind)))
                            .collect();
                        let text = format!(
                            "{lead} waits for {owhat}, which NCCL put in kernel plan {} of its group; that plan starts only \
                             when plan {} ends, and plan {} still waits for {} (N14)",
                            oop.plan + 1,
                            front + 1,
                            front + 1,
                            holders.join(", ")
                        );
                        edge(Node::Item(ok), Reason::EarlierPlan, text);
                    } else {
                        // Running but held back by an earlier op to the same peer in its launch (N4).
                        edge(Node::Item(ok), Reason::SamePeerOrder, format!("{lead} waits for {owhat}, which is behind an earlier op to the same peer (N4)"));
                    }
                }
                None => {
                    let matches = |x: &OpKind| match x {
                        OpKind::Recv { comm: c, peer: p, .. } if is_send => c == comm && *p == rank,
                        OpKind::Send { comm: c, peer: p, .. } if !is_send => c == comm && *p == rank,
                        _ => false,
                    };
                    match self.future_issuer(st, peer, matches) {
                        Some(u) => edge(Node::Thread(u), Reason::Unmatched, format!("{lead} waits for r{peer} to issue the matching {verb} (N3)")),
                        None => edge(self.never(peer), Reason::Unmatched, format!("{lead} has no matching {verb}: r{peer} never issues one (N3)")),
                    }
                }
            }
        }
    }

    /// Explains a stuck state: builds the wait-for graph from the blocked threads and unfinished items and returns
    /// the first cycle found (in a fixed order), or the longest chain ending in something that never happens.
    /// `starved` says the state is stuck only because the platform withheld what it may withhold (S1 item starts,
    /// eager deliveries beyond the guaranteed window).
    pub fn explain(&self, st: &State, starved: bool) -> Stuck {
        let blocked: Vec<String> = (0..st.host.threads.len() as u32).map(|t| self.thread_position(st, t)).collect();
        let mut roots: Vec<Node> = (0..st.host.threads.len() as u32)
            .filter(|t| !self.thread_finished(st, *t))
            .map(Node::Thread)
            .collect();
        roots.extend(st.streams.items.iter().filter(|(_, i)| i.status != ItemStatus::Done).map(|(k, _)| Node::Item(*k)));
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
