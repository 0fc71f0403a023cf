//! The PyTorch dialect: `torch.distributed` and `torch.cuda` calls written as ops of the surface format
//! (`DistSend`, `BatchIsendIrecv`, `WorkWait`, `WithStream`, ...), lowered during SPMD expansion to the model's ops
//! exactly as `ProcessGroupNCCL` issues them. Each lowering rule cites its PyTorch source; `docs/program-format.md`
//! ("The PyTorch dialect") lists them and `docs/semantics.md` (P1-P5) gives the rules.
//!
//! What the lowering adds to the program: one internal NCCL stream per rank, `nccl` (non-blocking, as
//! ProcessGroupNCCL's streams come from the CUDA stream pool: S2), the communicator `world` when the program declares
//! none (the default process group over every rank), and per call site the events ProcessGroupNCCL records: the
//! `syncStream` event `torch.pre.N` and the work end events `torch.end.N.J`. A call site inside a loop re-records
//! its events every iteration (S3: a wait binds to the latest record at the time of the wait).
//!
//! The settings (`torch: Torch(version, init, avoid_record_streams)`, each overridable from the command line through
//! [`super::TorchOptions`]) pick the ProcessGroupNCCL behaviours that differ between versions and set-ups. With
//! `avoid_record_streams` the lowering tracks, per thread, which works stash which pooled tensors, and moves the
//! `Free` of a tensor deleted while stashed to the `WorkWait` that releases it. `dist.all_to_all` and
//! `all_to_all_single` with split sizes become one NCCL group of sends and recvs per peer.

use super::expand::{Env, Item, Leaf};
use super::issues::{Issue, Issues};
use super::span_index::{field, index};
use super::expand::Scope;
use super::expr::Value;
use super::surface::{BufArg, ExprArg, Peer, Root, SOp, SP2PKind, SProgram, STorchInit, STorchVersion, SimplePeer, Size};
use super::decls::Decls;
use crate::program::{Comm, StreamKind};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

/// The internal NCCL stream of every rank.
pub const NCCL_STREAM: &str = "nccl";
/// The default process group's communicator, declared when the program declares none.
pub const WORLD: &str = "world";
/// The one-element tensor `dist.barrier()` all-reduces, on every rank.
pub const BARRIER_TENSOR: &str = "torch.barrier";

/// The call sites of a program's PyTorch calls (by the value path of the call) and the version they are lowered as.
#[derive(Debug, Default)]
pub struct TorchDecls {
    /// Whether the program makes any PyTorch call.
    pub used: bool,
    /// The ProcessGroupNCCL version lowered (P3).
    pub version: STorchVersion,
    /// How the default group was initialised (P2).
    pub init: STorchInit,
    /// The watchdog timeout of `Torch(timeout:)`, ns (N9).
    pub watchdog_ns: Option<u64>,
    /// `TORCH_NCCL_AVOID_RECORD_STREAMS`: works stash their tensors instead of `record_stream` (P4).
    pub avoid_record_streams: bool,
    /// The lowering declared the default group's communicator `world` and the group is initialised lazily: each
    /// rank creates `world` with a `CommInit` at its first call that uses it (P2, N8).
    pub lazy_world: bool,
    /// Call site number and number of works, by path.
    sites: BTreeMap<String, (u32, usize)>,
}

/// Whether `op` is a call of the dialect, and how many works (end events) it creates.
fn works_of(op: &SOp) -> Option<usize> {
    match op {
        SOp::DistSend { .. } | SOp::DistRecv { .. } | SOp::Isend { .. } | SOp::Irecv { .. } => Some(1),
        SOp::DistAllReduce { .. }
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
        | SOp::DistBarrier => Some(1),
        SOp::BatchIsendIrecv { ops, .. } => Some(ops.len()),
        SOp::InitProcessGroup
        | SOp::DestroyProcessGroup
        | SOp::NewGroup { .. }
        | SOp::WorkWait { .. }
        | SOp::CudaSynchronize
        | SOp::Empty { .. }
        | SOp::Del { .. }
        | SOp::FreeStorage { .. }
        | SOp::WithStream { .. }
        | SOp::Compute { .. }
        | SOp::RecordEvent { .. }
        | SOp::WaitEvent { .. } => Some(0),
        _ => None,
    }
}

/// Finds the program's PyTorch calls and declares what their lowering uses (module docs) in `d`. The settings are
/// the program's `torch: Torch(..)` (or their defaults), each overridden by `opts` where it says (`--torch-version`,
/// `--torch-init`, `--torch-avoid-record-streams`).
pub fn declare(p: &SProgram, opts: &super::TorchOptions, d: &mut Decls, issues: &mut Issues) -> TorchDecls {
    let mut t = TorchDecls {
        used: p.torch.is_some(),
        version: opts.version.unwrap_or_else(|| p.torch.as_ref().map(|t| t.version).unwrap_or_default()),
        init: opts.init.unwrap_or_else(|| p.torch.as_ref().map(|t| t.init).unwrap_or_default()),
        avoid_record_streams: opts
            .avoid_record_streams
            .unwrap_or_else(|| p.torch.as_ref().is_some_and(|t| t.avoid_record_streams)),
        ..Default::default()
    };
    // N9: `init_process_group(timeout=)`, ProcessGroupNCCL's watchdog (WorkNCCL::checkTimeout against
    // `options_->timeout`; default kProcessGroupNCCLDefaultTimeout, 10 min).
    if let Some(d) = p.torch.as_ref().and_then(|t| t.timeout.as_ref()) {
        let path = field("torch", "timeout");
        let r = match d {
            super::surface::Duration::Nanos(n) => Ok(*n),
            super::surface::Duration::Text(t) => super::units::parse_duration(t),
            super::surface::Duration::Invalid(m) => Err(m.clone()),
        };
        match r {
            Ok(0) => issues.push(Issue::new(path, "the process group timeout is 0").help("give a positive timeout, e.g. \"600 s\" (PyTorch's default, 10 minutes)")),
            Ok(n) => t.watchdog_ns = Some(n),
            Err(m) => issues.push(Issue::new(path, m).help(super::units::DURATION_HELP)),
        }
    }
    // In document order, so that call site numbers (and event names) read top to bottom. Recursion is bounded by
    // the parser's MAX_NESTING_DEPTH.
    fn walk(ops: &[SOp], base: &str, t: &mut TorchDecls, next: &mut u32) {
        for (i, op) in ops.iter().enumerate() {
            let path = index(base, i);
            if let Some(works) = works_of(op) {
                t.used = true;
                if works > 0 {
                    t.sites.insert(path.clone(), (*next, works));
                    *next += 1;
                }
            }
            for (kids, kpath) in super::surface::op_lists(op, &path) {
                walk(kids, &kpath, t, next);
            }
        }
    }
    let mut next = 0u32;
    for th in &d.threads {
        walk(th.ops, &th.ops_path, &mut t, &mut next);
    }
    if !t.used {
        return t;
    }
    if let Some(s) = d.stream_idx.keys().find(|s| *s == NCCL_STREAM || s.starts_with("nccl.")) {
        issues.push(
            Issue::new("streams", format!("stream name `{s}` is reserved in a program with PyTorch calls"))
                .help("`nccl` and `nccl.A:B` name ProcessGroupNCCL's internal NCCL streams; rename yours"),
        );
    } else {
        d.streams.push((NCCL_STREAM.to_string(), StreamKind::NonBlocking));
        d.stream_idx.insert(NCCL_STREAM.to_string(), d.streams.len() as u32);
    }
    if let Some(e) = d.events.iter().find(|e| e.starts_with("torch.")) {
        issues.push(Issue::new("events", format!("event name `{e}` is reserved in a program with PyTorch calls")));
    }
    if let Some(b) = d.buffers.iter().find(|b| b.name.starts_with("torch.")) {
        issues.push(Issue::new("buffers", format!("buffer name `{}` is reserved in a program with PyTorch calls", b.name)));
    } else {
        d.buffer_idx.insert(BARRIER_TENSOR.to_string(), d.buffers.len() as u32);
        d.buffers.push(crate::program::Buffer { name: BARRIER_TENSOR.to_string(), bytes: 4, space: crate::program::MemSpace::Device, pooled: false });
        d.buffer_size_known.push(true);
    }
    for (n, works) in t.sites.values() {
        let mut names = vec![pre_event(*n)];
        names.extend((0..*works).map(|j| end_event(*n, j)));
        for name in names {
            d.event_idx.insert(name.clone(), d.events.len() as u32);
            d.events.push(name);
        }
    }
    // The default group's communicator. Initialised lazily (no `device_id`), ProcessGroupNCCL creates it at the
    // rank's first call that needs it (`getNCCLComm`: `initNCCLComm` -> `NCCLComm::create` -> ncclCommInitRankConfig,
    // a rendezvous of every rank of the group, N8): a collective, a barrier or a `batch_isend_irecv` (whose docs
    // say: "if this API is the first collective call in the group ..., all ranks of the group must participate in
    // this API call"). Initialised eagerly, `init_process_group(device_id=)` creates it at once
    // (`eager_connect_single_device`, PR 114916), which the model takes as existing from the start.
    if d.comms.is_empty() && d.ranks > 0 {
        t.lazy_world = t.init == STorchInit::Lazy;
        d.comms.push(Comm { name: WORLD.to_string(), members: (0..d.ranks).collect(), explicit_init: t.lazy_world, nonblocking: false, watchdog_ns: None });
        d.comm_idx.insert(WORLD.to_string(), 0);
    }
    t
}

/// The 2-rank communicator ProcessGroupNCCL creates for P2P between `lo` < `hi` (key "lo:hi", P2).
fn pair_comm(lo: u32, hi: u32) -> String {
    format!("torch.p2p.{lo}:{hi}")
}

