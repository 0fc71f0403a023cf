//! Conformance: is a hardware observation one the model allows? (DESIGN.md "Soundness toward hardware".)
//!
//! Three checks, each against the final states of an exhaustive exploration under the profile:
//! 1. the outcome: a completed run needs a final state where everything finished; a hang needs a stuck state whose
//!    host threads sit where the hardware's did; a failure needs undefined behaviour;
//! 2. every read: the version it saw must be one the model lets that read see in some final state with the observed
//!    outcome — a write not ordered after the read and not certainly overwritten before it (following data moved by
//!    copies and receives back to the op that wrote it), or the initial contents when no write certainly precedes it;
//! 3. must-come-before: two kernels of one GPU that happens-before orders in every such final state must not overlap
//!    or run the other way round on that GPU's clock.
//! Reads are checked one by one (each against every final state with the observed outcome), not jointly.

use std::collections::BTreeSet;

use cuorder_model::observation::{Observation, OpId, Outcome as HwOutcome, Seen, ThreadAt, Version};
use cuorder_model::program::OpKind;
use cuorder_model::semantics::{Access, Accessor, OpLoc, Semantics, State};

use crate::explore::{explore_with, FinalKind, Limits};

/// One way the hardware did something the model does not allow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Disagreement {
    /// Which observation: "outcome", "read r1 main #5 kernel consume(...) [0]", "order ...".
    pub observation: String,
    /// What the hardware did and what the model allows.
    pub message: String,
    /// The rule or check involved.
    pub rule: String,
}

/// The result of checking one observation.
#[derive(Clone, Debug, Default)]
pub struct Conformance {
    pub disagreements: Vec<Disagreement>,
    /// Final states of the model with the observed outcome.
    pub matching_states: usize,
    pub reads_checked: usize,
    pub orders_checked: usize,
    /// Set when exploration hit a limit: "agrees" then covers only what was explored.
    pub limit_hit: Option<String>,
    /// Set when the model says the program's behaviour is undefined in some execution: then any hardware outcome
    /// and any read is allowed, and nothing else is checked.
    pub undefined: Option<String>,
    /// Set when the observation cannot be judged: the watchdog fired while a host thread was still in a sleep
    /// longer than the watchdog (the run was cut short, it did not hang).
    pub inconclusive: Option<String>,
}

impl Conformance {
    /// Whether the observation is one the model allows (an inconclusive observation does not agree).
    pub fn agrees(&self) -> bool {
        self.disagreements.is_empty() && self.inconclusive.is_none()
    }

    /// Whether a budget stopped the search before the model's executions showed the observation: the disagreements
    /// are only with the executions explored (an unexplored one may allow it), so nothing is decided. An agreement
    /// under a budget stands: an explored execution allows the observation.
    pub fn stopped_short(&self) -> bool {
        self.limit_hit.is_some() && !self.disagreements.is_empty() && self.inconclusive.is_none() && self.undefined.is_none()
    }

    /// "agrees (...)" or one line per disagreement.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        if let Some(why) = &self.inconclusive {
            s.push_str(&format!("inconclusive: {why}\n"));
        } else if let Some(u) = &self.undefined {
            s.push_str(&format!("agrees: the model says the behaviour is undefined ({u}), so any outcome is allowed\n"));
        } else if self.agrees() {
            s.push_str(&format!(
                "agrees: outcome allowed by {} final state(s) of the model; {} read(s) saw allowed versions; {} must-come-before pair(s) respected\n",
                self.matching_states, self.reads_checked, self.orders_checked
            ));
        } else {
            s.push_str(&if self.stopped_short() {
                format!(
                    "inconclusive: the search stopped before the model's executions showed this observation; a larger budget \
                     may find one that allows it. Not shown by the executions explored ({}):\n",
                    self.disagreements.len()
                )
            } else {
                format!("disagrees ({} disagreement(s)):\n", self.disagreements.len())
            });
            for d in &self.disagreements {
                s.push_str(&format!("  {}: {} [{}]\n", d.observation, d.message, d.rule));
            }
        }
        if let Some(l) = &self.limit_hit {
            s.push_str(&format!("note: {l}\n"));
        }
        s
    }
}

/// A version as the model names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum MVersion {
    Initial,
    Op(OpLoc),
}

/// The versions a read may see; `None` = anything (data reduced by a collective).
type MaySee = Option<BTreeSet<MVersion>>;

