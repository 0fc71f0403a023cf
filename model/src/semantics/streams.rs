//! Streams and events (S1-S5): FIFO queues of items, the legacy default stream's implicit edges (S2), event
//! record/wait binding (S3), which copies and memsets block or order the host (S5), and item start and end (S1).

use super::*;
use crate::clock::Epoch;
use crate::op_info::MemAccess;

impl<'p> Semantics<'p> {
    /// The last item issued on a stream.
    pub(crate) fn tail(&self, st: &State, s: StreamRef) -> Option<ItemKey> {
        st.streams.queues[self.stream_index(s)].0.last().copied()
    }

    /// Whether a pending item may start: it heads every stream it is queued on and its dependencies have ended.
    pub(crate) fn item_ready(&self, st: &State, k: ItemKey, item: &Item) -> bool {
        item.status == ItemStatus::Pending
            && item.streams.iter().all(|s| {
                let (q, head) = &st.streams.queues[self.stream_index(*s)];
                q.get(*head as usize) == Some(&k)
            })
            && item.deps.iter().chain(&item.waits).all(|d| st.item_done(*d))
    }

    /// Item steps: every pending item that may start, except the DMA of a staged copy before its host has staged
    /// the source (S5).
    pub(crate) fn item_steps(&self, st: &State, heads: &[ItemKey], out: &mut Vec<Step>) {
        // Only an item at the head of a queue can start: look at the heads (in item order, as the steps are listed).
        for &k in heads {
            let item = st.item(k);
            if !self.item_ready(st, k, item) {
                continue;
            }
            let k = &k;
            if item.kind == ItemKind::StagedCopy && matches!(st.host.threads[k.thread as usize].wait, Some(Wait::Staged(w)) if w == *k) {
                continue;
            }
            out.push(Step::Item(*k));
        }
    }

    /// The items at the head of some stream queue (not ended), each once, in item order: every running item and
    /// every item that may start next.
    pub(crate) fn queue_heads(&self, st: &State) -> Vec<ItemKey> {
        let mut heads: Vec<ItemKey> = st.streams.queues.iter().filter_map(|(q, head)| q.get(*head as usize).copied()).collect();
        heads.sort_unstable();
        heads.dedup();
        heads
    }

