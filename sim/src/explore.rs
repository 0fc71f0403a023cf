//! The exhaustive explorer: a depth-first search over every reachable state of the model, merging equal states
//! (items are named by the op that issued them and vector clocks do not depend on the order of independent steps,
//! so equivalent interleavings meet in one state). It reports every distinct problem with the first witness found
//! in a fixed order, and whether it happens in every execution.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::Hash;
use std::sync::Arc;
use std::time::Instant;

use cuorder_model::semantics::incremental::Frontier;
use cuorder_model::semantics::reduction::DeviceMemo;
use cuorder_model::semantics::{ItemKind, Semantics, State, Step};
use cuorder_model::verdict::{
    plan_order_needed, platform_bits, platform_needed, Finding, Frequency, PlatformSeen, Problem, ProblemKey, PLATFORM_ANY,
};

use crate::budget::ResidentMeter;
use crate::progress::{stopped, Progress, INTERRUPTED};
use crate::strategy::step_agent;

/// Limits on one exploration; hitting one is reported, never silent.
#[derive(Clone, Debug)]
pub struct Limits {
    /// States visited before the search stops (every distinct branching or final state once; a state inside a
    /// chain of single successors once per time the chain is entered).
    pub max_states: usize,
    /// Partial-order reduction ([`Semantics::is_local`] steps explored alone). Off only to test that it changes
    /// no verdict.
    pub reduce: bool,
    /// Drop from each state what no future step can read ([`Semantics::forget`]: ended items nothing names,
    /// finished matching entries, accesses ordered before every future access), so that states stay as large as
    /// the work in flight and merge when they differ only in history. Off only to test that it changes no verdict.
    pub forget: bool,
    /// Stop at the first finding (`--first`): the verdict then says nothing of the executions not explored.
    pub first: bool,
    /// Estimated bytes the search may hold (the states on the search path, estimated by
    /// [`crate::budget::state_bytes`], plus the set of visited states), in bytes; with [`Limits::resident`], also the
    /// most resident memory the process may have.
    pub max_memory_bytes: usize,
    /// Also stop when the process's resident memory ([`crate::budget::resident_bytes`], read every
    /// [`crate::budget::RESIDENT_EVERY_MS`] ms) exceeds `max_memory_bytes`. For a process that runs one search (the
    /// command line); off by default, since a process running several searches at once (a test harness) shares its
    /// memory among them. Where it stops a search depends on the machine, as for the time limit.
    pub resident: bool,
    /// Wall-clock time the search may take, in milliseconds.
    pub max_time_ms: u64,
    /// Counters to update (states visited) and a stop flag to check, on every state: once set, the search stops
    /// as at a time limit and names [`crate::progress::INTERRUPTED`]. `None`: nobody watches.
    pub progress: Option<Arc<Progress>>,
}

/// Default of [`Limits::max_memory_bytes`]: 4 GiB.
pub const DEFAULT_MAX_MEMORY_BYTES: usize = 4 << 30;
/// Default of [`Limits::max_time_ms`]: 10 minutes.
pub const DEFAULT_MAX_TIME_MS: u64 = 600_000;
/// Bytes counted per visited state (its 16-byte hash in a hash set, with the set's slack).
const VISITED_BYTES: usize = 32;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_states: 2_000_000,
            reduce: true,
            forget: true,
            first: false,
            max_memory_bytes: DEFAULT_MAX_MEMORY_BYTES,
            resident: false,
            max_time_ms: DEFAULT_MAX_TIME_MS,
            progress: None,
        }
    }
}

/// What an exploration found.
#[derive(Clone, Debug)]
pub struct Exploration {
    /// States visited (see [`Limits::max_states`]).
    pub states: usize,
    /// Distinct final states (no step enabled).
    pub terminal_states: usize,
    /// Final states in which everything finished.
    pub completed_states: usize,
    /// States (not final) that are stuck if the device never runs the remaining items beside a spinning NCCL kernel
    /// (S1; only explored when the profile does not guarantee independent progress).
    pub starved_states: usize,
    /// Every distinct problem, in the order first found.
    pub findings: Vec<Finding>,
    /// The key of each finding (same order): what identifies the problem across executions.
    pub keys: Vec<ProblemKey>,
    /// Set when a limit stopped the search: the verdict then covers only what was explored.
    pub limit_hit: Option<String>,
}

impl Exploration {
    /// `true` when no problem was found and the search was complete.
    pub fn clean(&self) -> bool {
        self.findings.is_empty() && self.limit_hit.is_none()
    }
}

/// A 128-bit hash of a state (XXH3-128 of its `Hash` encoding; deterministic across machines and runs). Two
/// distinct states collide with probability about n^2 / 2^129 for n states: about 10^-26 for a billion states. A
/// collision would merge two states and could hide executions; that is a documented limit, not a silent one.
pub(crate) fn state_hash(st: &State) -> u128 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    st.hash(&mut h);
    h.digest128()
}

