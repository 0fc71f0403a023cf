//! The enabled steps kept by rank (`cuorder_model::semantics::incremental`, used by timed runs): at every step of
//! random executions of the corpus and of generated pipelines, the per-rank sets kept up to date by recomputing only
//! the ranks a step affects equal the full `Semantics::enabled` (as sets). A step that changes what a rank outside
//! its groups may do would break this.

mod common;

use cuorder_model::profile::Profile;
use cuorder_model::program::{Program, RankId};
use cuorder_model::semantics::{Semantics, Step};
use cuorder_sim::pipeline::{pipeline, PipelineOptions, Schedule, Variant};
use cuorder_sim::rng::Rng;

fn programs() -> Vec<(String, Program)> {
    let mut out = common::programs_in(&["examples", "examples/streams", "examples/torch", "tests/cases"]);
    // N9: a recv no send meets, on a communicator with a watchdog (its steps are enabled only when nothing else is).
    let hung = r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("w", "4 KiB"), Buffer("v", "4 KiB"), Buffer("y", "4 KiB")],
        comms: [Comm("world", watchdog: "30 s")], threads: [Thread("main", [
          Group([Send(to: Next, buf: "w", stream: "s0", comm: "world"), Recv(from: Prev, buf: "v", stream: "s0", comm: "world")]),
          Poll("world"), StreamSync("s0"),
          OnRanks([0], [Recv(from: Rank(1), buf: "y", stream: "s0", comm: "world"), StreamSync("s0")])])])"#;
    out.push(("watchdog".into(), cuorder_model::format::load("watchdog", hung).unwrap()));
    // A collective's first use sets up a connection with every other member (N7): many set-ups at once, some racing
    // the other members' calls; with two communicators and a second collective after them.
    for n in [3, 8] {
        let text = format!(
            r#"Program(ranks: {n}, streams: [Stream("s0", NonBlocking), Stream("s1", NonBlocking)], buffers: [Buffer("x", "1 MiB"), Buffer("y", "1 MiB")],
            comms: [Comm("world"), Comm("evens", members: [0, 2])], threads: [Thread("main", [
              AllReduce(buf: "x", stream: "s0", comm: "world"), StreamSync("s0"),
              OnRanks([0, 2], [AllReduce(buf: "y", stream: "s1", comm: "evens")]),
              AllReduce(buf: "x", stream: "s0", comm: "world"), StreamSync("s0"), StreamSync("s1")])])"#
        );
        out.push((format!("all-reduce x{n}"), cuorder_model::format::load("ar", &text).unwrap()));
    }
    for (schedule, stages, mb) in [(Schedule::OneFOneB, 4, 4), (Schedule::Gpipe, 3, 3), (Schedule::Interleaved, 3, 3)] {
        for variant in [Variant::Correct, Variant::Bug, Variant::Race] {
            if schedule == Schedule::Gpipe && variant == Variant::Bug {
                continue; // GPipe has no send-before-recv to get wrong (`gen pipeline` refuses it).
            }
            let chunks = if schedule == Schedule::Interleaved { 2 } else { 1 };
            let o = PipelineOptions { schedule, stages, microbatches: mb, chunks, variant, ..PipelineOptions::default() };
            out.push((format!("{schedule:?} {stages}x{mb} {variant:?}"), cuorder_model::format::load("p", &pipeline(&o).unwrap()).unwrap()));
        }
    }
    out
}

/// The calibrated H200 profile (no independent progress guaranteed: S1 starts may be withheld).
fn h200() -> Profile {
    cuorder::load_profile(concat!(env!("CARGO_MANIFEST_DIR"), "/traces/profiles/h200x2-nvlink-nccl2.28.3.ron")).unwrap_or_else(|e| panic!("{}", e.rendered))
}

fn sorted(mut v: Vec<Step>) -> Vec<Step> {
    v.sort();
    v
}

