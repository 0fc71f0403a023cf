//! Lazy connection set-up (N7): connections are set up per communicator and direction at the first launch that
//! needs them (P2P; since NCCL 2.22 collectives too, at their first use), and the set-up blocks the host until the
//! peer's host sets up the mirrored directions on the same communicator. Non-mirrored first contact is a profile
//! parameter (hang, or undefined).

use std::collections::{BTreeMap, BTreeSet};

use super::super::*;
use crate::op_info::NcclRole;
use crate::profile::{CollectiveConnect, ConnectChoice, NonMirrored};

/// "r0->r1 on world, r1->r0 on world" for a set of connection directions.
pub fn dirs_label_with(d: &BTreeSet<Dir>, comm_name: impl Fn(CommId) -> String) -> String {
    d.iter()
        .map(|(c, a, b, coll)| {
            let what = if *coll { " (collective)" } else { "" };
            format!("r{a}->r{b} on {}{what}", comm_name(*c))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// "r0->r1, r1->r0" for a set of connection directions (without communicator names).
pub fn dirs_label(d: &BTreeSet<Dir>) -> String {
    d.iter().map(|(_, a, b, _)| format!("r{a}->r{b}")).collect::<Vec<_>>().join(", ")
}

impl<'p> Semantics<'p> {
    /// "r0->r1 on world" with the program's communicator names.
    pub fn dirs_text(&self, d: &BTreeSet<Dir>) -> String {
        dirs_label_with(d, |c| self.comm_name(c).to_string())
    }

    /// The connection directions the launch of `ops` of thread `t` needs and that are not set up yet, per
    /// (communicator, acting rank, peer) (N7), and apart from them the directions the group mirrors itself (one
    /// thread driving both ends: set up at once, without blocking).
    pub(crate) fn new_connections(&self, st: &State, t: ThreadId, ops: &[u32]) -> (BTreeMap<(CommId, RankId, RankId), BTreeSet<Dir>>, BTreeSet<Dir>) {
        self.new_connections_as(st, t, ops, self.coll_lazy(st).unwrap_or(true))
    }

    /// [`Self::new_connections`] with collectives connecting lazily (`coll_lazy`) or not, whatever the platform
    /// chose: P2P directions only when the profile sets P2P connections up lazily, collective directions only when
    /// `coll_lazy`.
    pub(crate) fn new_connections_as(
        &self,
        st: &State,
        t: ThreadId,
        ops: &[u32],
        coll_lazy: bool,
    ) -> (BTreeMap<(CommId, RankId, RankId), BTreeSet<Dir>>, BTreeSet<Dir>) {
        let p2p_lazy = self.profile.lazy_connect;
        let mut need: BTreeMap<(CommId, RankId, RankId), BTreeSet<Dir>> = BTreeMap::new();
        for &i in ops {
            let loc = OpLoc { thread: t, op: i };
            let info = self.info(loc);
            let (Some(comm), Some(role)) = (info.comm, info.nccl) else { continue };
            let me = self.acting_rank(loc);
            let mut add = |peer: RankId, d: Dir| {
                if (if d.3 { coll_lazy } else { p2p_lazy }) && !st.nccl.connected.contains(&d) {
                    need.entry((comm, me, peer)).or_default().insert(d);
                }
            };
            match role {
                NcclRole::Send { peer } => add(peer, (comm, me, peer, false)),
                NcclRole::Recv { peer } => add(peer, (comm, peer, me, false)),
                // NCCL >= 2.28 translates all-to-all, gather and scatter into point-to-point tasks (NVIDIA/nccl
                // design note "NCCL alltoall/gather/scatter api"): they set up P2P connections, and only the
                // directions their sends and recvs use.
                NcclRole::Collective { kind: kind @ (CollectiveKind::AllToAll | CollectiveKind::Gather { .. } | CollectiveKind::Scatter { .. }) } => {
                    for &m in &self.program.comms[comm.0 as usize].members {
                        if m == me {
                            continue;
                        }
                        match kind {
                            CollectiveKind::AllToAll => {
                                add(m, (comm, me, m, false));
                                add(m, (comm, m, me, false));
                            }
                            CollectiveKind::Gather { root } if me == root => add(m, (comm, m, me, false)),
                            CollectiveKind::Gather { root } if m == root => add(m, (comm, me, m, false)),
                            CollectiveKind::Scatter { root } if me == root => add(m, (comm, me, m, false)),
                            CollectiveKind::Scatter { root } if m == root => add(m, (comm, m, me, false)),
                            _ => {}
                        }
                    }
                }
                NcclRole::Collective { .. } => {
                    for &m in &self.program.comms[comm.0 as usize].members {
                        if m != me {
                            add(m, (comm, me, m, true));
                            add(m, (comm, m, me, true));
                        }
                    }
                }
                NcclRole::Init => {}
            }
        }
        let mirrored: Vec<(CommId, RankId, RankId)> =
            need.iter().filter(|((c, a, b), d)| need.get(&(*c, *b, *a)) == Some(d)).map(|(k, _)| *k).collect();
        let mut immediate = BTreeSet::new();
        for k in mirrored {
            immediate.extend(need.remove(&k).unwrap_or_default());
        }
        (need, immediate)
    }

    /// N7: whether collectives connect lazily at their first use in `st`: `Some` when the profile fixes it or the
    /// platform has chosen ([`NcclState::coll_connect`]), `None` while the profile leaves it to the platform
    /// (`CollectiveConnect::Either`) and no collective has needed connections yet.
    pub(crate) fn coll_lazy(&self, st: &State) -> Option<bool> {
        match self.profile.collective_connect() {
            CollectiveConnect::Init => Some(false),
            CollectiveConnect::Lazy => Some(true),
            CollectiveConnect::Either => st.nccl.coll_connect.map(|c| c == ConnectChoice::Lazy),
        }
    }

    /// N7: whether launching `ops` of thread `t` (an ungrouped call or the outermost group end) is where the
    /// platform chooses when collectives connect: the profile leaves it open, nothing has chosen yet, and a
    /// collective among `ops` would set up connections if they are made lazily. Such a step has the outcomes of
    /// both platforms ([`Self::connect_outcomes`]).
    pub fn connect_choice_pending(&self, st: &State, t: ThreadId, ops: &[u32]) -> bool {
        if !self.collectives || self.coll_lazy(st).is_some() {
            return false;
        }
        let coll = |i: &u32| {
            let info = self.info(OpLoc { thread: t, op: *i });
            matches!(info.nccl, Some(NcclRole::Collective { kind }) if !matches!(kind, CollectiveKind::AllToAll | CollectiveKind::Gather { .. } | CollectiveKind::Scatter { .. }))
        };
        if !ops.iter().any(coll) {
            return false;
        }
        let (need, immediate) = self.new_connections_as(st, t, ops, true);
        need.values().flatten().chain(&immediate).any(|d| d.3)
    }

    /// The ops the host step of thread `t` would launch now: the op at its pc when it is an ungrouped NCCL call,
    /// the group's ops at its outermost group end; empty otherwise (a blocked thread's return included).
    pub fn launch_ops(&self, st: &State, t: ThreadId) -> Vec<u32> {
        let th = &st.host.threads[t as usize];
        if th.wait.is_some() || self.thread_finished(st, t) {
            return vec![];
        }
        match &self.ops_of(t)[th.pc as usize].kind {
            OpKind::Send { .. } | OpKind::Recv { .. } | OpKind::Collective { .. } if th.group_depth == 0 => vec![th.pc],
            OpKind::GroupEnd if th.group_depth == 1 => th.group_ops.clone(),
            _ => vec![],
        }
    }

    /// Whether the host step of thread `t` is where the platform chooses when collectives connect (N7,
    /// [`Self::connect_choice_pending`]).
    pub fn chooses_connect(&self, st: &State, t: ThreadId) -> bool {
        self.collectives && self.coll_lazy(st).is_none() && self.connect_choice_pending(st, t, &self.launch_ops(st, t))
    }

    /// The number of outcomes of launching `ops` of thread `t` for a given kernel-plan order (N14): those of a call
    /// on non-blocking communicators (N12), and where the platform still chooses when collectives connect (N7), the
    /// outcomes with lazy connections (choices 0..n) followed by those with connections made at init.
    pub(crate) fn connect_outcomes(&self, st: &State, t: ThreadId, ops: &[u32]) -> u32 {
        if self.connect_choice_pending(st, t, ops) {
            self.nonblocking_outcomes_as(st, t, ops, true).unwrap_or(1) + self.nonblocking_outcomes_as(st, t, ops, false).unwrap_or(1)
        } else {
            self.nonblocking_outcomes(st, t, ops).unwrap_or(1)
        }
    }

    /// Applies the platform's choice that launching `ops` makes, if it makes one ([`Self::connect_outcomes`]), and
    /// returns what is left of `choice` for the launch itself.
    pub(crate) fn take_connect_choice(&self, st: &mut State, t: ThreadId, ops: &[u32], choice: u32) -> u32 {
        if !self.connect_choice_pending(st, t, ops) {
            return choice;
        }
        let lazy = self.nonblocking_outcomes_as(st, t, ops, true).unwrap_or(1);
        let (c, rest) = if choice < lazy { (ConnectChoice::Lazy, choice) } else { (ConnectChoice::Init, choice - lazy) };
        st.nccl.coll_connect = Some(c);
        rest
    }

    /// N7 (INFER): when the peer is already blocked setting up different directions with us on the same
    /// communicator, the first contact is not mirrored. Under `NonMirrored::Undefined` that is undefined; under
    /// `Hang` both hosts keep waiting.
    pub(crate) fn check_nonmirrored(&self, st: &mut State, t: ThreadId, need: &BTreeMap<(CommId, RankId, RankId), BTreeSet<Dir>>) {
        if self.profile.nonmirrored_first_contact != NonMirrored::Undefined {
            return;
        }
        for ((comm, me, peer), dirs) in need {
            // Only a thread with NCCL ops acting on `peer` can be setting up with us (ascending, as the threads are
            // numbered: the first mismatch reported is the same; scanning every thread made each set-up O(threads)).
            for &u in &self.nccl_threads_of[*peer as usize] {
                let u = u as usize;
                let th = &st.host.threads[u];
                let Some(theirs) = self.connect_needs(st, u).find_map(|p| p.get(&(*comm, *peer, *me))) else { continue };
                if theirs != dirs {
                    let at = vec![OpLoc { thread: t, op: st.host.threads[t as usize].pc }, OpLoc { thread: u as u32, op: th.pc }];
                    let msg = format!(
                        "first contact between r{me} and r{peer} on {} is not mirrored: {} sets up {}, while {} sets up {}",
                        self.comm_name(*comm),
                        self.op_label(at[0]),
                        self.dirs_text(dirs),
                        self.op_label(at[1]),
                        self.dirs_text(theirs)
                    );
                    self.set_undefined(st, Rule::N7, msg, at);
                    return;
                }
            }
        }
    }

    /// Every connection set-up thread `u` waits for: the one it is blocked in, and those of its calls in progress
    /// on non-blocking communicators, which set up in the background (N12).
    pub(crate) fn connect_needs<'s>(&self, st: &'s State, u: usize) -> impl Iterator<Item = &'s BTreeMap<(CommId, RankId, RankId), BTreeSet<Dir>>> + 's {
        let th = &st.host.threads[u];
        let blocked = match &th.wait {
            Some(Wait::Connect { need, .. }) => Some(need),
            _ => None,
        };
        blocked.into_iter().chain(th.background.iter().filter_map(|p| match &p.wait {
            Wait::Connect { need, .. } => Some(need),
            _ => None,
        }))
    }

    pub(crate) fn connect_steps(&self, st: &State, out: &mut Vec<Step>) {
        for a in 0..st.host.threads.len() {
            self.connect_steps_from(st, a, out);
        }
    }

    /// The connection set-ups thread `a` starts (each pair once: from the side with the lower (thread, rank)).
    pub(crate) fn connect_steps_from(&self, st: &State, a: usize, out: &mut Vec<Step>) {
        // Steps listed before this call are another thread's or not set-ups; within one need map the (communicator,
        // pair, peer thread) are distinct. Only a thread with a second map (a call in progress in the background,
        // N12) can list a set-up twice: only then is it looked for (a collective's first use lists every other
        // member, and looking for each one made listing a rank's set-ups quadratic; issue 9).
        let start = out.len();
        let maps = self.connect_needs(st, a).count();
        for pa in self.connect_needs(st, a) {
            for ((comm, ra, rb), need_a) in pa {
                // Only a thread with NCCL ops acting on `rb` can wait for this set-up (ascending, as the steps are
                // listed).
                for &b in &self.nccl_threads_of[*rb as usize] {
                    let b = b as usize;
                    if b == a || (b, *rb) < (a, *ra) {
                        continue;
                    }
                    if self.connect_needs(st, b).any(|pb| pb.get(&(*comm, *rb, *ra)) == Some(need_a)) {
                        let s = Step::Connect { a: a as u32, b: b as u32, comm: *comm, ra: *ra, rb: *rb };
                        if maps == 1 || !out[start..].contains(&s) {
                            out.push(s);
                        }
                    }
                }
            }
        }
    }

    /// N7: two hosts set up mirrored connections. The set-up orders nothing that a program may rely on (a host may
    /// find the connection already there), so the hosts' clocks are not joined.
    pub(crate) fn connect(&self, st: &mut State, a: ThreadId, b: ThreadId, comm: CommId, ra: RankId, rb: RankId) {
        for (t, key) in [(a, (comm, ra, rb)), (b, (comm, rb, ra))] {
            let th = &mut st.host.threads[t as usize];
            let bg = th.background.iter_mut().map(|p| &mut p.wait);
            for w in th.wait.iter_mut().chain(bg) {
                if let Wait::Connect { need: p, .. } = w {
                    if let Some(dirs) = p.remove(&key) {
                        st.nccl.connected.extend(dirs);
                        break;
                    }
                }
            }
            th.clock.tick(t as usize);
        }
    }
}
