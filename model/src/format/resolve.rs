//! Name resolution and the checks of a single op: turns one expanded surface op of one (rank, thread) into an
//! [`OpKind`], reporting unknown names, out-of-bounds slices, wrong memory spaces, events recorded on another
//! device, non-members and bad peers, and collective size rules.

use super::decls::{size, Decls, LEGACY_STREAM, PER_THREAD_STREAM};
use super::diagnostic::did_you_mean;
use super::expand::{Item, Leaf, Scope};
use super::instantiate::instantiate;
use super::issues::{Issue, Issues};
use super::span_index::{field, index, SpanIndex};
use super::surface::{BufArg, Duration, ExprArg, Peer, Root, SOp, SWriter, SimplePeer};
use super::units::{parse_duration, DURATION_HELP};
use super::DEFAULT_KERNEL_NS;
use crate::program::{
    member_position,
    BarrierDecl, BufRange, BufRef, CollectiveKind, CommId, EventRef, MemSpace, OpKind, RankId, StreamRef,
};
use std::collections::BTreeMap;
use std::rc::Rc;

/// Where an op runs: the rank (process) and the thread's index within that rank.
#[derive(Clone, Copy, Debug)]
pub struct Ctx {
    pub rank: RankId,
    pub thread: u32,
    /// An earlier op of this thread was skipped (`recover.rs`; the load fails): errors that depend on what the
    /// thread did before (an `Expect`'s writer) are not reported.
    pub after_skip: bool,
}

/// Resolves ops against the declarations; collects the host barriers it meets.
pub struct Resolver<'a, 'i> {
    pub d: &'a Decls<'a>,
    pub index: &'a SpanIndex,
    pub issues: &'i mut Issues,
    /// Barriers in order of first use; participants are filled as ops are resolved.
    pub barriers: Vec<BarrierDecl>,
    barrier_idx: BTreeMap<String, u32>,
    /// The help of "unknown KIND `name`" by (kind, name): computed once, however many ranks and repetitions meet it.
    unknown_help: BTreeMap<(String, String), String>,
    /// The paths of an op's fields (`threads[0].ops[3].stream`), by (address of the op's shared path, address and
    /// length of the field's name): every rank resolves the same written op, and building each path afresh was a
    /// tenth of loading a 1,024-rank pipeline (issue 9). Addresses are stable: the expanded ops outlive the resolver.
    field_paths: std::cell::RefCell<rustc_hash::FxHashMap<(usize, usize, usize), Rc<str>>>,
    /// By the address of a written op: whether it is the same for every rank and iteration (`op_with`).
    constant_ops: rustc_hash::FxHashMap<usize, bool>,
    /// An op the loader skipped (`recover.rs`; the load fails) may have been a `CommSplit`: a communicator name
    /// nothing declares may be the one it created, and is not reported.
    pub skipped_may_split: bool,
}

/// At most this many names are listed in a "known streams: ..." help.
pub const MAX_LISTED_NAMES: usize = 20;

/// A resolved buffer argument.
#[derive(Clone, Copy, Debug)]
struct Range {
    range: BufRange,
    space: MemSpace,
}

/// The buffer name an `Expect`'s `written_by: Send(..)` gives.
fn from_name(w: &SWriter) -> &str {
    match w {
        SWriter::Send { buf } => buf.name(),
        _ => "",
    }
}

fn plural(n: usize, word: &str) -> String {
    crate::describe::count(n as u64, word)
}

fn list_ranks(rs: &[RankId]) -> String {
    rs.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ")
}

impl<'a, 'i> Resolver<'a, 'i> {
    pub fn new(d: &'a Decls<'a>, index: &'a SpanIndex, issues: &'i mut Issues) -> Resolver<'a, 'i> {
        Resolver {
            d,
            index,
            issues,
            barriers: Vec::new(),
            barrier_idx: BTreeMap::new(),
            unknown_help: BTreeMap::new(),
            field_paths: Default::default(),
            constant_ops: Default::default(),
            skipped_may_split: false,
        }
    }

    fn err(&mut self, cx: &Ctx, issue: Issue) {
        self.issues.push(issue.on_rank(cx.rank));
    }