struct Frame {
    /// The state; taken (moved to its last child) once every other successor has been tried, so that memory grows
    /// with the number of branching points on the path, not with its length.
    state: Option<State>,
    /// The enabled steps of `state`, kept by rank ([`Frontier`]); present while `state` is.
    front: Option<Frontier>,
    steps: Vec<Step>,
    next: usize,
    /// Estimated bytes of `state` while the frame holds it (memory budget).
    bytes: usize,
    /// Bounded search: for each of `steps`, the agent running after it (its own, [`step_agent`], or for a step
    /// explored alone the one running before) and the preemptions left after taking it. Empty in the exhaustive
    /// search.
    budget: Vec<(Option<usize>, u32)>,
    /// Whether every enabled step of the state is among `steps` (set once a reduced frame was widened because a
    /// successor was undefined, see `explore_inner`).
    expanded: bool,
}

/// What kind of state the explorer hands to a [`explore_with`] visitor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinalKind {
    /// Final: everything finished.
    Complete,
    /// Final: something unfinished and nothing enabled.
    Deadlock,
    /// Not final: stuck if the device withholds every item start next to a spinning NCCL kernel (S1).
    Starved,
    /// Final: undefined behaviour.
    Undefined,
}

/// Collects findings from the states an exploration visits, whatever the strategy: each distinct problem once
/// (keyed by [`ProblemKey`]) with the first witness found, and the counts of final states.
pub(crate) struct Collector {
    pub findings: Vec<Finding>,
    pub index: BTreeMap<ProblemKey, usize>,
    /// Number of distinct final states each problem appears in.
    pub terminal_hits: BTreeMap<ProblemKey, usize>,
    pub terminal_states: usize,
    /// Final states that are undefined (counted in `terminal_states` too).
    pub undefined_states: usize,
    /// Number of distinct final states that are not undefined each problem appears in.
    pub defined_hits: BTreeMap<ProblemKey, usize>,
    pub completed_states: usize,
    pub starved_states: usize,
    /// The platform choices (N7, N14) of the executions that showed each problem ([`platform_bits`]).
    pub platform_seen: BTreeMap<ProblemKey, PlatformSeen>,
}

impl Collector {
    /// The exploration these observations make: `states` visited, and the limit that stopped the search, if any.
    /// A problem is in every execution when it is in every final state observed (a deadlock: when no final state
    /// completed) and nothing stopped the search early.
    pub fn finish(self, states: usize, limit_hit: Option<String>) -> Exploration {
        let keys = self.keys();
        let mut findings = self.findings;
        // An execution that ends in undefined behaviour allows any observation, so it contradicts no claim that
        // a race, stale read or timeout happens in every execution: those are decided over the defined final
        // states only (issue 30: which undefined states a reduced search reached first decided "always" before;
        // where every final state is undefined, a problem found is in every execution that is defined, vacuously).
        let defined = self.terminal_states - self.undefined_states;
        for (key, idx) in &self.index {
            let hits = self.terminal_hits.get(key).copied().unwrap_or(0);
            let defined_hits = self.defined_hits.get(key).copied().unwrap_or(0);
            let always = match key {
                ProblemKey::Deadlock(..) => self.completed_states == 0 && limit_hit.is_none(),
                ProblemKey::Undefined(..) => hits == self.terminal_states && limit_hit.is_none(),
                _ => defined_hits == defined && limit_hit.is_none(),
            };
            findings[*idx].frequency = if always { Frequency::Always } else { Frequency::Sometimes };
            let seen = self.platform_seen.get(key).copied().unwrap_or(PLATFORM_ANY);
            findings[*idx].platform = platform_needed(seen);
            findings[*idx].plan_order = plan_order_needed(seen);
        }
        Exploration {
            states,
            terminal_states: self.terminal_states,
            completed_states: self.completed_states,
            starved_states: self.starved_states,
            findings,
            keys,
            limit_hit,
        }
    }

    pub fn new() -> Collector {
        Collector {
            findings: vec![],
            index: BTreeMap::new(),
            terminal_hits: BTreeMap::new(),
            terminal_states: 0,
            undefined_states: 0,
            defined_hits: BTreeMap::new(),
            completed_states: 0,
            starved_states: 0,
            platform_seen: BTreeMap::new(),
        }
    }

    /// The key of each finding, in finding order.
    pub fn keys(&self) -> Vec<ProblemKey> {
        let mut keys: Vec<(usize, ProblemKey)> = self.index.iter().map(|(k, i)| (*i, k.clone())).collect();
        keys.sort();
        keys.into_iter().map(|(_, k)| k).collect()
    }

    /// Records a problem seen in a state whose platform choices (N7, N14) are `seen` ([`platform_bits`]).
    fn record(&mut self, key: ProblemKey, problem: impl FnOnce() -> Problem, path: &[Step], seen: PlatformSeen) {
        *self.platform_seen.entry(key.clone()).or_default() |= seen;
        if !self.index.contains_key(&key) {
            self.index.insert(key, self.findings.len());
            self.findings.push(Finding { problem: problem(), frequency: Frequency::Sometimes, witness: path.to_vec(), platform: None, plan_order: None });
        }
    }

    fn deadlock_key(sem: &Semantics, st: &State, starvation: bool) -> ProblemKey {
        let at = (0..st.host.threads.len() as u32)
            .filter(|t| !sem.thread_finished(st, *t))
            .map(|t| (t, st.host.threads[t as usize].pc))
            .collect();
        ProblemKey::Deadlock(at, starvation)
    }