/// The communicator of process group `name` created by `NewGroup` (`dist.new_group`).
pub fn group_comm(name: &str) -> String {
    format!("torch.group.{name}")
}

/// The color a new group's members pass to ncclCommSplit: derived from the member list, so that different groups
/// split at one call get different colors (ProcessGroupNCCL's `genNcclSplitColor` hashes the ranks; this is FNV-1a
/// of them, non-negative).
fn split_color(members: &[u32]) -> i64 {
    let mut h: u32 = 0x811c_9dc5;
    for m in members {
        for b in m.to_le_bytes() {
            h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
        }
    }
    i64::from(h & 0x7fff_ffff)
}

/// Declares the communicators of the process groups lazily initialised programs create (`torch.group.G`, created by
/// a `CommInit` at each member's first collective on it), once every thread has been expanded. Eagerly initialised
/// groups are split from `world` instead, and `split.rs` declares them.
pub fn declare_groups(groups: &BTreeMap<String, Vec<u32>>, d: &mut Decls) {
    for (name, ranks) in groups {
        let comm = group_comm(name);
        if d.comm_idx.contains_key(&comm) {
            continue;
        }
        d.comm_idx.insert(comm.clone(), d.comms.len() as u32);
        d.comms.push(Comm { name: comm, members: ranks.clone(), explicit_init: true, nonblocking: false, watchdog_ns: None });
    }
}

/// The internal NCCL stream of process group `name` created by `NewGroup` (`dist.new_group`): every
/// `ProcessGroupNCCL` object keeps its own streams (`ncclStreams_`, filled by `ProcessGroupNCCL::initNCCLComm` with
/// `at::cuda::getStreamFromPool(options_->is_high_priority_stream || force_high)` when the group creates its
/// communicator), so a new group's collectives never share the default group's stream `nccl`, nor another group's.
/// Measured on PyTorch 2.11 with NCCL 2.28.9 (issue 30): the default group and two `new_group`s each recorded their
/// work events on a distinct stream, the same one every iteration. The stream's priority (`is_high_priority_stream`,
/// `TORCH_NCCL_HIGH_PRIORITY`) changes no ordering and is not modelled.
pub fn group_stream(name: &str) -> String {
    format!("{NCCL_STREAM}.group.{name}")
}

/// Declares the NCCL streams of the process groups some thread ran a collective on ([`group_stream`]), once every
/// thread has been expanded (non-blocking, as every stream of the CUDA stream pool: S2).
pub fn declare_group_streams(groups: &BTreeSet<String>, d: &mut Decls) {
    for g in groups {
        let s = group_stream(g);
        if d.stream_idx.contains_key(&s) {
            continue;
        }
        d.streams.push((s.clone(), StreamKind::NonBlocking));
        d.stream_idx.insert(s, d.streams.len() as u32);
    }
}

/// Declares the flat temporaries of `dist.all_gather` / `dist.reduce_scatter` calls (name -> bytes, the largest any
/// rank or iteration needs) as device buffers, once every thread has been expanded.
pub fn declare_flats(flats: &BTreeMap<String, u64>, d: &mut Decls) {
    for (name, bytes) in flats {
        d.buffer_idx.insert(name.clone(), d.buffers.len() as u32);
        d.buffers.push(crate::program::Buffer { name: name.clone(), bytes: *bytes, space: crate::program::MemSpace::Device, pooled: false });
        d.buffer_size_known.push(true);
    }
}

/// Its NCCL stream.
fn pair_stream(lo: u32, hi: u32) -> String {
    format!("{NCCL_STREAM}.{lo}:{hi}")
}

/// Declares the pair communicators and streams that lazily initialised process groups used (P2), once every thread
/// has been expanded: only pairs that some op uses, so that streams stay few.
pub fn declare_pairs(pairs: &BTreeSet<(u32, u32)>, d: &mut Decls) {
    for &(lo, hi) in pairs {
        d.streams.push((pair_stream(lo, hi), StreamKind::NonBlocking));
        d.stream_idx.insert(pair_stream(lo, hi), d.streams.len() as u32);
        d.comm_idx.insert(pair_comm(lo, hi), d.comms.len() as u32);
        d.comms.push(Comm { name: pair_comm(lo, hi), members: vec![lo, hi], explicit_init: true, nonblocking: false, watchdog_ns: None });
    }
}

fn pre_event(site: u32) -> String {
    format!("torch.pre.{site}")
}

/// The temporary ProcessGroupNCCL flattens the list of `dist.all_gather` / `dist.reduce_scatter` call site `site`
/// into (`newLikeFlat`): a device buffer, declared after expansion with the largest size any rank needs
/// ([`declare_flats`]).
fn flat_buffer(site: u32) -> String {
    format!("torch.flat.{site}")
}

fn end_event(site: u32, work: usize) -> String {
    format!("torch.end.{site}.{work}")
}

/// The name of the work a call creates (`work:`, `works:` or `async_op:` as written at `at`, filled in for this rank
/// and iteration: `"w{i}"` in a `For` over `i` is `w0`, `w1`, ..) and its `count` end events. A work named with no
/// interpolation uses its call site's events `torch.end.N.J`, re-recorded each time the call runs, as Python
/// rebinding one variable in a loop keeps only the last work. An interpolated name is a work of its own that stays
/// usable after the loop (`works.append(dist.isend(..))` then `for w in works: w.wait()`), so it gets end events of
/// its own, `torch.end.N.J.NAME` (noted in `extra`, declared after expansion by [`declare_work_events`]): sharing the
/// site's events would bind the wait of iteration 0's work to the last iteration's record (S3), a later end than
/// PyTorch's `WorkNCCL::wait`, which waits on the end event that work itself recorded. A name that does not
/// interpolate is reported at `at` and the written name is used.
#[allow(clippy::too_many_arguments)]
fn name_work(written: &str, at: String, scope: &Scope, rank: u32, n: u32, count: usize, extra: &mut BTreeSet<String>, issues: &mut Issues) -> (String, Vec<String>) {
    if !written.contains(['{', '}']) {
        return (written.to_string(), (0..count).map(|j| end_event(n, j)).collect());
    }
    match super::expr::interpolate(written, &|v| scope.lookup(v)) {
        Ok(name) => {
            let ends: Vec<String> = (0..count).map(|j| format!("{}.{name}", end_event(n, j))).collect();
            extra.extend(ends.iter().cloned());
            (name.into_owned(), ends)
        }
        Err(m) => {
            issues.push(Issue { path: at, ..scope.issue(written, m) }.on_rank(rank));
            (written.to_string(), (0..count).map(|j| end_event(n, j)).collect())
        }
    }
}

/// Declares the end events of works with interpolated names ([`name_work`]), once every thread has been expanded.
pub fn declare_work_events(events: &BTreeSet<String>, d: &mut Decls) {
    for e in events {
        if !d.event_idx.contains_key(e) {
            d.event_idx.insert(e.clone(), d.events.len() as u32);
            d.events.push(e.clone());
        }
    }
}

/// What lowering tracks while one thread of one rank is expanded: the current stream (`with torch.cuda.stream`),
/// the works by name, and whether the process group exists yet.
pub struct TorchCx<'t> {
    pub decls: &'t TorchDecls,
    /// What the declarations say, shared by every thread of every rank ([`TorchNames::new`]).
    names: &'t TorchNames,
    /// The current stream: `sL` (PyTorch's default stream is the legacy default stream) unless inside `WithStream`.
    pub current: Vec<String>,
    /// An op of this thread was skipped (`recover.rs`; the load fails): what it may have done (initialised the
    /// process group, created a work or a group, waited for a work) is unknown, so the errors that depend on earlier
    /// calls are not reported after it.
    pub after_skip: bool,
    /// Work name -> its end events.
    pub works: BTreeMap<String, Vec<String>>,
    pub initialized: bool,
    /// This rank has created the default group's communicator (`TorchDecls::lazy_world`; always true otherwise).
    pub world_created: bool,
    /// The communicator of the default process group (`world`; `None`: the program's only one).
    pub comm: Option<String>,
    /// Pair communicators this thread has created (lazy init, P2).
    pub inited_pairs: BTreeSet<(u32, u32)>,
    /// Pair communicators some thread uses: declared after expansion (`declare_pairs`).
    pub pairs: BTreeSet<(u32, u32)>,
    /// Process groups created so far by this thread's `NewGroup` calls: name -> member ranks.
    pub groups: BTreeMap<String, Vec<u32>>,
    /// Lazily initialised groups whose communicator this thread has created (at its first collective on it).
    pub inited_groups: BTreeSet<String>,
    /// Lazily initialised groups this thread created: declared after expansion (`declare_groups`).
    pub lazy_groups: BTreeMap<String, Vec<u32>>,
    /// The end events of works with interpolated names ([`name_work`]): declared after expansion
    /// (`declare_work_events`).
    pub work_events: BTreeSet<String>,
    /// The process groups this thread ran a collective on: their NCCL streams are declared after expansion
    /// (`declare_group_streams`).
    pub group_streams: BTreeSet<String>,
    /// The flat temporaries this thread used (`dist.all_gather` / `dist.reduce_scatter` with equal sizes), with the
    /// largest size in bytes: declared after expansion (`declare_flats`).
    pub flats: BTreeMap<String, u64>,
    /// `TORCH_NCCL_AVOID_RECORD_STREAMS` (P4): the stash id of each work name (`WorkNCCL::stashed_for_allocator_safety_`).
    work_stash: BTreeMap<String, u32>,
    /// Stash id -> the pooled tensors it holds until its work's `wait()`.
    stashes: BTreeMap<u32, Vec<String>>,
    /// Pooled tensor -> the stashes that hold it.
    holders: BTreeMap<String, BTreeSet<u32>>,
    /// Tensors deleted (`Del`) while a stash held them: their `Free` comes when the last stash lets go.
    deferred: BTreeSet<String>,
    /// Tensors whose storage `FreeStorage` freed (`resize_(0)`) and no `Empty` has given a block again: a `Del` of
    /// one frees nothing (its storage holds no block).
    storage_freed: BTreeSet<String>,
    next_stash: u32,
}

