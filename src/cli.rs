//! What the `cuorder` commands share, written once: stdout and stderr, the exit status ([`Verdict`], the one place
//! its numbers are decided), load errors as text or JSON, the argument groups several commands take (search
//! budgets, PyTorch settings, the output format), and loading a command's profile and program.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use clap::ValueEnum;

use cuorder_model::format::{TorchInit, TorchOptions, TorchVersion};
use cuorder_model::profile::Profile;
use cuorder_model::program::Program;
use cuorder_sim::explore::Limits;

use crate::LoadError;

/// Writes to stdout; a closed stdout (`| head -1`) ends the output quietly instead of panicking. Returns whether
/// stdout is still open.
pub fn say(text: &str) -> bool {
    let mut o = std::io::stdout().lock();
    o.write_all(text.as_bytes()).and_then(|()| o.flush()).is_ok()
}

/// Writes to stdout where a failed write is an error to report (`gen pipeline`'s program): a closed stdout
/// (`| head -1`, a broken pipe) is a normal end, as for [`say`], and is `Ok`.
///
/// Errors: any other write error (a full disk behind a redirection).
pub fn emit(text: &str) -> std::io::Result<()> {
    let mut o = std::io::stdout().lock();
    match o.write_all(text.as_bytes()).and_then(|()| o.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

/// Writes to stderr, ignoring a closed stderr.
pub fn err(text: &str) {
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// What a command concluded; it alone decides the exit status (`cuorder --help`, "Exit codes").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Exit 0: no problem possible (`check`), agrees (`conform`), reproduced (`replay`), done (other commands).
    Done,
    /// Exit 1: a problem found, a disagreement with the hardware, a failed gate, a finding that did not replay.
    Problem,
    /// Exit 2: bad input or usage.
    BadInput,
    /// Exit 3: inconclusive: a budget or Ctrl-C stopped the search (or a run) first, a sampled or bounded search
    /// found nothing, or there is no GPU to run on.
    Inconclusive,
}

impl Verdict {
    /// The verdict of a search or run (`check`, `explore`, `time`): a problem found is one whatever stopped the
    /// search after it; else a search cut short (`cut_short`: a budget, Ctrl-C, sampling, a bound) decides nothing;
    /// else no problem is possible.
    pub fn of_search(found: bool, cut_short: bool) -> Verdict {
        if found {
            Verdict::Problem
        } else if cut_short {
            Verdict::Inconclusive
        } else {
            Verdict::Done
        }
    }

    /// The process exit status: 0, 1, 2 or 3 (as the variants say).
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Done => 0,
            Verdict::Problem => 1,
            Verdict::BadInput => 2,
            Verdict::Inconclusive => 3,
        }
    }
}

impl From<Verdict> for ExitCode {
    fn from(v: Verdict) -> ExitCode {
        ExitCode::from(v.exit_code())
    }
}

/// Prints `message` as `error: MESSAGE` on stderr: bad input or usage ([`Verdict::BadInput`]).
pub fn bad_input(message: &str) -> ExitCode {
    err(&format!("error: {message}\n"));
    Verdict::BadInput.into()
}

/// Prints a load error on stderr (with its source snippets): bad input ([`Verdict::BadInput`]).
pub fn fail(e: LoadError) -> ExitCode {
    err(&e.rendered);
    Verdict::BadInput.into()
}

/// `--format`: how a command prints its result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

impl Format {
    /// [`fail`], or with `--format json` the JSON load-error document of `command` on stdout (docs/json.md).
    pub fn fail(self, command: &str, e: LoadError) -> ExitCode {
        match self {
            Format::Text => fail(e),
            Format::Json => {
                say(&crate::json::load_error(command, &e.issues).to_json());
                Verdict::BadInput.into()
            }
        }
    }
}

/// The search budgets every exploring command takes.
#[derive(clap::Args, Clone, Copy)]
pub struct Budgets {
    /// Stop after this many distinct states.
    #[arg(long, default_value_t = 2_000_000)]
    pub max_states: usize,
    /// Stop when the search would hold more than this many MiB: its estimate of the states it holds, or the
    /// process's resident memory where the system reports it (Linux).
    #[arg(long, default_value_t = 4096)]
    pub max_memory_mb: usize,
    /// Stop after this many seconds of searching (also `--time-limit`, as `explore` calls it).
    #[arg(long, visible_alias = "time-limit", default_value_t = 600)]
    pub max_time_s: u64,
}

