//! Random well-formed programs for property tests and hardware agreement runs: two ranks (one GPU each), several
//! streams, events, kernels that read and write device buffers, copies to pinned memory read by the host, and
//! point-to-point exchanges (grouped, ungrouped, parity-ordered, and deliberate send-send cycles). Every choice
//! derives from one seed ([`crate::rng::Rng`]), so a program is named by its seed.
//!
//! Programs are built to run on the hardware executor as well (hw/README.md): ranges are 4-byte aligned, events
//! stay on their rank, no caching-allocator ops. Most programs start with a grouped warm-up exchange so that
//! connections exist (N7); the rest exercise first contact.

use cuorder_model::build::Builder;
use cuorder_model::program::*;

use crate::rng::Rng;

/// Knobs of the generator.
#[derive(Clone, Debug)]
pub struct GenOptions {
    /// Ops per rank besides communication, at most.
    pub max_local_ops: u32,
    /// Point-to-point exchanges, at most.
    pub max_exchanges: u32,
}

impl Default for GenOptions {
    fn default() -> Self {
        GenOptions { max_local_ops: 8, max_exchanges: 3 }
    }
}

/// Message sizes in bytes: some within NCCL's eager window, some far beyond it.
const SIZES: [u64; 6] = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20];

/// One exchange between rank 0 and rank 1, as both ranks issue it.
#[derive(Clone, Copy, Debug)]
enum Exchange {
    /// Both ranks: group { send; recv } (N4).
    Grouped,
    /// Rank 0 sends to rank 1 only.
    OneWay,
    /// Even rank sends then receives, odd rank receives then sends.
    Parity,
    /// Both ranks send then receive, ungrouped: a cycle under rendezvous (N2).
    SendFirst,
}

/// The program of `seed`, named `gen-<seed>`.
pub fn program(seed: u64, opt: &GenOptions) -> Program {
    let mut rng = Rng::new(seed);
    let mut pick = |n: u64| rng.below(n);
    let mut b = Builder::new(&format!("gen-{seed}"), 2);
    let nstreams = 2 + pick(2) as u32;
    let streams: Vec<u32> = (0..nstreams)
        .map(|i| b.stream(&format!("s{i}"), if pick(3) == 0 { StreamKind::Blocking } else { StreamKind::NonBlocking }))
        .collect();
    let events: Vec<u32> = (0..2).map(|i| b.event(&format!("e{i}"))).collect();
    let msg = SIZES[pick(SIZES.len() as u64) as usize];
    let nbufs = 3u32;
    let bufs: Vec<u32> = (0..nbufs).map(|i| b.buffer(&format!("d{i}"), msg, MemSpace::Device, false)).collect();
    let tx = b.buffer("tx", msg, MemSpace::Device, false);
    let rx = b.buffer("rx", msg, MemSpace::Device, false);
    let host = b.buffer("h", 64 << 10, MemSpace::PinnedHost, false);
    let comm_stream = streams[pick(streams.len() as u64) as usize];

    let exchanges: Vec<Exchange> = (0..1 + pick(opt.max_exchanges as u64))
        .map(|_| match pick(8) {
            0..=2 => Exchange::Grouped,
            3 => Exchange::OneWay,
            4..=5 => Exchange::Parity,
            _ => Exchange::SendFirst,
        })
        .collect();
    let warm_up = pick(10) != 0;
    // Positions (in local-op count) after which each exchange is issued, the same on both ranks.
    let nlocal = 2 + pick(opt.max_local_ops as u64 - 1) as u32;
    let mut at: Vec<u32> = exchanges.iter().map(|_| pick(nlocal as u64 + 1) as u32).collect();
    at.sort();

    for rank in 0..2u32 {
        let st = |i: u32| StreamRef { rank, index: i };
        let whole = |b: &Builder, i: u32| b.whole(rank, i);
        let peer = 1 - rank;
        let cs = st(comm_stream);
        if warm_up {
            let (s, r) = (whole(&b, tx), whole(&b, rx));
            b.op(rank, 0, OpKind::GroupStart)
                .op(rank, 0, OpKind::Send { comm: CommId(0), peer, buf: s, stream: cs })
                .op(rank, 0, OpKind::Recv { comm: CommId(0), peer, buf: r, stream: cs })
                .op(rank, 0, OpKind::GroupEnd)
                .op(rank, 0, OpKind::StreamSynchronize { stream: cs });
        }
        let mut next_ex = 0;
        for i in 0..=nlocal {
            while next_ex < exchanges.len() && at[next_ex] == i {
                let (s, r) = (whole(&b, tx), whole(&b, rx));
                let send = OpKind::Send { comm: CommId(0), peer, buf: s, stream: cs };
                let recv = OpKind::Recv { comm: CommId(0), peer, buf: r, stream: cs };
                match exchanges[next_ex] {
                    Exchange::Grouped => {
                        b.op(rank, 0, OpKind::GroupStart).op(rank, 0, send).op(rank, 0, recv).op(rank, 0, OpKind::GroupEnd);
                    }
                    Exchange::OneWay => {
                        b.op(rank, 0, if rank == 0 { send } else { recv });
                    }
                    Exchange::Parity => {
                        if rank == 0 {
                            b.op(rank, 0, send).op(rank, 0, recv);
                        } else {
                            b.op(rank, 0, recv).op(rank, 0, send);
                        }
                    }
                    Exchange::SendFirst => {
                        b.op(rank, 0, send).op(rank, 0, recv);
                    }
                }
                next_ex += 1;
            }
            if i == nlocal {
                break;
            }
            // A local op; the same random choices drive both ranks' bodies only in shape, not in detail.
            let s = st(streams[pick(streams.len() as u64) as usize]);
            let buf_pool: Vec<u32> = bufs.iter().copied().chain([tx, rx]).collect();
            let rb = |p: &mut dyn FnMut(u64) -> u64| buf_pool[p(buf_pool.len() as u64) as usize];
            let kind = match pick(10) {
                0..=4 => {
                    let mut reads = vec![];
                    let mut writes = vec![];
                    for _ in 0..pick(3) {
                        reads.push(whole(&b, rb(&mut pick)));
                    }
                    for _ in 0..1 + pick(2) {
                        writes.push(whole(&b, rb(&mut pick)));
                    }
                    reads.sort();
                    reads.dedup();
                    writes.sort();
                    writes.dedup();
                    let duration_ns = 5_000 + 5_000 * pick(40);
                    OpKind::Kernel { stream: s, name: format!("k{i}"), reads, writes, duration_ns }
                }
                5 => OpKind::EventRecord { event: EventRef { rank, index: events[pick(2) as usize] }, stream: s },
                6 => OpKind::StreamWaitEvent { stream: s, event: EventRef { rank, index: events[pick(2) as usize] } },
                7 => {
                    if pick(2) == 0 {
                        OpKind::StreamSynchronize { stream: s }
                    } else {
                        OpKind::DeviceSynchronize { rank }
                    }
                }
                8 => {
                    let src = whole(&b, rb(&mut pick));
                    let len = src.len.min(64 << 10);
                    OpKind::Memcpy {
                        stream: Some(s),
                        dst: BufRange { buf: BufRef { rank, index: host }, offset: 0, len },
                        src: BufRange { len, ..src },
                    }
                }
                _ => OpKind::HostAccess { range: whole(&b, host), write: false },
            };
            b.op(rank, 0, kind);
        }
        b.op(rank, 0, OpKind::DeviceSynchronize { rank });
    }
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_program() {
        let o = GenOptions::default();
        assert_eq!(program(3, &o), program(3, &o));
        assert_ne!(program(3, &o), program(4, &o));
    }
}
