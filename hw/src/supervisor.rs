//! The supervisor: checks the machine, lowers the program, makes the NCCL unique ids, spawns one rank process per
//! rank (each in its own process group), follows their logs, enforces the watchdog (SIGKILL of every rank's process
//! group when it fires) and assembles the [`Observation`] from what the ranks reported.

use crate::cuda::{self, DriverStatus};
use crate::error::HwError;
use crate::lower::{self, Plan, Step, Tracing};
use crate::observation::*;
use crate::protocol::{monotonic_ns, write_ids, LogReader, Msg};
use cuorder_model::program::{MemSpace, OpKind, Program, StreamKind};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How to run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Watchdog for the program part of the run, from the moment every rank finished set-up. Default 20 s.
    pub timeout: Duration,
    /// Limit on set-up (context, kernels, allocations, pre-initialized communicators). Default 120 s.
    pub setup_timeout: Duration,
    /// The `cuorder-hw` binary to spawn as `cuorder-hw rank ...`. Default: `CUORDER_HW_BIN`, else the current
    /// executable if it is `cuorder-hw`, else a `cuorder-hw` next to it or one folder up (test binaries).
    pub rank_exe: Option<PathBuf>,
    /// Folder for the run's files (program copy, unique ids, rank logs, barrier files). Default: a fresh folder in
    /// the temporary directory, removed afterwards unless `keep_work_dir`.
    pub work_dir: Option<PathBuf>,
    /// Keep the run's folder (it is always kept when the run did not complete).
    pub keep_work_dir: bool,
    /// The NCCL library file in use, recorded in the observation's environment.
    pub nccl_library: Option<String>,
    /// Skip the GPU check: only for tests that run a stand-in rank executable (the supervisor's own logic — watchdog,
    /// process-group kill, log reading — without a GPU).
    pub skip_gpu_check: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            timeout: Duration::from_secs(20),
            setup_timeout: Duration::from_secs(120),
            rank_exe: None,
            work_dir: None,
            keep_work_dir: false,
            nccl_library: None,
            skip_gpu_check: false,
        }
    }
}

/// Checks that this machine can run a program of `ranks` ranks: a loadable CUDA driver with at least `ranks` devices.
///
/// Errors: [`HwError::NoGpu`] (no driver library, `cuInit` failed, no device), [`HwError::NotEnoughGpus`].
pub fn check_gpus(ranks: usize) -> Result<usize, HwError> {
    match cuda::driver_status() {
        DriverStatus::NoLibrary => Err(HwError::NoGpu(
            "no CUDA driver library could be loaded (libcuda.so / libcuda.so.1 not found by the dynamic loader)".into(),
        )),
        DriverStatus::InitFailed(m) => Err(HwError::NoGpu(format!("cuInit failed: {m}"))),
        DriverStatus::Devices(0) => Err(HwError::NoGpu("the CUDA driver reports no device".into())),
        DriverStatus::Devices(n) if n < ranks => Err(HwError::NotEnoughGpus { needed: ranks, found: n }),
        DriverStatus::Devices(n) => Ok(n),
    }
}

/// `cuDriverGetVersion` (e.g. 13000), when a driver is loaded.
pub fn driver_version() -> Option<i32> {
    match cuda::driver_status() {
        DriverStatus::Devices(_) => cuda::driver_version(),
        _ => None,
    }
}

fn find_rank_exe(opts: &RunOptions) -> Result<PathBuf, HwError> {
    if let Some(p) = &opts.rank_exe {
        return Ok(p.clone());
    }
    if let Ok(p) = std::env::var("CUORDER_HW_BIN") {
        return Ok(PathBuf::from(p));
    }
    let me = std::env::current_exe().map_err(|e| HwError::io("finding the current executable", e))?;
    if me.file_name().and_then(|n| n.to_str()) == Some("cuorder-hw") {
        return Ok(me);
    }
    let mut tried = Vec::new();
    let mut dir = me.parent();
    for _ in 0..2 {
        if let Some(d) = dir {
            let c = d.join("cuorder-hw");
            if c.exists() {
                return Ok(c);
            }
            tried.push(c.display().to_string());
            dir = d.parent();
        }
    }
    Err(HwError::Format(format!(
        "cannot find the cuorder-hw binary to run ranks with (tried {}); set CUORDER_HW_BIN",
        tried.join(", ")
    )))
}

