//! The `cuorder` command line: its clap types and the dispatch to one module per command (`src/cmd/`). Exit codes:
//! 0 no problem possible, 1 problem found, 2 bad input or usage, 3 inconclusive (a limit stopped the search);
//! what each command concluded decides them in `cuorder::cli::Verdict`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use cuorder::cli::{Budgets, Format, TorchArgs};

mod cmd;

const EXIT_CODES: &str = "\
Exit codes:
  0  no problem possible (check), agrees (conform), done (other commands)
  1  a problem found (check), a disagreement or a failed gate (conform)
  2  bad input or usage (the errors are printed; as JSON with --format json)
  3  inconclusive: a budget (--max-states, --max-memory-mb, --max-time-s) or Ctrl-C stopped the search
     (or a run, a shrink, gen) first, or a sampled or bounded exploration found nothing; what was done
     so far is printed (a second Ctrl-C quits at once, exit 130)";

#[derive(Parser)]
#[command(
    name = "cuorder",
    version,
    about = "Will this multi-GPU CUDA + NCCL program deadlock, race, or do what its author thinks?",
    after_help = EXIT_CODES
)]
struct Cli {
    /// Colors in diagnostics: `auto` (when stderr is a terminal and NO_COLOR is not set), `always` or `never`.
    #[arg(long, value_enum, default_value = "auto", global = true)]
    color: ColorChoice,
    /// Progress bar on stderr for `check` and `explore` (states or executions so far, the rate, the limits):
    /// `auto` (when stderr is a terminal), `always` or `never`. stdout is the same bytes either way.
    #[arg(long, value_enum, default_value = "auto", global = true)]
    progress: ColorChoice,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum StrategyArg {
    /// Every execution (as `check`).
    Exhaustive,
    /// Seeded random walks.
    Random,
    /// Probabilistic concurrency testing (seeded walks with random agent priorities; --depth).
    Pct,
    /// Preemption-bounded exhaustive search (CHESS): every execution with at most --bound preemptions (default 2),
    /// bounds 0, 1, .. in turn; systematic, no seed.
    Bounded,
    /// Every execution up to equivalence: dynamic partial-order reduction (Source-DPOR with sleep sets), stateless,
    /// dependency from what steps touch. A proof like `exhaustive`, by another algorithm.
    Dpor,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ColorChoice {
    Auto,
    Always,
    Never,
}

impl ColorChoice {
    /// Whether to draw the progress bar on stderr (`auto`: when stderr is a terminal; NO_COLOR does not matter).
    fn progress(self) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => std::io::stderr().is_terminal(),
        }
    }

