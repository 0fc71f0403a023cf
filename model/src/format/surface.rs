//! The surface syntax as serde types: exactly what a program file may contain, before SPMD expansion and name
//! resolution. Sizes, durations and buffer arguments are kept as written so that their errors are reported by
//! validation (all at once, with spans) rather than by the deserializer (one at a time).

use super::expr::{self, Expr};
use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;
use std::fmt;

/// The parameters that may be given positionally, by form: `Kernel("fwd", stream: "s0")` is
/// `Kernel(name: "fwd", stream: "s0")`. Positional argument `i` is parameter `i` of the list.
pub const POSITIONAL: &[(&str, &[&str])] = &[
    ("Stream", &["name", "kind"]),
    ("Buffer", &["name", "size", "space"]),
    ("Pooled", &["name", "size"]),
    ("Comm", &["name", "members", "init"]),
    ("Thread", &["name", "ops"]),
    ("Kernel", &["name"]),
    ("Memset", &["buf"]),
    ("Record", &["event"]),
    ("Wait", &["event"]),
    ("EventQuery", &["event"]),
    ("EventSync", &["event"]),
    ("StreamSync", &["stream"]),
    ("StreamQuery", &["stream"]),
    ("Sleep", &["duration"]),
    ("HostRead", &["buf"]),
    ("HostWrite", &["buf"]),
    ("Barrier", &["name"]),
    ("CommInit", &["comm"]),
    ("CommSplit", &["comm"]),
    ("Poll", &["comm"]),
    ("CommAbort", &["comm"]),
    ("CommFinalize", &["comm"]),
    ("CommDestroy", &["comm"]),
    ("NewGroup", &["name", "ranks"]),
    ("DistReduce", &["tensor"]),
    ("DistGather", &["tensor"]),
    ("DistScatter", &["tensor"]),
    ("Group", &["ops"]),
    ("Alloc", &["buf"]),
    ("Free", &["buf"]),
    ("Malloc", &["size"]),
    ("MallocHost", &["size"]),
    ("LoadModule", &["module"]),
    ("HostFunc", &["name"]),
    ("RecordStream", &["buf"]),
    ("Expect", &["buf"]),
    ("DistSend", &["tensor"]),
    ("DistRecv", &["tensor"]),
    ("Isend", &["tensor"]),
    ("Irecv", &["tensor"]),
    ("BatchIsendIrecv", &["ops"]),
    ("P2POp", &["op", "tensor", "peer"]),
    ("WorkWait", &["work"]),
    ("DistAllReduce", &["tensor"]),
    ("DistBroadcast", &["tensor"]),
    ("WithStream", &["stream", "ops"]),
    ("Compute", &["name"]),
    ("RecordEvent", &["event"]),
    ("WaitEvent", &["event"]),
    ("Empty", &["tensor"]),
    ("Del", &["tensor"]),
    ("FreeStorage", &["tensor"]),
    ("OnRanks", &["ranks", "ops"]),
    ("Repeat", &["count", "ops"]),
    ("For", &["var", "range", "ops"]),
    ("If", &["cond", "then", "else"]),
    ("Slice", &["buf", "offset", "len"]),
    ("Rank", &["rank"]),
];

/// The parameters that hold an expression (by form and parameter name): a value written there that is not a string,
/// a list or a plain integer (`stage + 1`, `i`, `0..M`) is put in double quotes before RON parses it, so that
/// `Rank(stage + 1)` reads as `Rank("stage + 1")`.
pub const EXPR_SLOTS: &[(&str, &[&str])] =
    &[("For", &["var", "range"]), ("If", &["cond"]), ("Rank", &["rank"]), ("CommSplit", &["color", "key"])];

/// Whether parameter `field` (a name, or `_i` / `i` for a positional one) of `form` holds an expression.
pub fn is_expr_slot(form: &str, field: &str) -> bool {
    let name = field
        .trim_start_matches('_')
        .parse::<usize>()
        .ok()
        .and_then(|i| POSITIONAL.iter().find(|(f, _)| *f == form).and_then(|(_, names)| names.get(i).copied()))
        .unwrap_or(field);
    EXPR_SLOTS.iter().any(|(f, params)| *f == form && params.contains(&name))
}

/// The name of positional parameter `field` (`_0`, `_1`, ..) of `form`, if it has one.
pub fn positional_name(form: &str, field: &str) -> Option<&'static str> {
    let i: usize = field.strip_prefix('_')?.parse().ok()?;
    POSITIONAL.iter().find(|(f, _)| *f == form).and_then(|(_, names)| names.get(i).copied())
}

/// `Program(ranks: .., streams: [..], events: [..], buffers: [..], comms: [..], threads: [..])`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename = "Program", deny_unknown_fields)]
pub struct SProgram {
    /// Number of ranks (processes, one GPU each); every rank runs the SPMD body.
    pub ranks: u32,
    #[serde(default)]
    pub streams: Vec<SStream>,
    #[serde(default)]
    pub events: Vec<String>,
    #[serde(default)]
    pub buffers: Vec<SBuffer>,
    #[serde(default)]
    pub comms: Vec<SComm>,
    pub threads: Vec<SThread>,
    /// The PyTorch dialect (`torch.rs`): present when the program calls `torch.distributed` / `torch.cuda`.
    #[serde(default)]
    pub torch: Option<STorch>,
}

