//! `cuorder-hw`: runs a program on this machine's GPUs and writes what it observed (`run`), writes the built-in
//! smoke programs (`smoke-programs`), reports what it finds on the machine (`env`), measures the platform and writes
//! a profile (`calibrate`, `calibration-programs`); `rank` is the hidden sub-command each rank process runs.
//!
//! Exit codes: 0 the run produced an observation (whatever its outcome); 1 an error; 2 bad input; 3 no GPU or driver.

use anyhow::Context;
use clap::{Parser, Subcommand};
use cuorder_hw::calibrate::{self, CalibrateOptions, HwRunner, Stage};
use cuorder_hw::error::HwError;
use cuorder_hw::libsearch::{self, Found, Lib};
use cuorder_hw::observation::{Evidence, Observation, Outcome};
use cuorder_hw::rank::{rank_main, RankArgs};
use cuorder_hw::supervisor::{self, RunOptions};
use cuorder_model::program::Program;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Parser)]
#[command(name = "cuorder-hw", version, about = "Run a cuorder program on real GPUs and record what it did")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run PROGRAM (the surface format, or RON of a resolved program) on this machine's GPUs, one GPU per rank, and
    /// write the observation.
    Run {
        /// The program file.
        program: PathBuf,
        /// Where to write the observation (RON).
        #[arg(long)]
        out: PathBuf,
        /// Watchdog for the program part of the run, in seconds (after set-up).
        #[arg(long, default_value_t = 20)]
        timeout_s: u64,
        /// Limit on set-up, in seconds.
        #[arg(long, default_value_t = 120)]
        setup_timeout_s: u64,
        /// Folder for the run's files (default: a fresh temporary folder).
        #[arg(long)]
        work_dir: Option<PathBuf>,
        /// Keep the run's files even when the run completes.
        #[arg(long)]
        keep_work_dir: bool,
    },
    /// Write the built-in smoke programs into DIR (one `NAME.ron` each).
    SmokePrograms {
        #[arg(long)]
        dir: PathBuf,
    },
    /// Say what this machine offers: driver, GPUs, where NCCL and NVRTC are.
    Env,
    /// Measure this machine's undocumented CUDA/NCCL behaviours with probe programs on 2 GPUs and write a profile
    /// (`OUT_DIR/NAME.ron`, loadable by `cuorder check --profile`) and its measurements
    /// (`MEASUREMENTS_DIR/NAME.measurements.ron`: every probe, the eager-window search, P2P/launch/event timing).
    Calibrate {
        /// Folder for the profile.
        #[arg(long)]
        out_dir: PathBuf,
        /// Folder for the measurements (default: OUT_DIR).
        #[arg(long)]
        measurements_dir: Option<PathBuf>,
        /// Keep every probe's run folder (program, rank logs, NCCL output, observation) here as NNN-PROGRAM/.
        #[arg(long)]
        probe_dir: Option<PathBuf>,
        /// Watchdog of each semantic probe in seconds (a hang costs this).
        #[arg(long, default_value_t = 3.0)]
        probe_timeout_s: f64,
        /// Watchdog of the timing probes in seconds.
        #[arg(long, default_value_t = 15)]
        timing_timeout_s: u64,
        /// Limit on each probe's set-up, in seconds.
        #[arg(long, default_value_t = 30)]
        setup_timeout_s: u64,
        /// No probe is started after this many seconds; what was not measured keeps the portable value.
        #[arg(long, default_value_t = 300)]
        budget_s: u64,
        /// Largest size per send of the eager-window search, in MiB.
        #[arg(long, default_value_t = 1024)]
        eager_max_mib: u64,
        /// Numbers of consecutive sends to search the eager window for (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
        eager_sends: Vec<u32>,
        /// Repetitions of each P2P timing size.
        #[arg(long, default_value_t = 5)]
        timing_reps: u32,
        /// Stages to skip: timing, eager, n5, s1, first-contact (comma-separated).
        #[arg(long, value_delimiter = ',')]
        skip: Vec<String>,
        /// Profile name (default: GPU model, count, link and NCCL version, e.g. h200x2-nvlink-nccl2.28.3).
        #[arg(long)]
        name: Option<String>,
        /// Link name (default: from `nvidia-smi topo -m`).
        #[arg(long)]
        link: Option<String>,
    },
    /// Derive the profile again from a calibration's measurements and its probe folders (no GPU needed): rewrites
    /// the measurements file and writes OUT_DIR/NAME.ron.
    CalibrateRederive {
        /// The measurements file (`NAME.measurements.ron`); rewritten with the new notes and profile.
        #[arg(long)]
        measurements: PathBuf,
        /// The run's probe folders (`--probe-dir` of `calibrate`).
        #[arg(long)]
        probe_dir: PathBuf,
        /// Folder for the profile.
        #[arg(long)]
        out_dir: PathBuf,
        /// Where the profile's header says the measurements are.
        #[arg(long)]
        measurements_ref: Option<String>,
    },
    /// Write the semantic calibration probes (default sizes) as resolved-program RON files into DIR.
    CalibrationPrograms {
        #[arg(long)]
        dir: PathBuf,
    },
    /// Run many generated single-GPU programs in few processes (the context and kernels are set up once; each
    /// program gets fresh streams, events and buffers; a hang kills only its own worker process) and write their
    /// observations packed into one file.
    Batch {
        /// Generator (only `cover`, the whole single-GPU model; programs `cover-SEED`).
        #[arg(long, default_value = "cover")]
        generator: String,
        /// First seed.
        #[arg(long)]
        seed: u64,
        /// Number of programs (seeds SEED..SEED+COUNT).
        #[arg(long)]
        count: u64,
        /// The packed observation file to write.
        #[arg(long)]
        out: PathBuf,
        /// Also write the full observation (RON) of every run that did not complete, and of every program named by
        /// --full, into this folder.
        #[arg(long)]
        full_dir: Option<PathBuf>,
        /// Programs (names, comma-separated) whose full observation is written into --full-dir.
        #[arg(long, value_delimiter = ',')]
        full: Vec<String>,
        /// Watchdog of each program after its set-up, in ms.
        #[arg(long, default_value_t = 5000)]
        timeout_ms: u64,
        /// Limit on a worker's start and each program's set-up, in seconds.
        #[arg(long, default_value_t = 60)]
        setup_timeout_s: u64,
        /// Programs per worker process (a fresh worker per chunk).
        #[arg(long, default_value_t = 1000)]
        chunk: u64,
        /// Start no chunk after this many seconds (what was not run is left out of the file).
        #[arg(long)]
        budget_s: Option<u64>,
    },
    /// One batch worker process (started by `batch`).
    #[command(hide = true)]
    BatchWorker {
        #[arg(long)]
        start: usize,
        #[arg(long)]
        device: u32,
        #[arg(long)]
        t0_ns: u64,
        #[arg(long)]
        programs: PathBuf,
        #[arg(long)]
        log: PathBuf,
        #[arg(long)]
        work_dir: PathBuf,
    },
    /// One rank process (started by `run`).
    #[command(hide = true)]
    Rank {
        #[arg(long)]
        rank: u32,
        #[arg(long)]
        device: u32,
        #[arg(long)]
        t0_ns: u64,
        #[arg(long)]
        program: PathBuf,
        #[arg(long)]
        ids: PathBuf,
        #[arg(long)]
        log: PathBuf,
        #[arg(long)]
        work_dir: PathBuf,
    },
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.cmd {
        Cmd::Rank { rank, device, t0_ns, program, ids, log, work_dir } => {
            rank_main(&RankArgs { rank, program, ids, log, work_dir, t0_ns, device })
        }
        Cmd::BatchWorker { start, device, t0_ns, programs, log, work_dir } => {
            cuorder_hw::rank::batch_worker_main(&cuorder_hw::rank::BatchWorkerArgs { programs, start, log, work_dir, t0_ns, device })
        }
        Cmd::Batch { generator, seed, count, out, full_dir, full, timeout_ms, setup_timeout_s, chunk, budget_s } => {
            if generator != "cover" {
                eprintln!("error: unknown generator `{generator}` (batch runs `cover`)");
                std::process::exit(2);
            }
            if count == 0 || chunk == 0 {
                eprintln!("error: --count and --chunk must be positive");
                std::process::exit(2);
            }
            let opts = cuorder_hw::batch::BatchOptions {
                timeout: Duration::from_millis(timeout_ms),
                setup_timeout: Duration::from_secs(setup_timeout_s),
                ..Default::default()
            };
            batch_cmd(seed, count, &out, full_dir.as_deref(), &full, opts, chunk, budget_s.map(Duration::from_secs))
        }
        Cmd::SmokePrograms { dir } => match write_smoke(&dir) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("error: {e:#}");
                1
            }
        },
        Cmd::Env => env_report(),
        Cmd::CalibrateRederive { measurements, probe_dir, out_dir, measurements_ref } => {
            rederive_cmd(&measurements, &probe_dir, &out_dir, measurements_ref)
        }
        Cmd::CalibrationPrograms { dir } => match write_programs(&dir, cuorder_hw::calibrate::probes::semantic_programs(256 << 20)) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("error: {e:#}");
                1
            }
        },
        Cmd::Calibrate {
            out_dir,
            measurements_dir,
            probe_dir,
            probe_timeout_s,
            timing_timeout_s,
            setup_timeout_s,
            budget_s,
            eager_max_mib,
            eager_sends,
            timing_reps,
            skip,
            name,
            link,
        } => {
            let mut stages = Vec::new();
            for s in &skip {
                match Stage::parse(s) {
                    Some(st) => stages.push(st),
                    None => {
                        eprintln!("error: unknown stage `{s}` (timing, eager, n5, s1, first-contact)");
                        std::process::exit(2);
                    }
                }
            }
            if !(probe_timeout_s > 0.0 && probe_timeout_s < 3600.0) || eager_sends.contains(&0) {
                eprintln!("error: --probe-timeout-s must be in (0, 3600) and --eager-sends positive");
                std::process::exit(2);
            }
            let opts = CalibrateOptions {
                probe_timeout: Duration::from_secs_f64(probe_timeout_s),
                timing_timeout: Duration::from_secs(timing_timeout_s),
                budget: Duration::from_secs(budget_s),
                eager_max: eager_max_mib << 20,
                eager_sends,
                timing_reps,
                skip: stages,
                name,
                link,
                ..CalibrateOptions::default()
            };
            let run = RunOptions { setup_timeout: Duration::from_secs(setup_timeout_s), ..RunOptions::default() };
            calibrate_cmd(&out_dir, measurements_dir.as_deref().unwrap_or(&out_dir), probe_dir, opts, run)
        }
        Cmd::Run { program, out, timeout_s, setup_timeout_s, work_dir, keep_work_dir } => {
            let opts = RunOptions {
                timeout: Duration::from_secs(timeout_s),
                setup_timeout: Duration::from_secs(setup_timeout_s),
                work_dir,
                keep_work_dir,
                ..RunOptions::default()
            };
            run_cmd(&program, &out, opts)
        }
    };
    // Exit without running destructors: NCCL and CUDA teardown can block after a hang.
    std::process::exit(code);
}

