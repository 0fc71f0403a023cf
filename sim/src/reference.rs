//! The reference explorer: a deliberately naive exhaustive search used only as an oracle for the real ones
//! (issue 30). It knows nothing of partial-order reduction, persistent sets, withholding, eager dominance,
//! forgetting, chain compression, incremental frontiers or state hashes: from every state it takes every step
//! [`Semantics::enabled`] lists, and it merges two states only when they are equal as whole values (`State: Eq`,
//! no hash collisions). It shares with the other explorers only the model itself and the definition of a finding
//! on one state (the collector in `explore.rs`: the races, stale reads, timeouts and undefined use a state holds,
//! whether it is final, complete, deadlocked or stuck), so a disagreement points at a search, not at the model.
//!
//! It is exponential in everything; give it programs of a few dozen ops (`sim::differential` generates them).

use rustc_hash::FxHashSet;

use cuorder_model::semantics::{Semantics, State, Step};

use crate::explore::{Collector, Exploration};

/// Explores every execution of `sem`'s program, visiting each distinct state once, up to `max_states` distinct
/// states. Returns `None` when the program has more states than that (nothing is claimed then). The findings'
/// frequencies follow the same definition as [`crate::explore::explore`]: a problem is in every execution when it
/// is in every final state (a deadlock: when no final state completed). Witnesses are the first path found in
/// depth-first order, taking enabled steps in the order `enabled` lists them.
pub fn explore_reference(sem: &Semantics, max_states: usize) -> Option<Exploration> {
    explore_reference_with(sem, max_states, &mut |_, _, _| {})
}

/// [`explore_reference`], calling `visit` on every distinct state with the path that first reached it and whether
/// it is final (no step enabled): how a disagreement is explained (a final state without a finding the other
/// search calls "in every execution", say).
pub fn explore_reference_with(sem: &Semantics, max_states: usize, visit: &mut dyn FnMut(&State, &[Step], bool)) -> Option<Exploration> {
    let init = sem.initial();
    let mut seen: FxHashSet<State> = FxHashSet::default();
    let mut found = Collector::new();
    // Each frame: a state, its enabled steps, the next one to take.
    let mut stack: Vec<(State, Vec<Step>, usize)> = vec![];
    let mut path: Vec<Step> = vec![];
    let enabled = sem.enabled(&init);
    found.observe(sem, &init, &enabled, &path);
    visit(&init, &path, enabled.is_empty());
    seen.insert(init.clone());
    stack.push((init, enabled, 0));
    while let Some((st, steps, next)) = stack.last_mut() {
        if *next == steps.len() {
            stack.pop();
            path.pop();
            continue;
        }
        let step = steps[*next].clone();
        *next += 1;
        let mut child = st.clone();
        sem.apply(&mut child, &step);
        if seen.contains(&child) {
            continue;
        }
        if seen.len() >= max_states {
            return None;
        }
        seen.insert(child.clone());
        path.push(step);
        let enabled = sem.enabled(&child);
        found.observe(sem, &child, &enabled, &path);
        visit(&child, &path, enabled.is_empty());
        stack.push((child, enabled, 0));
    }
    Some(found.finish(seen.len(), None))
}