/// `torch: Torch(version: Before82450)`: which ProcessGroupNCCL the PyTorch calls of the program are lowered as.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename = "Torch", deny_unknown_fields)]
pub struct STorch {
    #[serde(default)]
    pub version: STorchVersion,
    #[serde(default)]
    pub init: STorchInit,
    /// `init_process_group(timeout=)`: ProcessGroupNCCL's watchdog aborts the communicators of work unfinished after
    /// this long (N9; PyTorch's default is 10 min, with `TORCH_NCCL_ASYNC_ERROR_HANDLING` on). Absent: no watchdog.
    #[serde(default)]
    pub timeout: Option<Duration>,
    /// `TORCH_NCCL_AVOID_RECORD_STREAMS=1`: ProcessGroupNCCL stashes the tensors of a call in its work until
    /// `work.wait()` instead of calling `record_stream` on the NCCL stream (P4).
    #[serde(default)]
    pub avoid_record_streams: bool,
}

/// How the default process group was initialised, which decides the communicator of unbatched P2P ops (P2).
#[derive(Clone, Copy, Debug, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(rename = "process group init")]
pub enum STorchInit {
    /// `init_process_group("nccl")`: communicators are created lazily; an unbatched send or recv between ranks a < b
    /// uses a 2-rank communicator "a:b" (with its own NCCL stream) created at its first use.
    #[default]
    Lazy,
    /// `init_process_group("nccl", device_id=..)`: since pytorch/pytorch PR 132900 every P2P op runs on the default
    /// group's communicator.
    Eager,
}

/// The ProcessGroupNCCL behaviours that differ between PyTorch versions (P3).
#[derive(Clone, Copy, Debug, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(rename = "PyTorch version")]
pub enum STorchVersion {
    /// Before pytorch/pytorch PR 82450 (2022): `batch_isend_irecv` records each work's end event inside the open
    /// NCCL group.
    Before82450,
    /// PyTorch 2.4 (since PR 82450): `new_group` with an eagerly initialised default group makes every rank of the
    /// default group take part in an `ncclCommSplit` of its communicator, the group's members at their first
    /// collective on the group (`getNCCLComm` with `options_->split_from`), every other rank at the `new_group`
    /// call (`perform_nocolor_split`), so a non-member blocks in `new_group` until the members reach that collective.
    V2_4,
    /// Since PR 82450, in the releases after 2.4: the end events are recorded after the group end, and `new_group`
    /// splits at the call on every rank (PR 129284, PR 138781).
    #[default]
    Since82450,
}

/// `Stream("s0", NonBlocking)`: a stream every rank creates.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename = "Stream", deny_unknown_fields)]
pub struct SStream {
    #[serde(rename = "_0", alias = "name")]
    pub name: String,
    #[serde(rename = "_1", alias = "kind")]
    pub kind: SStreamKind,
}

/// The kinds of stream a program may create (the legacy and per-thread default streams always exist).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename = "stream kind")]
pub enum SStreamKind {
    Blocking,
    NonBlocking,
}

/// A buffer every rank allocates.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename = "buffer declaration", deny_unknown_fields)]
pub enum SBuffer {
    /// `Buffer("x", "2 GiB")` or `Buffer("p", "4 KiB", space: PinnedHost)`: allocated for the whole program.
    Buffer {
        #[serde(rename = "_0", alias = "name")]
        name: String,
        #[serde(rename = "_1", alias = "size")]
        size: Size,
        #[serde(rename = "_2", alias = "space", default)]
        space: SSpace,
    },
    /// `Pooled("out", "256 MiB")`: a caching-allocator block of device memory, live between `Alloc` and `Free`.
    Pooled {
        #[serde(rename = "_0", alias = "name")]
        name: String,
        #[serde(rename = "_1", alias = "size")]
        size: Size,
    },
}

/// Where a [`SBuffer::Buffer`] lives.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename = "memory space")]
pub enum SSpace {
    #[default]
    Device,
    PinnedHost,
    PageableHost,
}

/// `Comm("world")`, `Comm("pair01", members: [0, 1], init: Explicit)`,
/// `Comm("nb", config: NonBlocking, watchdog: "10 s")`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename = "Comm", deny_unknown_fields)]
pub struct SComm {
    #[serde(rename = "_0", alias = "name")]
    pub name: String,
    /// Global ranks in communicator order; all ranks when absent.
    #[serde(rename = "_1", alias = "members", default)]
    pub members: Option<Vec<u32>>,
    #[serde(rename = "_2", alias = "init", default)]
    pub init: SInit,
    /// `ncclConfig_t.blocking` (N12).
    #[serde(default)]
    pub config: SConfig,
    /// A host watchdog that aborts the communicator when its work has not ended after this long (N9).
    #[serde(default)]
    pub watchdog: Option<Duration>,
}

/// `ncclConfig_t.blocking` of a communicator (N12).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename = "communicator config")]
pub enum SConfig {
    /// `blocking = 1` (NCCL's default): every call returns once done.
    #[default]
    Blocking,
    /// `blocking = 0`: calls may return `ncclInProgress`; poll with `Poll(comm)` before the next call.
    NonBlocking,
}