#[test]
fn kept_per_rank_sets_equal_the_full_enabled_set_at_every_step() {
    let (mut checked, mut host_only_steps, mut connect_only_steps, mut call_only_steps, mut listers_steps) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut choose_steps = 0u64;
    for (name, prog) in programs() {
        for prof in ["portable", "eager"] {
            let prof = Profile::builtin(prof).unwrap();
            let sem = Semantics::new(&prog, &prof);
            let groups = sem.rank_groups();
            let n = prog.ranks.len();
            for seed in 0..4u64 {
                let mut rng = Rng::new(seed);
                let mut st = sem.initial();
                let owned = |st: &_, r: RankId| {
                    let mut v = vec![];
                    sem.enabled_for_rank(st, r, &mut v);
                    v
                };
                let mut cache: Vec<Vec<Step>> = (0..n as RankId).map(|r| owned(&st, r)).collect();
                let (mut mark, mut affected) = (vec![false; n], vec![]);
                for i in 0..20_000 {
                    // The watchdog (N9) is enabled only when nothing else is, a global condition that per-rank sets
                    // do not keep (engines ask `watchdogs_if_stuck` when they run out).
                    let full = sorted(sem.enabled(&st).into_iter().filter(|s| !matches!(s, Step::Watchdog { .. })).collect());
                    let kept = sorted(cache.iter().flatten().cloned().collect());
                    assert_eq!(kept, full, "{name} ({}, seed {seed}): kept sets differ from enabled() at step {i}", prof.name);
                    checked += 1;
                    if full.is_empty() {
                        break;
                    }
                    let step = full[rng.below(full.len() as u64) as usize].clone();
                    // The platform's choice of when collectives connect (N7, `portable`) writes every rank.
                    if let Step::Host { thread, .. } = step {
                        choose_steps += u64::from(sem.chooses_connect(&st, thread));
                    }
                    let written = sem.step_ranks(&st, &step);
                    // As the timed engine does: a step that can change only its rank's host steps recomputes only
                    // those there (`Semantics::host_only`) and keeps the rank's other steps.
                    let host_only = sem.host_only(&st, &step);
                    host_only_steps += u64::from(host_only.is_some());
                    // A connection set-up changes only its two threads' host steps, and is no longer enabled itself
                    // (`Semantics::connect_only`).
                    let connect_only = sem.connect_only(&st, &step);
                    connect_only_steps += u64::from(connect_only.is_some());
                    // A collective call or its return from set-up changes its own rank, and other ranks only by the
                    // set-ups they list with its thread (`Semantics::collective_call_only`).
                    let call_only = sem.collective_call_only(&st, &step);
                    // A collective launch's start changes its rank and the ranks listing its collectives' completions
                    // before or after it (`Semantics::collective_listers`).
                    let listers = sem.collective_listers(&st, &step);
                    listers_steps += u64::from(listers.is_some());
                    call_only_steps += u64::from(call_only.is_some());
                    sem.apply(&mut st, &step);
                    if i % 7 == 0 {
                        sem.forget(&mut st);
                    }
                    if let (Some(home), Step::Host { thread, .. }) = (call_only, &step) {
                        cache[home as usize] = owned(&st, home);
                        let mut with = vec![];
                        sem.connect_steps_with(&st, *thread, &mut with);
                        for (r, s) in with {
                            assert_ne!(r, home, "{name}: a set-up with the caller listed by its own rank");
                            cache[r as usize].push(s);
                        }
                        continue;
                    }
                    match (connect_only, listers) {
                        (Some(pair), _) => {
                            affected = pair.to_vec();
                            affected.dedup();
                        }
                        (None, Some(before)) => {
                            affected = before.to_vec();
                            affected.extend(sem.collective_listers(&st, &step).into_iter().flatten());
                            affected.sort_unstable();
                            affected.dedup();
                        }
                        (None, None) => groups.affected(&written, &mut mark, &mut affected),
                    }
                    for &r in &affected {
                        cache[r as usize] = if host_only == Some(r) || connect_only.is_some() {
                            let mut v = vec![];
                            sem.host_steps_for_rank(&st, r, &mut v);
                            v.extend(cache[r as usize].iter().filter(|s| !matches!(s, Step::Host { .. }) && **s != step).cloned());
                            v
                        } else {
                            owned(&st, r)
                        };
                    }
                }
            }
        }
    }
    assert!(checked > 10_000, "only {checked} states checked");
    assert!(host_only_steps > 1_000, "only {host_only_steps} steps took the host-only shortcut");
    // Under `portable` about half the walks connect collectives at init (N7), with no set-up to take.
    assert!(connect_only_steps > 500, "only {connect_only_steps} steps took the set-up shortcut");
    assert!(choose_steps > 10, "only {choose_steps} steps chose when collectives connect");
    assert!(call_only_steps > 100, "only {call_only_steps} steps took the collective-call shortcut");
    assert!(listers_steps > 100, "only {listers_steps} steps took the collective-start shortcut");
}