    /// Looks at a state reached for the first time, given its enabled steps and the path to it: records its races,
    /// and classifies it (final: undefined, complete, deadlock; or stuck if the platform withholds what it may).
    pub fn observe(&mut self, sem: &Semantics, st: &State, enabled: &[Step], path: &[Step]) -> Option<FinalKind> {
        let empty = enabled.is_empty();
        self.observe_with(sem, st, empty, !empty && enabled.iter().all(|s| sem.starvable(st, s)), path)
    }

    /// [`Collector::observe`] given only what it needs of the enabled steps: whether there are none (`empty`), and
    /// whether there are some and the platform may withhold every one (`starved`). Engines that keep the enabled
    /// steps between steps ([`cuorder_model::semantics::incremental::Frontier`]) know both in O(1).
    pub fn observe_with(&mut self, sem: &Semantics, st: &State, empty: bool, starved: bool, path: &[Step]) -> Option<FinalKind> {
        let race_key = |r: &cuorder_model::semantics::Race| {
            let (a, b, x, y) = r.key();
            ProblemKey::DataRace(a, b, x, y)
        };
        // What this state holds is gathered (allocated) only for a terminal state, which counts it.
        let mut present: Vec<ProblemKey> = vec![];
        let seen = platform_bits(st.nccl.coll_connect, st.nccl.plan_order);
        for r in &st.memory.races {
            self.record(race_key(r), || Problem::DataRace(r.clone()), path, seen);
            if empty {
                present.push(race_key(r));
            }
        }
        for s in &st.memory.stale {
            self.record(ProblemKey::StaleRead(s.check), || Problem::StaleRead(s.clone()), path, seen);
            if empty {
                present.push(ProblemKey::StaleRead(s.check));
            }
        }
        // N9: every hang a watchdog turned into an abort on the way here, keyed by where the threads were, not by
        // which rank's watchdog fired: any of the hung ranks' can fire first, and that is one problem (four ranks
        // hung in a collective were 12 findings, each "in some executions"). A firing whose threads are some of an
        // earlier firing's, at the same ops, is that hang going on after the first abort, not a new one.
        let cascade = |to: &cuorder_model::semantics::Timeout| {
            st.nccl.timeouts.iter().any(|o| o.at.len() > to.at.len() && to.at.iter().all(|p| o.at.contains(p)))
        };
        for to in st.nccl.timeouts.iter().filter(|to| !cascade(to)) {
            let key = ProblemKey::Hang(to.at.clone());
            self.record(key.clone(), || Problem::Timeout(to.clone()), path, seen);
            if empty {
                present.push(key);
            }
        }
        let kind = if st.undefined.is_some() {
            Some(FinalKind::Undefined)
        } else if empty {
            Some(if sem.is_complete(st) { FinalKind::Complete } else { FinalKind::Deadlock })
        } else if starved {
            Some(FinalKind::Starved)
        } else {
            None
        };
        match kind {
            Some(FinalKind::Undefined) => {
                let u = st.undefined.as_ref().expect("undefined state");
                let mut at = u.at.clone();
                at.sort();
                let key = ProblemKey::Undefined(u.rule, at);
                self.record(key.clone(), || Problem::Undefined(u.clone()), path, seen);
                present.push(key);
            }
            Some(FinalKind::Complete) => self.completed_states += 1,
            Some(FinalKind::Deadlock) => {
                let key = Self::deadlock_key(sem, st, false);
                self.record(key.clone(), || Problem::Deadlock(sem.explain(st, false)), path, seen);
                present.push(key);
            }
            Some(FinalKind::Starved) => {
                self.starved_states += 1;
                let key = Self::deadlock_key(sem, st, true);
                self.record(key, || Problem::Deadlock(sem.explain(st, true)), path, seen);
            }
            None => {}
        }
        if empty {
            self.terminal_states += 1;
            if st.undefined.is_some() {
                // Only its undefined use counts: the other problems are decided over the defined final states
                // (`finish`), unless none is defined.
                self.undefined_states += 1;
            }
            present.sort();
            present.dedup();
            for k in present {
                if st.undefined.is_none() {
                    *self.defined_hits.entry(k.clone()).or_default() += 1;
                }
                *self.terminal_hits.entry(k).or_default() += 1;
            }
        }
        kind
    }
}

struct Search<'a, 'p> {
    visitor: Option<&'a mut dyn FnMut(&State, FinalKind)>,
    sem: &'a Semantics<'p>,
    reduce: bool,
    /// Whether one rank's steps may stand for all ([`Semantics::rank_set`]), and withholdable steps may be left for
    /// later ([`Search::withholding`]): not in a bounded pass, where moving to another rank would cost no
    /// preemption and the bound would stop meaning "preemptions".
    rank_sets: bool,
    /// Which alternative of a send whose recv is running is explored (with `reduce`).
    choice: EagerChoice,
    /// Set once a step was left out for the other alternative ([`Search::without_dominated`]).
    dominated: std::cell::Cell<bool>,
    found: Collector,
    /// Answers about the devices of the state whose successors are being chosen (cleared for each state).
    memo: DeviceMemo,
}