/// How a communicator comes to exist.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename = "communicator init")]
pub enum SInit {
    /// Exists before the program starts.
    #[default]
    Implicit,
    /// Created by `CommInit` ops.
    Explicit,
}

/// `Thread("main", [ops])` (every rank) or `Thread("producer", ranks: [0], ops: [ops])` (only the listed ranks).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename = "Thread", deny_unknown_fields)]
pub struct SThread {
    #[serde(rename = "_0", alias = "name")]
    pub name: String,
    #[serde(rename = "_1", alias = "ops")]
    pub ops: Vec<SOp>,
    #[serde(default)]
    pub ranks: Option<Vec<u32>>,
}

/// The name of [`SOp::Skipped`] in the text: what the loader writes over an op it could not read (`recover.rs`).
pub const SKIPPED_OP: &str = "_";

/// The fields of each form that hold a list of ops (by position and by name): where an op the loader cannot read
/// may be skipped and the rest of the list still read (`recover.rs`). `BatchIsendIrecv`'s list holds `P2POp`s.
pub const OP_LISTS: &[(&str, &[&str])] = &[
    ("Thread", &["1", "ops"]),
    ("Group", &["0", "ops"]),
    ("OnRanks", &["1", "ops"]),
    ("Repeat", &["1", "ops"]),
    ("For", &["2", "ops"]),
    ("If", &["1", "then", "2", "else"]),
    ("Parity", &["even", "odd"]),
    ("WithStream", &["1", "ops"]),
];

/// The op lists inside `op` (whose path is `path`), with their paths: the bodies of the control forms and of
/// `WithStream`.
pub fn op_lists<'a>(op: &'a SOp, path: &str) -> Vec<(&'a [SOp], String)> {
    use super::span_index::field;
    match op {
        SOp::Group { ops } => vec![(ops, field(path, 0))],
        SOp::OnRanks { ops, .. } | SOp::Repeat { ops, .. } => vec![(ops, field(path, 1))],
        SOp::Parity { even, odd } => vec![(even, field(path, "even")), (odd, field(path, "odd"))],
        SOp::For { ops, .. } => vec![(ops, field(path, 2))],
        SOp::If { then, otherwise, .. } => vec![(then, field(path, 1)), (otherwise, field(path, 2))],
        SOp::WithStream { ops, .. } => vec![(ops, field(path, 1))],
        _ => vec![],
    }
}

