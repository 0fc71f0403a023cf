//! The `cuorder` command: `check` a program for deadlocks, data races and undefined behaviour, `explore` it with
//! a chosen strategy and save findings, `replay` one, or `run` one execution and show its timeline. Exit codes: 0 no problem possible, 1 problem found, 2 bad input or usage,
//! 3 inconclusive (a limit stopped the search).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use cuorder::{load_profile, report, timeline, LoadError};
use cuorder_model::semantics::Semantics;
use cuorder_sim::explore::Limits;
use cuorder_sim::run::replay;
use cuorder_sim::scheduler::RandomScheduler;

const EXIT_CODES: &str = "\
Exit codes:
  0  no problem possible (check), agrees (conform), done (other commands)
  1  a problem found (check), a disagreement or a failed gate (conform)
  2  bad input or usage (the errors are printed; as JSON with --format json)
  3  inconclusive: a budget (--max-states, --max-memory-mb, --max-time-s) or Ctrl-C stopped the search
     (or a run) first, or a sampled or bounded exploration found nothing; what was found so far is printed
     (a second Ctrl-C quits at once, exit 130)";

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

/// The search budgets every exploring command takes.
#[derive(clap::Args, Clone, Copy)]
struct Budgets {
    /// Stop after this many distinct states.
    #[arg(long, default_value_t = 2_000_000)]
    max_states: usize,
    /// Stop when the search would hold more than this many MiB: its estimate of the states it holds, or the
    /// process's resident memory where the system reports it (Linux).
    #[arg(long, default_value_t = 4096)]
    max_memory_mb: usize,
    /// Stop after this many seconds of searching (also `--time-limit`, as `explore` calls it).
    #[arg(long, visible_alias = "time-limit", default_value_t = 600)]
    max_time_s: u64,
}

impl Budgets {
    fn limits(self) -> Limits {
        Limits {
            max_states: self.max_states,
            max_memory_bytes: self.max_memory_mb.saturating_mul(1 << 20),
            resident: true,
            max_time_ms: self.max_time_s.saturating_mul(1000),
            ..Limits::default()
        }
    }
}

/// The PyTorch dialect's settings, each overriding what the program's `torch: Torch(..)` says, so that one script is
/// checked on each PyTorch profile without editing it (docs/program-format.md). A program without PyTorch calls is
/// unaffected.
#[derive(clap::Args, Clone, Copy, Default)]
struct TorchArgs {
    /// Lower PyTorch calls as this ProcessGroupNCCL version (P3: batch_isend_irecv's end events inside the NCCL
    /// group before PR 82450, after it since).
    #[arg(long, value_enum, value_name = "VERSION")]
    torch_version: Option<TorchVersionArg>,
    /// How the default process group was initialised (P2): `lazy` (per-pair P2P communicators) or `eager`
    /// (`init_process_group(.., device_id=..)`).
    #[arg(long, value_enum, value_name = "INIT")]
    torch_init: Option<TorchInitArg>,
    /// TORCH_NCCL_AVOID_RECORD_STREAMS: works stash their tensors until `wait()` instead of `record_stream` (P4).
    #[arg(long, value_name = "true|false", action = clap::ArgAction::Set)]
    torch_avoid_record_streams: Option<bool>,
}

/// `--torch-version`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum TorchVersionArg {
    /// Before pytorch/pytorch PR 82450 (2022).
    Before82450,
    /// PyTorch 2.4: since PR 82450; new_group's members split from the default group at their first collective on
    /// it, the other ranks at the new_group call.
    #[value(name = "v2.4")]
    V2_4,
    /// Since PR 82450, as the releases after 2.4.
    Since82450,
}

/// `--torch-init`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum TorchInitArg {
    /// `init_process_group("nccl")`: communicators created lazily.
    Lazy,
    /// `init_process_group("nccl", device_id=..)`: eager (PR 132900).
    Eager,
}

impl TorchArgs {
    fn options(self) -> cuorder_model::format::TorchOptions {
        use cuorder_model::format::{TorchInit, TorchVersion};
        cuorder_model::format::TorchOptions {
            version: self.torch_version.map(|v| match v {
                TorchVersionArg::Before82450 => TorchVersion::Before82450,
                TorchVersionArg::V2_4 => TorchVersion::V2_4,
                TorchVersionArg::Since82450 => TorchVersion::Since82450,
            }),
            init: self.torch_init.map(|i| match i {
                TorchInitArg::Lazy => TorchInit::Lazy,
                TorchInitArg::Eager => TorchInit::Eager,
            }),
            avoid_record_streams: self.torch_avoid_record_streams,
        }
    }

    /// The command-line arguments that give `t` (a saved finding's settings).
    fn from_options(t: cuorder_model::format::TorchOptions) -> TorchArgs {
        use cuorder_model::format::{TorchInit, TorchVersion};
        TorchArgs {
            torch_version: t.version.map(|v| match v {
                TorchVersion::Before82450 => TorchVersionArg::Before82450,
                TorchVersion::V2_4 => TorchVersionArg::V2_4,
                TorchVersion::Since82450 => TorchVersionArg::Since82450,
            }),
            torch_init: t.init.map(|i| match i {
                TorchInit::Lazy => TorchInitArg::Lazy,
                TorchInit::Eager => TorchInitArg::Eager,
            }),
            torch_avoid_record_streams: t.avoid_record_streams,
        }
    }

    /// The settings given, as command-line flags (`--torch-version before82450`), one per setting.
    fn flags(self) -> Vec<String> {
        let mut given = Vec::new();
        if let Some(v) = self.torch_version {
            given.push(format!("--torch-version {}", v.to_possible_value().map(|p| p.get_name().to_string()).unwrap_or_default()));
        }
        if let Some(i) = self.torch_init {
            given.push(format!("--torch-init {}", i.to_possible_value().map(|p| p.get_name().to_string()).unwrap_or_default()));
        }
        if let Some(a) = self.torch_avoid_record_streams {
            given.push(format!("--torch-avoid-record-streams {a}"));
        }
        given
    }

    /// The settings given, as a line for the report (empty when none).
    fn note(self) -> String {
        let given = self.flags();
        if given.is_empty() {
            String::new()
        } else {
            format!("PyTorch calls lowered with {} (overriding the program's `torch:`)\n", given.join(", "))
        }
    }
}

