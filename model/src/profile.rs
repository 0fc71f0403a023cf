//! Profiles: the undocumented platform behaviours the semantics is parameterized over (SEMANTICS.md: "Where a rule is
//! undocumented, the model makes it a parameter of a profile"), with the built-in profiles and RON loading.

use serde::{Deserialize, Serialize};

/// What happens when two ranks make first contact without mirroring each other's connection set-up (N7, INFER).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum NonMirrored {
    /// Each host keeps waiting for the peer to need the mirrored direction: a host-level hang (seen on hardware).
    Hang,
    /// The program is undefined (reported as *undefined* with rule N7).
    Undefined,
}

/// When a communicator's collectives connect their peers (N7), as a profile states it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CollectiveConnect {
    /// Connections are made while the communicator is created ([`ConnectChoice::Init`]).
    Init,
    /// Connections are made at a communicator's first collective, which blocks the host ([`ConnectChoice::Lazy`]).
    Lazy,
    /// Either, as the platform chooses: both are explored, as a choice of the platform made at the first collective
    /// that needs connections and kept for the rest of the execution (`portable`: NCCL's default changed in 2.22,
    /// and `NCCL_RUNTIME_CONNECT` and cuMem support choose it since).
    Either,
}

/// The platform's choice of when collectives connect their peers (N7), once made: what [`CollectiveConnect`] names
/// for one platform, and what a finding that needs one of them reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ConnectChoice {
    /// Collective connections are made at communicator creation; a collective never blocks its host for them. NCCL
    /// before 2.22 (`init.cc` connects rings and trees in `initTransportsRank`), and NCCL 2.22 and later with
    /// `NCCL_RUNTIME_CONNECT=0` or without cuMem support (`comm->runtimeConn = cuMemSupport &&
    /// ncclParamRuntimeConnect()`; cuMem is off with `NCCL_CUMEM_ENABLE=0` or on a process whose driver lacks it).
    Init,
    /// Collective connections are made at a communicator's first collective (per algorithm), blocking the host until
    /// every peer takes part: NCCL 2.22 and later by default (`NCCL_RUNTIME_CONNECT=1`, "Dynamically connect peers
    /// during runtime (e.g., calling ncclAllreduce()) instead of init stage", with cuMem support).
    Lazy,
}

impl ConnectChoice {
    /// The choice in words, with the NCCL versions and settings that make it (for findings that need it).
    pub fn words(self) -> &'static str {
        match self {
            ConnectChoice::Init => {
                "collective connections made at init (NCCL < 2.22, or NCCL >= 2.22 with NCCL_RUNTIME_CONNECT=0 or \
                 without cuMem support)"
            }
            ConnectChoice::Lazy => {
                "collective connections made lazily at first use (NCCL >= 2.22 by default: NCCL_RUNTIME_CONNECT=1 \
                 with cuMem support)"
            }
        }
    }

    /// A short stable name for JSON: `init` or `lazy`.
    pub fn name(self) -> &'static str {
        match self {
            ConnectChoice::Init => "init",
            ConnectChoice::Lazy => "lazy",
        }
    }
}

/// The order in which NCCL fills the kernel plans of a cut group (N14), as a profile states it. The budget
/// ([`PlanBudget`]) says how much one plan holds; the order says which (send, recv) pairs come next when a plan is
/// full, and so which calls share a plan. NCCL changed it in 2.29.7; nothing documents it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PlanOrder {
    /// Every plan restarts NCCL's point-to-point schedule at its first round ([`PlanOrderChoice::Restart`]:
    /// NCCL 2.22 to 2.29.3).
    Restart,
    /// A plan continues at the epoch and round where the previous plan was cut ([`PlanOrderChoice::Continue`]:
    /// NCCL 2.29.7 and later).
    Continue,
    /// Either, as the platform chooses: both are explored, as a choice of the platform made at the first group end
    /// whose calls the two orders cut differently and kept for the rest of the execution (`portable`).
    Either,
}

/// The kernel-plan order of one platform (N14), once chosen: what [`PlanOrder`] names for one NCCL version, and
/// what a finding that needs one of them reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PlanOrderChoice {
    /// NCCL 2.22 to 2.29.3 (`src/enqueue.cc`, `scheduleP2pTasksToPlan`: `for (int round=0; round < nRanks;
    /// round++)` on every call, one call per plan): the plan after a cut takes the heads of the schedule's queues
    /// from round 0 again, so the rounds before the cut give their next epoch's pairs before the rounds after it give
    /// this epoch's.
    Restart,
    /// NCCL 2.29.7 and later, 2.30 included (`scheduleP2pTasksToPlan(comm, &p2pEpoch, &p2pRound, ...)`: "its value
    /// is carried over from one plan to another"): the plan after a cut resumes at the pair that did not fit, so
    /// pairs go into plans epoch by epoch, round by round.
    Continue,
}

impl PlanOrderChoice {
    /// The order in words, with the NCCL versions that use it (for findings that need it).
    pub fn words(self) -> &'static str {
        match self {
            PlanOrderChoice::Restart => {
                "NCCL 2.22-2.29.3's kernel-plan order (each plan of a cut group restarts NCCL's point-to-point \
                 schedule at round 0)"
            }
            PlanOrderChoice::Continue => {
                "NCCL >= 2.29.7's kernel-plan order (each plan of a cut group continues NCCL's point-to-point \
                 schedule where the previous plan was cut)"
            }
        }
    }

    /// A short stable name for JSON: `restart` or `continue`.
    pub fn name(self) -> &'static str {
        match self {
            PlanOrderChoice::Restart => "restart",
            PlanOrderChoice::Continue => "continue",
        }
    }
}

