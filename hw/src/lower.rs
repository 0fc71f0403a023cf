//! Lowering: turns a [`Program`] into what the rank processes execute — one [`Step`] per op, with version ids for
//! writers, observation slots for reads, device trace slots for traced work, barrier rounds and NCCL peer positions.
//! Pure (no CUDA), so it is unit-tested without a GPU and used by both the supervisor and the rank processes.

use crate::observation::OpId;
use cuorder_model::program::{
    BufRange, BufRef, CollectiveKind, EventRef, MemSpace, OpKind, Program, RankId, StreamKind, StreamRef,
};
use std::collections::BTreeMap;

/// Most trace slots (traced device ops) one rank may have.
pub const MAX_TRACE_SLOTS_PER_RANK: u32 = 1 << 22;
/// Most observation slots (kernel read ranges) one rank may have.
pub const MAX_OBS_SLOTS_PER_RANK: u32 = 1 << 22;
/// Most ranks a program may have.
pub const MAX_RANKS: usize = 1024;
/// The most bytes one `Malloc` or `MallocHost` of a program may allocate on hardware (S7), 64 GiB.
pub const MAX_HOST_CALL_BYTES: u64 = 64 << 30;

/// A byte range of one of the rank's own buffers: `buf` indexes [`cuorder_model::program::Rank::buffers`];
/// `offset` and `len` in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteRange {
    pub buf: u32,
    pub offset: u64,
    pub len: u64,
}

/// A range of 4-byte words of one of the rank's buffers, as the kernels see it. `word_offset` and `words` count
/// 4-byte words; `obs_slot` is the observation slot of a probe (0 for stamps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WordRange {
    pub buf: u32,
    pub word_offset: u64,
    pub words: u64,
    pub obs_slot: u32,
}

/// A slice `start..start + count` of [`RankPlan::ranges`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangeSlice {
    pub start: u32,
    pub count: u32,
}

/// How an op's device work is timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tracing {
    /// Not traced (host-only op, or work on the legacy default stream, where a marker kernel would add implicit
    /// synchronization with blocking streams).
    None,
    /// The op's own kernel writes start and end into this slot.
    Kernel(u32),
    /// Marker kernels just before and just after the op on its stream write start and end into this slot.
    Markers(u32),
    /// A marker kernel just after the op on its stream writes the end into this slot.
    EndMarker(u32),
}

impl Tracing {
    /// The trace slot, if any.
    pub fn slot(self) -> Option<u32> {
        match self {
            Tracing::None => None,
            Tracing::Kernel(s) | Tracing::Markers(s) | Tracing::EndMarker(s) => Some(s),
        }
    }
}

/// `NCCL_SPLIT_NOCOLOR` (nccl.h): a rank that joins no communicator of a split.
pub const SPLIT_NOCOLOR: i32 = -1;

/// One lowered op. Streams, events and buffers are indices into the op's own rank's declarations; `comm` indexes
/// [`Program::comms`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Kernel { stream: u32, reads: RangeSlice, writes: RangeSlice, spin_ns: u64, version: u32, trace: Tracing },
    /// `stream` `None`: synchronous memset on the legacy stream. Fills the range with `version` (4-byte words).
    Memset { stream: Option<u32>, dst: ByteRange, version: u32, trace: Tracing },
    Memcpy { stream: Option<u32>, dst: ByteRange, src: ByteRange, trace: Tracing },
    EventRecord { event: u32, stream: u32, trace: Tracing },
    StreamWaitEvent { stream: u32, event: u32, trace: Tracing },
    EventQuery { event: u32 },
    EventSynchronize { event: u32 },
    StreamSynchronize { stream: u32 },
    StreamQuery { stream: u32 },
    DeviceSynchronize,
    HostSleep { ns: u64 },
    /// A host read of pinned or pageable host memory (4-byte aligned).
    HostRead { range: ByteRange },
    /// A host write: stamps the range with `version`.
    HostWrite { range: ByteRange, version: u32 },
    /// The `round`-th (0-based) arrival of this thread at host barrier `barrier`.
    Barrier { barrier: u32, round: u64 },
    CommInit { comm: u32 },
    /// `ncclCommSplit(parent, color, key, &new)` (N8). `color` is the index of the communicator this rank joins
    /// (one color per communicator the split creates), `NCCL_SPLIT_NOCOLOR` (-1) for none (`comm: None`); `key` is
    /// this rank's position in the new communicator, whose members the program lists in key order.
    CommSplit { parent: u32, color: i32, key: i32, comm: Option<u32> },
    /// `ncclCommInitRankConfig` with `config.blocking = 0` (N12): the init may be in progress when it returns.
    CommInitNonBlocking { comm: u32 },
    /// `ncclCommGetAsyncError(comm)` in a loop until it is not `ncclInProgress` (N12).
    CommPoll { comm: u32 },
    /// `ncclCommAbort(comm)` (N13).
    CommAbort { comm: u32 },
    /// `ncclCommFinalize(comm)` (N13).
    CommFinalize { comm: u32 },
    /// `ncclCommDestroy(comm)` (N13).
    CommDestroy { comm: u32 },
    /// `peer` is the peer's position in the communicator.
    Send { comm: u32, peer: i32, buf: ByteRange, stream: u32, trace: Tracing },
    Recv { comm: u32, peer: i32, buf: ByteRange, stream: u32, trace: Tracing },
    /// `root` is the root's position in the communicator (rooted kinds: Broadcast, Reduce, Gather, Scatter; 0
    /// otherwise).
    Collective { comm: u32, kind: CollectiveKind, root: i32, send: ByteRange, recv: ByteRange, stream: u32, trace: Tracing },
    GroupStart,
    /// `outermost`: this end launches the group; `end_markers`: (stream, slot) of every traced op in the group,
    /// whose end marker is enqueued right after the outermost `ncclGroupEnd`.
    GroupEnd { outermost: bool, end_markers: Vec<(u32, u32)> },
    /// Caching-allocator allocation of pooled buffer `buf` on `stream` (P4): takes a free block of that stream's
    /// pool that is large enough and no longer held by `record_stream`, else `fresh`, the index of this buffer's
    /// own never-used block (one per `Alloc` of the buffer, zeroed at set-up).
    Alloc { buf: u32, stream: u32, fresh: u32 },
    /// Caching-allocator free (P4): the block goes back to its allocation stream's pool at once, held until an event
    /// recorded now on every stream named by `RecordStream` has completed.
    Free { buf: u32 },
    /// `record_stream` (P4): the stream whose work at free time must end before the block is reused.
    RecordStream { buf: u32, stream: u32 },
    /// `cudaFree` of static device buffer `buf` (S7): released at this point, not at tear-down.
    CudaFree { buf: u32 },
    /// `cudaMalloc` of `bytes` bytes (S7), released at tear-down.
    Malloc { bytes: u64 },
    /// `cudaMallocHost` of `bytes` bytes (S7), released at tear-down.
    MallocHost { bytes: u64 },
    /// The lazy load of module `module` (S7): the first one per rank loads a one-kernel PTX module and extracts its
    /// function handle, the driver work `CUDA_MODULE_LOADING=LAZY` does at the first launch of a kernel of a module
    /// (rank processes run with `EAGER`, so that the executor's own kernels load at set-up); later ones do nothing.
    LoadModule { module: String },
    /// `torch.cuda.empty_cache()` (P4, S7): synchronizes the events `RecordStream` left on the pool's free blocks,
    /// then releases every free block with `cudaFree`; released blocks are never handed out again.
    EmptyCache,
    /// `cudaLaunchHostFunc` on `stream` (S8): the function reads `reads` and stamps `writes` (host memory, 4-byte
    /// words) with `version`, and makes no CUDA call; it runs for `duration_ns` (slept) before touching them.
    HostFunc {
        stream: u32,
        reads: Vec<ByteRange>,
        writes: Vec<ByteRange>,
        version: u32,
        duration_ns: u64,
    },
    /// An op with nothing to execute (a barrier that does not exist, after an error was reported).
    NoOp,
}

