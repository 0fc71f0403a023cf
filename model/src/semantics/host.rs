//! Host threads: the program counter, which ops block and until when (S4, S5, N8, barriers), query answers (S4), and
//! the dispatch of each op to the family that implements it.

use super::*;
use crate::clock::Epoch;
use crate::op_info::MemAccess;

impl<'p> Semantics<'p> {
    /// Number of outcomes of the thread's next host step (0 = it cannot move).
    pub(crate) fn host_choices(&self, st: &State, t: ThreadId) -> u32 {
        let th = &st.host.threads[t as usize];
        if self.thread_finished(st, t) {
            return 0;
        }
        match &th.wait {
            Some(w) => u32::from(self.wait_satisfied(st, t, w)),
            None => match &self.ops_of(t)[th.pc as usize].kind {
                OpKind::Alloc { buf, stream } => 1 + self.reusable(st, *buf, *stream).len() as u32,
                OpKind::Memcpy { stream: Some(_), dst, src } if self.pageable_async(dst, src) => 2,
                // N12: a call on a non-blocking communicator may return ncclSuccess or ncclInProgress.
                OpKind::Send { .. } | OpKind::Recv { .. } | OpKind::Collective { .. } if th.group_depth == 0 => {
                    self.nonblocking_outcomes(st, t, &[th.pc]).unwrap_or(1)
                }
                OpKind::GroupEnd if th.group_depth == 1 && !th.group_ops.is_empty() => {
                    self.nonblocking_outcomes(st, t, &th.group_ops).unwrap_or(1)
                }
                _ => 1,
            },
        }
    }

    fn wait_satisfied(&self, st: &State, t: ThreadId, w: &Wait) -> bool {
        match w {
            Wait::Poll(c) => self.poll_satisfied(st, t, *c),
            Wait::Finalize(c) => self.finalize_complete(st, *c, self.rank_of(t)),
            Wait::Items { items, .. } => items.iter().all(|k| st.item_done(*k)),
            Wait::Staged(k) => self.item_ready(st, *k, st.item(*k)),
            Wait::Init(c, n) => self.init_complete(st, *c, *n),
            Wait::Barrier { barrier, round } => {
                let parts = &self.program.barriers[*barrier as usize].participants;
                st.host.barrier_arrived.get(&(*barrier, *round)).is_some_and(|m| {
                    parts.iter().all(|(r, ti)| m.contains_key(&self.thread_id(*r, *ti)))
                })
            }
            Wait::Connect { need, .. } => need.is_empty(),
        }
    }

    pub(crate) fn advance(&self, st: &mut State, t: ThreadId) {
        let th = &mut st.host.threads[t as usize];
        th.pc += 1;
        th.wait = None;
    }

    pub(crate) fn block(&self, st: &mut State, t: ThreadId, w: Wait) {
        st.host.threads[t as usize].wait = Some(w);
    }

