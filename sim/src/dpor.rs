//! Dynamic partial-order reduction (`explore --strategy dpor`, issue 8): Source-DPOR with sleep sets (Abdulla,
//! Aronis, Jonsson, Sagonas, "Optimal dynamic partial order reduction", POPL 2014, Algorithm 1), stateless, over
//! the same enabled steps as every other strategy, with dependency computed from what steps touch.
//!
//! **Dependency.** A step writes the state of the ranks [`Semantics::step_ranks`] names and reads at most the ranks
//! whose enabled steps a write of those may change ([`cuorder_model::semantics::incremental::RankGroups::affected_by_step`]: the ranks that share an op's
//! footprint with them, or for a rank-local step the ranks that name its rank outside NCCL); these are the
//! invariants the incremental engines rely on (`tests/incremental.rs`). Two steps are *dependent* when one writes a
//! rank the other reads, when they belong to one agent ([`step_agent`]: a host thread, a stream, a communicator), or
//! when either is *global*: a watchdog (N9, enabled by a global condition), a step the platform may withhold where
//! it is taken ([`Semantics::starvable`]: then every state in which only such steps are enabled is still reached,
//! since such a step stays after everything before it in every equivalent execution), or a step that ends the
//! execution in an undefined state (it disables every other step).
//!
//! **Nondeterministic agents.** An agent can have several enabled steps (an allocation's block, a send that may
//! finish eagerly or wait for its recv, a query's answer): backtrack sets hold agents, and exploring an agent at a
//! state explores each of its enabled steps there. A step that disables another agent's enabled step (a delivery
//! that takes the eager credit another send would use, an undefined use) adds that agent to the backtrack set of
//! the state where both were enabled, as a race would.
//!
//! **What it proves.** Every maximal execution has an equivalent one explored (Source-DPOR's theorem), so every final
//! state (complete, deadlocked, undefined) and every race and stale read is reached, and a problem present in every
//! final state explored is present in every execution. `tests/reduction.rs` checks that DPOR, the reduced search and
//! the unreduced search give the same verdicts on the corpus and on generated programs, under every profile.

use std::collections::HashSet;
use std::hash::Hash;
use std::time::Instant;

use cuorder_model::program::RankId;
use cuorder_model::semantics::incremental::Frontier;
use cuorder_model::program::OpKind;
use cuorder_model::semantics::{OpLoc, Semantics, State, Step, ThreadId};

use crate::explore::{Collector, Exploration, Limits};
use crate::progress::{stopped, INTERRUPTED};
use crate::strategy::step_agent;

/// A state is kept at every `CHECKPOINT`-th depth of the current execution; a state between is rebuilt by replaying
/// at most `CHECKPOINT - 1` steps from the one before.
const CHECKPOINT: usize = 32;

/// What a step touches, as the dependency relation sees it (module docs).
#[derive(Clone, Debug)]
struct Footprint {
    step: Step,
    agent: usize,
    /// Ranks whose state the step writes, ascending.
    writes: Vec<RankId>,
    /// Ranks whose state the step may read (a superset of `writes`), ascending.
    reads: Vec<RankId>,
    /// Dependent with every step.
    global: bool,
    /// Commutes with every step that can ever be enabled beside it where it was taken ([`Semantics::is_local`]):
    /// `{it}` is then a persistent set of that state, so a race with it is not reversed there.
    local: bool,
}

fn disjoint(a: &[RankId], b: &[RankId]) -> bool {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => return false,
        }
    }
    true
}

/// Whether two steps commute and neither enables or disables the other (module docs).
fn independent(a: &Footprint, b: &Footprint) -> bool {
    a.agent != b.agent && !a.global && !b.global && disjoint(&a.writes, &b.reads) && disjoint(&b.writes, &a.reads)
}