impl Step {
    /// How this step's device work is traced.
    pub fn tracing(&self) -> Tracing {
        match self {
            Step::Kernel { trace, .. }
            | Step::Memset { trace, .. }
            | Step::Memcpy { trace, .. }
            | Step::EventRecord { trace, .. }
            | Step::StreamWaitEvent { trace, .. }
            | Step::Send { trace, .. }
            | Step::Recv { trace, .. }
            | Step::Collective { trace, .. } => *trace,
            _ => Tracing::None,
        }
    }

    /// The stream this step enqueues device work on: `Some(None)` for synchronous work on the legacy stream,
    /// `None` for a host-only step.
    pub fn device_stream(&self) -> Option<Option<u32>> {
        match self {
            Step::Kernel { stream, .. }
            | Step::EventRecord { stream, .. }
            | Step::StreamWaitEvent { stream, .. }
            | Step::Send { stream, .. }
            | Step::Recv { stream, .. }
            | Step::Collective { stream, .. }
            | Step::HostFunc { stream, .. } => Some(Some(*stream)),
            Step::Memset { stream, .. } | Step::Memcpy { stream, .. } => Some(*stream),
            _ => None,
        }
    }
}

/// What one rank executes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankPlan {
    pub rank: RankId,
    /// One list per host thread, one step per op (same indices as the program).
    pub threads: Vec<Vec<Step>>,
    /// Number of trace slots used.
    pub trace_slots: u32,
    /// Number of observation slots used.
    pub obs_slots: u32,
    /// The kernel range table (uploaded to the device once).
    pub ranges: Vec<WordRange>,
    /// Read index (within its op) of every observation slot, with the op: slot -> (thread, op index, read index).
    pub obs_owner: Vec<(u32, u32, u32)>,
    /// Per buffer of the rank: how many fresh blocks it needs (its number of `Alloc` ops; 0 for static buffers).
    pub fresh_blocks: Vec<u32>,
}

/// A lowered program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Version id -> writer (id 0 = initial contents, not listed).
    pub versions: BTreeMap<u32, OpId>,
    /// One entry per rank.
    pub ranks: Vec<RankPlan>,
}

/// Why a program cannot be run on hardware.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LowerError {
    /// The op at fault, if the problem is one op's.
    pub op: Option<OpId>,
    pub message: String,
}

impl std::fmt::Display for LowerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.op {
            Some(op) => write!(f, "op {op}: {}", self.message),
            None => write!(f, "{}", self.message),
        }
    }
}

impl std::error::Error for LowerError {}

struct Ctx<'p> {
    p: &'p Program,
    markers: bool,
    errors: Vec<LowerError>,
    op: OpId,
}

impl Ctx<'_> {
    fn err(&mut self, message: impl Into<String>) {
        self.errors.push(LowerError { op: Some(self.op), message: message.into() });
    }

    fn rank(&self) -> RankId {
        self.op.rank
    }

    fn stream(&mut self, s: StreamRef) -> Option<(u32, StreamKind)> {
        if s.rank != self.rank() {
            self.err(format!("names stream {} of rank {}: a rank can only use its own streams", s.index, s.rank));
            return None;
        }
        match self.p.ranks[s.rank as usize].streams.get(s.index as usize) {
            Some(st) => Some((s.index, st.kind)),
            None => {
                self.err(format!("stream index {} does not exist", s.index));
                None
            }
        }
    }

    fn event(&mut self, e: EventRef) -> Option<u32> {
        if e.rank != self.rank() {
            self.err(format!(
                "names event {} of rank {}: events cannot cross rank processes on hardware",
                e.index, e.rank
            ));
            return None;
        }
        if (e.index as usize) < self.p.ranks[e.rank as usize].events.len() {
            Some(e.index)
        } else {
            self.err(format!("event index {} does not exist", e.index));
            None
        }
    }

    fn buf(&mut self, b: BufRef) -> Option<MemSpace> {
        if b.rank != self.rank() {
            self.err(format!("names buffer {} of rank {}: a rank can only use its own buffers", b.index, b.rank));
            return None;
        }
        match self.p.ranks[b.rank as usize].buffers.get(b.index as usize) {
            Some(buf) => Some(buf.space),
            None => {
                self.err(format!("buffer index {} does not exist", b.index));
                None
            }
        }
    }

    /// Checks a range and returns it with its buffer's memory space.
    fn range(&mut self, r: BufRange) -> Option<(ByteRange, MemSpace)> {
        let space = self.buf(r.buf)?;
        let bytes = self.p.ranks[r.buf.rank as usize].buffers[r.buf.index as usize].bytes;
        match r.offset.checked_add(r.len) {
            Some(end) if end <= bytes => {}
            _ => {
                self.err(format!(
                    "range offset {} len {} bytes exceeds buffer `{}` of {} bytes",
                    r.offset,
                    r.len,
                    self.p.ranks[r.buf.rank as usize].buffers[r.buf.index as usize].name,
                    bytes
                ));
                return None;
            }
        }
        Some((ByteRange { buf: r.buf.index, offset: r.offset, len: r.len }, space))
    }

    /// A range that stamps or probes see word by word: must be 4-byte aligned.
    fn word_range(&mut self, r: BufRange, what: &str) -> Option<(ByteRange, MemSpace)> {
        let (br, space) = self.range(r)?;
        if br.offset % 4 != 0 || br.len % 4 != 0 {
            self.err(format!(
                "{what} range offset {} len {} bytes: the hardware executor stamps and probes 4-byte words, so \
                 offset and length must be multiples of 4",
                br.offset, br.len
            ));
            return None;
        }
        Some((br, space))
    }

    fn comm_peer(&mut self, comm: u32, peer: RankId) -> Option<i32> {
        let Some(c) = self.p.comms.get(comm as usize) else {
            self.err(format!("communicator index {comm} does not exist"));
            return None;
        };
        let me = self.rank();
        if !c.members.contains(&me) {
            self.err(format!("rank {me} is not a member of communicator `{}`", c.name));
            return None;
        }
        match c.members.iter().position(|&m| m == peer) {
            Some(pos) => Some(pos as i32),
            None => {
                self.err(format!("peer rank {peer} is not a member of communicator `{}`", c.name));
                None
            }
        }
    }
}

