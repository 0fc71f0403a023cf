//! The coverage generator: seeded random programs that exercise the whole single-GPU model — several host threads,
//! every stream kind (legacy, blocking, non-blocking, each thread's per-thread default stream), events with
//! re-records, waits, queries, every synchronize, copies in every direction between device, pinned and pageable
//! memory (synchronous and asynchronous), memsets, host reads and writes, host barriers, host sleeps, kernels of
//! chosen durations, and the caching allocator (`Alloc`/`Free`/`RecordStream` on pooled buffers, laid out so that
//! the reuse race P4 happens, or is prevented by `record_stream` or an event). Choices are weighted so that programs
//! with races and programs without both occur often.
//!
//! Every choice derives from one seed ([`crate::rng::Rng`]); [`COVER_VERSION`] names the generator's behaviour:
//! the same (version, seed, options) always gives the same program, byte for byte, so recorded hardware runs name
//! their programs by seed. Any change to what this module generates must bump [`COVER_VERSION`].
//!
//! Programs run on the hardware executor as they are (4-byte aligned ranges, events and pooled buffers used only
//! where the executor can reproduce them, each per-thread stream only by its own thread). With `ranks > 1` every
//! rank gets its own local ops and the ranks meet in collectives on the world communicator (for multi-GPU hosts).

use cuorder_model::build::Builder;
use cuorder_model::program::*;

use crate::rng::Rng;

/// The generator's behaviour version: recorded with every batch of programs named by seed.
pub const COVER_VERSION: u32 = 1;

/// Knobs of the coverage generator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoverOptions {
    /// Ranks (one GPU each). 1 for a single-GPU host.
    pub ranks: u32,
    /// Host threads per rank, at most (1 to 3 are chosen).
    pub max_threads: u32,
    /// Local ops over all threads of a rank, roughly at most (the allocator pattern comes on top).
    pub max_ops: u32,
    /// Use the caching allocator (pooled buffers).
    pub pool: bool,
}

impl Default for CoverOptions {
    fn default() -> Self {
        CoverOptions { ranks: 1, max_threads: 3, max_ops: 6, pool: true }
    }
}

/// Kernel durations to choose from, in ns (0 = as short as the GPU can).
const DURATIONS: [u64; 6] = [0, 2_000, 20_000, 200_000, 1_000_000, 2_000_000];
/// Buffer sizes to choose from, in bytes.
const SIZES: [u64; 3] = [4 << 10, 64 << 10, 1 << 20];

struct G {
    rng: Rng,
}