/// What recording one event changed in a [`Tracker`], to undo it.
struct Undo {
    /// (rank, its last writer before, its readers before) for each rank written.
    written: Vec<(RankId, Option<u32>, Vec<u32>)>,
    /// Ranks whose readers got this event.
    read: Vec<RankId>,
    /// For a global event: every rank's last writer and readers, and the last global event, before it.
    global: Option<(Vec<Option<u32>>, Vec<Vec<u32>>, Option<u32>)>,
}

/// Per rank, the last event that wrote it and the events that read it since; per agent, its events. From these, the
/// events a new event depends on that can happen before it directly: every other event it depends on happens before
/// one of them (a rank's writers and readers before its last writer, an agent's earlier events, everything before a
/// global event).
struct Tracker {
    last_write: Vec<Option<u32>>,
    /// Per rank: the events that read it (and did not write it) since its last write.
    readers: Vec<Vec<u32>>,
    last_global: Option<u32>,
    /// Per agent: the positions of its events, ascending.
    by_agent: Vec<Vec<u32>>,
}

impl Tracker {
    fn new(agents: usize, ranks: usize) -> Tracker {
        Tracker { last_write: vec![None; ranks], readers: vec![vec![]; ranks], last_global: None, by_agent: vec![vec![]; agents] }
    }

    /// The events `ev` depends on directly (module docs of [`Tracker`]), ascending.
    fn candidates(&self, ev: &Footprint) -> Vec<u32> {
        let mut cand: Vec<u32> = self.last_global.into_iter().collect();
        if ev.global {
            cand.extend(self.by_agent.iter().filter_map(|v| v.last().copied()));
        } else {
            cand.extend(ev.reads.iter().filter_map(|q| self.last_write[*q as usize]));
            for q in &ev.writes {
                cand.extend(self.readers[*q as usize].iter().copied());
            }
            cand.extend(self.by_agent[ev.agent].last().copied());
        }
        cand.sort_unstable();
        cand.dedup();
        cand
    }

    fn record(&mut self, j: u32, ev: &Footprint) -> Undo {
        let mut undo = Undo { written: vec![], read: vec![], global: None };
        if ev.global {
            let n = self.readers.len();
            undo.global = Some((
                std::mem::replace(&mut self.last_write, vec![None; n]),
                std::mem::replace(&mut self.readers, vec![vec![]; n]),
                self.last_global,
            ));
            self.last_global = Some(j);
        } else {
            for &q in &ev.writes {
                let r = std::mem::take(&mut self.readers[q as usize]);
                undo.written.push((q, self.last_write[q as usize].replace(j), r));
            }
            for &q in &ev.reads {
                if ev.writes.binary_search(&q).is_err() {
                    self.readers[q as usize].push(j);
                    undo.read.push(q);
                }
            }
        }
        self.by_agent[ev.agent].push(j);
        undo
    }

    fn undo(&mut self, ev: &Footprint, undo: Undo) {
        self.by_agent[ev.agent].pop();
        if let Some((lw, rd, lg)) = undo.global {
            self.last_write = lw;
            self.readers = rd;
            self.last_global = lg;
        }
        for q in undo.read {
            self.readers[q as usize].pop();
        }
        for (q, lw, rd) in undo.written.into_iter().rev() {
            self.last_write[q as usize] = lw;
            self.readers[q as usize] = rd;
        }
    }
}

/// The events of the current execution with their happens-before relation (the transitive closure of dependency in
/// execution order), as vector clocks over agents.
struct Events {
    agents: usize,
    events: Vec<Footprint>,
    /// Per event, per agent: 1 + the position of the agent's last event that happens before it or is it (0: none).
    clocks: Vec<Vec<u32>>,
    /// Every event (happens-before).
    all: Tracker,
    /// The events that are not local (races).
    nonlocal: Tracker,
    /// Per event: its undo records in `all` and (when not local) in `nonlocal`.
    undo: Vec<(Undo, Option<Undo>)>,
}