/// Writes to stdout; a closed stdout (`| head -1`) ends the output quietly instead of panicking. Returns whether
/// stdout is still open.
fn say(text: &str) -> bool {
    let mut o = std::io::stdout().lock();
    match o.write_all(text.as_bytes()).and_then(|()| o.flush()) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => false,
        Err(_) => false,
    }
}

/// Writes to stderr, ignoring a closed stderr.
fn err(text: &str) {
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
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
    },
    /// Run one execution and print it as a per-rank, per-stream timeline.
    Run {
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
    },
    /// Check a hardware observation (from `cuorder-hw run`) against the model: prints "agrees" or each
    /// disagreement. Exit 0 agrees, 1 disagrees, 2 bad input, 3 inconclusive (a budget stopped the search before
    /// the model's executions showed the observation).
    Conform {
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
    },
    /// Time one execution with a cost model (a discrete-event run over the model's steps): makespan, per-rank
    /// bubble fraction, per-stream busy and idle time, the critical path. Exit 0 the execution completed with no
    /// finding, 1 it raced, deadlocked, broke a rule, read a stale value, timed out or left watched work overdue
    /// (N9), also if it then stopped at --max-steps or --max-time-s, 2 bad input, 3 it stopped at either with no finding.
    Time {
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
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    Completions {
        shell: clap_complete::Shell,
    },
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
    },
    /// Replay a saved finding (from `explore --save`): prints the execution's timeline and "reproduced", or where
    /// the replay diverged. Exit 0 reproduced, 1 diverged or the problem is gone, 2 bad input.
    Replay {
        artifact: PathBuf,
        /// The program to replay on (default: the path recorded in the artifact).
        #[arg(long)]
        program: Option<PathBuf>,
    },
    /// Shrink a saved finding (from `explore --save`): remove ops (as written) and ranks while a problem of the same
    /// kind (and rule) persists; write the minimal program and its finding artifact. Exit 0 shrunk, 1 the problem
    /// was not found in the program to begin with, 2 bad input.
    Shrink {
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
    },
    /// Write random well-formed programs (the agreement-test generator) as RON files `gen-SEED.ron`, or, with
    /// `gen pipeline`, a pipeline-parallel training schedule as Megatron-LM runs it.
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Gen {
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
    },
    /// List the built-in profiles, or say what one assumes, in plain words, followed by its RON.
    Profile {
        /// A built-in profile (portable, eager) or a profile file (RON).
        name: Option<String>,
    },
    /// List the built-in cost models of `cuorder time`, or print one as RON (a starting point for your own file).
    Costs {
        /// A built-in cost model (h200-nvlink, ideal, logical) or a cost model file (RON).
        name: Option<String>,
    },
    /// Print a rule of the model (docs/semantics.md): its statement, sources, how the model enforces it, the
    /// profile knobs, an example. Without RULE, list every rule id with its title.
    Explain {
        /// A rule id as messages cite it: S1-S8, N1-N13, C1, P1-P5, V1.
        rule: Option<String>,
    },
}

#[derive(Subcommand)]
enum GenWhat {
    /// Programs covering the whole single-GPU model (threads, every stream kind, events, queries, copies, memsets,
    /// host access, barriers, the caching allocator), as `cover-SEED.ron`: the hardware batch generator.
    Cover {
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
    },
    /// A pipeline-parallel schedule (one rank per stage, compute and NCCL streams, grouped send/recv between
    /// neighbouring stages, events after the group), correct by construction unless --bug or --race.
    Pipeline {
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
    },
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

/// Starts the progress display of a search (drawn when `draw`) and makes Ctrl-C stop it; a handler that cannot be
/// installed is said on stderr, and the search runs without it.
fn watch(draw: bool, meter: cuorder::progress::Meter) -> cuorder::progress::Watch {
    let w = cuorder::progress::Watch::start(draw, meter);
    if let Err(e) = w.stop_on_ctrl_c() {
        err(&format!("warning: {e}\n"));
    }
    w
}

/// [`fail`], or with `--format json` the JSON load-error document of `command` (docs/json.md).
fn fail_as(format: Format, command: &str, e: LoadError) -> ExitCode {
    match format {
        Format::Text => fail(e),
        Format::Json => {
            say(&cuorder::json::load_error(command, &e.issues).to_json());
            ExitCode::from(2)
        }
    }
}

fn fail(e: LoadError) -> ExitCode {
    err(&e.rendered);
    ExitCode::from(2)
}

/// The profile and the program a command names.
/// A saved finding, the program file it is about (`--program`, or found by [`cuorder::artifact::program_path`]),
/// and that program loaded, with its text; errors are printed, and their exit code (2) returned.
fn artifact_and_program(
    artifact: &std::path::Path,
    program: Option<PathBuf>,
    color: bool,
) -> Result<(cuorder::artifact::Artifact, PathBuf, cuorder_model::program::Program, String), ExitCode> {
    let o = cuorder::artifact::open(artifact, program, color).map_err(fail)?;
    Ok((o.artifact, o.path, o.program, o.text))
}

/// A step of a schedule in the words of reports ("the next call of r0 main", "r0 main #10 kernel ..."), for
/// messages about a schedule that does not fit the program; a step naming an op the program lacks is shown as
/// recorded.
fn step_words(sem: &Semantics, step: &cuorder_model::semantics::Step) -> String {
    use cuorder_model::semantics::Step;
    let ops = |t: u32| sem.program.ranks.iter().flat_map(|r| r.threads.iter()).nth(t as usize).map_or(0, |th| th.ops.len());
    let op = |loc: cuorder_model::semantics::OpLoc| {
        if (loc.op as usize) < ops(loc.thread) { sem.op_label(loc) } else { format!("{loc:?}") }
    };
    let threads = sem.program.ranks.iter().map(|r| r.threads.len()).sum::<usize>() as u32;
    match step {
        Step::Host { thread, .. } if *thread < threads => format!("the next call of {}", sem.thread_label(*thread)),
        Step::Item(k) if k.thread < threads => format!("the work of {}", op(k.loc())),
        Step::Transfer { send, recv } if send.thread < threads && recv.thread < threads => {
            format!("the transfer from {} to {}", op(*send), op(*recv))
        }
        Step::Eager { send } if send.thread < threads => format!("the eager delivery of {}", op(*send)),
        Step::Drain { recv } if recv.thread < threads => format!("the drain into {}", op(*recv)),
        other => format!("{other:?}"),
    }
}

/// The text of one of `explore`'s findings with its witness hint pointing at `replay` of its saved artifact `saved`
/// (`check`'s hint, `run --witness N`, re-runs `check`'s search, which numbers findings its own way and may not
/// finish where sampling did; issue 10 review), or saying how to save it.
fn replay_hint(text: &str, saved: Option<&PathBuf>) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        match (line.find("(`cuorder run PROGRAM --witness "), line.rfind("` prints it)")) {
            (Some(a), Some(b)) if b > a => {
                let hint = match saved {
                    Some(p) => format!("(`cuorder replay {}` prints it)", p.display()),
                    None => "(`--save DIR` keeps it; `cuorder replay DIR/finding-N-KIND.ron` prints it)".to_string(),
                };
                out.push_str(&line[..a]);
                out.push_str(&hint);
                out.push_str(&line[b + "` prints it)".len()..]);
            }
            _ => out.push_str(line),
        }
    }
    out
}