/// Per-rank facts collected from its log.
#[derive(Clone, Debug, Default)]
pub struct RankReport {
    pub gpu: Option<GpuInfo>,
    pub driver_version: Option<i32>,
    pub nccl_version: Option<i32>,
    pub anchor: Option<ClockAnchor>,
    pub ready: bool,
    /// (thread, op) -> ns.
    pub enters: BTreeMap<(u32, u32), u64>,
    /// (thread, op) -> (ns, query answer).
    pub returns: BTreeMap<(u32, u32), (u64, Option<bool>)>,
    /// (thread, op) -> (first, last, min, max, words).
    pub host_reads: BTreeMap<(u32, u32), (u32, u32, u32, u32, u64)>,
    /// slot -> (start, end), 0 = not yet.
    pub trace: BTreeMap<u32, (u64, u64)>,
    /// slot -> (first, last, min, max).
    pub probes: BTreeMap<u32, (u32, u32, u32, u32)>,
    pub errors: BTreeMap<(u32, u32), String>,
    pub threads_done: BTreeSet<u32>,
    pub synced: bool,
    pub done: bool,
    pub fatal: Option<String>,
    /// Lines that did not parse.
    pub bad_lines: Vec<String>,
}

impl RankReport {
    /// Folds one message in.
    pub fn apply(&mut self, m: Msg) {
        match m {
            Msg::Hello { gpu, driver_version, nccl_version, .. } => {
                self.gpu = Some(gpu);
                self.driver_version = driver_version;
                self.nccl_version = nccl_version;
            }
            Msg::Anchor(a) => self.anchor = Some(a),
            Msg::Ready { .. } => self.ready = true,
            Msg::Enter { thread, op, ns } => {
                self.enters.insert((thread, op), ns);
            }
            Msg::Return { thread, op, ns, query_ready } => {
                self.returns.insert((thread, op), (ns, query_ready));
            }
            Msg::HostRead { thread, op, first, last, min, max, words } => {
                self.host_reads.insert((thread, op), (first, last, min, max, words));
            }
            Msg::Trace { slot, start, end } => {
                self.trace.insert(slot, (start, end));
            }
            Msg::Probe { slot, first, last, min, max } => {
                self.probes.insert(slot, (first, last, min, max));
            }
            Msg::OpError { thread, op, message } => {
                self.errors.insert((thread, op), message);
            }
            Msg::ThreadDone { thread } => {
                self.threads_done.insert(thread);
            }
            Msg::Synced { .. } => self.synced = true,
            Msg::Program { .. } | Msg::ProgramEnd { .. } => {}
            Msg::Done => self.done = true,
            Msg::Fatal { message } => {
                if self.fatal.is_none() {
                    self.fatal = Some(message);
                }
            }
        }
    }
}

/// How the supervision ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunEnd {
    /// Every rank exited on its own with success.
    AllExited,
    /// The program watchdog fired.
    Watchdog,
    /// A rank failed or set-up did not finish: the message says why.
    Failed { rank: Option<u32>, message: String },
}