/// One operation as written, including the control forms expanded at load time.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename = "operation", deny_unknown_fields)]
pub enum SOp {
    /// An op the loader could not read (an unknown name, an unknown field, a value of the wrong type): its error is
    /// reported, and the text is read again with `_` written over the op (`recover.rs`), so that the rest of the
    /// file is still checked. Never written by a user: a `_` the loader did not put there is an unknown operation.
    /// It expands to nothing, and the load fails.
    #[serde(rename = "_")]
    Skipped,
    Kernel {
        #[serde(rename = "_0", alias = "name")]
        name: String,
        stream: String,
        #[serde(default)]
        reads: Vec<BufArg>,
        #[serde(default)]
        writes: Vec<BufArg>,
        #[serde(default)]
        duration: Option<Duration>,
    },
    Memset {
        #[serde(rename = "_0", alias = "buf")]
        buf: BufArg,
        #[serde(default)]
        stream: Option<String>,
    },
    Memcpy {
        dst: BufArg,
        src: BufArg,
        #[serde(default)]
        stream: Option<String>,
    },
    Record {
        #[serde(rename = "_0", alias = "event")]
        event: String,
        stream: String,
    },
    Wait {
        #[serde(rename = "_0", alias = "event")]
        event: String,
        stream: String,
    },
    EventQuery {
        #[serde(rename = "_0", alias = "event")]
        event: String,
    },
    EventSync {
        #[serde(rename = "_0", alias = "event")]
        event: String,
    },
    StreamSync {
        #[serde(rename = "_0", alias = "stream")]
        stream: String,
    },
    StreamQuery {
        #[serde(rename = "_0", alias = "stream")]
        stream: String,
    },
    DeviceSync,
    Sleep {
        #[serde(rename = "_0", alias = "duration")]
        duration: Duration,
    },
    HostRead {
        #[serde(rename = "_0", alias = "buf")]
        buf: BufArg,
    },
    HostWrite {
        #[serde(rename = "_0", alias = "buf")]
        buf: BufArg,
    },
    Barrier {
        #[serde(rename = "_0", alias = "name")]
        name: String,
    },
    CommInit {
        #[serde(rename = "_0", alias = "comm")]
        comm: String,
    },
    /// `ncclCommGetAsyncError(comm)` until it stops returning `ncclInProgress` (N12).
    Poll {
        #[serde(rename = "_0", alias = "comm")]
        comm: String,
    },
    /// `ncclCommAbort(comm)` (N13).
    CommAbort {
        #[serde(rename = "_0", alias = "comm")]
        comm: String,
    },
    /// `ncclCommFinalize(comm)` (N13).
    CommFinalize {
        #[serde(rename = "_0", alias = "comm")]
        comm: String,
    },
    /// `ncclCommDestroy(comm)` (N13).
    CommDestroy {
        #[serde(rename = "_0", alias = "comm")]
        comm: String,
    },
    /// `ncclCommSplit(comm, color, key, &new)`: `new` names the communicator this rank joins (every rank of one
    /// color names the same one); without `new` (and `color`), `NCCL_SPLIT_NOCOLOR`. `key` orders the new members
    /// (default: the rank's position in `comm`).
    CommSplit {
        #[serde(rename = "_0", alias = "comm")]
        comm: String,
        #[serde(default)]
        new: Option<String>,
        #[serde(default)]
        color: Option<ExprArg>,
        #[serde(default)]
        key: Option<ExprArg>,
    },
    Send {
        to: Peer,
        buf: BufArg,
        stream: String,
        #[serde(default)]
        comm: Option<String>,
    },
    Recv {
        from: Peer,
        buf: BufArg,
        stream: String,
        #[serde(default)]
        comm: Option<String>,
    },
    GroupStart,
    GroupEnd,
    Group {
        #[serde(rename = "_0", alias = "ops")]
        ops: Vec<SOp>,
    },
    AllReduce {
        #[serde(default)]
        buf: Option<BufArg>,
        #[serde(default)]
        send: Option<BufArg>,
        #[serde(default)]
        recv: Option<BufArg>,
        stream: String,
        #[serde(default)]
        comm: Option<String>,
    },
    Broadcast {
        root: Root,
        #[serde(default)]
        buf: Option<BufArg>,
        #[serde(default)]
        send: Option<BufArg>,
        #[serde(default)]
        recv: Option<BufArg>,
        stream: String,
        #[serde(default)]
        comm: Option<String>,
    },
    AllGather {
        send: BufArg,
        recv: BufArg,
        stream: String,
        #[serde(default)]
        comm: Option<String>,
    },
    ReduceScatter {
        send: BufArg,
        recv: BufArg,
        stream: String,
        #[serde(default)]
        comm: Option<String>,
    },
    /// `ncclAlltoAll` (NCCL >= 2.28).
    AllToAll {
        send: BufArg,
        recv: BufArg,
        stream: String,
        #[serde(default)]
        comm: Option<String>,
    },
    /// `ncclReduce` to `root`: in place (`buf`) or `send` + `recv`.
    Reduce {
        root: Root,
        #[serde(default)]
        buf: Option<BufArg>,
        #[serde(default)]
        send: Option<BufArg>,
        #[serde(default)]
        recv: Option<BufArg>,
        stream: String,
        #[serde(default)]
        comm: Option<String>,
    },
    /// `ncclGather` to `root` (NCCL >= 2.28).
    Gather {
        root: Root,
        send: BufArg,
        recv: BufArg,
        stream: String,
        #[serde(default)]
        comm: Option<String>,
    },
    /// `ncclScatter` from `root` (NCCL >= 2.28).
    Scatter {
        root: Root,
        send: BufArg,
        recv: BufArg,
        stream: String,
        #[serde(default)]
        comm: Option<String>,
    },
    Alloc {
        #[serde(rename = "_0", alias = "buf")]
        buf: String,
        stream: String,
    },
    Free {
        #[serde(rename = "_0", alias = "buf")]
        buf: String,
    },
    RecordStream {
        #[serde(rename = "_0", alias = "buf")]
        buf: String,
        stream: String,
    },
    /// `Malloc("64 MiB")`: `cudaMalloc` (S7).
    Malloc {
        #[serde(rename = "_0", alias = "size")]
        size: Size,
    },
    /// `MallocHost("64 MiB")`: `cudaMallocHost` (S7).
    MallocHost {
        #[serde(rename = "_0", alias = "size")]
        size: Size,
    },
    /// `EmptyCache`: `torch.cuda.empty_cache()` (P4, S7).
    EmptyCache,
    /// `LoadModule("attention")`: the lazy load the first launch of a kernel of the module triggers (S7).
    LoadModule {
        #[serde(rename = "_0", alias = "module")]
        module: String,
    },
    /// `HostFunc("log", stream: "s0", reads: ["p"], calls_cuda: false, duration: "50 us")`: `cudaLaunchHostFunc`
    /// (S8); `duration` is how long the host function runs (timed runs; default 0).
    HostFunc {
        #[serde(rename = "_0", alias = "name")]
        name: String,
        stream: String,
        #[serde(default)]
        reads: Vec<BufArg>,
        #[serde(default)]
        writes: Vec<BufArg>,
        #[serde(default)]
        calls_cuda: bool,
        #[serde(default)]
        duration: Option<Duration>,
    },
    OnRanks {
        #[serde(rename = "_0", alias = "ranks")]
        ranks: Vec<u32>,
        #[serde(rename = "_1", alias = "ops")]
        ops: Vec<SOp>,
    },
    Parity {
        #[serde(default)]
        even: Vec<SOp>,
        #[serde(default)]
        odd: Vec<SOp>,
    },
    Repeat {
        #[serde(rename = "_0", alias = "count")]
        count: u32,
        #[serde(rename = "_1", alias = "ops")]
        ops: Vec<SOp>,
    },
    /// `Expect("y", written_by: Recv, stream: "s0")`: a value assertion (V1).
    Expect {
        #[serde(rename = "_0", alias = "buf")]
        buf: BufArg,
        written_by: SWriter,
        #[serde(default)]
        stream: Option<String>,
    },
    /// `dist.init_process_group("nccl")` (torch.rs).
    InitProcessGroup,
    /// `dist.destroy_process_group()` (torch.rs): finalizes and destroys every communicator of the rank's groups.
    DestroyProcessGroup,
    /// `dist.send(tensor, dst)`.
    DistSend {
        #[serde(rename = "_0", alias = "tensor")]
        tensor: BufArg,
        dst: Peer,
    },
    /// `dist.recv(tensor, src)`.
    DistRecv {
        #[serde(rename = "_0", alias = "tensor")]
        tensor: BufArg,
        src: Peer,
    },
    /// `work = dist.isend(tensor, dst)`.
    Isend {
        #[serde(rename = "_0", alias = "tensor")]
        tensor: BufArg,
        dst: Peer,
        work: String,
    },
    /// `work = dist.irecv(tensor, src)`.
    Irecv {
        #[serde(rename = "_0", alias = "tensor")]
        tensor: BufArg,
        src: Peer,
        work: String,
    },
    /// `works = dist.batch_isend_irecv([P2POp(..), ..])`.
    BatchIsendIrecv {
        #[serde(rename = "_0", alias = "ops")]
        ops: Vec<SP2POp>,
        works: String,
    },
    /// `work.wait()` (every work of a batch).
    WorkWait {
        #[serde(rename = "_0", alias = "work")]
        work: String,
    },
    /// `dist.all_reduce(tensor)`, or with `async_op: "w"` `w = dist.all_reduce(tensor, async_op=True)`.
    DistAllReduce {
        #[serde(rename = "_0", alias = "tensor")]
        tensor: BufArg,
        #[serde(default)]
        async_op: Option<String>,
        /// The process group (`NewGroup`), default the default group.
        #[serde(default)]
        group: Option<String>,
    },
    /// `dist.broadcast(tensor, src)` (sync or `async_op`).
    DistBroadcast {
        #[serde(rename = "_0", alias = "tensor")]
        tensor: BufArg,
        src: Root,
        #[serde(default)]
        async_op: Option<String>,
        /// The process group (`NewGroup`), default the default group.
        #[serde(default)]
        group: Option<String>,
    },
    /// `dist.all_gather_into_tensor(output, input)` (sync or `async_op`).
    DistAllGather {
        output: BufArg,
        input: BufArg,
        #[serde(default)]
        async_op: Option<String>,
        /// The process group (`NewGroup`), default the default group.
        #[serde(default)]
        group: Option<String>,
    },
    /// `dist.reduce_scatter_tensor(output, input)` (sync or `async_op`).
    DistReduceScatter {
        output: BufArg,
        input: BufArg,
        #[serde(default)]
        async_op: Option<String>,
        /// The process group (`NewGroup`), default the default group.
        #[serde(default)]
        group: Option<String>,
    },
    /// `dist.all_to_all_single(output, input, output_split_sizes, input_split_sizes)` (sync or `async_op`); the
    /// split sizes are in bytes, one per rank of the group, and absent means equal splits.
    DistAllToAllSingle {
        output: BufArg,
        input: BufArg,
        #[serde(default)]
        output_split_sizes: Option<Vec<Size>>,
        #[serde(default)]
        input_split_sizes: Option<Vec<Size>>,
        #[serde(default)]
        async_op: Option<String>,
        #[serde(default)]
        group: Option<String>,
    },
    /// `dist.all_to_all(output_tensor_list, input_tensor_list)`: one tensor per rank of the group in each list
    /// (sync or `async_op`).
    DistAllToAll {
        outputs: Vec<BufArg>,
        inputs: Vec<BufArg>,
        #[serde(default)]
        async_op: Option<String>,
        #[serde(default)]
        group: Option<String>,
    },
    /// `dist.all_gather(tensor_list, tensor)`: one output tensor per rank of the group, in group order (sync or
    /// `async_op`). Lowered as ProcessGroupNCCL::allgather does it (a flat temporary when the sizes are equal, a group
    /// of broadcasts otherwise).
    DistAllGatherList {
        tensor_list: Vec<BufArg>,
        tensor: BufArg,
        #[serde(default)]
        async_op: Option<String>,
        #[serde(default)]
        group: Option<String>,
    },
    /// `dist.reduce_scatter(output, input_list)`: one input tensor per rank of the group, in group order (sync or
    /// `async_op`). Lowered as ProcessGroupNCCL::reduce_scatter does it (a flat temporary when the sizes are equal, a
    /// group of reduces otherwise).
    DistReduceScatterList {
        output: BufArg,
        input_list: Vec<BufArg>,
        #[serde(default)]
        async_op: Option<String>,
        #[serde(default)]
        group: Option<String>,
    },
    /// `dist.reduce(tensor, dst)` (sync or `async_op`).
    DistReduce {
        #[serde(rename = "_0", alias = "tensor")]
        tensor: BufArg,
        dst: Root,
        #[serde(default)]
        async_op: Option<String>,
        #[serde(default)]
        group: Option<String>,
    },
    /// `dist.gather(tensor, gather_list, dst)`: `gather_list` is one buffer holding the list's tensors one after the
    /// other (group size × the tensor), on every rank (only `dst`'s is written).
    DistGather {
        #[serde(rename = "_0", alias = "tensor")]
        tensor: BufArg,
        gather_list: BufArg,
        dst: Root,
        #[serde(default)]
        async_op: Option<String>,
        #[serde(default)]
        group: Option<String>,
    },
    /// `dist.scatter(tensor, scatter_list, src)`: `scatter_list` is one buffer holding the list's tensors one after
    /// the other (group size × the tensor), on every rank (only `src`'s is read).
    DistScatter {
        #[serde(rename = "_0", alias = "tensor")]
        tensor: BufArg,
        scatter_list: BufArg,
        src: Root,
        #[serde(default)]
        async_op: Option<String>,
        #[serde(default)]
        group: Option<String>,
    },
    /// `g = dist.new_group(ranks)`: every rank of the default group calls it (PyTorch requires that), members or
    /// not; `ranks` are global ranks.
    NewGroup {
        #[serde(rename = "_0", alias = "name")]
        name: String,
        #[serde(rename = "_1", alias = "ranks")]
        ranks: Vec<u32>,
    },
    /// `dist.barrier()`.
    DistBarrier,
    /// `torch.cuda.synchronize()`.
    CudaSynchronize,
    /// `t = torch.empty(.., device="cuda")`: the caching allocator hands `t` (a `Pooled` buffer) a block for use on
    /// the current stream (P4).
    Empty {
        #[serde(rename = "_0", alias = "tensor")]
        tensor: String,
    },
    /// `del t`: the last reference goes, and the block returns to its stream's pool (P4).
    Del {
        #[serde(rename = "_0", alias = "tensor")]
        tensor: String,
    },
    /// `t.untyped_storage().resize_(0)` (FSDP's `_free_storage`): the storage's block returns to its stream's pool
    /// at once, whatever still references the tensor, a work's stash included (P4).
    FreeStorage {
        #[serde(rename = "_0", alias = "tensor")]
        tensor: String,
    },
    /// `with torch.cuda.stream(s): ops`.
    WithStream {
        #[serde(rename = "_0", alias = "stream")]
        stream: String,
        #[serde(rename = "_1", alias = "ops")]
        ops: Vec<SOp>,
    },
    /// A tensor operation on the current stream (a kernel).
    Compute {
        #[serde(rename = "_0", alias = "name")]
        name: String,
        #[serde(default)]
        reads: Vec<BufArg>,
        #[serde(default)]
        writes: Vec<BufArg>,
        #[serde(default)]
        duration: Option<Duration>,
    },
    /// `event.record()` on the current stream.
    RecordEvent {
        #[serde(rename = "_0", alias = "event")]
        event: String,
    },
    /// `event.wait()`: the current stream waits for the event.
    WaitEvent {
        #[serde(rename = "_0", alias = "event")]
        event: String,
    },
    /// `For(i, 0..M, [ops])`: the ops once for every value of `i` from `start` to `end - 1`.
    For {
        #[serde(rename = "_0", alias = "var")]
        var: String,
        #[serde(rename = "_1", alias = "range")]
        range: RangeArg,
        #[serde(rename = "_2", alias = "ops")]
        ops: Vec<SOp>,
    },
    /// `If(stage > 0, [ops])` or `If(cond, then: [..], else: [..])`.
    If {
        #[serde(rename = "_0", alias = "cond")]
        cond: ExprArg,
        #[serde(rename = "_1", alias = "then")]
        then: Vec<SOp>,
        #[serde(rename = "_2", alias = "else", default)]
        otherwise: Vec<SOp>,
    },
}

