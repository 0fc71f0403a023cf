//! Finding artifacts (issue 8, "replay and shrinking"): one RON file per finding that names the program (path and
//! content hash), the profile, the strategy and seed that found it, the explicit decision list (the schedule of
//! steps), the kind of problem and its key, and the cuorder version. `cuorder replay FILE` reproduces it exactly or
//! says where it diverged.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use cuorder_model::profile::Profile;
use cuorder_model::semantics::{Semantics, Step};
use cuorder_model::verdict::ProblemKey;
use cuorder_sim::run::{replay, Diverged, Trace};

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
        let text = ron::ser::to_string_pretty(a, ron::ser::PrettyConfig::default()).expect("an artifact serializes");
        std::fs::write(&path, text + "\n").map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        out.push(path);
    }
    Ok(out)
}

/// Reads an artifact, its profile's [`Profile::source`] restored from `profile_file`.
///
/// Errors: the file cannot be read, or is not an artifact of this format (the message gives line and column).
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