/// What lowering reads from the declarations, made once per program: every rank's threads share it (it held a copy
/// of every buffer name per thread, a tenth of loading a 1,024-rank pipeline; issue 9).
pub struct TorchNames {
    /// The names of `Pooled` buffers (caching-allocator tensors, P4).
    pooled: BTreeSet<String>,
    /// The names of host buffers (pinned or pageable): NCCL collectives refuse them.
    host: BTreeSet<String>,
    /// Declared names and their kinds (stream, event, communicator, buffer): to say so when a name of another kind
    /// is used as a tensor, and to stay silent about a buffer whose size did not parse (reported at the buffer).
    other_names: BTreeMap<String, &'static str>,
    /// Bytes of every declared buffer whose size is known (split sizes of `all_to_all` are checked against them).
    sizes: BTreeMap<String, u64>,
    /// The members of the default group's communicator, in communicator order.
    default_members: Vec<u32>,
}

impl TorchNames {
    pub fn new(d: &Decls) -> TorchNames {
        TorchNames {
            pooled: d.buffers.iter().filter(|b| b.pooled).map(|b| b.name.clone()).collect(),
            sizes: d
                .buffers
                .iter()
                .zip(&d.buffer_size_known)
                .filter(|(_, known)| **known)
                .map(|(b, _)| (b.name.clone(), b.bytes))
                .collect(),
            default_members: match d.comm_idx.get(WORLD).or(d.comm_idx.values().next().filter(|_| d.comms.len() == 1)) {
                Some(&c) => d.comms[c as usize].members.clone(),
                None => (0..d.ranks).collect(),
            },
            host: d.buffers.iter().filter(|b| b.space != crate::program::MemSpace::Device).map(|b| b.name.clone()).collect(),
            other_names: d
                .streams
                .iter()
                .map(|(n, _)| (n.clone(), "stream"))
                .chain(d.buffers.iter().map(|b| (b.name.clone(), "buffer")))
                .chain(d.events.iter().map(|e| (e.clone(), "event")))
                .chain(d.comms.iter().map(|c| (c.name.clone(), "communicator")))
                .collect(),
        }
    }
}

impl<'t> TorchCx<'t> {
    pub fn new(decls: &'t TorchDecls, names: &'t TorchNames, d: &Decls) -> TorchCx<'t> {
        let comm = d.comm_idx.contains_key(WORLD).then(|| WORLD.to_string());
        TorchCx {
            decls,
            names,
            current: vec!["sL".to_string()],
            after_skip: false,
            works: BTreeMap::new(),
            initialized: false,
            world_created: !decls.lazy_world,
            comm,
            inited_pairs: BTreeSet::new(),
            pairs: BTreeSet::new(),
            groups: BTreeMap::new(),
            inited_groups: BTreeSet::new(),
            lazy_groups: BTreeMap::new(),
            group_streams: BTreeSet::new(),
            work_events: BTreeSet::new(),
            flats: BTreeMap::new(),
            work_stash: BTreeMap::new(),
            stashes: BTreeMap::new(),
            holders: BTreeMap::new(),
            deferred: BTreeSet::new(),
            storage_freed: BTreeSet::new(),
            next_stash: 0,
        }
    }

    /// A new stash holding `tensors` (none: no stash), for the work named `work` when it has a name.
    fn stash(&mut self, work: Option<&str>, tensors: Vec<String>) -> Option<u32> {
        if tensors.is_empty() {
            if let Some(w) = work {
                self.work_stash.remove(w);
            }
            return None;
        }
        let id = self.next_stash;
        self.next_stash += 1;
        for t in &tensors {
            self.holders.entry(t.clone()).or_default().insert(id);
        }
        self.stashes.insert(id, tensors);
        if let Some(w) = work {
            // A work name assigned again drops the old work object; its stash is then released by the watchdog once
            // the op has completed (`workCleanupLoop`), which the model leaves out (module docs of P4 below).
            self.work_stash.insert(w.to_string(), id);
        }
        Some(id)
    }

    /// Releases stash `id` (`stashed_for_allocator_safety_->clear()` in `WorkNCCL::synchronizeStreams`), returning
    /// the deleted tensors whose last holder it was: their `Free` happens now.
    fn release(&mut self, id: u32) -> Vec<String> {
        let mut freed = Vec::new();
        for t in self.stashes.remove(&id).unwrap_or_default() {
            let last = self.holders.get_mut(&t).is_some_and(|h| {
                h.remove(&id);
                h.is_empty()
            });
            if last {
                self.holders.remove(&t);
                if self.deferred.remove(&t) {
                    freed.push(t);
                }
            }
        }
        freed
    }

    /// The NCCL stream a collective on `group` runs on (`None`: the default group's `nccl`), noting it for
    /// declaration ([`group_stream`]).
    fn stream_of(&mut self, group: &Option<String>) -> String {
        match group {
            Some(g) => {
                self.group_streams.insert(g.clone());
                group_stream(g)
            }
            None => NCCL_STREAM.to_string(),
        }
    }

    fn current(&self) -> String {
        self.current.last().cloned().unwrap_or_else(|| "sL".to_string())
    }
}

