//! Sampling strategies over the same model as the exhaustive explorer (issue 8): seeded random walks and PCT
//! (probabilistic concurrency testing, Burckhardt et al., ASPLOS 2010). Each execution is a walk from the initial
//! state through steps the model says are enabled, so every execution a strategy produces is one the exhaustive
//! search also reaches (`tests/strategies.rs` checks it). Execution `i` of a run with seed `s` uses seed `s + i`
//! (wrapping), whatever the number of worker threads: results are merged in execution order, so the findings, their
//! witnesses and the output are the same bytes for any `jobs`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cuorder_model::semantics::incremental::Frontier;
use cuorder_model::semantics::{Semantics, State, Step};
use cuorder_model::verdict::{plan_order_needed, platform_needed, Finding, Frequency, ProblemKey, PLATFORM_ANY};

use crate::explore::{Collector, Exploration};
use crate::progress::{stopped, Progress, INTERRUPTED};
use crate::rng::Rng;

/// How each execution picks among the enabled steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Uniformly at random among the enabled steps.
    Random,
    /// PCT with bug depth `depth` (>= 1): every agent (host thread, stream, communicator) gets a random priority,
    /// the highest-priority enabled agent runs, and at `depth - 1` random points the running agent drops below all
    /// others. Finds a bug of depth `d` with probability at least 1/(n k^(d-1)) per execution (n agents, k steps).
    Pct { depth: u32 },
}

