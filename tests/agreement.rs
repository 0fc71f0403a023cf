//! Property tests over generated programs (`cuorder gen`'s generator; the same programs ran on hardware, see
//! traces/hw/agree-*): for any seed, checking is deterministic, every finding's witness replays to that finding,
//! a random execution ends in an outcome the exhaustive search also reached, and the trace of a seeded run is
//! byte-identical when repeated.

use cuorder::report::check;
use cuorder_model::profile::Profile;
use cuorder_model::semantics::Semantics;
use cuorder_model::verdict::Problem;
use cuorder_sim::explore::Limits;
use cuorder_sim::gen::{program, GenOptions};
use cuorder_sim::run::{replay, run, Outcome};
use cuorder_sim::scheduler::RandomScheduler;
use proptest::prelude::*;

fn profiles() -> Vec<Profile> {
    let cal = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/profiles/h200x2-nvlink-nccl2.28.3.ron");
    vec![Profile::portable(), Profile::eager(), cuorder::load_profile(cal.to_str().unwrap()).unwrap_or_else(|e| panic!("{}", e.rendered))]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn generated_programs_check_deterministically_and_witnesses_replay(seed in 0u64..1_000_000, which in 0usize..3) {
        let p = program(seed, &GenOptions::default());
        let prof = &profiles()[which];
        let limits = Limits { max_states: 100_000, ..Limits::default() };
        let a = check(&p, prof, &limits);
        let b = check(&p, prof, &limits);
        prop_assert_eq!(a.to_text(), b.to_text());
        let sem = Semantics::new(&p, prof);
        for f in &a.findings {
            let t = replay(&sem, &f.finding.witness).expect("a witness replays");
            match (&f.finding.problem, &t.outcome) {
                (Problem::Deadlock(d), _) if d.starvation => {}
                (Problem::Deadlock(_), Outcome::Deadlock(_)) => {}
                (Problem::Undefined(_), Outcome::Undefined(_)) => {}
                (Problem::DataRace(r), _) => prop_assert!(t.races.iter().any(|x| x.key() == r.key())),
                (p, o) => prop_assert!(false, "witness of {} ended as {:?}", p.kind_name(), o),
            }
        }
        // A random execution ends as one of the outcomes the exhaustive search found.
        let tr = run(&sem, &mut RandomScheduler::new(seed), Some(seed), 1_000_000);
        let tr2 = run(&sem, &mut RandomScheduler::new(seed), Some(seed), 1_000_000);
        prop_assert_eq!(ron::to_string(&tr).unwrap(), ron::to_string(&tr2).unwrap());
        if a.limit_hit.is_none() {
            match &tr.outcome {
                Outcome::Completed => prop_assert!(a.completed_final_states > 0),
                Outcome::Deadlock(_) => prop_assert!(a.findings.iter().any(|f| f.kind == "deadlock")),
                Outcome::Undefined(_) => prop_assert!(a.findings.iter().any(|f| f.kind == "undefined")),
                Outcome::StepLimit(_) | Outcome::TimeLimit { .. } | Outcome::Interrupted { .. } => prop_assert!(false, "step or time limit"),
            }
        }
    }
}