impl Events {
    fn new(agents: usize, ranks: usize) -> Events {
        Events {
            agents,
            events: vec![],
            clocks: vec![],
            all: Tracker::new(agents, ranks),
            nonlocal: Tracker::new(agents, ranks),
            undo: vec![],
        }
    }

    /// Whether event `i` happens before event `k` (`i < k`).
    fn before(&self, i: u32, k: u32) -> bool {
        self.clocks[k as usize][self.events[i as usize].agent] > i
    }

    /// Appends `ev` and returns the events whose order with it is to be reversed: the events of other agents it
    /// depends on that happen before it through no other such event (Source-DPOR's `e ≺ e'`), ascending, where
    /// local events ([`Footprint::local`]) are left out: a race with one is not reversed (it is alone in a persistent
    /// set where it was taken), and a path through one does not hide a race with an event before it.
    fn push(&mut self, ev: Footprint) -> Vec<u32> {
        let j = self.events.len() as u32;
        let mut clock = vec![0u32; self.agents];
        for k in self.all.candidates(&ev) {
            for (c, x) in clock.iter_mut().zip(&self.clocks[k as usize]) {
                *c = (*c).max(*x);
            }
        }
        clock[ev.agent] = j + 1;
        self.clocks.push(clock);
        let cand = self.nonlocal.candidates(&ev);
        let races: Vec<u32> = cand
            .iter()
            .copied()
            .filter(|&i| self.events[i as usize].agent != ev.agent && !cand.iter().any(|&k| k != i && self.before(i, k)))
            .collect();
        let all = self.all.record(j, &ev);
        let nonlocal = (!ev.local || ev.global).then(|| self.nonlocal.record(j, &ev));
        self.events.push(ev);
        self.undo.push((all, nonlocal));
        races
    }

    /// Removes the last event.
    fn pop(&mut self) {
        let ev = self.events.pop().expect("an event to pop");
        self.clocks.pop();
        let (all, nonlocal) = self.undo.pop().expect("undo records per event");
        self.all.undo(&ev, all);
        if let Some(u) = nonlocal {
            self.nonlocal.undo(&ev, u);
        }
    }

    /// The agents of the initials of `notdep(i, E).j` (the events after `i` that do not happen after it, then `j`):
    /// those of its events that no earlier event of the sequence happens before, in order. Stops at the first one
    /// `stop` accepts (an agent already in the backtrack set).
    fn initials(&self, i: u32, j: u32, stop: impl Fn(usize) -> bool) -> Vec<usize> {
        let after_i = |k: u32| self.before(i, k);
        let mut out = vec![];
        for k in i + 1..=j {
            if k != j && after_i(k) {
                continue;
            }
            let clock = &self.clocks[k as usize];
            // An event of the sequence happens before k iff, for some agent, its first event after i is in the
            // sequence and happens before k (an agent's events after i that happen after i form a suffix).
            let preceded = (0..self.agents).any(|a| {
                let Some(last) = clock[a].checked_sub(1) else { return false };
                let list = &self.all.by_agent[a];
                match list.get(list.partition_point(|&p| p <= i)) {
                    Some(&f) => f <= last && f != k && !after_i(f),
                    None => false,
                }
            });
            if !preceded {
                let a = self.events[k as usize].agent;
                if stop(a) {
                    return vec![a];
                }
                if !out.contains(&a) {
                    out.push(a);
                }
            }
        }
        out
    }
}

/// One state of the current execution.
struct Node {
    /// The state and its enabled steps, kept at every [`CHECKPOINT`]-th depth.
    saved: Option<(State, Frontier)>,
    /// Steps not to take from here: asleep on arrival, and those explored from here since.
    sleep: Vec<Footprint>,
    /// Agents to explore from here.
    backtrack: Vec<usize>,
    /// Agents whose steps were taken (or are queued in `todo`).
    done: Vec<usize>,
    /// Steps of the agent being explored still to take.
    todo: Vec<Step>,
}

