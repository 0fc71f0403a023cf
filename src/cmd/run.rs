//! `cuorder run`: one execution of a program (a seeded random one, or the witness of a `check` finding) printed as
//! a per-rank, per-stream timeline, optionally written as a Chrome trace or a RON trace; or, with `--backend hw`,
//! one run on this machine's GPUs checked against the model.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use cuorder::cli::{bad_input, err, fail, load_inputs, say, Verdict};
use cuorder::progress::{watch, Meter};
use cuorder_model::profile::{CollectiveConnect, PlanOrder};
use cuorder_model::semantics::{Semantics, Step};
use cuorder_sim::explore::Limits;
use cuorder_sim::progress::Progress;
use cuorder_sim::run::{Outcome, Trace};
use cuorder_sim::scheduler::RandomScheduler;

use super::Ctx;
use crate::{Backend, RunArgs};

/// Runs `cuorder run`.
pub fn run(ctx: &Ctx, a: RunArgs) -> ExitCode {
    let inputs = [a.program.as_path(), Path::new(&a.profile), Path::new(a.costs.as_deref().unwrap_or("-"))];
    if let Some(e) = a.timeline.as_deref().and_then(|t| cuorder::timing::trace_path_error(t, &inputs)) {
        return bad_input(&e);
    }
    let (prof, prog) = match load_inputs(&a.profile, &a.program, ctx.color, a.torch) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    let sem = Semantics::new(&prog, &prof);
    if a.backend == Backend::Hw {
        return run_hw(&sem, a.trace.as_deref(), a.timeout_s);
    }
    // Ctrl-C stops the random run where it is (its timeline so far is printed, exit 3), or the search for the
    // --witness.
    let meter = match a.witness {
        None => Meter::Steps { max_steps: a.max_steps as u64, time_limit_s: Some(a.budgets.max_time_s as f64) },
        Some(_) => Meter::States { max_states: a.budgets.max_states as u64, max_time_s: a.budgets.max_time_s },
    };
    let w = watch(ctx.progress, meter);
    let tr = match a.witness {
        None => cuorder_sim::run::run_within(
            &sem,
            &mut RandomScheduler::new(a.seed),
            Some(a.seed),
            a.max_steps,
            Some(a.budgets.max_time_s.saturating_mul(1000)),
            Some(&w.progress()),
        ),
        Some(n) => match witness(&sem, &a, n, w.progress()) {
            Ok(t) => t,
            Err((message, verdict)) => {
                w.finish();
                err(&format!("error: {message}\n"));
                return verdict.into();
            }
        },
    };
    w.finish();
    say(&(a.torch.note() + &cuorder::timeline::render(&sem, &tr) + &platform_choices(&sem, &tr.schedule)));
    if let Some(path) = &a.timeline {
        if let Err(message) = write_timeline(&sem, &a, &tr, path) {
            return bad_input(&message);
        }
    }
    if let Some(path) = &a.trace {
        let text = ron::ser::to_string_pretty(&tr, ron::ser::PrettyConfig::default()).unwrap_or_default();
        if let Err(e) = std::fs::write(path, text + "\n") {
            return bad_input(&format!("cannot write {}: {e}", path.display()));
        }
    }
    let cut = matches!(tr.outcome, Outcome::TimeLimit { .. } | Outcome::Interrupted { .. });
    (if cut { Verdict::Inconclusive } else { Verdict::Done }).into()
}

