//! Calibration (`cuorder-hw calibrate`): measures the undocumented behaviours of this machine's CUDA + NCCL platform
//! with probe programs run through the ordinary executor, and writes them as a [`Profile`] (the semantic parameters
//! the model reads) plus [`Measurements`] (every probe, the eager-window search traces, and the timing figures a
//! timed simulation needs).
//!
//! Each probe is one isolated [`supervisor::run`] under a short watchdog; a hang is an answer, not an error. The
//! probes (see [`probes`]):
//! - N2 eager window: after a warm-up, rank 0's sends must finish before rank 1 posts its receives (a host barrier
//!   between them); searched by size for 1, 2, 3 consecutive sends ([`search`]).
//! - N5: send on stream A, receive on stream B of one communicator, both ranks, larger than the eager window.
//! - S1: crossed send/receive over two communicators on two streams.
//! - N7: ungrouped (non-mirrored) and grouped first contact on a fresh pair; a late peer (host blocking).
//! - Timing: P2P ping-pong and grouped exchange by size, kernel launches, event record/wait ([`measure`]).
//!
//! The order puts the cheap, always-completing timing probes first (they check the whole pipeline), then the eager
//! search for one send (its result sizes the "large" messages of N5 and S1), N5, S1, first contact, and the
//! searches for several sends. A time budget stops starting new probes; what was not run is recorded as skipped
//! and the profile falls back to the `portable` value for what was not measured.

pub mod measure;
pub mod probes;
pub mod search;

use crate::observation::{Environment, Observation, OpId, Outcome};
use crate::supervisor::{self, RunOptions};
use cuorder_model::describe::bytes;
use cuorder_model::profile::{NonMirrored, Profile};
use cuorder_model::program::Program;
use measure::{EventTiming, KernelTiming, P2pPoint};
use probes::{GIB, KIB, MIB};
use search::{Fit, SearchParams, SearchResult};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The format version of [`Measurements`].
pub const MEASUREMENTS_VERSION: u32 = 1;

/// A part of the calibration (each can be skipped).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Stage {
    Timing,
    Eager,
    N5,
    S1,
    FirstContact,
}

impl Stage {
    pub const ALL: [Stage; 5] = [Stage::Timing, Stage::Eager, Stage::N5, Stage::S1, Stage::FirstContact];

    /// Parses `timing`, `eager`, `n5`, `s1`, `first-contact` (case-insensitive).
    pub fn parse(s: &str) -> Option<Stage> {
        match s.to_ascii_lowercase().as_str() {
            "timing" => Some(Stage::Timing),
            "eager" => Some(Stage::Eager),
            "n5" => Some(Stage::N5),
            "s1" => Some(Stage::S1),
            "first-contact" | "n7" => Some(Stage::FirstContact),
            _ => None,
        }
    }
}

/// What to measure and how long to wait.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CalibrateOptions {
    /// Watchdog of the semantic probes (hangs cost this much), after set-up.
    pub probe_timeout: Duration,
    /// Watchdog of the timing probes (they are expected to complete).
    pub timing_timeout: Duration,
    /// No probe is started once this much time has passed since the calibration began.
    pub budget: Duration,
    /// The eager search is run for each of these numbers of consecutive sends.
    pub eager_sends: Vec<u32>,
    /// Sizes (per send) of the eager search: first probe, largest probe, granule; tolerance in ppm.
    pub eager_start: u64,
    pub eager_max: u64,
    pub eager_granule: u64,
    pub eager_rel_tol_ppm: u64,
    /// Re-probe the last fitting and non-fitting sizes of each search once (reproducibility).
    pub eager_confirm: bool,
    /// Message size of the N5 and S1 probes: at least this, and at least 4 times the measured one-send window, at
    /// most `large_cap`.
    pub large_min: u64,
    pub large_cap: u64,
    /// Message size of the first-contact probes.
    pub first_contact_bytes: u64,
    /// How long the late peer sleeps before its receive.
    pub late_peer_sleep: Duration,
    /// P2P timing sizes and repetitions.
    pub timing_sizes: Vec<u64>,
    pub timing_reps: u32,
    /// Empty kernels per launch series.
    pub launch_count: u32,
    /// Repetitions of the event probe.
    pub event_reps: u32,
    /// Stages not to run.
    pub skip: Vec<Stage>,
    /// Set `NCCL_DEBUG=INFO` for the first-contact and P2P timing probes (their NCCL log is kept in the probe's
    /// folder).
    pub nccl_debug_info: bool,
    /// Profile name (default: derived from GPU, link and NCCL version).
    pub name: Option<String>,
    /// Link name (default: from `nvidia-smi topo -m`, else from the measured bandwidth).
    pub link: Option<String>,
}

impl Default for CalibrateOptions {
    fn default() -> Self {
        CalibrateOptions {
            probe_timeout: Duration::from_secs(3),
            timing_timeout: Duration::from_secs(15),
            budget: Duration::from_secs(300),
            eager_sends: vec![1, 2, 3],
            eager_start: 4 * KIB,
            eager_max: GIB,
            eager_granule: 4 * KIB,
            eager_rel_tol_ppm: 15_000,
            eager_confirm: true,
            large_min: 256 * MIB,
            large_cap: 4 * GIB,
            first_contact_bytes: KIB,
            late_peer_sleep: Duration::from_millis(500),
            timing_sizes: (0..10).map(|i| (4 * KIB) << (2 * i)).collect(),
            timing_reps: 5,
            launch_count: 1000,
            event_reps: 50,
            skip: vec![],
            nccl_debug_info: true,
            name: None,
            link: None,
        }
    }
}

/// How one probe ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProbeOutcome {
    Completed,
    /// The watchdog fired.
    Hung,
    /// A CUDA or NCCL call failed, or a rank crashed: the message.
    Failed(String),
    /// The executor could not run it.
    Error(String),
    /// Not run (the budget was spent).
    Skipped(String),
}