/// Runs `program` on this machine's GPUs (rank r on device r) and returns what was observed. Hangs are outcomes
/// (`Outcome::Hung`), not errors; so are failures of CUDA or NCCL calls during the run (`Outcome::Failed`).
///
/// Errors: the program cannot be lowered ([`HwError::Lower`]); no or too few GPUs ([`HwError::NoGpu`],
/// [`HwError::NotEnoughGpus`]); NCCL is needed but not loadable in this process ([`HwError::Library`]); files or
/// processes cannot be created ([`HwError::Io`]).
pub fn run(program: &Program, opts: &RunOptions) -> Result<Observation, HwError> {
    let plan = lower::lower_with(program, &lower::LowerOptions::from_env()).map_err(HwError::Lower)?;
    let n = program.ranks.len();
    if !opts.skip_gpu_check {
        check_gpus(n)?;
    }
    let used = crate::rank::used_comms(program);
    let mut ids: Vec<Option<String>> = vec![None; program.comms.len()];
    let mut nccl_version = None;
    if used.iter().any(|&u| u) {
        if !cuda::nccl_available() {
            let rep = crate::libsearch::search_system(crate::libsearch::Lib::Nccl);
            let m = match rep.found {
                None => rep.not_found_message(),
                Some(f) => format!(
                    "NCCL was found ({f:?}) but this process cannot load it under cudarc's names; run through the \
                     `cuorder-hw run` command (which re-executes itself with LD_LIBRARY_PATH set) or put a folder \
                     holding `libnccl.so` on LD_LIBRARY_PATH"
                ),
            };
            return Err(HwError::Library(m));
        }
        nccl_version = cuda::nccl_version();
        for (i, u) in used.iter().enumerate() {
            if *u {
                ids[i] = Some(cuda::unique_id_to_hex(&cuda::nccl_unique_id()?));
            }
        }
    }
    let exe = find_rank_exe(opts)?;
    let work = match &opts.work_dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("cuorder-hw-{}-{}", std::process::id(), monotonic_ns())),
    };
    if work.exists() {
        std::fs::remove_dir_all(&work).map_err(|e| HwError::io(format!("clearing {}", work.display()), e))?;
    }
    std::fs::create_dir_all(&work).map_err(|e| HwError::io(format!("creating {}", work.display()), e))?;
    let prog_path = work.join("program.ron");
    let text = ron::ser::to_string_pretty(program, ron::ser::PrettyConfig::new())
        .map_err(|e| HwError::Format(format!("serializing the program: {e}")))?;
    std::fs::write(&prog_path, text).map_err(|e| HwError::io(format!("writing {}", prog_path.display()), e))?;
    let ids_path = work.join("ids.txt");
    write_ids(&ids_path, &ids)?;

    let t0 = monotonic_ns();
    let mut children: Vec<Option<Child>> = Vec::new();
    let mut readers = Vec::new();
    let mut spawn_err = None;
    for r in 0..n {
        let log = work.join(format!("rank{r}.log"));
        readers.push(LogReader::new(log.clone()));
        let out = std::fs::File::create(work.join(format!("rank{r}.out")));
        let err = std::fs::File::create(work.join(format!("rank{r}.err")));
        let (Ok(out), Ok(err)) = (out, err) else {
            spawn_err = Some(HwError::Format(format!("cannot create output files in {}", work.display())));
            break;
        };
        let child = Command::new(&exe)
            .arg("rank")
            .args(["--rank", &r.to_string(), "--device", &r.to_string(), "--t0-ns", &t0.to_string()])
            .arg("--program")
            .arg(&prog_path)
            .arg("--ids")
            .arg(&ids_path)
            .arg("--log")
            .arg(&log)
            .arg("--work-dir")
            .arg(&work)
            .env("NCCL_NVLS_ENABLE", "0")
            .env("CUDA_MODULE_LOADING", "EAGER")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn();
        match child {
            Ok(c) => children.push(Some(c)),
            Err(e) => {
                spawn_err = Some(HwError::io(format!("starting {}", exe.display()), e));
                break;
            }
        }
    }
    if let Some(e) = spawn_err {
        kill_all(&mut children);
        return Err(e);
    }

    let mut reports = vec![RankReport::default(); n];
    let mut exits: Vec<Option<std::process::ExitStatus>> = vec![None; n];
    let started = Instant::now();
    let mut ready_at: Option<Instant> = None;
    let mut failing_since: Option<Instant> = None;
    let end = loop {
        for (r, rd) in readers.iter_mut().enumerate() {
            for m in rd.poll() {
                match m {
                    Ok(m) => reports[r].apply(m),
                    Err(line) => reports[r].bad_lines.push(line),
                }
            }
        }
        for (r, c) in children.iter_mut().enumerate() {
            if exits[r].is_none() {
                if let Some(c) = c {
                    if let Ok(Some(st)) = c.try_wait() {
                        exits[r] = Some(st);
                    }
                }
            }
        }
        let failed_rank = (0..n).find(|&r| {
            reports[r].fatal.is_some() || exits[r].map(|s| !s.success()).unwrap_or(false)
        });
        if exits.iter().all(|e| e.is_some()) {
            // Read what was written last.
            for (r, rd) in readers.iter_mut().enumerate() {
                for m in rd.poll() {
                    match m {
                        Ok(m) => reports[r].apply(m),
                        Err(line) => reports[r].bad_lines.push(line),
                    }
                }
            }
            match (0..n).find(|&r| {
                reports[r].fatal.is_some() || !exits[r].map(|s| s.success()).unwrap_or(false) || !reports[r].done
            }) {
                None => break RunEnd::AllExited,
                Some(r) => break RunEnd::Failed { rank: Some(r as u32), message: failure_message(&work, r, &reports[r], exits[r]) },
            }
        }
        if let Some(r) = failed_rank {
            let since = *failing_since.get_or_insert_with(Instant::now);
            if since.elapsed() > Duration::from_millis(500) {
                kill_all(&mut children);
                break RunEnd::Failed { rank: Some(r as u32), message: failure_message(&work, r, &reports[r], exits[r]) };
            }
        }
        if reports.iter().all(|r| r.ready) {
            let at = *ready_at.get_or_insert_with(Instant::now);
            if at.elapsed() > opts.timeout && failed_rank.is_none() {
                kill_all(&mut children);
                break RunEnd::Watchdog;
            }
        } else if started.elapsed() > opts.setup_timeout {
            kill_all(&mut children);
            let not_ready: Vec<usize> = (0..n).filter(|&r| !reports[r].ready).collect();
            break RunEnd::Failed {
                rank: not_ready.first().map(|&r| r as u32),
                message: format!(
                    "set-up did not finish within {} s on rank(s) {not_ready:?} (a pre-initialized communicator \
                     waits for every member)",
                    opts.setup_timeout.as_secs()
                ),
            };
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    // After a kill: pick up what the ranks wrote before they died.
    for (r, rd) in readers.iter_mut().enumerate() {
        for m in rd.poll() {
            match m {
                Ok(m) => reports[r].apply(m),
                Err(line) => reports[r].bad_lines.push(line),
            }
        }
    }
    let mut env = Environment {
        gpus: reports.iter().filter_map(|r| r.gpu.clone()).collect(),
        driver_version: reports.iter().find_map(|r| r.driver_version).or_else(cuda::driver_version),
        nccl_version: nccl_version.or_else(|| reports.iter().find_map(|r| r.nccl_version)),
        nccl_library: opts.nccl_library.clone(),
        hostname: hostname(),
        variables: std::env::vars()
            .filter(|(k, _)| {
                (k.starts_with("NCCL_") || k.starts_with("CUDA_") || k.starts_with("CUORDER_")) && k != "CUORDER_HW_REEXEC"
            })
            .chain([("NCCL_NVLS_ENABLE".to_string(), "0".to_string()), ("CUDA_MODULE_LOADING".into(), "EAGER".into())])
            .collect(),
    };
    if env.nccl_library.is_none() {
        env.nccl_library = std::env::var("CUORDER_HW_NCCL_FILE").ok();
    }
    let obs = build_observation(program, &plan, &reports, &end, env, opts.timeout);
    let completed = matches!(obs.outcome, Outcome::Completed);
    if completed && !opts.keep_work_dir && opts.work_dir.is_none() {
        let _ = std::fs::remove_dir_all(&work);
    }
    Ok(obs)
}

fn kill_all(children: &mut [Option<Child>]) {
    for c in children.iter_mut().flatten() {
        // SAFETY: signalling the process group this supervisor created for its own child.
        unsafe {
            libc::kill(-(c.id() as i32), libc::SIGKILL);
        }
    }
    for c in children.iter_mut().flatten() {
        let _ = c.wait();
    }
}

fn tail(path: &Path, max: usize) -> String {
    let s = std::fs::read_to_string(path).unwrap_or_default();
    let start = s.len().saturating_sub(max);
    let start = (start..s.len()).find(|&i| s.is_char_boundary(i)).unwrap_or(s.len());
    s[start..].trim().to_string()
}

fn failure_message(work: &Path, r: usize, rep: &RankReport, exit: Option<std::process::ExitStatus>) -> String {
    let mut m = match (&rep.fatal, exit) {
        (Some(f), _) => format!("rank {r}: {f}"),
        (None, Some(st)) if !st.success() => format!("rank {r} exited with {st}"),
        (None, Some(_)) => format!("rank {r} exited before finishing"),
        (None, None) => format!("rank {r} failed"),
    };
    let err = tail(&work.join(format!("rank{r}.err")), 2000);
    if !err.is_empty() {
        m.push_str(&format!("\nstderr of rank {r} (last lines):\n{err}"));
    }
    m.push_str(&format!("\n(run files kept in {})", work.display()));
    m
}

fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is 256 bytes as passed.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if r != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..end]).into_owned())
}