/// Which devices' work a host call that synchronizes implicitly waits for (S7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum SyncScope {
    /// The call does not synchronize.
    None,
    /// The call waits for all work issued so far on every stream of its own device.
    Device,
    /// The call waits for all work issued so far on every device of the program (one process driving every GPU:
    /// NVIDIA/nccl issue 744, "a device sync on the local GPU, but also on all GPUs which have P2P enabled with the
    /// local GPU"). For programs whose ranks are separate processes this over-approximates.
    AllDevices,
}

impl SyncScope {
    fn words(self) -> &'static str {
        match self {
            SyncScope::None => "no synchronization",
            SyncScope::Device => "a synchronization of its device",
            SyncScope::AllDevices => "a synchronization of every device",
        }
    }
}

/// Which device a `cudaFree` of another device's pointer (one thread driving several GPUs) synchronizes when its
/// implicit synchronization is a `Device` one (S7). The CUDA Runtime API says only that the call "may perform
/// implicit synchronization"; which device is documented nowhere, so `portable` explores both.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FreeDevice {
    /// The device the pointer belongs to.
    Pointer,
    /// The calling thread's device (its rank's).
    Caller,
    /// Either, as the platform chooses: both outcomes are explored (`portable`).
    Either,
}

impl FreeDevice {
    fn words(self) -> &'static str {
        match self {
            FreeDevice::Pointer => "the pointer's device",
            FreeDevice::Caller => "the calling thread's device",
            FreeDevice::Either => "the pointer's device or the caller's, both explored",
        }
    }
}

/// Whether one kind of host call synchronizes implicitly (S7), split like every undocumented behaviour: what is
/// *guaranteed* (a program may rely on the ordering it gives) and what is *possible* (explored: the call may also
/// wait for the wider scope, which can hang a program but orders nothing). `possible` narrower than `guaranteed`
/// is read as `guaranteed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImplicitSync {
    pub guaranteed: SyncScope,
    pub possible: SyncScope,
}

impl ImplicitSync {
    /// May synchronize its device, guarantees nothing (what the CUDA documentation allows).
    pub const MAY_SYNC_DEVICE: ImplicitSync = ImplicitSync { guaranteed: SyncScope::None, possible: SyncScope::Device };

    /// The scope the call may wait for (never narrower than the guaranteed one).
    pub fn possible(self) -> SyncScope {
        self.possible.max(self.guaranteed)
    }

    fn words(self) -> String {
        if self.possible() == SyncScope::None {
            "never synchronizes".to_string()
        } else if self.possible() == self.guaranteed {
            format!("always makes {}", self.guaranteed.words())
        } else if self.guaranteed == SyncScope::None {
            format!("may or may not make {} (both explored; it orders nothing)", self.possible().words())
        } else {
            format!("always makes {}, and may make {} (explored)", self.guaranteed.words(), self.possible().words())
        }
    }
}

/// Which host calls synchronize implicitly (S7), per kind of call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostCallSync {
    /// `cudaFree` of device memory.
    pub free: ImplicitSync,
    /// `cudaMalloc`.
    pub malloc: ImplicitSync,
    /// `cudaMallocHost` / `cudaHostAlloc` (page-locked host memory).
    pub malloc_host: ImplicitSync,
    /// The lazy load of a module at the first launch of one of its kernels (`CUDA_MODULE_LOADING=LAZY`).
    pub lazy_load: ImplicitSync,
}

impl Default for HostCallSync {
    /// What the documentation allows: each call may synchronize its device, none is guaranteed to.
    fn default() -> Self {
        let m = ImplicitSync::MAY_SYNC_DEVICE;
        HostCallSync { free: m, malloc: m, malloc_host: m, lazy_load: m }
    }
}

