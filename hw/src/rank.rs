//! One rank process: sets up its GPU (context, kernels, streams, events, buffers, trace memory, pre-initialized
//! communicators), waits at the start barrier with the other ranks, then runs every host thread of the rank as a real
//! thread, op by op, logging each call and (from a monitor thread) the device trace to the supervisor.
//!
//! Nothing here synchronizes more than the program asks: ops are issued on exactly the streams they name; marker
//! kernels are only added on non-legacy streams (where they add no implicit synchronization); the only added
//! synchronizations are in set-up (before the start barrier) and after the last op of every thread has returned.
//!
//! The same code runs many programs in one process (`batch`): the [`Session`] (context, compiled kernels) is made
//! once; each program gets fresh streams, events, buffers and trace memory, released after the device is idle.
//! Pooled buffers go through a stream-ordered caching allocator like PyTorch's (P4): see [`Pool`].

use crate::cuda::{self, CUevent, CUfunction, CUstream, Device};
use crate::error::HwError;
use crate::kernels::{self, ObsScratch, ObsSlot, Range, TraceScratch, TraceSlot};
use crate::lower::{self, RankPlan, Step, Tracing};
use crate::observation::{ClockAnchor, GpuInfo};
use crate::protocol::{file_barrier, read_ids, LogWriter, Msg};
use cuorder_model::program::{CollectiveKind, MemSpace, Program, StreamKind};
use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Arguments of the hidden `rank` sub-command.
#[derive(Clone, Debug)]
pub struct RankArgs {
    /// This process's global rank.
    pub rank: u32,
    /// The program, as RON of the resolved [`Program`].
    pub program: PathBuf,
    /// The unique-id file (one hex id per communicator).
    pub ids: PathBuf,
    /// The log file this rank appends its messages to.
    pub log: PathBuf,
    /// The run's folder (barrier files).
    pub work_dir: PathBuf,
    /// The run's start on CLOCK_MONOTONIC, in ns.
    pub t0_ns: u64,
    /// CUDA device ordinal to use.
    pub device: u32,
}

/// Runs one rank to the end and returns the process exit code (0: done, 1: failed; the reason is in the log).
/// Host threads that hit an error end the process at once with code 1 (other threads may be blocked for ever).
pub fn rank_main(a: &RankArgs) -> i32 {
    let log = match LogWriter::create(&a.log, a.t0_ns) {
        Ok(l) => Arc::new(l),
        Err(e) => {
            eprintln!("cuorder-hw rank {}: {e}", a.rank);
            return 1;
        }
    };
    match run_rank(a, log.clone()) {
        Ok(()) => {
            log.send(&Msg::Done);
            0
        }
        Err(e) => {
            log.send(&Msg::Fatal { message: e.to_string() });
            1
        }
    }
}

enum Mem {
    Device(u64),
    Pinned(*mut u8, u64),
    Pageable(Box<[AtomicU32]>),
    /// A pooled buffer (P4): its fresh blocks (one per `Alloc` of it, zeroed) and the block it holds now (0: none).
    Pooled { fresh: Vec<u64>, current: AtomicU64 },
}

impl Mem {
    /// The address for driver and NCCL calls (unified addressing: host pointers are valid addresses); 0 for a
    /// pooled buffer that holds no block.
    fn addr(&self) -> u64 {
        match self {
            Mem::Device(p) => *p,
            Mem::Pinned(_, d) => *d,
            Mem::Pageable(b) => b.as_ptr() as u64,
            Mem::Pooled { current, .. } => current.load(Ordering::SeqCst),
        }
    }
}

/// A block in a stream's pool: free since a `Free`, reusable by an `Alloc` on `stream` once every event in `held`
/// (recorded at free time on the streams named by `record_stream`) has completed.
struct FreeBlock {
    addr: u64,
    bytes: u64,
    stream: u32,
    held: Vec<CUevent>,
}

/// A pooled buffer's current allocation.
struct Allocation {
    addr: u64,
    bytes: u64,
    stream: u32,
    recorded: Vec<u32>,
}

/// The executor's caching allocator (P4), after PyTorch's: a freed block returns to its allocation stream's pool at
/// once (no synchronization); an allocation on a stream takes the smallest large-enough free block of that stream
/// whose `record_stream` events have completed (most recently freed first among equals), else a fresh block.
#[derive(Default)]
struct Pool {
    free: Vec<FreeBlock>,
    allocated: std::collections::BTreeMap<u32, Allocation>,
    /// Every event recorded by a `Free`, destroyed with the program.
    events: Vec<CUevent>,
}

#[derive(Clone, Copy)]
struct CommPtr(cuda::ncclComm_t);
// SAFETY: NCCL communicators may be used from any thread (one at a time per the program's own calls).
unsafe impl Send for CommPtr {}
unsafe impl Sync for CommPtr {}

/// What a program's `CudaFree`, `Malloc`, `MallocHost` and `LoadModule` did (S7).
#[derive(Default)]
struct HostCalls {
    /// Static device buffers released by `CudaFree` (tear-down skips them).
    freed: Vec<u32>,
    /// `Malloc` allocations.
    device: Vec<u64>,
    /// `MallocHost` allocations.
    pinned: Vec<*mut u8>,
    /// Pool blocks released by `EmptyCache` (tear-down skips them).
    released: Vec<u64>,
    /// Modules loaded by `LoadModule`, by name.
    modules: std::collections::BTreeMap<String, cuda::CUmodule>,
}

/// What a host function enqueued by `HostFunc` touches (S8): host words it reads and words it stamps with
/// `version`. The words live as long as the program's [`Rt`], which synchronizes the device before it is dropped.
struct HostFuncData {
    reads: Vec<(*const AtomicU32, usize)>,
    writes: Vec<(*const AtomicU32, usize)>,
    version: u32,
    /// How long the function runs before touching memory, ns.
    duration_ns: u64,
}

/// The host function of every `HostFunc` step: reads and stamps host memory, makes no CUDA call (S8).
///
/// # Safety
/// `data` is a `Box<HostFuncData>` leaked by `exec`, run once.
unsafe extern "C" fn host_func(data: *mut c_void) {
    // SAFETY: per the contract above; the words outlive the call (see `HostFuncData`).
    let d = unsafe { Box::from_raw(data as *mut HostFuncData) };
    if d.duration_ns > 0 {
        std::thread::sleep(std::time::Duration::from_nanos(d.duration_ns));
    }
    let mut sum = 0u32;
    for (p, n) in &d.reads {
        for k in 0..*n {
            sum = sum.wrapping_add(unsafe { &*p.add(k) }.load(Ordering::Relaxed));
        }
    }
    std::hint::black_box(sum);
    for (p, n) in &d.writes {
        for k in 0..*n {
            unsafe { &*p.add(k) }.store(d.version, Ordering::Relaxed);
        }
    }
}