fn write_smoke(dir: &Path) -> anyhow::Result<()> {
    write_programs(dir, cuorder_hw::smoke::programs())
}

fn write_programs(dir: &Path, programs: Vec<Program>) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for p in programs {
        let path = dir.join(format!("{}.ron", p.name));
        std::fs::write(&path, cuorder_hw::smoke::to_ron(&p)).with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn load_program(path: &Path) -> Result<Program, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "program".into());
    // The surface format first; a resolved program in RON (what `smoke-programs` writes) second.
    match cuorder_model::format::load(&name, &text) {
        Ok(p) => Ok(p),
        Err(diags) => match ron::from_str::<Program>(&text) {
            // The same validation as every other way in (issue 11).
            Ok(p) => p.validate().map(|()| p).map_err(|e| format!("{} is not a valid program:\n{e}\n", path.display())),
            Err(_) => {
                let mut m = format!("{} is not a valid program:\n", path.display());
                for d in &diags {
                    m.push_str(&format!("{d}\n"));
                }
                Err(m)
            }
        },
    }
}

/// Makes NCCL (when `need_nccl`) and NVRTC loadable under cudarc's names, re-executing this process with
/// `LD_LIBRARY_PATH` extended when they were found elsewhere. Returns the NCCL library in use, if any.
fn prepare_libraries(need_nccl: bool) -> Result<Option<String>, String> {
    std::env::set_var("NCCL_NVLS_ENABLE", "0");
    let mut libs = vec![Lib::Nvrtc];
    if need_nccl {
        libs.push(Lib::Nccl);
    }
    let link_dir = std::env::temp_dir().join(format!("cuorder-hw-libs-{}", unsafe { libc::getuid() }));
    let mut dirs = Vec::new();
    let mut nccl_file = None;
    for lib in libs {
        let rep = libsearch::search_system(lib);
        match &rep.found {
            None => return Err(rep.not_found_message()),
            Some(Found::AsIs { name }) => {
                if lib == Lib::Nccl {
                    nccl_file = Some(std::env::var("CUORDER_HW_NCCL_FILE").unwrap_or_else(|_| name.clone()));
                }
            }
            Some(f @ Found::File { file, .. }) => {
                if lib == Lib::Nccl {
                    nccl_file = Some(file.display().to_string());
                }
                let mut link_dir = link_dir.clone();
                if lib == Lib::Nvrtc {
                    link_dir.push("nvrtc");
                }
                dirs.extend(
                    libsearch::ld_dirs(f, &link_dir)
                        .map_err(|e| format!("cannot make a link to {} in {}: {e}", file.display(), link_dir.display()))?,
                );
            }
        }
    }
    if dirs.is_empty() {
        return Ok(nccl_file);
    }
    let current = std::env::var("LD_LIBRARY_PATH").ok();
    let new = libsearch::prepend_ld_path(current.as_deref(), &dirs);
    if current.as_deref() == Some(new.as_str()) {
        // Already in front (a file named by CUORDER_NCCL_LIB is found as a file again after re-executing): the
        // loader looks there before its cache.
        return Ok(nccl_file);
    }
    if std::env::var("CUORDER_HW_REEXEC").as_deref() == Ok("1") {
        return Err(format!(
            "the libraries were found but still cannot be loaded after re-executing with LD_LIBRARY_PATH={}",
            current.unwrap_or_default()
        ));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable to re-execute it: {e}"))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(std::env::args_os().skip(1)).env("LD_LIBRARY_PATH", &new).env("CUORDER_HW_REEXEC", "1");
    if let Some(f) = &nccl_file {
        cmd.env("CUORDER_HW_NCCL_FILE", f);
    }
    let err = cmd.exec();
    Err(format!("re-executing with LD_LIBRARY_PATH={new} failed: {err}"))
}

fn run_cmd(program: &Path, out: &Path, mut opts: RunOptions) -> i32 {
    let prog = match load_program(program) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    if let Err(e) = supervisor::check_gpus(1) {
        eprintln!("cuorder-hw: {e}");
        return 3;
    }
    let need_nccl = cuorder_hw::rank::used_comms(&prog).iter().any(|&u| u);
    match prepare_libraries(need_nccl) {
        Ok(f) => opts.nccl_library = f,
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    }
    match supervisor::run(&prog, &opts) {
        Ok(obs) => {
            if let Err(e) = std::fs::write(out, obs.to_ron()) {
                eprintln!("error: cannot write {}: {e}", out.display());
                return 1;
            }
            print!("{}", summary(&obs));
            println!("observation written to {}", out.display());
            0
        }
        Err(e @ (HwError::NoGpu(_) | HwError::NotEnoughGpus { .. })) => {
            eprintln!("cuorder-hw: {e}");
            3
        }
        Err(e @ HwError::Lower(_)) => {
            eprintln!("error: {}: {e}", program.display());
            2
        }
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn batch_cmd(
    seed: u64,
    count: u64,
    out: &Path,
    full_dir: Option<&Path>,
    full: &[String],
    opts: cuorder_hw::batch::BatchOptions,
    chunk: u64,
    budget: Option<Duration>,
) -> i32 {
    use cuorder_hw::pack;
    use std::io::Write;
    if let Err(e) = supervisor::check_gpus(1) {
        eprintln!("cuorder-hw: {e}");
        return 3;
    }
    if let Err(e) = prepare_libraries(false) {
        eprintln!("error: {e}");
        return 1;
    }
    if let Some(d) = full_dir {
        if let Err(e) = std::fs::create_dir_all(d) {
            eprintln!("error: cannot create {}: {e}", d.display());
            return 1;
        }
    }
    let cover = cuorder_sim::cover::CoverOptions::default();
    let mut file = match std::fs::File::create(out) {
        Ok(f) => std::io::BufWriter::new(f),
        Err(e) => {
            eprintln!("error: cannot create {}: {e}", out.display());
            return 1;
        }
    };
    let header = format!(
        "{}\nmeta generator cover {} ranks={} max_threads={} max_ops={} pool={}\nmeta seeds {seed} {count}\nmeta timeout_ms {}\n",
        pack::HEADER,
        cuorder_sim::cover::COVER_VERSION,
        cover.ranks,
        cover.max_threads,
        cover.max_ops,
        cover.pool,
        opts.timeout.as_millis()
    );
    let _ = file.write_all(header.as_bytes());
    let begin = std::time::Instant::now();
    let mut last_env = String::new();
    let mut totals = cuorder_hw::batch::BatchStats::default();
    let mut s = seed;
    let end = seed.saturating_add(count);
    while s < end {
        if budget.is_some_and(|b| begin.elapsed() > b) {
            println!("budget reached: {} of {count} programs run", s - seed);
            break;
        }
        let n = chunk.min(end - s);
        let programs: Vec<Program> = (s..s + n).map(|x| cuorder_sim::cover::program(x, &cover)).collect();
        let mut write_err = None;
        let r = cuorder_hw::batch::run_batch(&programs, &opts, &mut |i, obs| {
            let env = pack::env_line(&obs.environment);
            if env != last_env {
                let _ = writeln!(file, "{env}");
                last_env = env;
            }
            if let Err(e) = writeln!(file, "{}", pack::pack(&obs, &programs[i])) {
                write_err = Some(e);
            }
            let completed = matches!(obs.outcome, Outcome::Completed);
            if let Some(d) = full_dir {
                if !completed || full.iter().any(|f| *f == obs.program) {
                    let _ = std::fs::write(d.join(format!("{}.ron", obs.program)), obs.to_ron());
                    let _ = std::fs::write(d.join(format!("{}.program.ron", obs.program)), cuorder_hw::smoke::to_ron(&programs[i]));
                }
            }
        });
        let _ = file.flush();
        if let Some(e) = write_err {
            eprintln!("error: writing {}: {e}", out.display());
            return 1;
        }
        match r {
            Ok(st) => {
                totals.programs += st.programs;
                totals.completed += st.completed;
                totals.hung += st.hung;
                totals.failed += st.failed;
                totals.workers += st.workers;
                let el = begin.elapsed().as_secs_f64();
                println!(
                    "seeds {s}..{}: {} completed, {} hung, {} failed, {} worker(s), {:.1} s; total {} programs in {el:.1} s = {:.1} programs/s",
                    s + n,
                    st.completed,
                    st.hung,
                    st.failed,
                    st.workers,
                    st.wall_ms as f64 / 1000.0,
                    totals.programs,
                    totals.programs as f64 / el
                );
            }
            Err(e) => {
                eprintln!("error: {e}");
                return 1;
            }
        }
        s += n;
    }
    println!(
        "batch done: {} programs ({} completed, {} hung, {} failed) in {:.1} s, {} worker process(es); packed observations in {}",
        totals.programs,
        totals.completed,
        totals.hung,
        totals.failed,
        begin.elapsed().as_secs_f64(),
        totals.workers,
        out.display()
    );
    0
}

fn calibrate_cmd(out_dir: &Path, meas_dir: &Path, probe_dir: Option<PathBuf>, opts: CalibrateOptions, mut run: RunOptions) -> i32 {
    if let Err(e) = supervisor::check_gpus(2) {
        eprintln!("cuorder-hw: calibration needs 2 GPUs: {e}");
        return 3;
    }
    match prepare_libraries(true) {
        Ok(f) => run.nccl_library = f,
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    }
    for d in [Some(out_dir), Some(meas_dir), probe_dir.as_deref()].into_iter().flatten() {
        if let Err(e) = std::fs::create_dir_all(d) {
            eprintln!("error: cannot create {}: {e}", d.display());
            return 1;
        }
    }
    let mut runner = HwRunner::new(run, probe_dir);
    let partial = meas_dir.join("calibration.partial.ron");
    let out = calibrate::calibrate(&mut runner, &opts, &mut |l: &str| println!("{l}"), Some(partial.clone()));
    let name = &out.profile.name;
    let meas_path = meas_dir.join(format!("{name}.measurements.ron"));
    let prof_path = out_dir.join(format!("{name}.ron"));
    let meas_ref = format!("traces/hw/calibration/{name}.measurements.ron");
    let profile_text = calibrate::profile_ron(&out.profile, &meas_ref);
    if let Err(e) = std::fs::write(&meas_path, out.measurements.to_ron()) {
        eprintln!("error: cannot write {}: {e}", meas_path.display());
        return 1;
    }
    let _ = std::fs::remove_file(&partial);
    if let Err(e) = std::fs::write(&prof_path, &profile_text) {
        eprintln!("error: cannot write {}: {e}", prof_path.display());
        return 1;
    }
    for n in &out.measurements.notes {
        println!("note: {n}");
    }
    println!("profile written to {}:\n{profile_text}", prof_path.display());
    println!("measurements written to {}", meas_path.display());
    0
}

fn rederive_cmd(meas: &Path, probe_dir: &Path, out_dir: &Path, meas_ref: Option<String>) -> i32 {
    let text = match std::fs::read_to_string(meas) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", meas.display());
            return 2;
        }
    };
    let mut m = match calibrate::Measurements::from_ron(&text) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {} is not a calibration's measurements: {e}", meas.display());
            return 2;
        }
    };
    let profile = match calibrate::rederive(&mut m, probe_dir) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    let meas_ref = meas_ref.unwrap_or_else(|| format!("traces/hw/calibration/{}.measurements.ron", profile.name));
    let prof_path = out_dir.join(format!("{}.ron", profile.name));
    let profile_text = calibrate::profile_ron(&profile, &meas_ref);
    if let Err(e) = std::fs::create_dir_all(out_dir).and_then(|_| std::fs::write(&prof_path, &profile_text)) {
        eprintln!("error: cannot write {}: {e}", prof_path.display());
        return 1;
    }
    if let Err(e) = std::fs::write(meas, m.to_ron()) {
        eprintln!("error: cannot write {}: {e}", meas.display());
        return 1;
    }
    for n in &m.notes {
        println!("note: {n}");
    }
    println!("profile written to {}:\n{profile_text}", prof_path.display());
    0
}

