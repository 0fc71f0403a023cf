//! The `cuorder` library behind the command-line program: loading programs and profiles, `check` reports,
//! timelines, diagnostics rendering, and the progress display of long searches. The binary (`main.rs`, one module
//! per command in `cmd/`) only parses arguments and prints; what its commands share, exit codes included, is
//! [`cli`].

pub mod artifact;
pub mod cli;
pub mod diagnostics;
pub mod json;
pub mod progress;
pub mod report;
pub mod shrink;
pub mod timeline;
pub mod timing;
pub mod traces;

use std::path::Path;

use cuorder_model::format::TorchOptions;
use cuorder_model::profile::Profile;
use cuorder_model::program::Program;

/// At most this many bytes are read from any input file (program, profile, observation, manifest), in bytes
/// (256 MiB). Larger files are refused with an error naming the limit before they are read.
pub const MAX_INPUT_BYTES: u64 = 256 * 1024 * 1024;

/// One located load error, for `--format json` (the same errors as [`LoadError::rendered`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LoadIssue {
    /// The file concerned, as given.
    pub file: String,
    /// 1-based line, when the error has a place in the text.
    pub line: Option<u32>,
    /// 1-based column in characters, when the error has a place in the text.
    pub column: Option<u32>,
    pub message: String,
    pub help: Option<String>,
}

/// Why a program, profile, observation or manifest could not be loaded: `rendered` is ready to print (with source
/// snippets), `issues` are the same errors as data.
#[derive(Debug)]
pub struct LoadError {
    pub rendered: String,
    pub issues: Vec<LoadIssue>,
}

impl LoadError {
    /// One error with no place in a text: `error: FILE: MESSAGE`.
    pub fn plain(file: &Path, message: impl Into<String>) -> LoadError {
        let message = message.into();
        LoadError {
            rendered: format!("error: {}: {message}\n", file.display()),
            issues: vec![LoadIssue { file: file.display().to_string(), line: None, column: None, message, help: None }],
        }
    }

    /// One error about `file` (as given, or `-` for none) with no place in a text, whose message says what it is
    /// about: `error: MESSAGE`.
    pub fn unplaced(file: impl Into<String>, message: impl Into<String>) -> LoadError {
        let message = message.into();
        LoadError {
            rendered: format!("error: {message}\n"),
            issues: vec![LoadIssue { file: file.into(), line: None, column: None, message, help: None }],
        }
    }

    /// One error at `line`:`column` of `file`.
    pub fn at(file: &Path, line: u32, column: u32, message: impl Into<String>) -> LoadError {
        let message = message.into();
        LoadError {
            rendered: format!("error: {}:{line}:{column}: {message}\n", file.display()),
            issues: vec![LoadIssue { file: file.display().to_string(), line: Some(line), column: Some(column), message, help: None }],
        }
    }
}

