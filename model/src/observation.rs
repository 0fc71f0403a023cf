//! What one hardware run of a program showed: the versions every read saw, which ops finished and when, where the
//! host threads were when it ended, and the machine it ran on. Serialized as RON with a `format_version`.
//!
//! Times: host times are nanoseconds since the run's start (CLOCK_MONOTONIC, shared by all rank processes of a run);
//! device times are raw `%globaltimer` nanoseconds of that rank's GPU, comparable only within one GPU (SEMANTICS.md
//! section 5: order operations across GPUs by causality, never by their clocks). [`ClockAnchor`]s relate the two.

use crate::program::{BufRange, RankId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The format version written by this code. Readers reject other versions.
pub const FORMAT_VERSION: u32 = 1;

/// One host call of the program: `rank`, host `thread` index within the rank, `index` of the op in that thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OpId {
    pub rank: RankId,
    pub thread: u32,
    pub index: u32,
}

impl std::fmt::Display for OpId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "(rank {}, thread {}, op {})", self.rank, self.thread, self.index)
    }
}

/// A whole hardware run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    /// Always [`FORMAT_VERSION`] when written by this code.
    pub format_version: u32,
    /// The program's name.
    pub program: String,
    /// How the run ended.
    pub outcome: Outcome,
    /// Where it ran.
    pub environment: Environment,
    /// Watchdog limit for the program part of the run (after set-up), in ms.
    pub timeout_ms: u64,
    /// The version id stamped by every writing op (kernel writes, memsets, host writes): id -> writer.
    /// Id 0 is the buffers' initial contents and is not listed.
    pub versions: BTreeMap<u32, OpId>,
    /// Every read the executor observes (kernel read ranges and host reads), in op order.
    pub reads: Vec<ReadObservation>,
    /// Every op of the program, in (rank, thread, index) order.
    pub ops: Vec<OpObservation>,
    /// Per-rank pairing of the host clock with the GPU clock, measured during set-up.
    pub clock_anchors: Vec<ClockAnchor>,
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// Every host thread returned from every op and the final device synchronization (after the program) returned.
    Completed,
    /// The watchdog fired: the rank processes were killed.
    Hung {
        /// Ops whose completion was not observed (host call never returned, or device work never ended), in order.
        /// Ops whose completion cannot be told either way ([`OpObservation::finished`] `None`) are not listed.
        never_finished: Vec<OpId>,
        /// Where every host thread of every rank was when the watchdog fired.
        threads: Vec<ThreadPosition>,
    },
    /// The run could not be carried out (set-up failed, a CUDA or NCCL call returned an error, a rank crashed).
    Failed {
        /// The rank that failed first, when known.
        rank: Option<RankId>,
        /// What went wrong.
        message: String,
    },
}

/// Where one host thread was at the end of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadPosition {
    pub rank: RankId,
    pub thread: u32,
    pub at: ThreadAt,
}

/// A host thread's position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ThreadAt {
    /// Inside the call of this op index (blocked there, or still running it).
    InOp(u32),
    /// Between two ops, the next one being this index.
    Before(u32),
    /// Returned from its last op.
    Finished,
    /// The thread never started (its rank did not finish set-up).
    NotStarted,
}

/// What a read saw.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadObservation {
    /// The reading op.
    pub op: OpId,
    /// Index of the range among the op's reads (0 for a host read).
    pub read_index: u32,
    /// The range read.
    pub range: BufRange,
    pub seen: Seen,
}

/// The contents of a range as one read saw them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Seen {
    /// Every word held the same version.
    Uniform(Version),
    /// Words held different versions: those of the first and last word and the smallest and largest version.
    Mixed { first: Version, last: Version, min: Version, max: Version },
    /// The range is empty (0 bytes).
    Empty,
    /// The read never happened, or its result was not recorded before the run ended.
    NotObserved,
}

/// A version found in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Version {
    /// The buffer's initial contents (zero).
    Initial,
    /// The data written by this op (possibly moved since by copies, sends and receives).
    Op(OpId),
    /// A word that is no version id of this program (e.g. a byte-wise copy of part of a word, or a reduction).
    Unknown(u32),
}

/// What happened to one op.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpObservation {
    pub op: OpId,
    /// A short name of the op kind (`Kernel`, `Send`, ...).
    pub kind: String,
    /// When the host entered the call, in ns since the run's start; `None` if it never did.
    pub host_enter_ns: Option<u64>,
    /// When the call returned to the host, in ns since the run's start; `None` if it never did.
    pub host_return_ns: Option<u64>,
    /// Device start/end of the op's work, when the executor traces it (kernels always; memsets, copies, NCCL calls,
    /// event records and waits on streams other than the legacy default stream).
    pub device: Option<DeviceSpan>,
    /// `Some(true)`: the op finished (see `evidence`); `Some(false)`: it was observed not to finish; `None`: the
    /// executor cannot tell (device work it does not trace, in a run that did not complete).
    pub finished: Option<bool>,
    /// How `finished` was decided.
    pub evidence: Evidence,
    /// For `EventQuery`/`StreamQuery`: whether the answer was "ready".
    pub query_ready: Option<bool>,
    /// The error the call returned, if any.
    pub error: Option<String>,
}

