//! The caching allocator (P4): `Free` hands a block back to its allocation stream's pool at once; a later `Alloc` on
//! that stream may take it (a choice the explorer makes), aliasing the old buffer's bytes; `RecordStream` holds the
//! block until the recorded stream's work at free time has ended.

use super::*;

impl<'p> Semantics<'p> {
    /// Pool blocks an `Alloc(buf)` on `stream` may take (P4): same stream, large enough, and every item recorded
    /// with `record_stream` at free time has ended.
    pub fn reusable(&self, st: &State, buf: BufRef, stream: StreamRef) -> Vec<usize> {
        let need = self.program.buffer(buf).bytes;
        st.pool
            .free
            .iter()
            .enumerate()
            .filter(|(_, b)| {
                b.stream == stream
                    && b.bytes >= need
                    && b.block.buf.rank == buf.rank
                    && b.not_before.iter().all(|k| st.item_done(*k))
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// Checks that every pooled buffer an op names is allocated (P4: using a freed tensor is undefined).
    pub(crate) fn check_allocated(&self, st: &mut State, loc: OpLoc, ranges: &[BufRange]) -> bool {
        for r in ranges {
            if st.pool.device_freed.contains(&r.buf) {
                let name = &self.program.buffer(r.buf).name;
                let msg = format!("{} uses {name}, which cudaFree has released (a use after free)", self.op_label(loc));
                self.set_undefined(st, Rule::S7, msg, vec![loc]);
                return false;
            }
            if self.program.buffer(r.buf).pooled && !st.pool.allocated.contains_key(&r.buf) {
                let name = &self.program.buffer(r.buf).name;
                let msg = format!(
                    "{} uses pooled buffer {name}, which is not allocated (never allocated, or freed)",
                    self.op_label(loc)
                );
                self.set_undefined(st, Rule::P4, msg, vec![loc]);
                return false;
            }
        }
        true
    }

    pub(crate) fn alloc(&self, st: &mut State, loc: OpLoc, buf: BufRef, stream: StreamRef, choice: u32, fx: &mut Effects) {
        let t = loc.thread;
        if st.pool.allocated.contains_key(&buf) {
            let msg = format!("{} allocates a buffer that is already allocated", self.op_label(loc));
            return self.set_undefined(st, Rule::P4, msg, vec![loc]);
        }
        let bytes = self.program.buffer(buf).bytes;
        let (block, block_bytes) = if choice == 0 {
            let n = st.pool.alloc_count.entry(buf).or_default();
            *n += 1;
            fx.alloc = Some(AllocOutcome::Fresh);
            (BlockId { buf, generation: *n }, bytes)
        } else {
            let idx = self.reusable(st, buf, stream)[(choice - 1) as usize];
            let b = st.pool.free.remove(idx);
            // P4: the allocator saw the recorded streams' events complete (cudaEventQuery), which orders their work
            // before this allocation.
            for k in &b.not_before {
                let end = st.item(*k).end().cloned().expect("a recorded item has ended");
                st.host.threads[t as usize].clock.join(&end);
            }
            fx.alloc = Some(AllocOutcome::Reused(b.block));
            (b.block, b.bytes)
        };
        st.pool.allocated.insert(buf, Allocation { block, block_bytes, stream, recorded: Default::default() });
        self.advance(st, t);
    }

    pub(crate) fn free(&self, st: &mut State, loc: OpLoc, buf: BufRef) {
        match st.pool.allocated.remove(&buf) {
            None => {
                let msg = format!("{} frees a buffer that is not allocated", self.op_label(loc));
                self.set_undefined(st, Rule::P4, msg, vec![loc])
            }
            Some(a) => {
                // P4: the block returns to its allocation stream's pool at once; `record_stream` holds it until the
                // recorded streams' work as of now has ended.
                let not_before = a.recorded.iter().filter_map(|s| self.tail(st, *s)).collect();
                st.pool.free.push(PoolBlock { block: a.block, bytes: a.block_bytes, stream: a.stream, not_before });
                self.advance(st, loc.thread);
            }
        }
    }

    pub(crate) fn record_stream(&self, st: &mut State, loc: OpLoc, buf: BufRef, stream: StreamRef) {
        match st.pool.allocated.get_mut(&buf) {
            None => {
                let msg = format!("{} names a buffer that is not allocated", self.op_label(loc));
                self.set_undefined(st, Rule::P4, msg, vec![loc])
            }
            Some(a) => {
                if stream != a.stream {
                    a.recorded.insert(stream);
                }
                self.advance(st, loc.thread);
            }
        }
    }
}