/// Semantic parameters of one platform. Every field is a behaviour that the documentation leaves open; where a
/// capacity or behaviour is undocumented, the profile separates what is *guaranteed* (the explorer relies on it)
/// from what was merely *observed* (the explorer explores both ways).
///
/// **Read from RON** (a profile file, a calibration's measurements, a saved finding), every *semantic* field must be
/// written out: a profile that leaves one out is refused, naming the field and what to write
/// ([`SEMANTIC_FIELDS`]), never filled in with a default (issue 30: a profile written before `p2p_plan` existed ran
/// every group as one kernel plan without a word). Only the informational fields (`description`,
/// `independent_progress_observed`, `launch_queue_depth_observed`) may be left out: they change no verdict.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "ProfileFile")]
pub struct Profile {
    /// Name shown in reports (`portable`, `eager`, or a calibrated profile's name).
    pub name: String,
    /// One line saying where the numbers come from (informational: may be left out of a RON profile).
    pub description: String,
    /// N2: bytes a send may deliver into a connection's internal buffers with no recv running, per (communicator,
    /// source, destination) connection. 0 = rendezvous: a send ends only together with its recv.
    pub eager_bytes_per_connection: u64,
    /// N2: of that window, the bytes that are *guaranteed*: sends beyond this (up to `eager_bytes_per_connection`)
    /// may or may not complete without their recv, so the explorer also reports the executions in which the
    /// platform refuses them. `None`: all of `eager_bytes_per_connection` (a window that is always available).
    pub eager_bytes_guaranteed: Option<u64>,
    /// S1: `true` when streams are *guaranteed* to progress independently. `false` (the documented guarantee) also
    /// explores executions in which a spinning NCCL kernel keeps every other item of its device from starting.
    pub independent_progress: bool,
    /// S1: `true` when hardware runs were *seen* to run a spinning NCCL kernel beside other work (informational: an
    /// observation is not a guarantee, so it changes no verdict; may be left out of a RON profile: `false`).
    pub independent_progress_observed: bool,
    /// N7: `true` when P2P connections are set up lazily at the first launch that needs them, blocking the host until
    /// the peer's host sets up the mirrored direction (every NCCL version: `ncclP2PPreconnectFunc` at the group end).
    /// `false`: every P2P connection exists once the communicator does. Also collectives' when
    /// `collective_connect` is absent.
    pub lazy_connect: bool,
    /// N7: when collectives connect their peers: at communicator creation, lazily at first use (like P2P, blocking
    /// the host), or either (both explored). `None`: as `lazy_connect` says ([`Profile::collective_connect`]). A
    /// RON profile must write it out, `None` included ([`SEMANTIC_FIELDS`]).
    pub collective_connect: Option<CollectiveConnect>,
    /// N7: what non-mirrored first contact does (only read when `lazy_connect`).
    pub nonmirrored_first_contact: NonMirrored,
    /// N5: `true` when consecutive NCCL launches on one communicator are serialized on the device (a launch starts
    /// only after the previous launch on the same communicator has ended), even on different user streams.
    pub serialize_per_comm: bool,
    /// N5: `true` when that serialization also *orders* memory (the previous launch's end happens before the next
    /// launch's start). No document guarantees it, so by default the serialization can delay (and hang) a launch but
    /// a program may not rely on it to order its accesses.
    pub serialization_orders: bool,
    /// S7: which host calls synchronize implicitly (`HostCallSync::default()`: each may synchronize its device, none
    /// is guaranteed to, the documented behaviour).
    pub implicit_sync: HostCallSync,
    /// S7: which device a `cudaFree` of another device's pointer synchronizes, when `implicit_sync.free` makes it
    /// synchronize a device ([`FreeDevice`]; issue 30's note, item 6: a platform measured to synchronize one of them
    /// can say so). A RON profile must say which (no default).
    pub free_device: FreeDevice,
    /// S7: `CUDA_LAUNCH_BLOCKING=1`: every launch (kernel, asynchronous copy or memset, host function, NCCL launch)
    /// returns only once its work has ended.
    pub launch_blocking: bool,
    /// S6: the number of issued items that have not started a stream's queue holds; an enqueue on a stream with that
    /// many blocks the host thread until one of them starts. `None`: unbounded (no launch ever blocks for room).
    /// A bound is a capacity the platform *guarantees* to provide and is assumed to refuse beyond.
    pub launch_queue_depth: Option<u32>,
    /// S6: the depth hardware runs were *seen* to have (informational, like `independent_progress_observed`: an
    /// observation changes no verdict; may be left out of a RON profile: `None`). About 1000 launches per stream
    /// (NVIDIA developer forum, "CUDA stream are blocked when launch lots of kernels (>1000)").
    pub launch_queue_depth_observed: Option<u32>,
    /// N14: the kernel-plan budget NCCL cuts a group's point-to-point calls with; `None`: every group is launched as
    /// one plan, as the NCCL User Guide describes (N4). A RON profile must say which (no default).
    pub p2p_plan: Option<PlanBudget>,
    /// N14: the order in which a cut group's pairs fill the plans: NCCL 2.22-2.29.3's (`Restart`), NCCL >= 2.29.7's
    /// (`Continue`), or either (both explored as a choice of the platform, `portable`). Read only with a `p2p_plan`.
    /// A RON profile must say which (no default).
    pub p2p_plan_order: PlanOrder,
    /// Where the profile was read from, as the user gave it (`--profile my.ron`); `None` for a built-in profile and
    /// one made in code. Not a semantic parameter (no rule reads it) and no part of a profile file (never read or
    /// written as RON): reports name the file beside `name` ([`Profile::label`]), so that an edited copy of a built-in
    /// is not mistaken for it, and a witness hint passes it back ([`Profile::argument`]). Compared and hashed like
    /// the other fields.
    #[serde(skip)]
    pub source: Option<String>,
}

