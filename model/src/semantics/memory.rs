//! Memory and races: every access is recorded with the clock it happened at; two accesses to overlapping bytes of
//! one block, at least one a write, race unless the earlier one's end happens before the later one's start
//! (MODEL.md "Happens-before and races").

use super::*;
use crate::clock::Epoch;
use crate::op_info::{MemAccess, NcclRole};

impl<'p> Semantics<'p> {
    /// The block a buffer occupies now (static buffers: their own; pooled: the current allocation, if any; P4).
    pub(crate) fn block_of(&self, st: &State, b: BufRef) -> Option<BlockId> {
        if self.program.buffer(b).pooled {
            st.pool.allocated.get(&b).map(|a| a.block)
        } else {
            Some(BlockId { buf: b, generation: 0 })
        }
    }

    /// Records an access made at clock `at` and reports every earlier conflicting access it is not ordered after.
    pub(crate) fn access(&self, st: &mut State, who: Accessor, a: MemAccess, block: BlockId, at: &VClock, end: Option<Epoch>) {
        let new = Access { who, block, range: a.range, write: a.write, start: at.clone(), end };
        let (lo, hi) = (a.range.offset, a.range.offset + a.range.len);
        let mut races = vec![];
        // Only this block's accesses can conflict.
        for old in st.memory.accesses.get(&block).into_iter().flatten() {
            if !(old.write || a.write) {
                continue;
            }
            let (olo, ohi) = (old.range.offset, old.range.offset + old.range.len);
            if ohi <= lo || hi <= olo {
                continue;
            }
            if let (Accessor::Item { item: x, loc: lx }, Accessor::Item { item: y, loc: ly }) = (old.who, who) {
                // One op's own accesses (a copy, an in-place collective) do not race; nor do two ops of one launch
                // to the same peer in the same direction, which run in order (N4). Every other pair of ops of one
                // NCCL group progresses independently (N4; NCCL issue 900: collectives of one group run
                // concurrently), so their conflicting accesses race.
                if x == y && (lx == ly || self.same_lane(lx, ly)) {
                    continue;
                }
            }
            let ordered = old.end.is_some_and(|e| e.happens_before(at));
            if !ordered {
                // Canonical order of the pair, so that the state does not depend on which access ran first.
                let (first, second) = if (old.who.loc(), old.range) <= (new.who.loc(), new.range) {
                    (old.clone(), new.clone())
                } else {
                    (new.clone(), old.clone())
                };
                races.push(Race { first, second });
            }
        }
        st.memory.races.extend(races);
        if a.write {
            if let Some(e) = end {
                self.note_write_end(st, who.loc(), e);
            }
        }
        // Sorted, so that commuting steps give equal states (the explorer merges them).
        let list = st.memory.accesses.entry(block).or_default();
        let pos = list.partition_point(|x| x < &new);
        list.insert(pos, new);
    }

    /// Fills in the end of every access of item `k` once it has ended; `blocks` are the blocks the item touches
    /// (only their lists are visited).
    pub(crate) fn end_accesses(&self, st: &mut State, k: ItemKey, blocks: &[(BufRef, BlockId)], epoch: Epoch) {
        let mut done: Vec<BlockId> = blocks.iter().map(|(_, b)| *b).collect();
        done.sort_unstable();
        done.dedup();
        for block in done {
            let Some(list) = st.memory.accesses.get_mut(&block) else { continue };
            let mut changed = false;
            for a in list.iter_mut() {
                if matches!(a.who, Accessor::Item { item, .. } if item == k) {
                    a.end = Some(epoch);
                    changed = true;
                }
            }
            if changed {
                list.sort();
            }
        }
    }

    /// V1: remembers when the writes of item `k` (kind `kind`) ended, for the ops a value assertion names.
    pub(crate) fn note_item_writes(&self, st: &mut State, k: ItemKey, kind: &ItemKind, end: Epoch) {
        for (loc, a) in self.item_accesses(k, kind) {
            if a.write {
                self.note_write_end(st, loc, end);
            }
        }
    }

    /// V1: remembers when the write of `loc` ended, if a value assertion names it.
    fn note_write_end(&self, st: &mut State, loc: OpLoc, end: Epoch) {
        if self.expected_writers.contains(&loc) {
            st.memory.write_ends.insert(loc, end);
        }
    }

    /// V1: value assertion `check` (reading `range` at clock `at`) sees what `writer` wrote only if that write has
    /// ended and its end happens before the read; otherwise the read is stale. With `sent_from` (the writer is a
    /// recv), the send that recv matched (N3, in `MemoryState::recv_sources`) must also have read inside
    /// `sent_from`, or the value seen is another message's and the read is stale too. Both depend only on
    /// happens-before and the matching, never on how far unordered steps have got: when the write happens before
    /// the read, the recv's data arrived before it in every interleaving.
    pub(crate) fn check_expect(&self, st: &mut State, check: OpLoc, range: BufRange, writer: u32, sent_from: Option<BufRange>, at: &VClock) {
        let writer = OpLoc { thread: check.thread, op: writer };
        if self.check_aborted_writer(st, check, writer) {
            return;
        }
        let seen = st.memory.write_ends.get(&writer).is_some_and(|e| e.happens_before(at));
        if !seen {
            st.memory.stale.insert(StaleRead { check, writer, range, other_send: None });
            return;
        }
        let Some(from) = sent_from else { return };
        // A recv whose write ended was finished by a transfer or a drain, which recorded its send; an aborted one
        // was reported above.
        let Some(&send) = st.memory.recv_sources.get(&writer) else {
            st.memory.stale.insert(StaleRead { check, writer, range, other_send: None });
            return;
        };
        let inside = match self.op(send).kind {
            OpKind::Send { buf, .. } => {
                buf.buf == from.buf && from.offset <= buf.offset && buf.offset + buf.len <= from.offset + from.len
            }
            _ => false,
        };
        if !inside {
            st.memory.stale.insert(StaleRead { check, writer, range, other_send: Some(send) });
        }
    }

    /// N3, V1: remembers which send the recv at `recv` matched, if a value assertion names its sending buffer.
    pub(crate) fn note_recv_source(&self, st: &mut State, recv: OpLoc, send: OpLoc) {
        if self.sourced_recvs.contains(&recv) {
            st.memory.recv_sources.insert(recv, send);
        }
    }

    /// Two P2P ops of one launch to the same peer in the same direction: they run in order (N4). Collectives of one
    /// group do not (NCCL issue 900).
    pub(crate) fn same_lane(&self, a: OpLoc, b: OpLoc) -> bool {
        match (self.info(a).nccl, self.info(b).nccl) {
            (Some(NcclRole::Send { peer: p }), Some(NcclRole::Send { peer: q }))
            | (Some(NcclRole::Recv { peer: p }), Some(NcclRole::Recv { peer: q })) => p == q,
            _ => false,
        }
    }
}