/// Appends the model ops of PyTorch call `op` (written at `path`, with loop variables `env`) to `out`. Returns the
/// number of ops appended; `None` (nothing done) when `op` is not a call of the dialect. `WithStream` is expanded
/// by the caller, which pushes its stream on `tcx.current`.
#[allow(clippy::too_many_arguments)]
pub fn lower<'a>(
    op: &'a SOp,
    path: &str,
    rank: u32,
    ranks: u32,
    env: &Option<Rc<Env<'a>>>,
    tcx: &mut TorchCx,
    issues: &mut Issues,
    out: &mut Vec<Item<'a>>,
) -> Option<usize> {
    works_of(op)?;
    let start = out.len();
    let p: Rc<str> = Rc::from(path);
    let push = |out: &mut Vec<Item<'a>>, leaf: Leaf<'a>| out.push(Item { leaf, path: p.clone(), env: env.clone() });
    let owned = |out: &mut Vec<Item<'a>>, op: SOp| push(out, Leaf::Owned(Rc::new(op)));
    let cur = tcx.current();
    let nccl = NCCL_STREAM.to_string();
    let comm = tcx.comm.clone();
    let site = tcx.decls.sites.get(path).map(|s| s.0);
    let scope = Scope { rank, ranks, env: env.as_deref() };
    // After a skipped op, the errors that depend on earlier calls go here, unreported (`TorchCx::after_skip`).
    let after_skip = tcx.after_skip;
    let mut unreported = Issues::default();
    let is_dist = !matches!(
        op,
        SOp::InitProcessGroup
            | SOp::CudaSynchronize
            | SOp::Compute { .. }
            | SOp::RecordEvent { .. }
            | SOp::WaitEvent { .. }
            | SOp::Empty { .. }
            | SOp::Del { .. }
        | SOp::FreeStorage { .. }
    );
    // ProcessGroupNCCL records every tensor of a collective or P2P op on the NCCL stream
    // (`c10::cuda::CUDACachingAllocator::recordStream(tensor.storage().data_ptr(), ncclStream)`), so that freeing
    // it early cannot hand its block to other work too soon (P4). With TORCH_NCCL_AVOID_RECORD_STREAMS
    // (`avoidRecordStreams_`) it records nothing and stashes the tensors in the work instead
    // (`work->stashed_for_allocator_safety_`: collective() stashes inputs and outputs, pointToPoint its tensor,
    // alltoall every tensor of both lists), so that `del t` drops only the Python reference: the block returns to
    // the pool when `work.wait()` clears the stash (`WorkNCCL::synchronizeStreams`, after the current stream waits
    // for the end event).
    let avoid = tcx.decls.avoid_record_streams;
    let stashed = std::cell::RefCell::new(Vec::<String>::new());
    let record = |out: &mut Vec<Item<'a>>, tensor: &BufArg, stream: &str| {
        let name = super::expr::interpolate(tensor.name(), &|v| Scope { rank, ranks, env: env.as_deref() }.lookup(v));
        if let Ok(n) = name {
            if tcx.names.pooled.contains(n.as_ref()) {
                if avoid {
                    stashed.borrow_mut().push(n.into_owned());
                } else {
                    owned(out, SOp::RecordStream { buf: tensor.name().to_string(), stream: stream.to_string() });
                }
            }
        }
    };
    if is_dist && !tcx.initialized && !after_skip {
        issues.push(
            Issue::new(path, "a torch.distributed call before dist.init_process_group")
                .help("call InitProcessGroup first, as PyTorch requires")
                .on_rank(rank),
        );
    }
    // ProcessGroupNCCL.cpp `syncStream`: `ncclEvent.record(getCurrentCUDAStream()); ncclEvent.block(ncclStream)`,
    // before every collective and point-to-point op (P1).
    let sync_stream = |out: &mut Vec<Item<'a>>, n: u32, nccl: &str| {
        owned(out, SOp::Record { event: pre_event(n), stream: cur.clone() });
        owned(out, SOp::Wait { event: pre_event(n), stream: nccl.to_string() });
    };
    // A collective's process group: its communicator (created first by a lazily initialised group's first
    // collective) and its name, or `None` when this rank does nothing ([`on_group`]).
    // The group tables are passed apart from `tcx`, which `record` borrows.
    let init_kind = tcx.decls.init;
    let version = tcx.decls.version;
    let enter_group = |out: &mut Vec<Item<'a>>,
                       groups: &BTreeMap<String, Vec<u32>>,
                       inited: &mut BTreeSet<String>,
                       issues: &mut Issues,
                       group: &Option<String>| {
        let OnGroup::Member { comm, group, init } = on_group(group, path, rank, ranks, env, &comm, groups, inited, init_kind, version, issues)
        else {
            return None;
        };
        if let Some(op) = init {
            owned(out, op);
        }
        Some((comm, group))
    };
    let p2p = |send: bool, tensor: &BufArg, peer: &Peer| -> SOp {
        if send {
            SOp::Send { to: peer.clone(), buf: tensor.clone(), stream: nccl.clone(), comm: comm.clone() }
        } else {
            SOp::Recv { from: peer.clone(), buf: tensor.clone(), stream: nccl.clone(), comm: comm.clone() }
        }
    };
    match op {
        // `init_process_group("nccl")`: the default group's communicator exists from the start in the model (its
        // NCCL connections are still set up lazily at first use, N7); the call only has to come first.
        SOp::InitProcessGroup => tcx.initialized = true,
        // `dist.destroy_process_group()`: ProcessGroupNCCL::shutdown of every group. Since PyTorch 2.5 it "will wait
        // for all NCCL kernels to finish before destroying communicators": `ncclComm->finalize()` on every
        // communicator of the group, `waitReady`, then destroy (before, in 2.3-2.4, it aborted them; "moved code of
        // `shutdown()` to `abort()` because it actually implemented an abort behavior", kwen2501, Aug 2024). The
        // communicators this rank holds, in one order on every rank: the default group's, the lazily created pair
        // communicators, the new groups' (N13: finalize is collective).
        SOp::DestroyProcessGroup => {
            let mut comms: Vec<String> = Vec::new();
            if tcx.world_created {
                comms.push(comm.clone().unwrap_or_else(|| WORLD.to_string()));
            }
            comms.extend(tcx.inited_pairs.iter().map(|(lo, hi)| pair_comm(*lo, *hi)));
            for (g, members) in &tcx.groups {
                let at_call = tcx.decls.init == STorchInit::Eager && tcx.decls.version != STorchVersion::V2_4;
                let holds = if at_call { members.contains(&rank) } else { tcx.inited_groups.contains(g) };
                if holds {
                    comms.push(group_comm(g));
                }
            }
            for c in &comms {
                owned(out, SOp::CommFinalize { comm: c.clone() });
            }
            for c in comms {
                owned(out, SOp::CommDestroy { comm: c });
            }
            tcx.initialized = false;
            tcx.world_created = !tcx.decls.lazy_world;
        }
        // `dist.send`/`dist.recv` are `pg.send([t], dst, tag).wait()` (torch/distributed/distributed_c10d.py), and
        // ProcessGroupNCCL::pointToPoint runs syncStream, the NCCL call on the NCCL stream, then records the work's
        // end event there; WorkNCCL::wait makes the current stream wait on it (P1). A lazily initialised group runs
        // it on the 2-rank communicator of the pair (key "lo:hi", `getKeySendRecv`) and its own NCCL stream,
        // created by the first call that needs it (ncclCommInitRank: N8); an eagerly initialised one on its own
        // communicator (PR 132900; P2).
        SOp::DistSend { tensor, dst: peer } | SOp::DistRecv { tensor, src: peer } | SOp::Isend { tensor, dst: peer, .. } | SOp::Irecv { tensor, src: peer, .. } => {
            let n = site?;
            let send = matches!(op, SOp::DistSend { .. } | SOp::Isend { .. });
            let pair = match tcx.decls.init {
                STorchInit::Lazy => peer_rank(peer, rank, ranks, env).map(|p| (rank.min(p), rank.max(p), p)),
                STorchInit::Eager => None,
            };
            let (stream, comm, peer) = match pair {
                Some((lo, hi, p)) => {
                    tcx.pairs.insert((lo, hi));
                    if tcx.inited_pairs.insert((lo, hi)) {
                        owned(out, SOp::CommInit { comm: pair_comm(lo, hi) });
                    }
                    (pair_stream(lo, hi), Some(pair_comm(lo, hi)), Peer::Rank { rank: ExprArg::int(p.to_string(), i64::from(p)) })
                }
                None => {
                    create_world(tcx, out, &p, env);
                    (nccl.clone(), comm.clone(), peer.clone())
                }
            };
            owned(out, SOp::Record { event: pre_event(n), stream: cur.clone() });
            owned(out, SOp::Wait { event: pre_event(n), stream: stream.clone() });
            owned(
                out,
                if send {
                    SOp::Send { to: peer, buf: tensor.clone(), stream: stream.clone(), comm }
                } else {
                    SOp::Recv { from: peer, buf: tensor.clone(), stream: stream.clone(), comm }
                },
            );
            record(out, tensor, &stream);
            let work = match op {
                SOp::Isend { work, .. } | SOp::Irecv { work, .. } => {
                    Some(name_work(work, field(path, "work"), &scope, rank, n, 1, &mut tcx.work_events, issues))
                }
                _ => None,
            };
            let end = work.as_ref().map_or_else(|| end_event(n, 0), |(_, ends)| ends[0].clone());
            owned(out, SOp::Record { event: end.clone(), stream });
            match work {
                Some((name, ends)) => {
                    tcx.works.insert(name.clone(), ends);
                    tcx.stash(Some(&name), stashed.take());
                }
                // The work's wait clears its stash at once: nothing stays held.
                None => owned(out, SOp::Wait { event: end, stream: cur.clone() }),
            }
        }
        // `batch_isend_irecv`: one NCCL group around the ops (P3). Before PR 82450 each op's work recorded its end
        // event on the NCCL stream inside the open group (enqueued before the group's kernels, N10); since then the
        // coalesced work's end event is recorded after ncclGroupEnd (ProcessGroupNCCL::endCoalescing).
        SOp::BatchIsendIrecv { ops, works } => {
            let n = site?;
            let (works, ends) = name_work(works, field(path, "works"), &scope, rank, n, ops.len(), &mut tcx.work_events, issues);
            create_world(tcx, out, &p, env);
            sync_stream(out, n, &nccl);
            push(out, Leaf::GroupStart);
            let inside = tcx.decls.version == STorchVersion::Before82450;
            for (j, o) in ops.iter().enumerate() {
                // At the P2POp's own position, so that messages about it point there.
                let at: Rc<str> = Rc::from(index(&field(path, 0), j).as_str());
                let leaf = Leaf::Owned(Rc::new(p2p(o.op == SP2PKind::Isend, &o.tensor, &o.peer)));
                out.push(Item { leaf, path: at.clone(), env: env.clone() });
                record(out, &o.tensor, &nccl);
                if inside {
                    let record = SOp::Record { event: ends[j].clone(), stream: nccl.clone() };
                    out.push(Item { leaf: Leaf::Owned(Rc::new(record)), path: at, env: env.clone() });
                }
            }
            push(out, Leaf::GroupEnd);
            if !inside {
                for e in &ends {
                    owned(out, SOp::Record { event: e.clone(), stream: nccl.clone() });
                }
            }
            tcx.works.insert(works.clone(), ends);
            tcx.stash(Some(&works), stashed.take());
        }
        // WorkNCCL::wait -> synchronizeStreams: the current stream waits on the work's end event; the host does not
        // block (P1).
        // With TORCH_NCCL_AVOID_RECORD_STREAMS it then clears the work's stash (`stashed_for_allocator_safety_->clear()`
        // in WorkNCCL::synchronizeStreams): a tensor deleted since the call is freed here, its block returning to its
        // allocation stream's pool (P4).
        SOp::WorkWait { work: written } => {
            let work = &match super::expr::interpolate(written, &|v| scope.lookup(v)) {
                Ok(w) => w.into_owned(),
                Err(m) => {
                    issues.push(Issue { path: field(path, 0), ..scope.issue(written, m) }.on_rank(rank));
                    return Some(0);
                }
            };
            match tcx.works.get(work) {
            Some(events) => {
                for e in events.clone() {
                    owned(out, SOp::Wait { event: e, stream: cur.clone() });
                }
                if let Some(id) = tcx.work_stash.remove(work) {
                    for t in tcx.release(id) {
                        owned(out, SOp::Free { buf: t });
                    }
                }
            }
            None => {
                let known: Vec<&str> = tcx.works.keys().map(String::as_str).collect();
                let help = if let Some(s) = super::diagnostic::did_you_mean(work, known.iter().copied()) {
                    format!("did you mean `{s}`?")
                } else if known.is_empty() {
                    "no work exists yet here: Isend, Irecv, BatchIsendIrecv and `async_op:` collectives name theirs".to_string()
                } else {
                    format!("works here: {}", known.join(", "))
                };
                if !after_skip {
                    issues.push(Issue::new(field(path, 0), format!("unknown work `{work}`")).help(help).on_rank(rank));
                }
            }
            }
        }
        // `dist.all_gather(tensor_list, tensor)` and `dist.reduce_scatter(output, input_list)`: ProcessGroupNCCL::allgather
        // and ::reduce_scatter (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp). When the list's tensors have one
        // size (`check_same_size`), the list is flattened into a temporary (`newLikeFlat`) and one NCCL collective
        // runs on it inside `collective()`: all_gather gathers into the temporary and its `post` hook copies each part
        // out to the list on the NCCL stream; reduce_scatter's `pre` hook copies the list into the temporary on the
        // NCCL stream after syncStream, then reduce-scatters from it. The temporary is a device buffer of the call
        // site that only the NCCL stream touches: its caching-allocator block (allocated on the current stream,
        // recorded on the NCCL stream, freed with the work) is not modelled, as each Alloc/Free pair multiplied the
        // states (two such calls in a row: from 1,500 states to past 800,000). Otherwise the call is coalesced
        // (startCoalescing .. endCoalescing: one NCCL group, the end event after it) into one
        // `_broadcast_oop(output[i], i == rank ? input : output[i], root i)` per rank i, resp. one
        // `_reduce_oop(i == rank ? output : input[i], input[i], root i)`.
        SOp::DistAllGatherList { async_op, group, .. } | SOp::DistReduceScatterList { async_op, group, .. } => {
            let n = site?;
            let Some((comm, group)) = enter_group(out, &tcx.groups, &mut tcx.inited_groups, if after_skip { &mut unreported } else { issues }, group) else { return Some(0) };
            if group.is_none() {
                create_world(tcx, out, &p, env);
            }
            let nccl = tcx.stream_of(&group);
            let members = match &group {
                Some(g) => tcx.groups.get(g).cloned().unwrap_or_default(),
                None => tcx.names.default_members.clone(),
            };
            let gather = matches!(op, SOp::DistAllGatherList { .. });
            let (list, one, list_name, one_name, call) = match op {
                SOp::DistAllGatherList { tensor_list, tensor, .. } => (tensor_list, tensor, "tensor_list", "tensor", "dist.all_gather"),
                SOp::DistReduceScatterList { output, input_list, .. } => (input_list, output, "input_list", "output", "dist.reduce_scatter"),
                _ => return None,
            };
            // After an error the call's work still exists, so that its `WorkWait` is not reported as well.
            let work = async_op.as_ref().map(|w| name_work(w, field(path, "async_op"), &scope, rank, n, 1, &mut tcx.work_events, issues));
            let end = work.as_ref().map_or_else(|| end_event(n, 0), |(_, ends)| ends[0].clone());
            if let Some((w, ends)) = &work {
                tcx.works.insert(w.clone(), ends.clone());
            }
            let Some(me) = members.iter().position(|m| *m == rank) else {
                issues.push(Issue::new(path, "this rank is not a member of the process group's communicator").on_rank(rank));
                return Some(0);
            };
            let m = members.len();
            if list.len() != m {
                issues.push(
                    Issue::new(field(path, list_name), format!("`{list_name}` has {} tensors; the group has {m} ranks", list.len()))
                        .help(format!("{call} takes one tensor per rank of the group, in group order"))
                        .on_rank(rank),
                );
                return Some(0);
            }
            let scope = Scope { rank, ranks, env: env.as_deref() };
            let len = |b: &BufArg, at: String, issues: &mut Issues| match extent(b, &scope, &tcx.names.sizes) {
                Some(e) => Some(e.2),
                None => {
                    let name = super::expr::interpolate(b.name(), &|v| scope.lookup(v)).map(|s| s.into_owned()).unwrap_or_else(|_| b.name().to_string());
                    // A declared buffer whose size did not parse: that error is reported where it is declared.
                    if tcx.names.other_names.get(&name) == Some(&"buffer") {
                        return None;
                    }
                    let known = tcx.names.sizes.keys().map(String::as_str);
                    let help = if name.contains('@') {
                        Some("a PyTorch call names this rank's own tensors: `x`, not `x@1`".to_string())
                    } else if let Some(kind) = tcx.names.other_names.get(&name).filter(|k| **k != "buffer") {
                        Some(format!("`{name}` is a {kind}, not a tensor"))
                    } else {
                        super::diagnostic::did_you_mean(&name, known).map(|s| format!("did you mean `{s}`?"))
                    };
                    let mut issue = Issue::new(at, format!("unknown tensor `{name}`")).on_rank(rank);
                    if let Some(h) = help {
                        issue = issue.help(h);
                    }
                    issues.push(issue);
                    None
                }
            };
            let mut lens = Vec::with_capacity(m);
            for (j, t) in list.iter().enumerate() {
                lens.push(len(t, index(&field(path, list_name), j), issues));
            }
            let own = len(one, field(path, one_name), issues);
            let (Some(lens), Some(own)) = (lens.into_iter().collect::<Option<Vec<u64>>>(), own) else { return Some(0) };
            if own != lens[me] {
                issues.push(
                    Issue::new(field(path, one_name), format!("`{one_name}` is {own} bytes, but this rank's own part `{list_name}[{me}]` is {} bytes", lens[me]))
                        .help(format!("{call}: this rank's own entry of `{list_name}` has the size of `{one_name}` (ProcessGroupNCCL: \"Tensor input and output ... must have the same number of elements\"); the other entries may differ"))
                        .on_rank(rank),
                );
                return Some(0);
            }
            // NCCL collectives take CUDA tensors only (PyTorch raises for a host tensor).
            for (at, t) in list.iter().enumerate().map(|(j, t)| (index(&field(path, list_name), j), t)).chain([(field(path, one_name), one)]) {
                let name = super::expr::interpolate(t.name(), &|v| scope.lookup(v)).map(|s| s.into_owned()).unwrap_or_default();
                if tcx.names.host.contains(&name) {
                    issues.push(
                        Issue::new(at, format!("`{name}` is host memory; {call} takes CUDA tensors"))
                            .help("NCCL collectives read and write device memory: use a device Buffer or Pooled tensor")
                            .on_rank(rank),
                    );
                    return Some(0);
                }
            }
            // Empty tensors: ProcessGroupNCCL still calls NCCL, with a count of 0.
            let same = own > 0 && lens.iter().all(|l| *l == own);
            let flat = flat_buffer(n);
            let root = |i: usize| Root::Rank { rank: ExprArg::int(members[i].to_string(), i64::from(members[i])) };
            let part = |j: usize| BufArg::Slice(flat.clone(), Size::Bytes(j as u64 * own), Size::Bytes(own));
            let whole = BufArg::Slice(flat.clone(), Size::Bytes(0), Size::Bytes(m as u64 * own));
            if same {
                let bytes = tcx.flats.entry(flat.clone()).or_insert(0);
                *bytes = (*bytes).max(m as u64 * own);
            }
            sync_stream(out, n, &nccl);
            let all_empty = own == 0 && lens.iter().all(|l| *l == 0);
            match (gather, same) {
                _ if all_empty => {
                    let coll = if gather {
                        SOp::AllGather { send: one.clone(), recv: one.clone(), stream: nccl.clone(), comm }
                    } else {
                        SOp::ReduceScatter { send: one.clone(), recv: one.clone(), stream: nccl.clone(), comm }
                    };
                    owned(out, coll);
                }
                (true, true) => {
                    record(out, one, &nccl);
                    owned(out, SOp::AllGather { send: one.clone(), recv: whole, stream: nccl.clone(), comm });
                    for (j, t) in list.iter().enumerate() {
                        // The post hook records each output (`if (!avoidRecordStreams_)`); with the variable set
                        // the outputs are the user's to keep alive: nothing stashes them.
                        if !avoid {
                            record(out, t, &nccl);
                        }
                        owned(out, SOp::Memcpy { dst: t.clone(), src: part(j), stream: Some(nccl.clone()) });
                    }
                }
                (false, true) => {
                    for (j, t) in list.iter().enumerate() {
                        record(out, t, &nccl);
                        owned(out, SOp::Memcpy { dst: part(j), src: t.clone(), stream: Some(nccl.clone()) });
                    }
                    owned(out, SOp::ReduceScatter { send: whole, recv: one.clone(), stream: nccl.clone(), comm });
                    record(out, one, &nccl);
                }
                (_, false) => {
                    push(out, Leaf::GroupStart);
                    for (i, t) in list.iter().enumerate() {
                        let at: Rc<str> = Rc::from(index(&field(path, list_name), i).as_str());
                        // Other ranks' parts in place; this rank's own: broadcast from `tensor` into its list entry, resp.
                        // reduce its list entry into `output`.
                        let (send, recv, buf) = match (i == me, gather) {
                            (false, _) => (None, None, Some(t.clone())),
                            (true, true) => (Some(one.clone()), Some(t.clone()), None),
                            (true, false) => (Some(t.clone()), Some(one.clone()), None),
                        };
                        let stream = nccl.clone();
                        let coll = if gather {
                            SOp::Broadcast { root: root(i), buf, send, recv, stream, comm: comm.clone() }
                        } else {
                            SOp::Reduce { root: root(i), buf, send, recv, stream, comm: comm.clone() }
                        };
                        out.push(Item { leaf: Leaf::Owned(Rc::new(coll)), path: at, env: env.clone() });
                    }
                    push(out, Leaf::GroupEnd);
                    record(out, one, &nccl);
                    for t in list {
                        record(out, t, &nccl);
                    }
                }
            }
            owned(out, SOp::Record { event: end.clone(), stream: nccl.clone() });
            match work {
                Some((w, _)) => {
                    tcx.stash(Some(&w), stashed.take());
                }
                None => owned(out, SOp::Wait { event: end, stream: cur.clone() }),
            }
        }
        // `dist.all_reduce` / `broadcast` / `all_gather_into_tensor` / `reduce_scatter_tensor`:
        // ProcessGroupNCCL::collective runs syncStream, the collective on the NCCL stream and records the end event;
        // without `async_op` the Python wrapper calls `work.wait()` (P1).
        SOp::DistAllReduce { async_op, group, .. }
        | SOp::DistBroadcast { async_op, group, .. }
        | SOp::DistAllGather { async_op, group, .. }
        | SOp::DistReduceScatter { async_op, group, .. }
        | SOp::DistAllToAllSingle { async_op, group, .. }
        | SOp::DistAllToAll { async_op, group, .. }
        | SOp::DistReduce { async_op, group, .. }
        | SOp::DistGather { async_op, group, .. }
        | SOp::DistScatter { async_op, group, .. } => {
            let n = site?;
            let Some((comm, group)) = enter_group(out, &tcx.groups, &mut tcx.inited_groups, if after_skip { &mut unreported } else { issues }, group) else { return Some(0) };
            if group.is_none() {
                create_world(tcx, out, &p, env);
            }
            let nccl = tcx.stream_of(&group);
            sync_stream(out, n, &nccl);
            // `all_to_all` (lists) and `all_to_all_single` with split sizes: not one NCCL collective but one group
            // of ncclSend/ncclRecv per peer (below).
            let split = match op {
                SOp::DistAllToAllSingle { output_split_sizes: None, input_split_sizes: None, .. } => None,
                SOp::DistAllToAllSingle { .. } | SOp::DistAllToAll { .. } => {
                    let members = match &group {
                        Some(g) => tcx.groups.get(g).cloned().unwrap_or_default(),
                        None => tcx.names.default_members.clone(),
                    };
                    let scope = Scope { rank, ranks, env: env.as_deref() };
                    all_to_all_parts(op, path, rank, &members, &scope, &tcx.names.sizes, issues)
                }
                _ => None,
            };
            // `dist.all_to_all_single` with `input_split_sizes`/`output_split_sizes`: ProcessGroupNCCL::alltoall_base
            // checks them (`c10d::checkSplitSizes`: one per rank, summing to the tensor; none means equal parts),
            // turns them into lengths and offsets (`computeLengthsAndOffsets`) and calls
            // torch::cuda::nccl::all2all_single_unequal_split: `ncclGroupStart(); for r in ranks { if (sendcounts[r]
            // != 0) ncclSend(sendbuff + senddispls[r], sendcounts[r], r); if (recvcounts[r] != 0) ncclRecv(recvbuff +
            // recvdispls[r], recvcounts[r], r); } ncclGroupEnd()` (torch/csrc/cuda/nccl.cpp).
            // `dist.all_to_all(outputs, inputs)`: ProcessGroupNCCL::alltoall calls torch::cuda::nccl::all2all, the
            // same loop over the lists' tensors (`if (input.numel() != 0) ncclSend(input, r)`, likewise ncclRecv).
            // The model has no send to oneself: the caller's own part (NCCL copies it inside the group's kernel) is
            // a device copy on the NCCL stream after the group, between the same syncStream wait and end event.
            if let Some(parts) = split {
                if !parts.remote.is_empty() {
                    push(out, Leaf::GroupStart);
                    for (peer, op, at) in parts.remote {
                        let peer = Peer::Rank { rank: ExprArg::int(peer.to_string(), i64::from(peer)) };
                        let op = match op {
                            Dir::Send(buf) => SOp::Send { to: peer, buf, stream: nccl.clone(), comm: comm.clone() },
                            Dir::Recv(buf) => SOp::Recv { from: peer, buf, stream: nccl.clone(), comm: comm.clone() },
                        };
                        out.push(Item { leaf: Leaf::Owned(Rc::new(op)), path: Rc::from(at.as_str()), env: env.clone() });
                    }
                    push(out, Leaf::GroupEnd);
                }
                if let Some((dst, src, at)) = parts.own {
                    let copy = SOp::Memcpy { dst, src, stream: Some(nccl.clone()) };
                    out.push(Item { leaf: Leaf::Owned(Rc::new(copy)), path: Rc::from(at.as_str()), env: env.clone() });
                }
            } else {
            let stream = nccl.clone();
            let coll = match op {
                SOp::DistBroadcast { tensor, src: Root::Rank { rank }, .. } => SOp::Broadcast {
                    root: Root::Rank { rank: rank.clone() },
                    buf: Some(tensor.clone()),
                    send: None,
                    recv: None,
                    stream,
                    comm,
                },
                SOp::DistAllGather { output, input, .. } => {
                    SOp::AllGather { send: input.clone(), recv: output.clone(), stream, comm }
                }
                SOp::DistReduceScatter { output, input, .. } => {
                    SOp::ReduceScatter { send: input.clone(), recv: output.clone(), stream, comm }
                }
                SOp::DistAllReduce { tensor, .. } => SOp::AllReduce { buf: Some(tensor.clone()), send: None, recv: None, stream, comm },
                // `all_to_all_single` with equal splits: ProcessGroupNCCL::alltoall_base calls
                // torch::cuda::nccl::all2all_single_equal_split, which is ncclAllToAll where NCCL supports it and
                // otherwise one group of ncclSend/ncclRecv to and from every rank (torch/csrc/cuda/nccl.cpp): the
                // same ordering (C1: AllToAll is grouped point-to-point under the hood).
                SOp::DistAllToAllSingle { output, input, .. } => {
                    SOp::AllToAll { send: input.clone(), recv: output.clone(), stream, comm }
                }
                // `dist.reduce`: ProcessGroupNCCL::reduce calls ncclReduce.
                SOp::DistReduce { tensor, dst: Root::Rank { rank }, .. } => SOp::Reduce {
                    root: Root::Rank { rank: rank.clone() },
                    buf: Some(tensor.clone()),
                    send: None,
                    recv: None,
                    stream,
                    comm,
                },
                // `dist.gather` / `dist.scatter`: torch::cuda::nccl::gather / scatter (torch/csrc/cuda/nccl.cpp) are
                // one group of ncclRecv from every rank on the root (its own part a copy) and one ncclSend on the
                // others, or the reverse: the ordering of NCCL's Gather/Scatter (C1).
                SOp::DistGather { tensor, gather_list, dst: Root::Rank { rank }, .. } => SOp::Gather {
                    root: Root::Rank { rank: rank.clone() },
                    send: tensor.clone(),
                    recv: gather_list.clone(),
                    stream,
                    comm,
                },
                SOp::DistScatter { tensor, scatter_list, src: Root::Rank { rank }, .. } => SOp::Scatter {
                    root: Root::Rank { rank: rank.clone() },
                    send: scatter_list.clone(),
                    recv: tensor.clone(),
                    stream,
                    comm,
                },
                _ => return None,
            };
            owned(out, coll);
            }
            match op {
                SOp::DistAllGather { output, input, .. }
                | SOp::DistReduceScatter { output, input, .. }
                | SOp::DistAllToAllSingle { output, input, .. }
                | SOp::DistGather { tensor: input, gather_list: output, .. }
                | SOp::DistScatter { tensor: output, scatter_list: input, .. } => {
                    record(out, input, &nccl);
                    record(out, output, &nccl);
                }
                SOp::DistAllReduce { tensor, .. } | SOp::DistBroadcast { tensor, .. } | SOp::DistReduce { tensor, .. } => {
                    record(out, tensor, &nccl)
                }
                SOp::DistAllToAll { outputs, inputs, .. } => {
                    for t in inputs.iter().chain(outputs) {
                        record(out, t, &nccl);
                    }
                }
                _ => {}
            }
            let work = async_op.as_ref().map(|w| name_work(w, field(path, "async_op"), &scope, rank, n, 1, &mut tcx.work_events, issues));
            match work {
                Some((w, ends)) => {
                    owned(out, SOp::Record { event: ends[0].clone(), stream: nccl.clone() });
                    tcx.works.insert(w.clone(), ends);
                    tcx.stash(Some(&w), stashed.take());
                }
                None => {
                    owned(out, SOp::Record { event: end_event(n, 0), stream: nccl.clone() });
                    owned(out, SOp::Wait { event: end_event(n, 0), stream: cur.clone() });
                }
            }
        }
        // `dist.barrier()`: ProcessGroupNCCL::barrier all-reduces a one-element tensor, and its work's wait, besides
        // the stream wait, synchronizes the current stream with the host (`if (barrierTensor_.defined()) ...
        // cudaStreamSynchronize(currentStream)` in WorkNCCL::synchronize).
        SOp::DistBarrier => {
            let n = site?;
            create_world(tcx, out, &p, env);
            sync_stream(out, n, &nccl);
            let buf = Some(BufArg::Whole(BARRIER_TENSOR.to_string()));
            owned(out, SOp::AllReduce { buf, send: None, recv: None, stream: nccl.clone(), comm: comm.clone() });
            owned(out, SOp::Record { event: end_event(n, 0), stream: nccl.clone() });
            owned(out, SOp::Wait { event: end_event(n, 0), stream: cur.clone() });
            owned(out, SOp::StreamSync { stream: cur });
        }
        // `dist.new_group(ranks)`: every rank of the default group calls it. With an eagerly initialised default
        // group (`device_id` given) the group's communicator is split from the default group's at once: members
        // pass one color, every other rank NCCL_SPLIT_NOCOLOR, so every rank makes the split (N8; pytorch/pytorch
        // PR 112889 "Opportunistically use ncclCommSplit when creating new NCCL groups", PR 114916 (a bound
        // device id lets non-members do the NOCOLOR split), PR 129284 "Make new_group eager when used with
        // comm_split"; issue 130407: "each rank needs to call new_group and ncclCommSplit"). Lazily initialised,
        // nothing happens now: each member creates the communicator with ncclCommInitRank at its first collective
        // on the group (PR 112889: "Currently ncclCommInitRankConfig is always used").
        SOp::NewGroup { name, ranks: members } => {
            let mut members = members.clone();
            members.sort_unstable();
            members.dedup();
            if let Some(bad) = members.iter().find(|m| **m >= ranks) {
                issues.push(
                    Issue::new(field(path, 1), format!("rank {bad} does not exist (the program has {ranks} ranks)"))
                        .help("dist.new_group takes global ranks of the default group")
                        .on_rank(rank),
                );
                return Some(0);
            }
            if members.is_empty() {
                issues.push(Issue::new(field(path, 1), "a process group needs at least one rank").on_rank(rank));
                return Some(0);
            }
            if tcx.groups.insert(name.clone(), members.clone()).is_some() {
                issues.push(Issue::new(field(path, 0), format!("process group `{name}` is created twice")).on_rank(rank));
            }
            let member = members.contains(&rank);
            // PyTorch 2.4 (`_new_process_group_helper`): a non-member of a group split from an eagerly initialised
            // default group "will need to call `ncclCommSplit` on *all* ranks in this new group's parent group, even
            // those not in the new group" (`split_from.perform_nocolor_split(..)`, then NON_GROUP_MEMBER); a member
            // does nothing here: `new_group` passes no `device_id` (PR 129284 came after 2.4), so the group's
            // communicator is split at the member's first collective on it (`on_group`).
            if tcx.decls.init == STorchInit::Eager && tcx.decls.version == STorchVersion::V2_4 {
                if !member {
                    owned(out, SOp::CommSplit { comm: comm.clone().unwrap_or_else(|| WORLD.to_string()), new: None, color: None, key: Some(ExprArg::int(rank.to_string(), i64::from(rank))) });
                }
            } else if tcx.decls.init == STorchInit::Eager {
                owned(
                    out,
                    SOp::CommSplit {
                        comm: comm.clone().unwrap_or_else(|| WORLD.to_string()),
                        new: member.then(|| group_comm(name)),
                        color: member.then(|| ExprArg::int(split_color(&members).to_string(), split_color(&members))),
                        key: Some(ExprArg::int(rank.to_string(), i64::from(rank))),
                    },
                );
            } else {
                tcx.lazy_groups.insert(name.clone(), members);
            }
        }
        // `torch.cuda.synchronize()` is cudaDeviceSynchronize (P5).
        SOp::CudaSynchronize => owned(out, SOp::DeviceSync),
        // The caching allocator (P4): `torch.empty` allocates on the current stream, `del` frees.
        // With TORCH_NCCL_AVOID_RECORD_STREAMS, `del t` while a work's stash holds `t` only drops the Python
        // reference: the block is freed when the last such work's `wait()` clears its stash (above). A stash whose
        // work is never waited for is released by the watchdog (`workCleanupLoop`) once the op has completed, after
        // which reusing the block is ordered after the op anyway; the model keeps such a block allocated.
        SOp::Empty { tensor } => {
            let name = super::expr::interpolate(tensor, &|v| Scope { rank, ranks, env: env.as_deref() }.lookup(v));
            if let Some(n) = name.ok().filter(|n| tcx.deferred.contains(n.as_ref()) && !after_skip) {
                issues.push(
                    Issue::new(field(path, 0), format!("`{n}` is allocated again while a work still holds its previous block"))
                        .help("with TORCH_NCCL_AVOID_RECORD_STREAMS the deleted tensor stays in the work's stash until `work.wait()`; wait first, or give the new tensor another name (another `Pooled` buffer)")
                        .on_rank(rank),
                );
                return Some(0);
            }
            // `t.untyped_storage().resize_(n)` after `resize_(0)` allocates the same way (on the current stream).
            if let Ok(n) = super::expr::interpolate(tensor, &|v| scope.lookup(v)) {
                tcx.storage_freed.remove(n.as_ref());
            }
            owned(out, SOp::Alloc { buf: tensor.clone(), stream: cur })
        }
        SOp::Del { tensor } => {
            let name = super::expr::interpolate(tensor, &|v| Scope { rank, ranks, env: env.as_deref() }.lookup(v));
            match name.ok() {
                // Its storage was freed already: the tensor object going away frees nothing, now or at a stash's
                // release.
                Some(n) if tcx.storage_freed.remove(n.as_ref()) => {}
                Some(n) if tcx.holders.contains_key(n.as_ref()) => {
                    tcx.deferred.insert(n.into_owned());
                }
                _ => owned(out, SOp::Free { buf: tensor.clone() }),
            }
        }
        // `t.untyped_storage().resize_(0)`, as FSDP frees a parameter's unsharded storage (`_free_storage` in
        // torch/distributed/utils.py, called from torch/distributed/fsdp/_flat_param.py) while the all-gather's work
        // may still hold the tensor: `resize_bytes_cuda` (aten/src/ATen/native/cuda/Resize.cpp) replaces the storage's DataPtr with
        // a null one (`storage->set_data_ptr_noswap(at::DataPtr(nullptr, device))`), and the old DataPtr's deleter
        // hands the block back to the caching allocator at once, however many tensors (a work's
        // `stashed_for_allocator_safety_` included) still reference the StorageImpl. So the free is here, whatever
        // the setting (P4): with record_stream the block waits for the NCCL stream's work; with
        // TORCH_NCCL_AVOID_RECORD_STREAMS the stash protects nothing, and the block may be handed out while the
        // collective still reads or writes it. A stash holding the tensor later releases nothing.
        SOp::FreeStorage { tensor } => {
            let name = super::expr::interpolate(tensor, &|v| scope.lookup(v)).map(|n| n.into_owned());
            if let Ok(n) = &name {
                if tcx.deferred.contains(n) && !after_skip {
                    issues.push(
                        Issue::new(field(path, 0), format!("`{n}` was deleted (`del {n}`); its storage is no longer reachable"))
                            .help("free the storage before `del`, or leave it to the stash (freed at `work.wait()`)")
                            .on_rank(rank),
                    );
                    return Some(0);
                }
                // Already empty: `resize_(0)` frees nothing (`_free_storage` checks `_size() == 0` first).
                if !tcx.storage_freed.insert(n.clone()) {
                    return Some(0);
                }
            }
            owned(out, SOp::Free { buf: tensor.clone() })
        }
        // A tensor operation runs on the current stream (torch.cuda.current_stream()).
        SOp::Compute { name, reads, writes, duration } => owned(
            out,
            SOp::Kernel { name: name.clone(), stream: cur.clone(), reads: reads.clone(), writes: writes.clone(), duration: duration.clone() },
        ),
        // `torch.cuda.Event.record(stream=None)` / `.wait(stream=None)` use the current stream (S3).
        SOp::RecordEvent { event } => owned(out, SOp::Record { event: event.clone(), stream: cur }),
        SOp::WaitEvent { event } => owned(out, SOp::Wait { event: event.clone(), stream: cur }),
        _ => return None,
    }
    Some(out.len() - start)
}

