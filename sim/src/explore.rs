//! The exhaustive explorer: a depth-first search over every reachable state of the model, merging equal states
//! (items are named by the op that issued them and vector clocks do not depend on the order of independent steps,
//! so equivalent interleavings meet in one state). It reports every distinct problem with the first witness found
//! in a fixed order, and whether it happens in every execution.

use std::collections::{BTreeMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};

use cuorder_model::semantics::{Semantics, State, Step};
use cuorder_model::verdict::{Finding, Frequency, Problem, ProblemKey};

/// Limits on one exploration; hitting one is reported, never silent.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Distinct states visited before the search stops.
    pub max_states: usize,
    /// Partial-order reduction ([`Semantics::is_local`] steps explored alone). Off only to test that it changes
    /// no verdict.
    pub reduce: bool,
    /// Estimated bytes the search may hold (the states on the search path, estimated by
    /// [`crate::budget::state_bytes`], plus the set of visited states), in bytes.
    pub max_memory_bytes: usize,
    /// Wall-clock time the search may take, in milliseconds.
    pub max_time_ms: u64,
}

/// Default of [`Limits::max_memory_bytes`]: 4 GiB.
pub const DEFAULT_MAX_MEMORY_BYTES: usize = 4 << 30;
/// Default of [`Limits::max_time_ms`]: 10 minutes.
pub const DEFAULT_MAX_TIME_MS: u64 = 600_000;
/// Bytes counted per visited state (its 16-byte hash in a hash set, with the set's slack).
const VISITED_BYTES: usize = 32;

impl Default for Limits {
    fn default() -> Self {
        Limits { max_states: 2_000_000, reduce: true, max_memory_bytes: DEFAULT_MAX_MEMORY_BYTES, max_time_ms: DEFAULT_MAX_TIME_MS }
    }
}

/// What an exploration found.
#[derive(Clone, Debug)]
pub struct Exploration {
    /// Distinct states visited.
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
    /// Set when a limit stopped the search: the verdict then covers only what was explored.
    pub limit_hit: Option<String>,
}

impl Exploration {
    /// `true` when no problem was found and the search was complete.
    pub fn clean(&self) -> bool {
        self.findings.is_empty() && self.limit_hit.is_none()
    }
}

fn state_hash(st: &State) -> u128 {
    let mut a = DefaultHasher::new();
    st.hash(&mut a);
    let mut b = DefaultHasher::new();
    0x9e37_79b9_7f4a_7c15u64.hash(&mut b);
    st.hash(&mut b);
    (u128::from(a.finish()) << 64) | u128::from(b.finish())
}

struct Frame {
    /// The state; taken (moved to its last child) once every other successor has been tried, so that memory grows
    /// with the number of branching points on the path, not with its length.
    state: Option<State>,
    steps: Vec<Step>,
    next: usize,
    /// Estimated bytes of `state` while the frame holds it (memory budget).
    bytes: usize,
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

struct Search<'a, 'p> {
    visitor: Option<&'a mut dyn FnMut(&State, FinalKind)>,
    sem: &'a Semantics<'p>,
    reduce: bool,
    findings: Vec<Finding>,
    index: BTreeMap<ProblemKey, usize>,
    /// Number of distinct final states each problem appears in.
    terminal_hits: BTreeMap<ProblemKey, usize>,
    terminal_states: usize,
    completed_states: usize,
    starved_states: usize,
}

impl Search<'_, '_> {
    fn record(&mut self, key: ProblemKey, problem: impl FnOnce() -> Problem, path: &[Step]) {
        if !self.index.contains_key(&key) {
            self.index.insert(key, self.findings.len());
            self.findings.push(Finding { problem: problem(), frequency: Frequency::Sometimes, witness: path.to_vec() });
        }
    }

    fn deadlock_key(&self, st: &State, starvation: bool) -> ProblemKey {
        let at = (0..st.host.threads.len() as u32)
            .filter(|t| !self.sem.thread_finished(st, *t))
            .map(|t| (t, st.host.threads[t as usize].pc))
            .collect();
        ProblemKey::Deadlock(at, starvation)
    }