/// The semantic fields of [`Profile`] that a RON profile must write out, each as (field, a line to add, what it
/// means and the alternative). The line to add is the value the field had when a profile file left it out, before
/// issue 30 (so adding it keeps the verdicts a file gave), or `portable`'s for fields that were always required. A
/// profile file that leaves one out is refused with these lines ([`Profile::from_ron`]).
pub const SEMANTIC_FIELDS: &[(&str, &str, &str)] = &[
    ("eager_bytes_per_connection", "eager_bytes_per_connection: 18446744073709551615,", "N2: any send may finish eagerly, as `portable`; or the measured window in bytes, 0 for rendezvous"),
    ("eager_bytes_guaranteed", "eager_bytes_guaranteed: None,", "N2: the whole eager window is guaranteed (what a file without the field meant); `Some(0)`: none is, as `portable`"),
    ("independent_progress", "independent_progress: false,", "S1: streams are not guaranteed to progress independently, as `portable`"),
    ("lazy_connect", "lazy_connect: true,", "N7: connections are set up at first use, as `portable`"),
    ("collective_connect", "collective_connect: None,", "N7: collectives connect their peers as `lazy_connect` says (what a file without the field meant); or `Some(Either)`: at init or lazily, both explored, as `portable` (NCCL < 2.22 or NCCL_RUNTIME_CONNECT=0 connect at init), `Some(Lazy)`, `Some(Init)`"),
    ("nonmirrored_first_contact", "nonmirrored_first_contact: Undefined,", "N7: as `portable`; or `Hang`"),
    ("serialize_per_comm", "serialize_per_comm: true,", "N5: launches on one communicator are serialized, as `portable`"),
    ("serialization_orders", "serialization_orders: false,", "N5: that serialization orders no memory (what a file without the field meant, as `portable`); or `true`"),
    ("implicit_sync", "implicit_sync: (free: (guaranteed: None, possible: Device), malloc: (guaranteed: None, possible: Device), malloc_host: (guaranteed: None, possible: Device), lazy_load: (guaranteed: None, possible: Device)),", "S7: each call may synchronize its device, none is guaranteed to (what a file without the field meant, as `portable`)"),
    ("free_device", "free_device: Either,", "S7: a cudaFree of another device's pointer may synchronize the pointer's device or the calling thread's, both explored (what a file without the field meant, as `portable`); or `Pointer`, `Caller`"),
    ("launch_blocking", "launch_blocking: false,", "S7: CUDA_LAUNCH_BLOCKING unset (what a file without the field meant, as `portable`); or `true`"),
    ("launch_queue_depth", "launch_queue_depth: None,", "S6: an unbounded launch queue (what a file without the field meant, as `portable`); or `Some(DEPTH)`"),
    ("p2p_plan", "p2p_plan: None,", "N14: every group is one kernel plan, as the NCCL User Guide describes (what a file without the field meant); or `Some((batches: 254, channels_per_peer: 64, chunk_bytes: 65536))`, NCCL 2.28 as measured on an H200, as `portable`"),
    ("p2p_plan_order", "p2p_plan_order: Continue,", "N14: a cut group's plans continue NCCL's schedule where the previous plan was cut, NCCL >= 2.29.7 (the order profiles got before the field existed); or `Restart`, NCCL 2.22-2.29.3; or `Either`, both explored, as `portable`"),
];

/// A profile as a RON file writes it: every semantic field optional here, so that a missing one is named with what
/// to write ([`SEMANTIC_FIELDS`]) instead of serde's bare "missing field" or, for `Option` and defaulted fields, a
/// silent default.
#[derive(Deserialize)]
#[serde(rename = "Profile", deny_unknown_fields)]
struct ProfileFile {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default, deserialize_with = "present")]
    eager_bytes_per_connection: Option<u64>,
    #[serde(default, deserialize_with = "present")]
    eager_bytes_guaranteed: Option<Option<u64>>,
    #[serde(default, deserialize_with = "present")]
    independent_progress: Option<bool>,
    #[serde(default)]
    independent_progress_observed: bool,
    #[serde(default, deserialize_with = "present")]
    lazy_connect: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    collective_connect: Option<Option<CollectiveConnect>>,
    #[serde(default, deserialize_with = "present")]
    nonmirrored_first_contact: Option<NonMirrored>,
    #[serde(default, deserialize_with = "present")]
    serialize_per_comm: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    serialization_orders: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    implicit_sync: Option<HostCallSync>,
    #[serde(default, deserialize_with = "present")]
    free_device: Option<FreeDevice>,
    #[serde(default, deserialize_with = "present")]
    launch_blocking: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    launch_queue_depth: Option<Option<u32>>,
    #[serde(default)]
    launch_queue_depth_observed: Option<u32>,
    #[serde(default, deserialize_with = "present")]
    p2p_plan: Option<Option<PlanBudget>>,
    #[serde(default, deserialize_with = "present")]
    p2p_plan_order: Option<PlanOrder>,
}

/// A field that is written: `Some` of its value, whatever the value (so that `p2p_plan: None` is told apart from
/// no `p2p_plan` at all).
fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

impl TryFrom<ProfileFile> for Profile {
    type Error = String;