impl Budgets {
    /// The budgets as the search's limits (MiB and seconds converted to bytes and ms; resident memory counted).
    pub fn limits(self) -> Limits {
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
pub struct TorchArgs {
    /// Lower PyTorch calls as this ProcessGroupNCCL version (P3: batch_isend_irecv's end events inside the NCCL
    /// group before PR 82450, after it since).
    #[arg(long, value_enum, value_name = "VERSION")]
    pub torch_version: Option<TorchVersionArg>,
    /// How the default process group was initialised (P2): `lazy` (per-pair P2P communicators) or `eager`
    /// (`init_process_group(.., device_id=..)`).
    #[arg(long, value_enum, value_name = "INIT")]
    pub torch_init: Option<TorchInitArg>,
    /// TORCH_NCCL_AVOID_RECORD_STREAMS: works stash their tensors until `wait()` instead of `record_stream` (P4).
    #[arg(long, value_name = "true|false", action = clap::ArgAction::Set)]
    pub torch_avoid_record_streams: Option<bool>,
}

/// `--torch-version`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TorchVersionArg {
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
pub enum TorchInitArg {
    /// `init_process_group("nccl")`: communicators created lazily.
    Lazy,
    /// `init_process_group("nccl", device_id=..)`: eager (PR 132900).
    Eager,
}

impl TorchVersionArg {
    /// The version as the loader names it.
    fn model(self) -> TorchVersion {
        match self {
            TorchVersionArg::Before82450 => TorchVersion::Before82450,
            TorchVersionArg::V2_4 => TorchVersion::V2_4,
            TorchVersionArg::Since82450 => TorchVersion::Since82450,
        }
    }
}

impl TorchInitArg {
    /// The initialisation as the loader names it.
    fn model(self) -> TorchInit {
        match self {
            TorchInitArg::Lazy => TorchInit::Lazy,
            TorchInitArg::Eager => TorchInit::Eager,
        }
    }
}

impl TorchArgs {
    /// The settings as the loader takes them.
    pub fn options(self) -> TorchOptions {
        TorchOptions {
            version: self.torch_version.map(TorchVersionArg::model),
            init: self.torch_init.map(TorchInitArg::model),
            avoid_record_streams: self.torch_avoid_record_streams,
        }
    }

    /// The command-line arguments that give `t` (a saved finding's settings): the argument values that
    /// [`TorchArgs::options`] maps to them.
    pub fn from_options(t: TorchOptions) -> TorchArgs {
        TorchArgs {
            torch_version: t.version.and_then(|v| TorchVersionArg::value_variants().iter().copied().find(|a| a.model() == v)),
            torch_init: t.init.and_then(|i| TorchInitArg::value_variants().iter().copied().find(|a| a.model() == i)),
            torch_avoid_record_streams: t.avoid_record_streams,
        }
    }

    /// The settings given, as command-line flags (`--torch-version before82450`), one per setting.
    pub fn flags(self) -> Vec<String> {
        let name = |v: Option<clap::builder::PossibleValue>| v.map(|p| p.get_name().to_string()).unwrap_or_default();
        let mut given = Vec::new();
        if let Some(v) = self.torch_version {
            given.push(format!("--torch-version {}", name(v.to_possible_value())));
        }
        if let Some(i) = self.torch_init {
            given.push(format!("--torch-init {}", name(i.to_possible_value())));
        }
        if let Some(a) = self.torch_avoid_record_streams {
            given.push(format!("--torch-avoid-record-streams {a}"));
        }
        given
    }

    /// The settings given, as a line for the report (empty when none).
    pub fn note(self) -> String {
        let given = self.flags();
        if given.is_empty() {
            String::new()
        } else {
            format!("PyTorch calls lowered with {} (overriding the program's `torch:`)\n", given.join(", "))
        }
    }
}

/// The profile (`--profile`: a built-in name or a file) and the program a command names, the program loaded with
/// the PyTorch settings `torch`; its warnings ([`crate::load_warnings`]) are printed on stderr.
///
/// Errors: the profile or the program does not load, or `torch` sets something for a program that makes no
/// PyTorch call (a setting that changes nothing is refused, not reported as applied).
pub fn load_inputs(profile: &str, program: &Path, color: bool, torch: TorchArgs) -> Result<(Profile, Program), LoadError> {
    let prof = crate::load_profile(profile)?;
    let (prog, _) = crate::load_program_with(program, color, &torch.options())?;
    // ("PyTorch calls lowered with --torch-version before82450 (overriding the program's `torch:`)" was printed for
    // a program with neither.)
    let given = torch.flags();
    if !given.is_empty() && !prog.uses_torch {
        let message = format!(
            "{}: {} {} no effect: the program makes no PyTorch call and has no `torch:` setting; drop {}",
            program.display(),
            given.join(", "),
            if given.len() == 1 { "has" } else { "have" },
            if given.len() == 1 { "it" } else { "them" }
        );
        return Err(LoadError::unplaced(program.display().to_string(), message));
    }
    for w in crate::load_warnings(&prog) {
        eprintln!("warning: {}: {w}", program.display());
    }
    Ok((prof, prog))
}