/// Checks that a caching-allocator op names a pooled device buffer (the executor pools device memory only, as
/// PyTorch's caching allocator does).
fn pooled_device(cx: &mut Ctx, b: BufRef) {
    if let Some(space) = cx.buf(b) {
        let decl = &cx.p.ranks[b.rank as usize].buffers[b.index as usize];
        if !decl.pooled {
            cx.err(format!("caching-allocator op on buffer `{}`, which is not pooled", decl.name));
        } else if space != MemSpace::Device {
            cx.err(format!("pooled buffer `{}` is host memory: the executor pools device memory only", decl.name));
        }
    }
}

fn new_version(cx: &mut Ctx, next: &mut u32, versions: &mut BTreeMap<u32, OpId>, this: OpId) -> u32 {
    if *next == u32::MAX {
        cx.err("more than 2^32 - 2 writing ops");
        return 0;
    }
    let v = *next;
    *next += 1;
    versions.insert(v, this);
    v
}

fn new_slot(cx: &mut Ctx, rp: &mut RankPlan) -> u32 {
    if rp.trace_slots >= MAX_TRACE_SLOTS_PER_RANK {
        cx.err(format!("more than MAX_TRACE_SLOTS_PER_RANK = {MAX_TRACE_SLOTS_PER_RANK} traced ops"));
        return 0;
    }
    rp.trace_slots += 1;
    rp.trace_slots - 1
}

/// Marker tracing for a stream op: none on the legacy stream (see [`Tracing::None`]).
fn marker_trace(cx: &mut Ctx, rp: &mut RankPlan, kind: StreamKind, end_only: bool) -> Tracing {
    if kind == StreamKind::LegacyDefault || !cx.markers {
        return Tracing::None;
    }
    let s = new_slot(cx, rp);
    if end_only {
        Tracing::EndMarker(s)
    } else {
        Tracing::Markers(s)
    }
}

/// Lowers a program for the hardware executor.
///
/// Errors: every problem found, each naming its op: references to another rank's streams, events or buffers; ranges
/// outside their buffer; kernel, memset and host-access ranges that are not 4-byte aligned; host access to device
/// memory, device work on pageable memory; NCCL peers outside the communicator; unbalanced groups; barrier arrivals by
/// non-participants; limits ([`MAX_RANKS`], [`MAX_TRACE_SLOTS_PER_RANK`], [`MAX_OBS_SLOTS_PER_RANK`]) exceeded.
pub fn lower(p: &Program) -> Result<Plan, Vec<LowerError>> {
    lower_with(p, &LowerOptions::default())
}

/// Options of [`lower_with`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LowerOptions {
    /// Time non-kernel stream ops with marker kernels (default `true`; `false` leaves them untraced, for checking
    /// that the markers change nothing).
    pub markers: bool,
}

impl Default for LowerOptions {
    fn default() -> Self {
        LowerOptions { markers: true }
    }
}

impl LowerOptions {
    /// The options a run uses: the defaults, with markers off when `CUORDER_HW_NO_MARKERS=1` (read by the
    /// supervisor and, through the inherited environment, by every rank process, so they lower alike).
    pub fn from_env() -> LowerOptions {
        LowerOptions { markers: std::env::var("CUORDER_HW_NO_MARKERS").as_deref() != Ok("1") }
    }
}

