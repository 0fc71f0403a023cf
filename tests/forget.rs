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

/// Found by the differential campaign (generator v4, seeds 113594 and 138862, on the lent GPU host's CPUs):
/// forgetting kept an ended access only while a thread had a host access still to make, and counted host reads and
/// writes and copies, not a value assertion read on the host (`Expect` without a stream, V1). `main`'s host write
/// was forgotten once `t1` had passed its last host read, so its race with `t1`'s `Expect` (in the executions where
/// `k1` is enqueued after `t1`'s synchronize) was missing: a false "no race" for that read.
#[test]
fn forgetting_dropped_the_host_write_an_expect_on_the_host_races_with() {
    use cuorder_sim::explore::Limits;
    let text = r#"Program(ranks: 1, buffers: [Buffer("x", "4 KiB"), Buffer("y", "4 KiB"), Buffer("h", "4 KiB", space: PinnedHost)],
      threads: [
        Thread("main", ranks: [0], ops: [HostWrite("h"), Kernel("k1", stream: "sL", reads: ["x"]), DeviceSync]),
        Thread("t1", ranks: [0], ops: [HostRead("h"), Memcpy(dst: "h", src: "y", stream: "sL"), StreamSync("sL"), Expect("h", written_by: Memcpy)]),
      ])"#;
    let p = cuorder_model::format::load("expect-on-host-forgotten", text).unwrap();
    let races = |forget: bool| -> Vec<String> {
        let r = cuorder::report::check(&p, &Profile::portable(), &Limits { forget, ..Limits::default() });
        let mut v: Vec<String> =
            r.findings.iter().map(|f| format!("{} {} {:?}", f.kind, f.frequency, f.text.lines().filter(|l| l.contains(" #")).map(str::trim).collect::<Vec<_>>())).collect();
        v.sort();
        v
    };
    let remembering = races(false);
    assert!(remembering.iter().any(|l| l.contains("expect(h")), "{remembering:?}");
    assert_eq!(races(true), remembering);
}
