//! The resolved program: what every host thread of every rank calls, after the SPMD body has been expanded per rank
//! and every name has been resolved to an index. This is the only input the semantics (`semantics.rs`) reads; the
//! surface format (`format.rs`) and its validation produce it.
//!
//! Indices are plain `u32`-sized newtypes so that states stay small and hashing stays cheap. Every index is only
//! meaningful together with the rank it belongs to (streams, events and buffers are per device; one rank = one GPU).

use serde::{Deserialize, Serialize};

/// A global rank (one process, one GPU).
pub type RankId = u32;

/// Index of a communicator in [`Program::comms`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CommId(pub u32);

/// A stream of one device: `rank` owns it, `index` is into that rank's [`Rank::streams`].
/// Index 0 of every rank is always the legacy default stream `sL` (S2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct StreamRef {
    pub rank: RankId,
    pub index: u32,
}

/// An event of one device (events belong to the device they were created on; S3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EventRef {
    pub rank: RankId,
    pub index: u32,
}

/// A buffer of one rank (device memory or host memory of that rank's process).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BufRef {
    pub rank: RankId,
    pub index: u32,
}

/// A byte range of a buffer: `offset` and `len` in bytes. Validation guarantees `offset + len <= buffer bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BufRange {
    pub buf: BufRef,
    pub offset: u64,
    pub len: u64,
}

/// A whole program after expansion.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Program {
    /// The program's name (the file stem when loaded from a file).
    pub name: String,
    /// One entry per global rank, index = rank.
    pub ranks: Vec<Rank>,
    /// Every communicator, index = [`CommId`].
    pub comms: Vec<Comm>,
    /// Every host barrier, index = `BarrierId` used by [`OpKind::Barrier`].
    pub barriers: Vec<BarrierDecl>,
    /// Whether the program was written in the PyTorch dialect (a `torch:` setting or a PyTorch call, lowered when
    /// loaded), so that the dialect's settings (`--torch-version`, ...) can change it. False for a program built in
    /// code or read in resolved form. Not serialized: the resolved form, and the fingerprint of a packed hardware
    /// run (`cuorder_hw::pack::fingerprint`, its compact RON), stay what they were (a recorded trace stopped
    /// matching its program when this field was serialized).
    #[serde(skip)]
    pub uses_torch: bool,
}

/// What one rank (process + GPU) declares and runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rank {
    /// Streams of this rank's device; index 0 is the legacy default stream.
    pub streams: Vec<Stream>,
    /// Events created on this rank's device.
    pub events: Vec<String>,
    /// Buffers of this rank.
    pub buffers: Vec<Buffer>,
    /// Host threads of this rank, each running its ops in order.
    pub threads: Vec<Thread>,
}

/// A stream declaration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stream {
    pub name: String,
    pub kind: StreamKind,
}

/// The kinds of CUDA stream, which differ only in their implicit synchronization with the legacy default stream (S2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum StreamKind {
    /// Stream 0 under the legacy default-stream semantics: waits for, and is waited on by, every blocking stream.
    LegacyDefault,
    /// `cudaStreamCreate` / `cudaStreamCreateWithFlags(cudaStreamDefault)`: synchronizes with the legacy stream.
    Blocking,
    /// `cudaStreamNonBlocking`: no implicit synchronization.
    NonBlocking,
    /// `cudaStreamPerThread`: no implicit synchronization (S2).
    PerThreadDefault,
}

/// A buffer declaration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Buffer {
    pub name: String,
    /// Size in bytes.
    pub bytes: u64,
    pub space: MemSpace,
    /// `true` for a buffer of the caching allocator (P4): it holds no memory until an [`OpKind::Alloc`] and loses it at
    /// [`OpKind::Free`]. `false`: allocated for the whole program.
    pub pooled: bool,
}

/// Where a buffer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum MemSpace {
    Device,
    /// `cudaHostAlloc` / `cudaMallocHost`: asynchronous copies stay asynchronous (S5).
    PinnedHost,
    /// `malloc`: asynchronous copies are host-synchronous (S5).
    PageableHost,
}

