//! Sampling strategies (random walk, PCT) and saved findings (issue 8): every finding a strategy reports is one the
//! exhaustive search also reports, its witness is a schedule the model accepts, the output does not depend on the
//! number of worker threads, and a saved finding replays to the same problem.

use cuorder_model::profile::Profile;
use cuorder_model::semantics::Semantics;
use cuorder_sim::explore::{explore, Limits};
use cuorder_sim::strategy::{sample, SampleOptions, Strategy};

fn corpus() -> Vec<(String, cuorder_model::program::Program)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut v = vec![];
    for dir in ["examples", "tests/cases"] {
        let mut files: Vec<_> = std::fs::read_dir(root.join(dir)).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        for p in files.into_iter().filter(|p| p.extension().is_some_and(|x| x == "ron")) {
            let text = std::fs::read_to_string(&p).unwrap();
            v.push((p.display().to_string(), cuorder_model::format::load("p", &text).unwrap()));
        }
    }
    v
}

fn opts(strategy: Strategy, jobs: usize) -> SampleOptions {
    SampleOptions { strategy, seed: 7, executions: 40, jobs, ..SampleOptions::default() }
}

#[test]
fn sampled_findings_are_exhaustive_findings_with_valid_witnesses() {
    let mut compared = 0;
    let mut sampled_findings = 0;
    for (name, p) in corpus() {
        for prof in [Profile::portable(), Profile::eager()] {
            let sem = Semantics::new(&p, &prof);
            let full = explore(&sem, &Limits { max_states: 20_000, ..Limits::default() });
            if full.limit_hit.is_some() {
                continue;
            }
            compared += 1;
            for strategy in [Strategy::Random, Strategy::Pct { depth: 3 }] {
                let s = sample(&sem, &opts(strategy, 1));
                for (key, f) in s.exploration.keys.iter().zip(&s.exploration.findings) {
                    sampled_findings += 1;
                    assert!(full.keys.contains(key), "{name} ({}): {strategy:?} found {key:?}, which exhaustive search does not", prof.name);
                    // The witness is an execution of the model: it replays, and the problem is at its end.
                    let st = cuorder_sim::run::replay_state(&sem, &f.witness).unwrap_or_else(|d| panic!("{name}: {d}"));
                    assert!(cuorder_sim::explore::problems_at(&sem, &st).contains(key), "{name}: witness does not show {key:?}");
                }
            }
        }
    }
    assert!(compared >= 20, "only {compared} programs compared");
    assert!(sampled_findings >= 20, "only {sampled_findings} sampled findings checked");
}

#[test]
fn sampling_output_does_not_depend_on_jobs_and_is_repeatable() {
    for (name, p) in corpus().into_iter().take(12) {
        let prof = Profile::portable();
        let sem = Semantics::new(&p, &prof);
        for strategy in [Strategy::Random, Strategy::Pct { depth: 2 }] {
            let a = sample(&sem, &opts(strategy, 1));
            let b = sample(&sem, &opts(strategy, 3));
            let c = sample(&sem, &opts(strategy, 1));
            let text = |s: &cuorder_sim::strategy::Sampled| {
                format!("{:?} {:?} {:?} {}", s.exploration.findings, s.hits, s.seeds, s.steps)
            };
            assert_eq!(text(&a), text(&b), "{name}: --jobs changed the result");
            assert_eq!(text(&a), text(&c), "{name}: same seed, different result");
        }
    }
}

#[test]
fn first_stops_at_the_lowest_execution_with_a_finding_whatever_the_jobs() {
    let (_, p) = corpus().into_iter().find(|(n, _)| n.contains("megatron-batch-p2p-race")).unwrap();
    let prof = Profile::portable();
    let sem = Semantics::new(&p, &prof);
    let one = sample(&sem, &SampleOptions { first: true, ..opts(Strategy::Random, 1) });
    let four = sample(&sem, &SampleOptions { first: true, ..opts(Strategy::Random, 4) });
    assert_eq!(one.executions, 1, "the race shows in every execution");
    assert_eq!(format!("{:?}", one.exploration.findings), format!("{:?}", four.exploration.findings));
    assert!(one.exploration.limit_hit.as_deref().unwrap_or("").contains("--first"));
}

/// The send-first deadlock needs the platform to refuse eager buffering: the walks that let it withhold find it
/// (before, every walk took the eager path and reported nothing).
#[test]
fn walks_find_deadlocks_that_need_the_platform_to_withhold() {
    let (_, p) = corpus().into_iter().find(|(n, _)| n.contains("nccl-1456-send-first-connected")).unwrap();
    let prof = Profile::portable();
    let sem = Semantics::new(&p, &prof);
    let s = sample(&sem, &opts(Strategy::Random, 1));
    assert!(s.exploration.findings.iter().any(|f| f.problem.kind_name() == "deadlock"), "{:?}", s.exploration.findings);
    assert!(s.hits[0] < s.executions, "only the withholding executions deadlock");
}