/// `dist.P2POp(dist.isend, tensor, peer)` or `dist.P2POp(dist.irecv, tensor, peer)`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename = "P2POp", deny_unknown_fields)]
pub struct SP2POp {
    #[serde(rename = "_0", alias = "op")]
    pub op: SP2PKind,
    #[serde(rename = "_1", alias = "tensor")]
    pub tensor: BufArg,
    #[serde(rename = "_2", alias = "peer")]
    pub peer: Peer,
}

/// The function of a `P2POp`.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename = "P2POp function")]
pub enum SP2PKind {
    Isend,
    Irecv,
}

/// The op an `Expect` expects to have written what it reads: the last earlier op of the same thread of this kind
/// (a kernel: of this name) that writes an overlapping range.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename = "writer", deny_unknown_fields)]
pub enum SWriter {
    Kernel {
        #[serde(rename = "_0", alias = "name")]
        name: String,
    },
    Memset,
    Memcpy,
    HostWrite,
    /// A host function (`HostFunc("name", ..)`, S8) that writes the range.
    HostFunc {
        #[serde(rename = "_0", alias = "name")]
        name: String,
    },
    Recv,
    /// `Send("x@0")` (or a `Slice`): the last `Recv` of this thread that writes the range, whose data must come
    /// from a send that read inside this buffer of the sending rank (N3 matching, V1).
    Send {
        #[serde(rename = "_0", alias = "buf")]
        buf: BufArg,
    },
    AllReduce,
    Broadcast,
    AllGather,
    ReduceScatter,
    AllToAll,
    Reduce,
    Gather,
    Scatter,
}