    /// Looks at a state reached for the first time; returns its enabled steps (empty when final).
    fn visit(&mut self, st: &State, path: &[Step]) -> Vec<Step> {
        let sem = self.sem;
        let race_key = |r: &cuorder_model::semantics::Race| {
            let (a, b, x, y) = r.key();
            ProblemKey::DataRace(a, b, x, y)
        };
        for r in &st.memory.races {
            self.record(race_key(r), || Problem::DataRace(r.clone()), path);
        }
        let mut present: Vec<ProblemKey> = st.memory.races.iter().map(race_key).collect();
        let enabled = sem.enabled(st);
        // Classify the state once: final (undefined, complete, deadlock), stuck only if the platform withholds what
        // it may withhold (S1 starts, eager beyond the guaranteed window), or neither.
        let kind = if st.undefined.is_some() {
            Some(FinalKind::Undefined)
        } else if enabled.is_empty() {
            Some(if sem.is_complete(st) { FinalKind::Complete } else { FinalKind::Deadlock })
        } else if enabled.iter().all(|s| sem.starvable(st, s)) {
            Some(FinalKind::Starved)
        } else {
            None
        };
        if let (Some(v), Some(k)) = (self.visitor.as_mut(), kind) {
            v(st, k);
        }
        match kind {
            Some(FinalKind::Undefined) => {
                let u = st.undefined.as_ref().expect("undefined state");
                let mut at = u.at.clone();
                at.sort();
                let key = ProblemKey::Undefined(u.rule, at);
                self.record(key.clone(), || Problem::Undefined(u.clone()), path);
                present.push(key);
            }
            Some(FinalKind::Complete) => self.completed_states += 1,
            Some(FinalKind::Deadlock) => {
                let key = self.deadlock_key(st, false);
                self.record(key.clone(), || Problem::Deadlock(sem.explain(st, false)), path);
                present.push(key);
            }
            Some(FinalKind::Starved) => {
                self.starved_states += 1;
                let key = self.deadlock_key(st, true);
                self.record(key, || Problem::Deadlock(sem.explain(st, true)), path);
            }
            None => {}
        }
        if enabled.is_empty() {
            self.terminal_states += 1;
            present.sort();
            present.dedup();
            for k in present {
                *self.terminal_hits.entry(k).or_default() += 1;
            }
        }
        // Partial-order reduction: a step that commutes with everything is explored alone.
        match enabled.iter().find(|s| self.reduce && sem.is_local(st, s)) {
            Some(s) => vec![s.clone()],
            None => enabled,
        }
    }
}

/// Explores every execution of the program under the profile, up to `limits`.
pub fn explore(sem: &Semantics, limits: &Limits) -> Exploration {
    explore_inner(sem, limits, None)
}

/// Like [`explore`], and also calls `visit` on every final state (and every S1-stuck state) reached.
pub fn explore_with(sem: &Semantics, limits: &Limits, visit: &mut dyn FnMut(&State, FinalKind)) -> Exploration {
    explore_inner(sem, limits, Some(visit))
}

fn explore_inner<'a>(sem: &'a Semantics, limits: &Limits, visitor: Option<&'a mut dyn FnMut(&State, FinalKind)>) -> Exploration {
    let mut search = Search {
        visitor,
        sem,
        reduce: limits.reduce,
        findings: vec![],
        index: BTreeMap::new(),
        terminal_hits: BTreeMap::new(),
        terminal_states: 0,
        completed_states: 0,
        starved_states: 0,
    };
    let started = std::time::Instant::now();
    let mut visited: HashSet<u128> = HashSet::new();
    let mut path: Vec<Step> = vec![];
    let init = sem.initial();
    visited.insert(state_hash(&init));
    // Budgets: the bytes of the states the stack holds, and wall time (checked every few states).
    let init_bytes = crate::budget::state_bytes(&init);
    let mut held = init_bytes;
    let over_budget = |held: usize, visited: usize| -> Option<String> {
        let bytes = held.saturating_add(visited.saturating_mul(VISITED_BYTES));
        if bytes > limits.max_memory_bytes {
            return Some(format!(
                "stopped after {visited} states: the search would hold about {} MiB (limit max_memory = {} MiB); \
                 the verdict covers only the executions explored",
                bytes >> 20,
                limits.max_memory_bytes >> 20
            ));
        }
        let ms = started.elapsed().as_millis();
        (ms > u128::from(limits.max_time_ms)).then(|| {
            format!(
                "stopped after {visited} states and {ms} ms (limit max_time = {} ms); the verdict covers only the \
                 executions explored",
                limits.max_time_ms
            )
        })
    };
    let mut limit_hit = over_budget(held, 1);
    let steps = if limit_hit.is_some() { vec![] } else { search.visit(&init, &path) };
    let mut stack = vec![Frame { state: Some(init), steps, next: 0, bytes: init_bytes }];
    while let Some(top) = stack.last_mut() {
        if limit_hit.is_some() {
            break;
        }
        if top.next >= top.steps.len() {
            held -= if top.state.is_some() { top.bytes } else { 0 };
            stack.pop();
            path.pop();
            continue;
        }
        let step = top.steps[top.next].clone();
        top.next += 1;
        let mut st = if top.next == top.steps.len() {
            held -= top.bytes;
            top.state.take().expect("a frame's state is taken only by its last successor")
        } else {
            top.state.clone().expect("a frame keeps its state until its last successor")
        };
        sem.apply(&mut st, &step);
        if !visited.insert(state_hash(&st)) {
            // Revisits cost time too: the time budget is checked on them as well.
            if let Some(why) = over_budget(held, visited.len()) {
                limit_hit = Some(why);
                break;
            }
            continue;
        }
        if visited.len() > limits.max_states {
            limit_hit = Some(format!(
                "stopped after {} states (limit max_states = {}); the verdict covers only the executions explored",
                visited.len() - 1,
                limits.max_states
            ));
            break;
        }
        // Estimating a state costs about as much as hashing it: estimate every 16th and reuse the last estimate
        // (states along a path grow slowly).
        let bytes = if visited.len() % 16 == 0 { crate::budget::state_bytes(&st) } else { stack.last().map_or(0, |f| f.bytes) };
        held += bytes;
        if let Some(why) = over_budget(held, visited.len()) {
            limit_hit = Some(why);
            break;
        }
        path.push(step);
        let steps = search.visit(&st, &path);
        stack.push(Frame { state: Some(st), steps, next: 0, bytes });
    }
    let mut findings = search.findings;
    for (key, idx) in &search.index {
        let always = match key {
            ProblemKey::Deadlock(..) => search.completed_states == 0 && limit_hit.is_none(),
            _ => search.terminal_hits.get(key).copied().unwrap_or(0) == search.terminal_states && limit_hit.is_none(),
        };
        findings[*idx].frequency = if always { Frequency::Always } else { Frequency::Sometimes };
    }
    Exploration {
        states: visited.len(),
        terminal_states: search.terminal_states,
        completed_states: search.completed_states,
        starved_states: search.starved_states,
        findings,
        limit_hit,
    }
}
