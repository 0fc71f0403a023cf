//! Forgetting (issue 8, "state that forgets"): drops from a state what no future step can read, so that the state
//! of a long program stays as large as its in-flight work, not its history, and so that states which differ only in
//! forgotten history merge in the explorer. What is dropped, and why nothing later can need it:
//!
//! - **Ended items nothing refers to.** An item is kept while it has not ended, or while a kept structure names it:
//!   a stream queue (only the last ended item of each stream is kept: later legacy-stream dependencies join its end,
//!   S2), an event's binding (S3), a dependency or wait of an item that has not ended, a host thread's wait (S4,
//!   S5), the last launch of a communicator on a device (N5), a P2P or collective table entry, a pool block's
//!   `record_stream` hold (P4).
//! - **Matching-table entries of finished pairs.** A send and its recv that are both done, and a collective whose
//!   every member's part is done, are never matched again (N3, C1: sequence numbers come from the counters).
//! - **Barrier rounds** every participant has arrived at and no thread still waits in.
//! - **Memory accesses ordered before every future access** (FastTrack's observation, Flanagan & Freund, PLDI 2009:
//!   an access that happens before every agent's current time can never race with a later one). Every future access
//!   starts at a clock at least one of these lower bounds: the clock of each unfinished host thread (host accesses,
//!   and items it will issue join its clock at issue), and for each item that has not ended, the join of its issue
//!   clock, its streams' clocks and its ended dependencies' ends (its start joins them all; S2, S3). An ended access
//!   whose end happens before the pointwise minimum of those bounds is dropped: it is ordered before anything that
//!   can still touch memory, so it can never be one side of a race. Races already found are kept.
//!
//! The explorer forgets after every step (`Limits::forget`); conformance checking and `run` keep everything (they
//! read the whole history). `tests/reduction.rs` checks that forgetting changes no verdict.

use std::collections::BTreeSet;

use crate::clock::VClock;

use super::*;

impl<'p> Semantics<'p> {
    /// Drops from `st` everything no future step can read (module docs). Verdicts, enabled steps and every later
    /// state's observable behaviour are unchanged; only history is lost, so call it only where no one reads history.
    pub fn forget(&self, st: &mut State) {
        if st.undefined.is_some() {
            return;
        }
        self.forget_matching(st);
        self.forget_barrier_rounds(st);
        // Queues: drop ended items, keeping each stream's last item (its end is joined by later legacy-stream deps).
        for (q, head) in &mut st.streams.queues {
            let drop = (*head as usize).min(q.len().saturating_sub(1));
            if drop > 0 {
                q.drain(..drop);
                *head -= drop as u32;
            }
        }
        self.forget_items(st);
        self.forget_accesses(st);
    }

    /// N3, C1: table entries of P2P pairs and collectives whose every part is done. A send that finished eagerly
    /// stays `Buffered` after its recv drained the buffer (N2): once the recv is done, the pair is finished too.
    fn forget_matching(&self, st: &mut State) {
        let done = |st: &State, at: (ItemKey, u32)| st.comm_op(at).1.status == CommOpStatus::Done;
        let finished: Vec<P2pKey> = st
            .nccl
            .p2p
            .iter()
            .filter(|(k, at)| {
                let sent = st.comm_op(**at).1.status != CommOpStatus::Pending;
                !k.recv && sent && st.nccl.p2p.get(&k.other()).is_some_and(|r| done(st, *r))
            })
            .map(|(k, _)| *k)
            .collect();
        for k in finished {
            st.nccl.p2p.remove(&k);
            st.nccl.p2p.remove(&k.other());
        }
        let finished: Vec<(CommId, u32)> = st
            .nccl
            .coll
            .iter()
            .filter(|((comm, _), parts)| {
                parts.len() == self.program.comms[comm.0 as usize].members.len() && parts.values().all(|p| done(st, *p))
            })
            .map(|(k, _)| *k)
            .collect();
        for k in finished {
            st.nccl.coll.remove(&k);
        }
    }