/// Creates the default group's communicator before this rank's first call that uses it, when it is created lazily
/// (`TorchDecls::lazy_world`; ProcessGroupNCCL::getNCCLComm, N8).
fn create_world<'a>(tcx: &mut TorchCx, out: &mut Vec<Item<'a>>, path: &Rc<str>, env: &Option<Rc<Env<'a>>>) {
    if !tcx.world_created {
        tcx.world_created = true;
        let op = SOp::CommInit { comm: WORLD.to_string() };
        out.push(Item { leaf: Leaf::Owned(Rc::new(op)), path: path.clone(), env: env.clone() });
    }
}

/// Where a collective with `group` (as written) runs for `rank`.
enum OnGroup {
    /// On `comm` (`None`: the program's only communicator); `group` is the group's name, interpolated; `init` the
    /// communicator a lazily initialised group creates first (ProcessGroupNCCL::getNCCLComm: ncclCommInitRank, N8).
    Member { comm: Option<String>, group: Option<String>, init: Option<SOp> },
    /// `rank` is not in the group, or the group is unknown (reported): nothing happens.
    Outside,
}

/// A collective on a group (`group=g`) runs on the group's communicator; a rank outside the group does nothing (the
/// Python wrapper returns at once for a non-member: `_rank_not_in_group`), and the group's ops share the rank's NCCL
/// stream in the model. A lazily initialised group creates its communicator at the member's first collective on it
/// (ProcessGroupNCCL::getNCCLComm: ncclCommInitRank, N8). `default` is the default group's communicator.
#[allow(clippy::too_many_arguments)]
fn on_group(
    group: &Option<String>,
    path: &str,
    rank: u32,
    ranks: u32,
    env: &Option<Rc<Env>>,
    default: &Option<String>,
    groups: &BTreeMap<String, Vec<u32>>,
    inited: &mut BTreeSet<String>,
    init: STorchInit,
    version: STorchVersion,
    issues: &mut Issues,
) -> OnGroup {
    let group = group.as_ref().map(|g| {
        super::expr::interpolate(g, &|v| Scope { rank, ranks, env: env.as_deref() }.lookup(v))
            .map(|s| s.into_owned())
            .unwrap_or_else(|_| g.clone())
    });
    let Some(g) = &group else { return OnGroup::Member { comm: default.clone(), group, init: None } };
    match groups.get(g) {
        None => {
            let known: Vec<&str> = groups.keys().map(String::as_str).collect();
            let help = match super::diagnostic::did_you_mean(g, known.iter().copied()) {
                Some(s) => format!("did you mean `{s}`?"),
                None if known.is_empty() => "create it first with NewGroup(\"name\", ranks: [..]) (dist.new_group)".to_string(),
                None => format!("groups here: {}", known.join(", ")),
            };
            issues.push(Issue::new(field(path, "group"), format!("unknown process group `{g}`")).help(help).on_rank(rank));
            OnGroup::Outside
        }
        Some(members) if !members.contains(&rank) => OnGroup::Outside,
        Some(_) => {
            // PyTorch 2.4 with an eagerly initialised default group: the member splits the group's communicator from
            // the default group's at its first collective on the group (`getNCCLComm`: `NCCLComm::split(parent,
            // options_->split_color, ..)`, `split_from` set by `_new_process_group_helper` since the default group
            // has a bound device id); the non-members split at `new_group` (below).
            let split = init == STorchInit::Eager && version == STorchVersion::V2_4;
            let init = match (init, split) {
                (STorchInit::Lazy, _) | (_, true) if inited.insert(g.clone()) => Some(if split {
                    let color = split_color(&groups[g]);
                    SOp::CommSplit {
                        comm: default.clone().unwrap_or_else(|| WORLD.to_string()),
                        new: Some(group_comm(g)),
                        color: Some(ExprArg::int(color.to_string(), color)),
                        key: Some(ExprArg::int(rank.to_string(), i64::from(rank))),
                    }
                } else {
                    SOp::CommInit { comm: group_comm(g) }
                }),
                _ => None,
            };
            OnGroup::Member { comm: Some(group_comm(g)), group, init }
        }
    }
}