impl ProbeOutcome {
    fn short(&self) -> String {
        match self {
            ProbeOutcome::Completed => "Completed".into(),
            ProbeOutcome::Hung => "Hung".into(),
            ProbeOutcome::Failed(m) => format!("Failed: {}", first_line(m)),
            ProbeOutcome::Error(m) => format!("Error: {}", first_line(m)),
            ProbeOutcome::Skipped(m) => format!("Skipped: {m}"),
        }
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// One probe run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeRecord {
    /// 1-based, in run order (the probe folder's prefix).
    pub index: u32,
    /// The program's name.
    pub program: String,
    pub outcome: ProbeOutcome,
    /// Wall time of the whole run (set-up, watchdog, tear-down), in ms.
    pub wall_ms: u64,
    /// Watchdog of the run, in ms.
    pub timeout_ms: u64,
}

/// One probe of the eager search.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EagerPoint {
    pub bytes_per_send: u64,
    pub total_bytes: u64,
    pub outcome: ProbeOutcome,
}

/// The eager search for one number of consecutive sends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EagerSearch {
    pub sends: u32,
    pub params: SearchParams,
    /// Every probe in order (the search trace).
    pub probes: Vec<EagerPoint>,
    /// The largest size per send that completed, and the smallest that hung.
    pub largest_fit_per_send: Option<u64>,
    pub smallest_hang_per_send: Option<u64>,
    /// `sends * largest_fit_per_send`.
    pub largest_fit_total: Option<u64>,
    /// Why the search stopped early, if it did.
    pub stopped: Option<String>,
    /// Whether the answers were monotone in size (including the confirmation probes).
    pub monotone: bool,
    /// The confirmation probes (last fitting size, then last hanging size), when run.
    pub confirm: Vec<EagerPoint>,
}

/// The first-contact probes (N7).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirstContact {
    pub bytes: u64,
    /// Both ranks: ungrouped send then receive on a fresh pair (not mirrored).
    pub ungrouped: Option<ProbeOutcome>,
    /// When the ungrouped probe hung: `Some(true)` if every host had returned from all its NCCL calls (the set-up
    /// finished on the host and the hang is on the device), `Some(false)` if a host was still inside one (the
    /// host-level wait that `NonMirrored::Hang` models).
    #[serde(default)]
    pub ungrouped_calls_returned: Option<bool>,
    /// When the ungrouped probe hung: whether both sends finished (a device trace saw their end).
    #[serde(default)]
    pub ungrouped_sends_finished: Option<bool>,
    /// Both ranks: {send, receive} in one group on a fresh pair (mirrored).
    pub grouped: Option<ProbeOutcome>,
    /// Host time of rank 0's outermost `ncclGroupEnd` in the grouped probe (the connection set-up), in ns.
    pub grouped_connect_host_ns: Option<u64>,
    /// Rank 0 sends (ungrouped) to a fresh peer that sleeps `late_peer_sleep_ns` before its receive.
    pub late_peer: Option<ProbeOutcome>,
    pub late_peer_sleep_ns: u64,
    /// Host time of rank 0's `ncclSend` call in the late-peer probe, in ns.
    pub late_peer_send_host_ns: Option<u64>,
}

/// The timing figures.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timing {
    pub p2p: Vec<P2pPoint>,
    /// `t(n) = p2p_latency_ns + n / p2p_bandwidth_bytes_per_s` for one-way P2P time ([`measure::p2p_fit`]).
    pub p2p_latency_ns: Option<u64>,
    pub p2p_bandwidth_bytes_per_s: Option<u64>,
    pub kernel: Option<KernelTiming>,
    pub events: Option<EventTiming>,
}

/// The link between the GPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// `nvlink`, `pcie` or `unknown`.
    pub kind: String,
    /// E.g. `NV18`, `PIX`.
    pub detail: Option<String>,
    /// Where it came from: `option`, `nvidia-smi topo -m`, `bandwidth`, `none`.
    pub source: String,
}

/// Everything a calibration measured (the sidecar of the profile).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measurements {
    pub format_version: u32,
    /// The profile's name.
    pub profile: String,
    /// `cuorder-hw` version that measured.
    pub tool: String,
    /// UTC date of the calibration (YYYY-MM-DD).
    pub date: String,
    /// The environment of the first two-rank probe.
    pub environment: Option<Environment>,
    /// The driver's version string (`nvidia-smi`), when known.
    pub driver: Option<String>,
    pub link: Link,
    pub options: CalibrateOptions,
    pub eager: Vec<EagerSearch>,
    /// The message size of the N5 and S1 probes.
    pub large_bytes: u64,
    /// N5: send on stream A, receive on stream B of one communicator.
    pub n5_two_streams: Option<ProbeOutcome>,
    /// N5 control: the same in one group.
    pub n5_grouped: Option<ProbeOutcome>,
    /// S1: crossed send/receive over two communicators.
    pub s1_crossed: Option<ProbeOutcome>,
    pub first_contact: FirstContact,
    pub timing: Timing,
    /// Every probe, in run order.
    pub probes: Vec<ProbeRecord>,
    /// The profile derived from all this.
    pub derived: Option<Profile>,
    /// What the derivation concluded and why, one line each.
    pub notes: Vec<String>,
    /// Wall time of the whole calibration, in ms.
    pub wall_ms: u64,
}

impl Measurements {
    pub fn to_ron(&self) -> String {
        ron::ser::to_string_pretty(self, ron::ser::PrettyConfig::new().struct_names(true))
            .unwrap_or_else(|e| format!("/* serialization failed: {e} */"))
    }

    pub fn from_ron(text: &str) -> Result<Measurements, ron::error::SpannedError> {
        ron::from_str(text)
    }
}

/// Runs probe programs. The hardware one is [`HwRunner`]; tests use fakes.
pub trait ProbeRunner {
    /// Runs `program` with watchdog `timeout`, with the extra environment variables `env` set for its processes.
    fn run(&mut self, program: &Program, timeout: Duration, env: &[(&str, &str)]) -> Result<Observation, String>;
    /// `nvidia-smi topo -m` (or similar) text, for the link.
    fn topology(&mut self) -> Option<String> {
        None
    }
    /// The driver's version string.
    fn driver(&mut self) -> Option<String> {
        None
    }
}

