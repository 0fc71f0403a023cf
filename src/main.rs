//! The `cuorder` command: `check` a program for deadlocks, data races and undefined behaviour, `explore` it with
//! a chosen strategy and save findings, `replay` one, or `run` one execution and show its timeline. Exit codes: 0 no problem possible, 1 problem found, 2 bad input or usage,
//! 3 inconclusive (a limit stopped the search).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use cuorder::{load_profile, load_program, report, timeline, LoadError};
use cuorder_model::semantics::Semantics;
use cuorder_sim::explore::Limits;
use cuorder_sim::run::{replay, run};
use cuorder_sim::scheduler::RandomScheduler;

#[derive(Parser)]
#[command(name = "cuorder", version, about = "Will this multi-GPU CUDA + NCCL program deadlock, race, or do what its author thinks?")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum StrategyArg {
    Exhaustive,
    Random,
    Pct,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Backend {
    Model,
    Hw,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Explore every execution and report deadlocks, data races and undefined behaviour.
    Check {
        /// The program (RON; see docs/program-format.md).
        program: PathBuf,
        /// A built-in profile (portable, eager) or a profile file (RON).
        #[arg(long, default_value = "portable")]
        profile: String,
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
        /// Stop after this many distinct states.
        #[arg(long, default_value_t = 2_000_000)]
        max_states: usize,
    },
    /// Run one execution and print it as a per-rank, per-stream timeline.
    Run {
        program: PathBuf,
        #[arg(long, default_value = "portable")]
        profile: String,
        /// Seed of the random scheduler.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Instead of a random execution, replay the witness of the N-th finding of `check` (1-based).
        #[arg(long)]
        witness: Option<usize>,
        /// Write the execution as a RON trace to this file.
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Stop after this many steps.
        #[arg(long, default_value_t = 1_000_000)]
        max_steps: usize,
        /// `model`: one execution of the model. `hw`: run on this machine's GPUs (one per rank; needs the
        /// `cuorder-hw` binary next to this one), write the observation to --trace, and check it against the model.
        #[arg(long, value_enum, default_value = "model")]
        backend: Backend,
        /// Watchdog for a hardware run, in seconds (hangs are reported as observations).
        #[arg(long, default_value_t = 20)]
        timeout_s: u64,
    },
    /// Check a hardware observation (from `cuorder-hw run`) against the model: prints "agrees" or each
    /// disagreement. Exit 0 agrees, 1 disagrees, 2 bad input.
    Conform {
        /// The program (omit with --dir).
        #[arg(required_unless_present = "dir")]
        program: Option<PathBuf>,
        /// The observation (omit with --dir).
        #[arg(required_unless_present = "dir")]
        trace: Option<PathBuf>,
        /// Instead: re-check every folder with a MANIFEST.ron under DIR and print a summary.
        #[arg(long, conflicts_with_all = ["program", "trace"])]
        dir: Option<PathBuf>,
        #[arg(long, default_value = "portable")]
        profile: String,
        #[arg(long, default_value_t = 2_000_000)]
        max_states: usize,
        /// With --dir: instead of checking, print the statistics of the packed runs (hardware outcome × model
        /// verdict, race pairs seen unordered, pooled-block reuse seen).
        #[arg(long, requires = "dir")]
        stats: bool,
    },
    /// Explore executions with a chosen strategy: `exhaustive` (as `check`), or sampled `random` walks and `pct`
    /// (seeded: execution i uses seed SEED+i, and the output is the same whatever --jobs). Exit codes as `check`;
    /// sampling never proves the absence of a problem, so a clean sampled run exits 3.
    Explore {
        program: PathBuf,
        #[arg(long, value_enum, default_value = "random")]
        strategy: StrategyArg,
        #[arg(long, default_value = "portable")]
        profile: String,
        /// Seed of the first execution (sampling strategies).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Executions to run (sampling strategies).
        #[arg(long, default_value_t = 1000)]
        executions: u64,
        /// PCT bug depth: the number of priority changes plus one.
        #[arg(long, default_value_t = 3)]
        depth: u32,
        /// Stop at the first finding.
        #[arg(long)]
        first: bool,
        /// Stop starting executions after this many seconds (the result then depends on the machine's speed).
        #[arg(long)]
        time_limit: Option<f64>,
        /// Worker threads for sampling strategies (default: all cores). The output does not depend on it.
        #[arg(long)]
        jobs: Option<usize>,
        /// Stop after this many distinct states (exhaustive).
        #[arg(long, default_value_t = 2_000_000)]
        max_states: usize,
        /// Steps per execution before it is cut off (sampling strategies).
        #[arg(long, default_value_t = 10_000_000)]
        max_steps: usize,
        /// Save every finding as a replayable artifact `finding-N-KIND.ron` in this folder.
        #[arg(long)]
        save: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
    },
    /// Replay a saved finding (from `explore --save`): prints the execution's timeline and "reproduced", or where
    /// the replay diverged. Exit 0 reproduced, 1 diverged or the problem is gone, 2 bad input.
    Replay {
        artifact: PathBuf,
        /// The program to replay on (default: the path recorded in the artifact).
        #[arg(long)]
        program: Option<PathBuf>,
    },
    /// Write random well-formed programs as RON files: `p2p` (default; two-rank point-to-point agreement programs,
    /// `gen-SEED.ron`) or `cover` (the whole single-GPU model: threads, every stream kind, events, queries, copies,
    /// memsets, host access, barriers, the caching allocator; `cover-SEED.ron`).
    Gen {
        /// Which generator: p2p or cover.
        #[arg(default_value = "p2p")]
        generator: String,
        /// Ranks of `cover` programs (1 = single GPU; more adds collectives).
        #[arg(long, default_value_t = 1)]
        ranks: u32,
        /// First seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// How many programs (seeds seed, seed+1, ...).
        #[arg(long, default_value_t = 1)]
        count: u64,
        /// Output folder (created).
        #[arg(long, alias = "dir")]
        out: PathBuf,
    },
    /// List the built-in profiles, or say what one assumes, in plain words, followed by its RON.
    Profile {
        /// A built-in profile (portable, eager) or a profile file (RON).
        name: Option<String>,
    },
    /// Print a rule of the model (docs/semantics.md): its statement, sources, how the model enforces it, the
    /// profile knobs, an example. Without RULE, list every rule id with its title.
    Explain {
        /// A rule id as messages cite it: S1-S6, N1-N11, C1, P1-P5.
        rule: Option<String>,
    },
}