impl Search<'_, '_> {
    /// The enabled steps of a state, and the ones to explore from it (partial-order reduction: a step that
    /// commutes with everything is explored alone; otherwise the smaller of the persistent sets that apply: the
    /// deliveries of one connection ([`Semantics::connection_set`]), the steps of one rank ([`Semantics::rank_set`])).
    ///
    /// `front` holds the enabled steps of `st` ([`Frontier`], kept up to date along the search path instead of
    /// recomputing every rank's steps for every state: a third of a 64-stage pipeline's search), in its order.
    fn successors(&self, st: &State, front: &Frontier) -> Vec<Step> {
        let sem = self.sem;
        let m = &self.memo;
        m.clear();
        let all = front.to_vec();
        let enabled = if self.reduce && self.rank_sets { self.withholding(st, &all) } else { all };
        // A bounded pass takes no launch start alone (as before issue 8's launch rule): preemptions keep their meaning.
        let launch = |s: &Step| matches!(s, Step::Item(k) if matches!(st.item(*k).kind, ItemKind::Launch { .. }));
        let steps = match enabled.iter().find(|s| self.reduce && (self.rank_sets || !launch(s)) && sem.is_local_in(st, s, m)) {
            Some(s) => vec![s.clone()],
            None => {
                // The smaller of the persistent sets that apply: one connection's deliveries, one rank's steps.
                let conn = self.reduce.then(|| sem.connection_set_in(st, &enabled, m)).flatten();
                let rank = (self.reduce && self.rank_sets).then(|| sem.rank_set_in(st, &enabled, m)).flatten();
                let set = match (conn, rank) {
                    (Some(a), Some(b)) => Some(if b.len() < a.len() { b } else { a }),
                    (a, b) => a.or(b),
                };
                match set {
                    Some(idx) => idx.into_iter().map(|i| enabled[i].clone()).collect(),
                    None => enabled.clone(),
                }
            }
        };
        let steps = if self.reduce { self.without_dominated(steps) } else { steps };
        steps
    }

    /// The enabled steps to choose from: while a step the platform cannot withhold is enabled, the steps it may
    /// withhold and that commute with what runs meanwhile ([`Semantics::postponable`]) are left for later. An
    /// execution that takes one early is the same partial order (same happens-before, same final state) as one that
    /// takes it when nothing else can run (a state then visited, where the stuck-state check looks) or when it can
    /// no longer be withheld (its launch has ended, its recv runs); so every final state, race and stuck state is
    /// still reached. An eager delivery whose recv runs stands for the rendezvous ([`Self::without_dominated`]) and
    /// is kept. Without this, every interleaving of a spinning device's kernels (S1) and of unbuffered sends (N2)
    /// with the other ranks' steps was explored: a correct 1F1B 4x4 under `portable` took 1.66 M states.
    fn withholding(&self, st: &State, enabled: &[Step]) -> Vec<Step> {
        let sem = self.sem;
        let receiving = |send: &cuorder_model::semantics::OpLoc| enabled.iter().any(|s| matches!(s, Step::Transfer { send: t, .. } if t == send));
        let keep: Vec<Step> = enabled
            .iter()
            .filter(|s| match s {
                Step::Eager { send } if receiving(send) => true,
                _ => !sem.postponable_in(st, s, &self.memo),
            })
            .cloned()
            .collect();
        if keep.len() < enabled.len() && keep.iter().any(|s| !sem.starvable_in(st, s, &self.memo)) {
            keep
        } else {
            enabled.to_vec()
        }
    }

    /// Of the two ways a send can finish once its recv runs (N2), explores one: the eager delivery (`Eager`, then
    /// the recv's `Drain`) or the rendezvous (`Transfer`), as `self.choice` says. They reach the same state but for
    /// one happens-before edge (the rendezvous joins the recv's start into the send's end: `Semantics::transfer`), and no step's
    /// enabledness reads a clock, so every continuation of one is a continuation of the other that reaches states
    /// with the same enabled steps (the same final, deadlocked and stuck states, undefined uses and timeouts) and,
    /// after the eager delivery, the same or fewer happens-before edges (the same or more races and stale reads
    /// (V1), which are defined by happens-before alone). `LeastOrder` (the eager one) therefore finds every
    /// problem of the full search; `MostOrder` (the rendezvous) decides which races and stale reads are in every
    /// execution ([`explore_complete`]). Under the portable profile exploring both doubled the final states per
    /// send in flight (1F1B 4x4: 56 final states; issue 8).
    fn without_dominated(&self, mut steps: Vec<Step>) -> Vec<Step> {
        let eager = |s: &Step| if let Step::Eager { send } = s { Some(*send) } else { None };
        let transfer = |s: &Step| if let Step::Transfer { send, .. } = s { Some(*send) } else { None };
        let (kept, dropped): (&dyn Fn(&Step) -> _, &dyn Fn(&Step) -> _) = match self.choice {
            EagerChoice::LeastOrder => (&eager, &transfer),
            EagerChoice::MostOrder => (&transfer, &eager),
        };
        let sends: Vec<_> = steps.iter().filter_map(kept).collect();
        let before = steps.len();
        steps.retain(|s| dropped(s).is_none_or(|send| !sends.contains(&send)));
        if steps.len() < before {
            self.dominated.set(true);
        }
        steps
    }

