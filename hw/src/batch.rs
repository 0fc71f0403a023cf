//! Batch runs: many single-rank programs in one worker process (`cuorder-hw batch-worker`), which opens the GPU and
//! compiles the kernels once and gives every program fresh streams, events and buffers. The supervisor here follows
//! the worker's log program by program and turns each into an [`Observation`]; when a program hangs past the
//! watchdog, or the worker dies, it kills the worker's process group, records that program (`Hung` or `Failed`) and
//! starts a fresh worker at the next program, so a hang never touches another program's run.

use crate::error::HwError;
use crate::lower::{self, Plan};
use crate::observation::*;
use crate::protocol::{monotonic_ns, LogReader, Msg};
use crate::supervisor::{build_observation, RankReport, RunEnd};
use cuorder_model::program::Program;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How to run a batch.
#[derive(Clone, Debug)]
pub struct BatchOptions {
    /// Watchdog of each program, from the moment its set-up is done.
    pub timeout: Duration,
    /// Limit on a worker's start (context, kernel compilation) and on each program's set-up.
    pub setup_timeout: Duration,
    /// The `cuorder-hw` binary to run as `cuorder-hw batch-worker ...` (default: this executable).
    pub worker_exe: Option<PathBuf>,
    /// Folder for the batch's files (default: a fresh temporary folder, removed at the end).
    pub work_dir: Option<PathBuf>,
    /// CUDA device ordinal.
    pub device: u32,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            timeout: Duration::from_secs(5),
            setup_timeout: Duration::from_secs(60),
            worker_exe: None,
            work_dir: None,
            device: 0,
        }
    }
}

/// Counts of a finished batch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchStats {
    pub programs: usize,
    pub completed: usize,
    pub hung: usize,
    pub failed: usize,
    /// Worker processes started (1 + one per hang or crash).
    pub workers: usize,
    /// Wall time of the whole batch, in ms.
    pub wall_ms: u64,
}

struct Current {
    index: usize,
    report: RankReport,
    started: Instant,
    ready_at: Option<Instant>,
}

fn spawn_worker(exe: &PathBuf, file: &PathBuf, start: usize, log: &PathBuf, work: &PathBuf, t0: u64, device: u32) -> Result<Child, HwError> {
    let out = std::fs::File::create(work.join(format!("worker-{start}.out")))
        .map_err(|e| HwError::io(format!("creating files in {}", work.display()), e))?;
    let err = std::fs::File::create(work.join(format!("worker-{start}.err")))
        .map_err(|e| HwError::io(format!("creating files in {}", work.display()), e))?;
    Command::new(exe)
        .arg("batch-worker")
        .args(["--start", &start.to_string(), "--device", &device.to_string(), "--t0-ns", &t0.to_string()])
        .arg("--programs")
        .arg(file)
        .arg("--log")
        .arg(log)
        .arg("--work-dir")
        .arg(work)
        .env("NCCL_NVLS_ENABLE", "0")
        .env("CUDA_MODULE_LOADING", "EAGER")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(|e| HwError::io(format!("starting {}", exe.display()), e))
}

fn kill(child: &mut Child) {
    // SAFETY: signalling the process group this supervisor created for its own child.
    unsafe {
        libc::kill(-(child.id() as i32), libc::SIGKILL);
    }
    let _ = child.wait();
}