/// The global rank `peer` names for `rank` (of `ranks`, in the default group where member position = rank), when
/// it evaluates to an existing other rank; `None` leaves the op on the group's communicator, where resolution
/// reports what is wrong with the peer.
fn peer_rank(peer: &Peer, rank: u32, ranks: u32, env: &Option<Rc<Env>>) -> Option<u32> {
    let scope = Scope { rank, ranks, env: env.as_deref() };
    let simple = match peer {
        Peer::Next => SimplePeer::Next,
        Peer::Prev => SimplePeer::Prev,
        Peer::Rank { rank } => SimplePeer::Rank { rank: rank.clone() },
        Peer::Parity { even, odd } => if rank.is_multiple_of(2) { even.clone() } else { odd.clone() },
    };
    let p = match simple {
        SimplePeer::Next => (rank + 1) % ranks,
        SimplePeer::Prev => (rank + ranks - 1) % ranks,
        SimplePeer::Rank { rank: e } => match scope.eval(&e) {
            Ok(Value::Int(v)) => u32::try_from(v).ok()?,
            _ => return None,
        },
    };
    (p < ranks && p != rank).then_some(p)
}

/// One part of a lowered all-to-all: the send to or the recv from a peer.
enum Dir {
    Send(BufArg),
    Recv(BufArg),
}