fn summary(o: &Observation) -> String {
    let mut s = String::new();
    let outcome = match &o.outcome {
        Outcome::Completed => "Completed".to_string(),
        Outcome::Hung { never_finished, threads } => format!(
            "Hung after {} ms: {} op(s) never finished; threads at {}",
            o.timeout_ms,
            never_finished.len(),
            threads
                .iter()
                .map(|t| format!("r{}t{}:{:?}", t.rank, t.thread, t.at))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Outcome::Failed { rank, message } => format!("Failed (rank {rank:?}): {message}"),
    };
    s.push_str(&format!("program {}: {outcome}\n", o.program));
    let gpus: Vec<String> = o.environment.gpus.iter().map(|g| format!("r{}={}", g.rank, g.name)).collect();
    s.push_str(&format!(
        "  gpus [{}] driver {:?} nccl {:?}\n",
        gpus.join(", "),
        o.environment.driver_version,
        o.environment.nccl_version
    ));
    for op in &o.ops {
        let fin = match (op.finished, op.evidence) {
            (Some(true), e) => format!("done ({e:?})"),
            (Some(false), Evidence::NeverIssued) => "never issued".into(),
            (Some(false), e) => format!("NOT finished ({e:?})"),
            (None, _) => "unknown".into(),
        };
        let host = match (op.host_enter_ns, op.host_return_ns) {
            (Some(a), Some(b)) => format!("host {:.3}..{:.3} ms", a as f64 / 1e6, b as f64 / 1e6),
            (Some(a), None) => format!("host {:.3}.. ms (no return)", a as f64 / 1e6),
            _ => String::new(),
        };
        let dev = match op.device {
            Some(d) => match (d.start_ns, d.end_ns) {
                (Some(a), Some(b)) => format!(" gpu {:.1} us", (b.saturating_sub(a)) as f64 / 1e3),
                (None, Some(_)) => " gpu end seen".into(),
                (Some(_), None) => " gpu started, no end".into(),
                (None, None) => " gpu nothing".into(),
            },
            None => String::new(),
        };
        let q = op.query_ready.map(|r| format!(" ready={r}")).unwrap_or_default();
        let err = op.error.as_deref().map(|e| format!(" ERROR {e}")).unwrap_or_default();
        s.push_str(&format!(
            "  r{}t{}#{:<3} {:<18} {:<28} {host}{dev}{q}{err}\n",
            op.op.rank, op.op.thread, op.op.index, op.kind, fin
        ));
    }
    for r in &o.reads {
        s.push_str(&format!(
            "  read r{}t{}#{}[{}] buf{}+{}..{}: {:?}\n",
            r.op.rank,
            r.op.thread,
            r.op.index,
            r.read_index,
            r.range.buf.index,
            r.range.offset,
            r.range.offset + r.range.len,
            r.seen
        ));
    }
    s
}

fn env_report() -> i32 {
    let gpus = supervisor::check_gpus(1);
    match &gpus {
        Ok(n) => println!("CUDA driver: {n} device(s), driver version {:?}", cuorder_hw_driver_version()),
        Err(e) => println!("{e}"),
    }
    for lib in [Lib::Nvrtc, Lib::Nccl] {
        let rep = libsearch::search_system(lib);
        match &rep.found {
            Some(f) => println!("{lib:?}: {f:?}"),
            None => println!("{lib:?}: {}", rep.not_found_message()),
        }
    }
    if gpus.is_err() {
        3
    } else {
        0
    }
}

fn cuorder_hw_driver_version() -> Option<i32> {
    cuorder_hw::supervisor::driver_version()
}