/// A one-kernel PTX module for `LoadModule` (S7): loading it and extracting its function is what
/// `CUDA_MODULE_LOADING=LAZY` defers to the first launch of a kernel of a module.
const LAZY_MODULE_PTX: &str = ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry cuorder_lazy()\n{\n\tret;\n}\n\0";

struct Rt {
    rank: u32,
    program: Program,
    plan: RankPlan,
    dev: Device,
    log: Arc<LogWriter>,
    f_op: CUfunction,
    f_mark: CUfunction,
    streams: Vec<CUstream>,
    events: Vec<CUevent>,
    bufs: Vec<Mem>,
    buf_words: Vec<u64>,
    trace_host: *mut TraceSlot,
    trace_dev: u64,
    trace_scratch: u64,
    trace_len: u32,
    obs_host: *mut ObsSlot,
    obs_dev: u64,
    obs_scratch: u64,
    ranges_dev: u64,
    /// Host-mapped copy of the range table, for kernels that touch pooled buffers (whose addresses are known only
    /// when the kernel is launched); `ranges_pinned_dev` is its device address.
    ranges_pinned: *mut Range,
    ranges_pinned_dev: u64,
    comms: Vec<OnceLock<CommPtr>>,
    ids: Vec<Option<cuda::ncclUniqueId>>,
    sm_count: u32,
    pool: Mutex<Pool>,
    /// What the program's own host calls allocated, freed and loaded (S7), released at tear-down.
    host_calls: Mutex<HostCalls>,
    /// Streams this program created (destroyed with it).
    created_streams: Vec<CUstream>,
    /// Host barriers' folder (a fresh one per program in batch runs).
    barrier_dir: PathBuf,
    /// Monitor polling interval.
    poll: Duration,
}

// SAFETY: the raw pointers are to process-lifetime allocations; CUDA handles are usable from any thread that has the
// context bound (every thread binds it first).
unsafe impl Send for Rt {}
unsafe impl Sync for Rt {}

const BLOCK: u32 = 256;

fn run_rank(a: &RankArgs, log: Arc<LogWriter>) -> Result<(), HwError> {
    let text = std::fs::read_to_string(&a.program)
        .map_err(|e| HwError::io(format!("reading {}", a.program.display()), e))?;
    let program: Program =
        ron::from_str(&text).map_err(|e| HwError::Format(format!("{}: {e}", a.program.display())))?;
    let need_nccl = used_comms(&program).iter().any(|&u| u);
    let sess = Session::open(a.rank, a.device, need_nccl, &log)?;
    let ids: Vec<Option<cuda::ncclUniqueId>> = read_ids(&a.ids)?
        .iter()
        .map(|i| i.as_deref().map(cuda::unique_id_from_hex).transpose())
        .collect::<Result<_, _>>()?;
    let rt = setup_program(&sess, program, ids, log.clone(), a.work_dir.clone(), Duration::from_millis(20))?;
    // Pre-initialized communicators that the program uses, in index order on every rank (one consistent order).
    let used = used_comms(&rt.program);
    for (ci, c) in rt.program.comms.iter().enumerate() {
        if c.explicit_init || !used[ci] {
            continue;
        }
        if let Some(pos) = c.members.iter().position(|&m| m == rt.rank) {
            let id = rt.ids[ci].ok_or_else(|| HwError::Format(format!("no unique id for communicator `{}`", c.name)))?;
            let comm = if c.nonblocking {
                // N12: a pre-existing non-blocking communicator is ready before the program starts.
                let comm = cuda::comm_init_rank_config(c.members.len() as i32, id, pos as i32, false)?;
                cuda::comm_poll(comm)?;
                comm
            } else {
                cuda::comm_init_rank(c.members.len() as i32, id, pos as i32)?
            };
            let _ = rt.comms[ci].set(CommPtr(comm));
        }
    }
    let all: Vec<String> = (0..rt.program.ranks.len()).map(|r| r.to_string()).collect();
    file_barrier(&a.work_dir, "start", &rt.rank.to_string(), &all)?;
    run_program(&rt)
}

/// What a process sets up once for all the programs it runs: the device's context and the compiled kernels.
pub struct Session {
    rank: u32,
    dev: Device,
    f_op: CUfunction,
    f_mark: CUfunction,
    sm_count: u32,
}

// SAFETY: the function handles belong to the process-lifetime module; the context is usable from any thread that
// binds it.
unsafe impl Send for Session {}
unsafe impl Sync for Session {}

impl Session {
    /// Checks the driver (and NCCL when `need_nccl`), opens device `device` for rank `rank`, reports it with
    /// [`Msg::Hello`], and compiles and loads the kernels.
    ///
    /// Errors: no or too few GPUs, NCCL not loadable, CUDA or NVRTC failures.
    pub fn open(rank: u32, device: u32, need_nccl: bool, log: &LogWriter) -> Result<Session, HwError> {
        // cudarc panics when a library it needs cannot be loaded: check both before the first call into each.
        match cuda::driver_status() {
            cuda::DriverStatus::Devices(n) if n > device as usize => {}
            cuda::DriverStatus::Devices(n) => {
                return Err(HwError::NotEnoughGpus { needed: device as usize + 1, found: n });
            }
            cuda::DriverStatus::NoLibrary => {
                return Err(HwError::NoGpu("no CUDA driver library in the rank process".into()))
            }
            cuda::DriverStatus::InitFailed(m) => return Err(HwError::NoGpu(format!("cuInit failed: {m}"))),
        }
        if need_nccl && !cuda::nccl_available() {
            return Err(HwError::Library(format!(
                "NCCL cannot be loaded in the rank process under cudarc's names ({}); LD_LIBRARY_PATH={}",
                crate::libsearch::Lib::Nccl.cudarc_names().join(", "),
                std::env::var("LD_LIBRARY_PATH").unwrap_or_default()
            )));
        }
        let dev = Device::open(device as usize)?;
        let cc = dev.compute_capability();
        let nccl_version = if cuda::nccl_available() { cuda::nccl_version() } else { None };
        log.send(&Msg::Hello {
            rank,
            pid: std::process::id(),
            gpu: GpuInfo { rank, ordinal: device, name: dev.name(), pci_bus_id: dev.pci_bus_id(), compute_capability: cc },
            driver_version: cuda::driver_version(),
            nccl_version,
        });
        let cubin = kernels::compile_cubin(cc)?;
        let module = cuda::module_load(&cubin)?;
        let f_op = cuda::module_function(module, "cuorder_op")?;
        let f_mark = cuda::module_function(module, "cuorder_mark")?;
        let sm_count = dev.sm_count();
        Ok(Session { rank, dev, f_op, f_mark, sm_count })
    }
}

