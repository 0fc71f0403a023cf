//! Finding artifacts (issue 8, "replay and shrinking"): one RON file per finding that names the program (path and
//! content hash), the profile, the strategy and seed that found it, the explicit decision list (the schedule of
//! steps), the kind of problem and its key, and the cuorder version. `cuorder replay FILE` reproduces it exactly or
//! says where it diverged.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use cuorder_model::profile::Profile;
use cuorder_model::program::Program;
use cuorder_model::semantics::{Semantics, Step};
use cuorder_model::verdict::ProblemKey;
use cuorder_sim::run::{replay, Diverged, Trace};

use crate::report::RenderedFinding;
use crate::LoadError;

/// Artifact format version; bump on any change to [`Artifact`]'s shape.
pub const ARTIFACT_FORMAT_VERSION: u32 = 1;

/// One saved finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    pub format_version: u32,
    /// `cuorder` version that saved it.
    pub cuorder_version: String,
    /// The program file as given on the command line.
    pub program: PathBuf,
    /// XXH3-128 of the program file's bytes, 32 lowercase hex digits: `replay` warns when the file changed.
    pub program_hash: String,
    pub profile: Profile,
    /// The profile file the finding was found under, as given on the command line (`--profile my.ron`); absent for a
    /// built-in profile and in artifacts of cuorder before this field. `profile` holds the profile itself (a replay
    /// never reads the file); [`load`] restores this as its [`Profile::source`], so that reports name the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_file: Option<String>,
    /// The strategy that found it ("exhaustive", "random", "pct (depth 3)").
    pub strategy: String,
    /// The seed of the execution that found it (sampling strategies).
    pub seed: Option<u64>,
    /// "deadlock", "data race", "undefined" or "stale read".
    pub kind: String,
    /// The first line of the finding's explanation.
    pub summary: String,
    /// What identifies the problem across executions (the ops involved).
    pub key: ProblemKey,
    /// The decision list: every step from the initial state, in order.
    pub schedule: Vec<Step>,
    /// The PyTorch dialect's settings the program was loaded with (`explore --torch-version ..`); absent: the
    /// program's own `torch:`. `replay` and `shrink` load the program with them.
    #[serde(default, skip_serializing_if = "cuorder_model::format::TorchOptions::is_empty")]
    pub torch: cuorder_model::format::TorchOptions,
    /// The program's text as saved, when it is at most [`MAX_EMBEDDED_PROGRAM_BYTES`]: `replay` and `shrink` use it
    /// when the file is gone or changed, so that a finding replays from anywhere, exactly. Absent in artifacts of
    /// larger programs and of cuorder before this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program_text: Option<String>,
}

impl Artifact {
    /// The artifact of `finding` (its kind, first line and witness schedule) with key `key`, found in the program
    /// file `program` whose bytes are `bytes`, under `profile` (and its file, [`Profile::source`]), by this
    /// cuorder. The strategy is empty, and the seed and the PyTorch settings are none: the caller sets what applies.
    pub fn new(program: &Path, bytes: &[u8], profile: &Profile, finding: &RenderedFinding, key: &ProblemKey) -> Artifact {
        Artifact {
            format_version: ARTIFACT_FORMAT_VERSION,
            cuorder_version: env!("CARGO_PKG_VERSION").to_string(),
            program: program.to_path_buf(),
            program_hash: program_hash(bytes),
            profile: profile.clone(),
            profile_file: profile.source.clone(),
            strategy: String::new(),
            seed: None,
            kind: finding.kind.clone(),
            summary: finding.text.lines().next().unwrap_or("").to_string(),
            key: key.clone(),
            schedule: finding.finding.witness.clone(),
            torch: cuorder_model::format::TorchOptions::default(),
            program_text: embeddable(bytes),
        }
    }
}

/// The largest program text an artifact embeds, in bytes (1 MiB).
pub const MAX_EMBEDDED_PROGRAM_BYTES: usize = 1 << 20;

/// The text an artifact embeds for a program file of `bytes`: `None` when larger than
/// [`MAX_EMBEDDED_PROGRAM_BYTES`] or not UTF-8.
pub fn embeddable(bytes: &[u8]) -> Option<String> {
    (bytes.len() <= MAX_EMBEDDED_PROGRAM_BYTES).then(|| String::from_utf8(bytes.to_vec()).ok()).flatten()
}

/// The content hash recorded in an artifact.
pub fn program_hash(bytes: &[u8]) -> String {
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(bytes))
}

/// Writes one artifact per finding into `dir` (created) as `finding-N-KIND.ron` (N from 1, KIND with dashes),
/// and returns the paths written.
///
/// Errors: the folder cannot be created or a file cannot be written (the message names the path).
pub fn save_all(dir: &Path, artifacts: &[Artifact]) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut out = vec![];
    for (i, a) in artifacts.iter().enumerate() {
        let path = dir.join(format!("finding-{}-{}.ron", i + 1, a.kind.replace(' ', "-")));
        write(&path, a)?;
        out.push(path);
    }
    Ok(out)
}