fn load_both(
    profile: &str,
    program: &std::path::Path,
    color: bool,
) -> Result<(cuorder_model::profile::Profile, cuorder_model::program::Program), LoadError> {
    load_both_with(profile, program, color, TorchArgs::default())
}

/// [`load_both`] with the PyTorch dialect's settings of the command line.
fn load_both_with(
    profile: &str,
    program: &std::path::Path,
    color: bool,
    torch: TorchArgs,
) -> Result<(cuorder_model::profile::Profile, cuorder_model::program::Program), LoadError> {
    let prof = load_profile(profile)?;
    let (prog, _) = cuorder::load_program_with(program, color, &torch.options())?;
    // Settings that change nothing are refused, not reported as applied ("PyTorch calls lowered with
    // --torch-version before82450 (overriding the program's `torch:`)" was printed for a program with neither).
    let given = torch.flags();
    if !given.is_empty() && !prog.uses_torch {
        let message = format!(
            "{}: {} {} no effect: the program makes no PyTorch call and has no `torch:` setting; drop {}",
            program.display(),
            given.join(", "),
            if given.len() == 1 { "has" } else { "have" },
            if given.len() == 1 { "it" } else { "them" }
        );
        return Err(LoadError {
            rendered: format!("error: {message}\n"),
            issues: vec![cuorder::LoadIssue { file: program.display().to_string(), line: None, column: None, message, help: None }],
        });
    }
    for w in cuorder::load_warnings(&prog) {
        eprintln!("warning: {}: {w}", program.display());
    }
    Ok((prof, prog))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let color = cli.color.enabled();
    match cli.command {
        Command::Check { program, profile, format, budgets, first, torch } => {
            let (prof, prog) = match load_both_with(&profile, &program, color, torch) {
                Ok(x) => x,
                Err(e) => return fail_as(format, "check", e),
            };
            let w = watch(
                cli.progress.progress(),
                cuorder::progress::Meter::States { max_states: budgets.max_states as u64, max_time_s: budgets.max_time_s },
            );
            let rep = report::check(&prog, &prof, &Limits { progress: Some(w.progress()), first, ..budgets.limits() });
            w.finish();
            match format {
                Format::Text => say(&(torch.note() + &rep.to_text())),
                Format::Json => {
                    let sem = Semantics::new(&prog, &prof);
                    say(&cuorder::json::check(&sem, &rep, &program.display().to_string()).to_json())
                }
            };
            rep.verdict().into()
        }
        Command::Run { program, profile, seed, witness, timeline, costs, trace, max_steps, budgets, backend, timeout_s, torch } => {
            let inputs = [program.as_path(), std::path::Path::new(&profile), std::path::Path::new(costs.as_deref().unwrap_or("-"))];
            if let Some(e) = timeline.as_deref().and_then(|t| cuorder::timing::trace_path_error(t, &inputs)) {
                err(&format!("error: {e}\n"));
                return ExitCode::from(2);
            }
            let (prof, prog) = match load_both_with(&profile, &program, color, torch) {
                Ok(x) => x,
                Err(e) => return fail(e),
            };
            let sem = Semantics::new(&prog, &prof);
            if backend == Backend::Hw {
                return run_hw(&sem, trace.as_deref(), timeout_s);
            }
            let tr = match witness {
                None => cuorder_sim::run::run_within(
                    &sem,
                    &mut RandomScheduler::new(seed),
                    Some(seed),
                    max_steps,
                    Some(budgets.max_time_s.saturating_mul(1000)),
                ),
                Some(n) => {
                    let rep = report::check(&prog, &prof, &budgets.limits());
                    let Some(f) = n.checked_sub(1).and_then(|i| rep.findings.get(i)) else {
                        err(&format!(
                            "error: --witness {n}: findings are numbered from 1, and check found {} under profile {} (pass the same --profile as to check){}\n",
                            rep.findings.len(),
                            prof.label(),
                            rep.limit_hit.as_ref().map(|l| format!("; {l}")).unwrap_or_default()
                        ));
                        return ExitCode::from(2);
                    };
                    match replay(&sem, &f.finding.witness) {
                        Ok(t) => t,
                        Err(d) => {
                            err(&format!("error: {d}\n"));
                            return ExitCode::from(2);
                        }
                    }
                }
            };
            say(&(torch.note() + &timeline::render(&sem, &tr) + &platform_choices(&sem, &tr.schedule)));
            let timed_out = matches!(tr.outcome, cuorder_sim::run::Outcome::TimeLimit { .. });
            if let Some(path) = timeline {
                let model = match costs.as_deref().map(cuorder::timing::load_costs) {
                    None => cuorder_sim::cost::CostModel::logical(),
                    Some(Ok(m)) => m,
                    Some(Err(e)) => {
                        err(&format!("error: --costs: {e}\n"));
                        return ExitCode::from(2);
                    }
                };
                let timed = match cuorder_sim::timed::timed_replay(&sem, &model, &tr.schedule) {
                    Ok(t) => cuorder_sim::timed::TimedRun { seed: tr.seed.unwrap_or(0), settings: torch.flags(), ..t },
                    Err(d) => {
                        err(&format!("error: {d}\n"));
                        return ExitCode::from(2);
                    }
                };
                if let Err(e) = cuorder::timing::write_chrome_trace(&sem, &timed, &path) {
                    err(&format!("error: {e}\n"));
                    return ExitCode::from(2);
                }
            }
            if let Some(path) = trace {
                let text = ron::ser::to_string_pretty(&tr, ron::ser::PrettyConfig::default()).unwrap_or_default();
                if let Err(e) = std::fs::write(&path, text + "\n") {
                    err(&format!("error: cannot write {}: {e}\n", path.display()));
                    return ExitCode::from(2);
                }
            }
            ExitCode::from(if timed_out { 3 } else { 0 })
        }
        Command::Time { program, profile, costs, connect_ns, no_withheld_run, seed, jitter, timeline, lanes, compare, format, max_steps, max_time_s, torch } => {
            // --max-time-s counts from here: loading a large program takes seconds too.
            let clock_start = std::time::Instant::now();
            // Errors other than the program's (usage, a cost model, a run past 2^64 - 1 ns, a trace that cannot be
            // written): text on stderr, or with --format json the documented `errors` array on stdout; exit 2.
            let file = program.display().to_string();
            let time_fail = |file: String, message: String| -> ExitCode {
                let rendered = format!("error: {message}\n");
                fail_as(format, "time", LoadError { rendered, issues: vec![cuorder::LoadIssue { file, line: None, column: None, message, help: None }] })
            };
            // Options that have no effect are refused rather than silently dropped.
            if matches!(format, Format::Json) && (lanes.is_some() || compare.is_some()) {
                let flag = if lanes.is_some() { "--lanes" } else { "--compare" };
                return time_fail(file, format!("{flag} adds to the text report and has no JSON form; drop it or use --format text"));
            }
            let inputs = [program.as_path(), std::path::Path::new(&profile), std::path::Path::new(&costs)];
            if let Some(e) = timeline.as_deref().and_then(|t| cuorder::timing::trace_path_error(t, &inputs)) {
                return time_fail("-".into(), e);
            }
            let (prof, prog) = match load_both_with(&profile, &program, color, torch) {
                Ok(x) => x,
                Err(e) => return fail_as(format, "time", e),
            };
            let mut model = match cuorder::timing::load_costs(&costs) {
                Ok(m) => m,
                Err(e) => return time_fail(costs.clone(), format!("--costs: {e}")),
            };
            // Under logical costs every step costs 1: flags that change costs would change nothing.
            let cost_flag = if jitter > 0 { Some("--jitter") } else if connect_ns.is_some() { Some("--connect-ns") } else { None };
            if let (true, Some(flag)) = (model.logical, cost_flag) {
                return time_fail("-".into(), format!("{flag} has no effect under logical costs ({}), where every step costs 1; drop it or give --costs another model", model.name));
            }
            if let Some(ns) = connect_ns {
                model.connect_ns = ns;
                // Reports name the override, so that the figures are not mistaken for the model's own.
                model.name = format!("{}, --connect-ns {ns}", model.name);
            }
            let sem = Semantics::new(&prog, &prof);
            let max_time = max_time_s.map(std::time::Duration::from_secs_f64);
            let opt = cuorder_sim::timed::TimedOptions { seed, jitter_ns: jitter, max_steps, max_time, clock_start: Some(clock_start), withhold: false };
            let run = cuorder_sim::timed::TimedRun { settings: torch.flags(), ..cuorder::timing::time_run(&sem, &model, &opt, !no_withheld_run) };
            if run.makespan_ns == u64::MAX {
                // Times saturate at 2^64 - 1 ns (about 584 years) instead of wrapping: a run that reaches it has no
                // meaningful times left to report. Name the first step that reached it and where its cost comes from.
                let at = run.times_ns.iter().position(|&t| t == u64::MAX).unwrap_or(0);
                let (lane, what) = cuorder_sim::timed::describe(&sem, &run.schedule[at], run.host_op(at));
                return time_fail(
                    file.clone(),
                    format!(
                        "{file}: the timed run reached 2^64 - 1 ns (about 584 years), where times saturate, at step {at} ({lane}: \
                         {what}); its cost comes from the program's durations and sizes and from the cost model \
                         ({}): one of them is too large to time",
                        model.name
                    ),
                );
            }
            let sum = cuorder_sim::timed::summarize(&sem, &run);
            let code = cuorder::timing::verdict(&run).exit_code();
            if let Some(path) = &timeline {
                if let Err(e) = cuorder::timing::write_chrome_trace(&sem, &run, path) {
                    return time_fail(path.display().to_string(), e);
                }
            }
            match format {
                Format::Text => {
                    let mut text = cuorder::timing::report_text(&sem, &run, &sum, &file);
                    if let Some(w) = lanes {
                        text.push('\n');
                        text.push_str(&cuorder::timing::lanes_text(&sem, &run, usize::from(w)));
                    }
                    if let Some(obs) = &compare {
                        let obs = match cuorder::traces::load_trace(obs, &prog) {
                            Ok(o) => o,
                            Err(e) => return fail(e),
                        };
                        match cuorder::timing::accuracy(&sem, &run, &obs) {
                            Ok(a) => text.push_str(&format!("\n{}\n", a.to_text())),
                            // A hardware run that hung is a result, not bad input: say it beside the prediction.
                            Err(e) => text.push_str(&format!("\nagainst the hardware run: {e}\n")),
                        }
                    }
                    say(&text);
                }
                Format::Json => {
                    let out = cuorder::json::Output {
                        schema_version: cuorder::json::SCHEMA_VERSION,
                        command: "time".into(),
                        exit_code: code,
                        check: None,
                        errors: None,
                        time: Some(cuorder::timing::time_out(&sem, &run, &sum, &file)),
                        explore: None,
                    };
                    say(&out.to_json());
                }
            }
            // The process ends here: handing the run, the model and the program back to the allocator one piece at a
            // time would cost more than a tenth of a 1,024-rank pipeline's run (millions of items, op tables and
            // spans), so they are left for the OS to reclaim (as compilers do; issue 9, scale).
            std::mem::forget(run);
            std::mem::forget(sum);
            std::mem::forget(sem);
            std::mem::forget(prog);
            ExitCode::from(code)
        }
        Command::Conform { dir: Some(dir), stats: true, .. } => match cuorder::traces::stats::batch_stats(&dir) {
            Ok(s) => {
                say(&s.to_text());
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
            bound,
            first,
            time_limit,
            jobs,
            max_states,
            max_memory_mb,
            max_steps,
            save,
            format,
            torch,
        } => {
            let (prof, prog) = match load_both_with(&profile, &program, color, torch) {
                Ok(x) => x,
                Err(e) => return fail_as(format, "explore", e),
            };
            let sem = Semantics::new(&prog, &prof);
            let max_time_ms = time_limit.map_or(cuorder_sim::explore::DEFAULT_MAX_TIME_MS, |s| (s * 1000.0) as u64);
            let meter = match strategy {
                StrategyArg::Exhaustive | StrategyArg::Dpor => {
                    cuorder::progress::Meter::States { max_states: max_states as u64, max_time_s: max_time_ms / 1000 }
                }
                StrategyArg::Bounded => {
                    cuorder::progress::Meter::Bounded { bound, max_states: max_states as u64, max_time_s: max_time_ms / 1000 }
                }
                StrategyArg::Random | StrategyArg::Pct => cuorder::progress::Meter::Executions { executions, time_limit_s: time_limit },
            };
            let w = watch(cli.progress.progress(), meter);
            let limits = Limits {
                max_states,
                first,
                max_time_ms,
                max_memory_bytes: max_memory_mb.saturating_mul(1 << 20),
                resident: true,
                progress: Some(w.progress()),
                ..Limits::default()
            };
            let sampling = |s: cuorder_sim::strategy::Strategy| cuorder_sim::strategy::SampleOptions {
                strategy: s,
                seed,
                executions,
                time_limit: time_limit.map(std::time::Duration::from_secs_f64),
                first,
                jobs: jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1),
                max_steps,
                progress: Some(w.progress()),
            };
            // Per finding: how the report introduces it before the findings (sampling: executions that showed it;
            // bounded: the bound at which it first appeared); `info`: the same for `--format json` (docs/json.md).
            use cuorder::json::{ExploreFinding, ExploreOut};
            let numbered = |n: usize| (1..=n as u32).map(|number| ExploreFinding { number, ..Default::default() }).collect::<Vec<_>>();
            let (ex, header, notes, hits, mut info) = match strategy {
                StrategyArg::Exhaustive => {
                    let ex = cuorder_sim::explore::explore(&sem, &limits);
                    let info = ExploreOut { strategy: "exhaustive".into(), findings: numbered(ex.findings.len()), ..Default::default() };
                    (ex, "strategy exhaustive".to_string(), vec![], None, info)
                }
                StrategyArg::Dpor => {
                    let d = cuorder_sim::dpor::explore_dpor(&sem, &limits);
                    let info = ExploreOut {
                        strategy: "dpor".into(),
                        executions: Some(d.executions as u64),
                        sleep_blocked: Some(d.sleep_blocked as u64),
                        findings: numbered(d.exploration.findings.len()),
                        ..Default::default()
                    };
                    let header = format!(
                        "strategy dpor, {} to a final state, {} cut short by sleep sets (an equivalent execution was explored)",
                        cuorder_model::describe::count(d.executions as u64, "execution"),
                        d.sleep_blocked
                    );
                    (d.exploration, header, vec![], None, info)
                }
                StrategyArg::Bounded => {
                    let b = cuorder_sim::explore::explore_bounded(&sem, &limits, bound);
                    let per: Vec<String> = b.pass_states.iter().enumerate().map(|(k, n)| format!("bound {k}: {n}")).collect();
                    let mut header = format!(
                        "strategy bounded (bound {bound}), at most {bound} preemption{}: {} ({})",
                        if bound == 1 { "" } else { "s" },
                        cuorder_model::describe::count(b.exploration.states as u64, "state"),
                        per.join(", ")
                    );
                    if let (Some(k), None) = (b.saturated_at, &b.exploration.limit_hit) {
                        header.push_str(&format!(
                            "\n  bound {k} cut no execution: every execution of the reduced search was explored, as by `check`"
                        ));
                    }
                    let notes = b
                        .first_bound
                        .iter()
                        .enumerate()
                        .map(|(i, k)| {
                            format!("  finding {} first at bound {k} (an execution with {k} preemption{} shows it)", i + 1, if *k == 1 { "" } else { "s" })
                        })
                        .collect();
                    let info = ExploreOut {
                        strategy: "bounded".into(),
                        bound: Some(bound),
                        states_per_bound: b.pass_states.iter().map(|n| *n as u64).collect(),
                        saturated_at: b.saturated_at,
                        findings: b
                            .first_bound
                            .iter()
                            .enumerate()
                            .map(|(i, k)| ExploreFinding { number: i as u32 + 1, first_bound: Some(*k), ..Default::default() })
                            .collect(),
                        ..Default::default()
                    };
                    (b.exploration, header, notes, None, info)
                }
                StrategyArg::Random | StrategyArg::Pct => {
                    let s = if strategy == StrategyArg::Random {
                        cuorder_sim::strategy::Strategy::Random
                    } else {
                        cuorder_sim::strategy::Strategy::Pct { depth: depth.max(1) }
                    };
                    let r = cuorder_sim::strategy::sample(&sem, &sampling(s));
                    let header = format!(
                        "strategy {}, seeds {}..{}: {}, {}",
                        s.name(),
                        seed,
                        seed.wrapping_add(r.executions),
                        cuorder_model::describe::count(r.executions, "execution"),
                        cuorder_model::describe::count(r.steps, "step")
                    );
                    let notes = r
                        .hits
                        .iter()
                        .zip(&r.seeds)
                        .enumerate()
                        .map(|(i, (h, s))| format!("  finding {} seen in {h} of {} (first with seed {s})", i + 1, cuorder_model::describe::count(r.executions, "execution")))
                        .collect();
                    let hits = Some((r.hits.clone(), r.executions));
                    let info = ExploreOut {
                        strategy: if strategy == StrategyArg::Random { "random" } else { "pct" }.into(),
                        seed: Some(seed),
                        executions: Some(r.executions),
                        depth: (strategy == StrategyArg::Pct).then_some(depth.max(1)),
                        findings: r
                            .hits
                            .iter()
                            .zip(&r.seeds)
                            .enumerate()
                            .map(|(i, (h, s))| ExploreFinding {
                                number: i as u32 + 1,
                                seen_in: Some(*h),
                                first_seed: Some(*s),
                                ..Default::default()
                            })
                            .collect(),
                        ..Default::default()
                    };
                    (r.exploration, header, notes, hits, info)
                }
            };
            w.finish();
            let mut rep = report::build_report(&sem, &ex);
            if let Some((h, n)) = &hits {
                rep.sampled_executions = Some(*n);
                for (f, hits) in rep.findings.iter_mut().zip(h) {
                    f.sampled = Some((*hits, *n));
                }
            }
            let strategy_name = header.trim_start_matches("strategy ").split(',').next().unwrap_or("").to_string();
            let mut saved: Vec<PathBuf> = vec![];
            if let Some(dir) = &save {
                let bytes = std::fs::read(&program).unwrap_or_default();
                let artifacts: Vec<cuorder::artifact::Artifact> = rep
                    .findings
                    .iter()
                    .enumerate()
                    .map(|(i, f)| cuorder::artifact::Artifact {
                        strategy: strategy_name.clone(),
                        seed: info.findings.get(i).and_then(|f| f.first_seed),
                        torch: torch.options(),
                        ..cuorder::artifact::Artifact::new(&program, &bytes, &prof, f, &ex.keys[i])
                    })
                    .collect();
                match cuorder::artifact::save_all(dir, &artifacts) {
                    Ok(paths) => saved = paths,
                    Err(e) => {
                        // `e` names the file it could not write; with --format json it is the `errors` document.
                        let issue = cuorder::LoadIssue { file: dir.display().to_string(), line: None, column: None, message: e.clone(), help: None };
                        return fail_as(format, "explore", LoadError { rendered: format!("error: {e}\n"), issues: vec![issue] });
                    }
                }
            }
            // Each finding's witness hint names its saved artifact (or how to save it), in the text and the JSON alike.
            for (i, f) in rep.findings.iter_mut().enumerate() {
                f.text = replay_hint(&f.text, saved.get(i));
            }
            for (f, path) in info.findings.iter_mut().zip(&saved) {
                f.artifact = Some(path.display().to_string());
            }
            info.settings = torch.flags();
            // A clean sampled run proves nothing; a clean bounded one only when a pass cut no execution.
            let sampled_clean = rep.findings.is_empty()
                && match strategy {
                    StrategyArg::Exhaustive | StrategyArg::Dpor => false,
                    StrategyArg::Bounded => rep.limit_hit.is_some(),
                    StrategyArg::Random | StrategyArg::Pct => true,
                };
            let code = if sampled_clean { 3 } else { rep.verdict().exit_code() };
            match format {
                Format::Text => {
                    let mut out = format!("{header}\n{}", torch.note());
                    for note in &notes {
                        out.push_str(&format!("{note}\n"));
                    }
                    if let Some(dir) = &save {
                        let n = cuorder_model::describe::count(rep.findings.len() as u64, "finding");
                        out.push_str(&format!("  saved {n} to {} (`cuorder replay FILE`)\n", dir.display()));
                    }
                    out.push_str(&rep.to_text());
                    say(&out);
                }
                Format::Json => {
                    say(&cuorder::json::explore(&sem, &rep, &program.display().to_string(), code, info).to_json());
                }
            }
            ExitCode::from(code)
        }
        Command::Replay { artifact, program } => {
            let (a, path, prog, text) = match artifact_and_program(&artifact, program, color) {
                Ok(x) => x,
                Err(code) => return code,
            };
            let h = cuorder::artifact::program_hash(text.as_bytes());
            if h != a.program_hash {
                eprintln!("warning: {} changed since the finding was saved (hash {h}, saved {})", path.display(), a.program_hash);
            }
            let sem = Semantics::new(&prog, &a.profile);
            match cuorder::artifact::replay_artifact(&sem, &a) {
                cuorder::artifact::Replayed::Reproduced(t) => {
                    // The summary is the finding's first line, which may end by introducing the next ("on r0 g:").
                    let kind = &a.kind;
                    say(&format!("{}reproduced: {kind}: {}\n", timeline::render(&sem, &t), a.summary.trim_end_matches(':')));
                    ExitCode::SUCCESS
                }
                cuorder::artifact::Replayed::Vanished(t) => {
                    let kind = &a.kind;
                    say(&format!("{}not reproduced: the schedule replays, but the {kind} is not there at its end\n", timeline::render(&sem, &t)));
                    ExitCode::from(1)
                }
                cuorder::artifact::Replayed::Diverged(d) => {
                    say(&format!(
                        "diverged at step {}: {} is not enabled there (the program or the model changed)\n",
                        d.at,
                        step_words(&sem, &d.step)
                    ));
                    ExitCode::from(1)
                }
            }
        }
        Command::Shrink { artifact, program, out, max_states, max_candidates } => {
            // Loaded once through the normal path for its diagnostics.
            let (a, path, _, text) = match artifact_and_program(&artifact, program, color) {
                Ok(x) => x,
                Err(code) => return code,
            };
            let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "program".into());
            // Where the result goes is settled before the search, which can take minutes: `-o DIR` writes
            // `NAME-min.ron` in DIR, and a folder that does not exist is refused at once (it was refused only when
            // writing, after shrinking an 8-stage pipeline for 4 minutes).
            let out = match out {
                Some(o) if o.is_dir() => o.join(format!("{name}-min.ron")),
                Some(o) => o,
                None => artifact.with_file_name(format!("{name}-min.ron")),
            };
            if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty() && !d.is_dir()) {
                err(&format!("error: cannot write {}: the folder {} does not exist\n", out.display(), dir.display()));
                return ExitCode::from(2);
            }
            let opt = cuorder::shrink::ShrinkOptions { max_states, max_candidates, torch: a.torch, ..Default::default() };
            let shrunk = match cuorder::shrink::shrink(&name, &text, &a.profile, &a.kind, &opt) {
                Ok(s) => s,
                Err(e) => {
                    err(&format!("error: {e}\n"));
                    return ExitCode::from(1);
                }
            };
            let art_path = out.with_extension("finding.ron");
            // The finding was found with PyTorch settings given on the command line: the minimal program shows it
            // only with the same flags (its text keeps the program's own `torch:`), so the header says which.
            let flags = TorchArgs::from_options(a.torch).flags().join(" ");
            // The finding's first line, which may end by introducing the next ("on r1 act (device memory):").
            let headline = shrunk.finding.text.lines().next().unwrap_or("").trim_end_matches(':');
            let with = if flags.is_empty() {
                String::new()
            } else {
                format!("// Found with {flags}: check it with `cuorder check {} {flags}` (its `torch:` is the original's).\n", out.display())
            };
            use cuorder_model::describe::count;
            // "3 ops on 1 rank"
            let size = |ops: usize, ranks: u32| format!("{} on {}", count(ops as u64, "op"), count(u64::from(ranks), "rank"));
            let (before, after) = (size(shrunk.ops_before, shrunk.ranks_before), size(shrunk.ops_after, shrunk.ranks_after));
            let candidates = count(shrunk.candidates as u64, "candidate");
            let header = format!(
                "// Shrunk by `cuorder shrink {}` from {} ({before} -> {after}, {candidates}):\n// {}: {}\n{with}",
                artifact.display(),
                path.display(),
                a.kind,
                headline
            );
            let text = header + &shrunk.text;
            if let Err(e) = std::fs::write(&out, &text) {
                err(&format!("error: cannot write {}: {e}\n", out.display()));
                return ExitCode::from(2);
            }
            let new = cuorder::artifact::Artifact {
                strategy: "shrink".into(),
                torch: a.torch,
                ..cuorder::artifact::Artifact::new(&out, text.as_bytes(), &a.profile, &shrunk.finding, &shrunk.key)
            };
            if let Err(e) = cuorder::artifact::write(&art_path, &new) {
                err(&format!("error: {e}\n"));
                return ExitCode::from(2);
            }
            // Nothing removed: say so instead of "shrunk .. to 15 ops (from 15 ops)".
            let what = if (shrunk.ops_after, shrunk.ranks_after) == (shrunk.ops_before, shrunk.ranks_before) {
                format!("found no smaller program than {} ({after}", path.display())
            } else {
                format!("shrunk {} to {after} (from {before}", path.display())
            };
            say(&format!(
                "{what}; {candidates} checked)\n{}: {}\nwrote {} and {} (cuorder replay {})\n",
                shrunk.finding.kind,
                headline,
                out.display(),
                art_path.display(),
                art_path.display()
            ));
            if cuorder::shrink::has_loops(&shrunk.text) {
                say("note: the shrunk program still has loops (For/Repeat): shrink removes ops as written, so an op inside a loop stays in every iteration; an unrolled program (one thread per rank, e.g. `cuorder gen pipeline ... --unroll`) shrinks further\n");
            }
            ExitCode::SUCCESS
        }
        Command::Conform { dir: Some(dir), junit, budgets, .. } => conform_dir(&dir, junit.as_deref(), &budgets.limits()),
        Command::Conform { program: Some(program), trace: Some(trace), profile, budgets, dir: None, .. } => {
            let (prof, prog) = match load_both(&profile, &program, color) {
                Ok(x) => x,
                Err(e) => return fail(e),
            };
            let obs = match cuorder::traces::load_trace(&trace, &prog) {
                Ok(o) => o,
                Err(e) => return fail(e),
            };
            let sem = Semantics::new(&prog, &prof);
            let c = cuorder_sim::conform::conform(&sem, &obs, &budgets.limits());
            say(&c.to_text());
            // A budget that stopped the search before it showed the observation decides nothing (exit 3, as for
            // `check`); it was reported as a disagreement (exit 1).
            ExitCode::from(if c.agrees() {
                0
            } else if c.stopped_short() {
                3
            } else {
                1
            })
        }
        Command::Conform { .. } => {
            err("error: conform needs PROGRAM and TRACE, or --dir DIR\n");
            ExitCode::from(2)
        }
        Command::Completions { shell } => {
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut <Cli as clap::CommandFactory>::command(), "cuorder", &mut buf);
            say(&String::from_utf8_lossy(&buf));
            ExitCode::SUCCESS
        }
        Command::Man => {
            let mut buf = Vec::new();
            if let Err(e) = clap_mangen::Man::new(<Cli as clap::CommandFactory>::command()).render(&mut buf) {
                err(&format!("error: cannot render the man page: {e}\n"));
                return ExitCode::from(2);
            }
            say(&String::from_utf8_lossy(&buf));
            ExitCode::SUCCESS
        }
        Command::Gen { what: Some(GenWhat::Pipeline { schedule, stages, microbatches, chunks, bytes, bug, race, emit, unroll, output }), .. } => {
            use cuorder_sim::pipeline::{PipelineOptions, Schedule, Variant};
            let schedule = match schedule {
                ScheduleArg::Gpipe => Schedule::Gpipe,
                ScheduleArg::OneFOneB => Schedule::OneFOneB,
                ScheduleArg::Interleaved => Schedule::Interleaved,
            };
            let chunks = chunks.unwrap_or(if schedule == Schedule::Interleaved { 2 } else { 1 });
            let variant = if bug {
                Variant::Bug
            } else if race {
                Variant::Race
            } else {
                Variant::Correct
            };
            let opt = PipelineOptions { schedule, stages, microbatches, chunks, bytes, variant, unroll };
            if unroll && matches!(emit, EmitArg::Promela) {
                eprintln!("error: --unroll applies to the program (--emit ron); the Promela model has one process per stage either way");
                return ExitCode::from(2);
            }
            let text = match emit {
                EmitArg::Ron => cuorder_sim::pipeline::pipeline(&opt),
                EmitArg::Promela => cuorder_sim::pipeline::promela(&opt),
            };
            let text = match text {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            match output {
                None => {
                    use std::io::Write;
                    if let Err(e) = std::io::stdout().lock().write_all(text.as_bytes()) {
                        eprintln!("error: cannot write the program: {e}");
                        return ExitCode::from(2);
                    }
                }
                Some(path) => {
                    if let Err(e) = std::fs::write(&path, text) {
                        eprintln!("error: cannot write {}: {e}", path.display());
                        return ExitCode::from(2);
                    }
                }
            }
            ExitCode::SUCCESS
        }
        Command::Gen { what: Some(GenWhat::Cover { ranks, seed, count, out }), .. } => {
            if !(1..=64).contains(&ranks) {
                err(&format!("error: --ranks must be 1 to 64, got {ranks}\n"));
                return ExitCode::from(2);
            }
            let opt = cuorder_sim::cover::CoverOptions { ranks, ..Default::default() };
            gen_files(&out, seed, count, &|s| cuorder_sim::cover::program(s, &opt))
        }
        Command::Gen { what: None, seed, count, out } => {
            let out = out.expect("clap requires --out without a subcommand");
            let opt = cuorder_sim::gen::GenOptions::default();
            gen_files(&out, seed, count, &|s| cuorder_sim::gen::program(s, &opt))
        }
        Command::Profile { name } => match name {
            None => {
                for n in cuorder_model::profile::Profile::BUILTIN {
                    let p = cuorder_model::profile::Profile::builtin(n).unwrap();
                    say(&format!("{n}: {}\n", p.description));
                }
                ExitCode::SUCCESS
            }
            Some(n) => match load_profile(&n) {
                Ok(p) => {
                    // The plain words are RON comments, so the output loads as a profile file as it is (a start for
                    // your own: `cuorder profile eager > mine.ron`); it failed at 1:8 with the words as plain text.
                    say(&format!("// profile {}: {}\n", if p.name.is_empty() { &n } else { &p.name }, p.description));
                    say("// assumes:\n");
                    for a in p.assumptions() {
                        say(&format!("//   - {a}\n"));
                    }
                    say("\n");
                    say(&format!("{}\n", ron::ser::to_string_pretty(&p, ron::ser::PrettyConfig::default()).unwrap_or_default()));
                    ExitCode::SUCCESS
                }
                Err(e) => fail(e),
            },
        },
        Command::Costs { name } => match name {
            None => {
                for n in cuorder_sim::cost::CostModel::BUILTIN {
                    if let Some(m) = cuorder_sim::cost::CostModel::builtin(n) {
                        say(&format!("{n}: {}\n", m.source));
                    }
                }
                ExitCode::SUCCESS
            }
            Some(n) => match cuorder::timing::load_costs(&n) {
                Ok(mut m) => {
                    // Printed as the file has it: reports name the file beside the model, but a copy written back
                    // must not gain "(file)" at every round trip.
                    if let Some(own) = m.name.strip_suffix(&format!(" ({n})")) {
                        m.name = own.to_string();
                    }
                    say(&format!("{}\n", ron::ser::to_string_pretty(&m, ron::ser::PrettyConfig::default()).unwrap_or_default()));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    err(&format!("error: {e}\n"));
                    ExitCode::from(2)
                }
            },
        },
        Command::Explain { rule } => {
            use cuorder_model::rule::Rule;
            match rule {
                None => {
                    for r in Rule::ALL {
                        let title = r.doc().and_then(|d| d.lines().next()).map(|l| l.trim_start_matches("## ")).unwrap_or(r.id());
                        say(&format!("{title}\n"));
                    }
                    ExitCode::SUCCESS
                }
                Some(id) => match Rule::from_id(&id).and_then(|r| r.doc()) {
                    Some(doc) => {
                        say(&format!("{doc}\n"));
                        ExitCode::SUCCESS
                    }
                    None => {
                        let ids: Vec<&str> = Rule::ALL.iter().map(|r| r.id()).collect();
                        err(&format!("error: no rule {id:?}; the rules are {}\n", ids.join(", ")));
                        ExitCode::from(2)
                    }
                },
            }
        }
    }
}

