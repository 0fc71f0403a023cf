//! Folders of recorded hardware runs: each folder with a `MANIFEST.ron` holds observations `X.ron` of programs
//! `programs/X.ron`, the profile to check them under, and the disagreements already explained. Used by
//! `cuorder conform --dir` and by the CI test that re-checks every committed trace. Runs packed by the thousand
//! (`*.pack`) are read by [`packed`].

pub mod packed;
pub mod stats;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use cuorder_model::semantics::Semantics;
use cuorder_sim::conform::{conform, Conformance};
use cuorder_sim::explore::Limits;

use crate::{load_observation, load_profile, load_program, LoadError};

/// A folder's `MANIFEST.ron`.
#[derive(Debug, Deserialize)]
pub struct Manifest {
    /// A built-in profile name, or a profile file (relative to the repository root or the manifest's folder).
    pub profile: String,
    /// Trace stem -> why the model and this hardware run disagree.
    #[serde(default)]
    pub expect_disagree: BTreeMap<String, String>,
}

/// The result of re-checking one trace.
#[derive(Debug)]
pub struct TraceCheck {
    pub trace: PathBuf,
    pub conformance: Conformance,
    /// The manifest's explanation when a disagreement is expected.
    pub explained: Option<String>,
}

impl TraceCheck {
    /// Agrees, disagrees as the manifest explains, or is inconclusive as the manifest explains.
    pub fn as_expected(&self) -> bool {
        self.conformance.agrees() == self.explained.is_none()
    }
}

/// Every `MANIFEST.ron` under `dir`, sorted.
pub fn manifests(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else { return };
        let mut entries: Vec<_> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out);
            } else if p.file_name().is_some_and(|n| n == "MANIFEST.ron") {
                out.push(p);
            }
        }
    }
    walk(dir, &mut out);
    out
}

/// Re-checks every trace of the folder whose manifest is `manifest`, against the current model.
///
/// Errors: an unreadable manifest, profile, program or observation (rendered).
pub fn check_folder(manifest: &Path, repo_root: &Path) -> Result<Vec<TraceCheck>, LoadError> {
    let dir = manifest.parent().unwrap_or(Path::new("."));
    let text = std::fs::read_to_string(manifest)
        .map_err(|e| LoadError { rendered: format!("error: cannot read {}: {e}\n", manifest.display()) })?;
    let m: Manifest = ron::from_str(&text).map_err(|e| LoadError {
        rendered: format!("error: {}:{}:{}: {}\n", manifest.display(), e.position.line, e.position.col, e.code),
    })?;
    let profile = load_profile(&m.profile)
        .or_else(|_| load_profile(repo_root.join(&m.profile).to_str().unwrap_or("")))
        .or_else(|_| load_profile(dir.join(&m.profile).to_str().unwrap_or("")))?;
    let mut traces: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| LoadError { rendered: format!("error: {}: {e}\n", dir.display()) })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "ron") && !p.ends_with("MANIFEST.ron"))
        .collect();
    traces.sort();
    let packed_checks = packed::check_packs(dir, &profile, &m.expect_disagree, check_threads())?;
    for stem in m.expect_disagree.keys() {
        let in_pack = || packed_checks.iter().any(|c| c.trace.to_string_lossy().ends_with(&format!("#{stem}")));
        if !dir.join(format!("{stem}.ron")).exists() && !in_pack() {
            return Err(LoadError {
                rendered: format!("error: {}: explains a disagreement of {stem}.ron, which is not there\n", manifest.display()),
            });
        }
    }
    let mut out = vec![];
    for t in traces {
        let stem = t.file_stem().and_then(|s| s.to_str()).unwrap_or("").to_string();
        let (program, _) = load_program(&dir.join("programs").join(format!("{stem}.ron")), false)?;
        let obs = load_observation(&t)?;
        let sem = Semantics::new(&program, &profile);
        let conformance = conform(&sem, &obs, &Limits::default());
        out.push(TraceCheck { trace: t, conformance, explained: m.expect_disagree.get(&stem).cloned() });
    }
    out.extend(packed_checks);
    Ok(out)
}

/// Threads for checking packed runs: `CUORDER_CHECK_THREADS`, else the machine's parallelism (at most 8).
fn check_threads() -> usize {
    std::env::var("CUORDER_CHECK_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(8))
}