impl Strategy {
    /// Short name, as on the command line.
    pub fn name(&self) -> String {
        match self {
            Strategy::Random => "random".into(),
            Strategy::Pct { depth } => format!("pct (depth {depth})"),
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct SampleOptions {
    pub strategy: Strategy,
    /// Seed of execution 0; execution `i` uses `seed + i` (wrapping).
    pub seed: u64,
    /// Number of executions.
    pub executions: u64,
    /// Stop starting new executions after this wall time (the result then depends on the machine's speed: it says
    /// so).
    pub time_limit: Option<Duration>,
    /// Stop at the first execution with a finding (the lowest-numbered such execution, whatever `jobs`); that
    /// execution ends at the step after which it has its first finding.
    pub first: bool,
    /// Worker threads (>= 1).
    pub jobs: usize,
    /// Steps per execution before it is cut off (reported as a limit).
    pub max_steps: usize,
    /// Counters to update as executions finish, and a stop flag: once set, no execution starts, running ones are
    /// abandoned, and the result covers the executions finished before them, with the limit
    /// [`crate::progress::INTERRUPTED`]. `None`: nobody watches.
    pub progress: Option<Arc<Progress>>,
}

impl Default for SampleOptions {
    fn default() -> Self {
        SampleOptions {
            strategy: Strategy::Random,
            seed: 0,
            executions: 1000,
            time_limit: None,
            first: false,
            jobs: 1,
            max_steps: 10_000_000,
            progress: None,
        }
    }
}

/// The result of a sampled exploration.
#[derive(Clone, Debug)]
pub struct Sampled {
    /// Findings in the order of the execution that first showed each (frequency is always `Sometimes`: sampling
    /// proves nothing about all executions), with counts in `Exploration::terminal_states` etc.
    pub exploration: Exploration,
    /// Executions run.
    pub executions: u64,
    /// Model steps taken in all executions.
    pub steps: u64,
    /// For each finding (same order): the executions, out of `executions`, that showed it.
    pub hits: Vec<u64>,
    /// For each finding (same order): the seed of the first execution that showed it.
    pub seeds: Vec<u64>,
}

/// The agent a step belongs to, as an index: its host thread, the stream its item runs on (P2P steps: the send's or
/// recv's stream), or its communicator (collectives: `sem.agents + comm`). PCT gives agents priorities; the bounded
/// search counts a switch away from an agent that still has a step to take as a preemption. Indices are below
/// `sem.agents + sem.program.comms.len()`.
pub fn step_agent(sem: &Semantics, st: &State, step: &Step) -> usize {
    match step {
        Step::Host { thread, .. } | Step::Connect { a: thread, .. } => *thread as usize,
        Step::Item(k) => sem.stream_agent(st.item(*k).streams[0]),
        Step::Transfer { send: loc, .. } | Step::Eager { send: loc } | Step::Drain { recv: loc } => {
            sem.stream_agent(st.item(sem.find_comm_op(st, *loc).0).streams[0])
        }
        Step::Collective { comm, .. } | Step::RootEarly { comm, .. } => sem.agents + comm.0 as usize,
        // N9: a watchdog is a host thread of its rank (the first one's priority; a rank without threads has no
        // NCCL work to time out, but falls back to agent 0).
        Step::Watchdog { rank } => sem.thread_base.get(*rank as usize).map_or(0, |t| *t as usize).min(sem.agents.saturating_sub(1)),
    }
}

/// The PCT scheduler of one execution.
struct Pct {
    /// Priority per agent (higher runs first).
    priority: Vec<u64>,
    /// Step numbers at which the running agent's priority drops, with the priority it drops to (ascending).
    changes: Vec<(u64, u64)>,
    /// How many of `changes` have happened (removing them from the front one by one made a depth of 10^6 take
    /// minutes, deaf to Ctrl-C).
    done: usize,
    step: u64,
}

impl Pct {
    fn new(sem: &Semantics, depth: u32, rng: &mut Rng) -> Pct {
        let agents = sem.agents + sem.program.comms.len();
        // A random permutation of depth..depth+agents (Fisher-Yates).
        let mut priority: Vec<u64> = (0..agents as u64).map(|i| i + u64::from(depth)).collect();
        for i in (1..priority.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            priority.swap(i, j);
        }
        // k: an estimate of the execution's length, from the program's size (each op issues, runs and ends).
        let ops: u64 = sem.program.ranks.iter().flat_map(|r| &r.threads).map(|t| t.ops.len() as u64).sum();
        let k = (3 * ops).max(1);
        let mut changes: Vec<(u64, u64)> =
            (1..u64::from(depth.max(1))).map(|i| (rng.below(k) + 1, u64::from(depth) - i)).collect();
        changes.sort();
        Pct { priority, changes, done: 0, step: 0 }
    }

    /// A step of the highest-priority agent among the enabled steps (only those the platform may not withhold,
    /// with `withhold`; there is at least one), drawn with `rng` among that agent's steps: the outcomes of one host
    /// call (a query's answer, an implicit synchronization or not, S7; the collective connection platform, N7) are
    /// steps of one agent, and taking the first in the frontier's order never explored the others (issue 30
    /// new-user trial: `explore --strategy pct` never found a hang that needs connections made at init).
    fn pick<'f>(&mut self, sem: &Semantics, st: &State, front: &'f Frontier, withhold: bool, rng: &mut Rng) -> &'f Step {
        let best = |prio: &[u64]| {
            let mut best: Option<(u64, &'f Step, usize)> = None;
            for (s, starvable) in front.iter() {
                if withhold && starvable {
                    continue;
                }
                let a = step_agent(sem, st, s);
                if best.is_none_or(|(p, _, _)| prio[a] > p) {
                    best = Some((prio[a], s, a));
                }
            }
            best.expect("a step is enabled")
        };
        self.step += 1;
        let (_, mut step, mut agent) = best(&self.priority);
        while let Some(&(at, to)) = self.changes.get(self.done) {
            if at > self.step {
                break;
            }
            self.done += 1;
            self.priority[agent] = to;
            (_, step, agent) = best(&self.priority);
        }
        let mine: Vec<&'f Step> =
            front.iter().filter(|(s, starvable)| !(withhold && *starvable) && step_agent(sem, st, s) == agent).map(|(s, _)| s).collect();
        if mine.len() > 1 {
            return mine[rng.below(mine.len() as u64) as usize];
        }
        step
    }
}

/// One execution's findings, merged later in execution order.
struct Walk {
    found: Collector,
    steps: u64,
    step_limit: bool,
}

/// Forget ([`Semantics::forget`]) every this many steps of a walk or run (its cost is linear in the state, which
/// grows by a few entries per step).
pub const FORGET_EVERY: usize = 32;

/// How many steps of a walk or run to take between two forgets: [`FORGET_EVERY`], or one per agent (host thread or
/// stream) on larger programs, since one forget costs about threads × agents clock entries; amortized, a step then
/// pays a few clock widths for it.
pub fn forget_every(sem: &Semantics) -> usize {
    FORGET_EVERY.max(sem.agents)
}

/// When a walk, run or timed run forgets: after at least [`forget_every`] steps, and at least half as many steps as
/// the state holds items. A pass costs what the state holds, so the steps since the last one pay for it (amortized
/// O(1) per step), and what is not yet forgotten stays within a constant factor of what is live. Without the second
/// bound a 64-stage, 64-microbatch pipeline spent two thirds of its timed run forgetting: its hosts issue every op
/// up front, so the state holds thousands of pending items (issue 9, "scale").
pub struct ForgetClock {
    every: usize,
    since: usize,
}

impl ForgetClock {
    pub fn new(sem: &Semantics) -> ForgetClock {
        ForgetClock { every: forget_every(sem), since: 0 }
    }

    /// Counts one step of `st`, and forgets when due; returns whether it forgot.
    pub fn step(&mut self, sem: &Semantics, st: &mut State) -> bool {
        self.since += 1;
        if self.since >= self.every.max(st.streams.items.len() / 2) {
            sem.forget(st);
            self.since = 0;
            return true;
        }
        false
    }
}

/// Why a walk was abandoned before its end.
enum Stop {
    /// `progress` asked to stop (Ctrl-C).
    Interrupted,
    /// The time limit passed (checked as the walk goes, so that one long execution cannot outlast it).
    TimedOut,
}

/// Runs one execution with seed `seed`; an error when `progress` asked to stop or `deadline` passed before it
/// ended. With `first`, the execution ends at the first step after which it has a finding (its witness is the path to
/// there).
///
/// The enabled steps are kept between steps ([`Frontier`]): a step recomputes only the ranks it affects.
fn walk(
    sem: &Semantics,
    strategy: Strategy,
    seed: u64,
    max_steps: usize,
    first: bool,
    progress: &Option<Arc<Progress>>,
    deadline: Option<Instant>,
) -> Result<Walk, Stop> {
    let mut rng = Rng::new(seed);
    let mut forget = ForgetClock::new(sem);
    let mut pct = match strategy {
        Strategy::Pct { depth } => Some(Pct::new(sem, depth, &mut rng)),
        Strategy::Random => None,
    };
    // Half of the executions (by seed) let the platform withhold what it may (see below).
    let withhold = rng.below(2) == 0;
    let mut found = Collector::new();
    let mut st = sem.initial();
    let mut front = Frontier::new(sem, &st);
    let mut path: Vec<Step> = vec![];
    loop {
        found.observe_with(sem, &st, front.is_empty(), front.all_starvable(), &path);
        if front.is_empty() || st.undefined.is_some() || (first && !found.findings.is_empty()) {
            break;
        }
        if path.len() >= max_steps {
            return Ok(Walk { found, steps: path.len() as u64, step_limit: true });
        }
        // A long walk (tens of thousands of steps on a large pipeline) checks the stop flag and the clock as it goes.
        if path.len() % 1024 == 1023 {
            if stopped(progress) {
                return Err(Stop::Interrupted);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Stop::TimedOut);
            }
        }
        // The platform's choice: in a withholding execution, a step the platform may withhold (an S1 start beside
        // a spinning kernel, an eager send beyond the guaranteed window) is never taken, so the execution ends
        // where the platform refuses (recorded above as a deadlock) instead of always taking the generous path.
        let n = if withhold { front.allowed_len() } else { front.len() };
        if n == 0 {
            break;
        }
        let step = match &mut pct {
            Some(p) => p.pick(sem, &st, &front, withhold, &mut rng).clone(),
            None => {
                let i = rng.below(n as u64) as usize;
                if withhold { front.get_allowed(i) } else { front.get(i) }.clone()
            }
        };
        front.apply(sem, &mut st, &step);
        // Forgetting keeps race checks and memory proportional to the work in flight; a walk never compares
        // states, so every few steps is enough.
        forget.step(sem, &mut st);
        path.push(step);
    }
    Ok(Walk { found, steps: path.len() as u64, step_limit: false })
}

/// Runs `opt.executions` executions under `opt.strategy` and merges what they found.
pub fn sample(sem: &Semantics, opt: &SampleOptions) -> Sampled {
    let start = Instant::now();
    let next = AtomicU64::new(0);
    // With `first`: the lowest execution known to have a finding; executions above it are not started.
    let first_hit = AtomicU64::new(u64::MAX);
    let timed_out = std::sync::atomic::AtomicBool::new(false);
    let interrupted = std::sync::atomic::AtomicBool::new(false);
    let results: Mutex<Vec<(u64, Walk)>> = Mutex::new(vec![]);
    std::thread::scope(|scope| {
        for _ in 0..opt.jobs.max(1) {
            scope.spawn(|| loop {
                if opt.time_limit.is_some_and(|l| start.elapsed() >= l) {
                    timed_out.store(true, Ordering::Relaxed);
                    break;
                }
                if stopped(&opt.progress) {
                    interrupted.store(true, Ordering::Relaxed);
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= opt.executions || i > first_hit.load(Ordering::Relaxed) {
                    break;
                }
                let deadline = opt.time_limit.map(|l| start + l);
                let w = match walk(sem, opt.strategy, opt.seed.wrapping_add(i), opt.max_steps, opt.first, &opt.progress, deadline) {
                    Ok(w) => w,
                    Err(Stop::Interrupted) => {
                        interrupted.store(true, Ordering::Relaxed);
                        break;
                    }
                    Err(Stop::TimedOut) => {
                        timed_out.store(true, Ordering::Relaxed);
                        break;
                    }
                };
                if let Some(p) = &opt.progress {
                    p.add_execution(w.steps);
                }
                if opt.first && !w.found.findings.is_empty() {
                    first_hit.fetch_min(i, Ordering::Relaxed);
                }
                results.lock().expect("no worker panicked").push((i, w));
            });
        }
    });
    let mut results = results.into_inner().expect("no worker panicked");
    results.sort_by_key(|(i, _)| *i);
    // Keep a contiguous prefix of executions (a time limit or an interrupt may leave holes), and with `first`, stop
    // at the first hit.
    let mut kept = 0u64;
    for (i, _) in &results {
        if *i != kept {
            break;
        }
        kept += 1;
    }
    results.truncate(kept as usize);
    if opt.first {
        if let Some(p) = results.iter().position(|(_, w)| !w.found.findings.is_empty()) {
            results.truncate(p + 1);
        }
    }
    let mut merged = Collector::new();
    let mut hits: Vec<u64> = vec![];
    let mut seeds: Vec<u64> = vec![];
    let mut steps = 0;
    let mut step_limits = 0;
    for (i, w) in &results {
        steps += w.steps;
        step_limits += u64::from(w.step_limit);
        merged.terminal_states += w.found.terminal_states;
        merged.completed_states += w.found.completed_states;
        merged.starved_states += w.found.starved_states;
        // This execution's findings in the order it found them.
        let mut mine: Vec<(&usize, &ProblemKey)> = w.found.index.iter().map(|(k, i)| (i, k)).collect();
        mine.sort();
        for (idx, key) in mine {
            if let Some(seen) = w.found.platform_seen.get(key) {
                *merged.platform_seen.entry(key.clone()).or_default() |= *seen;
            }
            match merged.index.get(key) {
                Some(&m) => hits[m] += 1,
                None => {
                    merged.index.insert(key.clone(), merged.findings.len());
                    merged.findings.push(Finding { frequency: Frequency::Sometimes, ..w.found.findings[*idx].clone() });
                    hits.push(1);
                    seeds.push(opt.seed.wrapping_add(*i));
                }
            }
        }
    }
    for (key, idx) in &merged.index {
        let seen = merged.platform_seen.get(key).copied().unwrap_or(PLATFORM_ANY);
        merged.findings[*idx].platform = platform_needed(seen);
        merged.findings[*idx].plan_order = plan_order_needed(seen);
    }
    let executions = results.len() as u64;
    let mut limit = vec![];
    if timed_out.load(Ordering::Relaxed) && executions < opt.executions && !(opt.first && !merged.findings.is_empty()) {
        limit.push(format!("time limit reached after {executions} of {}", cuorder_model::describe::count(opt.executions, "execution")));
    }
    let found_first = opt.first && !merged.findings.is_empty();
    if interrupted.load(Ordering::Relaxed) && executions < opt.executions && !found_first {
        limit.push(format!("{INTERRUPTED} after {executions} of {}", cuorder_model::describe::count(opt.executions, "execution")));
    }
    if opt.first && !merged.findings.is_empty() {
        limit.push(format!("stopped at the first execution with a finding (--first), execution {}", executions - 1));
    }
    limit.insert(0, format!("sampled {} ({}); the verdict covers only those", cuorder_model::describe::count(executions, "execution"), opt.strategy.name()));
    if step_limits > 0 {
        let count = cuorder_model::describe::count;
        limit.push(format!("{} cut off at {}", count(step_limits, "execution"), count(opt.max_steps as u64, "step")));
    }
    Sampled {
        exploration: Exploration {
            states: steps as usize,
            terminal_states: merged.terminal_states,
            completed_states: merged.completed_states,
            starved_states: merged.starved_states,
            keys: merged.keys(),
            findings: merged.findings,
            limit_hit: if limit.is_empty() { None } else { Some(limit.join("; ")) },
        },
        executions,
        steps,
        hits,
        seeds,
    }
}
