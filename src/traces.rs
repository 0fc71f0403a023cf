//! Folders of recorded hardware runs: each folder with a `MANIFEST.ron` holds observations `X.ron` of programs
//! `programs/X.ron`, the profile to check them under, and the disagreements already explained. Used by
//! `cuorder conform --dir` (a CI gate: every bad file is reported, the rest still checked, a summary printed) and by
//! the test that re-checks every committed trace.
//!
//! One trace file is read by [`load_trace`] only, so that another trace format can be added in one place.
//!
//! Runs packed by the thousand (`*.pack`, from `cuorder-hw batch`) are read by [`packed`].

pub mod packed;
pub mod stats;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use cuorder_model::observation::Observation;
use cuorder_model::profile::Profile;
use cuorder_model::program::Program;
use cuorder_model::semantics::Semantics;
use cuorder_sim::conform::{conform, Conformance};
use cuorder_sim::explore::Limits;

use crate::{load_observation_for, load_profile, load_program, read_input, LoadError};

/// Folders deeper than this many levels below the `--dir` root are not entered (reported instead).
pub const MAX_DIR_DEPTH: usize = 32;

/// The name of a folder's manifest.
pub const MANIFEST: &str = "MANIFEST.ron";

/// A folder's `MANIFEST.ron`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// A built-in profile name, or a profile file (relative to the manifest's folder or to any folder above it, e.g.
    /// the repository root).
    pub profile: String,
    /// Trace stem -> why the model and this hardware run disagree, or why the check is inconclusive.
    #[serde(default)]
    pub expect_disagree: BTreeMap<String, String>,
    /// Trace stem -> stem of its program under `programs/`, for a trace not named after its program (e.g. a re-run
    /// `X-watchdog-90s` of program `X`). Default: the trace's own stem.
    #[serde(default)]
    pub programs: BTreeMap<String, String>,
}

/// Reads one trace file into an observation of `program` (the one seam for trace formats).
///
/// Errors: unreadable, not an observation, another format version, or not fitting `program` (its program name,
/// ranks, threads and op numbers).
pub fn load_trace(path: &Path, program: &Program) -> Result<Observation, LoadError> {
    load_observation_for(path, program)
}

/// What became of one trace (or one file that should have been a trace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Agrees,
    /// Disagrees, and the manifest explains why.
    ExplainedDisagreement(String),
    /// Inconclusive, and the manifest explains why.
    ExplainedInconclusive(String),
    /// Disagrees and nothing explains it (the details).
    Disagrees(String),
    /// Inconclusive and nothing explains it (why it is).
    Inconclusive(String),
    /// Agrees, but the manifest expects a disagreement (the stale explanation).
    UnexpectedAgreement(String),
    /// The trace, its program, its folder's manifest or profile could not be read (the error).
    Error(String),
    /// An observation in a folder without a manifest: not checked (fails the gate).
    NotInManifest,
    /// A `.ron` file in a folder without a manifest that is no observation (e.g. calibration measurements):
    /// listed, not checked, and no failure.
    NotATrace,
}

impl Status {
    /// Whether the gate passes for this entry.
    pub fn passes(&self) -> bool {
        matches!(self, Status::Agrees | Status::ExplainedDisagreement(_) | Status::ExplainedInconclusive(_) | Status::NotATrace)
    }

    /// A short word for the summary and JUnit.
    pub fn word(&self) -> &'static str {
        match self {
            Status::Agrees => "agrees",
            Status::ExplainedDisagreement(_) => "explained disagreement",
            Status::ExplainedInconclusive(_) => "explained inconclusive",
            Status::Disagrees(_) => "DISAGREES",
            Status::Inconclusive(_) => "INCONCLUSIVE (not explained in the manifest)",
            Status::UnexpectedAgreement(_) => "agrees, but the manifest expects a disagreement",
            Status::Error(_) => "ERROR",
            Status::NotInManifest => "NOT CHECKED (no MANIFEST.ron in its folder)",
            Status::NotATrace => "skipped (no MANIFEST.ron in its folder, and not an observation)",
        }
    }

    /// The details, if any.
    pub fn details(&self) -> Option<&str> {
        match self {
            Status::Agrees | Status::NotInManifest | Status::NotATrace => None,
            Status::ExplainedDisagreement(s)
            | Status::ExplainedInconclusive(s)
            | Status::Disagrees(s)
            | Status::Inconclusive(s)
            | Status::UnexpectedAgreement(s)
            | Status::Error(s) => Some(s),
        }
    }
}