/// Sets up one program on the session's device: lowers it, creates its streams, events, buffers (pooled buffers'
/// fresh blocks too), trace and observation memory and the range tables, and measures a clock anchor.
fn setup_program(
    sess: &Session,
    program: Program,
    ids: Vec<Option<cuda::ncclUniqueId>>,
    log: Arc<LogWriter>,
    barrier_dir: PathBuf,
    poll: Duration,
) -> Result<Arc<Rt>, HwError> {
    sess.dev.bind()?;
    let plan = lower::lower_with(&program, &lower::LowerOptions::from_env()).map_err(HwError::Lower)?;
    let plan = plan
        .ranks
        .into_iter()
        .nth(sess.rank as usize)
        .ok_or_else(|| HwError::Format(format!("the program has no rank {}", sess.rank)))?;
    let rank_decl = &program.ranks[sess.rank as usize];

    let mut streams = Vec::new();
    let mut created_streams = Vec::new();
    for s in &rank_decl.streams {
        streams.push(match s.kind {
            StreamKind::LegacyDefault => cuda::STREAM_LEGACY_NULL,
            StreamKind::Blocking | StreamKind::NonBlocking => {
                let h = cuda::stream_create(s.kind == StreamKind::Blocking)?;
                created_streams.push(h);
                h
            }
            StreamKind::PerThreadDefault => cuda::STREAM_PER_THREAD,
        });
    }
    let mut events = Vec::new();
    for _ in &rank_decl.events {
        events.push(cuda::event_create()?);
    }
    let mut bufs = Vec::new();
    let mut buf_words = Vec::new();
    for (bi, b) in rank_decl.buffers.iter().enumerate() {
        let bytes = usize::try_from(b.bytes)
            .map_err(|_| HwError::Format(format!("buffer `{}` of {} bytes is too large", b.name, b.bytes)))?;
        let words = b.bytes.div_ceil(4);
        buf_words.push(words);
        let fresh = plan.fresh_blocks.get(bi).copied().unwrap_or(0);
        bufs.push(match b.space {
            MemSpace::Device if b.pooled => Mem::Pooled {
                fresh: (0..fresh).map(|_| cuda::alloc_device_zeroed(bytes)).collect::<Result<_, _>>()?,
                current: AtomicU64::new(0),
            },
            MemSpace::Device => Mem::Device(cuda::alloc_device_zeroed(bytes)?),
            MemSpace::PinnedHost => {
                let (h, d) = cuda::alloc_pinned_zeroed(bytes)?;
                Mem::Pinned(h, d)
            }
            MemSpace::PageableHost => Mem::Pageable((0..words.max(1)).map(|_| AtomicU32::new(0)).collect()),
        });
    }

    // Trace slots: the plan's, plus one for the clock anchor.
    let trace_len = plan.trace_slots + 1;
    let (th, td) = cuda::alloc_pinned_zeroed(trace_len as usize * std::mem::size_of::<TraceSlot>())?;
    let trace_scratch = cuda::alloc_device_zeroed(trace_len as usize * std::mem::size_of::<TraceScratch>())?;
    let init: Vec<TraceScratch> = vec![TraceScratch::INIT; trace_len as usize];
    cuda::copy_htod_sync(trace_scratch, as_bytes(&init))?;
    let obs_len = plan.obs_slots.max(1);
    let (oh, od) = cuda::alloc_pinned_zeroed(obs_len as usize * std::mem::size_of::<ObsSlot>())?;
    let obs_scratch = cuda::alloc_device_zeroed(obs_len as usize * std::mem::size_of::<ObsScratch>())?;
    let init: Vec<ObsScratch> = vec![ObsScratch::INIT; obs_len as usize];
    cuda::copy_htod_sync(obs_scratch, as_bytes(&init))?;
    // Pooled buffers' ranges get their address when their kernel is launched (0 here).
    let ranges: Vec<Range> = plan
        .ranges
        .iter()
        .map(|r| Range {
            ptr: match &bufs[r.buf as usize] {
                Mem::Pooled { .. } => 0,
                m => m.addr() + r.word_offset * 4,
            },
            words: r.words,
            slot: r.obs_slot,
            pad: 0,
        })
        .collect();
    let table_bytes = ranges.len().max(1) * std::mem::size_of::<Range>();
    let ranges_dev = cuda::alloc_device_zeroed(table_bytes)?;
    cuda::copy_htod_sync(ranges_dev, as_bytes(&ranges))?;
    let (rph, rpd) = cuda::alloc_pinned_zeroed(table_bytes)?;
    // SAFETY: the pinned table holds `ranges.len()` entries.
    unsafe { std::ptr::copy_nonoverlapping(ranges.as_ptr(), rph as *mut Range, ranges.len()) };
    cuda::ctx_synchronize()?;

    let rt = Arc::new(Rt {
        rank: sess.rank,
        comms: (0..program.comms.len()).map(|_| OnceLock::new()).collect(),
        program,
        plan,
        dev: sess.dev.clone(),
        log: log.clone(),
        f_op: sess.f_op,
        f_mark: sess.f_mark,
        streams,
        events,
        bufs,
        buf_words,
        trace_host: th as *mut TraceSlot,
        trace_dev: td,
        trace_scratch,
        trace_len,
        obs_host: oh as *mut ObsSlot,
        obs_dev: od,
        obs_scratch,
        ranges_dev,
        ranges_pinned: rph as *mut Range,
        ranges_pinned_dev: rpd,
        ids,
        sm_count: sess.sm_count,
        pool: Mutex::new(Pool::default()),
        host_calls: Mutex::new(HostCalls::default()),
        created_streams,
        barrier_dir,
        poll,
    });

    // Clock anchor: a marker kernel on a private stream, during set-up.
    let s = cuda::stream_create(false)?;
    let slot = rt.trace_len - 1;
    let before = log.now();
    rt.mark(s, slot, 0)?;
    // SAFETY: a live stream, destroyed once after it is idle.
    unsafe {
        cuda::stream_synchronize(s)?;
        cuda::stream_destroy(s)?;
    }
    let after = log.now();
    let gpu = rt.trace(slot).start_ns;
    log.send(&Msg::Anchor(ClockAnchor { rank: rt.rank, host_before_ns: before, gpu_ns: gpu, host_after_ns: after }));
    Ok(rt)
}

