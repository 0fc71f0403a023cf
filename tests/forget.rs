//! Forgetting drops finished history (issue 8, "state that forgets"; issue 9, "scale"): along random executions
//! of 1F1B pipelines, forgetting after every step leaves no finished send/recv pair in the matching tables, and
//! once the program has finished nothing of its history is left but each stream's last item and the event records.
//! Regression: sends that finished eagerly stayed `Buffered` after their recv drained them, so their P2P table
//! entries (and the launches they name) were never forgotten and a 1024-stage timed run kept every one of them.

use cuorder_model::profile::Profile;
use cuorder_model::semantics::{CommOpStatus, Semantics};
use cuorder_sim::pipeline::{pipeline, PipelineOptions, Schedule, Variant};
use cuorder_sim::rng::Rng;

#[test]
fn finished_pairs_and_items_are_forgotten() {
    let o = PipelineOptions {
        schedule: Schedule::OneFOneB,
        stages: 4,
        microbatches: 8,
        variant: Variant::Correct,
        bytes: 4096,
        ..Default::default()
    };
    let prog = cuorder_model::format::load("p", &pipeline(&o).unwrap()).unwrap();
    let mut eager_sends = 0;
    for profile in ["portable", "eager"] {
        let prof = Profile::builtin(profile).unwrap();
        let sem = Semantics::new(&prog, &prof);
        for seed in 0..4 {
            let mut st = sem.initial();
            let mut rng = Rng::new(seed);
            loop {
                let enabled = sem.enabled(&st);
                if enabled.is_empty() {
                    break;
                }
                let step = enabled[rng.below(enabled.len() as u64) as usize].clone();
                sem.apply(&mut st, &step);
                sem.forget(&mut st);
                for (k, at) in st.nccl.p2p.iter().filter(|(k, _)| !k.recv) {
                    let sent = st.comm_op(*at).1.status;
                    eager_sends += usize::from(sent == CommOpStatus::Buffered);
                    let recv = st.nccl.p2p.get(&k.other()).map(|r| st.comm_op(*r).1.status);
                    let finished = sent != CommOpStatus::Pending && recv == Some(CommOpStatus::Done);
                    assert!(!finished, "{profile} seed {seed}: finished pair {k:?} kept ({sent:?}, {recv:?})");
                }
            }
            assert!(st.undefined.is_none() && st.races().is_empty(), "the correct 1F1B schedule is clean");
            assert!(st.nccl.p2p.is_empty(), "{profile} seed {seed}: {} P2P entries left", st.nccl.p2p.len());
            let (streams, events) = (st.streams.queues.len(), st.streams.event_binding.len());
            let left = st.streams.items.len();
            assert!(left <= streams + events, "{profile} seed {seed}: {left} items left");
        }
    }
    assert!(eager_sends > 0, "no send finished eagerly: the regression is not exercised");
}