    /// Splits `name@rank`; `None` (reported) when the qualifier is invalid. Returns (base name, rank, qualified).
    fn qualified<'n>(&mut self, cx: &Ctx, name: &'n str, path: &str) -> Option<(&'n str, RankId, bool)> {
        let Some((base, q)) = name.rsplit_once('@') else { return Some((name, cx.rank, false)) };
        match q.parse::<RankId>() {
            Ok(r) if r < self.d.ranks => Some((base, r, true)),
            Ok(r) => {
                let ranks = self.d.ranks;
                self.err(
                    cx,
                    Issue::new(path, format!("`{name}` names rank {r}, which does not exist"))
                        .help(format!("the program has {}: 0 to {}", plural(ranks as usize, "rank"), ranks - 1)),
                );
                None
            }
            Err(_) => {
                self.err(
                    cx,
                    Issue::new(path, format!("invalid rank qualifier in `{name}`"))
                        .help("write `name@rank`, e.g. \"s0@1\" for stream s0 of rank 1"),
                );
                None
            }
        }
    }

    /// "unknown stream `x`" with a suggestion among `known`, or a note that the name is of another kind.
    fn unknown(&mut self, cx: &Ctx, what: &str, name: &str, known: &[&str], path: &str) {
        let key = (what.to_string(), name.to_string());
        let help = match self.unknown_help.get(&key) {
            Some(h) => h.clone(),
            None => {
                let h = self.unknown_help_text(what, name, known);
                self.unknown_help.insert(key, h.clone());
                h
            }
        };
        self.err(cx, Issue::new(path, format!("unknown {what} `{name}`")).help(help));
    }

    /// The help of "unknown {what} `{name}`": a note that a known name differs from it only in Unicode normalisation
    /// (names are compared as written, code point by code point: "é" composed, U+00E9, is not "é" decomposed, e and
    /// U+0301, though they look the same), a suggestion among `known`, a note that the name is of another kind, or the
    /// known names (at most [`MAX_LISTED_NAMES`]).
    fn unknown_help_text(&self, what: &str, name: &str, known: &[&str]) -> String {
        use unicode_normalization::UnicodeNormalization;
        if let Some(k) = known.iter().find(|k| k.nfc().eq(name.nfc())) {
            return format!(
                "`{name}` and the declared {what} `{k}` differ only in Unicode normalisation (the same characters, \
                 composed in one and decomposed in the other, NFC vs NFD): names are compared as written, so write \
                 both the same way"
            );
        }
        let others: [(&str, bool); 4] = [
            ("stream", self.d.stream_idx.contains_key(name) || name == LEGACY_STREAM || name == PER_THREAD_STREAM),
            ("event", self.d.event_idx.contains_key(name)),
            ("buffer", self.d.buffer_idx.contains_key(name)),
            ("communicator", self.d.comm_idx.contains_key(name)),
        ];
        if let Some(s) = did_you_mean(name, known.iter().copied()) {
            format!("did you mean `{s}`?")
        } else if let Some((other, _)) = others.iter().find(|(k, is)| *is && *k != what) {
            format!("`{name}` is a {other}, not a {what}")
        } else if known.is_empty() {
            format!("the program declares no {what}s")
        } else if known.len() > MAX_LISTED_NAMES {
            format!("known {what}s: {}, and {} more", known[..MAX_LISTED_NAMES].join(", "), known.len() - MAX_LISTED_NAMES)
        } else {
            format!("known {what}s: {}", known.join(", "))
        }
    }

    fn stream(&mut self, cx: &Ctx, name: &str, path: &str) -> Option<StreamRef> {
        let (base, rank, qualified) = self.qualified(cx, name, path)?;
        let index = if base == LEGACY_STREAM {
            0
        } else if base == PER_THREAD_STREAM {
            if qualified {
                self.err(
                    cx,
                    Issue::new(path, format!("`{name}`: the per-thread default stream cannot be qualified"))
                        .help("`sPT` always means the calling thread's own per-thread default stream"),
                );
                return None;
            }
            self.d.streams.len() as u32 + 1 + cx.thread
        } else if let Some(&i) = self.d.stream_idx.get(base) {
            i
        } else {
            // Declared names first: on a tie, a suggestion prefers them.
            let mut known: Vec<&str> = self.d.stream_idx.keys().map(String::as_str).collect();
            known.extend([LEGACY_STREAM, PER_THREAD_STREAM]);
            self.unknown(cx, "stream", base, &known, path);
            return None;
        };
        Some(StreamRef { rank, index })
    }

    fn event(&mut self, cx: &Ctx, name: &str, path: &str) -> Option<EventRef> {
        let (base, rank, _) = self.qualified(cx, name, path)?;
        match self.d.event_idx.get(base) {
            Some(&index) => Some(EventRef { rank, index }),
            None => {
                let known: Vec<&str> = self.d.event_idx.keys().map(String::as_str).collect();
                self.unknown(cx, "event", base, &known, path);
                None
            }
        }
    }

    fn buffer(&mut self, cx: &Ctx, name: &str, path: &str) -> Option<BufRef> {
        let (base, rank, _) = self.qualified(cx, name, path)?;
        match self.d.buffer_idx.get(base) {
            Some(&index) => Some(BufRef { rank, index }),
            None => {
                let known: Vec<&str> = self.d.buffer_idx.keys().map(String::as_str).collect();
                self.unknown(cx, "buffer", base, &known, path);
                None
            }
        }
    }

    /// A buffer argument at `path`: the whole buffer or a checked slice of it.
    fn range(&mut self, cx: &Ctx, arg: &BufArg, path: &str) -> Option<Range> {
        match arg {
            BufArg::Whole(name) => {
                let buf = self.buffer(cx, name, path)?;
                let b = &self.d.buffers[buf.index as usize];
                let known = self.d.buffer_size_known[buf.index as usize];
                known.then_some(Range { range: BufRange { buf, offset: 0, len: b.bytes }, space: b.space })
            }
            BufArg::Slice(name, offset, len) => {
                // A tuple deserializes like a Slice: tell them apart by what is written there. An op lowered from
                // a PyTorch call has no text of its own at `path` (its argument was checked where it is written).
                let written = self.index.get(path).map(|n| n.name.clone());
                if let Some(written) = written.filter(|w| w.as_deref() != Some("Slice")) {
                    let found = written.map_or("a tuple".to_string(), |w| format!("`{w}(..)`"));
                    self.err(
                        cx,
                        Issue::new(path, format!("expected a buffer name or `Slice(\"name\", offset, len)`, found {found}")),
                    );
                    return None;
                }
                let buf = self.buffer(cx, name, &field(path, 0));
                let offset = size(offset, &field(path, 1), self.issues);
                let len = size(len, &field(path, 2), self.issues);
                let (buf, offset, len) = (buf?, offset?, len?);
                let b = &self.d.buffers[buf.index as usize];
                if !self.d.buffer_size_known[buf.index as usize] {
                    return None;
                }
                let (bytes, space) = (b.bytes, b.space);
                if !offset.checked_add(len).is_some_and(|end| end <= bytes) {
                    self.err(
                        cx,
                        Issue::new(
                            path,
                            format!(
                                "slice of {} at offset {offset} is out of bounds of `{name}` ({})",
                                plural(len as usize, "byte"),
                                plural(bytes as usize, "byte")
                            ),
                        )
                        .help(format!("offset + len must be at most {bytes}")),
                    );
                    return None;
                }
                Some(Range { range: BufRange { buf, offset, len }, space })
            }
        }
    }

    /// Checks what device work on a stream of `exec` (a kernel, memset, copy or NCCL operation: `what`) may touch:
    /// device memory of `exec`, or with `peer` of the calling thread's own device too (peer access within one
    /// process); pinned host memory of the calling process; pageable host memory only when `pageable`.
    #[allow(clippy::too_many_arguments)]
    fn access(&mut self, cx: &Ctx, r: Range, exec: RankId, name: &str, what: &str, path: &str, peer: bool, pageable: bool) -> bool {
        let owner = r.range.buf.rank;
        match r.space {
            MemSpace::Device if owner == exec || (peer && owner == cx.rank) => true,
            MemSpace::Device => {
                let reach = if peer && exec != cx.rank {
                    format!("device memory of rank {exec} (its device) or rank {} (the calling process's device)", cx.rank)
                } else {
                    format!("device memory of rank {exec}")
                };
                self.err(
                    cx,
                    Issue::new(path, format!("`{name}` is device memory of rank {owner}, but {what} on rank {exec} can only touch {reach}"))
                        .help(format!("use the buffer of rank {exec} (`{}@{exec}`), or a stream of rank {owner}", base(name))),
                );
                false
            }
            MemSpace::PageableHost if !pageable => {
                self.err(
                    cx,
                    Issue::new(path, format!("{what} cannot access pageable host memory `{name}`"))
                        .help("declare it with `space: PinnedHost` (cudaMallocHost), or copy it to device memory with Memcpy"),
                );
                false
            }
            MemSpace::PinnedHost | MemSpace::PageableHost => self.host_of_caller(cx, r, name, path),
        }
    }

    /// Checks that host memory `r` belongs to the calling thread's process.
    fn host_of_caller(&mut self, cx: &Ctx, r: Range, name: &str, path: &str) -> bool {
        if r.range.buf.rank != cx.rank {
            self.err(
                cx,
                Issue::new(
                    path,
                    format!("`{name}` is host memory of rank {}'s process, not of this thread's (rank {})", r.range.buf.rank, cx.rank),
                )
                .help(format!("use this process's buffer `{}`", base(name))),
            );
            false
        } else {
            true
        }
    }

    fn duration(&mut self, cx: &Ctx, d: &Duration, path: &str) -> Option<u64> {
        let r = match d {
            Duration::Nanos(n) => Ok(*n),
            Duration::Text(t) => parse_duration(t),
            Duration::Invalid(m) => Err(m.clone()),
        };
        r.map_err(|m| self.err(cx, Issue::new(path, m).help(DURATION_HELP))).ok()
    }

    /// The communicator named at `comm_path`, or the only one when none is named.
    fn comm(&mut self, cx: &Ctx, name: Option<&String>, op_path: &str) -> Option<CommId> {
        match name {
            Some(n) => match self.d.comm_idx.get(n.as_str()) {
                Some(&c) => Some(CommId(c)),
                // A skipped op may have been the split that creates it.
                None if self.skipped_may_split => None,
                None => {
                    let known: Vec<&str> = self.d.comm_idx.keys().map(String::as_str).collect();
                    let path = field(op_path, "comm");
                    self.unknown(cx, "communicator", n, &known, &path);
                    None
                }
            },
            None => match self.d.comms.len() {
                1 => self.d.comm_idx.values().next().map(|&c| CommId(c)),
                0 => {
                    self.err(
                        cx,
                        Issue::new(op_path, "this NCCL operation needs a communicator, and the program declares none")
                            .help("declare one: `comms: [Comm(\"world\")]`"),
                    );
                    None
                }
                n => {
                    self.err(
                        cx,
                        Issue::new(op_path, format!("the program declares {n} communicators: say which one with `comm: \"...\"`")),
                    );
                    None
                }
            },
        }
    }

    /// Checks that `rank` (acting through `stream_name`) is a member of `comm`; its position when it is.
    fn member(&mut self, cx: &Ctx, comm: CommId, rank: RankId, stream_name: &str, path: &str) -> Option<usize> {
        let c = &self.d.comms[comm.0 as usize];
        if let Some(pos) = member_position(&c.members, rank) {
            return Some(pos);
        }
        let who = if rank == cx.rank {
            "the calling rank".to_string()
        } else {
            format!("rank {rank} (the device of stream `{stream_name}`)")
        };
        let (name, members) = (c.name.clone(), list_ranks(&c.members));
        self.err(
            cx,
            Issue::new(path, format!("{who} is not a member of `{name}` (members: {members})"))
                .help(format!("run it only on members, e.g. inside `OnRanks([{members}], [...])`, or use another communicator")),
        );
        None
    }

    fn peer(&mut self, cx: &Ctx, comm: CommId, pos: usize, peer: &Peer, path: &str) -> Option<RankId> {
        let simple = match peer {
            Peer::Next => SimplePeer::Next,
            Peer::Prev => SimplePeer::Prev,
            Peer::Rank { rank } => SimplePeer::Rank { rank: rank.clone() },
            Peer::Parity { even, odd } => {
                if pos % 2 == 0 {
                    even.clone()
                } else {
                    odd.clone()
                }
            }
        };
        let c = &self.d.comms[comm.0 as usize];
        let (m, me) = (c.members.len(), c.members[pos]);
        let name = c.name.clone();
        let r = match simple {
            SimplePeer::Next => c.members[(pos + 1) % m],
            SimplePeer::Prev => c.members[(pos + m - 1) % m],
            SimplePeer::Rank { rank: ref arg } => {
                let r = self.rank_value(cx, arg, "peer rank", path)?;
                if member_position(&c.members, r).is_none() {
                    let members = list_ranks(&c.members);
                    self.err(cx, Issue::new(path, format!("peer rank {r} is not a member of `{name}` (members: {members})")));
                    return None;
                }
                r
            }
        };
        if r == me {
            let why = if m == 1 { format!(": `{name}` has a single member") } else { String::new() };
            self.err(
                cx,
                Issue::new(path, format!("the peer is the caller itself (rank {r}){why}"))
                    .help("NCCL send/recv need two different ranks"),
            );
            return None;
        }
        Some(r)
    }

    /// The global rank an evaluated rank expression names (`what`: "peer rank", "root rank"), or `None` (reported)
    /// when no such rank exists. Pipelines are not rings: `Rank(stage + 1)` on the last stage names a rank past the
    /// end, and the help says how to guard it.
    fn rank_value(&mut self, cx: &Ctx, arg: &ExprArg, what: &str, path: &str) -> Option<RankId> {
        let v = arg.literal()?;
        let ranks = self.d.ranks;
        match u32::try_from(v) {
            Ok(r) if r < ranks => Some(r),
            _ => {
                let computed = if arg.written_plain() { String::new() } else { format!(" (`{}` = {v} on rank {})", arg.text, cx.rank) };
                let mut help = format!("the program has {}: 0 to {}", plural(ranks as usize, "rank"), ranks - 1);
                if !arg.written_plain() {
                    help.push_str(&format!(
                        "; neighbours do not wrap around: guard the op, e.g. `If({}, [...])`",
                        if v < 0 { format!("{} >= 0", arg.text) } else { format!("{} < ranks", arg.text) }
                    ));
                }
                self.err(cx, Issue::new(path, format!("{what} {v} does not exist{computed}")).help(help));
                None
            }
        }
    }

    fn barrier(&mut self, cx: &Ctx, name: &str) -> u32 {
        let id = match self.barrier_idx.get(name) {
            Some(&i) => i,
            None => {
                let i = self.barriers.len() as u32;
                self.barriers.push(BarrierDecl { name: name.to_string(), participants: Vec::new() });
                self.barrier_idx.insert(name.to_string(), i);
                i
            }
        };
        let me = (cx.rank, cx.thread);
        let parts = &mut self.barriers[id as usize].participants;
        if let Err(at) = parts.binary_search(&me) {
            parts.insert(at, me);
        }
        id
    }

    fn pooled(&mut self, cx: &Ctx, op: &str, name: &str, path: &str) -> Option<BufRef> {
        let buf = self.buffer(cx, name, path)?;
        if !self.d.buffers[buf.index as usize].pooled {
            self.err(
                cx,
                Issue::new(path, format!("{op} of `{name}`, which is not a Pooled buffer"))
                    .help(format!("{op} applies to caching-allocator buffers: declare it `Pooled(\"{}\", size)`", base(name))),
            );
            return None;
        }
        Some(buf)
    }

    #[allow(clippy::too_many_arguments)]
    fn same_device(&mut self, cx: &Ctx, op: &str, buf: BufRef, name: &str, s: StreamRef, stream: &str, path: &str) -> bool {
        if buf.rank != s.rank {
            self.err(
                cx,
                Issue::new(
                    path,
                    format!("{op} of `{name}` (rank {}) on stream `{stream}` of another device (rank {})", buf.rank, s.rank),
                ),
            );
            return false;
        }
        true
    }

    /// Resolves one expanded op; `None` when it has errors (all reported). `earlier`: the thread's ops resolved so
    /// far, in order (what an `Expect` names its writer among).
    pub fn op(&mut self, cx: &Ctx, item: &Item, earlier: &[(OpKind, Rc<str>)]) -> Option<OpKind> {
        let cache = std::mem::take(&mut self.field_paths);
        let r = self.op_with(cx, item, earlier, &cache);
        self.field_paths = cache;
        r
    }

    /// [`Self::op`], with the field paths cached in `cache` (taken out of `self` so that the path closure and the
    /// resolver's methods can be used together).
    fn op_with(
        &mut self,
        cx: &Ctx,
        item: &Item,
        earlier: &[(OpKind, Rc<str>)],
        cache: &std::cell::RefCell<rustc_hash::FxHashMap<(usize, usize, usize), Rc<str>>>,
    ) -> Option<OpKind> {
        let p: &str = &item.path;
        let (op, written) = match item.leaf {
            Leaf::GroupStart => return Some(OpKind::GroupStart),
            Leaf::GroupEnd => return Some(OpKind::GroupEnd),
            Leaf::Op(op) => (op, true),
            Leaf::Owned(ref op) => (&**op, false),
        };
        let scope = Scope { rank: cx.rank, ranks: self.d.ranks, env: item.env.as_deref() };
        // A written op with nothing to fill in (no `{name}` in its text, no expression but integer literals) is the
        // same for every rank and iteration: it is used as written once one instantiation has shown that (an
        // interpolation always drops its braces and an evaluated expression becomes a literal, so any op that has
        // something to fill in differs from its instantiation). Two thirds of a pipeline's ops are such (issue 9).
        let key = op as *const SOp as usize;
        let instantiated;
        let op = if written && self.constant_ops.get(&key) == Some(&true) {
            op
        } else {
            instantiated = instantiate(op, &scope, p, self.issues)?;
            if written {
                self.constant_ops.insert(key, instantiated == *op);
            }
            &instantiated
        };
        // `name` is a literal: its address names it in the cache.
        let f = |name: &'static str| -> Rc<str> {
            let key = (Rc::as_ptr(&item.path) as *const u8 as usize, name.as_ptr() as usize, name.len());
            cache.borrow_mut().entry(key).or_insert_with(|| Rc::from(field(p, name))).clone()
        };
        match op {
            SOp::Kernel { name, stream, reads, writes, duration } => {
                let s = self.stream(cx, stream, &f("stream"));
                let mut ok = s.is_some();
                let mut ranges = [Vec::new(), Vec::new()];
                for (k, (list, key)) in [(reads, "reads"), (writes, "writes")].into_iter().enumerate() {
                    for (j, arg) in list.iter().enumerate() {
                        let path = index(&f(key), j);
                        match (self.range(cx, arg, &path), s) {
                            (Some(r), Some(s)) => {
                                ok &= self.access(cx, r, s.rank, arg.name(), "a kernel", &path, true, false);
                                ranges[k].push(r.range);
                            }
                            _ => ok = false,
                        }
                    }
                }
                let duration_ns = match duration {
                    Some(d) => self.duration(cx, d, &f("duration")),
                    None => Some(DEFAULT_KERNEL_NS),
                };
                let [reads, writes] = ranges;
                // A bad duration is reported above; the kernel still stands (with none), so that an `Expect` of
                // what it writes is not reported as well.
                match (ok, s) {
                    (true, Some(stream)) => {
                        Some(OpKind::Kernel { stream, name: name.clone(), reads, writes, duration_ns: duration_ns.unwrap_or(0) })
                    }
                    _ => None,
                }
            }
            SOp::Memset { buf, stream } => {
                let s = match stream {
                    Some(s) => Some(self.stream(cx, s, &f("stream"))?),
                    None => None,
                };
                let exec = s.map_or(cx.rank, |s| s.rank);
                let r = self.range(cx, buf, &f("0"))?;
                let what = if s.is_some() { "cudaMemsetAsync" } else { "cudaMemset" };
                self.access(cx, r, exec, buf.name(), what, &f("0"), true, false).then_some(OpKind::Memset { stream: s, dst: r.range })
            }
            SOp::Memcpy { dst, src, stream } => {
                let s = stream.as_ref().map(|name| self.stream(cx, name, &f("stream")));
                let exec = s.flatten().map_or(cx.rank, |s| s.rank);
                let d = self.range(cx, dst, &f("dst"));
                let sr = self.range(cx, src, &f("src"));
                let (s, d, sr) = (s.map_or(Some(None), |s| s.map(Some))?, d?, sr?);
                let ok_d = self.access(cx, d, exec, dst.name(), "the copy", &f("dst"), true, true);
                let ok_s = self.access(cx, sr, exec, src.name(), "the copy", &f("src"), true, true);
                if d.range.len != sr.range.len {
                    self.err(
                        cx,
                        Issue::new(
                            p,
                            format!(
                                "Memcpy lengths differ: dst is {}, src is {}",
                                plural(d.range.len as usize, "byte"),
                                plural(sr.range.len as usize, "byte")
                            ),
                        )
                        .help("copy equal lengths: use Slice(\"name\", offset, len) for part of a buffer"),
                    );
                    return None;
                }
                (ok_d && ok_s).then_some(OpKind::Memcpy { stream: s, dst: d.range, src: sr.range })
            }
            SOp::Record { event, stream } => {
                let e = self.event(cx, event, &f("0"));
                let s = self.stream(cx, stream, &f("stream"));
                let (e, s) = (e?, s?);
                if e.rank != s.rank {
                    self.err(
                        cx,
                        Issue::new(
                            &*f("stream"),
                            format!(
                                "event `{event}` of rank {} cannot be recorded on stream `{stream}` of rank {}",
                                e.rank, s.rank
                            ),
                        )
                        .help(format!(
                            "an event belongs to the device it was created on (S3): record it on a stream of rank {}, or record rank {}'s event `{}@{}`",
                            e.rank, s.rank, base(event), s.rank
                        )),
                    );
                    return None;
                }
                Some(OpKind::EventRecord { event: e, stream: s })
            }
            SOp::Wait { event, stream } => {
                let e = self.event(cx, event, &f("0"));
                let s = self.stream(cx, stream, &f("stream"));
                Some(OpKind::StreamWaitEvent { stream: s?, event: e? })
            }
            SOp::EventQuery { event } => Some(OpKind::EventQuery { event: self.event(cx, event, &f("0"))? }),
            SOp::EventSync { event } => Some(OpKind::EventSynchronize { event: self.event(cx, event, &f("0"))? }),
            SOp::StreamSync { stream } => Some(OpKind::StreamSynchronize { stream: self.stream(cx, stream, &f("0"))? }),
            SOp::StreamQuery { stream } => Some(OpKind::StreamQuery { stream: self.stream(cx, stream, &f("0"))? }),
            SOp::DeviceSync => Some(OpKind::DeviceSynchronize { rank: cx.rank }),
            SOp::Sleep { duration } => Some(OpKind::HostSleep { ns: self.duration(cx, duration, &f("0"))? }),
            SOp::HostRead { buf: arg } | SOp::HostWrite { buf: arg } => {
                let write = matches!(op, SOp::HostWrite { .. });
                let what = if write { "HostWrite" } else { "HostRead" };
                let path = f("0");
                let r = self.range(cx, arg, &path)?;
                if r.space == MemSpace::Device {
                    self.err(
                        cx,
                        Issue::new(&*path, format!("{what} of device memory `{}`", arg.name())).help(
                            "the host cannot touch device memory directly: copy it with Memcpy to a PinnedHost or PageableHost buffer",
                        ),
                    );
                    return None;
                }
                self.host_of_caller(cx, r, arg.name(), &path).then_some(OpKind::HostAccess { range: r.range, write })
            }
            SOp::Barrier { name } => Some(OpKind::Barrier { barrier: self.barrier(cx, name) }),
            SOp::CommInit { comm: name } => {
                let c = self.comm(cx, Some(name), p)?;
                let _ = self.member(cx, c, cx.rank, "", &f("0"))?;
                Some(OpKind::CommInit { comm: c })
            }
            // N12, N13: calls on this rank's member of the communicator.
            SOp::Poll { comm: name } | SOp::CommAbort { comm: name } | SOp::CommFinalize { comm: name } | SOp::CommDestroy { comm: name } => {
                let c = self.comm(cx, Some(name), p)?;
                let _ = self.member(cx, c, cx.rank, "", &f("0"))?;
                Some(match op {
                    SOp::Poll { .. } => OpKind::CommPoll { comm: c },
                    SOp::CommAbort { .. } => OpKind::CommAbort { comm: c },
                    SOp::CommFinalize { .. } => OpKind::CommFinalize { comm: c },
                    _ => OpKind::CommDestroy { comm: c },
                })
            }
            // N8: the communicator joined was declared from every rank's split after expansion (`split.rs`).
            SOp::CommSplit { comm: name, new, .. } => {
                let parent = self.comm(cx, Some(name), &f("0"));
                let joined = match new {
                    Some(n) => Some(self.comm(cx, Some(n), &f("new"))),
                    None => None,
                };
                let parent = parent?;
                let _ = self.member(cx, parent, cx.rank, "", &f("0"))?;
                let comm = match joined {
                    Some(c) => Some(c?),
                    None => None,
                };
                let seq = earlier.iter().filter(|(k, _)| matches!(k, OpKind::CommSplit { parent: q, .. } if *q == parent)).count() as u32;
                Some(OpKind::CommSplit { parent, seq, comm })
            }
            SOp::Send { to: peer, buf, stream, comm } | SOp::Recv { from: peer, buf, stream, comm } => {
                let is_send = matches!(op, SOp::Send { .. });
                let c = self.comm(cx, comm.as_ref(), p);
                let s = self.stream(cx, stream, &f("stream"));
                let r = self.range(cx, buf, &f("buf"));
                let (c, s, r) = (c?, s?, r?);
                let pos = self.member(cx, c, s.rank, stream, p)?;
                let peer = self.peer(cx, c, pos, peer, &f(if is_send { "to" } else { "from" }))?;
                let what = if is_send { "the send" } else { "the recv" };
                if !self.access(cx, r, s.rank, buf.name(), what, &f("buf"), false, false) {
                    return None;
                }
                Some(if is_send {
                    OpKind::Send { comm: c, peer, buf: r.range, stream: s }
                } else {
                    OpKind::Recv { comm: c, peer, buf: r.range, stream: s }
                })
            }
            SOp::GroupStart => Some(OpKind::GroupStart),
            SOp::GroupEnd => Some(OpKind::GroupEnd),
            SOp::AllReduce { buf, send, recv, stream, comm } => {
                self.collective(cx, p, CollectiveKind::AllReduce, None, buf, send, recv, stream, comm)
            }
            SOp::Broadcast { root, buf, send, recv, stream, comm } => {
                let r = self.root(cx, root, &f("root"))?;
                self.collective(cx, p, CollectiveKind::Broadcast { root: r }, Some(r), buf, send, recv, stream, comm)
            }
            SOp::Reduce { root, buf, send, recv, stream, comm } => {
                let r = self.root(cx, root, &f("root"))?;
                self.collective(cx, p, CollectiveKind::Reduce { root: r }, Some(r), buf, send, recv, stream, comm)
            }
            SOp::Gather { root, send, recv, stream, comm } | SOp::Scatter { root, send, recv, stream, comm } => {
                let r = self.root(cx, root, &f("root"))?;
                let kind = if matches!(op, SOp::Gather { .. }) { CollectiveKind::Gather { root: r } } else { CollectiveKind::Scatter { root: r } };
                let (s, rv) = (Some(send.clone()), Some(recv.clone()));
                self.collective(cx, p, kind, Some(r), &None, &s, &rv, stream, comm)
            }
            SOp::AllToAll { send, recv, stream, comm } => {
                let (s, r) = (Some(send.clone()), Some(recv.clone()));
                self.collective(cx, p, CollectiveKind::AllToAll, None, &None, &s, &r, stream, comm)
            }
            SOp::AllGather { send, recv, stream, comm } => {
                let (s, r) = (Some(send.clone()), Some(recv.clone()));
                self.collective(cx, p, CollectiveKind::AllGather, None, &None, &s, &r, stream, comm)
            }
            SOp::ReduceScatter { send, recv, stream, comm } => {
                let (s, r) = (Some(send.clone()), Some(recv.clone()));
                self.collective(cx, p, CollectiveKind::ReduceScatter, None, &None, &s, &r, stream, comm)
            }
            SOp::Alloc { buf, stream } | SOp::RecordStream { buf, stream } => {
                let alloc = matches!(op, SOp::Alloc { .. });
                let what = if alloc { "Alloc" } else { "RecordStream" };
                let b = self.pooled(cx, what, buf, &f("0"));
                let s = self.stream(cx, stream, &f("stream"));
                let (b, s) = (b?, s?);
                if !self.same_device(cx, what, b, buf, s, stream, &f("stream")) {
                    return None;
                }
                Some(if alloc { OpKind::Alloc { buf: b, stream: s } } else { OpKind::RecordStream { buf: b, stream: s } })
            }
            // `Free` of a caching-allocator buffer returns it to the pool (P4); of any other device buffer it is
            // `cudaFree` (S7).
            SOp::Free { buf } => {
                let path = f("0");
                let b = self.buffer(cx, buf, &path)?;
                let decl = &self.d.buffers[b.index as usize];
                if decl.pooled {
                    Some(OpKind::Free { buf: b })
                } else if decl.space != MemSpace::Device {
                    self.err(
                        cx,
                        Issue::new(&*path, format!("Free of `{buf}`, which is neither a Pooled buffer nor device memory"))
                            .help("Free applies to caching-allocator buffers (`Pooled`, P4) and to device buffers (cudaFree, S7)"),
                    );
                    None
                } else {
                    // A buffer of another rank is another GPU's memory freed by a thread of this process (one
                    // thread driving several GPUs, as ops on `s0@1` do): cudaFree takes a pointer of any device.
                    Some(OpKind::CudaFree { buf: b })
                }
            }
            SOp::Malloc { size: n } | SOp::MallocHost { size: n } => {
                let bytes = size(n, &f("0"), self.issues)?;
                Some(if matches!(op, SOp::Malloc { .. }) {
                    OpKind::CudaMalloc { rank: cx.rank, bytes }
                } else {
                    OpKind::CudaMallocHost { rank: cx.rank, bytes }
                })
            }
            SOp::EmptyCache => Some(OpKind::EmptyCache { rank: cx.rank }),
            SOp::LoadModule { module } => {
                if module.trim().is_empty() {
                    self.err(cx, Issue::new(&*f("0"), "LoadModule needs a module name".to_string()));
                    return None;
                }
                Some(OpKind::LoadModule { rank: cx.rank, module: module.clone() })
            }
            SOp::HostFunc { name, stream, reads, writes, calls_cuda, duration } => {
                let s = self.stream(cx, stream, &f("stream"));
                let duration_ns = match duration {
                    Some(d) => self.duration(cx, d, &f("duration")),
                    None => Some(0),
                };
                // A bad duration is reported; the host function still stands (as for a kernel).
                let mut ok = s.is_some();
                let mut ranges = [Vec::new(), Vec::new()];
                for (k, (list, key)) in [(reads, "reads"), (writes, "writes")].into_iter().enumerate() {
                    for (j, arg) in list.iter().enumerate() {
                        let path = index(&f(key), j);
                        match self.range(cx, arg, &path) {
                            Some(r) if r.space == MemSpace::Device => {
                                self.err(
                                    cx,
                                    Issue::new(&path, format!("a host function accesses device memory `{}`", arg.name())).help(
                                        "a host function runs on the host (S8): it can touch PinnedHost or PageableHost buffers only",
                                    ),
                                );
                                ok = false;
                            }
                            Some(r) => {
                                ok &= self.host_of_caller(cx, r, arg.name(), &path);
                                ranges[k].push(r.range);
                            }
                            None => ok = false,
                        }
                    }
                }
                let [reads, writes] = ranges;
                match (ok, s) {
                    (true, Some(stream)) => Some(OpKind::HostFunc {
                        stream,
                        name: name.clone(),
                        reads,
                        writes,
                        calls_cuda: *calls_cuda,
                        duration_ns: duration_ns.unwrap_or(0),
                    }),
                    _ => None,
                }
            }
            SOp::Expect { buf, written_by, stream } => self.expect(cx, p, buf, written_by, stream.as_deref(), earlier),
            // Control forms never reach here: expansion removed them; nor do skipped ops (`format.rs`), already reported.
            SOp::Group { .. }
            | SOp::OnRanks { .. }
            | SOp::Parity { .. }
            | SOp::Repeat { .. }
            | SOp::For { .. }
            | SOp::If { .. }
            | SOp::Skipped => None,
            // PyTorch calls never reach here: expansion lowered them (`torch.rs`). Should one, it is reported rather
            // than silently dropped.
            SOp::InitProcessGroup
            | SOp::DestroyProcessGroup
            | SOp::DistSend { .. }
            | SOp::DistRecv { .. }
            | SOp::Isend { .. }
            | SOp::Irecv { .. }
            | SOp::BatchIsendIrecv { .. }
            | SOp::WorkWait { .. }
            | SOp::DistAllReduce { .. }
            | SOp::DistBroadcast { .. }
            | SOp::DistAllGather { .. }
            | SOp::DistReduceScatter { .. }
            | SOp::DistAllToAllSingle { .. }
            | SOp::DistAllToAll { .. }
            | SOp::DistAllGatherList { .. }
            | SOp::DistReduceScatterList { .. }
            | SOp::DistReduce { .. }
            | SOp::DistGather { .. }
            | SOp::DistScatter { .. }
            | SOp::NewGroup { .. }
            | SOp::CudaSynchronize
            | SOp::DistBarrier
            | SOp::Empty { .. }
            | SOp::Del { .. }
            | SOp::FreeStorage { .. }
            | SOp::WithStream { .. }
            | SOp::Compute { .. }
            | SOp::RecordEvent { .. }
            | SOp::WaitEvent { .. } => {
                self.err(cx, Issue::new(p, "internal error: this PyTorch call was not lowered; please report it"));
                None
            }
        }
    }

    /// A value assertion (V1): the read it makes is checked like a kernel's (on a stream) or a host read's (without
    /// one); its writer is the last earlier op of this thread of the kind `written_by` names that writes an
    /// overlapping range, and no other op of this thread may write that range between the two.
    fn expect(
        &mut self,
        cx: &Ctx,
        p: &str,
        buf: &BufArg,
        written_by: &SWriter,
        stream: Option<&str>,
        earlier: &[(OpKind, Rc<str>)],
    ) -> Option<OpKind> {
        let f = |name: &str| field(p, name);
        let s = match stream {
            Some(name) => Some(self.stream(cx, name, &f("stream"))?),
            None => None,
        };
        let r = self.range(cx, buf, &f("0"))?;
        let ok = match s {
            Some(s) => self.access(cx, r, s.rank, buf.name(), "an Expect on a stream", &f("0"), true, false),
            None if r.space == MemSpace::Device => {
                self.err(
                    cx,
                    Issue::new(f("0"), format!("an Expect without a stream reads `{}` on the host, but it is device memory", buf.name()))
                        .help("give the stream that reads it: `Expect(\"y\", written_by: .., stream: \"s0\")`"),
                );
                false
            }
            None => self.host_of_caller(cx, r, buf.name(), &f("0")),
        };
        if !ok {
            return None;
        }
        let range = r.range;
        // `written_by: Send("x@0")`: the sending buffer, as the send names it (on the sending rank).
        let sent_from = match written_by {
            SWriter::Send { buf: from } => {
                let at = field(&f("written_by"), 0);
                let fr = self.range(cx, from, &at)?;
                if fr.space == MemSpace::PageableHost {
                    self.err(cx, Issue::new(at, format!("`{}` is pageable host memory, which no send reads (NCCL needs device or pinned memory)", from.name())));
                    return None;
                }
                Some(fr)
            }
            _ => None,
        };
        let overlaps = |w: &BufRange| w.buf == range.buf && w.offset < range.offset + range.len && range.offset < w.offset + w.len;
        let writes = |k: &OpKind| k.written_ranges().iter().any(overlaps);
        let Some(w) = earlier.iter().rposition(|(k, _)| written_by.matches(k) && writes(k)) else {
            if cx.after_skip {
                // The writer may be the op that was skipped.
                return None;
            }
            self.err(
                cx,
                Issue::new(f("written_by"), format!("no earlier op of this thread is a {} that writes `{}`", written_by.label(), buf.name()))
                    .help("written_by names the kind (a kernel or a host function: by name) of the last op before the Expect, in this thread, that writes the range"),
            );
            return None;
        };
        if let Some(later) = earlier[w + 1..].iter().find(|(k, _)| writes(k)) {
            self.err(
                cx,
                Issue::new(f("written_by"), format!("`{}` is written again after the {} it expects", buf.name(), written_by.label()))
                    .related(later.1.to_string(), "written again here"),
            );
            return None;
        }
        if let (Some(fr), OpKind::Recv { peer, .. }) = (&sent_from, &earlier[w].0) {
            if fr.space == MemSpace::Device && fr.range.buf.rank != *peer {
                self.err(
                    cx,
                    Issue::new(field(&f("written_by"), 0), format!("`{}` is a buffer of rank {}, but the Recv that writes `{}` receives from rank {peer} (N3)", from_name(written_by), fr.range.buf.rank, buf.name()))
                        .related(earlier[w].1.to_string(), "the recv")
                        .help(format!(
                            "name the buffer rank {peer} passes to its Send, qualified with that rank: `Send(\"{}@{peer}\")`",
                            from_name(written_by).split('@').next().unwrap_or("x")
                        )),
                );
                return None;
            }
        }
        Some(OpKind::Expect { range, stream: s, writer: w as u32, sent_from: sent_from.map(|fr| fr.range) })
    }

    /// The global rank a collective's `root:` names (membership is checked by `collective`).
    fn root(&mut self, cx: &Ctx, root: &Root, path: &str) -> Option<RankId> {
        let Root::Rank { rank: arg } = root;
        match arg.literal().map(u32::try_from) {
            Some(Ok(r)) => Some(r),
            _ => self.rank_value(cx, arg, "root rank", path),
        }
    }

    /// A collective: in place (`buf`) or `send` + `recv`, with the size rules of its kind.
    #[allow(clippy::too_many_arguments)]
    fn collective(
        &mut self,
        cx: &Ctx,
        p: &str,
        kind: CollectiveKind,
        root: Option<RankId>,
        buf: &Option<BufArg>,
        send: &Option<BufArg>,
        recv: &Option<BufArg>,
        stream: &str,
        comm: &Option<String>,
    ) -> Option<OpKind> {
        let f = |name: &str| field(p, name);
        let name = kind.name();
        let c = self.comm(cx, comm.as_ref(), p);
        let s = self.stream(cx, stream, &f("stream"));
        let args: Vec<(&BufArg, String)> = match (buf, send, recv) {
            (Some(b), None, None) => vec![(b, f("buf"))],
            (None, Some(sd), Some(rv)) => vec![(sd, f("send")), (rv, f("recv"))],
            _ => {
                self.err(cx, Issue::new(p, format!("{name} takes either `buf` (in place) or both `send` and `recv`")));
                return None;
            }
        };
        let ranges: Vec<Option<Range>> = args.iter().map(|(a, path)| self.range(cx, a, path)).collect();
        let (c, s) = (c?, s?);
        let _pos = self.member(cx, c, s.rank, stream, p)?;
        let mut rs = Vec::new();
        for (r, (a, path)) in ranges.into_iter().zip(&args) {
            let r = r?;
            if !self.access(cx, r, s.rank, a.name(), &format!("the {name}"), path, false, false) {
                return None;
            }
            rs.push(r.range);
        }
        let (send_r, recv_r) = (rs[0], *rs.last()?);
        let members = &self.d.comms[c.0 as usize].members;
        let m = members.len() as u64;
        if let Some(root) = root {
            if member_position(members, root).is_none() {
                let (cname, members) = (self.d.comms[c.0 as usize].name.clone(), members.clone());
                self.err(
                    cx,
                    Issue::new(f("root"), format!("root rank {root} is not a member of `{cname}` (members: {})", list_ranks(&members))),
                );
                return None;
            }
        }
        let (consistent, rule) = kind.sizes_fit(send_r.len, recv_r.len, m);
        if !consistent {
            self.err(
                cx,
                Issue::new(
                    p,
                    format!(
                        "{name} sizes do not fit: send is {}, recv is {} ({rule}, {})",
                        plural(send_r.len as usize, "byte"),
                        plural(recv_r.len as usize, "byte"),
                        plural(m as usize, "member")
                    ),
                ),
            );
            return None;
        }
        Some(OpKind::Collective { comm: c, kind, send: send_r, recv: recv_r, stream: s })
    }
}

fn base(name: &str) -> &str {
    name.rsplit_once('@').map_or(name, |(b, _)| b)
}