    /// Looks at a state reached for the first time (or a state inside a chain of single successors).
    /// `front` holds its enabled steps, with whether the platform may withhold each.
    fn visit(&mut self, st: &State, front: &Frontier, path: &[Step]) {
        let kind = self.found.observe_with(self.sem, st, front.is_empty(), front.all_starvable(), path);
        if let (Some(v), Some(k)) = (self.visitor.as_mut(), kind) {
            v(st, k);
        }
    }
}

/// The limit line of a search stopped by [`Limits::max_states`] after `states` states (exhaustive and DPOR alike).
pub(crate) fn states_limit_line(states: usize, limits: &Limits) -> String {
    format!(
        "stopped after {} (limit max_states = {}); the verdict covers only the executions explored",
        cuorder_model::describe::count(states as u64, "state"),
        limits.max_states
    )
}

/// Why a search that has visited `states` states, holds about `bytes` bytes and started at `started` must stop (Ctrl-C,
/// memory, time), if it must: the limit line of its report. `meter` reads the process's resident memory when
/// [`Limits::resident`] asks for it.
pub(crate) fn over_limits(limits: &Limits, started: Instant, states: usize, bytes: usize, meter: &mut ResidentMeter) -> Option<String> {
    // Formatted only when the search stops: this runs on every state.
    let states = || cuorder_model::describe::count(states as u64, "state");
    if stopped(&limits.progress) {
        return Some(format!("{INTERRUPTED} after {}; the verdict covers only the executions explored", states()));
    }
    if bytes > limits.max_memory_bytes {
        return Some(format!(
            "stopped after {}: the search would hold about {} MiB (limit max_memory = {} MiB); \
             the verdict covers only the executions explored",
            states(),
            bytes >> 20,
            limits.max_memory_bytes >> 20
        ));
    }
    let ms = started.elapsed().as_millis();
    if limits.resident {
        let resident = meter.bytes(ms);
        if resident > limits.max_memory_bytes {
            return Some(format!(
                "stopped after {}: the process holds {} MiB (limit max_memory = {} MiB); the verdict \
                 covers only the executions explored",
                states(),
                resident >> 20,
                limits.max_memory_bytes >> 20
            ));
        }
    }
    (ms > u128::from(limits.max_time_ms)).then(|| {
        format!(
            "stopped after {} and {ms} ms (limit max_time = {} ms); the verdict covers only the \
             executions explored",
            states(),
            limits.max_time_ms
        )
    })
}

/// Explores every execution of the program under the profile, up to `limits`.
pub fn explore(sem: &Semantics, limits: &Limits) -> Exploration {
    explore_complete(sem, limits, None)
}

/// Like [`explore`], and also calls `visit` on every final state (and every S1-stuck state) reached.
pub fn explore_with(sem: &Semantics, limits: &Limits, visit: &mut dyn FnMut(&State, FinalKind)) -> Exploration {
    explore_complete(sem, limits, Some(visit))
}

/// The exhaustive search: one pass that leaves out transfers dominated by their eager alternative
/// ([`Search::without_dominated`]), which finds every problem; then, only where that pass left a transfer out and
/// holds a race or stale read present in all its final states, a second pass that keeps the transfers and leaves
/// out their eager alternatives instead. Each execution of the full space has one in the second pass with the same
/// steps' enabledness and the same or more happens-before edges, so a race or stale read in every final state of
/// the second pass is in every execution; otherwise (or when the second pass hits a limit) it is reported "in
/// some executions". The second pass shares the first one's budgets, and its states are counted in `states`.
fn explore_complete<'a>(
    sem: &'a Semantics,
    limits: &Limits,
    visitor: Option<&'a mut dyn FnMut(&State, FinalKind)>,
) -> Exploration {
    let started = Instant::now();
    let pass = |choice, states_before| Pass { bound: None, started, states_before, choice };
    let (mut ex, _, dominated) = explore_inner(sem, limits, visitor, pass(EagerChoice::LeastOrder, 0));
    let ordered = |k: &ProblemKey| matches!(k, ProblemKey::DataRace(..) | ProblemKey::StaleRead(..));
    let unproved: Vec<usize> = (0..ex.findings.len())
        .filter(|i| ordered(&ex.keys[*i]) && ex.findings[*i].frequency == Frequency::Always)
        .collect();
    if !dominated || unproved.is_empty() {
        return ex;
    }
    let (most, _, _) = explore_inner(sem, limits, None, pass(EagerChoice::MostOrder, ex.states));
    ex.states += most.states;
    for i in unproved {
        let always = most.limit_hit.is_none()
            && most.keys.iter().position(|k| *k == ex.keys[i]).is_some_and(|j| most.findings[j].frequency == Frequency::Always);
        if !always {
            ex.findings[i].frequency = Frequency::Sometimes;
        }
    }
    ex
}

/// The default preemption bound of [`explore_bounded`] (`--bound`).
pub const DEFAULT_BOUND: u32 = 2;