/// The frontier the walks and `run` keep (`Frontier`): at every step of random executions (taking steps through
/// `Frontier::apply`, forgetting as walks do) its steps equal `Semantics::enabled` as a set, watchdogs included,
/// each with the right `starvable` flag; `get` and `get_allowed` enumerate exactly the steps and the steps the
/// platform may not withhold, in the order of `iter`.
#[test]
fn the_frontier_equals_the_enabled_set_with_its_starvable_flags_at_every_step() {
    use cuorder_model::semantics::incremental::Frontier;
    let mut checked = 0u64;
    for (name, prog) in programs() {
        for prof in [Profile::portable(), Profile::eager(), h200()] {
            let sem = Semantics::new(&prog, &prof);
            for seed in 0..3u64 {
                let mut rng = Rng::new(seed);
                let mut st = sem.initial();
                let mut front = Frontier::new(&sem, &st);
                let withhold = seed % 2 == 1;
                for i in 0..20_000 {
                    let full: Vec<(Step, bool)> = {
                        let mut v: Vec<(Step, bool)> = sem.enabled(&st).into_iter().map(|s| { let w = sem.starvable(&st, &s); (s, w) }).collect();
                        v.sort();
                        v
                    };
                    let mut kept: Vec<(Step, bool)> = front.iter().map(|(s, w)| (s.clone(), w)).collect();
                    let by_index: Vec<Step> = (0..front.len()).map(|k| front.get(k).clone()).collect();
                    let allowed: Vec<Step> = (0..front.allowed_len()).map(|k| front.get_allowed(k).clone()).collect();
                    assert_eq!(by_index, kept.iter().map(|x| x.0.clone()).collect::<Vec<_>>(), "{name}: get() is not iter()'s order");
                    assert_eq!(allowed, kept.iter().filter(|x| !x.1).map(|x| x.0.clone()).collect::<Vec<_>>(), "{name}: get_allowed()");
                    kept.sort();
                    assert_eq!(kept, full, "{name} ({}, seed {seed}): the frontier differs from enabled() at step {i}", prof.name);
                    assert_eq!(front.all_starvable(), !full.is_empty() && full.iter().all(|x| x.1), "{name}: all_starvable at step {i}");
                    checked += 1;
                    let n = if withhold { front.allowed_len() } else { front.len() };
                    if n == 0 {
                        break;
                    }
                    let k = rng.below(n as u64) as usize;
                    let step = if withhold { front.get_allowed(k) } else { front.get(k) }.clone();
                    front.apply(&sem, &mut st, &step);
                    if i % 5 == 0 {
                        sem.forget(&mut st);
                    }
                }
            }
        }
    }
    assert!(checked > 10_000, "only {checked} states checked");
}

/// The answers about devices the explorer keeps for one state (`DeviceMemo`) change nothing: at every step of random
/// executions, `is_local_in`, `postponable_in`, `starvable_in`, `rank_set_in` and `connection_set_in` with one memo
/// shared by all the questions about the state equal the same questions asked without it.
#[test]
fn a_device_memo_shared_within_a_state_changes_no_answer() {
    use cuorder_model::semantics::reduction::DeviceMemo;
    let mut checked = 0u64;
    for (name, prog) in programs() {
        for prof in [Profile::portable(), h200()] {
            let sem = Semantics::new(&prog, &prof);
            let memo = DeviceMemo::new(&sem);
            let mut rng = Rng::new(5);
            let mut st = sem.initial();
            for i in 0..3_000 {
                let enabled = sem.enabled(&st);
                if enabled.is_empty() {
                    break;
                }
                memo.clear();
                for s in &enabled {
                    assert_eq!(sem.starvable_in(&st, s, &memo), sem.starvable(&st, s), "{name}: starvable of {s:?} at step {i}");
                    assert_eq!(sem.postponable_in(&st, s, &memo), sem.postponable(&st, s), "{name}: postponable of {s:?} at step {i}");
                    assert_eq!(sem.is_local_in(&st, s, &memo), sem.is_local(&st, s), "{name}: is_local of {s:?} at step {i}");
                    checked += 1;
                }
                assert_eq!(sem.rank_set_in(&st, &enabled, &memo), sem.rank_set(&st, &enabled), "{name}: rank_set at step {i}");
                assert_eq!(sem.connection_set_in(&st, &enabled, &memo), sem.connection_set(&st, &enabled), "{name}: connection_set at step {i}");
                let step = enabled[rng.below(enabled.len() as u64) as usize].clone();
                sem.apply(&mut st, &step);
            }
        }
    }
    assert!(checked > 10_000, "only {checked} steps checked");
}