    /// Enqueues an item on `streams`, adding the legacy-default-stream dependencies (S2) and the caller's `deps`
    /// (ordering) and `waits` (start only after, ordering nothing; N5).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn enqueue(
        &self,
        st: &mut State,
        t: ThreadId,
        key: ItemKey,
        kind: ItemKind,
        streams: ItemStreams,
        mut deps: ItemKeys,
        mut waits: ItemKeys,
    ) {
        for s in &streams {
            // S2: the legacy stream waits for every blocking stream of its device, and they wait for it.
            // S2, refined by CUDA's "Stream synchronization behavior": the per-thread default stream "is not a
            // non-blocking stream and will synchronize with the legacy default stream", like a blocking stream.
            match self.program.stream(*s).kind {
                StreamKind::LegacyDefault => {
                    for o in self.rank_streams(s.rank) {
                        if matches!(self.program.stream(o).kind, StreamKind::Blocking | StreamKind::PerThreadDefault) {
                            deps.extend(self.tail(st, o));
                        }
                    }
                }
                StreamKind::Blocking | StreamKind::PerThreadDefault => {
                    deps.extend(self.tail(st, StreamRef { rank: s.rank, index: 0 }));
                }
                StreamKind::NonBlocking => {}
            }
        }
        deps.retain(|d| *d != key);
        deps.sort();
        deps.dedup();
        waits.retain(|w| *w != key && !deps.contains(w));
        waits.sort();
        waits.dedup();
        for s in &streams {
            let i = self.stream_index(*s);
            st.streams.queues[i].0.push(key);
        }
        let issue = st.host.threads[t as usize].clock.clone();
        let mut blocks: ItemBlocks = self
            .item_accesses(key, &kind)
            .into_iter()
            .filter_map(|(_, a)| self.block_of(st, a.range.buf).map(|b| (a.range.buf, b)))
            .collect();
        blocks.sort();
        blocks.dedup();
        st.streams.items.insert(
            key,
            Item { kind, streams, deps, waits, clock: issue, status: ItemStatus::Pending, blocks },
        );
    }

    /// The memory an item touches: (op responsible, access).
    pub(crate) fn item_accesses(&self, key: ItemKey, kind: &ItemKind) -> Vec<(OpLoc, MemAccess)> {
        match kind {
            ItemKind::Work => self.info(key.loc()).accesses.iter().map(|a| (key.loc(), *a)).collect(),
            // S5: the host staged the source; the DMA writes the destination only.
            ItemKind::StagedCopy => self.info(key.loc()).accesses.iter().filter(|a| a.write).map(|a| (key.loc(), *a)).collect(),
            ItemKind::Launch { ops, .. } => {
                ops.iter().flat_map(|o| self.info(o.loc).accesses.iter().map(move |a| (o.loc, *a))).collect()
            }
            ItemKind::Record | ItemKind::WaitMarker => vec![],
        }
    }

    /// Starts an item: joins its stream predecessors, dependencies and issue clock (MODEL.md); checks its accesses
    /// for races; finite items and markers also end in the same step.
    pub(crate) fn start_item(&self, st: &mut State, k: ItemKey, fx: &mut Effects) {
        let item = st.item(k);
        let mut c = item.clock.clone();
        for s in &item.streams {
            c.join(&st.streams.stream_clock[self.stream_index(*s)]);
        }
        for d in &item.deps {
            c.join(st.item(*d).end().expect("a dependency has ended"));
        }
        for s in &item.streams {
            c.tick(self.stream_component(*s));
        }
        let finite = !matches!(item.kind, ItemKind::Launch { .. });
        let agent = self.stream_component(item.streams[0]);
        let epoch = Epoch { agent: agent as u32, time: c.get(agent) };
        let accesses = self.item_accesses(k, &item.kind);
        let blocks = item.blocks.clone();
        for (loc, a) in accesses {
            let who = Accessor::Item { item: k, loc };
            let Some(&(_, block)) = blocks.iter().find(|(b, _)| *b == a.range.buf) else { continue };
            self.access(st, who, a, block, &c, if finite { Some(epoch) } else { None });
        }
        if let OpKind::Expect { range, writer, sent_from, .. } = self.op(k.loc()).kind {
            self.check_expect(st, k.loc(), range, writer, sent_from, &c);
        }
        if let OpKind::HostFunc { name, calls_cuda: true, .. } = &self.op(k.loc()).kind {
            // S8: a host function must not call the CUDA API (cudaLaunchHostFunc).
            let msg = format!(
                "{} runs host function {name}, which calls the CUDA API: a host function enqueued with \
                 cudaLaunchHostFunc must not make any CUDA call",
                self.item_label(st, k)
            );
            self.set_undefined(st, Rule::S8, msg, vec![k.loc()]);
        }
        let item = st.streams.items.get_mut(&k).expect("started item exists");
        item.clock = c.clone();
        if let ItemKind::Launch { clocks, .. } = &mut item.kind {
            clocks.start = Some(c.clone());
        }
        fx.started.push(k);
        if finite {
            self.finish_item(st, k, c, fx);
        } else {
            item.status = ItemStatus::Running;
            // N13: a launch aborted before it started ends at once.
            if Self::ends_at_start(item) {
                self.end_launch(st, k, fx);
            }
        }
    }

    /// Marks an item ended with end clock `end`, advances its streams, and fills the end of its accesses.
    pub(crate) fn finish_item(&self, st: &mut State, k: ItemKey, end: VClock, fx: &mut Effects) {
        let item = st.streams.items.get_mut(&k).expect("finished item exists");
        item.status = ItemStatus::Done;
        let streams = item.streams.clone();
        let blocks = item.blocks.clone();
        let agent = self.stream_component(streams[0]);
        let epoch = Epoch { agent: agent as u32, time: end.get(agent) };
        item.clock = end.clone();
        for s in streams {
            let i = self.stream_index(s);
            st.streams.queues[i].1 += 1;
            st.streams.stream_clock[i] = end.clone();
        }
        self.end_accesses(st, k, &blocks, epoch);
        fx.ended.push(k);
        if !self.expected_writers.is_empty() {
            let kind = st.item(k).kind.clone();
            self.note_item_writes(st, k, &kind, epoch);
        }
    }

    /// S3: the record captures the stream's work at the moment of the call; later waits bind to it.
    pub(crate) fn event_record(&self, st: &mut State, loc: OpLoc, event: EventRef, stream: StreamRef) {
        let key = ItemKey::of(loc, 0);
        self.enqueue(st, loc.thread, key, ItemKind::Record, smallvec![stream], smallvec![], smallvec![]);
        st.streams.event_binding.insert(event, key);
        self.advance(st, loc.thread);
    }

    /// S3: binds to the most recent record as of this call; a never-recorded event orders nothing.
    pub(crate) fn stream_wait_event(&self, st: &mut State, loc: OpLoc, stream: StreamRef, event: EventRef) {
        let key = ItemKey::of(loc, 0);
        let Some(dep) = st.streams.event_binding.get(&event).copied() else {
            // S3: a wait for an event never recorded completes at once, and it enqueues nothing: on an H200 (driver
            // 580) a wait of the legacy stream for such an event did not take part in the legacy stream's implicit
            // synchronization (S2) either (traces/hw/cover-2026-12-01: cover-1871, cover-1925, ...).
            return self.advance(st, loc.thread);
        };
        self.enqueue(st, loc.thread, key, ItemKind::WaitMarker, smallvec![stream], smallvec![dep], smallvec![]);
        self.advance(st, loc.thread);
    }

    /// `cudaMemsetAsync`, or synchronous `cudaMemset` on the legacy stream. CUDA "API synchronization behavior": a
    /// synchronous memset is fully synchronous when the target is pinned host memory, and may return before it is
    /// done otherwise (S5).
    pub(crate) fn memset(&self, st: &mut State, loc: OpLoc, stream: Option<StreamRef>, dst: &BufRange) {
        let t = loc.thread;
        if !self.check_allocated(st, loc, &[*dst]) {
            return self.advance(st, t);
        }
        let key = ItemKey::of(loc, 0);
        let s = self.info(loc).stream.expect("a memset has a stream");
        self.enqueue(st, t, key, ItemKind::Work, smallvec![s], smallvec![], smallvec![]);
        if stream.is_none() && self.program.buffer(dst.buf).space != MemSpace::Device {
            self.block(st, t, Wait::Items { items: vec![key], orders: true });
        } else {
            self.advance(st, t);
        }
    }

    /// Whether an asynchronous copy between these buffers involves pageable memory and device memory, so that it
    /// *might* be host-synchronous (S5).
    pub(crate) fn pageable_async(&self, dst: &BufRange, src: &BufRange) -> bool {
        let space = |r: &BufRange| self.program.buffer(r.buf).space;
        let host = |s: MemSpace| s != MemSpace::Device;
        let pageable = space(dst) == MemSpace::PageableHost || space(src) == MemSpace::PageableHost;
        pageable && !(host(space(dst)) && host(space(src)))
    }

    /// `cudaMemcpyAsync` on `stream`, or synchronous `cudaMemcpy` on the legacy stream, per CUDA "API
    /// synchronization behavior" (S5):
    /// - any host memory to any host memory: fully synchronous, async or not;
    /// - async, pageable memory and device memory: *might* be synchronous: the host either returns at once
    ///   (`choice` 0) or once the copy has ended (`choice` 1); neither orders anything;
    /// - async otherwise: returns at once;
    /// - sync device to device: no host synchronization;
    /// - sync pageable to device: syncs the stream, stages the source, returns before the DMA is done;
    /// - sync otherwise (to host memory, from pinned memory): returns once the copy is done.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn memcpy(
        &self,
        st: &mut State,
        loc: OpLoc,
        stream: Option<StreamRef>,
        dst: &BufRange,
        src: &BufRange,
        choice: u32,
        fx: &mut Effects,
    ) {
        let t = loc.thread;
        if !self.check_allocated(st, loc, &[*dst, *src]) {
            return self.advance(st, t);
        }
        let key = ItemKey::of(loc, 0);
        let s = self.info(loc).stream.expect("a memcpy has a stream");
        let space = |r: &BufRange| self.program.buffer(r.buf).space;
        let (dst_dev, src_dev) = (space(dst) == MemSpace::Device, space(src) == MemSpace::Device);
        let host_to_host = !dst_dev && !src_dev;
        let staged = stream.is_none() && dst_dev && space(src) == MemSpace::PageableHost;
        let kind = if staged { ItemKind::StagedCopy } else { ItemKind::Work };
        self.enqueue(st, t, key, kind, smallvec![s], smallvec![], smallvec![]);
        let wait = if host_to_host {
            Some(Wait::Items { items: vec![key], orders: true })
        } else if stream.is_some() {
            if self.pageable_async(dst, src) {
                fx.host_synchronous = Some(choice == 1);
                (choice == 1).then(|| Wait::Items { items: vec![key], orders: false })
            } else {
                None
            }
        } else if dst_dev && src_dev {
            None
        } else if staged {
            Some(Wait::Staged(key))
        } else {
            Some(Wait::Items { items: vec![key], orders: true })
        };
        match wait {
            Some(w) => self.block(st, t, w),
            None => self.advance(st, t),
        }
    }

    /// The host of a staged synchronous copy returns (S5): it has waited for the work before the copy (joins the
    /// stream predecessors and dependencies) and read the source into the staging buffer (a host access).
    pub(crate) fn staged(&self, st: &mut State, t: ThreadId, k: ItemKey) {
        let item = st.item(k);
        let mut c = st.host.threads[t as usize].clock.clone();
        for s in &item.streams {
            c.join(&st.streams.stream_clock[self.stream_index(*s)]);
        }
        for d in &item.deps {
            c.join(st.item(*d).end().expect("a dependency has ended"));
        }
        st.host.threads[t as usize].clock = c;
        let loc = k.loc();
        let src = self.info(loc).accesses.iter().find(|a| !a.write).copied().expect("a copy reads its source");
        self.host_access(st, loc, src);
    }
}