/// Runs a set-up program: reports [`Msg::Ready`], runs every host thread as a real thread, waits for them, then
/// synchronizes the device and reports [`Msg::Synced`].
fn run_program(rt: &Arc<Rt>) -> Result<(), HwError> {
    rt.log.send(&Msg::Ready { ns: rt.log.now() });
    let stop = Arc::new(AtomicBool::new(false));
    let monitor = {
        let rt = rt.clone();
        let stop = stop.clone();
        std::thread::spawn(move || monitor_loop(&rt, &stop))
    };
    let mut handles = Vec::new();
    for t in 0..rt.plan.threads.len() as u32 {
        let rt = rt.clone();
        handles.push(std::thread::spawn(move || host_thread(&rt, t)));
    }
    for h in handles {
        let _ = h.join();
    }
    rt.dev.bind()?;
    cuda::ctx_synchronize()?;
    stop.store(true, Ordering::SeqCst);
    let _ = monitor.join();
    rt.log.send(&Msg::Synced { ns: rt.log.now() });
    Ok(())
}

impl Drop for Rt {
    /// Releases what [`setup_program`] made (batch runs; the device is idle by then). Errors are ignored: the
    /// program's observation is already complete.
    fn drop(&mut self) {
        let _ = self.dev.bind();
        let _ = cuda::ctx_synchronize();
        // SAFETY: every handle below was created by this program's set-up or its `Free`s, and is released once.
        unsafe {
            for s in &self.created_streams {
                let _ = cuda::stream_destroy(*s);
            }
            for e in &self.events {
                let _ = cuda::event_destroy(*e);
            }
            if let Ok(pool) = self.pool.lock() {
                for e in &pool.events {
                    let _ = cuda::event_destroy(*e);
                }
            }
            let calls = self.host_calls.get_mut().map(std::mem::take).unwrap_or_default();
            for p in &calls.device {
                let _ = cuda::free_device(*p);
            }
            for h in &calls.pinned {
                let _ = cuda::free_pinned(*h);
            }
            for m in calls.modules.values() {
                let _ = cuda::module_unload(*m);
            }
            for (i, m) in self.bufs.iter().enumerate() {
                match m {
                    Mem::Device(_) if calls.freed.contains(&(i as u32)) => {}
                    Mem::Device(p) => {
                        let _ = cuda::free_device(*p);
                    }
                    Mem::Pinned(h, _) => {
                        let _ = cuda::free_pinned(*h);
                    }
                    Mem::Pooled { fresh, .. } => {
                        for p in fresh.iter().filter(|p| !calls.released.contains(p)) {
                            let _ = cuda::free_device(*p);
                        }
                    }
                    Mem::Pageable(_) => {}
                }
            }
            let _ = cuda::free_pinned(self.trace_host as *mut u8);
            let _ = cuda::free_pinned(self.obs_host as *mut u8);
            let _ = cuda::free_pinned(self.ranges_pinned as *mut u8);
            let _ = cuda::free_device(self.trace_scratch);
            let _ = cuda::free_device(self.obs_scratch);
            let _ = cuda::free_device(self.ranges_dev);
        }
    }
}

/// Arguments of the hidden `batch-worker` sub-command.
#[derive(Clone, Debug)]
pub struct BatchWorkerArgs {
    /// One resolved program per line (compact RON).
    pub programs: PathBuf,
    /// First line (0-based) to run; runs to the end of the file.
    pub start: usize,
    /// The log file this worker appends its messages to.
    pub log: PathBuf,
    /// Folder for per-program files (host barriers).
    pub work_dir: PathBuf,
    /// The batch's start on CLOCK_MONOTONIC, in ns.
    pub t0_ns: u64,
    /// CUDA device ordinal.
    pub device: u32,
}

/// Runs programs `start..` of a batch file one after the other in this process (single-rank programs without
/// NCCL), framing each program's messages with [`Msg::Program`] and [`Msg::ProgramEnd`]. Returns the exit code.
/// A program that fails to set up or lower is reported with [`Msg::Fatal`] inside its frame and skipped; an op
/// error ends the process (the supervisor starts a fresh one after that program).
pub fn batch_worker_main(a: &BatchWorkerArgs) -> i32 {
    let log = match LogWriter::create(&a.log, a.t0_ns) {
        Ok(l) => Arc::new(l),
        Err(e) => {
            eprintln!("cuorder-hw batch-worker: {e}");
            return 1;
        }
    };
    let text = match std::fs::read_to_string(&a.programs) {
        Ok(t) => t,
        Err(e) => {
            log.send(&Msg::Fatal { message: format!("reading {}: {e}", a.programs.display()) });
            return 1;
        }
    };
    let sess = match Session::open(0, a.device, false, &log) {
        Ok(s) => s,
        Err(e) => {
            log.send(&Msg::Fatal { message: e.to_string() });
            return 1;
        }
    };
    for (index, line) in text.lines().enumerate().skip(a.start) {
        log.send(&Msg::Program { index: index as u64, ns: log.now() });
        let r = (|| -> Result<(), HwError> {
            let program: Program =
                ron::from_str(line).map_err(|e| HwError::Format(format!("program line {}: {e}", index + 1)))?;
            if program.ranks.len() != 1 || used_comms(&program).iter().any(|&u| u) {
                return Err(HwError::Format(format!(
                    "program `{}`: batch runs take single-rank programs without NCCL",
                    program.name
                )));
            }
            let dir = a.work_dir.join(format!("p{index}"));
            std::fs::create_dir_all(&dir).map_err(|e| HwError::io(format!("creating {}", dir.display()), e))?;
            let rt = setup_program(&sess, program, vec![], log.clone(), dir.clone(), Duration::from_millis(1))?;
            run_program(&rt)?;
            drop(rt);
            let _ = std::fs::remove_dir_all(&dir);
            Ok(())
        })();
        if let Err(e) = r {
            log.send(&Msg::Fatal { message: e.to_string() });
        }
        log.send(&Msg::ProgramEnd { index: index as u64, ns: log.now() });
    }
    log.send(&Msg::Done);
    0
}

