//! `cuorder conform`: checks a hardware observation against the model ("agrees" or each disagreement), or, with
//! `--dir`, every packed trace under a folder as a CI gate (`--junit`), or prints that folder's statistics.

use std::path::Path;
use std::process::ExitCode;

use cuorder::cli::{bad_input, fail, load_inputs, say, Budgets, TorchArgs, Verdict};
use cuorder::progress::{watch, Meter};
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
        (Some(dir), ..) => conform_dir(ctx, dir, a.junit.as_deref(), &a.budgets),
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
            // Ctrl-C stops the search: an agreement found so far stands, else the result is inconclusive (exit 3).
            let w = watch(ctx.progress, meter(&a.budgets));
            let c = cuorder_sim::conform::conform(&sem, &obs, &Limits { progress: Some(w.progress()), ..a.budgets.limits() });
            w.finish();
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

/// The progress bar of a conformance search (the states of the trace being checked).
fn meter(b: &Budgets) -> Meter {
    Meter::States { max_states: b.max_states as u64, max_time_s: b.max_time_s }
}

/// `cuorder conform --dir DIR`: every file under DIR, one line each, and a summary; exit 1 unless the gate passes.
/// Ctrl-C stops between traces (and the search of the trace in hand): the files checked so far are reported, the
/// report says it stopped, and the exit is 1 if one of them failed the gate, else 3.
fn conform_dir(ctx: &Ctx, dir: &Path, junit: Option<&Path>, budgets: &Budgets) -> ExitCode {
    if !dir.is_dir() {
        return bad_input(&format!("{}: not a folder", dir.display()));
    }
    let w = watch(ctx.progress, meter(budgets));
    let rep = cuorder::traces::check_dir(dir, &Limits { progress: Some(w.progress()), ..budgets.limits() });
    w.finish();
    say(&rep.to_text());
    if let Some(path) = junit {
        if let Err(e) = std::fs::write(path, rep.to_junit()) {
            return bad_input(&format!("cannot write {}: {e}", path.display()));
        }
    }
    if rep.interrupted {
        return Verdict::of_search(rep.entries.iter().any(|e| !e.status.passes()), true).into();
    }
    if rep.entries.is_empty() {
        return bad_input(&format!("no trace and no MANIFEST.ron under {}", dir.display()));
    }
    (if rep.passed() { Verdict::Done } else { Verdict::Problem }).into()
}
