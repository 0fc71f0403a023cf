//! Packed traces: a manifest folder may hold `*.pack` files (thousands of runs each, `cuorder_hw::pack`). Each run
//! is checked against its program: `programs/NAME.ron` when the folder has it, else the program regenerated from
//! its seed by the generator the file's `meta generator` line names (its version must be this build's, and the
//! regenerated program's fingerprint must be the one recorded). Runs are checked on several threads.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cuorder_hw::pack;
use cuorder_model::profile::Profile;
use cuorder_model::program::Program;
use cuorder_model::semantics::Semantics;
use cuorder_sim::conform::conform;
use cuorder_sim::cover::{CoverOptions, COVER_VERSION};
use cuorder_sim::explore::Limits;

use super::TraceCheck;
use crate::LoadError;

fn err(path: &Path, m: impl std::fmt::Display) -> LoadError {
    LoadError::plain(path, m.to_string())
}

/// The generator a packed file names: `cover VERSION ranks=R max_threads=T max_ops=N pool=B`.
///
/// Errors: another generator, another version, or a malformed option.
pub fn cover_options(meta: &BTreeMap<String, String>) -> Result<CoverOptions, String> {
    let g = meta.get("generator").ok_or("no `meta generator` line: the programs cannot be regenerated")?;
    let mut it = g.split_whitespace();
    if it.next() != Some("cover") {
        return Err(format!("generator `{g}`: only `cover` programs can be regenerated"));
    }
    let v: u32 = it.next().and_then(|v| v.parse().ok()).ok_or_else(|| format!("generator `{g}`: no version"))?;
    if v != COVER_VERSION {
        return Err(format!(
            "the runs are of cover generator version {v}, this build generates version {COVER_VERSION}: their \
             programs cannot be regenerated (keep the old generator, or commit the programs under programs/)"
        ));
    }
    let mut o = CoverOptions::default();
    for kv in it {
        let (k, v) = kv.split_once('=').ok_or_else(|| format!("generator option `{kv}` is not KEY=VALUE"))?;
        let num = || v.parse::<u32>().map_err(|_| format!("generator option `{kv}`: not a number"));
        match k {
            "ranks" => o.ranks = num()?,
            "max_threads" => o.max_threads = num()?,
            "max_ops" => o.max_ops = num()?,
            "pool" => o.pool = v.parse().map_err(|_| format!("generator option `{kv}`: not true/false"))?,
            _ => return Err(format!("unknown generator option `{kv}`")),
        }
    }
    Ok(o)
}

/// The program of a packed run: `programs/NAME.ron` if present, else regenerated from the seed in `cover-SEED`.
fn program_of(dir: &Path, name: &str, opts: &Result<CoverOptions, String>) -> Result<Program, String> {
    let file = dir.join("programs").join(format!("{name}.ron"));
    if file.exists() {
        return crate::load_program(&file, false).map(|(p, _)| p).map_err(|e| e.rendered);
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

/// Reads every run of a packed file with its program.
///
/// Errors: unreadable or malformed file, a program that cannot be found or regenerated, a fingerprint mismatch.
pub fn load_runs(dir: &Path, file: &Path) -> Result<Vec<Run>, LoadError> {
    let text = std::fs::read_to_string(file).map_err(|e| err(file, e))?;
    let packed = pack::parse(&text).map_err(|e| err(file, e))?;
    let opts = cover_options(&packed.meta);
    let mut out = Vec::with_capacity(packed.runs.len());
    for r in &packed.runs {
        let p = program_of(dir, &r.program, &opts).map_err(|e| err(file, format!("line {}: {e}", r.line)))?;
        let o = r.observation(&p).map_err(|e| err(file, e))?;
        out.push((r.program.clone(), p, o));
    }
    Ok(out)
}

/// Checks every run of every packed file of `dir` under `profile`, on up to `threads` threads; returns one
/// [`TraceCheck`] per run (trace path `FILE#NAME`), in file order.
///
/// Errors: as [`load_runs`].
pub fn check_packs(
    dir: &Path,
    profile: &Profile,
    explained: &BTreeMap<String, String>,
    threads: usize,
) -> Result<Vec<TraceCheck>, LoadError> {
    let mut out = vec![];
    for file in pack_files(dir) {
        let runs = load_runs(dir, &file)?;
        let n = threads.max(1);
        let mut results: Vec<Option<TraceCheck>> = (0..runs.len()).map(|_| None).collect();
        std::thread::scope(|s| {
            let chunks: Vec<_> = results.chunks_mut(runs.len().div_ceil(n).max(1)).collect();
            let mut start = 0;
            for chunk in chunks {
                let runs = &runs;
                let file = &file;
                let len = chunk.len();
                let first = start;
                start += len;
                s.spawn(move || {
                    for (k, slot) in chunk.iter_mut().enumerate() {
                        let (name, p, o) = &runs[first + k];
                        let sem = Semantics::new(p, profile);
                        let conformance = conform(&sem, o, &Limits::default());
                        *slot = Some(TraceCheck {
                            trace: PathBuf::from(format!("{}#{name}", file.display())),
                            conformance,
                            explained: explained.get(name).cloned(),
                        });
                    }
                });
            }
        });
        out.extend(results.into_iter().flatten());
    }
    Ok(out)
}