fn version(v: u32, plan: &Plan) -> Version {
    if v == 0 {
        Version::Initial
    } else {
        match plan.versions.get(&v) {
            Some(op) => Version::Op(*op),
            None => Version::Unknown(v),
        }
    }
}

fn seen(first: u32, last: u32, min: u32, max: u32, plan: &Plan) -> Seen {
    if min == max {
        Seen::Uniform(version(min, plan))
    } else {
        Seen::Mixed {
            first: version(first, plan),
            last: version(last, plan),
            min: version(min, plan),
            max: version(max, plan),
        }
    }
}

/// Assembles the observation from the ranks' reports. Pure: used by [`run`] and by tests with synthetic reports.
pub fn build_observation(
    program: &Program,
    plan: &Plan,
    reports: &[RankReport],
    end: &RunEnd,
    environment: Environment,
    timeout: Duration,
) -> Observation {
    let empty = RankReport::default();
    let mut ops = Vec::new();
    let mut reads = Vec::new();
    for (ri, rp) in plan.ranks.iter().enumerate() {
        let rep = reports.get(ri).unwrap_or(&empty);
        let decl = &program.ranks[ri];
        let gpu = rep.gpu.as_ref().map(|g| g.ordinal).unwrap_or(ri as u32);
        for (ti, steps) in rp.threads.iter().enumerate() {
            for (oi, step) in steps.iter().enumerate() {
                let key = (ti as u32, oi as u32);
                let op = OpId { rank: ri as u32, thread: ti as u32, index: oi as u32 };
                let kind = &decl.threads[ti].ops[oi].kind;
                let enter = rep.enters.get(&key).copied();
                let ret = rep.returns.get(&key).copied();
                let tracing = step.tracing();
                let device = tracing.slot().map(|s| {
                    let (st, en) = rep.trace.get(&s).copied().unwrap_or((0, 0));
                    DeviceSpan {
                        gpu,
                        start_ns: (st != 0 && !matches!(tracing, Tracing::EndMarker(_))).then_some(st),
                        end_ns: (en != 0).then_some(en),
                    }
                });
                let ended = device.map(|d| d.end_ns.is_some()).unwrap_or(false);
                let (finished, evidence) = if enter.is_none() {
                    (Some(false), Evidence::NeverIssued)
                } else if step.device_stream().is_none() {
                    (Some(ret.is_some()), Evidence::HostReturn)
                } else if ret.is_none() {
                    (Some(false), Evidence::HostReturn)
                } else if ended {
                    (Some(true), Evidence::DeviceTrace)
                } else if host_synchronous(decl, step) {
                    (Some(true), Evidence::HostSynchronize)
                } else if rep.synced {
                    (Some(true), Evidence::FinalSynchronize)
                } else if let Some(ev) = inferred_finish(decl, rp, rep, ti, oi, step, ret.map(|r| r.0).unwrap_or(0)) {
                    (Some(true), ev)
                } else if tracing.slot().is_some() {
                    (Some(false), Evidence::DeviceTrace)
                } else {
                    (None, Evidence::Unknown)
                };
                ops.push(OpObservation {
                    op,
                    kind: lower::op_kind_name(kind).to_string(),
                    host_enter_ns: enter,
                    host_return_ns: ret.map(|r| r.0),
                    device,
                    finished,
                    evidence,
                    query_ready: ret.and_then(|r| r.1),
                    error: rep.errors.get(&key).cloned(),
                });
                if let (OpKind::HostAccess { range, write: false }, Step::HostRead { .. }) = (kind.without_assertion().as_ref(), step) {
                    let s = match rep.host_reads.get(&key) {
                        Some(&(_, _, _, _, 0)) => Seen::Empty,
                        Some(&(f, l, lo, hi, _)) => seen(f, l, lo, hi, plan),
                        None => Seen::NotObserved,
                    };
                    reads.push(ReadObservation { op, read_index: 0, range: *range, seen: s });
                }
            }
        }
        for (slot, &(t, i, k)) in rp.obs_owner.iter().enumerate() {
            let op = OpId { rank: ri as u32, thread: t, index: i };
            let kind = decl.threads[t as usize].ops[i as usize].kind.without_assertion();
            let OpKind::Kernel { reads: rs, .. } = kind.as_ref() else { continue };
            let range = rs[k as usize];
            let s = if range.len == 0 {
                Seen::Empty
            } else {
                match rep.probes.get(&(slot as u32)) {
                    Some(&(f, l, lo, hi)) => seen(f, l, lo, hi, plan),
                    None => Seen::NotObserved,
                }
            };
            reads.push(ReadObservation { op, read_index: k, range, seen: s });
        }
    }
    reads.sort_by_key(|r| (r.op, r.read_index));

    let outcome = match end {
        RunEnd::AllExited => Outcome::Completed,
        RunEnd::Failed { rank, message } => Outcome::Failed { rank: *rank, message: message.clone() },
        RunEnd::Watchdog => {
            let never_finished = ops.iter().filter(|o| o.finished == Some(false)).map(|o| o.op).collect();
            let mut threads = Vec::new();
            for (ri, rp) in plan.ranks.iter().enumerate() {
                let rep = reports.get(ri).unwrap_or(&empty);
                for (ti, steps) in rp.threads.iter().enumerate() {
                    let t = ti as u32;
                    let at = if !rep.ready {
                        ThreadAt::NotStarted
                    } else if rep.threads_done.contains(&t) || steps.is_empty() {
                        ThreadAt::Finished
                    } else {
                        match rep.enters.range((t, 0)..=(t, u32::MAX)).next_back() {
                            None => ThreadAt::Before(0),
                            Some((&(_, i), _)) if !rep.returns.contains_key(&(t, i)) => ThreadAt::InOp(i),
                            Some((&(_, i), _)) if i as usize + 1 >= steps.len() => ThreadAt::Finished,
                            Some((&(_, i), _)) => ThreadAt::Before(i + 1),
                        }
                    };
                    threads.push(ThreadPosition { rank: ri as u32, thread: t, at });
                }
            }
            Outcome::Hung { never_finished, threads }
        }
    };
    Observation {
        format_version: FORMAT_VERSION,
        program: program.name.clone(),
        outcome,
        environment,
        timeout_ms: timeout.as_millis() as u64,
        versions: plan.versions.clone(),
        reads,
        ops,
        clock_anchors: reports.iter().filter_map(|r| r.anchor).collect(),
    }
}

