//! Single executions: run the model under a scheduler (seeded random, or a recorded schedule) and record the
//! execution as a trace with a readable per-rank, per-lane timeline.

use serde::{Deserialize, Serialize};

use cuorder_model::profile::Profile;
use cuorder_model::semantics::{AllocOutcome, Effects, Race, Semantics, State, Step, Undefined, Wait};
use cuorder_model::semantics::Stuck;
use cuorder_model::semantics::incremental::Frontier;

use crate::progress::Progress;
use crate::scheduler::Scheduler;

/// Trace format version; bump on any change to [`Trace`]'s shape.
pub const TRACE_FORMAT_VERSION: u32 = 1;

/// How one execution ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Completed,
    Deadlock(Stuck),
    Undefined(Undefined),
    /// The run stopped at the step limit.
    StepLimit(usize),
    /// The run stopped at its time limit after this many steps (limit in ms); only [`run_within`] stops so.
    TimeLimit { steps: usize, limit_ms: u64 },
    /// The run stopped after this many steps because its stop flag was set (Ctrl-C:
    /// [`crate::progress::Progress::request_stop`]); only [`run_within`] and the timed engine stop so.
    Interrupted { steps: usize },
}

/// One line of the timeline: at step `step`, on `lane` ("r0 main" for a host thread, "r0 s0" for a stream),
/// `text` happened.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceEvent {
    pub step: u32,
    pub lane: String,
    pub text: String,
}

/// A recorded model execution: enough to replay it exactly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trace {
    pub format_version: u32,
    pub program: String,
    pub profile: Profile,
    /// The scheduler that chose the steps ("random, seed 7", "replay").
    pub scheduler: String,
    pub seed: Option<u64>,
    /// The schedule: replaying it reproduces the execution.
    pub schedule: Vec<Step>,
    pub events: Vec<TraceEvent>,
    pub races: Vec<Race>,
    /// Value assertions that failed (V1), in key order. (`run` dropped them: only races were listed.)
    #[serde(default)]
    pub stale: Vec<cuorder_model::semantics::StaleRead>,
    pub outcome: Outcome,
}

/// A recorded schedule that no longer fits the program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diverged {
    /// Index of the first step that is not enabled.
    pub at: usize,
    pub step: Step,
}

impl std::fmt::Display for Diverged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "replay diverged at step {}: {:?} is not enabled there", self.at, self.step)
    }
}

/// A short note on a host step's outcome: a query's answer, the block an allocation took, whether a pageable copy
/// blocked the host.
pub fn effects_note(sem: &Semantics, fx: &Effects) -> Option<String> {
    if let Some(ready) = fx.answer {
        return Some(if ready { "ready" } else { "not ready" }.to_string());
    }
    match fx.alloc {
        Some(AllocOutcome::Fresh) => return Some("fresh block".to_string()),
        Some(AllocOutcome::Reused(b)) => return Some(format!("reuses the block of {}", sem.program.buffer(b.buf).name)),
        None => {}
    }
    fx.host_synchronous.map(|s| if s { "host-synchronous (S5: may be)".to_string() } else { "returns at once".to_string() })
}

/// What [`describe_step`] needs of the state before a step: the stepping host thread's op index and whether it
/// was blocked. Taken instead of a clone of the whole state (a clone per step made `run` quadratic: 42 steps/s on a
/// 64-stage pipeline).
#[derive(Clone, Copy, Debug)]
pub struct Before {
    pub pc: u32,
    pub waiting: bool,
}

impl Before {
    /// What [`describe_step`] needs to know about `st` before `step` is applied.
    pub fn of(st: &State, step: &Step) -> Option<Before> {
        match step {
            Step::Host { thread, .. } => {
                let t = &st.host.threads[*thread as usize];
                Some(Before { pc: t.pc, waiting: t.wait.is_some() })
            }
            _ => None,
        }
    }
}