    pub(crate) fn host_step(&self, st: &mut State, t: ThreadId, choice: u32, fx: &mut Effects) {
        let th = &st.host.threads[t as usize];
        let pc = th.pc;
        let loc = OpLoc { thread: t, op: pc };
        if let Some(w) = th.wait.clone() {
            return self.unblock(st, t, w);
        }
        st.host.threads[t as usize].clock.tick(t as usize);
        let op = &self.ops_of(t)[pc as usize];
        let key = ItemKey::of(loc, 0);
        // N12, N13: a call on a communicator that is still in progress, or no longer exists, is undefined.
        if let Some(comm) = self.lifecycle_comm(&op.kind) {
            if !self.check_comm_usable(st, loc, comm, self.acting_rank(loc)) {
                return;
            }
        }
        match &op.kind {
            OpKind::Kernel { stream, reads, writes, .. } => {
                let all: Vec<BufRange> = reads.iter().chain(writes).copied().collect();
                if self.check_allocated(st, loc, &all) {
                    self.enqueue(st, t, key, ItemKind::Work, vec![*stream], vec![], vec![]);
                }
                self.advance(st, t);
            }
            OpKind::Memset { stream, dst } => self.memset(st, loc, *stream, dst),
            OpKind::Memcpy { stream, dst, src } => self.memcpy(st, loc, *stream, dst, src, choice, fx),
            OpKind::EventRecord { event, stream } => self.event_record(st, loc, *event, *stream),
            OpKind::StreamWaitEvent { stream, event } => self.stream_wait_event(st, loc, *stream, *event),
            OpKind::EventQuery { event } => {
                // S4: never blocks; ready iff the bound record has ended (or the event was never recorded).
                let bound = st.streams.event_binding.get(event).copied();
                fx.answer = Some(self.query(st, t, bound.into_iter().collect()));
                self.advance(st, t);
            }
            OpKind::StreamQuery { stream } => {
                let tail = self.tail(st, *stream);
                fx.answer = Some(self.query(st, t, tail.into_iter().collect()));
                self.advance(st, t);
            }
            OpKind::EventSynchronize { event } => {
                let items: Vec<ItemKey> = st.streams.event_binding.get(event).copied().into_iter().collect();
                self.block(st, t, Wait::Items { items, orders: true });
            }
            OpKind::StreamSynchronize { stream } => {
                let items: Vec<ItemKey> = self.tail(st, *stream).into_iter().collect();
                self.block(st, t, Wait::Items { items, orders: true });
            }
            OpKind::DeviceSynchronize { rank: r } => {
                // S4, P5: every stream of the device, NCCL's included (here NCCL runs on the named streams).
                let items: Vec<ItemKey> = self.rank_streams(*r).filter_map(|s| self.tail(st, s)).collect();
                self.block(st, t, Wait::Items { items, orders: true });
            }
            OpKind::HostSleep { .. } => self.advance(st, t),
            OpKind::HostAccess { range, write } => {
                if self.check_allocated(st, loc, &[*range]) {
                    self.host_access(st, loc, MemAccess { range: *range, write: *write });
                }
                self.advance(st, t);
            }
            OpKind::Barrier { barrier } => {
                let round = st.host.barrier_rounds.entry((*barrier, t)).or_default();
                let r = *round;
                *round += 1;
                let c = st.host.threads[t as usize].clock.clone();
                st.host.barrier_arrived.entry((*barrier, r)).or_default().insert(t, c);
                self.block(st, t, Wait::Barrier { barrier: *barrier, round: r });
            }
            OpKind::CommInit { comm } if self.is_nonblocking(*comm) => self.comm_init_nonblocking(st, t, *comm),
            OpKind::CommInit { comm } => self.comm_init(st, t, *comm, 0),
            OpKind::CommSplit { parent, seq, .. } => self.comm_init(st, t, *parent, seq + 1),
            OpKind::CommPoll { comm } => self.comm_poll(st, t, *comm),
            OpKind::CommAbort { comm } => {
                let c = st.host.threads[t as usize].clock.clone();
                self.abort_comm(st, *comm, self.acting_rank(loc), CommEnd::Aborted(loc), Some(&c), fx);
                self.advance(st, t);
            }
            OpKind::CommFinalize { comm } | OpKind::CommDestroy { comm } => self.comm_finalize(st, t, *comm),
            OpKind::Send { .. } | OpKind::Recv { .. } | OpKind::Collective { .. } => self.nccl_call(st, t, pc, choice),
            OpKind::GroupStart => {
                st.host.threads[t as usize].group_depth += 1;
                self.advance(st, t);
            }
            OpKind::GroupEnd => self.group_end_call(st, t, choice),
            OpKind::Alloc { buf, stream } => self.alloc(st, loc, *buf, *stream, choice, fx),
            OpKind::Free { buf } => self.free(st, loc, *buf),
            OpKind::RecordStream { buf, stream } => self.record_stream(st, loc, *buf, *stream),
            // V1: on a stream, an item that reads the range and checks when it starts (`start_item`); on the host,
            // a host read checked at the thread's clock now.
            OpKind::Expect { range, stream: Some(stream), .. } => {
                if self.check_allocated(st, loc, &[*range]) {
                    self.enqueue(st, t, key, ItemKind::Work, vec![*stream], vec![], vec![]);
                }
                self.advance(st, t);
            }
            OpKind::Expect { range, stream: None, writer } => {
                if self.check_allocated(st, loc, &[*range]) {
                    self.host_access(st, loc, MemAccess { range: *range, write: false });
                }
                let c = st.host.threads[t as usize].clock.clone();
                self.check_expect(st, loc, *range, *writer, &c);
                self.advance(st, t);
            }
        }
    }

    /// A host access at the thread's current clock (S4: host reads and writes of host memory; S5: staging).
    pub(crate) fn host_access(&self, st: &mut State, loc: OpLoc, a: MemAccess) {
        let t = loc.thread;
        let c = st.host.threads[t as usize].clock.clone();
        let e = Epoch { agent: t, time: c.get(t as usize) };
        if let Some(block) = self.block_of(st, a.range.buf) {
            self.access(st, Accessor::Host { loc }, a, block, &c, Some(e));
        }
    }

    /// S4: the answer of a query on `on` (ready iff every item has ended); a ready answer orders their ends before
    /// the host.
    fn query(&self, st: &mut State, t: ThreadId, on: Vec<ItemKey>) -> bool {
        let ready = on.iter().all(|k| st.item_done(*k));
        if ready {
            for k in &on {
                let end = st.item(*k).end.clone().expect("a done item has an end clock");
                st.host.threads[t as usize].clock.join(&end);
            }
        }
        st.host.threads[t as usize].answers.push(ready);
        ready
    }

    fn unblock(&self, st: &mut State, t: ThreadId, w: Wait) {
        match w {
            Wait::Items { items, orders } => {
                if orders {
                    for k in items {
                        let end = st.item(k).end.clone().expect("a done item has an end clock");
                        st.host.threads[t as usize].clock.join(&end);
                    }
                }
            }
            Wait::Staged(k) => self.staged(st, t, k),
            Wait::Init(c, n) => self.init_unblock(st, t, c, n),
            Wait::Barrier { barrier, round } => {
                let all: Vec<VClock> = st.host.barrier_arrived[&(barrier, round)].values().cloned().collect();
                for c in all {
                    st.host.threads[t as usize].clock.join(&c);
                }
            }
            Wait::Connect { ops, .. } => {
                // N7: set-up done; now the group's launches are enqueued.
                self.enqueue_launches(st, t, &ops);
            }
            Wait::Poll(c) => self.poll_unblock(st, t, c),
            Wait::Finalize(c) => {
                let at = OpLoc { thread: t, op: st.host.threads[t as usize].pc };
                self.finalize_unblock(st, t, c, at);
            }
        }
        st.host.threads[t as usize].clock.tick(t as usize);
        self.advance(st, t);
    }
}