    /// Errors: every semantic field the file leaves out, each with what to write.
    fn try_from(f: ProfileFile) -> Result<Profile, String> {
        let mut missing: Vec<&str> = vec![];
        macro_rules! need {
            ($field:ident) => {
                match f.$field {
                    Some(v) => v,
                    None => {
                        missing.push(stringify!($field));
                        Default::default()
                    }
                }
            };
        }
        let p = Profile {
            name: f.name,
            description: f.description,
            eager_bytes_per_connection: need!(eager_bytes_per_connection),
            eager_bytes_guaranteed: need!(eager_bytes_guaranteed),
            independent_progress: need!(independent_progress),
            independent_progress_observed: f.independent_progress_observed,
            lazy_connect: need!(lazy_connect),
            collective_connect: need!(collective_connect),
            nonmirrored_first_contact: f.nonmirrored_first_contact.unwrap_or_else(|| {
                missing.push("nonmirrored_first_contact");
                NonMirrored::Undefined
            }),
            serialize_per_comm: need!(serialize_per_comm),
            serialization_orders: need!(serialization_orders),
            implicit_sync: need!(implicit_sync),
            free_device: f.free_device.unwrap_or_else(|| {
                missing.push("free_device");
                FreeDevice::Either
            }),
            launch_blocking: need!(launch_blocking),
            launch_queue_depth: need!(launch_queue_depth),
            launch_queue_depth_observed: f.launch_queue_depth_observed,
            p2p_plan: need!(p2p_plan),
            p2p_plan_order: f.p2p_plan_order.unwrap_or_else(|| {
                missing.push("p2p_plan_order");
                PlanOrder::Either
            }),
            source: None,
        };
        if missing.is_empty() {
            return Ok(p);
        }
        let names = missing.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ");
        let lines = SEMANTIC_FIELDS
            .iter()
            .filter(|(name, ..)| missing.contains(name))
            .map(|(_, line, why)| format!("\n    {line}  // {why}"))
            .collect::<String>();
        Err(format!(
            "the profile does not say {names}: a field that changes verdicts is never taken by default (issue 30); \
             add {}, with the value this platform has (`cuorder profile portable` prints every field):{lines}",
            if missing.len() == 1 { "it" } else { "them" }
        ))
    }
}

/// N14: how NCCL cuts the point-to-point calls of one group into kernel plans (NCCL `src/enqueue.cc`,
/// `scheduleP2pTasksToPlan`). The calls are taken in NCCL's schedule order (per peer in call order, one send and one
/// recv per round, rounds in the p2p schedule's order) as (send, recv) pairs; a pair joins the current plan while the
/// plan's used batches plus `channels_per_peer` (the worst case a pair may need) fit in `batches`, and then uses
/// `ceil(max(send bytes, recv bytes) / chunk_bytes)` batches, at least 1 and at most `channels_per_peer`. Plans run one
/// after another on the stream, so a call in a later plan waits until every call of the earlier plans has finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanBudget {
    /// Work batches one plan's kernel arguments hold (NCCL 2.28: 4 KiB of arguments, 16 bytes per batch: 254).
    pub batches: u32,
    /// Channels a (send, recv) pair may spread over (`p2pnChannelsPerPeer`; 64 on a one-rank communicator of an
    /// H200; topology-dependent with more ranks).
    pub channels_per_peer: u32,
    /// Bytes one channel's share of a pair carries before the pair takes another channel (64 KiB measured).
    pub chunk_bytes: u64,
}

impl PlanBudget {
    /// What NCCL 2.28.9 did on an H200 (one-rank communicator, CUDA 13, driver 580): groups of 4-byte to 64 KiB
    /// pairs took a new plan every 191 pairs, 128 KiB every 96, 256 KiB every 48, 512 KiB every 24, 1 MiB every 12,
    /// 4 and 16 MiB every 3 (`traces/hw/plan-split-2026-12-02/`, `hw/scripts/plan-split.py`).
    pub const H200_NCCL_2_28: PlanBudget = PlanBudget { batches: 254, channels_per_peer: 64, chunk_bytes: 64 << 10 };

    /// Batches a (send, recv) pair of at most `bytes` each takes.
    pub fn pair_cost(&self, bytes: u64) -> u32 {
        let chunks = bytes.div_ceil(self.chunk_bytes.max(1)).max(1);
        chunks.min(self.channels_per_peer.max(1) as u64) as u32
    }

    /// Whether one more pair fits a plan that already uses `used` batches (a plan always takes its first pair).
    pub fn fits(&self, used: u32) -> bool {
        used == 0 || used.saturating_add(self.channels_per_peer) <= self.batches
    }

    /// Pairs of `bytes` each that one plan holds.
    pub fn pairs_per_plan(&self, bytes: u64) -> u32 {
        // The first pair always fits; another fits while used + channels_per_peer <= batches.
        match self.batches.checked_sub(self.channels_per_peer) {
            Some(room) => room / self.pair_cost(bytes) + 1,
            None => 1,
        }
    }
}

impl Profile {
    /// Only what the documentation guarantees (the default), so that "no problem" holds on every documented
    /// platform and every finding can happen on one:
    /// - N2: any send may finish without its recv (eager, up to any size) and may have to wait for it (no eager byte
    ///   is guaranteed): both are explored;
    /// - S1: streams are not guaranteed to progress independently;
    /// - N7: P2P connections are set up lazily per communicator, blocking the host at first contact
    ///   (NCCL_COMM_BLOCKING, "Group calls"); collectives connect at communicator creation (NCCL < 2.22,
    ///   `NCCL_RUNTIME_CONNECT=0`) *or* lazily at first use (NCCL >= 2.22 by default): both are explored, as a choice
    ///   of the platform; non-mirrored first contact is undefined;
    /// - N5: launches on one communicator may be serialized (NCCL source), which can hang a program but orders
    ///   nothing a program may rely on;
    /// - C1: a broadcast root may finish before the other members start, or wait for them;
    /// - N14: a group's point-to-point calls are cut into kernel plans by the budget NCCL 2.28 has on an H200 (NCCL
    ///   source, measured; the documentation says a group never blocks itself, the implementation can), filled in
    ///   NCCL 2.22-2.29.3's order *or* NCCL >= 2.29.7's: both are explored, as a choice of the platform.
    pub fn portable() -> Profile {
        Profile {
            name: "portable".into(),
            description: "only what the CUDA and NCCL documentation guarantee: any send may complete eagerly or wait \
                          for its recv (N2), no guaranteed independent progress (S1), lazy host-blocking connection \
                          set-up for P2P, and for collectives at init or lazily (N7), launches on one communicator may be serialized without ordering memory (N5)"
                .into(),
            eager_bytes_per_connection: u64::MAX,
            eager_bytes_guaranteed: Some(0),
            independent_progress: false,
            independent_progress_observed: false,
            lazy_connect: true,
            collective_connect: Some(CollectiveConnect::Either),
            nonmirrored_first_contact: NonMirrored::Undefined,
            serialize_per_comm: true,
            serialization_orders: false,
            implicit_sync: HostCallSync::default(),
            free_device: FreeDevice::Either,
            launch_blocking: false,
            launch_queue_depth: None,
            launch_queue_depth_observed: None,
            p2p_plan: Some(PlanBudget::H200_NCCL_2_28),
            p2p_plan_order: PlanOrder::Either,
            source: None,
        }
    }