impl SWriter {
    /// Whether resolved op `k` is of this kind.
    pub fn matches(&self, k: &crate::program::OpKind) -> bool {
        use crate::program::{CollectiveKind as C, OpKind as O};
        match (self, k) {
            (SWriter::Kernel { name }, O::Kernel { name: n, .. }) => name == n,
            (SWriter::Memset, O::Memset { .. })
            | (SWriter::Memcpy, O::Memcpy { .. })
            | (SWriter::Recv | SWriter::Send { .. }, O::Recv { .. }) => true,
            (SWriter::HostWrite, O::HostAccess { write, .. }) => *write,
            (SWriter::HostFunc { name }, O::HostFunc { name: n, .. }) => name == n,
            (SWriter::AllReduce, O::Collective { kind: C::AllReduce, .. })
            | (SWriter::Broadcast, O::Collective { kind: C::Broadcast { .. }, .. })
            | (SWriter::AllGather, O::Collective { kind: C::AllGather, .. })
            | (SWriter::ReduceScatter, O::Collective { kind: C::ReduceScatter, .. })
            | (SWriter::AllToAll, O::Collective { kind: C::AllToAll, .. })
            | (SWriter::Reduce, O::Collective { kind: C::Reduce { .. }, .. })
            | (SWriter::Gather, O::Collective { kind: C::Gather { .. }, .. })
            | (SWriter::Scatter, O::Collective { kind: C::Scatter { .. }, .. }) => true,
            _ => false,
        }
    }