/// [`lower`] with options.
///
/// Errors: as [`lower`].
pub fn lower_with(p: &Program, opts: &LowerOptions) -> Result<Plan, Vec<LowerError>> {
    let mut cx = Ctx { p, markers: opts.markers, errors: Vec::new(), op: OpId { rank: 0, thread: 0, index: 0 } };
    if p.ranks.is_empty() {
        cx.errors.push(LowerError { op: None, message: "the program has no ranks".into() });
    }
    if p.ranks.len() > MAX_RANKS {
        cx.errors.push(LowerError {
            op: None,
            message: format!("{} ranks exceed the limit MAX_RANKS = {MAX_RANKS}", p.ranks.len()),
        });
        return Err(cx.errors);
    }
    for (ci, c) in p.comms.iter().enumerate() {
        if c.members.iter().any(|&m| m as usize >= p.ranks.len()) {
            cx.errors.push(LowerError {
                op: None,
                message: format!("communicator {ci} `{}` names a rank that does not exist", c.name),
            });
        }
    }
    for (ri, r) in p.ranks.iter().enumerate() {
        if r.streams.first().map(|s| s.kind) != Some(StreamKind::LegacyDefault) {
            cx.errors.push(LowerError {
                op: None,
                message: format!("rank {ri}: stream 0 must be the legacy default stream"),
            });
        }
    }
    let mut versions = BTreeMap::new();
    let mut next_version: u32 = 1;
    let mut barrier_rounds: BTreeMap<(u32, RankId, u32), u64> = BTreeMap::new();
    let mut ranks = Vec::with_capacity(p.ranks.len());

    for (ri, rank) in p.ranks.iter().enumerate() {
        let ri = ri as RankId;
        let mut rp = RankPlan {
            rank: ri,
            threads: Vec::new(),
            trace_slots: 0,
            obs_slots: 0,
            ranges: Vec::new(),
            obs_owner: Vec::new(),
            fresh_blocks: vec![0; rank.buffers.len()],
        };
        for (ti, thread) in rank.threads.iter().enumerate() {
            let mut steps = Vec::with_capacity(thread.ops.len());
            let mut group_depth: u32 = 0;
            let mut group_markers: Vec<(u32, u32)> = Vec::new();
            for (oi, op) in thread.ops.iter().enumerate() {
                cx.op = OpId { rank: ri, thread: ti as u32, index: oi as u32 };
                let this = cx.op;
                let mut version_for = |cx: &mut Ctx| new_version(cx, &mut next_version, &mut versions, this);
                // V1: a value assertion runs as the read it makes; the model checks the assertion.
                let kind = op.kind.without_assertion();
                let step = match kind.as_ref() {
                    OpKind::Kernel { stream, reads, writes, duration_ns, .. } => {
                        let st = cx.stream(*stream);
                        let start = rp.ranges.len() as u32;
                        for (k, r) in reads.iter().enumerate() {
                            if let Some((br, space)) = cx.word_range(*r, "kernel read") {
                                if space == MemSpace::PageableHost {
                                    cx.err("a kernel cannot read pageable host memory");
                                }
                                if rp.obs_slots >= MAX_OBS_SLOTS_PER_RANK {
                                    cx.err(format!("more than MAX_OBS_SLOTS_PER_RANK = {MAX_OBS_SLOTS_PER_RANK} reads"));
                                    continue;
                                }
                                let slot = rp.obs_slots;
                                rp.obs_slots += 1;
                                rp.obs_owner.push((ti as u32, oi as u32, k as u32));
                                rp.ranges.push(WordRange {
                                    buf: br.buf,
                                    word_offset: br.offset / 4,
                                    words: br.len / 4,
                                    obs_slot: slot,
                                });
                            }
                        }
                        let rs = RangeSlice { start, count: rp.ranges.len() as u32 - start };
                        let wstart = rp.ranges.len() as u32;
                        for r in writes {
                            if let Some((br, space)) = cx.word_range(*r, "kernel write") {
                                if space == MemSpace::PageableHost {
                                    cx.err("a kernel cannot write pageable host memory");
                                }
                                rp.ranges.push(WordRange {
                                    buf: br.buf,
                                    word_offset: br.offset / 4,
                                    words: br.len / 4,
                                    obs_slot: 0,
                                });
                            }
                        }
                        let ws = RangeSlice { start: wstart, count: rp.ranges.len() as u32 - wstart };
                        let version = if writes.is_empty() { 0 } else { version_for(&mut cx) };
                        let trace = Tracing::Kernel(new_slot(&mut cx, &mut rp));
                        Step::Kernel {
                            stream: st.map(|s| s.0).unwrap_or(0),
                            reads: rs,
                            writes: ws,
                            spin_ns: *duration_ns,
                            version,
                            trace,
                        }
                    }
                    OpKind::Memset { stream, dst } => {
                        let st = stream.and_then(|s| cx.stream(s));
                        let d = cx.word_range(*dst, "memset");
                        if let Some((_, MemSpace::PageableHost)) = d {
                            cx.err("cudaMemset cannot write pageable host memory");
                        }
                        let version = version_for(&mut cx);
                        let trace = match st {
                            Some((_, k)) => marker_trace(&mut cx, &mut rp, k, false),
                            None => Tracing::None,
                        };
                        Step::Memset {
                            stream: st.map(|s| s.0),
                            dst: d.map(|d| d.0).unwrap_or(ByteRange { buf: 0, offset: 0, len: 0 }),
                            version,
                            trace,
                        }
                    }
                    OpKind::Memcpy { stream, dst, src } => {
                        let st = stream.and_then(|s| cx.stream(s));
                        let d = cx.range(*dst);
                        let s = cx.range(*src);
                        if dst.len != src.len {
                            cx.err(format!("memcpy dst len {} bytes != src len {} bytes", dst.len, src.len));
                        }
                        let trace = match st {
                            Some((_, k)) => marker_trace(&mut cx, &mut rp, k, false),
                            None => Tracing::None,
                        };
                        let z = ByteRange { buf: 0, offset: 0, len: 0 };
                        Step::Memcpy {
                            stream: st.map(|s| s.0),
                            dst: d.map(|d| d.0).unwrap_or(z),
                            src: s.map(|s| s.0).unwrap_or(z),
                            trace,
                        }
                    }
                    OpKind::EventRecord { event, stream } => {
                        let e = cx.event(*event).unwrap_or(0);
                        let (s, k) = cx.stream(*stream).unwrap_or((0, StreamKind::LegacyDefault));
                        // Inside an open group the record is enqueued at once (N10); its end marker too.
                        let trace = marker_trace(&mut cx, &mut rp, k, true);
                        Step::EventRecord { event: e, stream: s, trace }
                    }
                    OpKind::StreamWaitEvent { stream, event } => {
                        let e = cx.event(*event).unwrap_or(0);
                        let (s, k) = cx.stream(*stream).unwrap_or((0, StreamKind::LegacyDefault));
                        let trace = marker_trace(&mut cx, &mut rp, k, true);
                        Step::StreamWaitEvent { stream: s, event: e, trace }
                    }
                    OpKind::EventQuery { event } => Step::EventQuery { event: cx.event(*event).unwrap_or(0) },
                    OpKind::EventSynchronize { event } => {
                        Step::EventSynchronize { event: cx.event(*event).unwrap_or(0) }
                    }
                    OpKind::StreamSynchronize { stream } => {
                        Step::StreamSynchronize { stream: cx.stream(*stream).map(|s| s.0).unwrap_or(0) }
                    }
                    OpKind::StreamQuery { stream } => {
                        Step::StreamQuery { stream: cx.stream(*stream).map(|s| s.0).unwrap_or(0) }
                    }
                    OpKind::DeviceSynchronize { rank: r } => {
                        if *r != ri {
                            cx.err(format!("synchronizes the device of rank {r} from rank {ri}"));
                        }
                        Step::DeviceSynchronize
                    }
                    OpKind::HostSleep { ns } => Step::HostSleep { ns: *ns },
                    OpKind::HostAccess { range, write } => {
                        let r = cx.word_range(*range, "host access");
                        if let Some((_, MemSpace::Device)) = r {
                            cx.err("the host cannot access device memory directly");
                        }
                        let range = r.map(|r| r.0).unwrap_or(ByteRange { buf: 0, offset: 0, len: 0 });
                        if *write {
                            Step::HostWrite { range, version: version_for(&mut cx) }
                        } else {
                            Step::HostRead { range }
                        }
                    }
                    OpKind::Barrier { barrier } => match p.barriers.get(*barrier as usize) {
                        None => {
                            cx.err(format!("barrier index {barrier} does not exist"));
                            Step::NoOp
                        }
                        Some(b) => {
                            if !b.participants.contains(&(ri, ti as u32)) {
                                cx.err(format!("arrives at barrier `{}` but is not one of its participants", b.name));
                            }
                            let n = barrier_rounds.entry((*barrier, ri, ti as u32)).or_insert(0);
                            let round = *n;
                            *n += 1;
                            Step::Barrier { barrier: *barrier, round }
                        }
                    },
                    OpKind::CommInit { comm } => {
                        match p.comms.get(comm.0 as usize) {
                            None => cx.err(format!("communicator index {} does not exist", comm.0)),
                            Some(c) if !c.explicit_init => cx.err(format!(
                                "initializes communicator `{}`, which is declared pre-initialized",
                                c.name
                            )),
                            Some(c) if !c.members.contains(&ri) => {
                                cx.err(format!("rank {ri} is not a member of communicator `{}`", c.name))
                            }
                            Some(_) => {}
                        }
                        match p.comms.get(comm.0 as usize) {
                            Some(c) if c.nonblocking => Step::CommInitNonBlocking { comm: comm.0 },
                            _ => Step::CommInit { comm: comm.0 },
                        }
                    }
                    OpKind::CommPoll { comm } | OpKind::CommAbort { comm } | OpKind::CommFinalize { comm } | OpKind::CommDestroy { comm } => {
                        match p.comms.get(comm.0 as usize) {
                            None => cx.err(format!("communicator index {} does not exist", comm.0)),
                            Some(c) if !c.members.contains(&ri) => {
                                cx.err(format!("rank {ri} is not a member of communicator `{}`", c.name))
                            }
                            Some(_) => {}
                        }
                        match kind.as_ref() {
                            OpKind::CommPoll { .. } => Step::CommPoll { comm: comm.0 },
                            OpKind::CommAbort { .. } => Step::CommAbort { comm: comm.0 },
                            OpKind::CommFinalize { .. } => Step::CommFinalize { comm: comm.0 },
                            _ => Step::CommDestroy { comm: comm.0 },
                        }
                    }
                    OpKind::CommSplit { parent, comm, .. } => {
                        match p.comms.get(parent.0 as usize) {
                            None => cx.err(format!("communicator index {} does not exist", parent.0)),
                            Some(c) if !c.members.contains(&ri) => {
                                cx.err(format!("rank {ri} is not a member of communicator `{}`", c.name))
                            }
                            Some(_) => {}
                        }
                        let (color, key) = match comm.map(|c| (c, p.comms.get(c.0 as usize))) {
                            None => (SPLIT_NOCOLOR, 0),
                            Some((c, Some(nc))) => match nc.members.iter().position(|&m| m == ri) {
                                Some(pos) => (c.0 as i32, pos as i32),
                                None => {
                                    cx.err(format!("rank {ri} is not a member of communicator `{}`", nc.name));
                                    (SPLIT_NOCOLOR, 0)
                                }
                            },
                            Some((c, None)) => {
                                cx.err(format!("communicator index {} does not exist", c.0));
                                (SPLIT_NOCOLOR, 0)
                            }
                        };
                        Step::CommSplit { parent: parent.0, color, key, comm: comm.map(|c| c.0) }
                    }
                    OpKind::Send { comm, peer, buf, stream } | OpKind::Recv { comm, peer, buf, stream } => {
                        let pos = cx.comm_peer(comm.0, *peer).unwrap_or(0);
                        if *peer == ri {
                            cx.err("sends to or receives from itself");
                        }
                        let b = cx.range(*buf);
                        if let Some((_, MemSpace::PageableHost)) = b {
                            cx.err("NCCL cannot send or receive pageable host memory");
                        }
                        let (s, k) = cx.stream(*stream).unwrap_or((0, StreamKind::LegacyDefault));
                        let trace = marker_trace(&mut cx, &mut rp, k, false);
                        if group_depth > 0 {
                            if let Some(slot) = trace.slot() {
                                group_markers.push((s, slot));
                            }
                        }
                        let buf = b.map(|b| b.0).unwrap_or(ByteRange { buf: 0, offset: 0, len: 0 });
                        if matches!(op.kind, OpKind::Send { .. }) {
                            Step::Send { comm: comm.0, peer: pos, buf, stream: s, trace }
                        } else {
                            Step::Recv { comm: comm.0, peer: pos, buf, stream: s, trace }
                        }
                    }
                    OpKind::Collective { comm, kind, send, recv, stream } => {
                        let root = match kind.root() {
                            Some(root) => cx.comm_peer(comm.0, root).unwrap_or(0),
                            None => {
                                cx.comm_peer(comm.0, ri);
                                0
                            }
                        };
                        let sr = cx.range(*send);
                        let rr = cx.range(*recv);
                        for r in [sr, rr].into_iter().flatten() {
                            if r.1 == MemSpace::PageableHost {
                                cx.err("NCCL cannot use pageable host memory");
                            }
                        }
                        if let Some(c) = p.comms.get(comm.0 as usize) {
                            let n = c.members.len() as u64;
                            let (ok, _) = kind.sizes_fit(send.len, recv.len, n);
                            if !ok {
                                cx.err(format!(
                                    "{kind:?} on {n} members with send {} bytes and recv {} bytes: sizes do not fit",
                                    send.len, recv.len
                                ));
                            }
                        }
                        let (s, k) = cx.stream(*stream).unwrap_or((0, StreamKind::LegacyDefault));
                        let trace = marker_trace(&mut cx, &mut rp, k, false);
                        if group_depth > 0 {
                            if let Some(slot) = trace.slot() {
                                group_markers.push((s, slot));
                            }
                        }
                        let z = ByteRange { buf: 0, offset: 0, len: 0 };
                        Step::Collective {
                            comm: comm.0,
                            kind: *kind,
                            root,
                            send: sr.map(|r| r.0).unwrap_or(z),
                            recv: rr.map(|r| r.0).unwrap_or(z),
                            stream: s,
                            trace,
                        }
                    }
                    OpKind::GroupStart => {
                        group_depth += 1;
                        Step::GroupStart
                    }
                    OpKind::GroupEnd => {
                        if group_depth == 0 {
                            cx.err("ncclGroupEnd without a matching ncclGroupStart");
                            Step::GroupEnd { outermost: false, end_markers: Vec::new() }
                        } else {
                            group_depth -= 1;
                            let outermost = group_depth == 0;
                            let end_markers = if outermost { std::mem::take(&mut group_markers) } else { Vec::new() };
                            Step::GroupEnd { outermost, end_markers }
                        }
                    }
                    OpKind::Alloc { buf, stream } => {
                        pooled_device(&mut cx, *buf);
                        let s = cx.stream(*stream).map(|s| s.0).unwrap_or(0);
                        let fresh = match rp.fresh_blocks.get_mut(buf.index as usize) {
                            Some(n) => {
                                *n += 1;
                                *n - 1
                            }
                            None => 0,
                        };
                        Step::Alloc { buf: buf.index, stream: s, fresh }
                    }
                    OpKind::Free { buf } => {
                        pooled_device(&mut cx, *buf);
                        Step::Free { buf: buf.index }
                    }
                    OpKind::RecordStream { buf, stream } => {
                        pooled_device(&mut cx, *buf);
                        let s = cx.stream(*stream).map(|s| s.0).unwrap_or(0);
                        Step::RecordStream { buf: buf.index, stream: s }
                    }
                    OpKind::CudaFree { buf } => {
                        if let Some(space) = cx.buf(*buf) {
                            let decl = &p.ranks[buf.rank as usize].buffers[buf.index as usize];
                            if decl.pooled || space != MemSpace::Device {
                                cx.err(format!("cudaFree of `{}`, which is not a static device buffer", decl.name));
                            }
                        }
                        Step::CudaFree { buf: buf.index }
                    }
                    OpKind::CudaMalloc { rank: r, bytes } | OpKind::CudaMallocHost { rank: r, bytes } => {
                        if *r != ri {
                            cx.err(format!("allocates on the device of rank {r} from rank {ri}"));
                        }
                        if *bytes > MAX_HOST_CALL_BYTES {
                            cx.err(format!("allocates {bytes} bytes; the executor allocates at most MAX_HOST_CALL_BYTES = {MAX_HOST_CALL_BYTES}"));
                        }
                        if matches!(kind.as_ref(), OpKind::CudaMalloc { .. }) {
                            Step::Malloc { bytes: *bytes }
                        } else {
                            Step::MallocHost { bytes: *bytes }
                        }
                    }
                    OpKind::EmptyCache { rank: r } => {
                        if *r != ri {
                            cx.err(format!("empties the cache of the device of rank {r} from rank {ri}"));
                        }
                        Step::EmptyCache
                    }
                    OpKind::LoadModule { rank: r, module } => {
                        if *r != ri {
                            cx.err(format!("loads a module on the device of rank {r} from rank {ri}"));
                        }
                        Step::LoadModule { module: module.clone() }
                    }
                    OpKind::HostFunc { stream, reads, writes, calls_cuda, duration_ns, .. } => {
                        if *calls_cuda {
                            cx.err("a host function that calls CUDA is undefined (S8): the executor does not run it");
                        }
                        let st = cx.stream(*stream).map(|s| s.0).unwrap_or(0);
                        let host = |cx: &mut Ctx, list: &[BufRange], what: &str| -> Vec<ByteRange> {
                            let mut out = vec![];
                            for r in list {
                                if let Some((br, space)) = cx.word_range(*r, what) {
                                    if space == MemSpace::Device {
                                        cx.err("a host function cannot access device memory (S8)");
                                    } else {
                                        out.push(br);
                                    }
                                }
                            }
                            out
                        };
                        let reads = host(&mut cx, reads, "host function read");
                        let writes = host(&mut cx, writes, "host function write");
                        let version = if writes.is_empty() { 0 } else { version_for(&mut cx) };
                        Step::HostFunc { stream: st, reads, writes, version, duration_ns: *duration_ns }
                    }
                    // `without_assertion` turned it into its read.
                    OpKind::Expect { .. } => {
                        cx.err("a value assertion was not lowered to its read");
                        Step::NoOp
                    }
                };
                steps.push(step);
            }
            if group_depth > 0 {
                cx.errors.push(LowerError {
                    op: None,
                    message: format!("rank {ri} thread {ti}: ends with {group_depth} ncclGroupStart not closed"),
                });
            }
            rp.threads.push(steps);
        }
        ranks.push(rp);
    }
    if cx.errors.is_empty() {
        Ok(Plan { versions, ranks })
    } else {
        Err(cx.errors)
    }
}