/// Whether a synchronous (stream-less) memcpy or memset has finished when it returns: per CUDA's API
/// synchronization behaviour, only copies *to* host memory and memsets *of* pinned host memory block the host until
/// done; host-to-device and device-to-device copies and device memsets may return before the work ends.
fn host_synchronous(decl: &cuorder_model::program::Rank, step: &Step) -> bool {
    let space = |b: u32| decl.buffers.get(b as usize).map(|b| b.space);
    match step {
        Step::Memcpy { stream: None, dst, .. } => space(dst.buf) != Some(MemSpace::Device),
        Step::Memset { stream: None, dst, .. } => space(dst.buf) == Some(MemSpace::PinnedHost),
        _ => false,
    }
}

/// Finish of an untraced device op inferred from a later event: a later op on the same stream whose end was traced
/// (FIFO, S1), or a later stream/device synchronize that returned. "Later" = issued by the same thread after it, or
/// entered by another thread after this op's call returned at `ret_ns`.
fn inferred_finish(
    decl: &cuorder_model::program::Rank,
    rp: &lower::RankPlan,
    rep: &RankReport,
    ti: usize,
    oi: usize,
    step: &Step,
    ret_ns: u64,
) -> Option<Evidence> {
    // Synchronous copies and memsets run on the legacy default stream (index 0).
    let stream = step.device_stream().map(|s| s.unwrap_or(0))?;
    let per_thread = decl.streams.get(stream as usize).map(|s| s.kind) == Some(StreamKind::PerThreadDefault);
    let mut best: Option<Evidence> = None;
    for (tj, steps) in rp.threads.iter().enumerate() {
        if per_thread && tj != ti {
            continue;
        }
        for (oj, other) in steps.iter().enumerate() {
            let key = (tj as u32, oj as u32);
            let later = if tj == ti {
                oj > oi
            } else {
                rep.enters.get(&key).map(|&e| e > ret_ns).unwrap_or(false)
            };
            if !later {
                continue;
            }
            if other.device_stream().map(|s| s.unwrap_or(0)) == Some(stream) {
                if let Some(slot) = other.tracing().slot() {
                    if rep.trace.get(&slot).map(|t| t.1 != 0).unwrap_or(false) {
                        return Some(Evidence::LaterOnSameStream);
                    }
                }
            }
            let covers = match other {
                Step::StreamSynchronize { stream: s } => *s == stream,
                Step::DeviceSynchronize => true,
                _ => false,
            };
            if covers && rep.returns.contains_key(&key) {
                best = Some(Evidence::HostSynchronize);
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuorder_model::build::Builder;
    use cuorder_model::program::StreamRef;

    /// Two ranks: send then recv on a non-blocking stream, then a stream synchronize (the ungrouped hang).
    fn send_first() -> Program {
        let mut b = Builder::new("send_first", 2);
        let s = b.stream("s", StreamKind::NonBlocking);
        let x = b.buffer("x", 1024, MemSpace::Device, false);
        let y = b.buffer("y", 1024, MemSpace::Device, false);
        for r in 0..2u32 {
            let peer = 1 - r;
            let st = StreamRef { rank: r, index: s };
            let bx = b.whole(r, x);
            let by = b.whole(r, y);
            b.op(r, 0, OpKind::Send { comm: cuorder_model::program::CommId(0), peer, buf: bx, stream: st });
            b.op(r, 0, OpKind::Recv { comm: cuorder_model::program::CommId(0), peer, buf: by, stream: st });
            b.op(r, 0, OpKind::StreamSynchronize { stream: st });
        }
        b.finish()
    }

    #[test]
    fn hung_observation_from_synthetic_reports() {
        let p = send_first();
        let plan = lower::lower(&p).unwrap();
        let mut reps = vec![RankReport::default(), RankReport::default()];
        for rep in &mut reps {
            rep.ready = true;
            rep.apply(Msg::Enter { thread: 0, op: 0, ns: 10 });
            rep.apply(Msg::Return { thread: 0, op: 0, ns: 20, query_ready: None });
            rep.apply(Msg::Enter { thread: 0, op: 1, ns: 30 });
            rep.apply(Msg::Return { thread: 0, op: 1, ns: 40, query_ready: None });
            rep.apply(Msg::Enter { thread: 0, op: 2, ns: 50 });
            // The send's start marker ran, nothing ended.
            rep.apply(Msg::Trace { slot: 0, start: 1000, end: 0 });
        }
        let o = build_observation(&p, &plan, &reps, &RunEnd::Watchdog, Environment::default(), Duration::from_secs(20));
        let Outcome::Hung { never_finished, threads } = &o.outcome else { panic!("{:?}", o.outcome) };
        assert_eq!(never_finished.len(), 6, "{never_finished:?}");
        assert!(threads.iter().all(|t| t.at == ThreadAt::InOp(2)), "{threads:?}");
        let send = o.op(OpId { rank: 0, thread: 0, index: 0 }).unwrap();
        assert_eq!(send.device.unwrap().start_ns, Some(1000));
        assert_eq!(send.evidence, Evidence::DeviceTrace);
        // Round trip through RON.
        let back = Observation::from_ron(&o.to_ron()).unwrap();
        assert_eq!(back, o);
    }

    #[test]
    fn completed_run_with_reads_and_inference() {
        // One rank: a kernel writes a on sA, a memcpy on the legacy stream (untraced) copies it to b, a kernel
        // on the legacy stream reads b, the host reads a pinned buffer that a host write stamped.
        let mut b = Builder::new("single", 1);
        let sa = b.stream("sA", StreamKind::NonBlocking);
        let a = b.buffer("a", 64, MemSpace::Device, false);
        let bb = b.buffer("b", 64, MemSpace::Device, false);
        let p = b.buffer("p", 16, MemSpace::PinnedHost, false);
        let (ra, rb, rpn) = (b.whole(0, a), b.whole(0, bb), b.whole(0, p));
        let s_a = StreamRef { rank: 0, index: sa };
        let s_l = StreamRef { rank: 0, index: 0 };
        b.op(0, 0, OpKind::Kernel { stream: s_a, name: "w".into(), reads: vec![], writes: vec![ra], duration_ns: 0 });
        b.op(0, 0, OpKind::StreamSynchronize { stream: s_a });
        b.op(0, 0, OpKind::Memcpy { stream: Some(s_l), dst: rb, src: ra });
        b.op(0, 0, OpKind::Kernel { stream: s_l, name: "r".into(), reads: vec![rb], writes: vec![], duration_ns: 0 });
        b.op(0, 0, OpKind::HostAccess { range: rpn, write: true });
        b.op(0, 0, OpKind::HostAccess { range: rpn, write: false });
        let prog = b.finish();
        let plan = lower::lower(&prog).unwrap();
        assert_eq!(plan.versions.len(), 2);
        let mut rep = RankReport { ready: true, ..Default::default() };
        for i in 0..6 {
            rep.apply(Msg::Enter { thread: 0, op: i, ns: 10 * i as u64 + 1 });
            rep.apply(Msg::Return { thread: 0, op: i, ns: 10 * i as u64 + 5, query_ready: None });
        }
        rep.apply(Msg::Trace { slot: 0, start: 100, end: 200 });
        rep.apply(Msg::Trace { slot: 1, start: 300, end: 400 });
        rep.apply(Msg::Probe { slot: 0, first: 1, last: 1, min: 1, max: 1 });
        rep.apply(Msg::HostRead { thread: 0, op: 5, first: 2, last: 2, min: 2, max: 2, words: 4 });
        let o = build_observation(&prog, &plan, &[rep], &RunEnd::Watchdog, Environment::default(), Duration::ZERO);
        let k0 = OpId { rank: 0, thread: 0, index: 0 };
        assert_eq!(o.reads.len(), 2);
        assert_eq!(o.reads[0].seen, Seen::Uniform(Version::Op(k0)));
        assert_eq!(o.reads[1].seen, Seen::Uniform(Version::Op(OpId { index: 4, ..k0 })));
        // The untraced legacy-stream memcpy is known finished because the later kernel on sL ended.
        assert_eq!(o.op(OpId { index: 2, ..k0 }).unwrap().evidence, Evidence::LaterOnSameStream);
        assert_eq!(o.op(OpId { index: 2, ..k0 }).unwrap().finished, Some(true));
    }
}
