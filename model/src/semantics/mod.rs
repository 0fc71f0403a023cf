//! The operational semantics: a state, the steps enabled in it, and what each step does (MODEL.md; ARCHITECTURE.md
//! "Semantics"). Every rule of `docs/semantics.md` is implemented in the module of its family and cites its id where
//! it acts; this module only holds the program tables and dispatches.
//!
//! Agents: host threads run their ops in order (one *host step* each; a blocking op is an *issue* step followed by an
//! *unblock* step once its condition holds). Streams hold FIFO queues of *items* (kernels, copies, event markers,
//! wait markers, NCCL *launches*). Finite items run atomically in one step (their start and end differ only in the
//! vector clock); an NCCL launch *starts* in one step, spins while its send/recv/collective ops progress through
//! *transfer* steps, and ends when its last op completes.
//!
//! Families (each owns a sub-state of [`State`] and a module): `host` (program counters, blocking, barriers, S4
//! answers), `streams` (S1-S5: queues, legacy-stream edges, events, item start/end), `memory` (accesses, races),
//! `allocator` (P4), `nccl` (N1-N11, C1: groups, launches, P2P, collectives, connections, init, thread safety),
//! `reduction` (which steps commute), `explain` (the wait-for graph of a stuck state).

mod allocator;
pub mod explain;
mod forget;
mod host;
pub mod ids;
pub mod incremental;
pub mod item_map;
mod memory;
mod nccl;
pub mod reduction;
pub mod state;
mod streams;

pub use explain::{Node, Reason, Stuck, WaitEdge};
pub use nccl::{cut_plans, dirs_label, dirs_label_with, p2p_schedule_deltas, P2pCall};
pub use ids::*;
pub use state::*;

use crate::clock::VClock;
use crate::op_info::OpInfo;
use crate::profile::Profile;
use crate::program::*;
use crate::rule::Rule;
use smallvec::smallvec;

/// The program and profile, with the tables the steps need. Immutable while exploring.
pub struct Semantics<'p> {
    pub program: &'p Program,
    pub profile: &'p Profile,
    /// Global thread id -> (rank, thread index in rank).
    pub thread_of: Vec<(RankId, u32)>,
    /// First global thread id of each rank.
    pub thread_base: Vec<u32>,
    /// First global stream index of each rank.
    pub stream_base: Vec<u32>,
    /// Number of agents (schedulers' and DPOR's unit: PCT priorities, happens-before of steps): every host thread,
    /// then every stream.
    pub agents: usize,
    /// Number of vector-clock components: every host thread, then every stream that can run work (one that some op
    /// enqueues on). A stream nothing runs on never ticks, so it takes no component: a pipeline's legacy and
    /// per-thread default streams would be 2 of every rank's 5, in every clock and every join (issue 9, scale).
    pub components: usize,
    /// Per global stream index: its clock component ([`Semantics::stream_component`]); `u32::MAX` for a stream
    /// nothing runs on.
    component_of_stream: Vec<u32>,
    /// Per global thread, per op: what the op touches ([`OpKind::info`]).
    infos: Vec<Vec<OpInfo>>,
    /// Partial-order reduction tables (`reduction.rs`).
    reduction: reduction::Tables,
    /// What each thread may still do that touches memory (`forget.rs`).
    future: Vec<forget::ThreadFuture>,
    /// Per global stream: how many threads ever enqueue work on it (`forget.rs`).
    future_issuers: Vec<usize>,
    /// Per global stream: the ranks whose memory its items may touch, ascending (`forget.rs`).
    stream_ranks: Vec<Vec<RankId>>,
    /// The ops a value assertion names as its writer (V1): their write ends are kept in `MemoryState::write_ends`.
    expected_writers: std::collections::BTreeSet<OpLoc>,
    /// The recvs a value assertion with a sending buffer names as its writer (V1, N3): the send each one matched is
    /// kept in `MemoryState::recv_sources`.
    sourced_recvs: std::collections::BTreeSet<OpLoc>,
    /// Per rank, ascending: the threads with an NCCL op acting on that rank (the only ones that can wait for a
    /// connection set-up there; N7).
    nccl_threads_of: Vec<Vec<ThreadId>>,
    /// Whether some communicator has a host watchdog (N9).
    watched: bool,
    /// Whether some communicator is non-blocking (N12): when none is, a group end has one outcome and defers
    /// nothing, which `host_choices` answers without looking at the group's communicators.
    nonblocking: bool,
    /// Whether some op is a collective: engines skip the collective shortcuts of `incremental.rs` otherwise (they
    /// are asked for every step of a timed run; issue 9).
    pub(crate) collectives: bool,
    /// N14: the outermost group ends, as (thread, op), whose calls the two kernel-plan orders cut differently, when
    /// the profile leaves the order to the platform (empty otherwise): the static part of
    /// [`Self::plan_choice_pending`], found once ([`Self::plan_choice_sites`]) instead of cutting a group of
    /// hundreds of calls twice for every question about its group end.
    plan_sites: std::collections::BTreeSet<(ThreadId, u32)>,
}

