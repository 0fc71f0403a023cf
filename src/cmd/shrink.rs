//! `cuorder shrink ARTIFACT`: removes ops (as written) and ranks from a saved finding's program while a problem of
//! the same kind (and rule) persists, and writes the minimal program and its finding artifact.

use std::path::Path;
use std::process::ExitCode;

use cuorder::artifact::{Artifact, Opened};
use cuorder::cli::{bad_input, err, fail, say, TorchArgs, Verdict};
use cuorder::progress::{watch, Meter};
use cuorder::shrink::Shrunk;
use cuorder_model::describe::count;

use super::Ctx;
use crate::ShrinkArgs;

/// Runs `cuorder shrink`.
pub fn run(ctx: &Ctx, args: ShrinkArgs) -> ExitCode {
    // Loaded once through the normal path for its diagnostics.
    let Opened { artifact: a, path, text, .. } = match cuorder::artifact::open(&args.artifact, args.program, ctx.color) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "program".into());
    // Where the result goes is settled before the search, which can take minutes: `-o DIR` writes `NAME-min.ron` in
    // DIR, and a folder that does not exist is refused at once (it was refused only when writing, after shrinking
    // an 8-stage pipeline for 4 minutes).
    let out = match args.out {
        Some(o) if o.is_dir() => o.join(format!("{name}-min.ron")),
        Some(o) => o,
        None => args.artifact.with_file_name(format!("{name}-min.ron")),
    };
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty() && !d.is_dir()) {
        return bad_input(&format!("cannot write {}: the folder {} does not exist", out.display(), dir.display()));
    }
    // Ctrl-C stops the shrink: the smallest program found so far is written and reported (exit 3).
    let w = watch(ctx.progress, Meter::Items { total: args.max_candidates as u64, unit: "candidates" });
    let opt = cuorder::shrink::ShrinkOptions {
        max_states: args.max_states,
        max_candidates: args.max_candidates,
        torch: a.torch,
        stop: Some(w.progress()),
        ..Default::default()
    };
    let shrunk = cuorder::shrink::shrink(&name, &text, &a.profile, &a.kind, &opt);
    w.finish();
    let shrunk = match shrunk {
        Ok(s) => s,
        Err(e) => {
            err(&format!("error: {e}\n"));
            return (if opt.stop.as_ref().is_some_and(|p| p.stop_requested()) { Verdict::Inconclusive } else { Verdict::Problem }).into();
        }
    };
    let art_path = out.with_extension("finding.ron");
    let text = header(&args.artifact, &path, &a, &shrunk, &out) + &shrunk.text;
    if let Err(e) = std::fs::write(&out, &text) {
        return bad_input(&format!("cannot write {}: {e}", out.display()));
    }
    let new = Artifact { strategy: "shrink".into(), torch: a.torch, ..Artifact::new(&out, text.as_bytes(), &a.profile, &shrunk.finding, &shrunk.key) };
    if let Err(e) = cuorder::artifact::write(&art_path, &new) {
        return bad_input(&e);
    }
    // Nothing removed: say so instead of "shrunk .. to 15 ops (from 15 ops)".
    let (before, after) = sizes(&shrunk);
    let what = if shrunk.interrupted {
        format!("{}: the smallest program found so far from {} has {after} (from {before}", cuorder_sim::progress::INTERRUPTED, path.display())
    } else if (shrunk.ops_after, shrunk.ranks_after) == (shrunk.ops_before, shrunk.ranks_before) {
        format!("found no smaller program than {} ({after}", path.display())
    } else {
        format!("shrunk {} to {after} (from {before}", path.display())
    };
    say(&format!(
        "{what}; {} checked)\n{}: {}\nwrote {} and {} (cuorder replay {})\n",
        count(shrunk.candidates as u64, "candidate"),
        shrunk.finding.kind,
        headline(&shrunk),
        out.display(),
        art_path.display(),
        art_path.display()
    ));
    if cuorder::shrink::has_loops(&shrunk.text) {
        say("note: the shrunk program still has loops (For/Repeat): shrink removes ops as written, so an op inside a loop stays in every iteration; an unrolled program (one thread per rank, e.g. `cuorder gen pipeline ... --unroll`) shrinks further\n");
    }
    (if shrunk.interrupted { Verdict::Inconclusive } else { Verdict::Done }).into()
}

/// The sizes before and after, "3 ops on 1 rank".
fn sizes(shrunk: &Shrunk) -> (String, String) {
    let size = |ops: usize, ranks: u32| format!("{} on {}", count(ops as u64, "op"), count(u64::from(ranks), "rank"));
    (size(shrunk.ops_before, shrunk.ranks_before), size(shrunk.ops_after, shrunk.ranks_after))
}

/// The finding's first line, which may end by introducing the next ("on r1 act (device memory):").
fn headline(shrunk: &Shrunk) -> &str {
    shrunk.finding.text.lines().next().unwrap_or("").trim_end_matches(':')
}

/// The comment lines above the minimal program `out`: where it comes from (`artifact`, the program `path`), the
/// sizes, the finding, and the PyTorch flags it was found with.
fn header(artifact: &Path, path: &Path, a: &Artifact, shrunk: &Shrunk, out: &Path) -> String {
    // The finding was found with PyTorch settings given on the command line: the minimal program shows it only
    // with the same flags (its text keeps the program's own `torch:`), so the header says which.
    let flags = TorchArgs::from_options(a.torch).flags().join(" ");
    let with = if flags.is_empty() {
        String::new()
    } else {
        format!("// Found with {flags}: check it with `cuorder check {} {flags}` (its `torch:` is the original's).\n", out.display())
    };
    let (before, after) = sizes(shrunk);
    let cut = if shrunk.interrupted { "// The shrink was interrupted by Ctrl-C: the smallest program found so far, not a minimal one.\n" } else { "" };
    format!(
        "// Shrunk by `cuorder shrink {}` from {} ({before} -> {after}, {}):\n// {}: {}\n{with}{cut}",
        artifact.display(),
        path.display(),
        count(shrunk.candidates as u64, "candidate"),
        a.kind,
        headline(shrunk)
    )
}