/// One checked file.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The folder (a suite in JUnit), relative to the `--dir` root.
    pub folder: PathBuf,
    /// The file, relative to the `--dir` root.
    pub file: PathBuf,
    pub status: Status,
    /// The conformance check, when one ran.
    pub conformance: Option<Conformance>,
}

/// The result of `conform --dir`: every entry in a fixed order (sorted paths).
#[derive(Debug, Clone, Default)]
pub struct DirReport {
    pub entries: Vec<Entry>,
    /// Ctrl-C stopped the check before every trace was checked: `entries` holds those checked (and the files outside
    /// every manifest), and the gate is not decided unless one of them failed it.
    pub interrupted: bool,
}

impl DirReport {
    /// Whether every entry passes (and there is at least one trace), every trace having been checked.
    pub fn passed(&self) -> bool {
        !self.interrupted && !self.entries.is_empty() && self.entries.iter().all(|e| e.status.passes())
    }

    /// Count of entries per status word, in a fixed order.
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let mut m = BTreeMap::new();
        for e in &self.entries {
            *m.entry(e.status.word()).or_default() += 1;
        }
        m
    }

    /// One line per entry (with details for the failing ones), then the summary line.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        for e in &self.entries {
            s.push_str(&format!("{}: {}", e.file.display(), e.status.word()));
            match (&e.status, e.status.details()) {
                (Status::Disagrees(d), _) => s.push_str(&format!("\n{d}")),
                (_, Some(d)) => s.push_str(&format!(" ({d})")),
                _ => {}
            }
            if !s.ends_with('\n') {
                s.push('\n');
            }
        }
        if self.interrupted {
            s.push_str(&format!("{}: the files above were checked, the others were not\n", cuorder_sim::progress::INTERRUPTED));
        }
        s.push_str(&self.summary());
        s.push('\n');
        s
    }

    /// "N files: a agree, ... ; gate passed|FAILED" ("1 file: ..." for one).
    pub fn summary(&self) -> String {
        let parts: Vec<String> = self.counts().iter().map(|(w, n)| format!("{n} {w}")).collect();
        let failed = self.entries.iter().any(|e| !e.status.passes());
        let verdict = match (self.passed(), self.interrupted && !failed) {
            (true, _) => "gate passed",
            (false, true) => "gate not decided (interrupted by Ctrl-C)",
            (false, false) => "gate FAILED",
        };
        let files = cuorder_model::describe::count(self.entries.len() as u64, "file");
        format!("{files}: {}; {verdict}", if parts.is_empty() { "none".to_string() } else { parts.join(", ") })
    }

    /// The report as JUnit XML: one test suite per folder, one test case per file (failures and errors as such, files
    /// outside any manifest as errors too).
    pub fn to_junit(&self) -> String {
        use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
        let mut report = Report::new("cuorder conform");
        let mut suites: BTreeMap<PathBuf, TestSuite> = BTreeMap::new();
        for e in &self.entries {
            let suite = suites.entry(e.folder.clone()).or_insert_with(|| TestSuite::new(e.folder.display().to_string()));
            let status = match &e.status {
                Status::NotATrace => {
                    let mut st = TestCaseStatus::skipped();
                    st.set_message(e.status.word());
                    st
                }
                s if s.passes() => TestCaseStatus::success(),
                Status::Error(_) | Status::NotInManifest => {
                    let mut st = TestCaseStatus::non_success(NonSuccessKind::Error);
                    st.set_message(e.status.word());
                    if let Some(d) = e.status.details() {
                        st.set_description(d);
                    }
                    st
                }
                _ => {
                    let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    st.set_message(e.status.word());
                    if let Some(d) = e.status.details() {
                        st.set_description(d);
                    }
                    st
                }
            };
            let mut case = TestCase::new(e.file.display().to_string(), status);
            case.set_classname(e.folder.display().to_string());
            if let (true, Some(d)) = (e.status.passes(), e.status.details()) {
                case.set_system_out(d);
            }
            suite.add_test_case(case);
        }
        report.add_test_suites(suites.into_values());
        report.to_string().unwrap_or_else(|e| format!("<!-- cannot write JUnit XML: {e} -->\n"))
    }
}