/// Reads a whole input file as UTF-8, under [`MAX_INPUT_BYTES`].
///
/// Errors: the file cannot be opened or read, is larger than the limit, or is not UTF-8 (with the line and column
/// of the first bad byte).
pub fn read_input(path: &Path) -> Result<String, LoadError> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| LoadError::plain(path, format!("cannot read: {e}")))?;
    if file.metadata().is_ok_and(|m| m.len() > MAX_INPUT_BYTES) {
        return Err(LoadError::plain(
            path,
            format!("the file is larger than {MAX_INPUT_BYTES} bytes (MAX_INPUT_BYTES = 256 MiB)"),
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| LoadError::plain(path, format!("cannot read: {e}")))?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(LoadError::plain(
            path,
            format!("the file is larger than {MAX_INPUT_BYTES} bytes (MAX_INPUT_BYTES = 256 MiB)"),
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = good.iter().filter(|&&b| b == b'\n').count() as u32 + 1;
        let last_line = good.rsplit(|&b| b == b'\n').next().unwrap_or(&[]);
        let column = String::from_utf8_lossy(last_line).chars().count() as u32 + 1;
        LoadError::at(path, line, column, "the file is not valid UTF-8")
    })
}

/// `n` bytes with one decimal in the largest binary unit it reaches ("500.3 TiB", "12.0 GiB").
fn approx_bytes(n: u64) -> String {
    let units = [("PiB", 1u64 << 50), ("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    match units.iter().find(|(_, s)| n >= *s) {
        Some((u, s)) => format!("{:.1} {u}", n as f64 / *s as f64),
        None => format!("{n} B"),
    }
}

/// The most device memory one GPU has, in bytes: NVIDIA B300 (288 GB of HBM3e), the largest in 2026. A rank
/// whose device buffers add up to more cannot allocate them on any GPU.
pub const LARGEST_GPU_BYTES: u64 = 288_000_000_000;

/// Warnings about sizes no GPU can hold: one line per rank whose device buffers (`MemSpace::Device`, pooled or
/// not) add up to more than [`LARGEST_GPU_BYTES`], e.g. "rank 0: its device buffers add up to 500.3 TiB, more than
/// any GPU has (288 GB); a size typed in the wrong unit?". The program still loads and is checked (orderings do
/// not depend on sizes beyond the eager threshold), but a hardware run would fail at allocation.
pub fn size_warnings(p: &Program) -> Vec<String> {
    let mut out = Vec::new();
    for (r, rank) in p.ranks.iter().enumerate() {
        let total = rank
            .buffers
            .iter()
            .filter(|b| b.space == cuorder_model::program::MemSpace::Device)
            .fold(0u64, |a, b| a.saturating_add(b.bytes));
        if total > LARGEST_GPU_BYTES {
            out.push(format!(
                "rank {r}: its device buffers add up to {}, more than any GPU has ({} GB); a size typed in the wrong unit?",
                approx_bytes(total),
                LARGEST_GPU_BYTES / 1_000_000_000
            ));
        }
    }
    // Every rank usually declares the same buffers: say it once.
    if out.len() > 1 && p.ranks.iter().all(|r| r.buffers == p.ranks[0].buffers) {
        out.truncate(1);
        out[0] = out[0].replacen("rank 0: its device buffers add up", "every rank's device buffers add up", 1);
    }
    out
}

/// Warnings about a program that loads but says nothing: no thread has an op ("the program has no operations:
/// every verdict holds trivially"; an empty `threads: []` was accepted silently), then [`size_warnings`].
pub fn load_warnings(p: &Program) -> Vec<String> {
    let mut out = Vec::new();
    if p.ranks.iter().all(|r| r.threads.iter().all(|t| t.ops.is_empty())) {
        out.push("the program has no operations (no thread issues anything): every verdict holds trivially".to_string());
    }
    out.extend(size_warnings(p));
    out
}

/// Reads and validates a program file. The program's name is the file stem. Both the surface format and the
/// resolved form (as `cuorder gen` writes it) are accepted, and both pass [`Program::validate`].
///
/// Errors: the file cannot be read (see [`read_input`]), or it has syntax or validation errors (all of them, up to
/// the renderer's cap, rendered with file, line, column and a snippet).
pub fn load_program(path: &Path, color: bool) -> Result<(Program, String), LoadError> {
    load_program_with(path, color, &TorchOptions::default())
}

/// [`load_program`] with the PyTorch dialect's settings overridden by `torch` (`check --torch-version ..`).
///
/// Errors: as [`load_program`].
pub fn load_program_with(path: &Path, color: bool, torch: &TorchOptions) -> Result<(Program, String), LoadError> {
    let text = read_input(path)?;
    let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("program");
    let program = load_program_text_with(&path.display().to_string(), name, &text, color, torch)?;
    Ok((program, text))
}

/// [`load_program`] of a text already read: `file` names it in messages, `name` becomes the program's name.
///
/// Errors: as [`load_program`].
pub fn load_program_text(file: &str, name: &str, text: &str, color: bool) -> Result<Program, LoadError> {
    load_program_text_with(file, name, text, color, &TorchOptions::default())
}

/// [`load_program_text`] with the PyTorch dialect's settings overridden by `torch`.
///
/// Errors: as [`load_program`].
pub fn load_program_text_with(
    file: &str,
    name: &str,
    text: &str,
    color: bool,
    torch: &TorchOptions,
) -> Result<Program, LoadError> {
    // A UTF-8 byte-order mark (some Windows editors write one) is not part of the program; lines and columns are
    // counted without it, as editors show them. (It failed with "1:1: expected opening ( for struct Program".)
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (file, text) = (file.to_string(), text.to_string());
    match cuorder_model::format::load_with(name, &text, torch) {
        Ok(p) => Ok(p),
        Err(diags) => {
            // A resolved program (as `cuorder gen` and `cuorder-hw smoke-programs` write) is accepted too, after the
            // same validation.
            if text.trim_start().starts_with('(') || text.contains("ranks: [") {
                if let Ok(p) = ron::from_str::<Program>(&text) {
                    return match p.validate() {
                        Ok(()) => Ok(p),
                        Err(errs) => Err(LoadError {
                            rendered: errs.errors.iter().map(|e| format!("error: {file}: {e}\n")).collect::<String>()
                                + &if errs.more > 0 { format!("error: {file}: and {}\n", cuorder_model::describe::count(errs.more as u64, "more error")) } else { String::new() },
                            issues: errs
                                .errors
                                .iter()
                                .map(|e| LoadIssue { file: file.clone(), line: None, column: None, message: e.to_string(), help: None })
                                .collect(),
                        }),
                    };
                }
            }
            let shown = &diags[..diags.len().min(diagnostics::MAX_RENDERED_ERRORS)];
            Err(LoadError {
                rendered: diagnostics::render(&file, &text, &diags, color),
                issues: shown
                    .iter()
                    .map(|d| LoadIssue {
                        file: file.clone(),
                        line: Some(d.line),
                        column: Some(d.column),
                        message: d.message.clone(),
                        help: d.help.clone(),
                    })
                    .collect(),
            })
        }
    }
}

/// A profile by built-in name (`portable`, `eager`) or from a RON file; a file's profile records `spec` as its
/// [`Profile::source`], which reports name beside the profile's own `name`.
///
/// Errors: neither a built-in name nor a readable, valid profile file.
pub fn load_profile(spec: &str) -> Result<Profile, LoadError> {
    if let Some(p) = Profile::builtin(spec) {
        return Ok(p);
    }
    let path = Path::new(spec);
    if !path.is_file() {
        return Err(LoadError::plain(
            path,
            format!("unknown profile: not a built-in profile ({}) and no such file", Profile::BUILTIN.join(", ")),
        ));
    }
    let text = read_input(path)?;
    let p = Profile::from_ron(&text)
        .map_err(|e| LoadError::at(path, e.position.line as u32, e.position.col as u32, e.code.to_string()))?;
    match p.problems() {
        problems if problems.is_empty() => Ok(Profile { source: Some(spec.to_string()), ..p }),
        problems => Err(LoadError::plain(path, problems.join("; "))),
    }
}

/// Reads a hardware observation (as `cuorder-hw run` writes it). This is the one place a trace file is turned into
/// an [`cuorder_model::observation::Observation`]; a packed trace format would be read here too.
///
/// Errors: unreadable file, not an observation, or another format version.
pub fn load_observation(path: &Path) -> Result<cuorder_model::observation::Observation, LoadError> {
    let text = read_input(path)?;
    cuorder_model::observation::Observation::from_ron(&text).map_err(|e| LoadError::plain(path, e.to_string()))
}

/// [`load_observation`], then [`cuorder_model::validate::validate_observation`] against `program`: the trace's
/// program name and every rank, thread and op number in it.
///
/// Errors: as [`load_observation`], or every way the observation does not fit the program.
pub fn load_observation_for(path: &Path, program: &Program) -> Result<cuorder_model::observation::Observation, LoadError> {
    let obs = load_observation(path)?;
    cuorder_model::validate::validate_observation(program, &obs).map_err(|errs| {
        let mut e = LoadError { rendered: String::new(), issues: vec![] };
        for i in &errs.errors {
            let one = LoadError::plain(path, i.to_string());
            e.rendered.push_str(&one.rendered);
            e.issues.extend(one.issues);
        }
        if errs.more > 0 {
            e.rendered.push_str(&format!("error: {}: and {}\n", path.display(), cuorder_model::describe::count(errs.more as u64, "more error")));
        }
        e
    })?;
    Ok(obs)
}
