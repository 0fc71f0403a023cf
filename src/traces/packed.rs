//! Packed traces: a manifest folder may hold `*.pack` files (thousands of runs each, `cuorder_hw::pack`). Each run
//! is checked against its program: `programs/NAME.ron` when the folder has it, else the program regenerated from
//! its seed by the generator the file's `meta generator` line names (its version must be this build's, and the
//! regenerated program's fingerprint must be the one recorded). Runs are checked on several threads. Each run is
//! read, joined with its program and validated against it on its own: a bad line, a missing program or a run that
//! names a rank, thread or op its program lacks is reported as that run's error, and every other run is still
//! checked (issue 33: one bad run lost every result of the folder).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cuorder_hw::pack;
use cuorder_model::profile::Profile;
use cuorder_model::format::{MAX_EXPANDED_OPS, MAX_RANKS, MAX_THREADS_PER_RANK};
use cuorder_model::program::Program;
use cuorder_model::semantics::Semantics;
use cuorder_sim::conform::conform;
use cuorder_sim::cover::{CoverOptions, COVER_VERSION};
use cuorder_sim::explore::Limits;
use cuorder_sim::progress::Progress;

use super::TraceCheck;
use crate::LoadError;

fn err(path: &Path, m: impl std::fmt::Display) -> LoadError {
    LoadError::plain(path, m.to_string())
}

/// The generator a packed file names: `cover VERSION ranks=R max_threads=T max_ops=N pool=B`, bounded like a
/// program (`ranks` 1 to [`MAX_RANKS`], `max_threads` 1 to [`MAX_THREADS_PER_RANK`], `ranks × max_ops` at most
/// [`MAX_EXPANDED_OPS`]): a generator line is input, and regenerating from `ranks=4294967295` asked for 412 GB.
///
/// Errors: no generator line, another generator, another version, a malformed or out-of-bounds option (naming the
/// `meta generator` line when the file has one).
pub fn cover_options(meta: &BTreeMap<String, String>) -> Result<CoverOptions, String> {
    cover_options_at(meta, &BTreeMap::new())
}

fn cover_options_at(meta: &BTreeMap<String, String>, lines: &BTreeMap<String, usize>) -> Result<CoverOptions, String> {
    let at = |m: String| match lines.get("generator") {
        Some(n) => format!("line {n}: {m}"),
        None => m,
    };
    let g = meta.get("generator").ok_or("no `meta generator` line: the programs cannot be regenerated")?;
    let mut it = g.split_whitespace();
    if it.next() != Some("cover") {
        return Err(at(format!("generator `{g}`: only `cover` programs can be regenerated")));
    }
    let v: u32 = it.next().and_then(|v| v.parse().ok()).ok_or_else(|| at(format!("generator `{g}`: no version")))?;
    if v != COVER_VERSION {
        return Err(at(format!(
            "the runs are of cover generator version {v}, this build generates version {COVER_VERSION}: their \
             programs cannot be regenerated (keep the old generator, or commit the programs under programs/)"
        )));
    }
    let mut o = CoverOptions::default();
    for kv in it {
        let (k, v) = kv.split_once('=').ok_or_else(|| at(format!("generator option `{kv}` is not KEY=VALUE")))?;
        let num = |lo: u64, hi: u64| {
            v.parse::<u64>()
                .ok()
                .filter(|x| (lo..=hi).contains(x))
                .map(|x| x as u32)
                .ok_or_else(|| at(format!("generator option `{kv}`: not a number from {lo} to {hi}")))
        };
        match k {
            "ranks" => o.ranks = num(1, MAX_RANKS as u64)?,
            "max_threads" => o.max_threads = num(1, MAX_THREADS_PER_RANK as u64)?,
            "max_ops" => o.max_ops = num(1, MAX_EXPANDED_OPS as u64)?,
            "pool" => o.pool = v.parse().map_err(|_| at(format!("generator option `{kv}`: not true/false")))?,
            _ => return Err(at(format!("unknown generator option `{kv}`"))),
        }
    }
    if o.ranks as u64 * o.max_ops as u64 > MAX_EXPANDED_OPS as u64 {
        return Err(at(format!(
            "generator `{g}`: ranks × max_ops = {} is more than a program may hold (MAX_EXPANDED_OPS = {MAX_EXPANDED_OPS})",
            o.ranks as u64 * o.max_ops as u64
        )));
    }
    Ok(o)
}

/// The program of a packed run: `programs/NAME.ron` if present, else regenerated from the seed in `cover-SEED`.
/// Only a regular file is read (a FIFO there hung the whole `conform --dir`).
fn program_of(dir: &Path, name: &str, opts: &Result<CoverOptions, String>) -> Result<Program, String> {
    let file = dir.join("programs").join(format!("{name}.ron"));
    if file.exists() {
        return super::regular_file(&file)
            .and_then(|()| crate::load_program(&file, false))
            .map(|(p, _)| p)
            .map_err(|e| e.rendered.trim_end().to_string());
    }
    let seed: u64 = name
        .strip_prefix("cover-")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("run of `{name}`: no programs/{name}.ron and not a `cover-SEED` name"))?;
    let o = opts.as_ref().map_err(|e| e.clone())?;
    Ok(cuorder_sim::cover::program(seed, o))
}