/// Every folder under `root` (itself included), sorted, each entered once even through symlink loops, at most
/// [`MAX_DIR_DEPTH`] levels deep. Folders that cannot be read or are too deep come back as errors.
fn folders(root: &Path) -> (Vec<PathBuf>, Vec<(PathBuf, String)>) {
    let mut out = vec![];
    let mut errors = vec![];
    let mut seen = BTreeSet::new();
    fn walk(dir: &Path, depth: usize, seen: &mut BTreeSet<PathBuf>, out: &mut Vec<PathBuf>, errors: &mut Vec<(PathBuf, String)>) {
        let canon = match std::fs::canonicalize(dir) {
            Ok(c) => c,
            Err(e) => return errors.push((dir.to_path_buf(), format!("cannot read folder: {e}"))),
        };
        if !seen.insert(canon) {
            return; // already entered (a symlink loop or a second link to it)
        }
        if depth > MAX_DIR_DEPTH {
            return errors.push((dir.to_path_buf(), format!("deeper than MAX_DIR_DEPTH = {MAX_DIR_DEPTH} levels: not entered")));
        }
        out.push(dir.to_path_buf());
        let rd = match std::fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) => return errors.push((dir.to_path_buf(), format!("cannot read folder: {e}"))),
        };
        let mut subs: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_dir()).collect();
        subs.sort();
        for s in subs {
            walk(&s, depth + 1, seen, out, errors);
        }
    }
    walk(root, 0, &mut seen, &mut out, &mut errors);
    (out, errors)
}

/// The `.ron` files directly in `dir`, sorted.
fn ron_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else { return vec![] };
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "ron") && !p.is_dir())
        .collect();
    v.sort();
    v
}

/// Every `MANIFEST.ron` under `dir`, sorted.
pub fn manifests(dir: &Path) -> Vec<PathBuf> {
    folders(dir).0.into_iter().map(|d| d.join(MANIFEST)).filter(|m| m.is_file()).collect()
}

/// The result of re-checking one packed run (trace path `FILE#NAME`).
#[derive(Debug)]
pub struct TraceCheck {
    pub trace: PathBuf,
    pub conformance: Conformance,
    /// The manifest's explanation when a disagreement is expected.
    pub explained: Option<String>,
}

/// Reads a manifest.
///
/// Errors: unreadable, or not a manifest (with line and column).
pub fn load_manifest(path: &Path) -> Result<Manifest, LoadError> {
    let text = read_input(path)?;
    ron::from_str(&text).map_err(|e| LoadError::at(path, e.position.line as u32, e.position.col as u32, e.code.to_string()))
}

/// The manifest's profile: a built-in name, or a file relative to the manifest's folder or any folder above it.
pub(crate) fn manifest_profile(m: &Manifest, dir: &Path) -> Result<(Profile, Option<PathBuf>), LoadError> {
    if let Some(p) = Profile::builtin(&m.profile) {
        return Ok((p, None));
    }
    let given = Path::new(&m.profile);
    let candidates: Vec<PathBuf> = if given.is_absolute() {
        vec![given.to_path_buf()]
    } else {
        let abs = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        abs.ancestors().map(|a| a.join(given)).collect()
    };
    match candidates.iter().find(|c| c.is_file()) {
        Some(c) => load_profile(c.to_str().unwrap_or("")).map(|p| (p, std::fs::canonicalize(c).ok())),
        None => Err(LoadError::plain(
            Path::new(&m.profile),
            format!("profile not found: not built in, and not in {} or any folder above it", dir.display()),
        )),
    }
}

