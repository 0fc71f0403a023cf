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
    let mut out = common::programs_in(&["examples", "examples/streams", "tests/cases"]);
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

fn sorted(mut v: Vec<Step>) -> Vec<Step> {
    v.sort();
    v
}

#[test]
fn kept_per_rank_sets_equal_the_full_enabled_set_at_every_step() {
    let mut checked = 0u64;
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
                    let written = sem.step_ranks(&st, &step);
                    sem.apply(&mut st, &step);
                    if i % 7 == 0 {
                        sem.forget(&mut st);
                    }
                    groups.affected(&written, &mut mark, &mut affected);
                    for &r in &affected {
                        cache[r as usize] = owned(&st, r);
                    }
                }
            }
        }
    }
    assert!(checked > 10_000, "only {checked} states checked");
}