/// Runs every program (single-rank, no NCCL) on device `opts.device`, calling `sink(index, observation)` for each in
/// order. Hangs and failures are outcomes, as in [`crate::supervisor::run`].
///
/// Errors: a program has more than one rank or uses NCCL ([`HwError::Format`]); the worker cannot be started, or
/// fails twice in a row before running any program ([`HwError::Io`], [`HwError::Format`] with its message).
pub fn run_batch(
    programs: &[Program],
    opts: &BatchOptions,
    sink: &mut dyn FnMut(usize, Observation),
) -> Result<BatchStats, HwError> {
    let begin = Instant::now();
    let mut plans: Vec<Result<Plan, String>> = Vec::with_capacity(programs.len());
    let mut lines = String::new();
    for p in programs {
        if p.ranks.len() != 1 || crate::rank::used_comms(p).iter().any(|&u| u) {
            return Err(HwError::Format(format!("program `{}`: batch runs take single-rank programs without NCCL", p.name)));
        }
        plans.push(lower::lower_with(p, &lower::LowerOptions::from_env()).map_err(|e| HwError::Lower(e).to_string()));
        lines.push_str(&ron::to_string(p).map_err(|e| HwError::Format(format!("serializing `{}`: {e}", p.name)))?);
        lines.push('\n');
    }
    let exe = match &opts.worker_exe {
        Some(e) => e.clone(),
        None => std::env::current_exe().map_err(|e| HwError::io("finding the current executable", e))?,
    };
    let work = match &opts.work_dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("cuorder-batch-{}-{}", std::process::id(), monotonic_ns())),
    };
    std::fs::create_dir_all(&work).map_err(|e| HwError::io(format!("creating {}", work.display()), e))?;
    let file = work.join("programs.ronl");
    std::fs::write(&file, lines).map_err(|e| HwError::io(format!("writing {}", file.display()), e))?;
    let t0 = monotonic_ns();
    let mut stats = BatchStats { programs: programs.len(), ..Default::default() };
    let variables = std::env::vars()
        .filter(|(k, _)| {
            (k.starts_with("NCCL_") || k.starts_with("CUDA_") || k.starts_with("CUORDER_")) && k != "CUORDER_HW_REEXEC"
        })
        .chain([("CUDA_MODULE_LOADING".to_string(), "EAGER".to_string())])
        .collect();
    let mut env = Environment { hostname: hostname(), variables, ..Default::default() };
    let mut next = 0usize;
    let mut fruitless_starts = 0;
    let mut worker_error: Option<String> = None;
    while next < programs.len() {
        let log = work.join(format!("worker-{next}.log"));
        let mut child = spawn_worker(&exe, &file, next, &log, &work, t0, opts.device)?;
        stats.workers += 1;
        let started_at = next;
        let mut reader = LogReader::new(log.clone());
        let mut cur: Option<Current> = None;
        let spawned = Instant::now();
        let mut finish = |idx: usize, rep: &RankReport, end: RunEnd, env: &Environment, stats: &mut BatchStats| {
            let obs = match &plans[idx] {
                Ok(plan) => build_observation(&programs[idx], plan, std::slice::from_ref(rep), &end, env.clone(), opts.timeout),
                Err(m) => Observation {
                    format_version: FORMAT_VERSION,
                    program: programs[idx].name.clone(),
                    outcome: Outcome::Failed { rank: Some(0), message: m.clone() },
                    environment: env.clone(),
                    timeout_ms: opts.timeout.as_millis() as u64,
                    versions: Default::default(),
                    reads: vec![],
                    ops: vec![],
                    clock_anchors: vec![],
                },
            };
            match obs.outcome {
                Outcome::Completed => stats.completed += 1,
                Outcome::Hung { .. } => stats.hung += 1,
                Outcome::Failed { .. } => stats.failed += 1,
            }
            sink(idx, obs);
        };
        loop {
            let mut exited = false;
            for m in reader.poll() {
                let Ok(m) = m else { continue };
                match m {
                    Msg::Hello { gpu, driver_version, nccl_version, .. } => {
                        if env.gpus.is_empty() {
                            env.gpus.push(gpu);
                            env.driver_version = driver_version;
                            env.nccl_version = nccl_version;
                        }
                    }
                    Msg::Program { index, .. } => {
                        cur = Some(Current { index: index as usize, report: RankReport::default(), started: Instant::now(), ready_at: None });
                    }
                    Msg::ProgramEnd { index, .. } => {
                        if let Some(c) = cur.take() {
                            let end = match (&c.report.fatal, c.report.synced) {
                                (None, true) => RunEnd::AllExited,
                                (Some(f), _) => RunEnd::Failed { rank: Some(0), message: f.clone() },
                                (None, false) => RunEnd::Failed { rank: Some(0), message: "the program ended without its final synchronization".into() },
                            };
                            finish(c.index, &c.report, end, &env, &mut stats);
                        }
                        next = index as usize + 1;
                    }
                    Msg::Done => {}
                    Msg::Fatal { message } if cur.is_none() => worker_error = Some(message),
                    other => {
                        if let Some(c) = cur.as_mut() {
                            if matches!(other, Msg::Ready { .. }) {
                                c.ready_at = Some(Instant::now());
                            }
                            c.report.apply(other);
                        }
                    }
                }
            }
            if let Ok(Some(_)) = child.try_wait() {
                exited = true;
            }
            if exited {
                // Pick up the last lines.
                for m in reader.poll().into_iter().flatten() {
                    if let Some(c) = cur.as_mut() {
                        c.report.apply(m);
                    }
                }
                if let Some(c) = cur.take() {
                    let msg = c.report.fatal.clone().unwrap_or_else(|| {
                        let err = std::fs::read_to_string(work.join(format!("worker-{started_at}.err"))).unwrap_or_default();
                        format!("the batch worker died during the program: {}", err.trim())
                    });
                    finish(c.index, &c.report, RunEnd::Failed { rank: Some(0), message: msg }, &env, &mut stats);
                    next = c.index + 1;
                }
                break;
            }
            let hung = cur.as_ref().is_some_and(|c| match c.ready_at {
                Some(r) => r.elapsed() > opts.timeout,
                None => c.started.elapsed() > opts.setup_timeout,
            });
            if hung {
                kill(&mut child);
                for m in reader.poll().into_iter().flatten() {
                    if let Some(c) = cur.as_mut() {
                        c.report.apply(m);
                    }
                }
                let c = cur.take().expect("a current program");
                let end = if c.ready_at.is_some() {
                    RunEnd::Watchdog
                } else {
                    RunEnd::Failed { rank: Some(0), message: format!("set-up did not finish within {} s", opts.setup_timeout.as_secs()) }
                };
                finish(c.index, &c.report, end, &env, &mut stats);
                next = c.index + 1;
                break;
            }
            if cur.is_none() && next == started_at && spawned.elapsed() > opts.setup_timeout {
                kill(&mut child);
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        if next == started_at {
            fruitless_starts += 1;
            if fruitless_starts >= 2 {
                let err = std::fs::read_to_string(work.join(format!("worker-{started_at}.err"))).unwrap_or_default();
                let why = worker_error.clone().unwrap_or_default();
                return Err(HwError::Format(format!(
                    "the batch worker failed twice before running program {started_at}: {why} {}",
                    err.trim()
                )));
            }
        } else {
            fruitless_starts = 0;
        }
    }
    if opts.work_dir.is_none() {
        let _ = std::fs::remove_dir_all(&work);
    }
    stats.wall_ms = begin.elapsed().as_millis() as u64;
    Ok(stats)
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

#[cfg(test)]
mod tests {
    use cuorder_sim::cover::{program, CoverOptions};

    /// Every generated single-GPU program can run on the executor: it lowers, is single-rank and uses no NCCL.
    #[test]
    fn cover_programs_lower_for_the_batch_executor() {
        let o = CoverOptions::default();
        for seed in 0..400 {
            let p = program(seed, &o);
            assert_eq!(p.ranks.len(), 1);
            assert!(!crate::rank::used_comms(&p).iter().any(|&u| u), "seed {seed} uses NCCL");
            if let Err(e) = crate::lower::lower(&p) {
                panic!("seed {seed}: {}", e.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"));
            }
        }
    }
}