/// Device times of one op on its rank's GPU, in `%globaltimer` ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSpan {
    /// The CUDA device ordinal the rank ran on.
    pub gpu: u32,
    /// When the work started (the first block, or a marker just before it); `None` if it never started or the op
    /// has only an end marker.
    pub start_ns: Option<u64>,
    /// When the work ended (the last block, or a marker just after it); `None` if it never ended.
    pub end_ns: Option<u64>,
}

/// The reason behind [`OpObservation::finished`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Evidence {
    /// A host-only op: finished when the call returned.
    HostReturn,
    /// The device trace recorded the end of the op's work.
    DeviceTrace,
    /// Not traced, but a later op on the same stream ended (streams are FIFO, S1).
    LaterOnSameStream,
    /// Not traced, but a host synchronization that covers it returned (synchronous copy or memset, stream or device
    /// synchronize issued after it).
    HostSynchronize,
    /// Not traced, but the run completed, so the final device synchronization covered it.
    FinalSynchronize,
    /// The host never issued the op.
    NeverIssued,
    /// Nothing tells either way.
    Unknown,
}

/// Where a run happened.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Environment {
    /// One entry per rank: the GPU it ran on.
    pub gpus: Vec<GpuInfo>,
    /// `cuDriverGetVersion`, e.g. 13000.
    pub driver_version: Option<i32>,
    /// `ncclGetVersion`, e.g. 22809.
    pub nccl_version: Option<i32>,
    /// The NCCL library file used, when known.
    pub nccl_library: Option<String>,
    /// The host's name.
    pub hostname: Option<String>,
    /// Environment variables that change what runs (`NCCL_*`, `CUDA_*`, `CUORDER_*`), as the supervisor saw them.
    #[serde(default)]
    pub variables: BTreeMap<String, String>,
}

/// One GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInfo {
    pub rank: RankId,
    /// CUDA device ordinal.
    pub ordinal: u32,
    /// `cuDeviceGetName`.
    pub name: String,
    /// PCI bus id.
    pub pci_bus_id: Option<String>,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
}

/// A pairing of one rank's host clock with its GPU clock: a marker kernel read `gpu_ns` while the host clock was
/// between `host_before_ns` and `host_after_ns` (ns since the run's start).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockAnchor {
    pub rank: RankId,
    pub host_before_ns: u64,
    pub gpu_ns: u64,
    pub host_after_ns: u64,
}

/// Errors reading an observation.
#[derive(Debug)]
pub enum ObservationError {
    /// The text is not RON of an [`Observation`].
    Parse(String),
    /// The observation was written in another format version.
    Version { found: u32, expected: u32 },
}

impl std::fmt::Display for ObservationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ObservationError::Parse(m) => write!(f, "not a hardware observation: {m}"),
            ObservationError::Version { found, expected } => {
                write!(f, "observation format version {found}, this build reads version {expected}")
            }
        }
    }
}

impl std::error::Error for ObservationError {}

impl Observation {
    /// The observation as pretty RON.
    pub fn to_ron(&self) -> String {
        let cfg = ron::ser::PrettyConfig::new().depth_limit(6).struct_names(true);
        // Serializing plain data to a String cannot fail.
        ron::ser::to_string_pretty(self, cfg).unwrap_or_else(|e| format!("/* serialization failed: {e} */"))
    }

    /// Parses RON written by [`Observation::to_ron`].
    ///
    /// Errors: [`ObservationError::Parse`] for text that is no observation, [`ObservationError::Version`] for
    /// another format version.
    pub fn from_ron(text: &str) -> Result<Observation, ObservationError> {
        let o: Observation = ron::from_str(text).map_err(|e| ObservationError::Parse(e.to_string()))?;
        if o.format_version != FORMAT_VERSION {
            return Err(ObservationError::Version { found: o.format_version, expected: FORMAT_VERSION });
        }
        Ok(o)
    }

    /// The observation of one op.
    pub fn op(&self, op: OpId) -> Option<&OpObservation> {
        self.ops.iter().find(|o| o.op == op)
    }

    /// The reads made by one op.
    pub fn reads_of(&self, op: OpId) -> impl Iterator<Item = &ReadObservation> {
        self.reads.iter().filter(move |r| r.op == op)
    }
}