fn as_bytes<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: T is a plain #[repr(C)] struct without padding-sensitive invariants; reading its bytes is fine.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

/// Which communicators any op of the program uses (so that unused pre-initialized ones are not set up).
pub fn used_comms(p: &Program) -> Vec<bool> {
    let mut used = vec![false; p.comms.len()];
    for (ri, r) in p.ranks.iter().enumerate() {
        for t in &r.threads {
            for op in &t.ops {
                // The model's op table says which ops use a communicator (op_info.rs).
                let Some(comm) = op.kind.info(p, ri as u32).comm else { continue };
                let c = comm.0 as usize;
                if let Some(u) = used.get_mut(c) {
                    *u = true;
                }
            }
        }
    }
    used
}

impl Rt {
    fn trace(&self, slot: u32) -> TraceSlot {
        // SAFETY: slot < trace_len (plan-assigned), host-mapped memory written by the GPU: read volatile.
        unsafe {
            let p = self.trace_host.add(slot as usize);
            TraceSlot {
                start_ns: std::ptr::read_volatile(&(*p).start_ns),
                end_ns: std::ptr::read_volatile(&(*p).end_ns),
            }
        }
    }

    /// A probe's result once the kernel has published it: `done` is read first, the fields after it (the kernel
    /// writes the fields, fences, then sets `done`). Reading the whole slot at once could pair a new `done` with old
    /// (zero) fields: a read that seemed to see the initial contents (cover-316 in a jittered batch).
    fn obs(&self, slot: u32) -> Option<ObsSlot> {
        // SAFETY: as `trace`.
        unsafe {
            let p = self.obs_host.add(slot as usize);
            if std::ptr::read_volatile(&(*p).done) == 0 {
                return None;
            }
            std::sync::atomic::fence(Ordering::Acquire);
            Some(std::ptr::read_volatile(p))
        }
    }

    fn stream(&self, s: u32) -> CUstream {
        self.streams[s as usize]
    }

    /// Enqueues a marker writing the GPU time into `slot` (`which` 0: start, 1: end) on `s`.
    fn mark(&self, s: CUstream, slot: u32, which: u32) -> Result<(), HwError> {
        let mut th = self.trace_dev + slot as u64 * std::mem::size_of::<TraceSlot>() as u64;
        let mut which = which;
        let mut params = [&mut th as *mut u64 as *mut c_void, &mut which as *mut u32 as *mut c_void];
        // SAFETY: parameters match `cuorder_mark(TraceSlot*, u32)`.
        unsafe { cuda::launch(self.f_mark, 1, 32, s, &mut params) }
    }

    /// The address of a range now.
    ///
    /// Errors: the range is of a pooled buffer that holds no block (never allocated, or freed: P4 makes that
    /// undefined; the executor refuses rather than hand the device a null address).
    fn addr(&self, r: &lower::ByteRange) -> Result<u64, HwError> {
        let m = &self.bufs[r.buf as usize];
        let a = m.addr();
        if a == 0 {
            let name = &self.program.ranks[self.rank as usize].buffers[r.buf as usize].name;
            return Err(HwError::Format(format!("pooled buffer `{name}` is used while it holds no block (not allocated)")));
        }
        Ok(a + r.offset)
    }

    /// Points the range-table slice at its pooled buffers' current blocks and returns the slice's device address:
    /// the device table when the slice names no pooled buffer, else the host-mapped table, written just before the
    /// launch (each op has its own entries, so no earlier kernel reads them).
    fn range_slice(&self, sl: lower::RangeSlice) -> Result<u64, HwError> {
        let range_sz = std::mem::size_of::<Range>() as u64;
        let entries = &self.plan.ranges[sl.start as usize..(sl.start + sl.count) as usize];
        if !entries.iter().any(|r| matches!(self.bufs[r.buf as usize], Mem::Pooled { .. })) {
            return Ok(self.ranges_dev + sl.start as u64 * range_sz);
        }
        for (k, r) in entries.iter().enumerate() {
            if matches!(self.bufs[r.buf as usize], Mem::Pooled { .. }) {
                let br = lower::ByteRange { buf: r.buf, offset: r.word_offset * 4, len: r.words * 4 };
                let a = self.addr(&br)?;
                // SAFETY: the entry lies inside the pinned table (plan-assigned index).
                unsafe {
                    let e = self.ranges_pinned.add(sl.start as usize + k);
                    std::ptr::write_volatile(&mut (*e).ptr, a);
                }
            }
        }
        std::sync::atomic::fence(Ordering::SeqCst);
        Ok(self.ranges_pinned_dev + sl.start as u64 * range_sz)
    }

    fn comm(&self, c: u32) -> Result<cuda::ncclComm_t, HwError> {
        match self.comms.get(c as usize).and_then(|c| c.get()) {
            Some(p) => Ok(p.0),
            None => Err(HwError::Format(format!(
                "communicator `{}` is used before this rank initialized it",
                self.program.comms.get(c as usize).map(|c| c.name.as_str()).unwrap_or("?")
            ))),
        }
    }
}

fn monitor_loop(rt: &Rt, stop: &AtomicBool) {
    let mut last = vec![TraceSlot::default(); rt.trace_len as usize];
    let mut probed = vec![false; rt.plan.obs_slots as usize];
    loop {
        let stopping = stop.load(Ordering::SeqCst);
        for slot in 0..rt.trace_len - 1 {
            let t = rt.trace(slot);
            if t != last[slot as usize] {
                last[slot as usize] = t;
                rt.log.send(&Msg::Trace { slot, start: t.start_ns, end: t.end_ns });
            }
        }
        for slot in 0..rt.plan.obs_slots {
            if probed[slot as usize] {
                continue;
            }
            if let Some(o) = rt.obs(slot) {
                probed[slot as usize] = true;
                rt.log.send(&Msg::Probe { slot, first: o.first, last: o.last, min: o.min, max: o.max });
            }
        }
        if stopping {
            return;
        }
        std::thread::sleep(rt.poll);
    }
}