impl G {
    fn below(&mut self, n: u64) -> u64 {
        self.rng.below(n)
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Indices of one rank's declarations (the same on every rank).
struct Decl {
    /// Named streams besides the legacy one: their indices.
    named: Vec<u32>,
    /// Per-thread default stream of each thread.
    per_thread: Vec<u32>,
    events: Vec<u32>,
    dev: Vec<u32>,
    pinned: Vec<u32>,
    pageable: Vec<u32>,
    pa: u32,
    pb: u32,
    coll_send: u32,
    coll_recv: u32,
    size: u64,
    pb_size: u64,
}

/// A part of a buffer: whole, first half or second half (4-byte aligned since sizes are multiples of 8).
fn part(g: &mut G, rank: RankId, buf: u32, size: u64) -> BufRange {
    let b = BufRef { rank, index: buf };
    match g.below(5) {
        0 => BufRange { buf: b, offset: 0, len: size / 2 },
        1 => BufRange { buf: b, offset: size / 2, len: size / 2 },
        _ => BufRange { buf: b, offset: 0, len: size },
    }
}

/// The program of `seed`, named `cover-<seed>`.
pub fn program(seed: u64, opt: &CoverOptions) -> Program {
    let mut g = G { rng: Rng::new(seed) };
    let ranks = opt.ranks.max(1);
    let mut b = Builder::new(&format!("cover-{seed}"), ranks);
    let threads = 1 + g.below(opt.max_threads.max(1) as u64) as u32;
    for t in 1..threads {
        b.thread(&format!("t{t}"));
    }
    let kinds = [StreamKind::NonBlocking, StreamKind::NonBlocking, StreamKind::Blocking];
    let named: Vec<u32> = ["sA", "sB", "sC"].iter().map(|n| {
        let k = g.pick(&kinds);
        b.stream(n, k)
    }).collect();
    let thread_names: Vec<String> = (0..threads).map(|t| if t == 0 { "main".to_string() } else { format!("t{t}") }).collect();
    let per_thread: Vec<u32> =
        thread_names.iter().map(|n| b.stream(&format!("sPT.{n}"), StreamKind::PerThreadDefault)).collect();
    let events: Vec<u32> = (0..2).map(|i| b.event(&format!("e{i}"))).collect();
    let size = g.pick(&SIZES);
    let dev: Vec<u32> = (0..3).map(|i| b.buffer(&format!("d{i}"), size, MemSpace::Device, false)).collect();
    let pinned: Vec<u32> = (0..2).map(|i| b.buffer(&format!("p{i}"), size, MemSpace::PinnedHost, false)).collect();
    let pageable: Vec<u32> = (0..2).map(|i| b.buffer(&format!("h{i}"), size, MemSpace::PageableHost, false)).collect();
    let pb_size = match g.below(8) {
        0 => size / 2,
        1 => size * 2,
        _ => size,
    };
    let pa = b.buffer("pa", size, MemSpace::Device, true);
    let pb = b.buffer("pb", pb_size, MemSpace::Device, true);
    let (coll_send, coll_recv) = if ranks > 1 {
        (
            b.buffer("cs", size * ranks as u64, MemSpace::Device, false),
            b.buffer("cr", size * ranks as u64, MemSpace::Device, false),
        )
    } else {
        (0, 0)
    };
    let d = Decl { named, per_thread, events, dev, pinned, pageable, pa, pb, coll_send, coll_recv, size, pb_size };

    // Ops per thread (before the allocator pattern): the budget split over the threads.
    let per_max = (opt.max_ops.max(2) / threads).max(2) as u64;
    let barrier_round = threads > 1 && g.chance(40);
    let mut barriers: Vec<BarrierDecl> = vec![];
    // The collectives every rank issues, in order (kind, send bytes, recv bytes).
    let collectives: Vec<(CollectiveKind, u64, u64)> = if ranks > 1 {
        (0..1 + g.below(2))
            .map(|_| {
                let n = ranks as u64;
                match g.below(4) {
                    0 => (CollectiveKind::AllReduce, d.size, d.size),
                    1 => (CollectiveKind::Broadcast { root: g.below(n) as u32 }, d.size, d.size),
                    2 => (CollectiveKind::AllGather, d.size, d.size * n),
                    _ => (CollectiveKind::ReduceScatter, d.size * n, d.size),
                }
            })
            .collect()
    } else {
        vec![]
    };
    for rank in 0..ranks {
        // The thread that runs the allocator pattern, if any; the other threads then get fewer ops, so that the
        // model's exploration stays small (their ops interleave with the pattern's).
        let pool_thread = (opt.pool && g.chance(70)).then(|| g.below(threads as u64) as u32);
        let mut bodies: Vec<Vec<OpKind>> = vec![];
        for t in 0..threads {
            let max = match pool_thread {
                Some(p) if p != t => (per_max / 2).max(1),
                _ => per_max,
            };
            let n = 1 + g.below(max) as usize;
            let ops: Vec<OpKind> = (0..n).map(|_| local_op(&mut g, &d, rank, t)).collect();
            bodies.push(ops);
        }
        if let Some(t) = pool_thread {
            let pattern = pool_pattern(&mut g, &d, rank, t);
            bodies[t as usize] = merge(&mut g, std::mem::take(&mut bodies[t as usize]), pattern);
        }
        if barrier_round {
            let id = barriers.len() as u32;
            barriers.push(BarrierDecl {
                name: format!("phase{rank}"),
                participants: (0..threads).map(|t| (rank, t)).collect(),
            });
            for body in bodies.iter_mut() {
                let at = g.below(body.len() as u64 + 1) as usize;
                body.insert(at, OpKind::Barrier { barrier: id });
            }
        }
        for &(kind, sl, rl) in &collectives {
            // Collectives on the world communicator, issued by thread 0 of every rank in the same order (C1).
            let send = BufRange { buf: BufRef { rank, index: d.coll_send }, offset: 0, len: sl };
            let recv = BufRange { buf: BufRef { rank, index: d.coll_recv }, offset: 0, len: rl };
            let stream = StreamRef { rank, index: g.pick(&d.named) };
            let at = g.below(bodies[0].len() as u64 + 1) as usize;
            let after = bodies[0].iter().rposition(|k| matches!(k, OpKind::Collective { .. })).map_or(0, |i| i + 1);
            bodies[0].insert(at.max(after), OpKind::Collective { comm: CommId(0), kind, send, recv, stream });
        }
        for (t, body) in bodies.into_iter().enumerate() {
            for k in body {
                b.op(rank, t as u32, k);
            }
        }
    }
    let mut p = b.finish();
    p.barriers = barriers;
    p
}

/// The streams thread `t` may name: the legacy stream, the named streams and its own per-thread stream.
fn streams_of(d: &Decl, t: u32) -> Vec<u32> {
    let mut s = vec![0];
    s.extend(&d.named);
    s.push(d.per_thread[t as usize]);
    s
}

fn stream(g: &mut G, d: &Decl, rank: RankId, t: u32) -> StreamRef {
    let s = streams_of(d, t);
    // Named streams twice as likely as the legacy and per-thread ones.
    let i = match g.below(8) {
        0 => 0,
        1 => s.len() - 1,
        x => 1 + (x as usize - 2) % d.named.len(),
    };
    StreamRef { rank, index: s[i] }
}

/// A buffer a kernel or memset may touch (device or pinned memory; never pooled).
fn device_visible(g: &mut G, d: &Decl) -> u32 {
    if g.chance(85) {
        g.pick(&d.dev)
    } else {
        g.pick(&d.pinned)
    }
}

fn kernel(g: &mut G, d: &Decl, rank: RankId, s: StreamRef, name: String) -> OpKind {
    let mut reads = vec![];
    let mut writes = vec![];
    for _ in 0..g.below(3) {
        let b = device_visible(g, d);
        reads.push(part(g, rank, b, d.size));
    }
    for _ in 0..g.below(2) + u64::from(reads.is_empty()) {
        let b = device_visible(g, d);
        writes.push(part(g, rank, b, d.size));
    }
    reads.sort();
    reads.dedup();
    writes.sort();
    writes.dedup();
    let duration_ns = g.pick(&DURATIONS);
    OpKind::Kernel { stream: s, name, reads, writes, duration_ns }
}

/// One random op of thread `t` of `rank` that does not touch pooled buffers.
fn local_op(g: &mut G, d: &Decl, rank: RankId, t: u32) -> OpKind {
    let s = stream(g, d, rank, t);
    let ev = |g: &mut G| EventRef { rank, index: g.pick(&d.events) };
    match g.below(100) {
        0..=29 => {
            let n = g.below(1000);
            kernel(g, d, rank, s, format!("k{n}"))
        }
        30..=38 => OpKind::EventRecord { event: ev(g), stream: s },
        39..=46 => OpKind::StreamWaitEvent { stream: s, event: ev(g) },
        47..=49 => OpKind::EventQuery { event: ev(g) },
        50..=51 => OpKind::StreamQuery { stream: s },
        52..=54 => OpKind::EventSynchronize { event: ev(g) },
        55..=57 => OpKind::StreamSynchronize { stream: s },
        58..=59 => OpKind::DeviceSynchronize { rank },
        60..=73 => {
            // A copy between two different buffers of any memory kinds, synchronous or on a stream.
            let spaces = [0u8, 0, 1, 2];
            let (sk, dk) = (g.pick(&spaces), g.pick(&spaces));
            let pool = |k: u8| match k {
                0 => &d.dev[..],
                1 => &d.pinned[..],
                _ => &d.pageable[..],
            };
            let src_b = g.pick(pool(sk));
            let mut dst_b = g.pick(pool(dk));
            if dst_b == src_b {
                // Another buffer of the same kind.
                let same = pool(dk);
                dst_b = same[(same.iter().position(|&x| x == src_b).unwrap_or(0) + 1) % same.len()];
            }
            let src = part(g, rank, src_b, d.size);
            let dst = part(g, rank, dst_b, d.size);
            let len = src.len.min(dst.len);
            let stream = if g.chance(35) { None } else { Some(s) };
            OpKind::Memcpy { stream, dst: BufRange { len, ..dst }, src: BufRange { len, ..src } }
        }
        74..=78 => {
            let bx = device_visible(g, d);
            let dst = part(g, rank, bx, d.size);
            OpKind::Memset { stream: if g.chance(30) { None } else { Some(s) }, dst }
        }
        79..=92 => {
            let bx = if g.chance(50) { g.pick(&d.pinned) } else { g.pick(&d.pageable) };
            let range = part(g, rank, bx, d.size);
            OpKind::HostAccess { range, write: g.chance(40) }
        }
        93..=95 => OpKind::HostSleep { ns: g.pick(&[100_000u64, 500_000, 1_000_000]) },
        _ => {
            let n = g.below(1000);
            kernel(g, d, rank, s, format!("k{n}"))
        }
    }
}

/// The caching-allocator pattern of one thread (P4): `pa` is allocated on stream X, written there and used on
/// another stream Y (often behind a long kernel, so that the use runs late), optionally held by `record_stream(Y)`
/// or ordered by an event, then freed; `pb` is allocated (usually on X, so the block may be reused), read before or
/// after its own write, and possibly freed.
fn pool_pattern(g: &mut G, d: &Decl, rank: RankId, t: u32) -> Vec<OpKind> {
    let s = streams_of(d, t);
    let x = StreamRef { rank, index: g.pick(&s) };
    let mut y = StreamRef { rank, index: g.pick(&s) };
    if y == x {
        y = StreamRef { rank, index: if x.index == d.named[0] { d.named[1] } else { d.named[0] } };
    }
    let pa = BufRef { rank, index: d.pa };
    let pb = BufRef { rank, index: d.pb };
    let whole_a = BufRange { buf: pa, offset: 0, len: d.size };
    let pb_len = if g.chance(30) { d.pb_size / 2 } else { d.pb_size };
    let whole_b = BufRange { buf: pb, offset: 0, len: pb_len };
    let scratch = BufRange { buf: BufRef { rank, index: d.dev[2] }, offset: 0, len: d.size / 2 };
    let mut ops = vec![OpKind::Alloc { buf: pa, stream: x }];
    if g.chance(75) {
        ops.push(OpKind::Kernel { stream: x, name: "fill_a".into(), reads: vec![], writes: vec![whole_a], duration_ns: 0 });
    } else {
        ops.push(OpKind::Memset { stream: Some(x), dst: whole_a });
    }
    let ordered = g.chance(35);
    if ordered {
        ops.push(OpKind::EventRecord { event: EventRef { rank, index: d.events[0] }, stream: x });
        ops.push(OpKind::StreamWaitEvent { stream: y, event: EventRef { rank, index: d.events[0] } });
    }
    if g.chance(70) {
        let dur = g.pick(&[200_000u64, 1_000_000, 2_000_000]);
        ops.push(OpKind::Kernel { stream: y, name: "delay".into(), reads: vec![], writes: vec![scratch], duration_ns: dur });
    }
    let use_writes = g.chance(30);
    ops.push(OpKind::Kernel {
        stream: y,
        name: "use_a".into(),
        reads: vec![whole_a],
        writes: if use_writes { vec![whole_a] } else { vec![] },
        duration_ns: g.pick(&[0u64, 20_000]),
    });
    if g.chance(40) {
        ops.push(OpKind::RecordStream { buf: pa, stream: y });
    }
    ops.push(OpKind::Free { buf: pa });
    let bstream = if g.chance(80) { x } else { y };
    ops.push(OpKind::Alloc { buf: pb, stream: bstream });
    let read_before = g.chance(35);
    let read_b = OpKind::Kernel { stream: bstream, name: "read_b".into(), reads: vec![whole_b], writes: vec![], duration_ns: 0 };
    if read_before {
        ops.push(read_b.clone());
    }
    ops.push(OpKind::Kernel { stream: bstream, name: "fill_b".into(), reads: vec![], writes: vec![whole_b], duration_ns: 0 });
    if !read_before || g.chance(30) {
        ops.push(read_b);
    }
    if g.chance(40) {
        ops.push(OpKind::Free { buf: pb });
    }
    ops
}

/// Interleaves `pattern` into `body`, keeping the order of each.
fn merge(g: &mut G, body: Vec<OpKind>, pattern: Vec<OpKind>) -> Vec<OpKind> {
    let mut out = Vec::with_capacity(body.len() + pattern.len());
    let (mut i, mut j) = (0, 0);
    while i < body.len() || j < pattern.len() {
        let take_body = j == pattern.len() || (i < body.len() && g.chance(30));
        if take_body {
            out.push(body[i].clone());
            i += 1;
        } else {
            out.push(pattern[j].clone());
            j += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_bytes() {
        let o = CoverOptions::default();
        for seed in 0..50 {
            let a = ron::to_string(&program(seed, &o)).unwrap();
            let b = ron::to_string(&program(seed, &o)).unwrap();
            assert_eq!(a, b);
        }
        assert_ne!(program(3, &o), program(4, &o));
    }

    #[test]
    fn covers_every_op_kind_and_stream_kind_over_a_few_hundred_seeds() {
        let o = CoverOptions::default();
        let mut kinds = std::collections::BTreeSet::new();
        let mut stream_kinds = std::collections::BTreeSet::new();
        let mut sync_copy_dirs = std::collections::BTreeSet::new();
        for seed in 0..300 {
            let p = program(seed, &o);
            for t in &p.ranks[0].threads {
                for op in &t.ops {
                    kinds.insert(op.kind.name());
                    if let Some(s) = op.kind.info(&p, 0).stream {
                        stream_kinds.insert(format!("{:?}", p.stream(s).kind));
                    }
                    if let OpKind::Memcpy { stream, dst, src } = &op.kind {
                        sync_copy_dirs.insert((stream.is_some(), p.buffer(src.buf).space as u8, p.buffer(dst.buf).space as u8));
                    }
                }
            }
        }
        for k in [
            "Kernel", "Memset", "Memcpy", "EventRecord", "StreamWaitEvent", "EventQuery", "EventSynchronize",
            "StreamSynchronize", "StreamQuery", "DeviceSynchronize", "HostSleep", "HostRead", "HostWrite", "Barrier", "Alloc",
            "Free", "RecordStream",
        ] {
            assert!(kinds.contains(k), "{k} never generated: {kinds:?}");
        }
        assert_eq!(stream_kinds.len(), 4, "{stream_kinds:?}");
        // Every (sync/async, src kind, dst kind).
        assert_eq!(sync_copy_dirs.len(), 18, "{sync_copy_dirs:?}");
    }

    /// Every range lies inside its buffer and is 4-byte aligned (the hardware executor stamps words).
    #[test]
    fn ranges_fit_their_buffers() {
        let o = CoverOptions::default();
        for seed in 0..300 {
            let p = program(seed, &o);
            for t in &p.ranks[0].threads {
                for op in &t.ops {
                    for a in op.kind.info(&p, 0).accesses {
                        let r = a.range;
                        assert!(r.offset + r.len <= p.buffer(r.buf).bytes, "seed {seed}: {:?}", op.kind);
                        assert!(r.offset % 4 == 0 && r.len % 4 == 0, "seed {seed}: {:?}", op.kind);
                    }
                }
            }
        }
    }

    #[test]
    fn several_ranks_meet_in_collectives() {
        let o = CoverOptions { ranks: 2, ..CoverOptions::default() };
        let p = program(7, &o);
        assert_eq!(p.ranks.len(), 2);
        let colls = |r: usize| p.ranks[r].threads[0].ops.iter().filter(|o| matches!(o.kind, OpKind::Collective { .. })).count();
        assert!(colls(0) >= 1 && colls(0) == colls(1));
    }
}