/// Writes one artifact to `path` (RON).
///
/// Errors: the file cannot be written (the message names the path).
pub fn write(path: &Path, a: &Artifact) -> Result<(), String> {
    let text = ron::ser::to_string_pretty(a, ron::ser::PrettyConfig::default()).expect("an artifact serializes");
    std::fs::write(path, text + "\n").map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// A saved finding opened with the program it is about ([`open`]).
pub struct Opened {
    pub artifact: Artifact,
    /// The program file (`--program`, or found by [`program_path`]; the recorded path when its saved text is used).
    pub path: PathBuf,
    pub program: Program,
    /// The program's text as loaded.
    pub text: String,
}

/// Reads the artifact at `artifact` and loads the program it is about, with the artifact's PyTorch settings:
/// `program` (`--program`) if given, else the file [`program_path`] finds, except that the text saved in the
/// artifact wins over a file that is gone or changed since (said on stderr).
///
/// Errors: the artifact does not load, the program does not load, or there is neither a program file nor a saved
/// text.
pub fn open(artifact: &Path, program: Option<PathBuf>, color: bool) -> Result<Opened, LoadError> {
    let a = load(artifact).map_err(|e| LoadError::unplaced(artifact.display().to_string(), e))?;
    let found = program.clone().or_else(|| program_path(artifact, &a));
    let file_matches = |p: &PathBuf| std::fs::read(p).map(|b| program_hash(&b) == a.program_hash).unwrap_or(false);
    let embedded = match (&program, &found, &a.program_text) {
        (None, None, Some(t)) => Some(t.clone()),
        (None, Some(p), Some(t)) if !file_matches(p) => {
            eprintln!(
                "warning: {} changed since the finding was saved; replaying the program saved in {} (--program {} uses the file)",
                p.display(),
                artifact.display(),
                p.display()
            );
            Some(t.clone())
        }
        _ => None,
    };
    if let Some(text) = embedded {
        let name = a.program.file_stem().and_then(|s| s.to_str()).unwrap_or("program").to_string();
        let shown = format!("{} (saved in {})", a.program.display(), artifact.display());
        let program = crate::load_program_text_with(&shown, &name, &text, color, &a.torch)?;
        let path = a.program.clone();
        return Ok(Opened { artifact: a, path, program, text });
    }
    let Some(path) = found else {
        return Err(LoadError::unplaced(
            artifact.display().to_string(),
            format!(
                "{}: the program this artifact records, {}, is not there (nor next to the artifact), and the artifact does not hold its text; pass --program FILE",
                artifact.display(),
                a.program.display()
            ),
        ));
    };
    let (program, text) = crate::load_program_with(&path, color, &a.torch)?;
    Ok(Opened { artifact: a, path, program, text })
}

/// Reads an artifact, its profile's [`Profile::source`] restored from `profile_file`.
///
/// Errors: the file cannot be read, or is not an artifact of this format (the message gives line and column), or
/// its profile is one `--profile` refuses ([`Profile::problems`]: a launch queue of depth 0, S6; a zero NCCL plan,
/// N14; ...): `replay` and `shrink` ran under it.
pub fn load(path: &Path) -> Result<Artifact, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut a: Artifact = ron::from_str(&text).map_err(|e| {
        let mut m = format!("{}:{}:{}: not a finding artifact: {}", path.display(), e.position.line, e.position.col, e.code);
        // A program given where its finding was expected (the likeliest mix-up): say where findings come from.
        if cuorder_model::format::load(&path.display().to_string(), &text).is_ok() {
            m.push_str(&format!(
                "\n  help: {} is a program; save its findings with `cuorder explore {} --first --save DIR`, then give DIR/finding-1-*.ron",
                path.display(),
                path.display()
            ));
        }
        m
    })?;
    if a.format_version != ARTIFACT_FORMAT_VERSION {
        return Err(format!(
            "{}: artifact format {} (this cuorder reads format {ARTIFACT_FORMAT_VERSION})",
            path.display(),
            a.format_version
        ));
    }
    let problems = a.profile.problems();
    if !problems.is_empty() {
        return Err(format!("{}: the profile saved in this finding is not valid ({})", path.display(), problems.join("; ")));
    }
    a.profile.source = a.profile_file.clone();
    Ok(a)
}

/// The program file an artifact read from `artifact_path` names: its recorded path when that exists (relative to
/// the working directory), else the same file name next to the artifact, else the recorded path relative to the
/// artifact's folder; `None` when none exists.
pub fn program_path(artifact_path: &Path, a: &Artifact) -> Option<PathBuf> {
    let dir = artifact_path.parent().unwrap_or(Path::new("."));
    let mut candidates = vec![a.program.clone()];
    if let Some(name) = a.program.file_name() {
        candidates.push(dir.join(name));
    }
    if a.program.is_relative() {
        candidates.push(dir.join(&a.program));
    }
    candidates.into_iter().find(|p| p.is_file())
}

/// How a replay ended.
#[derive(Debug)]
pub enum Replayed {
    /// The schedule replayed and the same problem is there at its end.
    Reproduced(Trace),
    /// The schedule replayed, but the problem is not there (the model changed).
    Vanished(Trace),
    /// A step of the schedule is not enabled where it is replayed.
    Diverged(Diverged),
}

/// Replays an artifact's schedule on `sem` (its program and profile) and checks that its problem is there.
pub fn replay_artifact(sem: &Semantics, a: &Artifact) -> Replayed {
    match replay(sem, &a.schedule) {
        Err(d) => Replayed::Diverged(d),
        Ok(t) => {
            let st = match cuorder_sim::run::replay_state(sem, &a.schedule) {
                Ok(st) => st,
                Err(d) => return Replayed::Diverged(d),
            };
            if cuorder_sim::explore::problems_at(sem, &st).iter().any(|k| k.matches(&a.key)) {
                Replayed::Reproduced(t)
            } else {
                Replayed::Vanished(t)
            }
        }
    }
}