/// An all-to-all as point-to-point: (global peer, send or recv, the path it is written at) in NCCL call order, and
/// the caller's own part as (destination, source, path).
struct Parts {
    remote: Vec<(u32, Dir, String)>,
    own: Option<(BufArg, BufArg, String)>,
}

/// A size as written, filled in for `scope`; `None` when it does not parse (instantiation reports why).
fn size_value(s: &Size, scope: &Scope) -> Option<u64> {
    match s {
        Size::Bytes(b) => Some(*b),
        Size::Text(t) => super::units::parse_size(&super::expr::interpolate(t, &|v| scope.lookup(v)).ok()?).ok(),
        Size::Invalid(_) => None,
    }
}

/// The buffer (name as written), offset and length in bytes that a tensor argument names, when known.
fn extent(arg: &BufArg, scope: &Scope, sizes: &BTreeMap<String, u64>) -> Option<(String, u64, u64)> {
    match arg {
        BufArg::Whole(n) => {
            let name = super::expr::interpolate(n, &|v| scope.lookup(v)).ok()?;
            sizes.get(name.as_ref()).map(|b| (n.clone(), 0, *b))
        }
        BufArg::Slice(n, o, l) => Some((n.clone(), size_value(o, scope)?, size_value(l, scope)?)),
    }
}