/// Every `*.pack` file of `dir`, sorted.
pub fn pack_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "pack")).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// One packed run joined with its program: (name, program, observation).
pub type Run = (String, Program, cuorder_model::observation::Observation);

/// One run of a packed file as read: its name (the program's; `line N` for a line that names none) and the run
/// joined with its program and validated against it, or why it could not be.
pub type ReadRun = (String, Result<(Program, cuorder_model::observation::Observation), String>);

/// Reads every run of a packed file with its program; each run on its own ([`ReadRun`]): a malformed line, a
/// program that cannot be found or regenerated, a fingerprint mismatch or an observation that does not fit its
/// program (a rank, thread or op it lacks; [`cuorder_model::validate::validate_observation`]) is that run's error.
///
/// Errors: an unreadable file or one that is not a packed file (its header), where no run can be read.
pub fn read_runs(dir: &Path, file: &Path) -> Result<Vec<ReadRun>, LoadError> {
    super::regular_file(file)?;
    let text = std::fs::read_to_string(file).map_err(|e| err(file, e))?;
    let packed = pack::parse_all(&text).map_err(|e| err(file, e))?;
    let opts = cover_options_at(&packed.meta, &packed.meta_lines);
    let mut out: Vec<(usize, ReadRun)> = packed
        .bad_lines
        .iter()
        .map(|(line, why)| (*line, (format!("line {line}"), Err(format!("line {line}: {why}")))))
        .collect();
    for r in &packed.runs {
        let read = match r.bad_environment {
            Some(e) => Err(format!("line {}: its environment (line {e}) is malformed", r.line)),
            None => program_of(dir, &r.program, &opts)
                .map_err(|e| format!("line {}: {e}", r.line))
                .and_then(|p| r.observation(&p).map(|o| (p, o)))
                .and_then(|(p, o)| match cuorder_model::validate::validate_observation(&p, &o) {
                    Ok(()) => Ok((p, o)),
                    Err(errs) => Err(format!("line {}: the run does not fit its program: {errs}", r.line)),
                }),
        };
        out.push((r.line, (r.program.clone(), read)));
    }
    out.sort_by_key(|(line, _)| *line);
    Ok(out.into_iter().map(|(_, r)| r).collect())
}

/// Reads every run of a packed file with its program.
///
/// Errors: as [`read_runs`], and the first run that cannot be read.
pub fn load_runs(dir: &Path, file: &Path) -> Result<Vec<Run>, LoadError> {
    read_runs(dir, file)?.into_iter().map(|(name, r)| r.map(|(p, o)| (name, p, o)).map_err(|e| err(file, e))).collect()
}

/// A packed run as checked: its trace path `FILE#NAME`, and the check or why the run could not be checked.
pub type PackedCheck = (PathBuf, Result<TraceCheck, String>);

/// Checks every run of every packed file of `dir` under `profile`, on up to `threads` threads; returns one
/// [`PackedCheck`] per run (trace path `FILE#NAME`), in file order, and one per file that could not be read at all
/// (trace path `FILE`). Nothing stops the others: a bad run or file is reported on its own. Only `stop`'s flag
/// (Ctrl-C) stops them: each run's search then stops, and the runs not checked to the end are left out of the result.
pub fn check_packs(dir: &Path, profile: &Profile, explained: &BTreeMap<String, String>, threads: usize, stop: Option<&Arc<Progress>>) -> Vec<PackedCheck> {
    let mut out = vec![];
    let stopped = || stop.is_some_and(|p| p.stop_requested());
    let limits = Limits { progress: stop.cloned(), ..Limits::default() };
    for file in pack_files(dir) {
        if stopped() {
            break;
        }
        let runs = match read_runs(dir, &file) {
            Ok(r) => r,
            Err(e) => {
                out.push((file.clone(), Err(e.rendered.trim_end().to_string())));
                continue;
            }
        };
        let n = threads.max(1);
        let mut results: Vec<Option<PackedCheck>> = (0..runs.len()).map(|_| None).collect();
        std::thread::scope(|s| {
            let chunks: Vec<_> = results.chunks_mut(runs.len().div_ceil(n).max(1)).collect();
            let mut start = 0;
            for chunk in chunks {
                let runs = &runs;
                let file = &file;
                let len = chunk.len();
                let first = start;
                start += len;
                let (limits, stopped) = (&limits, &stopped);
                s.spawn(move || {
                    for (k, slot) in chunk.iter_mut().enumerate() {
                        if stopped() {
                            break;
                        }
                        let (name, read) = &runs[first + k];
                        let trace = PathBuf::from(format!("{}#{name}", file.display()));
                        let checked = read.as_ref().map_err(Clone::clone).map(|(p, o)| {
                            let sem = Semantics::new(p, profile);
                            TraceCheck {
                                trace: trace.clone(),
                                conformance: conform(&sem, o, limits),
                                explained: explained.get(name).cloned(),
                            }
                        });
                        if stopped() {
                            // Ctrl-C cut this run's search short: it was not checked, and is not listed.
                            break;
                        }
                        *slot = Some((trace, checked));
                        if let Some(p) = stop {
                            p.add_item();
                        }
                    }
                });
            }
        });
        out.extend(results.into_iter().flatten());
    }
    out
}