/// The execution of `--witness N`: the witness of the N-th finding of `check` (same profile and budgets; the search
/// stops when `progress`'s stop flag is set), replayed.
///
/// Errors (the message and the verdict): no N-th finding (bad input, or inconclusive when Ctrl-C stopped the search
/// before it found one), or its witness does not replay (bad input).
fn witness(sem: &Semantics, a: &RunArgs, n: usize, progress: Arc<Progress>) -> Result<Trace, (String, Verdict)> {
    let stop = progress.clone();
    let rep = cuorder::report::check(sem.program, sem.profile, &Limits { progress: Some(progress), ..a.budgets.limits() });
    let Some(f) = n.checked_sub(1).and_then(|i| rep.findings.get(i)) else {
        let verdict = if stop.stop_requested() { Verdict::Inconclusive } else { Verdict::BadInput };
        return Err((format!(
            "--witness {n}: findings are numbered from 1, and check found {} under profile {} (pass the same --profile as to check){}",
            rep.findings.len(),
            sem.profile.label(),
            rep.limit_hit.as_ref().map(|l| format!("; {l}")).unwrap_or_default()
        ), verdict));
    };
    cuorder_sim::run::replay(sem, &f.finding.witness).map_err(|d| (d.to_string(), Verdict::BadInput))
}

/// `--timeline FILE`: the execution `tr` timed by `--costs` (logical time without it), as Chrome trace-event JSON.
///
/// Errors (the message, for exit 2): the cost model does not load, the schedule does not replay, or the file
/// cannot be written.
fn write_timeline(sem: &Semantics, a: &RunArgs, tr: &Trace, path: &Path) -> Result<(), String> {
    let model = match a.costs.as_deref().map(cuorder::timing::load_costs) {
        None => cuorder_sim::cost::CostModel::logical(),
        Some(Ok(m)) => m,
        Some(Err(e)) => return Err(format!("--costs: {e}")),
    };
    let timed = cuorder_sim::timed::timed_replay(sem, &model, &tr.schedule).map_err(|d| d.to_string())?;
    let timed = cuorder_sim::timed::TimedRun { seed: tr.seed.unwrap_or(0), settings: a.torch.flags(), ..timed };
    cuorder::timing::write_chrome_trace(sem, &timed, path)
}

/// `cuorder run --backend hw`: run on the GPUs, keep the observation, and check it against the model.
/// Exit 0 agrees, 1 disagrees or inconclusive, 2 bad input, 3 no GPU here.
fn run_hw(sem: &Semantics, trace: Option<&Path>, timeout_s: u64) -> ExitCode {
    use cuorder_hw::error::HwError;
    let opts = cuorder_hw::supervisor::RunOptions { timeout: std::time::Duration::from_secs(timeout_s), ..Default::default() };
    let obs = match cuorder_hw::supervisor::run(sem.program, &opts) {
        Ok(o) => o,
        Err(e @ (HwError::NoGpu(_) | HwError::NotEnoughGpus { .. })) => {
            err(&format!("cuorder: cannot run on hardware here: {e}\n"));
            return Verdict::Inconclusive.into();
        }
        Err(e) => return bad_input(&e.to_string()),
    };
    say(&format!("hardware: {:?}\n", obs.outcome));
    if let Some(path) = trace {
        if let Err(e) = std::fs::write(path, obs.to_ron() + "\n") {
            return bad_input(&format!("cannot write {}: {e}", path.display()));
        }
    }
    let c = cuorder_sim::conform::conform(sem, &obs, &Limits::default());
    say(&c.to_text());
    (if c.agrees() { Verdict::Done } else { Verdict::Problem }).into()
}

/// The platform choices an execution took where the profile leaves them to the platform (N7: when collectives
/// connect; N14: the order a cut group fills its kernel plans), one line each, or nothing: `run` and `run --witness`
/// said nothing of them, so a replayed hang did not say which NCCL it needs (issue 30 new-user trial).
fn platform_choices(sem: &Semantics, schedule: &[Step]) -> String {
    let Ok(st) = cuorder_sim::run::replay_state(sem, schedule) else { return String::new() };
    let mut out = String::new();
    if let Some(c) = st.nccl.coll_connect.filter(|_| sem.profile.collective_connect() == CollectiveConnect::Either) {
        out.push_str(&format!("platform: this execution has {} (N7)\n", c.words()));
    }
    if let Some(o) = st.nccl.plan_order.filter(|_| sem.profile.p2p_plan_order == PlanOrder::Either) {
        out.push_str(&format!("platform: this execution has {} (N14)\n", o.words()));
    }
    out
}