fn host_thread(rt: &Rt, t: u32) {
    if let Err(e) = rt.dev.bind() {
        rt.log.send(&Msg::OpError { thread: t, op: 0, message: e.to_string() });
        rt.log.send(&Msg::Fatal { message: format!("thread {t}: {e}") });
        std::process::exit(1);
    }
    let mut depth = 0u32;
    let jitter = Jitter::from_env(&rt.program.name, t);
    for (i, step) in rt.plan.threads[t as usize].iter().enumerate() {
        let i = i as u32;
        jitter.pause(i);
        rt.log.send(&Msg::Enter { thread: t, op: i, ns: rt.log.now() });
        match exec(rt, t, i, step, &mut depth) {
            Ok(q) => rt.log.send(&Msg::Return { thread: t, op: i, ns: rt.log.now(), query_ready: q }),
            Err(e) => {
                rt.log.send(&Msg::OpError { thread: t, op: i, message: e.to_string() });
                rt.log.send(&Msg::Fatal { message: format!("op (rank {}, thread {t}, op {i}): {e}", rt.rank) });
                std::process::exit(1);
            }
        }
    }
    rt.log.send(&Msg::ThreadDone { thread: t });
}

/// Host-side timing jitter (`CUORDER_HW_JITTER_US=N`): before each op, the host thread sleeps a pseudo-random
/// 0..=N µs, fixed by the program's name, the thread, the op and `CUORDER_HW_JITTER_SEED`. It changes only when the
/// host issues each call, which any execution of the program may do, so that repeated runs show other interleavings.
struct Jitter {
    max_us: u64,
    seed: u64,
}