    /// As written: `Recv`, `Kernel("fwd")`.
    pub fn label(&self) -> String {
        match self {
            SWriter::Kernel { name } => format!("Kernel(\"{name}\")"),
            SWriter::HostFunc { name } => format!("HostFunc(\"{name}\")"),
            SWriter::Send { buf } => format!("Recv of what Send(\"{}\") sent", buf.name()),
            other => format!("{other:?}"),
        }
    }
}

/// The peer of a send or recv.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename = "peer", deny_unknown_fields)]
pub enum Peer {
    /// The next member of the communicator (wrapping).
    Next,
    /// The previous member of the communicator (wrapping).
    Prev,
    /// The member with this global rank (an expression: `Rank(1)`, `Rank(stage + 1)`).
    Rank {
        #[serde(rename = "_0", alias = "rank")]
        rank: ExprArg,
    },
    /// `even` when the caller's position in the communicator is even, else `odd`.
    Parity { even: SimplePeer, odd: SimplePeer },
}

/// A peer without the parity form.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename = "peer", deny_unknown_fields)]
pub enum SimplePeer {
    Next,
    Prev,
    Rank {
        #[serde(rename = "_0", alias = "rank")]
        rank: ExprArg,
    },
}

/// The root of a broadcast: `Rank(0)` (a global rank, an expression).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename = "root", deny_unknown_fields)]
pub enum Root {
    Rank {
        #[serde(rename = "_0", alias = "rank")]
        rank: ExprArg,
    },
}

/// An expression as written (`1`, `"stage + 1"`, or `stage + 1`, which desugaring quotes), parsed at once; a parse
/// error is kept and reported by validation with the expression's position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExprArg {
    /// The text as written (the integer's digits for a plain integer).
    pub text: String,
    pub expr: Result<Expr, String>,
}

impl ExprArg {
    /// An integer literal (what resolution leaves after evaluating an expression).
    pub fn int(text: String, v: i64) -> ExprArg {
        ExprArg { text, expr: Ok(Expr::Int(v)) }
    }

    /// The value when the expression is an integer literal.
    pub fn literal(&self) -> Option<i64> {
        match self.expr {
            Ok(Expr::Int(v)) => Some(v),
            _ => None,
        }
    }

    /// Whether it was written as a plain integer (no variables, no arithmetic).
    pub fn written_plain(&self) -> bool {
        self.text.trim().bytes().all(|b| b.is_ascii_digit())
    }
}

/// A loop range `start..end` as written, parsed at once (errors kept for validation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeArg {
    pub text: String,
    pub bounds: Result<(Expr, Expr), String>,
}

struct ExprVisitor {
    range: bool,
}

impl<'de> Visitor<'de> for ExprVisitor {
    type Value = (String, Result<Expr, String>, Option<Result<(Expr, Expr), String>>);

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(if self.range { "a range `start..end`" } else { "an integer or an expression" })
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        let e = i64::try_from(v).map(Expr::Int).map_err(|_| format!("{v} is too large"));
        Ok((v.to_string(), e, None))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok((v.to_string(), Ok(Expr::Int(v)), None))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok((v.to_string(), Ok(Expr::Bool(v)), None))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        if self.range {
            return Ok((v.to_string(), Err(String::new()), Some(expr::parse_range(v))));
        }
        Ok((v.to_string(), expr::parse(v), None))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok((v.to_string(), Err(format!("expected an integer expression, found {v}")), None))
    }
}

impl<'de> Deserialize<'de> for ExprArg {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ExprArg, D::Error> {
        let (text, expr, _) = d.deserialize_any(ExprVisitor { range: false })?;
        Ok(ExprArg { text, expr })
    }
}

impl<'de> Deserialize<'de> for RangeArg {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RangeArg, D::Error> {
        let (text, expr, range) = d.deserialize_any(ExprVisitor { range: true })?;
        let bounds = range.unwrap_or_else(|| match expr {
            Ok(_) => Err(format!("`{text}` is not a range: write `start..end`, e.g. `0..{text}` (end excluded)")),
            Err(m) => Err(m),
        });
        Ok(RangeArg { text, bounds })
    }
}

