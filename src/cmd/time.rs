//! `cuorder time`: one execution timed with a cost model (a discrete-event run over the model's steps): makespan,
//! bubbles, busy and idle streams, the critical path, as text or JSON, optionally a Chrome trace, a text timeline
//! and a comparison with a hardware run.

use std::path::Path;
use std::process::ExitCode;

use cuorder::cli::{fail, say, Format};
use cuorder::progress::{watch, Meter};
use cuorder::LoadError;
use cuorder_model::semantics::Semantics;
use cuorder_sim::timed::{Summary, TimedOptions, TimedRun};

use super::Ctx;
use crate::TimeArgs;

/// Runs `cuorder time`.
pub fn run(ctx: &Ctx, a: TimeArgs) -> ExitCode {
    // --max-time-s counts from here: loading a large program takes seconds too.
    let clock_start = std::time::Instant::now();
    // Errors other than the program's (usage, a cost model, a run past 2^64 - 1 ns, a trace that cannot be
    // written): text on stderr, or with --format json the documented `errors` array on stdout; exit 2.
    let file = a.program.display().to_string();
    let time_fail = |file: String, message: String| a.format.fail("time", LoadError::unplaced(file, message));
    // Options that have no effect are refused rather than silently dropped.
    if a.format == Format::Json && (a.lanes.is_some() || a.compare.is_some()) {
        let flag = if a.lanes.is_some() { "--lanes" } else { "--compare" };
        return time_fail(file, format!("{flag} adds to the text report and has no JSON form; drop it or use --format text"));
    }
    let inputs = [a.program.as_path(), Path::new(&a.profile), Path::new(&a.costs)];
    if let Some(e) = a.timeline.as_deref().and_then(|t| cuorder::timing::trace_path_error(t, &inputs)) {
        return time_fail("-".into(), e);
    }
    let (prof, prog) = match cuorder::cli::load_inputs(&a.profile, &a.program, ctx.color, a.torch) {
        Ok(x) => x,
        Err(e) => return a.format.fail("time", e),
    };
    let mut model = match cuorder::timing::load_costs(&a.costs) {
        Ok(m) => m,
        Err(e) => return time_fail(a.costs.clone(), format!("--costs: {e}")),
    };
    // Under logical costs every step costs 1: flags that change costs would change nothing.
    let cost_flag = if a.jitter > 0 { Some("--jitter") } else if a.connect_ns.is_some() { Some("--connect-ns") } else { None };
    if let (true, Some(flag)) = (model.logical, cost_flag) {
        return time_fail("-".into(), format!("{flag} has no effect under logical costs ({}), where every step costs 1; drop it or give --costs another model", model.name));
    }
    if let Some(ns) = a.connect_ns {
        model.connect_ns = ns;
        // Reports name the override, so that the figures are not mistaken for the model's own.
        model.name = format!("{}, --connect-ns {ns}", model.name);
    }
    let sem = Semantics::new(&prog, &prof);
    let max_time = a.max_time_s.map(std::time::Duration::from_secs_f64);
    // Ctrl-C stops the run where it is; the report then covers the steps taken (exit 3 unless something was found).
    let w = watch(ctx.progress, Meter::Steps { max_steps: a.max_steps as u64, time_limit_s: a.max_time_s });
    let opt = TimedOptions {
        seed: a.seed,
        jitter_ns: a.jitter,
        max_steps: a.max_steps,
        max_time,
        clock_start: Some(clock_start),
        withhold: false,
        stop: Some(w.progress()),
    };
    let run = TimedRun { settings: a.torch.flags(), ..cuorder::timing::time_run(&sem, &model, &opt, !a.no_withheld_run) };
    w.finish();
    if run.makespan_ns == u64::MAX {
        return time_fail(file.clone(), saturated(&sem, &run, &file, &model.name));
    }
    let sum = cuorder_sim::timed::summarize(&sem, &run);
    let verdict = cuorder::timing::verdict(&run);
    if let Some(path) = &a.timeline {
        if let Err(e) = cuorder::timing::write_chrome_trace(&sem, &run, path) {
            return time_fail(path.display().to_string(), e);
        }
    }
    match a.format {
        Format::Text => match text(&sem, &run, &sum, &a, &file) {
            Ok(text) => say(&text),
            Err(e) => return fail(e),
        },
        Format::Json => {
            let out = cuorder::json::Output {
                schema_version: cuorder::json::SCHEMA_VERSION,
                command: "time".into(),
                exit_code: verdict.exit_code(),
                check: None,
                errors: None,
                time: Some(cuorder::timing::time_out(&sem, &run, &sum, &file)),
                explore: None,
            };
            say(&out.to_json())
        }
    };
    // The process ends here: handing the run, the model and the program back to the allocator one piece at a time
    // would cost more than a tenth of a 1,024-rank pipeline's run (millions of items, op tables and spans), so they
    // are left for the OS to reclaim (as compilers do; issue 9, scale).
    std::mem::forget(run);
    std::mem::forget(sum);
    std::mem::forget(sem);
    std::mem::forget(prog);
    verdict.into()
}

/// The text report: the timing, then `--lanes`' text timeline and `--compare`'s accuracy against a hardware run.
///
/// Errors: `--compare`'s observation does not load or does not fit the program.
fn text(sem: &Semantics, run: &TimedRun, sum: &Summary, a: &TimeArgs, file: &str) -> Result<String, LoadError> {
    let mut text = cuorder::timing::report_text(sem, run, sum, file);
    if let Some(w) = a.lanes {
        text.push('\n');
        text.push_str(&cuorder::timing::lanes_text(sem, run, usize::from(w)));
    }
    if let Some(obs) = &a.compare {
        let obs = cuorder::traces::load_trace(obs, sem.program)?;
        match cuorder::timing::accuracy(sem, run, &obs) {
            Ok(acc) => text.push_str(&format!("\n{}\n", acc.to_text())),
            // A hardware run that hung is a result, not bad input: say it beside the prediction.
            Err(e) => text.push_str(&format!("\nagainst the hardware run: {e}\n")),
        }
    }
    Ok(text)
}

/// Why a run whose times reached 2^64 - 1 ns has no times to report (they saturate there instead of wrapping): the
/// first step that reached it, and where its cost comes from (`costs`: the cost model's name).
fn saturated(sem: &Semantics, run: &TimedRun, file: &str, costs: &str) -> String {
    let at = run.times_ns.iter().position(|&t| t == u64::MAX).unwrap_or(0);
    let (lane, what) = cuorder_sim::timed::describe(sem, &run.schedule[at], run.host_op(at));
    format!(
        "{file}: the timed run reached 2^64 - 1 ns (about 584 years), where times saturate, at step {at} ({lane}: \
         {what}); its cost comes from the program's durations and sizes and from the cost model \
         ({costs}): one of them is too large to time"
    )
}
