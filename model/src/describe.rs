//! Human-readable names for ranks, threads, streams, buffers and ops, shared by every report so that a thing is
//! always called the same way ("r0 main #3 send(to r1, x, 2 GiB, s0)").

use crate::program::*;

/// Formats a byte count with a binary unit when it is exact ("2 GiB", "512 KiB", "1000 B").
pub fn bytes(n: u64) -> String {
    const UNITS: [(&str, u64); 4] = [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (u, s) in UNITS {
        if n >= s && n % s == 0 {
            return format!("{} {u}", n / s);
        }
    }
    format!("{n} B")
}

/// Formats a duration in ns with the largest exact unit.
pub fn duration_ns(n: u64) -> String {
    for (u, s) in [("s", 1_000_000_000u64), ("ms", 1_000_000), ("us", 1_000)] {
        if n >= s && n % s == 0 {
            return format!("{} {u}", n / s);
        }
    }
    format!("{n} ns")
}

impl Program {
    /// "r0 main" (or "r0" when the rank has a single thread named "main").
    pub fn thread_label(&self, rank: RankId, thread: u32) -> String {
        format!("r{rank} {}", self.ranks[rank as usize].threads[thread as usize].name)
    }

    /// "s0" for a stream of `from_rank`, "s0@1" for a stream of another rank.
    pub fn stream_label(&self, s: StreamRef, from_rank: RankId) -> String {
        let n = &self.stream(s).name;
        if s.rank == from_rank { n.clone() } else { format!("{n}@{}", s.rank) }
    }

    /// "x", or "x[off..off+len]" for a part of the buffer.
    pub fn range_label(&self, r: &BufRange) -> String {
        let b = self.buffer(r.buf);
        if r.offset == 0 && r.len == b.bytes {
            b.name.clone()
        } else {
            format!("{}[{}..{}]", b.name, r.offset, r.offset + r.len)
        }
    }

    fn ranges(&self, rs: &[BufRange]) -> String {
        rs.iter().map(|r| self.range_label(r)).collect::<Vec<_>>().join(", ")
    }

    /// A one-line description of an op as written by `rank`, e.g. "send(to r1, x, 2 GiB, s0)".
    pub fn op_label(&self, rank: RankId, op: &OpKind) -> String {
        let s = |st: &StreamRef| self.stream_label(*st, rank);
        let e = |ev: &EventRef| {
            let n = self.event_name(*ev);
            if ev.rank == rank { n.to_string() } else { format!("{n}@{}", ev.rank) }
        };
        let comm = |c: &CommId| &self.comms[c.0 as usize].name;
        let opt_stream = |o: &Option<StreamRef>| o.as_ref().map(|x| format!(", {}", s(x))).unwrap_or_default();
        // ", R: ..; W: .." for the buffers an item reads and writes (nothing when it touches none).
        let accesses = |reads: &[BufRange], writes: &[BufRange]| {
            let mut parts = vec![];
            if !reads.is_empty() {
                parts.push(format!("R: {}", self.ranges(reads)));
            }
            if !writes.is_empty() {
                parts.push(format!("W: {}", self.ranges(writes)));
            }
            if parts.is_empty() { String::new() } else { format!(", {}", parts.join("; ")) }
        };
        match op {
            OpKind::Kernel { stream, name, reads, writes, .. } => {
                format!("kernel {name}({}{})", s(stream), accesses(reads, writes))
            }
            OpKind::Memset { stream, dst } => format!("memset({}{})", self.range_label(dst), opt_stream(stream)),
            OpKind::Memcpy { stream, dst, src } => format!(
                "memcpy{}({} <- {}, {}{})",
                if stream.is_some() { "_async" } else { "" },
                self.range_label(dst),
                self.range_label(src),
                bytes(dst.len),
                opt_stream(stream)
            ),
            OpKind::EventRecord { event, stream } => format!("record({}, {})", e(event), s(stream)),
            OpKind::StreamWaitEvent { stream, event } => format!("wait({}, {})", e(event), s(stream)),
            OpKind::EventQuery { event } => format!("event_query({})", e(event)),
            OpKind::EventSynchronize { event } => format!("event_sync({})", e(event)),
            OpKind::StreamSynchronize { stream } => format!("stream_sync({})", s(stream)),
            OpKind::StreamQuery { stream } => format!("stream_query({})", s(stream)),
            OpKind::DeviceSynchronize { rank: r } => {
                if *r == rank { "device_sync".into() } else { format!("device_sync(r{r})") }
            }
            OpKind::HostSleep { ns } => format!("sleep({})", duration_ns(*ns)),
            OpKind::HostAccess { range, write } => {
                format!("host_{}({})", if *write { "write" } else { "read" }, self.range_label(range))
            }
            OpKind::Barrier { barrier } => format!("barrier({})", self.barriers[*barrier as usize].name),
            OpKind::CommInit { comm: c } => format!("comm_init({})", comm(c)),
            OpKind::CommSplit { parent, comm: c, .. } => match c {
                Some(c) => format!("comm_split({} -> {})", comm(parent), comm(c)),
                None => format!("comm_split({}, no color)", comm(parent)),
            },
            OpKind::CommPoll { comm: c } => format!("poll({})", comm(c)),
            OpKind::CommAbort { comm: c } => format!("comm_abort({})", comm(c)),
            OpKind::CommFinalize { comm: c } => format!("comm_finalize({})", comm(c)),
            OpKind::CommDestroy { comm: c } => format!("comm_destroy({})", comm(c)),
            OpKind::Send { comm: c, peer, buf, stream } => {
                format!("send(to r{peer}, {}, {}, {}, {})", self.range_label(buf), bytes(buf.len), s(stream), comm(c))
            }
            OpKind::Recv { comm: c, peer, buf, stream } => format!(
                "recv(from r{peer}, {}, {}, {}, {})",
                self.range_label(buf),
                bytes(buf.len),
                s(stream),
                comm(c)
            ),
            OpKind::Expect { range, stream, writer, sent_from: None } => {
                format!("expect({}, written by #{writer}{})", self.range_label(range), opt_stream(stream))
            }
            OpKind::Expect { range, stream, writer, sent_from: Some(from) } => format!(
                "expect({}, written by #{writer} with data sent from r{} {}{})",
                self.range_label(range),
                from.buf.rank,
                self.range_label(from),
                opt_stream(stream)
            ),
            OpKind::GroupStart => "group_start".into(),
            OpKind::GroupEnd => "group_end".into(),
            OpKind::Collective { comm: c, kind, send, recv, stream } => {
                let k = match kind {
                    CollectiveKind::AllReduce => "all_reduce".to_string(),
                    CollectiveKind::Broadcast { root } => format!("broadcast[root r{root}]"),
                    CollectiveKind::AllGather => "all_gather".into(),
                    CollectiveKind::ReduceScatter => "reduce_scatter".into(),
                    CollectiveKind::AllToAll => "all_to_all".into(),
                    CollectiveKind::Reduce { root } => format!("reduce[root r{root}]"),
                    CollectiveKind::Gather { root } => format!("gather[root r{root}]"),
                    CollectiveKind::Scatter { root } => format!("scatter[root r{root}]"),
                };
                format!("{k}({} -> {}, {}, {})", self.range_label(send), self.range_label(recv), s(stream), comm(c))
            }
            OpKind::Alloc { buf, stream } => format!("alloc({}, {})", self.buffer(*buf).name, s(stream)),
            OpKind::Free { buf } => format!("free({})", self.buffer(*buf).name),
            OpKind::RecordStream { buf, stream } => format!("record_stream({}, {})", self.buffer(*buf).name, s(stream)),
            OpKind::CudaFree { buf } if buf.rank != rank => format!("cuda_free({}@{})", self.buffer(*buf).name, buf.rank),
            OpKind::CudaFree { buf } => format!("cuda_free({})", self.buffer(*buf).name),
            OpKind::CudaMalloc { bytes: n, .. } => format!("cuda_malloc({})", bytes(*n)),
            OpKind::CudaMallocHost { bytes: n, .. } => format!("cuda_malloc_host({})", bytes(*n)),
            OpKind::LoadModule { module, .. } => format!("load_module({module})"),
            OpKind::EmptyCache { .. } => "empty_cache".into(),
            OpKind::HostFunc { stream, name, reads, writes, calls_cuda, .. } => {
                let cuda = if *calls_cuda { ", calls CUDA" } else { "" };
                format!("host_func {name}({}{}{cuda})", s(stream), accesses(reads, writes))
            }
        }
    }

    /// "r0 main #3 send(...)": the op at index `op` of thread `thread` of `rank`, numbered from 0.
    pub fn op_full_label(&self, rank: RankId, thread: u32, op: u32) -> String {
        let o = &self.ranks[rank as usize].threads[thread as usize].ops[op as usize];
        format!("{} #{op} {}", self.thread_label(rank, thread), self.op_label(rank, &o.kind))
    }

    /// " (line L:C)" when the op has a source position, else "".
    pub fn op_where(&self, rank: RankId, thread: u32, op: u32) -> String {
        let o = &self.ranks[rank as usize].threads[thread as usize].ops[op as usize];
        match (o.origin.line, o.origin.column) {
            (Some(l), Some(c)) => format!(" (line {l}:{c})"),
            _ => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(bytes(2 << 30), "2 GiB");
        assert_eq!(bytes(1000), "1000 B");
        assert_eq!(bytes(512 << 10), "512 KiB");
        assert_eq!(duration_ns(10_000_000_000), "10 s");
        assert_eq!(duration_ns(1500), "1500 ns");
    }
}

/// `n` and `word`, with an `s` unless `n` is 1 ("1 rank", "2 ranks", "1 execution"): every message that counts
/// things says it this way.
pub fn count(n: u64, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}