fn fail(e: LoadError) -> ExitCode {
    eprint!("{}", e.rendered);
    ExitCode::from(2)
}

/// The profile and the program a command names.
fn load_both(
    profile: &str,
    program: &std::path::Path,
    color: bool,
) -> Result<(cuorder_model::profile::Profile, cuorder_model::program::Program), LoadError> {
    let prof = load_profile(profile)?;
    let (prog, _) = load_program(program, color)?;
    Ok((prof, prog))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let color = std::io::stderr().is_terminal();
    match cli.command {
        Command::Check { program, profile, format, max_states } => {
            let (prof, prog) = match load_both(&profile, &program, color) {
                Ok(x) => x,
                Err(e) => return fail(e),
            };
            let rep = report::check(&prog, &prof, &Limits { max_states, ..Limits::default() });
            match format {
                Format::Text => print!("{}", rep.to_text()),
                Format::Json => println!("{}", serde_json::to_string_pretty(&rep).expect("report serializes")),
            }
            ExitCode::from(rep.exit_code() as u8)
        }
        Command::Run { program, profile, seed, witness, trace, max_steps, backend, timeout_s } => {
            let (prof, prog) = match load_both(&profile, &program, color) {
                Ok(x) => x,
                Err(e) => return fail(e),
            };
            let sem = Semantics::new(&prog, &prof);
            if backend == Backend::Hw {
                return run_hw(&sem, trace.as_deref(), timeout_s);
            }
            let tr = match witness {
                None => run(&sem, &mut RandomScheduler::new(seed), Some(seed), max_steps),
                Some(n) => {
                    let rep = report::check(&prog, &prof, &Limits::default());
                    let Some(f) = n.checked_sub(1).and_then(|i| rep.findings.get(i)) else {
                        eprintln!(
                            "error: --witness {n}: findings are numbered from 1, and check found {} under profile {} (pass the same --profile as to check)",
                            rep.findings.len(),
                            prof.name
                        );
                        return ExitCode::from(2);
                    };
                    match replay(&sem, &f.finding.witness) {
                        Ok(t) => t,
                        Err(d) => {
                            eprintln!("error: {d}");
                            return ExitCode::from(2);
                        }
                    }
                }
            };
            print!("{}", timeline::render(&sem, &tr));
            if let Some(path) = trace {
                let text = ron::ser::to_string_pretty(&tr, ron::ser::PrettyConfig::default()).expect("trace serializes");
                if let Err(e) = std::fs::write(&path, text + "\n") {
                    eprintln!("error: cannot write {}: {e}", path.display());
                    return ExitCode::from(2);
                }
            }
            ExitCode::SUCCESS
        }
        Command::Conform { dir: Some(dir), stats: true, .. } => match cuorder::traces::stats::batch_stats(&dir) {
            Ok(s) => {
                print!("{}", s.to_text());
                ExitCode::SUCCESS
            }
            Err(e) => fail(e),
        },
        Command::Explore {
            program,
            strategy,
            profile,
            seed,
            executions,
            depth,
            first,
            time_limit,
            jobs,
            max_states,
            max_steps,
            save,
            format,
        } => {
            let (prof, prog) = match load_both(&profile, &program, color) {
                Ok(x) => x,
                Err(e) => return fail(e),
            };
            let sem = Semantics::new(&prog, &prof);
            let sampling = |s: cuorder_sim::strategy::Strategy| cuorder_sim::strategy::SampleOptions {
                strategy: s,
                seed,
                executions,
                time_limit: time_limit.map(std::time::Duration::from_secs_f64),
                first,
                jobs: jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1),
                max_steps,
            };
            let (ex, header, seeds, hits) = match strategy {
                StrategyArg::Exhaustive => {
                    let ex = cuorder_sim::explore::explore(&sem, &Limits { max_states, first, ..Limits::default() });
                    let n = ex.findings.len();
                    (ex, "strategy exhaustive".to_string(), vec![None; n], None)
                }
                StrategyArg::Random | StrategyArg::Pct => {
                    let s = if strategy == StrategyArg::Random {
                        cuorder_sim::strategy::Strategy::Random
                    } else {
                        cuorder_sim::strategy::Strategy::Pct { depth: depth.max(1) }
                    };
                    let r = cuorder_sim::strategy::sample(&sem, &sampling(s));
                    let header = format!(
                        "strategy {}, seeds {}..{}: {} executions, {} steps",
                        s.name(),
                        seed,
                        seed.wrapping_add(r.executions),
                        r.executions,
                        r.steps
                    );
                    (r.exploration, header, r.seeds.into_iter().map(Some).collect(), Some((r.hits, r.executions)))
                }
            };
            let rep = report::build_report(&sem, &ex);
            let strategy_name = header.trim_start_matches("strategy ").split(',').next().unwrap_or("").to_string();
            if let Some(dir) = &save {
                let bytes = std::fs::read(&program).unwrap_or_default();
                let artifacts: Vec<cuorder::artifact::Artifact> = rep
                    .findings
                    .iter()
                    .enumerate()
                    .map(|(i, f)| cuorder::artifact::Artifact {
                        format_version: cuorder::artifact::ARTIFACT_FORMAT_VERSION,
                        cuorder_version: env!("CARGO_PKG_VERSION").to_string(),
                        program: program.clone(),
                        program_hash: cuorder::artifact::program_hash(&bytes),
                        profile: prof.clone(),
                        strategy: strategy_name.clone(),
                        seed: seeds[i],
                        kind: f.kind.clone(),
                        summary: f.text.lines().next().unwrap_or("").to_string(),
                        key: ex.keys[i].clone(),
                        schedule: f.finding.witness.clone(),
                    })
                    .collect();
                if let Err(e) = cuorder::artifact::save_all(dir, &artifacts) {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            }
            match format {
                Format::Text => {
                    println!("{header}");
                    if let Some((hits, n)) = &hits {
                        for (i, h) in hits.iter().enumerate() {
                            println!("  finding {} seen in {h} of {n} executions (first with seed {})", i + 1, seeds[i].unwrap_or(0));
                        }
                    }
                    if let Some(dir) = &save {
                        println!("  saved {} finding(s) to {} (`cuorder replay FILE`)", rep.findings.len(), dir.display());
                    }
                    print!("{}", rep.to_text());
                }
                Format::Json => println!("{}", serde_json::to_string_pretty(&rep).expect("report serializes")),
            }
            let sampled_clean = strategy != StrategyArg::Exhaustive && rep.findings.is_empty();
            ExitCode::from(if sampled_clean { 3 } else { rep.exit_code() as u8 })
        }
        Command::Replay { artifact, program } => {
            let a = match cuorder::artifact::load(&artifact) {
                Ok(a) => a,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            let path = program.unwrap_or_else(|| a.program.clone());
            let (prog, _) = match load_program(&path, color) {
                Ok(x) => x,
                Err(e) => return fail(e),
            };
            if let Ok(bytes) = std::fs::read(&path) {
                let h = cuorder::artifact::program_hash(&bytes);
                if h != a.program_hash {
                    eprintln!("warning: {} changed since the finding was saved (hash {h}, saved {})", path.display(), a.program_hash);
                }
            }
            let sem = Semantics::new(&prog, &a.profile);
            match cuorder::artifact::replay_artifact(&sem, &a) {
                cuorder::artifact::Replayed::Reproduced(t) => {
                    print!("{}", timeline::render(&sem, &t));
                    println!("reproduced: {}: {}", a.kind, a.summary);
                    ExitCode::SUCCESS
                }
                cuorder::artifact::Replayed::Vanished(t) => {
                    print!("{}", timeline::render(&sem, &t));
                    println!("not reproduced: the schedule replays, but the {} is not there at its end", a.kind);
                    ExitCode::from(1)
                }
                cuorder::artifact::Replayed::Diverged(d) => {
                    println!("diverged at step {}: {:?} is not enabled there (the program or the model changed)", d.at, d.step);
                    ExitCode::from(1)
                }
            }
        }
        Command::Conform { dir: Some(dir), .. } => conform_dir(&dir),
        Command::Conform { program: Some(program), trace: Some(trace), profile, max_states, dir: None, .. } => {
            let (prof, prog) = match load_both(&profile, &program, color) {
                Ok(x) => x,
                Err(e) => return fail(e),
            };
            let obs = match cuorder::load_observation(&trace) {
                Ok(o) => o,
                Err(e) => return fail(e),
            };
            let sem = Semantics::new(&prog, &prof);
            let c = cuorder_sim::conform::conform(&sem, &obs, &Limits { max_states, ..Limits::default() });
            print!("{}", c.to_text());
            ExitCode::from(if c.agrees() { 0 } else { 1 })
        }
        Command::Conform { .. } => {
            eprintln!("error: conform needs PROGRAM and TRACE, or --dir DIR");
            ExitCode::from(2)
        }
        Command::Gen { generator, ranks, seed, count, out } => {
            let make: Box<dyn Fn(u64) -> cuorder_model::program::Program> = match generator.as_str() {
                "p2p" => {
                    let opt = cuorder_sim::gen::GenOptions::default();
                    Box::new(move |s| cuorder_sim::gen::program(s, &opt))
                }
                "cover" if (1..=64).contains(&ranks) => {
                    let opt = cuorder_sim::cover::CoverOptions { ranks, ..Default::default() };
                    Box::new(move |s| cuorder_sim::cover::program(s, &opt))
                }
                "cover" => {
                    eprintln!("error: --ranks must be 1 to 64, got {ranks}");
                    return ExitCode::from(2);
                }
                other => {
                    eprintln!("error: unknown generator `{other}`: the generators are p2p and cover");
                    return ExitCode::from(2);
                }
            };
            if let Err(e) = std::fs::create_dir_all(&out) {
                eprintln!("error: cannot create {}: {e}", out.display());
                return ExitCode::from(2);
            }
            for s in seed..seed.saturating_add(count) {
                let p = make(s);
                let text = ron::ser::to_string_pretty(&p, ron::ser::PrettyConfig::default()).expect("program serializes");
                let path = out.join(format!("{}.ron", p.name));
                if let Err(e) = std::fs::write(&path, text + "\n") {
                    eprintln!("error: cannot write {}: {e}", path.display());
                    return ExitCode::from(2);
                }
            }
            println!("wrote {count} program(s) to {}", out.display());
            ExitCode::SUCCESS
        }
        Command::Profile { name } => match name {
            None => {
                for n in cuorder_model::profile::Profile::BUILTIN {
                    let p = cuorder_model::profile::Profile::builtin(n).unwrap();
                    println!("{n}: {}", p.description);
                }
                ExitCode::SUCCESS
            }
            Some(n) => match load_profile(&n) {
                Ok(p) => {
                    println!("profile {}: {}", if p.name.is_empty() { &n } else { &p.name }, p.description);
                    println!("assumes:");
                    for a in p.assumptions() {
                        println!("  - {a}");
                    }
                    println!();
                    println!("{}", ron::ser::to_string_pretty(&p, ron::ser::PrettyConfig::default()).expect("profile serializes"));
                    ExitCode::SUCCESS
                }
                Err(e) => fail(e),
            },
        },
        Command::Explain { rule } => {
            use cuorder_model::rule::Rule;
            match rule {
                None => {
                    for r in Rule::ALL {
                        let title = r.doc().and_then(|d| d.lines().next()).map(|l| l.trim_start_matches("## ")).unwrap_or(r.id());
                        println!("{title}");
                    }
                    ExitCode::SUCCESS
                }
                Some(id) => match Rule::from_id(&id).and_then(|r| r.doc()) {
                    Some(doc) => {
                        println!("{doc}");
                        ExitCode::SUCCESS
                    }
                    None => {
                        let ids: Vec<&str> = Rule::ALL.iter().map(|r| r.id()).collect();
                        eprintln!("error: no rule {id:?}; the rules are {}", ids.join(", "));
                        ExitCode::from(2)
                    }
                },
            }
        }
    }
}

/// `cuorder conform --dir DIR`: every manifest folder under DIR, one line per trace, and totals.
fn conform_dir(dir: &std::path::Path) -> ExitCode {
    let found = cuorder::traces::manifests(dir);
    if found.is_empty() {
        eprintln!("error: no MANIFEST.ron under {}", dir.display());
        return ExitCode::from(2);
    }
    let root = std::env::current_dir().unwrap_or_default();
    let (mut total, mut agree, mut explained, mut unexplained, mut inconclusive) = (0, 0, 0, 0, 0);
    for m in found {
        let checks = match cuorder::traces::check_folder(&m, &root) {
            Ok(c) => c,
            Err(e) => return fail(e),
        };
        for c in checks {
            total += 1;
            if let Some(why) = &c.conformance.inconclusive {
                inconclusive += 1;
                println!("{}: inconclusive: {why}", c.trace.display());
                continue;
            }
            let verdict = match (c.conformance.agrees(), &c.explained) {
                (true, None) => {
                    agree += 1;
                    "agrees".to_string()
                }
                (false, Some(why)) => {
                    explained += 1;
                    format!("disagrees (explained: {why})")
                }
                (true, Some(_)) => {
                    unexplained += 1;
                    "agrees, but the manifest expects a disagreement".to_string()
                }
                (false, None) => {
                    unexplained += 1;
                    format!("DISAGREES\n{}", c.conformance.to_text())
                }
            };
            println!("{}: {verdict}", c.trace.display());
        }
    }
    println!(
        "{total} traces: {agree} agree, {explained} explained disagreements, {unexplained} unexplained, {inconclusive} inconclusive"
    );
    ExitCode::from(if unexplained == 0 { 0 } else { 1 })
}

/// `cuorder run --backend hw`: run on the GPUs, keep the observation, and check it against the model.
/// Exit 0 agrees, 1 disagrees or inconclusive, 2 bad input, 3 no GPU here.
fn run_hw(sem: &Semantics, trace: Option<&std::path::Path>, timeout_s: u64) -> ExitCode {
    let opts = cuorder_hw::supervisor::RunOptions {
        timeout: std::time::Duration::from_secs(timeout_s),
        ..Default::default()
    };
    let obs = match cuorder_hw::supervisor::run(sem.program, &opts) {
        Ok(o) => o,
        Err(e @ (cuorder_hw::error::HwError::NoGpu(_) | cuorder_hw::error::HwError::NotEnoughGpus { .. })) => {
            eprintln!("cuorder: cannot run on hardware here: {e}");
            return ExitCode::from(3);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    println!("hardware: {:?}", obs.outcome);
    if let Some(path) = trace {
        if let Err(e) = std::fs::write(path, obs.to_ron() + "\n") {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    let c = cuorder_sim::conform::conform(sem, &obs, &Limits::default());
    print!("{}", c.to_text());
    ExitCode::from(if c.agrees() { 0 } else { 1 })
}
