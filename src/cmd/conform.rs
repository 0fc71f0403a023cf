//! `cuorder conform`: checks a hardware observation against the model ("agrees" or each disagreement), or, with
//! `--dir`, every packed trace under a folder as a CI gate (`--junit`), or prints that folder's statistics.

use std::path::Path;
use std::process::ExitCode;

use cuorder::cli::{bad_input, fail, load_inputs, say, TorchArgs, Verdict};
use cuorder_model::semantics::Semantics;
use cuorder_sim::explore::Limits;

use super::Ctx;
use crate::ConformArgs;

/// Runs `cuorder conform`.
pub fn run(ctx: &Ctx, a: ConformArgs) -> ExitCode {
    match (&a.dir, &a.program, &a.trace) {
        (Some(dir), ..) if a.stats => match cuorder::traces::stats::batch_stats(dir) {
            Ok(s) => {
                say(&s.to_text());
                ExitCode::SUCCESS
            }
            Err(e) => fail(e),
        },
        (Some(dir), ..) => conform_dir(dir, a.junit.as_deref(), &a.budgets.limits()),
        (None, Some(program), Some(trace)) => {
            let (prof, prog) = match load_inputs(&a.profile, program, ctx.color, TorchArgs::default()) {
                Ok(x) => x,
                Err(e) => return fail(e),
            };
            let obs = match cuorder::traces::load_trace(trace, &prog) {
                Ok(o) => o,
                Err(e) => return fail(e),
            };
            let sem = Semantics::new(&prog, &prof);
            let c = cuorder_sim::conform::conform(&sem, &obs, &a.budgets.limits());
            say(&c.to_text());
            // A budget that stopped the search before it showed the observation decides nothing (exit 3, as for
            // `check`); it was reported as a disagreement (exit 1).
            let verdict = if c.agrees() {
                Verdict::Done
            } else if c.stopped_short() {
                Verdict::Inconclusive
            } else {
                Verdict::Problem
            };
            verdict.into()
        }
        _ => bad_input("conform needs PROGRAM and TRACE, or --dir DIR"),
    }
}

/// `cuorder conform --dir DIR`: every file under DIR, one line each, and a summary; exit 1 unless the gate passes.
fn conform_dir(dir: &Path, junit: Option<&Path>, limits: &Limits) -> ExitCode {
    if !dir.is_dir() {
        return bad_input(&format!("{}: not a folder", dir.display()));
    }
    let rep = cuorder::traces::check_dir(dir, limits);
    say(&rep.to_text());
    if let Some(path) = junit {
        if let Err(e) = std::fs::write(path, rep.to_junit()) {
            return bad_input(&format!("cannot write {}: {e}", path.display()));
        }
    }
    if rep.entries.is_empty() {
        return bad_input(&format!("no trace and no MANIFEST.ron under {}", dir.display()));
    }
    (if rep.passed() { Verdict::Done } else { Verdict::Problem }).into()
}