fn op_id_to_loc(sem: &Semantics, id: OpId) -> Option<OpLoc> {
    let rank = sem.program.ranks.get(id.rank as usize)?;
    let thread = rank.threads.get(id.thread as usize)?;
    (id.index < thread.ops.len() as u32).then(|| OpLoc { thread: sem.thread_id(id.rank, id.thread), op: id.index })
}

fn covers(w: &Access, r: &Access) -> bool {
    w.range.offset <= r.range.offset && w.range.offset + w.range.len >= r.range.offset + r.range.len
}

fn overlaps(w: &Access, r: &Access) -> bool {
    w.block == r.block && w.range.offset < r.range.offset + r.range.len && r.range.offset < w.range.offset + w.range.len
}

fn same_item(a: &Access, b: &Access) -> bool {
    matches!((a.who, b.who), (Accessor::Item { item: x, .. }, Accessor::Item { item: y, .. }) if x == y)
}

/// `a` ends before `b` starts, by happens-before.
fn hb(a: &Access, b: &Access) -> bool {
    a.end.is_some_and(|e| e.happens_before(&b.start))
}

/// The versions read access `r` may see in final state `st` (see the module comment).
fn may_see(sem: &Semantics, st: &State, r: &Access, depth: u32) -> MaySee {
    if depth > 16 {
        return None;
    }
    let cand: Vec<&Access> =
        st.memory.all_accesses().filter(|w| w.write && overlaps(w, r) && !same_item(w, r) && !hb(r, w)).collect();
    let mut out = BTreeSet::new();
    // A kernel that reads and writes the same bytes may see its own writes: its threads run concurrently (the
    // hardware executor's blocks probe, spin and stamp independently; traces/hw/cover-2026-12-01).
    for w in st.memory.all_accesses().filter(|w| w.write && overlaps(w, r) && same_item(w, r)) {
        if matches!(sem.op(w.who.loc()).kind, OpKind::Kernel { .. }) {
            out.insert(MVersion::Op(w.who.loc()));
        }
    }
    for w in &cand {
        // Hidden by a later write of another op (two accesses of one op are not ordered with each other, even when
        // its item starts and ends in one step: a kernel writing overlapping ranges).
        let hidden =
            cand.iter().any(|w2| !std::ptr::eq(*w, *w2) && !same_item(w, w2) && hb(w, w2) && hb(w2, r) && covers(w2, r));
        if hidden {
            continue;
        }
        let loc = w.who.loc();
        match &sem.op(loc).kind {
            OpKind::Memcpy { .. } => {
                // Data moved by a copy: what the copy's own read of its source saw (by the copy, or by its host when
                // a synchronous pageable copy staged the source; S5).
                let src = st.memory.all_accesses().find(|a| !a.write && a.who.loc() == loc);
                match src.map(|a| may_see(sem, st, a, depth + 1)) {
                    Some(Some(v)) => out.extend(v),
                    _ => return None,
                }
            }
            OpKind::Recv { comm, peer, .. } => {
                // Data moved by a recv: what the matching send read (N3).
                let me = sem.acting_rank(loc);
                let seq = st.nccl.p2p.iter().find(|(k, v)| {
                    k.recv && k.comm == *comm && k.src == *peer && k.dst == me && st.comm_op(**v).1.loc == loc
                });
                let send = seq.and_then(|(k, _)| st.matching(*k));
                let send_read = send.and_then(|at| {
                    let who = Accessor::Item { item: at.0, loc: st.comm_op(at).1.loc };
                    st.memory.all_accesses().find(|a| !a.write && a.who == who)
                });
                match send_read.map(|a| may_see(sem, st, a, depth + 1)) {
                    Some(Some(v)) => out.extend(v),
                    _ => return None,
                }
            }
            OpKind::Collective { .. } => return None, // reduced data: any version
            _ => {
                out.insert(MVersion::Op(loc));
            }
        }
    }
    if !cand.iter().any(|w| hb(w, r) && covers(w, r)) {
        out.insert(MVersion::Initial);
    }
    Some(out)
}

fn outcome_matches(sem: &Semantics, st: &State, kind: FinalKind, obs: &HwOutcome) -> bool {
    match obs {
        HwOutcome::Completed => kind == FinalKind::Complete,
        HwOutcome::Failed { .. } => kind == FinalKind::Undefined,
        HwOutcome::Hung { threads, .. } => {
            matches!(kind, FinalKind::Deadlock | FinalKind::Starved)
                && threads.iter().all(|p| {
                    let t = sem.thread_id(p.rank, p.thread) as usize;
                    let finished = sem.thread_finished(st, t as u32);
                    let pc = st.host.threads[t].pc;
                    match p.at {
                        ThreadAt::InOp(i) | ThreadAt::Before(i) => !finished && pc == i,
                        ThreadAt::Finished => finished,
                        ThreadAt::NotStarted => pc == 0,
                    }
                })
        }
    }
}