/// The point-to-point parts of `dist.all_to_all` or of `dist.all_to_all_single` with split sizes (written at
/// `path`) on `rank`, a member of the group `members` (global ranks in group order). Split sizes are checked as
/// `c10d::checkSplitSizes` does and reported at their place; `None` leaves an `all_to_all_single` whose tensors'
/// sizes are unknown to the plain `AllToAll`, so that resolution reports what is wrong with them.
fn all_to_all_parts(
    op: &SOp,
    path: &str,
    rank: u32,
    members: &[u32],
    scope: &Scope,
    sizes: &BTreeMap<String, u64>,
    issues: &mut Issues,
) -> Option<Parts> {
    let mut parts = Parts { remote: Vec::new(), own: None };
    let Some(me) = members.iter().position(|m| *m == rank) else {
        issues.push(Issue::new(path, "this rank is not a member of the process group's communicator").on_rank(rank));
        return Some(parts);
    };
    let n = members.len();
    match op {
        SOp::DistAllToAll { outputs, inputs, .. } => {
            let mut ok = true;
            for (list, name) in [(inputs, "inputs"), (outputs, "outputs")] {
                if list.len() != n {
                    issues.push(
                        Issue::new(field(path, name), format!("`{name}` has {} tensors; the group has {n} ranks", list.len()))
                            .help("dist.all_to_all takes one tensor per rank of the group in each list (zero-sized ones included)")
                            .on_rank(rank),
                    );
                    ok = false;
                }
            }
            if !ok {
                return Some(parts);
            }
            let len = |b: &BufArg| extent(b, scope, sizes).map(|e| e.2);
            for (r, &peer) in members.iter().enumerate() {
                let (i, o) = (&inputs[r], &outputs[r]);
                let (ip, opath) = (index(&field(path, "inputs"), r), index(&field(path, "outputs"), r));
                if r == me {
                    match (len(i), len(o)) {
                        (Some(a), Some(b)) if a != b => issues.push(
                            Issue::new(opath, format!("this rank's own part differs in size: inputs[{r}] is {a} bytes, outputs[{r}] {b} bytes"))
                                .help("rank r's inputs[j] is rank j's outputs[r]: here both are this rank's own part")
                                .on_rank(rank),
                        ),
                        (Some(0), Some(0)) => {}
                        _ => parts.own = Some((o.clone(), i.clone(), opath)),
                    }
                    continue;
                }
                if len(i) != Some(0) {
                    parts.remote.push((peer, Dir::Send(i.clone()), ip));
                }
                if len(o) != Some(0) {
                    parts.remote.push((peer, Dir::Recv(o.clone()), opath));
                }
            }
        }
        SOp::DistAllToAllSingle { output, input, output_split_sizes, input_split_sizes, .. } => {
            let mut chunks = |arg: &BufArg, splits: &Option<Vec<Size>>, arg_name: &str, split_name: &str| {
                let (buf, off, len) = extent(arg, scope, sizes)?;
                let at = |j: usize| match splits {
                    Some(_) => index(&field(path, split_name), j),
                    None => field(path, arg_name),
                };
                let lens: Vec<u64> = match splits {
                    None => {
                        if len % n as u64 != 0 {
                            issues.push(
                                Issue::new(field(path, arg_name), format!("`{arg_name}` ({len} bytes) does not split into {n} equal parts"))
                                    .help(format!("without `{split_name}` each rank of the group gets an equal part (c10d::checkSplitSizes); give the sizes"))
                                    .on_rank(rank),
                            );
                            return Some(None);
                        }
                        vec![len / n as u64; n]
                    }
                    Some(list) => {
                        if list.len() != n {
                            issues.push(
                                Issue::new(field(path, split_name), format!("`{split_name}` has {} sizes; the group has {n} ranks", list.len()))
                                    .help("one size (bytes) per rank of the group, as dist.all_to_all_single requires")
                                    .on_rank(rank),
                            );
                            return Some(None);
                        }
                        let mut lens = Vec::with_capacity(n);
                        for (j, s) in list.iter().enumerate() {
                            match size_value(s, scope) {
                                Some(v) => lens.push(v),
                                None => {
                                    issues.push(
                                        Issue::new(index(&field(path, split_name), j), "not a size")
                                            .help(super::units::SIZE_HELP)
                                            .on_rank(rank),
                                    );
                                    return Some(None);
                                }
                            }
                        }
                        let sum = lens.iter().try_fold(0u64, |a, b| a.checked_add(*b));
                        if sum != Some(len) {
                            let total = sum.map_or_else(|| "more than 2^64".to_string(), |s| s.to_string());
                            issues.push(
                                Issue::new(field(path, split_name), format!("`{split_name}` add up to {total} bytes, but `{arg_name}` is {len} bytes"))
                                    .help("the split sizes must add up to the tensor (c10d::checkSplitSizes: \"Split sizes doesn't match total dim 0 size\")")
                                    .on_rank(rank),
                            );
                            return Some(None);
                        }
                        lens
                    }
                };
                let mut at_off = off;
                let mut out = Vec::with_capacity(n);
                for (j, l) in lens.into_iter().enumerate() {
                    out.push((BufArg::Slice(buf.clone(), Size::Bytes(at_off), Size::Bytes(l)), l, at(j)));
                    at_off = at_off.saturating_add(l);
                }
                Some(Some(out))
            };
            let send = chunks(input, input_split_sizes, "input", "input_split_sizes")?;
            let recv = chunks(output, output_split_sizes, "output", "output_split_sizes")?;
            let (Some(send), Some(recv)) = (send, recv) else { return Some(parts) };
            for (r, ((s, sl, sat), (d, dl, dat))) in send.into_iter().zip(recv).enumerate() {
                if r == me {
                    if sl != dl {
                        issues.push(
                            Issue::new(dat, format!("this rank's own part differs in size: it sends itself {sl} bytes and receives {dl}"))
                                .help(format!("input_split_sizes[{r}] and output_split_sizes[{r}] must be equal on rank {rank} (group rank {r})"))
                                .on_rank(rank),
                        );
                    } else if sl != 0 {
                        parts.own = Some((d, s, dat));
                    }
                    continue;
                }
                if sl != 0 {
                    parts.remote.push((members[r], Dir::Send(s), sat));
                }
                if dl != 0 {
                    parts.remote.push((members[r], Dir::Recv(d), dat));
                }
            }
        }
        _ => return None,
    }
    Some(parts)
}