/// What DPOR explored beyond an [`Exploration`].
#[derive(Clone, Debug)]
pub struct Dpor {
    pub exploration: Exploration,
    /// Executions explored to a final state.
    pub executions: usize,
    /// Executions cut short because every enabled step was asleep (an equivalent execution was explored).
    pub sleep_blocked: usize,
}

/// Explores every execution up to equivalence (module docs), up to `limits` (`max_states` counts states along
/// executions, each time it is reached; `first`, `max_time_ms`, `max_memory_bytes` and `progress` as for
/// [`crate::explore::explore`]; `reduce` and `forget` are ignored).
pub fn explore_dpor(sem: &Semantics, limits: &Limits) -> Dpor {
    let started = Instant::now();
    let groups = sem.rank_groups();
    let agents = sem.agents + sem.program.comms.len();
    let ranks = sem.program.ranks.len();
    let mut mark = vec![false; ranks];
    let mut found = Collector::new();
    let mut finals: HashSet<u128> = HashSet::new();
    let mut path: Vec<Step> = vec![];
    let (mut executions, mut sleep_blocked, mut states) = (0usize, 0usize, 1usize);
    let mut held = 0usize;
    let mut limit_hit: Option<String> = None;

    // Objects: the host side of each rank (threads, what they issued: queue tails, event bindings, allocations), the
    // device side (items' progress, memory, NCCL matching and connections), and each op (issued or not).
    let mut op_base = vec![0u32; sem.thread_of.len() + 1];
    for t in 0..sem.thread_of.len() {
        op_base[t + 1] = op_base[t] + sem.ops_len(t as ThreadId) as u32;
    }
    let (host_obj, dev_obj) = (|r: RankId| 2 * r, |r: RankId| 2 * r + 1);
    let op_obj = |loc: OpLoc| 2 * ranks as u32 + op_base[loc.thread as usize] + loc.op;
    let objects = 2 * ranks + op_base[sem.thread_of.len()] as usize;
    // What a step touches (module docs), from the state before it and the state after it.
    let footprint = |before: &State, after: &State, step: &Step, withheld: bool, mark: &mut Vec<bool>| -> Footprint {
        let mut w = sem.step_ranks(before, step);
        w.sort_unstable();
        w.dedup();
        let mut r = vec![];
        groups.affected_by_step(&w, sem.rank_local_step(before, step), mark, &mut r);
        let issued = appends(sem, before, after, step);
        let (mut writes, mut reads): (Vec<u32>, Vec<u32>) = match (step, issued) {
            (_, Some(loc)) => (w.iter().map(|q| host_obj(*q)).chain([op_obj(loc)]).collect(), r.iter().map(|q| host_obj(*q)).collect()),
            (Step::Item(k), None) => (w.iter().map(|q| dev_obj(*q)).collect(), r.iter().map(|q| dev_obj(*q)).chain([op_obj(k.loc())]).collect()),
            (Step::Transfer { .. } | Step::Eager { .. } | Step::Drain { .. } | Step::Collective { .. } | Step::RootEarly { .. }, None) => {
                (w.iter().map(|q| dev_obj(*q)).collect(), r.iter().map(|q| dev_obj(*q)).collect())
            }
            _ => (
                w.iter().flat_map(|q| [host_obj(*q), dev_obj(*q)]).collect(),
                r.iter().flat_map(|q| [host_obj(*q), dev_obj(*q)]).collect(),
            ),
        };
        writes.sort_unstable();
        writes.dedup();
        reads.extend(writes.iter().copied());
        reads.sort_unstable();
        reads.dedup();
        let global = withheld || matches!(step, Step::Watchdog { .. }) || after.undefined.is_some();
        let local = sem.is_local(before, step);
        Footprint { step: step.clone(), agent: step_agent(sem, before, step), writes, reads, global, local }
    };

    let mut events = Events::new(agents, objects);

    // Arrival at a state: observe it, and choose the first agent to explore (or none: final or asleep).
    let mut arrive = |st: &mut State, front: &Frontier, sleep: &[Footprint], path: &[Step], found: &mut Collector| -> Vec<usize> {
        if front.is_empty() {
            executions += 1;
            // Final states are counted once each, as the exhaustive search counts them.
            sem.forget(st);
            let mut h = xxhash_rust::xxh3::Xxh3::new();
            st.hash(&mut h);
            if finals.insert(h.digest128()) {
                found.observe_with(sem, st, true, false, path);
            }
            return vec![];
        }
        found.observe_with(sem, st, false, front.all_starvable(), path);
        // A step that commutes with everything is explored first (alone, unless a race asks for more).
        let awake = |s: &Step| !sleep.iter().any(|x| x.step == *s);
        let first = front.iter().map(|(s, _)| s).filter(|s| awake(s)).find(|s| sem.is_local(st, s));
        match first.or_else(|| front.iter().map(|(s, _)| s).find(|s| awake(s))) {
            Some(s) => vec![step_agent(sem, st, s)],
            None => {
                sleep_blocked += 1;
                vec![]
            }
        }
    };

    let init = sem.initial();
    let init_front = Frontier::new(sem, &init);
    let mut cur = Some((0usize, init.clone(), init_front.clone()));
    let mut init_st = init.clone();
    let backtrack = arrive(&mut init_st, &init_front, &[], &path, &mut found);
    let mut nodes = vec![Node { saved: Some((init, init_front)), sleep: vec![], backtrack, done: vec![], todo: vec![] }];

    'search: while let Some(d) = nodes.len().checked_sub(1) {
        // The next step to take from the deepest state, if any is left.
        let (st, front) = match cur.take() {
            Some((depth, st, front)) if depth == d => (st, front),
            _ => {
                let c = d - d % CHECKPOINT;
                let (st, front) = nodes[c].saved.as_ref().expect("a checkpoint at every CHECKPOINT-th depth");
                let (mut st, mut front) = (st.clone(), front.clone());
                for s in &path[c..d] {
                    front.apply(sem, &mut st, s);
                }
                (st, front)
            }
        };
        let node = &mut nodes[d];
        if node.todo.is_empty() {
            while let Some(p) = node.backtrack.iter().copied().find(|p| !node.done.contains(p)) {
                node.done.push(p);
                node.todo = front
                    .iter()
                    .map(|(s, _)| s)
                    .filter(|s| step_agent(sem, &st, s) == p && !node.sleep.iter().any(|x| x.step == **s))
                    .cloned()
                    .collect();
                if !node.todo.is_empty() {
                    break;
                }
            }
        }
        if node.todo.is_empty() {
            if let Some((st, _)) = node.saved.take() {
                held -= crate::budget::state_bytes(&st).min(held);
            }
            nodes.pop();
            if d > 0 {
                events.pop();
                path.pop();
            }
            continue;
        }
        let step = node.todo.remove(0);
        let withheld = front.iter().any(|(s, w)| w && *s == step);
        // The other agents' enabled steps here, to see which the step disables.
        let before: Vec<(Step, usize)> =
            front.iter().filter(|(s, _)| **s != step).map(|(s, _)| (s.clone(), step_agent(sem, &st, s))).collect();
        let parent = st.clone();
        let (mut st, mut front) = (st, front);
        front.apply(sem, &mut st, &step);
        let ev = footprint(&parent, &st, &step, withheld, &mut mark);
        // A step that disables another agent's step: that agent is explored here too (as if they raced).
        for (t, a) in &before {
            if *a != ev.agent && !nodes[d].backtrack.contains(a) && front.position(t).is_none() {
                nodes[d].backtrack.push(*a);
            }
        }
        // Races of the new event with earlier ones: explore, at the state before the earlier one, an agent that can
        // start the reversed order (Source-DPOR), unless one already is to be explored there.
        let races = events.push(ev.clone());
        for i in races {
            let j = (events.events.len() - 1) as u32;
            let bt = &nodes[i as usize].backtrack;
            let initials = events.initials(i, j, |a| bt.contains(&a));
            if !initials.iter().any(|a| bt.contains(a)) {
                if let Some(a) = initials.first() {
                    nodes[i as usize].backtrack.push(*a);
                }
            }
        }
        let sleep: Vec<Footprint> = nodes[d].sleep.iter().filter(|x| independent(x, &ev)).cloned().collect();
        nodes[d].sleep.push(ev);
        path.push(step);
        states += 1;
        if let Some(p) = &limits.progress {
            p.set_states(states as u64);
        }
        let depth = d + 1;
        let saved = (depth % CHECKPOINT == 0).then(|| {
            sem.forget(&mut st);
            held += crate::budget::state_bytes(&st);
            (st.clone(), front.clone())
        });
        let backtrack = arrive(&mut st, &front, &sleep, &path, &mut found);
        nodes.push(Node { saved, sleep, backtrack, done: vec![], todo: vec![] });
        cur = Some((depth, st, front));
        // Limits.
        let why = if limits.first && !found.findings.is_empty() {
            Some("stopped at the first finding (--first); the verdict covers only the executions explored".to_string())
        } else if states > limits.max_states {
            Some(format!(
                "stopped after {} states (limit max_states = {}); the verdict covers only the executions explored",
                states - 1,
                limits.max_states
            ))
        } else if states % 256 == 0 {
            let bytes = held.saturating_add(events.events.len() * (agents * 4 + 64));
            let ms = started.elapsed().as_millis();
            if stopped(&limits.progress) {
                Some(format!("{INTERRUPTED} after {states} states; the verdict covers only the executions explored"))
            } else if bytes > limits.max_memory_bytes {
                Some(format!(
                    "stopped after {states} states: the search would hold about {} MiB (limit max_memory = {} MiB); \
                     the verdict covers only the executions explored",
                    bytes >> 20,
                    limits.max_memory_bytes >> 20
                ))
            } else if ms > u128::from(limits.max_time_ms) {
                Some(format!(
                    "stopped after {states} states and {ms} ms (limit max_time = {} ms); the verdict covers only the \
                     executions explored",
                    limits.max_time_ms
                ))
            } else {
                None
            }
        } else {
            None
        };
        if why.is_some() {
            limit_hit = why;
            break 'search;
        }
    }
    let exploration = found.finish(states, limit_hit);
    Dpor { exploration, executions, sleep_blocked }
}

/// The op a host step issues when it only appends device work (a kernel, an event record or wait, an asynchronous
/// memset) or only sleeps, returning at once, with one outcome, observing no device and with no launch-queue limit
/// (S6): it then reads and writes the host side of the ranks it names and none of their devices' progress, so it
/// commutes with every device step but those of what it issues. `None` for every other step.
fn appends(sem: &Semantics, before: &State, after: &State, step: &Step) -> Option<OpLoc> {
    let Step::Host { thread, .. } = step else { return None };
    let th = &before.host.threads[*thread as usize];
    let loc = OpLoc { thread: *thread, op: th.pc };
    let simple = th.wait.is_none()
        && sem.profile.launch_queue_depth.is_none()
        && sem.info(loc).observes.is_none()
        && sem.info(loc).comm.is_none()
        && sem.host_choices(before, *thread) == 1
        && matches!(
            sem.op(loc).kind,
            OpKind::Kernel { .. } | OpKind::EventRecord { .. } | OpKind::StreamWaitEvent { .. } | OpKind::HostSleep { .. } | OpKind::Memset { stream: Some(_), .. }
        );
    let returned = after.host.threads[*thread as usize].wait.is_none() && after.undefined.is_none();
    (simple && returned).then_some(loc)
}