/// A short name of an op kind, for observations and messages (the model's [`OpKind::name`]).
pub fn op_kind_name(k: &OpKind) -> &'static str {
    k.name()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuorder_model::build::Builder;
    use cuorder_model::program::{BufRange, BufRef, CommId};

    fn sref(rank: u32, index: u32) -> StreamRef {
        StreamRef { rank, index }
    }

    #[test]
    fn versions_slots_and_group_markers() {
        let mut b = Builder::new("t", 2);
        let s = b.stream("s", StreamKind::NonBlocking);
        let x = b.buffer("x", 64, MemSpace::Device, false);
        for r in 0..2 {
            let bx = b.whole(r, x);
            b.op(r, 0, OpKind::Kernel { stream: sref(r, s), name: "k".into(), reads: vec![bx], writes: vec![bx], duration_ns: 5 })
                .op(r, 0, OpKind::GroupStart)
                .op(r, 0, OpKind::Send { comm: CommId(0), peer: 1 - r, buf: bx, stream: sref(r, s) })
                .op(r, 0, OpKind::Recv { comm: CommId(0), peer: 1 - r, buf: bx, stream: sref(r, 0) })
                .op(r, 0, OpKind::GroupEnd);
        }
        let plan = lower(&b.finish()).unwrap();
        assert_eq!(plan.versions.len(), 2);
        assert_eq!(plan.versions[&2], OpId { rank: 1, thread: 0, index: 0 });
        let r0 = &plan.ranks[0];
        assert_eq!(r0.obs_slots, 1);
        assert_eq!(r0.ranges.len(), 2);
        assert_eq!(r0.ranges[0], WordRange { buf: 0, word_offset: 0, words: 16, obs_slot: 0 });
        // Kernel slot 0; the send on `s` is traced with markers (slot 1); the recv on the legacy stream is not.
        assert_eq!(r0.threads[0][0].tracing(), Tracing::Kernel(0));
        assert_eq!(r0.threads[0][2], Step::Send { comm: 0, peer: 1, buf: ByteRange { buf: 0, offset: 0, len: 64 }, stream: s, trace: Tracing::Markers(1) });
        assert_eq!(r0.threads[0][3].tracing(), Tracing::None);
        assert_eq!(r0.threads[0][4], Step::GroupEnd { outermost: true, end_markers: vec![(s, 1)] });
    }

    #[test]
    fn every_problem_is_reported_with_its_op() {
        let mut b = Builder::new("bad", 2);
        let d = b.buffer("d", 64, MemSpace::Device, false);
        let h = b.buffer("h", 64, MemSpace::PageableHost, false);
        let rd = b.whole(0, d);
        let rh = b.whole(0, h);
        let other = b.whole(1, d);
        b.op(0, 0, OpKind::Kernel { stream: sref(0, 0), name: "k".into(), reads: vec![BufRange { offset: 2, len: 8, ..rd }], writes: vec![rh], duration_ns: 0 })
            .op(0, 0, OpKind::HostAccess { range: rd, write: false })
            .op(0, 0, OpKind::Memset { stream: None, dst: other })
            .op(0, 0, OpKind::Send { comm: CommId(0), peer: 7, buf: rd, stream: sref(0, 0) })
            .op(0, 0, OpKind::GroupEnd)
            .op(0, 0, OpKind::Memcpy { stream: None, dst: BufRange { len: 100, ..rd }, src: rd });
        let errs = lower(&b.finish()).unwrap_err();
        let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        let has = |op: u32, needle: &str| {
            text.iter().any(|t| t.starts_with(&format!("op (rank 0, thread 0, op {op})")) && t.contains(needle))
        };
        assert!(has(0, "multiples of 4"), "{text:#?}");
        assert!(has(0, "pageable"), "{text:#?}");
        assert!(has(1, "device memory"), "{text:#?}");
        assert!(has(2, "buffer 0 of rank 1"), "{text:#?}");
        assert!(has(3, "peer rank 7"), "{text:#?}");
        assert!(has(4, "without a matching"), "{text:#?}");
        assert!(has(5, "exceeds buffer"), "{text:#?}");
    }

    /// The new collectives lower with the root's position in the communicator, and a split with the joined
    /// communicator's index as color and the rank's position in it as key (NOCOLOR for a rank that joins none).
    #[test]
    fn split_and_rooted_collectives_lower_with_positions() {
        use cuorder_model::program::{CollectiveKind, Comm};
        let mut b = Builder::new("split", 3);
        let s = b.stream("s", StreamKind::NonBlocking);
        let x = b.buffer("x", 48, MemSpace::Device, false);
        let y = b.buffer("y", 16, MemSpace::Device, false);
        let mut p = b.finish();
        // comm 0: world (0, 1, 2); comm 1: "pair" = ranks 2 and 0, in key order (2 first).
        p.comms.push(Comm { name: "pair".into(), members: vec![2, 0], explicit_init: true, nonblocking: false, watchdog_ns: None });
        for r in 0..3u32 {
            let (bx, by) = (BufRange { buf: BufRef { rank: r, index: x }, offset: 0, len: 48 }, BufRange { buf: BufRef { rank: r, index: y }, offset: 0, len: 16 });
            let joined = (r != 1).then_some(CommId(1));
            let ops = vec![
                OpKind::CommSplit { parent: CommId(0), seq: 0, comm: joined },
                OpKind::Collective { comm: CommId(0), kind: CollectiveKind::Gather { root: 2 }, send: by, recv: bx, stream: sref(r, s) },
                OpKind::Collective { comm: CommId(0), kind: CollectiveKind::Scatter { root: 1 }, send: bx, recv: by, stream: sref(r, s) },
                OpKind::Collective { comm: CommId(0), kind: CollectiveKind::AllToAll, send: bx, recv: bx, stream: sref(r, s) },
                OpKind::Collective { comm: CommId(0), kind: CollectiveKind::Reduce { root: 0 }, send: by, recv: by, stream: sref(r, s) },
            ];
            for kind in ops {
                p.ranks[r as usize].threads[0].ops.push(cuorder_model::program::Op { kind, origin: Default::default() });
            }
        }
        let plan = lower(&p).unwrap();
        assert_eq!(plan.ranks[0].threads[0][0], Step::CommSplit { parent: 0, color: 1, key: 1, comm: Some(1) });
        assert_eq!(plan.ranks[1].threads[0][0], Step::CommSplit { parent: 0, color: SPLIT_NOCOLOR, key: 0, comm: None });
        assert_eq!(plan.ranks[2].threads[0][0], Step::CommSplit { parent: 0, color: 1, key: 0, comm: Some(1) });
        let root = |st: &Step| match st {
            Step::Collective { root, .. } => *root,
            other => panic!("not a collective: {other:?}"),
        };
        let t = &plan.ranks[1].threads[0];
        assert_eq!((root(&t[1]), root(&t[2]), root(&t[3]), root(&t[4])), (2, 1, 0, 0));
    }

    /// Sizes that do not fit a kind, and a split into a communicator the rank is not in, are errors of that op.
    #[test]
    fn bad_new_collectives_and_splits_are_reported() {
        use cuorder_model::program::{CollectiveKind, Comm};
        let mut b = Builder::new("bad", 2);
        let s = b.stream("s", StreamKind::NonBlocking);
        let x = b.buffer("x", 12, MemSpace::Device, false);
        let mut p = b.finish();
        p.comms.push(Comm { name: "solo".into(), members: vec![1], explicit_init: true, nonblocking: false, watchdog_ns: None });
        let bx = BufRange { buf: BufRef { rank: 0, index: x }, offset: 0, len: 12 };
        let half = BufRange { len: 4, ..bx };
        for kind in [
            OpKind::CommSplit { parent: CommId(0), seq: 0, comm: Some(CommId(1)) },
            OpKind::Collective { comm: CommId(0), kind: CollectiveKind::AllToAll, send: bx, recv: half, stream: sref(0, s) },
            OpKind::Collective { comm: CommId(0), kind: CollectiveKind::Gather { root: 1 }, send: half, recv: half, stream: sref(0, s) },
        ] {
            p.ranks[0].threads[0].ops.push(cuorder_model::program::Op { kind, origin: Default::default() });
        }
        let text: Vec<String> = lower(&p).unwrap_err().iter().map(|e| e.to_string()).collect();
        let has = |op: u32, needle: &str| text.iter().any(|t| t.starts_with(&format!("op (rank 0, thread 0, op {op})")) && t.contains(needle));
        assert!(has(0, "not a member of communicator `solo`"), "{text:#?}");
        assert!(has(1, "sizes do not fit"), "{text:#?}");
        assert!(has(2, "sizes do not fit"), "{text:#?}");
    }

    /// N12, N13: a non-blocking communicator's init lowers to ncclCommInitRankConfig (blocking = 0), and the poll,
    /// abort, finalize and destroy calls lower to their NCCL calls on the communicator's index; a lifecycle call on a
    /// communicator the rank is not in is an error of that op.
    #[test]
    fn lifecycle_calls_lower_to_their_nccl_calls() {
        use cuorder_model::program::Comm;
        let mut b = Builder::new("nb", 2);
        let s = b.stream("s", StreamKind::NonBlocking);
        let x = b.buffer("x", 16, MemSpace::Device, false);
        let mut p = b.finish();
        p.comms.push(Comm { name: "nb".into(), members: vec![0, 1], explicit_init: true, nonblocking: true, watchdog_ns: Some(1_000) });
        p.comms.push(Comm { name: "solo".into(), members: vec![1], explicit_init: true, nonblocking: false, watchdog_ns: None });
        for r in 0..2u32 {
            let bx = BufRange { buf: BufRef { rank: r, index: x }, offset: 0, len: 16 };
            let ops = vec![
                OpKind::CommInit { comm: CommId(1) },
                OpKind::CommPoll { comm: CommId(1) },
                OpKind::Send { comm: CommId(1), peer: 1 - r, buf: bx, stream: sref(r, s) },
                OpKind::CommPoll { comm: CommId(1) },
                OpKind::CommFinalize { comm: CommId(1) },
                OpKind::CommPoll { comm: CommId(1) },
                OpKind::CommDestroy { comm: CommId(1) },
                OpKind::CommAbort { comm: CommId(0) },
            ];
            for kind in ops {
                p.ranks[r as usize].threads[0].ops.push(cuorder_model::program::Op { kind, origin: Default::default() });
            }
        }
        let plan = lower(&p).unwrap();
        let t = &plan.ranks[0].threads[0];
        assert_eq!(t[0], Step::CommInitNonBlocking { comm: 1 });
        assert_eq!(t[1], Step::CommPoll { comm: 1 });
        assert!(matches!(t[2], Step::Send { comm: 1, peer: 1, .. }), "{:?}", t[2]);
        assert_eq!((&t[4], &t[6], &t[7]), (&Step::CommFinalize { comm: 1 }, &Step::CommDestroy { comm: 1 }, &Step::CommAbort { comm: 0 }));
        for st in &t[..] {
            assert_eq!(st.device_stream().is_some(), matches!(st, Step::Send { .. }), "{st:?}");
        }
        // A blocking communicator's init stays ncclCommInitRank.
        p.comms[1].nonblocking = false;
        assert_eq!(lower(&p).unwrap().ranks[1].threads[0][0], Step::CommInit { comm: 1 });
        // Rank 0 is not in `solo`.
        p.ranks[0].threads[0].ops.push(cuorder_model::program::Op { kind: OpKind::CommPoll { comm: CommId(2) }, origin: Default::default() });
        let text: Vec<String> = lower(&p).unwrap_err().iter().map(|e| e.to_string()).collect();
        assert!(text.iter().any(|t| t.starts_with("op (rank 0, thread 0, op 8)") && t.contains("not a member of communicator `solo`")), "{text:#?}");
    }

    #[test]
    fn barrier_rounds_count_per_participant() {
        let mut b = Builder::new("bar", 1);
        b.thread("t1");
        let mut p = b.finish();
        p.barriers.push(cuorder_model::program::BarrierDecl { name: "B".into(), participants: vec![(0, 0), (0, 1)] });
        for t in 0..2 {
            for _ in 0..2 {
                p.ranks[0].threads[t].ops.push(cuorder_model::program::Op { kind: OpKind::Barrier { barrier: 0 }, origin: Default::default() });
            }
        }
        let plan = lower(&p).unwrap();
        assert_eq!(plan.ranks[0].threads[1][1], Step::Barrier { barrier: 0, round: 1 });
    }

    #[test]
    fn host_calls_and_host_functions_lower_to_their_steps() {
        let mut b = Builder::new("s7s8", 1);
        let s = b.stream("s", StreamKind::NonBlocking);
        let d = b.buffer("d", 64, MemSpace::Device, false);
        let p = b.buffer("p", 64, MemSpace::PinnedHost, false);
        let (rd, rp) = (b.whole(0, d), b.whole(0, p));
        b.op(0, 0, OpKind::CudaFree { buf: BufRef { rank: 0, index: d } })
            .op(0, 0, OpKind::CudaMalloc { rank: 0, bytes: 1 << 20 })
            .op(0, 0, OpKind::CudaMallocHost { rank: 0, bytes: 4096 })
            .op(0, 0, OpKind::LoadModule { rank: 0, module: "attn".into() })
            .op(0, 0, OpKind::HostFunc { stream: sref(0, s), name: "cb".into(), reads: vec![rp], writes: vec![rp], calls_cuda: false, duration_ns: 0 })
            .op(0, 0, OpKind::HostFunc { stream: sref(0, s), name: "ro".into(), reads: vec![rp], writes: vec![], calls_cuda: false, duration_ns: 0 })
            .op(0, 0, OpKind::EmptyCache { rank: 0 });
        let _ = rd;
        let plan = lower(&b.finish()).unwrap();
        let steps = &plan.ranks[0].threads[0];
        assert_eq!(steps[0], Step::CudaFree { buf: d });
        assert_eq!(steps[1], Step::Malloc { bytes: 1 << 20 });
        assert_eq!(steps[2], Step::MallocHost { bytes: 4096 });
        assert_eq!(steps[3], Step::LoadModule { module: "attn".into() });
        let whole = ByteRange { buf: p, offset: 0, len: 64 };
        // The writing host function stamps a version of its own (the only writer: version 1); the reading one none.
        assert_eq!(steps[4], Step::HostFunc { stream: s, reads: vec![whole], writes: vec![whole], version: 1, duration_ns: 0 });
        assert_eq!(plan.versions[&1], OpId { rank: 0, thread: 0, index: 4 });
        assert_eq!(steps[5], Step::HostFunc { stream: s, reads: vec![whole], writes: vec![], version: 0, duration_ns: 0 });
        assert_eq!(steps[6], Step::EmptyCache);
        assert_eq!(steps[4].device_stream(), Some(Some(s)));
        assert_eq!(steps[0].device_stream(), None);
    }

    #[test]
    fn host_calls_and_host_functions_that_cannot_run_are_reported_with_their_op() {
        let mut b = Builder::new("bad-s7s8", 2);
        let s = b.stream("s", StreamKind::NonBlocking);
        let d = b.buffer("d", 64, MemSpace::Device, false);
        let p = b.buffer("p", 64, MemSpace::PinnedHost, false);
        let q = b.buffer("q", 64, MemSpace::Device, true);
        let (rd, rp) = (b.whole(0, d), b.whole(0, p));
        b.op(0, 0, OpKind::CudaFree { buf: BufRef { rank: 0, index: p } })
            .op(0, 0, OpKind::CudaFree { buf: BufRef { rank: 0, index: q } })
            .op(0, 0, OpKind::CudaMalloc { rank: 1, bytes: 64 })
            .op(0, 0, OpKind::CudaMallocHost { rank: 0, bytes: MAX_HOST_CALL_BYTES + 1 })
            .op(0, 0, OpKind::LoadModule { rank: 1, module: "m".into() })
            .op(0, 0, OpKind::HostFunc { stream: sref(0, s), name: "cb".into(), reads: vec![], writes: vec![], calls_cuda: true, duration_ns: 0 })
            .op(0, 0, OpKind::HostFunc { stream: sref(0, s), name: "dev".into(), reads: vec![rd], writes: vec![], calls_cuda: false, duration_ns: 0 })
            .op(0, 0, OpKind::HostFunc { stream: sref(0, s), name: "odd".into(), reads: vec![BufRange { len: 6, ..rp }], writes: vec![], calls_cuda: false, duration_ns: 0 });
        let errs = lower(&b.finish()).unwrap_err();
        let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        let has = |op: u32, needle: &str| {
            text.iter().any(|t| t.starts_with(&format!("op (rank 0, thread 0, op {op})")) && t.contains(needle))
        };
        assert!(has(0, "not a static device buffer"), "{text:#?}");
        assert!(has(1, "not a static device buffer"), "{text:#?}");
        assert!(has(2, "device of rank 1 from rank 0"), "{text:#?}");
        assert!(has(3, "MAX_HOST_CALL_BYTES"), "{text:#?}");
        assert!(has(4, "device of rank 1 from rank 0"), "{text:#?}");
        assert!(has(5, "calls CUDA is undefined (S8)"), "{text:#?}");
        assert!(has(6, "cannot access device memory (S8)"), "{text:#?}");
        assert!(has(7, "multiples of 4"), "{text:#?}");
    }
}