impl Jitter {
    fn from_env(program: &str, thread: u32) -> Jitter {
        let max_us = std::env::var("CUORDER_HW_JITTER_US").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
        let base: u64 = std::env::var("CUORDER_HW_JITTER_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ base;
        for b in program.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        Jitter { max_us, seed: h ^ (u64::from(thread) << 40) }
    }

    fn pause(&self, op: u32) {
        if self.max_us == 0 {
            return;
        }
        // splitmix64 of (seed, op).
        let mut z = self.seed.wrapping_add(u64::from(op).wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let us = z % (self.max_us + 1);
        if us > 0 {
            std::thread::sleep(Duration::from_micros(us));
        }
    }
}

fn exec(rt: &Rt, t: u32, i: u32, step: &Step, depth: &mut u32) -> Result<Option<bool>, HwError> {
    let start_mark = |s: CUstream, tr: Tracing| -> Result<(), HwError> {
        if let Tracing::Markers(slot) = tr {
            rt.mark(s, slot, 0)?;
        }
        Ok(())
    };
    let end_mark = |s: CUstream, tr: Tracing| -> Result<(), HwError> {
        match tr {
            Tracing::Markers(slot) | Tracing::EndMarker(slot) => rt.mark(s, slot, 1),
            _ => Ok(()),
        }
    };
    // SAFETY (for the unsafe blocks below): every handle and address comes from set-up and the lowering checked that
    // ranges lie inside their buffers.
    match step {
        Step::Kernel { stream, reads, writes, spin_ns, version, trace } => {
            let slot = trace.slot().unwrap_or(0);
            let mut words = 1u64;
            for r in &rt.plan.ranges[reads.start as usize..(reads.start + reads.count) as usize] {
                words = words.max(r.words);
            }
            for r in &rt.plan.ranges[writes.start as usize..(writes.start + writes.count) as usize] {
                words = words.max(r.words);
            }
            let grid = words.div_ceil(BLOCK as u64).clamp(1, 4 * rt.sm_count as u64) as u32;
            let mut p_reads = rt.range_slice(*reads)?;
            let mut n_reads = reads.count;
            let mut p_writes = rt.range_slice(*writes)?;
            let mut n_writes = writes.count;
            let mut spin = *spin_ns;
            let mut ver = *version;
            let mut ts = rt.trace_scratch + slot as u64 * std::mem::size_of::<TraceScratch>() as u64;
            let mut th = rt.trace_dev + slot as u64 * std::mem::size_of::<TraceSlot>() as u64;
            let mut os = rt.obs_scratch;
            let mut oh = rt.obs_dev;
            let mut params: [*mut c_void; 10] = [
                &mut p_reads as *mut u64 as *mut c_void,
                &mut n_reads as *mut u32 as *mut c_void,
                &mut p_writes as *mut u64 as *mut c_void,
                &mut n_writes as *mut u32 as *mut c_void,
                &mut spin as *mut u64 as *mut c_void,
                &mut ver as *mut u32 as *mut c_void,
                &mut ts as *mut u64 as *mut c_void,
                &mut th as *mut u64 as *mut c_void,
                &mut os as *mut u64 as *mut c_void,
                &mut oh as *mut u64 as *mut c_void,
            ];
            unsafe { cuda::launch(rt.f_op, grid, BLOCK, rt.stream(*stream), &mut params)? };
        }
        Step::Memset { stream, dst, version, trace } => {
            let words = (dst.len / 4) as usize;
            match stream {
                Some(s) => {
                    let s = rt.stream(*s);
                    start_mark(s, *trace)?;
                    unsafe { cuda::memset_d32_async(rt.addr(dst)?, *version, words, s)? };
                    end_mark(s, *trace)?;
                }
                None => unsafe { cuda::memset_d32_sync(rt.addr(dst)?, *version, words)? },
            }
        }
        Step::Memcpy { stream, dst, src, trace } => match stream {
            Some(s) => {
                let s = rt.stream(*s);
                start_mark(s, *trace)?;
                unsafe { cuda::memcpy_async(rt.addr(dst)?, rt.addr(src)?, dst.len as usize, s)? };
                end_mark(s, *trace)?;
            }
            None => unsafe { cuda::memcpy_sync(rt.addr(dst)?, rt.addr(src)?, dst.len as usize)? },
        },
        Step::EventRecord { event, stream, trace } => {
            let s = rt.stream(*stream);
            unsafe { cuda::event_record(rt.events[*event as usize], s)? };
            end_mark(s, *trace)?;
        }
        Step::StreamWaitEvent { stream, event, trace } => {
            let s = rt.stream(*stream);
            unsafe { cuda::stream_wait_event(s, rt.events[*event as usize])? };
            end_mark(s, *trace)?;
        }
        Step::EventQuery { event } => return Ok(Some(unsafe { cuda::event_query(rt.events[*event as usize])? })),
        Step::EventSynchronize { event } => unsafe { cuda::event_synchronize(rt.events[*event as usize])? },
        Step::StreamSynchronize { stream } => unsafe { cuda::stream_synchronize(rt.stream(*stream))? },
        Step::StreamQuery { stream } => return Ok(Some(unsafe { cuda::stream_query(rt.stream(*stream))? })),
        Step::DeviceSynchronize => cuda::ctx_synchronize()?,
        Step::HostSleep { ns } => std::thread::sleep(Duration::from_nanos(*ns)),
        Step::HostRead { range } => {
            let (w0, n) = (range.offset / 4, range.len / 4);
            let words = host_words(rt, range.buf)?;
            let (mut first, mut last, mut lo, mut hi) = (0u32, 0u32, u32::MAX, 0u32);
            for k in 0..n {
                let v = words[(w0 + k) as usize].load(Ordering::Relaxed);
                if k == 0 {
                    first = v;
                }
                if k == n - 1 {
                    last = v;
                }
                lo = lo.min(v);
                hi = hi.max(v);
            }
            rt.log.send(&Msg::HostRead { thread: t, op: i, first, last, min: lo, max: hi, words: n });
        }
        Step::HostWrite { range, version } => {
            let (w0, n) = (range.offset / 4, range.len / 4);
            let words = host_words(rt, range.buf)?;
            for k in 0..n {
                words[(w0 + k) as usize].store(*version, Ordering::Relaxed);
            }
        }
        Step::Barrier { barrier, round } => {
            let b = &rt.program.barriers[*barrier as usize];
            let names: Vec<String> = b.participants.iter().map(|(r, t)| format!("{r}-{t}")).collect();
            file_barrier(&rt.barrier_dir, &format!("barrier{barrier}.round{round}"), &format!("{}-{t}", rt.rank), &names)?;
        }
        Step::CommInit { comm } => {
            let c = &rt.program.comms[*comm as usize];
            let pos = c.members.iter().position(|&m| m == rt.rank).unwrap_or(0);
            let id = rt.ids[*comm as usize]
                .ok_or_else(|| HwError::Format(format!("no unique id for communicator `{}`", c.name)))?;
            let p = cuda::comm_init_rank(c.members.len() as i32, id, pos as i32)?;
            let _ = rt.comms[*comm as usize].set(CommPtr(p));
        }
        // N12: the init returns at once (ncclInProgress); the program polls before using the communicator.
        Step::CommInitNonBlocking { comm } => {
            let c = &rt.program.comms[*comm as usize];
            let pos = c.members.iter().position(|&m| m == rt.rank).unwrap_or(0);
            let id = rt.ids[*comm as usize]
                .ok_or_else(|| HwError::Format(format!("no unique id for communicator `{}`", c.name)))?;
            let p = cuda::comm_init_rank_config(c.members.len() as i32, id, pos as i32, false)?;
            let _ = rt.comms[*comm as usize].set(CommPtr(p));
        }
        Step::CommPoll { comm } => cuda::comm_poll(rt.comm(*comm)?)?,
        Step::CommAbort { comm } => cuda::comm_abort(rt.comm(*comm)?)?,
        Step::CommFinalize { comm } => cuda::comm_finalize(rt.comm(*comm)?)?,
        Step::CommDestroy { comm } => cuda::comm_destroy(rt.comm(*comm)?)?,
        Step::CommSplit { parent, color, key, comm } => {
            let pc = rt.comm(*parent)?;
            let new = cuda::comm_split(pc, *color, *key)?;
            if let Some(c) = comm {
                let _ = rt.comms[*c as usize].set(CommPtr(new));
            }
        }
        Step::Send { comm, peer, buf, stream, trace } | Step::Recv { comm, peer, buf, stream, trace } => {
            let c = rt.comm(*comm)?;
            let s = rt.stream(*stream);
            start_mark(s, *trace)?;
            if matches!(step, Step::Send { .. }) {
                unsafe { cuda::send(rt.addr(buf)?, buf.len as usize, *peer, c, s)? };
            } else {
                unsafe { cuda::recv(rt.addr(buf)?, buf.len as usize, *peer, c, s)? };
            }
            if *depth == 0 {
                end_mark(s, *trace)?;
            }
        }
        Step::Collective { comm, kind, root, send, recv, stream, trace } => {
            let c = rt.comm(*comm)?;
            let s = rt.stream(*stream);
            start_mark(s, *trace)?;
            let (sa, ra) = (rt.addr(send)?, rt.addr(recv)?);
            let words = |len: u64| -> (usize, cuda::ncclDataType_t) {
                if len % 4 == 0 {
                    ((len / 4) as usize, cuda::ncclDataType_t::ncclUint32)
                } else {
                    (len as usize, cuda::ncclDataType_t::ncclUint8)
                }
            };
            unsafe {
                match kind {
                    CollectiveKind::AllReduce => {
                        let (n, dt) = words(send.len);
                        cuda::all_reduce_max(sa, ra, n, dt, c, s)?
                    }
                    CollectiveKind::ReduceScatter => {
                        let (n, dt) = words(recv.len);
                        cuda::reduce_scatter_max(sa, ra, n, dt, c, s)?
                    }
                    CollectiveKind::Broadcast { .. } => cuda::broadcast(sa, ra, recv.len as usize, *root, c, s)?,
                    CollectiveKind::AllGather => cuda::all_gather(sa, ra, send.len as usize, c, s)?,
                    CollectiveKind::AllToAll => {
                        let members = rt.program.comms[*comm as usize].members.len().max(1) as u64;
                        cuda::all_to_all(sa, ra, (send.len / members) as usize, c, s)?
                    }
                    CollectiveKind::Reduce { .. } => {
                        let (n, dt) = words(send.len);
                        cuda::reduce_max(sa, ra, n, dt, *root, c, s)?
                    }
                    CollectiveKind::Gather { .. } => cuda::gather(sa, ra, send.len as usize, *root, c, s)?,
                    CollectiveKind::Scatter { .. } => cuda::scatter(sa, ra, recv.len as usize, *root, c, s)?,
                }
            }
            if *depth == 0 {
                end_mark(s, *trace)?;
            }
        }
        Step::GroupStart => {
            cuda::group_start()?;
            *depth += 1;
        }
        Step::GroupEnd { outermost, end_markers } => {
            cuda::group_end()?;
            *depth = depth.saturating_sub(1);
            if *outermost {
                for (s, slot) in end_markers {
                    rt.mark(rt.stream(*s), *slot, 1)?;
                }
            }
        }
        Step::Alloc { buf, stream, fresh } => {
            let Mem::Pooled { fresh: blocks, current } = &rt.bufs[*buf as usize] else {
                return Err(HwError::Format("Alloc of a buffer that is not pooled".into()));
            };
            let need = rt.program.ranks[rt.rank as usize].buffers[*buf as usize].bytes;
            let mut pool = rt.pool.lock().unwrap_or_else(|p| p.into_inner());
            if pool.allocated.contains_key(buf) {
                return Err(HwError::Format("Alloc of a pooled buffer that is already allocated".into()));
            }
            // The smallest large-enough block of this stream's pool whose record_stream events completed; the most
            // recently freed among equals.
            let mut best: Option<usize> = None;
            for (i, b) in pool.free.iter().enumerate() {
                if b.stream != *stream || b.bytes < need {
                    continue;
                }
                let mut ready = true;
                for e in &b.held {
                    // SAFETY: a live event recorded by `Free`.
                    if !unsafe { cuda::event_query(*e)? } {
                        ready = false;
                        break;
                    }
                }
                if ready && best.is_none_or(|j| pool.free[j].bytes >= b.bytes) {
                    best = Some(i);
                }
            }
            let (addr, bytes) = match best {
                Some(i) => {
                    let b = pool.free.remove(i);
                    (b.addr, b.bytes)
                }
                None => {
                    let a = *blocks.get(*fresh as usize).ok_or_else(|| HwError::Format("no fresh block left".into()))?;
                    (a, need)
                }
            };
            current.store(addr, Ordering::SeqCst);
            pool.allocated.insert(*buf, Allocation { addr, bytes, stream: *stream, recorded: vec![] });
        }
        Step::Free { buf } => {
            let Mem::Pooled { current, .. } = &rt.bufs[*buf as usize] else {
                return Err(HwError::Format("Free of a buffer that is not pooled".into()));
            };
            let mut pool = rt.pool.lock().unwrap_or_else(|p| p.into_inner());
            let a = pool
                .allocated
                .remove(buf)
                .ok_or_else(|| HwError::Format("Free of a pooled buffer that is not allocated".into()))?;
            current.store(0, Ordering::SeqCst);
            let mut held = vec![];
            for s in &a.recorded {
                let e = cuda::event_create()?;
                // SAFETY: live handles of this program.
                unsafe { cuda::event_record(e, rt.stream(*s))? };
                pool.events.push(e);
                held.push(e);
            }
            pool.free.push(FreeBlock { addr: a.addr, bytes: a.bytes, stream: a.stream, held });
        }
        Step::RecordStream { buf, stream } => {
            let mut pool = rt.pool.lock().unwrap_or_else(|p| p.into_inner());
            let a = pool
                .allocated
                .get_mut(buf)
                .ok_or_else(|| HwError::Format("record_stream on a pooled buffer that is not allocated".into()))?;
            if *stream != a.stream && !a.recorded.contains(stream) {
                a.recorded.push(*stream);
            }
        }
        Step::CudaFree { buf } => {
            let Mem::Device(p) = &rt.bufs[*buf as usize] else {
                return Err(HwError::Format("cudaFree of a buffer that is not static device memory".into()));
            };
            let mut calls = rt.host_calls.lock().unwrap_or_else(|p| p.into_inner());
            if calls.freed.contains(buf) {
                return Err(HwError::Format("cudaFree of a buffer freed before".into()));
            }
            // SAFETY: allocated at set-up, freed once (tear-down skips it).
            unsafe { cuda::free_device(*p)? };
            calls.freed.push(*buf);
        }
        Step::Malloc { bytes } => {
            let p = cuda::alloc_device(*bytes as usize)?;
            rt.host_calls.lock().unwrap_or_else(|p| p.into_inner()).device.push(p);
        }
        Step::MallocHost { bytes } => {
            let h = cuda::alloc_host(*bytes as usize)?;
            rt.host_calls.lock().unwrap_or_else(|p| p.into_inner()).pinned.push(h);
        }
        Step::EmptyCache => {
            let mut pool = rt.pool.lock().unwrap_or_else(|p| p.into_inner());
            let mut calls = rt.host_calls.lock().unwrap_or_else(|p| p.into_inner());
            for b in std::mem::take(&mut pool.free) {
                for e in &b.held {
                    // SAFETY: events recorded by this program's `Free`s, destroyed at tear-down.
                    unsafe { cuda::event_synchronize(*e)? };
                }
                // SAFETY: a fresh block of a pooled buffer, not allocated now (it was free), freed once: tear-down
                // skips released blocks.
                unsafe { cuda::free_device(b.addr)? };
                calls.released.push(b.addr);
            }
        }
        Step::LoadModule { module } => {
            let mut calls = rt.host_calls.lock().unwrap_or_else(|p| p.into_inner());
            if !calls.modules.contains_key(module) {
                let m = cuda::module_load(LAZY_MODULE_PTX.as_bytes())?;
                calls.modules.insert(module.clone(), m);
                cuda::module_function(m, "cuorder_lazy")?;
            }
        }
        Step::HostFunc { stream, reads, writes, version, duration_ns } => {
            let words = |list: &[lower::ByteRange]| -> Result<Vec<(*const AtomicU32, usize)>, HwError> {
                list.iter()
                    .map(|r| {
                        let w = host_words(rt, r.buf)?;
                        let (w0, n) = ((r.offset / 4) as usize, (r.len / 4) as usize);
                        let part = w.get(w0..w0 + n).ok_or_else(|| HwError::Format("host function range outside its buffer".into()))?;
                        Ok((part.as_ptr(), n))
                    })
                    .collect()
            };
            let data = Box::new(HostFuncData { reads: words(reads)?, writes: words(writes)?, version: *version, duration_ns: *duration_ns });
            let raw = Box::into_raw(data) as *mut c_void;
            // SAFETY: `host_func` makes no CUDA call and takes ownership of `raw`; the words outlive the program's
            // device work (Rt synchronizes before it is dropped).
            if let Err(e) = unsafe { cuda::launch_host_func(rt.stream(*stream), host_func, raw) } {
                // SAFETY: not enqueued, so still ours.
                drop(unsafe { Box::from_raw(raw as *mut HostFuncData) });
                return Err(e);
            }
        }
        Step::NoOp => {}
    }
    Ok(None)
}

fn host_words(rt: &Rt, buf: u32) -> Result<&[AtomicU32], HwError> {
    let words = rt.buf_words[buf as usize] as usize;
    match &rt.bufs[buf as usize] {
        Mem::Device(_) | Mem::Pooled { .. } => Err(HwError::Format("host access to device memory".into())),
        // SAFETY: the pinned allocation holds at least `words` 4-byte-aligned words for the process's lifetime.
        Mem::Pinned(h, _) => Ok(unsafe { std::slice::from_raw_parts(*h as *const AtomicU32, words) }),
        Mem::Pageable(b) => Ok(&b[..words.min(b.len())]),
    }
}