/// What a bounded search found ([`explore_bounded`]).
#[derive(Clone, Debug)]
pub struct Bounded {
    /// The findings (frequency always `Sometimes`: a bounded search proves nothing beyond its bound), in the order
    /// of the bound at which each first appeared, then of the search; `states` sums every bound's pass, the
    /// counts of final states are those of the last pass; `limit_hit` says what was covered, and is `None` only when
    /// a pass cut no execution (`saturated_at`) and no limit stopped it: the search was then complete.
    pub exploration: Exploration,
    /// For each finding (same order): the smallest bound at which it appeared, i.e. the fewest preemptions of an
    /// execution that shows it (among those the search tried).
    pub first_bound: Vec<u32>,
    /// States visited by the pass of each bound searched, from bound 0 (fewer than `bound + 1` entries when a
    /// limit stopped the search, or when a pass cut no step so that larger bounds add nothing).
    pub pass_states: Vec<usize>,
    /// Set when the pass of this bound cut no step for want of preemptions: every execution of the reduced search
    /// was then explored, and larger bounds were not searched.
    pub saturated_at: Option<u32>,
}

/// Searches every execution with at most `bound` preemptions (CHESS-style preemption bounding, Musuvathi and
/// Qadeer, PLDI 2007), by iterative deepening from bound 0 to `bound`. A preemption is a step of an agent
/// ([`step_agent`]: a host thread, a stream, a communicator) other than the agent of the previous step while that
/// agent still has a step among the ones explored; switching away from an agent that is blocked or finished is
/// free. The search walks the same reduced successors as [`explore`] (so every state it reaches is one the
/// exhaustive search reaches, and every finding one it reports), forgets and merges states where [`explore`] does,
/// and prunes a state only when it was reached before after the same agent with at least as many preemptions
/// left. `limits` (states, memory, time, first, progress) apply to all passes together. Deterministic.
pub fn explore_bounded(sem: &Semantics, limits: &Limits, bound: u32) -> Bounded {
    let started = Instant::now();
    let mut findings: Vec<Finding> = vec![];
    let mut keys: Vec<ProblemKey> = vec![];
    let mut first_bound: Vec<u32> = vec![];
    let mut pass_states: Vec<usize> = vec![];
    let mut saturated_at = None;
    let mut last: Option<Exploration> = None;
    let mut limit = None;
    for k in 0..=bound {
        if let Some(p) = &limits.progress {
            p.set_bound(u64::from(k));
        }
        let states_before = pass_states.iter().sum();
        let (ex, cut, _) =
            explore_inner(sem, limits, None, Pass { bound: Some(k), started, states_before, choice: EagerChoice::LeastOrder });
        pass_states.push(ex.states);
        for (f, key) in ex.findings.iter().zip(&ex.keys) {
            if !keys.contains(key) {
                keys.push(key.clone());
                findings.push(Finding { frequency: Frequency::Sometimes, ..f.clone() });
                first_bound.push(k);
            } else if let Some(i) = keys.iter().position(|x| x == key) {
                // Seen again at a higher bound: it needs a platform choice (N7, N14) only if every pass says the same one.
                if findings[i].platform != f.platform {
                    findings[i].platform = None;
                }
                if findings[i].plan_order != f.plan_order {
                    findings[i].plan_order = None;
                }
            }
        }
        let stop = ex.limit_hit.is_some();
        limit = ex.limit_hit.as_ref().map(|l| format!("at bound {k}: {l}"));
        last = Some(ex);
        if stop {
            break;
        }
        if !cut {
            saturated_at = Some(k);
            break;
        }
    }
    let last = last.expect("bound 0 is always searched");
    let searched = pass_states.len() as u32 - 1;
    let mut what = format!(
        "bounded search: executions with at most {searched} preemption{} (bounds 0..={searched} of {bound})",
        if searched == 1 { "" } else { "s" }
    );
    if let Some(k) = saturated_at {
        what.push_str(&format!("; bound {k} cut no execution, so larger bounds add none"));
    }
    what.push_str("; the verdict covers only those");
    // A pass that cut nothing searched every execution of the reduced search: its verdict is complete.
    let limit_hit = match (limit, saturated_at) {
        (Some(l), _) => Some(format!("{what}; {l}")),
        (None, Some(_)) => None,
        (None, None) => Some(what),
    };
    Bounded {
        exploration: Exploration {
            states: pass_states.iter().sum(),
            terminal_states: last.terminal_states,
            completed_states: last.completed_states,
            starved_states: last.starved_states,
            findings,
            keys,
            limit_hit,
        },
        first_bound,
        pass_states,
        saturated_at,
    }
}

/// Which of a send's two ways to finish, once its recv runs, a pass explores (N2; [`Search::without_dominated`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EagerChoice {
    /// The eager delivery: fewest happens-before edges, finds every problem.
    LeastOrder,
    /// The rendezvous: most happens-before edges, decides what is in every execution.
    MostOrder,
}

/// One depth-first pass: exhaustive (`bound: None`) or bounded by preemptions.
#[derive(Clone, Copy)]
struct Pass {
    bound: Option<u32>,
    /// Which alternative of a send whose recv is running the pass explores ([`Search::without_dominated`]).
    choice: EagerChoice,
    /// When the whole search began (the time budget covers every pass).
    started: Instant,
    /// States visited by earlier passes (the state budget covers every pass).
    states_before: usize,
}