/// Checks `obs` against the model of `sem`'s program and profile.
pub fn conform(sem: &Semantics, obs: &Observation, limits: &Limits) -> Conformance {
    let mut finals: Vec<(State, FinalKind)> = vec![];
    // The check reads every final state's whole access history (which write each read saw): nothing is forgotten.
    let limits = Limits { forget: false, ..limits.clone() };
    // Whether streams progress independently changes only which states count as stuck (S1 starvation) and how much
    // the reduction may merge, never the final states: a run that did not hang is checked under the profile with
    // independent progress, which explores far fewer states for the same finals.
    let overlap;
    let explore_sem;
    let search = if matches!(obs.outcome, HwOutcome::Hung { .. }) || sem.profile.independent_progress {
        sem
    } else {
        overlap = cuorder_model::profile::Profile { independent_progress: true, ..sem.profile.clone() };
        explore_sem = Semantics::new(sem.program, &overlap);
        &explore_sem
    };
    let ex = explore_with(search, &limits, &mut |st, k| finals.push((st.clone(), k)));
    let mut c = Conformance { limit_hit: ex.limit_hit.clone(), ..Default::default() };
    if let HwOutcome::Hung { threads, .. } = &obs.outcome {
        for p in threads {
            let (ThreadAt::InOp(i) | ThreadAt::Before(i)) = p.at else { continue };
            let t = sem.thread_id(p.rank, p.thread);
            if let Some(OpKind::HostSleep { ns }) = sem.program.ranks[p.rank as usize].threads[p.thread as usize].ops.get(i as usize).map(|o| &o.kind) {
                if *ns >= obs.timeout_ms.saturating_mul(1_000_000) {
                    c.inconclusive = Some(format!(
                        "the watchdog ({} ms) fired while {} was in #{i} sleep of {} ms: the run was cut short, not hung; run it with a longer --timeout-s",
                        obs.timeout_ms,
                        sem.thread_label(t),
                        ns / 1_000_000
                    ));
                    return c;
                }
            }
        }
    }
    // Undefined behaviour allows anything (SEMANTICS.md: N3, N7, C1, P4 ... make the program's behaviour undefined).
    if let Some((st, _)) = finals.iter().find(|(_, k)| *k == FinalKind::Undefined) {
        if let Some(u) = &st.undefined {
            c.undefined = Some(format!("rule {}: {}", u.rule, u.message));
            c.matching_states = finals.iter().filter(|(_, k)| *k == FinalKind::Undefined).count();
            return c;
        }
    }
    let matching: Vec<&State> =
        finals.iter().filter(|(st, k)| outcome_matches(sem, st, *k, &obs.outcome)).map(|(st, _)| st).collect();
    c.matching_states = matching.len();
    if matching.is_empty() {
        let kinds: BTreeSet<String> = finals.iter().map(|(_, k)| format!("{k:?}").to_lowercase()).collect();
        let (what, rule) = match &obs.outcome {
            HwOutcome::Completed => ("the hardware run completed".to_string(), "soundness: completion"),
            HwOutcome::Hung { threads, .. } => {
                let at: Vec<String> = threads
                    .iter()
                    .map(|p| {
                        let t = sem.thread_id(p.rank, p.thread);
                        format!("{} {:?}", sem.thread_label(t), p.at)
                    })
                    .collect();
                (format!("the hardware run hung with {}", at.join(", ")), "soundness: hang")
            }
            HwOutcome::Failed { message, .. } => {
                (format!("the hardware run failed ({message})"), "soundness: failure (undefined behaviour)")
            }
        };
        c.disagreements.push(Disagreement {
            observation: "outcome".into(),
            message: format!(
                "{what}; under profile {} the model's executions end only as: {}",
                sem.profile.label(),
                kinds.into_iter().collect::<Vec<_>>().join(", ")
            ),
            rule: rule.into(),
        });
        return c;
    }
    // Reads depend only on a final state's accesses and P2P matching: check each distinct pair once.
    let read_states: Vec<&State> = {
        let mut seen = std::collections::HashSet::new();
        matching
            .iter()
            .copied()
            .filter(|st| {
                use std::hash::{Hash, Hasher};
                let mut h = std::hash::DefaultHasher::new();
                st.memory.accesses.hash(&mut h);
                st.nccl.p2p.hash(&mut h);
                seen.insert(h.finish())
            })
            .collect()
    };
    for ro in &obs.reads {
        let seen: Vec<Version> = match &ro.seen {
            Seen::Uniform(v) => vec![*v],
            Seen::Mixed { first, last, min, max } => vec![*first, *last, *min, *max],
            Seen::Empty | Seen::NotObserved => continue,
        };
        let Some(loc) = op_id_to_loc(sem, ro.op) else {
            c.disagreements.push(Disagreement {
                observation: format!("read {}", ro.op),
                message: "the observation names an op the program does not have".into(),
                rule: "trace/program mismatch".into(),
            });
            continue;
        };
        let mut allowed_somewhere = false;
        let mut present = false;
        let mut union: BTreeSet<MVersion> = BTreeSet::new();
        let mut anything = false;
        for st in &read_states {
            let Some(r) = st.memory.all_accesses().find(|a| !a.write && a.who.loc() == loc && a.range == ro.range) else {
                continue;
            };
            present = true;
            match may_see(sem, st, r, 0) {
                None => {
                    anything = true;
                    allowed_somewhere = true;
                }
                Some(set) => {
                    let ok = seen.iter().all(|v| match v {
                        Version::Initial => set.contains(&MVersion::Initial),
                        Version::Op(id) => op_id_to_loc(sem, *id).is_some_and(|l| set.contains(&MVersion::Op(l))),
                        Version::Unknown(_) => false,
                    });
                    allowed_somewhere |= ok;
                    union.extend(set);
                }
            }
        }
        if !present {
            continue; // the model's matching executions never make this read (e.g. it is behind the hang)
        }
        c.reads_checked += 1;
        if !allowed_somewhere && !anything {
            let name = |v: &MVersion| match v {
                MVersion::Initial => "initial contents".to_string(),
                MVersion::Op(l) => sem.op_label(*l),
            };
            c.disagreements.push(Disagreement {
                observation: format!("read by {} of {}", sem.op_label(loc), sem.program.range_label(&ro.range)),
                message: format!(
                    "saw {:?}; the model allows only: {}",
                    ro.seen,
                    union.iter().map(name).collect::<Vec<_>>().join("; ")
                ),
                rule: "reads see a write not ordered after them and not certainly overwritten (happens-before)".into(),
            });
        }
    }
    // Must-come-before between kernels of one GPU.
    let spans: Vec<(OpLoc, u32, u64, u64)> = obs
        .ops
        .iter()
        .filter(|o| o.kind == "Kernel")
        .filter_map(|o| {
            let d = o.device?;
            Some((op_id_to_loc(sem, o.op)?, d.gpu, d.start_ns?, d.end_ns?))
        })
        .collect();
    for (i, a) in spans.iter().enumerate() {
        for b in &spans[i + 1..] {
            for (x, y) in [(a, b), (b, a)] {
                if x.1 != y.1 {
                    continue;
                }
                let ordered_everywhere = matching.iter().all(|st| {
                    let (kx, ky) = (item_of(st, x.0), item_of(st, y.0));
                    match (kx, ky) {
                        // A kernel starts and ends in one step with one clock (`start_item`), so the second's
                        // end clock is its start clock.
                        (Some(ix), Some(iy)) => match (ix.end(), iy.end()) {
                            (Some(end), Some(start)) => {
                                let agent = sem.stream_component(ix.streams[0]);
                                start.get(agent) >= end.get(agent)
                            }
                            _ => false,
                        },
                        _ => false,
                    }
                });
                if ordered_everywhere {
                    c.orders_checked += 1;
                    if x.3 > y.2 {
                        c.disagreements.push(Disagreement {
                            observation: format!("order of {} and {}", sem.op_label(x.0), sem.op_label(y.0)),
                            message: format!(
                                "the model orders the first before the second in every execution, but on GPU {} the first ended at {} ns and the second started at {} ns",
                                x.1, x.3, y.2
                            ),
                            rule: "must-come-before (happens-before)".into(),
                        });
                    }
                }
            }
        }
    }
    c
}

fn item_of(st: &State, loc: OpLoc) -> Option<&cuorder_model::semantics::Item> {
    st.streams.items.get(&cuorder_model::semantics::ItemKey { thread: loc.thread, op: loc.op, sub: 0 })
}
