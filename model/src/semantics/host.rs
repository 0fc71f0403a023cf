//! Host threads: the program counter, which ops block and until when (S4, S5, N8, barriers), query answers (S4), and
//! the dispatch of each op to the family that implements it.

use super::*;
use crate::clock::Epoch;
use crate::op_info::MemAccess;
use crate::profile::{FreeDevice, ImplicitSync, SyncScope};

impl<'p> Semantics<'p> {
    /// Number of outcomes of the thread's next host step (0 = it cannot move).
    pub fn host_choices(&self, st: &State, t: ThreadId) -> u32 {
        let th = &st.host.threads[t as usize];
        if self.thread_finished(st, t) {
            return 0;
        }
        match &th.wait {
            Some(w) => u32::from(self.wait_satisfied(st, t, w)),
            None => match &self.ops_of(t)[th.pc as usize].kind {
                OpKind::Alloc { buf, stream } => 1 + self.reusable(st, *buf, *stream).len() as u32,
                OpKind::Memcpy { stream: Some(_), dst, src } if self.pageable_async(dst, src) => 2,
                // S7: a call that may synchronize more than it is guaranteed to has two outcomes.
                OpKind::LoadModule { rank, module } if st.host.loaded_modules.contains(&(*rank, module.clone())) => 1,
                // P4, S7: an empty cache that releases nothing calls no cudaFree.
                OpKind::EmptyCache { rank } if !st.pool.free.iter().any(|b| b.block.buf.rank == *rank) => 1,
                OpKind::CudaFree { buf } => self.free_outcomes(t, *buf).len() as u32,
                op @ (OpKind::CudaMalloc { .. }
                | OpKind::CudaMallocHost { .. }
                | OpKind::LoadModule { .. }
                | OpKind::EmptyCache { .. }) => {
                    let sync = self.implicit_sync_of(op);
                    1 + u32::from(sync.possible() != sync.guaranteed)
                }
                // N12: a call on a non-blocking communicator may return ncclSuccess or ncclInProgress.
                // N7: where the platform still chooses when collectives connect, both platforms' outcomes.
                OpKind::Send { .. } | OpKind::Recv { .. } | OpKind::Collective { .. } if th.group_depth == 0 => {
                    self.launch_outcomes(st, t, &[th.pc])
                }
                OpKind::GroupEnd if th.group_depth == 1 && !th.group_ops.is_empty() => self.launch_outcomes(st, t, &th.group_ops),
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
            Wait::QueueSlot { stream } => !self.queue_full(st, *stream),
        }
    }

    /// The profile's implicit synchronization (S7) of a call that may synchronize; `None` scopes for other ops.
    pub(crate) fn implicit_sync_of(&self, op: &OpKind) -> ImplicitSync {
        let sync = &self.profile.implicit_sync;
        match op {
            OpKind::CudaFree { .. } | OpKind::EmptyCache { .. } => sync.free,
            OpKind::CudaMalloc { .. } => sync.malloc,
            OpKind::CudaMallocHost { .. } => sync.malloc_host,
            OpKind::LoadModule { .. } => sync.lazy_load,
            _ => ImplicitSync { guaranteed: SyncScope::None, possible: SyncScope::None },
        }
    }

    /// S7: the host call of thread `t` on the device of `rank` synchronizes: with `choice` 0 the guaranteed scope
    /// (whose ordering a program may rely on), with `choice` 1 the wider possible one, which only delays the host
    /// (the return joins nothing). Blocks the thread on the tails of the scope's streams, or advances it.
    fn implicit_sync(&self, st: &mut State, t: ThreadId, rank: RankId, sync: ImplicitSync, choice: u32) {
        self.implicit_sync_after(st, t, rank, sync, choice, vec![]);
    }

    /// [`Semantics::implicit_sync`], also waiting for `first` (items whose end the call is guaranteed to wait for).
    fn implicit_sync_after(&self, st: &mut State, t: ThreadId, rank: RankId, sync: ImplicitSync, choice: u32, first: Vec<ItemKey>) {
        let (scope, orders) = if choice == 0 { (sync.guaranteed, true) } else { (sync.possible(), false) };
        let ranks: Vec<RankId> = match scope {
            SyncScope::None => vec![],
            SyncScope::Device => vec![rank],
            SyncScope::AllDevices => (0..self.program.ranks.len() as RankId).collect(),
        };
        let mut items = first;
        items.extend(ranks.iter().flat_map(|r| self.rank_streams(*r)).filter_map(|s| self.tail(st, s)));
        items.sort();
        items.dedup();
        if items.is_empty() {
            self.advance(st, t);
        } else {
            self.block(st, t, Wait::Items { items, orders });
        }
    }

    /// S6: whether `stream` holds as many issued items that have not started as the profile's launch queue depth.
    pub(crate) fn queue_full(&self, st: &State, stream: StreamRef) -> bool {
        let Some(depth) = self.profile.launch_queue_depth else { return false };
        self.pending_on(st, stream).len() as u64 >= u64::from(depth)
    }

    /// The items queued on `stream` that have not started, in queue order.
    pub(crate) fn pending_on(&self, st: &State, stream: StreamRef) -> Vec<ItemKey> {
        let (q, head) = &st.streams.queues[self.stream_index(stream)];
        q[*head as usize..].iter().copied().filter(|k| st.item(*k).status == ItemStatus::Pending).collect()
    }

    /// S6: the first stream the thread's next op would enqueue on whose queue is full, if the profile bounds the
    /// queue. NCCL ops enqueue at the outermost group end (N4).
    pub(crate) fn full_queue_ahead(&self, st: &State, t: ThreadId) -> Option<StreamRef> {
        self.profile.launch_queue_depth?;
        let th = &st.host.threads[t as usize];
        let loc = OpLoc { thread: t, op: th.pc };
        let streams: Vec<StreamRef> = match &self.op(loc).kind {
            OpKind::Send { .. } | OpKind::Recv { .. } | OpKind::Collective { .. } if th.group_depth > 0 => vec![],
            OpKind::GroupEnd if th.group_depth == 1 => {
                th.group_ops.iter().filter_map(|i| self.info(OpLoc { thread: t, op: *i }).stream).collect()
            }
            _ => self.info(loc).stream.into_iter().collect(),
        };
        streams.into_iter().find(|s| self.queue_full(st, *s))
    }

    /// S7, `CUDA_LAUNCH_BLOCKING=1`: the op at `pc` of thread `t` has just returned; if it launched work (kernels,
    /// copies, memsets, host functions, NCCL launches: not event markers) the call returns only once that work
    /// has ended, which orders it before the host.
    fn launch_blocking(&self, st: &mut State, t: ThreadId, pc: u32) {
        let th = &st.host.threads[t as usize];
        if th.wait.is_some() || th.pc != pc + 1 || st.undefined.is_some() {
            return;
        }
        let items: Vec<ItemKey> = st
            .streams
            .items
            .subs(t, pc)
            .filter(|(_, i)| !matches!(i.kind, ItemKind::Record | ItemKind::WaitMarker))
            .map(|(k, _)| *k)
            .collect();
        if items.is_empty() {
            return;
        }
        let th = &mut st.host.threads[t as usize];
        th.pc = pc;
        th.wait = Some(Wait::Items { items, orders: true });
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
        // S6: with its stream's queue full, the call blocks before it does anything.
        if let Some(stream) = self.full_queue_ahead(st, t) {
            return self.block(st, t, Wait::QueueSlot { stream });
        }
        st.host.threads[t as usize].clock.tick(t as usize);
        let op = &self.ops_of(t)[pc as usize];
        let key = ItemKey::of(loc, 0);
        // N12, N13: a call on a communicator that is still in progress, or no longer exists, is undefined. The op
        // table's communicator is the one whose life the call depends on (NCCL calls, the life-cycle calls, a split's
        // parent).
        if let Some(comm) = self.info(loc).comm {
            if !self.check_comm_usable(st, loc, comm, self.acting_rank(loc)) {
                return;
            }
        }
        match &op.kind {
            OpKind::Kernel { stream, reads, writes, .. } => {
                let all: Vec<BufRange> = reads.iter().chain(writes).copied().collect();
                if self.check_allocated(st, loc, &all) {
                    self.enqueue(st, t, key, ItemKind::Work, smallvec![*stream], smallvec![], smallvec![]);
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
                    self.enqueue(st, t, key, ItemKind::Work, smallvec![*stream], smallvec![], smallvec![]);
                }
                self.advance(st, t);
            }
            OpKind::Expect { range, stream: None, writer, sent_from } => {
                if self.check_allocated(st, loc, &[*range]) {
                    self.host_access(st, loc, MemAccess { range: *range, write: false });
                }
                let c = st.host.threads[t as usize].clock.clone();
                self.check_expect(st, loc, *range, *writer, *sent_from, &c);
                self.advance(st, t);
            }
            OpKind::CudaFree { buf } => self.cuda_free(st, loc, *buf, choice),
            OpKind::CudaMalloc { rank, .. } | OpKind::CudaMallocHost { rank, .. } => {
                self.implicit_sync(st, t, *rank, self.implicit_sync_of(&op.kind), choice)
            }
            OpKind::LoadModule { rank, module } => {
                // S7: only the first load of a module on a device does anything.
                if st.host.loaded_modules.insert((*rank, module.clone())) {
                    self.implicit_sync(st, t, *rank, self.implicit_sync_of(&op.kind), choice)
                } else {
                    self.advance(st, t)
                }
            }
            OpKind::EmptyCache { rank } => {
                // P4, S7 (PyTorch CUDACachingAllocator::emptyCache: release_cached_blocks calls
                // synchronize_and_free_events, then release_blocks, which cudaFrees every free block): waits for the
                // work `record_stream` holds the device's free blocks for, releases them, and synchronizes per `free`.
                let (mine, rest): (Vec<PoolBlock>, Vec<PoolBlock>) = std::mem::take(&mut st.pool.free).into_iter().partition(|b| b.block.buf.rank == *rank);
                st.pool.free = rest;
                if mine.is_empty() {
                    self.advance(st, t);
                } else {
                    let held: Vec<ItemKey> = mine.iter().flat_map(|b| b.not_before.iter().copied()).collect();
                    self.implicit_sync_after(st, t, *rank, self.implicit_sync_of(&op.kind), choice, held);
                }
            }
            // S8: an item on its stream like a kernel; it checks its calls and accesses when it runs (`start_item`).
            OpKind::HostFunc { stream, reads, writes, .. } => {
                let all: Vec<BufRange> = reads.iter().chain(writes).copied().collect();
                if self.check_allocated(st, loc, &all) {
                    self.enqueue(st, t, key, ItemKind::Work, smallvec![*stream], smallvec![], smallvec![]);
                }
                self.advance(st, t);
            }
        }
        if self.profile.launch_blocking {
            self.launch_blocking(st, t, pc);
        }
    }

    /// `cudaFree` of a non-pooled buffer (S7): the buffer is released when the call returns, after the implicit
    /// synchronization the profile and `choice` give. Work issued before that still uses the buffer makes the
    /// program undefined (a use after free), and so does every later use (`check_allocated`).
    /// S7: the outcomes of thread `t`'s `cudaFree` of `buf`, as (the devices it waits for, whether the wait orders
    /// their work before the host): the profile's guaranteed scope (ordered), then the wider possible one (not
    /// ordered) when it is wider. Which device "its device" is when the pointer belongs to another device than the
    /// calling thread's (one thread driving several GPUs) is documented nowhere (CUDA Runtime API, *cudaFree*: "this
    /// API may perform implicit synchronization"), so a `Device` scope then has two outcomes, the pointer's device
    /// and the caller's, each explored, unless the profile pins one (`free_device`).
    pub(crate) fn free_outcomes(&self, t: ThreadId, buf: BufRef) -> Vec<(Vec<RankId>, bool)> {
        let sync = self.implicit_sync_of(&OpKind::CudaFree { buf });
        let caller = self.rank_of(t);
        let mut out = vec![];
        let scope = |s: SyncScope, orders: bool, out: &mut Vec<(Vec<RankId>, bool)>| match s {
            SyncScope::None => out.push((vec![], orders)),
            SyncScope::Device => match self.profile.free_device {
                FreeDevice::Pointer => out.push((vec![buf.rank], orders)),
                FreeDevice::Caller => out.push((vec![caller], orders)),
                FreeDevice::Either => {
                    out.push((vec![buf.rank], orders));
                    if caller != buf.rank {
                        out.push((vec![caller], orders));
                    }
                }
            },
            SyncScope::AllDevices => out.push(((0..self.program.ranks.len() as RankId).collect(), orders)),
        };
        scope(sync.guaranteed, true, &mut out);
        if sync.possible() != sync.guaranteed {
            scope(sync.possible(), false, &mut out);
        }
        out
    }

    fn cuda_free(&self, st: &mut State, loc: OpLoc, buf: BufRef, choice: u32) {
        if !self.check_allocated(st, loc, &[BufRange { buf, offset: 0, len: 0 }]) {
            return;
        }
        st.pool.device_freed.insert(buf);
        let (ranks, orders) = self.free_outcomes(loc.thread, buf).swap_remove(choice as usize);
        let mut items: Vec<ItemKey> = ranks.iter().flat_map(|r| self.rank_streams(*r)).filter_map(|s| self.tail(st, s)).collect();
        items.sort();
        items.dedup();
        if items.is_empty() {
            if self.released_in_use(st, loc, buf) {
                return;
            }
            self.advance(st, loc.thread);
        } else {
            self.block(st, loc.thread, Wait::Items { items, orders });
        }
    }

    /// S7: `cudaFree` at `loc` releases `buf` as it returns; issued work that still uses it then (work the call did
    /// not wait for: on no device, or on another device than the one it synchronized) is a use after free, and the
    /// execution is undefined. Returns whether it was.
    fn released_in_use(&self, st: &mut State, loc: OpLoc, buf: BufRef) -> bool {
        let in_flight = st.streams.items.iter().find(|(k, i)| {
            i.status != ItemStatus::Done && self.item_accesses(**k, &i.kind).iter().any(|(_, a)| a.range.buf == buf)
        });
        let Some((k, _)) = in_flight else { return false };
        let (k, who) = (*k, self.item_label(st, *k));
        let name = &self.program.buffer(buf).name;
        let msg = format!(
            "{} releases {name} while {who}, issued before it, may still use it: cudaFree need not wait for that \
             work (a use after free)",
            self.op_label(loc)
        );
        self.set_undefined(st, Rule::S7, msg, vec![loc, k.loc()]);
        true
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
                let end = st.item(*k).end().cloned().expect("a done item has an end clock");
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
                        let end = st.item(k).end().cloned().expect("a done item has an end clock");
                        st.host.threads[t as usize].clock.join(&end);
                    }
                }
                // S7: a cudaFree that synchronized releases its buffer now, as it returns.
                let at = OpLoc { thread: t, op: st.host.threads[t as usize].pc };
                if let OpKind::CudaFree { buf } = self.op(at).kind {
                    if self.released_in_use(st, at, buf) {
                        return;
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
                st.host.threads[t as usize].clock.tick(t as usize);
                let pc = st.host.threads[t as usize].pc;
                self.advance(st, t);
                if self.profile.launch_blocking {
                    self.launch_blocking(st, t, pc);
                }
                return;
            }
            // S6: room in the queue; the thread makes its call again (it may find the queue full again).
            Wait::QueueSlot { .. } => {
                st.host.threads[t as usize].wait = None;
                return;
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