/// The key under which the bounded search remembers the preemptions left at a state: the state and the agent that
/// took the last step (what the next step's cost depends on).
fn budget_key(h: u128, agent: Option<usize>) -> u128 {
    let mut x = xxhash_rust::xxh3::Xxh3::new();
    h.hash(&mut x);
    agent.hash(&mut x);
    x.digest128()
}

/// For a bounded pass: the agent running after each step and the preemptions left after it, given the agent running
/// now (`None` at the start) and the preemptions `left`; the steps that would need more are removed (and the return
/// says whether any was). A step explored alone (a chain, a step that commutes with everything) is no scheduling
/// choice: it costs nothing and leaves the running agent as it was, so that reduction does not turn the next
/// return to that agent into a preemption.
fn budget_steps(
    sem: &Semantics,
    st: &State,
    steps: &mut Vec<Step>,
    from: Option<usize>,
    left: u32,
) -> (Vec<(Option<usize>, u32)>, bool) {
    if steps.len() == 1 {
        // A step taken alone is free and keeps the running agent, unless that agent is a blocked thread (a
        // connection set-up taken alone between two blocked threads left the one that blocked first "running", so
        // that the other's return cost a preemption: the search of nccl-1456-grouped needed bound 3, not 2).
        let from = from.filter(|&a| st.host.threads.get(a).is_none_or(|t| t.wait.is_none()));
        return (vec![(from, left)], false);
    }
    let agents: Vec<usize> = steps.iter().map(|s| step_agent(sem, st, s)).collect();
    let running = from.filter(|a| agents.contains(a));
    let mut budget = Vec::with_capacity(steps.len());
    let mut keep = Vec::with_capacity(steps.len());
    let mut cut = false;
    for (step, a) in steps.drain(..).zip(agents) {
        let cost = u32::from(running.is_some_and(|r| r != a));
        if cost > left {
            cut = true;
            continue;
        }
        budget.push((Some(a), left - cost));
        keep.push(step);
    }
    *steps = keep;
    (budget, cut)
}

/// Adds to `frame` (the state reached by `path` from `init`) every enabled step it does not explore yet, once, and
/// gives it back its state if its last successor took it. A state is widened once however many paths reach it
/// (`widened` holds the hashes of those widened): the parent of an undefined state is often inside a chain of single
/// successors, which is not merged with other visits of it, and widening every visit explored every path of the
/// unreduced search one by one (issue 30, `cuorder-differential` seed 789: 254,329 states and counting for a program
/// of 976).
fn widen(sem: &Semantics, init: &State, path: &[Step], frame: &mut Frame, held: &mut usize, widened: &mut HashSet<u128>) {
    if frame.expanded {
        return;
    }
    frame.expanded = true;
    let mut parent = init.clone();
    for s in path {
        sem.apply(&mut parent, s);
    }
    if !widened.insert(state_hash(&parent)) {
        // Another visit of this state explores its other steps.
        return;
    }
    let extra: Vec<Step> = sem.enabled(&parent).into_iter().filter(|s| !frame.steps.contains(s)).collect();
    if extra.is_empty() {
        return;
    }
    frame.steps.extend(extra);
    if frame.state.is_none() {
        *held += frame.bytes;
        frame.front = Some(Frontier::new(sem, &parent));
        frame.state = Some(parent);
    }
}