/// Describes what a step did, as timeline events, from the stepping thread before it ([`Before::of`]), its effects
/// and the state after.
pub fn describe_step(sem: &Semantics, i: u32, before: Option<Before>, step: &Step, after: &State, fx: &Effects) -> Vec<TraceEvent> {
    let note = effects_note(sem, fx);
    let mut out = vec![];
    let mut ev = |lane: String, text: String| out.push(TraceEvent { step: i, lane, text });
    match step {
        Step::Host { thread, .. } => {
            let t = *thread as usize;
            let Before { pc, waiting } = before.expect("a host step has its thread's state before it");
            let (r, ti) = sem.thread_of[t];
            let label = sem.program.op_label(r, &sem.op(cuorder_model::semantics::OpLoc { thread: *thread, op: pc }).kind);
            let lane = sem.thread_label(*thread);
            let note = note.map(|n| format!(": {n}")).unwrap_or_default();
            let _ = ti;
            if waiting {
                ev(lane, format!("returns from #{pc} {label}"));
            } else if after.host.threads[t].wait.is_some() {
                let how = match &after.host.threads[t].wait {
                    Some(Wait::Connect { .. }) => " (connection set-up, N7)",
                    Some(Wait::Poll(_)) => " (ncclInProgress, N12)",
                    _ => "",
                };
                ev(lane, format!("calls #{pc} {label} and blocks{how}"));
            } else {
                ev(lane, format!("calls #{pc} {label}{note}"));
            }
        }
        Step::Connect { a, b, comm, .. } => {
            ev(sem.thread_label(*a), format!("connection set-up on {} with {} done (N7)", sem.comm_name(*comm), sem.thread_label(*b)));
        }
        Step::Watchdog { rank } => {
            let aborted: Vec<&str> =
                after.nccl.timeouts.iter().filter(|t| t.rank == *rank).flat_map(|t| t.comms.iter().map(|c| sem.comm_name(*c))).collect();
            ev(format!("r{rank} watchdog"), format!("times out: a hang turned into abort of {} (N9, N13)", aborted.join(", ")));
        }
        _ => {}
    }
    let touched: std::collections::BTreeSet<_> = fx.started.iter().chain(&fx.ended).collect();
    for k in touched {
        let item = after.item(*k);
        let (started, ended) = (fx.started.contains(k), fx.ended.contains(k));
        let s = item.streams[0];
        let lane = format!("r{} {}", s.rank, item.streams.iter().map(|x| sem.program.stream_label(*x, s.rank)).collect::<Vec<_>>().join("+"));
        let what = sem.item_label(after, *k);
        let what = what.split_once(": ").map(|x| x.1.to_string()).unwrap_or(what);
        let text = match (started, ended) {
            (true, false) => format!("starts {what}"),
            (false, true) => format!("ends {what}"),
            _ => format!("runs {what}"),
        };
        ev(lane, text);
    }
    match step {
        Step::Transfer { send, recv } => {
            ev(format!("r{} nccl", sem.acting_rank(*send)), format!("data of #{} moves to {} #{} (rendezvous)", send.op, sem.thread_label(recv.thread), recv.op));
        }
        Step::Eager { send } => ev(format!("r{} nccl", sem.acting_rank(*send)), format!("#{} delivers into the connection buffers (eager)", send.op)),
        Step::Drain { recv } => ev(format!("r{} nccl", sem.acting_rank(*recv)), format!("#{} takes its data from the connection buffers", recv.op)),
        Step::Collective { comm, seq } => ev(
            format!("{}", sem.program.comms[comm.0 as usize].name),
            format!("collective #{seq} completes on every member"),
        ),
        Step::RootEarly { comm, seq } => ev(
            sem.comm_name(*comm).to_string(),
            format!("the root of collective #{seq} finishes its part before the other members (C1)"),
        ),
        _ => {}
    }
    out
}

/// Runs one execution under `scheduler` (at most `max_steps` steps) and records it.
pub fn run(sem: &Semantics, scheduler: &mut dyn Scheduler, seed: Option<u64>, max_steps: usize) -> Trace {
    run_within(sem, scheduler, seed, max_steps, None, None)
}

/// How many steps a single run ([`run_within`], the timed engine) takes between two updates of its progress counter.
pub const PUBLISH_EVERY: usize = 256;