/// A size as written: an integer (bytes) or a string with a unit, parsed during validation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Size {
    Bytes(u64),
    Text(String),
    /// Something that cannot be a size; the message says why.
    Invalid(String),
}

/// A duration as written: an integer (ns) or a string with a unit, parsed during validation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Duration {
    Nanos(u64),
    Text(String),
    Invalid(String),
}

/// A buffer argument: `"x"` (the whole buffer) or `Slice("x", offset, len)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BufArg {
    Whole(String),
    Slice(String, Size, Size),
}

impl BufArg {
    /// The (possibly qualified) buffer name.
    pub fn name(&self) -> &str {
        match self {
            BufArg::Whole(n) | BufArg::Slice(n, _, _) => n,
        }
    }
}

/// Accepts any number or string for a quantity; never fails on a wrong unit (validation reports that).
struct QuantityVisitor {
    what: &'static str,
}

enum Quantity {
    Int(u64),
    Text(String),
    Invalid(String),
}

impl<'de> Visitor<'de> for QuantityVisitor {
    type Value = Quantity;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a {} (an integer or a string with a unit)", self.what)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Quantity, E> {
        Ok(Quantity::Int(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Quantity, E> {
        match u64::try_from(v) {
            Ok(v) => Ok(Quantity::Int(v)),
            Err(_) => Ok(Quantity::Invalid(format!("a {} cannot be negative (found {v})", self.what))),
        }
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Quantity, E> {
        Ok(Quantity::Invalid(format!(
            "a {} is an integer or a string with a unit (found {v}); write fractions as a string, e.g. \"1.5 MiB\"",
            self.what
        )))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Quantity, E> {
        Ok(Quantity::Text(v.to_string()))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Quantity, E> {
        Ok(Quantity::Invalid(format!("expected a {}, found `{v}`", self.what)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Quantity, E> {
        Ok(Quantity::Invalid(format!("expected a {}, found a bare name (put it in double quotes with a unit)", self.what)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Quantity, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Quantity::Invalid(format!("expected a {}, found a list or tuple", self.what)))
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Quantity, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Quantity::Invalid(format!("expected a {}, found a struct or map", self.what)))
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Size, D::Error> {
        Ok(match d.deserialize_any(QuantityVisitor { what: "size" })? {
            Quantity::Int(v) => Size::Bytes(v),
            Quantity::Text(t) => Size::Text(t),
            Quantity::Invalid(m) => Size::Invalid(m),
        })
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(match d.deserialize_any(QuantityVisitor { what: "duration" })? {
            Quantity::Int(v) => Duration::Nanos(v),
            Quantity::Text(t) => Duration::Text(t),
            Quantity::Invalid(m) => Duration::Invalid(m),
        })
    }
}

struct BufArgVisitor;

impl<'de> Visitor<'de> for BufArgVisitor {
    type Value = BufArg;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a buffer name in double quotes, or Slice(\"name\", offset, len)")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<BufArg, E> {
        Ok(BufArg::Whole(v.to_string()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<BufArg, A::Error> {
        let name: String = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(0, &self))?;
        let offset: Size = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(1, &self))?;
        let len: Size = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(2, &self))?;
        Ok(BufArg::Slice(name, offset, len))
    }

    /// `Slice("x", 0, 4)` after desugaring (`Slice(_0: "x", _1: 0, _2: 4)`), or `Slice(buf: "x", offset: 0, len: 4)`.
    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<BufArg, A::Error> {
        const FIELDS: &[&str] = &["buf", "offset", "len"];
        let (mut name, mut offset, mut len) = (None, None, None);
        while let Some(FieldName(key)) = map.next_key::<FieldName>()? {
            match key.as_str() {
                "_0" | "buf" if name.is_none() => name = Some(map.next_value::<String>()?),
                "_1" | "offset" if offset.is_none() => offset = Some(map.next_value::<Size>()?),
                "_2" | "len" if len.is_none() => len = Some(map.next_value::<Size>()?),
                "_0" | "buf" | "_1" | "offset" | "_2" | "len" => {
                    let name = positional_name("Slice", &key).unwrap_or(&key);
                    return Err(de::Error::custom(format!("`{name}` of Slice is given twice")));
                }
                k if k.starts_with('_') => {
                    return Err(de::Error::custom("Slice takes 3 arguments: Slice(\"name\", offset, len)"))
                }
                _ => return Err(de::Error::unknown_field(&key, FIELDS)),
            }
        }
        match (name, offset, len) {
            (Some(n), Some(o), Some(l)) => Ok(BufArg::Slice(n, o, l)),
            _ => Err(de::Error::custom("Slice takes 3 arguments: Slice(\"name\", offset, len)")),
        }
    }
}

/// A field name of a struct read through `deserialize_any` (ron reads field names as identifiers, not strings).
struct FieldName(String);

impl<'de> Deserialize<'de> for FieldName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<FieldName, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FieldName;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<FieldName, E> {
                Ok(FieldName(v.to_string()))
            }
        }
        d.deserialize_identifier(V)
    }
}

impl<'de> Deserialize<'de> for BufArg {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<BufArg, D::Error> {
        d.deserialize_any(BufArgVisitor)
    }
}