/// `cuorder conform --dir DIR`: every file under DIR, one line each, and a summary; exit 1 unless the gate passes.
fn conform_dir(dir: &std::path::Path, junit: Option<&std::path::Path>, limits: &Limits) -> ExitCode {
    if !dir.is_dir() {
        err(&format!("error: {}: not a folder\n", dir.display()));
        return ExitCode::from(2);
    }
    let rep = cuorder::traces::check_dir(dir, limits);
    say(&rep.to_text());
    if let Some(path) = junit {
        if let Err(e) = std::fs::write(path, rep.to_junit()) {
            err(&format!("error: cannot write {}: {e}\n", path.display()));
            return ExitCode::from(2);
        }
    }
    if rep.entries.is_empty() {
        err(&format!("error: no trace and no MANIFEST.ron under {}\n", dir.display()));
        return ExitCode::from(2);
    }
    ExitCode::from(if rep.passed() { 0 } else { 1 })
}

/// Writes programs `make(seed)` for `count` seeds from `seed` into `out` (created), each as `NAME.ron`.
fn gen_files(out: &std::path::Path, seed: u64, count: u64, make: &dyn Fn(u64) -> cuorder_model::program::Program) -> ExitCode {
    if let Err(e) = std::fs::create_dir_all(out) {
        err(&format!("error: cannot create {}: {e}\n", out.display()));
        return ExitCode::from(2);
    }
    // Seeds seed, seed + 1, ..: refused if they run past the largest seed (they were cut short there, and the
    // count printed was not the count written).
    if count > 0 && seed.checked_add(count - 1).is_none() {
        err(&format!(
            "error: --seed {seed} with --count {count} runs past the largest seed ({}); at most {} program(s) fit from this seed\n",
            u64::MAX,
            u64::MAX - seed + 1
        ));
        return ExitCode::from(2);
    }
    for s in (0..count).map(|i| seed + i) {
        let p = make(s);
        let text = ron::ser::to_string_pretty(&p, ron::ser::PrettyConfig::default()).expect("program serializes");
        let path = out.join(format!("{}.ron", p.name));
        if let Err(e) = std::fs::write(&path, text + "\n") {
            err(&format!("error: cannot write {}: {e}\n", path.display()));
            return ExitCode::from(2);
        }
    }
    say(&format!("wrote {count} program(s) to {}\n", out.display()));
    ExitCode::SUCCESS
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
            err(&format!("cuorder: cannot run on hardware here: {e}\n"));
            return ExitCode::from(3);
        }
        Err(e) => {
            err(&format!("error: {e}\n"));
            return ExitCode::from(2);
        }
    };
    say(&format!("hardware: {:?}\n", obs.outcome));
    if let Some(path) = trace {
        if let Err(e) = std::fs::write(path, obs.to_ron() + "\n") {
            err(&format!("error: cannot write {}: {e}\n", path.display()));
            return ExitCode::from(2);
        }
    }
    let c = cuorder_sim::conform::conform(sem, &obs, &Limits::default());
    say(&c.to_text());
    ExitCode::from(if c.agrees() { 0 } else { 1 })
}

/// The platform choices an execution took where the profile leaves them to the platform (N7: when collectives
/// connect; N14: the order a cut group fills its kernel plans), one line each, or nothing: `run` and `run --witness`
/// said nothing of them, so a replayed hang did not say which NCCL it needs (issue 30 new-user trial).
fn platform_choices(sem: &Semantics, schedule: &[cuorder_model::semantics::Step]) -> String {
    let Ok(st) = cuorder_sim::run::replay_state(sem, schedule) else { return String::new() };
    let mut out = String::new();
    if let Some(c) = st.nccl.coll_connect.filter(|_| sem.profile.collective_connect() == cuorder_model::profile::CollectiveConnect::Either) {
        out.push_str(&format!("platform: this execution has {} (N7)\n", c.words()));
    }
    if let Some(o) = st.nccl.plan_order.filter(|_| sem.profile.p2p_plan_order == cuorder_model::profile::PlanOrder::Either) {
        out.push_str(&format!("platform: this execution has {} (N14)\n", o.words()));
    }
    out
}
