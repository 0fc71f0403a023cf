//! Dynamic partial-order reduction (`explore --strategy dpor`, issue 8): Source-DPOR with sleep sets (Abdulla,
//! Aronis, Jonsson, Sagonas, "Optimal dynamic partial order reduction", POPL 2014, Algorithm 1), stateless, over
//! the same enabled steps as every other strategy, with dependency computed from what steps touch.
//!
//! **Dependency.** A step reads and writes *objects*: the host side of a rank (its threads, what they issued: queue
//! tails, event bindings, allocations), NCCL's tables of a rank (matching, N3; connections, N7; launches issued), each
//! stream (its items' progress and clocks), each buffer (memory accesses), each op (issued or not; for NCCL ops,
//! finished or not), each P2P connection's eager credit (N2), and whether an NCCL kernel spins on a device (S1:
//! without independent progress an item start reads it, since it decides whether the platform may withhold the
//! start; launch starts and ends change it). Which ranks a step concerns comes from
//! [`Semantics::step_ranks`] (written) and [`cuorder_model::semantics::incremental::RankGroups::affected_by_step`]
//! (read: the ranks whose enabled steps a write of those may change), the invariants the incremental engines rely on
//! (`tests/incremental.rs`); which of their objects, from the step:
//! - a host call that only issues work or blocks on work issued before (kernel, event record or wait, memset, value
//!   assertion, stream/event/device synchronize: [`issues_only`]) touches host sides and the op it issues; an NCCL
//!   call, group bracket, init, split or barrier ([`nccl_call`]) host sides and NCCL tables; the return from a
//!   synchronize reads streams; every other host step touches everything of its ranks;
//! - a kernel, copy, memset or marker writes its streams and the buffers it touches, and reads the streams of the
//!   items it waits for and its op; an NCCL launch touches everything of its rank;
//! - a delivery (transfer, eager, drain) writes its ops and its connection's credit, reads the ops that gate them
//!   (earlier ops of the lane, N4; earlier kernel plans, N14) and the matching, and *bumps* the streams and buffers
//!   of the launches it may end (two bumps commute: whichever delivery finishes a launch last ends it, its end
//!   joining every op's clock; a bump conflicts with a read or write);
//! - with allocations (P4: a block holds several buffers over time) items and deliveries touch everything of their
//!   ranks.
//!
//! Two steps are *dependent* when one writes or bumps an object the other reads, writes or (for a write) bumps, when
//! they belong to one agent ([`step_agent`]: a host thread, a stream, a communicator), or when either is *global*: a
//! watchdog (N9, enabled by a global condition), a step the platform may withhold where it is taken
//! ([`Semantics::starvable`]: then every state in which only such steps are enabled is still reached, since such a
//! step stays after everything before it in every equivalent execution), or a step that ends the execution in an
//! undefined state (it disables every other step).
//!
//! **Persistent sets.** A step that commutes with every step that can ever be enabled beside it
//! ([`Semantics::is_local`], the exhaustive search's proof) is explored first, and a race with it is not reversed:
//! `{it}` is a persistent set of the state where it was taken. It orders after it only what may need it: a later step
//! of another agent that was enabled, and could not be withheld, in every state since the one where it was taken
//! commutes with it and could have gone first, so it does not happen after it, whatever the two touch (footprints are
//! coarser than the search's proof: the host side of a rank, a collective's whole device; ordering such a step after
//! the local event, an order never reversed, made a race of an earlier event with the step look irreversible, and
//! executions were lost: seeds 2809 and 20780 of `cuorder-differential`). And a path through it does not hide a race
//! between the events before and after it.
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
//! the unreduced search give the same verdicts on the corpus and on generated programs, under every profile, wherever
//! DPOR finishes within the test budget. Being stateless it visits again what the exhaustive search merges (a state
//! reached by executions that differ in the order of steps which reach equal states but do not commute step by step:
//! a synchronize called before or after the kernel it waits for ends), so it suits small programs.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use cuorder_model::op_info::NcclRole;
use cuorder_model::program::{BufRef, OpKind, RankId, StreamRef};
use cuorder_model::semantics::incremental::{Frontier, RankGroups};
use cuorder_model::semantics::{CommOpKind, Item, ItemKind, OpLoc, P2pKey, Semantics, State, Step, ThreadId, Wait};

use crate::explore::{Collector, Exploration, Limits};
use crate::strategy::step_agent;

/// A state is kept at every `CHECKPOINT`-th depth of the current execution; a state between is rebuilt by replaying
/// at most `CHECKPOINT - 1` steps from the one before.
const CHECKPOINT: usize = 32;