    /// A what-if profile of a typical NCCL 2.x intra-node platform, taken as *given* (not derived from the docs):
    /// sends up to 4 MiB per connection always complete without a recv (N2; an estimate until a calibrated profile
    /// replaces it), streams progress independently (S1), connections are set up lazily (N7), launches on one
    /// communicator are serialized and ordered (N5).
    pub fn eager() -> Profile {
        Profile {
            name: "eager".into(),
            description: "what-if: NCCL with a guaranteed 4 MiB eager window per connection (N2, estimate), \
                          independent progress (S1), lazy connection set-up (N7), per-communicator serialization \
                          that orders memory (N5)"
                .into(),
            eager_bytes_per_connection: 4 << 20,
            eager_bytes_guaranteed: None,
            independent_progress: true,
            independent_progress_observed: false,
            lazy_connect: true,
            collective_connect: Some(CollectiveConnect::Lazy),
            nonmirrored_first_contact: NonMirrored::Hang,
            serialize_per_comm: true,
            serialization_orders: true,
            implicit_sync: HostCallSync::default(),
            free_device: FreeDevice::Either,
            launch_blocking: false,
            launch_queue_depth: None,
            launch_queue_depth_observed: None,
            p2p_plan: Some(PlanBudget::H200_NCCL_2_28),
            p2p_plan_order: PlanOrder::Either,
            source: None,
        }
    }