    /// Barrier rounds that every participant reached and no thread still waits in.
    fn forget_barrier_rounds(&self, st: &mut State) {
        let waiting: BTreeSet<(u32, u32)> = st
            .host
            .threads
            .iter()
            .filter_map(|t| match t.wait {
                Some(Wait::Barrier { barrier, round }) => Some((barrier, round)),
                _ => None,
            })
            .collect();
        st.host.barrier_arrived.retain(|&(barrier, round), arrived| {
            waiting.contains(&(barrier, round))
                || arrived.len() < self.program.barriers[barrier as usize].participants.len()
        });
    }

    /// Ended items that no kept structure names. Costs one pass over the items (the candidates, and what the others
    /// name, in the same pass: a pipeline holds a million boxed items, and reading each twice was a tenth of a timed
    /// run) and no allocation beyond the candidates and those names.
    fn forget_items(&self, st: &mut State) {
        let mut candidates: Vec<ItemKey> = vec![];
        // What kept structures name, in a hash set: a binary search of the candidates per name mispredicted its way
        // through a third of every pass on a 1,024-rank pipeline (issue 9).
        let mut named: rustc_hash::FxHashSet<ItemKey> = rustc_hash::FxHashSet::with_capacity_and_hasher(st.streams.items.len(), Default::default());
        for (k, item) in st.streams.items.iter() {
            if item.status == ItemStatus::Done {
                candidates.push(*k);
            } else {
                named.extend(item.deps.iter().chain(&item.waits));
            }
        }
        if candidates.is_empty() {
            return;
        }
        {
            let mut mark = |k: &ItemKey| {
                named.insert(*k);
            };
            // An item ends while it heads every queue it is on (S1: it started there, and nothing behind it can
            // start before it ends), so the items at or past a queue's head have not ended and are no candidates:
            // only those before the head (after the drain above, at most the last ended one) need marking. Marking
            // every queued item cost a search per pending item per pass (a pipeline issues its work up front).
            for (q, head) in &st.streams.queues {
                q[..*head as usize].iter().for_each(&mut mark);
            }
            st.streams.event_binding.values().for_each(&mut mark);
            st.nccl.comm_tail.values().for_each(&mut mark);
            st.nccl.p2p.values().for_each(|at| mark(&at.0));
            st.nccl.coll.values().flat_map(|parts| parts.values()).for_each(|at| mark(&at.0));
            st.pool.free.iter().flat_map(|b| &b.not_before).for_each(&mut mark);
            for t in &st.host.threads {
                match &t.wait {
                    Some(Wait::Items { items, .. }) => items.iter().for_each(&mut mark),
                    Some(Wait::Staged(k)) => mark(k),
                    Some(Wait::Init(..) | Wait::Barrier { .. } | Wait::Connect { .. } | Wait::QueueSlot { .. } | Wait::Poll(_) | Wait::Finalize(_))
                    | None => {}
                }
            }
        }
        for k in candidates {
            if !named.contains(&k) {
                st.streams.items.discard(&k);
            }
        }
    }