/// A communicator: its members, in communicator-rank order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Comm {
    pub name: String,
    /// Global ranks of the members; position = rank within the communicator.
    pub members: Vec<RankId>,
    /// `true` when the program creates it with [`OpKind::CommInit`] ops (N8); `false` when it exists before the
    /// program starts.
    pub explicit_init: bool,
    /// `true` for a non-blocking communicator (`ncclConfig_t.blocking = 0`; N12): its calls return `ncclInProgress`
    /// and enqueue nothing until an [`OpKind::CommPoll`] sees `ncclSuccess`. `false` (the default): every call
    /// blocks until done. Left out of the serialized form when `false`, so that programs without it serialize (and
    /// fingerprint: `hw/src/pack.rs`) as before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nonblocking: bool,
    /// A host watchdog over this communicator (N9), in nanoseconds: when work on it has not ended this long after
    /// it was issued, the rank's watchdog aborts the communicator (`ncclCommAbort`, N13), as ProcessGroupNCCL's
    /// watchdog does after `init_process_group(timeout=)`. `None`: no watchdog (a hang stays a hang); left out of
    /// the serialized form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watchdog_ns: Option<u64>,
}

impl Comm {
    /// The position of global rank `r` among the members (its rank within the communicator), if it is one. O(1)
    /// when member `r` is rank `r` (a world communicator), O(members) otherwise.
    pub fn position(&self, r: RankId) -> Option<usize> {
        member_position(&self.members, r)
    }
}

/// The position of global rank `r` in `members`, if there: O(1) when `members[r] == r` (a world communicator, so
/// that checking every op of a 1000-rank program stays linear), O(members) otherwise.
pub fn member_position(members: &[RankId], r: RankId) -> Option<usize> {
    if members.get(r as usize) == Some(&r) {
        return Some(r as usize);
    }
    members.iter().position(|&m| m == r)
}

/// A host barrier: every listed (rank, thread) must arrive before any leaves; the n-th arrival of each participant
/// belongs to the n-th round.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BarrierDecl {
    pub name: String,
    /// (rank, thread index) of every participant, sorted.
    pub participants: Vec<(RankId, u32)>,
}

/// One host thread of a rank.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thread {
    pub name: String,
    pub ops: Vec<Op>,
}

/// One host call, with where it came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    pub kind: OpKind,
    /// Where the op was written, for messages.
    pub origin: Origin,
}

/// The place in the source text an op was written: byte offset and 1-based line and column of the op's first
/// character. `None` fields when the program was built in code.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    pub offset: Option<usize>,
    pub line: Option<u32>,
    pub column: Option<u32>,
}

/// Kind of NCCL collective (C1). Roots are *global* ranks.
///
/// `AllToAll`, `Gather` and `Scatter` are NCCL ≥ 2.28's `ncclAlltoAll`, `ncclGather` and `ncclScatter`, which NCCL
/// translates into grouped point-to-point tasks (a "one-shot" algorithm: NVIDIA/nccl design note *NCCL
/// alltoall/gather/scatter api*); [`CollectiveKind::needs_all`] and [`CollectiveKind::may_end_alone`] give the
/// ordering that follows (C1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum CollectiveKind {
    AllReduce,
    /// Broadcast from the member with this *global* rank.
    Broadcast { root: RankId },
    AllGather,
    ReduceScatter,
    /// `ncclAlltoAll`: member i sends the j-th of its `members` equal blocks of `send` to member j, which stores it
    /// as the i-th block of `recv` (send = recv bytes, a multiple of the member count).
    AllToAll,
    /// `ncclReduce` to the member with this global rank: only the root's `recv` is written.
    Reduce { root: RankId },
    /// `ncclGather` to `root`: recv = send × members, written on the root only.
    Gather { root: RankId },
    /// `ncclScatter` from `root`: send = recv × members, read on the root only.
    Scatter { root: RankId },
}