    /// What the profile assumes, in plain words, one line per behaviour (for `cuorder profile NAME`).
    pub fn assumptions(&self) -> Vec<String> {
        let b = crate::describe::bytes;
        let mut v = vec![];
        let (possible, guaranteed) = (self.eager_bytes_per_connection, self.eager_guaranteed());
        v.push(match (possible, guaranteed) {
            (0, _) => "N2 sends: every send waits for its recv (rendezvous); none finishes early.".to_string(),
            (u64::MAX, 0) => "N2 sends: any send may finish before its recv runs (eager), and any send may have to wait \
                              for it (rendezvous): both are explored, so neither hides a race nor a deadlock."
                .to_string(),
            (p, g) if g >= p => format!("N2 sends: up to {} per connection always finish without a recv (eager); larger ones wait for it.", b(p)),
            (p, g) => format!(
                "N2 sends: up to {} per connection are guaranteed to finish without a recv; up to {} may or may not \
                 (both explored); larger ones wait for it.",
                b(g),
                if p == u64::MAX { "any size".to_string() } else { b(p) }
            ),
        });
        v.push(if self.independent_progress {
            "S1 streams: assumed to progress independently: a spinning NCCL kernel never keeps other work of its device \
             from running."
                .to_string()
        } else if self.independent_progress_observed {
            "S1 streams: not guaranteed to progress independently (seen on the hardware, but not guaranteed): the \
             explorer also lets a spinning NCCL kernel keep other work of its device from starting."
                .to_string()
        } else {
            "S1 streams: not guaranteed to progress independently: the explorer also lets a spinning NCCL kernel keep \
             other work of its device from starting."
                .to_string()
        });
        let coll = match self.collective_connect() {
            CollectiveConnect::Init => "collectives connect at communicator creation".to_string(),
            CollectiveConnect::Lazy => "collectives connect lazily at their first use".to_string(),
            CollectiveConnect::Either => format!(
                "collectives connect either way, as the platform chooses (both explored; a finding that needs one says so): \
                 {}, or {}",
                ConnectChoice::Init.words(),
                ConnectChoice::Lazy.words()
            ),
        };
        let lazy_any = self.lazy_connect || self.collective_connect() != CollectiveConnect::Init;
        let contact = match self.nonmirrored_first_contact {
            NonMirrored::Hang => "hangs both hosts",
            NonMirrored::Undefined => "is undefined",
        };
        v.push(match (self.lazy_connect, lazy_any) {
            (true, _) => format!(
                "N7 connections: P2P connections are set up lazily per communicator at first use; {coll}; a lazy set-up \
                 blocks the host until the peer sets up the mirrored direction; non-mirrored first contact {contact}."
            ),
            (false, true) => format!(
                "N7 connections: P2P connections exist once the communicator does; {coll}; a lazy set-up blocks the host \
                 until the peer sets up the mirrored direction; non-mirrored first contact {contact}."
            ),
            (false, false) => "N7 connections: exist once the communicator does; first contact never blocks.".to_string(),
        });
        v.push(match (self.serialize_per_comm, self.serialization_orders) {
            (false, _) => "N5 launches: launches on one communicator may run side by side.".to_string(),
            (true, false) => "N5 launches: a launch on a communicator waits for the previous one to end (this can hang a \
                              program), but a program may not rely on it to order memory."
                .to_string(),
            (true, true) => "N5 launches: a launch on a communicator waits for the previous one to end, and that orders \
                             memory."
                .to_string(),
        });
        let sync = &self.implicit_sync;
        v.push(format!(
            "S7 implicit synchronization: cudaFree {} (a free of another device's pointer synchronizes {}); cudaMalloc {}; cudaMallocHost \
             {}; a lazy module load {}.",
            sync.free.words(),
            self.free_device.words(),
            sync.malloc.words(),
            sync.malloc_host.words(),
            sync.lazy_load.words()
        ));
        if self.launch_blocking {
            v.push("S7 CUDA_LAUNCH_BLOCKING=1: every launch returns only once its work has ended.".to_string());
        }
        v.push(match (self.launch_queue_depth, self.launch_queue_depth_observed) {
            (None, None) => "S6 launch queue: unbounded (no launch blocks for room; a full queue's hangs are not explored).".to_string(),
            (None, Some(o)) => format!(
                "S6 launch queue: unbounded (about {o} pending launches per stream were seen, but not guaranteed; a full \
                 queue's hangs are not explored)."
            ),
            (Some(d), _) => format!(
                "S6 launch queue: {d} pending (not yet started) items per stream; an enqueue on a full stream blocks the host \
                 until one starts."
            ),
        });
        v.push(match &self.p2p_plan {
            None => "N14 groups: every group's point-to-point calls are launched as one kernel plan.".to_string(),
            Some(b) => format!(
                "N14 groups: a group's point-to-point calls are cut into kernel plans that run one after another, as \
                 NCCL 2.22 and later do ({} batches per plan, up to {} channels per pair, {} per channel: {} pairs of \
                 64 KiB per plan, {} of 1 MiB, {} of 16 MiB), filled in {}; a call in a later plan waits for the \
                 earlier plans.",
                b.batches,
                b.channels_per_peer,
                crate::describe::bytes(b.chunk_bytes),
                b.pairs_per_plan(64 << 10),
                b.pairs_per_plan(1 << 20),
                b.pairs_per_plan(16 << 20),
                match self.p2p_plan_order {
                    PlanOrder::Restart => PlanOrderChoice::Restart.words().to_string(),
                    PlanOrder::Continue => PlanOrderChoice::Continue.words().to_string(),
                    PlanOrder::Either => format!(
                        "either order, as the platform chooses (both explored; a finding that needs one says so): {}, or {}",
                        PlanOrderChoice::Restart.words(),
                        PlanOrderChoice::Continue.words()
                    ),
                }
            ),
        });
        v.push(format!(
            "C1 parts that only send (a broadcast or scatter root, a gather non-root) may finish before the other members \
             start when their message {}.",
            match (possible, guaranteed) {
                (0, _) => "never (it always waits for them)".to_string(),
                (u64::MAX, 0) => "is any size (explored both ways)".to_string(),
                (p, _) => format!("is at most {}", b(p)),
            }
        ));
        v
    }

    /// Names of the built-in profiles.
    pub const BUILTIN: &'static [&'static str] = &["portable", "eager"];

    /// A built-in profile by name.
    pub fn builtin(name: &str) -> Option<Profile> {
        match name {
            "portable" => Some(Profile::portable()),
            "eager" => Some(Profile::eager()),
            _ => None,
        }
    }

    /// The profile as reports name it: its `name`, followed by the file it was read from, if any ("portable (from
    /// my.ron)"; the file alone when the name is empty).
    pub fn label(&self) -> String {
        match &self.source {
            Some(file) if self.name.is_empty() => file.clone(),
            Some(file) => format!("{} (from {file})", self.name),
            None => self.name.clone(),
        }
    }

    /// The `--profile` argument that selects this profile again: the file it was read from, as the user gave it,
    /// else its name (a built-in profile's).
    pub fn argument(&self) -> &str {
        self.source.as_deref().unwrap_or(&self.name)
    }

    /// When collectives connect their peers (N7): `collective_connect`, or, when the profile leaves it out, as P2P
    /// connections do (`lazy_connect`).
    pub fn collective_connect(&self) -> CollectiveConnect {
        match (self.collective_connect, self.lazy_connect) {
            (Some(c), _) => c,
            (None, true) => CollectiveConnect::Lazy,
            (None, false) => CollectiveConnect::Init,
        }
    }

    /// Bytes per connection that are always available to eager sends (N2).
    pub fn eager_guaranteed(&self) -> u64 {
        self.eager_bytes_guaranteed.unwrap_or(self.eager_bytes_per_connection).min(self.eager_bytes_per_connection)
    }

    /// Parses a profile written in RON. A field the profile does not have is an error (a misspelt knob must not
    /// leave its default in force unnoticed), and so is a semantic field it leaves out ([`SEMANTIC_FIELDS`]: the
    /// message names each and what to write); only `description`, `independent_progress_observed` and
    /// `launch_queue_depth_observed` may be left out.
    ///
    /// Errors: the RON error with its line and column (a missing field: the end of the profile).
    pub fn from_ron(text: &str) -> Result<Profile, ron::error::SpannedError> {
        ron::from_str(text)
    }

    /// What makes a parsed profile meaningless, in words, one line each (empty when it is fine): a launch queue of
    /// depth 0 (S6: no launch could ever be issued), a host call whose guaranteed synchronization is wider than the
    /// one it may make (S7).
    pub fn problems(&self) -> Vec<String> {
        let mut out = vec![];
        if self.launch_queue_depth == Some(0) {
            out.push("launch_queue_depth: Some(0) holds no launch, so no program could issue any work (S6); use \
                      Some(1) or more, or None for an unbounded queue"
                .to_string());
        }
        if let Some(b) = &self.p2p_plan {
            if b.channels_per_peer == 0 || b.chunk_bytes == 0 || b.batches == 0 {
                out.push(format!(
                    "p2p_plan: batches ({}), channels_per_peer ({}) and chunk_bytes ({}) must all be at least 1 (N14)",
                    b.batches, b.channels_per_peer, b.chunk_bytes
                ));
            }
        }
        let s = &self.implicit_sync;
        for (name, sync) in [("free", s.free), ("malloc", s.malloc), ("malloc_host", s.malloc_host), ("lazy_load", s.lazy_load)] {
            if sync.possible < sync.guaranteed {
                out.push(format!(
                    "implicit_sync.{name}: guaranteed {:?} is wider than possible {:?} (S7: the possible scope includes \
                     the guaranteed one)",
                    sync.guaranteed, sync.possible
                ));
            }
        }
        out
    }
}