/// Re-checks every trace under `root` against the current model with `limits`; never stops at a bad file.
///
/// Ctrl-C (the stop flag of `limits.progress`) stops it between traces and stops the search of the trace in hand
/// (which is then not listed): the report holds the traces checked so far and says it was interrupted
/// ([`DirReport::interrupted`]).
pub fn check_dir(root: &Path, limits: &Limits) -> DirReport {
    let rel = |p: &Path| p.strip_prefix(root).map(Path::to_path_buf).unwrap_or_else(|_| p.to_path_buf());
    let mut entries = vec![];
    let (dirs, dir_errors) = folders(root);
    for (d, why) in dir_errors {
        entries.push(Entry { folder: rel(&d), file: rel(&d), status: Status::Error(why), conformance: None });
    }
    let manifest_dirs: BTreeSet<PathBuf> = dirs.iter().filter(|d| d.join(MANIFEST).is_file()).cloned().collect();
    let mut profile_files: BTreeSet<PathBuf> = BTreeSet::new();
    let mut loose: Vec<PathBuf> = vec![];
    let stopped = || limits.progress.as_ref().is_some_and(|p| p.stop_requested());
    for d in &dirs {
        if manifest_dirs.contains(d) {
            if stopped() {
                continue;
            }
            let (mut es, prof) = check_manifest_folder(d, limits, &rel);
            entries.append(&mut es);
            profile_files.extend(prof);
        } else if !(d.file_name().is_some_and(|n| n == "programs") && d.parent().is_some_and(|p| manifest_dirs.contains(p))) {
            loose.extend(ron_files(d));
        }
    }
    // A `.ron` file outside every manifest folder is reported, unless a manifest uses it as its profile.
    for f in loose {
        if std::fs::canonicalize(&f).is_ok_and(|c| profile_files.contains(&c)) {
            continue;
        }
        let folder = rel(f.parent().unwrap_or(root));
        let status = if looks_like_observation(&f) { Status::NotInManifest } else { Status::NotATrace };
        entries.push(Entry { folder, file: rel(&f), status, conformance: None });
    }
    entries.sort_by(|a, b| a.file.cmp(&b.file));
    DirReport { entries, interrupted: stopped() }
}

/// The entries of one manifest folder, and the canonical path of the profile file it uses.
fn check_manifest_folder(dir: &Path, limits: &Limits, rel: &dyn Fn(&Path) -> PathBuf) -> (Vec<Entry>, Option<PathBuf>) {
    let folder = rel(dir);
    let manifest_path = dir.join(MANIFEST);
    let traces: Vec<PathBuf> = ron_files(dir).into_iter().filter(|p| !p.ends_with(MANIFEST)).collect();
    let entry = |file: &Path, status: Status, conformance: Option<Conformance>| Entry {
        folder: folder.clone(),
        file: rel(file),
        status,
        conformance,
    };
    let loaded = load_manifest(&manifest_path).and_then(|m| manifest_profile(&m, dir).map(|p| (m, p)));
    let (m, (profile, profile_file)) = match loaded {
        Ok(x) => x,
        Err(e) => {
            // Without a manifest and profile nothing here can be checked: the manifest and each trace are reported.
            let why = e.rendered.trim_end().to_string();
            let mut out = vec![entry(&manifest_path, Status::Error(why.clone()), None)];
            for t in &traces {
                out.push(entry(t, Status::Error(format!("not checked: {}", first_line(&why))), None));
            }
            return (out, None);
        }
    };
    let mut out = vec![];
    // Packed runs (`*.pack`): each is checked like a trace named `FILE#NAME`.
    let stop = limits.progress.as_ref();
    let stopped = || stop.is_some_and(|p| p.stop_requested());
    let packed = packed::check_packs(dir, &profile, &m.expect_disagree, check_threads(), stop);
    let mut stems: BTreeSet<String> = traces.iter().filter_map(|t| t.file_stem().and_then(|s| s.to_str()).map(String::from)).collect();
    stems.extend(packed.iter().filter_map(|(trace, _)| trace.to_str().and_then(|t| t.rsplit_once('#')).map(|(_, n)| n.to_string())));
    // (After Ctrl-C the packed runs not checked are not listed: nothing is said of the names then.)
    for stem in m.expect_disagree.keys().chain(m.programs.keys()) {
        if !stems.contains(stem) && !stopped() {
            out.push(entry(
                &manifest_path,
                Status::Error(format!("names trace {stem}.ron, which is not in {}", folder.display())),
                None,
            ));
        }
    }
    for t in traces {
        if stopped() {
            break;
        }
        let stem = t.file_stem().and_then(|s| s.to_str()).unwrap_or("").to_string();
        let program_stem = m.programs.get(&stem).cloned().unwrap_or_else(|| stem.clone());
        let explained = m.expect_disagree.get(&stem).cloned();
        let program_file = dir.join("programs").join(format!("{program_stem}.ron"));
        let checked = regular_file(&program_file)
            .and_then(|()| regular_file(&t))
            .and_then(|()| load_program(&program_file, false))
            .and_then(|(program, _)| load_trace(&t, &program).map(|obs| (program, obs)));
        let (program, obs) = match checked {
            Ok(x) => x,
            Err(e) => {
                out.push(entry(&t, Status::Error(e.rendered.trim_end().to_string()), None));
                continue;
            }
        };
        let sem = Semantics::new(&program, &profile);
        let c = conform(&sem, &obs, limits);
        if stopped() {
            // Ctrl-C cut this trace's search short: it was not checked, and is not listed.
            break;
        }
        out.push(entry(&t, status_of(&c, explained), Some(c)));
        if let Some(p) = stop {
            p.add_item();
        }
    }
    for (trace, checked) in packed {
        match checked {
            Ok(p) => out.push(entry(&p.trace, status_of(&p.conformance, p.explained), Some(p.conformance))),
            Err(why) => out.push(entry(&trace, Status::Error(why), None)),
        }
    }
    (out, profile_file)
}