impl CollectiveKind {
    /// The kind's name in the surface format ("AllReduce", "Broadcast", ...).
    pub fn name(self) -> &'static str {
        match self {
            CollectiveKind::AllReduce => "AllReduce",
            CollectiveKind::Broadcast { .. } => "Broadcast",
            CollectiveKind::AllGather => "AllGather",
            CollectiveKind::ReduceScatter => "ReduceScatter",
            CollectiveKind::AllToAll => "AllToAll",
            CollectiveKind::Reduce { .. } => "Reduce",
            CollectiveKind::Gather { .. } => "Gather",
            CollectiveKind::Scatter { .. } => "Scatter",
        }
    }

    /// The root's global rank, for rooted collectives.
    pub fn root(self) -> Option<RankId> {
        match self {
            CollectiveKind::Broadcast { root }
            | CollectiveKind::Reduce { root }
            | CollectiveKind::Gather { root }
            | CollectiveKind::Scatter { root } => Some(root),
            CollectiveKind::AllReduce | CollectiveKind::AllGather | CollectiveKind::ReduceScatter | CollectiveKind::AllToAll => {
                None
            }
        }
    }

    /// Whether send and recv sizes (bytes) fit a collective over `members` ranks, with the rule in words
    /// ("recv = send × members").
    pub fn sizes_fit(self, send_bytes: u64, recv_bytes: u64, members: u64) -> (bool, &'static str) {
        match self {
            CollectiveKind::AllReduce | CollectiveKind::Broadcast { .. } | CollectiveKind::Reduce { .. } => {
                (send_bytes == recv_bytes, "recv = send")
            }
            CollectiveKind::AllGather | CollectiveKind::Gather { .. } => {
                (send_bytes.checked_mul(members) == Some(recv_bytes), "recv = send × members")
            }
            CollectiveKind::ReduceScatter | CollectiveKind::Scatter { .. } => {
                (recv_bytes.checked_mul(members) == Some(send_bytes), "send = recv × members")
            }
            CollectiveKind::AllToAll => (
                send_bytes == recv_bytes && members > 0 && send_bytes % members == 0,
                "recv = send, a multiple of the member count (one block per member)",
            ),
        }
    }

    /// The per-member byte count every member must agree on (C1): the send size, or the recv size where the send
    /// side differs per member (broadcast: only the root sends; reduce-scatter and scatter: recv is the per-rank
    /// part).
    pub fn agreed_bytes(self, send_bytes: u64, recv_bytes: u64) -> u64 {
        match self {
            CollectiveKind::AllReduce
            | CollectiveKind::AllGather
            | CollectiveKind::AllToAll
            | CollectiveKind::Reduce { .. }
            | CollectiveKind::Gather { .. } => send_bytes,
            CollectiveKind::Broadcast { .. } | CollectiveKind::ReduceScatter | CollectiveKind::Scatter { .. } => recv_bytes,
        }
    }

    /// Whether a member with global rank `rank` reads its send buffer (C1: of a broadcast or scatter, only the
    /// root).
    pub fn reads_send(self, rank: RankId) -> bool {
        match self {
            CollectiveKind::Broadcast { root } | CollectiveKind::Scatter { root } => root == rank,
            _ => true,
        }
    }

    /// Whether a member with global rank `rank` writes its recv buffer (C1: of a reduce or gather, only the root;
    /// NCCL docs: "recvbuff is only used on rank root").
    pub fn writes_recv(self, rank: RankId) -> bool {
        match self {
            CollectiveKind::Reduce { root } | CollectiveKind::Gather { root } => root == rank,
            _ => true,
        }
    }

    /// Whether the part of member `rank` can end only once every member's part runs (C1). `false` for the parts
    /// that are one point-to-point exchange with the root under the hood: a gather's non-root part (its send to the
    /// root) and a scatter's non-root part (its recv from the root), which need only the root's part.
    pub fn needs_all(self, rank: RankId) -> bool {
        match self {
            CollectiveKind::Gather { root } | CollectiveKind::Scatter { root } => root == rank,
            _ => true,
        }
    }

    /// Whether the part of member `rank` only sends, so that it may end before the parts it sends to run, like an
    /// eager send (N2), within the profile's eager window: a broadcast root, a scatter root, a gather's non-root.
    pub fn may_end_alone(self, rank: RankId) -> bool {
        match self {
            CollectiveKind::Broadcast { root } | CollectiveKind::Scatter { root } => root == rank,
            CollectiveKind::Gather { root } => root != rank,
            _ => false,
        }
    }
}