impl Default for Profile {
    fn default() -> Self {
        Profile::portable()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_round_trip_through_ron() {
        for name in Profile::BUILTIN {
            let p = Profile::builtin(name).unwrap();
            let text = ron::ser::to_string_pretty(&p, Default::default()).unwrap();
            assert_eq!(Profile::from_ron(&text).unwrap(), p);
        }
    }

    /// `portable` as RON, one field a line, without the line of `field`.
    fn portable_without(field: &str) -> String {
        let text = ron::ser::to_string_pretty(&Profile::portable(), Default::default()).unwrap();
        let mut out = String::new();
        let mut skipping = false;
        for line in text.lines() {
            let top = line.starts_with("    ") && line[4..].starts_with(|c: char| c.is_ascii_alphabetic());
            if top || !line.starts_with(' ') {
                skipping = line.trim_start().starts_with(&format!("{field}:"));
            }
            if !skipping {
                out.push_str(line);
                out.push('\n');
            }
        }
        assert_ne!(out, format!("{text}\n"), "{field} is written");
        out
    }

    /// Issue 30: a profile file without `p2p_plan` (the repository's own calibrated H200 profile among them) ran
    /// every group as one kernel plan without a word; a missing `eager_bytes_guaranteed` made the whole eager window
    /// guaranteed. Every semantic field left out is now refused, naming it and what to write.
    #[test]
    fn a_profile_without_p2p_plan_was_read_silently() {
        let e = Profile::from_ron(&portable_without("p2p_plan")).unwrap_err().to_string();
        assert!(e.contains("`p2p_plan`") && e.contains("p2p_plan: None") && e.contains("batches: 254"), "{e}");
        for (field, ..) in SEMANTIC_FIELDS {
            let e = Profile::from_ron(&portable_without(field)).expect_err(field).to_string();
            assert!(e.contains(&format!("does not say `{field}`")), "{field}: {e}");
        }
        // The line the message offers is RON that a profile file takes.
        for (field, line, _) in SEMANTIC_FIELDS {
            let fixed = portable_without(field).replacen("(\n", &format!("(\n    {line}\n"), 1);
            Profile::from_ron(&fixed).unwrap_or_else(|e| panic!("{field}: {e}"));
        }
        // Informational fields may be left out.
        for field in ["description", "independent_progress_observed", "launch_queue_depth_observed"] {
            let p = Profile::from_ron(&portable_without(field)).unwrap_or_else(|e| panic!("{field}: {e}"));
            assert_eq!(p.p2p_plan, Profile::portable().p2p_plan);
        }
        // `None` written out is not a missing field.
        let none = portable_without("p2p_plan").replacen("(\n", "(\n    p2p_plan: None,\n", 1);
        assert_eq!(Profile::from_ron(&none).unwrap().p2p_plan, None);
        // Two missing fields are named together.
        let two = portable_without("p2p_plan").replace("    launch_blocking: false,\n", "");
        let e = Profile::from_ron(&two).unwrap_err().to_string();
        assert!(e.contains("`launch_blocking`, `p2p_plan`"), "{e}");
    }

    /// Every semantic field of `Profile` is in `SEMANTIC_FIELDS` (a new field must say what to write when missing).
    #[test]
    fn semantic_fields_cover_every_field() {
        let text = ron::ser::to_string_pretty(&Profile::portable(), Default::default()).unwrap();
        let informational = ["name", "description", "independent_progress_observed", "launch_queue_depth_observed"];
        for line in text.lines().filter(|l| l.starts_with("    ") && l[4..].starts_with(|c: char| c.is_ascii_alphabetic())) {
            let field = line.trim_start().split(':').next().unwrap();
            assert!(
                informational.contains(&field) || SEMANTIC_FIELDS.iter().any(|(f, ..)| *f == field),
                "{field} is neither informational nor in SEMANTIC_FIELDS"
            );
        }
    }
}
