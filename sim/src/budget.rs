//! Estimates of what the explorer holds in memory, for its memory budget ([`crate::explore::Limits`]): the heap
//! and inline bytes of a model state, counted from its collections (vector clocks dominate; a clock's shared base
//! is counted as its fair share among the clocks holding it).

use std::mem::size_of;

use cuorder_model::clock::VClock;
use cuorder_model::semantics::{Access, ItemKind, State};

fn clock(c: &VClock) -> usize {
    size_of::<VClock>() + c.heap_bytes()
}

fn opt_clock(c: &Option<VClock>) -> usize {
    c.as_ref().map_or(size_of::<Option<VClock>>(), clock)
}

/// Approximate bytes one [`State`] occupies (inline plus heap), in bytes. Within a small factor of the truth; it
/// grows with the number of agents times the number of clocks held, which is what makes large programs expensive.
pub fn state_bytes(st: &State) -> usize {
    // Per-entry overhead of a BTreeMap node slot, roughly.
    const NODE: usize = 16;
    let mut n = size_of::<State>();
    for t in &st.host.threads {
        n += size_of_val(t) + clock(&t.clock) + t.group_ops.capacity() * 4 + t.answers.capacity();
    }
    for round in st.host.barrier_arrived.values() {
        n += NODE + round.values().map(|c| NODE + clock(c)).sum::<usize>();
    }
    n += st.host.barrier_rounds.len() * (NODE + 16);
    for (q, _) in &st.streams.queues {
        n += 32 + q.capacity() * 12;
    }
    n += st.streams.stream_clock.iter().map(clock).sum::<usize>();
    for item in st.streams.items.values() {
        n += NODE + size_of_val(item) + clock(&item.clock);
        n += item.streams.capacity() * 8 + (item.deps.capacity() + item.waits.capacity()) * 12 + item.blocks.capacity() * 24;
        if let ItemKind::Launch { ops, clocks, .. } = &item.kind {
            n += ops.iter().map(size_of_val).sum::<usize>() + size_of_val(&**clocks) + opt_clock(&clocks.start) + opt_clock(&clocks.finished);
        }
    }
    n += st.streams.event_binding.len() * (NODE + 20);
    n += (st.nccl.comm_tail.len() + st.nccl.p2p.len() + st.nccl.p2p_next.len() + st.nccl.coll_next.len()) * (NODE + 32);
    n += st.nccl.coll.values().map(|m| NODE + m.len() * (NODE + 24)).sum::<usize>();
    n += (st.nccl.eager_used.len() + st.nccl.connected.len() + st.nccl.issuer.len()) * (NODE + 32);
    n += st.nccl.init_arrived.values().map(|m| NODE + m.values().map(|c| NODE + clock(c)).sum::<usize>()).sum::<usize>();
    for list in st.memory.accesses.values() {
        n += NODE + list.capacity() * size_of::<Access>() + list.iter().map(|a| clock(&a.start)).sum::<usize>();
    }
    n += st.memory.races.iter().map(|r| NODE + size_of_val(r) + clock(&r.first.start) + clock(&r.second.start)).sum::<usize>();
    n += st.pool.allocated.len() * (NODE + 64) + st.pool.free.len() * 64 + st.pool.alloc_count.len() * (NODE + 12);
    n
}

/// The resident memory of this process (`VmRSS` in `/proc/self/status`), in bytes; `None` where the system does not
/// report it (not Linux) or it cannot be read. The memory budget compares it with the limit besides the estimate
/// of [`state_bytes`], which misses what states share and allocator slack: before 2026-12-03 `explore --strategy
/// dpor` held 8.4 GB of a 1,024-stage pipeline within its 4 GiB budget, and `check` about three times its estimate.
pub fn resident_bytes() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut words = line["VmRSS:".len()..].split_whitespace();
    let n: usize = words.next()?.parse().ok()?;
    (words.next()? == "kB").then(|| n.saturating_mul(1024))
}

/// Samples [`resident_bytes`] at most every [`RESIDENT_EVERY_MS`] ms of wall time (a search asks on every state; a
/// read of `/proc` costs tens of microseconds: under 1% at this rate), returning the last sample in between.
pub(crate) struct ResidentMeter {
    last_ms: Option<u128>,
    bytes: usize,
}

/// How often [`ResidentMeter`] reads the resident memory, in milliseconds.
pub(crate) const RESIDENT_EVERY_MS: u128 = 5;

impl ResidentMeter {
    pub(crate) fn new() -> ResidentMeter {
        ResidentMeter { last_ms: None, bytes: 0 }
    }

    /// The resident bytes (0 where not reported), read again if `now_ms` (ms since the search started) is
    /// [`RESIDENT_EVERY_MS`] past the last read.
    pub(crate) fn bytes(&mut self, now_ms: u128) -> usize {
        if self.last_ms.is_none_or(|t| now_ms >= t + RESIDENT_EVERY_MS) {
            self.last_ms = Some(now_ms);
            self.bytes = resident_bytes().unwrap_or(0);
        }
        self.bytes
    }
}