/// A trace's status from its conformance and the manifest's explanation. A limit that stopped the search makes any
/// answer inconclusive (a disagreement may be an unexplored state).
fn status_of(c: &Conformance, explained: Option<String>) -> Status {
    let inconclusive = c.inconclusive.clone().or_else(|| c.limit_hit.clone());
    match (&inconclusive, c.agrees(), explained) {
        (Some(_), _, Some(why)) => Status::ExplainedInconclusive(why),
        (Some(why), _, None) => Status::Inconclusive(why.clone()),
        (None, true, None) => Status::Agrees,
        (None, true, Some(why)) => Status::UnexpectedAgreement(why),
        (None, false, Some(why)) => Status::ExplainedDisagreement(why),
        (None, false, None) => Status::Disagrees(c.to_text().trim_end().to_string()),
    }
}

/// Whether the file starts (after comments and white space) like an observation: `Observation(`. Reads at most
/// 64 KiB.
fn looks_like_observation(path: &Path) -> bool {
    use std::io::Read;
    let mut head = Vec::new();
    let Ok(f) = std::fs::File::open(path) else { return false };
    if f.take(64 * 1024).read_to_end(&mut head).is_err() {
        return false;
    }
    let text = String::from_utf8_lossy(&head);
    let mut rest: &str = &text;
    loop {
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix("//") {
            rest = r.split_once('\n').map_or("", |x| x.1);
        } else if let Some(r) = rest.strip_prefix("/*") {
            rest = r.split_once("*/").map_or("", |x| x.1);
        } else {
            break;
        }
    }
    rest.starts_with("Observation(") || rest.starts_with("(format_version")
}

/// Nothing but a regular file (or one that does not exist, which the reader reports) is read under `conform --dir`:
/// a FIFO there hung the whole run (issue 33).
///
/// Errors: the path names a FIFO, socket, device or folder.
pub(crate) fn regular_file(path: &Path) -> Result<(), LoadError> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => Err(LoadError::plain(path, "not a regular file: not read")),
        _ => Ok(()),
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// Threads for checking packed runs: `CUORDER_CHECK_THREADS`, else the machine's parallelism (at most 8).
fn check_threads() -> usize {
    std::env::var("CUORDER_CHECK_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(8))
}
