//! `cuorder check`: explores every execution of a program and reports deadlocks, data races and undefined
//! behaviour (exit 0 none possible, 1 found, 2 bad input, 3 a budget stopped the search first).

use std::process::ExitCode;

use cuorder::cli::{load_inputs, say, Format};
use cuorder::progress::{watch, Meter};
use cuorder_model::semantics::Semantics;
use cuorder_sim::explore::Limits;

use super::Ctx;
use crate::CheckArgs;

/// Runs `cuorder check`.
pub fn run(ctx: &Ctx, a: CheckArgs) -> ExitCode {
    let (prof, prog) = match load_inputs(&a.profile, &a.program, ctx.color, a.torch) {
        Ok(x) => x,
        Err(e) => return a.format.fail("check", e),
    };
    let w = watch(ctx.progress, Meter::States { max_states: a.budgets.max_states as u64, max_time_s: a.budgets.max_time_s });
    let rep = cuorder::report::check(&prog, &prof, &Limits { progress: Some(w.progress()), first: a.first, ..a.budgets.limits() });
    w.finish();
    match a.format {
        Format::Text => say(&(a.torch.note() + &rep.to_text())),
        Format::Json => {
            let sem = Semantics::new(&prog, &prof);
            say(&cuorder::json::check(&sem, &rep, &a.program.display().to_string()).to_json())
        }
    };
    rep.verdict().into()
}