impl<'p> Semantics<'p> {
    /// Prepares the tables for a validated program.
    pub fn new(program: &'p Program, profile: &'p Profile) -> Semantics<'p> {
        let mut thread_of = vec![];
        let mut thread_base = vec![];
        let mut stream_base = vec![];
        let mut streams = 0u32;
        for (r, rank) in program.ranks.iter().enumerate() {
            thread_base.push(thread_of.len() as u32);
            stream_base.push(streams);
            streams += rank.streams.len() as u32;
            for t in 0..rank.threads.len() {
                thread_of.push((r as RankId, t as u32));
            }
        }
        let agents = thread_of.len() + streams as usize;
        let mut infos: Vec<Vec<OpInfo>> = thread_of
            .iter()
            .map(|(r, t)| program.ranks[*r as usize].threads[*t as usize].ops.iter().map(|o| o.kind.info(program, *r)).collect())
            .collect();
        // Clock components: threads first, then the streams some op enqueues on, in stream order.
        let mut runs_work = vec![false; streams as usize];
        for s in infos.iter().flatten().filter_map(|i| i.stream) {
            runs_work[(stream_base[s.rank as usize] + s.index) as usize] = true;
        }
        let mut components = thread_of.len();
        let component_of_stream: Vec<u32> = runs_work
            .iter()
            .map(|&runs| {
                if !runs {
                    return u32::MAX;
                }
                components += 1;
                (components - 1) as u32
            })
            .collect();
        if profile.launch_queue_depth.is_some() {
            // S6: with a bounded queue, whether an enqueue blocks depends on how far the device has got: the call
            // observes its device (partial-order reduction then orders it against the device's item steps).
            for ((r, t), info) in thread_of.iter().zip(infos.iter_mut()) {
                for (op, i) in program.ranks[*r as usize].threads[*t as usize].ops.iter().zip(info.iter_mut()) {
                    if let Some(s) = i.stream {
                        i.observes = Some(s.rank);
                    } else if matches!(op.kind, OpKind::GroupEnd) {
                        i.observes = Some(*r);
                    }
                }
            }
        }
        // Where each op takes effect, per thread: read by the reduction tables and by forgetting (made once).
        let points: Vec<Vec<u32>> = thread_of
            .iter()
            .zip(&infos)
            .map(|((r, t), info)| reduction::effect_points(&program.ranks[*r as usize].threads[*t as usize].ops, info, program))
            .collect();
        let reduction = reduction::Tables::new(program, &infos, &points, &stream_base);
        let future = thread_of
            .iter()
            .zip(&infos)
            .zip(&points)
            .map(|(((r, t), info), at)| forget::ThreadFuture::new(&program.ranks[*r as usize].threads[*t as usize].ops, info, at, |s| (stream_base[s.rank as usize] + s.index) as usize))
            .collect::<Vec<forget::ThreadFuture>>();
        let mut future_issuers = vec![0; streams as usize];
        for f in &future {
            for (s, _) in &f.last_on_stream {
                future_issuers[*s] += 1;
            }
        }
        let mut expected_writers = std::collections::BTreeSet::new();
        let mut sourced_recvs = std::collections::BTreeSet::new();
        for (t, (r, ti)) in thread_of.iter().enumerate() {
            for op in &program.ranks[*r as usize].threads[*ti as usize].ops {
                if let OpKind::Expect { writer, sent_from, .. } = op.kind {
                    expected_writers.insert(OpLoc { thread: t as ThreadId, op: writer });
                    if sent_from.is_some() {
                        sourced_recvs.insert(OpLoc { thread: t as ThreadId, op: writer });
                    }
                }
            }
        }
        let mut stream_ranks: Vec<Vec<RankId>> = vec![vec![]; streams as usize];
        for info in infos.iter().flatten() {
            if let Some(s) = info.stream {
                let ranks = info.accesses.iter().map(|a| a.range.buf.rank);
                stream_ranks[(stream_base[s.rank as usize] + s.index) as usize].extend(ranks);
            }
        }
        for r in &mut stream_ranks {
            r.sort_unstable();
            r.dedup();
        }
        let mut nccl_threads_of: Vec<Vec<ThreadId>> = vec![vec![]; program.ranks.len()];
        for (t, info) in infos.iter().enumerate() {
            let nccl = info.iter().filter(|i| i.comm.is_some());
            let mut ranks: Vec<RankId> = nccl.filter_map(|i| i.acting_rank).collect();
            ranks.sort_unstable();
            ranks.dedup();
            for r in ranks {
                nccl_threads_of[r as usize].push(t as ThreadId);
            }
        }
        let mut sem = Semantics {
            plan_sites: Default::default(),
            watched: program.comms.iter().any(|c| c.watchdog_ns.is_some()),
            nonblocking: program.comms.iter().any(|c| c.nonblocking),
            collectives: infos.iter().flatten().any(|i| matches!(i.nccl, Some(crate::op_info::NcclRole::Collective { .. }))),
            nccl_threads_of,
            stream_ranks,
            program,
            profile,
            thread_of,
            thread_base,
            stream_base,
            agents,
            components,
            component_of_stream,
            infos,
            reduction,
            future,
            future_issuers,
            expected_writers,
            sourced_recvs,
        };
        sem.plan_sites = sem.plan_choice_sites();
        sem
    }

    /// The initial state: every thread at its first op, every queue empty, every clock zero.
    pub fn initial(&self) -> State {
        let nstreams = self.agents - self.thread_of.len();
        // One zero clock shared by every thread and stream (a clone shares the base): a clock per thread was
        // threads x agents components, 335 MB for a 4,096-rank pipeline before its first step (issue 9, scale).
        let zero = VClock::new(self.components);
        State {
            host: HostState {
                threads: (0..self.thread_of.len())
                    .map(|_| ThreadState {
                        pc: 0,
                        wait: None,
                        clock: zero.clone(),
                        group_depth: 0,
                        group_ops: vec![],
                        answers: vec![],
                        background: vec![],
                    })
                    .collect(),
                barrier_arrived: Default::default(),
                barrier_rounds: Default::default(),
                loaded_modules: Default::default(),
            },
            streams: StreamState {
                queues: vec![(vec![], 0); nstreams],
                stream_clock: vec![zero.clone(); nstreams],
                items: Default::default(),
                event_binding: Default::default(),
            },
            nccl: NcclState {
                comm_tail: Default::default(),
                p2p: Default::default(),
                p2p_next: Default::default(),
                coll: Default::default(),
                coll_next: Default::default(),
                eager_used: Default::default(),
                connected: Default::default(),
                init_arrived: Default::default(),
                issuer: Default::default(),
                finalize_arrived: Default::default(),
                ended: Default::default(),
                timeouts: Default::default(),
                aborted_ops: Default::default(),
                coll_connect: None,
                plan_order: None,
            },
            memory: MemoryState {
                accesses: Default::default(),
                races: Default::default(),
                write_ends: Default::default(),
                recv_sources: Default::default(),
                stale: Default::default(),
            },
            pool: PoolState {
                allocated: Default::default(),
                free: vec![],
                alloc_count: Default::default(),
                device_freed: Default::default(),
            },
            undefined: None,
        }
    }

    // ----- small lookups -------------------------------------------------------------------------------------------

    /// Global index of a stream (its vector-clock agent is `threads + index`).
    pub fn stream_index(&self, s: StreamRef) -> usize {
        (self.stream_base[s.rank as usize] + s.index) as usize
    }

    /// The agent of a stream (PCT, DPOR; not a clock component: [`Semantics::stream_component`]).
    pub fn stream_agent(&self, s: StreamRef) -> usize {
        self.thread_of.len() + self.stream_index(s)
    }

    /// The vector-clock component of a stream that runs work ([`Semantics::components`]). Panics for a stream no op
    /// enqueues on (a caller bug: only streams with items tick or are read).
    pub fn stream_component(&self, s: StreamRef) -> usize {
        let c = self.component_of_stream[self.stream_index(s)];
        assert!(c != u32::MAX, "stream {s:?} runs no work and has no clock component");
        c as usize
    }

    /// Global thread id of (rank, thread index).
    pub fn thread_id(&self, rank: RankId, thread: u32) -> ThreadId {
        self.thread_base[rank as usize] + thread
    }

    /// Rank (process) of a global thread.
    pub fn rank_of(&self, t: ThreadId) -> RankId {
        self.thread_of[t as usize].0
    }

    /// The op at a location.
    pub fn op(&self, loc: OpLoc) -> &'p Op {
        let (r, t) = self.thread_of[loc.thread as usize];
        &self.program.ranks[r as usize].threads[t as usize].ops[loc.op as usize]
    }

    /// What the op at a location touches.
    pub fn info(&self, loc: OpLoc) -> &OpInfo {
        &self.infos[loc.thread as usize][loc.op as usize]
    }

    /// The device an op acts on: its stream's rank for stream-ordered and NCCL ops, else the calling thread's rank
    /// (docs/program-format.md, "acting rank").
    pub fn acting_rank(&self, loc: OpLoc) -> RankId {
        self.info(loc).acting_rank.unwrap_or_else(|| self.rank_of(loc.thread))
    }

    /// Number of ops of a thread.
    pub fn ops_len(&self, t: ThreadId) -> usize {
        self.ops_of(t).len()
    }

    pub(crate) fn ops_of(&self, t: ThreadId) -> &'p [Op] {
        let (r, ti) = self.thread_of[t as usize];
        &self.program.ranks[r as usize].threads[ti as usize].ops
    }

    /// "r0 main #3 send(...)" for an op location.
    pub fn op_label(&self, loc: OpLoc) -> String {
        let (r, t) = self.thread_of[loc.thread as usize];
        self.program.op_full_label(r, t, loc.op)
    }

    /// "r0 main" for a thread.
    pub fn thread_label(&self, t: ThreadId) -> String {
        let (r, ti) = self.thread_of[t as usize];
        self.program.thread_label(r, ti)
    }

    /// The name of a communicator.
    pub fn comm_name(&self, c: CommId) -> &'p str {
        &self.program.comms[c.0 as usize].name
    }

    /// The global ids of a rank's host threads.
    pub fn rank_threads(&self, rank: RankId) -> std::ops::Range<ThreadId> {
        let t0 = self.thread_base[rank as usize];
        t0..self.thread_base.get(rank as usize + 1).copied().unwrap_or(self.thread_of.len() as u32)
    }

    /// All streams of a rank.
    pub(crate) fn rank_streams(&self, rank: RankId) -> impl Iterator<Item = StreamRef> + '_ {
        (0..self.program.ranks[rank as usize].streams.len() as u32).map(move |index| StreamRef { rank, index })
    }

    /// Whether the thread has run all its ops.
    pub fn thread_finished(&self, st: &State, t: ThreadId) -> bool {
        st.host.threads[t as usize].pc as usize >= self.ops_of(t).len()
    }

    /// Whether every thread has finished and every item has ended.
    pub fn is_complete(&self, st: &State) -> bool {
        (0..st.host.threads.len() as u32).all(|t| self.thread_finished(st, t))
            && st.streams.items.values().all(|i| i.status == ItemStatus::Done)
    }

    pub(crate) fn set_undefined(&self, st: &mut State, rule: Rule, message: String, at: Vec<OpLoc>) {
        if st.undefined.is_none() {
            st.undefined = Some(Undefined { rule, message, at });
        }
    }

    // ----- enabled steps and their effects -------------------------------------------------------------------------

    /// Every step enabled in `st`, in a fixed order. Empty when the execution has ended (complete, deadlocked or
    /// undefined).
    pub fn enabled(&self, st: &State) -> Vec<Step> {
        let mut out = vec![];
        if st.undefined.is_some() {
            return out;
        }
        for t in 0..st.host.threads.len() as u32 {
            for choice in 0..self.host_choices(st, t) {
                out.push(Step::Host { thread: t, choice });
            }
        }
        // The queue heads, computed once: both item and communication steps start from them.
        let heads = self.queue_heads(st);
        self.item_steps(st, &heads, &mut out);
        self.comm_steps(st, &heads, &mut out);
        self.connect_steps(st, &mut out);
        self.watchdog_steps(st, &mut out);
        out
    }

    /// Applies an enabled step and says what it did. The step must come from [`Semantics::enabled`] on the same
    /// state.
    pub fn apply(&self, st: &mut State, step: &Step) -> Effects {
        let mut fx = Effects::default();
        let races_before = st.memory.races.len();
        match step {
            Step::Host { thread, choice } => self.host_step(st, *thread, *choice, &mut fx),
            Step::Item(k) => self.start_item(st, *k, &mut fx),
            Step::Transfer { send, recv } => self.transfer(st, *send, *recv, &mut fx),
            Step::Eager { send } => self.eager(st, *send, &mut fx),
            Step::Drain { recv } => self.drain(st, *recv, &mut fx),
            Step::Collective { comm, seq } => self.collective(st, *comm, *seq, &mut fx),
            Step::RootEarly { comm, seq } => self.root_early(st, *comm, *seq, &mut fx),
            Step::Connect { a, b, comm, ra, rb } => self.connect(st, *a, *b, *comm, *ra, *rb),
            Step::Watchdog { rank } => self.watchdog(st, *rank, &mut fx),
        }
        fx.races = st.memory.races.len() - races_before;
        fx.undefined = st.undefined.as_ref().map(|u| u.rule);
        fx
    }
}