/// Runs probes on this machine's GPUs through [`supervisor::run`]. With `probe_dir`, each probe's run folder
/// (program, rank logs, NCCL output) and observation are kept in `probe_dir/NNN-program/`.
pub struct HwRunner {
    pub base: RunOptions,
    pub probe_dir: Option<PathBuf>,
    count: u32,
}

impl HwRunner {
    pub fn new(base: RunOptions, probe_dir: Option<PathBuf>) -> HwRunner {
        HwRunner { base, probe_dir, count: 0 }
    }
}

fn command_output(cmd: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(cmd).args(args).stdin(std::process::Stdio::null()).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

impl ProbeRunner for HwRunner {
    fn run(&mut self, program: &Program, timeout: Duration, env: &[(&str, &str)]) -> Result<Observation, String> {
        self.count += 1;
        let mut opts = self.base.clone();
        opts.timeout = timeout;
        let dir = self.probe_dir.as_ref().map(|d| d.join(format!("{:03}-{}", self.count, program.name)));
        if let Some(d) = &dir {
            opts.work_dir = Some(d.clone());
            opts.keep_work_dir = true;
        }
        // The rank processes inherit this process's environment (single-threaded here: set and restore).
        let saved: Vec<(String, Option<std::ffi::OsString>)> =
            env.iter().map(|(k, _)| (k.to_string(), std::env::var_os(k))).collect();
        for (k, v) in env {
            std::env::set_var(k, v);
        }
        let r = supervisor::run(program, &opts);
        for (k, v) in saved {
            match v {
                Some(v) => std::env::set_var(&k, v),
                None => std::env::remove_var(&k),
            }
        }
        if let (Ok(obs), Some(d)) = (&r, &dir) {
            let _ = std::fs::write(d.join("observation.ron"), obs.to_ron());
        }
        r.map_err(|e| e.to_string())
    }

    fn topology(&mut self) -> Option<String> {
        command_output("nvidia-smi", &["topo", "-m"])
    }

    fn driver(&mut self) -> Option<String> {
        command_output("nvidia-smi", &["--query-gpu=driver_version", "--format=csv,noheader"])
            .and_then(|s| s.lines().next().map(|l| l.trim().to_string()))
            .filter(|s| !s.is_empty())
    }
}

/// The link between GPU0 and GPU1 in `nvidia-smi topo -m` output: (`nvlink`|`pcie`, cell), if found.
pub fn parse_topology(text: &str) -> Option<(String, String)> {
    for line in text.lines() {
        // Strip ANSI escapes (the header is underlined).
        let clean: String = {
            let mut out = String::new();
            let mut esc = false;
            for c in line.chars() {
                if c == '\u{1b}' {
                    esc = true;
                } else if esc {
                    if c.is_ascii_alphabetic() {
                        esc = false;
                    }
                } else {
                    out.push(c);
                }
            }
            out
        };
        let toks: Vec<&str> = clean.split_whitespace().collect();
        if toks.first() == Some(&"GPU0") && toks.len() >= 3 && toks[1] == "X" {
            let cell = toks[2];
            let kind = if cell.starts_with("NV") {
                "nvlink"
            } else if ["PIX", "PXB", "PHB", "NODE", "SYS"].contains(&cell) {
                "pcie"
            } else {
                return None;
            };
            return Some((kind.to_string(), cell.to_string()));
        }
    }
    None
}

/// `22803` -> `2.28.3` (NCCL's version code; before 2.9 it was major*1000 + minor*100 + patch).
pub fn nccl_version_string(code: i32) -> String {
    if code >= 10000 {
        format!("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100)
    } else {
        format!("{}.{}.{}", code / 1000, (code % 1000) / 100, code % 100)
    }
}

/// The GPU model in a file name: `NVIDIA H200` -> `h200`, `NVIDIA GeForce RTX 4090` -> `rtx4090`.
pub fn gpu_model(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    let words: Vec<&str> =
        lower.split_whitespace().filter(|w| !["nvidia", "geforce", "tesla", "quadro"].contains(w)).collect();
    let s: String = words.concat().chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    if s.is_empty() {
        "gpu".into()
    } else {
        s
    }
}

/// `h200x2-nvlink-nccl2.28.3`.
pub fn profile_name(gpu_names: &[String], link: &str, nccl: Option<i32>) -> String {
    let model = gpu_names.first().map(|n| gpu_model(n)).unwrap_or_else(|| "gpu".into());
    let nccl = nccl.map(nccl_version_string).unwrap_or_else(|| "unknown".into());
    format!("{model}x{}-{link}-nccl{nccl}", gpu_names.len().max(1))
}

/// Today's date (UTC) as YYYY-MM-DD.
pub fn today() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    civil_date((secs / 86_400) as i64)
}

/// Days since 1970-01-01 -> YYYY-MM-DD (Howard Hinnant's algorithm).
fn civil_date(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

fn outcome_of(r: &Result<Observation, String>) -> ProbeOutcome {
    match r {
        Ok(o) => match &o.outcome {
            Outcome::Completed => ProbeOutcome::Completed,
            Outcome::Hung { .. } => ProbeOutcome::Hung,
            Outcome::Failed { message, .. } => ProbeOutcome::Failed(truncate(message, 1500)),
        },
        Err(e) => ProbeOutcome::Error(truncate(e, 1500)),
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.len() <= n {
        return s.to_string();
    }
    let mut end = n;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

fn host_dur(o: &Observation, rank: u32, index: u32) -> Option<u64> {
    let x = o.op(OpId { rank, thread: 0, index })?;
    match (x.host_enter_ns, x.host_return_ns) {
        (Some(a), Some(b)) if b >= a => Some(b - a),
        _ => None,
    }
}


/// The result of a calibration.
pub struct Calibrated {
    pub profile: Profile,
    pub measurements: Measurements,
}

struct Cal<'a> {
    runner: &'a mut dyn ProbeRunner,
    opts: &'a CalibrateOptions,
    log: &'a mut dyn FnMut(&str),
    start: Instant,
    m: Measurements,
    /// Written after every stage when set.
    partial: Option<PathBuf>,
    /// Probes in a row that failed or could not run (the machine may be unusable: after
    /// [`MAX_FAILURES_IN_ROW`] the rest is skipped).
    failures_in_row: u32,
}

/// After this many failed probes in a row the calibration stops running probes.
pub const MAX_FAILURES_IN_ROW: u32 = 4;

impl Cal<'_> {
    fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn say(&mut self, line: &str) {
        let t = self.elapsed();
        (self.log)(&format!("[{t:7.1} s] {line}"));
    }

    fn checkpoint(&mut self) {
        if let Some(p) = &self.partial {
            self.m.wall_ms = self.start.elapsed().as_millis() as u64;
            let _ = std::fs::write(p, self.m.to_ron());
        }
    }

    /// Runs one probe (unless the budget is spent); records it.
    fn probe(&mut self, program: &Program, timeout: Duration, env: &[(&str, &str)]) -> (ProbeOutcome, Option<Observation>) {
        let index = self.m.probes.len() as u32 + 1;
        let skip = if self.start.elapsed() >= self.opts.budget {
            Some(format!("budget of {} s spent", self.opts.budget.as_secs()))
        } else if self.failures_in_row >= MAX_FAILURES_IN_ROW {
            Some(format!("{} probes in a row failed: the machine looks unusable", self.failures_in_row))
        } else {
            None
        };
        if let Some(why) = skip {
            let out = ProbeOutcome::Skipped(why);
            self.m.probes.push(ProbeRecord {
                index,
                program: program.name.clone(),
                outcome: out.clone(),
                wall_ms: 0,
                timeout_ms: timeout.as_millis() as u64,
            });
            self.say(&format!("#{index:03} {}: {}", program.name, out.short()));
            return (out, None);
        }
        let t0 = Instant::now();
        let r = self.runner.run(program, timeout, env);
        let wall = t0.elapsed();
        let out = outcome_of(&r);
        if matches!(out, ProbeOutcome::Failed(_) | ProbeOutcome::Error(_)) {
            self.failures_in_row += 1;
        } else {
            self.failures_in_row = 0;
        }
        if let Ok(o) = &r {
            let two = o.environment.gpus.len() >= 2;
            let better = match &self.m.environment {
                None => true,
                Some(e) => two && e.gpus.len() < 2,
            };
            if better {
                self.m.environment = Some(o.environment.clone());
            }
        }
        self.m.probes.push(ProbeRecord {
            index,
            program: program.name.clone(),
            outcome: out.clone(),
            wall_ms: wall.as_millis() as u64,
            timeout_ms: timeout.as_millis() as u64,
        });
        self.say(&format!("#{index:03} {}: {} ({:.1} s)", program.name, out.short(), wall.as_secs_f64()));
        (out, r.ok())
    }

    fn runs(&self, s: Stage) -> bool {
        !self.opts.skip.contains(&s)
    }

    fn debug_env(&self) -> Vec<(&'static str, &'static str)> {
        if self.opts.nccl_debug_info {
            vec![("NCCL_DEBUG", "INFO")]
        } else {
            vec![]
        }
    }

    fn timing(&mut self) {
        let (prog, layout) = probes::p2p_timing(&self.opts.timing_sizes, self.opts.timing_reps);
        let mut env = self.debug_env();
        env.push(("CUORDER_HW_NO_MARKERS", "1"));
        let (_, obs) = self.probe(&prog, self.opts.timing_timeout, &env);
        if let Some(o) = obs {
            let pts = measure::p2p(&o, &layout);
            for p in &pts {
                self.say(&format!(
                    "  p2p {:>8}: one-way median {:?} ns, {:.1} GB/s; grouped exchange median {:?} ns",
                    bytes(p.bytes),
                    p.one_way_ns_median,
                    p.bandwidth_bytes_per_s.unwrap_or(0) as f64 / 1e9,
                    p.exchange_ns_median
                ));
            }
            let (lat, bw) = measure::p2p_fit(&pts);
            self.m.timing.p2p = pts;
            self.m.timing.p2p_latency_ns = lat;
            self.m.timing.p2p_bandwidth_bytes_per_s = bw;
            self.say(&format!("  p2p fit: latency {lat:?} ns, bandwidth {:.1} GB/s", bw.unwrap_or(0) as f64 / 1e9));
        }
        let (prog, layout) = probes::launch_timing(self.opts.launch_count, 50_000_000);
        let (_, obs) = self.probe(&prog, self.opts.timing_timeout, &[]);
        if let Some(o) = obs {
            let k = measure::launch(&o, &layout);
            self.say(&format!("  kernels: {k:?}"));
            self.m.timing.kernel = Some(k);
        }
        // Markers off: the event ops' end markers would sit between the kernels whose gaps are measured.
        let (prog, reps) = probes::event_timing(self.opts.event_reps, 100_000);
        let (_, obs) = self.probe(&prog, self.opts.timing_timeout, &[("CUORDER_HW_NO_MARKERS", "1")]);
        if let Some(o) = obs {
            let e = measure::events(&o, &reps);
            self.say(&format!("  events: {e:?}"));
            self.m.timing.events = Some(e);
        }
    }

    fn eager(&mut self, sends: u32, start: u64) -> EagerSearch {
        let params = SearchParams {
            start,
            max: self.opts.eager_max,
            granule: self.opts.eager_granule,
            rel_tol_ppm: self.opts.eager_rel_tol_ppm,
        };
        self.say(&format!("eager window, {sends} send(s) per probe, from {}", bytes(start)));
        let timeout = self.opts.probe_timeout;
        let mut points = Vec::new();
        let res: SearchResult = search::search(params, |n| {
            let (out, _) = self.probe(&probes::eager(n, sends), timeout, &[]);
            points.push(EagerPoint { bytes_per_send: n, total_bytes: n * sends as u64, outcome: out.clone() });
            fit_of(&out)
        });
        let mut monotone = res.monotone();
        let mut confirm = Vec::new();
        if self.opts.eager_confirm && res.stopped.is_none() {
            for n in [res.largest_fit, res.smallest_nonfit].into_iter().flatten() {
                let (out, _) = self.probe(&probes::eager(n, sends), timeout, &[]);
                let expected = if Some(n) == res.largest_fit { Fit::Fits } else { Fit::DoesNotFit };
                if fit_of(&out) != expected {
                    monotone = false;
                }
                confirm.push(EagerPoint { bytes_per_send: n, total_bytes: n * sends as u64, outcome: out });
            }
        }
        let s = EagerSearch {
            sends,
            params,
            probes: points,
            largest_fit_per_send: res.largest_fit,
            smallest_hang_per_send: res.smallest_nonfit,
            largest_fit_total: res.largest_fit.map(|n| n * sends as u64),
            stopped: res.stopped,
            monotone,
            confirm,
        };
        self.say(&format!(
            "  {sends} send(s): fits {:?}, hangs {:?} (per send){}{}",
            s.largest_fit_per_send,
            s.smallest_hang_per_send,
            if s.monotone { "" } else { "; NOT monotone/reproducible" },
            s.stopped.as_deref().map(|m| format!("; stopped: {m}")).unwrap_or_default()
        ));
        s
    }

    fn large_bytes(&self) -> u64 {
        let w = self.m.eager.iter().find(|e| e.sends == 1).and_then(|e| match (e.largest_fit_per_send, e.smallest_hang_per_send) {
            (_, Some(h)) => Some(h),
            (Some(f), None) => Some(2 * f),
            _ => None,
        });
        let want = w.map(|w| w.saturating_mul(4)).unwrap_or(0).max(self.opts.large_min);
        want.div_ceil(MIB).saturating_mul(MIB).min(self.opts.large_cap)
    }

    fn first_contact(&mut self) {
        let b = self.opts.first_contact_bytes;
        let env = self.debug_env();
        let mut fc = FirstContact { bytes: b, late_peer_sleep_ns: self.opts.late_peer_sleep.as_nanos() as u64, ..Default::default() };
        let (out, obs) = self.probe(&probes::first_contact(b, false), self.opts.probe_timeout, &env);
        fc.ungrouped = Some(out);
        (fc.ungrouped_calls_returned, fc.ungrouped_sends_finished) = obs.as_ref().map(hang_shape).unwrap_or((None, None));
        let (out, obs) = self.probe(&probes::first_contact(b, true), self.opts.probe_timeout, &env);
        fc.grouped = Some(out);
        fc.grouped_connect_host_ns = obs.as_ref().and_then(|o| host_dur(o, 0, probes::FIRST_CONTACT_GROUP_END));
        let late = probes::first_contact_late_peer(b, fc.late_peer_sleep_ns);
        let (out, obs) = self.probe(&late, self.opts.probe_timeout + self.opts.late_peer_sleep, &env);
        fc.late_peer = Some(out);
        fc.late_peer_send_host_ns = obs.as_ref().and_then(|o| host_dur(o, 0, probes::LATE_PEER_SEND));
        self.say(&format!(
            "  first contact: grouped set-up {:?} ns on the host; late peer: send call took {:?} ns",
            fc.grouped_connect_host_ns, fc.late_peer_send_host_ns
        ));
        self.m.first_contact = fc;
    }

    fn link(&mut self) {
        if let Some(l) = &self.opts.link {
            self.m.link = Link { kind: l.clone(), detail: None, source: "option".into() };
            return;
        }
        if let Some((kind, cell)) = self.runner.topology().as_deref().and_then(parse_topology) {
            self.m.link = Link { kind, detail: Some(cell), source: "nvidia-smi topo -m".into() };
            return;
        }
        // 100 GB/s one way is beyond PCIe 5.0 x16.
        self.m.link = match self.m.timing.p2p_bandwidth_bytes_per_s {
            Some(bw) if bw >= 100_000_000_000 => Link { kind: "nvlink".into(), detail: None, source: "bandwidth".into() },
            Some(_) => Link { kind: "pcie".into(), detail: None, source: "bandwidth".into() },
            None => Link { kind: "unknown".into(), detail: None, source: "none".into() },
        };
    }
}

/// For a hung run: (whether every NCCL call returned to its host, whether every send finished); (None, None) for a
/// run that did not hang.
pub fn hang_shape(o: &Observation) -> (Option<bool>, Option<bool>) {
    if !matches!(o.outcome, Outcome::Hung { .. }) {
        return (None, None);
    }
    let nccl = |k: &str| matches!(k, "Send" | "Recv" | "GroupEnd" | "Collective" | "CommInit");
    let returned = o.ops.iter().filter(|x| nccl(&x.kind)).all(|x| x.host_return_ns.is_some());
    let sends: Vec<_> = o.ops.iter().filter(|x| x.kind == "Send").collect();
    let finished = (!sends.is_empty()).then(|| sends.iter().all(|x| x.finished == Some(true)));
    (Some(returned), finished)
}

/// Re-derives the profile of `m` from the probe folders of its run (`probe_dir/NNN-PROGRAM/observation.ron`, as
/// `calibrate --probe-dir` keeps them): fills in what later versions of this code read from the observations
/// (the shape of the first-contact hang), then [`derive_profile`] again. The name stays `m.profile`.
///
/// Errors: an observation that should be there cannot be read.
pub fn rederive(m: &mut Measurements, probe_dir: &std::path::Path) -> Result<Profile, String> {
    if let Some(rec) = m.probes.iter().find(|p| p.program.starts_with("n7-first-contact-ungrouped")) {
        if matches!(rec.outcome, ProbeOutcome::Hung) {
            let path = probe_dir.join(format!("{:03}-{}", rec.index, rec.program)).join("observation.ron");
            let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let o = Observation::from_ron(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            (m.first_contact.ungrouped_calls_returned, m.first_contact.ungrouped_sends_finished) = hang_shape(&o);
        }
    }
    let (mut profile, mut notes) = derive_profile(m);
    profile.name = m.profile.clone();
    notes.push(format!(
        "re-derived by cuorder-hw {} from the measurements and the probe observations (no new device run)",
        env!("CARGO_PKG_VERSION")
    ));
    m.notes = notes;
    m.derived = Some(profile.clone());
    Ok(profile)
}

fn fit_of(out: &ProbeOutcome) -> Fit {
    match out {
        ProbeOutcome::Completed => Fit::Fits,
        ProbeOutcome::Hung => Fit::DoesNotFit,
        other => Fit::Inconclusive(other.short()),
    }
}

/// Runs the whole calibration with `runner`; progress lines go to `log`; with `partial`, the measurements so far are
/// written there after every stage (so that a killed run leaves something).
pub fn calibrate(
    runner: &mut dyn ProbeRunner,
    opts: &CalibrateOptions,
    log: &mut dyn FnMut(&str),
    partial: Option<PathBuf>,
) -> Calibrated {
    let m = Measurements {
        format_version: MEASUREMENTS_VERSION,
        profile: String::new(),
        tool: format!("cuorder-hw {}", env!("CARGO_PKG_VERSION")),
        date: today(),
        environment: None,
        driver: None,
        link: Link::default(),
        options: opts.clone(),
        eager: vec![],
        large_bytes: 0,
        n5_two_streams: None,
        n5_grouped: None,
        s1_crossed: None,
        first_contact: FirstContact::default(),
        timing: Timing::default(),
        probes: vec![],
        derived: None,
        notes: vec![],
        wall_ms: 0,
    };
    let mut c = Cal { runner, opts, log, start: Instant::now(), m, partial, failures_in_row: 0 };
    c.m.driver = c.runner.driver();
    c.say(&format!("calibration: budget {} s, probe watchdog {} ms", opts.budget.as_secs(), opts.probe_timeout.as_millis()));

    if c.runs(Stage::Timing) {
        c.say("timing: P2P ping-pong and grouped exchange, kernel launches, event record/wait");
        c.timing();
        c.checkpoint();
    }
    let first_sends = opts.eager_sends.first().copied().unwrap_or(1);
    if c.runs(Stage::Eager) && !opts.eager_sends.is_empty() {
        let s = c.eager(first_sends, opts.eager_start);
        c.m.eager.push(s);
        c.checkpoint();
    }
    c.m.large_bytes = c.large_bytes();
    if c.runs(Stage::N5) {
        c.say(&format!("N5: send on sA, recv on sB of one communicator, {}", bytes(c.m.large_bytes)));
        let (out, _) = c.probe(&probes::same_comm_two_streams(c.m.large_bytes, false), opts.probe_timeout, &[]);
        c.m.n5_two_streams = Some(out);
        let (out, _) = c.probe(&probes::same_comm_two_streams(c.m.large_bytes, true), opts.probe_timeout, &[]);
        c.m.n5_grouped = Some(out);
        c.checkpoint();
    }
    if c.runs(Stage::S1) {
        c.say(&format!("S1: crossed send/recv over two communicators and two streams, {}", bytes(c.m.large_bytes)));
        let (out, _) = c.probe(&probes::two_comms_crossed(c.m.large_bytes), opts.probe_timeout, &[]);
        c.m.s1_crossed = Some(out);
        c.checkpoint();
    }
    if c.runs(Stage::FirstContact) {
        c.say("N7: first contact on a fresh pair (ungrouped, grouped, late peer)");
        c.first_contact();
        c.checkpoint();
    }
    if c.runs(Stage::Eager) {
        let one = c.m.eager.first().and_then(|e| e.largest_fit_total);
        for &k in opts.eager_sends.iter().skip(1) {
            // Start where the "the total counts" hypothesis puts the boundary.
            let start = one.map(|w| (w / k as u64).max(opts.eager_granule)).unwrap_or(opts.eager_start);
            let s = c.eager(k, start);
            c.m.eager.push(s);
            c.checkpoint();
        }
    }
    c.link();
    let (mut profile, notes) = derive_profile(&c.m);
    profile.name = opts.name.clone().unwrap_or_else(|| {
        let env = c.m.environment.clone().unwrap_or_default();
        let names: Vec<String> = env.gpus.iter().map(|g| g.name.clone()).collect();
        profile_name(&names, &c.m.link.kind, env.nccl_version)
    });
    c.m.profile = profile.name.clone();
    c.m.notes = notes;
    c.m.derived = Some(profile.clone());
    c.m.wall_ms = c.start.elapsed().as_millis() as u64;
    c.checkpoint();
    c.say(&format!("done: profile {}", profile.name));
    Calibrated { profile, measurements: c.m }
}

/// The profile the measurements support (name left empty), with one note per conclusion.
pub fn derive_profile(m: &Measurements) -> (Profile, Vec<String>) {
    let portable = Profile::portable();
    let mut notes = Vec::new();
    let mut desc = Vec::new();

    // N2: the largest total seen to sit in one connection with no receive running.
    let eager = m.eager.iter().filter_map(|e| e.largest_fit_total).max();
    let per: Vec<String> = m
        .eager
        .iter()
        .map(|e| match (e.largest_fit_per_send, e.smallest_hang_per_send) {
            (Some(f), Some(h)) => format!("{}x{f} B fit, {}x{h} B hung", e.sends, e.sends),
            (Some(f), None) => format!("{}x{f} B fit (the largest probed)", e.sends),
            (None, Some(h)) => format!("{}x{h} B hung", e.sends),
            (None, None) => format!("{} sends: no answer", e.sends),
        })
        .collect();
    let eager_bytes = match eager {
        Some(w) => {
            notes.push(format!("N2: eager window {w} bytes per connection: the largest total seen to complete with no recv posted ({})", per.join("; ")));
            w
        }
        None if m.eager.iter().any(|e| e.smallest_hang_per_send.is_some() && e.stopped.is_none()) => {
            notes.push(format!("N2: no size completed without a recv: rendezvous ({})", per.join("; ")));
            0
        }
        None => {
            notes.push("N2: not measured; the portable value (any send may or may not complete eagerly) is kept".into());
            portable.eager_bytes_per_connection
        }
    };
    if let Some(total) = eager_total_verdict(m) {
        notes.push(format!("N2: {total}"));
        desc.push(format!("eager {eager_bytes} B ({}; {total})", per.join(", ")));
    } else {
        desc.push(format!("eager {eager_bytes} B ({})", per.join(", ")));
    }
    // The part of the window every search filled: when several sends fit less in all than one send (per-send
    // rounding), only that much is taken as guaranteed; the rest of the window may be refused.
    let smallest_total = m.eager.iter().filter_map(|e| e.largest_fit_total).min();
    let eager_guaranteed = match (eager, smallest_total) {
        // Differences within the searches' resolution (a few per cent) are not per-send rounding.
        (Some(w), Some(g)) if g.saturating_add((w / 20).max(16 * KIB)) < w => {
            notes.push(format!(
                "N2: guaranteed {g} bytes: the smallest total that completed in every search (k sends of a size \
                 that fits); beyond it, up to {w} bytes, a send may be refused. Many small sends were not probed"
            ));
            desc.push(format!("eager guaranteed {g} B (the smallest total that fitted)"));
            Some(g)
        }
        _ => None,
    };
    let granules = eager_granules(m);
    if !granules.is_empty() {
        let g: Vec<String> = granules.iter().map(|&g| bytes(g)).collect();
        notes.push(format!(
            "N2 (inference): every boundary is consistent with a window of {} B in which each send takes a whole \
             number of granules of {} (a per-send rounding, e.g. channels x slot size), not with byte-exact sharing",
            eager.unwrap_or(0),
            g.join(" or ")
        ));
    }
    if m.eager.iter().any(|e| !e.monotone) {
        notes.push("N2: some answers of the eager search were not monotone in size or not reproducible: see the probes".into());
    }

    // N5.
    let serialize = match &m.n5_two_streams {
        Some(ProbeOutcome::Hung) => {
            notes.push(format!("N5: send on sA then recv on sB of one communicator ({} each) hung: launches are serialized per communicator", m.large_bytes));
            desc.push("N5 serialized (send/recv on two streams of one comm hung)".into());
            true
        }
        Some(ProbeOutcome::Completed) => {
            notes.push("N5: send on sA then recv on sB of one communicator completed: no per-communicator serialization seen".into());
            desc.push("N5 not serialized (send/recv on two streams of one comm completed)".into());
            false
        }
        other => {
            notes.push(format!("N5: no answer ({other:?}); the portable value (serialized) is kept"));
            portable.serialize_per_comm
        }
    };
    if let Some(g) = &m.n5_grouped {
        notes.push(format!("N5 control (the same calls in one group): {}", g.short()));
    }

    // S1: one completed run shows the device *can* overlap; it guarantees nothing (S1 is a documented "may"), so the
    // profile records it as observed and keeps exploring the starving executions.
    let (independent, independent_observed) = match &m.s1_crossed {
        Some(ProbeOutcome::Completed) => {
            notes.push("S1: crossed send/recv over two communicators on two streams completed: the device ran both kernels at once here; S1 does not guarantee it, so independent progress is recorded as observed, not guaranteed".into());
            desc.push("S1 crossed sends over two comms completed (observed, not guaranteed)".into());
            (false, true)
        }
        Some(ProbeOutcome::Hung) => {
            notes.push("S1: crossed send/recv over two communicators hung: no independent progress".into());
            desc.push("S1 crossed sends over two comms hung".into());
            (false, false)
        }
        other => {
            notes.push(format!("S1: no answer ({other:?}); the portable value (no independent progress) is kept"));
            (portable.independent_progress, false)
        }
    };

    // N7.
    let fc = &m.first_contact;
    let blocked = fc.late_peer_send_host_ns.map(|ns| ns >= fc.late_peer_sleep_ns / 2);
    if let (Some(true), Some(ns)) = (blocked, fc.late_peer_send_host_ns) {
        desc.push(format!("N7 set-up blocks the host (first send to a late peer: {} ms in the call)", ns / 1_000_000));
    }
    if let Some(b) = blocked {
        notes.push(format!(
            "N7: an ungrouped first send to a peer that calls NCCL {} ms later {} ({:?} ns in the call)",
            fc.late_peer_sleep_ns / 1_000_000,
            if b { "blocked the host until the peer came" } else { "did not block the host" },
            fc.late_peer_send_host_ns
        ));
    }
    let (lazy, nonmirrored) = match &fc.ungrouped {
        Some(ProbeOutcome::Hung) if fc.ungrouped_calls_returned == Some(true) => {
            let sends = match fc.ungrouped_sends_finished {
                Some(true) => ", both sends finished",
                Some(false) => ", not every send finished",
                None => "",
            };
            notes.push(format!(
                "N7: non-mirrored ungrouped first contact hung on the device after every NCCL call had returned to its \
                 host (set-up done{sends}; the receives never finished): not the host-level wait that Hang models, \
                 so Undefined"
            ));
            desc.push(format!("N7 non-mirrored first contact hung on the device after the calls returned{sends} -> undefined"));
            (true, NonMirrored::Undefined)
        }
        Some(ProbeOutcome::Hung) => {
            notes.push("N7: non-mirrored ungrouped first contact hung: lazy connection set-up, Hang".into());
            desc.push("N7 non-mirrored first contact hung".into());
            (true, NonMirrored::Hang)
        }
        Some(ProbeOutcome::Failed(msg)) => {
            notes.push(format!("N7: non-mirrored ungrouped first contact failed ({}): lazy connection set-up, Undefined", first_line(msg)));
            desc.push(format!("N7 non-mirrored first contact failed ({}) -> undefined", short_error(msg)));
            (true, NonMirrored::Undefined)
        }
        Some(ProbeOutcome::Completed) if blocked == Some(true) => {
            notes.push("N7: non-mirrored ungrouped first contact completed, but set-up blocks the host: lazy, Undefined (the only model verdict that a completion does not contradict)".into());
            desc.push("N7 non-mirrored first contact completed, set-up host-blocking".into());
            (true, NonMirrored::Undefined)
        }
        Some(ProbeOutcome::Completed) => {
            notes.push("N7: non-mirrored ungrouped first contact completed and set-up did not block the host: connections behave as if they existed at init".into());
            desc.push("N7 first contact completed".into());
            (false, NonMirrored::Hang)
        }
        other => {
            notes.push(format!("N7: no answer ({other:?}); the portable values (connections exist at init) are kept"));
            (portable.lazy_connect, portable.nonmirrored_first_contact)
        }
    };
    if let Some(g) = &fc.grouped {
        notes.push(format!("N7: grouped first contact: {} (host set-up {:?} ns)", g.short(), fc.grouped_connect_host_ns));
    }

    let env = m.environment.clone().unwrap_or_default();
    let gpus = match env.gpus.first() {
        Some(g) => format!("{} x {}", env.gpus.len(), g.name),
        None => "unknown GPUs".into(),
    };
    let link = match &m.link.detail {
        Some(d) => format!("{} {d}", m.link.kind),
        None => m.link.kind.clone(),
    };
    let nccl = env.nccl_version.map(nccl_version_string).unwrap_or_else(|| "unknown".into());
    let driver = m.driver.clone().or(env.driver_version.map(|d| d.to_string())).unwrap_or_else(|| "unknown".into());
    let description = format!(
        "calibrated by cuorder-hw on {gpus} ({link}), driver {driver}, NCCL {nccl}, {}: {}",
        m.date,
        desc.join("; ")
    );
    // Built from `portable` so that fields this code does not measure keep their portable values.
    let mut profile = portable;
    profile.name = String::new();
    profile.description = description;
    profile.eager_bytes_per_connection = eager_bytes;
    // No window measured (the eager probes were skipped): keep the portable guarantee (none), never "all of an
    // unbounded window".
    profile.eager_bytes_guaranteed = if eager_bytes == u64::MAX { profile.eager_bytes_guaranteed } else { eager_guaranteed };
    profile.independent_progress = independent;
    profile.independent_progress_observed = independent_observed;
    profile.lazy_connect = lazy;
    profile.nonmirrored_first_contact = nonmirrored;
    profile.serialize_per_comm = serialize;
    (profile, notes)
}

/// Powers of two G (64 KiB ..= the one-send window W) such that, for every search with both a fitting and a hanging
/// size, `k` sends of the fitting size take at most W and `k` sends of the hanging size more than W when each send
/// is rounded up to whole multiples of G. Empty when fewer than two searches have both, or when byte-exact sharing
/// (G = 1) already explains every boundary.
pub fn eager_granules(m: &Measurements) -> Vec<u64> {
    let Some(w) = m.eager.iter().find(|e| e.sends == 1).and_then(|e| e.largest_fit_per_send) else { return vec![] };
    let pts: Vec<(u64, u64, u64)> = m
        .eager
        .iter()
        .filter_map(|e| Some((e.sends as u64, e.largest_fit_per_send?, e.smallest_hang_per_send?)))
        .collect();
    if pts.len() < 2 {
        return vec![];
    }
    let ok = |g: u64| pts.iter().all(|&(k, f, h)| k * f.div_ceil(g) * g <= w && k * h.div_ceil(g) * g > w);
    if ok(1) {
        return vec![];
    }
    let mut out = Vec::new();
    let mut g = 64 * KIB;
    while g <= w {
        if ok(g) {
            out.push(g);
        }
        g *= 2;
    }
    out
}

/// Whether several consecutive sends share the window ("the total counts") or each has its own.
fn eager_total_verdict(m: &Measurements) -> Option<String> {
    let one = m.eager.iter().find(|e| e.sends == 1)?.largest_fit_per_send?;
    let mut verdicts = Vec::new();
    for e in m.eager.iter().filter(|e| e.sends > 1) {
        let (Some(f), total) = (e.largest_fit_per_send, e.largest_fit_total.unwrap_or(0)) else { continue };
        // Within 10 % (and a few granules): the tolerance of two searches.
        let close = |a: u64, b: u64| a.abs_diff(b) <= (a.max(b) / 10).max(4 * e.params.granule);
        if close(total, one) {
            verdicts.push(format!("{} sends share it", e.sends));
        } else if close(f, one) {
            verdicts.push(format!("{} sends each get it", e.sends));
        } else {
            verdicts.push(format!("{} sends: {total} B in all", e.sends));
        }
    }
    if verdicts.is_empty() {
        return None;
    }
    let all_share = verdicts.iter().all(|v| v.ends_with("share it"));
    Some(if all_share { "the total of consecutive sends counts".into() } else { verdicts.join(", ") })
}

fn short_error(msg: &str) -> String {
    let l = msg.to_ascii_lowercase();
    for known in ["illegal memory access", "unhandled cuda error", "internal error", "invalid usage", "system error", "remote process"] {
        if l.contains(known) {
            return known.to_string();
        }
    }
    truncate(first_line(msg), 80)
}

/// The profile as the RON file the model reads, with a header comment.
pub fn profile_ron(p: &Profile, measurements_file: &str) -> String {
    let body = ron::ser::to_string_pretty(p, ron::ser::PrettyConfig::new()).unwrap_or_default();
    format!(
        "// Calibrated platform profile, written by `cuorder-hw calibrate`; load with `cuorder check --profile FILE`.\n\
         // Raw measurements and timing parameters: {measurements_file}\n{body}\n"
    )
}

#[cfg(test)]
mod tests;