    /// FastTrack: ended accesses that happen before every future access's start. Per rank of the memory: only the
    /// threads and streams that can still touch a rank's memory bound what can race there, and only at the agents
    /// whose ended accesses to it are kept, so one pass costs what the in-flight work holds, not threads × agents
    /// (issue 9, "scale").
    fn forget_accesses(&self, st: &mut State) {
        // Per rank of the memory: (agent, bound) for every agent with a kept ended access there; the bound is the
        // least time any future access there can start at (u32::MAX: none can).
        let mut need: Vec<Vec<(u32, u32)>> = vec![vec![]; self.program.ranks.len()];
        for (block, list) in &st.memory.accesses {
            let need = &mut need[block.buf.rank as usize];
            for e in list.iter().filter_map(|a| a.end) {
                if !need.iter().any(|x| x.0 == e.agent) {
                    need.push((e.agent, u32::MAX));
                }
            }
        }
        if need.iter().all(Vec::is_empty) {
            return;
        }
        let mut bound = |ranks: &[RankId], clocks: &[&VClock]| {
            for &r in ranks {
                for (agent, f) in need[r as usize].iter_mut() {
                    let b = clocks.iter().map(|c| c.get(*agent as usize)).max().unwrap_or(0);
                    *f = (*f).min(b);
                }
            }
        };
        let nthreads = st.host.threads.len();
        for (t, ts) in st.host.threads.iter().enumerate() {
            let fut = &self.future[t];
            // A blocked thread resumes its current op; a running one is about to call `pc`.
            let pc = ts.pc;
            if fut.last_host_access.is_some_and(|l| l >= pc) {
                bound(&fut.host_ranks, &[&ts.clock]);
            }
            // Items it will still issue on stream s start at its clock joined with s's clock, or later.
            for &(s, last) in &fut.last_on_stream {
                if last >= pc {
                    bound(&self.stream_ranks[s], &[&ts.clock, &st.streams.stream_clock[s]]);
                }
            }
        }
        // Items already issued and not started: each starts at its issue clock joined with its streams' clocks or
        // later. Per queue, the pending items issued by one thread were issued in order, so the first of each
        // issuing thread has the least issue clock: min_i(issue_i v c) = (min_i issue_i) v c pointwise.
        // `first_of` is cleared by the threads each queue set (clearing all of it per queue cost queues x threads per
        // pass, quadratic in ranks: 33 MB of writes at 4,096 ranks).
        let mut first_of = vec![false; nthreads];
        let mut set: Vec<usize> = vec![];
        for (s, (q, head)) in st.streams.queues.iter().enumerate() {
            set.drain(..).for_each(|t| first_of[t] = false);
            let mut seen = 0;
            for k in &q[*head as usize..] {
                let item = st.item(*k);
                if item.status != ItemStatus::Pending || first_of[k.thread as usize] {
                    continue;
                }
                first_of[k.thread as usize] = true;
                set.push(k.thread as usize);
                seen += 1;
                bound(&self.stream_ranks[s], &[&item.clock, &st.streams.stream_clock[s]]);
                if seen == self.future_issuers[s] {
                    break;
                }
            }
        }
        st.memory.accesses.retain(|block, list| {
            let need = &need[block.buf.rank as usize];
            list.retain(|a| !a.end.is_some_and(|e| need.iter().any(|&(agent, f)| agent == e.agent && f >= e.time)));
            !list.is_empty()
        });
    }
}

/// What a host thread may still do that touches memory, by op index: its last op that may access memory from the
/// host (host reads and writes, the staging of a copy; S4, S5), and per stream (global index) its last op that
/// enqueues work there.
pub(crate) struct ThreadFuture {
    pub last_host_access: Option<u32>,
    /// The ranks whose memory its host accesses name (ascending).
    pub host_ranks: Vec<RankId>,
    pub last_on_stream: Vec<(usize, u32)>,
}

impl ThreadFuture {
    /// `at`: where each op enqueues its work ([`super::reduction::effect_points`]: an NCCL op inside a group at the
    /// group end, N4; on a non-blocking communicator as late as the thread's last op, N12).
    pub(crate) fn new(ops: &[Op], infos: &[OpInfo], at: &[u32], stream_index: impl Fn(StreamRef) -> usize) -> ThreadFuture {
        let mut last_host_access = None;
        let mut host_ranks = vec![];
        let mut last: std::collections::BTreeMap<usize, u32> = Default::default();
        for (i, (op, info)) in ops.iter().zip(infos).enumerate() {
            // Every op whose accesses the host makes (no stream: a host read or write, a value assertion's read, V1)
            // and every copy (its staging, S5). Listing the op kinds missed `Expect` without a stream, whose read
            // then found its racing write forgotten (differential campaign, seeds 113594 and 138862).
            if (info.stream.is_none() && !info.accesses.is_empty()) || matches!(op.kind, OpKind::Memcpy { .. }) {
                last_host_access = Some(i as u32);
                host_ranks.extend(info.accesses.iter().map(|a| a.range.buf.rank));
            }
            if let Some(s) = info.stream {
                let e = last.entry(stream_index(s)).or_insert(at[i]);
                *e = (*e).max(at[i]);
            }
        }
        host_ranks.sort_unstable();
        host_ranks.dedup();
        ThreadFuture { last_host_access, host_ranks, last_on_stream: last.into_iter().collect() }
    }
}