    /// Whether to color stderr.
    fn enabled(self) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stderr().is_terminal()
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Backend {
    Model,
    Hw,
}

#[derive(Subcommand)]
enum Command {
    /// Explore every execution and report deadlocks, data races and undefined behaviour.
    Check(CheckArgs),
    /// Run one execution and print it as a per-rank, per-stream timeline.
    Run(RunArgs),
    /// Check a hardware observation (from `cuorder-hw run`) against the model: prints "agrees" or each
    /// disagreement. Exit 0 agrees, 1 disagrees, 2 bad input, 3 inconclusive (a budget stopped the search before
    /// the model's executions showed the observation).
    Conform(ConformArgs),
    /// Time one execution with a cost model (a discrete-event run over the model's steps): makespan, per-rank
    /// bubble fraction, per-stream busy and idle time, the critical path. Exit 0 the execution completed with no
    /// finding, 1 it raced, deadlocked, broke a rule, read a stale value, timed out or left watched work overdue
    /// (N9), also if it then stopped at --max-steps or --max-time-s, 2 bad input, 3 it stopped at either with no finding.
    Time(TimeArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    Completions(CompletionsArgs),
    /// Print the man page (roff) to stdout.
    Man,
    /// Explore executions with a chosen strategy: `exhaustive` (as `check`), sampled `random` walks and `pct`
    /// (seeded: execution i uses seed SEED+i, and the output is the same whatever --jobs), or `bounded`: every
    /// execution with at most --bound preemptions (a step of another host thread, stream or communicator while the
    /// one that ran last could still go on), searched for bounds 0, 1, ... up to --bound; each finding says the
    /// bound at which it first appeared, or `dpor`: every execution up to equivalence (dynamic partial-order
    /// reduction, stateless; a proof like `exhaustive`, by another algorithm). Exit codes as `check`; sampling and
    /// bounded search never prove the absence of a problem (a bounded search says nothing of executions with more
    /// preemptions, unless a bound cut none: it then says so, and exits as `check`), so a clean run exits 3.
    Explore(ExploreArgs),
    /// Replay a saved finding (from `explore --save`): prints the execution's timeline and "reproduced", or where
    /// the replay diverged. Exit 0 reproduced, 1 diverged or the problem is gone, 2 bad input.
    Replay(ReplayArgs),
    /// Shrink a saved finding (from `explore --save`): remove ops (as written) and ranks while a problem of the same
    /// kind (and rule) persists; write the minimal program and its finding artifact. Exit 0 shrunk, 1 the problem
    /// was not found in the program to begin with, 2 bad input.
    Shrink(ShrinkArgs),
    /// Write random well-formed programs (the agreement-test generator) as RON files `gen-SEED.ron`, or, with
    /// `gen pipeline`, a pipeline-parallel training schedule as Megatron-LM runs it.
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Gen(GenArgs),
    /// List the built-in profiles, or say what one assumes, in plain words, followed by its RON.
    Profile(ProfileArgs),
    /// List the built-in cost models of `cuorder time`, or print one as RON (a starting point for your own file).
    Costs(CostsArgs),
    /// Print a rule of the model (docs/semantics.md): its statement, sources, how the model enforces it, the
    /// profile knobs, an example. Without RULE, list every rule id with its title.
    Explain(ExplainArgs),
}

/// The arguments of `cuorder check`.
#[derive(clap::Args)]
struct CheckArgs {
    /// The program (RON; see docs/program-format.md).
    program: PathBuf,
    /// A built-in profile (portable, eager) or a profile file (RON).
    #[arg(long, default_value = "portable")]
    profile: String,
    /// `text` for people, `json` for scripts (docs/json.md; load errors too).
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    #[command(flatten)]
    budgets: Budgets,
    /// Stop at the first finding (as `explore --strategy exhaustive --first`): the verdict then covers only the
    /// executions explored, and says so.
    #[arg(long)]
    first: bool,
    #[command(flatten)]
    torch: TorchArgs,
}

/// `cuorder run`'s arguments.
#[derive(clap::Args)]
struct RunArgs {
    program: PathBuf,
    /// A built-in profile (portable, eager) or a profile file (RON).
    #[arg(long, default_value = "portable")]
    profile: String,
    /// Seed of the random scheduler (not with --witness, which replays a schedule).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Instead of a random execution, replay the witness of the N-th finding of `check` (1-based). Refused with
    /// --seed and --max-steps, which it would ignore (the witness is replayed whole).
    #[arg(long, conflicts_with_all = ["seed", "max_steps"])]
    witness: Option<usize>,
    /// Write the execution as Chrome trace-event JSON to this file (times from --costs; logical time, one unit
    /// per step, without it).
    #[arg(long)]
    timeline: Option<PathBuf>,
    /// The cost model that times --timeline (as `cuorder time --costs`).
    #[arg(long, requires = "timeline")]
    costs: Option<String>,
    /// Write the execution as a RON trace to this file.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Stop a random execution after this many steps (not with --witness).
    #[arg(long, default_value_t = 1_000_000)]
    max_steps: usize,
    /// Budgets: of the search that finds the --witness, and --max-time-s of a random run too.
    #[command(flatten)]
    budgets: Budgets,
    /// `model`: one execution of the model. `hw`: run on this machine's GPUs (one per rank; needs the
    /// `cuorder-hw` binary next to this one), write the observation to --trace, and check it against the model.
    #[arg(long, value_enum, default_value = "model")]
    backend: Backend,
    /// Watchdog for a hardware run, in seconds (hangs are reported as observations).
    #[arg(long, default_value_t = 20)]
    timeout_s: u64,
    #[command(flatten)]
    torch: TorchArgs,
}

/// `cuorder conform`'s arguments.
#[derive(clap::Args)]
struct ConformArgs {
    /// The program (omit with --dir).
    #[arg(required_unless_present = "dir")]
    program: Option<PathBuf>,
    /// The observation (omit with --dir).
    #[arg(required_unless_present = "dir")]
    trace: Option<PathBuf>,
    /// Instead: re-check every folder with a MANIFEST.ron under DIR (a CI gate: every bad file is reported
    /// and the rest still checked; .ron files in folders without a manifest are reported), print a summary, and
    /// exit 1 unless every trace agrees or is explained by its manifest.
    #[arg(long, conflicts_with_all = ["program", "trace"])]
    dir: Option<PathBuf>,
    /// With --dir: also write the results as a JUnit XML report to FILE.
    #[arg(long, requires = "dir")]
    junit: Option<PathBuf>,
    /// A built-in profile (portable, eager) or a profile file (RON).
    #[arg(long, default_value = "portable")]
    profile: String,
    #[command(flatten)]
    budgets: Budgets,
    /// With --dir: instead of checking, print the statistics of the packed runs (hardware outcome × model
    /// verdict, race pairs seen unordered, pooled-block reuse seen).
    #[arg(long, requires = "dir")]
    stats: bool,
}

/// `cuorder time`'s arguments.
#[derive(clap::Args)]
struct TimeArgs {
    program: PathBuf,
    /// A built-in profile (portable, eager) or a profile file (RON).
    #[arg(long, default_value = "portable")]
    profile: String,
    /// A built-in cost model (h200-nvlink, ideal, logical) or a cost model file (RON; docs/timing.md).
    #[arg(long, default_value = "h200-nvlink")]
    costs: String,
    /// Replace the cost model's connection set-up time (`connect_ns`, N7), ns per direction. The first send,
    /// recv or collective between two ranks connects them, and a job pays that in its first iteration only:
    /// `--connect-ns 0` times the program as a later iteration runs (the ranks still meet at each set-up). A
    /// number of ns, or a duration with its unit as in programs (`"100 ms"`, `"250 us"`).
    #[arg(long, value_parser = parse_ns)]
    connect_ns: Option<u64>,
    /// Do not run again taking only the steps the profile guarantees when this run took others (an eager send
    /// beyond the guaranteed window, N2; a kernel beside a spinning NCCL kernel, S1). That second run reports a
    /// hang a platform may give (the send-first deadlock) and can double the time `time` takes.
    #[arg(long)]
    no_withheld_run: bool,
    /// Seed of tie-breaking between steps that fire at the same time (and of --jitter).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Add a uniform draw from 0..=NS nanoseconds to every step's cost (at most 10^12, 1000 s). A number of ns,
    /// or a duration with its unit as in programs (`"5 us"`).
    #[arg(long, default_value_t = 0, value_parser = parse_jitter)]
    jitter: u64,
    /// Write the execution as Chrome trace-event JSON (open in https://ui.perfetto.dev or chrome://tracing) to
    /// this file (not `-`: standard output carries the report).
    #[arg(long)]
    timeline: Option<PathBuf>,
    /// Also print a compact text timeline (one row per host thread and stream) this many columns wide (10 to
    /// 1000; text output only: refused with --format json).
    #[arg(long, value_parser = clap::value_parser!(u16).range(10..=1000))]
    lanes: Option<u16>,
    /// Compare the prediction with a hardware run of the program (an observation from `cuorder-hw run`):
    /// makespan and kernel end times (text output only: refused with --format json).
    #[arg(long)]
    compare: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// Stop after this many steps.
    #[arg(long, default_value_t = 100_000_000)]
    max_steps: usize,
    /// Stop after this many seconds of wall-clock time, counted from the command's start (loading the program
    /// included; the report then covers the steps taken so far, as at --max-steps, exit 3 unless something was
    /// found; where it stops depends on the machine). Default: none.
    #[arg(long, value_parser = parse_seconds)]
    max_time_s: Option<f64>,
    #[command(flatten)]
    torch: TorchArgs,
}

/// `cuorder completions`'s arguments.
#[derive(clap::Args)]
struct CompletionsArgs {
    shell: clap_complete::Shell,
}

/// `cuorder explore`'s arguments.
#[derive(clap::Args)]
struct ExploreArgs {
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
    /// PCT bug depth: the number of priority changes plus one (1 to 10000; the bugs PCT is for have depths of
    /// 1 to a few).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    depth: u32,
    /// Bounded strategy: the most preemptions an execution may have (0 to 64). A preemption is a step of another
    /// agent (a host thread, a stream, a communicator's collective) while the agent that took the last step could
    /// still take one; switching away from a blocked or finished agent is free. Bounds 0, 1, .. up to this one
    /// are searched in turn, each finding says the smallest that showed it, and the search stops early once a
    /// bound cut no execution (it was then complete); the cost grows roughly like (steps x agents)^bound.
    #[arg(long, default_value_t = cuorder_sim::explore::DEFAULT_BOUND, value_parser = clap::value_parser!(u32).range(0..=64))]
    bound: u32,
    /// Stop at the first finding (sampling: the lowest-numbered execution with a finding, ended at that finding;
    /// exhaustive, bounded and dpor: the first finding of the search).
    #[arg(long)]
    first: bool,
    /// Stop starting executions (exhaustive, bounded, dpor: stop the search) after this many seconds (the result then
    /// depends on the machine's speed). Also `--max-time-s`, as `check` calls it.
    #[arg(long, visible_alias = "max-time-s", value_parser = parse_seconds)]
    time_limit: Option<f64>,
    /// Worker threads for sampling strategies (default: all cores). The output does not depend on it.
    #[arg(long)]
    jobs: Option<usize>,
    /// Stop after this many distinct states (exhaustive, bounded; dpor: states along its executions, each time).
    #[arg(long, default_value_t = 2_000_000)]
    max_states: usize,
    /// Stop (exhaustive, bounded, dpor) when the search would hold more than this many MiB: its estimate of the
    /// states it holds, or the process's resident memory where the system reports it (Linux).
    #[arg(long, default_value_t = 4096)]
    max_memory_mb: usize,
    /// Steps per execution before it is cut off (sampling strategies).
    #[arg(long, default_value_t = 10_000_000)]
    max_steps: usize,
    /// Save every finding as a replayable artifact `finding-N-KIND.ron` in this folder.
    #[arg(long)]
    save: Option<PathBuf>,
    /// `text` for people, `json` for scripts (docs/json.md: `check`'s document and an `explore` object; load
    /// errors too).
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    #[command(flatten)]
    torch: TorchArgs,
}

/// `cuorder replay`'s arguments.
#[derive(clap::Args)]
struct ReplayArgs {
    artifact: PathBuf,
    /// The program to replay on (default: the path recorded in the artifact).
    #[arg(long)]
    program: Option<PathBuf>,
}

/// `cuorder shrink`'s arguments.
#[derive(clap::Args)]
struct ShrinkArgs {
    artifact: PathBuf,
    /// The program (default: the path recorded in the artifact).
    #[arg(long)]
    program: Option<PathBuf>,
    /// Where to write the minimal program (default: next to the artifact, `NAME-min.ron`; an existing folder:
    /// `NAME-min.ron` in it); its finding artifact goes beside it as `NAME-min.finding.ron`.
    #[arg(long, short)]
    out: Option<PathBuf>,
    /// States the exhaustive search of one candidate may visit (after 20 random walks found nothing).
    #[arg(long, default_value_t = 5_000)]
    max_states: usize,
    /// Candidate programs tried at most.
    #[arg(long, default_value_t = 2_000)]
    max_candidates: usize,
}

/// `cuorder gen`'s arguments.
#[derive(clap::Args)]
struct GenArgs {
    #[command(subcommand)]
    what: Option<GenWhat>,
    /// First seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// How many programs (seeds seed, seed+1, ...).
    #[arg(long, default_value_t = 1)]
    count: u64,
    /// Output folder (created).
    #[arg(long, required = true)]
    out: Option<PathBuf>,
}

/// `cuorder profile`'s arguments.
#[derive(clap::Args)]
struct ProfileArgs {
    /// A built-in profile (portable, eager) or a profile file (RON).
    name: Option<String>,
}

/// `cuorder costs`'s arguments.
#[derive(clap::Args)]
struct CostsArgs {
    /// A built-in cost model (h200-nvlink, ideal, logical) or a cost model file (RON).
    name: Option<String>,
}

/// `cuorder explain`'s arguments.
#[derive(clap::Args)]
struct ExplainArgs {
    /// A rule id as messages cite it: S1-S8, N1-N13, C1, P1-P5, V1.
    rule: Option<String>,
}

#[derive(Subcommand)]
enum GenWhat {
    /// Programs covering the whole single-GPU model (threads, every stream kind, events, queries, copies, memsets,
    /// host access, barriers, the caching allocator), as `cover-SEED.ron`: the hardware batch generator.
    Cover(CoverArgs),
    /// A pipeline-parallel schedule (one rank per stage, compute and NCCL streams, grouped send/recv between
    /// neighbouring stages, events after the group), correct by construction unless --bug or --race.
    Pipeline(PipelineArgs),
}

/// `cuorder gen cover`'s arguments.
#[derive(clap::Args)]
struct CoverArgs {
    /// Ranks (1 = single GPU; more adds collectives).
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
}

/// `cuorder gen pipeline`'s arguments.
#[derive(clap::Args)]
struct PipelineArgs {
    #[arg(long, value_enum)]
    schedule: ScheduleArg,
    /// Pipeline stages (= ranks).
    #[arg(long)]
    stages: u32,
    /// Microbatches per iteration.
    #[arg(long)]
    microbatches: u32,
    /// Model chunks per stage (interleaved only; default 2 there, 1 otherwise).
    #[arg(long)]
    chunks: Option<u32>,
    /// Bytes of every activation and gradient message: an integer or a size such as "16 MiB".
    #[arg(long, default_value = "16 MiB", value_parser = parse_bytes)]
    bytes: u64,
    /// Issue each call's sends before its recvs, ungrouped: neighbours deadlock under rendezvous.
    #[arg(long, conflicts_with = "race")]
    bug: bool,
    /// Record the NCCL end event inside the group (before ncclGroupEnd): a data race.
    #[arg(long)]
    race: bool,
    /// `ron`: the program (docs/program-format.md). `promela`: the same pipeline at stage granularity for Spin.
    #[arg(long, value_enum, default_value = "ron")]
    emit: EmitArg,
    /// One thread per rank with every op written out, instead of one thread on every rank with loops over
    /// microbatches and conditions on `stage` (the SPMD form). Both load to the same program; interleaved is
    /// always unrolled.
    #[arg(long)]
    unroll: bool,
    /// Write here instead of standard output.
    #[arg(short = 'o', long = "output")]
    output: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
enum ScheduleArg {
    Gpipe,
    #[value(name = "1f1b")]
    OneFOneB,
    Interleaved,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum EmitArg {
    Ron,
    Promela,
}

fn parse_bytes(s: &str) -> Result<u64, String> {
    cuorder_model::format::parse_size(s)
}

/// A duration flag in nanoseconds: a bare number of ns, or a number and a unit as programs write durations
/// (`"100 ms"`, `"250 us"`; cuorder_model::format::parse_duration).
fn parse_ns(s: &str) -> Result<u64, String> {
    cuorder_model::format::parse_duration(s).map_err(|e| format!("{e} (give nanoseconds, or a number with a unit: ns, us, ms, s)"))
}

/// `--jitter`: [`parse_ns`], at most 10^12 ns (1000 s).
fn parse_jitter(s: &str) -> Result<u64, String> {
    match parse_ns(s)? {
        ns if ns <= 1_000_000_000_000 => Ok(ns),
        ns => Err(format!("{ns} ns is more than the largest jitter, 10^12 ns (1000 s)")),
    }
}

/// `--time-limit`: a finite, non-negative number of seconds, at most 10^9 (about 31 years).
fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && (0.0..=1e9).contains(&x) => Ok(x),
        Ok(_) => Err(format!("{s:?} is not a number of seconds from 0 to 1000000000")),
        Err(e) => Err(format!("{s:?} is not a number of seconds: {e}")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let ctx = cmd::Ctx { color: cli.color.enabled(), progress: cli.progress.progress() };
    match cli.command {
        Command::Check(a) => cmd::check::run(&ctx, a),
        Command::Run(a) => cmd::run::run(&ctx, a),
        Command::Conform(a) => cmd::conform::run(&ctx, a),
        Command::Time(a) => cmd::time::run(&ctx, a),
        Command::Completions(a) => cmd::completions::run(a),
        Command::Man => cmd::man::run(),
        Command::Explore(a) => cmd::explore::run(&ctx, a),
        Command::Replay(a) => cmd::replay::run(&ctx, a),
        Command::Shrink(a) => cmd::shrink::run(&ctx, a),
        Command::Gen(a) => cmd::gen::run(&ctx, a),
        Command::Profile(a) => cmd::profile::run(a),
        Command::Costs(a) => cmd::costs::run(a),
        Command::Explain(a) => cmd::explain::run(a),
    }
}