/// What a step touches, as the dependency relation sees it (module docs).
#[derive(Clone, Debug)]
struct Footprint {
    step: Step,
    agent: usize,
    /// Objects the step writes, ascending.
    writes: Vec<u32>,
    /// Objects the step reads (a superset of `writes`), ascending.
    reads: Vec<u32>,
    /// Objects the step changes in a way that commutes with other such changes (a delivery finishing one op of a
    /// launch: the launch ends with whichever finishes last, its end joining every op's clock), ascending, disjoint
    /// from `reads`.
    bumps: Vec<u32>,
    /// Dependent with every step.
    global: bool,
    /// Commutes with every step that can ever be enabled beside it where it was taken ([`Semantics::is_local`]):
    /// `{it}` is then a persistent set of that state, so a race with it is not reversed there.
    local: bool,
}

fn disjoint(a: &[u32], b: &[u32]) -> bool {
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
    a.agent != b.agent
        && !a.global
        && !b.global
        && disjoint(&a.writes, &b.reads)
        && disjoint(&b.writes, &a.reads)
        && disjoint(&a.bumps, &b.reads)
        && disjoint(&b.bumps, &a.reads)
}

/// What recording one event changed in a [`Tracker`], to undo it.
struct Undo {
    /// (object, its writers before, its readers before, its bumpers before) for each object whose writers the event
    /// replaced.
    written: Vec<(u32, Vec<u32>, Vec<u32>, Vec<u32>)>,
    /// Objects whose writers got this event, replacing none.
    added: Vec<u32>,
    /// Objects whose readers got this event.
    read: Vec<u32>,
    /// Objects whose bumpers got this event.
    bumped: Vec<u32>,
    /// For a global event: every object's writers, readers and bumpers, and the last global event, before it.
    global: Option<(Vec<Vec<u32>>, Vec<Vec<u32>>, Vec<Vec<u32>>, Option<u32>)>,
}

/// Per object ([`Footprint`]), the last events that wrote it and the events that read or bumped it since; per agent,
/// its events. From these, the events a new event depends on that can happen before it directly: every other event it
/// depends on happens before one of them (an object's writers, readers and bumpers before a writer that replaced
/// them, an agent's earlier events, everything before a global event).
///
/// A writer replaces the writers, readers and bumpers that happen before it, unless it is *kept*: a local event
/// ([`Footprint::local`]) that a later event may not depend on ([`Events::push`]), whose writes then leave the
/// events before it in place, so that such a later event still finds them.
struct Tracker {
    /// Per object: the events that wrote it and happen before no writer that replaced them.
    writers: Vec<Vec<u32>>,
    /// Per object: the events that read it (and did not write it) since its writers.
    readers: Vec<Vec<u32>>,
    /// Per object: the events that bumped it since its writers.
    bumpers: Vec<Vec<u32>>,
    last_global: Option<u32>,
    /// Per agent: the positions of its events, ascending.
    by_agent: Vec<Vec<u32>>,
}

impl Tracker {
    fn new(agents: usize, objects: usize) -> Tracker {
        Tracker {
            writers: vec![vec![]; objects],
            readers: vec![vec![]; objects],
            bumpers: vec![vec![]; objects],
            last_global: None,
            by_agent: vec![vec![]; agents],
        }
    }

    /// The events `ev` depends on directly (module docs of [`Tracker`]), ascending.
    fn candidates(&self, ev: &Footprint) -> Vec<u32> {
        let mut cand: Vec<u32> = self.last_global.into_iter().collect();
        if ev.global {
            cand.extend(self.by_agent.iter().filter_map(|v| v.last().copied()));
        } else {
            for q in ev.reads.iter().chain(&ev.bumps) {
                cand.extend(self.writers[*q as usize].iter().copied());
            }
            for q in &ev.writes {
                cand.extend(self.readers[*q as usize].iter().copied());
            }
            // `reads` holds `writes`: reading or writing an object conflicts with bumping it.
            for q in &ev.reads {
                cand.extend(self.bumpers[*q as usize].iter().copied());
            }
            for q in &ev.bumps {
                cand.extend(self.readers[*q as usize].iter().copied());
            }
            cand.extend(self.by_agent[ev.agent].last().copied());
        }
        cand.sort_unstable();
        cand.dedup();
        cand
    }

    /// Records event `j`; `keep`: its writes replace no earlier event (module docs of [`Tracker`]); `before`:
    /// whether an earlier event happens before `j`.
    fn record(&mut self, j: u32, ev: &Footprint, keep: bool, before: impl Fn(u32) -> bool) -> Undo {
        let mut undo = Undo { written: vec![], added: vec![], read: vec![], bumped: vec![], global: None };
        if ev.global {
            let n = self.readers.len();
            undo.global = Some((
                std::mem::replace(&mut self.writers, vec![vec![]; n]),
                std::mem::replace(&mut self.readers, vec![vec![]; n]),
                std::mem::replace(&mut self.bumpers, vec![vec![]; n]),
                self.last_global,
            ));
            self.last_global = Some(j);
        } else {
            for &q in &ev.writes {
                let q = q as usize;
                if keep {
                    self.writers[q].push(j);
                    undo.added.push(q as u32);
                    continue;
                }
                let after = |v: &[u32]| v.iter().copied().filter(|x| !before(*x)).collect::<Vec<u32>>();
                let (w, r, b) = (after(&self.writers[q]), after(&self.readers[q]), after(&self.bumpers[q]));
                let mut w = w;
                w.push(j);
                let w = std::mem::replace(&mut self.writers[q], w);
                let r = std::mem::replace(&mut self.readers[q], r);
                let b = std::mem::replace(&mut self.bumpers[q], b);
                undo.written.push((q as u32, w, r, b));
            }
            for &q in &ev.reads {
                if ev.writes.binary_search(&q).is_err() {
                    self.readers[q as usize].push(j);
                    undo.read.push(q);
                }
            }
            for &q in &ev.bumps {
                self.bumpers[q as usize].push(j);
                undo.bumped.push(q);
            }
        }
        self.by_agent[ev.agent].push(j);
        undo
    }