/// [`run`], also stopped after `max_time_ms` milliseconds of wall time when given ([`Outcome::TimeLimit`]), and when
/// `stop`'s flag is set ([`Outcome::Interrupted`]; read before every step, and the steps taken are published to it
/// every [`PUBLISH_EVERY`] steps); the trace is then deterministic only up to where it stopped.
pub fn run_within(
    sem: &Semantics,
    scheduler: &mut dyn Scheduler,
    seed: Option<u64>,
    max_steps: usize,
    max_time_ms: Option<u64>,
    stop: Option<&Progress>,
) -> Trace {
    let started = std::time::Instant::now();
    let mut st = sem.initial();
    let mut schedule = vec![];
    let mut forget = crate::strategy::ForgetClock::new(sem);
    let mut events = vec![];
    let mut enabled = Frontier::new(sem, &st);
    let outcome = loop {
        if let Some(u) = &st.undefined {
            break Outcome::Undefined(u.clone());
        }
        if enabled.is_empty() {
            break if sem.is_complete(&st) { Outcome::Completed } else { Outcome::Deadlock(sem.explain(&st, false)) };
        }
        if schedule.len() >= max_steps {
            // A schedule that ends where every enabled step is one the platform may withhold (S1 overlap, N2 eager
            // beyond the guarantee) ends in the deadlock the explorer reported for it.
            if enabled.all_starvable() {
                break Outcome::Deadlock(sem.explain(&st, true));
            }
            break Outcome::StepLimit(max_steps);
        }
        if let Some(limit_ms) = max_time_ms {
            if started.elapsed().as_millis() > u128::from(limit_ms) {
                break Outcome::TimeLimit { steps: schedule.len(), limit_ms };
            }
        }
        if let Some(p) = stop {
            if p.stop_requested() {
                break Outcome::Interrupted { steps: schedule.len() };
            }
            if schedule.len().is_multiple_of(PUBLISH_EVERY) {
                p.set_steps(schedule.len() as u64);
            }
        }
        let step = enabled.get(scheduler.pick(&st, &enabled)).clone();
        let before = Before::of(&st, &step);
        let fx = enabled.apply(sem, &mut st, &step);
        events.extend(describe_step(sem, schedule.len() as u32, before, &step, &st, &fx));
        // Forgetting keeps race checks and memory proportional to the work in flight (a run never compares
        // states; races found stay in the state).
        forget.step(sem, &mut st);
        schedule.push(step);
    };
    Trace {
        format_version: TRACE_FORMAT_VERSION,
        program: sem.program.name.clone(),
        profile: sem.profile.clone(),
        scheduler: scheduler.describe(),
        seed,
        schedule,
        events,
        // One race per pair of ops and buffers (`Race::key`), as `check` counts them: an in-place collective reads
        // and writes its buffer, two accesses against one kernel write, and was listed twice.
        races: {
            let mut seen = std::collections::BTreeSet::new();
            st.memory.races.iter().filter(|r| seen.insert(r.key())).cloned().collect()
        },
        stale: st.memory.stale.iter().cloned().collect(),
        outcome,
    }
}

/// Replays a recorded schedule exactly.
///
/// Errors: [`Diverged`] when a step of the schedule is not enabled where it is replayed (the program or the model
/// changed since the schedule was recorded).
pub fn replay(sem: &Semantics, schedule: &[Step]) -> Result<Trace, Diverged> {
    struct Replay<'a> {
        steps: &'a [Step],
        i: usize,
        diverged: Option<Diverged>,
    }
    impl crate::scheduler::Scheduler for Replay<'_> {
        fn pick(&mut self, _state: &State, enabled: &Frontier) -> usize {
            let want = &self.steps[self.i];
            self.i += 1;
            match enabled.position(want) {
                Some(p) => p,
                None => {
                    if self.diverged.is_none() {
                        self.diverged = Some(Diverged { at: self.i - 1, step: want.clone() });
                    }
                    0
                }
            }
        }
        fn describe(&self) -> String {
            "replay".into()
        }
    }
    let mut r = Replay { steps: schedule, i: 0, diverged: None };
    let trace = run(sem, &mut r, None, schedule.len());
    match r.diverged {
        Some(d) => Err(d),
        None => Ok(trace),
    }
}

/// Replays a schedule and returns the state it reaches.
///
/// Errors: [`Diverged`] when a step is not enabled where it is replayed.
pub fn replay_state(sem: &Semantics, schedule: &[Step]) -> Result<State, Diverged> {
    let mut st = sem.initial();
    for (at, step) in schedule.iter().enumerate() {
        if !sem.enabled(&st).contains(step) {
            return Err(Diverged { at, step: step.clone() });
        }
        sem.apply(&mut st, step);
    }
    Ok(st)
}