/// One pass of the search; returns what it found and, for a bounded pass, whether the bound cut any step.
fn explore_inner<'a>(
    sem: &'a Semantics,
    limits: &Limits,
    visitor: Option<&'a mut dyn FnMut(&State, FinalKind)>,
    pass: Pass,
) -> (Exploration, bool, bool) {
    let mut search = Search {
        visitor,
        sem,
        reduce: limits.reduce,
        rank_sets: pass.bound.is_none(),
        choice: pass.choice,
        dominated: Default::default(),
        found: Collector::new(),
        memo: DeviceMemo::new(sem),
    };
    // States are hashed and merged only where the search branches or ends: a state with a single successor to
    // explore determines the whole chain after it, so a chain entered twice is walked again only up to its next
    // branching point, where the merge happens. A straight-line program then costs time linear in its length.
    let started = pass.started;
    let mut visited: HashSet<u128> = HashSet::new();
    // States whose every enabled step is explored because a successor was undefined ([`widen`]).
    let mut widened: HashSet<u128> = HashSet::new();
    // Bounded passes: the most preemptions left with which each (state, last agent) was reached.
    let mut left_at: HashMap<u128, u32> = HashMap::new();
    let mut cut = false;
    let mut states = 1usize;
    let mut path: Vec<Step> = vec![];
    let init = sem.initial();
    let init_for_replay = init.clone();
    let init_hash = state_hash(&init);
    visited.insert(init_hash);
    if let Some(k) = pass.bound {
        left_at.insert(budget_key(init_hash, None), k);
    }
    // Budgets: the bytes of the states the stack holds, and wall time.
    let init_bytes = crate::budget::state_bytes(&init);
    let mut held = init_bytes;
    let mut meter = ResidentMeter::new();
    let mut over_budget = |held: usize, states: usize| -> Option<String> {
        let states = pass.states_before + states;
        if let Some(p) = &limits.progress {
            p.set_states(states as u64);
        }
        over_limits(limits, started, states, held.saturating_add(states.saturating_mul(VISITED_BYTES)), &mut meter)
    };
    let mut limit_hit = over_budget(held, 1);
    let init_front = Frontier::new(sem, &init);
    let mut steps = search.successors(&init, &init_front);
    let budget = match pass.bound {
        Some(k) => {
            let (b, c) = budget_steps(sem, &init, &mut steps, None, k);
            cut |= c;
            b
        }
        None => vec![],
    };
    let steps = if limit_hit.is_some() { vec![] } else { steps };
    search.visit(&init, &init_front, &path);
    let mut stack = vec![Frame { state: Some(init), front: Some(init_front), steps, next: 0, bytes: init_bytes, budget, expanded: false }];
    while let Some(top) = stack.last_mut() {
        if top.next >= top.steps.len() {
            held -= if top.state.is_some() { top.bytes } else { 0 };
            stack.pop();
            path.pop();
            continue;
        }
        let step = top.steps[top.next].clone();
        let (agent, left) = top.budget.get(top.next).copied().unwrap_or((None, 0));
        top.next += 1;
        let (mut st, mut front) = if top.next == top.steps.len() {
            held -= top.bytes;
            let st = top.state.take().expect("a frame's state is taken only by its last successor");
            (st, top.front.take().expect("a frame keeps its frontier with its state"))
        } else {
            let st = top.state.clone().expect("a frame keeps its state until its last successor");
            (st, top.front.clone().expect("a frame keeps its frontier with its state"))
        };
        front.apply(sem, &mut st, &step);
        // An undefined state ends its execution, so the steps a reduction left out at the parent (a step taken alone
        // or from a persistent set, a withheld item) may never come after it: the races and stale reads they would
        // have shown before the undefined use are lost (issue 8 review: generated program 251 lost a race that way).
        // The parent is then widened to every enabled step, rebuilt by replaying the path (undefined states are final
        // and rare). Not in bounded passes, whose steps carry preemption budgets.
        if st.undefined.is_some() && limits.reduce && pass.bound.is_none() {
            widen(sem, &init_for_replay, &path, stack.last_mut().expect("the parent frame"), &mut held, &mut widened);
        }
        let mut steps = search.successors(&st, &front);
        let mut first_visit = true;
        if steps.len() != 1 {
            // Forget only where the state is hashed: forgetting never changes what is enabled, and states inside
            // a chain are neither compared nor kept.
            if limits.forget {
                sem.forget(&mut st);
            }
            let h = state_hash(&st);
            first_visit = visited.insert(h);
            let seen = match pass.bound {
                None => !first_visit,
                // Bounded: pruned only when reached before after the same agent with at least as many preemptions
                // left (it then explored everything this visit could).
                Some(_) => match left_at.entry(budget_key(h, agent)) {
                    std::collections::hash_map::Entry::Occupied(e) if *e.get() >= left => true,
                    std::collections::hash_map::Entry::Occupied(mut e) => {
                        e.insert(left);
                        false
                    }
                    std::collections::hash_map::Entry::Vacant(e) => {
                        e.insert(left);
                        false
                    }
                },
            };
            if seen {
                // Revisits cost time too: the time budget is checked on them as well.
                if let Some(why) = over_budget(held, states) {
                    limit_hit = Some(why);
                    break;
                }
                continue;
            }
        }
        states += 1;
        if pass.states_before + states > limits.max_states {
            limit_hit = Some(states_limit_line(pass.states_before + states - 1, limits));
            states -= 1;
            break;
        }
        // Estimating a state costs about as much as hashing it: estimate every 2048th and reuse the last estimate
        // (states along a path grow slowly; at every 16th it was 10-18% of the time of a 64-stage pipeline, at
        // every 64th still 13% of a 32-stage one once the reduction's checks got cheaper, at every 512th 8%).
        let bytes = if states % 2048 == 0 { crate::budget::state_bytes(&st) } else { stack.last().map_or(0, |f| f.bytes) };
        held += bytes;
        if let Some(why) = over_budget(held, states) {
            limit_hit = Some(why);
            break;
        }
        let budget = match pass.bound {
            Some(_) => {
                let (b, c) = budget_steps(sem, &st, &mut steps, agent, left);
                cut |= c;
                b
            }
            None => vec![],
        };
        path.push(step);
        // A state reached again with more preemptions left is explored again, but observed once (its races and
        // kind are the same; counting it twice would count its final states twice).
        if first_visit {
            search.visit(&st, &front, &path);
        }
        stack.push(Frame { state: Some(st), front: Some(front), steps, next: 0, bytes, budget, expanded: false });
        if limits.first && !search.found.findings.is_empty() {
            limit_hit = Some("stopped at the first finding (--first); the verdict covers only the executions explored".into());
            break;
        }
    }
    let dominated = search.dominated.get();
    // A race or stale read in every final state of a pass that left out transfers may still be missing from the
    // executions left out: `explore_complete` decides.
    let ex = search.found.finish(states, limit_hit);
    (ex, cut, dominated)
}

/// The problems present in a state (its races, and what it is if final or stuck), by key: what `replay` checks a
/// saved finding against.
pub fn problems_at(sem: &Semantics, st: &State) -> Vec<ProblemKey> {
    let mut c = Collector::new();
    c.observe(sem, st, &sem.enabled(st), &[]);
    c.keys()
}