    fn undo(&mut self, ev: &Footprint, undo: Undo) {
        self.by_agent[ev.agent].pop();
        if let Some((w, rd, bu, lg)) = undo.global {
            self.writers = w;
            self.readers = rd;
            self.bumpers = bu;
            self.last_global = lg;
        }
        for q in undo.bumped {
            self.bumpers[q as usize].pop();
        }
        for q in undo.read {
            self.readers[q as usize].pop();
        }
        for q in undo.added {
            self.writers[q as usize].pop();
        }
        for (q, w, rd, bu) in undo.written.into_iter().rev() {
            self.writers[q as usize] = w;
            self.readers[q as usize] = rd;
            self.bumpers[q as usize] = bu;
        }
    }
}

/// The events of the current execution with their happens-before relation, as vector clocks over agents: the
/// transitive closure, in execution order, of dependency, less the order of a local event before a later event that
/// was enabled, continuously, since before it (module docs, "Persistent sets").
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
    fn new(agents: usize, objects: usize) -> Events {
        Events {
            agents,
            events: vec![],
            clocks: vec![],
            all: Tracker::new(agents, objects),
            nonlocal: Tracker::new(agents, objects),
            undo: vec![],
        }
    }

    /// Whether event `i` happens before event `k` (`i < k`).
    fn before(&self, i: u32, k: u32) -> bool {
        self.clocks[k as usize][self.events[i as usize].agent] > i
    }

    /// Appends `ev`, a step enabled in every state of the execution since the one before event `since` (its
    /// position or earlier), and returns the events whose order with it is to be reversed: the events of other
    /// agents it depends on that happen before it through no other such event (Source-DPOR's `e ≺ e'`), ascending,
    /// where local events ([`Footprint::local`]) are left out: a race with one is not reversed (it is alone in a
    /// persistent set where it was taken), and a path through one does not hide a race with an event before it.
    ///
    /// A local event at or after `since` does not happen before `ev` for what they both touch: it commutes with
    /// every step enabled beside it, and `ev` was ([`Semantics::is_local`]), so it can be moved after `ev`. (Letting
    /// it order `ev` after it made a race of an event before it with `ev` look irreversible; seed 2809 of the
    /// differential campaign: a kernel's start, taken alone, put the end of a gather after the host call that
    /// issued the kernel, and the execution in which another thread's event synchronize returns first was never
    /// explored, "data race in every execution".)
    fn push(&mut self, ev: Footprint, since: u32) -> Vec<u32> {
        let j = self.events.len() as u32;
        let mut clock = vec![0u32; self.agents];
        let movable = |k: u32| {
            let e = &self.events[k as usize];
            !ev.global && e.local && !e.global && e.agent != ev.agent && k >= since
        };
        for k in self.all.candidates(&ev) {
            if movable(k) {
                continue;
            }
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
        let (clocks, events) = (&self.clocks, &self.events);
        let before_j = |x: u32| clocks[j as usize][events[x as usize].agent] > x;
        let all = self.all.record(j, &ev, ev.local && !ev.global, before_j);
        let nonlocal = (!ev.local || ev.global).then(|| self.nonlocal.record(j, &ev, false, |_| true));
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

/// Per enabled step of a state of the current execution: the depth of the first state from which it has been
/// enabled, and not withholdable ([`Semantics::starvable`]), in every state up to this one, without its agent taking
/// a step meanwhile (the next state's depth if it may be withheld here).
type Since = HashMap<Step, u32>;

/// [`Since`] for the state at `depth` (its enabled steps `front`), reached by a step of `agent` from the state whose
/// [`Since`] is `prev`.
fn advance_since(sem: &Semantics, st: &State, front: &Frontier, prev: &Since, agent: usize, depth: u32) -> Since {
    front
        .iter()
        .map(|(s, withheld)| {
            let at = match prev.get(s) {
                _ if withheld => depth + 1,
                Some(d) if step_agent(sem, st, s) != agent => *d,
                _ => depth,
            };
            (s.clone(), at)
        })
        .collect()
}

/// One state of the current execution.
struct Node {
    /// The state, its enabled steps and since when each is enabled, kept at every [`CHECKPOINT`]-th depth, with its
    /// estimated bytes.
    saved: Option<(State, Frontier, Since, usize)>,
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
    let agents = sem.agents + sem.program.comms.len();
    let ranks = sem.program.ranks.len();
    let mut mark = vec![false; ranks];
    let mut found = Collector::new();
    let mut finals: HashSet<u128> = HashSet::new();
    let mut path: Vec<Step> = vec![];
    let (mut executions, mut sleep_blocked, mut states) = (0usize, 0usize, 1usize);
    let mut held = 0usize;
    let mut limit_hit: Option<String> = None;
    let mut meter = crate::budget::ResidentMeter::new();

    let deps = Dependency::new(sem);
    let objects = deps.objects;

    let mut events = Events::new(agents, objects);

    // Arrival at a state: observe it, and choose the first agent to explore (or none: final or asleep).
    let mut arrive = |st: &mut State, front: &Frontier, sleep: &[Footprint], path: &[Step], found: &mut Collector| -> Vec<usize> {
        if front.is_empty() {
            executions += 1;
            // Final states are counted once each, as the exhaustive search counts them.
            sem.forget(st);
            if finals.insert(crate::explore::state_hash(st)) {
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
    let init_since: Since = init_front.iter().map(|(s, w)| (s.clone(), u32::from(w))).collect();
    let mut cur = Some((0usize, init.clone(), init_front.clone(), init_since.clone()));
    let mut init_st = init.clone();
    let backtrack = arrive(&mut init_st, &init_front, &[], &path, &mut found);
    let mut nodes = vec![Node { saved: Some((init, init_front, init_since, 0)), sleep: vec![], backtrack, done: vec![], todo: vec![] }];

    'search: while let Some(d) = nodes.len().checked_sub(1) {
        let node = &nodes[d];
        if node.todo.is_empty() && node.backtrack.iter().all(|p| node.done.contains(p)) {
            // Done here: back to the state before.
            if let Some((_, _, _, bytes)) = nodes[d].saved.take() {
                held -= bytes;
            }
            nodes.pop();
            if d > 0 {
                events.pop();
                path.pop();
            }
            continue;
        }
        // The state at depth `d`: the current one, or rebuilt from the checkpoint before it.
        let (st, front, since) = match cur.take() {
            Some((depth, st, front, since)) if depth == d => (st, front, since),
            _ => {
                let c = d - d % CHECKPOINT;
                let (st, front, since, _) = nodes[c].saved.as_ref().expect("a checkpoint at every CHECKPOINT-th depth");
                let (mut st, mut front, mut since) = (st.clone(), front.clone(), since.clone());
                for (k, s) in path[c..d].iter().enumerate() {
                    let agent = step_agent(sem, &st, s);
                    front.apply(sem, &mut st, s);
                    since = advance_since(sem, &st, &front, &since, agent, (c + k + 1) as u32);
                }
                (st, front, since)
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
            // No agent left to explore has a step here: the next turn goes back.
            continue;
        }
        let step = node.todo.remove(0);
        let withheld = front.iter().any(|(s, w)| w && *s == step);
        // The other agents' enabled steps here, to see which the step disables.
        let before: Vec<(Step, usize)> =
            front.iter().filter(|(s, _)| **s != step).map(|(s, _)| (s.clone(), step_agent(sem, &st, s))).collect();
        let mut ev = deps.footprint(&st, &step, withheld, &mut mark);
        let (mut st, mut front) = (st, front);
        front.apply(sem, &mut st, &step);
        // An undefined use ends the execution: it disables every other step.
        ev.global |= st.undefined.is_some();
        // A step that disables another agent's step: that agent is explored here too (as if they raced).
        for (t, a) in &before {
            if *a != ev.agent && !nodes[d].backtrack.contains(a) && front.position(t).is_none() {
                nodes[d].backtrack.push(*a);
            }
        }
        // Races of the new event with earlier ones: explore, at the state before the earlier one, an agent that can
        // start the reversed order (Source-DPOR), unless one already is to be explored there.
        let races = events.push(ev.clone(), since[&step]);
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
        let agent = ev.agent;
        nodes[d].sleep.push(ev);
        path.push(step);
        // The state the step reaches is explored (and counted) only within the limit, as the exhaustive search
        // counts them: it reported "explored 2000001 states" when stopped after 2,000,000.
        if states >= limits.max_states {
            limit_hit = Some(crate::explore::states_limit_line(states, limits));
            break 'search;
        }
        states += 1;
        if let Some(p) = &limits.progress {
            p.set_states(states as u64);
        }
        let depth = d + 1;
        let since = advance_since(sem, &st, &front, &since, agent, depth as u32);
        let saved = (depth % CHECKPOINT == 0).then(|| {
            sem.forget(&mut st);
            let bytes = crate::budget::state_bytes(&st) + since.len() * (std::mem::size_of::<(Step, u32)>() + 8);
            held += bytes;
            (st.clone(), front.clone(), since.clone(), bytes)
        });
        let backtrack = arrive(&mut st, &front, &sleep, &path, &mut found);
        nodes.push(Node { saved, sleep, backtrack, done: vec![], todo: vec![] });
        cur = Some((depth, st, front, since));
        // Limits.
        let why = if limits.first && !found.findings.is_empty() {
            Some("stopped at the first finding (--first); the verdict covers only the executions explored".to_string())
        } else {
            // Every state: a DPOR state costs microseconds and may hold a saved state of hundreds of KiB, so checking
            // every 256th let the process pass a 60 MiB budget by 400 MiB (the new-user trial of 2026-12-03).
            let bytes = held.saturating_add(events.events.len() * (agents * 4 + 64));
            crate::explore::over_limits(limits, started, states, bytes, &mut meter)
        };
        if why.is_some() {
            limit_hit = why;
            break 'search;
        }
    }
    let exploration = found.finish(states, limit_hit);
    Dpor { exploration, executions, sleep_blocked }
}

/// Whether thread `t`'s call (it was not blocked) only issues device work (a kernel, an event record or wait, a
/// memset, a value assertion on a stream) or sleeps, or blocks on work issued before (stream, event and device
/// synchronize: the items to wait for are the streams' tails and the events' bindings, fixed at issue), with one
/// outcome, observing no device and with no launch-queue limit (S6): it then reads and writes the host side of the
/// ranks it names and none of their devices' progress, so it commutes with every device step but those of what it
/// issues. (A return from such a block reads the progress.)
fn issues_only(sem: &Semantics, before: &State, t: ThreadId) -> bool {
    plain_call(sem, before, t).is_some_and(|loc| {
        sem.info(loc).comm.is_none()
            && sem.host_choices(before, t) == 1
            && matches!(
                sem.op(loc).kind,
                OpKind::Kernel { .. }
                    | OpKind::EventRecord { .. }
                    | OpKind::StreamWaitEvent { .. }
                    | OpKind::HostSleep { .. }
                    | OpKind::Memset { .. }
                    | OpKind::Expect { stream: Some(_), .. }
                    | OpKind::StreamSynchronize { .. }
                    | OpKind::EventSynchronize { .. }
                    | OpKind::DeviceSynchronize { .. }
            )
    })
}

/// The op of thread `t`'s next call when the thread is not blocked, the call cannot block for a launch-queue slot
/// (S6) and its outcome observes no device (a query, an allocation); `None` otherwise.
fn plain_call(sem: &Semantics, before: &State, t: ThreadId) -> Option<OpLoc> {
    let th = &before.host.threads[t as usize];
    let loc = OpLoc { thread: t, op: th.pc };
    (th.wait.is_none() && sem.profile.launch_queue_depth.is_none() && sem.info(loc).observes.is_none()).then_some(loc)
}

/// The ops of a running launch whose progress decides whether the op at `idx` may progress: earlier ops of its lane
/// (same peer, same direction; N4) and ops of earlier kernel plans (N14).
fn gating_ops(item: &Item, idx: u32) -> Vec<OpLoc> {
    let ItemKind::Launch { ops, .. } = &item.kind else { return vec![] };
    let me = &ops[idx as usize];
    let mine = me.kind.lane();
    ops.iter()
        .enumerate()
        .filter(|(j, o)| o.plan < me.plan || (*j < idx as usize && mine.is_some() && o.kind.lane() == mine))
        .map(|(_, o)| o.loc)
        .collect()
}

/// Whether thread `t`'s call (it was not blocked) is an NCCL call that issues work or sets up a communicator (send,
/// recv, collective, group brackets, init, split) or a barrier: it reads and writes the host side and NCCL's tables
/// of the ranks it names (matching, N3; connections, N7; the launches it enqueues), never how far a stream or memory
/// has got. (Abort, finalize, destroy and poll act on running work, N12, N13: not these.)
fn nccl_call(sem: &Semantics, before: &State, t: ThreadId) -> bool {
    plain_call(sem, before, t).is_some_and(|loc| {
        matches!(
            sem.op(loc).kind,
            OpKind::Send { .. }
                | OpKind::Recv { .. }
                | OpKind::Collective { .. }
                | OpKind::GroupStart
                | OpKind::GroupEnd
                | OpKind::CommInit { .. }
                | OpKind::CommSplit { .. }
                | OpKind::Barrier { .. }
        )
    })
}

/// The objects of a program and what each step touches (module docs, "Dependency").
pub struct Dependency<'a, 'p> {
    sem: &'a Semantics<'p>,
    groups: RankGroups,
    r32: u32,
    nstreams: u32,
    nbuf: u32,
    /// Per thread: the index of its first op among all ops (and the total at the end).
    op_base: Vec<u32>,
    /// Per rank: every object of its device side, ascending.
    device: Vec<Vec<u32>>,
    /// Whether the program allocates (P4): memory is then judged per device.
    pooled: bool,
    /// P2P connection (communicator, sender, receiver) -> its object.
    conns: BTreeMap<(u32, RankId, RankId), u32>,
    /// The first of the objects, one per rank, saying whether an NCCL kernel spins on the device (S1).
    spin_base: u32,
    /// Number of objects.
    objects: usize,
}

impl<'a, 'p> Dependency<'a, 'p> {
    /// The objects of `sem`'s program: the host side of each rank; its device side (NCCL matching and connections,
    /// the allocator, whether an NCCL kernel spins); each of its streams (queue progress, its items' status and
    /// clocks); each of its buffers (memory accesses); each op (issued or not); each P2P connection's eager credit.
    pub fn new(sem: &'a Semantics<'p>) -> Self {
        let mut op_base = vec![0u32; sem.thread_of.len() + 1];
        for t in 0..sem.thread_of.len() {
            op_base[t + 1] = op_base[t] + sem.ops_len(t as ThreadId) as u32;
        }
        let ranks = sem.program.ranks.len() as u32;
        let nstreams = (sem.agents - sem.thread_of.len()) as u32;
        let nbuf = sem.program.ranks.iter().map(|r| r.buffers.len()).max().unwrap_or(0) as u32;
        let mut d = Dependency {
            sem,
            groups: sem.rank_groups(),
            r32: ranks,
            nstreams,
            nbuf,
            op_base,
            device: vec![],
            pooled: false,
            conns: BTreeMap::new(),
            spin_base: 0,
            objects: 0,
        };
        d.pooled = sem.program.ranks.iter().flat_map(|r| &r.buffers).any(|b| b.pooled)
            || sem.program.ranks.iter().flat_map(|r| &r.threads).flat_map(|t| &t.ops).any(|o| {
                matches!(
                    o.kind,
                    OpKind::Alloc { .. } | OpKind::Free { .. } | OpKind::RecordStream { .. } | OpKind::CudaFree { .. } | OpKind::CudaMalloc { .. }
                        | OpKind::CudaMallocHost { .. } | OpKind::EmptyCache { .. }
                )
            });
        let first_conn = 2 * ranks + nstreams + ranks * nbuf + d.op_base[sem.thread_of.len()];
        for t in 0..sem.thread_of.len() as ThreadId {
            for op in 0..sem.ops_len(t) as u32 {
                let loc = OpLoc { thread: t, op };
                let (info, me) = (sem.info(loc), sem.acting_rank(loc));
                let key = match (info.comm, info.nccl) {
                    (Some(c), Some(NcclRole::Send { peer })) => (c.0, me, peer),
                    (Some(c), Some(NcclRole::Recv { peer })) => (c.0, peer, me),
                    _ => continue,
                };
                let next = first_conn + d.conns.len() as u32;
                d.conns.entry(key).or_insert(next);
            }
        }
        d.spin_base = first_conn + d.conns.len() as u32;
        d.objects = (d.spin_base + ranks) as usize;
        d.device = (0..ranks)
            .map(|r| {
                let streams = (0..sem.program.ranks[r as usize].streams.len() as u32).map(|index| d.stream_obj(StreamRef { rank: r, index }));
                let bufs = (0..sem.program.ranks[r as usize].buffers.len() as u32).map(|index| d.buf_obj(BufRef { rank: r, index }));
                let mut v: Vec<u32> = [ranks + r, d.spin_base + r].into_iter().chain(streams).chain(bufs).collect();
                v.sort_unstable();
                v
            })
            .collect();
        d
    }

    fn host_obj(&self, r: RankId) -> u32 {
        r
    }

    fn stream_obj(&self, s: StreamRef) -> u32 {
        2 * self.r32 + self.sem.stream_index(s) as u32
    }

    fn buf_obj(&self, b: BufRef) -> u32 {
        2 * self.r32 + self.nstreams + b.rank * self.nbuf + b.index
    }

    fn op_obj(&self, loc: OpLoc) -> u32 {
        2 * self.r32 + self.nstreams + self.r32 * self.nbuf + self.op_base[loc.thread as usize] + loc.op
    }

    /// The eager credit of the connection of the P2P op at `idx` of launch `item`.
    fn conn_obj(&self, item: &Item, idx: u32) -> u32 {
        let (ItemKind::Launch { comm, ops, .. }, me) = (&item.kind, item.rank()) else { unreachable!("a delivery's op is in a launch") };
        let key = match ops[idx as usize].kind {
            CommOpKind::Send { peer, .. } => (comm.0, me, peer),
            CommOpKind::Recv { peer, .. } => (comm.0, peer, me),
            CommOpKind::Collective { .. } => unreachable!("a P2P delivery's op is a send or recv"),
        };
        self.conns[&key]
    }

    /// What a launch's end changes: its streams, the memory its ops touch, and (without independent progress, S1)
    /// whether an NCCL kernel spins on its device, which decides what the platform may withhold there.
    fn launch_objects(&self, item: &Item) -> Vec<u32> {
        let spin = (!self.sem.profile.independent_progress).then_some(self.spin_base + item.rank());
        item.streams.iter().map(|s| self.stream_obj(*s)).chain(item.blocks.iter().map(|(b, _)| self.buf_obj(*b))).chain(spin).collect()
    }

    /// What `step` touches, from the state `before` it; `withheld`: whether the platform may withhold it there
    /// ([`Semantics::starvable`]). Not known before the step is taken, and left to the caller: whether it ends the
    /// execution in an undefined state (then it is global). `mark`: one flag per rank, all `false`.
    fn footprint(&self, before: &State, step: &Step, withheld: bool, mark: &mut [bool]) -> Footprint {
        let (sem, r32, pooled) = (self.sem, self.r32, self.pooled);
        let mut w = sem.step_ranks(before, step);
        w.sort_unstable();
        w.dedup();
        let mut r = vec![];
        self.groups.affected_by_step(&w, sem.rank_local_step(before, step), mark, &mut r);
        let host = |v: &[RankId]| v.iter().map(|q| self.host_obj(*q)).collect::<Vec<u32>>();
        let dev = |v: &[RankId]| v.iter().flat_map(|q| self.device[*q as usize].iter().copied()).collect::<Vec<u32>>();
        let both = |v: &[RankId]| host(v).into_iter().chain(dev(v)).collect::<Vec<u32>>();
        let nccl = |v: &[RankId]| host(v).into_iter().chain(v.iter().map(|q| r32 + *q)).collect::<Vec<u32>>();
        let mut bumps: Vec<u32> = vec![];
        let (mut writes, mut reads): (Vec<u32>, Vec<u32>) = match step {
            Step::Host { thread, .. } => {
                let th = &before.host.threads[*thread as usize];
                match &th.wait {
                    // A call that only issues work (or blocks on what it issued): the host side alone.
                    None if issues_only(sem, before, *thread) => {
                        let loc = OpLoc { thread: *thread, op: th.pc };
                        (host(&w).into_iter().chain([self.op_obj(loc)]).collect(), host(&r))
                    }
                    // Returning once items ended or the source is staged reads their progress, writes the thread.
                    Some(Wait::Items { .. } | Wait::Staged(_)) => (host(&w), both(&r)),
                    // NCCL calls, group brackets, communicator set-up, barriers, and the returns that launch a group or
                    // end a rendezvous of hosts: the host side and NCCL's tables (matching, connections, launches
                    // issued), not the progress of streams or memory.
                    None if nccl_call(sem, before, *thread) => (nccl(&w), nccl(&r)),
                    Some(Wait::Connect { .. } | Wait::Init(..) | Wait::Barrier { .. }) => (nccl(&w), nccl(&r)),
                    _ => (both(&w), both(&r)),
                }
            }
            Step::Item(k) => {
                let item = before.item(*k);
                if pooled || matches!(item.kind, ItemKind::Launch { .. } | ItemKind::StagedCopy) {
                    (dev(&w), dev(&r).into_iter().chain(host(&r)).chain([self.op_obj(k.loc())]).collect())
                } else {
                    // A kernel, copy, memset or marker: its streams and the buffers it touches; it reads the streams of
                    // what it waits for, and its issue.
                    let mut wr: Vec<u32> = item.streams.iter().map(|s| self.stream_obj(*s)).collect();
                    wr.extend(item.blocks.iter().map(|(b, _)| self.buf_obj(*b)));
                    let waited = item.deps.iter().chain(&item.waits).filter_map(|d| before.streams.items.get(d));
                    let mut rd: Vec<u32> = waited.flat_map(|i| i.streams.iter().map(|s| self.stream_obj(*s))).chain([self.op_obj(k.loc())]).collect();
                    // S1: whether the platform may withhold its start depends on whether an NCCL kernel spins on the
                    // device, which a launch's end changes ([`Self::launch_objects`]): read, so that the start is
                    // withholdable in every order of an execution with the same happens-before.
                    if !sem.profile.independent_progress {
                        rd.push(self.spin_base + item.rank());
                    }
                    (wr, rd)
                }
            }
            // A delivery: the ops it finishes; the eager credit of its connection; what decides whether its ops
            // may progress (earlier ops of their lanes and plans, N4, N14; the matching, N3); and, commutatively,
            // the launches it may end (whichever delivery finishes a launch last ends it).
            Step::Transfer { send, recv } if !pooled => {
                let mut wr = vec![self.op_obj(*send), self.op_obj(*recv)];
                let mut rd = vec![r32 + sem.acting_rank(*send), r32 + sem.acting_rank(*recv)];
                for loc in [send, recv] {
                    let (k, idx) = sem.find_comm_op(before, *loc);
                    rd.extend(gating_ops(before.item(k), idx).into_iter().map(|l| self.op_obj(l)));
                    bumps.extend(self.launch_objects(before.item(k)));
                }
                wr.sort_unstable();
                (wr, rd)
            }
            Step::Eager { send } if !pooled => {
                let (k, idx) = sem.find_comm_op(before, *send);
                let item = before.item(k);
                bumps.extend(self.launch_objects(item));
                let conn = self.conn_obj(item, idx);
                let rd = gating_ops(item, idx).into_iter().map(|l| self.op_obj(l)).collect();
                (vec![self.op_obj(*send), conn], rd)
            }
            Step::Drain { recv } if !pooled => {
                let (k, idx) = sem.find_comm_op(before, *recv);
                let item = before.item(k);
                bumps.extend(self.launch_objects(item));
                // The send it drains (N3: the same sequence number on the connection), finished there.
                let sent = match (&item.kind, &before.comm_op((k, idx)).1.kind) {
                    (ItemKind::Launch { comm, .. }, CommOpKind::Recv { peer, seq }) => before
                        .matching(P2pKey { comm: *comm, src: *peer, dst: item.rank(), seq: *seq, recv: false })
                        .map(|at| before.comm_op(at).1.loc),
                    _ => None,
                };
                let mut wr = vec![self.op_obj(*recv), self.conn_obj(item, idx)];
                wr.extend(sent.map(|l| self.op_obj(l)));
                let rd = gating_ops(item, idx).into_iter().map(|l| self.op_obj(l)).chain([r32 + sem.acting_rank(*recv)]).collect();
                (wr, rd)
            }
            Step::Transfer { .. } | Step::Eager { .. } | Step::Drain { .. } | Step::Collective { .. } | Step::RootEarly { .. } => (dev(&w), dev(&r)),
            Step::Connect { .. } => (nccl(&w), nccl(&r)),
            Step::Watchdog { .. } => (both(&w), both(&r)),
        };
        writes.sort_unstable();
        writes.dedup();
        reads.extend(writes.iter().copied());
        reads.sort_unstable();
        reads.dedup();
        let global = withheld || matches!(step, Step::Watchdog { .. });
        let local = sem.is_local(before, step);
        bumps.sort_unstable();
        bumps.dedup();
        bumps.retain(|b| reads.binary_search(b).is_err());
        Footprint { step: step.clone(), agent: step_agent(sem, before, step), writes, reads, bumps, global, local }
    }
}

/// Another order of the execution `schedule` (a replayable list of steps from the initial state) with the same
/// happens-before relation DPOR computes for it: a random linearization (seeded) of its dependency order, as indices
/// into `schedule`. The relation is sound when every such order can be replayed, takes each step where the platform
/// may withhold it exactly when the original did, and reaches a state with the same problems (`tests/dpor.rs`).
/// `local`: with the order DPOR gives local events ([`Semantics::is_local`]): one does not happen before a later
/// step enabled since before it (module docs, "Persistent sets"); otherwise they order like any other.
/// Errors: the step of `schedule` that is not enabled where it comes.
pub fn reorder(sem: &Semantics, schedule: &[Step], seed: u64, local: bool) -> Result<Vec<usize>, crate::run::Diverged> {
    let deps = Dependency::new(sem);
    let agents = sem.agents + sem.program.comms.len();
    let mut events = Events::new(agents, deps.objects);
    let mut mark = vec![false; sem.program.ranks.len()];
    let mut st = sem.initial();
    let mut front = Frontier::new(sem, &st);
    let mut since: Since = front.iter().map(|(s, w)| (s.clone(), u32::from(w))).collect();
    for (i, step) in schedule.iter().enumerate() {
        let Some(withheld) = front.iter().find(|(s, _)| *s == step).map(|(_, w)| w) else {
            return Err(crate::run::Diverged { at: i, step: step.clone() });
        };
        let mut ev = deps.footprint(&st, step, withheld, &mut mark);
        front.apply(sem, &mut st, step);
        ev.global |= st.undefined.is_some();
        ev.local &= local;
        let (agent, at) = (ev.agent, since[step]);
        events.push(ev, at);
        since = advance_since(sem, &st, &front, &since, agent, i as u32 + 1);
    }
    // Kahn's algorithm over the immediate predecessors, picking uniformly among the events whose predecessors are all
    // placed.
    let n = schedule.len();
    let mut rng = crate::rng::Rng::new(seed);
    let mut placed = vec![false; n];
    let mut out = Vec::with_capacity(n);
    let mut ready: Vec<usize> = vec![];
    let preds_placed = |k: usize, placed: &[bool]| (0..k).all(|i| placed[i] || !events.before(i as u32, k as u32));
    for k in 0..n {
        if preds_placed(k, &placed) {
            ready.push(k);
        }
    }
    while !ready.is_empty() {
        let k = ready.swap_remove(rng.below(ready.len() as u64) as usize);
        placed[k] = true;
        out.push(k);
        for j in k + 1..n {
            if !placed[j] && !ready.contains(&j) && events.before(k as u32, j as u32) && preds_placed(j, &placed) {
                ready.push(j);
            }
        }
    }
    Ok(out)
}