/// What a host call does. Every stream-ordered op names its stream explicitly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpKind {
    /// A kernel launch: enqueues an item that reads and writes the given ranges; `duration_ns` is used by timed runs.
    Kernel { stream: StreamRef, name: String, reads: Vec<BufRange>, writes: Vec<BufRange>, duration_ns: u64 },
    /// `cudaMemsetAsync` on `stream`, or synchronous `cudaMemset` (legacy stream, host waits) when `stream` is `None`.
    Memset { stream: Option<StreamRef>, dst: BufRange },
    /// `cudaMemcpyAsync` on `stream`, or synchronous `cudaMemcpy` (legacy stream, host waits; S5) when `None`.
    /// `dst.len == src.len`. The direction follows from the two buffers' [`MemSpace`]s.
    Memcpy { stream: Option<StreamRef>, dst: BufRange, src: BufRange },
    /// `cudaEventRecord(event, stream)` (S3).
    EventRecord { event: EventRef, stream: StreamRef },
    /// `cudaStreamWaitEvent(stream, event)` (S3).
    StreamWaitEvent { stream: StreamRef, event: EventRef },
    /// `cudaEventQuery`: never blocks; answers ready or not ready (S4).
    EventQuery { event: EventRef },
    /// `cudaEventSynchronize` (S4).
    EventSynchronize { event: EventRef },
    /// `cudaStreamSynchronize` (S4).
    StreamSynchronize { stream: StreamRef },
    /// `cudaStreamQuery`: never blocks (S4).
    StreamQuery { stream: StreamRef },
    /// `cudaDeviceSynchronize` / `torch.cuda.synchronize()` on the device of `rank` (S4, P5).
    DeviceSynchronize { rank: RankId },
    /// The host thread sleeps `ns` nanoseconds (only timed runs care).
    HostSleep { ns: u64 },
    /// The host thread reads (`write == false`) or writes host memory directly.
    HostAccess { range: BufRange, write: bool },
    /// A host barrier (index into [`Program::barriers`]).
    Barrier { barrier: u32 },
    /// `ncclCommInitRank` on a blocking communicator: blocks until every member has called it (N8).
    CommInit { comm: CommId },
    /// `ncclCommSplit(parent, color, key, &comm)`: the `seq`-th split of `parent` by this rank (from 0), a collective
    /// call over the parent's members that blocks until every member of `parent` has made its `seq`-th split (N8).
    /// `comm` is the communicator this rank joins (its members share its color, ordered by key), `None` for
    /// `NCCL_SPLIT_NOCOLOR`. The new communicator is usable by this thread after the call.
    CommSplit { parent: CommId, seq: u32, comm: Option<CommId> },
    /// `ncclCommGetAsyncError(comm)` in a loop until it stops returning `ncclInProgress` (N12): blocks until the
    /// call this thread made on the non-blocking `comm` has finished in the background, then the deferred work is
    /// enqueued. Returns at once when nothing is in progress (and on a blocking communicator).
    CommPoll { comm: CommId },
    /// `ncclCommAbort(comm)` on this rank (N13): never waits; every launch of this rank on `comm` that has not ended
    /// ends now with its unfinished operations *aborted* (their data is undefined), work still in progress is
    /// dropped, and the communicator may not be used again on this rank.
    CommAbort { comm: CommId },
    /// `ncclCommFinalize(comm)` (N13): a collective call; blocks (or, non-blocking, is in progress) until every
    /// launch of this rank on `comm` has ended and every member has called it.
    CommFinalize { comm: CommId },
    /// `ncclCommDestroy(comm)` (N13): frees the communicator locally after a finished `CommFinalize`; without one it
    /// finalizes first (blocking, collective). The communicator may not be used again on this rank.
    CommDestroy { comm: CommId },
    /// `ncclSend` of `buf.len` bytes to global rank `peer` (N1-N4).
    Send { comm: CommId, peer: RankId, buf: BufRange, stream: StreamRef },
    /// `ncclRecv` of `buf.len` bytes from global rank `peer`.
    Recv { comm: CommId, peer: RankId, buf: BufRange, stream: StreamRef },
    /// `ncclGroupStart` (N4).
    GroupStart,
    /// `ncclGroupEnd` (N4): the outermost one launches what the group collected.
    GroupEnd,
    /// A collective on `comm` (C1): reads `send`, writes `recv` (of a broadcast or scatter only the root reads `send`;
    /// of a reduce or gather only the root writes `recv`).
    Collective { comm: CommId, kind: CollectiveKind, send: BufRange, recv: BufRange, stream: StreamRef },
    /// Caching-allocator allocation of a pooled buffer on `stream` (P4).
    Alloc { buf: BufRef, stream: StreamRef },
    /// Caching-allocator free of a pooled buffer (P4): the block returns to its allocation stream's pool at once.
    Free { buf: BufRef },
    /// `tensor.record_stream(stream)` (P4): the block is not reused until `stream`'s work at free time has ended.
    RecordStream { buf: BufRef, stream: StreamRef },
    /// A value assertion (V1): reads `range` and expects to see what op `writer` of the same thread wrote, i.e. that
    /// op's write happens before this read. On `stream` it is a stream-ordered read (a zero-length kernel that reads
    /// `range`); without a stream, a host read of host memory. A read that does not see that write is a stale read.
    ///
    /// `sent_from` (the surface's `written_by: Send("x@0")`): the writer is a [`OpKind::Recv`], and the data it
    /// received must come from a send that read inside this range of the sending rank's buffer: the send the recv
    /// matched (N3, positional) must read a sub-range of `sent_from`, or the read is stale too. Left out of the
    /// serialized form when `None`, so that programs without it serialize (and fingerprint) as before.
    Expect {
        range: BufRange,
        stream: Option<StreamRef>,
        writer: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sent_from: Option<BufRange>,
    },
    /// `cudaFree` of a non-pooled buffer (S7): may synchronize the device (or every device) first, per the
    /// profile's `implicit_sync.free`; the buffer is released, so any later use, and any issued work that has not
    /// ended when the memory is released, is undefined. `buf` may belong to another rank than the calling thread's
    /// (one process driving several GPUs); a `Device` scope then may mean either device (both are explored).
    CudaFree { buf: BufRef },
    /// `cudaMalloc` of `bytes` bytes on the device of `rank` (S7): the memory is not named by the program (its
    /// only effect the model cares about is the implicit synchronization of `implicit_sync.malloc`).
    CudaMalloc { rank: RankId, bytes: u64 },
    /// `cudaMallocHost` / `cudaHostAlloc` of `bytes` bytes of pinned host memory by a thread of `rank` (S7):
    /// implicit synchronization per `implicit_sync.malloc_host`.
    CudaMallocHost { rank: RankId, bytes: u64 },
    /// The load of module `module` on the device of `rank` that the first launch of one of its kernels triggers under
    /// `CUDA_MODULE_LOADING=LAZY` (S7): synchronizes per `implicit_sync.lazy_load` the first time per device and
    /// module; later loads of the same module do nothing.
    LoadModule { rank: RankId, module: String },
    /// `torch.cuda.empty_cache()` on the device of `rank` (P4, S7): the caching allocator first waits for the events
    /// `record_stream` left on its free blocks (`cudaEventSynchronize`), then releases every free block with
    /// `cudaFree` (implicit synchronization per `implicit_sync.free`). Released blocks are never handed out again.
    EmptyCache { rank: RankId },
    /// `cudaLaunchHostFunc(stream, fn)` (S8): host work ordered on `stream` like a kernel, reading and writing host
    /// memory. `calls_cuda`: the function calls the CUDA API, which is undefined (S8).
    /// `duration_ns`: how long the function runs on the host, ns (timed runs only; 0 in programs written before it).
    HostFunc {
        stream: StreamRef,
        name: String,
        reads: Vec<BufRange>,
        writes: Vec<BufRange>,
        calls_cuda: bool,
        #[serde(default)]
        duration_ns: u64,
    },
}

impl Program {
    /// Total number of host threads over all ranks.
    pub fn thread_count(&self) -> usize {
        self.ranks.iter().map(|r| r.threads.len()).sum()
    }

    /// The stream a reference names. Panics only on an unvalidated program (validation guarantees every reference).
    pub fn stream(&self, s: StreamRef) -> &Stream {
        &self.ranks[s.rank as usize].streams[s.index as usize]
    }

    /// The buffer a reference names.
    pub fn buffer(&self, b: BufRef) -> &Buffer {
        &self.ranks[b.rank as usize].buffers[b.index as usize]
    }

    /// The event's name.
    pub fn event_name(&self, e: EventRef) -> &str {
        &self.ranks[e.rank as usize].events[e.index as usize]
    }
}
